/*
 * sim_worker.c
 *	  The zklock side of the simulation: the session worker with its
 *	  single-threaded C client, its backends and their COMMITs' guards,
 *	  driving the real src/worker_proof.c as src/zk_worker.c,
 *	  src/worker_requests.c and src/zk_session.c do:
 *	  - the C client (zookeeper.c 3.8.0): one connection at a time, the
 *	    answers matched in order (an answer out of order drops the
 *	    connection, ZRUNTIMEINCONSISTENCY), a drop after 2T/3 without a
 *	    whole message, a PING after T/3 without a send when nothing is
 *	    outstanding, every outstanding request answered ZCONNECTIONLOSS
 *	    when the connection drops, then the next server;
 *	  - the worker: proof_connection when the client connects (with the
 *	    time its connect was sent after, sometimes a looser earlier one)
 *	    and when it disconnects, proof_answered for each answer (what it
 *	    returns published with proof_provable, as worker_requests.c's
 *	    publish_proof does), proof_next_send/proof_sent/proof_sync_settled
 *	    for its chain of syncs;
 *	  - backends' reads and writes, and COMMITs that run
 *	    zk_session_confirm's loop around proof_guard_step, asking with a
 *	    set at version -2.
 */
#include <stdlib.h>
#include <string.h>
#include <zookeeper/zookeeper.h>

#include "sim.h"
#include "worker_proof.h"

typedef enum ClientState
{
	CS_CONNECTING,				/* no session connection yet */
	CS_CONNECTED,
	CS_EXPIRED					/* the session is gone */
} ClientState;

typedef struct Conn
{
	int			server;
	int			up;
	int			down;
	usec		connect_sent;
} Conn;

typedef struct Guard
{
	bool		active;
	int			gen;
	int			check;			/* its write; -1: none */
	usec		started;
	ProofGuard	pg;
} Guard;

Req		   *reqs;
int			nreqs;
static int	reqs_cap;

static Conn *conns;
static int	nconns;
static int	conns_cap;
static int	cur;				/* the open connection; -1: none */
static ClientState state;
static bool ever_connected;
static int *sent;				/* outstanding requests, in order */
static int	sent_head;
static int	sent_n;
static int	sent_cap;
static int	pings_out;
static usec last_recv;
static usec last_send;
static usec disconnected_at;
static usec worker_next_at;
static int64_t proven_until;
static int64_t connect_after;	/* the open connection's proof_connection */
static int64_t provable;
static Guard *guards;
static int	nguards;
static int	guards_cap;

static void worker_turn(void);
static void worker_wake(void);
static void guard_run(int g);

/* The worker's boot clock, in milliseconds, at t: it has run a while. */
usec		worker_clock_off;

int64_t
worker_ms_at(usec t)
{
	return (t + worker_clock_off) / MS;
}

int64_t
worker_ms(void)
{
	return worker_ms_at(now);
}

int
worker_conn_server(void)
{
	return cur >= 0 && state == CS_CONNECTED ? conns[cur].server : -1;
}

int
worker_conn_stream(bool up)
{
	if (cur < 0)
		return -1;
	return up ? conns[cur].up : conns[cur].down;
}

/* worker_requests.c's publish_proof: raise proven_until, set provable. */
static void
publish(int64_t proven, int64_t provable_now)
{
	if (proven > proven_until)
	{
		proven_until = proven;
		TRACE("worker publishes: proven until %lld ms on its clock (%lld here)", (long long) proven,
			  (long long) ((proven * MS - worker_clock_off) / MS));
		check_published(proven_until, proven == connect_after + cfg.timeout_ms);
	}
	provable = provable_now;
}

static ProofOp
op_of(ReqKind kind)
{
	switch (kind)
	{
		case RK_SYNC:
			return PROOF_OP_SYNC;
		case RK_WRITE:
			return PROOF_OP_WRITE;
		default:
			return PROOF_OP_READ;
	}
}

/* ---- the C client ---- */

static void
sent_push(int req)
{
	if (sent_n == sent_cap)
	{
		int			cap = sent_cap ? sent_cap * 2 : 64;
		int		   *v = malloc(sizeof(int) * cap);

		if (v == NULL)
			abort();
		for (int i = 0; i < sent_n; i++)
			v[i] = sent[(sent_head + i) % sent_cap];
		free(sent);
		sent = v;
		sent_head = 0;
		sent_cap = cap;
	}
	sent[(sent_head + sent_n++) % sent_cap] = req;
}

static int
sent_pop(void)
{
	int			req = sent[sent_head];

	sent_head = (sent_head + 1) % sent_cap;
	sent_n--;
	return req;
}

