/*
 * zk_session.c
 *	  The backend's ZooKeeper session: opened lazily on first use, replaced
 *	  when it is lost, closed when the backend exits.
 *
 * The handle is created in the backend, never in the postmaster or _PG_init:
 * its threads would not survive fork().  It is opened on a thread that has
 * every signal blocked, and the client's threads inherit that mask, so
 * SIGINT, SIGTERM, SIGALRM and SIGUSR1 always reach the backend's own
 * thread, which waits for the opening (host name resolution included) like
 * for any reply: cancellable, and within zklock.connect_timeout.
 *
 * Closing the session in before_shmem_exit makes the server delete this
 * backend's nodes at once on a normal disconnect or pg_terminate_backend.
 * A backend that dies without running it is released by session expiry.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "port.h"
#include "storage/ipc.h"
#include "utils/memutils.h"

#include "guc.h"
#include "stats.h"
#include "zk_bridge.h"
#include "zk_session.h"

static zhandle_t *zh = NULL;

/* Settings the open session was made with; a change applies to the next one. */
static char *session_hosts = NULL;
static char *session_auth = NULL;
static int	session_timeout_requested = 0;

/* With credentials: the creator may do anything, everybody may read. */
static struct ACL protected_acl_entries[2];
static struct ACL_vector protected_acl = {2, protected_acl_entries};

/* Bumped for every session opened; tells which session owns a node. */
static uint64 generation = 0;

/* Attempt tags: random per session, then a counter. */
static uint64 tag_session_bits;
static uint64 tag_counter;

static bool exit_hook_registered = false;

static void
close_handle(void)
{
	zhandle_t  *old = zh;

	if (old == NULL)
		return;
	zh = NULL;
	bridge_close(old);
}

/*
 * At exit, the close must reach the server, or the session's nodes stay for
 * its timeout: wait for it, at most as long as the client itself would.
 */
static void
session_exit_hook(int code, Datum arg)
{
	close_handle();
	bridge_await_closes(3000);
}

ZkSessionStatus
zk_session_status(void)
{
	ZkSessionSnapshot snap;

	if (zh == NULL)
		return ZK_SESSION_NONE;
	bridge_session_snapshot(&snap);
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

uint64
zk_session_generation(void)
{
	return zh ? generation : 0;
}

/* The handle of the given session if it is still the open one, else NULL. */
zhandle_t *
zk_session_handle(uint64 gen)
{
	return (zh != NULL && gen == generation) ? zh : NULL;
}

/*
 * ERROR unless the session can still carry requests.  Used inside waits, so
 * that a session lost under a waiter ends the wait instead of hanging it.
 */
void
zk_session_check_alive(const char *what)
{
	if (zk_session_status() == ZK_SESSION_LOST)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("ZooKeeper session was lost while %s", what),
				 errdetail("The session expired or was disconnected for longer than its timeout; its nodes are gone."),
				 errhint("The next zklock call opens a new session.")));
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
zk_session_await(ZkRequest *req, int64 deadline, const char *what)
{
	while (!bridge_done(req))
	{
		int64		left = deadline > 0 ? deadline - bridge_now_ms() : -1;

		if (deadline > 0 && left <= 0)
			return false;
		zk_session_wait(left);
		zk_session_check_alive(what);
	}
	return true;
}

/* ERROR unless zklock.auth is empty or user:password; never shows it. */
static void
check_auth_form(void)
{
	const char *colon = strchr(zklock_auth, ':');

	if (zklock_auth[0] != '\0' &&
		(colon == NULL || colon == zklock_auth || colon[1] == '\0'))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock.auth must have the form user:password"),
				 errhint("Leave it empty to use ZooKeeper without authentication.")));
}

/*
 * ERROR for a session that could not be opened or accepted in time; the
 * handle, if any, is closed first so that the next call starts afresh.
 */
static void
report_connect_failure(const char *detail)
{
	close_handle();
	ereport(ERROR,
			(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
			 errmsg("could not connect to ZooKeeper at \"%s\"", zklock_hosts),
			 errdetail_internal("%s", detail),
			 errhint("Check zklock.hosts and that the ZooKeeper servers are running.")));
}

/*
 * Open a handle; wait until deadline for the opening thread (host names are
 * resolved there, as slowly as the name server answers).
 */
