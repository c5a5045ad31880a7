/*
 * worker_requests.c
 *	  The session worker's request engine: backends' requests carried out as
 *	  calls to the client, the watches set for backends, and what each
 *	  backend owns, with the cleaning up after it.
 *
 * Each request is handed to the client as a call, its reply written next to
 * the request in shared memory before the backend's latch is set; a request
 * the backend gave up on is undone when its reply comes.  Callbacks never
 * call the client (see worker_client_depth): what they would send is
 * deferred to the worker's main loop (zk_worker.c, which owns the session
 * and sets worker_zh; this file calls nothing of it).
 *
 * Watches are set and removed per backend; a path that several backends
 * watch is watched by the server once for the session, and removed from it
 * only with the last of them.  The client calls back with each; the worker
 * wakes the backend it is for: a waiter's on the node it waits for, a
 * published wait's for pokes, a held node's, to hear when another client
 * deletes it.
 *
 * A backend's nodes are kept by slot and incarnation, so that a reused slot
 * is another backend, with its creates whose replies were lost; a node is
 * deleted for a backend only if that backend created it, when it releases,
 * gives up, exits or is found gone.
 */
#include "postgres.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <zookeeper/zookeeper.h>

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "stats.h"
#include "worker_int.h"

/* The open session's handle and generation, set by zk_worker.c. */
zhandle_t  *worker_zh = NULL;
pgsocket	worker_socket = PGINVALID_SOCKET;
uint64		worker_generation = 0;
char	   *worker_session_auth = NULL;
uint64		worker_server_fault = 0;

/*
 * A mismatched reply the client brought on itself.  A request whose send
 * fails (note_silent_disconnect, zk_worker.c) can leave its completion
 * queued: the client then matches the first reply on its next connection
 * against a request that connection never carried, and drops it as
 * mismatched.  That connection's mismatch is the client's, not the
 * server's.
 */
static bool send_failed = false;	/* since the last connection */
static bool mismatch_excused = false;	/* on the current connection */

void
worker_send_failed(void)
{
	send_failed = true;
}

void
worker_connected(void)
{
	mismatch_excused = send_failed;
	send_failed = false;
}

dlist_head worker_watches = DLIST_STATIC_INIT(worker_watches);
WorkerSlot *worker_slots;
static int64 worker_last_slot_check = 0;

/* Slots whose exit_seen is set: while none is, most turns skip the slots. */
static int	worker_slots_exiting = 0;
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

/*
 * Backends to wake once the replies that came in one read are all taken in:
 * a create's reply and its listing's come together, and waking the backend
 * for each made it wake, find its answer half there, and sleep again.
 */
#define WAKES_HELD_MAX 64
static bool wakes_held = false;
static int	nwakes_held = 0;
static Latch *wakes_held_latches[WAKES_HELD_MAX];

/* With credentials: the creator may do anything, everybody may read. */
static struct ACL protected_acl_entries[2] = {
	{0x1f, {"auth", ""}},
	{0x01, {"world", "anyone"}}
};
static struct ACL_vector worker_protected_acl = {2, protected_acl_entries};

static void wake_backend(Latch *latch);
static ZkSlot *worker_shared_slot(int slot);
static Latch *worker_slot_latch(int slot, uint32 incarnation);
static WorkerSlot *worker_slot(int slot, uint32 incarnation);
static void worker_uncount(int slot, uint32 incarnation, bool only_last);
static void worker_count_for(int slot, BridgeCounter c);
static OwnedNode *worker_find_owned(WorkerSlot *ws, uint32 incarnation, const char *path);
static void worker_own(int slot, uint32 incarnation, const char *path);
static void worker_uncertain_add(int slot, uint32 incarnation, const char *parent, const char *tag);
static void worker_cleanup_delete(int slot, uint32 incarnation, const char *path);
static void worker_release_delete(int slot, uint32 incarnation, const char *path, dsa_pointer held);
static void worker_set_verdict(dsa_pointer held, int slot, uint32 incarnation, bool proven, bool wake);
static void worker_settle_release(Call *call, bool proven, bool wake);
static void worker_cleanup_delete_tagged(int slot, uint32 incarnation, const char *parent, const char *tag);
static Call *worker_call_new(CallKind kind);
static bool worker_still_current(Call *call);
static bool worker_nothing_left(int rc);
static void worker_heard(Call *call, int rc, ProofOp op);
static void publish_proof(int64 proven_until);
static void worker_reply(Call *call, SharedRequest *sr, int rc);
static void worker_issue_call(Call *call, SharedRequest *sr);
static bool worker_defer(DeferKind kind, Call *call, WorkerWatch *ww);
static WorkerWatch *worker_watch_new(int slot, uint32 incarnation, WatchKind kind, int type, const char *path, dsa_pointer held);
static void worker_unwatch(WorkerWatch *ww);
static void worker_arm_watch_now(WorkerWatch *ww, Call *answer);
static void worker_arm_watch(WorkerWatch *ww, Call *answer);

