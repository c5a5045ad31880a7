/*
 * worker_watches.c
 *	  The watches the session worker sets for backends: a waiter's on the
 *	  node it waits for, a published wait's for pokes, and a held node's, to
 *	  hear when another client deletes it.  The client calls back with each;
 *	  the worker wakes the backend it is for.
 *
 * Set and removed per backend; a path that several backends watch is
 * watched by the server once for the session, and removed from it only with
 * the last of them.
 */
#include "postgres.h"

#include <zookeeper/zookeeper.h>

#include <signal.h>

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "worker_int.h"

dlist_head worker_watches = DLIST_STATIC_INIT(worker_watches);

/* ---- watches ---- */

WorkerWatch *
worker_watch_new(int slot, uint32 incarnation, WatchKind kind, int type,
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
	dlist_push_tail(&worker_watches, &ww->all);
	dlist_push_tail(&ws->watches, &ww->of_slot);
	return ww;
}

void
worker_watch_free(WorkerWatch *ww)
{
	if (ww->kind == WATCH_HELD)
		zk_held_unref(ww->held, false);
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
		worker_shared_slot(ww->slot)->incarnation == ww->incarnation)
	{
		sh->deleted = true;
		worker_shared_slot(ww->slot)->held_deletions++;
		/* A waiter whose own node went must look at its queue again. */
		worker_shared_slot(ww->slot)->watch_events++;
		latch = worker_slot_latch(ww->slot, ww->incarnation);
	}
	SpinLockRelease(&zk_shared->mutex);
	zk_wake(latch);
}

/* The node's own data with the time a release was requested in it. */
static char *
with_request(SharedHeld *sh, TimestampTz since, int *len)
{
	StringInfoData buf;
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

	initStringInfo(&buf);
	MemoryContextSwitchTo(old);
	/* The node's data is the JSON object node_info_json made: {...}. */
	if (sh->data_len >= 2 && sh->data[sh->data_len - 1] == '}')
	{
		appendBinaryStringInfo(&buf, sh->data, sh->data_len - 1);
		appendStringInfo(&buf, ",\"release_requested_at\":\"%s\"}",
						 timestamptz_to_str(since));
	}
	else
		appendBinaryStringInfo(&buf, sh->data, sh->data_len);
	*len = buf.len;
	return buf.data;
}

/*
 * A release was requested for a backend's node: its data is __REVOKE__.
 * Tell the backend; interrupt it (see revocation.c) if it holds the
 * lock and set zklock.revocable; and write the node's own data back with the
 * request recorded in it, so that who holds the lock stays known.  The write
 * is for the version read: a newer request is heard and answered in turn.
 */
static void
release_requested(WorkerWatch *ww, int version)
{
	SharedHeld *sh = dsa_get_address(zk_area, ww->held);
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz since = 0;
	Latch	   *latch = NULL;
	ZkSlot	   *slot;
	Call	   *call;

	SpinLockAcquire(&zk_shared->mutex);
	slot = worker_shared_slot(ww->slot);
	if (!sh->released && !sh->deleted && !ww->gone &&
		slot->incarnation == ww->incarnation)
	{
		if (!sh->release_requested)
		{
			sh->release_requested = true;
			sh->release_requested_at = now;
		}
		since = sh->release_requested_at;
		slot->release_requests++;
		latch = worker_slot_latch(ww->slot, ww->incarnation);
		/*
		 * Once per hold: a job that caught 57Z01 decided.  Never while it
		 * commits or releases (its next statement hears the request).  The
		 * signal goes under the mutex, which a backend takes to begin such
		 * a section: it then knows whether one is on its way to it, and can
		 * take it (see revocation_quiet).  kill() does not block.
		 */
		if (sh->granted && slot->revocable && !sh->interrupted && !slot->quiet)
		{
			sh->interrupted = true;
			slot->revoke_signalled = true;
			kill(slot->pid, REVOKE_SIGNAL);
		}
	}
	SpinLockRelease(&zk_shared->mutex);
	if (since == 0)
		return;
	zk_wake(latch);

	call = worker_call_new(CALL_REWRITE);
	call->slot = ww->slot;
	call->incarnation = ww->incarnation;
	call->path = MemoryContextStrdup(TopMemoryContext, ww->path);
	call->data = with_request(sh, since, &call->data_len);
	call->version = version;
	worker_count_for(ww->slot, BRIDGE_SETS);
	worker_issue_call(call, NULL);
}

