/*
 * revocation.c
 *	  A release requested by another client (zk_lock_request_release, or
 *	  Curator's Revoker) as an interrupt, for sessions that set
 *	  zklock.revocable.
 *
 * The session worker hears the request through its watch on the holder's
 * node and, if the backend holds the lock and is revocable, sends it SIGINT
 * as pg_cancel_backend does.  The cancel that the next CHECK_FOR_INTERRUPTS
 * raises is turned into 57Z01 by an error context callback that is on the
 * stack while a statement runs, before any exception handler sees it.  A
 * backend that was idle (the cancel is ignored then) hears it when its next
 * statement starts; one asked while it waited for the lock, once granted.
 * When the transaction rolls back, the session holds of the lock are given
 * up too.  Each hold is interrupted once: a job that catches 57Z01 keeps the
 * lock and decides for itself.
 */
#include "postgres.h"

#include <unistd.h>

#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "tcop/utility.h"

#include "compat.h"
#include "guc.h"
#include "lock_table.h"
#include "revocation.h"
#include "zk_bridge.h"

#define ERRCODE_ZKLOCK_RELEASE_REQUESTED MAKE_SQLSTATE('5','7','Z','0','1')

static ExecutorStart_hook_type prev_executor_start = NULL;
static ExecutorRun_hook_type prev_executor_run = NULL;
static ProcessUtility_hook_type prev_process_utility = NULL;

/* The worker's count of requests for our nodes, when we last looked. */
static uint64 requests_seen = 0;
/* A lock was granted since: it may have been asked before it was held. */
static bool grant_unseen = false;
/* The value of zklock.revocable the worker knows. */
static bool revocable_published = false;
/* An interrupt was raised in this transaction. */
static bool raised_in_xact = false;
/* In a section the worker does not interrupt (see revocation_quiet). */
static bool quiet = false;

static void
publish_revocable(void)
{
	if (revocable_published != zklock_revocable)
	{
		bridge_set_revocable(zklock_revocable);
		revocable_published = zklock_revocable;
	}
}

/* Find a lock held whose release was requested and was not raised yet. */
static void
find_requested(LockEntry *entry, void *arg)
{
	LockEntry **found = (LockEntry **) arg;

	if (*found == NULL && !entry->revoke_raised &&
		bridge_held_release_requested(entry->watch))
		*found = entry;
}

/*
 * The lock whose release request is to interrupt the backend now, marked as
 * raised; NULL if none.  Cheap unless the worker heard a request, or a lock
 * was granted, since the last look.
 */
static LockEntry *
take_request(void)
{
	LockEntry  *found = NULL;
	uint64		requests;

	if (!zklock_revocable || !bridge_attached())
		return NULL;
	requests = bridge_release_requests();
	if (requests == requests_seen && !grant_unseen)
		return NULL;
	lock_table_visit(find_requested, &found);
	if (found == NULL)
	{
		requests_seen = requests;
		grant_unseen = false;
		return NULL;
	}
	found->revoke_raised = true;
	bridge_held_mark_interrupted(found->watch);
	raised_in_xact = true;
	return found;
}

/*
 * A SIGINT the worker sent us for a request that is raised now, or must not
 * interrupt what begins now, is on its way (or here): any system call
 * brings it in, and its cancel is dropped, so that it cannot cancel a later
 * statement, a COMMIT or a release with 57014.  (A user's cancel that came
 * at that very moment goes with it; any later one works as usual.)
 */
static void
take_revoke_signal(void)
{
	if (bridge_take_revoke_signal())
	{
		(void) getppid();
		QueryCancelPending = false;
	}
}

/* The interrupt's code and message, for the error being raised. */
static int
describe(LockEntry *entry)
{
	errcode(ERRCODE_ZKLOCK_RELEASE_REQUESTED);
	errmsg("canceling statement because the release of zklock lock \"%s\" was requested",
		   LOCK_ENTRY_NAME(entry));
	errdetail("Another client asked the lock's holders to let go (zk_lock_request_release, or Curator's Revoker), and zklock.revocable is on.");
	errhint("The lock is released when the transaction rolls back.  Catch SQLSTATE 57Z01 to finish the current work first, or set zklock.revocable = off and ask zk_lock_release_requested() between batches.");
	return 0;
}

