/*
 * stats.c
 *	  Server-wide statistics, as pg_stat_statements keeps them: per lock name
 *	  (zk_lock_stats), for the server's ZooKeeper session and the requests
 *	  of all backends (zk_session_stats), and for the waits at barriers and
 *	  gates by kind (zk_barrier_stats), in shared memory.
 *
 * Set up under shared_preload_libraries, like all of zklock; loaded
 * otherwise, the views raise the same error as every function.  At most
 * zklock.max_tracked_locks names are kept; a new name evicts the least used
 * one, preferring names nobody on this server holds or waits for.
 *
 * A leaf: the callers hand it what they count (sql_functions.c ends a
 * backend's holds here when it exits); it calls none of them.
 *
 * Per-name counters are updated under one LWLock: every update goes with a
 * ZooKeeper round trip, which costs far more.  Request counts are taken from
 * the backend's slot (zk_bridge.c), where it and the session worker count
 * them, when a zklock function is called and when the backend exits; the
 * worker counts sessions opened and lost and reconnects itself.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "guc.h"
#include "lock_name.h"
#include "stats.h"
#include "zk_bridge.h"
#include "zk_shared.h"

PG_FUNCTION_INFO_V1(zk_lock_stats);
PG_FUNCTION_INFO_V1(zk_lock_stats_reset);
PG_FUNCTION_INFO_V1(zk_session_stats);
PG_FUNCTION_INFO_V1(zk_session_stats_1_5);
PG_FUNCTION_INFO_V1(zk_barrier_stats);


typedef enum SessionCounter
{
	SESSIONS_OPENED = BRIDGE_NCOUNTERS,
	SESSIONS_LOST,
	DEADLOCK_CHECKS,
	DEADLOCKS,
	DEADLOCK_MEMBERS,
	DEADLOCK_CYCLES,
	DEADLOCK_VICTIMS,
	NSESSION_COUNTERS
} SessionCounter;

typedef struct LockStats
{
	char		name[ZKLOCK_NAME_MAX + 1];	/* hash key */
	int64		acquisitions;
	int64		try_failures;
	int64		timeouts;
	int64		cancels;
	int64		lost;
	double		total_wait_ms;
	double		max_wait_ms;
	int32		holders;		/* nodes held by this server's backends */
	int32		waiters;
	int64		uses;			/* for eviction */
} LockStats;

/* One kind of wait at barriers or gates. */
typedef struct BarrierStats
{
	int64		passed;			/* the gate was open, all had entered or left */
	int64		timeouts;
	int64		cancels;		/* ended by a cancel, an error or an exit */
	double		total_wait_ms;
	double		max_wait_ms;
	int32		waiting;		/* now, on this server */
} BarrierStats;

typedef struct StatsShared
{
	LWLock	   *lock;
	TimestampTz reset_at;
	pg_atomic_uint64 counters[NSESSION_COUNTERS];
	BarrierStats barriers[STATS_BARRIER_KINDS]; /* under lock */
} StatsShared;

static StatsShared *shared = NULL;
static HTAB *lock_stats = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/*
 * This backend's wait in progress (empty: none), ended once whichever way
 * it ends: by its caller, or by the exit of a backend whose wait a FATAL
 * (termination, client gone) ended, which skips the caller's PG_CATCH.
 */
static char waiting_for[ZKLOCK_NAME_MAX + 1];
static TimestampTz wait_started;

/* The same for a wait at a barrier or a gate (-1: none). */
static int	barrier_waiting = -1;
static TimestampTz barrier_wait_started;

static Size
stats_size(void)
{
	return add_size(MAXALIGN(sizeof(StatsShared)),
					hash_estimate_size(zklock_max_tracked_locks, sizeof(LockStats)));
}

static void
stats_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(stats_size());
	RequestNamedLWLockTranche("zklock", 1);
}

static void
stats_shmem_startup(void)
{
	HASHCTL		ctl;
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("zklock stats", sizeof(StatsShared), &found);
	if (!found)
	{
		shared->lock = &(GetNamedLWLockTranche("zklock"))->lock;
		shared->reset_at = GetCurrentTimestamp();
		for (int i = 0; i < NSESSION_COUNTERS; i++)
			pg_atomic_init_u64(&shared->counters[i], 0);
		memset(shared->barriers, 0, sizeof(shared->barriers));
	}
	ctl.keysize = ZKLOCK_NAME_MAX + 1;
	ctl.entrysize = sizeof(LockStats);
	lock_stats = zk_shmem_init_hash("zklock lock stats",
									zklock_max_tracked_locks, &ctl,
									HASH_ELEM | HASH_STRINGS);
	LWLockRelease(AddinShmemInitLock);
}

