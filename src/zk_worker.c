/*
 * zk_worker.c
 *	  The session worker: one background worker per PostgreSQL server owns
 *	  the server's ZooKeeper session and carries out every backend's
 *	  requests on it.
 *
 * It drives the single-threaded ZooKeeper client from its own event loop
 * (zookeeper_interest, a latch wait on the client's socket,
 * zookeeper_process), so no PostgreSQL process runs a foreign thread, and
 * it never waits for ZooKeeper: replies and watches arrive as events.
 * Backends queue requests in shared memory (zk_bridge.c) and wait on their
 * own latches, which the worker sets when a reply or a watch is theirs.
 *
 * A lock stays its backend's: the worker remembers which nodes each
 * backend created, deletes them when the backend asks, when it gave up on
 * the create, and when it exits or dies, and refuses to delete for a
 * backend any node that is not its own.  Watches are set per backend and
 * removed per backend; a watch path that several backends watch is removed
 * from the server only with the last of them.
 *
 * The session is published in shared memory (state, id, last contact), and
 * replaced when it is lost: expired, silent for longer than its timeout, or
 * written off by a backend's commit guard.  Its id and password are kept in
 * the data directory (session_file.c); after a crash, the next worker
 * reattaches to the old session and closes it, which frees the server's
 * locks at once instead of after the session timeout.
 */
#include "postgres.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

#include "lib/ilist.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "compat.h"
#include "guc.h"
#include "session_file.h"
#include "stats.h"
#include "zk_shared.h"
#include "zk_worker.h"

PGDLLEXPORT void zklock_worker_main(Datum arg);

/* How often slots are checked for backends gone without a word. */
#define SLOT_CHECK_MS 1000
/* How long to wait before opening a session again after zookeeper_init failed. */
#define OPEN_RETRY_MS 1000
/* Replies taken in after a wait before the queue is looked at again. */
#define REPLIES_PER_TURN 64

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
	dsa_pointer held;			/* WATCH_HELD: the backend's SharedHeld */
	bool		armed;			/* the server has it */
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
	CALL_ARM					/* (re)set a watch the worker keeps */
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
	char	   *tag;			/* CALL_DELETE_TAGGED */
	char	   *path;			/* cleanups */
} Call;

static zhandle_t *zh = NULL;
static uint64 generation = 0;	/* of zh */
static int64 retry_open_at = 0;
static int64 last_slot_check = 0;

/* Settings the open session was made with. */
static char *session_hosts = NULL;
static char *session_auth = NULL;
static int	session_timeout_asked = 0;

static WorkerSlot *wslots;
static dlist_head watches = DLIST_STATIC_INIT(watches);
static dlist_head in_flight = DLIST_STATIC_INIT(in_flight);
static int	calls_in_flight = 0;

/*
 * Calls into the client under way.  The single-threaded client runs our
 * completions and watchers inside its own calls (zookeeper_process, and any
 * request whose send fails, which cleans up the connection there and then):
 * a callback that called the client again could clean up the lists the
 * outer call is walking, and replies would then be matched to the wrong
 * requests ("unexpected server response").  So callbacks never call the
 * client: what they would send is deferred to the main loop.
 */
static int	client_depth = 0;

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

static dlist_head deferred = DLIST_STATIC_INIT(deferred);


/* With credentials: the creator may do anything, everybody may read. */
static struct ACL protected_acl_entries[2] = {
	{0x1f, {"auth", ""}},
	{0x01, {"world", "anyone"}}
};
static struct ACL_vector protected_acl = {2, protected_acl_entries};

static void issue_call(Call *call, SharedRequest *sr);
static bool defer(DeferKind kind, Call *call, WorkerWatch *ww);
static void arm_watch(WorkerWatch *ww, Call *reply);
static void cleanup_delete(int slot, uint32 incarnation, const char *path);
static void cleanup_delete_tagged(int slot, uint32 incarnation,
								  const char *parent, const char *tag);

/* ---- shared state ---- */

static ZkSlot *
shared_slot(int slot)
{
	return &zk_shared->slots[slot];
}

/*
 * Under the mutex: the latch of slot if it still belongs to the backend of
 * that incarnation, else NULL.
 */
static Latch *
slot_latch(int slot, uint32 incarnation)
{
	ZkSlot	   *s = shared_slot(slot);

	return (s->pid != 0 && s->incarnation == incarnation) ? s->latch : NULL;
}

/* One of the slot's pending deletes is done. */
static void
uncount(int slot, uint32 incarnation)
{
	Latch	   *latch;

	SpinLockAcquire(&zk_shared->mutex);
	latch = NULL;
	if (shared_slot(slot)->incarnation == incarnation)
	{
		shared_slot(slot)->deletes_pending--;
		latch = slot_latch(slot, incarnation);
	}
	SpinLockRelease(&zk_shared->mutex);
	zk_wake(latch);
}

static void
count_for(int slot, BridgeCounter c)
{
	pg_atomic_fetch_add_u64(&shared_slot(slot)->counts[c], 1);
}

/* Wake every backend that uses zklock: the session changed. */
static void
wake_all(void)
{
	for (int i = 0; i < zk_shared->nslots; i++)
	{
		Latch	   *latch;

		SpinLockAcquire(&zk_shared->mutex);
		latch = zk_shared->slots[i].pid != 0 ? zk_shared->slots[i].latch : NULL;
		SpinLockRelease(&zk_shared->mutex);
		zk_wake(latch);
	}
}

/* The worker's view of slot, emptied first if a new backend took it. */
static WorkerSlot *
worker_slot(int slot, uint32 incarnation)
{
	WorkerSlot *ws = &wslots[slot];

	if (incarnation > ws->incarnation)
		ws->incarnation = incarnation;
	return ws;
}

/* ---- calls ---- */

static Call *
call_new(CallKind kind)
{
	Call	   *call = MemoryContextAllocZero(TopMemoryContext, sizeof(Call));

	call->kind = kind;
	call->epoch = generation;
	call->sent_at = bridge_now_ms();
	call->req = InvalidDsaPointer;
	dlist_push_tail(&in_flight, &call->in_flight);
	calls_in_flight++;
	return call;
}

static void
call_free(Call *call)
{
	dlist_delete(&call->in_flight);
	calls_in_flight--;
	if (call->tag)
		pfree(call->tag);
	if (call->path)
		pfree(call->path);
	pfree(call);
}

/* Whether a retry of this call may go to the open handle. */
static bool
still_current(Call *call)
{
	return zh != NULL && call->epoch == generation;
}

/*
 * A reply the server itself gave, which proves that it still held the
 * session when it processed the request.
 */
static bool
server_answered(int rc)
{
	return rc == ZOK || rc == ZNONODE || rc == ZNODEEXISTS ||
		rc == ZBADVERSION || rc == ZNOTEMPTY || rc == ZNOAUTH ||
		rc == ZNOCHILDRENFOREPHEMERALS;
}

/* A reply after which there is nothing left to clean up or to report. */
static bool
nothing_left(int rc)
{
	return rc == ZOK || rc == ZNONODE || rc == ZSESSIONEXPIRED ||
		rc == ZCLOSING || rc == ZINVALIDSTATE;
}

