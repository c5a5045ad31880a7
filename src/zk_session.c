/*
 * zk_session.c
 *	  A backend's view of the server's ZooKeeper session, which the session
 *	  worker owns (zk_worker.c): whether it can carry requests, waiting for
 *	  it, the commit guard's proof that it lives, and attempt tags.
 *
 * The session is the server's: when it is lost, every lock taken in it on
 * this server is lost, and the worker opens a new one.  A backend that
 * judges it lost by the clock (no reply for its timeout) writes it off: the
 * worker closes it, so that it cannot come back with the nodes of locks
 * that were forgotten.
 */
#include "postgres.h"

#include "miscadmin.h"

#include "guc.h"
#include "worker_proof.h"
#include "zk_bridge.h"
#include "zk_shared.h"
#include "zk_session.h"

/* A generation this backend judged lost, until the worker replaces it. */
static uint64 written_off = 0;

/* The session the running zklock call began in (zk_session_require). */
static uint64 call_generation = 0;

/* Attempt tags: the backend's owner part in the session, then a counter. */
static uint64 tag_counter;

ZkSessionStatus
zk_session_status(void)
{
	ZkSessionSnapshot snap;

	bridge_attach();
	bridge_session_snapshot(&snap);
	if (snap.generation == 0)
		return bridge_worker_running() ? ZK_SESSION_CONNECTING : ZK_SESSION_NONE;
	if (snap.generation == written_off)
		return ZK_SESSION_LOST;
	if (snap.zk_state == ZOO_CONNECTED_STATE)
		return ZK_SESSION_CONNECTED;
	if (snap.zk_state == ZOO_EXPIRED_SESSION_STATE ||
		snap.zk_state == ZOO_AUTH_FAILED_STATE)
		return ZK_SESSION_LOST;
	if (snap.session_id == 0)
		return ZK_SESSION_CONNECTING;

	/*
	 * Disconnected.  The server expires the session once it has heard nothing
	 * for the negotiated timeout; the client noticed the silence no earlier
	 * than it began, so counting from the disconnect errs on the late side.
	 */
	if (bridge_now_ms() - snap.changed_at_ms > snap.timeout_ms)
		return ZK_SESSION_LOST;
	return ZK_SESSION_SUSPENDED;
}

/* The generation of the open session, 0 if there is none or it is written off. */
uint64
zk_session_generation(void)
{
	ZkSessionSnapshot snap;

	bridge_attach();
	bridge_session_snapshot(&snap);
	return snap.generation == written_off ? 0 : snap.generation;
}

/* Whether nodes of the given session may still be acted on. */
bool
zk_session_is_current(uint64 gen)
{
	return gen != 0 && gen == zk_session_generation();
}

/*
 * Whether the session of generation gen (0: whichever is open) is gone:
 * lost, or lost and replaced by the worker already.
 */
static bool
session_gone(uint64 gen)
{
	return zk_session_status() == ZK_SESSION_LOST ||
		(gen != 0 && !zk_session_is_current(gen));
}

/* The message of a session lost under a backend: one sentence per activity. */
static int
lost_message(ZkActivity doing)
{
	switch (doing)
	{
		case ZK_ACQUIRING:
			return errmsg("ZooKeeper session was lost while acquiring a lock");
		case ZK_WAITING:
			return errmsg("ZooKeeper session was lost while waiting for a lock");
		case ZK_READING_QUEUE:
			return errmsg("ZooKeeper session was lost while reading a lock queue");
		case ZK_LOOKING_FOR_DEADLOCK:
			return errmsg("ZooKeeper session was lost while looking for a deadlock");
		case ZK_CREATING_NODES:
			return errmsg("ZooKeeper session was lost while creating lock nodes");
		case ZK_BARRIER:
			return errmsg("ZooKeeper session was lost while at a zklock barrier or gate");
	}
	return 0;
}