static int
send_request(ReqKind kind, WriteKind wkind, ReqOwner owner, int guard)
{
	Req		   *r;

	if (state != CS_CONNECTED)
		return -1;
	if (nreqs == reqs_cap)
	{
		reqs_cap = reqs_cap ? reqs_cap * 2 : 1024;
		reqs = realloc(reqs, sizeof(Req) * reqs_cap);
		if (reqs == NULL)
			abort();
	}
	r = &reqs[nreqs];
	*r = (Req)
	{
		.kind = kind,.wkind = wkind,.owner = owner,.guard = guard,.conn = cur,
			.sent = now,.rc = 0
	};
	if (kind == RK_PING)
		pings_out++;
	else
		sent_push(nreqs);
	stream_send(conns[cur].up, CP_REQUEST, nreqs, 0);
	last_send = now;
	if (kind != RK_PING)
		TRACE("worker sends %s%s", kind == RK_WRITE && wkind == WK_PROBE ? "the guard's set at version -2, " : "",
			  (const char *[]) {"read", "sync", "write", "ping"}[kind]);
	return nreqs++;
}

/*
 * zookeeper_interest's timers: a drop once 2T/3 passed without a whole
 * message, a PING once T/3 passed without a send (only with nothing
 * outstanding; either way it looks again T/3 later).
 */
static void
arm_client_timer(usec ping_at)
{
	usec		t = last_recv + (usec) cfg.timeout_ms * 2 / 3 * MS;

	if (state == CS_CONNECTED && ping_at < t)
		t = ping_at;
	ev_at(t <= now ? now + 1 : t, EV_CLIENT_TIMER, cur, 0);
}

static void
wake_guards(void)
{
	for (int g = 0; g < nguards; g++)
		if (guards[g].active)
			guard_run(g);
}

static void
complete(int req, int rc)
{
	Req		   *r = &reqs[req];

	r->done = true;
	r->rc = rc;
	if (rc != ZCONNECTIONLOSS)
		TRACE("worker reads the answer to %s #%d: %s", (const char *[]) {"read", "sync", "write", "ping"}[r->kind],
			  req, rc_name(rc));
	publish(proof_answered(worker_ms_at(r->sent), op_of(r->kind), rc, worker_ms()),
			proof_provable());
	if (r->owner == RO_CHAIN && r->kind == RK_SYNC)
		proof_sync_settled();
	/* a backend goes on with its next request at once */
	if (r->owner == RO_BACKEND && rc != ZCONNECTIONLOSS && rng_chance(cfg.follow_p))
		ev_at(now + step_delay(5, 80), EV_BACKEND, 0, 1);
	/* last: it may send, and so move reqs */
	if (r->owner == RO_GUARD)
		guard_run(r->guard);
}

static void
connect_next(void)
{
	Conn	   *c;

	if (state == CS_EXPIRED)
		return;
	if (nconns == conns_cap)
	{
		conns_cap = conns_cap ? conns_cap * 2 : 16;
		conns = realloc(conns, sizeof(Conn) * conns_cap);
		if (conns == NULL)
			abort();
	}
	cur = nconns++;
	c = &conns[cur];
	c->server = cfg.scripted && cur == 0 ? cfg.first_server : (int) rng_between(0, NSERV - 1);
	c->up = stream_open(SK_CUP, cur, c->server, 0);
	c->down = stream_open(SK_CDOWN, cur, c->server, 0);
	c->connect_sent = now;
	state = CS_CONNECTING;
	last_recv = last_send = now;
	TRACE("worker connects to S%d (connection %d)", c->server, cur);
	stream_send(c->up, CP_CONNECT, cur, c->down);
	arm_client_timer(NEVER);
}

/* The connection is gone: everything outstanding is lost with it. */
void
worker_drop_connection(const char *why)
{
	if (cur < 0)
		return;
	TRACE("worker's client drops connection %d: %s", cur, why);
	stream_send(conns[cur].up, PK_CLOSE, 0, 0);
	stream_close(conns[cur].down);
	cur = -1;
	/*
	 * The client answers what is outstanding before its watcher hears of
	 * the state; a guard woken by its write's ZCONNECTIONLOSS here sees the
	 * session not connected (in zklock it may see it connected still, and
	 * its set then waits in the client for the next connection).
	 */
	if (state == CS_CONNECTED)
	{
		state = CS_CONNECTING;
		disconnected_at = now;
	}
	while (sent_n > 0)
		complete(sent_pop(), ZCONNECTIONLOSS);
	pings_out = 0;
	proof_connection(0, 0);
	publish(0, proof_provable());
	ev_at(now + rng_between(0, 50 * MS), EV_RECONNECT, 0, 0);
	wake_guards();
}

