/*
 * zk_bridge.c
 *	  A backend's side of the session worker: it queues requests in shared
 *	  memory, waits on its own latch for the replies, and reads the state of
 *	  the server's ZooKeeper session that the worker publishes.
 *
 * No ZooKeeper handle and no foreign thread live in a backend.  Every wait
 * here is a latch wait, so cancel, statement_timeout, lock_timeout,
 * termination and postmaster death end it like any other.
 *
 * A request the backend gives up on is the worker's to finish: a node it
 * created is deleted, a watch it set is removed, and a create whose reply
 * was lost is looked for by the attempt tag in its name.  When the backend
 * exits, the worker deletes whatever it still owns (zk_worker.c).
 */
#include "postgres.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/ilist.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "zk_bridge.h"
#include "zk_shared.h"

/* How long an exiting backend waits for the worker to delete its nodes. */
#define EXIT_CLEANUP_MS 3000

static ZkSlot *my_slot = NULL;
static int	my_slot_no = -1;
static uint32 my_incarnation;
static WaitEventSet *wait_set = NULL;
static bool detached = false;	/* exiting: the worker undoes the rest */

/*
 * The backend's own mapping of a SharedHeld, and its reference to it.  At
 * exit the backend lets go of every one it still has (forsake_held): from
 * then on the worker may free the record, and the HeldWatch (sh NULL) reads
 * as a lock let go of, without a look at shared memory.
 */
struct HeldWatch
{
	dlist_node	live;			/* in live_held while sh is set */
	dsa_pointer dp;
	SharedHeld *sh;
	uint64		stamp;			/* sh->stamp */
};

static dlist_head live_held = DLIST_STATIC_INIT(live_held);

/* Records made by this backend so far: part of each one's stamp. */
static uint32 held_made = 0;

/* The shared record of a node the backend creates; NULL if memory ran out. */
static HeldWatch *
held_new(const char *data)
{
	HeldWatch  *hw = malloc(sizeof(HeldWatch));
	int			len = strlen(data);

	if (hw == NULL)
		return NULL;
	hw->dp = zk_shared_alloc(offsetof(SharedHeld, data) + len + 1,
							 DSA_ALLOC_ZERO | DSA_ALLOC_NO_OOM);
	if (!DsaPointerIsValid(hw->dp))
	{
		free(hw);
		return NULL;
	}
	hw->sh = dsa_get_address(zk_area, hw->dp);
	/* Unique among live backends: a record reused by another's differs. */
	hw->stamp = ((uint64) MyProcPid << 32) | ++held_made;
	hw->sh->magic = SHARED_HELD_MAGIC;
	hw->sh->stamp = hw->stamp;
	hw->sh->refs = 2;			/* the backend's, and the worker's */
	hw->sh->data_len = len;
	memcpy(hw->sh->data, data, len + 1);
	dlist_push_head(&live_held, &hw->live);
	return hw;
}

/*
 * hw's record, NULL once the backend let go of it.  PANIC if the record is
 * not the one hw made: freed, and perhaps another backend's now.
 */
static SharedHeld *
held_record(HeldWatch *hw)
{
	SharedHeld *sh;

	if (hw == NULL || hw->sh == NULL)
		return NULL;
	sh = zk_held_get(hw->dp);
	if (sh->stamp != hw->stamp)
		elog(PANIC, "zklock: lock record " DSA_POINTER_FORMAT " used after it was freed and reused",
			 hw->dp);
	return sh;
}

/* One that never reached the worker. */
static void
held_free(HeldWatch *hw)
{
	if (hw == NULL)
		return;
	dlist_delete(&hw->live);
	zk_shared_free(hw->dp);
	free(hw);
}

/*
 * At exit, before the worker is told: drop the backend's reference to every
 * record it still has (those of its session locks, of a create on its way,
 * of a transaction's locks whose abort comes later in the exit), as the
 * worker would for a backend gone without a word.  The worker frees them
 * once it is done with the nodes.
 */
static void
forsake_held(void)
{
	dlist_mutable_iter it;

	dlist_foreach_modify(it, &live_held)
	{
		HeldWatch  *hw = dlist_container(HeldWatch, live, it.cur);

		dlist_delete(&hw->live);
		zk_held_unref(hw->dp, true);
		hw->sh = NULL;
	}
}

/*
 * The requests whose shared part is this backend's to free, so that an exit
 * in the middle of a round trip (FATAL skips every PG_CATCH) leaves none.
 */
static ZkRequest *live_requests = NULL;

/*
 * The sending of the latest request counted in this backend's pending
 * deletes (a delete, or a create given up, which the worker undoes when its
 * reply comes): a wait for them is bounded from there, not from its own
 * start (bridge_deletes_pending).
 */
static int64_t last_counted_at = 0;

static void
live_add(ZkRequest *req)
{
	req->prev_live = NULL;
	req->next_live = live_requests;
	if (live_requests)
		live_requests->prev_live = req;
	live_requests = req;
}

/* Before the request is done: a done one is on no list. */
static void
live_remove(ZkRequest *req)
{
	if (req->prev_live)
		req->prev_live->next_live = req->next_live;
	else
		live_requests = req->next_live;
	if (req->next_live)
		req->next_live->prev_live = req->prev_live;
}

/*
 * At exit: a request still on its way is the worker's to free (and undo)
 * when its reply comes; an answered one that nobody read is freed here.
 */
