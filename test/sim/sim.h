/*
 * sim.h
 *	  The proof simulation (docs/testing.md, "The proof simulation"): a
 *	  deterministic discrete-event model of a ZooKeeper 3.8 ensemble of
 *	  three servers and of one zklock session worker, which runs the real
 *	  src/worker_proof.c under seeded random schedules and checks that the
 *	  leader never expires the session before a time the worker published
 *	  as proven.
 *
 * Time is in microseconds of one real clock; the worker reads it in whole
 * milliseconds (the boot clock, bridge_now_ms), each ZooKeeper server in
 * whole milliseconds of its own offset (same rate: the stated assumption).
 */
#ifndef ZKLOCK_SIM_H
#define ZKLOCK_SIM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef int64_t usec;

#define MS 1000
#define NSERV 3
#define QUORUM 2
#define NEVER INT64_MAX

/* ---- random (xoshiro256**, seeded per schedule) ---- */
extern void rng_seed(uint64_t seed);
extern uint64_t rng_u64(void);
extern int64_t rng_between(int64_t lo, int64_t hi);	/* inclusive */
extern bool rng_chance(double p);
extern usec step_delay(usec lo, usec hi);	/* exact (lo) in scenarios */

/* ---- events ---- */
typedef enum EvKind
{
	EV_DELIVER,					/* a = stream: its head packet is due */
	EV_PING,					/* a = leader: its ping loop's next pass */
	EV_EXPIRE,					/* a = leader, b = generation: a deadline */
	EV_PREP,					/* a = leader: its prep thread's next item */
	EV_LEADER_LOGGED,			/* a = leader, b = zxid: its own log write */
	EV_INTAKE,					/* a = server: its request thread's next item */
	EV_TOUCHED,					/* a = server, b = generation: a put done */
	EV_LOGGED,					/* a = server, b = zxid: a proposal logged */
	EV_LEARNER_CHECK,			/* a = server, b = generation: read timeout */
	EV_HANDLER_CHECK,			/* a = leader * NSERV + server, b = generation */
	EV_JOIN,					/* a = server: a looking server joins or elects */
	EV_ESTABLISH,				/* a = leader: its NEWLEADER quorum is in */
	EV_RESTART,					/* a = server: a crashed server comes back */
	EV_LOAD,					/* other clients' writes at the leader */
	EV_WORKER,					/* the worker's turn (its chain of syncs) */
	EV_CLIENT_TIMER,			/* a = connection: the C client's timers */
	EV_RECONNECT,				/* the C client tries the next server */
	EV_BACKEND,					/* a backend's read or write */
	EV_GUARD_START,				/* a COMMIT begins its guard */
	EV_GUARD_WAKE,				/* a = guard, b = generation */
	EV_FAULT,					/* a = plan: a timed fault */
	EV_END						/* the schedule's horizon */
} EvKind;

extern usec now;
extern void ev_reset(void);
extern void ev_at(usec at, EvKind kind, int a, int64_t b);
extern bool ev_next(EvKind *kind, int *a, int64_t *b);

/* ---- the schedule's trace (printed for a counterexample) ---- */
extern bool tracing;
extern void trace_line(const char *fmt,...) __attribute__((format(printf, 1, 2)));

#define TRACE(...) do { if (tracing) trace_line(__VA_ARGS__); } while (0)

/* ---- in-order streams: each direction of a connection ---- */
typedef enum StreamKind
{
	SK_QDOWN,					/* leader -> follower */
	SK_QUP,						/* follower -> leader */
	SK_CUP,						/* worker -> server */
	SK_CDOWN					/* server -> worker */
} StreamKind;

typedef enum PacketType
{
	/* quorum link, leader to follower */
	QP_PING, QP_PROPOSAL, QP_COMMIT, QP_SYNC, QP_REVAL_REPLY,
	/* quorum link, follower to leader */
	QP_PING_REPLY, QP_ACK, QP_REQUEST, QP_REVALIDATE,
	/* client link */
	CP_CONNECT, CP_REQUEST, CP_CONNECTED, CP_REPLY,
	/* either: the other side closed the connection */
	PK_CLOSE
} PacketType;

typedef struct Packet
{
	PacketType type;
	int64_t		x;
	int64_t		y;
	usec		sent;
	usec		arrive;
} Packet;

extern void streams_reset(void);
extern int	stream_open(StreamKind kind, int a, int b, int c);
extern void stream_send(int s, PacketType type, int64_t x, int64_t y);
extern void stream_close(int s);
extern bool stream_open_p(int s);
extern void stream_hold(int s, usec until1, usec mark, usec until2);
extern void stream_lag(int s, usec until, usec lo, usec hi);
extern void stream_release(int s, usec until1, usec mark, usec until2);
extern void stream_deliver_due(int s, int64_t gen);
extern const char *stream_name(int s);
extern const char *packet_name(PacketType type);
extern const char *rc_name(int rc);