static void
open_handle(int64 deadline)
{
	BridgeOpen *op;
	zhandle_t  *opened = NULL;
	int			error = 0;
	bool		finished = false;
	MemoryContext old;

	check_auth_form();
	bridge_init();
	zoo_set_debug_level((ZooLogLevel) zklock_log_level);

	op = bridge_open_start(zklock_hosts, zklock_session_timeout);
	PG_TRY();
	{
		for (;;)
		{
			int64		left = deadline - bridge_now_ms();

			finished = bridge_open_finished(op, &opened, &error);
			if (finished || left <= 0)
				break;
			bridge_wait(left);
		}
	}
	PG_CATCH();
	{
		bridge_open_abandon(op);
		PG_RE_THROW();
	}
	PG_END_TRY();

	if (!finished)
	{
		bridge_open_abandon(op);
		report_connect_failure(psprintf("Its host names did not resolve within %d ms.",
										zklock_connect_timeout));
	}
	if (opened == NULL)
	{
		bridge_handle_closing();
		ereport(ERROR,
				(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
				 errmsg("could not connect to ZooKeeper at \"%s\"", zklock_hosts),
				 errdetail("The ZooKeeper client rejected the connection string (%s).",
						   error == ENOENT ? "no host name resolves" :
						   error == EINVAL ? "it is malformed" :
						   strerror(error)),
				 errhint("Check that the hosts in zklock.hosts resolve.")));
	}
	zh = opened;

	/* Queued by the client and sent right after every (re)connect. */
	if (zklock_auth[0] != '\0')
	{
		int			rc = zoo_add_auth(zh, "digest", zklock_auth,
									  strlen(zklock_auth), NULL, NULL);

		if (rc != ZOK)
		{
			close_handle();
			ereport(ERROR,
					(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
					 errmsg("could not add ZooKeeper credentials: %s", zerror(rc))));
		}
	}

	stats_session_opened();
	generation++;
	if (!pg_strong_random(&tag_session_bits, sizeof(tag_session_bits)))
		tag_session_bits = ((uint64) MyProcPid << 32) ^ (uint64) MyStartTime;
	tag_counter = 0;

	old = MemoryContextSwitchTo(TopMemoryContext);
	if (session_hosts)
		pfree(session_hosts);
	if (session_auth)
		pfree(session_auth);
	session_hosts = pstrdup(zklock_hosts);
	session_auth = pstrdup(zklock_auth);
	session_timeout_requested = zklock_session_timeout;
	MemoryContextSwitchTo(old);

	if (!exit_hook_registered)
	{
		before_shmem_exit(session_exit_hook, (Datum) 0);
		exit_hook_registered = true;
	}
}

/* Wait for the open handle to reach a server, until deadline. */
static void
wait_connected(int64 deadline)
{
	for (;;)
	{
		ZkSessionStatus status = zk_session_status();
		int64		left;

		if (status == ZK_SESSION_CONNECTED)
			return;
		if (status == ZK_SESSION_LOST)
			break;
		left = deadline - bridge_now_ms();
		if (left <= 0)
			break;
		bridge_wait(left);
	}

	if (zk_session_status() == ZK_SESSION_SUSPENDED)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("lost connection to ZooKeeper at \"%s\"", session_hosts),
				 errdetail("No server answered within %d ms; the session may still be alive.",
						   zklock_connect_timeout),
				 errhint("Locks held by this session are uncertain until it reconnects.")));

	/* Never accepted, or refused: start afresh next time. */
	if (bridge_closed_by_server() > 0)
	{
		uint64		closed = bridge_closed_by_server();

		close_handle();
		ereport(ERROR,
				(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
				 errmsg("could not connect to ZooKeeper at \"%s\"", zklock_hosts),
				 errdetail("The servers accepted a connection and closed it before establishing a session, %llu times in %d ms.",
						   (unsigned long long) closed, zklock_connect_timeout),
				 errhint("A ZooKeeper server closes connections beyond maxClientCnxns (per client address, 60 by default; each backend that uses zklock holds one): raise it on the servers or use fewer backends per host.  A server that has no quorum closes them too.")));
	}
	report_connect_failure(psprintf("No server accepted a session within %d ms.",
									zklock_connect_timeout));
}

/*
 * Close a session that is lost, by expiry or by the local clock, before its
 * locks are written off.  Keeping a session the clock gave up on is not safe
 * even if it comes back (a server may keep it alive past its timeout): its
 * nodes would outlive the locks this backend forgets.  Closing ends it at
 * once if the server can still hear us, else the server expires it.  The
 * verdict and the close follow each other with nothing in between that could
 * wait, so a session cannot come back after it was judged lost and stay.
 */
void
zk_session_close_if_lost(void)
{
	if (zh != NULL && zk_session_status() == ZK_SESSION_LOST)
	{
		stats_session_lost();
		close_handle();
	}
}

/*
 * The handle to issue requests on, connected.  A lost session is replaced;
 * the caller must already have written off the locks it held (the lock
 * table notices by the generation).  Changed settings take effect here when
 * nothing is held (have_locks false).
 */
zhandle_t *
zk_session_require(bool have_locks)
{
	int64		deadline = bridge_now_ms() + zklock_connect_timeout;

	zk_session_close_if_lost();
	if (zh != NULL)
	{
		bool		settings_changed = strcmp(session_hosts, zklock_hosts) != 0 ||
			strcmp(session_auth, zklock_auth) != 0 ||
			session_timeout_requested != zklock_session_timeout;

		if (settings_changed && !have_locks)
			close_handle();
	}
	if (zh == NULL)
		open_handle(deadline);
	wait_connected(deadline);
	return zh;
}