static void
forsake_live_requests(void)
{
	while (live_requests != NULL)
	{
		ZkRequest  *req = live_requests;
		dsa_pointer dp = req->shared;
		SharedRequest *sr = dsa_get_address(zk_area, dp);
		uint32		expected = REQ_QUEUED;

		live_remove(req);
		/* Its shared part is not this backend's any more. */
		req->done = true;
		req->shared = InvalidDsaPointer;
		if (!pg_atomic_compare_exchange_u32(&sr->state, &expected, REQ_ABANDONED))
		{
			pg_read_barrier();
			if (DsaPointerIsValid(sr->result))
				zk_shared_free(sr->result);
			zk_shared_free(dp);
		}
	}
}


/*
 * Milliseconds on a clock that keeps running while the machine is suspended
 * (CLOCK_BOOTTIME; CLOCK_MONOTONIC stops then): ZooKeeper's servers go on
 * counting a session's silence during a VM's suspension, and so must we.
 */
int64_t
bridge_now_ms(void)
{
	struct timespec ts;

#ifdef CLOCK_BOOTTIME
	clock_gettime(CLOCK_BOOTTIME, &ts);
#else
	clock_gettime(CLOCK_MONOTONIC, &ts);
#endif
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the backend's slot ---- */

/*
 * At exit: the worker deletes every node this backend still owns (its locks,
 * a create still on its way), and is waited for, briefly, so that the other
 * nodes see the locks free when the disconnect is done.
 *
 * This runs before PostgreSQL aborts a transaction left open
 * (ShutdownPostgres was registered before zklock's first call, and exit
 * callbacks run last first), or an earlier exit callback runs one of its
 * own (the temporary tables' cleanup).  So the backend lets go of all it has
 * in the shared area first, and zklock does nothing in it from then on
 * (bridge_attached): the abort's releases would otherwise write into records
 * that the worker freed meanwhile, and that another backend's lock may use.
 */
static void
bridge_detach(int code, Datum arg)
{
	int64_t		deadline = bridge_now_ms() + EXIT_CLEANUP_MS;

	forsake_live_requests();
	forsake_held();

	SpinLockAcquire(&zk_shared->mutex);
	my_slot->exiting = true;
	zk_shared->slots_changed = true;
	SpinLockRelease(&zk_shared->mutex);
	zk_wake(zk_shared->worker_latch);

	for (;;)
	{
		bool		cleaned;
		bool		worker;
		int64_t		left = deadline - bridge_now_ms();

		/* Disconnected, the worker deletes them once it can: no waiting. */
		SpinLockAcquire(&zk_shared->mutex);
		cleaned = my_slot->cleaned;
		worker = zk_shared->worker_pid != 0 && zk_shared->generation != 0 &&
			zk_shared->session.zk_state == ZOO_CONNECTED_STATE;
		SpinLockRelease(&zk_shared->mutex);
		if (cleaned || !worker || left <= 0)
			break;
		bridge_wait_quietly(left);
	}

	SpinLockAcquire(&zk_shared->mutex);
	my_slot->pid = 0;
	my_slot->latch = NULL;
	my_slot->committing = 0;
	SpinLockRelease(&zk_shared->mutex);
	detached = true;
}

/*
 * Take this backend's slot, named by its PGPROC; everything the worker does
 * for it is told apart from a predecessor's by the incarnation.
 */
void
bridge_attach(void)
{
	uint64		bits;
	char		owner[ZK_OWNER_BACKEND_LEN + 1];

	if (my_slot != NULL)
		return;
	zk_shared_attach();

	if (!pg_strong_random(&bits, sizeof(bits)))
		bits = ((uint64) MyProcPid << 32) ^ (uint64) MyStartTime;
	snprintf(owner, sizeof(owner), "%08x-%04x",
			 (uint32) (bits >> 32), (uint32) (bits >> 16) & 0xFFFF);

	wait_set = zk_latch_wait_set(0);

	my_slot_no = ZK_MY_PROC_NUMBER;
	my_slot = &zk_shared->slots[my_slot_no];
	for (int c = 0; c < BRIDGE_NCOUNTERS; c++)
		pg_atomic_write_u64(&my_slot->counts[c], 0);
	SpinLockAcquire(&zk_shared->mutex);
	my_slot->pid = MyProcPid;
	my_incarnation = ++my_slot->incarnation;
	my_slot->latch = MyLatch;
	memcpy(my_slot->owner, owner, sizeof(owner));
	my_slot->exiting = false;
	my_slot->cleaned = false;
	my_slot->watch_events = 0;
	my_slot->exists_events = 0;
	my_slot->poked = false;
	my_slot->deletes_pending = 0;
	my_slot->held_deletions = 0;
	my_slot->release_requests = 0;
	my_slot->revocable = false;
	my_slot->quiet = false;
	my_slot->committing = 0;
	my_slot->revoke_signalled = false;
	my_slot->barrier_phase = BARRIER_INSIDE;
	my_slot->barrier_node[0] = '\0';
	/* What a predecessor in the slot left is the worker's to end at once. */
	zk_shared->slots_changed = true;
	SpinLockRelease(&zk_shared->mutex);

	before_shmem_exit(bridge_detach, (Datum) 0);
}

/*
 * Whether this backend has used zklock (and so may hold locks), and is not
 * exiting: once detached, its nodes are the worker's to delete.
 */
bool
bridge_attached(void)
{
	return my_slot != NULL && !detached;
}

/* The generation of the open session, 0 if none. */
static uint64
current_generation(void)
{
	uint64		gen;

	SpinLockAcquire(&zk_shared->mutex);
	gen = zk_shared->generation;
	SpinLockRelease(&zk_shared->mutex);
	return gen;
}

/* The backend's own part of its nodes' names (see lock_node_owner). */
const char *
bridge_owner(void)
{
	return my_slot->owner;
}

/*
 * The pid of this server's backend whose nodes' names in the open session
 * begin with owner, or 0 if none of ours does.
 */
pid_t
bridge_local_pid(const char *owner)
{
	char		current[ZK_OWNER_LEN + 1];
	pid_t		pid = 0;

	lock_node_owner(current, owner, current_generation());
	if (strncmp(current, owner, ZK_OWNER_LEN) != 0)
		return 0;
	SpinLockAcquire(&zk_shared->mutex);
	for (int i = 0; i < zk_shared->nslots && pid == 0; i++)
		if (zk_shared->slots[i].pid != 0 &&
			strncmp(zk_shared->slots[i].owner, owner, ZK_OWNER_BACKEND_LEN) == 0)
			pid = zk_shared->slots[i].pid;
	SpinLockRelease(&zk_shared->mutex);
	return pid;
}

/* ---- counting ---- */

/* What each kind of request counts as in zk_session_stats. */
static const int counter_of[] = {
	[ZKREQ_CREATE] = BRIDGE_CREATES,
	[ZKREQ_CHILDREN] = BRIDGE_CHILDREN_LISTS,
	[ZKREQ_WATCH] = BRIDGE_WATCHES,
	[ZKREQ_GET] = BRIDGE_GETS,
	[ZKREQ_SYNC] = BRIDGE_SYNCS,
	[ZKREQ_EXISTS] = BRIDGE_GETS,
	[ZKREQ_SET] = BRIDGE_SETS,
	[ZKREQ_POKE_WATCH] = BRIDGE_WATCHES,
	[ZKREQ_EXISTS_WATCH] = BRIDGE_WATCHES,
	[ZKREQ_DELETE_SHARED] = BRIDGE_DELETES,
	[ZKREQ_DELETE] = BRIDGE_DELETES,
	[ZKREQ_DELETE_TAGGED] = BRIDGE_CHILDREN_LISTS,
	[ZKREQ_UNWATCH] = BRIDGE_WATCH_REMOVALS,
	[ZKREQ_HELD_WATCH] = BRIDGE_WATCHES,
};

/* Move the counts of this backend's requests into counts_out[]. */
void
bridge_take_counts(uint64_t *counts_out)
{
	for (int i = 0; i < BRIDGE_NCOUNTERS; i++)
		counts_out[i] = my_slot ? pg_atomic_exchange_u64(&my_slot->counts[i], 0) : 0;
}

/* ---- requests ---- */

/*
 * A request in the shared area, not yet queued; InvalidDsaPointer if the
 * area is full and quiet (one-way requests, from transaction callbacks),
 * else ERROR then.
 */
static dsa_pointer
shared_request(ZkRequestKind kind, const char *path, const char *tag,
			   const char *data, int datalen, int arg, bool oneway)
{
	size_t		plen = strlen(path);
	size_t		tlen = tag ? strlen(tag) : 0;
	Size		size = offsetof(SharedRequest, payload) + plen + 1 + tlen + 1 +
		datalen + 1;
	dsa_pointer dp;
	SharedRequest *sr;

	dp = zk_shared_alloc(size,
							   DSA_ALLOC_ZERO | (oneway ? DSA_ALLOC_NO_OOM : 0));
	if (!DsaPointerIsValid(dp))
		return dp;
	sr = dsa_get_address(zk_area, dp);
	sr->slot = my_slot_no;
	sr->incarnation = my_incarnation;
	sr->kind = kind;
	sr->epoch = current_generation();
	sr->sent_at = bridge_now_ms();
	pg_atomic_init_u32(&sr->state, oneway ? REQ_ABANDONED : REQ_QUEUED);
	sr->oneway = oneway;
	sr->arg = arg;
	sr->held = InvalidDsaPointer;
	sr->result = InvalidDsaPointer;
	memcpy(sr->payload, path, plen + 1);
	sr->tag_off = plen + 1;
	if (tag)
		memcpy(sr->payload + sr->tag_off, tag, tlen + 1);
	sr->data_off = sr->tag_off + tlen + 1;
	sr->data_len = datalen;
	if (datalen > 0)
		memcpy(sr->payload + sr->data_off, data, datalen);
	return dp;
}

/* Hand a request to the worker: pushed on a lock-free list it empties. */
static void
queue_request(dsa_pointer dp, SharedRequest *sr)
{
	uint64		head = pg_atomic_read_u64(&zk_shared->queue);

	pg_atomic_fetch_add_u64(&my_slot->counts[counter_of[sr->kind]], 1);
	do
		sr->next = (dsa_pointer) head;
	while (!pg_atomic_compare_exchange_u64(&zk_shared->queue, &head, (uint64) dp));
	zk_wake(zk_shared->worker_latch);
}

/*
 * A request the backend waits for; a create may take the held record of the
 * node it makes along (hw, or NULL), which is the request's from now on.
 */
static ZkRequest *
request_new(ZkRequestKind kind, const char *path, const char *tag,
			const char *data, int datalen, int arg, HeldWatch *hw)
{
	ZkRequest  *req = calloc(1, sizeof(ZkRequest));
	dsa_pointer dp;
	SharedRequest *sr;

	if (req == NULL || (req->path = strdup(path)) == NULL ||
		(tag != NULL && (req->tag = strdup(tag)) == NULL))
	{
		if (req)
			free(req->path);
		free(req);
		held_free(hw);
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	}
	PG_TRY();
	{
		dp = shared_request(kind, path, tag, data, datalen, arg, false);
	}
	PG_CATCH();
	{
		free(req->path);
		free(req->tag);
		free(req);
		held_free(hw);
		PG_RE_THROW();
	}
	PG_END_TRY();
	sr = dsa_get_address(zk_area, dp);
	if (hw != NULL)
		sr->held = hw->dp;
	req->held = hw;
	req->kind = kind;
	req->shared = dp;
	req->epoch = sr->epoch;
	req->sent_at = sr->sent_at;
	req->tagged = tag != NULL;
	live_add(req);
	queue_request(dp, sr);
	return req;
}

/* A request nobody waits for; with counted, in the pending deletes. */
static bool
request_oneway(ZkRequestKind kind, const char *path, const char *tag,
			   int watch_type, dsa_pointer held, bool counted)
{
	dsa_pointer dp;
	SharedRequest *sr;

	if (detached)
		return false;
	dp = shared_request(kind, path, tag, NULL, 0, watch_type, true);
	if (!DsaPointerIsValid(dp))
	{
		ereport(WARNING,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of shared memory while asking for a cleanup of ZooKeeper node \"%s\"", path),
				 errdetail("The node goes when the server's ZooKeeper session ends.")));
		return false;
	}
	sr = dsa_get_address(zk_area, dp);
	sr->held = held;
	if (counted)
	{
		sr->counted = true;
		SpinLockAcquire(&zk_shared->mutex);
		my_slot->deletes_pending++;
		SpinLockRelease(&zk_shared->mutex);
		last_counted_at = Max(last_counted_at, sr->sent_at);
	}
	queue_request(dp, sr);
	return true;
}

