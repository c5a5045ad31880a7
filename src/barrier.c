/*
 * barrier.c
 *	  ZooKeeper's barrier recipes, laid out as Curator's DistributedBarrier
 *	  and DistributedDoubleBarrier and Kazoo's Barrier and DoubleBarrier lay
 *	  them out, so that zklock's members work beside theirs on one path: a
 *	  gate (zk_gate_close, zk_gate_open, zk_gate_wait) and a double barrier
 *	  (zk_barrier_enter, zk_barrier_leave); the session's memberships, which
 *	  DISCARD ALL abandons.
 *
 * A gate is closed while the PERSISTENT node <path> exists.  zklock creates
 * it with its closer's JSON, never writes into it (a change of its data
 * would use up the one watch of Kazoo's Barrier.wait, which would then hang)
 * and deletes it to open it.  A waiter keeps a data watch on it.  A gate
 * found again with another czxid was opened and closed again meanwhile: the
 * waiter saw it open and passes, as Kazoo's waiter does (Curator's looks
 * again, and misses such an opening).
 *
 * A double barrier's members are EPHEMERAL children <path>/<id>; the
 * PERSISTENT child <path>/ready says that enough of them entered.  zklock's
 * <id> is an attempt tag (UUID-shaped, like Curator's), its data the
 * owner's JSON with the parties it entered for.  Only children other than
 * ready are members.
 *
 * Enter.  The member creates its node and, right behind it in the same round
 * trip (ZooKeeper answers in order), sets an exists watch on ready and lists
 * the children.  A ready created after the member's node either shows in
 * that answer or fires the watch, which, set on a missing node, fires for
 * nothing but its creation: the member passes on that, as both clients do,
 * whether ready is still there or not (Kazoo's members delete it as they
 * begin to leave).  Then it reads the other members, in one pipelined round:
 * a zklock member that entered with other parties is an error, and if the
 * members, itself counted, are parties or more, it creates ready.  A ready
 * older (by czxid) than every member was left by a round in which nobody
 * left: it is ignored and deleted at its version, so that the next round is
 * not misled (Curator would pass at once, Kazoo would count it as a member).
 * A ready that some member predates is the round's: the member passes at
 * once, as both clients do for a late comer.  On time-out the member deletes
 * its node; if ready exists by then, it was counted, and enter returns true.
 *
 * Leave, as both clients do: delete ready, so that a late comer does not
 * pass on this round's; then, until no member is left, the lowest member by
 * name waits for the highest to go, and every other one deletes its node and
 * waits for the lowest to go.  ready is deleted again at the end: a member
 * that came late, while the others left, may have created it again.
 * (Curator deletes ready at the end of its leave, Kazoo at the start.)
 *
 * A membership is the session's, not a transaction's: once ready exists,
 * the others passed counting this member, and no rollback takes that back.
 * It ends with a leave, a failed or timed-out enter or leave (the node is
 * deleted then), DISCARD ALL (deleted without waiting), the backend's exit
 * (the session worker deletes it), or the session's end (ZooKeeper does);
 * the member learns at its next call that its node is gone.
 *
 * Waits are latch waits (bridge_wait): cancel, statement_timeout and
 * termination end them; the node is deleted then.  timeout_ms bounds the
 * wait for the others; each round trip is bounded by zklock.connect_timeout
 * (08006), and a reply lost with the connection is asked again once the
 * session is connected again.
 */
#include "postgres.h"

#include "lib/ilist.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "barrier.h"
#include "guc.h"
#include "lock_name.h"
#include "node_info.h"
#include "sql_functions.h"
#include "stats.h"
#include "zk_bridge.h"
#include "zk_nodes.h"
#include "zk_session.h"

PG_FUNCTION_INFO_V1(zk_gate_close);
PG_FUNCTION_INFO_V1(zk_gate_open);
PG_FUNCTION_INFO_V1(zk_gate_wait);
PG_FUNCTION_INFO_V1(zk_barrier_enter);
PG_FUNCTION_INFO_V1(zk_barrier_leave);

/* Container parents may vanish between our calls; don't loop forever. */
#define MAX_PARENT_RETRIES 10

/* A double barrier this session entered and has not left. */
typedef struct Membership
{
	dlist_node	node;
	char	   *name;			/* as the caller gave it */
	char	   *path;			/* the barrier's node */
	char	   *member;			/* our child of it; NULL if gone (node_gone) */
	int64		czxid;			/* of member */
	uint64		generation;		/* of the session it was created in */
	HeldWatch  *hw;				/* on member: tells if another client deletes it */
} Membership;

static dlist_head memberships = DLIST_STATIC_INIT(memberships);