/* ---- calls ---- */

static Call *
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
	if (call->kind == CALL_CHAIN_SYNC)
		proof_sync_settled();
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
static bool
worker_still_current(Call *call)
{
	return worker_zh != NULL && call->epoch == worker_generation;
}

/* How a request of a backend's reaches its answer, for worker_proof.c. */
static ProofOp
proof_op(ZkRequestKind kind)
{
	switch (kind)
	{
		case ZKREQ_CREATE:
		case ZKREQ_SET:
		case ZKREQ_DELETE:
		case ZKREQ_DELETE_SHARED:
			return PROOF_OP_WRITE;
		case ZKREQ_SYNC:
			return PROOF_OP_SYNC;
		default:
			return PROOF_OP_READ;
	}
}

/*
 * The client answered a call: if it was of the open session, what the
 * answer proves about the session (worker_proof.c), and whether its server
 * skipped a reply.  The client then got the reply to a later request where
 * it waited for this one's, and failed everything in flight with
 * ZRUNTIMEINCONSISTENCY: a sound server answers every request in order
 * (our callbacks never call the client, see worker_client_depth), and the
 * client's own such mismatch is excused (mismatch_excused).
 */
static void
worker_heard(Call *call, int rc, ProofOp op)
{
	if (call->epoch != worker_generation)
		return;
	if (rc == ZRUNTIMEINCONSISTENCY && !mismatch_excused)
		worker_server_fault = worker_generation;
	publish_proof(proof_answered(call->sent_at, op, rc, bridge_now_ms()));
}

/* worker_proof.c's proof, for the commit guards (bridge_proof). */
static void
publish_proof(int64 proven_until)
{
	static int64 published = -1;
	int64		provable = proof_provable();

	/* Most answers change neither: no lock taken for them. */
	if (proven_until == 0 && provable == published)
		return;
	published = provable;
	SpinLockAcquire(&zk_shared->mutex);
	if (proven_until > zk_shared->proven_until)
		zk_shared->proven_until = proven_until;
	zk_shared->provable = provable;
	SpinLockRelease(&zk_shared->mutex);
}

/*
 * A new connection of the open session, or none (0): what was heard on the
 * last one proves nothing more (worker_proof.c).
 */
void
worker_proof_connection(int64 connect_sent_after, int timeout_ms)
{
	proof_connection(connect_sent_after, timeout_ms);
	publish_proof(0);
}

/* A reply after which there is nothing left to clean up or to report. */
static bool
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
	worker_heard(call, rc, proof_op(sr->kind));
	/* A create's held record that no watch took: its reference is ours. */
	if (DsaPointerIsValid(sr->held))
	{
		zk_held_unref(sr->held, false);
		sr->held = InvalidDsaPointer;
	}
	SpinLockAcquire(&zk_shared->mutex);
	latch = worker_slot_latch(sr->slot, sr->incarnation);
	SpinLockRelease(&zk_shared->mutex);

	if (pg_atomic_compare_exchange_u32(&sr->state, &expected, REQ_DONE))
	{
		wake_backend(latch);
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
	else if ((sr->kind == ZKREQ_WATCH || sr->kind == ZKREQ_EXISTS_WATCH) &&
			 call->watch != NULL)
		call->watch->removing = true;
	if (sr->counted)
		worker_uncount(sr->slot, sr->incarnation, false);
	if (DsaPointerIsValid(sr->result))
		zk_shared_free(sr->result);
	zk_shared_free(call->req);
	call->req = InvalidDsaPointer;
}

