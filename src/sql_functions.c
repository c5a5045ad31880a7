/*
 * sql_functions.c
 *	  The SQL-callable functions of zklock.
 *
 * Argument checking, reentrancy and the zk_locks listing live here, and
 * what a backend's exit ends in the statistics; waiting in ZooKeeper is
 * lock_recipe.c's job, counting holds lock_table.c's.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "fmgr.h"
#include "funcapi.h"
#include "storage/ipc.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

#include "compat.h"
#include "lock_name.h"
#include "lock_recipe.h"
#include "lock_table.h"
#include "lost_locks.h"
#include "revocation.h"
#include "sql_functions.h"
#include "stats.h"
#include "zk_session.h"
#include "zk_shared.h"

PG_FUNCTION_INFO_V1(zk_lock_acquire);
PG_FUNCTION_INFO_V1(zk_lock_try_acquire);
PG_FUNCTION_INFO_V1(zk_lock_xact_acquire);
PG_FUNCTION_INFO_V1(zk_lock_xact_try_acquire);
PG_FUNCTION_INFO_V1(zk_lock_release);
PG_FUNCTION_INFO_V1(zk_lock_release_all);
PG_FUNCTION_INFO_V1(zk_lock_acquire_shared);
PG_FUNCTION_INFO_V1(zk_lock_try_acquire_shared);
PG_FUNCTION_INFO_V1(zk_lock_xact_acquire_shared);
PG_FUNCTION_INFO_V1(zk_lock_xact_try_acquire_shared);
PG_FUNCTION_INFO_V1(zk_lock_release_shared);
PG_FUNCTION_INFO_V1(zk_semaphore_acquire);
PG_FUNCTION_INFO_V1(zk_semaphore_release);
PG_FUNCTION_INFO_V1(zk_lock_token);
PG_FUNCTION_INFO_V1(zk_lock_release_requested);
PG_FUNCTION_INFO_V1(zk_locks);
PG_FUNCTION_INFO_V1(zk_session);
PG_FUNCTION_INFO_V1(zk_session_1_5);

/* The lock name argument, checked. */
char *
zklock_name_arg(FunctionCallInfo fcinfo, int argno)
{
	char	   *name;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("lock name must not be null")));
	name = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	zklock_check_name(name);
	return name;
}

/* The timeout_ms argument: NULL waits without limit (-1). */
int
zklock_timeout_arg(FunctionCallInfo fcinfo, int argno)
{
	int32		timeout_ms;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return -1;
	timeout_ms = PG_GETARG_INT32(argno);
	if (timeout_ms < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout_ms must not be negative"),
				 errhint("Pass NULL to wait without a limit, 0 not to wait.")));
	return timeout_ms;
}

static void
hold_ended_at_exit(LockEntry *entry, void *arg)
{
	stats_hold_ended(LOCK_ENTRY_NAME(entry), false);
}

static void
stats_at_exit(int code, Datum arg)
{
	lock_table_visit(hold_ended_at_exit, NULL);
	stats_backend_exit();
}

/*
 * The backend's holds and wait end in the statistics when it exits (its
 * nodes go with it): set up at its first wait, which comes before its first
 * hold.
 */
static void
end_stats_at_exit(void)
{
	static bool registered = false;

	if (!registered)
	{
		before_shmem_exit(stats_at_exit, (Datum) 0);
		registered = true;
	}
}

/*
 * Acquire, or add a hold on, the lock called name in mode.  A shared lock
 * taken by a backend that holds the exclusive one is granted at once (like
 * Curator's read lock inside its write lock) unless another session's writer
 * queued in between (see lock_recipe.c); the reverse would wait for itself
 * forever, so it is an error (and a try is not granted).
 */
