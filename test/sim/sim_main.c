/*
 * sim_main.c
 *	  The proof simulation's adversary, checks and driver.  Each schedule
 *	  is drawn from its seed: the ensemble's settings, link delays, load,
 *	  the backends' rates, and in most schedules faults (holds of one
 *	  direction of a quorum or client link released in one or two parts,
 *	  lags, cuts, crashes, the leader's isolation, pauses of its ping loop
 *	  within the stated bound, delays that open the touch table's race),
 *	  timed or set off by what the model does (right after the worker's
 *	  server reported the session's touch, forwarded a write, ...).
 *
 *	  Safety: no closeSession of the session is committed whose leader
 *	  expired the session before a time the worker published as proven
 *	  (checked when it is committed and at each later publication).
 *	  Liveness, in schedules without faults: every COMMIT's guard passes,
 *	  within GUARD_BOUND.
 *
 *	  zksim [--schedules N] [--seed S] [--jobs J] [--expect-unsafe]
 *			[--max-lost-touches K] [--trace]
 *	  Schedule i runs with seed S + i.  --trace prints each schedule's
 *	  events (use it with --schedules 1 to replay one).  An unsafe
 *	  schedule is replayed with its trace; --expect-unsafe (mutants) stops
 *	  at the first and fails if there is none.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sim.h"
#include "worker_proof.h"

#ifndef SIM_VARIANT
#define SIM_VARIANT "policy"
#endif

/*
 * The stated assumption on the leader's ping loop: it queues a PING to
 * every follower at least once in every window of PROOF_PING_BOUND, less
 * the millisecond the worker's clock may hide.  SIM_PING_PAUSES (a mutant
 * of the model) lets the leader pause for up to T.
 */
#ifdef SIM_PING_PAUSES
#define MODEL_PING_WINDOW(t) ((usec) (t) * MS)
#else
#define MODEL_PING_WINDOW(t) ((usec) PROOF_PING_BOUND(t) * MS - MS)
#endif

/*
 * Liveness: without faults, a COMMIT's guard passes within two round
 * trips of a write (its own, and one more if the first proved too little)
 * plus PROOF_SYNC_PERIOD (the chain moving on) and T/50 (its next look);
 * rtt is the slowest write round trip the schedule's links allow.
 */
#define GUARD_BOUND(t, rtt) ((usec) PROOF_SYNC_PERIOD(t) * MS + (usec) (t) / 50 * MS + 2 * (rtt))

Config		cfg;
bool		schedule_over;
static bool only_racy = false;	/* --racy: only the race's schedules */

/* ---- the checks ---- */

static bool close_committed;
static usec close_decided;
static int	close_leader;
static int64_t proven_max;
static bool unsafe;
static bool live_failed;
static char failure[512];
static usec guard_bound;
static double schedule_margin;
static usec worst_rtt;

typedef struct Stats
{
	long		schedules;
	long		faulty;
	long		unsafe;
	long		live_failed;
	long		guards_passed;
	long		guards_gave_up;
	long		ff_guards;
	usec		ff_wait_max;
	double		ff_wait_max_t;	/* in parts of T */
	double		ff_wait_max_bound;	/* in parts of the bound */
	double		min_margin_t;	/* the closest publication to a deadline, in T */
	uint64_t	min_margin_seed;
	uint64_t	first_unsafe;
	uint64_t	first_live;
	char		unsafe_msg[512];
	char		live_msg[512];
} Stats;

static Stats st;

void
sim_fail(const char *fmt,...)
{
	va_list		ap;

	if (failure[0] == '\0')
	{
		va_start(ap, fmt);
		vsnprintf(failure, sizeof(failure), fmt, ap);
		va_end(ap);
		TRACE("CHECK FAILED: %s", failure);
	}
	schedule_over = true;
}

static void
unsafe_if(void)
{
	/* proven_max is on the worker's clock */
	if (close_committed && close_decided + worker_clock_off < proven_max * MS)
	{
		usec		proven = proven_max * MS - worker_clock_off;

		unsafe = true;
		sim_fail("UNSAFE: S%d expired the session at %lld.%03lld ms, before %lld.%03lld ms, which the worker published as proven",
				 close_leader, (long long) (close_decided / MS), (long long) (close_decided % MS),
				 (long long) (proven / MS), (long long) (proven % MS));
	}
}

void
check_close_committed(usec decided, int leader_server)
{
	close_committed = true;
	close_decided = decided;
	close_leader = leader_server;
	unsafe_if();
}

void
check_published(int64_t proven_until, bool by_connect)
{
	usec		due = zk_expiry_due();

	if (proven_until > proven_max)
		proven_max = proven_until;
	unsafe_if();
	/* how close a proof from replies came: the leader's deadline now, less it */
	if (due != NEVER && !by_connect)
	{
		double		margin = (double) (due + worker_clock_off - proven_until * MS) /
			((double) cfg.timeout_ms * MS);

		if (margin < schedule_margin)
			schedule_margin = margin;
	}
}

