/*
 * worker_int.h
 *	  What the parts of the session worker share; only they include it.
 *
 * zk_worker.c runs the loop and the session; worker_requests.c carries out
 * backends' requests, keeps the watches set for them and what each backend
 * owns.  zk_worker.c calls worker_requests.c, never the other way round.
 */
#ifndef ZKLOCK_WORKER_INT_H
#define ZKLOCK_WORKER_INT_H

#include <zookeeper/zookeeper.h>

#include "lib/ilist.h"
#include "storage/latch.h"

#include "worker_proof.h"
#include "zk_bridge.h"
#include "zk_shared.h"

/* How often slots are checked for backends gone without a word. */
#define SLOT_CHECK_MS 1000

typedef enum WatchKind
{
	WATCH_WAITER,				/* a waiter's, on a node or a parent */
	WATCH_POKE,					/* on the wait a backend published */
	WATCH_HELD					/* on a node the backend created */
} WatchKind;

/* A watch set for a backend; the client calls back with it. */
typedef struct WorkerWatch
{
	dlist_node all;				/* in watches */
	dlist_node of_slot;			/* in its slot's */
	int			slot;
	uint32		incarnation;
	WatchKind	kind;
	int			type;			/* ZWATCHTYPE_DATA or _CHILD */
	bool		exists;			/* DATA: set by an exists, not a get */
	dsa_pointer held;			/* WATCH_HELD: the backend's SharedHeld */
	bool		armed;			/* the server has it */
	bool		arming;			/* its request is on its way */
	bool		removing;		/* to be removed once armed */
	bool		gone;			/* its slot forgot it (held: released) */
	bool		unwatch_deferred;	/* see defer() */
	char		path[FLEXIBLE_ARRAY_MEMBER];
} WorkerWatch;

/* A node a backend created and owns. */
typedef struct OwnedNode
{
	dlist_node of_slot;
	uint32		incarnation;	/* of the backend that created it */
	bool		deleting;		/* a delete is on its way */
	char		path[FLEXIBLE_ARRAY_MEMBER];
} OwnedNode;

/* A create whose reply was lost: its node, if any, carries this tag. */
typedef struct UncertainCreate
{
	dlist_node of_slot;
	uint32		incarnation;
	char	   *parent;
	char	   *tag;
} UncertainCreate;

/*
 * What the worker knows of one backend slot.  Its lists may still hold a
 * departed backend's entries while the next backend of the slot adds its
 * own; every entry names its incarnation.
 */
typedef struct WorkerSlot
{
	uint32		incarnation;	/* the latest backend the worker heard from */
	dlist_head	owned;
	dlist_head	uncertain;
	dlist_head	watches;
	bool		exit_seen;		/* its backend is exiting, not told yet */
} WorkerSlot;

typedef enum CallKind
{
	CALL_REPLY,					/* a backend's request waiting for its reply */
	CALL_DELETE,				/* a cleanup: delete path */
	CALL_DELETE_TAGGED,			/* a cleanup: list path, delete the tagged child */
	CALL_ARM,					/* (re)set a watch the worker keeps */
	CALL_REWRITE,				/* a held node's data, a request recorded */
	CALL_CHAIN_SYNC,			/* a sync of the worker's own: see worker_proof.c */
	CALL_CHAIN_READ				/* a read behind it */
} CallKind;

/* Everything handed to the client, until its completion runs. */
typedef struct Call
{
	dlist_node in_flight;
	CallKind	kind;
	uint64		epoch;			/* generation of the handle it went to */
	int64		sent_at;
	dsa_pointer req;			/* CALL_REPLY */
	WorkerWatch *watch;			/* CALL_REPLY of a watch, CALL_ARM */
	int			slot;			/* cleanups: for whom */
	uint32		incarnation;
	bool		counted;		/* in the slot's deletes_pending */
	bool		retried;		/* CALL_DELETE: sent again after a lost reply */
	dsa_pointer held;			/* CALL_DELETE of a release: verdict goes there */
	char	   *tag;			/* CALL_DELETE_TAGGED */
	char	   *path;			/* cleanups, CALL_REWRITE */
	char	   *data;			/* CALL_REWRITE: the data, for this version */
	int			data_len;
	int			version;
} Call;

typedef enum DeferKind
{
	DEFER_ISSUE,
	DEFER_ARM,
	DEFER_UNWATCH
} DeferKind;

typedef struct Deferred
{
	dlist_node	node;
	DeferKind	kind;
	Call	   *call;
	WorkerWatch *watch;
} Deferred;

/* The open session's handle and generation, set by zk_worker.c. */
extern zhandle_t *worker_zh;
extern uint64 worker_generation;
/* Its connection as of the last turn, if it was up then; none once closed. */
extern pgsocket worker_socket;
/* The credentials it was opened with: nodes get the protected ACL then. */
extern char *worker_session_auth;
/* A generation whose server left a request unanswered (worker_requests.c). */
extern uint64 worker_server_fault;
extern void worker_send_failed(void);
extern void worker_connected(void);

/* Per backend slot; every watch. */
extern WorkerSlot *worker_slots;
extern dlist_head worker_watches;

/* Calls handed to the client, and calls into it under way. */
extern dlist_head worker_in_flight;
extern int	worker_client_depth;

/* worker_requests.c, for zk_worker.c: the backends */
extern void worker_wake_all(void);
extern void worker_wakes_hold(void);
extern void worker_wakes_flush(void);
extern void worker_delete_done(int rc, const void *data);
extern void worker_tagged_done(int rc, const struct String_vector *strings,
							   const void *data);
extern void worker_check_slots(void);

/* the requests */
extern void worker_call_free(Call *call);
extern void worker_complete(Call *call, SharedRequest *sr, int rc);
extern void worker_flush_deferred(void);
extern void worker_drop_deferred(void);
extern void worker_drain_queue(void);
extern void worker_issue_backlog(void);
extern void worker_send_proof_request(void);
extern void worker_proof_connection(int64 connect_sent_after, int timeout_ms);

/* the watches */
extern void worker_watch_free(WorkerWatch *ww);
extern void worker_watch_armed(int rc, WorkerWatch *ww, Call *call);
extern void worker_rewrite_done(int rc, const struct Stat *stat,
								const void *data);

#endif							/* ZKLOCK_WORKER_INT_H */