static bool
acquire(const char *name, LockMode mode, int permits, LockScope scope,
		int timeout_ms)
{
	LockEntry  *entry;
	LockEntry  *writer = NULL;
	uint64		generation;
	LockRequest req = {0};
	HeldNode	held;
	bool		granted;

	lost_locks_forget(NULL, mode);

	/*
	 * Before counting a hold on a lock already held: an absolute path this
	 * role may not use fails here (42501), even when a superuser's SECURITY
	 * DEFINER function took it earlier in the session.
	 */
	req.parent = zklock_parent_path(name);
	entry = lock_table_find(name, mode);
	if (entry != NULL && mode == LOCK_MODE_SEMAPHORE && entry->permits != permits)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock semaphore \"%s\" is in use with %d permits, not %d",
						name, entry->permits, permits),
				 errdetail("This session holds it with %d permits.", entry->permits),
				 errhint("Use the same permits for a semaphore everywhere.")));
	if (entry != NULL)
	{
		lock_table_add_hold(entry, scope);
		return true;
	}
	/* A try never waits, so it cannot wait for itself: it is not granted. */
	if (mode == LOCK_MODE_EXCLUSIVE && timeout_ms == 0 &&
		lock_table_find(name, LOCK_MODE_SHARED))
		return false;
	if (mode == LOCK_MODE_EXCLUSIVE && lock_table_find(name, LOCK_MODE_SHARED))
		ereport(ERROR,
				(errcode(ERRCODE_T_R_DEADLOCK_DETECTED),
				 errmsg("cannot acquire zklock lock \"%s\" in exclusive mode while holding it in shared mode", name),
				 errdetail("The exclusive request would wait for this session's own shared lock."),
				 errhint("Release the shared lock first.")));
	if (mode == LOCK_MODE_SHARED)
		writer = lock_table_find(name, LOCK_MODE_EXCLUSIVE);

	zk_session_require();
	generation = zk_session_generation();
	req.name = name;
	req.mode = mode;
	req.permits = permits;
	req.own_writer = writer ? writer->node : NULL;
	req.timeout_ms = timeout_ms;
	end_stats_at_exit();
	stats_wait_begin(name);
	PG_TRY();
	{
		granted = lock_recipe_acquire(&req, &held);
	}
	PG_CATCH();
	{
		stats_wait_end(STATS_CANCELLED);
		PG_RE_THROW();
	}
	PG_END_TRY();
	stats_wait_end(granted ? STATS_GRANTED :
				   timeout_ms == 0 ? STATS_TRY_FAILED : STATS_TIMED_OUT);
	if (!granted)
		return false;

	PG_TRY();
	{
		entry = lock_table_insert(name, mode, permits, held.path, held.recheck_tag,
								  held.token, generation, held.watch, scope);
	}
	PG_CATCH();
	{
		lock_recipe_release(held.path, held.recheck_tag, held.watch, NULL);
		PG_RE_THROW();
	}
	PG_END_TRY();
	revocation_granted(entry);
	return true;
}

/* The lock functions differ only in mode, scope and whether they wait. */
#define LOCK_ACQUIRE_FUNCTION(fn, mode, scope, waits) \
Datum \
fn(PG_FUNCTION_ARGS) \
{ \
	char	   *name = zklock_name_arg(fcinfo, 0); \
\
	PG_RETURN_BOOL(acquire(name, mode, 0, scope, \
						   (waits) ? zklock_timeout_arg(fcinfo, 1) : 0)); \
}

LOCK_ACQUIRE_FUNCTION(zk_lock_acquire, LOCK_MODE_EXCLUSIVE, LOCK_SCOPE_SESSION, true)
LOCK_ACQUIRE_FUNCTION(zk_lock_try_acquire, LOCK_MODE_EXCLUSIVE, LOCK_SCOPE_SESSION, false)
LOCK_ACQUIRE_FUNCTION(zk_lock_xact_acquire, LOCK_MODE_EXCLUSIVE, LOCK_SCOPE_XACT, true)
LOCK_ACQUIRE_FUNCTION(zk_lock_xact_try_acquire, LOCK_MODE_EXCLUSIVE, LOCK_SCOPE_XACT, false)
LOCK_ACQUIRE_FUNCTION(zk_lock_acquire_shared, LOCK_MODE_SHARED, LOCK_SCOPE_SESSION, true)
LOCK_ACQUIRE_FUNCTION(zk_lock_try_acquire_shared, LOCK_MODE_SHARED, LOCK_SCOPE_SESSION, false)
LOCK_ACQUIRE_FUNCTION(zk_lock_xact_acquire_shared, LOCK_MODE_SHARED, LOCK_SCOPE_XACT, true)
LOCK_ACQUIRE_FUNCTION(zk_lock_xact_try_acquire_shared, LOCK_MODE_SHARED, LOCK_SCOPE_XACT, false)