/* On the stack while a statement runs: our SIGINT's cancel becomes 57Z01. */
static void
cancel_to_request(void *arg)
{
	LockEntry  *entry;

	/* In a COMMIT or a release, a cancel is the user's own. */
	if (quiet || geterrcode() != ERRCODE_QUERY_CANCELED)
		return;
	entry = take_request();
	if (entry != NULL)
	{
		(void) bridge_take_revoke_signal();
		describe(entry);
	}
}

/*
 * At a statement's start: a request not raised yet is raised now; not in a
 * COMMIT (a deferred trigger's statements), where the next statement does.
 */
static void
check_at_statement_start(void)
{
	LockEntry  *entry;

	if (!bridge_attached() || quiet)
		return;
	publish_revocable();
	entry = take_request();
	if (entry != NULL)
	{
		take_revoke_signal();
		ereport(ERROR, describe(entry));
	}
}

static void
revocation_executor_start(QueryDesc *queryDesc, int eflags)
{
	check_at_statement_start();
	if (prev_executor_start)
		prev_executor_start(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);
}

static void
revocation_executor_run(ZKLOCK_EXECUTOR_RUN_PARAMS)
{
	ErrorContextCallback callback = {
		.previous = error_context_stack,
		.callback = cancel_to_request,
	};

	error_context_stack = &callback;
	if (prev_executor_run)
		prev_executor_run(ZKLOCK_EXECUTOR_RUN_ARGS);
	else
		standard_ExecutorRun(ZKLOCK_EXECUTOR_RUN_ARGS);
	error_context_stack = callback.previous;
}

/*
 * COMMIT, ROLLBACK and savepoints are never interrupted; a COMMIT is quiet
 * from here to its end (deferred triggers run before the commit callbacks).
 */
static void
revocation_process_utility(ZKLOCK_PROCESS_UTILITY_PARAMS)
{
	ErrorContextCallback callback = {
		.previous = error_context_stack,
		.callback = cancel_to_request,
	};

	if (!IsA(pstmt->utilityStmt, TransactionStmt))
	{
		check_at_statement_start();
		error_context_stack = &callback;
	}
	else
	{
		TransactionStmtKind kind = ((TransactionStmt *) pstmt->utilityStmt)->kind;

		if (kind == TRANS_STMT_COMMIT || kind == TRANS_STMT_PREPARE ||
			kind == TRANS_STMT_COMMIT_PREPARED)
			revocation_quiet(true);
	}
	if (prev_process_utility)
		prev_process_utility(ZKLOCK_PROCESS_UTILITY_ARGS);
	else
		standard_ProcessUtility(ZKLOCK_PROCESS_UTILITY_ARGS);
	error_context_stack = callback.previous;
}

/*
 * A lock is held now: the worker may interrupt us for it.  A request heard
 * while we waited for it is raised at once.
 */
void
revocation_granted(LockEntry *entry)
{
	LockEntry  *asked;

	publish_revocable();
	bridge_held_granted(entry->watch);
	grant_unseen = true;
	asked = take_request();
	if (asked != NULL)
	{
		take_revoke_signal();
		ereport(ERROR, describe(asked));
	}
}

/*
 * Begin (on) or end (off) a section in which the backend commits or releases
 * locks: the worker does not interrupt it there for a release request, which
 * the next statement hears instead; a signal sent just before is taken.
 */
void
revocation_quiet(bool on)
{
	if (on == quiet || !bridge_attached())
		return;
	quiet = on;
	bridge_set_quiet(on);
	if (on)
		take_revoke_signal();
}

/*
 * At the end of the transaction: if it rolls back after an interrupt, the
 * locks asked for are released, session holds too.
 */
void
revocation_xact_end(bool commit)
{
	if (raised_in_xact && !commit)
		lock_table_release_all_session(true);
	raised_in_xact = false;
	revocation_quiet(false);
}

void
zklock_install_revocation_hooks(void)
{
	prev_executor_start = ExecutorStart_hook;
	ExecutorStart_hook = revocation_executor_start;
	prev_executor_run = ExecutorRun_hook;
	ExecutorRun_hook = revocation_executor_run;
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = revocation_process_utility;
}
