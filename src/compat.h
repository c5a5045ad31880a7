/*
 * compat.h
 *	  What differs between the PostgreSQL majors zklock supports (15 to 18).
 */
#ifndef ZKLOCK_COMPAT_H
#define ZKLOCK_COMPAT_H

#if PG_VERSION_NUM < 150000
#error "zklock needs PostgreSQL 15 or later"
#endif

#include "common/jsonapi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/tuplestore.h"

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
