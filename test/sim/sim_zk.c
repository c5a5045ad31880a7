/*
 * sim_zk.c
 *	  A model of a ZooKeeper 3.8 ensemble of three servers, as far as one
 *	  global session's life is concerned (release-3.8.0-1; the classes
 *	  named are the same up to 3.9.5; /work/notes/zk_source_facts.md has
 *	  the quotes):
 *	  - the leader's ping loop (Leader.lead: a pass every tickTime/2, later
 *	    by the adversary's pauses, but never more than cfg.max_ping_gap
 *	    apart), its quorum check every other pass, LearnerHandler.ping's
 *	    SyncLimitCheck (current/next, clock started when a PROPOSAL leaves),
 *	    the handler's read timeout (syncLimit ticks);
 *	  - the leader's session tracker: touches from PING replies, from its
 *	    own clients' requests and from REVALIDATE, each setting the deadline
 *	    to ExpiryQueue.roundToNextInterval(now + T) on the leader's clock,
 *	    and expiry at that deadline on the dot (the expirer's earliest);
 *	    expiry marks the session closing and submits a closeSession behind
 *	    what Prep has queued;
 *	  - Prep (one thread, in order): a forwarded write is checked there
 *	    (SESSIONEXPIRED when closing or gone, SESSIONMOVED when another
 *	    server owns the session) and proposed, refused or not; a forwarded
 *	    sync is checked, the result dropped, and handed to processSync,
 *	    which sends SYNC at once or when lastProposed commits
 *	    (pendingSyncs);
 *	  - proposals, ACKs after the log write, commits in order with a
 *	    quorum of two, COMMIT to every follower;
 *	  - a follower: its reader (PING: the touch table's snapshot swapped,
 *	    the reply written; PROPOSAL; COMMIT; SYNC: the head of its FIFO
 *	    pendingSyncs; REVALIDATE's answer), its read timeout (tickTime x
 *	    syncLimit) and Learner.shutdown closing its clients; its request
 *	    thread (submitRequestNow: the touch, get then put, then the
 *	    request), local reads, forwarded writes and syncs, the eager ACL
 *	    check's out-of-order ZNOAUTH; CommitProcessor's per-session order;
 *	  - the touch table race: a PING read between a touch's get and put
 *	    loses the touch, never two touches in a row;
 *	  - leader changes: a crash, or an isolation that the followers and
 *	    the leader find by their timeouts; an election among the looking
 *	    servers; the new leader's session tracker starting every session
 *	    afresh when its NEWLEADER quorum is in.
 * Not modelled: observers (ObserverMaster is out of scope, see
 * docs/testing.md), local sessions, reconfiguration, throttling,
 * read-only mode, TCP back pressure, other sessions but as write load.
 */
#include <stdlib.h>
#include <string.h>
#include <zookeeper/zookeeper.h>

#include "sim.h"

/* ---- small FIFOs ---- */

typedef struct Ring
{
	int64_t    *v;
	int			head;
	int			n;
	int			cap;
} Ring;

static void
ring_push(Ring *r, int64_t x)
{
	if (r->n == r->cap)
	{
		int			cap = r->cap ? r->cap * 2 : 16;
		int64_t    *v = malloc(sizeof(int64_t) * cap);

		if (v == NULL)
			abort();
		for (int i = 0; i < r->n; i++)
			v[i] = r->v[(r->head + i) % r->cap];
		free(r->v);
		r->v = v;
		r->head = 0;
		r->cap = cap;
	}
	r->v[(r->head + r->n++) % r->cap] = x;
}

static int64_t
ring_peek(Ring *r)
{
	return r->v[r->head];
}

static int64_t
ring_pop(Ring *r)
{
	int64_t		x = r->v[r->head];

	r->head = (r->head + 1) % r->cap;
	r->n--;
	return x;
}

static void
ring_clear(Ring *r)
{
	r->head = 0;
	r->n = 0;
}

/* ---- state ---- */

typedef enum Role
{
	ROLE_DOWN, ROLE_LOOKING, ROLE_FOLLOWING, ROLE_LEADING
} Role;

static const char *const role_names[] = {"down", "looking", "following", "leading"};

typedef enum PropKind
{
	PROP_OTHER,					/* another client's write */
	PROP_WRITE,					/* the worker's write */
	PROP_CLOSE					/* the session's closeSession */
} PropKind;

typedef struct Proposal
{
	PropKind	kind;
	int			leader;
	int			req;
	int			from;			/* the server the request came in at */
	int			rc;
	usec		decided;		/* PROP_CLOSE: when the leader expired it */
	unsigned	acks;
	unsigned	logged;
	bool		committed;
	bool		lost;			/* not in any later leader's history */
} Proposal;

typedef struct Handler
{
	bool		alive;
	int			gen;
	int			down;
	int			up;
	int64_t		tick_deadline;	/* tickOfNextAckDeadline */
	usec		last_read;
	/* SyncLimitCheck; times are +1 so that 0 means none */
	int64_t		cur_zxid;
	usec		cur_time;
	int64_t		next_zxid;
	usec		next_time;
} Handler;

typedef enum PrepKind
{
	PREP_LEARNER,				/* a request a follower forwarded */
	PREP_OWN,					/* a request of the leader's own client */
	PREP_CLOSE,					/* the expirer's closeSession */
	PREP_OTHER					/* another client's write */
} PrepKind;

