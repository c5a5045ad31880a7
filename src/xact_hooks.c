/*
 * xact_hooks.c
 *	  Transaction and subtransaction callbacks: transaction locks end with
 *	  the transaction, and acquisitions made in an aborted (sub)transaction
 *	  are undone.
 *
 * Subtransaction callbacks are enough to follow savepoints; locks are not
 * tied to resource owners because a session lock must outlive the portal
 * that took it.  Locks are released after the commit record, never before,
 * and the callbacks wait (briefly, interrupts held) for ZooKeeper to apply
 * the deletes, so the lock is free for others when COMMIT returns.
 */
#include "postgres.h"

#include "access/xact.h"

#include "lock_recipe.h"
#include "lock_table.h"
#include "lost_locks.h"
#include "revocation.h"
#include "xact_hooks.h"
#include "zk_bridge.h"

static void
xact_callback(XactEvent event, void *arg)
{
	/* Preloaded, the callbacks run in every process; most never use zklock. */
	if (!bridge_attached())
		return;
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			revocation_quiet(true);
			lost_locks_pre_commit();
			break;
		case XACT_EVENT_PRE_PREPARE:
			revocation_quiet(true);
			if (lock_table_xact_touched())
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that acquired zklock locks"),
						 errdetail("ZooKeeper locks belong to the backend's session, which a prepared transaction outlives.")));
			/* A transaction that ran while a session lock was lost. */
			lost_locks_pre_commit();
			break;
		case XACT_EVENT_PREPARE:
			lost_locks_xact_end();
			revocation_quiet(false);
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			lock_table_xact_end(true);
			revocation_xact_end(true);
			lost_locks_xact_end();
			lock_recipe_await_releases(false, false);
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			lock_table_xact_end(false);
			revocation_xact_end(false);
			lost_locks_xact_end();
			lock_recipe_await_releases(false, false);
			break;
		default:
			break;
	}
}

static void
subxact_callback(SubXactEvent event, SubTransactionId mySubid,
				 SubTransactionId parentSubid, void *arg)
{
	if (!bridge_attached())
		return;
	switch (event)
	{
		case SUBXACT_EVENT_COMMIT_SUB:
			lock_table_subxact_commit(mySubid, parentSubid);
			break;
		case SUBXACT_EVENT_ABORT_SUB:
			lock_table_subxact_abort(mySubid);
			/* The transaction goes on: what its holds proved still counts. */
			lock_recipe_await_releases(false, true);
			break;
		default:
			break;
	}
}

void
zklock_register_xact_hooks(void)
{
	RegisterXactCallback(xact_callback, NULL);
	RegisterSubXactCallback(subxact_callback, NULL);
}