ZkRequest *
bridge_create(const char *path, const char *data, int datalen, int mode,
			  const char *tag)
{
	return request_new(ZKREQ_CREATE, path, tag, data, datalen, mode, NULL);
}

ZkRequest *
bridge_get_children(const char *path)
{
	return request_new(ZKREQ_CHILDREN, path, NULL, NULL, 0, 0, NULL);
}

/*
 * A get-data watch on a node (unlike an exists watch it is not left armed if
 * the node is gone), or a children watch on a parent.
 */
ZkRequest *
bridge_watch(const char *path, int watch_type)
{
	ZkRequest  *req = request_new(ZKREQ_WATCH, path, NULL, NULL, 0, watch_type, NULL);

	req->watch_type = watch_type;
	return req;
}

ZkRequest *
bridge_get(const char *path)
{
	return request_new(ZKREQ_GET, path, NULL, NULL, 0, 0, NULL);
}

ZkRequest *
bridge_sync(const char *path)
{
	return request_new(ZKREQ_SYNC, path, NULL, NULL, 0, 0, NULL);
}

ZkRequest *
bridge_exists(const char *path)
{
	return request_new(ZKREQ_EXISTS, path, NULL, NULL, 0, 0, NULL);
}

/* Set a node's data if its version is still version (-1: any). */
ZkRequest *
bridge_set(const char *path, const char *data, int datalen, int version)
{
	return request_new(ZKREQ_SET, path, NULL, data, datalen, version, NULL);
}