typedef struct Leader
{
	int			sid;
	bool		running;
	bool		established;
	usec		isolated_until;
	int64_t		tick;
	bool		tick_skip;
	usec		last_ping;
	Handler		h[NSERV];
	int			joined;
	Ring		outstanding;	/* its uncommitted proposals, in order */
	int64_t		last_proposed;	/* a proposal index; -1: none */
	Ring		pending_syncs;	/* (proposal index << 8) | server */
	Ring		prep;			/* (kind << 40) | (server << 32) | req */
	bool		prep_armed;
	usec		log_done;
	/* the session tracker */
	bool		has_session;
	bool		closing;
	int64_t		deadline;		/* the leader's clock, ms */
	int			expire_gen;
	int			owner;
	usec		close_decided;
} Leader;

typedef struct Server
{
	Role		role;
	int			leader;			/* the leader followed or led */
	bool		serving;
	int			gen;
	int			qdown;
	int			qup;
	usec		last_leader_read;
	usec		clock_off;
	usec		log_done;
	/* the touch table, for the worker's session */
	bool		touched;
	bool		touch_open;		/* between the get and the put */
	bool		touch_lost;
	bool		touch_wait_ping;	/* scripted: its put waits for a PING */
	bool		last_touch_lost;
	int			touch_req;
	/* requests */
	Ring		intake;
	bool		intake_busy;
	Ring		sessq;			/* CommitProcessor: the session's order */
	Ring		pending_syncs;
	Ring		pending_txns;
	/* the session's connection here */
	int			conn;
	int			cdown;
	bool		established;
} Server;

static Server servers[NSERV];
static Leader *leaders;
static int	nleaders;
static int	leaders_cap;
static Proposal *props;
static int	nprops;
static int	props_cap;
static bool session_closed;
static int	last_established;	/* the newest leader established */
static int	lost_touches;
static double load_rate;
static usec load_burst_until;
static double load_burst_rate;

/* In a server's intake: the expirer's closeSession, not a request. */
#define CLOSE_SESSION (-1)

static void learner_shutdown(int sid, const char *why);
static void intake_next(int sid);
static void leader_shutdown(int li, const char *why);
static void try_commit(int li);

/* ---- helpers ---- */

static usec
log_delay(void)
{
	if (cfg.scripted)
		return 200;
	return rng_chance(0.02) ? rng_between(2 * MS, 30 * MS) : rng_between(50, 1500);
}



static int64_t
leader_ms(Leader *l)
{
	return (now + servers[l->sid].clock_off) / MS;
}

static const char *
req_name(int req)
{
	static char buf[4][48];
	static int	next;
	char	   *out = buf[next++ % 4];
	static const char *const kinds[] = {"read", "sync", "write", "ping"};
	static const char *const owners[] = {"chain ", "heartbeat ", "backend ", "guard's ", ""};

	snprintf(out, 48, "%s%s #%d", owners[reqs[req].owner], kinds[reqs[req].kind], req);
	return out;
}

bool
zk_serving(int sid)
{
	return servers[sid].serving;
}

/* The server that leads now (-1: none established). */
int
zk_leader_server(void)
{
	for (int li = nleaders - 1; li >= 0; li--)
		if (leaders[li].running && leaders[li].established)
			return leaders[li].sid;
	return -1;
}

/*
 * When the newest leader would expire the session now, on the real clock
 * (NEVER: no leader holds it).
 */
usec
zk_expiry_due(void)
{
	for (int li = nleaders - 1; li >= 0; li--)
		if (leaders[li].running && leaders[li].established)
			return leaders[li].has_session && !leaders[li].closing ?
				leaders[li].deadline * MS - servers[leaders[li].sid].clock_off : NEVER;
	return NEVER;
}

/* The quorum stream of a following server (-1: it follows none). */
int
zk_worker_server_link(int sid, bool up)
{
	if (sid < 0 || servers[sid].role != ROLE_FOLLOWING)
		return -1;
	return up ? servers[sid].qup : servers[sid].qdown;
}

/* ---- the session tracker (SessionTrackerImpl, ExpiryQueue) ---- */

static bool
tracker_touch(int li, const char *why)
{
	Leader	   *l = &leaders[li];
	int64_t		t = cfg.tick_ms;
	int64_t		deadline;

	if (!l->has_session || l->closing)
	{
		TRACE("S%d does not touch the session (%s): %s", l->sid, why,
			  l->has_session ? "it is closing" : "it has none");
		return false;
	}
	deadline = ((leader_ms(l) + cfg.timeout_ms) / t + 1) * t;
	if (deadline != l->deadline)
	{
		l->deadline = deadline;
		l->expire_gen++;
		ev_at(deadline * MS - servers[l->sid].clock_off, EV_EXPIRE, li, l->expire_gen);
	}
	TRACE("S%d touches the session (%s): expires at %lld.%03lld", l->sid, why,
		  (long long) ((deadline * MS - servers[l->sid].clock_off) / MS),
		  (long long) ((deadline * MS - servers[l->sid].clock_off) % MS));
	return true;
}

static void
expire(int li, int64_t gen)
{
	Leader	   *l = &leaders[li];

	if (!l->running || !l->established || !l->has_session || l->closing ||
		gen != l->expire_gen)
		return;
	l->closing = true;
	l->close_decided = now;
	TRACE("S%d EXPIRES the session (setSessionClosing, closeSession submitted)", l->sid);
	/* close -> submitRequest: through the RequestThrottler to Prep */
	ring_push(&servers[l->sid].intake, CLOSE_SESSION);
	intake_next(l->sid);
	adversary_hook(HK_EXPIRE, -1);
}

/* ---- the session's answers at a server (CommitProcessor's order) ---- */

