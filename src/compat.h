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

/*
 * A JSON lexer over len bytes that resolves escapes (so that \u0000 fails,
 * as for jsonb); 17 takes the context to fill.
 */
static inline JsonLexContext *
zk_json_lexer(const char *json, int len, int encoding)
{
#if PG_VERSION_NUM >= 170000
	return makeJsonLexContextCstringLen(NULL, json, len, encoding, true);
#else
	return makeJsonLexContextCstringLen((char *) json, len, encoding, true);
#endif
}

/* Semantic actions return a result from 16 on. */
#if PG_VERSION_NUM >= 160000
#define ZK_JSON_ACTION_RESULT JsonParseErrorType
#define ZK_JSON_ACTION_OK return JSON_SUCCESS
#else
#define ZK_JSON_ACTION_RESULT void
#define ZK_JSON_ACTION_OK return
#endif

/* 19 gives signal handlers a type of their own, and SIG_IGN as that type. */
#ifndef PG_SIG_IGN
#define PG_SIG_IGN SIG_IGN
#endif

/*
 * The wait events zklock's waits show in pg_stat_activity: from 17 on its
 * own, of type Extension ("ZkLockWait" for a backend waiting for a lock or
 * a reply, "ZkSessionWorkerMain" for the session worker between events);
 * before, plain "Extension".
 */
#if PG_VERSION_NUM >= 170000
#include "utils/wait_event.h"
#define ZKLOCK_WAIT_EVENT() zklock_wait_event(0)
#define ZKLOCK_WORKER_WAIT_EVENT() zklock_wait_event(1)
static inline uint32
zklock_wait_event(int which)
{
	static const char *const names[] = {"ZkLockWait", "ZkSessionWorkerMain"};
	static uint32 events[lengthof(names)];

	if (events[which] == 0)
		events[which] = WaitEventExtensionNew(names[which]);
	return events[which];
}
#else
#define ZKLOCK_WAIT_EVENT() PG_WAIT_EXTENSION
#define ZKLOCK_WORKER_WAIT_EVENT() PG_WAIT_EXTENSION
#endif

/*
 * A tranche of LWLocks made at run time: 19 takes its name when it is made,
 * for every process; before, each process registers the name.
 */
#include "storage/lwlock.h"
#if PG_VERSION_NUM >= 190000
#define zk_new_tranche(name) LWLockNewTrancheId(name)
#define zk_register_tranche(id, name) ((void) 0)
#else
#define zk_new_tranche(name) LWLockNewTrancheId()
#define zk_register_tranche(id, name) LWLockRegisterTranche(id, name)
#endif

/* This process's number among the PGPROCs: 17 named it. */
#include "storage/proc.h"
#if PG_VERSION_NUM >= 170000
#define ZK_MY_PROC_NUMBER MyProcNumber
#else
#define ZK_MY_PROC_NUMBER (MyProc->pgprocno)
#endif

/* The parameters of a ProcessUtility_hook, and the arguments that pass them on. */
#define ZKLOCK_PROCESS_UTILITY_PARAMS \
	PlannedStmt *pstmt, const char *queryString, bool readOnlyTree, \
	ProcessUtilityContext context, ParamListInfo params, \
	QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc
#define ZKLOCK_PROCESS_UTILITY_ARGS \
	pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc

/* 16 checks the privileges of every kind of object with one function. */
#include "utils/acl.h"
#if PG_VERSION_NUM >= 160000
#include "catalog/pg_proc.h"
#define zk_function_aclcheck(funcid, roleid, mode) \
	object_aclcheck(ProcedureRelationId, funcid, roleid, mode)
#else
#define zk_function_aclcheck(funcid, roleid, mode) \
	pg_proc_aclcheck(funcid, roleid, mode)
#endif

/* ExecutorRun_hook lost its execute_once in 18. */
#if PG_VERSION_NUM >= 180000
#define ZKLOCK_EXECUTOR_RUN_PARAMS \
	QueryDesc *queryDesc, ScanDirection direction, uint64 count
#define ZKLOCK_EXECUTOR_RUN_ARGS queryDesc, direction, count
#else
#define ZKLOCK_EXECUTOR_RUN_PARAMS \
	QueryDesc *queryDesc, ScanDirection direction, uint64 count, \
	bool execute_once
#define ZKLOCK_EXECUTOR_RUN_ARGS queryDesc, direction, count, execute_once
#endif

#endif							/* ZKLOCK_COMPAT_H */
