/*
 * deadlock.c
 *	  Cluster-wide deadlock detection: a backend that has waited
 *	  deadlock_timeout for a zklock lock looks for a cycle of waits through
 *	  itself, across every PostgreSQL node that shares the ensemble.
 *
 * Publishing.  Only then does it publish its wait: an ephemeral node
 * <zklock.root>/%waits/<key>, key being what the names of all lock nodes of
 * its ZooKeeper session begin with ("_c_" and the session part of the
 * attempt tag), holding the lock's parent, its node there and that node's
 * czxid.  A wait shorter than deadlock_timeout costs no request; the entry
 * goes with the wait, and with the session.  "%waits" is not the encoding of
 * any lock name, so it is never listed as a lock.
 *
 * Reading the graph.  Each queue on the way is listed once per look.  In a
 * queue, the nodes that keep a waiting node from holding, directly or
 * through other waiting nodes of that queue, follow from the listing alone
 * (for an exclusive wait every node below it; for a shared one every node
 * below the nearest exclusive node of another backend, and that one): a
 * node that does not hold waits right there, so only the owners of the
 * nodes that hold are read about, by their published waits (one pipelined
 * get each), which tell where they wait in turn; and so on, breadth first,
 * one round of listings and one of gets per step, until the look meets
 * itself again.  One look thus costs a listing per queue and a get per
 * holder on the way, however long the queues are.  Nodes of clients that
 * publish nothing (Curator, Kazoo, zklock backends that have not waited
 * long) end a path: they cannot cause a false alarm.
 *
 * Verifying.  A cycle found is read once more: every waiting node and every
 * blocking node on it (and the node between them, for a shared wait behind
 * an exclusive one) must still exist, read after the whole graph was read.
 * A queue's node never comes back once deleted, and a waiting node's
 * blockers only ever go, so all of them existed at one moment: every member
 * then waited for the next, none could move, and the cycle was real.
 *
 * The victim.  Every member that finds the cycle picks the same one: the
 * member whose wait began last (the highest czxid of its waiting node, read
 * from the node's own stat in the verification pass, not from what the
 * member published).  Only that one fails with 40P01.  The others rewrite
 * its published wait with the same data, if its version is still the one
 * they read, which its data watch turns into a poke: it looks again, finds
 * the cycle and gives up.  A cycle is thus broken exactly once, also when
 * the members' deadlock_timeout differ and the newest member looked before
 * the others had published.  A look reads as far as the graph goes and
 * deals with every cycle through the looking backend (one through each
 * member that waits for it): the last member of two cycles to publish its
 * wait breaks both at once.
 *
 * Looking again.  Waits are published late (only after deadlock_timeout),
 * so PostgreSQL's rule, that the last member to join a cycle sees it, does
 * not hold: every member may have looked before the others published, or
 * the victim's poke may be refused (an ACL).  So a waiter looks again while
 * it waits: deadlock_timeout after its first look, then after twice that,
 * four times, up to sixteen times deadlock_timeout between looks.  Every
 * cycle that exists is found by the next look of one of its members.  The
 * wait keeps one watch for pokes, set again only after a poke fired it, and
 * each look allocates in a memory context of its own: a wait of a day costs
 * what a wait of a second costs.
 *
 * Nothing read is trusted: a published wait is used only if it is
 * well-formed and names a node of its member's own (by the key in the
 * node's name); a queue that cannot be read ends that path.  Only a reply
 * lost with the connection, or not given within zklock.connect_timeout of
 * its request's sending (the bound of every round trip of a call), cuts a
 * look short, and nothing a look does, publishing included, raises an error
 * other than the victim's 40P01.
 *
 * Semaphores.  The head waiter of a semaphore (the others wait at its gate,
 * an exclusive lock, for it) waits for any one of the leases that hold to
 * go: it is stuck only if every one of them is.  A look follows each of
 * them, and a cycle through the waiter counts only if every holding lease
 * is the next member's on the cycle, the looking backend's or the waiter's
 * own; all of them are read again with the cycle.  A cycle whose other
 * permits are held by backends off the cycle is not seen: they may let go.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "utils/array.h"
#include "utils/fmgrprotos.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

#include "deadlock.h"
#include "guc.h"
#include "lock_node.h"
#include "node_info.h"
#include "stats.h"
#include "zk_bridge.h"
#include "zk_nodes.h"
#include "zk_session.h"

#define WAITS_DIR "%waits"

/* Bound on the backends one check reads about. */
#define MAX_MEMBERS 1000
/* ... and on the local backends it follows through PostgreSQL's locks. */
#define MAX_LOCAL_WAITERS 100