static void
reply(int sid, int req, int rc)
{
	Server	   *s = &servers[sid];

	if (reqs[req].conn == s->conn && s->established)
	{
		TRACE("S%d answers %s: %s", sid, req_name(req), rc_name(rc));
		stream_send(s->cdown, CP_REPLY, req, rc);
	}
}

static void
drain(int sid)
{
	Server	   *s = &servers[sid];

	while (s->sessq.n > 0 && reqs[ring_peek(&s->sessq)].ready)
	{
		int			req = (int) ring_pop(&s->sessq);

		reply(sid, req, reqs[req].rc);
	}
}

static void
close_client(int sid, const char *why)
{
	Server	   *s = &servers[sid];

	if (s->conn >= 0)
	{
		TRACE("S%d closes the worker's connection %d (%s)", sid, s->conn, why);
		stream_send(s->cdown, PK_CLOSE, 0, 0);
	}
	s->conn = -1;
	s->established = false;
}

/* ---- proposals ---- */

static int
new_proposal(PropKind kind, int li, int req, int from, int rc)
{
	Proposal   *p;

	if (nprops == props_cap)
	{
		props_cap = props_cap ? props_cap * 2 : 256;
		props = realloc(props, sizeof(Proposal) * props_cap);
		if (props == NULL)
			abort();
	}
	p = &props[nprops];
	*p = (Proposal)
	{
		.kind = kind,.leader = li,.req = req,.from = from,.rc = rc
	};
	return nprops++;
}

static void
slc_update_proposal(Handler *h, int64_t zxid)
{
	if (h->cur_time == 0)
	{
		h->cur_time = now + 1;
		h->cur_zxid = zxid;
	}
	else
	{
		h->next_time = now + 1;
		h->next_zxid = zxid;
	}
}

static void
slc_update_ack(Handler *h, int64_t zxid)
{
	if (h->cur_zxid == zxid)
	{
		h->cur_time = h->next_time;
		h->cur_zxid = h->next_zxid;
		h->next_time = 0;
		h->next_zxid = 0;
	}
	else if (h->next_zxid == zxid)
	{
		h->next_time = 0;
		h->next_zxid = 0;
	}
}

static bool
slc_check(Handler *h)
{
	return h->cur_time == 0 ||
		(now + 1 - h->cur_time) / MS < (usec) cfg.tick_ms * cfg.sync_limit;
}

static void
propose(int li, PropKind kind, int req, int from, int rc)
{
	Leader	   *l = &leaders[li];
	int			pi = new_proposal(kind, li, req, from, rc);

	if (kind == PROP_CLOSE)
		props[pi].decided = l->close_decided;
	/* a deposed leader's proposal: no later history will have it */
	props[pi].lost = li < last_established;
	ring_push(&l->outstanding, pi);
	l->last_proposed = pi;
	for (int f = 0; f < NSERV; f++)
	{
		Handler    *h = &l->h[f];

		if (!h->alive)
			continue;
		stream_send(h->down, QP_PROPOSAL, pi, 0);
		slc_update_proposal(h, pi + 1);
	}
	l->log_done = (now + log_delay() > l->log_done ? now + log_delay() : l->log_done);
	ev_at(l->log_done, EV_LEADER_LOGGED, li, pi);
	if (kind != PROP_OTHER)
		TRACE("S%d proposes #%d: %s%s", l->sid, pi,
			  kind == PROP_CLOSE ? "closeSession" : req_name(req),
			  kind == PROP_WRITE ? (rc == ZOK ? "" : rc == ZBADVERSION ? " (refused: ZBADVERSION)" :
									rc == ZNOAUTH ? " (refused: ZNOAUTH)" :
									rc == ZSESSIONEXPIRED ? " (refused: ZSESSIONEXPIRED)" :
									" (refused: ZSESSIONMOVED)") : "");
}

static void
send_sync(int li, int f)
{
	Leader	   *l = &leaders[li];

	if (l->h[f].alive)
	{
		TRACE("S%d queues SYNC to S%d", l->sid, f);
		stream_send(l->h[f].down, QP_SYNC, 0, 0);
	}
}

/* A committed proposal at the server sid (leader or follower). */
static void
applied(int sid, int pi)
{
	Proposal   *p = &props[pi];
	Server	   *s = &servers[sid];

	if (p->kind == PROP_WRITE && p->from == sid)
	{
		reqs[p->req].rc = p->rc;
		reqs[p->req].ready = true;
		drain(sid);
	}
	else if (p->kind == PROP_CLOSE)
	{
		drain(sid);
		ring_clear(&s->sessq);
		close_client(sid, "closeSession committed");
	}
}

static void
commit(int li, int pi)
{
	Leader	   *l = &leaders[li];
	Proposal   *p = &props[pi];

	p->committed = true;
	for (int f = 0; f < NSERV; f++)
		if (l->h[f].alive)
			stream_send(l->h[f].down, QP_COMMIT, pi, 0);
	if (p->kind != PROP_OTHER)
		TRACE("S%d commits #%d", l->sid, pi);
	if (p->kind == PROP_CLOSE && !session_closed)
	{
		session_closed = true;
		l->has_session = false;
		check_close_committed(p->decided, l->sid);
	}
	applied(l->sid, pi);
	if (p->kind == PROP_WRITE)
		adversary_hook(HK_COMMIT_WRITE, p->from);
	/* Leader.tryToCommit: the syncs that waited for this proposal */
	while (l->pending_syncs.n > 0 && (ring_peek(&l->pending_syncs) >> 8) == pi)
		send_sync(li, (int) (ring_pop(&l->pending_syncs) & 0xff));
}

