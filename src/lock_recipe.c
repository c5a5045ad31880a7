/*
 * lock_recipe.c
 *	  The ZooKeeper lock recipes, as Curator's InterProcessMutex,
 *	  InterProcessReadWriteLock and InterProcessSemaphoreV2 do them.
 *
 * To acquire, create an EPHEMERAL_SEQUENTIAL child of the lock's parent,
 * named as lock_node.c says, and list the parent's children.  lock_node.c
 * judges the listing: held, or the nearest child that blocks us.  Then set a
 * get-data watch on that child only (no herd: a release wakes one waiter)
 * and look again when it fires.  The children request is sent right behind
 * the create without waiting: ZooKeeper answers a session's requests in
 * order, so the listing already contains the new node.
 *
 * A semaphore with N permits is held by the N lowest children of
 * <parent>/leases.  A waiter first takes the exclusive lock <parent>/locks, so
 * that only the queue's head watches the leases (with a children watch) and
 * waiters are served in arrival order; a try needs no such gate.
 *
 * Giving up (timeout, cancel, any ERROR) deletes our child and removes our
 * watch, even when the create's reply has not arrived yet (see zk_bridge.c).
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timeout.h"

#include "compat.h"
#include "guc.h"
#include "deadlock.h"
#include "lock_name.h"
#include "lock_node.h"
#include "lock_recipe.h"
#include "node_info.h"
#include "zk_bridge.h"
#include "zk_nodes.h"
#include "zk_session.h"

/* Container parents may vanish between our calls; don't loop forever. */
#define MAX_PARENT_RETRIES 10

/*
 * One call's acquisition: one attempt, or two for a semaphore (its gate,
 * then its lease), which share the wait for others: timeout_ms and
 * lock_timeout count from when a listing first shows someone ahead, as
 * Curator's acquire(time) and PostgreSQL's lock_timeout do, so a free lock
 * is granted whatever timeout_ms.  The call's own round trips are bounded by
 * zklock.connect_timeout instead (08006).
 */
typedef struct Acquisition
{
	int			timeout_ms;		/* -1: no limit; 0: never wait */
	bool		waiting;		/* someone was seen ahead */
	int64		deadline;		/* the wait's end, once waiting; 0: none */
	bool		lock_timeout_armed;
	int64		deadlock_at;	/* when to look for a deadlock; 0: never */
} Acquisition;

typedef struct Attempt
{
	Acquisition *acq;
	const char *name;			/* for messages */
	const char *parent;
	LockMode	mode;
	int			permits;		/* SEMAPHORE */
	const char *own_writer;		/* SHARED: our own exclusive child, or NULL */
	char		tag[ZK_TAG_LEN + 1];
	char	   *prefix;			/* parent/_c_<tag>-<kind>- */
	char	   *data;			/* JSON describing this backend */

	/* Requests in flight; each is either NULL or owned by the attempt. */
	ZkPathCreates *path_creates;	/* the parent's, sent in front of create */
	ZkRequest  *create;
	ZkRequest  *children;
	ZkRequest  *watch;
	ZkRequest  *sync;
	ZkRequest  *get;

	char	   *node;			/* our child's full path, once known */
	HeldWatch  *hw;				/* the watch on it */
	int64		czxid;
	char	   *watched;		/* what our watch is armed on */
	int			watch_type;		/* ZWATCHTYPE_DATA or _CHILD */
	bool		create_unresolved;	/* a create lost its reply; node unknown */
	bool		created_again;	/* ... and was not found, so it was redone */
	bool		waiting;		/* saw someone ahead: the wait's time bounds it */
	DeadlockWait dl;			/* our wait, for deadlock detection */
} Attempt;

/* Milliseconds left to wait for others: -1 without limit, 0 when out. */
static long
time_left(Attempt *a)
{
	int64		left;

	if (a->acq->deadline == 0)
		return -1;
	left = a->acq->deadline - bridge_now_ms();
	return left > 0 ? (long) left : 0;
}

