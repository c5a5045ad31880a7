/*
 * zk_shared.c
 *	  The shared memory of backends and the session worker: its size, its
 *	  set-up in the postmaster, and each process's attachment to it.
 *
 * Requests and replies are of any size (a listing of ten thousand lock
 * nodes), so they live in a dynamic shared area: it begins in the main
 * shared memory, made by the postmaster, which may not make DSM segments
 * itself, and grows into segments that the backends and the worker make.
 */
#include "postgres.h"

#include "access/twophase.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/memutils.h"

#include "compat.h"
#include "zk_shared.h"

/* The area's part in the main shared memory: small replies never leave it. */
#define ZK_AREA_IN_PLACE (1024 * 1024)
/*
 * The most it may grow to: a listing of zk_cluster_locks takes about 200
 * bytes a lock; a request beyond fails with "out of memory", not the server.
 */
#define ZK_AREA_MAX ((size_t) 512 * 1024 * 1024)

/*
 * Each record begins with a head that gives its size, so that zk_shared_free
 * can poison all of it: a process that still uses a record after it was
 * freed (a reference it should not have had) finds SHARED_HELD_MAGIC gone
 * and stops there (zk_held_get), instead of writing into the free list or
 * into the record of whoever takes the space next.  Debian has no server
 * built with assertions, and neither ASan nor valgrind sees a write from
 * another process into a DSA chunk, so this is on in every build.
 */
typedef struct RecordHead
{
	uint32		magic;			/* RECORD_LIVE while allocated */
	uint32		size;			/* of what follows the head */
} RecordHead;

#define RECORD_HEAD MAXALIGN(sizeof(RecordHead))
#define RECORD_LIVE 0x5A4B5245	/* "ZKRE" */
#define RECORD_POISON 0x7F		/* as CLOBBER_FREED_MEMORY writes */

ZkShared   *zk_shared = NULL;
dsa_area   *zk_area = NULL;

static void *area_place = NULL;

/* In the postmaster: whether it took the session worker (zk_shared_init). */
static bool worker_registered = false;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* Every PGPROC may be a backend that uses zklock; indexed by its number. */
static int
slot_count(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
}

static Size
shared_size(void)
{
	return add_size(offsetof(ZkShared, slots),
					mul_size(slot_count(), sizeof(ZkSlot)));
}

static void
zk_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(add_size(MAXALIGN(shared_size()), ZK_AREA_IN_PLACE));
}

static void
zk_shmem_startup(void)
{
	bool		found;
	bool		area_found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	zk_shared = ShmemInitStruct("zklock session", shared_size(), &found);
	area_place = ShmemInitStruct("zklock requests", ZK_AREA_IN_PLACE, &area_found);
	if (!found)
	{
		dsa_area   *area;

		memset(zk_shared, 0, shared_size());
		SpinLockInit(&zk_shared->mutex);
		pg_atomic_init_u32(&zk_shared->previous_session, 0);
		pg_atomic_init_u64(&zk_shared->queue, InvalidDsaPointer);
		pg_atomic_init_u64(&zk_shared->live_records, 0);
		pg_atomic_init_u32(&zk_shared->requests_in_flight, 0);
		pg_atomic_init_u32(&zk_shared->requests_queued, 0);
		zk_shared->nslots = slot_count();
		zk_shared->worker_registered = worker_registered;
		for (int i = 0; i < ZK_KNOWN_PARENTS; i++)
			pg_atomic_init_u64(&zk_shared->known_parents[i], 0);
		for (int i = 0; i < zk_shared->nslots; i++)
			for (int c = 0; c < BRIDGE_NCOUNTERS; c++)
				pg_atomic_init_u64(&zk_shared->slots[i].counts[c], 0);
		zk_shared->dsa_tranche = zk_new_tranche("zklock_requests");
		area = dsa_create_in_place(area_place, ZK_AREA_IN_PLACE,
								   zk_shared->dsa_tranche, NULL);
		dsa_set_size_limit(area, ZK_AREA_MAX);
		/* It lives as long as the shared memory, whoever attaches. */
		dsa_pin(area);
		dsa_detach(area);
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * _PG_init under shared_preload_libraries; worker: whether the postmaster
 * took the session worker, for backends to say at once when it did not.
 */
void
zk_shared_init(bool worker)
{
	worker_registered = worker;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = zk_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = zk_shmem_startup;
}

/*
 * Map the area in this process, for the rest of its life.  ERROR (55000)
 * if zklock was not preloaded, or runs in binary-upgrade or single-user mode
 * (_PG_init): nothing of it can work then.
 */
void
zk_shared_attach(void)
{
	MemoryContext old;

	if (zk_area != NULL)
		return;
	if (zk_shared == NULL && IsBinaryUpgrade)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("zklock does not run in binary-upgrade mode"),
				 errdetail("The server was started with -b, as pg_upgrade does: zklock opens no ZooKeeper session there, and takes no lock."),
				 errhint("Use zklock once the upgraded server runs normally.")));
	if (zk_shared == NULL && !IsUnderPostmaster)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("zklock does not run in single-user mode"),
				 errdetail("The server was started with --single: no postmaster starts zklock's session worker, so no ZooKeeper session is open, and no lock is taken."),
				 errhint("Use zklock once the server runs under its postmaster; the fences zk_lock_fence(resource, token) and zk_lock_fence_trigger() work here.")));
	if (zk_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("zklock must be loaded via shared_preload_libraries"),
				 errhint("Add zklock to shared_preload_libraries and restart the server.")));
	zk_register_tranche(zk_shared->dsa_tranche, "zklock_requests");
	old = MemoryContextSwitchTo(TopMemoryContext);
	zk_area = dsa_attach_in_place(area_place, NULL);
	MemoryContextSwitchTo(old);
	dsa_pin_mapping(zk_area);
}