static void
try_commit(int li)
{
	Leader	   *l = &leaders[li];

	while (l->running && l->outstanding.n > 0)
	{
		int			pi = (int) ring_peek(&l->outstanding);

		if (__builtin_popcount(props[pi].acks) < QUORUM)
			break;
		ring_pop(&l->outstanding);
		commit(li, pi);
	}
}

/* ---- Prep ---- */

static void
prep_push(int li, PrepKind kind, int sid, int req)
{
	Leader	   *l = &leaders[li];

	ring_push(&l->prep, ((int64_t) kind << 40) | ((int64_t) sid << 32) | req);
	if (!l->prep_armed)
	{
		l->prep_armed = true;
		ev_at(now + step_delay(5, 50), EV_PREP, li, 0);
	}
}

static int
session_rc(Leader *l, int from)
{
	if (!l->has_session || l->closing)
		return ZSESSIONEXPIRED;
	if (l->owner != from)
		return ZSESSIONMOVED;
	return ZOK;
}

static int
write_rc(Leader *l, int req, int from)
{
	int			rc = session_rc(l, from);

	if (rc != ZOK)
		return rc;
	switch (reqs[req].wkind)
	{
		case WK_PROBE:
			return ZBADVERSION;
		case WK_ACL_DENIED:
			return ZNOAUTH;
		default:
			return ZOK;
	}
}

static void
prep_one(int li)
{
	Leader	   *l = &leaders[li];
	int64_t		item;
	PrepKind	kind;
	int			sid;
	int			req;

	l->prep_armed = false;
	if (!l->running || l->prep.n == 0)
		return;
	item = ring_pop(&l->prep);
	kind = (PrepKind) (item >> 40);
	sid = (int) ((item >> 32) & 0xff);
	req = (int) (item & 0xffffffff);
	switch (kind)
	{
		case PREP_LEARNER:
			if (reqs[req].kind == RK_SYNC)
			{
				/* checkSession's verdict is dropped; processSync */
				if (l->outstanding.n == 0)
					send_sync(li, sid);
				else
					ring_push(&l->pending_syncs, ((int64_t) l->last_proposed << 8) | sid);
			}
			else
				propose(li, PROP_WRITE, req, sid, write_rc(l, req, sid));
			break;
		case PREP_OWN:
			if (reqs[req].kind == RK_WRITE)
				propose(li, PROP_WRITE, req, l->sid, write_rc(l, req, l->sid));
			else
			{
				reqs[req].rc = session_rc(l, l->sid) == ZSESSIONEXPIRED ? ZSESSIONEXPIRED : ZOK;
				reqs[req].ready = true;
				drain(l->sid);
			}
			break;
		case PREP_CLOSE:
			propose(li, PROP_CLOSE, -1, -1, ZOK);
			break;
		case PREP_OTHER:
			propose(li, PROP_OTHER, -1, -1, ZOK);
			break;
	}
	if (l->prep.n > 0)
	{
		usec		d = rng_chance(cfg.prep_pause_p) ?
			rng_between(0, (usec) cfg.timeout_ms * MS / 4) : step_delay(5, 50);

		l->prep_armed = true;
		ev_at(now + d, EV_PREP, li, 0);
	}
}

/* ---- the leader ---- */

static void
handler_shutdown(int li, int f, const char *why)
{
	Handler    *h = &leaders[li].h[f];

	if (!h->alive)
		return;
	h->alive = false;
	TRACE("S%d closes its connection to S%d (%s)", leaders[li].sid, f, why);
	stream_send(h->down, PK_CLOSE, 0, 0);
	stream_close(h->up);
}

static void
ping_pass(int li)
{
	Leader	   *l = &leaders[li];
	usec		half = (usec) cfg.tick_ms * MS / 2;
	usec		next;

	if (!l->running || !l->established)
		return;
	if (!l->tick_skip)
	{
		int			synced = 1;

		l->tick++;
		for (int f = 0; f < NSERV; f++)
			if (l->h[f].alive && l->tick <= l->h[f].tick_deadline)
				synced++;
		if (synced < QUORUM)
		{
			leader_shutdown(li, "not sufficient followers synced");
			return;
		}
	}
	l->tick_skip = !l->tick_skip;
	for (int f = 0; f < NSERV; f++)
	{
		Handler    *h = &l->h[f];

		if (!h->alive)
			continue;
		if (slc_check(h))
		{
			if (f == worker_conn_server())
				TRACE("S%d queues PING to S%d", l->sid, f);
			stream_send(h->down, QP_PING, 0, 0);
		}
		else
			handler_shutdown(li, f, "transaction timeout (SyncLimitCheck)");
	}
	l->last_ping = now;
	next = half + step_delay(0, 300);
	if (rng_chance(cfg.ping_pause_p))
		next = rng_between(half, cfg.max_ping_gap);
	if (now + next > cfg.quiet_from && now + next < cfg.quiet_until)
		next = cfg.quiet_until - now;
	if (next > cfg.max_ping_gap)
		next = cfg.max_ping_gap;
	ev_at(now + next, EV_PING, li, 0);
}