/* A waiting backend met on the way, the checking one first. */
typedef struct Member
{
	char		key[ZK_SESSION_KEY_LEN + 1];
	bool		waits;			/* its published wait was read */
	char	   *parent;			/* the lock it waits for */
	const char *node;		/* its node there, a name below parent */
	char	   *name;			/* the lock's name */
	LockMode	mode;
	int64		czxid;			/* of node: when its wait began */
	char	   *who;			/* "process N on node" */
	char	   *entry;			/* path of its published wait */
	char	   *data;			/* and its data, to poke it with */
	int			data_len;
	int			version;		/* ... and its version */
	int			via;			/* the member that waits for this one */
	char	   *via_blocker;	/* this one's node in via's lock */
	char	   *via_middle;		/* the node between them there, or NULL */
	bool		via_holds;		/* whether via_blocker holds the lock */
	char	  **holders;		/* a semaphore's: the leases it waits for */
	int			nholders;
	ZkRequest  *req;			/* in flight: its published wait */
} Member;

/* A lock's queue, listed once per look. */
typedef struct Queue
{
	const char *parent;
	ZkRequest  *req;			/* the listing, until answered */
	int			n;				/* its nodes, in lock_node_order */
	char	  **names;
	LockMode   *modes;
	char	  (*keys)[ZK_SESSION_KEY_LEN + 1];	/* "" for foreign names */
	int			first_exclusive;	/* index, n if none */
	int			second_exclusive;	/* the first one of another key, n if
									 * none */
} Queue;

/* Where a node of a queue leads a member waiting in it. */
typedef struct Blocker
{
	int			index;			/* the node */
	int			middle;			/* the node between, -1 if it blocks directly */
} Blocker;

/*
 * A member that waits for us: the last edge of a cycle through us.  Either
 * in a zklock queue, or (blocker NULL) for a PostgreSQL lock of this server
 * that we hold, directly or through other local backends' lock waits.
 */
typedef struct Closing
{
	int			member;
	char	   *blocker;		/* our node in its lock */
	char	   *middle;			/* the node between, or NULL */
	bool		holds;			/* whether our node holds that lock */
	pid_t		local_pid;		/* for a PostgreSQL lock: the member's pid */
} Closing;

typedef struct Graph
{
	DeadlockWait *w;
	int			failed;			/* a reply that ended the reading early */
	Member	   *members;
	int			nmembers;
	Queue	   *queues;
	int			nqueues;
	Closing    *closings;		/* one per member that waits for us */
	int			nclosings;
} Graph;

static const char *
waits_dir(void)
{
	return psprintf("%s/%s", zklock_root, WAITS_DIR);
}

/* How a backend is named in the report: "process N on <node>". */
static char *
describe(const NodeInfo *info)
{
	char	   *owner = node_info_owner(info);
	char	   *slash = owner ? strrchr(owner, '/') : NULL;

	if (slash == NULL)
		return psprintf("process %d", info->pid);
	*slash = '\0';
	return psprintf("process %d on %s", info->pid, owner);
}

/* The document of our published wait. */
static char *
entry_json(DeadlockWait *w)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"name\":");
	escape_json(&buf, w->name);
	appendStringInfoString(&buf, ",\"lock\":");
	escape_json(&buf, w->parent);
	appendStringInfoString(&buf, ",\"node\":");
	escape_json(&buf, strrchr(w->node, '/') + 1);
	appendStringInfo(&buf, ",\"czxid\":" INT64_FORMAT ",\"mode\":\"%s\",",
					 w->czxid, lock_mode_names[w->mode]);
	node_info_append_owner(&buf);
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

/*
 * The deadline of a look's round trip begun at start: zklock.connect_timeout
 * later, as for every round trip of a call, or the acquisition's deadline
 * if that comes first.
 */
static int64
round_trip_deadline(DeadlockWait *w, int64 start)
{
	int64		deadline = start + zklock_connect_timeout;

	return w->deadline != 0 && w->deadline < deadline ? w->deadline : deadline;
}

/* A look cut short is tried again after another deadlock_timeout. */
static void
look_again_soon(DeadlockWait *w)
{
	w->retry_at = bridge_now_ms() + DeadlockTimeout;
}

/*
 * Wait for a reply.  One that does not come in time cuts the look short, as
 * a lost connection does.
 */
static bool
await_reply(DeadlockWait *w, ZkRequest *req)
{
	if (zk_session_await(req, round_trip_deadline(w, req->sent_at),
						 ZK_LOOKING_FOR_DEADLOCK))
		return true;
	look_again_soon(w);
	return false;
}

/* The LOG line of a request of a look that failed: one sentence per action. */
static int
look_failed_message(ZkAction action, const char *path, int rc)
{
	switch (action)
	{
		case ZK_ACTION_CREATE:
			return errmsg("zklock: could not publish a wait in \"%s\" while looking for a deadlock: %s",
						  path, zerror(rc));
		case ZK_ACTION_LIST:
			return errmsg("zklock: could not list children of \"%s\" while looking for a deadlock: %s",
						  path, zerror(rc));
		case ZK_ACTION_READ:
			return errmsg("zklock: could not read \"%s\" while looking for a deadlock: %s",
						  path, zerror(rc));
		case ZK_ACTION_WATCH:
			return errmsg("zklock: could not watch \"%s\" while looking for a deadlock: %s",
						  path, zerror(rc));
		case ZK_ACTION_WRITE:
			return errmsg("zklock: could not write \"%s\" while looking for a deadlock: %s",
						  path, zerror(rc));
		case ZK_ACTION_DELETE:
			return errmsg("zklock: could not delete \"%s\" while looking for a deadlock: %s",
						  path, zerror(rc));
	}
	return 0;
}