/*
 * Member nodes that failed calls of this backend left behind.  The delete
 * that give_up asks for is dropped when the session was lost meanwhile (the
 * worker takes its nodes as gone with it), but ZooKeeper may keep such a
 * session longer than the worker judged (a new leader starts every
 * session's clock afresh), and until then its node counts as a member for
 * Curator and Kazoo.  The next enter, of any barrier, deletes them before
 * it creates its own node; read_members counts a backend once whatever is
 * left.  Fixed slots: give_up must not raise; with more, the oldest goes
 * to ZooKeeper's expiry.
 */
#define LEFT_MEMBERS 8
#define LEFT_MEMBER_PATH_MAX 1024
static char left_members[LEFT_MEMBERS][LEFT_MEMBER_PATH_MAX];
static int	left_member_next = 0;

/*
 * One call at a gate or a barrier.  Requests in flight are each NULL or
 * the call's; on an error or a time-out, give_up undoes what is left.
 */
typedef struct BarrierCall
{
	const char *name;
	const char *path;			/* the gate's or the barrier's node */
	char	   *ready;			/* <path>/ready */
	int			parties;		/* enter */
	int64		deadline;		/* of the wait for the others; 0: none */
	bool		try_only;		/* timeout_ms 0: never wait */

	ZkPathCreates *path_creates;
	ZkRequest  *create;
	ZkRequest  *watch;
	ZkRequest  *children;
	ZkRequest  *other;			/* a get, an exists, a create or a delete */
	ZkRequest **gets;			/* the other members' nodes */
	int			ngets;
	char	   *watched;		/* what a watch of ours is armed on */
	uint64		events;			/* bridge_exists_events() before the watch */

	/* Our member node. */
	char		tag[ZK_TAG_LEN + 1];
	char	   *data;
	char	   *member;			/* its path, while it exists */
	HeldWatch  *hw;
	int64		czxid;
	bool		create_lost;	/* a create's reply was lost: it may exist */
	uint64		generation;		/* of the session the member node is in */
} BarrierCall;

/* ---- round trips ---- */

/* Wait for a reply: 08006 if none came within zklock.connect_timeout. */
void
barrier_await(ZkRequest *req)
{
	if (!zk_session_await(req, req->sent_at + zklock_connect_timeout, ZK_BARRIER))
		zk_session_no_answer(ZK_BARRIER);
}

/*
 * After a reply lost with the connection: wait until the session is
 * connected again (08006 after zklock.connect_timeout; 08006 too if it was
 * lost meanwhile).
 */
void
barrier_await_reconnect(void)
{
	int64		deadline = bridge_now_ms() + zklock_connect_timeout;

	while (zk_session_status() != ZK_SESSION_CONNECTED)
	{
		int64		left = deadline - bridge_now_ms();

		zk_session_check_alive(ZK_BARRIER);
		if (left <= 0)
			zk_session_no_answer(ZK_BARRIER);
		zk_session_wait((long) left);
	}
}

/* An answered request whose reply was used. */
static void
finish(ZkRequest **slot)
{
	bridge_free(*slot);
	*slot = NULL;
}

/* A request given up on: the worker undoes what it did. */
static void
drop(ZkRequest **slot)
{
	if (*slot != NULL)
	{
		bridge_abandon(*slot);
		*slot = NULL;
	}
}

/* Await *slot and take its answer; true if the reply was lost. */
static bool
answer_lost(ZkRequest **slot, int *rc)
{
	barrier_await(*slot);
	*rc = (*slot)->rc;
	if (!bridge_reply_lost(*rc))
		return false;
	finish(slot);
	return true;
}

/*
 * Delete a node that is nobody's own (ready, a gate) if its version is
 * still version (-1: any), asking again after a lost reply.  ZooKeeper's
 * answer; ZOK also when a retry finds it gone (the first one may have
 * deleted it).
 */
static int
delete_shared(BarrierCall *c, const char *path, int version)
{
	bool		lost = false;

	for (;;)
	{
		int			rc;

		c->other = bridge_delete_shared(path, version);
		if (!answer_lost(&c->other, &rc))
		{
			finish(&c->other);
			return lost && rc == ZNONODE ? ZOK : rc;
		}
		lost = true;
		barrier_await_reconnect();
	}
}

/* The same for a delete whose only failure is that the node is gone. */
static void
delete_if_there(BarrierCall *c, const char *path)
{
	int			rc = delete_shared(c, path, -1);

	if (rc != ZOK && rc != ZNONODE)
		zk_report_error(rc, ZK_ACTION_DELETE, path);
}

/* ---- waiting ---- */

/* Milliseconds left to wait for the others: -1 without limit, 0 when out. */
static long
time_left(BarrierCall *c)
{
	int64		left;

	if (c->try_only)
		return 0;
	if (c->deadline == 0)
		return -1;
	left = c->deadline - bridge_now_ms();
	return left > 0 ? (long) left : 0;
}