static void
leader_read(int li, int f, int s, Packet *p)
{
	Leader	   *l = &leaders[li];
	Handler    *h = &l->h[f];

	if (!l->running || !h->alive || s != h->up)
		return;
	h->last_read = now;
	h->tick_deadline = l->tick + cfg.sync_limit;
	switch (p->type)
	{
		case QP_PING_REPLY:
			if (p->x)
				tracker_touch(li, "PING reply");
			break;
		case QP_ACK:
			slc_update_ack(h, p->x + 1);
			props[p->x].acks |= 1u << f;
			try_commit(li);
			break;
		case QP_REQUEST:
			TRACE("S%d reads from S%d: %s", l->sid, f, req_name((int) p->x));
			prep_push(li, PREP_LEARNER, f, (int) p->x);
			break;
		case QP_REVALIDATE:
			{
				bool		valid = tracker_touch(li, "REVALIDATE");

				if (valid)
					l->owner = f;
				stream_send(h->down, QP_REVAL_REPLY, p->x, valid);
			}
			break;
		case PK_CLOSE:
			TRACE("S%d: S%d closed its connection", l->sid, f);
			h->alive = false;
			stream_close(h->down);
			break;
		default:
			abort();
	}
}

static void
handler_check(int li, int f, int64_t gen)
{
	Leader	   *l = &leaders[li];
	Handler    *h = &l->h[f];
	usec		limit = (usec) cfg.tick_ms * cfg.sync_limit * MS;

	if (!l->running || !h->alive || h->gen != gen)
		return;
	if (now - h->last_read >= limit)
		handler_shutdown(li, f, "read timed out");
	else
		ev_at(h->last_read + limit, EV_HANDLER_CHECK, li * NSERV + f, gen);
}

static void
leader_shutdown(int li, const char *why)
{
	Leader	   *l = &leaders[li];
	Server	   *s = &servers[l->sid];

	if (!l->running)
		return;
	TRACE("S%d stops leading (%s)", l->sid, why);
	l->running = false;
	for (int f = 0; f < NSERV; f++)
		handler_shutdown(li, f, "leader shutdown");
	close_client(l->sid, "leader shutdown");
	if (s->role == ROLE_LEADING && s->leader == li)
	{
		s->role = ROLE_LOOKING;
		s->serving = false;
		ring_clear(&s->sessq);
		ring_clear(&s->intake);
		s->intake_busy = false;
		s->gen++;
		ev_at(now + rng_between(50 * MS, 500 * MS), EV_JOIN, l->sid, 0);
	}
}

/* ---- joining, elections ---- */

static void
establish(int li)
{
	Leader	   *l = &leaders[li];
	unsigned	members = 1u << l->sid;

	if (!l->running || l->established)
		return;
	l->established = true;
	last_established = li;
	for (int f = 0; f < NSERV; f++)
		if (l->h[f].alive)
			members |= 1u << f;
	/*
	 * An earlier leader's proposal that a member of the new quorum logged
	 * is in the new history and committed; the others are truncated away
	 * for good (only the session's closeSession matters here).
	 */
	for (int pi = 0; pi < nprops; pi++)
	{
		Proposal   *p = &props[pi];

		if (p->leader == li || p->committed || p->lost)
			continue;
		if ((p->logged & members) == 0)
		{
			p->lost = true;
			continue;
		}
		p->committed = true;
		if (p->kind == PROP_CLOSE && !session_closed)
		{
			session_closed = true;
			TRACE("S%d's new epoch commits the old closeSession #%d", l->sid, pi);
			check_close_committed(p->decided, l->sid);
		}
	}
	l->has_session = !session_closed;
	l->owner = -1;
	TRACE("S%d leads: its session tracker starts every session afresh", l->sid);
	tracker_touch(li, "new leader");
	servers[l->sid].serving = true;
	for (int f = 0; f < NSERV; f++)
		if (l->h[f].alive)
			servers[f].serving = true;
	ev_at(now + (usec) cfg.tick_ms * MS / 2, EV_PING, li, 0);
}

static bool
reachable(int li)
{
	Leader	   *l = &leaders[li];

	return l->running && now >= l->isolated_until;
}

static void
follower_join(int sid, int li)
{
	Server	   *s = &servers[sid];
	Leader	   *l = &leaders[li];
	Handler    *h = &l->h[sid];

	s->role = ROLE_FOLLOWING;
	s->leader = li;
	s->gen++;
	s->qdown = stream_open(SK_QDOWN, li, l->sid, sid);
	s->qup = stream_open(SK_QUP, li, l->sid, sid);
	s->last_leader_read = now;
	s->touched = false;
	s->touch_open = false;
	s->last_touch_lost = false;
	ring_clear(&s->pending_syncs);
	ring_clear(&s->pending_txns);
	ring_clear(&s->sessq);
	ring_clear(&s->intake);
	s->intake_busy = false;
	s->serving = l->established;
	*h = (Handler)
	{
		.alive = true,.gen = h->gen + 1,.down = s->qdown,.up = s->qup,
			.tick_deadline = l->tick + cfg.sync_limit,.last_read = now
	};
	/* the leader's sync sends what is still outstanding */
	for (int i = 0; i < l->outstanding.n; i++)
	{
		int64_t		pi = l->outstanding.v[(l->outstanding.head + i) % l->outstanding.cap];

		stream_send(h->down, QP_PROPOSAL, pi, 0);
	}
	TRACE("S%d follows S%d", sid, l->sid);
	ev_at(now + (usec) cfg.tick_ms * cfg.sync_limit * MS, EV_LEARNER_CHECK, sid, s->gen);
	ev_at(now + (usec) cfg.tick_ms * cfg.sync_limit * MS, EV_HANDLER_CHECK, li * NSERV + sid, h->gen);
	l->joined++;
	if (!l->established && l->joined + 1 >= QUORUM)
		ev_at(now + rng_between(MS, 20 * MS), EV_ESTABLISH, li, 0);
}

