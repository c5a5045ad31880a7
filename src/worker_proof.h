/*
 * worker_proof.h
 *	  The commit guard's proof that the session lives: which replies the
 *	  ZooKeeper leader provably heard of, when the session worker sends its
 *	  syncs, and when the guard asks for a write.  Pure functions of the
 *	  clock and the replies (test/sim runs them against a model of
 *	  ZooKeeper), with no PostgreSQL state but what the caller passes in.
 */
#ifndef ZKLOCK_WORKER_PROOF_H
#define ZKLOCK_WORKER_PROOF_H

#include <stdint.h>
#include <stdbool.h>

/*
 * Parts of the negotiated session timeout T (docs/internals.md, "What
 * proves that the session lives"):
 *  - PROOF_PING_BOUND: the longest the leader goes without queueing a PING
 *    to a follower.  It pings every tickTime/2, and tickTime <= T/2 where
 *    minSessionTimeout is ZooKeeper's default 2 x tickTime, so every T/4;
 *    the rest, 0.15 T, is slack for the leader's own delays.
 *  - PROOF_SYNC_PERIOD: the worker's chain of syncs, one sent this long
 *    after the previous sync or write was sent, none while one is in
 *    flight; and the time after which a sync in flight gets a read behind
 *    it (see proof_next_send).
 *  - PROOF_GUARD_MARGIN: what the guard keeps for the commit record to be
 *    written, and what a close of the session waits for committers.
 * A write answered a round trip after it was sent proves at least
 * T - PING_BOUND - 3 SYNC_PERIOD - 7 round trips, 0.45 T: more than the
 * margin, with 0.12 T to spare before the guard must ask again.
 */
#define PROOF_PING_BOUND(t) ((t) * 2 / 5)
#define PROOF_SYNC_PERIOD(t) ((t) / 20)
#define PROOF_GUARD_MARGIN(t) ((t) / 3)

/* How the worker's request reached the server's answer. */
typedef enum ProofOp
{
	PROOF_OP_READ,				/* answered by the server it was sent to */
	PROOF_OP_SYNC,				/* answered after the leader's SYNC came */
	PROOF_OP_WRITE				/* create, delete or set */
} ProofOp;

/* The worker's side: what it sends and hears on its connection. */
extern void proof_connection(int64_t connect_sent_after, int timeout_ms);
extern int64_t proof_answered(int64_t sent_at, ProofOp op, int rc, int64_t now);
extern int64_t proof_provable(void);

/* What the worker sends of its own, to keep a proof at hand. */
typedef enum ProofSend
{
	PROOF_SEND_NONE,
	PROOF_SEND_SYNC,			/* the chain's next sync */
	PROOF_SEND_READ				/* a read behind a sync that takes long */
} ProofSend;

extern ProofSend proof_next_send(int64_t now, long *in_ms);
extern void proof_sent(ProofSend what, int64_t now);
extern void proof_sync_settled(void);

/* The guard's side: one COMMIT's wait for a proof. */
typedef struct ProofGuard
{
	int64_t		deadline;		/* when it gives up */
	int			timeout_ms;
	int64_t		asked_with;		/* provable when it last asked; 0: never */
} ProofGuard;

typedef enum ProofGuardStep
{
	PROOF_GUARD_PASS,			/* proven for the margin */
	PROOF_GUARD_GIVE_UP,		/* the session is gone, or no proof in time */
	PROOF_GUARD_ASK,			/* send a write now */
	PROOF_GUARD_WAIT			/* for *wait_ms, or a wake-up */
} ProofGuardStep;

extern bool proof_guard_passes(int64_t now, int timeout_ms, bool connected,
							   int64_t proven_until);
extern void proof_guard_begin(ProofGuard *guard, int64_t now, int timeout_ms);
extern ProofGuardStep proof_guard_step(ProofGuard *guard, int64_t now,
									   bool connected, bool session_gone,
									   bool asking, int64_t proven_until,
									   int64_t provable, long *wait_ms);

#endif							/* ZKLOCK_WORKER_PROOF_H */