/* ---- owned nodes ---- */

static OwnedNode *
find_owned(WorkerSlot *ws, uint32 incarnation, const char *path)
{
	dlist_iter	it;

	dlist_foreach(it, &ws->owned)
	{
		OwnedNode  *node = dlist_container(OwnedNode, of_slot, it.cur);

		if (node->incarnation == incarnation && strcmp(node->path, path) == 0)
			return node;
	}
	return NULL;
}

static void
own(int slot, uint32 incarnation, const char *path)
{
	WorkerSlot *ws = worker_slot(slot, incarnation);
	size_t		len = strlen(path) + 1;
	OwnedNode  *node = MemoryContextAlloc(TopMemoryContext,
										  offsetof(OwnedNode, path) + len);

	node->incarnation = incarnation;
	node->deleting = false;
	memcpy(node->path, path, len);
	dlist_push_tail(&ws->owned, &node->of_slot);
}

static void
disown(int slot, uint32 incarnation, const char *path)
{
	OwnedNode  *node = find_owned(&wslots[slot], incarnation, path);

	if (node != NULL)
	{
		dlist_delete(&node->of_slot);
		pfree(node);
	}
}

static void
uncertain_add(int slot, uint32 incarnation, const char *parent, const char *tag)
{
	WorkerSlot *ws = worker_slot(slot, incarnation);
	UncertainCreate *u = MemoryContextAlloc(TopMemoryContext, sizeof(UncertainCreate));

	u->incarnation = incarnation;
	u->parent = MemoryContextStrdup(TopMemoryContext, parent);
	u->tag = MemoryContextStrdup(TopMemoryContext, tag);
	dlist_push_tail(&ws->uncertain, &u->of_slot);
}

/* ---- cleanups ---- */

static void
report_cleanup_failure(Call *call, int rc)
{
	if (!still_current(call) || nothing_left(rc))
		return;
	if (call->kind == CALL_DELETE_TAGGED)
		ereport(LOG,
				(errmsg("zklock: could not look for a backend's node under ZooKeeper node \"%s\": %s",
						call->path, zerror(rc)),
				 errdetail("The node, if there is one, goes when the server's ZooKeeper session ends.")));
	else
		ereport(LOG,
				(errmsg("zklock: could not delete ZooKeeper node \"%s\": %s",
						call->path, zerror(rc)),
				 errdetail("It goes when the server's ZooKeeper session ends.")));
}

static void
delete_done(int rc, const void *data)
{
	Call	   *call = (Call *) data;

	/* Requests made while disconnected wait for the reconnect: no spinning. */
	if (bridge_reply_lost(rc) && still_current(call))
	{
		issue_call(call, NULL);
		return;
	}
	if (rc != ZOK && rc != ZNONODE)
		report_cleanup_failure(call, rc);
	disown(call->slot, call->incarnation, call->path);
	if (call->counted)
		uncount(call->slot, call->incarnation);
	call_free(call);
}

static void
tagged_done(int rc, const struct String_vector *strings, const void *data)
{
	Call	   *call = (Call *) data;

	if (bridge_reply_lost(rc) && still_current(call))
	{
		issue_call(call, NULL);
		return;
	}
	if (rc == ZOK && still_current(call))
	{
		for (int i = 0; i < strings->count; i++)
		{
			char	   *child;

			if (strstr(strings->data[i], call->tag) == NULL)
				continue;
			child = psprintf("%s/%s", call->path, strings->data[i]);
			cleanup_delete(call->slot, call->incarnation, child);
			pfree(child);
		}
	}
	else
		report_cleanup_failure(call, rc);
	if (call->counted)
		uncount(call->slot, call->incarnation);
	call_free(call);
}

/* A cleanup for a backend, counted in its pending deletes, sent. */
static void
cleanup_call(CallKind kind, int slot, uint32 incarnation, const char *path,
			 const char *tag)
{
	Call	   *call = call_new(kind);

	call->slot = slot;
	call->incarnation = incarnation;
	call->path = MemoryContextStrdup(TopMemoryContext, path);
	if (tag != NULL)
		call->tag = MemoryContextStrdup(TopMemoryContext, tag);
	SpinLockAcquire(&zk_shared->mutex);
	call->counted = shared_slot(slot)->incarnation == incarnation;
	if (call->counted)
		shared_slot(slot)->deletes_pending++;
	SpinLockRelease(&zk_shared->mutex);
	issue_call(call, NULL);
}

/* Delete a node of a backend's. */
static void
cleanup_delete(int slot, uint32 incarnation, const char *path)
{
	OwnedNode  *node = find_owned(&wslots[slot], incarnation, path);

	if (node != NULL)
		node->deleting = true;
	cleanup_call(CALL_DELETE, slot, incarnation, path, NULL);
}

/* Delete a backend's child of parent that carries tag, if there is one. */
static void
cleanup_delete_tagged(int slot, uint32 incarnation, const char *parent,
					  const char *tag)
{
	cleanup_call(CALL_DELETE_TAGGED, slot, incarnation, parent, tag);
}

/* ---- watches ---- */

static WorkerWatch *
watch_new(int slot, uint32 incarnation, WatchKind kind, int type,
		  const char *path, dsa_pointer held)
{
	WorkerSlot *ws = worker_slot(slot, incarnation);
	size_t		len = strlen(path) + 1;
	WorkerWatch *ww = MemoryContextAllocZero(TopMemoryContext,
											 offsetof(WorkerWatch, path) + len);

	ww->slot = slot;
	ww->incarnation = incarnation;
	ww->kind = kind;
	ww->type = type;
	ww->held = held;
	memcpy(ww->path, path, len);
	dlist_push_tail(&watches, &ww->all);
	dlist_push_tail(&ws->watches, &ww->of_slot);
	return ww;
}

/* Drop the worker's reference to a backend's SharedHeld. */
static void
held_unref(dsa_pointer dp)
{
	SharedHeld *sh = dsa_get_address(zk_area, dp);
	bool		last;

	SpinLockAcquire(&zk_shared->mutex);
	last = --sh->refs == 0;
	SpinLockRelease(&zk_shared->mutex);
	if (last)
		dsa_free(zk_area, dp);
}

static void
watch_free(WorkerWatch *ww)
{
	if (ww->kind == WATCH_HELD)
		held_unref(ww->held);
	dlist_delete(&ww->all);
	dlist_delete(&ww->of_slot);
	pfree(ww);
}

/* Whether the backend still wants this watch. */
static bool
watch_wanted(WorkerWatch *ww)
{
	bool		wanted;

	if (ww->removing || ww->gone)
		return false;
	if (ww->kind != WATCH_HELD)
		return true;
	SpinLockAcquire(&zk_shared->mutex);
	wanted = !((SharedHeld *) dsa_get_address(zk_area, ww->held))->released;
	SpinLockRelease(&zk_shared->mutex);
	return wanted;
}