/*
 * Wait until one of the backend's watches fired since events (a
 * bridge_watch_events() count) or the session had an event (a lost session
 * raises).  False when the wait's time ran out.
 */
static bool
await_watch(BarrierCall *c, uint64 events)
{
	ZkSessionSnapshot before;

	bridge_session_snapshot(&before);
	for (;;)
	{
		long		left = time_left(c);

		if (bridge_woken_since(events, before.events))
			return true;
		if (left == 0)
			return false;
		zk_session_wait(left);
		zk_session_check_alive(ZK_BARRIER);
	}
}

/* Remove our watch, armed or fired. */
static void
unwatch(BarrierCall *c)
{
	if (c->watched != NULL)
	{
		bridge_remove_watch(c->watched, ZWATCHTYPE_DATA);
		c->watched = NULL;
	}
}

/*
 * Set a data watch on path (a gate, a member).  False if it is gone; else
 * its czxid in *czxid, once armed.
 */
static bool
watch_node(BarrierCall *c, const char *path, int64 *czxid)
{
	for (;;)
	{
		int			rc;

		c->watch = bridge_watch(path, ZWATCHTYPE_DATA);
		if (answer_lost(&c->watch, &rc))
		{
			barrier_await_reconnect();
			continue;
		}
		*czxid = c->watch->czxid;
		finish(&c->watch);
		if (rc == ZNONODE)
			return false;
		if (rc != ZOK)
			zk_report_error(rc, ZK_ACTION_WATCH, path);
		c->watched = pstrdup(path);
		return true;
	}
}

/* The membership's node was deleted by another client (zk_barrier_reset). */
static void
report_removed(const char *name, const char *member)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("this session is no longer a member of zklock barrier \"%s\"", name),
			 errdetail("Its node \"%s\" was deleted by another client.", member),
			 errhint("A superuser's zk_barrier_reset() deletes every member's node.")));
}

/* The membership's session was lost, and its node with it. */
static void
report_session_lost(const char *name)
{
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("this session is no longer a member of zklock barrier \"%s\"", name),
			 errdetail("The server's ZooKeeper session in which it entered was lost, and its node with it."),
			 errhint("Enter the barrier again, on a new name if the others went on.")));
}

/*
 * The call's member node is gone and this backend did not delete it:
 * another client did (55000), or ZooKeeper, ending the session, which a
 * read can show before the worker hears of the end (a server answers reads
 * while it applies the session's close).  A delete in the session tells
 * them apart by the order of replies, not by time: the leader refuses a
 * closed session's write (08006) before it looks for the node.
 */
static void
confirm_removed(BarrierCall *c)
{
	int			rc = delete_shared(c, c->member, -1);

	if (rc == ZNOAUTH || rc == ZAUTHFAILED)
		zk_report_error(rc, ZK_ACTION_DELETE, c->member);
	/* Asked in a later session, the NONODE proves nothing of the first. */
	if ((rc != ZOK && rc != ZNONODE) || zk_session_generation() != c->generation)
		report_session_lost(c->name);
	report_removed(c->name, c->member);
}

/* confirm_removed as a call of its own, for a membership between calls. */
static bool
removed_between_calls(BarrierCall *c)
{
	confirm_removed(c);
	return false;
}

/* ---- the member node ---- */

/* The parent of path, or NULL for a child of "/". */
static char *
parent_of(const char *path)
{
	const char *slash = strrchr(path, '/');

	if (slash == path)
		return NULL;
	return pnstrdup(path, slash - path);
}

/*
 * The member's create (with the barrier's node in front, as a container,
 * and all its ancestors when whole_path), then the look behind it.
 */
static void
send_look(BarrierCall *c)
{
	c->events = bridge_exists_events();
	c->watch = bridge_watch_exists(c->ready);
	c->children = bridge_get_children(c->path);
}

static void
send_enter(BarrierCall *c, bool whole_path)
{
	c->path_creates = zk_send_path_creates(c->path, whole_path);
	c->create = bridge_create_held(psprintf("%s/%s", c->path, c->tag),
								   c->data, c->tag, ZOO_EPHEMERAL);
	send_look(c);
}

/*
 * Create our member node.  Its name is its tag: after a lost reply, the
 * create is sent again, and finding it there means the first one landed.
 */