/* A backend's request is answered: publish the reply, and the call is done. */
static void
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
		/*
		 * Ephemeral nodes are the backend's; parents, a barrier's ready and
		 * a gate are everybody's.
		 */
		if ((sr->arg == ZOO_EPHEMERAL || sr->arg == ZOO_EPHEMERAL_SEQUENTIAL) &&
			worker_still_current(call))
			worker_own(sr->slot, sr->incarnation, value);
		/* A lock's node is watched from now on (bridge_create_held). */
		if (DsaPointerIsValid(sr->held) && worker_still_current(call))
		{
			worker_arm_watch(worker_watch_new(sr->slot, sr->incarnation, WATCH_HELD,
											  ZWATCHTYPE_DATA, value, sr->held),
							 NULL);
			sr->held = InvalidDsaPointer;
		}
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
shared_delete_done(int rc, const void *data)
{
	Call	   *call = (Call *) data;

	worker_reply(call, dsa_get_address(zk_area, call->req), rc);
}

static void
sync_done(int rc, const char *value, const void *data)
{
	Call	   *call = (Call *) data;

	worker_reply(call, dsa_get_address(zk_area, call->req), rc);
}

static void
chain_sync_done(int rc, const char *value, const void *data)
{
	Call	   *call = (Call *) data;

	worker_heard(call, rc, PROOF_OP_SYNC);
	worker_call_free(call);
}

static void
chain_read_done(int rc, const struct Stat *stat, const void *data)
{
	Call	   *call = (Call *) data;

	worker_heard(call, rc, PROOF_OP_READ);
	worker_call_free(call);
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
		case CALL_CHAIN_SYNC:
			rc = zoo_async(worker_zh, "/", chain_sync_done, call);
			if (rc != ZOK)
				chain_sync_done(rc, NULL, call);
			return;
		case CALL_CHAIN_READ:
			rc = zoo_aexists(worker_zh, "/", 0, chain_read_done, call);
			if (rc != ZOK)
				chain_read_done(rc, NULL, call);
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
		case ZKREQ_DELETE_SHARED:
			/* A backend's lock node is its own: never deleted this way. */
			if (strncmp(strrchr(path, '/') + 1, "_c_", 3) == 0 &&
				lock_node_sequence(strrchr(path, '/') + 1) >= 0)
			{
				worker_reply(call, sr, ZBADARGUMENTS);
				break;
			}
			rc = zoo_adelete(worker_zh, path, sr->arg, shared_delete_done, call);
			if (rc != ZOK)
				shared_delete_done(rc, call);
			break;
		case ZKREQ_WATCH:
		case ZKREQ_POKE_WATCH:
		case ZKREQ_EXISTS_WATCH:
			{
				WorkerWatch *ww = worker_watch_new(sr->slot, sr->incarnation,
												   sr->kind == ZKREQ_POKE_WATCH ? WATCH_POKE : WATCH_WAITER,
												   sr->kind == ZKREQ_POKE_WATCH ? ZWATCHTYPE_DATA : sr->arg,
												   path, InvalidDsaPointer);

				ww->exists = sr->kind == ZKREQ_EXISTS_WATCH;
				/* Not deferred: issue_call decided that already. */
				worker_arm_watch_now(ww, call);
			}
			break;
		default:
			elog(ERROR, "zklock: request kind %d is not a reply's", (int) sr->kind);
	}
}

/* What worker_proof.c asks to send now, to keep a proof at hand. */
void
worker_send_proof_request(void)
{
	long		in_ms = -1;
	ProofSend	what = proof_next_send(bridge_now_ms(), &in_ms);
	Call	   *call;

	if (what == PROOF_SEND_NONE || in_ms > 0)
		return;
	call = worker_call_new(what == PROOF_SEND_SYNC ? CALL_CHAIN_SYNC : CALL_CHAIN_READ);
	proof_sent(what, call->sent_at);
	worker_issue_call(call, NULL);
}

/*
 * The client writes each request in two sends, its length and then its
 * body, on a socket with TCP_NODELAY: a batch of n requests went out as 2n
 * small segments, each one a read for ZooKeeper.  A batch of two or more is
 * corked, and leaves in as few segments as fit when it is uncorked.  (A
 * socket the client closed meanwhile has nothing left to send; a new one
 * under its number was never corked.)
 */
static pgsocket corked_socket = PGINVALID_SOCKET;