/*
 * A look cut short by a reply lost with the connection is tried again after
 * another deadlock_timeout: the wait goes on, and the cycle may still be
 * there.  Other errors (an ACL, say) are logged once; the wait goes on
 * unchecked.  A deadlock check never fails the wait it checks.
 */
static void
look_cut_short(DeadlockWait *w, int rc, ZkAction action, const char *path)
{
	if (bridge_reply_lost(rc) || rc == ZSESSIONEXPIRED)
		look_again_soon(w);
	else
		ereport(LOG, look_failed_message(action, path, rc));
}

/*
 * Publish our wait and watch it for pokes.  False if that could not be done
 * in time or at all; the wait goes on.
 */
static bool
publish(DeadlockWait *w, const char *data)
{
	int			rc = ZOK;

	if (w->entry == NULL)
		return false;
	for (int tries = 0; tries < 3; tries++)
	{
		ZkRequest  *req = bridge_create(w->entry, data, strlen(data), ZOO_EPHEMERAL, NULL);

		if (!await_reply(w, req))
		{
			bridge_abandon(req);
			return false;
		}
		rc = req->rc;
		bridge_free(req);
		if (rc == ZNODEEXISTS)
		{
			/* Ours: a lost reply's create, or a withdrawal under way. */
			req = bridge_set(w->entry, data, strlen(data), -1);
			if (!await_reply(w, req))
			{
				bridge_abandon(req);
				return false;
			}
			rc = req->rc;
			bridge_free(req);
		}
		if (rc != ZNONODE)
			break;
		/* Its errors (an ACL, say) are this look's, not the wait's. */
		rc = ZOK;
		if (!zk_create_path(waits_dir(), round_trip_deadline(w, bridge_now_ms()), &rc))
		{
			look_again_soon(w);
			return false;
		}
		if (rc != ZOK)
			break;
	}
	if (rc == ZOK)
	{
		ZkRequest  *watch = bridge_watch_pokes(w->entry);

		if (!await_reply(w, watch))
		{
			bridge_abandon(watch);
			return false;
		}
		rc = watch->rc;
		bridge_free(watch);
	}
	w->published = rc == ZOK;
	if (!w->published)
		look_cut_short(w, rc, ZK_ACTION_CREATE, w->entry);
	return w->published;
}

static int
find_member(Graph *g, const char *key)
{
	for (int i = 0; i < g->nmembers; i++)
		if (strcmp(g->members[i].key, key) == 0)
			return i;
	return -1;
}

/* A new closing through member: a cycle through us ends with it. */
static Closing *
add_closing(Graph *g, int member)
{
	Closing    *cl = &g->closings[g->nclosings++];

	memset(cl, 0, sizeof(*cl));
	cl->member = member;
	return cl;
}

/* The queue of parent, listed (or asked for) in this look. */
static Queue *
queue_of(Graph *g, const char *parent)
{
	Queue	   *q;

	for (int i = 0; i < g->nqueues; i++)
		if (strcmp(g->queues[i].parent, parent) == 0)
			return &g->queues[i];
	if (g->nqueues == MAX_MEMBERS)
		return NULL;
	q = &g->queues[g->nqueues++];
	memset(q, 0, sizeof(*q));
	q->parent = parent;
	q->req = bridge_get_children(parent);
	return q;
}

/*
 * The queue's listing came: keep its nodes in order with their modes and
 * owners.  False if the look is to end (a lost reply); a queue that cannot
 * be read otherwise (one this session may not list, named by a wait entry
 * anyone could have written) is empty: it ends its paths only.
 */
static bool
take_listing(Graph *g, Queue *q)
{
	ZkRequest  *req = q->req;
	int			n = req->rc == ZOK ? req->nchildren : 0;

	q->req = NULL;
	if (req->rc != ZOK && req->rc != ZNONODE)
	{
		look_cut_short(g->w, req->rc, ZK_ACTION_LIST, q->parent);
		if (bridge_reply_lost(req->rc) || req->rc == ZSESSIONEXPIRED)
			g->failed = req->rc;
	}
	q->names = palloc(sizeof(char *) * (n + 1));
	for (int c = 0; c < n; c++)
		q->names[c] = pstrdup(req->children[c]);
	bridge_free(req);
	qsort(q->names, n, sizeof(char *), lock_node_order);
	q->n = 0;
	for (int c = 0; c < n; c++)
		if (lock_node_sequence(q->names[c]) >= 0)
			q->names[q->n++] = q->names[c];
	q->modes = palloc(sizeof(LockMode) * (q->n + 1));
	q->keys = palloc(sizeof(*q->keys) * (q->n + 1));
	q->first_exclusive = q->second_exclusive = q->n;
	for (int c = 0; c < q->n; c++)
	{
		q->modes[c] = lock_node_mode(q->names[c]);
		if (!lock_node_session_key(q->names[c], q->keys[c]))
			q->keys[c][0] = '\0';
		if (q->modes[c] != LOCK_MODE_SHARED)
		{
			if (q->first_exclusive == q->n)
				q->first_exclusive = c;
			else if (q->second_exclusive == q->n &&
					 strcmp(q->keys[c], q->keys[q->first_exclusive]) != 0)
				q->second_exclusive = c;
		}
	}
	return g->failed == 0;
}