/*
 * The SharedHeld at dp, which the caller holds a reference to.  PANIC if it
 * was freed: the shared memory is not what zklock's reference counts say,
 * and writing on would corrupt the area's free list or another backend's
 * lock (see RecordHead).
 */
SharedHeld *
zk_held_get(dsa_pointer dp)
{
	SharedHeld *sh = dsa_get_address(zk_area, dp);

	if (sh->magic != SHARED_HELD_MAGIC)
		elog(PANIC, "zklock: lock record " DSA_POINTER_FORMAT " used after it was freed",
			 dp);
	return sh;
}

/*
 * Drop a reference to a SharedHeld; the last one frees it.  The backend's
 * own reference (backends: true) is dropped once, by the backend when it
 * lets go of the node, or by the worker for a backend that went without
 * doing so; the lock is not the backend's any more from then on.
 */
void
zk_held_unref(dsa_pointer dp, bool backends)
{
	SharedHeld *sh = zk_held_get(dp);
	bool		last = false;

	SpinLockAcquire(&zk_shared->mutex);
	if (!backends)
		last = --sh->refs == 0;
	else if (!sh->backend_let_go)
	{
		sh->backend_let_go = true;
		sh->released = true;
		last = --sh->refs == 0;
	}
	SpinLockRelease(&zk_shared->mutex);
	if (last)
		zk_shared_free(dp);
}

/*
 * Every record of the area is allocated and freed here, so that the live
 * ones are counted (zk_session_stats.shared_records): a leak shows.
 */
dsa_pointer
zk_shared_alloc(Size size, int flags)
{
	dsa_pointer dp = dsa_allocate_extended(zk_area, RECORD_HEAD + size, flags);
	RecordHead *head;

	if (!DsaPointerIsValid(dp))
		return dp;
	head = dsa_get_address(zk_area, dp);
	head->magic = RECORD_LIVE;
	head->size = size;
	pg_atomic_fetch_add_u64(&zk_shared->live_records, 1);
	/* An allocation never spans segments: the offset stays in this one. */
	return dp + RECORD_HEAD;
}

/* Poisoned before it goes back to the area; a second free fails loudly. */
void
zk_shared_free(dsa_pointer dp)
{
	dsa_pointer start = dp - RECORD_HEAD;
	RecordHead *head = dsa_get_address(zk_area, start);

	if (head->magic != RECORD_LIVE)
		elog(PANIC, "zklock: shared record " DSA_POINTER_FORMAT " freed twice", dp);
	memset(head, RECORD_POISON, RECORD_HEAD + head->size);
	dsa_free(zk_area, start);
	pg_atomic_fetch_sub_u64(&zk_shared->live_records, 1);
}

/*
 * A wait event set, in TopMemoryContext, with this process's latch and
 * postmaster death (which exits) in it; room for extra more events.
 */
WaitEventSet *
zk_latch_wait_set(int extra)
{
	WaitEventSet *set;

#if PG_VERSION_NUM >= 170000
	set = CreateWaitEventSet(NULL, 2 + extra);
#else
	set = CreateWaitEventSet(TopMemoryContext, 2 + extra);
#endif
	AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	return set;
}

void
zk_wake(Latch *latch)
{
	if (latch != NULL)
		SetLatch(latch);
}