/* A backend's node is gone and it did not delete it: its lock is lost. */
static void
held_gone(WorkerWatch *ww)
{
	SharedHeld *sh = dsa_get_address(zk_area, ww->held);
	Latch	   *latch = NULL;

	SpinLockAcquire(&zk_shared->mutex);
	if (!sh->released && !sh->deleted && !ww->gone &&
		shared_slot(ww->slot)->incarnation == ww->incarnation)
	{
		sh->deleted = true;
		shared_slot(ww->slot)->held_deletions++;
		/* A waiter whose own node went must look at its queue again. */
		shared_slot(ww->slot)->watch_events++;
		latch = slot_latch(ww->slot, ww->incarnation);
	}
	SpinLockRelease(&zk_shared->mutex);
	zk_wake(latch);
}

/* The client's callback for every watch set for a backend. */
static void
watcher(zhandle_t *handle, int type, int state, const char *path, void *ctx)
{
	WorkerWatch *ww = (WorkerWatch *) ctx;
	Latch	   *latch = NULL;

	/* Session events reach every watcher; they are the session's business. */
	if (type == ZOO_SESSION_EVENT)
		return;
	ww->armed = false;

	if (ww->kind == WATCH_HELD)
	{
		if (type == ZOO_DELETED_EVENT)
			held_gone(ww);
		/* Data rewritten by another client: the node is still there. */
		else if (type == ZOO_CHANGED_EVENT && watch_wanted(ww) &&
				 handle == zh)
		{
			arm_watch(ww, NULL);
			return;
		}
	}
	else if (!ww->gone)
	{
		SpinLockAcquire(&zk_shared->mutex);
		latch = slot_latch(ww->slot, ww->incarnation);
		if (latch != NULL && ww->kind == WATCH_WAITER)
			shared_slot(ww->slot)->watch_events++;
		/* A poke rewrites the entry; its deletion by its owner is none. */
		else if (latch != NULL && type == ZOO_CHANGED_EVENT)
			shared_slot(ww->slot)->poked = true;
		else
			latch = NULL;
		SpinLockRelease(&zk_shared->mutex);
		zk_wake(latch);
	}

	/* A removal deferred to the main loop frees it there. */
	if (!ww->unwatch_deferred)
		watch_free(ww);
}

static void
ignore_reply(int rc, const void *data)
{
}

/*
 * Stop a watch of a backend's.  The client forgets it at once (so it is
 * never called back with it again); the server's watch, which serves every
 * watcher of the path in this session, is removed only with the last one.
 * A watch not set yet is stopped when its reply comes.
 */
static void
unwatch(WorkerWatch *ww)
{
	dlist_iter	it;
	bool		alone = true;

	ww->removing = true;
	if (!ww->armed)
		return;
	if (defer(DEFER_UNWATCH, NULL, ww))
	{
		ww->unwatch_deferred = true;
		return;
	}
	client_depth++;
	zoo_aremove_watches(zh, ww->path, ww->type, watcher, ww, 1,
						(void_completion_t *) ignore_reply, NULL);
	ww->armed = false;
	dlist_foreach(it, &watches)
	{
		WorkerWatch *other = dlist_container(WorkerWatch, all, it.cur);

		if (other->armed && other->type == ww->type &&
			strcmp(other->path, ww->path) == 0)
		{
			alone = false;
			break;
		}
	}
	if (alone)
	{
		count_for(ww->slot, BRIDGE_WATCH_REMOVALS);
		zoo_aremove_all_watches(zh, ww->path, ww->type, 0,
								(void_completion_t *) ignore_reply, NULL);
	}
	client_depth--;
	watch_free(ww);
}

static void complete(Call *call, SharedRequest *sr, int rc);

static void
watch_armed(int rc, WorkerWatch *ww, Call *call)
{
	bool		again = bridge_reply_lost(rc) && ww->kind == WATCH_HELD &&
		watch_wanted(ww) && still_current(call);

	if (rc == ZOK)
		ww->armed = true;
	else if (ww->kind == WATCH_HELD && rc == ZNONODE)
		held_gone(ww);

	/* A backend that gave up on the watch has it marked for removal here. */
	if (DsaPointerIsValid(call->req))
		complete(call, dsa_get_address(zk_area, call->req), rc);
	if (again)
		arm_watch(ww, NULL);
	/* Not set: the client keeps no watcher for a failed get. */
	else if (rc != ZOK)
		watch_free(ww);
	else if (ww->removing)
		unwatch(ww);
}

static void
data_watch_done(int rc, const char *value, int value_len,
				const struct Stat *stat, const void *data)
{
	Call	   *call = (Call *) data;

	watch_armed(rc, call->watch, call);
	call_free(call);
}

static void
child_watch_done(int rc, const struct String_vector *strings, const void *data)
{
	Call	   *call = (Call *) data;

	watch_armed(rc, call->watch, call);
	call_free(call);
}

/*
 * Set ww on the server; reply, if any, is the backend's request to answer.
 * Outside the client only (see arm_watch).
 */
static void
arm_watch_now(WorkerWatch *ww, Call *reply)
{
	Call	   *call;
	int			rc;

	call = reply ? reply : call_new(CALL_ARM);
	call->watch = ww;
	client_depth++;
	if (reply == NULL)
		count_for(ww->slot, BRIDGE_WATCHES);
	if (ww->type == ZWATCHTYPE_CHILD)
		rc = zoo_awget_children(zh, ww->path, watcher, ww, child_watch_done, call);
	else
		rc = zoo_awget(zh, ww->path, watcher, ww, data_watch_done, call);
	if (rc != ZOK)
	{
		watch_armed(rc, ww, call);
		call_free(call);
	}
	client_depth--;
}

/* arm_watch_now, or from a callback, later in the main loop. */
static void
arm_watch(WorkerWatch *ww, Call *reply)
{
	if (!defer(DEFER_ARM, reply, ww))
		arm_watch_now(ww, reply);
}

/* ---- replies ---- */

/*
 * Publish the reply to a backend's request, or, if it gave up, undo what
 * the request did.  The reply is written before the state changes.
 */
static void
complete(Call *call, SharedRequest *sr, int rc)
{
	uint32		expected = REQ_QUEUED;
	Latch	   *latch;

	sr->rc = rc;
	SpinLockAcquire(&zk_shared->mutex);
	if (call->epoch == generation && server_answered(rc) &&
		sr->sent_at > zk_shared->last_contact)
		zk_shared->last_contact = sr->sent_at;
	latch = slot_latch(sr->slot, sr->incarnation);
	SpinLockRelease(&zk_shared->mutex);

	if (pg_atomic_compare_exchange_u32(&sr->state, &expected, REQ_DONE))
	{
		zk_wake(latch);
		call->req = InvalidDsaPointer;
		return;
	}

	/* Abandoned: nobody reads this; undo it. */
	if (sr->kind == ZKREQ_CREATE && sr->payload[sr->tag_off] != '\0' &&
		still_current(call))
	{
		if (rc == ZOK)
			cleanup_delete(sr->slot, sr->incarnation,
						   dsa_get_address(zk_area, sr->result));
		else if (bridge_reply_lost(rc))
		{
			char	   *parent = pstrdup(sr->payload);

			*strrchr(parent, '/') = '\0';
			cleanup_delete_tagged(sr->slot, sr->incarnation, parent,
								  sr->payload + sr->tag_off);
			pfree(parent);
		}
	}
	else if (sr->kind == ZKREQ_WATCH && call->watch != NULL)
		call->watch->removing = true;
	if (sr->counted)
		uncount(sr->slot, sr->incarnation);
	if (DsaPointerIsValid(sr->result))
		dsa_free(zk_area, sr->result);
	dsa_free(zk_area, call->req);
	call->req = InvalidDsaPointer;
}