/* ---- the schedule's settings, drawn by the adversary ---- */
typedef struct Config
{
	int			timeout_ms;		/* T, negotiated */
	int			tick_ms;		/* tickTime <= T/2 */
	int			sync_limit;
	usec		horizon;
	usec		link_base[4];	/* mean one-way delay per StreamKind */
	usec		max_ping_gap;	/* the stated assumption (MODEL_PING_WINDOW) */
	double		ping_pause_p;	/* chance a ping pass pauses, within it */
	double		preempt_p;		/* chance a touch's put is delayed */
	usec		preempt_max;
	double		lose_touch_p;	/* chance a racing PING loses the touch */
	int			max_lost_touches;
	double		prep_pause_p;
	double		throttle_p;		/* chance the request thread lags (a backlog) */
	usec		throttle_max;
	double		load_rate;		/* other clients' writes per second */
	double		read_rate;		/* backends' reads per second */
	double		write_rate;		/* backends' writes per second */
	double		acl_write_p;	/* chance a write is refused for its ACL */
	double		follow_p;		/* chance a backend goes on at once */
	bool		eager_acl;		/* zookeeper.enableEagerACLCheck */
	double		guard_rate;		/* COMMITs per second */
	double		weak_connect_p; /* chance connect_sent_after is loose */
	bool		faulty;			/* false: liveness is checked */
	/* a scripted scenario (sim_main.c): exact delays, its own steps */
	bool		scripted;
	int			first_leader;
	int			first_server;
	usec		clock_off[NSERV];
	usec		quiet_from;		/* no ping pass starts in (from, until) */
	usec		quiet_until;
	usec		lose_touch_from;	/* the first touch after: lost to the next PING */
	usec		close_delay;	/* the closeSession's way to Prep (a backlog) */
	bool		racy;			/* faults around the touch table's race */
} Config;

extern Config cfg;

/* ---- hooks the adversary's triggered faults wait for ---- */
typedef enum Hook
{
	HK_PING_REPLY_TOUCH,		/* the worker's server reported its touch */
	HK_FORWARD_WRITE,			/* the worker's server forwarded a write */
	HK_FORWARD_SYNC,			/* ... a sync */
	HK_ANSWER_SYNC,				/* ... answered a sync */
	HK_COMMIT_WRITE,			/* the leader committed the worker's write */
	HK_EXPIRE,					/* the leader expired the session */
	HK_COUNT
} Hook;

extern void adversary_hook(Hook hook, int server);

/* ---- the ZooKeeper ensemble (sim_zk.c) ---- */
typedef enum ReqKind
{
	RK_READ, RK_SYNC, RK_WRITE, RK_PING
} ReqKind;

typedef enum WriteKind
{
	WK_PROBE,					/* the guard's set at version -2 */
	WK_NORMAL,					/* a backend's create or delete */
	WK_ACL_DENIED				/* refused for its ACL */
} WriteKind;

typedef enum ReqOwner
{
	RO_CHAIN, RO_HEARTBEAT, RO_BACKEND, RO_GUARD, RO_PING
} ReqOwner;

typedef struct Req
{
	ReqKind		kind;
	WriteKind	wkind;
	ReqOwner	owner;
	int			guard;
	int			conn;
	usec		sent;
	int			rc;
	bool		ready;			/* the server may answer it (its turn comes) */
	bool		done;			/* the worker read its answer */
} Req;

extern Req *reqs;
extern int	nreqs;

extern void zk_reset(void);
extern void zk_start(void);
extern void zk_event(EvKind kind, int a, int64_t b);
extern void zk_deliver(int s, StreamKind kind, int a, int b, int c, Packet *p);
extern bool zk_serving(int sid);
extern int	zk_leader_server(void);
extern usec zk_expiry_due(void);
extern int	zk_worker_server_link(int sid, bool up);
extern void zk_crash(int sid, usec down_for);
extern void zk_isolate_leader(usec until1, usec until2);
extern void zk_load_burst(usec until, double rate);

/* ---- the worker, its C client and its backends (sim_worker.c) ---- */
extern void worker_reset(void);
extern void worker_start(void);
extern void worker_event(EvKind kind, int a, int64_t b);
extern void worker_deliver(int conn, Packet *p);
extern int	worker_conn_server(void);
extern int	worker_conn_stream(bool up);
extern void worker_drop_connection(const char *why);
extern usec worker_clock_off;
extern int64_t worker_ms(void);
extern int64_t worker_ms_at(usec t);

/* ---- the checks (sim_main.c) ---- */
extern void check_close_committed(usec decided, int leader_server);
extern void check_published(int64_t proven_until, bool by_connect);
extern void note_guard(bool passed, usec took, const char *why);
extern void sim_fail(const char *fmt,...) __attribute__((format(printf, 1, 2)));
extern bool schedule_over;

#endif							/* ZKLOCK_SIM_H */
