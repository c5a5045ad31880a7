/*
 * worker_requests.c
 *	  The session worker carries out backends' requests: each one handed to
 *	  the client as a call, its reply written next to the request in shared
 *	  memory before the backend's latch is set; a request the backend gave
 *	  up on is undone when its reply comes.
 *
 * Callbacks never call the client (see worker_client_depth): what they would
 * send is deferred to the worker's main loop.
 */
#include "postgres.h"

#include <zookeeper/zookeeper.h>

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/memutils.h"

#include "stats.h"
#include "worker_int.h"

dlist_head worker_in_flight = DLIST_STATIC_INIT(worker_in_flight);
static int	worker_calls_in_flight = 0;

/*
 * Calls into the client under way.  The single-threaded client runs our
 * completions and watchers inside its own calls (zookeeper_process, and any
 * request whose send fails, which cleans up the connection there and then):
 * a callback that called the client again could clean up the lists the
 * outer call is walking, and replies would then be matched to the wrong
 * requests ("unexpected server response").  So callbacks never call the
 * client: what they would send is deferred to the main loop.
 */
int			worker_client_depth = 0;

static dlist_head worker_deferred = DLIST_STATIC_INIT(worker_deferred);

/* With credentials: the creator may do anything, everybody may read. */
static struct ACL protected_acl_entries[2] = {
	{0x1f, {"auth", ""}},
	{0x01, {"world", "anyone"}}
};
static struct ACL_vector worker_protected_acl = {2, protected_acl_entries};

/* ---- calls ---- */

Call *
worker_call_new(CallKind kind)
{
	Call	   *call = MemoryContextAllocZero(TopMemoryContext, sizeof(Call));

	call->kind = kind;
	call->epoch = worker_generation;
	call->sent_at = bridge_now_ms();
	call->req = InvalidDsaPointer;
	call->held = InvalidDsaPointer;
	dlist_push_tail(&worker_in_flight, &call->in_flight);
	worker_calls_in_flight++;
	return call;
}

void
worker_call_free(Call *call)
{
	/* A release's delete that ends without an answer proves nothing. */
	if (DsaPointerIsValid(call->held))
		worker_settle_release(call, false, true);
	dlist_delete(&call->in_flight);
	worker_calls_in_flight--;
	if (call->tag)
		pfree(call->tag);
	if (call->path)
		pfree(call->path);
	if (call->data)
		pfree(call->data);
	pfree(call);
}

/* Whether a retry of this call may go to the open handle. */
bool
worker_still_current(Call *call)
{
	return worker_zh != NULL && call->epoch == worker_generation;
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

/*
 * Whether a reply of the server to this kind of request went through the
 * leader, and so proves that the session lived in the ensemble, not only in
 * the server we talk to: a follower cut off from its leader answers reads
 * (and pings) by itself until it gives up on the leader, syncLimit x
 * tickTime later, while the leader may have expired the session long
 * before.  Writes, failed ones too, and syncs are the leader's.
 */
static bool
through_leader(ZkRequestKind kind)
{
	return kind == ZKREQ_CREATE || kind == ZKREQ_SET || kind == ZKREQ_SYNC ||
		kind == ZKREQ_DELETE;
}

/*
 * The leader answered a request of the open session sent at sent_at: the
 * session cannot expire before sent_at plus its timeout.
 */
void
worker_heard_from_leader(Call *call, ZkRequestKind kind, int rc, int64 sent_at)
{
	if (call->epoch != worker_generation || !server_answered(rc) ||
		!through_leader(kind))
		return;
	SpinLockAcquire(&zk_shared->mutex);
	if (sent_at > zk_shared->last_contact)
		zk_shared->last_contact = sent_at;
	SpinLockRelease(&zk_shared->mutex);
}

/* A reply after which there is nothing left to clean up or to report. */
bool
worker_nothing_left(int rc)
{
	return rc == ZOK || rc == ZNONODE || rc == ZSESSIONEXPIRED ||
		rc == ZCLOSING || rc == ZINVALIDSTATE;
}

/* ---- replies ---- */

/*
 * Publish the reply to a backend's request, or, if it gave up, undo what
 * the request did.  The reply is written before the state changes.
 */
void
worker_complete(Call *call, SharedRequest *sr, int rc)
{
	uint32		expected = REQ_QUEUED;
	Latch	   *latch;

	sr->rc = rc;
	worker_heard_from_leader(call, sr->kind, rc, sr->sent_at);
	SpinLockAcquire(&zk_shared->mutex);
	latch = worker_slot_latch(sr->slot, sr->incarnation);
	SpinLockRelease(&zk_shared->mutex);

	if (pg_atomic_compare_exchange_u32(&sr->state, &expected, REQ_DONE))
	{
		zk_wake(latch);
		call->req = InvalidDsaPointer;
		return;
	}

	/* Abandoned: nobody reads this; undo it. */
	if (sr->kind == ZKREQ_CREATE && sr->payload[sr->tag_off] != '\0' &&
		worker_still_current(call))
	{
		if (rc == ZOK)
			worker_cleanup_delete(sr->slot, sr->incarnation,
								  dsa_get_address(zk_area, sr->result));
		else if (bridge_reply_lost(rc))
		{
			char	   *parent = pstrdup(sr->payload);

			*strrchr(parent, '/') = '\0';
			worker_cleanup_delete_tagged(sr->slot, sr->incarnation, parent,
										 sr->payload + sr->tag_off);
			pfree(parent);
		}
	}
	else if (sr->kind == ZKREQ_WATCH && call->watch != NULL)
		call->watch->removing = true;
	if (sr->counted)
		worker_uncount(sr->slot, sr->incarnation);
	if (DsaPointerIsValid(sr->result))
		zk_shared_free(sr->result);
	zk_shared_free(call->req);
	call->req = InvalidDsaPointer;
}

/* A backend's request is answered: publish the reply, and the call is done. */
void
worker_reply(Call *call, SharedRequest *sr, int rc)
{
	worker_complete(call, sr, rc);
	worker_call_free(call);
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
	dsa_pointer dp = zk_shared_alloc(len + 1, DSA_ALLOC_NO_OOM);
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
		if (sr->arg != ZOO_CONTAINER && worker_still_current(call))
			worker_own(sr->slot, sr->incarnation, value);
		sr->czxid = stat->czxid;
		if (!put_result(sr, value, strlen(value)))
		{
			worker_cleanup_delete(sr->slot, sr->incarnation, value);
			rc = ZSYSTEMERROR;
		}
	}
	else if (tagged && bridge_reply_lost(rc) && worker_still_current(call))
	{
		char	   *parent = pstrdup(sr->payload);

		*strrchr(parent, '/') = '\0';
		worker_uncertain_add(sr->slot, sr->incarnation, parent, sr->payload + sr->tag_off);
		pfree(parent);
	}
	worker_reply(call, sr, rc);
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
	worker_reply(call, sr, rc);
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
	worker_reply(call, sr, rc);
}

