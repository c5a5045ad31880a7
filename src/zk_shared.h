/*
 * zk_shared.h
 *	  What backends and the session worker share: the request queue, the
 *	  published state of the server's ZooKeeper session, one slot per
 *	  backend, and the dynamic shared area that carries requests and replies.
 */
#ifndef ZKLOCK_ZK_SHARED_H
#define ZKLOCK_ZK_SHARED_H

#include "datatype/timestamp.h"
#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/spin.h"
#include "utils/dsa.h"

#include "lock_node.h"
#include "zk_requests.h"

/* Where a request is: the worker's, done, or left to the worker to undo. */
typedef enum RequestState
{
	REQ_QUEUED,
	REQ_DONE,
	REQ_ABANDONED
} RequestState;

/*
 * A request in the shared area.  The backend allocates and queues it; the
 * worker sends it and writes the reply; whoever is last frees it (the
 * backend after reading a reply, the worker when the backend gave up).
 * One-way requests (cleanups) are the worker's from the start.
 */
typedef struct SharedRequest
{
	dsa_pointer next;			/* queued before it */
	int			slot;			/* the backend's slot */
	uint32		incarnation;	/* of the slot when queued */
	ZkRequestKind kind;
	uint64		epoch;			/* session generation it was made for */
	int64		sent_at;		/* bridge_now_ms() when queued */
	pg_atomic_uint32 state;		/* RequestState */
	bool		oneway;			/* nobody waits for a reply */
	bool		counted;		/* in the slot's deletes_pending */
	int			arg;			/* CREATE: mode; (UN)WATCH: type; SET: version */
	dsa_pointer held;			/* HELD_WATCH, DELETE, a lock node's CREATE: its SharedHeld */
	/* The reply. */
	int			rc;
	int64		czxid;
	int32		version;		/* the node's data version */
	int			nchildren;
	dsa_pointer result;			/* created path, data, or children */
	int			result_len;
	/* path, NUL, tag (may be empty), NUL, data */
	int			tag_off;
	int			data_off;
	int			data_len;
	char		payload[FLEXIBLE_ARRAY_MEMBER];
} SharedRequest;

/*
 * The watch on a node a backend created: referenced by the backend until it
 * deletes or forgets the node (a release: until the delete's verdict), by
 * the worker while the watch is set, and by a release's delete in flight.
 * The node's own data stays here, for the worker to write back with a
 * release request recorded in it.
 */
typedef struct SharedHeld
{
	uint32		magic;			/* SHARED_HELD_MAGIC until freed */
	uint64		stamp;			/* its backend's mark (zk_bridge.c) */
	int			refs;			/* under ZkShared.mutex, like the flags */
	bool		backend_let_go; /* the backend dropped its reference */
	bool		released;
	bool		deleted;
	bool		granted;		/* the backend holds the lock, not waits */
	bool		release_requested;	/* the node's data said __REVOKE__ */
	bool		interrupted;	/* the backend was, or raised it, for this */
	ReleaseVerdict release_verdict; /* of the backend's delete, if any */
	TimestampTz release_requested_at;	/* when the worker first heard it */
	int			data_len;		/* data: immutable once queued */
	char		data[FLEXIBLE_ARRAY_MEMBER];
} SharedHeld;

/* Checked by zk_held_get; zk_shared_free poisons it with the rest. */
#define SHARED_HELD_MAGIC 0x5A4B4844	/* "ZKHD" */

/* One per PGPROC: what the worker tells one backend. */
typedef struct ZkSlot
{
	pid_t		pid;			/* 0: nobody uses zklock from it */
	uint32		incarnation;	/* bumped by each backend that takes it */
	Latch	   *latch;
	char		owner[ZK_OWNER_BACKEND_LEN + 1];	/* its nodes' names begin so */
	bool		exiting;		/* the backend goes: undo what it left */
	bool		cleaned;		/* the worker did */
	uint64		watch_events;	/* its watches fired */
	uint64		exists_events;	/* ... of them, its exists watches */
	bool		poked;			/* its published wait was rewritten */
	int			deletes_pending;
	uint64		held_deletions; /* its nodes deleted by others */
	uint64		release_requests;	/* requests heard for its nodes */
	bool		revocable;		/* its zklock.revocable: interrupt it then */
	bool		quiet;			/* committing or releasing: never interrupt */
	uint64		committing;		/* passed the guard for this generation, and
								 * has not finished committing; 0: not */
	bool		revoke_signalled;	/* the worker sent it REVOKE_SIGNAL */
	int			barrier_phase;	/* BarrierPhase of its wait at a barrier */
	char		barrier_node[ZK_TAG_LEN + 1];	/* its member node there */
	pg_atomic_uint64 counts[BRIDGE_NCOUNTERS];
} ZkSlot;

/*
 * What the worker sends a revocable holder when its release is requested;
 * see revocation.c.  Backends ignore SIGUSR2 otherwise.
 */
#define REVOKE_SIGNAL SIGUSR2

/* Size of the server-wide hint of lock parents that exist. */
#define ZK_KNOWN_PARENTS 8192

typedef struct ZkShared
{
	slock_t		mutex;			/* everything below but the counters */
	bool		worker_registered;	/* else max_worker_processes left no room */
	pid_t		worker_pid;
	Latch	   *worker_latch;
	pg_atomic_uint32 previous_session;	/* PREVIOUS_SESSION_*, zk_worker.c */
	pg_atomic_uint64 queue;		/* last request queued, linked by next */
	uint64		generation;		/* of the open handle; 0: none */
	uint64		last_generation;	/* never reused while the server runs */
	ZkSessionSnapshot session;
	int64		proven_until;	/* see bridge_proof */
	int64		provable;		/* what a write sent now would prove (worker_proof.c) */
	uint64		closed_by_server;	/* see bridge_closed_by_server */
	int			open_error;		/* errno of a failed zookeeper_init, or: */
#define ZK_OPEN_BAD_AUTH (-1)	/* zklock.auth is not user:password */
	uint64		close_requested;	/* a generation a backend wrote off */
	uint64		closed_generation;	/* the last generation the worker closed
									 * of its own will, and why: */
	ZkCloseReason closed_reason;
	bool		closing;		/* the worker closes the open session once
								 * its committers are done: none passes now */
	bool		slots_changed;	/* a backend took its slot or is exiting */
	int			dsa_tranche;
	pg_atomic_uint64 live_records;	/* see zk_shared_alloc */
	pg_atomic_uint32 requests_in_flight;	/* the worker's, for zk_session() */
	pg_atomic_uint32 requests_queued;	/* in its backlog, not sent yet */
	/* Lock parents seen to exist, by hash (see lock_recipe.c); 0: none. */
	pg_atomic_uint64 known_parents[ZK_KNOWN_PARENTS];
	int			nslots;
	ZkSlot		slots[FLEXIBLE_ARRAY_MEMBER];
} ZkShared;

extern ZkShared *zk_shared;
extern dsa_area *zk_area;

extern void zk_shared_init(bool worker);
extern void zk_shared_attach(void);
extern WaitEventSet *zk_latch_wait_set(int extra);
extern void zk_wake(Latch *latch);
extern SharedHeld *zk_held_get(dsa_pointer dp);
extern void zk_held_unref(dsa_pointer dp, bool backends);
extern dsa_pointer zk_shared_alloc(Size size, int flags);
extern void zk_shared_free(dsa_pointer dp);

#endif							/* ZKLOCK_ZK_SHARED_H */