/*
 * The deadline of a round trip begun at start: zklock.connect_timeout later,
 * or, once the attempt waits for others, the wait's deadline if that comes
 * first (*by_wait).
 */
static int64
round_trip_deadline(Attempt *a, int64 start, bool *by_wait)
{
	int64		deadline = start + zklock_connect_timeout;

	*by_wait = a->waiting && a->acq->deadline != 0 &&
		a->acq->deadline < deadline;
	return *by_wait ? a->acq->deadline : deadline;
}

/* A round trip ran out: false if the wait's time did, else 08006. */
static bool
round_trip_out(bool by_wait)
{
	if (!by_wait)
		zk_session_no_answer(ZK_ACQUIRING);
	return false;
}

/* Wait for a request's reply.  False when the wait's deadline passed first. */
static bool
await_reply(Attempt *a, ZkRequest *req)
{
	bool		by_wait;

	if (zk_session_await(req, round_trip_deadline(a, req->sent_at, &by_wait),
						 ZK_ACQUIRING))
		return true;
	return round_trip_out(by_wait);
}

/* Wait until the session is connected again after a lost reply. */
static bool
await_reconnect(Attempt *a)
{
	bool		by_wait;
	int64		deadline = round_trip_deadline(a, bridge_now_ms(), &by_wait);

	while (zk_session_status() != ZK_SESSION_CONNECTED)
	{
		int64		left = deadline - bridge_now_ms();

		zk_session_check_alive(ZK_ACQUIRING);
		if (left <= 0)
			return round_trip_out(by_wait);
		zk_session_wait((long) left);
	}
	return true;
}

static void
drop_request(ZkRequest **req)
{
	if (*req != NULL)
	{
		bridge_abandon(*req);
		*req = NULL;
	}
}

static void
drop_path_creates(ZkPathCreates **pc)
{
	if (*pc != NULL)
	{
		zk_path_creates_abandon(*pc);
		*pc = NULL;
	}
}

static void
free_request(ZkRequest **req)
{
	bridge_free(*req);
	*req = NULL;
}

/*
 * Lock parents seen to exist by any backend of this server, by a 64-bit hash
 * of their path (zk_bridge.c keeps them in shared memory): a backend's first
 * acquisition of a busy lock sends no create for its parent.  A collision
 * costs only the slow path below; a parent removed by the server since
 * (containers go when empty) is forgotten when a create says so.
 */
static uint64
parent_key(const char *parent)
{
	return hash_bytes_extended((const unsigned char *) parent, strlen(parent), 0);
}

static bool
parent_known(const char *parent)
{
	return bridge_parent_known(parent_key(parent));
}

static void
parent_seen(const char *parent, bool exists)
{
	bridge_parent_seen(parent_key(parent), exists);
}

/*
 * Send the create and, right behind it, the listing that will include it.
 * A parent not known to exist is created (as a container) right in front, in
 * the same round trip, with every ancestor of it when whole_path; if one
 * exists already, its create just fails.
 */
static void
send_create(Attempt *a, bool whole_path)
{
	if (whole_path || !parent_known(a->parent))
		a->path_creates = zk_send_path_creates(a->parent, whole_path);
	a->create = bridge_create_held(a->prefix, a->data, a->tag,
								   ZOO_EPHEMERAL_SEQUENTIAL);
	a->children = bridge_get_children(a->parent);
}

typedef ZkRequest *(*RequestSender) (const char *path);

/*
 * Send a request, and again after every lost reply, until the server gives a
 * real answer, left in *slot.  False if the wait's deadline passed first.
 */
static bool
request_until_answered(Attempt *a, ZkRequest **slot, RequestSender send,
					   const char *path)
{
	for (;;)
	{
		if (*slot == NULL)
			*slot = send(path);
		if (!await_reply(a, *slot))
			return false;
		if (!bridge_reply_lost((*slot)->rc))
			return true;
		free_request(slot);
		if (!await_reconnect(a))
			return false;
	}
}