/*
 * An exists watch: set also on a node that does not exist (rc ZNONODE), and
 * then fired only by its creation.  The reply carries the czxid of a node
 * that exists.
 */
ZkRequest *
bridge_watch_exists(const char *path)
{
	ZkRequest  *req = request_new(ZKREQ_EXISTS_WATCH, path, NULL, NULL, 0,
								  ZWATCHTYPE_DATA, NULL);

	req->watch_type = ZWATCHTYPE_DATA;
	return req;
}

/*
 * Delete a node that is no backend's own (a barrier's ready, a gate), if its
 * version is still version (-1: any), and wait for the answer.  The worker
 * never deletes a lock node this way.
 */
ZkRequest *
bridge_delete_shared(const char *path, int version)
{
	return request_new(ZKREQ_DELETE_SHARED, path, NULL, NULL, 0, version, NULL);
}

/* A data watch on the wait this backend published, for pokes. */
ZkRequest *
bridge_watch_pokes(const char *path)
{
	SpinLockAcquire(&zk_shared->mutex);
	my_slot->poked = false;
	SpinLockRelease(&zk_shared->mutex);
	return request_new(ZKREQ_POKE_WATCH, path, NULL, NULL, 0, 0, NULL);
}

/* Whether a poke came since the last call. */
bool
bridge_take_poke(void)
{
	bool		was;

	SpinLockAcquire(&zk_shared->mutex);
	was = my_slot->poked;
	my_slot->poked = false;
	SpinLockRelease(&zk_shared->mutex);
	return was;
}

static char *
copy_or_null(const char *src, size_t len)
{
	char	   *dst = malloc(len + 1);

	if (dst != NULL)
	{
		memcpy(dst, src, len);
		dst[len] = '\0';
	}
	return dst;
}

