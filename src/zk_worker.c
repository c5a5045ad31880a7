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
 *
 * Two background workers do this.  The session worker connects to the
 * shared catalogs only, so that it shows in pg_stat_activity (which
 * PostgreSQL allows from a consistent state on); the session reaper starts
 * with the postmaster, ends the session the last postmaster's worker left
 * (an immediate shutdown, a crash of the postmaster) before recovery
 * begins, and exits for good.  After a crash restart the postmaster starts
 * no background worker until crash recovery is over (maybe_start_bgworkers
 * returns while FatalError is set), so on a primary a reaper would come no
 * earlier than the session worker, which ends the session first thing; a
 * hot standby's worker does so once the standby is consistent.  Whichever
 * comes first ends it; the other waits for that (previous_session in
 * ZkShared).
 *
 * This file runs the loop and the session; worker_requests.c carries out the
 * requests, keeps the watches and what each backend owns (worker_int.h is
 * what they share).
 */
#include "postgres.h"

#include <signal.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

#include "lib/ilist.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/bgworker_internals.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/pmsignal.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "compat.h"
#include "guc.h"
#include "session_file.h"
#include "stats.h"
#include "worker_int.h"
#include "zk_shared.h"
#include "zk_worker.h"

PGDLLEXPORT void zklock_worker_main(Datum arg);
PGDLLEXPORT void zklock_reaper_main(Datum arg);

/* Seconds after which the postmaster starts a worker that exited again. */
#define ZKLOCK_WORKER_RESTART_S 1

/* previous_session in ZkShared: shared memory starts it at 0. */
#define PREVIOUS_SESSION_UNCLAIMED 0
#define PREVIOUS_SESSION_CLAIMED 1	/* someone is ending it */
#define PREVIOUS_SESSION_ENDED 2

/* A session that could not be opened is tried again after 1 s, 2 s ... 32 s. */
#define OPEN_RETRY_MS 1000
#define OPEN_RETRY_MAX_DOUBLINGS 5
/* Replies taken in after a wait before the queue is looked at again. */
#define REPLIES_PER_TURN 64

static int64 retry_open_at = 0;
static int	open_failures = 0;	/* in a row, since the settings changed */

/*
 * Sessions closed because their server left a request unanswered, in a row
 * (a minute apart at most): the next is opened 1 s later, then 2 s ... 32 s,
 * so that a server that stays faulty costs it a few sessions a minute.
 */
#define SERVER_FAULT_MEMORY_MS 60000
static int	server_faults = 0;
static int64 last_server_fault_at = 0;
/* A close asked for (request_close): by when at the latest, and why. */
static int64 close_deadline = 0;
static bool close_lost;
/* No call into the client's connecting before then (see client_turn). */
static int64 connect_not_before = 0;

/*
 * The latest time the handle was seen not to have sent its connect
 * request: the current connection's was sent after it (worker_proof.c).
 */
static int64 connect_sent_after = 0;

/* Settings the open session was made with. */
static char *session_hosts = NULL;
static int	session_timeout_asked = 0;

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

/*
 * A connection the client dropped without a session event: a request sent
 * outside zookeeper_process (zoo_acreate and the like, from the worker's
 * queue) whose send fails closes the socket and marks the handle not
 * connected, and no CONNECTING event follows, nor one for the failed
 * reconnects after it.  The published state would say "connected" until a
 * reconnect succeeds, which may be never: the session would never be
 * judged silent for too long, and waiters would wait for it forever.  What
 * the client says now wins over the last event.
 */
static void
note_silent_disconnect(void)
{
	int			state;
	bool		connected;

	if (worker_zh == NULL)
		return;
	state = zoo_state(worker_zh);
	if (state == ZOO_CONNECTED_STATE || state == ZOO_READONLY_STATE)
		return;
	SpinLockAcquire(&zk_shared->mutex);
	connected = zk_shared->session.zk_state == ZOO_CONNECTED_STATE;
	SpinLockRelease(&zk_shared->mutex);
	if (!connected)
		return;
	ereport(LOG,
			(errmsg("zklock: the connection of ZooKeeper session 0x%llx was lost while sending a request",
					(unsigned long long) zoo_client_id(worker_zh)->client_id)));
	worker_send_failed();
	worker_proof_connection(0, 0);
	publish_state(ZOO_CONNECTING_STATE);
	worker_wake_all();
}

/* The worker's last session, for the server log's "replacing". */
static int64 last_session_logged = 0;

/*
 * The server log tells the session's story: established (and what it
 * replaces), lost and why, closed.  Each happens at most once per session.
 */