static void
create_member(BarrierCall *c)
{
	bool		whole_path = false;

	send_enter(c, false);
	for (int tries = 0;; tries++)
	{
		int			rc;
		char	   *path = psprintf("%s/%s", c->path, c->tag);

		barrier_await(c->create);
		rc = c->create->rc;
		if (rc == ZNONODE && whole_path)
		{
			ZkPathCreates *pc = c->path_creates;

			/* The path's own errors (a missing chroot, an ACL) raise here. */
			c->path_creates = NULL;
			zk_path_creates_finish(pc, bridge_now_ms() + zklock_connect_timeout, NULL);
		}
		else if (c->path_creates != NULL)
		{
			zk_path_creates_abandon(c->path_creates);
			c->path_creates = NULL;
		}
		if (rc == ZOK)
		{
			c->member = pstrdup(c->create->created);
			c->czxid = c->create->czxid;
			c->hw = bridge_take_held(c->create);
			c->create_lost = false;
			finish(&c->create);
			return;
		}
		finish(&c->create);
		if (rc == ZNODEEXISTS && c->create_lost)
		{
			/* Ours: the first create landed.  Its czxid, and a watch. */
			c->member = path;
			c->hw = bridge_watch_held(path, c->data);
			for (;;)
			{
				c->other = bridge_exists(path);
				if (!answer_lost(&c->other, &rc))
					break;
				barrier_await_reconnect();
			}
			if (rc != ZOK)
				zk_report_error(rc, ZK_ACTION_READ, path);
			c->czxid = c->other->czxid;
			c->create_lost = false;
			finish(&c->other);
			return;
		}
		drop(&c->watch);
		drop(&c->children);
		if (bridge_reply_lost(rc))
		{
			c->create_lost = true;
			barrier_await_reconnect();
		}
		else if (rc == ZNONODE && tries < MAX_PARENT_RETRIES)
			whole_path = true;
		else
			zk_report_error(rc, ZK_ACTION_CREATE, path);
		send_enter(c, whole_path);
	}
}

/*
 * Delete our member node and wait (zklock.connect_timeout at most) until
 * ZooKeeper has, so that nothing is left when the call returns.
 */
static void
delete_member(BarrierCall *c)
{
	HeldWatch  *hw = c->hw;
	char	   *member = c->member;
	int64		deadline = bridge_now_ms() + zklock_connect_timeout;

	c->hw = NULL;
	c->member = NULL;
	if (!bridge_release_held(hw, member))
	{
		bridge_unwatch_held(hw);
		bridge_delete_node(member);
		return;
	}
	PG_TRY();
	{
		while (bridge_release_verdict(hw) == RELEASE_PENDING &&
			   zk_session_status() == ZK_SESSION_CONNECTED &&
			   bridge_now_ms() < deadline)
			bridge_wait(deadline - bridge_now_ms());
	}
	PG_FINALLY();
	{
		bridge_unwatch_held(hw);
	}
	PG_END_TRY();
}

/* The reads of the other members still in flight: given up on. */
static void
drop_gets(BarrierCall *c)
{
	for (int i = 0; i < c->ngets; i++)
		drop(&c->gets[i]);
	c->ngets = 0;
}

/* Undo what the call left in ZooKeeper.  Safe in PG_CATCH: never raises. */
static void
give_up(BarrierCall *c)
{
	if (c->path_creates != NULL)
		zk_path_creates_abandon(c->path_creates);
	c->path_creates = NULL;
	drop(&c->create);
	drop(&c->watch);
	drop(&c->children);
	drop(&c->other);
	drop_gets(c);
	unwatch(c);
	if (c->member != NULL)
	{
		bridge_unwatch_held(c->hw);
		bridge_delete_node(c->member);
		if (strlen(c->member) < LEFT_MEMBER_PATH_MAX)
		{
			strcpy(left_members[left_member_next], c->member);
			left_member_next = (left_member_next + 1) % LEFT_MEMBERS;
		}
		c->hw = NULL;
		c->member = NULL;
	}
	else if (c->create_lost)
		bridge_delete_tagged(c->path, c->tag);
}

/* Delete the member nodes failed calls left behind (left_members). */
static void
delete_left_members(BarrierCall *c)
{
	for (int i = 0; i < LEFT_MEMBERS; i++)
	{
		if (left_members[i][0] == '\0')
			continue;
		delete_if_there(c, left_members[i]);
		left_members[i][0] = '\0';
	}
}

/* ---- enter ---- */

/* For qsort: member names in the order both clients sort them. */
static int
name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *) a, *(char *const *) b);
}

/*
 * The members in a listing (answered, and freed here): every child but
 * ready, sorted by name; how many in *n.
 */
static char **
take_members(BarrierCall *c, int *n)
{
	ZkRequest  *l = c->children;
	char	  **members = palloc(sizeof(char *) * (l->nchildren + 1));

	*n = 0;
	if (l->rc != ZOK && l->rc != ZNONODE)
		zk_report_error(l->rc, ZK_ACTION_LIST, c->path);
	for (int i = 0; l->rc == ZOK && i < l->nchildren; i++)
		if (strcmp(l->children[i], BARRIER_READY) != 0)
			members[(*n)++] = pstrdup(l->children[i]);
	finish(&c->children);
	qsort(members, *n, sizeof(char *), name_cmp);
	return members;
}