/* A backend's request is answered: publish the reply, and the call is done. */
static void
reply(Call *call, SharedRequest *sr, int rc)
{
	complete(call, sr, rc);
	call_free(call);
}

/* What a reply tells of the node. */
static void
take_stat(SharedRequest *sr, const struct Stat *stat)
{
	sr->czxid = stat->czxid;
	sr->version = stat->version;
}

/* Copy len bytes (and a NUL) into the shared area for the reply. */
static bool
put_result(SharedRequest *sr, const char *bytes, int len)
{
	dsa_pointer dp = dsa_allocate_extended(zk_area, len + 1, DSA_ALLOC_NO_OOM);
	char	   *p;

	if (!DsaPointerIsValid(dp))
		return false;
	p = dsa_get_address(zk_area, dp);
	if (len > 0)
		memcpy(p, bytes, len);
	p[len] = '\0';
	sr->result = dp;
	sr->result_len = len;
	return true;
}

static void
create_done(int rc, const char *value, const struct Stat *stat, const void *data)
{
	Call	   *call = (Call *) data;
	SharedRequest *sr = dsa_get_address(zk_area, call->req);
	bool		tagged = sr->payload[sr->tag_off] != '\0';

	if (rc == ZOK)
	{
		/* Ephemeral nodes are the backend's; parents are everybody's. */
		if (sr->arg != ZOO_CONTAINER && still_current(call))
			own(sr->slot, sr->incarnation, value);
		sr->czxid = stat->czxid;
		if (!put_result(sr, value, strlen(value)))
		{
			cleanup_delete(sr->slot, sr->incarnation, value);
			rc = ZSYSTEMERROR;
		}
	}
	else if (tagged && bridge_reply_lost(rc) && still_current(call))
	{
		char	   *parent = pstrdup(sr->payload);

		*strrchr(parent, '/') = '\0';
		uncertain_add(sr->slot, sr->incarnation, parent, sr->payload + sr->tag_off);
		pfree(parent);
	}
	reply(call, sr, rc);
}

static void
children_done(int rc, const struct String_vector *strings, const void *data)
{
	Call	   *call = (Call *) data;
	SharedRequest *sr = dsa_get_address(zk_area, call->req);

	if (rc == ZOK)
	{
		StringInfoData buf;

		initStringInfo(&buf);
		for (int i = 0; i < strings->count; i++)
			appendBinaryStringInfo(&buf, strings->data[i], strlen(strings->data[i]) + 1);
		sr->nchildren = strings->count;
		if (!put_result(sr, buf.data, buf.len))
			rc = ZSYSTEMERROR;
		pfree(buf.data);
	}
	reply(call, sr, rc);
}

static void
get_done(int rc, const char *value, int value_len, const struct Stat *stat,
		 const void *data)
{
	Call	   *call = (Call *) data;
	SharedRequest *sr = dsa_get_address(zk_area, call->req);

	if (rc == ZOK)
	{
		take_stat(sr, stat);
		if (!put_result(sr, value, value != NULL && value_len > 0 ? value_len : 0))
			rc = ZSYSTEMERROR;
	}
	reply(call, sr, rc);
}

static void
stat_done(int rc, const struct Stat *stat, const void *data)
{
	Call	   *call = (Call *) data;
	SharedRequest *sr = dsa_get_address(zk_area, call->req);

	if (rc == ZOK && stat != NULL)
		take_stat(sr, stat);
	reply(call, sr, rc);
}

static void
sync_done(int rc, const char *value, const void *data)
{
	Call	   *call = (Call *) data;

	reply(call, dsa_get_address(zk_area, call->req), rc);
}

/*
 * Hand a call to the client.  sr is the backend's request for CALL_REPLY
 * (NULL for a retry of a cleanup).  A call the client refuses at once
 * completes at once.
 */
static void
issue_call_now(Call *call, SharedRequest *sr)
{
	int			rc = ZOK;
	const char *path = sr ? sr->payload : call->path;

	switch (call->kind)
	{
		case CALL_DELETE:
			rc = zoo_adelete(zh, call->path, -1, delete_done, call);
			if (rc != ZOK)
				delete_done(rc, call);
			return;
		case CALL_DELETE_TAGGED:
			rc = zoo_aget_children(zh, call->path, 0, tagged_done, call);
			if (rc != ZOK)
				tagged_done(rc, NULL, call);
			return;
		case CALL_ARM:
			return;				/* issued where it is made */
		case CALL_REPLY:
			break;
	}

	switch (sr->kind)
	{
		case ZKREQ_CREATE:
			rc = zoo_acreate2(zh, path, sr->payload + sr->data_off, sr->data_len,
							  session_auth[0] ? &protected_acl : &ZOO_OPEN_ACL_UNSAFE,
							  sr->arg, create_done, call);
			if (rc != ZOK)
				create_done(rc, NULL, NULL, call);
			break;
		case ZKREQ_CHILDREN:
			rc = zoo_aget_children(zh, path, 0, children_done, call);
			if (rc != ZOK)
				children_done(rc, NULL, call);
			break;
		case ZKREQ_GET:
			rc = zoo_aget(zh, path, 0, get_done, call);
			if (rc != ZOK)
				get_done(rc, NULL, 0, NULL, call);
			break;
		case ZKREQ_SYNC:
			rc = zoo_async(zh, path, sync_done, call);
			if (rc != ZOK)
				sync_done(rc, NULL, call);
			break;
		case ZKREQ_EXISTS:
			rc = zoo_aexists(zh, path, 0, stat_done, call);
			if (rc != ZOK)
				stat_done(rc, NULL, call);
			break;
		case ZKREQ_SET:
			rc = zoo_aset(zh, path, sr->payload + sr->data_off, sr->data_len,
						  sr->arg, stat_done, call);
			if (rc != ZOK)
				stat_done(rc, NULL, call);
			break;
		case ZKREQ_WATCH:
		case ZKREQ_POKE_WATCH:
			/* Not deferred: issue_call decided that already. */
			arm_watch_now(watch_new(sr->slot, sr->incarnation,
								sr->kind == ZKREQ_WATCH ? WATCH_WAITER : WATCH_POKE,
								sr->kind == ZKREQ_WATCH ? sr->arg : ZWATCHTYPE_DATA,
								path, InvalidDsaPointer),
					  call);
			break;
		default:
			elog(ERROR, "zklock: request kind %d is not a reply's", (int) sr->kind);
	}
}

