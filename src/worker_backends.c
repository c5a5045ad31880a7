/*
 * worker_backends.c
 *	  What the session worker keeps of each backend: the nodes it created
 *	  (by slot and incarnation, so that a reused slot is another backend),
 *	  its creates whose replies were lost, and the cleaning up when it
 *	  releases, gives up, exits or is found gone.
 *
 * A node is deleted for a backend only if that backend created it.
 */
#include "postgres.h"

#include <signal.h>
#include <zookeeper/zookeeper.h>

#include "miscadmin.h"
#include "utils/memutils.h"

#include "worker_int.h"

WorkerSlot *worker_slots;
static int64 worker_last_slot_check = 0;

/* ---- shared state ---- */

ZkSlot *
worker_shared_slot(int slot)
{
	return &zk_shared->slots[slot];
}

/*
 * Under the mutex: the latch of slot if it still belongs to the backend of
 * that incarnation, else NULL.
 */
Latch *
worker_slot_latch(int slot, uint32 incarnation)
{
	ZkSlot	   *s = worker_shared_slot(slot);

	return (s->pid != 0 && s->incarnation == incarnation) ? s->latch : NULL;
}

/* One of the slot's pending deletes is done. */
void
worker_uncount(int slot, uint32 incarnation)
{
	Latch	   *latch;

	SpinLockAcquire(&zk_shared->mutex);
	latch = NULL;
	if (worker_shared_slot(slot)->incarnation == incarnation)
	{
		worker_shared_slot(slot)->deletes_pending--;
		latch = worker_slot_latch(slot, incarnation);
	}
	SpinLockRelease(&zk_shared->mutex);
	zk_wake(latch);
}

void
worker_count_for(int slot, BridgeCounter c)
{
	pg_atomic_fetch_add_u64(&worker_shared_slot(slot)->counts[c], 1);
}

/* Wake every backend that uses zklock: the session changed. */
void
worker_wake_all(void)
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
WorkerSlot *
worker_slot(int slot, uint32 incarnation)
{
	WorkerSlot *ws = &worker_slots[slot];

	if (incarnation > ws->incarnation)
		ws->incarnation = incarnation;
	return ws;
}

/* ---- owned nodes ---- */

OwnedNode *
worker_find_owned(WorkerSlot *ws, uint32 incarnation, const char *path)
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

void
worker_own(int slot, uint32 incarnation, const char *path)
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
	OwnedNode  *node = worker_find_owned(&worker_slots[slot], incarnation, path);

	if (node != NULL)
	{
		dlist_delete(&node->of_slot);
		pfree(node);
	}
}

void
worker_uncertain_add(int slot, uint32 incarnation, const char *parent, const char *tag)
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
	if (!worker_still_current(call) || worker_nothing_left(rc))
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

void
worker_delete_done(int rc, const void *data)
{
	Call	   *call = (Call *) data;

	/* Requests made while disconnected wait for the reconnect: no spinning. */
	if (bridge_reply_lost(rc) && worker_still_current(call))
	{
		call->retried = true;
		worker_issue_call(call, NULL);
		return;
	}
	worker_heard_from_leader(call, ZKREQ_DELETE, rc, call->sent_at);
	if (rc != ZOK && rc != ZNONODE)
		report_cleanup_failure(call, rc);

	/*
	 * The server deleted the node of a released lock: it was there, so the
	 * lock was held until now.  A node already gone is proof only when this
	 * is a retry in the same session, whose first send may have deleted it;
	 * the first send finding it gone means somebody else deleted it.
	 */
	if (DsaPointerIsValid(call->held))
		worker_settle_release(call, worker_still_current(call) &&
							  (rc == ZOK || (rc == ZNONODE && call->retried)),
							  !call->counted);
	disown(call->slot, call->incarnation, call->path);
	if (call->counted)
		worker_uncount(call->slot, call->incarnation);
	worker_call_free(call);
}

void
worker_tagged_done(int rc, const struct String_vector *strings, const void *data)
{
	Call	   *call = (Call *) data;

	if (bridge_reply_lost(rc) && worker_still_current(call))
	{
		worker_issue_call(call, NULL);
		return;
	}
	if (rc == ZOK && worker_still_current(call))
	{
		for (int i = 0; i < strings->count; i++)
		{
			char	   *child;

			if (strstr(strings->data[i], call->tag) == NULL)
				continue;
			child = psprintf("%s/%s", call->path, strings->data[i]);
			worker_cleanup_delete(call->slot, call->incarnation, child);
			pfree(child);
		}
	}
	else
		report_cleanup_failure(call, rc);
	if (call->counted)
		worker_uncount(call->slot, call->incarnation);
	worker_call_free(call);
}