/*
 * A create whose reply was lost may still have happened.  Now that the
 * session is connected again, catch the server up with the leader (the new
 * server may lag behind the one that took the create) and look for a child
 * carrying our tag; adopt it if there is one.  Sets a->node and a->czxid
 * when found.  False if the wait's deadline passed.
 */
static bool
find_lost_create(Attempt *a)
{
	int			rc;

	if (!request_until_answered(a, &a->sync, bridge_sync, a->parent))
		return false;
	free_request(&a->sync);
	if (!request_until_answered(a, &a->children, bridge_get_children, a->parent))
		return false;
	rc = a->children->rc;
	if (rc != ZOK && rc != ZNONODE)
		zk_report_error(rc, ZK_ACTION_LIST, a->parent);
	for (int i = 0; rc == ZOK && i < a->children->nchildren; i++)
		if (strstr(a->children->children[i], a->tag) != NULL)
			a->node = psprintf("%s/%s", a->parent, a->children->children[i]);
	free_request(&a->children);
	a->create_unresolved = false;	/* a->node tells now */
	if (a->node == NULL)
	{
		a->created_again = true;
		ereport(LOG,
				(errmsg("zklock: the reply to creating a node under \"%s\" was lost and the node does not exist; creating it again",
						a->parent)));
		return true;
	}
	ereport(LOG,
			(errmsg("zklock: the reply to creating \"%s\" was lost; the node exists and is adopted",
					a->node)));
	a->hw = bridge_watch_held(a->node, a->data);

	if (!request_until_answered(a, &a->get, bridge_get, a->node))
		return false;
	if (a->get->rc != ZOK)
		zk_report_error(a->get->rc, ZK_ACTION_READ, a->node);
	a->czxid = a->get->czxid;
	free_request(&a->get);
	return true;
}

/*
 * Get our node into the queue.  False as await_reply; the give-up path then
 * cleans up whatever is in flight.
 *
 * A parent gone since it was seen (containers go a while after their last
 * child; ZooKeeper's default is a minute) costs one failed create, then the
 * whole path's creates in front of the node's: two round trips, whatever
 * part of the path the server removed.
 */
static bool
enqueue(Attempt *a)
{
	bool		whole_path = false;

	for (int tries = 0;; tries++)
	{
		int			rc;

		send_create(a, whole_path);
		if (!await_reply(a, a->create))
			return false;
		rc = a->create->rc;
		parent_seen(a->parent, rc != ZNONODE);
		/* Answered in order: the path's creates are done too. */
		if (rc == ZNONODE && whole_path)
		{
			ZkPathCreates *path_creates = a->path_creates;
			bool		by_wait;

			/* The path's own errors (a missing chroot, an ACL) raise here. */
			a->path_creates = NULL;
			if (!zk_path_creates_finish(path_creates,
										round_trip_deadline(a, bridge_now_ms(),
															&by_wait),
										NULL))
				return round_trip_out(by_wait);
		}
		else
			drop_path_creates(&a->path_creates);
		if (rc == ZOK)
		{
			a->node = pstrdup(a->create->created);
			a->czxid = a->create->czxid;
			a->hw = bridge_take_held(a->create);
			free_request(&a->create);
			return true;
		}
		free_request(&a->create);
		drop_request(&a->children);

		if (bridge_reply_lost(rc))
		{
			a->create_unresolved = true;
			if (!await_reconnect(a) || !find_lost_create(a))
				return false;
			if (a->node != NULL)
				return true;
		}
		else if (rc == ZNONODE && tries < MAX_PARENT_RETRIES)
			whole_path = true;
		else
			zk_report_error(rc, ZK_ACTION_CREATE, a->prefix);
	}
}

/*
 * Someone is ahead: timeout_ms and lock_timeout count from the first wait of
 * the whole acquisition.
 */