void
note_guard(bool passed, usec took, const char *why)
{
	if (passed)
		st.guards_passed++;
	else
		st.guards_gave_up++;
	if (cfg.faulty)
		return;
	st.ff_guards++;
	if (took > st.ff_wait_max)
		st.ff_wait_max = took;
	if ((double) took / ((double) cfg.timeout_ms * MS) > st.ff_wait_max_t)
		st.ff_wait_max_t = (double) took / ((double) cfg.timeout_ms * MS);
	if ((double) took / (double) guard_bound > st.ff_wait_max_bound)
		st.ff_wait_max_bound = (double) took / (double) guard_bound;
	if (!passed)
	{
		live_failed = true;
		sim_fail("LIVENESS: without faults, a guard gave up after %lld ms (%s)",
				 (long long) (took / MS), why);
	}
	else if (took > guard_bound)
	{
		live_failed = true;
		sim_fail("LIVENESS: without faults, a guard took %lld.%03lld ms, more than its bound %lld.%03lld ms",
				 (long long) (took / MS), (long long) (took % MS),
				 (long long) (guard_bound / MS), (long long) (guard_bound % MS));
	}
}

/* ---- the adversary ---- */

typedef enum PlanKind
{
	PL_HOLD,					/* hold one direction of a link */
	PL_LAG,						/* slow one direction of a link */
	PL_CUT,						/* the worker's connection is reset */
	PL_CRASH,					/* a server crashes, restarts later */
	PL_ISOLATE,					/* the leader is cut off, then back */
	PL_LOAD						/* a burst of other clients' writes */
} PlanKind;

typedef enum Target
{
	TG_QDOWN,					/* leader -> the worker's server */
	TG_QUP,						/* the worker's server -> leader */
	TG_CDOWN,					/* the worker's server -> worker */
	TG_CUP,						/* worker -> its server */
	TG_OTHER,					/* leader -> another follower */
	TG_LEADER,					/* PL_CRASH: the leader */
	TG_SERVER					/* PL_CRASH: the worker's server */
} Target;

static const char *const plan_names[] = {"hold", "lag", "cut", "crash", "isolate", "load"};
static const char *const target_names[] = {
	"leader->worker's server", "worker's server->leader", "worker's server->worker",
	"worker->its server", "leader->other follower", "the leader", "the worker's server"
};
static const char *const hook_names[] = {
	"the worker's server reports the touch", "it forwards a write", "it forwards a sync",
	"it answers a sync", "the leader commits the worker's write", "the leader expires the session"
};

typedef struct Plan
{
	PlanKind	kind;
	Target		target;
	usec		at;				/* when it fires, or is armed (hook >= 0) */
	int			hook;			/* -1: timed */
	double		fire_p;			/* the chance each such event sets it off */
	bool		until_expiry;	/* hold: released d1/mark/d2 after the expiry */
	int			stream;			/* hold: the stream it holds */
	bool		armed;
	bool		fired;
	usec		d1;				/* hold: the first part's release after */
	usec		d2;				/* its duration (hold, lag, down time) */
	usec		mark;			/* hold: the first part is what was sent in its first mark */
	usec		lo;				/* lag */
	usec		hi;
} Plan;

#define MAX_PLANS 8
static Plan plans[MAX_PLANS];
static int	nplans;

static usec
duration(void)
{
	usec		t = (usec) cfg.timeout_ms * MS;
	usec		sl = (usec) cfg.tick_ms * cfg.sync_limit * MS;

	switch (rng_between(0, 4))
	{
		case 0:
			return rng_between(MS, t / 10);
		case 1:
			return rng_between(t / 10, t);
		case 2:
			return rng_between(t, (sl > t ? sl : t) + t / 2);
		case 3:
			return rng_between(t / 2, 3 * t);
		default:
			return rng_between(MS, 3 * t);
	}
}

static int
stream_of(Target target)
{
	int			sid = worker_conn_server();

	switch (target)
	{
		case TG_QDOWN:
			return zk_worker_server_link(sid, false);
		case TG_QUP:
			return zk_worker_server_link(sid, true);
		case TG_CDOWN:
			return worker_conn_stream(false);
		case TG_CUP:
			return worker_conn_stream(true);
		case TG_OTHER:
			for (int i = 0; i < NSERV; i++)
				if (i != sid && zk_worker_server_link(i, false) >= 0)
					return zk_worker_server_link(i, false);
			return -1;
		default:
			return -1;
	}
}

static void
plan_fire(Plan *p)
{
	int			s;

	p->fired = true;
	switch (p->kind)
	{
		case PL_HOLD:
			s = stream_of(p->target);
			p->stream = s;
			if (stream_open_p(s))
				stream_hold(s, now + p->d1, now + p->mark, now + p->d2);
			break;
		case PL_LAG:
			s = stream_of(p->target);
			if (stream_open_p(s))
				stream_lag(s, now + p->d2, p->lo, p->hi);
			break;
		case PL_CUT:
			if (worker_conn_stream(true) >= 0)
			{
				TRACE("adversary: resets the worker's connection");
				worker_drop_connection("reset by the adversary");
			}
			break;
		case PL_CRASH:
			{
				int			sid = p->target == TG_LEADER ? zk_leader_server() : worker_conn_server();

				if (sid >= 0)
					zk_crash(sid, p->d2);
			}
			break;
		case PL_ISOLATE:
			zk_isolate_leader(now + p->d1, now + p->d2);
			break;
		case PL_LOAD:
			zk_load_burst(now + p->d2, (double) p->lo);
			break;
	}
}