static void
log_session_established(int64 id, const char *server, int timeout_ms)
{
	if (last_session_logged != 0)
		ereport(LOG,
				(errmsg("zklock: ZooKeeper session 0x%llx established with %s (timeout %d ms), replacing session 0x%llx",
						(unsigned long long) id, server ? server : "?", timeout_ms,
						(unsigned long long) last_session_logged)));
	else
		ereport(LOG,
				(errmsg("zklock: ZooKeeper session 0x%llx established with %s (timeout %d ms)",
						(unsigned long long) id, server ? server : "?", timeout_ms)));
	last_session_logged = id;
}

static void
log_session_lost(const char *why)
{
	ereport(LOG,
			(errmsg("zklock: ZooKeeper session 0x%llx is lost: %s",
					(unsigned long long) zoo_client_id(worker_zh)->client_id, why),
			 errdetail("The locks held in it are lost; their holders are told at their next zklock call or COMMIT.  A new session is opened.")));
}

/* The handle's default watcher: session events. */
static void
session_watcher(zhandle_t *handle, int type, int state, const char *path,
				void *ctx)
{
	if (type != ZOO_SESSION_EVENT || handle != worker_zh)
		return;
	if (state == ZOO_CONNECTED_STATE)
	{
		const clientid_t *id = zoo_client_id(worker_zh);
		const char *server = zoo_get_current_server(worker_zh);
		bool		same;

		worker_connected();
		SpinLockAcquire(&zk_shared->mutex);
		same = zk_shared->session.session_id == id->client_id;
		SpinLockRelease(&zk_shared->mutex);

		/* Noted before any backend may take a lock in it. */
		if (!same)
		{
			session_file_write(id->client_id, id->passwd);
			log_session_established(id->client_id, server, zoo_recv_timeout(worker_zh));
		}
		else
		{
			ereport(LOG,
					(errmsg("zklock: ZooKeeper session 0x%llx reconnected to %s",
							(unsigned long long) id->client_id, server ? server : "?")));
			stats_count_reconnect();
		}

		SpinLockAcquire(&zk_shared->mutex);
		zk_shared->session.session_id = id->client_id;
		zk_shared->session.timeout_ms = zoo_recv_timeout(worker_zh);
		snprintf(zk_shared->session.server, sizeof(zk_shared->session.server),
				 "%s", server ? server : "");
		zk_shared->closed_by_server = 0;
		SpinLockRelease(&zk_shared->mutex);
		worker_proof_connection(connect_sent_after, zoo_recv_timeout(worker_zh));
	}
	else
	{
		ZkSessionSnapshot s;

		SpinLockAcquire(&zk_shared->mutex);
		s = zk_shared->session;
		SpinLockRelease(&zk_shared->mutex);
		if (state == ZOO_CONNECTING_STATE && s.zk_state == ZOO_CONNECTED_STATE)
			ereport(LOG,
					(errmsg("zklock: ZooKeeper session 0x%llx lost its connection to %s; reconnecting",
							(unsigned long long) s.session_id, s.server),
					 errdetail("Its locks are uncertain until it reconnects; ZooKeeper expires it after %d ms without a connection.",
							   s.timeout_ms)));
		worker_proof_connection(0, 0);
	}
	publish_state(state);
	worker_wake_all();
}

/*
 * The client's log lines, to the server log.  While no server answers, the
 * client repeats the same few lines several times a second: a line from the
 * same place in the client is written at most once per LOG_REPEAT_MS, with
 * a count of those left out.  Connections a server closed before setting up
 * a session (beyond its maxClientCnxns, or without a quorum) are counted for
 * the backends' error message.  Lines less severe than zklock.log_level go
 * to DEBUG1: by default all of them, as zklock writes a line of its own for
 * each event of the session (the client's say a session's expiry as a
 * socket error with whatever errno was left over, "Stale file handle", and
 * a close after the postmaster's death as a "System error").
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

/* The level of a client line, from its "ZOO_WARN@..." part. */
static int
client_level(const char *zoo)
{
	static const char *const names[] = {"ZOO_ERROR@", "ZOO_WARN@", "ZOO_INFO@", "ZOO_DEBUG@"};

	for (int i = 0; i < (int) lengthof(names); i++)
		if (strncmp(zoo, names[i], strlen(names[i])) == 0)
			return ZOO_LOG_LEVEL_ERROR + i;
	return ZOO_LOG_LEVEL_DEBUG;
}

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
	if (zoo == NULL || client_level(zoo) > zklock_log_level)
		ereport(DEBUG1, (errmsg_internal("zklock: %s", text)));
	else if (place != NULL && place->left_out > 0)
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
	if (worker_session_auth)
		pfree(worker_session_auth);
	session_hosts = MemoryContextStrdup(TopMemoryContext, zklock_hosts);
	worker_session_auth = MemoryContextStrdup(TopMemoryContext, zklock_auth);
	session_timeout_asked = zklock_session_timeout;
}