Datum
zk_semaphore_acquire(PG_FUNCTION_ARGS)
{
	char	   *name = zklock_name_arg(fcinfo, 0);
	int32		permits;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("permits must not be null")));
	permits = PG_GETARG_INT32(1);
	if (permits < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("permits must be at least 1")));
	PG_RETURN_BOOL(acquire(name, LOCK_MODE_SEMAPHORE, permits,
						   LOCK_SCOPE_SESSION, zklock_timeout_arg(fcinfo, 2)));
}

/* Give up one session hold of name in mode; false with a WARNING if none. */
static bool
release(const char *name, LockMode mode)
{
	LockEntry  *volatile entry = NULL;
	volatile bool lost = false;
	volatile bool released = false;
	volatile bool proven = false;

	/*
	 * A release request heard from now on is not the release's business;
	 * one in a commit's deferred trigger leaves the commit quiet.  However
	 * the release ends: a cancel of its wait, caught by a PL/pgSQL block,
	 * leaves the rest of the transaction interruptible.
	 */
	bool		was_quiet = revocation_quiet(true);

	PG_TRY();
	{
		/* A lost lock is not held; its WARNING says so already. */
		lost = lost_locks_forget(name, mode);
		if (!lost)
		{
			entry = lock_table_find(name, mode);
			released = entry != NULL && lock_table_release_session(entry);
			if (released)
				proven = lock_recipe_await_releases(true, true) == 0;
		}
	}
	PG_FINALLY();
	{
		revocation_quiet(was_quiet);
	}
	PG_END_TRY();
	if (lost)
		return false;
	if (released)
		return proven;
	ereport(WARNING,
			(errcode(ERRCODE_WARNING),
			 mode == LOCK_MODE_SEMAPHORE ?
			 errmsg("zklock semaphore \"%s\" is not held by this session", name) :
			 mode == LOCK_MODE_SHARED ?
			 errmsg("zklock shared session lock \"%s\" is not held by this session", name) :
			 errmsg("zklock session lock \"%s\" is not held by this session", name),
			 entry != NULL ? errhint("Transaction locks are released when the transaction ends.") : 0));
	return false;
}

Datum
zk_lock_release(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(release(zklock_name_arg(fcinfo, 0), LOCK_MODE_EXCLUSIVE));
}

Datum
zk_lock_release_shared(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(release(zklock_name_arg(fcinfo, 0), LOCK_MODE_SHARED));
}

Datum
zk_semaphore_release(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(release(zklock_name_arg(fcinfo, 0), LOCK_MODE_SEMAPHORE));
}

/*
 * Release every session lock and semaphore of this backend, whatever its hold
 * count, and wait until ZooKeeper has deleted their nodes; returns how many
 * there were.  Transaction holds stay.  zk_lock_release_all() and DISCARD ALL.
 */
int
zklock_release_all_session_locks(void)
{
	volatile int released = 0;
	bool		was_quiet = revocation_quiet(true);

	PG_TRY();
	{
		lost_locks_forget(NULL, LOCK_MODE_EXCLUSIVE);
		released = lock_table_release_all_session(false);
		lock_recipe_await_releases(true, true);
	}
	PG_FINALLY();
	{
		revocation_quiet(was_quiet);
	}
	PG_END_TRY();
	return released;
}

Datum
zk_lock_release_all(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(zklock_release_all_session_locks());
}

/*
 * The entries this session holds of the lock named by the first argument,
 * strongest mode first (exclusive, shared, semaphore), lost ones forgotten
 * first; returns how many.
 */
static int
held_entries(FunctionCallInfo fcinfo, LockEntry **entries)
{
	char	   *name = zklock_name_arg(fcinfo, 0);
	int			n = 0;

	lost_locks_forget(NULL, LOCK_MODE_EXCLUSIVE);
	for (LockMode mode = LOCK_MODE_EXCLUSIVE; mode <= LOCK_MODE_SEMAPHORE; mode++)
	{
		LockEntry  *entry = lock_table_find(name, mode);

		if (entry != NULL)
			entries[n++] = entry;
	}
	return n;
}