static void
batch_begin(int n)
{
	int			on = 1;

	if (n < 2 || worker_socket == PGINVALID_SOCKET ||
		zoo_state(worker_zh) != ZOO_CONNECTED_STATE)
		return;
	(void) setsockopt(worker_socket, IPPROTO_TCP, TCP_CORK, &on, sizeof(on));
	corked_socket = worker_socket;
}

static void
batch_end(void)
{
	int			off = 0;

	if (corked_socket == PGINVALID_SOCKET)
		return;
	(void) setsockopt(corked_socket, IPPROTO_TCP, TCP_CORK, &off, sizeof(off));
	corked_socket = PGINVALID_SOCKET;
}

static void
worker_issue_call(Call *call, SharedRequest *sr)
{
	if (worker_defer(DEFER_ISSUE, call, NULL))
		return;
	worker_client_depth++;
	issue_call_now(call, sr);
	worker_client_depth--;
}

/* Inside a call into the client: keep what a callback would send for later. */
static bool
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
	int			n = 0;

	dlist_init(&batch);
	while (!dlist_is_empty(&worker_deferred))
	{
		dlist_push_tail(&batch, dlist_pop_head_node(&worker_deferred));
		n++;
	}
	batch_begin(n);
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
	batch_end();
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
 * create's reply was lost and which it found again by its tag.  In any of
 * the server's sessions: a node of a lost session that its backend gives up
 * on goes at once, rather than when the server expires that session.
 */
static bool
names_owner(SharedRequest *sr, const char *path)
{
	const char *name = strrchr(path, '/');
	bool		ok;

	if (name == NULL)
		return false;
	name++;
	/* A lock node: "_c_<tag>-..."; a barrier member: "<tag>". */
	if (strncmp(name, "_c_", 3) == 0)
		name += 3;
	else if (strlen(name) != ZK_TAG_LEN)
		return false;
	SpinLockAcquire(&zk_shared->mutex);
	ok = worker_shared_slot(sr->slot)->incarnation == sr->incarnation &&
		strncmp(name, worker_shared_slot(sr->slot)->owner, ZK_OWNER_BACKEND_LEN) == 0;
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

/* Whether tag is one of the backend's attempt tags, of any session. */
static bool
tag_is_backends(SharedRequest *sr, const char *tag)
{
	bool		ok;

	SpinLockAcquire(&zk_shared->mutex);
	ok = worker_shared_slot(sr->slot)->incarnation == sr->incarnation &&
		strncmp(tag, worker_shared_slot(sr->slot)->owner, ZK_OWNER_BACKEND_LEN) == 0;
	SpinLockRelease(&zk_shared->mutex);
	return ok;
}

/* Whether an attempt tag was made for the open session (lock_node_owner). */
static bool
tag_of_open_session(const char *tag)
{
	char		owner[ZK_OWNER_LEN + 1];

	lock_node_owner(owner, tag, worker_generation);
	return strncmp(tag, owner, ZK_OWNER_LEN) == 0;
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
	/*
	 * A delete sent on counts as pending again (cleanup_call): the backend
	 * has nothing new to see unless that was its last.
	 */
	if (sr->counted)
		worker_uncount(sr->slot, sr->incarnation, true);
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
/*
 * The backlog's share: two calls are kept for the proof's chain (a sync,
 * and the read behind it, worker_proof.c), which never waits in the backlog.
 */
#define BACKLOG_MAX_IN_FLIGHT (WORKER_MAX_IN_FLIGHT - 2)

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

		/*
		 * Made for a session that is gone: its nodes went with it.  So is a
		 * lock node whose tag was made for another session than this one:
		 * its name would make it that session's.
		 */
		if (worker_zh == NULL || sr->epoch != worker_generation ||
			(sr->kind == ZKREQ_CREATE && sr->payload[sr->tag_off] != '\0' &&
			 !tag_of_open_session(sr->payload + sr->tag_off)))
			worker_reply(call, sr, ZINVALIDSTATE);
		else
			worker_issue_call(call, sr);
	}
}

/*
 * Carry out the backlog's requests while fewer than BACKLOG_MAX_IN_FLIGHT
 * calls wait for answers; all of them when no session is open (each is then
 * answered at once).
 */