static bool
settings_changed(void)
{
	return strcmp(session_hosts, zklock_hosts) != 0 ||
		strcmp(worker_session_auth, zklock_auth) != 0 ||
		session_timeout_asked != zklock_session_timeout;
}

/* Empty, or user:password. */
static bool
auth_well_formed(const char *auth)
{
	const char *colon = strchr(auth, ':');

	return auth[0] == '\0' || (colon != NULL && colon != auth && colon[1] != '\0');
}

/* The pause before the next open after this many failures in a row. */
static int
open_retry_ms(int failures)
{
	return OPEN_RETRY_MS << Min(failures, OPEN_RETRY_MAX_DOUBLINGS);
}

/*
 * The session could not be opened: backends are told why at once, and the
 * next try is later each time (the log said so once).
 */
static void
open_failed(int error)
{
	SpinLockAcquire(&zk_shared->mutex);
	zk_shared->open_error = error;
	SpinLockRelease(&zk_shared->mutex);
	retry_open_at = bridge_now_ms() + open_retry_ms(open_failures);
	open_failures++;
	worker_wake_all();
}

static void
open_session(void)
{
	uint64		gen;
	int			error;

	remember_settings();
	if (!auth_well_formed(worker_session_auth))
	{
		if (open_failures == 0)
			ereport(LOG,
					(errmsg("zklock: zklock.auth must have the form user:password; no ZooKeeper session is opened until it is changed")));
		open_failed(ZK_OPEN_BAD_AUTH);
		return;
	}
	zoo_set_debug_level((ZooLogLevel) Max(zklock_log_level, ZOO_LOG_LEVEL_ERROR));
	errno = 0;
	connect_sent_after = bridge_now_ms();
	worker_zh = zookeeper_init2(session_hosts, session_watcher, session_timeout_asked,
						 NULL, NULL, 0, log_line);
	error = errno;
	if (worker_zh == NULL)
	{
		if (open_failures == 0)
			ereport(LOG,
					(errmsg("zklock: could not open a ZooKeeper session for \"%s\": %s",
							session_hosts, error == ENOENT ? "no host name resolves" :
							error == EINVAL || error == 0 ? "the connection string is malformed" :
							strerror(error)),
					 errdetail("It is tried again after 1 s, then at growing intervals up to %d s; a reload that changes zklock.hosts tries at once.",
							   (OPEN_RETRY_MS << OPEN_RETRY_MAX_DOUBLINGS) / 1000)));
		open_failed(error ? error : EINVAL);
		return;
	}
	open_failures = 0;
	/* Resolve again only when reconnecting, not on every turn. */
	zoo_set_servers_resolution_delay(worker_zh, -1);
	if (worker_session_auth[0] != '\0')
		zoo_add_auth(worker_zh, "digest", worker_session_auth, strlen(worker_session_auth), NULL, NULL);

	connect_not_before = 0;
	SpinLockAcquire(&zk_shared->mutex);
	gen = worker_generation = ++zk_shared->last_generation;
	zk_shared->generation = gen;
	memset(&zk_shared->session, 0, sizeof(zk_shared->session));
	zk_shared->session.changed_at_ms = bridge_now_ms();
	zk_shared->proven_until = 0;
	zk_shared->open_error = 0;
	zk_shared->closed_by_server = 0;
	zk_shared->close_requested = 0;
	zk_shared->closing = false;
	SpinLockRelease(&zk_shared->mutex);
	stats_count_session_opened();
	worker_wake_all();
}

/*
 * Close the open session's gate: from now on no backend passes the commit
 * guard for it (bridge_commit_begin).  Returns whether one passed it before
 * and has not finished committing.  Both in one hold of the mutex: a count
 * taken before the gate closed could miss a backend passing in between,
 * and the session would be ended under its commit.  Once closed, the gate
 * stays so until the session is: calling this again only counts.
 */
static bool
close_gate(void)
{
	bool		busy = false;

	Assert(worker_zh != NULL && worker_generation != 0);
	SpinLockAcquire(&zk_shared->mutex);
	zk_shared->closing = true;
	for (int i = 0; i < zk_shared->nslots && !busy; i++)
		busy = zk_shared->slots[i].committing == worker_generation;
	SpinLockRelease(&zk_shared->mutex);
	return busy;
}

/*
 * Close the session, on every path that ends it (a reload, a write-off, the
 * session found gone, the worker's exit by SIGTERM, FATAL or the
 * postmaster's death).  The gate is closed first.  Then, with no commit
 * under way, the session is ended at once if a server can still hear us
 * (its nodes go), else the server expires it.  With one, the connection is
 * dropped instead, without ending the session: the server expires it after
 * its timeout, as after a crash, so that the guard's margin holds for the
 * backend still committing.  It never waits (an exit may be the
 * postmaster's death); request_close waits for such commits where it can.
 * Everything in flight on it completes as closed; every backend's watches
 * and nodes of it are forgotten.
 */