void
adversary_hook(Hook hook, int server)
{
	for (int i = 0; i < nplans; i++)
	{
		Plan	   *p = &plans[i];

		/* the relay lets go once the leader has expired the session */
		if (hook == HK_EXPIRE && p->kind == PL_HOLD && p->until_expiry && p->fired &&
			stream_open_p(p->stream))
		{
			usec		gap = p->d1 % ((usec) cfg.timeout_ms * MS / 10 + 1);

			stream_release(p->stream, now + gap, now + gap / 2, now + 2 * gap);
		}

		if (p->armed && !p->fired && p->hook == (int) hook &&
			(server < 0 || server == worker_conn_server()) && rng_chance(p->fire_p))
		{
			TRACE("adversary: plan %d set off (%s)", i, hook_names[hook]);
			plan_fire(p);
		}
	}
}

static void
draw_plans(void)
{
	usec		t = (usec) cfg.timeout_ms * MS;

	int			first = 0;

	nplans = cfg.faulty ? (int) rng_between(1, 4) : 0;
	if (cfg.racy)
	{
		/*
		 * After the touch table's race: answers read late (so that a send
		 * answered before was heard well before its answer was read), and
		 * the server's way to the leader held once it forwards a write.
		 */
		memset(plans, 0, sizeof(plans[0]) * 2);
		plans[0].kind = PL_LAG;
		plans[0].target = TG_CDOWN;
		plans[0].hook = -1;
		plans[0].at = rng_between(0, t);
		plans[0].d2 = cfg.horizon;
		plans[0].lo = rng_between(0, t / 40);
		plans[0].hi = plans[0].lo + rng_between(0, t / 20);
		plans[1].kind = PL_HOLD;
		plans[1].target = TG_QUP;
		plans[1].hook = HK_FORWARD_WRITE;
		plans[1].fire_p = 0.1;
		plans[1].at = rng_between(t, cfg.horizon - t);
		plans[1].d1 = plans[1].d2 = rng_between(t / 2, 2 * t);
		for (int i = 0; i < 2; i++)
			ev_at(plans[i].at, EV_FAULT, i, 0);
		first = 2;
		nplans = (int) rng_between(2, 4);
	}
	for (int i = first; i < nplans; i++)
	{
		Plan	   *p = &plans[i];

		memset(p, 0, sizeof(*p));
		p->kind = (PlanKind) rng_between(0, 9);
		if (p->kind > PL_LOAD)
			p->kind = PL_HOLD;	/* holds are most of it */
		p->at = rng_between(0, cfg.horizon - t);
		p->hook = rng_chance(0.6) ? (int) rng_between(0, HK_COUNT - 1) : -1;
		p->fire_p = rng_chance(0.5) ? 1 : 0.1;
		p->d2 = duration();
		p->d1 = rng_chance(0.5) ? p->d2 : rng_between(p->d2 / 4, p->d2);
		p->mark = rng_chance(0.5) ? 0 : rng_between(0, p->d1);
		switch (p->kind)
		{
			case PL_HOLD:
				p->target = (Target) rng_between(TG_QDOWN, TG_OTHER);
				if (rng_chance(0.4))
					p->target = rng_chance(0.5) ? TG_QDOWN : TG_QUP;
				p->until_expiry = rng_chance(0.3);
				break;
			case PL_LAG:
				p->target = (Target) rng_between(TG_QDOWN, TG_OTHER);
				p->lo = rng_chance(0.5) ? rng_between(0, t / 10) : rng_between(t / 2, t);
				p->hi = p->lo + rng_between(0, t);
				break;
			case PL_CRASH:
				p->target = rng_chance(0.5) ? TG_LEADER : TG_SERVER;
				p->d2 = rng_between(10 * MS, 2 * t);
				break;
			case PL_LOAD:
				p->lo = rng_between(50, 500);
				p->d2 = rng_between(MS, t / 2);
				break;
			default:
				break;
		}
		ev_at(p->at, EV_FAULT, i, 0);
	}
}

static double
pick(const double *v, int n)
{
	return v[rng_between(0, n - 1)];
}