/* A lost reply is sent again: a write that did happen fails on its version. */
void
worker_rewrite_done(int rc, const struct Stat *stat, const void *data)
{
	Call	   *call = (Call *) data;

	if (bridge_reply_lost(rc) && worker_still_current(call))
		worker_issue_call(call, NULL);
	else
		worker_call_free(call);
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
				 handle == worker_zh)
		{
			worker_arm_watch(ww, NULL);
			return;
		}
	}
	else if (!ww->gone)
	{
		SpinLockAcquire(&zk_shared->mutex);
		latch = worker_slot_latch(ww->slot, ww->incarnation);
		if (latch != NULL && ww->kind == WATCH_WAITER)
			worker_shared_slot(ww->slot)->watch_events++;
		/* A poke rewrites the entry; its deletion by its owner is none. */
		else if (latch != NULL && type == ZOO_CHANGED_EVENT)
			worker_shared_slot(ww->slot)->poked = true;
		else
			latch = NULL;
		SpinLockRelease(&zk_shared->mutex);
		zk_wake(latch);
	}

	/* A removal deferred to the main loop frees it there. */
	if (!ww->unwatch_deferred)
		worker_watch_free(ww);
}

static void
ignore_reply(int rc, const void *data)
{
}

/*
 * Stop a watch of a backend's.  The client forgets it at once (so it is
 * never called back with it again); the server's watch, which serves every
 * watcher of the path in this session, is removed only with the last one,
 * counting those whose request is still on its way: the server would set
 * such a watch and then remove it with ours, leaving its waiter asleep.
 * A watch not set yet is stopped when its reply comes.
 */
void
worker_unwatch(WorkerWatch *ww)
{
	dlist_iter	it;
	bool		alone = true;

	ww->removing = true;
	if (!ww->armed)
		return;
	if (worker_defer(DEFER_UNWATCH, NULL, ww))
	{
		ww->unwatch_deferred = true;
		return;
	}
	worker_client_depth++;
	zoo_aremove_watches(worker_zh, ww->path, ww->type, watcher, ww, 1,
						(void_completion_t *) ignore_reply, NULL);
	ww->armed = false;
	dlist_foreach(it, &worker_watches)
	{
		WorkerWatch *other = dlist_container(WorkerWatch, all, it.cur);

		/* One still on its way is set by the server before our removal. */
		if ((other->armed || other->arming) && other->type == ww->type &&
			strcmp(other->path, ww->path) == 0)
		{
			alone = false;
			break;
		}
	}
	if (alone)
	{
		worker_count_for(ww->slot, BRIDGE_WATCH_REMOVALS);
		zoo_aremove_all_watches(worker_zh, ww->path, ww->type, 0,
								(void_completion_t *) ignore_reply, NULL);
	}
	worker_client_depth--;
	worker_watch_free(ww);
}

void
worker_watch_armed(int rc, WorkerWatch *ww, Call *call)
{
	bool		again = bridge_reply_lost(rc) && ww->kind == WATCH_HELD &&
		watch_wanted(ww) && worker_still_current(call);

	ww->arming = false;
	if (rc == ZOK)
		ww->armed = true;
	else if (ww->kind == WATCH_HELD && rc == ZNONODE)
		held_gone(ww);

	/* A backend that gave up on the watch has it marked for removal here. */
	if (DsaPointerIsValid(call->req))
		worker_complete(call, dsa_get_address(zk_area, call->req), rc);
	if (again)
		worker_arm_watch(ww, NULL);
	/* Not set: the client keeps no watcher for a failed get. */
	else if (rc != ZOK)
		worker_watch_free(ww);
	else if (ww->removing)
		worker_unwatch(ww);
}

static void
data_watch_done(int rc, const char *value, int value_len,
				const struct Stat *stat, const void *data)
{
	Call	   *call = (Call *) data;

	if (rc == ZOK && call->watch->kind == WATCH_HELD &&
		lock_node_revoke_message(value, value_len))
		release_requested(call->watch, stat->version);
	worker_watch_armed(rc, call->watch, call);
	worker_call_free(call);
}

static void
child_watch_done(int rc, const struct String_vector *strings, const void *data)
{
	Call	   *call = (Call *) data;

	worker_watch_armed(rc, call->watch, call);
	worker_call_free(call);
}

/*
 * Set ww on the server; answer, if any, is the backend's request to answer.
 * Outside the client only (see arm_watch).
 */
void
worker_arm_watch_now(WorkerWatch *ww, Call *answer)
{
	Call	   *call;
	int			rc;

	call = answer ? answer : worker_call_new(CALL_ARM);
	call->watch = ww;
	worker_client_depth++;
	if (answer == NULL)
		worker_count_for(ww->slot, BRIDGE_WATCHES);
	ww->arming = true;
	if (ww->type == ZWATCHTYPE_CHILD)
		rc = zoo_awget_children(worker_zh, ww->path, watcher, ww, child_watch_done, call);
	else
		rc = zoo_awget(worker_zh, ww->path, watcher, ww, data_watch_done, call);
	if (rc != ZOK)
	{
		worker_watch_armed(rc, ww, call);
		worker_call_free(call);
	}
	worker_client_depth--;
}

/* arm_watch_now, or from a callback, later in the main loop. */
void
worker_arm_watch(WorkerWatch *ww, Call *answer)
{
	if (!worker_defer(DEFER_ARM, answer, ww))
		worker_arm_watch_now(ww, answer);
}
