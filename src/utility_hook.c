/*
 * utility_hook.c
 *	  DISCARD ALL releases the backend's zklock session locks, as it
 *	  releases its advisory locks.
 *
 * A connection pooler runs DISCARD ALL (PgBouncer's server_reset_query) when
 * a client leaves, so that the next client of the same server connection
 * starts with a clean session: a lock the first client left held must not
 * pass to the next one, and must be free for every other node at once.
 * Of the DISCARD variants only ALL releases advisory locks (PLANS, SEQUENCES
 * and TEMP do not), so only ALL releases zklock's.  It also ends the
 * session's barrier memberships (their nodes deleted without waiting);
 * gates are nobody's and stay as they are.
 */
#include "postgres.h"

#include "nodes/parsenodes.h"
#include "tcop/utility.h"

#include "barrier.h"
#include "compat.h"
#include "lost_locks.h"
#include "sql_functions.h"
#include "utility_hook.h"
#include "zk_bridge.h"

static ProcessUtility_hook_type prev_process_utility = NULL;

static void
zklock_process_utility(ZKLOCK_PROCESS_UTILITY_PARAMS)
{
	Node	   *stmt = pstmt->utilityStmt;
	bool		discard_all = IsA(stmt, DiscardStmt) &&
		((DiscardStmt *) stmt)->target == DISCARD_ALL;

	if (prev_process_utility)
		prev_process_utility(ZKLOCK_PROCESS_UTILITY_ARGS);
	else
		standard_ProcessUtility(ZKLOCK_PROCESS_UTILITY_ARGS);

	/*
	 * Only once DISCARD ALL has succeeded: it refuses to run in a transaction
	 * block, and then nothing is released, as with advisory locks.
	 */
	if (discard_all && bridge_attached())
	{
		barrier_discard_all();
		zklock_release_all_session_locks();

		/*
		 * A lock found lost just now was reported with a WARNING; it must not
		 * fail the commit of DISCARD ALL, which runs alone in its transaction
		 * and so did nothing that relied on the lock.
		 */
		lost_locks_xact_end();
	}
}

void
zklock_install_utility_hook(void)
{
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = zklock_process_utility;
}
