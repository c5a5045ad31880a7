/*
 * fence.c
 *	  zk_lock_fence(name): fence a resource with the token of a lock this
 *	  session holds exclusively.
 *
 * The fence itself is SQL (zk_lock_fence(resource, token), a row per
 * resource), so that a database whose server has no ZooKeeper can keep it;
 * this function only supplies the token and calls it, with the caller's
 * privilege to call it.
 */
#include "postgres.h"

#include "catalog/objectaccess.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "parser/parse_func.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"

#include "compat.h"
#include "lock_table.h"
#include "lost_locks.h"
#include "sql_functions.h"

PG_FUNCTION_INFO_V1(zk_lock_fence_held);

Datum
zk_lock_fence_held(PG_FUNCTION_ARGS)
{
	char	   *name = zklock_name_arg(fcinfo, 0);
	LockEntry  *entry;
	Oid			argtypes[2] = {TEXTOID, INT8OID};
	char	   *schema;
	Oid			fence;

	/* The fence of the same schema as this function. */
	schema = get_namespace_name(get_func_namespace(fcinfo->flinfo->fn_oid));
	fence = LookupFuncName(list_make2(makeString(schema), makeString("zk_lock_fence")),
						   2, argtypes, false);

	/*
	 * Called through fmgr, the fence skips the executor's EXECUTE check:
	 * make it here, as the executor would, so that whoever may not fence with
	 * a token of their choosing may not fence with their lock's either.
	 */
	if (zk_function_aclcheck(fence, GetUserId(), ACL_EXECUTE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for function %s", format_procedure(fence)),
				 errdetail("zk_lock_fence(name) fences through zk_lock_fence(resource, token).")));
	InvokeFunctionExecuteHook(fence);

	/* A lock known to be lost has no token to fence with. */
	lost_locks_forget(NULL, LOCK_MODE_EXCLUSIVE);
	entry = lock_table_find(name, LOCK_MODE_EXCLUSIVE);
	if (entry == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this session does not hold zklock lock \"%s\" exclusively", name),
				 errhint("Fence with zk_lock_fence(resource, token) where the token comes from elsewhere.")));

	return OidFunctionCall2Coll(fence, PG_GET_COLLATION(), PG_GETARG_DATUM(0),
							   Int64GetDatum(entry->token));
}