/*
 * Whether node c of q holds the lock (lock_node_blocks: an exclusive node
 * when first, a shared one when no exclusive node of another backend is
 * below it).
 */
static bool
queue_node_holds(const Queue *q, int c)
{
	if (q->modes[c] != LOCK_MODE_SHARED)
		return c == 0;
	if (q->first_exclusive >= c)
		return true;
	return strcmp(q->keys[q->first_exclusive], q->keys[c]) == 0 &&
		q->second_exclusive >= c;
}

/*
 * The nodes of q that keep node s from holding, directly or through waiting
 * nodes of q, each with the node it blocks s through (see the file header).
 * Returns how many went to out (room for s of them).
 */
static int
queue_blockers(const Queue *q, int s, Blocker *out)
{
	int			n = 0;
	int			middle = -1;	/* for a shared wait: the nearest exclusive
								 * node of another backend below it */

	for (int c = s - 1; c >= 0; c--)
	{
		bool		direct = q->modes[c] != LOCK_MODE_SHARED &&
			(q->modes[s] != LOCK_MODE_SHARED || strcmp(q->keys[c], q->keys[s]) != 0);

		if (direct || q->modes[s] != LOCK_MODE_SHARED)
			out[n++] = (Blocker) {c, -1};
		else if (middle >= 0)
			out[n++] = (Blocker) {c, middle};
		/* A foreign node blocks, but it waits for nothing we know of. */
		if (direct && middle < 0 && q->keys[c][0] != '\0')
			middle = c;
	}
	return n;
}

/*
 * A semaphore's waiting lease s (of member m) waits for every lease that
 * holds (the first permits ones): it is stuck only if all of them are (see
 * the file header).  They go to *out, and to m->holders; none (0) if one
 * of them is a foreign node, which nothing can tell us about, or if s holds.
 */
static int
lease_holders(const Queue *q, int s, Member *m, Blocker **out)
{
	int			permits = lock_node_permits(q->names[s]);

	*out = NULL;
	if (permits <= 0 || s < permits)
		return 0;
	for (int c = 0; c < permits; c++)
		if (q->keys[c][0] == '\0')
			return 0;
	*out = palloc(sizeof(Blocker) * permits);
	m->holders = palloc(sizeof(char *) * permits);
	for (int c = 0; c < permits; c++)
	{
		(*out)[c] = (Blocker) {c, -1};
		m->holders[c] = q->names[c];
	}
	m->nholders = permits;
	return permits;
}

/*
 * Member i's queue was listed: meet the owners of the nodes that keep it
 * from holding.  If one of them is the checking backend, a cycle closes.
 * Of the others, only those whose node holds the lock are read about: the
 * rest wait in this queue, behind nodes met here too.
 */
static void
follow_blockers(Graph *g, int i)
{
	Member	   *m = &g->members[i];
	Queue	   *q = queue_of(g, m->parent);
	Blocker    *blockers;
	int			s = -1;
	int			n;

	for (int c = 0; q != NULL && c < q->n && s < 0; c++)
		if (strcmp(q->names[c], m->node) == 0)
			s = c;
	/* Its node is gone: so is its wait. */
	if (s < 0)
		return;
	if (m->mode == LOCK_MODE_SEMAPHORE)
		n = lease_holders(q, s, m, &blockers);
	else
	{
		blockers = palloc(sizeof(Blocker) * s);
		n = queue_blockers(q, s, blockers);
	}
	for (int k = 0; k < n; k++)
	{
		int			c = blockers[k].index;
		char	   *middle = blockers[k].middle >= 0 ? q->names[blockers[k].middle] : NULL;
		const char *key = q->keys[c];
		Member	   *b;

		if (key[0] == '\0' || strcmp(key, m->key) == 0)
			continue;
		if (strcmp(key, g->members[0].key) == 0)
		{
			Closing    *cl = add_closing(g, i);

			cl->blocker = q->names[c];
			cl->middle = middle;
			cl->holds = queue_node_holds(q, c);
			/* One cycle through each member is enough. */
			break;
		}
		if (!queue_node_holds(q, c) || find_member(g, key) >= 0 ||
			g->nmembers == MAX_MEMBERS)
			continue;
		b = &g->members[g->nmembers++];
		memset(b, 0, sizeof(*b));
		strlcpy(b->key, key, sizeof(b->key));
		b->via = i;
		b->via_blocker = q->names[c];
		b->via_middle = middle;
		b->via_holds = true;
		b->entry = psprintf("%s/%s", waits_dir(), key);
		b->req = bridge_get(b->entry);
	}
}