static void
issue_call(Call *call, SharedRequest *sr)
{
	if (defer(DEFER_ISSUE, call, NULL))
		return;
	client_depth++;
	issue_call_now(call, sr);
	client_depth--;
}

/* Inside a call into the client: keep what a callback would send for later. */
static bool
defer(DeferKind kind, Call *call, WorkerWatch *ww)
{
	Deferred   *d;

	if (client_depth == 0)
		return false;
	d = MemoryContextAlloc(TopMemoryContext, sizeof(Deferred));
	d->kind = kind;
	d->call = call;
	d->watch = ww;
	dlist_push_tail(&deferred, &d->node);
	return true;
}

/*
 * Main loop, outside the client: send what callbacks deferred.  Only what
 * was deferred before this call: what these sends defer in turn waits for
 * the next turn, so that a request that fails at once cannot spin.
 */
static void
flush_deferred(void)
{
	dlist_head	batch;

	dlist_init(&batch);
	while (!dlist_is_empty(&deferred))
		dlist_push_tail(&batch, dlist_pop_head_node(&deferred));
	while (!dlist_is_empty(&batch))
	{
		Deferred   *d = dlist_container(Deferred, node, dlist_pop_head_node(&batch));

		switch (d->kind)
		{
			case DEFER_ISSUE:
				issue_call(d->call, d->call->kind == CALL_REPLY ?
						   dsa_get_address(zk_area, d->call->req) : NULL);
				break;
			case DEFER_ARM:
				arm_watch(d->watch, d->call);
				break;
			case DEFER_UNWATCH:
				d->watch->unwatch_deferred = false;
				if (d->watch->armed)
					unwatch(d->watch);
				else
					watch_free(d->watch);	/* it fired meanwhile */
				break;
		}
		pfree(d);
	}
}

/* A closed handle's deferred sends go with it (their calls are finished). */
static void
drop_deferred(void)
{
	while (!dlist_is_empty(&deferred))
		pfree(dlist_container(Deferred, node, dlist_pop_head_node(&deferred)));
}

/* ---- the queue ---- */

/*
 * Whether the node's name carries the backend's owner key ("_c_" and the
 * first part of its attempt tags): a node it created, even one whose
 * create's reply was lost and which it found again by its tag.
 */
static bool
names_owner(SharedRequest *sr, const char *path)
{
	const char *name = strrchr(path, '/');
	bool		ok;

	if (name == NULL || strncmp(name + 1, "_c_", 3) != 0)
		return false;
	SpinLockAcquire(&zk_shared->mutex);
	ok = shared_slot(sr->slot)->incarnation == sr->incarnation &&
		strncmp(name + 4, shared_slot(sr->slot)->owner, ZK_OWNER_LEN) == 0;
	SpinLockRelease(&zk_shared->mutex);
	return ok;
}

/* Whether the backend may delete path: it created it. */
static bool
may_delete(SharedRequest *sr, const char *path)
{
	return find_owned(&wslots[sr->slot], sr->incarnation, path) != NULL ||
		names_owner(sr, path);
}

/* Whether tag is one of the backend's attempt tags. */
static bool
tag_is_backends(SharedRequest *sr, const char *tag)
{
	bool		ok;

	SpinLockAcquire(&zk_shared->mutex);
	ok = shared_slot(sr->slot)->incarnation == sr->incarnation &&
		strncmp(tag, shared_slot(sr->slot)->owner, ZK_OWNER_LEN) == 0;
	SpinLockRelease(&zk_shared->mutex);
	return ok;
}

/* A one-way request: the worker's from the start. */
static void
take_oneway(dsa_pointer dp, SharedRequest *sr)
{
	bool		current = zh != NULL && sr->epoch == generation;
	const char *path = sr->payload;
	const char *tag = sr->payload + sr->tag_off;

	switch (sr->kind)
	{
		case ZKREQ_DELETE:
			if (!current)
				break;
			if (!may_delete(sr, path))
			{
				ereport(LOG,
						(errmsg("zklock: refused to delete ZooKeeper node \"%s\" for process %d, which did not create it",
								path, shared_slot(sr->slot)->pid)));
				break;
			}
			cleanup_delete(sr->slot, sr->incarnation, path);
			break;
		case ZKREQ_DELETE_TAGGED:
			if (current && tag_is_backends(sr, tag))
				cleanup_delete_tagged(sr->slot, sr->incarnation, path, tag);
			break;
		case ZKREQ_UNWATCH:
			if (wslots[sr->slot].incarnation == sr->incarnation)
			{
				dlist_iter	it;

				dlist_foreach(it, &wslots[sr->slot].watches)
				{
					WorkerWatch *ww = dlist_container(WorkerWatch, of_slot, it.cur);

					if (ww->kind == WATCH_WAITER && !ww->removing &&
						ww->type == sr->arg && strcmp(ww->path, path) == 0)
					{
						unwatch(ww);
						break;
					}
				}
			}
			break;
		case ZKREQ_HELD_WATCH:
			/* A node found again after its create's reply was lost. */
			if (current && names_owner(sr, path) &&
				find_owned(&wslots[sr->slot], sr->incarnation, path) == NULL)
				own(sr->slot, sr->incarnation, path);
			if (current)
			{
				arm_watch(watch_new(sr->slot, sr->incarnation, WATCH_HELD,
									ZWATCHTYPE_DATA, path, sr->held),
						  NULL);
				sr->held = InvalidDsaPointer;
			}
			break;
		default:
			elog(LOG, "zklock: request kind %d is not one-way", (int) sr->kind);
	}
	if (DsaPointerIsValid(sr->held))
		held_unref(sr->held);
	if (sr->counted)
		uncount(sr->slot, sr->incarnation);
	dsa_free(zk_area, dp);
}

/* Carry out everything queued, in the order it was queued. */
static void
drain_queue(void)
{
	dsa_pointer dp = (dsa_pointer) pg_atomic_exchange_u64(&zk_shared->queue,
														  InvalidDsaPointer);
	dsa_pointer fifo = InvalidDsaPointer;

	/* The list is newest first: turn it around. */
	while (DsaPointerIsValid(dp))
	{
		SharedRequest *sr = dsa_get_address(zk_area, dp);
		dsa_pointer next = sr->next;

		sr->next = fifo;
		fifo = dp;
		dp = next;
	}

	while (DsaPointerIsValid(fifo))
	{
		SharedRequest *sr = dsa_get_address(zk_area, fifo);
		dsa_pointer next = sr->next;

		if (sr->oneway)
			take_oneway(fifo, sr);
		else
		{
			Call	   *call = call_new(CALL_REPLY);

			call->req = fifo;
			/* Made for a session that is gone: its nodes went with it. */
			if (zh == NULL || sr->epoch != generation)
				reply(call, sr, ZINVALIDSTATE);
			else
				issue_call(call, sr);
		}
		fifo = next;
	}
}

/* ---- backends that went ---- */

/*
 * The backends of slot but the one of incarnation keep (0: none) went, or
 * are going: delete every node they still own, and every node of their
 * creates whose reply was lost; stop their watches.
 */