static void
begin_wait(Attempt *a)
{
	Acquisition *acq = a->acq;

	if (!acq->waiting)
	{
		acq->waiting = true;
		if (acq->timeout_ms > 0)
			acq->deadline = bridge_now_ms() + acq->timeout_ms;
		if (LockTimeout > 0)
		{
			enable_timeout_after(LOCK_TIMEOUT, LockTimeout);
			acq->lock_timeout_armed = true;
		}
	}
	a->waiting = true;
	a->dl.deadline = acq->deadline;
}

/*
 * A shared lock requested while holding the exclusive one is granted at once,
 * before the writers that queued behind our exclusive node: they cannot get
 * in while we read, since they wait for our exclusive node and then for our
 * reader.  Not so for a writer that queued before the reader node: it would
 * be let in as soon as we release the exclusive lock, while we still read,
 * and waiting for it would mean waiting for ourselves.
 */
static void
refuse_downgrade(Attempt *a, const char *writer)
{
	ereport(ERROR,
			(errcode(ERRCODE_T_R_DEADLOCK_DETECTED),
			 errmsg("cannot acquire zklock lock \"%s\" in shared mode while holding it in exclusive mode",
					a->name),
			 errdetail("Another session's exclusive request (\"%s\") queued behind this session's exclusive lock: a shared lock granted now would let it in while this session still reads, and waiting for it would wait for this session itself.",
					   writer),
			 errhint("Take the shared lock before releasing the exclusive one only when nobody else waits, or release the exclusive lock and acquire the shared one.")));
}

/*
 * Should the wait look for a deadlock now?  The first time once it has
 * lasted deadlock_timeout (counted from the start of the acquisition), then
 * whenever another member of a cycle pokes it, or a look was cut short by a
 * lost connection.  Otherwise *until_check gets the milliseconds until the
 * next look that is due by the clock, or -1.
 */
static bool
deadlock_check_due(Attempt *a, long *until_check)
{
	int64		at;
	int64		left;

	*until_check = -1;
	if (a->acq->deadlock_at == 0)
		return false;
	if (deadlock_poked(&a->dl))
		return true;
	/* The first look, or another after one was cut short. */
	at = !a->dl.checked ? a->acq->deadlock_at : a->dl.retry_at;
	if (at == 0)
		return false;
	left = at - bridge_now_ms();
	if (left <= 0)
		return true;
	*until_check = (long) left;
	return false;
}

/*
 * Wait until the watch set by the caller fires (or a session event comes),
 * looking for a deadlock meanwhile when it is time.
 * False when the deadline passed.
 */
static bool
await_watch(Attempt *a, uint64 events)
{
	ZkSessionSnapshot before;

	bridge_session_snapshot(&before);
	for (;;)
	{
		long		left = time_left(a);
		long		until_check;

		if (bridge_woken_since(events, before.events))
			return true;
		if (left == 0)
			return false;
		if (deadlock_check_due(a, &until_check))
		{
			deadlock_check(&a->dl);
			continue;
		}
		zk_session_wait(until_check >= 0 && (left < 0 || until_check < left) ?
						until_check : left);
		zk_session_check_alive(ZK_WAITING);
	}
}

/* Children carrying our tag beside our node: creates whose replies were lost. */
static void
delete_twins(Attempt *a, const char *own, ZkRequest *listing)
{
	for (int i = 0; i < listing->nchildren; i++)
	{
		const char *child = listing->children[i];

		/* A twin from a lost create we could not see: never keep two. */
		if (strcmp(child, own) != 0 && strstr(child, a->tag) != NULL)
		{
			char	   *twin = psprintf("%s/%s", a->parent, child);

			bridge_delete_node(twin);
			pfree(twin);
		}
	}
}

/*
 * Judge the listing in a->children (answered, and freed here) by the rules
 * of lock_node.c: true if our node holds.  Otherwise *pred gets the nearest
 * lower node that blocks us (palloc'd; for a lock, what to watch).  Raises if
 * our node is gone, if a semaphore's leases were taken with other permits,
 * or for a downgrade that would wait for itself.
 */