/*
 * The one bound on a zklock call's own round trips (docs/reference.md): a
 * request that ZooKeeper did not answer within zklock.connect_timeout of its
 * sending, or a lost connection that did not come back within it.
 */
void
zk_session_no_answer(ZkActivity doing)
{
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 doing == ZK_READING_QUEUE ?
			 errmsg("ZooKeeper did not answer within %d ms while reading a lock queue",
					zklock_connect_timeout) :
			 doing == ZK_BARRIER ?
			 errmsg("ZooKeeper did not answer within %d ms at a zklock barrier or gate",
					zklock_connect_timeout) :
			 errmsg("ZooKeeper did not answer within %d ms while acquiring a lock",
					zklock_connect_timeout),
			 errdetail("zklock.connect_timeout bounds every round trip of a call."),
			 errhint("The session may be disconnected; see zk_session().")));
}

/*
 * ERROR unless the session can still carry requests.  Used inside waits, so
 * that a session lost under a waiter ends the wait instead of hanging it.
 */
void
zk_session_check_alive(ZkActivity doing)
{
	ZkCloseReason why;

	if (!session_gone(call_generation))
		return;
	why = bridge_close_reason(call_generation);
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 lost_message(doing),
			 why == ZK_CLOSED_SETTINGS ?
			 errdetail("The server's session worker closed the session because zklock.hosts, zklock.session_timeout or zklock.auth changed at a reload; its nodes are gone.") :
			 why == ZK_CLOSED_SERVER_FAULT ?
			 errdetail("The server's session worker closed the session because its ZooKeeper server left a request unanswered, which a sound server never does; its nodes go when ZooKeeper ends it, within one session timeout.") :
			 errdetail("The session expired, or was disconnected for longer than its timeout; its nodes go when ZooKeeper expires it, after a change of leader up to one session timeout later."),
			 doing == ZK_BARRIER ?
			 errhint("The server's session worker opens a new session; a barrier's membership went with the old one.") :
			 errhint("The server's session worker opens a new session; acquire the lock again.")));
}

/*
 * bridge_wait, but while the session is suspended no longer than until the
 * local clock must judge it lost: nothing else may come to wake the wait.
 */
void
zk_session_wait(long timeout_ms)
{
	if (zk_session_status() == ZK_SESSION_SUSPENDED)
	{
		ZkSessionSnapshot snap;
		int64		verdict_in;

		bridge_session_snapshot(&snap);
		verdict_in = Max(snap.changed_at_ms + snap.timeout_ms + 1 - bridge_now_ms(), 1);
		if (timeout_ms < 0 || verdict_in < timeout_ms)
			timeout_ms = (long) verdict_in;
	}
	bridge_wait(timeout_ms);
}

/*
 * Wait for a request's reply until deadline (a bridge_now_ms() time, 0 for
 * none).  False if the deadline passed first.  Requests never wait on their
 * own while the client reconnects, so a lost session ends the wait here with
 * an ERROR naming what was being done.
 */
bool
zk_session_await(ZkRequest *req, int64 deadline, ZkActivity doing)
{
	while (!bridge_done(req))
	{
		int64		left = deadline > 0 ? deadline - bridge_now_ms() : -1;

		if (deadline > 0 && left <= 0)
			return false;
		zk_session_wait(left);
		zk_session_check_alive(doing);
	}
	return true;
}