static void
stat_done(int rc, const struct Stat *stat, const void *data)
{
	Call	   *call = (Call *) data;
	SharedRequest *sr = dsa_get_address(zk_area, call->req);

	if (rc == ZOK && stat != NULL)
		take_stat(sr, stat);
	worker_reply(call, sr, rc);
}

static void
sync_done(int rc, const char *value, const void *data)
{
	Call	   *call = (Call *) data;

	worker_reply(call, dsa_get_address(zk_area, call->req), rc);
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

	/* Only from the main loop: a callback's sends were deferred. */
	Assert(worker_client_depth == 1);

	switch (call->kind)
	{
		case CALL_DELETE:
			rc = zoo_adelete(worker_zh, call->path, -1, worker_delete_done, call);
			if (rc != ZOK)
				worker_delete_done(rc, call);
			return;
		case CALL_DELETE_TAGGED:
			rc = zoo_aget_children(worker_zh, call->path, 0, worker_tagged_done, call);
			if (rc != ZOK)
				worker_tagged_done(rc, NULL, call);
			return;
		case CALL_REWRITE:
			rc = zoo_aset(worker_zh, call->path, call->data, call->data_len,
						  call->version, worker_rewrite_done, call);
			if (rc != ZOK)
				worker_rewrite_done(rc, NULL, call);
			return;
		case CALL_ARM:
			return;				/* issued where it is made */
		case CALL_REPLY:
			break;
	}

	switch (sr->kind)
	{
		case ZKREQ_CREATE:
			rc = zoo_acreate2(worker_zh, path, sr->payload + sr->data_off, sr->data_len,
							  worker_session_auth[0] ? &worker_protected_acl : &ZOO_OPEN_ACL_UNSAFE,
							  sr->arg, create_done, call);
			if (rc != ZOK)
				create_done(rc, NULL, NULL, call);
			break;
		case ZKREQ_CHILDREN:
			rc = zoo_aget_children(worker_zh, path, 0, children_done, call);
			if (rc != ZOK)
				children_done(rc, NULL, call);
			break;
		case ZKREQ_GET:
			rc = zoo_aget(worker_zh, path, 0, get_done, call);
			if (rc != ZOK)
				get_done(rc, NULL, 0, NULL, call);
			break;
		case ZKREQ_SYNC:
			rc = zoo_async(worker_zh, path, sync_done, call);
			if (rc != ZOK)
				sync_done(rc, NULL, call);
			break;
		case ZKREQ_EXISTS:
			rc = zoo_aexists(worker_zh, path, 0, stat_done, call);
			if (rc != ZOK)
				stat_done(rc, NULL, call);
			break;
		case ZKREQ_SET:
			rc = zoo_aset(worker_zh, path, sr->payload + sr->data_off, sr->data_len,
						  sr->arg, stat_done, call);
			if (rc != ZOK)
				stat_done(rc, NULL, call);
			break;
		case ZKREQ_WATCH:
		case ZKREQ_POKE_WATCH:
			/* Not deferred: issue_call decided that already. */
			worker_arm_watch_now(worker_watch_new(sr->slot, sr->incarnation,
												  sr->kind == ZKREQ_WATCH ? WATCH_WAITER : WATCH_POKE,
												  sr->kind == ZKREQ_WATCH ? sr->arg : ZWATCHTYPE_DATA,
												  path, InvalidDsaPointer),
					  call);
			break;
		default:
			elog(ERROR, "zklock: request kind %d is not a reply's", (int) sr->kind);
	}
}