static bool
judge_listing(Attempt *a, const char *own, char **pred)
{
	ZkRequest  *listing = a->children;
	const char *const *children = (const char *const *) listing->children;
	LockVerdict v;

	*pred = NULL;
	if (listing->rc != ZOK)
		zk_report_error(listing->rc, ZK_ACTION_LIST, a->parent);
	delete_twins(a, own, listing);
	lock_node_judge(children, listing->nchildren, own, a->mode, a->permits,
					a->tag, &v);
	if (v.other_permits >= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock semaphore \"%s\" is in use with %d permits, not %d",
						a->name, lock_node_permits(children[v.other_permits]),
						a->permits),
				 errdetail("Node \"%s/%s\" was taken with %d permits.",
						   a->parent, children[v.other_permits],
						   lock_node_permits(children[v.other_permits])),
				 errhint("Use the same permits for a semaphore everywhere.")));
	if (v.predecessor >= 0)
	{
		if (a->own_writer != NULL)
			refuse_downgrade(a, children[v.predecessor]);
		*pred = pstrdup(children[v.predecessor]);
	}
	free_request(&a->children);
	if (!v.own_found)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ZooKeeper node \"%s\" was deleted while waiting for the lock", a->node),
				 errdetail("Something other than this backend removed it.")));
	return v.held;
}

/* List the queue (again after lost replies) and judge it; see judge_listing. */
static bool
look(Attempt *a, const char *own, char **pred, bool *held)
{
	if (!request_until_answered(a, &a->children, bridge_get_children,
								a->parent))
		return false;
	*held = judge_listing(a, own, pred);
	return true;
}

/*
 * Wait for what keeps our node own from holding: the nearest node that
 * blocks it (pred), or, for a semaphore's head waiter, any change of the
 * leases.  Returns when it changed or the session had an event, with *held
 * set if a second look found us holding; false when the deadline passed.
 */
static bool
wait_for_turn(Attempt *a, const char *own, const char *pred, bool *held)
{
	uint64		events;
	int			rc;

	*held = false;
	begin_wait(a);
	if (a->watched)
		pfree(a->watched);
	if (a->mode == LOCK_MODE_SEMAPHORE)
	{
		a->watched = pstrdup(a->parent);
		a->watch_type = ZWATCHTYPE_CHILD;
	}
	else
	{
		a->watched = psprintf("%s/%s", a->parent, pred);
		a->watch_type = ZWATCHTYPE_DATA;
	}

	events = bridge_watch_events();
	a->watch = bridge_watch(a->watched, a->watch_type);
	if (!await_reply(a, a->watch))
		return false;
	rc = a->watch->rc;
	free_request(&a->watch);
	if (rc == ZOK && a->watch_type == ZWATCHTYPE_CHILD)
	{
		char	   *again;

		/*
		 * The leases' watch is set after they were listed: a lease that went
		 * in between would never be heard of, and the head waiter would wait
		 * for good.  Look again now that it is armed: what goes from now on
		 * fires it.
		 */
		if (!look(a, own, &again, held))
			return false;
		if (*held)
			return true;
	}
	if (rc == ZOK)
		return await_watch(a, events);
	if (bridge_reply_lost(rc))
		return await_reconnect(a);
	/* ZNONODE: the predecessor left before we could watch it. */
	if (rc != ZNONODE)
		zk_report_error(rc, ZK_ACTION_WATCH, a->watched);
	return true;
}

/*
 * Queue up and wait for our turn.  True when we hold the lock, false when
 * the deadline passed (or, for a try, the lock was taken).
 */