static void
draw_config(void)
{
	static const int timeouts[] = {2000, 4000, 6000, 10000, 20000};
	static const double pause_p[] = {0, 0.05, 0.3};
	static const double preempt_p[] = {0, 0.05, 0.3};
	static const double lose_p[] = {0, 0.5, 1};
	static const double load[] = {0, 1, 5};
	static const double reads[] = {0, 1, 5};
	static const double writes[] = {0, 0.5, 2};
	static const double guard_rates[] = {0.5, 2, 5};
	int			t;

	t = rng_chance(0.5) ? timeouts[rng_between(0, 4)] : (int) rng_between(2000, 20000);
	cfg.timeout_ms = t;
	/* minSessionTimeout 2 x tickTime .. maxSessionTimeout 20 x tickTime */
	cfg.tick_ms = (int) rng_between(t / 20, t / 2) & ~1;
	cfg.sync_limit = (int) rng_between(1, 10);
	cfg.horizon = (usec) t * MS * rng_between(3, 4);
	for (int k = 0; k < 4; k++)
		cfg.link_base[k] = rng_between(50, 3 * MS);
	cfg.max_ping_gap = MODEL_PING_WINDOW(t);
	cfg.faulty = only_racy || !rng_chance(0.25);
	/* a fifth of the faulty ones are after the touch table's race */
	cfg.racy = cfg.faulty && (only_racy || rng_chance(0.25));
	cfg.ping_pause_p = cfg.faulty ? pick(pause_p, 3) : 0;
	cfg.preempt_p = cfg.racy ? 0.5 : cfg.faulty ? pick(preempt_p, 3) : 0;
	cfg.preempt_max = rng_between(100, cfg.racy ? 20 * MS : 5 * MS);
	cfg.lose_touch_p = cfg.racy ? 1 : cfg.faulty ? pick(lose_p, 3) : 0;
	if (cfg.racy)
	{
		cfg.tick_ms = (int) rng_between(t / 20, t / 10) & ~1;
		cfg.ping_pause_p = 0.3;
	}
	cfg.prep_pause_p = cfg.faulty && rng_chance(0.3) ? 0.01 : 0;
	cfg.throttle_p = cfg.faulty && rng_chance(0.3) ? 0.05 : 0;
	cfg.throttle_max = rng_between(MS, (usec) t * MS / 10);
	cfg.load_rate = pick(load, 4);
	cfg.read_rate = pick(reads, 3);
	cfg.write_rate = pick(writes, 3);
	cfg.acl_write_p = cfg.faulty && rng_chance(0.3) ? 0.5 : 0;
	cfg.follow_p = rng_chance(0.5) ? 0.3 : 0;
	cfg.eager_acl = rng_chance(0.5);
	cfg.guard_rate = pick(guard_rates, 3);
	if (cfg.racy)
	{
		cfg.read_rate = reads[2];
		cfg.write_rate = writes[2];
		cfg.guard_rate = guard_rates[2];
	}
	cfg.weak_connect_p = cfg.faulty ? 0.3 : 0;
	/* the slowest round trip through the worker's server and the leader */
	worst_rtt = 0;
	for (int k = 0; k < 4; k++)
		worst_rtt += cfg.link_base[k] * 3 / 2 + 20;
	worst_rtt += 40 * MS;		/* log writes, prep, the other follower's ACK */
	guard_bound = GUARD_BOUND(t, worst_rtt);
}

static void
print_config(uint64_t seed)
{
	printf("schedule %llu (%s): T %d ms, tickTime %d ms, syncLimit %d, %s, horizon %lld ms\n",
		   (unsigned long long) seed, SIM_VARIANT, cfg.timeout_ms, cfg.tick_ms, cfg.sync_limit,
		   cfg.faulty ? "faulty" : "no faults", (long long) (cfg.horizon / MS));
	printf("  links (mean one-way, us): leader->follower %lld, follower->leader %lld, worker->server %lld, server->worker %lld\n",
		   (long long) cfg.link_base[SK_QDOWN], (long long) cfg.link_base[SK_QUP],
		   (long long) cfg.link_base[SK_CUP], (long long) cfg.link_base[SK_CDOWN]);
	printf("  ping passes at most %lld ms apart (paused with p %.2f); touch put delayed with p %.2f (up to %lld us), a racing PING loses it with p %.2f (at most %d)\n",
		   (long long) (cfg.max_ping_gap / MS), cfg.ping_pause_p, cfg.preempt_p,
		   (long long) cfg.preempt_max, cfg.lose_touch_p, cfg.max_lost_touches);
	printf("  load %.0f/s; backends: reads %.0f/s, writes %.0f/s (ACL-refused %.0f%%, eager ACL check %s); COMMITs %.0f/s\n",
		   cfg.load_rate, cfg.read_rate, cfg.write_rate, cfg.acl_write_p * 100,
		   cfg.eager_acl ? "on" : "off", cfg.guard_rate);
	for (int i = 0; i < nplans; i++)
	{
		Plan	   *p = &plans[i];

		printf("  plan %d: %s", i, plan_names[p->kind]);
		if (p->kind == PL_HOLD || p->kind == PL_LAG || p->kind == PL_CRASH)
			printf(" %s", target_names[p->target]);
		if (p->hook >= 0)
			printf(", when %s after %lld ms", hook_names[p->hook], (long long) (p->at / MS));
		else
			printf(" at %lld ms", (long long) (p->at / MS));
		if (p->kind == PL_HOLD || p->kind == PL_ISOLATE)
			printf(", for %lld ms (what was sent before and in its first %lld ms released after %lld ms)%s",
				   (long long) (p->d2 / MS), (long long) (p->mark / MS), (long long) (p->d1 / MS),
				   p->until_expiry ? ", or soon after the leader expires the session" : "");
		else if (p->kind == PL_LAG)
			printf(", for %lld ms by %lld..%lld ms", (long long) (p->d2 / MS),
				   (long long) (p->lo / MS), (long long) (p->hi / MS));
		else if (p->kind == PL_CRASH || p->kind == PL_LOAD)
			printf(", for %lld ms", (long long) (p->d2 / MS));
		printf("\n");
	}
}