void
worker_issue_call(Call *call, SharedRequest *sr)
{
	if (worker_defer(DEFER_ISSUE, call, NULL))
		return;
	worker_client_depth++;
	issue_call_now(call, sr);
	worker_client_depth--;
}

/* Inside a call into the client: keep what a callback would send for later. */
bool
worker_defer(DeferKind kind, Call *call, WorkerWatch *ww)
{
	Deferred   *d;

	if (worker_client_depth == 0)
		return false;
	d = MemoryContextAlloc(TopMemoryContext, sizeof(Deferred));
	d->kind = kind;
	d->call = call;
	d->watch = ww;
	dlist_push_tail(&worker_deferred, &d->node);
	return true;
}

/*
 * Main loop, outside the client: send what callbacks deferred.  Only what
 * was deferred before this call: what these sends defer in turn waits for
 * the next turn, so that a request that fails at once cannot spin.
 */
void
worker_flush_deferred(void)
{
	dlist_head	batch;

	dlist_init(&batch);
	while (!dlist_is_empty(&worker_deferred))
		dlist_push_tail(&batch, dlist_pop_head_node(&worker_deferred));
	while (!dlist_is_empty(&batch))
	{
		Deferred   *d = dlist_container(Deferred, node, dlist_pop_head_node(&batch));

		switch (d->kind)
		{
			case DEFER_ISSUE:
				worker_issue_call(d->call, d->call->kind == CALL_REPLY ?
								  dsa_get_address(zk_area, d->call->req) : NULL);
				break;
			case DEFER_ARM:
				worker_arm_watch(d->watch, d->call);
				break;
			case DEFER_UNWATCH:
				d->watch->unwatch_deferred = false;
				if (d->watch->armed)
					worker_unwatch(d->watch);
				else
					worker_watch_free(d->watch);	/* it fired meanwhile */
				break;
		}
		pfree(d);
	}
}

/* A closed handle's deferred sends go with it (their calls are finished). */
void
worker_drop_deferred(void)
{
	while (!dlist_is_empty(&worker_deferred))
		pfree(dlist_container(Deferred, node, dlist_pop_head_node(&worker_deferred)));
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
	ok = worker_shared_slot(sr->slot)->incarnation == sr->incarnation &&
		strncmp(name + 4, worker_shared_slot(sr->slot)->owner, ZK_OWNER_LEN) == 0;
	SpinLockRelease(&zk_shared->mutex);
	return ok;
}

/* Whether the backend may delete path: it created it. */
static bool
may_delete(SharedRequest *sr, const char *path)
{
	return worker_find_owned(&worker_slots[sr->slot], sr->incarnation, path) != NULL ||
		names_owner(sr, path);
}

/* Whether tag is one of the backend's attempt tags. */
static bool
tag_is_backends(SharedRequest *sr, const char *tag)
{
	bool		ok;

	SpinLockAcquire(&zk_shared->mutex);
	ok = worker_shared_slot(sr->slot)->incarnation == sr->incarnation &&
		strncmp(tag, worker_shared_slot(sr->slot)->owner, ZK_OWNER_LEN) == 0;
	SpinLockRelease(&zk_shared->mutex);
	return ok;
}