static void
clean_slot(int slot, uint32 keep)
{
	WorkerSlot *ws = &wslots[slot];
	dlist_mutable_iter it;

	dlist_foreach_modify(it, &ws->owned)
	{
		OwnedNode  *node = dlist_container(OwnedNode, of_slot, it.cur);

		if (node->incarnation != keep && !node->deleting && zh != NULL)
			cleanup_delete(slot, node->incarnation, node->path);
	}
	dlist_foreach_modify(it, &ws->uncertain)
	{
		UncertainCreate *u = dlist_container(UncertainCreate, of_slot, it.cur);

		if (u->incarnation == keep)
			continue;
		if (zh != NULL)
			cleanup_delete_tagged(slot, u->incarnation, u->parent, u->tag);
		dlist_delete(&u->of_slot);
		pfree(u->parent);
		pfree(u->tag);
		pfree(u);
	}
	dlist_foreach_modify(it, &ws->watches)
	{
		WorkerWatch *ww = dlist_container(WorkerWatch, of_slot, it.cur);

		if (ww->incarnation != keep && !ww->removing)
		{
			ww->gone = true;
			unwatch(ww);
		}
	}
}

/* Whether the worker keeps anything of a backend of slot but keep's. */
static bool
others_left(WorkerSlot *ws, uint32 keep)
{
	dlist_iter	it;

	dlist_foreach(it, &ws->owned)
		if (dlist_container(OwnedNode, of_slot, it.cur)->incarnation != keep)
		return true;
	dlist_foreach(it, &ws->watches)
		if (dlist_container(WorkerWatch, of_slot, it.cur)->incarnation != keep)
		return true;
	return !dlist_is_empty(&ws->uncertain) && keep == 0;
}

/*
 * Called each turn: backends that are exiting, and (every second) backends
 * gone without a word.  An exiting backend is told (its slot's cleaned)
 * once its nodes are deleted and its pending deletes are done.
 */
static void
check_slots(void)
{
	int64		now = bridge_now_ms();
	bool		full = now - last_slot_check >= SLOT_CHECK_MS;
	bool		changed;

	SpinLockAcquire(&zk_shared->mutex);
	changed = zk_shared->slots_changed;
	zk_shared->slots_changed = false;
	SpinLockRelease(&zk_shared->mutex);
	if (full)
		last_slot_check = now;

	for (int i = 0; i < zk_shared->nslots; i++)
	{
		WorkerSlot *ws = &wslots[i];
		ZkSlot	   *s = shared_slot(i);
		bool		busy = !dlist_is_empty(&ws->owned) ||
			!dlist_is_empty(&ws->uncertain) || !dlist_is_empty(&ws->watches) ||
			ws->exit_seen;
		pid_t		pid;
		uint32		incarnation;
		uint32		keep;
		bool		exiting;
		bool		pending;
		Latch	   *latch = NULL;

		/*
		 * A slot whose backend neither changed nor is exiting needs a look
		 * only when backends gone without a word are looked for.
		 */
		if (!(changed || ws->exit_seen || (busy && full)))
			continue;
		SpinLockAcquire(&zk_shared->mutex);
		pid = s->pid;
		incarnation = s->incarnation;
		exiting = pid != 0 && s->exiting && !s->cleaned;
		pending = s->deletes_pending > 0;
		SpinLockRelease(&zk_shared->mutex);
		ws->exit_seen = exiting;

		/* The backend whose entries stay: the slot's, alive, not exiting. */
		keep = (pid != 0 && !exiting) ? incarnation : 0;
		if (keep != 0 && full && kill(pid, 0) != 0 && errno == ESRCH)
			keep = 0;
		if (busy && others_left(ws, keep))
			clean_slot(i, keep);

		/* Tell an exiting backend once nothing of it is left. */
		if (exiting && !pending && !others_left(ws, 0))
		{
			SpinLockAcquire(&zk_shared->mutex);
			if (s->incarnation == incarnation)
			{
				s->cleaned = true;
				latch = slot_latch(i, incarnation);
			}
			SpinLockRelease(&zk_shared->mutex);
			ws->exit_seen = false;
			zk_wake(latch);
		}
	}
}

/* ---- the session ---- */

static void
publish_state(int state)
{
	SpinLockAcquire(&zk_shared->mutex);
	if (state != zk_shared->session.zk_state)
		zk_shared->session.changed_at_ms = bridge_now_ms();
	zk_shared->session.zk_state = state;
	zk_shared->session.events++;
	SpinLockRelease(&zk_shared->mutex);
}

/* The handle's default watcher: session events. */
static void
session_watcher(zhandle_t *handle, int type, int state, const char *path,
				void *ctx)
{
	if (type != ZOO_SESSION_EVENT || handle != zh)
		return;
	if (state == ZOO_CONNECTED_STATE)
	{
		const clientid_t *id = zoo_client_id(zh);
		const char *server = zoo_get_current_server(zh);
		bool		same;

		SpinLockAcquire(&zk_shared->mutex);
		same = zk_shared->session.session_id == id->client_id;
		SpinLockRelease(&zk_shared->mutex);

		/* Noted before any backend may take a lock in it. */
		if (!same)
			session_file_write(id->client_id, id->passwd);
		else
			stats_count_reconnect();

		SpinLockAcquire(&zk_shared->mutex);
		zk_shared->session.session_id = id->client_id;
		zk_shared->session.timeout_ms = zoo_recv_timeout(zh);
		snprintf(zk_shared->session.server, sizeof(zk_shared->session.server),
				 "%s", server ? server : "");
		zk_shared->closed_by_server = 0;
		SpinLockRelease(&zk_shared->mutex);
	}
	publish_state(state);
	wake_all();
}

/*
 * The client's log lines, to the server log.  While no server answers, the
 * client repeats the same few lines several times a second: a line from the
 * same place in the client is written at most once per LOG_REPEAT_MS, with
 * a count of those left out.  Connections a server closed before setting up
 * a session (beyond its maxClientCnxns, or without a quorum) are counted for
 * the backends' error message.
 */
#define LOG_REPEAT_MS 60000
#define LOG_PLACES 16

typedef struct LogPlace
{
	char		where[64];		/* "ZOO_WARN@zookeeper_interest@2561" */
	int64		logged_at;
	int			left_out;
} LogPlace;

static LogPlace log_places[LOG_PLACES];