/*
 * Whether the local backend pid waits for us through PostgreSQL's
 * heavyweight locks (as pg_blocking_pids sees them), directly or through
 * other local backends that wait for such locks.
 */
static bool
waits_locally_for_us(pid_t pid)
{
	List	   *todo = list_make1_int(pid);
	List	   *seen = NIL;

	while (todo != NIL && list_length(seen) < MAX_LOCAL_WAITERS)
	{
		int			p = linitial_int(todo);
		PGPROC	   *proc;
		ArrayType  *blockers;
		Datum	   *pids;
		int			nblockers;

		todo = list_delete_first(todo);
		if (list_member_int(seen, p))
			continue;
		seen = lappend_int(seen, p);
		proc = BackendPidGetProc(p);
		if (proc == NULL || (proc->wait_event_info & 0xFF000000) != PG_WAIT_LOCK)
			continue;
		blockers = DatumGetArrayTypeP(DirectFunctionCall1(pg_blocking_pids,
														  Int32GetDatum(p)));
		deconstruct_array(blockers, INT4OID, sizeof(int32), true, TYPALIGN_INT,
						  &pids, NULL, &nblockers);
		for (int i = 0; i < nblockers; i++)
		{
			if (DatumGetInt32(pids[i]) == MyProcPid)
				return true;
			todo = lappend_int(todo, DatumGetInt32(pids[i]));
		}
	}
	return false;
}

/*
 * Member m holds a lock on the way but waits for no zklock lock.  If it is a
 * backend of this server that waits for us through PostgreSQL's own locks,
 * a cycle closes (PostgreSQL's detector cannot see it: its part of the
 * cycle ends in a backend that waits in zklock).
 */
static void
follow_local_locks(Graph *g, Member *m)
{
	pid_t		pid = bridge_local_pid(m->key + 3);

	if (pid != 0 && pid != MyProcPid && waits_locally_for_us(pid))
	{
		add_closing(g, m - g->members)->local_pid = pid;
		m->who = psprintf("process %d on this server", (int) pid);
	}
}

/* A member's published wait was read: where it waits, if it does. */
static void
read_entry(Graph *g, Member *m)
{
	ZkRequest  *req = m->req;
	NodeInfo	info;
	char		key[ZK_SESSION_KEY_LEN + 1];

	m->req = NULL;

	/*
	 * Anyone may have written the entry: it counts only if well-formed, and
	 * if the node it says the member waits with is one of the member's own
	 * (its name begins with the member's key).
	 */
	if (req->rc == ZOK &&
		node_info_parse(req->data, req->data_len, &info) &&
		info.lock != NULL && info.node != NULL && info.has_czxid &&
		info.has_pid && info.mode != NULL &&
		(strcmp(info.mode, lock_mode_names[LOCK_MODE_EXCLUSIVE]) == 0 ||
		 strcmp(info.mode, lock_mode_names[LOCK_MODE_SHARED]) == 0 ||
		 strcmp(info.mode, lock_mode_names[LOCK_MODE_SEMAPHORE]) == 0) &&
		lock_node_sequence(info.node) >= 0 &&
		lock_node_session_key(info.node, key) && strcmp(key, m->key) == 0 &&
		info.lock[0] == '/' && strchr(info.node, '/') == NULL)
	{
		m->waits = true;
		m->parent = info.lock;
		m->node = info.node;
		m->name = info.name ? info.name : info.lock;
		m->mode = strcmp(info.mode, lock_mode_names[LOCK_MODE_SHARED]) == 0 ?
			LOCK_MODE_SHARED :
			strcmp(info.mode, lock_mode_names[LOCK_MODE_SEMAPHORE]) == 0 ?
			LOCK_MODE_SEMAPHORE : LOCK_MODE_EXCLUSIVE;
		m->czxid = info.czxid;
		m->who = describe(&info);
		m->data = pnstrdup(req->data, req->data_len);
		m->data_len = req->data_len;
		m->version = req->version;
	}
	else if (req->rc != ZOK && req->rc != ZNONODE)
	{
		look_cut_short(g->w, req->rc, ZK_ACTION_READ, m->entry);
		if (bridge_reply_lost(req->rc) || req->rc == ZSESSIONEXPIRED)
			g->failed = req->rc;
	}
	else
		follow_local_locks(g, m);
	bridge_free(req);
}

static void
abandon_requests(Graph *g)
{
	for (int i = 0; i < g->nmembers; i++)
		if (g->members[i].req)
		{
			bridge_abandon(g->members[i].req);
			g->members[i].req = NULL;
		}
	for (int i = 0; i < g->nqueues; i++)
		if (g->queues[i].req)
		{
			bridge_abandon(g->queues[i].req);
			g->queues[i].req = NULL;
		}
}

/*
 * Read the wait-for graph breadth first from our own wait, as far as it
 * goes, noting every member that waits for us (g->closings): each closes a
 * cycle through us.  False if the look was cut short (also when the
 * acquisition's deadline passed).
 */
