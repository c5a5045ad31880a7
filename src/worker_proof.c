/*
 * worker_proof.c
 *	  The session worker's half of the commit guard's proof: which of its
 *	  sends the ZooKeeper leader has provably heard of, and so until when
 *	  the session provably lives (docs/internals.md, "What proves that the
 *	  session lives").
 *
 * The leader alone expires a session, at the time it last heard of a touch
 * plus the timeout.  It hears of a request sent to a follower only with
 * that follower's reply to the leader's next PING, and a write the follower
 * forwards is checked there, not touched; a leader cut off from its quorum
 * answers reads, pings and syncs by itself.  So the worker times its sends
 * and their replies on the one connection, and takes as heard:
 *  - the connection's connect request, which the leader itself answers
 *    (it creates or revalidates the session);
 *  - a request answered at least ZK_PING_BOUND before a write was sent on
 *    the same connection: the follower answered a leader PING in between,
 *    and that reply reached the leader ahead of the forwarded write.
 * A write's reply means a quorum committed it after it was sent, so no
 * leader elected later began before the heard send: the session lives
 * until the heard send plus the timeout, whoever leads.
 */
#include "postgres.h"

#include "worker_proof.h"
#include "zk_bridge.h"
#include "zk_shared.h"

/*
 * Heard sends as steps of a rising function: answered_at (when the worker
 * read the reply) to the latest sent_at answered by then.  Steps closer
 * than STEP_GAP_DIV-ths of the ping bound are merged into the later one,
 * which only makes the function lower in between, so the ring covers
 * several ping bounds at any rate of requests.
 */
#define STEPS 64
#define STEP_GAP_DIV 16

typedef struct Step
{
	int64		answered_at;
	int64		sent_at;
} Step;

static Step steps[STEPS];
static int	first_step = 0;
static int	nsteps = 0;

/* The connection's negotiated timeout; 0: none is connected. */
static int	connection_timeout = 0;

/* When the worker last sent anything, for the heartbeat. */
static int64 last_send_at = 0;

static Step *
step_at(int i)
{
	return &steps[(first_step + i) % STEPS];
}

/* The latest send of the connection answered at or before t; 0: none. */
static int64
heard_before(int64 t)
{
	for (int i = nsteps - 1; i >= 0; i--)
		if (step_at(i)->answered_at <= t)
			return step_at(i)->sent_at;
	return 0;
}

static void
publish(int64 proven_until)
{
	SpinLockAcquire(&zk_shared->mutex);
	if (proven_until > zk_shared->proven_until)
		zk_shared->proven_until = proven_until;
	SpinLockRelease(&zk_shared->mutex);
}

/*
 * A new connection of the open session, whose connect request was sent
 * after connect_sent_after (0: the session is not connected), with the
 * timeout it negotiated.  Nothing heard on an earlier connection counts on
 * this one: that follower may have lost its leader since.
 */
void
proof_connection(int64 connect_sent_after, int timeout_ms)
{
	first_step = 0;
	nsteps = 0;
	connection_timeout = connect_sent_after > 0 ? timeout_ms : 0;
	if (connection_timeout == 0)
		return;
	/* Heard before anything else was answered. */
	steps[0].answered_at = 0;
	steps[0].sent_at = connect_sent_after;
	nsteps = 1;
}

/* The worker sends a request now. */
void
proof_sent(int64 now)
{
	last_send_at = now;
}

/*
 * The server answered a request of the open session sent at sent_at, on
 * the current connection; write: a create, delete or set, whose answer
 * (an error too) comes from a quorum's commit.
 */
void
proof_answered(int64 sent_at, bool write)
{
	int64		now = bridge_now_ms();
	int64		bound;
	Step	   *last;

	if (connection_timeout == 0)
		return;
	bound = ZK_PING_BOUND(connection_timeout);
	if (write)
	{
		int64		heard = heard_before(sent_at - bound);

		if (heard > 0)
			publish(heard + connection_timeout);
	}

	last = nsteps > 0 ? step_at(nsteps - 1) : NULL;
	if (last != NULL && sent_at <= last->sent_at)
		return;
	if (nsteps >= 2 &&
		now - step_at(nsteps - 2)->answered_at < bound / STEP_GAP_DIV)
	{
		last->answered_at = now;
		last->sent_at = sent_at;
		return;
	}
	if (nsteps == STEPS)
	{
		first_step = (first_step + 1) % STEPS;
		nsteps--;
	}
	step_at(nsteps)->answered_at = now;
	step_at(nsteps)->sent_at = sent_at;
	nsteps++;
}

/*
 * Milliseconds until the worker should send a request of its own, so that
 * a send answered long enough before any write stays recent; -1: not
 * connected.
 */
long
proof_heartbeat_in(void)
{
	int64		due;

	if (connection_timeout == 0)
		return -1;
	due = last_send_at + ZK_HEARTBEAT(connection_timeout);
	return (long) Max(due - bridge_now_ms(), 0);
}