static bool
run_attempt(Attempt *a)
{
	const char *own;

	if (!enqueue(a))
		return false;
	own = strrchr(a->node, '/') + 1;
	a->dl.name = a->name;
	a->dl.parent = a->parent;
	a->dl.node = a->node;
	a->dl.czxid = a->czxid;
	a->dl.mode = a->mode;

	for (;;)
	{
		char	   *pred;
		bool		held;

		if (!look(a, own, &pred, &held))
			return false;
		if (held)
			return true;
		if (a->acq->timeout_ms == 0)
			return false;
		if (!wait_for_turn(a, own, pred, &held))
			return false;
		if (held)
			return true;
	}
}

/* Undo everything the attempt did.  Safe in PG_CATCH: never raises. */
static void
give_up(Attempt *a)
{
	deadlock_withdraw(&a->dl);
	drop_path_creates(&a->path_creates);
	drop_request(&a->create);
	drop_request(&a->children);
	drop_request(&a->watch);
	drop_request(&a->sync);
	drop_request(&a->get);
	if (a->watched)
		bridge_remove_watch(a->watched, a->watch_type);
	if (a->node)
	{
		bridge_unwatch_held(a->hw);
		a->hw = NULL;
		bridge_delete_node(a->node);
	}
	else if (a->create_unresolved)
		bridge_delete_tagged(a->parent, a->tag);
}

/*
 * Like ProcSleep, keep the indicator: if the timeout already fired and set
 * QueryCancelPending, the cancel must be reported as a lock timeout.
 */
static void
disarm_lock_timeout(Acquisition *acq)
{
	if (acq->lock_timeout_armed)
	{
		disable_timeout(LOCK_TIMEOUT, true);
		acq->lock_timeout_armed = false;
	}
}

static Attempt *
attempt_new(const char *parent, LockMode mode,
			const LockRequest *req, Acquisition *acq)
{
	Attempt    *a = palloc0(sizeof(Attempt));

	a->acq = acq;
	a->name = req->name;
	a->parent = parent;
	a->mode = mode;
	a->permits = req->permits;
	a->own_writer = req->own_writer;
	zk_session_new_tag(a->tag);
	a->prefix = lock_node_prefix(parent, a->tag, mode, req->permits,
								 zklock_exclusive_naming == EXCLUSIVE_NAMING_READWRITE &&
								 req->mode == LOCK_MODE_EXCLUSIVE);
	a->data = node_info_json(lock_mode_names[req->mode],
							 req->mode == LOCK_MODE_SEMAPHORE ? req->permits : 0);
	return a;
}

/*
 * Run an attempt to its end.  True with held filled in when granted; false
 * when the deadline passed, and then nothing is left in ZooKeeper.
 */
static bool
attempt_finish(Attempt *a, HeldNode *held)
{
	bool		granted;

	PG_TRY();
	{
		granted = run_attempt(a);
	}
	PG_CATCH();
	{
		give_up(a);
		PG_RE_THROW();
	}
	PG_END_TRY();
	deadlock_withdraw(&a->dl);

	if (!granted)
	{
		give_up(a);
		lock_recipe_await_releases(true, true);
		return false;
	}
	/*
	 * Nothing is in flight.  A lock's watch fired, or was never set; the
	 * leases' watch may still be armed (granted on a second look, or on a
	 * wake-up by another event): remove it.
	 */
	drop_request(&a->children);
	if (a->watched && a->watch_type == ZWATCHTYPE_CHILD)
		bridge_remove_watch(a->watched, a->watch_type);
	held->path = a->node;
	held->watch = a->hw;
	held->token = a->czxid;
	held->recheck_tag = a->created_again ? pstrdup(a->tag) : NULL;
	return true;
}

/*
 * A semaphore: take a lease, behind the gate <parent>/locks unless this is a
 * try.  The gate is released as soon as the lease is held (or given up).
 */