void
worker_deliver(int conn, Packet *p)
{
	if (conn != cur)
		return;
	last_recv = now;
	switch (p->type)
	{
		case CP_CONNECTED:
			if (p->x)
			{
				int64_t		after = worker_ms_at(conns[cur].connect_sent);

				/* any time before the connect was sent will do */
				if (rng_chance(cfg.weak_connect_p) && ever_connected)
					after = rng_between(worker_ms_at(disconnected_at), after);
				state = CS_CONNECTED;
				ever_connected = true;
				TRACE("worker's client is connected to S%d; proof_connection(%lld)",
					  conns[cur].server, (long long) after);
				connect_after = after;
				proof_connection(after, cfg.timeout_ms);
				publish(0, proof_provable());
				arm_client_timer(last_send + (usec) cfg.timeout_ms / 3 * MS);
				worker_wake();
				wake_guards();
			}
			else
			{
				TRACE("worker's session has EXPIRED");
				state = CS_EXPIRED;
				stream_close(conns[cur].down);
				cur = -1;
				wake_guards();
			}
			break;
		case CP_REPLY:
			if (reqs[p->x].kind == RK_PING)
			{
				pings_out--;
				break;
			}
			if (sent_n == 0 || sent[sent_head] != p->x)
			{
				worker_drop_connection("an answer out of order (ZRUNTIMEINCONSISTENCY)");
				break;
			}
			sent_pop();
			complete((int) p->x, (int) p->y);
			worker_wake();
			break;
		case PK_CLOSE:
			worker_drop_connection("the server closed it");
			break;
		default:
			abort();
	}
}

static void
client_timer(int conn)
{
	usec		third = (usec) cfg.timeout_ms / 3 * MS;
	usec		ping_at = last_send + third;

	if (conn != cur)
		return;
	if (now - last_recv >= (usec) cfg.timeout_ms * 2 / 3 * MS)
	{
		worker_drop_connection("nothing received for 2T/3");
		return;
	}
	if (state == CS_CONNECTED && now >= ping_at)
	{
		if (sent_n == 0 && pings_out == 0)
			send_request(RK_PING, WK_NORMAL, RO_PING, -1);
		ping_at = now + third;
	}
	arm_client_timer(ping_at);
}

/* ---- the worker's own sends ---- */

static void
worker_turn(void)
{
	long		wait;
	usec		at;

	if (state != CS_CONNECTED)
		return;
#ifdef SIM_HEARTBEAT_READS
	/* 1.6: an exists of / once the connection carried nothing for T/6 */
	wait = (long) (worker_ms_at(last_send) + cfg.timeout_ms / 6 - worker_ms());
	if (wait <= 0)
	{
		send_request(RK_READ, WK_NORMAL, RO_HEARTBEAT, -1);
		wait = cfg.timeout_ms / 6;
	}
#else
	{
		ProofSend	what = proof_next_send(worker_ms(), &wait);

		if (what != PROOF_SEND_NONE && wait == 0)
		{
			proof_sent(what, worker_ms());
			send_request(what == PROOF_SEND_SYNC ? RK_SYNC : RK_READ, WK_NORMAL, RO_CHAIN, -1);
			what = proof_next_send(worker_ms(), &wait);
		}
		if (what == PROOF_SEND_NONE)
			wait = -1;
	}
#endif
	if (wait <= 0)
		return;
	at = (worker_ms() + wait) * MS - worker_clock_off;
	if (worker_next_at <= now || at < worker_next_at)
	{
		worker_next_at = at;
		ev_at(at, EV_WORKER, 0, 0);
	}
}

/*
 * Its latch was set (a reply, a state change): the worker's loop comes
 * round again, sends what backends queued meanwhile, then its chain's sync
 * if one is due (zklock_worker_main).
 */
static void
worker_wake(void)
{
	usec		at = now + step_delay(5, 100);

	if (worker_next_at <= now || at < worker_next_at)
	{
		worker_next_at = at;
		ev_at(at, EV_WORKER, 0, 0);
	}
}

/* ---- COMMITs: zk_session_confirm ---- */

static void
guard_finish(int g, bool passed, const char *why)
{
	guards[g].active = false;
	guards[g].gen++;
	TRACE("guard %d %s after %lld ms%s%s", g, passed ? "PASSES" : "gives up",
		  (long long) ((now - guards[g].started) / MS), why ? ": " : "", why ? why : "");
	note_guard(passed, now - guards[g].started, why);
}