/* ---- scripted scenarios ---- */

typedef enum StepKind
{
	ST_READ = 1,				/* a backend's read */
	ST_WRITE = 2,				/* a backend's write */
	ST_GUARD = 3,				/* a COMMIT */
	ST_WRITE_ACL = 4			/* a backend's write its ACL refuses */
} StepKind;

typedef struct Step
{
	usec		at;
	StepKind	kind;
} Step;

typedef struct Scenario
{
	const char *name;
	const char *about;
	int			timeout_ms;
	int			tick_ms;
	int			sync_limit;
	usec		horizon;
	usec		links[4];
	usec		leader_clock_off;
	usec		quiet_from;
	usec		quiet_until;
	usec		lose_touch_from;
	bool		eager_acl;
	usec		close_delay;
	Plan		plans[4];
	Step		steps[8];
} Scenario;

#define MSF(x) ((usec) ((x) * MS))

static const Scenario scenarios[] = {
	{
		/*
		 * Issue 47's table, first row: tickTime 1000, syncLimit 10, T 6
		 * s.  From the moment S1's PING reply reports the session's touch
		 * (10000.5, heard at 10001: S0's deadline 16002), S0->S1 is held;
		 * S1 answers the worker's reads by itself; the COMMIT's set goes
		 * at 15700 (deadline - 0.3 s), S0 commits it with S2; what S0
		 * sent before 15902 (its PINGs, the set's PROPOSAL and COMMIT) is
		 * released at 16602, the rest at 17600.  1.6's rule takes the
		 * latest read answered 0.3 T before the set as heard.
		 */
		"issue47", "issue 47's stall, released in two parts",
		6000, 1000, 10, MSF(20000), {500, 500, 300, 300}, MSF(998),
		NEVER, NEVER, NEVER, false, 0,
		{
			{.kind = PL_HOLD,.target = TG_QDOWN,.hook = HK_PING_REPLY_TOUCH,.fire_p = 1,
			.at = MSF(9999),.d1 = MSF(16602 - 10000.5),.mark = MSF(15902 - 10000.5),
			.d2 = MSF(17600 - 10000.5)},
		},
		{{MSF(13000.2), ST_READ}, {MSF(15700), ST_GUARD}},
	},
	{
		/*
		 * A send answered before the lost touch's send was heard by the
		 * leader long before its answer was read.  T 10 s, tickTime 500
		 * ms: the leader S0 pings every 250 ms; the worker is on S1.  The
		 * chain's sync C goes at 5500 and is heard at 5501 (its deadline
		 * 15502); the read B sent at 5100 is answered at once but read
		 * only at 5749 (S1->worker held, released in two parts); the read
		 * R sent at 5750.1 loses its touch to the PING S1 reads at 5750.5;
		 * C's and R's answers are read at 6000, when the next chain sync
		 * C' is held on its way to S1 until 9900, after the last PING
		 * (9750) before the leader's pause to 10500.  The chain's syncs
		 * at 9901 and 10401 are answered; the guard's set at 10403.5
		 * rests on X = 10401 >= R's answer + 0.4 T, touched = R, before =
		 * B: it publishes B's answer + T = 15749.  S1->S0 is held from
		 * that set's forwarding: nothing S1 heard since 5500 reaches S0,
		 * which expires the session at 15502.
		 */
		"race", "a send's answer read late, the next send's touch lost",
		10000, 500, 12, MSF(17000), {500, 500, 300, 300}, MSF(498),
		MSF(9750), MSF(10500), MSF(5750), false, 0,
		{
			{.kind = PL_HOLD,.target = TG_CDOWN,.hook = -1,.at = MSF(5100.1),
			.d1 = MSF(5749 - 5100.1),.mark = MSF(5200 - 5100.1),.d2 = MSF(6000 - 5100.1)},
			{.kind = PL_HOLD,.target = TG_CUP,.hook = -1,.at = MSF(5999.95),
			.d1 = MSF(9900 - 5999.95),.mark = 0,.d2 = MSF(9900 - 5999.95)},
			{.kind = PL_HOLD,.target = TG_QUP,.hook = HK_FORWARD_WRITE,.fire_p = 1,
			.at = MSF(10403),.d1 = 0,.mark = 1,.d2 = MSF(6000)},
		},
		{{MSF(5100), ST_READ}, {MSF(5750.1), ST_READ}, {MSF(10403.5), ST_GUARD}},
	},
	{
		/*
		 * A write answered ZSESSIONEXPIRED on an open connection: S0->S1
		 * held from 5001.5 to 9400 (the chain's sync of 5500 waits);
		 * reads B (5200) and R (5300) answered by S1 alone; a backend's
		 * write X at 9301, committed; S1->S0 held from X's forwarding to
		 * 15005.  At 9400 S1 reads the PINGs (its replies, with the
		 * touches of B and R, held), answers; a backend's write sent at
		 * 9401 rests on X, R, B.  S0 expires the session at 15002 (its
		 * last touch heard at 5001); its closeSession waits 50 ms in the
		 * request thread, so that write, read at 15005 right behind the
		 * late PING replies, is refused ZSESSIONEXPIRED before the
		 * connection closes.  Counting that answer publishes B + T.  (A
		 * guard would not ask here: the chain's sync of 5500 came too
		 * late to prove its margin.)
		 */
		"expired", "a write refused ZSESSIONEXPIRED behind late PING replies",
		10000, 500, 14, MSF(17000), {500, 500, 300, 300}, MSF(498),
		NEVER, NEVER, NEVER, false, MSF(50),
		{
			{.kind = PL_HOLD,.target = TG_QDOWN,.hook = -1,.at = MSF(5001.5),
			.d1 = MSF(9400 - 5001.5),.d2 = MSF(9400 - 5001.5)},
			{.kind = PL_HOLD,.target = TG_QUP,.hook = HK_FORWARD_WRITE,.fire_p = 1,
			.at = MSF(9301),.d1 = 0,.mark = 1,.d2 = MSF(15005 - 9301.303)},
		},
		{{MSF(5200), ST_READ}, {MSF(5300), ST_READ}, {MSF(9301), ST_WRITE}, {MSF(9401), ST_WRITE}},
	},
	{
		/*
		 * A write refused ZNOAUTH by S1's eager ACL check: as in
		 * "expired" up to 9400, then a backend's write that its ACL
		 * refuses, sent as the answers come in (before the chain's next
		 * sync), answered by S1 alone.  Counting it publishes B + T;
		 * S0, which heard nothing of B or R, expires the session at
		 * 15002.
		 */
		"noauth", "a write refused ZNOAUTH by the follower alone",
		10000, 500, 14, MSF(17000), {500, 500, 300, 300}, MSF(498),
		NEVER, NEVER, NEVER, true, 0,
		{
			{.kind = PL_HOLD,.target = TG_QDOWN,.hook = -1,.at = MSF(5001.5),
			.d1 = MSF(9400 - 5001.5),.d2 = MSF(9400 - 5001.5)},
			{.kind = PL_HOLD,.target = TG_QUP,.hook = HK_FORWARD_WRITE,.fire_p = 1,
			.at = MSF(9301),.d1 = 0,.mark = 1,.d2 = MSF(15100 - 9301.303)},
		},
		{{MSF(5200), ST_READ}, {MSF(5300), ST_READ}, {MSF(9301), ST_WRITE}, {MSF(9400.302), ST_WRITE_ACL}},
	},
};