static int
leader_begin(int sid)
{
	Leader	   *l;
	int			li;

	if (nleaders == leaders_cap)
	{
		leaders_cap = leaders_cap ? leaders_cap * 2 : 8;
		leaders = realloc(leaders, sizeof(Leader) * leaders_cap);
		if (leaders == NULL)
			abort();
		memset(leaders + nleaders, 0, sizeof(Leader) * (leaders_cap - nleaders));
	}
	li = nleaders++;
	l = &leaders[li];
	l->sid = sid;
	l->running = true;
	l->established = false;
	l->isolated_until = 0;
	l->tick = 0;
	l->tick_skip = true;
	for (int f = 0; f < NSERV; f++)
		l->h[f].alive = false;
	l->joined = 0;
	ring_clear(&l->outstanding);
	ring_clear(&l->pending_syncs);
	ring_clear(&l->prep);
	l->prep_armed = false;
	l->last_proposed = -1;
	l->log_done = 0;
	l->has_session = false;
	l->closing = false;
	l->deadline = 0;
	l->owner = -1;
	servers[sid].role = ROLE_LEADING;
	servers[sid].leader = li;
	servers[sid].serving = false;
	servers[sid].gen++;
	ring_clear(&servers[sid].sessq);
	ring_clear(&servers[sid].intake);
	servers[sid].intake_busy = false;
	TRACE("S%d is elected leader", sid);
	return li;
}

static void
try_join(int sid)
{
	int			looking = 0;

	if (servers[sid].role != ROLE_LOOKING)
		return;
	/* only the newest leader: an older one has lost its quorum for good */
	if (nleaders > 0 && reachable(nleaders - 1))
	{
		follower_join(sid, nleaders - 1);
		return;
	}
	for (int i = 0; i < NSERV; i++)
		if (servers[i].role == ROLE_LOOKING)
			looking++;
	if (looking >= QUORUM)
	{
		leader_begin(sid);
		for (int i = 0; i < NSERV; i++)
			if (servers[i].role == ROLE_LOOKING)
				ev_at(now + rng_between(MS, 200 * MS), EV_JOIN, i, 0);
		return;
	}
	ev_at(now + rng_between(100 * MS, 500 * MS), EV_JOIN, sid, 0);
}

/* ---- a follower ---- */

static void
learner_shutdown(int sid, const char *why)
{
	Server	   *s = &servers[sid];

	if (s->role != ROLE_FOLLOWING)
		return;
	TRACE("S%d stops following (%s)", sid, why);
	close_client(sid, "Learner.shutdown");
	stream_send(s->qup, PK_CLOSE, 0, 0);
	stream_close(s->qdown);
	s->role = ROLE_LOOKING;
	s->serving = false;
	s->gen++;
	s->touch_open = false;
	ring_clear(&s->sessq);
	ring_clear(&s->intake);
	s->intake_busy = false;
	ring_clear(&s->pending_syncs);
	ring_clear(&s->pending_txns);
	ev_at(now + rng_between(10 * MS, 300 * MS), EV_JOIN, sid, 0);
}

static bool
may_lose_touch(Server *s)
{
	return s->touch_open && !s->last_touch_lost &&
		lost_touches < cfg.max_lost_touches &&
		(cfg.scripted ? s->touch_wait_ping : rng_chance(cfg.lose_touch_p));
}

static void
follower_read(int sid, int stream, Packet *p)
{
	Server	   *s = &servers[sid];

	if (s->role != ROLE_FOLLOWING || stream != s->qdown)
		return;
	s->last_leader_read = now;
	switch (p->type)
	{
		case QP_PING:
			{
				bool		touched = s->touched;

				if (may_lose_touch(s))
				{
					if (s->touch_wait_ping)
					{
						s->touch_wait_ping = false;
						ev_at(now + 1, EV_TOUCHED, sid, s->gen);
					}
					s->touch_lost = true;
					lost_touches++;
					TRACE("S%d: the PING swaps the touch table under the touch of %s: that touch is LOST",
						  sid, req_name(s->touch_req));
				}
				s->touched = false;
				if (touched)
					TRACE("S%d reads PING, replies with the session's touch", sid);
				else if (sid == worker_conn_server())
					TRACE("S%d reads PING, replies with no touch of the session", sid);
				stream_send(s->qup, QP_PING_REPLY, touched, 0);
				if (touched)
					adversary_hook(HK_PING_REPLY_TOUCH, sid);
			}
			break;
		case QP_PROPOSAL:
			ring_push(&s->pending_txns, p->x);
			s->log_done = now + log_delay() > s->log_done ? now + log_delay() : s->log_done;
			ev_at(s->log_done, EV_LOGGED, sid, ((int64_t) s->gen << 32) | p->x);
			break;
		case QP_COMMIT:
			if (s->pending_txns.n == 0 || ring_peek(&s->pending_txns) != p->x)
			{
				fprintf(stderr, "model error: S%d commits #%lld out of order\n", sid, (long long) p->x);
				abort();
			}
			ring_pop(&s->pending_txns);
			if (props[p->x].kind != PROP_OTHER)
				TRACE("S%d reads COMMIT #%lld", sid, (long long) p->x);
			applied(sid, (int) p->x);
			break;
		case QP_SYNC:
			{
				int			req;

				if (s->pending_syncs.n == 0)
					break;		/* "Not expecting a sync." */
				req = (int) ring_pop(&s->pending_syncs);
				TRACE("S%d reads SYNC for %s", sid, req_name(req));
				reqs[req].rc = ZOK;
				reqs[req].ready = true;
				drain(sid);
				adversary_hook(HK_ANSWER_SYNC, sid);
			}
			break;
		case QP_REVAL_REPLY:
			if (s->conn == p->x && !s->established)
			{
				TRACE("S%d: the leader %s the session: answers the connect", sid,
					  p->y ? "revalidated" : "does not know");
				stream_send(s->cdown, CP_CONNECTED, p->y, 0);
				if (p->y)
					s->established = true;
				else
				{
					s->conn = -1;
					s->established = false;
				}
			}
			break;
		case PK_CLOSE:
			learner_shutdown(sid, "the leader closed the connection");
			break;
		default:
			abort();
	}
}