void
worker_issue_backlog(void)
{
	batch_begin(Min(backlog_length, Max(BACKLOG_MAX_IN_FLIGHT - worker_calls_in_flight, 0)));
	while (DsaPointerIsValid(backlog_head) &&
		   (worker_zh == NULL || worker_calls_in_flight < BACKLOG_MAX_IN_FLIGHT))
	{
		dsa_pointer dp = backlog_head;
		SharedRequest *sr = dsa_get_address(zk_area, dp);

		backlog_head = sr->next;
		if (!DsaPointerIsValid(backlog_head))
			backlog_tail = InvalidDsaPointer;
		backlog_length--;
		take_request(dp, sr);
	}
	batch_end();
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


/* ==== The watches set for backends ==== */

/* ---- watches ---- */

static WorkerWatch *
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
	SharedHeld *sh;
	bool		wanted;

	if (ww->removing || ww->gone)
		return false;
	if (ww->kind != WATCH_HELD)
		return true;
	sh = zk_held_get(ww->held);
	SpinLockAcquire(&zk_shared->mutex);
	wanted = !sh->released;
	SpinLockRelease(&zk_shared->mutex);
	return wanted;
}

/* A backend's node is gone and it did not delete it: its lock is lost. */
static void
held_gone(WorkerWatch *ww)
{
	SharedHeld *sh = zk_held_get(ww->held);
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
	wake_backend(latch);
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
	SharedHeld *sh = zk_held_get(ww->held);
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
	wake_backend(latch);

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
	{
		worker_heard(call, rc, PROOF_OP_WRITE);
		worker_call_free(call);
	}
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
		{
			worker_shared_slot(ww->slot)->watch_events++;
			if (ww->exists)
				worker_shared_slot(ww->slot)->exists_events++;
		}
		/* A poke rewrites the entry; its deletion by its owner is none. */
		else if (latch != NULL && type == ZOO_CHANGED_EVENT)
			worker_shared_slot(ww->slot)->poked = true;
		else
			latch = NULL;
		SpinLockRelease(&zk_shared->mutex);
		wake_backend(latch);
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
static void
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

	/* An exists watch is set on a missing node too. */
	bool		set = rc == ZOK || (ww->exists && rc == ZNONODE);

	ww->arming = false;
	if (set)
		ww->armed = true;
	else if (ww->kind == WATCH_HELD && rc == ZNONODE)
		held_gone(ww);

	/* A backend that gave up on the watch has it marked for removal here. */
	if (DsaPointerIsValid(call->req))
		worker_complete(call, dsa_get_address(zk_area, call->req), rc);
	else
		worker_heard(call, rc, PROOF_OP_READ);
	if (again)
		worker_arm_watch(ww, NULL);
	/* Not set: the client keeps no watcher for a failed get. */
	else if (!set)
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
	if (rc == ZOK && DsaPointerIsValid(call->req))
		take_stat(dsa_get_address(zk_area, call->req), stat);
	worker_watch_armed(rc, call->watch, call);
	worker_call_free(call);
}

static void
exists_watch_done(int rc, const struct Stat *stat, const void *data)
{
	Call	   *call = (Call *) data;

	if (rc == ZOK && DsaPointerIsValid(call->req))
		take_stat(dsa_get_address(zk_area, call->req), stat);
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
static void
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
	else if (ww->exists)
		rc = zoo_awexists(worker_zh, ww->path, watcher, ww, exists_watch_done, call);
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
static void
worker_arm_watch(WorkerWatch *ww, Call *answer)
{
	if (!worker_defer(DEFER_ARM, answer, ww))
		worker_arm_watch_now(ww, answer);
}


/* ==== What each backend owns, and the cleaning up after it ==== */

/* ---- shared state ---- */

static ZkSlot *
worker_shared_slot(int slot)
{
	return &zk_shared->slots[slot];
}

/*
 * Under the mutex: the latch of slot if it still belongs to the backend of
 * that incarnation, else NULL.
 */
static Latch *
worker_slot_latch(int slot, uint32 incarnation)
{
	ZkSlot	   *s = worker_shared_slot(slot);

	return (s->pid != 0 && s->incarnation == incarnation) ? s->latch : NULL;
}

/*
 * One of the slot's pending deletes is done; its backend is woken, with
 * only_last only if that was the last.
 */
static void
worker_uncount(int slot, uint32 incarnation, bool only_last)
{
	Latch	   *latch = NULL;

	SpinLockAcquire(&zk_shared->mutex);
	if (worker_shared_slot(slot)->incarnation == incarnation)
	{
		worker_shared_slot(slot)->deletes_pending--;
		if (!only_last || worker_shared_slot(slot)->deletes_pending == 0)
			latch = worker_slot_latch(slot, incarnation);
	}
	SpinLockRelease(&zk_shared->mutex);
	wake_backend(latch);
}

static void
worker_count_for(int slot, BridgeCounter c)
{
	pg_atomic_fetch_add_u64(&worker_shared_slot(slot)->counts[c], 1);
}

/* A backend's latch: set now, or at worker_wakes_flush. */
static void
wake_backend(Latch *latch)
{
	if (latch == NULL)
		return;
	if (wakes_held)
	{
		for (int i = 0; i < nwakes_held; i++)
			if (wakes_held_latches[i] == latch)
				return;
		if (nwakes_held < WAKES_HELD_MAX)
		{
			wakes_held_latches[nwakes_held++] = latch;
			return;
		}
	}
	SetLatch(latch);
}

/* From now until worker_wakes_flush, backends are woken once each. */
void
worker_wakes_hold(void)
{
	Assert(!wakes_held && nwakes_held == 0);
	wakes_held = true;
}

void
worker_wakes_flush(void)
{
	wakes_held = false;
	for (int i = 0; i < nwakes_held; i++)
		SetLatch(wakes_held_latches[i]);
	nwakes_held = 0;
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
		wake_backend(latch);
	}
}