#define NSCENARIOS ((int) (sizeof(scenarios) / sizeof(scenarios[0])))
static const Scenario *scenario;	/* running one; NULL: drawn schedules */

static void
script_config(void)
{
	const Scenario *sc = scenario;

	cfg.scripted = true;
	cfg.timeout_ms = sc->timeout_ms;
	cfg.tick_ms = sc->tick_ms;
	cfg.sync_limit = sc->sync_limit;
	cfg.horizon = sc->horizon;
	for (int k = 0; k < 4; k++)
		cfg.link_base[k] = sc->links[k];
	cfg.max_ping_gap = MODEL_PING_WINDOW(sc->timeout_ms);
	cfg.faulty = true;
	cfg.max_lost_touches = 1;
	cfg.first_leader = 0;
	cfg.first_server = 1;
	cfg.clock_off[0] = sc->leader_clock_off;
	cfg.quiet_from = sc->quiet_from;
	cfg.quiet_until = sc->quiet_until;
	cfg.lose_touch_from = sc->lose_touch_from;
	cfg.eager_acl = sc->eager_acl;
	cfg.close_delay = sc->close_delay;
	worst_rtt = 40 * MS;
	guard_bound = GUARD_BOUND(cfg.timeout_ms, worst_rtt);
	nplans = 0;
	for (int i = 0; i < 4 && sc->plans[i].d2 > 0; i++)
	{
		plans[nplans] = sc->plans[i];
		ev_at(plans[nplans].at, EV_FAULT, nplans, 0);
		nplans++;
	}
	for (int i = 0; i < 8 && sc->steps[i].at > 0; i++)
	{
		if (sc->steps[i].kind == ST_GUARD)
			ev_at(sc->steps[i].at, EV_GUARD_START, 1, 0);
		else
			ev_at(sc->steps[i].at, EV_BACKEND, sc->steps[i].kind, 0);
	}
}

