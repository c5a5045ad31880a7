/*
 * lost_locks.c
 *	  Locks lost with their ZooKeeper session: what state a lock is in, how a
 *	  loss is reported, and the commit guard.
 *
 * While the backend is disconnected from ZooKeeper its locks are uncertain:
 * the session may still live, or the server may have expired it and granted
 * the locks to others.  They are lost once the session expired, or once the
 * local clock says it must have (see zk_session_status).
 *
 * A lost lock is reported with a WARNING by the next zklock call, or by
 * COMMIT, and forgotten.  A transaction during which the backend held a lock
 * that was lost must not commit as if it had held it all along: the commit
 * guard waits at PRE_COMMIT for an uncertain session to be judged, then
 * fails the commit (zklock.on_lost_lock = error) or warns (warning).
 */
#include "postgres.h"

#include "access/xact.h"

#include "guc.h"
#include "lost_locks.h"
#include "stats.h"
#include "zk_bridge.h"
#include "zk_session.h"

/* A lock was lost while this transaction ran, and its name. */
static bool lost_in_xact = false;
static char lost_name[ZKLOCK_NAME_MAX + 1];

/* bridge_held_deletions() when the table was last searched for them. */
static uint64 deletions_seen = 0;

const char *
lost_locks_state(LockEntry *entry)
{
	ZkSessionStatus status = zk_session_status();

	if (entry->generation != zk_session_generation() ||
		status == ZK_SESSION_LOST || bridge_held_deleted(entry->watch))
		return "lost";
	return status == ZK_SESSION_CONNECTED ? "held" : "uncertain";
}

/*
 * Report and forget every lock lost with its session.  True if one of them was called name.
 */
bool
lost_locks_forget(const char *name, LockMode mode)
{
	bool		named_lost = false;
	char		first[ZKLOCK_NAME_MAX + 1];
	uint64		deletions;

	bridge_attach();
	deletions = bridge_held_deletions();

	/*
	 * A lost session is closed before anything is written off: the WARNINGs
	 * below can wait on a slow client, and a session that came back meanwhile
	 * would keep the forgotten locks' nodes at the head of their queues.
	 */
	zk_session_close_if_lost();
	stats_flush();
	if (lock_table_forget_lost(zk_session_generation(),
							   deletions != deletions_seen, name, mode,
							   &named_lost, first) > 0 &&
		!lost_in_xact)
	{
		lost_in_xact = true;
		strlcpy(lost_name, first, sizeof(lost_name));
	}
	deletions_seen = deletions;
	return named_lost;
}

/*
 * Locks released in this transaction (count, one of them name) whose
 * release did not prove that they were held until then: ZooKeeper did not confirm, in the same session and
 * within its timeout, the delete of a node that was still there.  The
 * transaction wrote under a lock that may have been another's meanwhile.
 */
void
lost_locks_release_unproven(const char *name, int count)
{
	ereport(WARNING,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 count == 1 ?
			 errmsg("zklock lock \"%s\" may have been lost before it was released", name) :
			 errmsg_plural("zklock lock \"%s\" and %d other lock may have been lost before they were released",
						   "zklock lock \"%s\" and %d other locks may have been lost before they were released",
						   count - 1, name, count - 1),
			 errdetail("ZooKeeper did not confirm that its node was still there when it was deleted: the session expired or was not heard from within its timeout, or another client had deleted the node."),
			 errhint("A transaction that wrote while it held the lock cannot commit unless zklock.on_lost_lock = warning.")));
	if (!lost_in_xact)
	{
		lost_in_xact = true;
		strlcpy(lost_name, name, sizeof(lost_name));
	}
}

/*
 * The commit guard, at PRE_COMMIT and PRE_PREPARE.  A transaction that wrote
 * something, while the backend holds a lock, commits only once the session
 * is proven alive by the server itself (zk_session_confirm), not by the
 * client's belief; a lock found lost then, or earlier in the transaction,
 * fails the commit.  A transaction that wrote nothing has nothing to commit
 * that the lock could protect (COMMIT PREPARED's own, say): a loss is only
 * reported to it, with the WARNINGs, and costs it no round trip.
 */
void
lost_locks_pre_commit(void)
{
	bool		writes = GetTopTransactionIdIfAny() != InvalidTransactionId;

	/* Best effort needs no proof; only a loss already known is reported. */
	if (writes && lock_table_count() > 0 &&
		zklock_on_lost_lock == ON_LOST_LOCK_ERROR)
	{
		LockEntry  *probe = lock_table_any_live(zk_session_generation());

		/*
		 * With none of the live session, every lock is lost already: the
		 * commit fails at once instead of waiting for a session that cannot
		 * bring them back.
		 */
		if (probe != NULL)
			zk_session_confirm(probe->node, probe->watch);
	}
	lost_locks_forget(NULL, LOCK_MODE_EXCLUSIVE);

	/*
	 * Passed: until this commit is done, the worker does not close the
	 * session by its own will.  One it is closing already lets none pass.
	 */
	if (writes && !lost_in_xact && zklock_on_lost_lock == ON_LOST_LOCK_ERROR)
	{
		LockEntry  *held = lock_table_any_live(zk_session_generation());

		if (held != NULL && !bridge_commit_begin(held->generation))
		{
			lost_in_xact = true;
			strlcpy(lost_name, LOCK_ENTRY_NAME(held), sizeof(lost_name));
		}
	}

	if (!lost_in_xact)
		return;
	lost_in_xact = false;
	if (!writes)
		return;
	ereport(zklock_on_lost_lock == ON_LOST_LOCK_ERROR ? ERROR : WARNING,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("zklock lock \"%s\" was lost before the transaction committed",
					lost_name),
			 errdetail("Its ZooKeeper session expired, or was not heard from for longer than the session timeout, or its node was deleted by another client while this backend held it, or its release was not confirmed by ZooKeeper, or the server's session worker was closing its session, so another session may have held the lock while this transaction ran."),
			 zklock_on_lost_lock == ON_LOST_LOCK_ERROR ?
			 errhint("The transaction is rolled back.  Acquire the lock again and retry, or set zklock.on_lost_lock = warning to commit regardless.") :
			 errhint("The transaction commits anyway because zklock.on_lost_lock = warning.")));
}

void
lost_locks_xact_end(void)
{
	lost_in_xact = false;
	bridge_commit_end();
}