/* Whether member (a child's name) is one of this backend's nodes. */
static bool
backends_member(const char *member)
{
	return strlen(member) == ZK_TAG_LEN &&
		strncmp(member, bridge_owner(), ZK_OWNER_BACKEND_LEN) == 0;
}

/*
 * Read the other members of a listing in one pipelined round: a zklock
 * member that entered with other parties is an error.  *count gets the
 * members still there, ourselves counted, *oldest the lowest czxid among the
 * others (INT64_MAX if none).  False if a reply was lost: look again.
 *
 * A backend is one member, however many of its nodes there are.  Its other
 * nodes than this call's are left from its failed calls, in a session that
 * ZooKeeper kept longer than the worker judged or through a create whose
 * reply was lost (left_members cannot name those): ours are deleted here,
 * and another zklock backend's count once, as old as its newest.  So no
 * order of deletes and creates in ZooKeeper counts a backend twice.
 */
static bool
read_members(BarrierCall *c, char **members, int n, int *count, int64 *oldest)
{
	const char *own = strrchr(c->member, '/') + 1;
	char	  **backends = palloc(sizeof(char *) * (n + 1));
	int64	   *newest = palloc(sizeof(int64) * (n + 1));
	int			nbackends = 0;

	*count = 1;
	*oldest = PG_INT64_MAX;
	c->gets = palloc0(sizeof(ZkRequest *) * (n + 1));
	c->ngets = 0;
	for (int i = 0; i < n; i++)
	{
		if (strcmp(members[i], own) == 0)
			continue;
		if (backends_member(members[i]))
			delete_if_there(c, psprintf("%s/%s", c->path, members[i]));
		else
			c->gets[c->ngets++] = bridge_get(psprintf("%s/%s", c->path, members[i]));
	}
	for (int i = 0; i < c->ngets; i++)
	{
		ZkRequest  *get = c->gets[i];
		const char *name = strrchr(get->path, '/') + 1;
		NodeInfo	info;
		int			rc;
		int			b;

		if (answer_lost(&c->gets[i], &rc))
		{
			drop_gets(c);
			return false;
		}
		if (rc == ZNONODE)
		{
			finish(&c->gets[i]);
			continue;
		}
		if (rc != ZOK)
			zk_report_error(rc, ZK_ACTION_READ, get->path);
		if (!node_info_parse(get->data, get->data_len, &info) || !info.has_parties)
		{
			(*count)++;
			*oldest = Min(*oldest, get->czxid);
			finish(&c->gets[i]);
			continue;
		}
		if (info.parties != c->parties)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("zklock barrier \"%s\" is in use with %d parties, not %d",
							c->name, info.parties, c->parties),
					 errdetail("Member \"%s\" entered with %d parties.",
							   get->path, info.parties),
					 errhint("Use the same parties for a barrier everywhere.")));
		for (b = 0; b < nbackends; b++)
			if (strncmp(backends[b], name, ZK_OWNER_BACKEND_LEN) == 0)
				break;
		if (b == nbackends)
		{
			backends[nbackends] = pstrdup(name);
			newest[nbackends++] = get->czxid;
			(*count)++;
		}
		else
			newest[b] = Max(newest[b], get->czxid);
		finish(&c->gets[i]);
	}
	for (int b = 0; b < nbackends; b++)
		*oldest = Min(*oldest, newest[b]);
	c->ngets = 0;
	return true;
}

/* Create ready: the members are enough.  Already there is as good. */
static void
create_ready(BarrierCall *c)
{
	for (;;)
	{
		int			rc;

		c->other = bridge_create(c->ready, "", 0, ZOO_PERSISTENT, NULL);
		if (answer_lost(&c->other, &rc))
		{
			barrier_await_reconnect();
			continue;
		}
		finish(&c->other);
		if (rc != ZOK && rc != ZNODEEXISTS)
			zk_report_error(rc, ZK_ACTION_CREATE, c->ready);
		return;
	}
}

/* Wait for ready (our exists watch fires).  False when the time ran out. */
static bool
await_ready(BarrierCall *c)
{
	for (;;)
	{
		long		left = time_left(c);

		if (bridge_exists_events() != c->events)
			return true;
		if (bridge_held_deleted(c->hw))
			confirm_removed(c);
		if (left == 0)
			return false;
		zk_session_wait(left);
		zk_session_check_alive(ZK_BARRIER);
	}
}

/*
 * The look's answers (the exists watch on ready, the listing) in, judge
 * them: true when we may pass, false to wait; *again to look again.
 */