/* Wait until deadline for the worker's session to reach a server. */
static void
wait_connected(int64 deadline)
{
	/* Never there: no wait can bring it. */
	if (!bridge_worker_registered())
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("zklock session worker was not started: max_worker_processes is too low"),
				 errdetail("The postmaster had no background worker slot left for it at server start (max_worker_processes = %d), so no process of this server holds a ZooKeeper session.",
						   max_worker_processes),
				 errhint("Raise max_worker_processes by 2 (zklock's session worker and its reaper) and restart the server.")));
	for (;;)
	{
		ZkSessionStatus status = zk_session_status();
		int64		left;

		if (status == ZK_SESSION_CONNECTED)
			return;
		/*
		 * The worker's last attempt failed for a reason it knows (malformed
		 * zklock.auth, hosts that do not resolve): answered at once, as
		 * waiting would only see its next attempt fail the same way.
		 */
		if (bridge_open_error() != 0 && bridge_worker_running())
			break;
		left = deadline - bridge_now_ms();
		if (left <= 0)
			break;
		bridge_wait(left);
	}

	if (!bridge_worker_running())
		ereport(ERROR,
				(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
				 errmsg("zklock session worker is not running"),
				 errdetail("No process of this server holds a ZooKeeper session."),
				 errhint("Check the server log for why the worker stopped; the postmaster restarts it.")));
	if (zk_session_status() == ZK_SESSION_SUSPENDED)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("lost connection to ZooKeeper at \"%s\"", zklock_hosts),
				 errdetail("No server answered within %d ms; the session may still be alive.",
						   zklock_connect_timeout),
				 errhint("Locks held in this server's session are uncertain until it reconnects.")));
	if (bridge_open_error() == ZK_OPEN_BAD_AUTH)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock.auth must have the form user:password"),
				 errhint("Leave it empty to use ZooKeeper without authentication; reload the configuration after changing it.")));
	if (bridge_open_error() != 0)
	{
		int			error = bridge_open_error();

		ereport(ERROR,
				(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
				 errmsg("could not connect to ZooKeeper at \"%s\"", zklock_hosts),
				 errdetail("The ZooKeeper client rejected the connection string (%s).",
						   error == ENOENT ? "no host name resolves" :
						   error == EINVAL ? "it is malformed" :
						   strerror(error)),
				 errhint("Check that the hosts in zklock.hosts resolve.")));
	}
	if (bridge_closed_by_server() > 0)
		ereport(ERROR,
				(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
				 errmsg("could not connect to ZooKeeper at \"%s\"", zklock_hosts),
				 errdetail("The servers accepted a connection and closed it before establishing a session, %llu times.",
						   (unsigned long long) bridge_closed_by_server()),
				 errhint("A ZooKeeper server closes connections beyond maxClientCnxns (per client address, 60 by default; each PostgreSQL server using zklock holds one), and when it has no quorum.")));
	ereport(ERROR,
			(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
			 errmsg("could not connect to ZooKeeper at \"%s\"", zklock_hosts),
			 errdetail("No server accepted a session within %d ms.",
					   zklock_connect_timeout),
			 errhint("Check zklock.hosts and that the ZooKeeper servers are running.")));
}

/*
 * Write off a session that is lost, by expiry or by the local clock, before
 * its locks are: the worker closes it, so that it cannot come back with
 * the nodes of locks this backend forgets.
 */
void
zk_session_close_if_lost(void)
{
	ZkSessionSnapshot snap;

	if (zk_session_status() != ZK_SESSION_LOST)
		return;
	bridge_session_snapshot(&snap);
	if (snap.generation != 0 && snap.generation != written_off)
	{
		written_off = snap.generation;
		bridge_write_off(written_off);
	}
}

/*
 * Wait for the server's session to be connected: ERROR (08001, 08006) if it
 * is not within zklock.connect_timeout.  A lost session is written off first
 * (the caller has written off its locks).
 */
void
zk_session_require(void)
{
	int64		deadline = bridge_now_ms() + zklock_connect_timeout;

	bridge_attach();
	zk_session_close_if_lost();
	wait_connected(deadline);
	call_generation = zk_session_generation();
}

/*
 * The commit guard's proof that the session still lives (DESIGN 2 and 3):
 * the client's "connected" is a belief that a process stopped for longer
 * than the session timeout (a VM stall, SIGSTOP) still holds when it
 * resumes, and a reply proves only that the session lived when the server
 * answered.  The worker knows until when the session provably lives, from
 * the order of its replies (worker_proof.c; the argument is in
 * docs/internals.md); the guard passes while that leaves the margin for
 * the commit record.  Time is counted on the boot clock, which runs during
 * a suspend.  Otherwise it asks for a write: a set of a held node (probe)
 * at a version no node has, which the leader refuses through a quorum's
 * commit, with ZBADVERSION while the session and the node live and ZNONODE
 * once the node is gone (the lock is lost then); worker_proof.c says when.
 * Returns once proven or the session is gone (written off then, for the
 * caller); waits at most the session timeout.  Serves interrupts.
 */