/* A one-way request: the worker's from the start. */
static void
take_oneway(dsa_pointer dp, SharedRequest *sr)
{
	bool		current = worker_zh != NULL && sr->epoch == worker_generation;
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
								path, worker_shared_slot(sr->slot)->pid)));
				break;
			}
			/* A release's delete takes the backend's SharedHeld along. */
			worker_release_delete(sr->slot, sr->incarnation, path, sr->held);
			sr->held = InvalidDsaPointer;
			break;
		case ZKREQ_DELETE_TAGGED:
			if (current && tag_is_backends(sr, tag))
				worker_cleanup_delete_tagged(sr->slot, sr->incarnation, path, tag);
			break;
		case ZKREQ_UNWATCH:
			if (worker_slots[sr->slot].incarnation == sr->incarnation)
			{
				dlist_iter	it;

				dlist_foreach(it, &worker_slots[sr->slot].watches)
				{
					WorkerWatch *ww = dlist_container(WorkerWatch, of_slot, it.cur);

					if (ww->kind == WATCH_WAITER && !ww->removing &&
						ww->type == sr->arg && strcmp(ww->path, path) == 0)
					{
						worker_unwatch(ww);
						break;
					}
				}
			}
			break;
		case ZKREQ_HELD_WATCH:
			/* A node found again after its create's reply was lost. */
			if (current && names_owner(sr, path) &&
				worker_find_owned(&worker_slots[sr->slot], sr->incarnation, path) == NULL)
				worker_own(sr->slot, sr->incarnation, path);
			if (current)
			{
				worker_arm_watch(worker_watch_new(sr->slot, sr->incarnation, WATCH_HELD,
												  ZWATCHTYPE_DATA, path, sr->held),
						  NULL);
				sr->held = InvalidDsaPointer;
			}
			break;
		default:
			elog(LOG, "zklock: request kind %d is not one-way", (int) sr->kind);
	}
	if (DsaPointerIsValid(sr->held))
	{
		/* A release's delete not sent: its session is gone. */
		if (sr->kind == ZKREQ_DELETE)
			worker_set_verdict(sr->held, sr->slot, sr->incarnation, false, true);
		zk_held_unref(sr->held, false);
	}
	if (sr->counted)
		worker_uncount(sr->slot, sr->incarnation);
	zk_shared_free(dp);
}

/*
 * Flow control.  A ZooKeeper server stops reading every connection, pings
 * included, while more requests than its globalOutstandingLimit (1,000 by
 * default) wait in it, and every PostgreSQL server's worker shares that
 * limit: a burst of this server's backends (a pooler's thousand connections
 * releasing at once) must not fill it.  At most WORKER_MAX_IN_FLIGHT calls
 * wait for an answer at once; backends' requests beyond that wait in the
 * backlog, in the order they were queued.
 */
#define WORKER_MAX_IN_FLIGHT 250

static dsa_pointer backlog_head = InvalidDsaPointer;
static dsa_pointer backlog_tail = InvalidDsaPointer;
static int	backlog_length = 0;

/* Carry out one request: send it, or answer it if its session is gone. */
static void
take_request(dsa_pointer dp, SharedRequest *sr)
{
	if (sr->oneway)
		take_oneway(dp, sr);
	else
	{
		Call	   *call = worker_call_new(CALL_REPLY);

		call->req = dp;
		/* Made for a session that is gone: its nodes went with it. */
		if (worker_zh == NULL || sr->epoch != worker_generation)
			worker_reply(call, sr, ZINVALIDSTATE);
		else
			worker_issue_call(call, sr);
	}
}

/*
 * Carry out the backlog's requests while fewer than WORKER_MAX_IN_FLIGHT
 * calls wait for answers; all of them when no session is open (each is then
 * answered at once).
 */
void
worker_issue_backlog(void)
{
	while (DsaPointerIsValid(backlog_head) &&
		   (worker_zh == NULL || worker_calls_in_flight < WORKER_MAX_IN_FLIGHT))
	{
		dsa_pointer dp = backlog_head;
		SharedRequest *sr = dsa_get_address(zk_area, dp);

		backlog_head = sr->next;
		if (!DsaPointerIsValid(backlog_head))
			backlog_tail = InvalidDsaPointer;
		backlog_length--;
		take_request(dp, sr);
	}
	pg_atomic_write_u32(&zk_shared->requests_in_flight, (uint32) worker_calls_in_flight);
	pg_atomic_write_u32(&zk_shared->requests_queued, (uint32) backlog_length);
}

/* Take in what backends queued, behind the backlog, and carry it out. */
void
worker_drain_queue(void)
{
	dsa_pointer dp = (dsa_pointer) pg_atomic_exchange_u64(&zk_shared->queue,
														  InvalidDsaPointer);
	dsa_pointer fifo = InvalidDsaPointer;
	dsa_pointer last = dp;
	int			n = 0;

	/* The list is newest first: turn it around. */
	while (DsaPointerIsValid(dp))
	{
		SharedRequest *sr = dsa_get_address(zk_area, dp);
		dsa_pointer next = sr->next;

		sr->next = fifo;
		fifo = dp;
		dp = next;
		n++;
	}
	if (n > 0)
	{
		if (DsaPointerIsValid(backlog_tail))
			((SharedRequest *) dsa_get_address(zk_area, backlog_tail))->next = fifo;
		else
			backlog_head = fifo;
		backlog_tail = last;
		backlog_length += n;
	}
	worker_issue_backlog();
}