static bool
find_cycle(Graph *g)
{
	int			first = 0;
	int			last = 1;		/* this round: members [first, last) */

	while (first < last)
	{
		int			listed = g->nqueues;

		for (int i = first; i < last; i++)
			if (g->members[i].waits)
				(void) queue_of(g, g->members[i].parent);
		for (int i = listed; i < g->nqueues; i++)
		{
			if (!await_reply(g->w, g->queues[i].req))
				return false;
			if (!take_listing(g, &g->queues[i]))
				return false;
		}
		for (int i = first; i < last; i++)
			if (g->members[i].waits)
				follow_blockers(g, i);
		for (int i = last; i < g->nmembers; i++)
		{
			if (!await_reply(g->w, g->members[i].req))
				return false;
			read_entry(g, &g->members[i]);
			if (g->failed)
				return false;
		}
		first = last;
		last = g->nmembers;
	}
	return true;
}

/* The members on the cycle, from us: path[0] is 0, each waits for the next. */
static int
cycle_path(Graph *g, const Closing *cl, int *path)
{
	int			n = 0;

	for (int i = cl->member; i != 0; i = g->members[i].via)
		path[n++] = i;
	path[n++] = 0;
	for (int a = 0, b = n - 1; a < b; a++, b--)
	{
		int			t = path[a];

		path[a] = path[b];
		path[b] = t;
	}
	return n;
}

/* The node that blocks path[k] on the cycle: the next member's, in its lock. */
static const char *
blocker_on_path(Graph *g, const Closing *cl, int *path, int n, int k)
{
	return k + 1 < n ? g->members[path[k + 1]].via_blocker : cl->blocker;
}

/* The node through which that one blocks path[k], or NULL. */
static const char *
middle_on_path(Graph *g, const Closing *cl, int *path, int n, int k)
{
	return k + 1 < n ? g->members[path[k + 1]].via_middle : cl->middle;
}

/*
 * A cycle through a semaphore's waiter holds only if every lease it waits for
 * is the next member's on the cycle, ours or its own: the looks follow one
 * lease of each, and a lease of anyone else may go.
 */
static bool
leases_on_cycle(Graph *g, int *path, int n)
{
	for (int k = 0; k < n; k++)
	{
		Member	   *m = &g->members[path[k]];
		const char *next = g->members[path[(k + 1) % n]].key;

		for (int h = 0; h < m->nholders; h++)
		{
			char		key[ZK_SESSION_KEY_LEN + 1];

			if (!lock_node_session_key(m->holders[h], key) ||
				(strcmp(key, next) != 0 && strcmp(key, g->members[0].key) != 0 &&
				 strcmp(key, m->key) != 0))
				return false;
		}
	}
	return true;
}

/*
 * The nodes of a cycle to read again: each member's waiting node (whose
 * member's k goes to owners; -1 for the others), the node that blocks it,
 * the one between, and a semaphore waiter's holding leases.
 */
static int
cycle_nodes(Graph *g, const Closing *cl, int *path, int n, char ***nodes,
			int **owners)
{
	int			max = 0;
	int			count = 0;

	for (int k = 0; k < n; k++)
		max += 3 + g->members[path[k]].nholders;
	*nodes = palloc(sizeof(char *) * (max + 1));
	*owners = palloc(sizeof(int) * (max + 1));
	for (int k = 0; k < n; k++)
	{
		Member	   *m = &g->members[path[k]];
		const char *blocker = blocker_on_path(g, cl, path, n, k);
		const char *middle = middle_on_path(g, cl, path, n, k);

		/* A local member waits for a PostgreSQL lock: read again below. */
		if (!m->waits)
			continue;
		(*owners)[count] = k;
		(*nodes)[count++] = psprintf("%s/%s", m->parent, m->node);
		(*owners)[count] = -1;
		(*nodes)[count++] = psprintf("%s/%s", m->parent, blocker);
		if (middle != NULL)
		{
			(*owners)[count] = -1;
			(*nodes)[count++] = psprintf("%s/%s", m->parent, middle);
		}
		for (int h = 0; h < m->nholders; h++)
		{
			/* The blocker is one of them: read once. */
			if (strcmp(m->holders[h], blocker) == 0)
				continue;
			(*owners)[count] = -1;
			(*nodes)[count++] = psprintf("%s/%s", m->parent, m->holders[h]);
		}
	}
	return count;
}

/*
 * Read every node of the cycle once more, after the whole graph: true if
 * they all still exist (see the file header).  False also if the deadline
 * passed.  czxids[k] gets the czxid of path[k]'s waiting node, from the
 * node itself, not from what its member published.
 */