/* The ACL for nodes this session creates. */
const struct ACL_vector *
zk_session_acl(void)
{
	if (session_auth == NULL || session_auth[0] == '\0')
		return &ZOO_OPEN_ACL_UNSAFE;
	protected_acl_entries[0].perms = ZOO_PERM_ALL;
	protected_acl_entries[0].id.scheme = "auth";
	protected_acl_entries[0].id.id = "";
	protected_acl_entries[1].perms = ZOO_PERM_READ;
	protected_acl_entries[1].id.scheme = "world";
	protected_acl_entries[1].id.id = "anyone";
	return &protected_acl;
}

/*
 * The commit guard's proof that the session still lives (DESIGN 2): the
 * client's "connected" is a belief that a process stopped for longer than
 * the session timeout (a VM stall, SIGSTOP) still holds when it resumes.
 * The proof is a server reply to a request sent less than two thirds of the
 * session timeout ago (the client pings after a third of silence, so a busy
 * backend always has one): the server held the session after the request
 * was sent, so it keeps it at least a third of the timeout more, for the
 * commit record to be written.  Time is counted on the boot clock, which
 * runs during a suspend.  Without a young enough reply, one round trip: a
 * sync and, behind it, an exists on a held node (probe), which also proves
 * the node is still there.  Returns once the reply came or the session is
 * lost (closed then, to be written off by the caller); waits at most the
 * session timeout.  Serves interrupts.
 */
void
zk_session_confirm(const char *probe, HeldWatch *probe_watch)
{
	ZkSessionSnapshot snap;
	int			timeout_ms;
	int64		deadline;
	ZkRequest  *volatile sync = NULL;
	ZkRequest  *volatile exists = NULL;
	volatile bool confirmed = false;

	if (zh == NULL || zk_session_status() == ZK_SESSION_LOST)
		return;
	bridge_session_snapshot(&snap);
	timeout_ms = snap.timeout_ms > 0 ? snap.timeout_ms : session_timeout_requested;
	if (zk_session_status() == ZK_SESSION_CONNECTED &&
		bridge_now_ms() - bridge_last_contact() < timeout_ms - timeout_ms / 3)
		return;

	deadline = bridge_now_ms() + timeout_ms;
	PG_TRY();
	{
		for (;;)
		{
			ZkSessionStatus status = zk_session_status();
			int64		left = deadline - bridge_now_ms();

			if (status == ZK_SESSION_LOST || left <= 0)
				break;
			/* Sent once connected; again if a reply was lost meanwhile. */
			if (exists == NULL && status == ZK_SESSION_CONNECTED)
			{
				sync = bridge_sync(zh, probe ? probe : zklock_root);
				exists = bridge_exists(zh, probe ? probe : zklock_root);
			}
			if (exists != NULL && bridge_done(exists))
			{
				int			rc = exists->rc;

				bridge_abandon(sync);
				bridge_abandon(exists);
				sync = exists = NULL;
				if (rc == ZOK || rc == ZNONODE)
				{
					confirmed = true;
					if (rc == ZNONODE)
						bridge_held_mark_deleted(probe_watch);
					break;
				}
				if (!bridge_reply_lost(rc))
					break;
				continue;
			}
			zk_session_wait(left);
		}
	}
	PG_FINALLY();
	{
		if (exists != NULL)
		{
			bridge_abandon(sync);
			bridge_abandon(exists);
		}
	}
	PG_END_TRY();

	/* Not heard from for the session timeout: it must be taken as gone. */
	if (!confirmed)
	{
		stats_session_lost();
		close_handle();
	}
}

/* What zk_session() shows. */
void
zk_session_describe(ZkSessionInfo *info)
{
	ZkSessionSnapshot snap;

	memset(info, 0, sizeof(*info));
	info->status = zk_session_status();
	if (info->status == ZK_SESSION_NONE)
		return;
	bridge_session_snapshot(&snap);
	info->session_id = snap.session_id;
	info->timeout_ms = snap.timeout_ms;
	strlcpy(info->server, snap.server, sizeof(info->server));
	if (info->status == ZK_SESSION_SUSPENDED || info->status == ZK_SESSION_LOST)
		info->since_contact_ms = bridge_now_ms() - snap.changed_at_ms;
}

/* Fill tag with a fresh attempt tag: unique per create, UUID-shaped. */
void
zk_session_new_tag(char *tag)
{
	uint64		n = ++tag_counter;

	snprintf(tag, ZK_TAG_LEN + 1, "%08x-%04x-%04x-%04x-%012llx",
			 (uint32) (tag_session_bits >> 32),
			 (uint32) (tag_session_bits >> 16) & 0xFFFF,
			 (uint32) tag_session_bits & 0xFFFF,
			 (uint32) (n >> 48) & 0xFFFF,
			 (unsigned long long) (n & UINT64CONST(0xFFFFFFFFFFFF)));
}