/* The token of the lock held in the strongest mode. */
Datum
zk_lock_token(PG_FUNCTION_ARGS)
{
	LockEntry  *entries[LOCK_MODE_SEMAPHORE + 1];

	if (held_entries(fcinfo, entries) == 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(entries[0]->token);
}

/*
 * Whether another client asked the holders of a lock this session holds, in
 * any mode, to let go (zk_lock_request_release, Curator's Revoker).  What the
 * watch on our node delivered: no round trip.
 */
Datum
zk_lock_release_requested(PG_FUNCTION_ARGS)
{
	LockEntry  *entries[LOCK_MODE_SEMAPHORE + 1];
	int			n = held_entries(fcinfo, entries);

	for (int i = 0; i < n; i++)
	{
		if (bridge_held_release_requested(entries[i]->watch))
			PG_RETURN_BOOL(true);
	}
	PG_RETURN_BOOL(false);
}

/* ---- zk_locks ---- */

#define ZK_LOCKS_COLS 9

static void
emit_row(Tuplestorestate *store, TupleDesc desc, LockEntry *entry,
		 const char *scope, int32 count)
{
	Datum		values[ZK_LOCKS_COLS];
	bool		nulls[ZK_LOCKS_COLS] = {0};

	values[0] = CStringGetTextDatum(LOCK_ENTRY_NAME(entry));
	values[1] = CStringGetTextDatum(lock_mode_names[entry->mode]);
	values[2] = CStringGetTextDatum(scope);
	values[3] = Int32GetDatum(count);
	values[4] = CStringGetTextDatum(entry->node);
	values[5] = Int64GetDatum(entry->token);
	values[6] = TimestampTzGetDatum(entry->acquired_at);
	values[7] = CStringGetTextDatum(lost_locks_state(entry));
	values[8] = BoolGetDatum(bridge_held_release_requested(entry->watch));
	tuplestore_putvalues(store, desc, values, nulls);
}

static void
emit_entry(LockEntry *entry, void *arg)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) arg;

	if (entry->session_count > 0)
		emit_row(rsinfo->setResult, rsinfo->setDesc, entry, "session",
				 entry->session_count);
	if (entry->xact_count > 0)
		emit_row(rsinfo->setResult, rsinfo->setDesc, entry, "transaction",
				 entry->xact_count);
}

/* Lists lost locks as such, rather than forgetting them. */
Datum
zk_locks(PG_FUNCTION_ARGS)
{
	/* Not preloaded, no lock can be held: say why (55000), not "none". */
	zk_shared_attach();
	InitMaterializedSRF(fcinfo, 0);
	lock_table_visit(emit_entry, fcinfo->resultinfo);
	return (Datum) 0;
}

/* ---- zk_session ---- */

/* 1.4 declares the first 6 columns, 1.5 all 9. */
#define ZK_SESSION_COLS 9

static Datum
session_row(FunctionCallInfo fcinfo, int ncols)
{
	static const char *const status_names[] = {
		[ZK_SESSION_NONE] = "none",
		[ZK_SESSION_CONNECTING] = "connecting",
		[ZK_SESSION_CONNECTED] = "connected",
		[ZK_SESSION_SUSPENDED] = "suspended",
		[ZK_SESSION_LOST] = "lost",
	};
	ZkSessionInfo info;
	TupleDesc	desc;
	Datum		values[ZK_SESSION_COLS];
	bool		nulls[ZK_SESSION_COLS] = {0};

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	if (desc->natts != ncols)
		elog(ERROR, "zk_session is declared with %d columns, not %d: run ALTER EXTENSION zklock UPDATE",
			 desc->natts, ncols);
	zk_session_describe(&info);

	values[0] = CStringGetTextDatum(status_names[info.status]);
	if (info.session_id != 0)
		values[1] = CStringGetTextDatum(psprintf("0x%llx",
												 (unsigned long long) info.session_id));
	else
		nulls[1] = true;
	values[2] = Int32GetDatum(info.timeout_ms);
	nulls[2] = info.timeout_ms == 0;
	values[3] = CStringGetTextDatum(info.server);
	nulls[3] = info.server[0] == '\0';
	values[4] = Int64GetDatum(info.since_contact_ms);
	nulls[4] = info.status == ZK_SESSION_NONE;
	values[5] = Int32GetDatum(lock_table_count());
	values[6] = Int32GetDatum(info.worker_pid);
	nulls[6] = info.worker_pid == 0;
	values[7] = Int32GetDatum(info.requests_in_flight);
	values[8] = Int32GetDatum(info.requests_queued);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}

Datum
zk_session(PG_FUNCTION_ARGS)
{
	return session_row(fcinfo, 6);
}

Datum
zk_session_1_5(PG_FUNCTION_ARGS)
{
	return session_row(fcinfo, ZK_SESSION_COLS);
}