void
zk_session_confirm(const char *probe, HeldWatch *probe_watch)
{
	ZkSessionSnapshot snap;
	ProofGuard	guard;
	int64		provable;
	ZkRequest  *volatile check = NULL;
	volatile bool confirmed = false;

	if (zk_session_status() == ZK_SESSION_LOST)
		return;
	bridge_session_snapshot(&snap);
	if (snap.generation == 0)
		return;
	proof_guard_begin(&guard, bridge_now_ms(),
					  snap.timeout_ms > 0 ? snap.timeout_ms : zklock_session_timeout);

	PG_TRY();
	{
		for (;;)
		{
			long		wait_ms = 0;
			ProofGuardStep step;

			if (check != NULL && bridge_done(check))
			{
				int			rc = check->rc;

				bridge_abandon(check);
				check = NULL;
				if (rc == ZNONODE)
				{
					confirmed = true;
					bridge_held_mark_deleted(probe_watch);
					break;
				}
				if (rc != ZBADVERSION && !bridge_reply_lost(rc))
					break;
			}

			/*
			 * The worker may give the session up and open the next one before
			 * this backend looks: the new one's "connecting", and its proof
			 * once connected, say nothing of this session.
			 */
			step = proof_guard_step(&guard, bridge_now_ms(),
									zk_session_status() == ZK_SESSION_CONNECTED,
									session_gone(snap.generation),
									check != NULL, bridge_proof(&provable),
									provable, &wait_ms);
			if (step == PROOF_GUARD_PASS)
			{
				confirmed = true;
				break;
			}
			if (step == PROOF_GUARD_GIVE_UP)
				break;
			if (step == PROOF_GUARD_ASK)
				check = bridge_set(probe, NULL, 0, -2);
			else
				zk_session_wait(wait_ms);
		}
	}
	PG_FINALLY();
	{
		if (check != NULL)
			bridge_abandon(check);
	}
	PG_END_TRY();

	/* Not proven within the session timeout: it must be taken as gone. */
	if (!confirmed && snap.generation != written_off)
	{
		written_off = snap.generation;
		bridge_write_off(written_off);
	}
}

/* What zk_session() shows. */
void
zk_session_describe(ZkSessionInfo *info)
{
	ZkSessionSnapshot snap;

	memset(info, 0, sizeof(*info));
	info->status = zk_session_status();
	bridge_session_snapshot(&snap);
	info->session_id = snap.session_id;
	info->timeout_ms = snap.timeout_ms;
	strlcpy(info->server, snap.server, sizeof(info->server));
	if (info->status == ZK_SESSION_SUSPENDED || info->status == ZK_SESSION_LOST)
		info->since_contact_ms = bridge_now_ms() - snap.changed_at_ms;
	bridge_worker_load(&info->worker_pid, &info->requests_in_flight,
					   &info->requests_queued);
}

/*
 * Fill tag with a fresh attempt tag: unique per create, UUID-shaped, its
 * owner part the backend's in the session of the running call (the worker
 * creates no node of a tag made for another session).
 */
void
zk_session_new_tag(char *tag)
{
	uint64		n = ++tag_counter;
	char		owner[ZK_OWNER_LEN + 1];

	lock_node_owner(owner, bridge_owner(), call_generation);
	snprintf(tag, ZK_TAG_LEN + 1, "%s-%04x-%012llx", owner,
			 (uint32) (n >> 48) & 0xFFFF,
			 (unsigned long long) (n & UINT64CONST(0xFFFFFFFFFFFF)));
}