/* Move a reply into the backend's own memory and free its shared copy. */
static void
take_reply(ZkRequest *req, SharedRequest *sr)
{
	char	   *result = NULL;

	req->rc = sr->rc;
	req->czxid = sr->czxid;
	req->version = sr->version;
	if (DsaPointerIsValid(sr->result))
		result = dsa_get_address(zk_area, sr->result);

	if (req->rc == ZOK && result != NULL)
	{
		switch (req->kind)
		{
			case ZKREQ_CREATE:
				req->created = copy_or_null(result, sr->result_len);
				if (req->created == NULL)
				{
					/* We cannot hand the node over; do not leave it behind. */
					bridge_delete_node(result);
					req->rc = ZSYSTEMERROR;
				}
				break;
			case ZKREQ_GET:
				req->data = copy_or_null(result, sr->result_len);
				req->data_len = sr->result_len;
				if (req->data == NULL)
					req->rc = ZSYSTEMERROR;
				break;
			case ZKREQ_CHILDREN:
				{
					char	   *block = malloc(sizeof(char *) * sr->nchildren +
											   sr->result_len + 1);

					if (block == NULL)
					{
						req->rc = ZSYSTEMERROR;
						break;
					}
					req->children = (char **) block;
					block += sizeof(char *) * sr->nchildren;
					memcpy(block, result, sr->result_len);
					for (int i = 0; i < sr->nchildren; i++)
					{
						req->children[i] = block;
						block += strlen(block) + 1;
					}
					req->nchildren = sr->nchildren;
				}
				break;
			default:
				break;
		}
	}
	if (DsaPointerIsValid(sr->result))
		zk_shared_free(sr->result);
	zk_shared_free(req->shared);
	live_remove(req);
	req->shared = InvalidDsaPointer;
	req->done = true;
}

bool
bridge_done(ZkRequest *req)
{
	SharedRequest *sr;

	if (req->done)
		return true;
	sr = dsa_get_address(zk_area, req->shared);
	if (pg_atomic_read_u32(&sr->state) != REQ_DONE)
		return false;
	pg_read_barrier();
	take_reply(req, sr);
	return true;
}

static void
request_destroy(ZkRequest *req)
{
	if (!req->done)
		live_remove(req);
	bridge_unwatch_held(req->held);
	free(req->path);
	free(req->tag);
	free(req->created);
	free(req->children);
	free(req->data);
	free(req);
}

/* The results of a finished request have been used. */
void
bridge_free(ZkRequest *req)
{
	Assert(req->done);
	request_destroy(req);
}

/*
 * Nobody will read this request's results; undo what it did.  Still on its
 * way, it is the worker's to undo when the reply comes.  A create of ours
 * counts as a delete pending from now on, so that a release, COMMIT or
 * ROLLBACK that waits for the deletes waits for it too (a cancelled
 * waiter's node must not outlive its ROLLBACK).
 */
void
bridge_abandon(ZkRequest *req)
{
	if (!req->done)
	{
		SharedRequest *sr = dsa_get_address(zk_area, req->shared);
		bool		count_it = req->kind == ZKREQ_CREATE && req->tagged;
		uint32		expected = REQ_QUEUED;

		if (count_it)
		{
			SpinLockAcquire(&zk_shared->mutex);
			my_slot->deletes_pending++;
			SpinLockRelease(&zk_shared->mutex);
			sr->counted = true;
			last_counted_at = Max(last_counted_at, req->sent_at);
		}
		if (pg_atomic_compare_exchange_u32(&sr->state, &expected, REQ_ABANDONED))
		{
			request_destroy(req);
			return;
		}
		/* The reply came meanwhile: ours to undo after all. */
		if (count_it)
		{
			SpinLockAcquire(&zk_shared->mutex);
			my_slot->deletes_pending--;
			SpinLockRelease(&zk_shared->mutex);
		}
		pg_read_barrier();
		take_reply(req, sr);
	}

	if (req->kind == ZKREQ_CREATE && req->tagged)
	{
		if (req->rc == ZOK)
			bridge_delete_node(req->created);
		else if (bridge_reply_lost(req->rc))
			bridge_delete_sibling_tagged(req->path, req->tag);
	}
	else if ((req->kind == ZKREQ_WATCH && req->rc == ZOK) ||
			 (req->kind == ZKREQ_EXISTS_WATCH &&
			  (req->rc == ZOK || req->rc == ZNONODE)))
		bridge_remove_watch(req->path, req->watch_type);
	request_destroy(req);
}

/*
 * Whether deletes of this backend's are pending; *sent_at gets the sending
 * of the latest one (of the create it undoes, for a create given up).
 */
bool
bridge_deletes_pending(int64_t *sent_at)
{
	bool		pending;

	*sent_at = last_counted_at;
	if (detached)
		return false;
	SpinLockAcquire(&zk_shared->mutex);
	pending = my_slot->deletes_pending > 0;
	SpinLockRelease(&zk_shared->mutex);
	return pending;
}

uint64_t
bridge_watch_events(void)
{
	uint64_t	n;

	SpinLockAcquire(&zk_shared->mutex);
	n = my_slot->watch_events;
	SpinLockRelease(&zk_shared->mutex);
	return n;
}

/*
 * What ends a wait for a watch: one of this backend's watches fired since
 * watch_events (a bridge_watch_events() count), or the session had an event
 * since session_events (a ZkSessionSnapshot's events).
 */
