/*
 * worker_proof.c
 *	  The commit guard's proof that the session lives (docs/internals.md,
 *	  "What proves that the session lives"): which of the session worker's
 *	  sends the ZooKeeper leader provably heard of, so until when the
 *	  session provably lives; when the worker sends the syncs that keep
 *	  such a proof at hand; and when a COMMIT's guard asks for a write.
 *
 * Pure functions of the clock and the replies, so that test/sim can run
 * them under every schedule of a model of ZooKeeper.  The proof rests on
 * the order of replies on the streams, never on how soon a message comes:
 *  - a send answered at a was touched by the server before it answered;
 *    the leader queues a PING to that server within PROOF_PING_BOUND of
 *    any time, so one in [a, a + bound];
 *  - a sync or write sent at or after a + bound is answered only after the
 *    server read the leader's reply to it, which the leader queued behind
 *    that PING on the same stream, so the server answered the PING, with
 *    the touch, before it answered that request;
 *  - a write sent after that answer reaches the leader behind the PING's
 *    reply on the server's one stream to it, so the leader touched the
 *    session (through that PING, or an earlier one that took the touch) at
 *    a time after the send, before it checked the write, and a quorum
 *    committed the write, so no later leader began before either.
 * A touch can be lost in a race inside the server (the touch table is
 * swapped out under it by a PING); then a send answered before that one
 * was made was heard through that PING or an earlier one, so the proof
 * starts from such a send's sending.  The
 * connection's connect request is heard as such: the leader itself
 * revalidates the session.  Nothing heard on one connection counts on the
 * next: its server may have lost its leader since.
 */
#include "postgres.h"

#include <zookeeper/zookeeper.h>

#include "worker_proof.h"

/*
 * The connection's answers as steps of rising functions of the time the
 * worker read a reply: the latest send answered by then, and the latest
 * one among them that the leader itself answered (a sync or a write).
 * Steps closer than STEP_GAP_DIV-ths of the ping bound are merged into the
 * later one, which only makes the functions lower in between, so the ring
 * covers several ping bounds at any rate of requests.
 */
#define STEPS 128
#define STEP_GAP_DIV 16

typedef struct Step
{
	int64		answered_at;
	int64		sent_at;
	int64		leader_sent_at; /* 0: none yet */
} Step;

static Step steps[STEPS];
static int	first_step = 0;
static int	nsteps = 0;

/* The connection's negotiated timeout; 0: none is connected. */
static int	connection_timeout = 0;

/* What a write sent now would prove (proof_provable), kept with the steps. */
static int64 provable = 0;

/* The connect request's sending, heard by the leader itself. */
static int64 connect_sent = 0;

/* The worker's chain of syncs. */
static bool sync_in_flight = false;
static int64 sync_sent_at = 0;
static bool read_behind_sync = false;
static int64 last_leader_send = 0;

static Step *
step_at(int i)
{
	return &steps[(first_step + i) % STEPS];
}

/* The latest step answered at or before t (before t if strict); NULL: none. */
static Step *
step_before(int64 t, bool strict)
{
	for (int i = nsteps - 1; i >= 0; i--)
	{
		Step	   *s = step_at(i);

		if (strict ? s->answered_at < t : s->answered_at <= t)
			return s;
	}
	return NULL;
}

/*
 * The latest time the leader provably heard of a touch before it checks a
 * write sent at w (INT64_MAX: now), from what was answered by then; 0:
 * none.  See the header comment.
 */
static int64
heard_for_write(int64 w)
{
	int64		bound = PROOF_PING_BOUND(connection_timeout);
	Step	   *from_leader = step_before(w, false);
	Step	   *touched;
	Step	   *before;

	if (from_leader == NULL || from_leader->leader_sent_at == 0)
		return connect_sent;
	touched = step_before(from_leader->leader_sent_at - bound, false);
	if (touched == NULL)
		return connect_sent;
	before = step_before(touched->sent_at, true);
	if (before == NULL)
		return connect_sent;
	return Max(before->sent_at, connect_sent);
}

/*
 * A new connection of the open session, whose connect request was sent
 * after connect_sent_after (0: the session is not connected), with the
 * timeout it negotiated.
 */
void
proof_connection(int64 connect_sent_after, int timeout_ms)
{
	first_step = 0;
	nsteps = 0;
	connection_timeout = connect_sent_after > 0 ? timeout_ms : 0;
	connect_sent = connection_timeout > 0 ? connect_sent_after : 0;
	last_leader_send = connect_sent;
	provable = connection_timeout > 0 ? connect_sent + connection_timeout : 0;
}

/* Whether the server itself answered: it still held the session then. */
static bool
server_answered(int rc)
{
	return rc == ZOK || rc == ZNONODE || rc == ZNODEEXISTS ||
		rc == ZBADVERSION || rc == ZNOTEMPTY || rc == ZNOAUTH ||
		rc == ZNOCHILDRENFOREPHEMERALS;
}

/*
 * Whether the answer came after the server read the leader's reply to the
 * request.  A write is answered after the leader's COMMIT, refused or not,
 * but a write refused for its ACL may be answered at once
 * (zookeeper.enableEagerACLCheck).
 */
static bool
leader_answered(ProofOp op, int rc)
{
	return (op == PROOF_OP_SYNC && rc == ZOK) ||
		(op == PROOF_OP_WRITE && rc != ZNOAUTH);
}