static void
log_line(const char *message)
{
	const char *zoo = strstr(message, "ZOO_");
	const char *colon = zoo ? strstr(zoo, ": ") : NULL;
	char		where[64] = "";
	LogPlace   *place = NULL;
	int64		now = bridge_now_ms();
	char	   *text;
	size_t		len;

	if (strstr(message, "failed while receiving a server response") != NULL ||
		(strstr(message, "server refused to accept the client") != NULL &&
		 (strstr(message, "errno=32(") != NULL ||
		  strstr(message, "errno=104(") != NULL)))
	{
		SpinLockAcquire(&zk_shared->mutex);
		zk_shared->closed_by_server++;
		SpinLockRelease(&zk_shared->mutex);
	}

	if (colon != NULL && colon - zoo < (ptrdiff_t) sizeof(where))
	{
		LogPlace   *oldest = &log_places[0];

		memcpy(where, zoo, colon - zoo);
		where[colon - zoo] = '\0';
		for (int i = 0; i < LOG_PLACES && place == NULL; i++)
		{
			if (strcmp(log_places[i].where, where) == 0)
				place = &log_places[i];
			else if (log_places[i].logged_at < oldest->logged_at)
				oldest = &log_places[i];
		}
		if (place == NULL)
		{
			place = oldest;
			strlcpy(place->where, where, sizeof(place->where));
			place->logged_at = 0;
			place->left_out = 0;
		}
		else if (now - place->logged_at < LOG_REPEAT_MS)
		{
			place->left_out++;
			return;
		}
	}

	text = pstrdup(message);
	len = strlen(text);
	while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r'))
		text[--len] = '\0';
	if (place != NULL && place->left_out > 0)
		ereport(LOG,
				(errmsg_internal("zklock: %s (and %d more like it in the last %d s)",
								 text, place->left_out,
								 (int) ((now - place->logged_at) / 1000))));
	else
		ereport(LOG, (errmsg_internal("zklock: %s", text)));
	if (place != NULL)
	{
		place->logged_at = now;
		place->left_out = 0;
	}
	pfree(text);
}

static void
remember_settings(void)
{
	if (session_hosts)
		pfree(session_hosts);
	if (session_auth)
		pfree(session_auth);
	session_hosts = MemoryContextStrdup(TopMemoryContext, zklock_hosts);
	session_auth = MemoryContextStrdup(TopMemoryContext, zklock_auth);
	session_timeout_asked = zklock_session_timeout;
}

static bool
settings_changed(void)
{
	return strcmp(session_hosts, zklock_hosts) != 0 ||
		strcmp(session_auth, zklock_auth) != 0 ||
		session_timeout_asked != zklock_session_timeout;
}

/* Empty, or user:password. */
static bool
auth_well_formed(const char *auth)
{
	const char *colon = strchr(auth, ':');

	return auth[0] == '\0' || (colon != NULL && colon != auth && colon[1] != '\0');
}

static void
open_session(void)
{
	uint64		gen;
	int			error;

	remember_settings();
	if (!auth_well_formed(session_auth))
	{
		ereport(LOG,
				(errmsg("zklock: zklock.auth must have the form user:password; no ZooKeeper session is opened")));
		SpinLockAcquire(&zk_shared->mutex);
		zk_shared->open_error = ZK_OPEN_BAD_AUTH;
		SpinLockRelease(&zk_shared->mutex);
		retry_open_at = bridge_now_ms() + OPEN_RETRY_MS;
		wake_all();
		return;
	}
	zoo_set_debug_level((ZooLogLevel) zklock_log_level);
	errno = 0;
	zh = zookeeper_init2(session_hosts, session_watcher, session_timeout_asked,
						 NULL, NULL, 0, log_line);
	error = errno;
	if (zh == NULL)
	{
		SpinLockAcquire(&zk_shared->mutex);
		zk_shared->open_error = error ? error : EINVAL;
		SpinLockRelease(&zk_shared->mutex);
		retry_open_at = bridge_now_ms() + OPEN_RETRY_MS;
		wake_all();
		return;
	}
	/* Resolve again only when reconnecting, not on every turn. */
	zoo_set_servers_resolution_delay(zh, -1);
	if (session_auth[0] != '\0')
		zoo_add_auth(zh, "digest", session_auth, strlen(session_auth), NULL, NULL);

	SpinLockAcquire(&zk_shared->mutex);
	gen = generation = ++zk_shared->last_generation;
	zk_shared->generation = gen;
	memset(&zk_shared->session, 0, sizeof(zk_shared->session));
	zk_shared->session.changed_at_ms = bridge_now_ms();
	zk_shared->last_contact = 0;
	zk_shared->open_error = 0;
	zk_shared->closed_by_server = 0;
	zk_shared->close_requested = 0;
	SpinLockRelease(&zk_shared->mutex);
	stats_count_session_opened();
	wake_all();
}

/*
 * Close the session: ends it at once if a server can still hear us (its
 * nodes go), else the server expires it.  Everything in flight on it
 * completes as closed; every backend's watches and nodes of it are
 * forgotten.
 */
static void
close_session(bool lost)
{
	dlist_mutable_iter it;

	if (zh == NULL)
		return;
	SpinLockAcquire(&zk_shared->mutex);
	zk_shared->generation = 0;
	memset(&zk_shared->session, 0, sizeof(zk_shared->session));
	zk_shared->session.changed_at_ms = bridge_now_ms();
	zk_shared->last_contact = 0;
	SpinLockRelease(&zk_shared->mutex);
	wake_all();
	if (lost)
		stats_count_session_lost();

	client_depth++;
	zookeeper_close(zh);
	client_depth--;
	zh = NULL;
	generation = 0;
	drop_deferred();

	/* What the client did not call back, it never will. */
	dlist_foreach_modify(it, &in_flight)
	{
		Call	   *call = dlist_container(Call, in_flight, it.cur);

		switch (call->kind)
		{
			case CALL_DELETE:
				delete_done(ZCLOSING, call);
				break;
			case CALL_DELETE_TAGGED:
				tagged_done(ZCLOSING, NULL, call);
				break;
			case CALL_REPLY:
			case CALL_ARM:
				if (call->watch)
					watch_armed(ZCLOSING, call->watch, call);
				else if (DsaPointerIsValid(call->req))
					complete(call, dsa_get_address(zk_area, call->req), ZCLOSING);
				call_free(call);
				break;
		}
	}
	dlist_foreach_modify(it, &watches)
		watch_free(dlist_container(WorkerWatch, all, it.cur));
	for (int i = 0; i < zk_shared->nslots; i++)
	{
		WorkerSlot *ws = &wslots[i];
		dlist_mutable_iter nit;

		dlist_foreach_modify(nit, &ws->owned)
		{
			OwnedNode  *node = dlist_container(OwnedNode, of_slot, nit.cur);

			dlist_delete(&node->of_slot);
			pfree(node);
		}
		dlist_foreach_modify(nit, &ws->uncertain)
		{
			UncertainCreate *u = dlist_container(UncertainCreate, of_slot, nit.cur);

			dlist_delete(&u->of_slot);
			pfree(u->parent);
			pfree(u->tag);
			pfree(u);
		}
	}
	session_file_remove();
}

/*
 * Whether the open session must be given up: expired or refused, silent
 * for longer than its timeout (the same verdict the backends reach from the
 * published state, reached here before the client may reconnect it), or
 * written off by a backend that got no reply in time.
 */
static bool
session_lost(void)
{
	ZkSessionSnapshot s;
	uint64		written_off;

	SpinLockAcquire(&zk_shared->mutex);
	s = zk_shared->session;
	written_off = zk_shared->close_requested;
	SpinLockRelease(&zk_shared->mutex);

	if (written_off == generation)
		return true;
	if (s.zk_state == ZOO_EXPIRED_SESSION_STATE ||
		s.zk_state == ZOO_AUTH_FAILED_STATE)
		return true;
	return s.zk_state != ZOO_CONNECTED_STATE && s.session_id != 0 &&
		bridge_now_ms() - s.changed_at_ms > s.timeout_ms;
}