static bool
acquire_semaphore(const LockRequest *req, Acquisition *acq,
				  HeldNode *held)
{
	char	   *leases = psprintf("%s/leases", req->parent);
	HeldNode	gate = {0};
	volatile bool granted;

	if (req->timeout_ms != 0 &&
		!attempt_finish(attempt_new(psprintf("%s/locks", req->parent),
									LOCK_MODE_EXCLUSIVE, req, acq),
						&gate))
		return false;
	PG_TRY();
	{
		granted = attempt_finish(attempt_new(leases, LOCK_MODE_SEMAPHORE,
											 req, acq),
								 held);
	}
	PG_FINALLY();
	{
		if (gate.path != NULL)
			lock_recipe_release(gate.path, gate.recheck_tag, gate.watch, NULL);
	}
	PG_END_TRY();
	/* Timed out: the gate's delete too is applied before returning. */
	if (!granted)
		lock_recipe_await_releases(true, true);
	return granted;
}

/*
 * Acquire what req asks for.  On success fills held (in CurrentMemoryContext)
 * and returns true; on timeout returns false and leaves nothing in ZooKeeper.
 */
bool
lock_recipe_acquire(const LockRequest *req, HeldNode *held)
{
	Acquisition acq = {0};
	bool		granted;

	acq.timeout_ms = req->timeout_ms;
	if (req->timeout_ms != 0)
		acq.deadlock_at = bridge_now_ms() + DeadlockTimeout;
	PG_TRY();
	{
		if (req->mode == LOCK_MODE_SEMAPHORE)
			granted = acquire_semaphore(req, &acq, held);
		else
			granted = attempt_finish(attempt_new(req->parent, req->mode,
												 req, &acq),
									 held);
	}
	PG_FINALLY();
	{
		disarm_lock_timeout(&acq);
	}
	PG_END_TRY();
	return granted;
}

/*
 * Locks released whose delete's verdict the backend has not read yet: each
 * is proof that the lock was held until its release, or not (DESIGN 2).
 */
typedef struct PendingRelease
{
	dlist_node	node;
	HeldWatch  *watch;
	int64		sent_at;		/* its delete's sending */
	char		name[ZKLOCK_NAME_MAX + 1];
} PendingRelease;

static dlist_head pending_releases = DLIST_STATIC_INIT(pending_releases);

/*
 * Delete a node we hold.  Does not wait, so that many releases go out as one
 * pipelined batch; lock_recipe_await_releases waits for the batch.  name is
 * the lock's, when the release must prove that the lock was held until then
 * (NULL for a semaphore's gate, or a node never handed to the caller).
 *
 * recheck_tag is set when a create of this acquisition lost its reply, was
 * not found after the reconnect, and was made again: should the first one
 * land after all, late, it would sit in the queue as our twin.  The queue is
 * searched for the tag once more, behind the delete.
 */
void
lock_recipe_release(const char *node, const char *recheck_tag,
					HeldWatch *watch, const char *name)
{
	if (name != NULL && watch != NULL)
	{
		PendingRelease *pr = MemoryContextAlloc(TopMemoryContext,
												sizeof(PendingRelease));

		pr->watch = watch;
		pr->sent_at = bridge_now_ms();
		strlcpy(pr->name, name, sizeof(pr->name));
		dlist_push_tail(&pending_releases, &pr->node);
		bridge_release_held(watch, node);
	}
	else
	{
		bridge_unwatch_held(watch);
		bridge_delete_node(node);
	}
	if (recheck_tag != NULL)
		bridge_delete_sibling_tagged(node, recheck_tag);
}

/* The sending of the latest release whose verdict is still to come; 0: none. */
static int64
verdicts_pending_since(void)
{
	dlist_iter	it;
	int64		since = 0;

	dlist_foreach(it, &pending_releases)
	{
		PendingRelease *pr = dlist_container(PendingRelease, node, it.cur);

		if (bridge_release_verdict(pr->watch) == RELEASE_PENDING)
			since = Max(since, pr->sent_at);
	}
	return since;
}

/*
 * What a release that proved nothing means for the transaction is
 * lost_locks.c's to say (a WARNING, and its work may not commit as if
 * protected); _PG_init tells us whom to report to.
 */