/*
 * The backend exits: its wait ends, and its holds have been ended by the
 * caller (stats_hold_ended for each).
 */
void
stats_backend_exit(void)
{
	stats_wait_end(STATS_CANCELLED);
	stats_barrier_wait_end(STATS_CANCELLED);
	stats_flush();

	/*
	 * Counted once and for all: the abort of a transaction that is still
	 * open runs later in the exit, and must not count its holds again.
	 */
	shared = NULL;
}

/* _PG_init: set up shared memory when preloaded. */
void
stats_init(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = stats_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = stats_shmem_startup;
}

/* Zero everything of an entry but its name. */
static void
clear_counts(LockStats *entry)
{
	memset((char *) entry + sizeof(entry->name), 0,
		   sizeof(LockStats) - sizeof(entry->name));
}

/*
 * The entry for name, made (evicting another if full) unless shared memory
 * ran out; NULL then.  The lock is held exclusively.
 */
static LockStats *
entry_for(const char *name)
{
	LockStats  *entry;
	bool		found;

	entry = hash_search(lock_stats, name, HASH_FIND, NULL);
	if (entry != NULL)
		return entry;

	if (hash_get_num_entries(lock_stats) >= zklock_max_tracked_locks)
	{
		HASH_SEQ_STATUS status;
		LockStats  *victim = NULL;
		LockStats  *e;

		hash_seq_init(&status, lock_stats);
		while ((e = hash_seq_search(&status)) != NULL)
		{
			bool		idle = e->holders == 0 && e->waiters == 0;
			bool		victim_idle = victim && victim->holders == 0 &&
				victim->waiters == 0;

			if (victim == NULL || (idle && !victim_idle) ||
				(idle == victim_idle && e->uses < victim->uses))
				victim = e;
		}
		hash_search(lock_stats, victim->name, HASH_REMOVE, NULL);
	}
	entry = hash_search(lock_stats, name, HASH_ENTER_NULL, &found);
	if (entry != NULL)
		clear_counts(entry);
	return entry;
}

void
stats_wait_begin(const char *name)
{
	LockStats  *entry;

	if (shared == NULL)
		return;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	entry = entry_for(name);
	if (entry != NULL)
		entry->waiters++;
	LWLockRelease(shared->lock);
	strlcpy(waiting_for, name, sizeof(waiting_for));
	wait_started = GetCurrentTimestamp();
}

/*
 * The wait in progress ends with outcome; nothing if none is.  Never
 * raises: called in PG_CATCH and at exit.
 */
void
stats_wait_end(StatsOutcome outcome)
{
	double		waited_ms;
	LockStats  *entry;

	if (shared == NULL || waiting_for[0] == '\0')
		return;
	waited_ms = (GetCurrentTimestamp() - wait_started) / 1000.0;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	entry = hash_search(lock_stats, waiting_for, HASH_FIND, NULL);
	waiting_for[0] = '\0';
	if (entry != NULL)
	{
		if (entry->waiters > 0)
			entry->waiters--;
		entry->uses++;
		entry->total_wait_ms += waited_ms;
		entry->max_wait_ms = Max(entry->max_wait_ms, waited_ms);
		switch (outcome)
		{
			case STATS_GRANTED:
				entry->acquisitions++;
				entry->holders++;
				break;
			case STATS_TRY_FAILED:
				entry->try_failures++;
				break;
			case STATS_TIMED_OUT:
				entry->timeouts++;
				break;
			case STATS_CANCELLED:
				entry->cancels++;
				break;
		}
	}
	LWLockRelease(shared->lock);
}

static void
barrier_wait_at_exit(int code, Datum arg)
{
	stats_barrier_wait_end(STATS_CANCELLED);
}

/*
 * A wait at a barrier or gate begins.  A FATAL (termination, the client
 * gone) skips the caller's PG_CATCH: the wait then ends at exit.
 */
void
stats_barrier_wait_begin(StatsBarrierKind kind)
{
	static bool registered = false;

	if (shared == NULL)
		return;
	if (!registered)
	{
		before_shmem_exit(barrier_wait_at_exit, (Datum) 0);
		registered = true;
	}
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	shared->barriers[kind].waiting++;
	LWLockRelease(shared->lock);
	barrier_waiting = kind;
	barrier_wait_started = GetCurrentTimestamp();
}