static bool
still_there(Graph *g, const Closing *cl, int *path, int n, bool *real,
			int64 *czxids)
{
	char	  **nodes;
	int		   *owners;
	int			nreqs = cycle_nodes(g, cl, path, n, &nodes, &owners);
	ZkRequest **reqs;
	volatile bool answered = true;

	reqs = palloc0(sizeof(ZkRequest *) * (nreqs + 1));
	*real = true;
	PG_TRY();
	{
		for (int r = 0; r < nreqs; r++)
			reqs[r] = bridge_exists(nodes[r]);
		for (int r = 0; r < nreqs && answered; r++)
		{
			int			k = owners[r];

			answered = await_reply(g->w, reqs[r]);
			if (answered && reqs[r]->rc == ZOK && k >= 0)
				czxids[k] = reqs[r]->czxid;
			if (answered && reqs[r]->rc != ZOK)
			{
				*real = false;
				if (reqs[r]->rc != ZNONODE)
					look_cut_short(g->w, reqs[r]->rc, ZK_ACTION_READ, reqs[r]->path);
			}
		}
	}
	PG_FINALLY();
	{
		for (int r = 0; r < nreqs; r++)
			if (reqs[r] != NULL)
			{
				if (bridge_done(reqs[r]))
					bridge_free(reqs[r]);
				else
					bridge_abandon(reqs[r]);
			}
	}
	PG_END_TRY();
	if (answered && *real && cl->local_pid != 0)
		*real = waits_locally_for_us(cl->local_pid);
	return answered;
}

/*
 * Make the victim look again (it may have looked too early) by rewriting its
 * published wait with what we read, only if nobody changed it since: a
 * newer entry is a newer wait, which looks on its own.  A poke refused (an
 * ACL) is logged; the victim's own later looks break the cycle then.
 */
static void
poke(DeadlockWait *w, Member *victim)
{
	ZkRequest  *req = bridge_set(victim->entry, victim->data,
								 victim->data_len, victim->version);

	if (!await_reply(w, req))
	{
		bridge_abandon(req);
		return;
	}
	if (req->rc != ZOK && req->rc != ZBADVERSION && req->rc != ZNONODE &&
		!bridge_reply_lost(req->rc))
		ereport(LOG,
				(errmsg("zklock: could not ask %s to look for a deadlock again: %s",
						victim->who, zerror(req->rc)),
				 errdetail("It looks again on its own later while it waits.")));
	bridge_free(req);
}

/* The 40P01 error of the victim, naming every member of the cycle. */
static void
report_deadlock(Graph *g, const Closing *cl, int *path, int n)
{
	StringInfoData detail;

	initStringInfo(&detail);
	for (int k = 0; k < n; k++)
	{
		Member	   *m = &g->members[path[k]];
		Member	   *next = &g->members[path[(k + 1) % n]];
		Member	   *prev = &g->members[path[(k + n - 1) % n]];
		bool		holding = k > 0 ? m->via_holds : cl->holds;
		char	   *held = prev->mode == LOCK_MODE_SEMAPHORE ?
			psprintf("a permit of zklock semaphore \"%s\"", prev->name) :
			psprintf("zklock lock \"%s\"", prev->name);
		char	   *wanted = m->mode == LOCK_MODE_SEMAPHORE ?
			psprintf("a permit of zklock semaphore \"%s\"", m->name) :
			psprintf("%s zklock lock \"%s\"", lock_mode_names[m->mode], m->name);

		if (k > 0)
			appendStringInfoChar(&detail, '\n');
		if (k == 0 && cl->local_pid != 0)
			appendStringInfo(&detail,
							 "%c%s holds a PostgreSQL lock that %s waits for, directly or not, and waits for %s; blocked by %s.",
							 pg_toupper((unsigned char) m->who[0]), m->who + 1,
							 prev->who, wanted, next->who);
		else if (!m->waits)
			appendStringInfo(&detail,
							 "%c%s %s %s and waits for a PostgreSQL lock; blocked by %s, directly or not.",
							 pg_toupper((unsigned char) m->who[0]), m->who + 1,
							 holding ? "holds" : "is queued ahead for",
							 held, next->who);
		else
			appendStringInfo(&detail,
							 "%c%s %s %s and waits for %s; blocked by %s.",
							 pg_toupper((unsigned char) m->who[0]), m->who + 1,
							 holding ? "holds" : "is queued ahead for",
							 held, wanted, next->who);
	}
	stats_deadlock_checked(g->nmembers, 1, 1, true);
	ereport(ERROR,
			(errcode(ERRCODE_T_R_DEADLOCK_DETECTED),
			 errmsg("deadlock detected"),
			 errdetail_internal("%s", detail.data),
			 errhint("The backends wait for each other's zklock locks across PostgreSQL nodes; take locks in the same order everywhere.")));
}

/*
 * One look: publish the wait (the first time) and look for the cycles
 * through it.  ERROR 40P01 if we are the victim of one; the victims of the
 * others are poked.  Returns otherwise, also when the deadline passed
 * meanwhile.
 */