static void
learner_check(int sid, int64_t gen)
{
	Server	   *s = &servers[sid];
	usec		limit = (usec) cfg.tick_ms * cfg.sync_limit * MS;

	if (s->role != ROLE_FOLLOWING || s->gen != gen)
		return;
	if (now - s->last_leader_read >= limit)
		learner_shutdown(sid, "read timed out: nothing from the leader for tickTime x syncLimit");
	else
		ev_at(s->last_leader_read + limit, EV_LEARNER_CHECK, sid, gen);
}

/* ---- a server's request thread (RequestThrottler -> submitRequestNow) ---- */

static void
intake_next(int sid)
{
	Server	   *s = &servers[sid];

	if (!s->intake_busy && s->intake.n > 0)
	{
		usec		d = rng_chance(cfg.throttle_p) ? rng_between(0, cfg.throttle_max) : step_delay(2, 20);

		if (cfg.scripted && ring_peek(&s->intake) == CLOSE_SESSION)
			d = cfg.close_delay;
		s->intake_busy = true;
		ev_at(now + d, EV_INTAKE, sid, s->gen);
	}
}

static void
intake_start(int sid, int64_t gen)
{
	Server	   *s = &servers[sid];
	int			req;

	if (s->gen != gen || s->intake.n == 0)
		return;
	req = (int) ring_pop(&s->intake);
	if (req == CLOSE_SESSION)
	{
		if (s->role == ROLE_LEADING)
			prep_push(s->leader, PREP_CLOSE, sid, 0);
		s->intake_busy = false;
		intake_next(sid);
		return;
	}
	if (s->role == ROLE_LEADING)
	{
		tracker_touch(s->leader, req_name(req));
		ring_push(&s->sessq, req);
		prep_push(s->leader, PREP_OWN, sid, req);
		s->intake_busy = false;
		intake_next(sid);
		return;
	}
	/* touchSession: get() now, put() after the thread's delay */
	s->touch_open = true;
	s->touch_lost = false;
	s->touch_req = req;
	if (now >= cfg.lose_touch_from)
	{
		/* scripted: the thread stalls until the next PING is read */
		cfg.lose_touch_from = NEVER;
		s->touch_wait_ping = true;
		return;
	}
	ev_at(now + (rng_chance(cfg.preempt_p) ? rng_between(0, cfg.preempt_max) : step_delay(1, 20)),
		  EV_TOUCHED, sid, gen);
}

static void
intake_done(int sid, int64_t gen)
{
	Server	   *s = &servers[sid];
	int			req = s->touch_req;

	if (s->gen != gen || !s->touch_open)
		return;
	s->touch_open = false;
	if (s->touch_lost)
		s->last_touch_lost = true;
	else
	{
		s->touched = true;
		s->last_touch_lost = false;
	}
	switch (reqs[req].kind)
	{
		case RK_READ:
		case RK_PING:
			reqs[req].rc = ZOK;
			reqs[req].ready = true;
			ring_push(&s->sessq, req);
			drain(sid);
			break;
		case RK_SYNC:
			ring_push(&s->pending_syncs, req);
			ring_push(&s->sessq, req);
			TRACE("S%d forwards %s", sid, req_name(req));
			stream_send(s->qup, QP_REQUEST, req, 0);
			adversary_hook(HK_FORWARD_SYNC, sid);
			break;
		case RK_WRITE:
			if (cfg.eager_acl && reqs[req].wkind == WK_ACL_DENIED)
			{
				/* authWriteRequest: answered at once, out of order */
				reply(sid, req, ZNOAUTH);
				break;
			}
			ring_push(&s->sessq, req);
			TRACE("S%d forwards %s", sid, req_name(req));
			stream_send(s->qup, QP_REQUEST, req, 0);
			adversary_hook(HK_FORWARD_WRITE, sid);
			break;
	}
	s->intake_busy = false;
	intake_next(sid);
}

/* What the worker's connection brings to the server sid. */
static void
client_read(int sid, int conn, Packet *p)
{
	Server	   *s = &servers[sid];

	switch (p->type)
	{
		case CP_CONNECT:
			if (!s->serving)
			{
				TRACE("S%d is not serving: closes connection %d", sid, conn);
				stream_send((int) p->y, PK_CLOSE, 0, 0);
				return;
			}
			s->conn = conn;
			s->cdown = (int) p->y;
			s->established = false;
			if (s->role == ROLE_LEADING)
			{
				bool		valid = tracker_touch(s->leader, "reconnect");

				if (valid)
				{
					leaders[s->leader].owner = sid;
					s->established = true;
				}
				else
					s->conn = -1;
				stream_send((int) p->y, CP_CONNECTED, valid, 0);
			}
			else
			{
				TRACE("S%d sends REVALIDATE for connection %d", sid, conn);
				stream_send(s->qup, QP_REVALIDATE, conn, 0);
			}
			break;
		case CP_REQUEST:
			if (s->conn != conn || !s->established || !s->serving)
				return;
			TRACE("S%d receives %s", sid, req_name((int) p->x));
			ring_push(&s->intake, p->x);
			intake_next(sid);
			break;
		case PK_CLOSE:
			if (s->conn == conn)
			{
				s->conn = -1;
				s->established = false;
			}
			break;
		default:
			abort();
	}
}