bool
bridge_woken_since(uint64_t watch_events, uint64_t session_events)
{
	bool		woken;

	SpinLockAcquire(&zk_shared->mutex);
	woken = my_slot->watch_events != watch_events ||
		zk_shared->session.events != session_events;
	SpinLockRelease(&zk_shared->mutex);
	return woken;
}

/*
 * How many of this backend's exists watches fired: an exists watch set on a
 * missing node fires only when the node is created.
 */
uint64_t
bridge_exists_events(void)
{
	uint64_t	n;

	SpinLockAcquire(&zk_shared->mutex);
	n = my_slot->exists_events;
	SpinLockRelease(&zk_shared->mutex);
	return n;
}

/*
 * Until when (bridge_now_ms) the open session provably lives, whoever leads
 * the ensemble: the worker's latest proof from a write's reply; 0: none yet
 * in this session.  *provable: what a write sent now would prove, 0: none
 * (worker_proof.c).
 */
int64_t
bridge_proof(int64_t *provable)
{
	int64_t		t;

	SpinLockAcquire(&zk_shared->mutex);
	t = zk_shared->proven_until;
	*provable = zk_shared->provable;
	SpinLockRelease(&zk_shared->mutex);
	return t;
}

/* ---- watches on the nodes the backend created ---- */

/*
 * Watch a node of the backend's found again after its create's reply was
 * lost (bridge_create_held watches the others), without waiting for the
 * reply.  data is what the node was created with.  NULL if memory ran out:
 * the node is then not watched.
 */
HeldWatch *
bridge_watch_held(const char *path, const char *data)
{
	HeldWatch  *hw = held_new(data);

	if (hw != NULL &&
		!request_oneway(ZKREQ_HELD_WATCH, path, NULL, ZWATCHTYPE_DATA,
						hw->dp, false))
	{
		held_free(hw);
		return NULL;
	}
	return hw;
}

/*
 * Create a lock's node (or a barrier member's: an ephemeral mode), and have
 * the worker watch it from the turn that reads the create's reply: a watch
 * the backend asked for after the reply cost the worker a wake-up and a
 * turn of its own in every acquisition.
 * Once the create succeeded, bridge_take_held gives the node's HeldWatch
 * (NULL if memory ran out: the node is then not watched).
 */
ZkRequest *
bridge_create_held(const char *path, const char *data, const char *tag,
				   int mode)
{
	return request_new(ZKREQ_CREATE, path, tag, data, strlen(data), mode,
					   held_new(data));
}

HeldWatch *
bridge_take_held(ZkRequest *req)
{
	HeldWatch  *hw = req->held;

	Assert(req->done && req->rc == ZOK);
	req->held = NULL;
	return hw;
}

/* The node now holds the lock: a release request for it is the holder's. */
void
bridge_held_granted(HeldWatch *hw)
{
	SharedHeld *sh = held_record(hw);

	if (sh == NULL)
		return;
	SpinLockAcquire(&zk_shared->mutex);
	sh->granted = true;
	SpinLockRelease(&zk_shared->mutex);
}

/*
 * Whether a release was requested for the node (its data was set to
 * __REVOKE__ since it was created): what the worker heard through the
 * watch, without a request.
 */
bool
bridge_held_release_requested(HeldWatch *hw)
{
	SharedHeld *sh = held_record(hw);
	bool		requested;

	if (sh == NULL)
		return false;
	SpinLockAcquire(&zk_shared->mutex);
	requested = sh->release_requested;
	SpinLockRelease(&zk_shared->mutex);
	return requested;
}

/* The backend raises the request as an interrupt: the worker need not. */
void
bridge_held_mark_interrupted(HeldWatch *hw)
{
	SharedHeld *sh = held_record(hw);

	if (sh == NULL)
		return;
	SpinLockAcquire(&zk_shared->mutex);
	sh->interrupted = true;
	SpinLockRelease(&zk_shared->mutex);
}

/* How many release requests the worker heard for this backend's nodes. */
uint64_t
bridge_release_requests(void)
{
	uint64_t	n;

	SpinLockAcquire(&zk_shared->mutex);
	n = my_slot->release_requests;
	SpinLockRelease(&zk_shared->mutex);
	return n;
}

/* Whether the worker interrupts this backend when it hears a request. */
void
bridge_set_revocable(bool revocable)
{
	SpinLockAcquire(&zk_shared->mutex);
	my_slot->revocable = revocable;
	SpinLockRelease(&zk_shared->mutex);
}

/*
 * Release the lock of a node: delete it, and learn from the server's answer
 * whether the lock was held until then (bridge_release_verdict).  The
 * backend keeps hw until it has read the verdict, then lets go of it with
 * bridge_unwatch_held.  False if the delete could not be asked for, or the
 * backend let go of the node at exit (the worker deletes it).
 */
bool
bridge_release_held(HeldWatch *hw, const char *path)
{
	SharedHeld *sh = held_record(hw);

	if (sh == NULL)
		return false;
	SpinLockAcquire(&zk_shared->mutex);
	sh->released = true;
	sh->refs++;					/* the delete's, until its verdict */
	SpinLockRelease(&zk_shared->mutex);
	if (request_oneway(ZKREQ_DELETE, path, NULL, 0, hw->dp, true))
		return true;
	SpinLockAcquire(&zk_shared->mutex);
	sh->refs--;
	sh->release_verdict = RELEASE_UNPROVEN;
	SpinLockRelease(&zk_shared->mutex);
	return false;
}

