/*
 * compat.h
 *	  What differs between the PostgreSQL majors zklock supports (15 to 19).
 */
#ifndef ZKLOCK_COMPAT_H
#define ZKLOCK_COMPAT_H

#if PG_VERSION_NUM < 150000
#error "zklock needs PostgreSQL 15 or later"
#endif

#include "common/jsonapi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/shmem.h"
#include "utils/tuplestore.h"

/*
 * get_database_name: declared in commands/dbcommands.h up to 18, in
 * utils/lsyscache.h from 19 on.
 */
#if PG_VERSION_NUM >= 190000
#include "utils/lsyscache.h"
#else
#include "commands/dbcommands.h"
#endif

/*
 * A shared hash table created at its full size: 19 dropped ShmemInitHash's
 * initial size (tables get their maximum size at once, as ours always did).
 */
static inline HTAB *
zk_shmem_init_hash(const char *name, long nelems, HASHCTL *info, int flags)
{
#if PG_VERSION_NUM >= 190000
	return ShmemInitHash(name, nelems, info, flags);
#else
	return ShmemInitHash(name, nelems, nelems, info, flags);
#endif
}

/* A JSON lexer over a C string: 17 takes the context to fill. */
static inline JsonLexContext *
zk_json_lexer(const char *json, int encoding)
{
#if PG_VERSION_NUM >= 170000
	return makeJsonLexContextCstringLen(NULL, json, strlen(json), encoding, false);
#else
	return makeJsonLexContextCstringLen((char *) json, strlen(json), encoding, false);
#endif
}

/*
 * The wait event zklock's waits show in pg_stat_activity: from 17 on a
 * custom one, "ZkLockWait" (type Extension); before, plain "Extension".
 */
#if PG_VERSION_NUM >= 170000
#include "utils/wait_event.h"
#define ZKLOCK_WAIT_EVENT() zklock_wait_event()
static inline uint32
zklock_wait_event(void)
{
	static uint32 event = 0;

	if (event == 0)
		event = WaitEventExtensionNew("ZkLockWait");
	return event;
}
#else
#define ZKLOCK_WAIT_EVENT() PG_WAIT_EXTENSION
#endif

#endif							/* ZKLOCK_COMPAT_H */