static bool
judge_look(BarrierCall *c, bool *again)
{
	int			rc;
	int64		ready_czxid;
	int			ready_version;
	char	  **members;
	int			n;
	int			count;
	int64		oldest;

	*again = true;
	if (answer_lost(&c->watch, &rc))
	{
		drop(&c->children);
		barrier_await_reconnect();
		return false;
	}
	if (rc != ZOK && rc != ZNONODE)
		zk_report_error(rc, ZK_ACTION_WATCH, c->ready);
	/* Armed either way: on ready, or for its creation. */
	c->watched = c->ready;
	ready_czxid = rc == ZOK ? c->watch->czxid : 0;
	ready_version = c->watch->version;
	finish(&c->watch);
	if (answer_lost(&c->children, &rc))
	{
		unwatch(c);
		barrier_await_reconnect();
		return false;
	}
	members = take_members(c, &n);
	if (!read_members(c, members, n, &count, &oldest))
	{
		barrier_await_reconnect();
		return false;
	}
	*again = false;
	if (ready_czxid != 0)
	{
		/* This round's: made after our node, or after another member's. */
		if (ready_czxid > c->czxid || oldest < ready_czxid)
			return true;
		/* An old round's, left behind: out of the way, and look again. */
		unwatch(c);
		rc = delete_shared(c, c->ready, ready_version);
		if (rc != ZOK && rc != ZNONODE && rc != ZBADVERSION)
			zk_report_error(rc, ZK_ACTION_DELETE, c->ready);
		ereport(LOG,
				(errmsg("zklock: deleted a ready node older than every member of barrier \"%s\"",
						c->path),
				 errdetail("A round in which no member left had left it behind.")));
		*again = true;
		return false;
	}
	if (count >= c->parties)
	{
		create_ready(c);
		return true;
	}
	return false;
}

/*
 * Enter: true once the barrier's members are enough, false if the wait's
 * time ran out first (and then nothing is left).
 */
static bool
enter(BarrierCall *c)
{
	delete_left_members(c);
	zk_session_new_tag(c->tag);
	bridge_set_barrier_wait(BARRIER_ENTERING, c->tag);
	create_member(c);
	for (;;)
	{
		bool		again;

		if (judge_look(c, &again))
			return true;
		if (!again)
			break;
		send_look(c);
	}
	if (await_ready(c))
		return true;

	/* Out of time: leave, unless ready came meanwhile (it counted us). */
	unwatch(c);
	delete_member(c);
	for (;;)
	{
		int			rc;

		c->other = bridge_exists(c->ready);
		if (!answer_lost(&c->other, &rc))
		{
			bool		counted = bridge_exists_events() != c->events ||
				(rc == ZOK && c->other->czxid > c->czxid);

			finish(&c->other);
			return counted;
		}
		barrier_await_reconnect();
	}
}

/* ---- leave ---- */

/*
 * Wait until the member node target is gone: false if the wait's time ran
 * out first.  Returns early on any other watch of ours, to look again.
 */
static bool
await_gone(BarrierCall *c, const char *target)
{
	uint64		events = bridge_watch_events();
	int64		czxid;

	if (!watch_node(c, target, &czxid))
		return true;
	if (!await_watch(c, events))
		return false;
	unwatch(c);
	return true;
}

/* Leave: true once every member has left; false if the time ran out first. */
static bool
leave(BarrierCall *c)
{
	int			rc;

	bridge_set_barrier_wait(BARRIER_LEAVING, c->tag);
	/* ready first, so that no late comer passes on this round's. */
	c->other = bridge_delete_shared(c->ready, -1);
	c->children = bridge_get_children(c->path);
	barrier_await(c->other);
	rc = c->other->rc;
	finish(&c->other);
	if (rc != ZOK && rc != ZNONODE && !bridge_reply_lost(rc))
		zk_report_error(rc, ZK_ACTION_DELETE, c->ready);

	for (;;)
	{
		char	  **members;
		int			n;
		int			own = -1;
		const char *target;

		if (answer_lost(&c->children, &rc))
		{
			barrier_await_reconnect();
			c->children = bridge_get_children(c->path);
			continue;
		}
		members = take_members(c, &n);
		for (int i = 0; c->member != NULL && i < n; i++)
			if (strcmp(members[i], c->tag) == 0)
				own = i;
		if (c->member != NULL && own < 0)
			confirm_removed(c);
		if (n == 0)
			break;
		if (own >= 0 && n == 1)
		{
			delete_member(c);
			break;
		}
		if (own == 0)
			target = members[n - 1];
		else
		{
			if (own > 0)
				delete_member(c);
			target = members[0];
		}
		if (!await_gone(c, psprintf("%s/%s", c->path, target)))
		{
			/* Out of time: gone from the barrier, whatever the others do. */
			unwatch(c);
			if (c->member != NULL)
				delete_member(c);
			return false;
		}
		c->children = bridge_get_children(c->path);
	}
	/* A late comer's, if any: none may outlive the round. */
	delete_if_there(c, c->ready);
	return true;
}

/* ---- gates ---- */