/* ---- one schedule ---- */

static int	max_lost_touches = 1000000;
extern int	worker_guards_waiting(usec before);

static void
run_schedule(uint64_t seed)
{
	EvKind		kind;
	int			a;
	int64_t		b;

	rng_seed(seed);
	ev_reset();
	streams_reset();
	memset(&cfg, 0, sizeof(cfg));
	cfg.quiet_from = cfg.quiet_until = NEVER;
	cfg.lose_touch_from = NEVER;
	if (scenario)
		script_config();
	else
	{
		draw_config();
		cfg.max_lost_touches = max_lost_touches;
	}
	zk_reset();
	worker_reset();
	if (!scenario)
		draw_plans();
	close_committed = false;
	proven_max = 0;
	unsafe = false;
	live_failed = false;
	failure[0] = '\0';
	schedule_over = false;
	schedule_margin = 1e9;
	if (tracing)
		print_config(seed);
	zk_start();
	worker_start();
	ev_at(cfg.horizon, EV_END, 0, 0);
	while (!schedule_over && ev_next(&kind, &a, &b))
	{
		switch (kind)
		{
			case EV_DELIVER:
				stream_deliver_due(a, b);
				break;
			case EV_FAULT:
				if (plans[a].hook >= 0)
					plans[a].armed = true;
				else
					plan_fire(&plans[a]);
				break;
			case EV_END:
				schedule_over = true;
				break;
			case EV_WORKER:
			case EV_CLIENT_TIMER:
			case EV_RECONNECT:
			case EV_BACKEND:
			case EV_GUARD_START:
			case EV_GUARD_WAKE:
				worker_event(kind, a, b);
				break;
			default:
				zk_event(kind, a, b);
				break;
		}
	}
	if (!cfg.faulty && failure[0] == '\0' && worker_guards_waiting(now - guard_bound) > 0)
	{
		live_failed = true;
		sim_fail("LIVENESS: without faults, a guard still waits after its bound %lld ms",
				 (long long) (guard_bound / MS));
	}
	st.schedules++;
	if (st.schedules == 1 || schedule_margin < st.min_margin_t)
	{
		st.min_margin_t = schedule_margin;
		st.min_margin_seed = seed;
	}
	if (cfg.faulty)
		st.faulty++;
	if (unsafe)
	{
		if (st.unsafe++ == 0)
		{
			st.first_unsafe = seed;
			snprintf(st.unsafe_msg, sizeof(st.unsafe_msg), "%s", failure);
		}
	}
	else if (live_failed)
	{
		if (st.live_failed++ == 0)
		{
			st.first_live = seed;
			snprintf(st.live_msg, sizeof(st.live_msg), "%s", failure);
		}
	}
}

/* ---- the driver ---- */

static void
merge(Stats *into, const Stats *s)
{
	if (s->unsafe > 0 && (into->unsafe == 0 || s->first_unsafe < into->first_unsafe))
	{
		into->first_unsafe = s->first_unsafe;
		memcpy(into->unsafe_msg, s->unsafe_msg, sizeof(into->unsafe_msg));
	}
	if (s->live_failed > 0 && (into->live_failed == 0 || s->first_live < into->first_live))
	{
		into->first_live = s->first_live;
		memcpy(into->live_msg, s->live_msg, sizeof(into->live_msg));
	}
	into->schedules += s->schedules;
	into->faulty += s->faulty;
	into->unsafe += s->unsafe;
	into->live_failed += s->live_failed;
	into->guards_passed += s->guards_passed;
	into->guards_gave_up += s->guards_gave_up;
	into->ff_guards += s->ff_guards;
	if (s->ff_wait_max > into->ff_wait_max)
		into->ff_wait_max = s->ff_wait_max;
	if (s->ff_wait_max_t > into->ff_wait_max_t)
		into->ff_wait_max_t = s->ff_wait_max_t;
	if (s->ff_wait_max_bound > into->ff_wait_max_bound)
		into->ff_wait_max_bound = s->ff_wait_max_bound;
	if (into->schedules == s->schedules || s->min_margin_t < into->min_margin_t)
	{
		into->min_margin_t = s->min_margin_t;
		into->min_margin_seed = s->min_margin_seed;
	}
}

static void
run_range(uint64_t base, long count, int job, int jobs, bool stop_at_unsafe)
{
	for (long i = job; i < count; i += jobs)
	{
		run_schedule(base + (uint64_t) i);
		if (stop_at_unsafe && st.unsafe > 0)
			break;
	}
}

static void
replay(uint64_t seed)
{
	tracing = true;
	memset(&st, 0, sizeof(st));
	run_schedule(seed);
	tracing = false;
	fflush(stdout);
}