static void
close_session(bool lost)
{
	dlist_mutable_iter it;
	bool		keep_margin;

	/*
	 * Called inside the client (an exit by FATAL in one of its callbacks),
	 * zookeeper_close only notes the close for when the callback returns,
	 * which it never does: no closeSession is sent.  The session file then
	 * stays, for the next worker to end the session at once.
	 */
	bool		close_sent = worker_client_depth == 0;

	if (worker_zh == NULL)
		return;
	keep_margin = close_gate();
	close_deadline = 0;
	if (keep_margin)
	{
		int			fd = -1;
		int			interest;
		struct timeval tv;

		worker_client_depth++;
		if (zookeeper_interest(worker_zh, &fd, &interest, &tv) == ZOK && fd >= 0)
			shutdown(fd, SHUT_RDWR);
		worker_client_depth--;
		ereport(LOG,
				(errmsg("zklock: dropping the connection of ZooKeeper session 0x%llx without ending it: a backend has not finished committing",
						(unsigned long long) zoo_client_id(worker_zh)->client_id),
				 errdetail("The server frees the session's locks once its timeout passes.")));
	}
	SpinLockAcquire(&zk_shared->mutex);
	zk_shared->closing = false;
	zk_shared->generation = 0;
	memset(&zk_shared->session, 0, sizeof(zk_shared->session));
	zk_shared->session.changed_at_ms = bridge_now_ms();
	zk_shared->proven_until = 0;
	SpinLockRelease(&zk_shared->mutex);
	worker_proof_connection(0, 0);
	worker_wake_all();
	if (lost)
		stats_count_session_lost();

	worker_client_depth++;
	zookeeper_close(worker_zh);
	worker_client_depth--;
	worker_zh = NULL;
	worker_socket = PGINVALID_SOCKET;
	worker_generation = 0;
	worker_drop_deferred();

	/* What the client did not call back, it never will. */
	dlist_foreach_modify(it, &worker_in_flight)
	{
		Call	   *call = dlist_container(Call, in_flight, it.cur);

		switch (call->kind)
		{
			case CALL_DELETE:
				worker_delete_done(ZCLOSING, call);
				break;
			case CALL_DELETE_TAGGED:
				worker_tagged_done(ZCLOSING, NULL, call);
				break;
			case CALL_REWRITE:
				worker_rewrite_done(ZCLOSING, NULL, call);
				break;
			case CALL_REPLY:
			case CALL_ARM:
				if (call->watch)
					worker_watch_armed(ZCLOSING, call->watch, call);
				else if (DsaPointerIsValid(call->req))
					worker_complete(call, dsa_get_address(zk_area, call->req), ZCLOSING);
				worker_call_free(call);
				break;
			case CALL_CHAIN_SYNC:
			case CALL_CHAIN_READ:
				worker_call_free(call);
				break;
		}
	}
	/* What waited for its turn is answered now: its session is gone. */
	worker_issue_backlog();
	dlist_foreach_modify(it, &worker_watches)
		worker_watch_free(dlist_container(WorkerWatch, all, it.cur));
	for (int i = 0; i < zk_shared->nslots; i++)
	{
		WorkerSlot *ws = &worker_slots[i];
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
	if (close_sent || keep_margin)
		session_file_remove();
}

/*
 * Close the open session of our own will (a reload, a write-off): backends
 * that passed the commit guard may be writing their commit records,
 * counting on the session for a third of its timeout more.  The gate closes
 * now; the session is closed once they are done (close_when_done), or
 * after that third, when its connection is dropped instead so that the
 * session expires and their margin holds.
 */
static void
request_close(bool lost)
{
	if (worker_zh == NULL || close_deadline != 0)
		return;
	(void) close_gate();
	close_lost = lost;
	close_deadline = bridge_now_ms() + Max(PROOF_GUARD_MARGIN(zoo_recv_timeout(worker_zh)), 1);
}

/* request_close, for a reason the backends are told (bridge_close_reason). */
static void
request_close_for(ZkCloseReason reason)
{
	SpinLockAcquire(&zk_shared->mutex);
	zk_shared->closed_generation = worker_generation;
	zk_shared->closed_reason = reason;
	SpinLockRelease(&zk_shared->mutex);
	request_close(true);
}

/*
 * The session's server skipped the reply to a request (worker_heard).  Its
 * answers can no longer be trusted: in the case seen, a ZooKeeper 3.8.0
 * follower whose data tree had lost a committed parent node after a resync
 * with its leader failed every reply to a create under it (its log says
 * "Unexpected exception. Destruction averted.") and answered reads with
 * that parent missing.  Each create was committed nonetheless; a backend
 * that looked for its node after the lost reply did not find it and
 * created another, and the nodes stayed in the live session, ahead of
 * every waiter.  Closing the session has ZooKeeper's leader remove all of
 * its nodes, whatever the faulty server shows.
 */
static void
close_for_server_fault(void)
{
	int64		now = bridge_now_ms();
	int			pause_ms;
	char		server[sizeof(zk_shared->session.server)];

	if (now - last_server_fault_at > SERVER_FAULT_MEMORY_MS)
		server_faults = 0;
	pause_ms = open_retry_ms(server_faults);
	server_faults++;
	last_server_fault_at = now;
	retry_open_at = now + pause_ms;

	SpinLockAcquire(&zk_shared->mutex);
	strlcpy(server, zk_shared->session.server, sizeof(server));
	SpinLockRelease(&zk_shared->mutex);
	ereport(LOG,
			(errmsg("zklock: ZooKeeper session 0x%llx is lost: its server %s left a request unanswered",
					(unsigned long long) zoo_client_id(worker_zh)->client_id,
					server[0] != '\0' ? server : "?"),
			 errdetail("A sound ZooKeeper server answers every request in order; this one sent the reply to a later request first.  The session is closed so that ZooKeeper removes every node of it, those whose creation went unanswered included.  Its locks are lost; their holders are told at their next zklock call or COMMIT.  A new session is opened in %d s.",
					   pause_ms / 1000),
			 errhint("Look for \"Destruction averted\" in that server's log; restarting it has it load its data again from its snapshot and transaction log.")));
	request_close_for(ZK_CLOSED_SERVER_FAULT);
}

/* Close a session whose close was asked for, once it may be. */
static void
close_when_done(void)
{
	if (close_deadline != 0 &&
		(bridge_now_ms() >= close_deadline || !close_gate()))
		close_session(close_lost);
}

/* How long the next turn may wait for the client, at most. */
static long
next_turn_in(void)
{
	long		wait = SLOT_CHECK_MS;
	long		proof_send_in = 0;

	if (worker_zh == NULL)
		return Max(retry_open_at - bridge_now_ms(), 1);
	if (close_deadline != 0)
		wait = Min(Max(close_deadline - bridge_now_ms(), 1), wait);
	if (proof_next_send(bridge_now_ms(), &proof_send_in) != PROOF_SEND_NONE)
		wait = Min(Max(proof_send_in, 1), wait);
	return wait;
}

typedef enum SessionVerdict
{
	SESSION_GOOD,
	SESSION_GONE,				/* expired, refused, or silent too long */
	SESSION_SERVER_FAULT,		/* its server left a request unanswered */
	SESSION_WRITTEN_OFF			/* by a backend that got no reply in time */
} SessionVerdict;

/*
 * Whether the open session must be given up: expired or refused, silent
 * for longer than its timeout (the same verdict the backends reach from the
 * published state, reached here before the client may reconnect it), served
 * by a faulty server, or written off by a backend.
 */
static SessionVerdict
session_verdict(void)
{
	ZkSessionSnapshot s;
	uint64		written_off;

	SpinLockAcquire(&zk_shared->mutex);
	s = zk_shared->session;
	written_off = zk_shared->close_requested;
	SpinLockRelease(&zk_shared->mutex);

	if (s.zk_state == ZOO_EXPIRED_SESSION_STATE ||
		s.zk_state == ZOO_AUTH_FAILED_STATE)
		return SESSION_GONE;
	if (s.zk_state != ZOO_CONNECTED_STATE && s.session_id != 0 &&
		bridge_now_ms() - s.changed_at_ms > s.timeout_ms)
		return SESSION_GONE;
	if (worker_server_fault == worker_generation)
		return SESSION_SERVER_FAULT;
	return written_off == worker_generation ? SESSION_WRITTEN_OFF : SESSION_GOOD;
}

/* Why session_verdict() said SESSION_GONE, for the log. */
static const char *
session_gone_why(void)
{
	int			state;

	SpinLockAcquire(&zk_shared->mutex);
	state = zk_shared->session.zk_state;
	SpinLockRelease(&zk_shared->mutex);
	if (state == ZOO_EXPIRED_SESSION_STATE)
		return "ZooKeeper expired it";
	if (state == ZOO_AUTH_FAILED_STATE)
		return "ZooKeeper refused its credentials (zklock.auth)";
	return "no ZooKeeper server was heard from for longer than its timeout";
}

/*
 * What a turn waits on: the latch, the postmaster, and the client's socket.
 * A set made for each turn cost five system calls besides the wait (one
 * epoll instance made, three descriptors added, closed), twice per round
 * trip.  It is kept while the session stays connected on the same
 * descriptor.  A socket the client closed and opened again under the same
 * number is not connected in the turn that first sees it (its handshake is
 * read in a turn of its own), and a set made in such a turn is made again.
 */
static WaitEventSet *turn_set = NULL;
static pgsocket turn_set_fd = PGINVALID_SOCKET;
static int	turn_set_socket_pos;
static uint32 turn_set_socket_events;
static bool turn_set_connected = false;

static WaitEventSet *
turn_wait_set(pgsocket fd, uint32 socket_events, bool connected)
{
	if (turn_set != NULL && turn_set_connected && connected && fd == turn_set_fd)
	{
		if (fd != PGINVALID_SOCKET && socket_events != turn_set_socket_events)
		{
			ModifyWaitEvent(turn_set, turn_set_socket_pos, socket_events, NULL);
			turn_set_socket_events = socket_events;
		}
		return turn_set;
	}
	if (turn_set != NULL)
		FreeWaitEventSet(turn_set);
	turn_set = zk_latch_wait_set(1);
	if (fd != PGINVALID_SOCKET)
		turn_set_socket_pos = AddWaitEventToSet(turn_set, socket_events, fd,
												NULL, NULL);
	turn_set_fd = fd;
	turn_set_socket_events = socket_events;
	turn_set_connected = connected;
	return turn_set;
}

/* One turn of the client: wait for its socket, the latch, or its timer. */
static void
client_turn(zhandle_t *handle, long max_wait_ms)
{
	int			fd = -1;
	int			interest = 0;
	struct timeval tv = {0, 0};
	long		timeout = max_wait_ms;
	uint32		socket_events = 0;
	WaitEvent	happened[3];
	int			nhappened;
	int			ready = 0;
	int			rc;

	if (handle != NULL && bridge_now_ms() < connect_not_before)
	{
		/* The client's pause before it connects again: see below. */
		long		left = (long) (connect_not_before - bridge_now_ms());

		if (timeout < 0 || left < timeout)
			timeout = left;
	}
	else if (handle != NULL)
	{
		int			state;

		/* What was sent since the last turn may have found the connection gone. */
		note_silent_disconnect();
		state = zoo_state(handle);
		if (state != ZOO_ASSOCIATING_STATE && state != ZOO_CONNECTED_STATE &&
			state != ZOO_READONLY_STATE)
			connect_sent_after = bridge_now_ms();
		rc = zookeeper_interest(handle, &fd, &interest, &tv);
		if (rc == ZOK || rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT)
		{
			long		client_ms = tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000;

			if (timeout < 0 || client_ms < timeout)
				timeout = client_ms;

			/*
			 * Without a socket, a wait is the client's pause after it tried
			 * every server, which it forgets once it has said so: it would
			 * connect at the next call, and a busy server's latch (a backend
			 * retrying a request that each failed attempt fails) made that
			 * a storm of connections, thousands a second, past
			 * maxClientCnxns.  The pause is kept here instead.
			 */
			if (fd < 0 && client_ms > 0)
				connect_not_before = bridge_now_ms() + client_ms;
		}
		if (fd >= 0)
		{
			if (interest & ZOOKEEPER_READ)
				socket_events |= WL_SOCKET_READABLE;
			if (interest & ZOOKEEPER_WRITE)
				socket_events |= WL_SOCKET_WRITEABLE;
		}
	}
	if (socket_events == 0)
		fd = PGINVALID_SOCKET;
	nhappened = WaitEventSetWait(turn_wait_set(fd, socket_events,
											   handle != NULL &&
											   zoo_state(handle) == ZOO_CONNECTED_STATE),
								 timeout < 0 ? 1000 : timeout,
								 happened, lengthof(happened),
								 ZKLOCK_WORKER_WAIT_EVENT());
	for (int i = 0; i < nhappened; i++)
	{
		if (happened[i].events & WL_LATCH_SET)
			ResetLatch(MyLatch);
		if (happened[i].events & WL_SOCKET_READABLE)
			ready |= ZOOKEEPER_READ;
		if (happened[i].events & WL_SOCKET_WRITEABLE)
			ready |= ZOOKEEPER_WRITE;
	}
	if (handle == NULL)
	{
		worker_flush_deferred();
		return;
	}
	/* The connection the client's sends go to until the next turn. */
	worker_socket = fd != PGINVALID_SOCKET &&
		zoo_state(handle) == ZOO_CONNECTED_STATE ? fd : PGINVALID_SOCKET;
	Assert(worker_client_depth == 0);
	worker_client_depth++;
	worker_wakes_hold();
	rc = zookeeper_process(handle, ready);

	/*
	 * The client takes in one reply per call: take in those that arrived
	 * with it before waiting again (a bounded number, so that new requests
	 * go out too), or a busy server costs a whole turn per reply.  Only on a
	 * connection that is up: a socket still connecting is the next turn's,
	 * as before (read from there, a refused connect would look like a server
	 * that closed it).  ZNOTHING: no whole reply was there to read, which
	 * costs one read, as asking poll() first did for every reply.
	 */
	for (int i = 0; (ready & ZOOKEEPER_READ) && rc != ZNOTHING && i < REPLIES_PER_TURN; i++)
	{
		if (zoo_state(handle) != ZOO_CONNECTED_STATE)
			break;
		rc = zookeeper_process(handle, ZOOKEEPER_READ);
	}
	worker_client_depth--;

	/*
	 * What the replies called for (a new lock node's watch) goes out before
	 * the backends wake: a backend's next request (the lock's release) then
	 * does not queue behind it on the server.
	 */
	worker_flush_deferred();
	worker_wakes_flush();
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
	zoo_set_debug_level((ZooLogLevel) Max(zklock_log_level, ZOO_LOG_LEVEL_ERROR));
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

/*
 * Claim the previous session's end.  False if someone else claimed it: then
 * *ended says whether they are done.
 */
static bool
claim_previous_session(bool *ended)
{
	uint32		seen = PREVIOUS_SESSION_UNCLAIMED;

	if (pg_atomic_compare_exchange_u32(&zk_shared->previous_session, &seen,
									   PREVIOUS_SESSION_CLAIMED))
		return true;
	*ended = seen == PREVIOUS_SESSION_ENDED;
	return false;
}

static void
previous_session_ended(void)
{
	Latch	   *worker_latch;

	pg_atomic_write_u32(&zk_shared->previous_session, PREVIOUS_SESSION_ENDED);
	SpinLockAcquire(&zk_shared->mutex);
	worker_latch = zk_shared->worker_latch;
	SpinLockRelease(&zk_shared->mutex);
	zk_wake(worker_latch);
}

/* A reaper that claimed the work and fails leaves it to the worker. */
static void
reaper_exit(int code, Datum arg)
{
	uint32		claimed = PREVIOUS_SESSION_CLAIMED;

	pg_atomic_compare_exchange_u32(&zk_shared->previous_session, &claimed,
								   PREVIOUS_SESSION_UNCLAIMED);
}

/*
 * The session reaper: at postmaster start, before recovery (which may take
 * long, and the session worker waits for a consistent state), end the
 * session the last worker left.  It exits with 0, which the postmaster logs
 * at DEBUG1 only and which unregisters it: it is not needed again (see the
 * header).
 */
void
zklock_reaper_main(Datum arg)
{
	bool		ended;

	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();
	before_shmem_exit(reaper_exit, (Datum) 0);
	if (claim_previous_session(&ended))
	{
		end_previous_session();
		previous_session_ended();
	}
	proc_exit(0);
}

/* ---- the worker ---- */

/*
 * At exit: a session with commits under way is left to expire, not ended.
 * An exit for the postmaster's death gets its line here (the client's own
 * about the close, a "System error" while it waited for the reply, is
 * below the default zklock.log_level).
 */
static void
worker_exit(int code, Datum arg)
{
	if (worker_zh != NULL && !PostmasterIsAlive())
		ereport(LOG,
				(errmsg("zklock: the postmaster died; closing ZooKeeper session 0x%llx, which frees the locks of this server",
						(unsigned long long) zoo_client_id(worker_zh)->client_id)));
	close_session(false);
	worker_issue_backlog();
	SpinLockAcquire(&zk_shared->mutex);
	zk_shared->worker_pid = 0;
	zk_shared->worker_latch = NULL;
	SpinLockRelease(&zk_shared->mutex);
	worker_wake_all();
}

void
zklock_worker_main(Datum arg)
{
	bool		ended = false;
	MemoryContext turn_context;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	/* pg_cancel_backend has no statement of ours to cancel. */
	pqsignal(SIGINT, PG_SIG_IGN);
	BackgroundWorkerUnblockSignals();
	/* Shared catalogs only: to be seen in pg_stat_activity. */
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	zk_shared_attach();
	worker_slots = MemoryContextAllocZero(TopMemoryContext,
									sizeof(WorkerSlot) * zk_shared->nslots);
	for (int i = 0; i < zk_shared->nslots; i++)
	{
		dlist_init(&worker_slots[i].owned);
		dlist_init(&worker_slots[i].uncertain);
		dlist_init(&worker_slots[i].watches);
	}

	SpinLockAcquire(&zk_shared->mutex);
	zk_shared->worker_pid = MyProcPid;
	zk_shared->worker_latch = MyLatch;
	zk_shared->generation = 0;
	SpinLockRelease(&zk_shared->mutex);
	before_shmem_exit(worker_exit, (Datum) 0);
	ereport(LOG,
			(errmsg("zklock session worker started (ZooKeeper at %s)", zklock_hosts)));

	/*
	 * The reaper may be ending the previous session: a new one must not be
	 * opened (and its file written) before.  A worker that exited without
	 * closing its session, after the reaper's turn, left one too.
	 */
	while (!claim_previous_session(&ended) && !ended)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 100, ZKLOCK_WORKER_WAIT_EVENT());
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ShutdownRequestPending)
			proc_exit(1);
	}
	end_previous_session();
	previous_session_ended();

	/*
	 * What a turn allocates and does not keep is freed with it: what is
	 * kept is allocated in TopMemoryContext by name.
	 */
	turn_context = AllocSetContextCreate(TopMemoryContext, "zklock worker turn",
										 ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(turn_context);
	while (!ShutdownRequestPending)
	{
		MemoryContextReset(turn_context);
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			/*
			 * Settings that failed may have been mended: try them at once,
			 * and let backends wait for that try, not fail with the last.
			 */
			if (worker_zh == NULL && settings_changed())
			{
				open_failures = 0;
				retry_open_at = 0;
				SpinLockAcquire(&zk_shared->mutex);
				zk_shared->open_error = 0;
				SpinLockRelease(&zk_shared->mutex);
			}
			if (worker_zh != NULL && close_deadline == 0 && settings_changed())
			{
				ereport(LOG,
						(errmsg("zklock: ZooKeeper settings changed; closing the session, which ends the locks held in it")));
				request_close_for(ZK_CLOSED_SETTINGS);
			}
		}
		if (worker_zh != NULL)
		{
			SessionVerdict verdict = session_verdict();

			/* Gone: no margin left to keep; written off: ours to close. */
			if (verdict == SESSION_GONE)
			{
				log_session_lost(session_gone_why());
				close_session(true);
			}
			else if (verdict == SESSION_SERVER_FAULT && close_deadline == 0)
				close_for_server_fault();
			else if (verdict == SESSION_WRITTEN_OFF && close_deadline == 0)
			{
				log_session_lost("a backend got no reply in time and wrote it off");
				request_close(true);
			}
		}
		close_when_done();
		if (worker_zh == NULL && bridge_now_ms() >= retry_open_at)
			open_session();

		worker_drain_queue();
		worker_check_slots();
		if (worker_zh != NULL)
			worker_send_proof_request();
		client_turn(worker_zh, next_turn_in());
		CHECK_FOR_INTERRUPTS();
	}

	/*
	 * Exit code 1: the postmaster starts us again, unless the server is
	 * shutting down (it never restarts a worker that exits with 0).
	 */
	ereport(LOG,
			(errmsg("zklock session worker stopping on request; it is started again in %d s unless the server is shutting down",
					ZKLOCK_WORKER_RESTART_S),
			 errdetail("Its ZooKeeper session ends, and with it the locks that backends of this server held.")));
	proc_exit(1);
}