/* ---- entry points ---- */

void
zk_deliver(int s, StreamKind kind, int a, int b, int c, Packet *p)
{
	switch (kind)
	{
		case SK_QDOWN:
			follower_read(c, s, p);
			break;
		case SK_QUP:
			leader_read(a, c, s, p);
			break;
		case SK_CUP:
			client_read(b, a, p);
			break;
		default:
			abort();
	}
}

void
zk_event(EvKind kind, int a, int64_t b)
{
	switch (kind)
	{
		case EV_PING:
			ping_pass(a);
			break;
		case EV_EXPIRE:
			expire(a, b);
			break;
		case EV_PREP:
			prep_one(a);
			break;
		case EV_LEADER_LOGGED:
			if (leaders[a].running)
			{
				props[b].acks |= 1u << leaders[a].sid;
				props[b].logged |= 1u << leaders[a].sid;
				try_commit(a);
			}
			break;
		case EV_INTAKE:
			intake_start(a, b);
			break;
		case EV_TOUCHED:
			intake_done(a, b);
			break;
		case EV_LOGGED:
			if (servers[a].role == ROLE_FOLLOWING && servers[a].gen == (b >> 32))
			{
				props[b & 0xffffffff].logged |= 1u << a;
				stream_send(servers[a].qup, QP_ACK, b & 0xffffffff, 0);
			}
			break;
		case EV_LEARNER_CHECK:
			learner_check(a, b);
			break;
		case EV_HANDLER_CHECK:
			handler_check(a / NSERV, a % NSERV, b);
			break;
		case EV_JOIN:
			try_join(a);
			break;
		case EV_ESTABLISH:
			establish(a);
			break;
		case EV_RESTART:
			if (servers[a].role == ROLE_DOWN)
			{
				TRACE("S%d restarts", a);
				servers[a].role = ROLE_LOOKING;
				try_join(a);
			}
			break;
		case EV_LOAD:
			{
				double		rate = now < load_burst_until ? load_burst_rate : load_rate;

				for (int li = nleaders - 1; li >= 0; li--)
					if (leaders[li].running && leaders[li].established)
					{
						prep_push(li, PREP_OTHER, leaders[li].sid, 0);
						break;
					}
				if (rate > 0)
					ev_at(now + rng_between(1, (usec) (2e6 / rate)), EV_LOAD, 0, 0);
			}
			break;
		default:
			abort();
	}
}

void
zk_reset(void)
{
	for (int i = 0; i < NSERV; i++)
	{
		Server	   *s = &servers[i];

		s->role = ROLE_LOOKING;
		s->leader = -1;
		s->serving = false;
		s->gen = 0;
		s->qdown = s->qup = -1;
		s->clock_off = rng_between(0, 10000 * MS);
		s->log_done = 0;
		s->touched = s->touch_open = s->touch_lost = s->last_touch_lost = false;
		s->touch_wait_ping = false;
		if (cfg.scripted)
			s->clock_off = cfg.clock_off[i];
		ring_clear(&s->intake);
		s->intake_busy = false;
		ring_clear(&s->sessq);
		ring_clear(&s->pending_syncs);
		ring_clear(&s->pending_txns);
		s->conn = -1;
		s->established = false;
	}
	nleaders = 0;
	nprops = 0;
	last_established = 0;
	session_closed = false;
	lost_touches = 0;
	load_burst_until = 0;
}

/* The ensemble at time 0: a leader, two followers, the session open. */
void
zk_start(void)
{
	int			first = cfg.scripted ? cfg.first_leader : (int) rng_between(0, NSERV - 1);
	int			li = leader_begin(first);

	for (int i = 0; i < NSERV; i++)
		if (i != first)
			follower_join(i, li);
	establish(li);
	leaders[li].owner = -1;
	load_rate = cfg.load_rate;
	if (load_rate > 0)
		ev_at(rng_between(0, (usec) (1e6 / load_rate)), EV_LOAD, 0, 0);
}

/* The adversary's faults. */
void
zk_crash(int sid, usec down_for)
{
	Server	   *s = &servers[sid];

	if (s->role == ROLE_DOWN)
		return;
	TRACE("adversary: S%d crashes (%s) for %lld ms", sid, role_names[s->role],
		  (long long) (down_for / MS));
	if (s->role == ROLE_LEADING)
		leader_shutdown(s->leader, "crashed");
	else if (s->role == ROLE_FOLLOWING)
		learner_shutdown(sid, "crashed");
	close_client(sid, "crashed");
	s->role = ROLE_DOWN;
	s->serving = false;
	s->gen++;
	ev_at(now + down_for, EV_RESTART, sid, 0);
}

void
zk_isolate_leader(usec until1, usec until2)
{
	for (int li = nleaders - 1; li >= 0; li--)
	{
		Leader	   *l = &leaders[li];

		if (!l->running || !l->established)
			continue;
		TRACE("adversary: S%d (leader) isolated from the other servers", l->sid);
		l->isolated_until = until2;
		for (int f = 0; f < NSERV; f++)
			if (l->h[f].alive)
			{
				stream_hold(l->h[f].down, until1, until1, until2);
				stream_hold(l->h[f].up, until1, until1, until2);
			}
		return;
	}
}

void
zk_load_burst(usec until, double rate)
{
	TRACE("adversary: other clients write %.0f/s until %lld ms", rate, (long long) (until / MS));
	load_burst_until = until;
	load_burst_rate = rate;
	if (load_rate <= 0)
		ev_at(now, EV_LOAD, 0, 0);
}
