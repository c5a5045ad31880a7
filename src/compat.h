/*
 * compat.h
 *	  What differs between the PostgreSQL majors zklock supports (13 to 17).
 */
#ifndef ZKLOCK_COMPAT_H
#define ZKLOCK_COMPAT_H

#include "common/jsonapi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/tuplestore.h"

#if PG_VERSION_NUM < 130000
#error "zklock needs PostgreSQL 13 or later"
#endif

/* Before 14, string keys were the default and had no flag. */
#if PG_VERSION_NUM < 140000
#define HASH_STRINGS 0
#endif

/* InitMaterializedSRF appeared in 15; before, set the tuplestore up by hand. */
#if PG_VERSION_NUM < 150000
static inline void
InitMaterializedSRF(FunctionCallInfo fcinfo, bits32 flags)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryContext old;
	TupleDesc	desc;

	if (rsinfo == NULL || !IsA(rsinfo, ReturnSetInfo) ||
		!(rsinfo->allowedModes & SFRM_Materialize))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("set-valued function called in context that cannot accept a set")));
	old = MemoryContextSwitchTo(rsinfo->econtext->ecxt_per_query_memory);
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	rsinfo->returnMode = SFRM_Materialize;
	rsinfo->setResult = tuplestore_begin_heap(true, false, work_mem);
	rsinfo->setDesc = CreateTupleDescCopy(desc);
	MemoryContextSwitchTo(old);
}
#endif

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

/*
 * The parameters of a ProcessUtility_hook, and the arguments that pass them
 * on: 14 added readOnlyTree.  The same from 14 to 18.
 */
#if PG_VERSION_NUM >= 140000
#define ZKLOCK_PROCESS_UTILITY_PARAMS \
	PlannedStmt *pstmt, const char *queryString, bool readOnlyTree, \
	ProcessUtilityContext context, ParamListInfo params, \
	QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc
#define ZKLOCK_PROCESS_UTILITY_ARGS \
	pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc
#else
#define ZKLOCK_PROCESS_UTILITY_PARAMS \
	PlannedStmt *pstmt, const char *queryString, \
	ProcessUtilityContext context, ParamListInfo params, \
	QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc
#define ZKLOCK_PROCESS_UTILITY_ARGS \
	pstmt, queryString, context, params, queryEnv, dest, qc
#endif

#endif							/* ZKLOCK_COMPAT_H */