/* Whether the gate at path carries data: ours, after a lost create. */
static bool
gate_is_ours(BarrierCall *c, const char *data)
{
	for (;;)
	{
		int			rc;
		bool		ours;

		c->other = bridge_get(c->path);
		if (answer_lost(&c->other, &rc))
		{
			barrier_await_reconnect();
			continue;
		}
		ours = rc == ZOK && strcmp(c->other->data, data) == 0;
		finish(&c->other);
		return ours;
	}
}

/* Close the gate: true if this call closed it, false if it was closed. */
static bool
close_gate(BarrierCall *c)
{
	char	   *data = node_info_barrier_json("gate", 0);
	char	   *parent = parent_of(c->path);
	bool		whole_path = false;
	bool		lost = false;

	for (int tries = 0;; tries++)
	{
		int			rc;

		if (parent != NULL)
			c->path_creates = zk_send_path_creates(parent, whole_path);
		c->create = bridge_create(c->path, data, strlen(data), ZOO_PERSISTENT, NULL);
		barrier_await(c->create);
		rc = c->create->rc;
		finish(&c->create);
		if (c->path_creates != NULL)
		{
			ZkPathCreates *pc = c->path_creates;

			c->path_creates = NULL;
			if (rc == ZNONODE && whole_path)
				zk_path_creates_finish(pc, bridge_now_ms() + zklock_connect_timeout, NULL);
			else
				zk_path_creates_abandon(pc);
		}
		if (rc == ZOK)
			return true;
		if (rc == ZNODEEXISTS)
			return lost && gate_is_ours(c, data);
		if (bridge_reply_lost(rc))
		{
			lost = true;
			barrier_await_reconnect();
		}
		else if (rc == ZNONODE && parent != NULL && tries < MAX_PARENT_RETRIES)
			whole_path = true;
		else
			zk_report_error(rc, ZK_ACTION_CREATE, c->path);
	}
}

/* Open the gate: true if this call opened it, false if it was open. */
static bool
open_gate(BarrierCall *c)
{
	int			rc = delete_shared(c, c->path, -1);

	if (rc == ZNOTEMPTY)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ZooKeeper node \"%s\" has children: it is not a gate", c->path),
				 errdetail("A gate's node has none; this may be a double barrier's node or a lock's parent."),
				 errhint("Use one recipe per absolute path.")));
	if (rc != ZOK && rc != ZNONODE)
		zk_report_error(rc, ZK_ACTION_DELETE, c->path);
	return rc == ZOK;
}

/*
 * Wait while the gate is closed: true once it is open, or was opened and
 * closed again meanwhile (the node found has another czxid); false if the
 * time ran out first.
 */
static bool
gate_wait(BarrierCall *c)
{
	int64		first = 0;

	for (;;)
	{
		uint64		events = bridge_watch_events();
		int64		czxid;

		if (!watch_node(c, c->path, &czxid))
			return true;
		if (first != 0 && czxid != first)
			return true;
		first = czxid;
		if (!await_watch(c, events))
			return false;
		unwatch(c);
	}
}

/* ---- calls ---- */

/* The name argument (0) of a gate's or barrier's function: its node's path. */
char *
barrier_path_arg(FunctionCallInfo fcinfo, const char *what, const char *place,
				 char **name)
{
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s name must not be null", what)));
	*name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	zklock_check_name_of(what, *name);
	return zklock_place_path(*name, place);
}

static BarrierCall *
call_new(const char *name, const char *path, int timeout_ms)
{
	BarrierCall *c = palloc0(sizeof(BarrierCall));

	c->name = name;
	c->path = path;
	c->ready = psprintf("%s/%s", path, BARRIER_READY);
	c->try_only = timeout_ms == 0;
	c->generation = zk_session_generation();
	if (timeout_ms > 0)
		c->deadline = bridge_now_ms() + timeout_ms;
	return c;
}

typedef bool (*BarrierOp) (BarrierCall *c);

/*
 * Run op in the session, counted in the statistics as a wait of kind (-1:
 * none).  On an error, and when op returns false, nothing of the call is
 * left in ZooKeeper; on true, its member node, if any, stays.
 */
static bool
run_call(BarrierCall *c, BarrierOp op, int kind)
{
	bool		done;

	zk_session_require();
	if (kind >= 0)
		stats_barrier_wait_begin((StatsBarrierKind) kind);
	PG_TRY();
	{
		done = op(c);
	}
	PG_CATCH();
	{
		bridge_set_barrier_wait(BARRIER_INSIDE, NULL);
		stats_barrier_wait_end(STATS_CANCELLED);
		give_up(c);
		PG_RE_THROW();
	}
	PG_END_TRY();
	bridge_set_barrier_wait(BARRIER_INSIDE, NULL);
	stats_barrier_wait_end(done ? STATS_GRANTED : STATS_TIMED_OUT);
	unwatch(c);
	if (!done)
		give_up(c);
	return done;
}

