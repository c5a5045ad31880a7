/*
 * revocation.c
 *	  A release requested by another client (zk_lock_request_release, or
 *	  Curator's Revoker) as an interrupt, for sessions that set
 *	  zklock.revocable.
 *
 * The session worker hears the request through its watch on the holder's
 * node and, if the backend holds the lock and is revocable, sends it
 * REVOKE_SIGNAL (SIGUSR2, which backends otherwise ignore).  Our handler
 * asks for a cancel, as pg_cancel_backend's SIGINT does, only while a
 * statement executes outside a COMMIT or a release: there an error context
 * callback is on the stack that turns the cancel into 57Z01 before any
 * exception handler sees it.  Anywhere else (idle, parsing, planning,
 * committing, releasing) the signal only wakes the backend, and the request
 * is raised when the next statement starts; one asked while the backend
 * waited for the lock, once granted.  A user's own cancel stays 57014.
 * When the transaction rolls back, the session holds of the lock are given
 * up too.  Each hold is interrupted once: a job that catches 57Z01 keeps the
 * lock and decides for itself.
 *
 * A commit is quiet from before its deferred triggers fire, which is before
 * the pre-commit callbacks: from a COMMIT statement's start; from a PL/pgSQL
 * COMMIT's start (PL/pgSQL's plugin hook); and for the commit that follows
 * a statement of the client's outside a transaction block (autocommit, the
 * end of a multi-statement query or of an extended-protocol pipeline), from
 * that statement's end: the backend is quiet between its client's
 * statements, and a statement begins by leaving the quiet section.
 */
#include "postgres.h"

#include <signal.h>
#include <unistd.h>

#include "access/xact.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "plpgsql.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/pquery.h"
#include "tcop/tcopprot.h"
#include "tcop/utility.h"
#include "utils/portal.h"

#include "compat.h"
#include "guc.h"
#include "lock_table.h"
#include "revocation.h"
#include "zk_bridge.h"
#include "zk_shared.h"

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
static volatile sig_atomic_t quiet = false;
/* Statements executing with cancel_to_request on the stack. */
static volatile sig_atomic_t executing = 0;
/* The pending cancel is ours: REVOKE_SIGNAL's, not the user's. */
static volatile sig_atomic_t revoke_cancel_pending = false;
/* REVOKE_SIGNAL has our handler (it had none before). */
static bool handler_installed = false;

static void plpgsql_statement_begins(PLpgSQL_execstate *estate, PLpgSQL_stmt *stmt);

/* PL/pgSQL calls stmt_beg before each statement; the rest stays unset. */
static PLpgSQL_plugin plpgsql_watch = {
	.stmt_beg = plpgsql_statement_begins,
};

/*
 * REVOKE_SIGNAL's handler: a cancel only where cancel_to_request will turn
 * it into 57Z01; otherwise the next statement's start raises the request.
 */
static void
revoke_signal_handler(SIGNAL_ARGS)
{
	int			save_errno = errno;

	if (executing > 0 && !quiet && !proc_exit_inprogress)
	{
		revoke_cancel_pending = true;
		QueryCancelPending = true;
		InterruptPending = true;
	}
	SetLatch(MyLatch);
	errno = save_errno;
}

/*
 * Handle REVOKE_SIGNAL in this process, unless something else of it uses
 * the signal already (then the worker is never asked to interrupt us, and
 * a request is raised at the next statement's start).
 */
static bool
install_handler(void)
{
	struct sigaction current;

	if (!handler_installed &&
		sigaction(REVOKE_SIGNAL, NULL, &current) == 0 &&
		(current.sa_handler == SIG_IGN || current.sa_handler == SIG_DFL))
	{
		pqsignal(REVOKE_SIGNAL, revoke_signal_handler);
		handler_installed = true;
	}
	return handler_installed;
}

/* Forget a cancel of ours that no statement took (no user's cancel). */
static void
drop_revoke_cancel(void)
{
	if (revoke_cancel_pending)
	{
		revoke_cancel_pending = false;
		QueryCancelPending = false;
	}
}