/* One turn of the client: wait for its socket, the latch, or its timer. */
static void
client_turn(zhandle_t *handle, long max_wait_ms)
{
	int			fd = -1;
	int			interest = 0;
	struct timeval tv = {0, 0};
	long		timeout = max_wait_ms;
	int			events = WL_LATCH_SET | WL_EXIT_ON_PM_DEATH | WL_TIMEOUT;
	int			rc;
	int			ready = 0;

	if (handle != NULL)
	{
		rc = zookeeper_interest(handle, &fd, &interest, &tv);
		if (rc == ZOK || rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT)
		{
			long		client_ms = tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000;

			if (timeout < 0 || client_ms < timeout)
				timeout = client_ms;
		}
		if (fd >= 0)
		{
			if (interest & ZOOKEEPER_READ)
				events |= WL_SOCKET_READABLE;
			if (interest & ZOOKEEPER_WRITE)
				events |= WL_SOCKET_WRITEABLE;
		}
	}
	if (!(events & (WL_SOCKET_READABLE | WL_SOCKET_WRITEABLE)))
		fd = PGINVALID_SOCKET;
	rc = WaitLatchOrSocket(MyLatch, events, fd, timeout < 0 ? 1000 : timeout,
						   PG_WAIT_EXTENSION);
	if (rc & WL_LATCH_SET)
		ResetLatch(MyLatch);
	if (rc & WL_SOCKET_READABLE)
		ready |= ZOOKEEPER_READ;
	if (rc & WL_SOCKET_WRITEABLE)
		ready |= ZOOKEEPER_WRITE;
	if (handle == NULL)
		return;
	client_depth++;
	zookeeper_process(handle, ready);

	/*
	 * The client takes in one reply per call: take in those that arrived
	 * with it before waiting again (a bounded number, so that new requests
	 * go out too), or a busy server costs a whole turn per reply.
	 */
	for (int i = 0; (ready & ZOOKEEPER_READ) && i < REPLIES_PER_TURN; i++)
	{
		struct pollfd pfd = {0};

		if (zookeeper_interest(handle, &fd, &interest, &tv) != ZOK || fd < 0)
			break;
		pfd.fd = fd;
		pfd.events = POLLIN;
		if (poll(&pfd, 1, 0) <= 0)
			break;
		zookeeper_process(handle, ZOOKEEPER_READ);
	}
	client_depth--;
}

/* ---- ending a previous worker's session ---- */

static int	reap_state = 0;

static void
reap_watcher(zhandle_t *handle, int type, int state, const char *path, void *ctx)
{
	if (type == ZOO_SESSION_EVENT)
		reap_state = state;
}

/*
 * The session a previous worker of this server left (a crash, an immediate
 * shutdown, a worker that died) still holds its locks: reattach to it and
 * close it.  Gives up after the session timeout: by then it has expired.
 */
static void
end_previous_session(void)
{
	clientid_t	old;
	zhandle_t  *rz;
	int64		deadline;

	memset(&old, 0, sizeof(old));
	if (!session_file_read(&old.client_id, old.passwd))
		return;

	ereport(LOG,
			(errmsg("zklock: ending ZooKeeper session 0x%llx, left by this server's previous session worker",
					(unsigned long long) old.client_id)));
	zoo_set_debug_level((ZooLogLevel) zklock_log_level);
	rz = zookeeper_init2(zklock_hosts, reap_watcher, zklock_session_timeout,
						 &old, NULL, 0, log_line);
	if (rz == NULL)
	{
		session_file_remove();
		return;
	}
	deadline = bridge_now_ms() + Max(zklock_session_timeout, zklock_connect_timeout);
	reap_state = 0;
	while (reap_state != ZOO_CONNECTED_STATE &&
		   reap_state != ZOO_EXPIRED_SESSION_STATE &&
		   reap_state != ZOO_AUTH_FAILED_STATE &&
		   bridge_now_ms() < deadline && !ShutdownRequestPending)
	{
		client_turn(rz, deadline - bridge_now_ms());
		CHECK_FOR_INTERRUPTS();
	}
	if (reap_state == ZOO_CONNECTED_STATE)
		ereport(LOG,
				(errmsg("zklock: closed ZooKeeper session 0x%llx; the locks it held are free",
						(unsigned long long) old.client_id)));
	else if (reap_state == ZOO_EXPIRED_SESSION_STATE)
		ereport(LOG,
				(errmsg("zklock: ZooKeeper session 0x%llx had expired already",
						(unsigned long long) old.client_id)));
	zookeeper_close(rz);
	session_file_remove();
}

/* ---- the worker ---- */

static void
worker_exit(int code, Datum arg)
{
	close_session(false);
	SpinLockAcquire(&zk_shared->mutex);
	zk_shared->worker_pid = 0;
	zk_shared->worker_latch = NULL;
	SpinLockRelease(&zk_shared->mutex);
	wake_all();
}

void
zklock_worker_main(Datum arg)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();

	zk_shared_attach();
	wslots = MemoryContextAllocZero(TopMemoryContext,
									sizeof(WorkerSlot) * zk_shared->nslots);
	for (int i = 0; i < zk_shared->nslots; i++)
	{
		dlist_init(&wslots[i].owned);
		dlist_init(&wslots[i].uncertain);
		dlist_init(&wslots[i].watches);
	}

	SpinLockAcquire(&zk_shared->mutex);
	zk_shared->worker_pid = MyProcPid;
	zk_shared->worker_latch = MyLatch;
	zk_shared->generation = 0;
	SpinLockRelease(&zk_shared->mutex);
	before_shmem_exit(worker_exit, (Datum) 0);

	end_previous_session();

	while (!ShutdownRequestPending)
	{
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			if (zh != NULL && settings_changed())
			{
				ereport(LOG,
						(errmsg("zklock: ZooKeeper settings changed; closing the session, which ends the locks held in it")));
				close_session(true);
			}
		}
		if (zh != NULL && session_lost())
			close_session(true);
		if (zh == NULL && bridge_now_ms() >= retry_open_at)
			open_session();

		drain_queue();
		check_slots();
		client_turn(zh, zh != NULL ? SLOT_CHECK_MS :
					Max(retry_open_at - bridge_now_ms(), 1));
		flush_deferred();
		CHECK_FOR_INTERRUPTS();
	}
	proc_exit(0);
}

/* _PG_init: one session worker per server. */
void
zk_worker_register(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS;
	/* Before recovery: standbys take locks too. */
	worker.bgw_start_time = BgWorkerStart_PostmasterStart;
	worker.bgw_restart_time = 1;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "zklock");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "zklock_worker_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "zklock session worker");
	snprintf(worker.bgw_type, BGW_MAXLEN, "zklock session worker");
	RegisterBackgroundWorker(&worker);
}