static UnprovenReleaseReporter unproven_reporter = NULL;

void
lock_recipe_set_unproven_reporter(UnprovenReleaseReporter reporter)
{
	unproven_reporter = reporter;
}

/*
 * Read the verdicts of the releases sent; with report, those that proved
 * nothing are reported.  Returns how many proved nothing.
 */
static int
settle_releases(bool report)
{
	dlist_mutable_iter it;
	int			unproven = 0;
	char		first[ZKLOCK_NAME_MAX + 1];

	dlist_foreach_modify(it, &pending_releases)
	{
		PendingRelease *pr = dlist_container(PendingRelease, node, it.cur);

		if (bridge_release_verdict(pr->watch) != RELEASE_PROVEN &&
			unproven++ == 0)
			strlcpy(first, pr->name, sizeof(first));
		bridge_unwatch_held(pr->watch);
		dlist_delete(&pr->node);
		pfree(pr);
	}
	if (report && unproven > 0)
	{
		Assert(unproven_reporter != NULL);
		unproven_reporter(first, unproven);
	}
	return unproven;
}

/*
 * The latest sending of a delete whose wait a cancel or termination gave
 * up: neither that wait nor a later one (the rollback's, the next
 * transaction's) waits for it or those sent before it any more.
 */
static int64 deletes_given_up = 0;

/*
 * Wait until ZooKeeper has applied every delete we sent, so that a lock this
 * backend released is free for every other session by the time the release
 * (or COMMIT, or a timed-out acquire) returns, as with pg_advisory_lock; and
 * for the verdict on each released lock: the server's answer to its delete.
 * Returns how many released locks it did not prove held until their release
 * (reported when report is true; see settle_releases).
 *
 * Every bound counts from the sending of what is waited for, as for every
 * round trip of a call (docs/reference.md): a COMMIT that follows a release
 * whose delete was not answered in time does not wait for it again.
 * Deletes: stops early when the session is not connected (they are retried
 * after reconnecting, or go with the session); bounded by connect_timeout.
 * Verdicts: waits while the session may still answer, bounded by
 * connect_timeout like every round trip of a call, and by the session
 * timeout, after which a verdict could only be that the session is lost.  A
 * verdict not read by then proves nothing: the release is reported as such,
 * the safe side; the delete itself still goes out after a reconnect.
 * A cancel or termination gives up the wait for the deletes sent so far
 * (deletes_given_up); they still go out.  interruptible is false in
 * transaction callbacks, where a wait must not serve interrupts or raise
 * anything: the cancel ends the wait there without an error (it is served
 * once the callbacks are done, or ignored by an idle backend), and the
 * deletes' bound is also at most the session timeout, which only a
 * superuser sets.
 */
int
lock_recipe_await_releases(bool interruptible, bool report)
{
	int			bounded_ms = Min(zklock_connect_timeout, zklock_session_timeout);
	int			limit_ms = interruptible ? zklock_connect_timeout : bounded_ms;

	for (;;)
	{
		ZkSessionStatus status = zk_session_status();
		int64		deletes_at;
		int64		verdicts_at;
		int64		until = 0;
		int64		now;

		if (bridge_deletes_pending(&deletes_at) && deletes_at > deletes_given_up &&
			status == ZK_SESSION_CONNECTED)
			until = deletes_at + limit_ms;
		if (report && status != ZK_SESSION_LOST && status != ZK_SESSION_NONE &&
			(verdicts_at = verdicts_pending_since()) != 0)
			until = Max(until, verdicts_at + bounded_ms);
		now = bridge_now_ms();
		if (until <= now)
			break;
		if (QueryCancelPending || ProcDiePending)
		{
			deletes_given_up = deletes_at;
			if (!interruptible)
				break;
		}
		if (interruptible)
			bridge_wait(until - now);
		else
			bridge_wait_quietly(until - now);
	}
	return settle_releases(report);
}