/*
 * The wait in progress ends (STATS_TRY_FAILED is not one of its ends);
 * nothing if none is.  Never raises: called in PG_CATCH and at exit.
 */
void
stats_barrier_wait_end(StatsOutcome outcome)
{
	double		waited_ms;
	BarrierStats *b;

	if (shared == NULL || barrier_waiting < 0)
		return;
	waited_ms = (GetCurrentTimestamp() - barrier_wait_started) / 1000.0;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	b = &shared->barriers[barrier_waiting];
	barrier_waiting = -1;
	if (b->waiting > 0)
		b->waiting--;
	b->total_wait_ms += waited_ms;
	b->max_wait_ms = Max(b->max_wait_ms, waited_ms);
	if (outcome == STATS_GRANTED)
		b->passed++;
	else if (outcome == STATS_TIMED_OUT)
		b->timeouts++;
	else
		b->cancels++;
	LWLockRelease(shared->lock);
}

/* A node of ours on name is gone: released, or lost with the session. */
void
stats_hold_ended(const char *name, bool lost)
{
	LockStats  *entry;

	if (shared == NULL)
		return;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	entry = hash_search(lock_stats, name, HASH_FIND, NULL);
	if (entry != NULL)
	{
		if (entry->holders > 0)
			entry->holders--;
		if (lost)
			entry->lost++;
	}
	LWLockRelease(shared->lock);
}

static void
count_session(SessionCounter c)
{
	if (shared == NULL)
		return;
	pg_atomic_fetch_add_u64(&shared->counters[c], 1);
}

/* The session worker's events: counted for the server, not for a backend. */
static void
count_worker(int c)
{
	if (shared != NULL)
		pg_atomic_fetch_add_u64(&shared->counters[c], 1);
}

void
stats_count_session_opened(void)
{
	count_worker(SESSIONS_OPENED);
}

void
stats_count_session_lost(void)
{
	count_worker(SESSIONS_LOST);
}

void
stats_count_reconnect(void)
{
	count_worker(BRIDGE_RECONNECTS);
}

/*
 * A deadlock check ran over a graph of members waits, found cycles and
 * chose victims for them; victim: it ended this backend's wait with 40P01.
 */
void
stats_deadlock_checked(int members, int cycles, int victims, bool victim)
{
	if (shared == NULL)
		return;
	count_session(DEADLOCK_CHECKS);
	if (victim)
		count_session(DEADLOCKS);
	pg_atomic_fetch_add_u64(&shared->counters[DEADLOCK_MEMBERS], members);
	pg_atomic_fetch_add_u64(&shared->counters[DEADLOCK_CYCLES], cycles);
	pg_atomic_fetch_add_u64(&shared->counters[DEADLOCK_VICTIMS], victims);
}

/* Add what the bridge counted since the last time. */
void
stats_flush(void)
{
	uint64_t	counts[BRIDGE_NCOUNTERS];

	if (shared == NULL)
		return;
	bridge_take_counts(counts);
	for (int i = 0; i < BRIDGE_NCOUNTERS; i++)
		if (counts[i] > 0)
			pg_atomic_fetch_add_u64(&shared->counters[i], counts[i]);
}

static void
require_shared(void)
{
	/* Not preloaded: the same error as every other zklock function. */
	if (shared == NULL)
		zk_shared_attach();
}

#define ZK_LOCK_STATS_COLS 10

Datum
zk_lock_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HASH_SEQ_STATUS status;
	LockStats  *e;

	require_shared();
	InitMaterializedSRF(fcinfo, 0);
	LWLockAcquire(shared->lock, LW_SHARED);
	hash_seq_init(&status, lock_stats);
	while ((e = hash_seq_search(&status)) != NULL)
	{
		Datum		values[ZK_LOCK_STATS_COLS];
		bool		nulls[ZK_LOCK_STATS_COLS] = {0};

		values[0] = CStringGetTextDatum(e->name);
		values[1] = Int64GetDatum(e->acquisitions);
		values[2] = Int64GetDatum(e->try_failures);
		values[3] = Int64GetDatum(e->timeouts);
		values[4] = Int64GetDatum(e->cancels);
		values[5] = Float8GetDatum(e->total_wait_ms);
		values[6] = Float8GetDatum(e->max_wait_ms);
		values[7] = Int32GetDatum(e->holders);
		values[8] = Int32GetDatum(e->waiters);
		values[9] = Int64GetDatum(e->lost);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(shared->lock);
	return (Datum) 0;
}