static void
usage(void)
{
	fprintf(stderr, "usage: zksim [--schedules N] [--seed S] [--jobs J] [--expect-unsafe] [--max-lost-touches K] [--trace]\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	long		count = 1000;
	uint64_t	base = 1;
	int			jobs = 1;
	bool		expect_unsafe = false;
	bool		trace_all = false;
	Stats		total;
	struct timespec t0;
	struct timespec t1;
	double		secs;

	for (int i = 1; i < argc; i++)
	{
		if (strcmp(argv[i], "--schedules") == 0 && i + 1 < argc)
			count = atol(argv[++i]);
		else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
			base = strtoull(argv[++i], NULL, 10);
		else if (strcmp(argv[i], "--jobs") == 0 && i + 1 < argc)
			jobs = atoi(argv[++i]);
		else if (strcmp(argv[i], "--max-lost-touches") == 0 && i + 1 < argc)
			max_lost_touches = atoi(argv[++i]);
		else if (strcmp(argv[i], "--scenario") == 0 && i + 1 < argc)
		{
			const char *name = argv[++i];

			for (int k = 0; k < NSCENARIOS; k++)
				if (strcmp(scenarios[k].name, name) == 0)
					scenario = &scenarios[k];
			if (scenario == NULL)
				usage();
			count = 1;
		}
		else if (strcmp(argv[i], "--racy") == 0)
			only_racy = true;
		else if (strcmp(argv[i], "--expect-unsafe") == 0)
			expect_unsafe = true;
		else if (strcmp(argv[i], "--trace") == 0)
			trace_all = true;
		else
			usage();
	}
	if (jobs < 1 || count < 1)
		usage();
	if (trace_all)
	{
		for (long i = 0; i < count; i++)
			replay(base + (uint64_t) i);
		return 0;
	}

	clock_gettime(CLOCK_MONOTONIC, &t0);
	memset(&total, 0, sizeof(total));
	if (jobs == 1)
	{
		run_range(base, count, 0, 1, expect_unsafe);
		total = st;
	}
	else
	{
		int			fds[64][2];
		pid_t		pids[64];

		if (jobs > 64)
			jobs = 64;
		fflush(stdout);
		for (int j = 0; j < jobs; j++)
		{
			if (pipe(fds[j]) != 0 || (pids[j] = fork()) < 0)
			{
				perror("zksim");
				return 2;
			}
			if (pids[j] == 0)
			{
				ssize_t		w;

				run_range(base, count, j, jobs, expect_unsafe);
				w = write(fds[j][1], &st, sizeof(st));
				_exit(w == (ssize_t) sizeof(st) ? 0 : 1);
			}
			close(fds[j][1]);
		}
		for (int j = 0; j < jobs; j++)
		{
			Stats		s;
			int			status;

			if (read(fds[j][0], &s, sizeof(s)) != (ssize_t) sizeof(s) ||
				waitpid(pids[j], &status, 0) != pids[j] || status != 0)
			{
				fprintf(stderr, "zksim: job %d failed\n", j);
				return 2;
			}
			merge(&total, &s);
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);

	secs = (double) (t1.tv_sec - t0.tv_sec) + (double) (t1.tv_nsec - t0.tv_nsec) / 1e9;

	printf("zksim (%s): %ld schedules in %.1f s (%.0f/s), %ld with faults; %ld unsafe, %ld liveness failures\n",
		   SIM_VARIANT, total.schedules, secs, (double) total.schedules / secs, total.faulty,
		   total.unsafe, total.live_failed);
	printf("  guards: %ld passed, %ld gave up; without faults: %ld, the longest %lld.%03lld ms (%.3f T, %.2f of its bound)\n",
		   total.guards_passed, total.guards_gave_up, total.ff_guards,
		   (long long) (total.ff_wait_max / MS), (long long) (total.ff_wait_max % MS),
		   total.ff_wait_max_t, total.ff_wait_max_bound);
	if (total.min_margin_t < 1e8)
		printf("  the closest a proof came to the leader's deadline when published: %.4f T (schedule %llu)\n",
			   total.min_margin_t, (unsigned long long) total.min_margin_seed);
	if (expect_unsafe)
	{
		if (total.unsafe == 0)
		{
			printf("mutant %s SURVIVED %ld schedules\n", SIM_VARIANT, total.schedules);
			return 1;
		}
		printf("mutant %s killed by schedule %llu: %s\n", SIM_VARIANT,
			   (unsigned long long) total.first_unsafe, total.unsafe_msg);
		printf("  replay: zksim --seed %llu --schedules 1 --trace\n",
			   (unsigned long long) total.first_unsafe);
		return 0;
	}
	if (total.unsafe > 0)
	{
		printf("first unsafe schedule %llu: %s\n", (unsigned long long) total.first_unsafe,
			   total.unsafe_msg);
		replay(total.first_unsafe);
	}
	if (total.live_failed > 0)
	{
		printf("first liveness failure, schedule %llu: %s\n",
			   (unsigned long long) total.first_live, total.live_msg);
		if (total.unsafe == 0)
			replay(total.first_live);
	}
	return total.unsafe > 0 || total.live_failed > 0 ? 1 : 0;
}