Datum
zk_gate_close(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *path = barrier_path_arg(fcinfo, "gate", GATES_PLACE, &name);

	PG_RETURN_BOOL(run_call(call_new(name, path, 0), close_gate, -1));
}

Datum
zk_gate_open(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *path = barrier_path_arg(fcinfo, "gate", GATES_PLACE, &name);

	PG_RETURN_BOOL(run_call(call_new(name, path, 0), open_gate, -1));
}

Datum
zk_gate_wait(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *path = barrier_path_arg(fcinfo, "gate", GATES_PLACE, &name);
	int			timeout_ms = zklock_timeout_arg(fcinfo, 1);

	PG_RETURN_BOOL(run_call(call_new(name, path, timeout_ms), gate_wait, STATS_GATE));
}

/* ---- memberships ---- */

static Membership *
membership_find(const char *path)
{
	dlist_iter	it;

	dlist_foreach(it, &memberships)
	{
		Membership *m = dlist_container(Membership, node, it.cur);

		if (strcmp(m->path, path) == 0)
			return m;
	}
	return NULL;
}

static void
membership_forget(Membership *m)
{
	dlist_delete(&m->node);
	pfree(m->name);
	pfree(m->path);
	if (m->member)
		pfree(m->member);
	pfree(m);
}

/*
 * ERROR if the membership is no more: its session is gone, or another
 * client deleted its node.  It is forgotten then.
 */
static void
membership_check(Membership *m)
{
	char	   *name = pstrdup(m->name);
	char	   *member = m->member ? pstrdup(m->member) : NULL;

	if (m->generation != zk_session_generation())
	{
		bridge_unwatch_held(m->hw);
		membership_forget(m);
		report_session_lost(name);
	}
	if (member != NULL && bridge_held_deleted(m->hw))
	{
		BarrierCall *c = call_new(name, pstrdup(m->path), 0);

		c->member = member;
		c->generation = m->generation;
		bridge_unwatch_held(m->hw);
		membership_forget(m);
		run_call(c, removed_between_calls, -1);
	}
}

Datum
zk_barrier_enter(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *path = barrier_path_arg(fcinfo, "barrier", BARRIERS_PLACE, &name);
	int			timeout_ms = zklock_timeout_arg(fcinfo, 2);
	Membership *m = membership_find(path);
	BarrierCall *c;
	MemoryContext old;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("parties must not be null")));
	if (PG_GETARG_INT32(1) < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("parties must be at least 1")));
	if (m != NULL)
	{
		membership_check(m);
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this session is already a member of zklock barrier \"%s\"", name),
				 errhint("Leave it with zk_barrier_leave() first.")));
	}

	c = call_new(name, path, timeout_ms);
	c->parties = PG_GETARG_INT32(1);
	c->data = node_info_barrier_json("barrier", c->parties);
	if (!run_call(c, enter, STATS_ENTER))
		PG_RETURN_BOOL(false);

	old = MemoryContextSwitchTo(TopMemoryContext);
	m = palloc0(sizeof(Membership));
	m->name = pstrdup(name);
	m->path = pstrdup(path);
	m->member = c->member ? pstrdup(c->member) : NULL;
	m->czxid = c->czxid;
	m->generation = zk_session_generation();
	m->hw = c->hw;
	dlist_push_tail(&memberships, &m->node);
	MemoryContextSwitchTo(old);
	PG_RETURN_BOOL(true);
}

Datum
zk_barrier_leave(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *path = barrier_path_arg(fcinfo, "barrier", BARRIERS_PLACE, &name);
	int			timeout_ms = zklock_timeout_arg(fcinfo, 1);
	Membership *m = membership_find(path);
	BarrierCall *c;

	if (m == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this session is not a member of zklock barrier \"%s\"", name),
				 errhint("Enter it with zk_barrier_enter() first.")));
	membership_check(m);

	/* From here on the call owns the node: the membership ends whatever happens. */
	c = call_new(name, path, timeout_ms);
	if (m->member != NULL)
	{
		c->member = pstrdup(m->member);
		strlcpy(c->tag, strrchr(m->member, '/') + 1, sizeof(c->tag));
	}
	c->czxid = m->czxid;
	c->generation = m->generation;
	c->hw = m->hw;
	membership_forget(m);
	PG_RETURN_BOOL(run_call(c, leave, STATS_LEAVE));
}

/*
 * DISCARD ALL: the session's memberships end, their nodes deleted without
 * waiting.  Never raises.
 */
void
barrier_discard_all(void)
{
	dlist_mutable_iter it;

	dlist_foreach_modify(it, &memberships)
	{
		Membership *m = dlist_container(Membership, node, it.cur);

		bridge_unwatch_held(m->hw);
		if (m->member != NULL)
			bridge_delete_node(m->member);
		membership_forget(m);
	}
}