/*
 * Write the verdict on a release's delete into the backend's SharedHeld,
 * wake the backend, and drop the delete's reference to it.
 */
void
worker_set_verdict(dsa_pointer held, int slot, uint32 incarnation, bool proven,
				   bool wake)
{
	SharedHeld *sh = dsa_get_address(zk_area, held);
	Latch	   *latch;

	SpinLockAcquire(&zk_shared->mutex);
	if (sh->release_verdict == RELEASE_PENDING)
		sh->release_verdict = proven ? RELEASE_PROVEN : RELEASE_UNPROVEN;
	latch = wake ? worker_slot_latch(slot, incarnation) : NULL;
	SpinLockRelease(&zk_shared->mutex);
	zk_wake(latch);
}

/*
 * The verdict of a release's delete call; wake is false when the caller
 * wakes the backend anyway right after (its pending deletes counted down).
 */
void
worker_settle_release(Call *call, bool proven, bool wake)
{
	dsa_pointer held = call->held;

	call->held = InvalidDsaPointer;
	worker_set_verdict(held, call->slot, call->incarnation, proven, wake);
	zk_held_unref(held, false);
}

/* A cleanup for a backend, counted in its pending deletes, sent. */
static void
cleanup_call(CallKind kind, int slot, uint32 incarnation, const char *path,
			 const char *tag, dsa_pointer held)
{
	Call	   *call = worker_call_new(kind);

	call->held = held;
	call->slot = slot;
	call->incarnation = incarnation;
	call->path = MemoryContextStrdup(TopMemoryContext, path);
	if (tag != NULL)
		call->tag = MemoryContextStrdup(TopMemoryContext, tag);
	SpinLockAcquire(&zk_shared->mutex);
	call->counted = worker_shared_slot(slot)->incarnation == incarnation;
	if (call->counted)
		worker_shared_slot(slot)->deletes_pending++;
	SpinLockRelease(&zk_shared->mutex);
	worker_issue_call(call, NULL);
}

/* Delete a node of a backend's. */
void
worker_cleanup_delete(int slot, uint32 incarnation, const char *path)
{
	worker_release_delete(slot, incarnation, path, InvalidDsaPointer);
}

/*
 * Delete a node of a backend's; held, if valid, is the SharedHeld of the
 * released lock, whose verdict the delete's answer gives.
 */
void
worker_release_delete(int slot, uint32 incarnation, const char *path,
					  dsa_pointer held)
{
	OwnedNode  *node = worker_find_owned(&worker_slots[slot], incarnation, path);

	if (node != NULL)
		node->deleting = true;
	cleanup_call(CALL_DELETE, slot, incarnation, path, NULL, held);
}

/* Delete a backend's child of parent that carries tag, if there is one. */
void
worker_cleanup_delete_tagged(int slot, uint32 incarnation, const char *parent,
							 const char *tag)
{
	cleanup_call(CALL_DELETE_TAGGED, slot, incarnation, parent, tag,
				 InvalidDsaPointer);
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
	WorkerSlot *ws = &worker_slots[slot];
	dlist_mutable_iter it;

	dlist_foreach_modify(it, &ws->owned)
	{
		OwnedNode  *node = dlist_container(OwnedNode, of_slot, it.cur);

		if (node->incarnation != keep && !node->deleting && worker_zh != NULL)
			worker_cleanup_delete(slot, node->incarnation, node->path);
	}
	dlist_foreach_modify(it, &ws->uncertain)
	{
		UncertainCreate *u = dlist_container(UncertainCreate, of_slot, it.cur);

		if (u->incarnation == keep)
			continue;
		if (worker_zh != NULL)
			worker_cleanup_delete_tagged(slot, u->incarnation, u->parent, u->tag);
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
			if (ww->kind == WATCH_HELD)
				zk_held_unref(ww->held, true);
			worker_unwatch(ww);
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
void
worker_check_slots(void)
{
	int64		now = bridge_now_ms();
	bool		full = now - worker_last_slot_check >= SLOT_CHECK_MS;
	bool		changed;

	SpinLockAcquire(&zk_shared->mutex);
	changed = zk_shared->slots_changed;
	zk_shared->slots_changed = false;
	SpinLockRelease(&zk_shared->mutex);
	if (full)
		worker_last_slot_check = now;

	for (int i = 0; i < zk_shared->nslots; i++)
	{
		WorkerSlot *ws = &worker_slots[i];
		ZkSlot	   *s = worker_shared_slot(i);
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
				latch = worker_slot_latch(i, incarnation);
			}
			SpinLockRelease(&zk_shared->mutex);
			ws->exit_seen = false;
			zk_wake(latch);
		}
	}
}