/* The worker's view of slot, emptied first if a new backend took it. */
static WorkerSlot *
worker_slot(int slot, uint32 incarnation)
{
	WorkerSlot *ws = &worker_slots[slot];

	if (incarnation > ws->incarnation)
		ws->incarnation = incarnation;
	return ws;
}

/* ---- owned nodes ---- */

static OwnedNode *
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

static void
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

static void
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
	worker_heard(call, rc, PROOF_OP_WRITE);
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
		worker_uncount(call->slot, call->incarnation, false);
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
	worker_heard(call, rc, PROOF_OP_READ);
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
		worker_uncount(call->slot, call->incarnation, false);
	worker_call_free(call);
}

/*
 * Write the verdict on a release's delete into the backend's SharedHeld,
 * wake the backend, and drop the delete's reference to it.
 */
static void
worker_set_verdict(dsa_pointer held, int slot, uint32 incarnation, bool proven,
				   bool wake)
{
	SharedHeld *sh = zk_held_get(held);
	Latch	   *latch;

	SpinLockAcquire(&zk_shared->mutex);
	if (sh->release_verdict == RELEASE_PENDING)
		sh->release_verdict = proven ? RELEASE_PROVEN : RELEASE_UNPROVEN;
	latch = wake ? worker_slot_latch(slot, incarnation) : NULL;
	SpinLockRelease(&zk_shared->mutex);
	wake_backend(latch);
}

/*
 * The verdict of a release's delete call; wake is false when the caller
 * wakes the backend anyway right after (its pending deletes counted down).
 */
static void
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
static void
worker_cleanup_delete(int slot, uint32 incarnation, const char *path)
{
	worker_release_delete(slot, incarnation, path, InvalidDsaPointer);
}

/*
 * Delete a node of a backend's; held, if valid, is the SharedHeld of the
 * released lock, whose verdict the delete's answer gives.
 */
static void
worker_release_delete(int slot, uint32 incarnation, const char *path,
					  dsa_pointer held)
{
	OwnedNode  *node = worker_find_owned(&worker_slots[slot], incarnation, path);

	if (node != NULL)
		node->deleting = true;
	cleanup_call(CALL_DELETE, slot, incarnation, path, NULL, held);
}

/* Delete a backend's child of parent that carries tag, if there is one. */
static void
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

static void
set_exit_seen(WorkerSlot *ws, bool seen)
{
	worker_slots_exiting += (int) seen - (int) ws->exit_seen;
	ws->exit_seen = seen;
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

	/*
	 * No backend came or began to exit, none is exiting, and it is not time
	 * to look for backends gone without a word: nothing to look at.  A scan
	 * of every slot each turn would cost as much as the turn's requests on
	 * a server with a high max_connections.
	 */
	if (!changed && !full && worker_slots_exiting == 0)
		return;
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
		set_exit_seen(ws, exiting);

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
			set_exit_seen(ws, false);
			wake_backend(latch);
		}
	}
}