/*
 * Register a worker; false if the postmaster refused it (LOG "too many
 * background workers": max_worker_processes is too low).  RegisterBackgroundWorker
 * does not say; its list of workers changes only when it took one.
 */
static bool
register_worker(const char *name, const char *function, int flags,
				BgWorkerStartTime start_time, int restart_s)
{
	BackgroundWorker worker;
	__typeof__(BackgroundWorkerList) before = BackgroundWorkerList;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = flags;
	worker.bgw_start_time = start_time;
	worker.bgw_restart_time = restart_s;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "zklock");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "%s", function);
	snprintf(worker.bgw_name, BGW_MAXLEN, "%s", name);
	snprintf(worker.bgw_type, BGW_MAXLEN, "%s", name);
	RegisterBackgroundWorker(&worker);
	return memcmp(&before, &BackgroundWorkerList, sizeof(before)) != 0;
}

/*
 * _PG_init: the session worker and its reaper, one each per server.  The
 * worker starts as soon as backends may connect (hot standbys take locks
 * too), the reaper before recovery.  Returns whether the worker was
 * registered.
 */
bool
zk_worker_register(void)
{
	bool		registered;

	registered = register_worker("zklock session worker", "zklock_worker_main",
								 BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION,
								 BgWorkerStart_ConsistentState, ZKLOCK_WORKER_RESTART_S);
	(void) register_worker("zklock session reaper", "zklock_reaper_main",
						   BGWORKER_SHMEM_ACCESS,
						   BgWorkerStart_PostmasterStart, BGW_NEVER_RESTART);
	return registered;
}