static void
publish_revocable(void)
{
	bool		revocable = zklock_revocable && install_handler();

	if (revocable_published != revocable)
	{
		bridge_set_revocable(revocable);
		revocable_published = revocable;
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
 * A REVOKE_SIGNAL the worker sent us for a request that is raised now, or
 * must not interrupt what begins now, is on its way (or here): any system
 * call brings it in, and the cancel it may have asked for is dropped.
 */
static void
take_revoke_signal(void)
{
	if (bridge_take_revoke_signal())
		(void) getppid();
	drop_revoke_cancel();
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

/* On the stack while a statement executes: our cancel becomes 57Z01. */
static void
cancel_to_request(void *arg)
{
	LockEntry  *entry;

	if (!revoke_cancel_pending || geterrcode() != ERRCODE_QUERY_CANCELED)
		return;
	revoke_cancel_pending = false;
	entry = take_request();
	if (entry != NULL)
	{
		(void) bridge_take_revoke_signal();
		describe(entry);
	}
}

/*
 * A statement executes from here to executing_end, with callback (put on
 * the stack here) turning a cancel of ours into 57Z01.  Called first thing
 * inside the PG_TRY whose PG_FINALLY calls executing_end: PG_END_TRY puts
 * back the error context stack PG_TRY found, which must not be ours.
 */
static void
executing_begin(ErrorContextCallback *callback)
{
	callback->previous = error_context_stack;
	callback->callback = cancel_to_request;
	callback->arg = NULL;
	error_context_stack = callback;
	executing++;
}

/* It ended, or failed: a cancel of ours that it did not take ends too. */
static void
executing_end(ErrorContextCallback *callback)
{
	executing--;
	error_context_stack = callback->previous;
	if (executing == 0)
		drop_revoke_cancel();
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

/*
 * Whether the active portal runs what the client's message asked: a simple
 * query's statements run in portals that pg_cursors does not show, a Bind
 * message's portal runs the text of the message (debug_query_string while
 * it runs) and is never holdable.  A cursor's portal (a trigger's loop, a
 * holdable cursor persisted at COMMIT) is none of these.
 */
static bool
client_portal(void)
{
	Portal		portal = ActivePortal;

	if (portal == NULL)
		return false;
	if (!portal->visible)
		return true;
	return !(portal->cursorOptions & CURSOR_OPT_HOLD) &&
		portal->sourceText != NULL && debug_query_string != NULL &&
		strcmp(portal->sourceText, debug_query_string) == 0;
}

/* Whether a statement that begins executing is the client's. */
typedef enum ClientStatement
{
	NOT_CLIENTS,
	CLIENTS,
	UNATTACHED					/* not asked: the backend has not used zklock */
} ClientStatement;

/*
 * A statement of the client's begins executing: none of ours executes, and
 * it runs in the client's portal.  Statements that a commit's deferred
 * triggers run have no such portal, nor have those run at plan time.  It
 * ends the quiet section begun when the client's previous statement ended,
 * and raises a request heard meanwhile.  Not asked in a backend that has
 * not used zklock, which holds nothing to be asked for: it compares no query
 * texts for the statements it runs.
 */
static ClientStatement
client_statement_begins(void)
{
	if (executing > 0)
		return NOT_CLIENTS;
	if (!bridge_attached())
		return UNATTACHED;
	if (!client_portal())
		return NOT_CLIENTS;
	revocation_quiet(false);
	check_at_statement_start();
	return CLIENTS;
}

/*
 * It ended (or failed): outside a transaction block the commit follows at
 * once, with no statement of its own, so it is quiet from here; in a block
 * the backend is idle or begins the next statement.  Quiet ends with the
 * transaction, or when the next statement of the client's begins.  One
 * that began before the backend used zklock is asked about now.
 */
static void
client_statement_ends(ClientStatement client)
{
	if ((zklock_revocable || revocable_published) &&
		(client == CLIENTS ||
		 (client == UNATTACHED && bridge_attached() && client_portal())))
		revocation_quiet(true);
}

static void
revocation_executor_run(ZKLOCK_EXECUTOR_RUN_PARAMS)
{
	ErrorContextCallback callback;
	ClientStatement client = client_statement_begins();

	PG_TRY();
	{
		executing_begin(&callback);
		if (prev_executor_run)
			prev_executor_run(ZKLOCK_EXECUTOR_RUN_ARGS);
		else
			standard_ExecutorRun(ZKLOCK_EXECUTOR_RUN_ARGS);
	}
	PG_FINALLY();
	{
		executing_end(&callback);
		client_statement_ends(client);
	}
	PG_END_TRY();
}

/*
 * COMMIT, ROLLBACK and savepoints are never interrupted; a COMMIT is quiet
 * from here to its end (deferred triggers run before the commit callbacks).
 */
static void
revocation_process_utility(ZKLOCK_PROCESS_UTILITY_PARAMS)
{
	ErrorContextCallback callback;
	bool		interruptible = !IsA(pstmt->utilityStmt, TransactionStmt);
	ClientStatement client = interruptible ? client_statement_begins() : NOT_CLIENTS;

	if (interruptible && client != CLIENTS)
		check_at_statement_start();
	else if (!interruptible)
	{
		TransactionStmtKind kind = ((TransactionStmt *) pstmt->utilityStmt)->kind;

		if (kind == TRANS_STMT_COMMIT || kind == TRANS_STMT_PREPARE ||
			kind == TRANS_STMT_COMMIT_PREPARED)
			revocation_quiet(true);
	}
	PG_TRY();
	{
		if (interruptible)
			executing_begin(&callback);
		if (prev_process_utility)
			prev_process_utility(ZKLOCK_PROCESS_UTILITY_ARGS);
		else
			standard_ProcessUtility(ZKLOCK_PROCESS_UTILITY_ARGS);
	}
	PG_FINALLY();
	{
		if (interruptible)
			executing_end(&callback);
		client_statement_ends(client);
	}
	PG_END_TRY();
}

/*
 * A PL/pgSQL COMMIT (AND CHAIN) in a procedure or DO block: quiet from
 * here, before SPI_commit fires the deferred triggers, to the transaction's
 * end.  Not where SPI_commit refuses to commit (a function, an exception
 * block), or the quiet section would outlast the error.
 */
static void
plpgsql_statement_begins(PLpgSQL_execstate *estate, PLpgSQL_stmt *stmt)
{
	if (stmt->cmd_type == PLPGSQL_STMT_COMMIT && !estate->atomic &&
		!IsSubTransaction())
		revocation_quiet(true);
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
 * Returns whether the backend was quiet, for a section within a section
 * (a release during a commit) to put back.
 */
bool
revocation_quiet(bool on)
{
	bool		was = quiet;

	if (on == quiet || !bridge_attached())
		return was;
	quiet = on;
	bridge_set_quiet(on);
	if (on)
		take_revoke_signal();
	return was;
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
	PLpgSQL_plugin **plpgsql_plugin;

	prev_executor_start = ExecutorStart_hook;
	ExecutorStart_hook = revocation_executor_start;
	prev_executor_run = ExecutorRun_hook;
	ExecutorRun_hook = revocation_executor_run;
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = revocation_process_utility;

	/*
	 * Watch PL/pgSQL's statements, unless another plugin (a debugger, a
	 * profiler) does: PL/pgSQL has room for one.  Without it, and when one
	 * loaded later takes the place, a PL/pgSQL COMMIT is quiet only from the
	 * pre-commit callbacks, after its deferred triggers.
	 */
	plpgsql_plugin = (PLpgSQL_plugin **) find_rendezvous_variable("PLpgSQL_plugin");
	if (*plpgsql_plugin == NULL)
		*plpgsql_plugin = &plpgsql_watch;
}