static void
look(DeadlockWait *w)
{
	char	   *data = entry_json(w);
	Graph		g = {0};
	Member	   *self;
	NodeInfo	info;
	int		   *path;
	int64	   *czxids;
	int		   *victims;
	int			nvictims = 0;
	int			ncycles = 0;

	if (!w->published)
	{
		if (!publish(w, data))
			return;
	}
	else if (w->rearm)
	{
		/* A poke used the watch up: set it again before looking. */
		ZkRequest  *watch = bridge_watch_pokes(w->entry);
		int			rc;

		if (!await_reply(w, watch))
		{
			bridge_abandon(watch);
			return;
		}
		rc = watch->rc;
		bridge_free(watch);
		if (rc != ZOK)
		{
			look_cut_short(w, rc, ZK_ACTION_WATCH, w->entry);
			return;
		}
		w->rearm = false;
	}

	g.w = w;
	g.members = palloc(sizeof(Member) * MAX_MEMBERS);
	g.closings = palloc(sizeof(Closing) * MAX_MEMBERS);
	g.nmembers = 1;
	g.queues = palloc(sizeof(Queue) * MAX_MEMBERS);
	self = &g.members[0];
	memset(self, 0, sizeof(*self));
	lock_node_session_key(w->node, self->key);
	self->waits = true;
	self->parent = (char *) w->parent;
	self->node = strrchr(w->node, '/') + 1;
	self->name = (char *) w->name;
	self->mode = w->mode;
	self->czxid = w->czxid;
	self->via = -1;
	node_info_parse(data, strlen(data), &info);
	self->who = describe(&info);

	PG_TRY();
	{
		(void) find_cycle(&g);
	}
	PG_FINALLY();
	{
		abandon_requests(&g);
	}
	PG_END_TRY();

	/*
	 * Each cycle, read again, has its own victim: if we are one, our 40P01
	 * breaks every cycle through us; otherwise every victim is poked, once.
	 */
	path = palloc(sizeof(int) * g.nmembers);
	czxids = palloc(sizeof(int64) * g.nmembers);
	victims = palloc(sizeof(int) * (g.nclosings + 1));
	for (int c = 0; c < g.nclosings; c++)
	{
		const Closing *cl = &g.closings[c];
		int			n = cycle_path(&g, cl, path);
		int			victim = 0;
		bool		real;
		bool		known = false;

		if (!leases_on_cycle(&g, path, n))
			continue;
		memset(czxids, 0, sizeof(int64) * g.nmembers);
		if (!still_there(&g, cl, path, n, &real, czxids))
			break;
		if (!real)
			continue;
		ncycles++;
		for (int k = 1; k < n; k++)
			if (czxids[k] > czxids[victim])
				victim = k;
		if (victim == 0)
			report_deadlock(&g, cl, path, n);
		for (int v = 0; v < nvictims; v++)
			known |= victims[v] == path[victim];
		if (!known)
			victims[nvictims++] = path[victim];
	}
	for (int v = 0; v < nvictims; v++)
		poke(w, &g.members[victims[v]]);
	stats_deadlock_checked(g.nmembers, ncycles, nvictims, false);
}

/*
 * Our wait has lasted deadlock_timeout, or another member of a cycle asked us
 * to look again: look, in a memory context of the look's own, so that a wait
 * of a day costs what a wait of a second costs.  Only the path of our
 * published wait outlives it.
 */
void
deadlock_check(DeadlockWait *w)
{
	char		key[ZK_SESSION_KEY_LEN + 1];
	MemoryContext look_context;
	MemoryContext caller = CurrentMemoryContext;

	/*
	 * Look again later while the wait lasts, after deadlock_timeout, twice
	 * that, four times, up to sixteen times: a member that looked before
	 * another had published misses their cycle, and its victim may not be
	 * poked (an ACL) or may have looked too early as well.  A look cut short
	 * by a lost or late reply is tried again sooner.  In 64 bits:
	 * deadlock_timeout may be up to INT_MAX milliseconds.
	 */
	w->checked = true;
	w->retry_at = bridge_now_ms() +
		((int64) DeadlockTimeout << Min(w->looks, 4));
	w->looks++;
	/* Withdrawn like a published wait from the first look on. */
	if (w->entry == NULL && lock_node_session_key(w->node, key))
		w->entry = psprintf("%s/%s", waits_dir(), key);

	look_context = AllocSetContextCreate(caller, "zklock deadlock look",
										 ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(look_context);
	PG_TRY();
	{
		look(w);
	}
	PG_FINALLY();
	{
		MemoryContextSwitchTo(caller);
		MemoryContextDelete(look_context);
	}
	PG_END_TRY();
}

/*
 * Whether another member of a cycle asked us to look again.  Its poke fired
 * the one watch on our published wait: the next look sets it again.  Looks
 * that come by the clock keep it, so that a wait has one watch however long
 * it lasts.
 */
bool
deadlock_poked(DeadlockWait *w)
{
	if (!w->published || !bridge_take_poke())
		return false;
	w->rearm = true;
	return true;
}

/* The wait is over: delete what was published.  Never raises. */
void
deadlock_withdraw(DeadlockWait *w)
{
	if (w->entry != NULL)
	{
		bridge_delete_node(w->entry);
		w->entry = NULL;
		w->published = false;
	}
}