/*
 * The server answered, with rc, a request of the open session sent at
 * sent_at on the current connection, and the worker read it at now.  A
 * write's answer proves the session alive until the touch heard before
 * it plus the timeout: returns that time (0: nothing proven), for the
 * caller to publish with proof_provable().
 */
int64
proof_answered(int64 sent_at, ProofOp op, int rc, int64 now)
{
	int64		proven_until = 0;
	bool		from_leader;
	Step	   *last;
	Step		next;

	if (connection_timeout == 0 || !server_answered(rc))
		return 0;
	from_leader = leader_answered(op, rc);
	if (from_leader && op == PROOF_OP_WRITE)
	{
		int64		heard = heard_for_write(sent_at);

		if (heard > 0)
			proven_until = heard + connection_timeout;
	}
	if (from_leader)
		last_leader_send = Max(last_leader_send, sent_at);

	last = nsteps > 0 ? step_at(nsteps - 1) : NULL;
	next.answered_at = now;
	next.sent_at = last ? Max(last->sent_at, sent_at) : sent_at;
	next.leader_sent_at = last ? last->leader_sent_at : 0;
	if (from_leader)
		next.leader_sent_at = Max(next.leader_sent_at, sent_at);
	if (last != NULL && next.sent_at == last->sent_at &&
		next.leader_sent_at == last->leader_sent_at)
		return proven_until;
	if (nsteps >= 2 &&
		now - step_at(nsteps - 2)->answered_at <
		PROOF_PING_BOUND(connection_timeout) / STEP_GAP_DIV)
		*last = next;
	else
	{
		if (nsteps == STEPS)
		{
			first_step = (first_step + 1) % STEPS;
			nsteps--;
		}
		*step_at(nsteps) = next;
		nsteps++;
	}
	provable = heard_for_write(INT64_MAX) + connection_timeout;
	return proven_until;
}

/* What a write sent now would prove; 0: nothing. */
int64
proof_provable(void)
{
	return provable;
}

/*
 * What the worker should send next of its own, and in how many
 * milliseconds: the chain's next sync, PROOF_SYNC_PERIOD after the last
 * sync or write was sent; or, while a sync has been in flight that long, one
 * read behind it.  ZooKeeper 3.8.0 (Debian 12's) can leave an answer
 * uncommitted until another request of that server comes
 * (ZOOKEEPER-4537, CommitProcessor's lost wake-up), and with one session
 * per server and the client's pings held back while a request is
 * outstanding nothing else might come.
 */
ProofSend
proof_next_send(int64 now, long *in_ms)
{
	int64		due;

	if (connection_timeout == 0 || (sync_in_flight && read_behind_sync))
		return PROOF_SEND_NONE;
	due = (sync_in_flight ? sync_sent_at : last_leader_send) +
		PROOF_SYNC_PERIOD(connection_timeout);
	*in_ms = (long) Max(due - now, 0);
	return sync_in_flight ? PROOF_SEND_READ : PROOF_SEND_SYNC;
}

void
proof_sent(ProofSend what, int64 now)
{
	if (what == PROOF_SEND_READ)
	{
		read_behind_sync = true;
		return;
	}
	sync_in_flight = true;
	read_behind_sync = false;
	sync_sent_at = now;
	last_leader_send = Max(last_leader_send, now);
}

/* The chain's sync was answered, or ended without an answer. */
void
proof_sync_settled(void)
{
	sync_in_flight = false;
}

/* ---- the guard ---- */

/* Whether the session provably lives for the guard's margin from now. */
bool
proof_guard_passes(int64 now, int timeout_ms, bool connected,
				   int64 proven_until)
{
	return connected && now + PROOF_GUARD_MARGIN(timeout_ms) <= proven_until;
}

void
proof_guard_begin(ProofGuard *guard, int64 now, int timeout_ms)
{
	guard->deadline = now + timeout_ms;
	guard->timeout_ms = timeout_ms;
	guard->asked_with = 0;
}

/*
 * The guard's next step.  It asks for a write (the caller's set of a held
 * node at a version no node has) when the worker's chain can prove the
 * margin with it, and asks again only once the chain has moved on since
 * (a later answer would prove no more); it waits for its write's answer,
 * and otherwise looks again every fiftieth of the timeout.  It gives up
 * when the session is gone or its deadline, a timeout from its start,
 * passes: during a stall the chain's syncs and its write hang.
 */
ProofGuardStep
proof_guard_step(ProofGuard *guard, int64 now, bool connected,
				 bool session_gone, bool asking, int64 proven_until,
				 int64 provable, long *wait_ms)
{
	int64		left = guard->deadline - now;

	if (proof_guard_passes(now, guard->timeout_ms, connected, proven_until))
		return PROOF_GUARD_PASS;
	if (session_gone || left <= 0)
		return PROOF_GUARD_GIVE_UP;
	if (!asking && connected && provable > guard->asked_with &&
		provable >= now + PROOF_GUARD_MARGIN(guard->timeout_ms))
	{
		guard->asked_with = provable;
		return PROOF_GUARD_ASK;
	}
	*wait_ms = (long) (asking ? left : Min(left, Max(guard->timeout_ms / 50, 1)));
	return PROOF_GUARD_WAIT;
}