/* Unproven for a node let go of at exit: nobody waits for its delete. */
ReleaseVerdict
bridge_release_verdict(HeldWatch *hw)
{
	SharedHeld *sh = held_record(hw);
	ReleaseVerdict verdict;

	if (sh == NULL)
		return RELEASE_UNPROVEN;
	SpinLockAcquire(&zk_shared->mutex);
	verdict = sh->release_verdict;
	SpinLockRelease(&zk_shared->mutex);
	return verdict;
}

/*
 * Begin or end a section (COMMIT, a release) in which the worker must not
 * interrupt the backend for a release request.
 */
void
bridge_set_quiet(bool quiet)
{
	SpinLockAcquire(&zk_shared->mutex);
	my_slot->quiet = quiet;
	SpinLockRelease(&zk_shared->mutex);
}

/*
 * Whether the worker sent this backend REVOKE_SIGNAL since
 * the last call (it signals under the mutex: the signal is on its way).
 */
bool
bridge_take_revoke_signal(void)
{
	bool		signalled;

	SpinLockAcquire(&zk_shared->mutex);
	signalled = my_slot->revoke_signalled;
	my_slot->revoke_signalled = false;
	SpinLockRelease(&zk_shared->mutex);
	return signalled;
}

/*
 * The backend deletes the node itself now, or forgets it: nothing that
 * happens to the node is a loss any more.
 */
void
bridge_unwatch_held(HeldWatch *hw)
{
	if (hw == NULL)
		return;
	if (held_record(hw) != NULL)
	{
		dlist_delete(&hw->live);
		zk_held_unref(hw->dp, true);
	}
	free(hw);
}

/* Was the node deleted by somebody else? */
bool
bridge_held_deleted(HeldWatch *hw)
{
	SharedHeld *sh = held_record(hw);
	bool		deleted;

	if (sh == NULL)
		return false;
	SpinLockAcquire(&zk_shared->mutex);
	deleted = sh->deleted;
	SpinLockRelease(&zk_shared->mutex);
	return deleted;
}

/* A read found the node gone before its watch said so. */
void
bridge_held_mark_deleted(HeldWatch *hw)
{
	SharedHeld *sh = held_record(hw);

	if (sh == NULL)
		return;
	SpinLockAcquire(&zk_shared->mutex);
	if (!sh->released && !sh->deleted)
	{
		sh->deleted = true;
		my_slot->held_deletions++;
	}
	SpinLockRelease(&zk_shared->mutex);
}

/* The backend waits at a barrier as its member node (a tag), or not. */
void
bridge_set_barrier_wait(BarrierPhase phase, const char *node)
{
	SpinLockAcquire(&zk_shared->mutex);
	my_slot->barrier_phase = phase;
	strlcpy(my_slot->barrier_node, node ? node : "", sizeof(my_slot->barrier_node));
	SpinLockRelease(&zk_shared->mutex);
}

/*
 * Where this server's backend pid waits as the barrier member node (its
 * name), if it does: BARRIER_INSIDE otherwise.
 */
BarrierPhase
bridge_barrier_wait_of(pid_t pid, const char *node)
{
	BarrierPhase phase = BARRIER_INSIDE;

	SpinLockAcquire(&zk_shared->mutex);
	for (int i = 0; i < zk_shared->nslots; i++)
		if (zk_shared->slots[i].pid == pid &&
			strcmp(zk_shared->slots[i].barrier_node, node) == 0)
			phase = zk_shared->slots[i].barrier_phase;
	SpinLockRelease(&zk_shared->mutex);
	return phase;
}

/* How many of this backend's nodes were deleted by others so far. */
uint64_t
bridge_held_deletions(void)
{
	uint64_t	n;

	SpinLockAcquire(&zk_shared->mutex);
	n = my_slot->held_deletions;
	SpinLockRelease(&zk_shared->mutex);
	return n;
}

/* ---- cleanups the worker carries out ---- */

/*
 * Delete a node of this backend's without waiting; retried across
 * reconnects.  Safe in transaction callbacks: it raises no ERROR.
 */
void
bridge_delete_node(const char *path)
{
	request_oneway(ZKREQ_DELETE, path, NULL, 0, InvalidDsaPointer, true);
}

/* Delete this backend's child of parent that carries tag, if there is one. */
void
bridge_delete_tagged(const char *parent, const char *tag)
{
	request_oneway(ZKREQ_DELETE_TAGGED, parent, tag, 0, InvalidDsaPointer, true);
}

/* The same for a sibling of node (a late twin of a create whose reply was lost). */
void
bridge_delete_sibling_tagged(const char *node, const char *tag)
{
	char		parent[1024];
	const char *slash = strrchr(node, '/');
	size_t		len = slash ? (size_t) (slash - node) : 0;

	if (len >= sizeof(parent))
		return;
	memcpy(parent, node, len);
	parent[len] = '\0';
	bridge_delete_tagged(len > 0 ? parent : "/", tag);
}

/* Stop watching a node (or a parent's children) we no longer wait for. */
void
bridge_remove_watch(const char *path, int watch_type)
{
	request_oneway(ZKREQ_UNWATCH, path, NULL, watch_type, InvalidDsaPointer,
				   false);
}

/* ---- lock parents seen to exist, server-wide ---- */

/* A hint, lock-free: one slot per hash, overwritten on collision. */
static pg_atomic_uint64 *
parent_slot(uint64 key)
{
	return &zk_shared->known_parents[key % ZK_KNOWN_PARENTS];
}