static void
guard_run(int g)
{
	Guard	   *gd = &guards[g];

	while (gd->active)
	{
		long		wait_ms = 0;
		ProofGuardStep step;

		if (gd->check >= 0 && reqs[gd->check].done)
		{
			int			rc = reqs[gd->check].rc;

			gd->check = -1;
			if (rc != ZBADVERSION && rc != ZCONNECTIONLOSS &&
				rc != ZOPERATIONTIMEOUT && rc != ZRUNTIMEINCONSISTENCY)
			{
				guard_finish(g, false, "its write was refused");
				return;
			}
		}
		step = proof_guard_step(&gd->pg, worker_ms(), state == CS_CONNECTED,
								state == CS_EXPIRED, gd->check >= 0,
								proven_until, provable, &wait_ms);
		switch (step)
		{
			case PROOF_GUARD_PASS:
				guard_finish(g, true, NULL);
				return;
			case PROOF_GUARD_GIVE_UP:
				guard_finish(g, false, state == CS_EXPIRED ? "the session is gone" : "no proof in time");
				return;
			case PROOF_GUARD_ASK:
				gd->check = send_request(RK_WRITE, WK_PROBE, RO_GUARD, g);
				if (gd->check < 0)
				{
					guard_finish(g, false, "asked while not connected");
					return;
				}
				break;
			case PROOF_GUARD_WAIT:
				gd->gen++;
				ev_at(now + (usec) wait_ms * MS, EV_GUARD_WAKE, g, gd->gen);
				return;
		}
	}
}

static void
guard_start(void)
{
	Guard	   *gd;

	if (state == CS_EXPIRED || !ever_connected)
		return;
	if (nguards == guards_cap)
	{
		guards_cap = guards_cap ? guards_cap * 2 : 64;
		guards = realloc(guards, sizeof(Guard) * guards_cap);
		if (guards == NULL)
			abort();
	}
	gd = &guards[nguards];
	gd->active = true;
	gd->gen = 0;
	gd->check = -1;
	gd->started = now;
	proof_guard_begin(&gd->pg, worker_ms(), cfg.timeout_ms);
	TRACE("guard %d begins (a COMMIT)", nguards);
	guard_run(nguards++);
}

/* The number of guards still waiting, started before `before`. */
int
worker_guards_waiting(usec before)
{
	int			n = 0;

	for (int g = 0; g < nguards; g++)
		if (guards[g].active && guards[g].started < before)
			n++;
	return n;
}

/* ---- entry points ---- */

static usec
poisson(double rate)
{
	return rng_between(1, (usec) (2e6 / rate));
}

void
worker_event(EvKind kind, int a, int64_t b)
{
	switch (kind)
	{
		case EV_WORKER:
			worker_turn();
			break;
		case EV_CLIENT_TIMER:
			client_timer(a);
			break;
		case EV_RECONNECT:
			if (cur < 0)
				connect_next();
			break;
		case EV_BACKEND:
			if (a != 0)
			{
				/* scripted: 1 a read, 2 a write, 4 a write its ACL refuses */
				send_request(a == 1 ? RK_READ : RK_WRITE, a == 4 ? WK_ACL_DENIED : WK_NORMAL,
							 RO_BACKEND, -1);
				break;
			}
			if (state == CS_CONNECTED)
			{
				double		total = cfg.read_rate + cfg.write_rate;

				if (rng_chance(cfg.read_rate / total))
					send_request(RK_READ, WK_NORMAL, RO_BACKEND, -1);
				else
					send_request(RK_WRITE, rng_chance(cfg.acl_write_p) ? WK_ACL_DENIED : WK_NORMAL,
								 RO_BACKEND, -1);
			}
			if (b == 0)			/* 1: a backend's follow-up */
				ev_at(now + poisson(cfg.read_rate + cfg.write_rate), EV_BACKEND, 0, 0);
			break;
		case EV_GUARD_START:
			guard_start();
			if (a == 0)			/* 1: scripted, once */
				ev_at(now + poisson(cfg.guard_rate), EV_GUARD_START, 0, 0);
			break;
		case EV_GUARD_WAKE:
			if (guards[a].active && guards[a].gen == b)
				guard_run(a);
			break;
		default:
			abort();
	}
}

void
worker_reset(void)
{
	nreqs = 0;
	nconns = 0;
	worker_clock_off = cfg.scripted ? 1000000 * MS :
		rng_between(1000000, 2000000) * MS + rng_between(0, MS - 1);
	cur = -1;
	state = CS_CONNECTING;
	ever_connected = false;
	sent_head = sent_n = 0;
	pings_out = 0;
	disconnected_at = 0;
	worker_next_at = 0;
	proven_until = 0;
	provable = 0;
	nguards = 0;
	/* the real code's reset: no connection, no chain sync in flight */
	proof_connection(-1, 0);
	proof_sync_settled();
}

void
worker_start(void)
{
	connect_next();
	if (cfg.read_rate + cfg.write_rate > 0)
		ev_at(poisson(cfg.read_rate + cfg.write_rate), EV_BACKEND, 0, 0);
	if (cfg.guard_rate > 0)
		ev_at(poisson(cfg.guard_rate), EV_GUARD_START, 0, 0);
}