/* Forget the per-name counters; those of names in use start again at 0. */
Datum
zk_lock_stats_reset(PG_FUNCTION_ARGS)
{
	HASH_SEQ_STATUS status;
	LockStats  *e;

	require_shared();
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	hash_seq_init(&status, lock_stats);
	while ((e = hash_seq_search(&status)) != NULL)
	{
		if (e->holders == 0 && e->waiters == 0)
			hash_search(lock_stats, e->name, HASH_REMOVE, NULL);
		else
		{
			int32		holders = e->holders;
			int32		waiters = e->waiters;

			clear_counts(e);
			e->holders = holders;
			e->waiters = waiters;
		}
	}
	for (int i = 0; i < NSESSION_COUNTERS; i++)
		pg_atomic_write_u64(&shared->counters[i], 0);
	for (int i = 0; i < STATS_BARRIER_KINDS; i++)
	{
		int32		waiting = shared->barriers[i].waiting;

		memset(&shared->barriers[i], 0, sizeof(BarrierStats));
		shared->barriers[i].waiting = waiting;
	}
	shared->reset_at = GetCurrentTimestamp();
	LWLockRelease(shared->lock);
	PG_RETURN_VOID();
}

#define ZK_BARRIER_STATS_COLS 7

/* zk_barrier_stats: one row per kind of wait. */
Datum
zk_barrier_stats(PG_FUNCTION_ARGS)
{
	static const char *const kinds[] = {
		[STATS_GATE] = "gate",
		[STATS_ENTER] = "enter",
		[STATS_LEAVE] = "leave",
	};
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	require_shared();
	InitMaterializedSRF(fcinfo, 0);
	LWLockAcquire(shared->lock, LW_SHARED);
	for (int i = 0; i < STATS_BARRIER_KINDS; i++)
	{
		BarrierStats *b = &shared->barriers[i];
		Datum		values[ZK_BARRIER_STATS_COLS];
		bool		nulls[ZK_BARRIER_STATS_COLS] = {0};

		values[0] = CStringGetTextDatum(kinds[i]);
		values[1] = Int64GetDatum(b->passed);
		values[2] = Int64GetDatum(b->timeouts);
		values[3] = Int64GetDatum(b->cancels);
		values[4] = Float8GetDatum(b->total_wait_ms);
		values[5] = Float8GetDatum(b->max_wait_ms);
		values[6] = Int32GetDatum(b->waiting);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(shared->lock);
	return (Datum) 0;
}

/*
 * The counters in the order of zk_session_stats' columns; then, from 1.5,
 * the live records of the shared area (not reset); then stats_reset.
 */
static const int session_columns[] = {
	SESSIONS_OPENED, SESSIONS_LOST, BRIDGE_RECONNECTS, BRIDGE_CREATES,
	BRIDGE_DELETES, BRIDGE_CHILDREN_LISTS, BRIDGE_GETS, BRIDGE_WATCHES,
	BRIDGE_WATCH_REMOVALS, BRIDGE_SYNCS, BRIDGE_SETS, DEADLOCK_CHECKS,
	DEADLOCKS,
	/* 1.5 */
	DEADLOCK_MEMBERS, DEADLOCK_CYCLES, DEADLOCK_VICTIMS,
};

#define SESSION_COLUMNS_1_4 13

static Datum
session_stats(FunctionCallInfo fcinfo, int ncounters, bool records)
{
	TupleDesc	desc;
	Datum		values[lengthof(session_columns) + 2];
	bool		nulls[lengthof(session_columns) + 2] = {0};
	int			n = 0;

	require_shared();
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	stats_flush();
	for (; n < ncounters; n++)
		values[n] = Int64GetDatum((int64) pg_atomic_read_u64(&shared->counters[session_columns[n]]));
	if (records)
		values[n++] = Int64GetDatum((int64) pg_atomic_read_u64(&zk_shared->live_records));
	LWLockAcquire(shared->lock, LW_SHARED);
	values[n++] = TimestampTzGetDatum(shared->reset_at);
	LWLockRelease(shared->lock);
	if (n != desc->natts)
		elog(ERROR, "zk_session_stats is declared with %d columns, not %d: run ALTER EXTENSION zklock UPDATE",
			 desc->natts, n);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}

/* As the 1.4 SQL declares it, until ALTER EXTENSION zklock UPDATE. */
Datum
zk_session_stats(PG_FUNCTION_ARGS)
{
	return session_stats(fcinfo, SESSION_COLUMNS_1_4, false);
}

Datum
zk_session_stats_1_5(PG_FUNCTION_ARGS)
{
	return session_stats(fcinfo, lengthof(session_columns), true);
}