bool
bridge_parent_known(uint64_t key)
{
	key |= 1;					/* 0 marks an empty slot */
	return pg_atomic_read_u64(parent_slot(key)) == key;
}

void
bridge_parent_seen(uint64_t key, bool exists)
{
	uint64		expected = key | 1;

	if (exists)
		pg_atomic_write_u64(parent_slot(expected), expected);
	else
		pg_atomic_compare_exchange_u64(parent_slot(expected), &expected, 0);
}

/* ---- waiting ---- */

/*
 * Sleep until the latch is set (a reply, a watch, the session changed) or
 * timeout_ms (-1: no limit) passes; then serve interrupts, so cancel,
 * statement_timeout, lock_timeout and termination all end a wait here.
 * Callers re-check their condition in a loop; the latch is reset only after
 * waking, so an event that lands between a check and the next wait makes
 * that wait return at once.
 */
void
bridge_wait(long timeout_ms)
{
	bridge_wait_quietly(timeout_ms);
	CHECK_FOR_INTERRUPTS();
}

/* The same for transaction callbacks and exit: serves no interrupts. */
void
bridge_wait_quietly(long timeout_ms)
{
	WaitEvent	event;

	if (WaitEventSetWait(wait_set, timeout_ms, &event, 1, ZKLOCK_WAIT_EVENT()) > 0 &&
		(event.events & WL_LATCH_SET))
		ResetLatch(MyLatch);
}

/* ---- the session ---- */

void
bridge_session_snapshot(ZkSessionSnapshot *out)
{
	SpinLockAcquire(&zk_shared->mutex);
	*out = zk_shared->session;
	out->generation = zk_shared->generation;
	SpinLockRelease(&zk_shared->mutex);
}

/* The session worker's pid (0: none) and its requests, sent and waiting. */
void
bridge_worker_load(int *pid, int *in_flight, int *queued)
{
	SpinLockAcquire(&zk_shared->mutex);
	*pid = zk_shared->worker_pid;
	SpinLockRelease(&zk_shared->mutex);
	*in_flight = (int) pg_atomic_read_u32(&zk_shared->requests_in_flight);
	*queued = (int) pg_atomic_read_u32(&zk_shared->requests_queued);
}

/* Whether the session worker runs (it may still be opening its session). */
bool
bridge_worker_running(void)
{
	bool		running;

	SpinLockAcquire(&zk_shared->mutex);
	running = zk_shared->worker_pid != 0;
	SpinLockRelease(&zk_shared->mutex);
	return running;
}

/*
 * Why the worker closed the session of this generation of its own will
 * (only the last such close is known).
 */
ZkCloseReason
bridge_close_reason(uint64 generation)
{
	ZkCloseReason reason = ZK_CLOSED_UNKNOWN;

	SpinLockAcquire(&zk_shared->mutex);
	if (generation != 0 && zk_shared->closed_generation == generation)
		reason = zk_shared->closed_reason;
	SpinLockRelease(&zk_shared->mutex);
	return reason;
}

/* Whether the postmaster took the session worker at start. */
bool
bridge_worker_registered(void)
{
	return zk_shared->worker_registered;
}

/* errno of the worker's last failed zookeeper_init, 0 if none. */
int
bridge_open_error(void)
{
	int			error;

	SpinLockAcquire(&zk_shared->mutex);
	error = zk_shared->open_error;
	SpinLockRelease(&zk_shared->mutex);
	return error;
}

/* Connections the servers closed before a session was set up, lately. */
uint64_t
bridge_closed_by_server(void)
{
	uint64_t	n;

	SpinLockAcquire(&zk_shared->mutex);
	n = zk_shared->closed_by_server;
	SpinLockRelease(&zk_shared->mutex);
	return n;
}

/*
 * The commit guard passed, for locks of session generation: the worker
 * does not close that session by its own will (reload, exit, write-off)
 * before bridge_commit_end, or before its bound passed (it then drops the
 * connection without ending the session, which the server expires after
 * the timeout, so that the guard's margin still holds).  False if the
 * session is being closed already, or is gone: the locks are lost.
 */
bool
bridge_commit_begin(uint64_t generation)
{
	bool		ok;

	SpinLockAcquire(&zk_shared->mutex);
	ok = zk_shared->generation == generation && !zk_shared->closing;
	if (ok)
		my_slot->committing = generation;
	SpinLockRelease(&zk_shared->mutex);
	return ok;
}

/* The commit (or its abort) is done. */
void
bridge_commit_end(void)
{
	bool		closing;

	if (my_slot == NULL || detached)
		return;
	SpinLockAcquire(&zk_shared->mutex);
	closing = my_slot->committing != 0 && zk_shared->closing;
	my_slot->committing = 0;
	SpinLockRelease(&zk_shared->mutex);
	if (closing)
		zk_wake(zk_shared->worker_latch);
}

/*
 * This backend judged the session lost (no reply for its timeout): the
 * worker closes it, if it is still the open one, so that it cannot come
 * back with nodes whose locks were written off.
 */
void
bridge_write_off(uint64_t generation)
{
	SpinLockAcquire(&zk_shared->mutex);
	if (zk_shared->generation == generation)
		zk_shared->close_requested = generation;
	SpinLockRelease(&zk_shared->mutex);
	zk_wake(zk_shared->worker_latch);
}
