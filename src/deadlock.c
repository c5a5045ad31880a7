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
 * Reading the graph.  From its own node, the backend lists the lock's queue
 * and takes the nodes that block it (lock_node_blocks); their names give
 * their owners' keys, and their owners' published waits (one pipelined get
 * each) tell where those wait; and so on, breadth first, one round of
 * listings and one of gets per step, until it meets itself again.  Nodes of
 * clients that publish nothing (Curator, Kazoo, zklock backends that have
 * not waited long) end a path: they cannot cause a false alarm.
 *
 * Verifying.  A cycle found is read once more: every waiting node and every
 * blocking node on it must still exist, read after the whole graph was read.
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
 * the others had published.
 *
 * Looking again.  Waits are published late (only after deadlock_timeout),
 * so PostgreSQL's rule, that the last member to join a cycle sees it, does
 * not hold: every member may have looked before the others published, or
 * the victim's poke may be refused (an ACL).  So a waiter looks again while
 * it waits: deadlock_timeout after its first look, then after twice that,
 * four times, up to sixteen times deadlock_timeout between looks.  Every
 * cycle that exists is found by the next look of one of its members.
 *
 * Nothing read is trusted: a published wait is used only if it is
 * well-formed and names a node of its member's own (by the key in the
 * node's name); a queue that cannot be read ends that path.  Only a reply
 * lost with the connection cuts a look short, and nothing a look does,
 * publishing included, raises an error other than the victim's 40P01.
 *
 * Semaphores wait for any one of several holders, so a cycle through one is
 * not necessarily a deadlock: their waits are neither published nor
 * checked, and a path that reaches one ends there.
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/json.h"

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
	bool		via_holds;		/* and whether that node holds the lock */
	ZkRequest  *req;			/* in flight: a listing or a get */
} Member;

typedef struct Graph
{
	DeadlockWait *w;
	int			failed;			/* a reply that ended the reading early */
	Member	   *members;
	int			nmembers;
	int			closing;		/* the member that waits for us; -1: none */
	char	   *closing_blocker;	/* our node in its lock */
	bool		closing_holds;
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

static bool
await_reply(DeadlockWait *w, ZkRequest *req)
{
	return zk_session_await(req, w->deadline, ZK_LOOKING_FOR_DEADLOCK);
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
		w->retry_at = bridge_now_ms() + DeadlockTimeout;
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
	char		key[ZK_SESSION_KEY_LEN + 1];
	int			rc = ZOK;

	if (!lock_node_session_key(w->node, key))
		return false;
	/* Withdrawn like a published wait from now on, whatever happens. */
	w->entry = psprintf("%s/%s", waits_dir(), key);
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
		if (!zk_create_path(waits_dir(), w->deadline, &rc))
			return false;
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

/*
 * Member i's lock was listed: take the nodes that block it and meet their
 * owners, reading the published waits of those not met yet.  True if one
 * of them is the checking backend: the cycle is closed.
 */
static bool
follow_blockers(Graph *g, int i)
{
	Member	   *m = &g->members[i];
	ZkRequest  *req = m->req;
	int			n = req->rc == ZOK ? req->nchildren : 0;
	char	  **children = palloc(sizeof(char *) * (n + 1));
	int64		own_seq = lock_node_sequence(m->node);

	if (req->rc != ZOK && req->rc != ZNONODE)
	{
		/*
		 * Only a lost reply cuts the look short.  Any other error (a queue
		 * this session may not list, named by a wait entry anyone could have
		 * written) ends this path only.
		 */
		look_cut_short(g->w, req->rc, ZK_ACTION_LIST, m->parent);
		if (bridge_reply_lost(req->rc) || req->rc == ZSESSIONEXPIRED)
			g->failed = req->rc;
		bridge_free(req);
		m->req = NULL;
		return false;
	}
	for (int c = 0; c < n; c++)
		children[c] = pstrdup(req->children[c]);
	bridge_free(req);
	m->req = NULL;
	qsort(children, n, sizeof(char *), lock_node_order);

	for (int c = 0; c < n && lock_node_sequence(children[c]) < own_seq; c++)
	{
		char		key[ZK_SESSION_KEY_LEN + 1];
		Member	   *b;

		if (lock_node_sequence(children[c]) < 0 ||
			!lock_node_blocks(m->mode, m->node, children[c]) ||
			!lock_node_session_key(children[c], key) ||
			strcmp(key, m->key) == 0)
			continue;
		if (strcmp(key, g->members[0].key) == 0)
		{
			g->closing = i;
			g->closing_blocker = children[c];
			g->closing_holds = lock_node_blockers((const char *const *) children, c, NULL) == 0;
			return true;
		}
		if (find_member(g, key) >= 0 || g->nmembers == MAX_MEMBERS)
			continue;
		b = &g->members[g->nmembers++];
		memset(b, 0, sizeof(*b));
		strlcpy(b->key, key, sizeof(b->key));
		b->via = i;
		b->via_blocker = children[c];
		b->via_holds = lock_node_blockers((const char *const *) children, c, NULL) == 0;
		b->entry = psprintf("%s/%s", waits_dir(), key);
		b->req = bridge_get(b->entry);
	}
	return false;
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
		 strcmp(info.mode, lock_mode_names[LOCK_MODE_SHARED]) == 0) &&
		lock_node_sequence(info.node) >= 0 &&
		lock_node_session_key(info.node, key) && strcmp(key, m->key) == 0 &&
		info.lock[0] == '/' && strchr(info.node, '/') == NULL)
	{
		m->waits = true;
		m->parent = info.lock;
		m->node = info.node;
		m->name = info.name ? info.name : info.lock;
		m->mode = strcmp(info.mode, lock_mode_names[LOCK_MODE_SHARED]) == 0 ?
			LOCK_MODE_SHARED : LOCK_MODE_EXCLUSIVE;
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
}

/*
 * Read the wait-for graph breadth first from our own wait until it closes a
 * cycle through us (true, g->closing set) or ends.  False also if the
 * acquisition's deadline passed meanwhile.
 */
static bool
find_cycle(Graph *g)
{
	int			first = 0;
	int			last = 1;		/* this round: members [first, last) */

	while (first < last)
	{
		for (int i = first; i < last; i++)
			if (g->members[i].waits)
				g->members[i].req = bridge_get_children(g->members[i].parent);
		for (int i = first; i < last; i++)
		{
			if (!g->members[i].waits)
				continue;
			if (!await_reply(g->w, g->members[i].req))
				return false;
			if (follow_blockers(g, i))
				return true;
			if (g->failed)
				return false;
		}
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
	return false;
}

/* The members on the cycle, from us: path[0] is 0, each waits for the next. */
static int
cycle_path(Graph *g, int *path)
{
	int			n = 0;

	for (int i = g->closing; i != 0; i = g->members[i].via)
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
blocker_on_path(Graph *g, int *path, int n, int k)
{
	return k + 1 < n ? g->members[path[k + 1]].via_blocker : g->closing_blocker;
}

/*
 * Read every node of the cycle once more, after the whole graph: true if
 * they all still exist (see the file header).  False also if the deadline
 * passed.  czxids[k] gets the czxid of path[k]'s waiting node, from the
 * node itself, not from what its member published.
 */
static bool
still_there(Graph *g, int *path, int n, bool *real, int64 *czxids)
{
	ZkRequest **reqs = palloc0(sizeof(ZkRequest *) * 2 * n);
	volatile bool answered = true;

	*real = true;
	PG_TRY();
	{
		for (int k = 0; k < n; k++)
		{
			Member	   *m = &g->members[path[k]];

			reqs[2 * k] = bridge_exists(psprintf("%s/%s", m->parent, m->node));
			reqs[2 * k + 1] = bridge_exists(psprintf("%s/%s", m->parent,
															   blocker_on_path(g, path, n, k)));
		}
		for (int r = 0; r < 2 * n && answered; r++)
		{
			answered = await_reply(g->w, reqs[r]);
			if (answered && reqs[r]->rc == ZOK && r % 2 == 0)
				czxids[r / 2] = reqs[r]->czxid;
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
		for (int r = 0; r < 2 * n; r++)
			if (reqs[r] != NULL)
			{
				if (bridge_done(reqs[r]))
					bridge_free(reqs[r]);
				else
					bridge_abandon(reqs[r]);
			}
	}
	PG_END_TRY();
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
report_deadlock(Graph *g, int *path, int n)
{
	StringInfoData detail;

	initStringInfo(&detail);
	for (int k = 0; k < n; k++)
	{
		Member	   *m = &g->members[path[k]];
		Member	   *next = &g->members[path[(k + 1) % n]];
		Member	   *prev = &g->members[path[(k + n - 1) % n]];
		bool		holding = k > 0 ? m->via_holds : g->closing_holds;

		if (k > 0)
			appendStringInfoChar(&detail, '\n');
		appendStringInfo(&detail,
						 "%c%s %s zklock lock \"%s\" and waits for %s zklock lock \"%s\"; blocked by %s.",
						 pg_toupper((unsigned char) m->who[0]), m->who + 1,
						 holding ? "holds" : "is queued ahead for",
						 prev->name, lock_mode_names[m->mode], m->name,
						 next->who);
	}
	stats_deadlock_checked(true);
	ereport(ERROR,
			(errcode(ERRCODE_T_R_DEADLOCK_DETECTED),
			 errmsg("deadlock detected"),
			 errdetail_internal("%s", detail.data),
			 errhint("The backends wait for each other's zklock locks across PostgreSQL nodes; take locks in the same order everywhere.")));
}

/*
 * Our wait has lasted deadlock_timeout, or another member of a cycle asked us
 * to look again: publish the wait (the first time) and look for a cycle
 * through it.  ERROR 40P01 if there is one and we are its victim; returns
 * otherwise, also when the deadline passed meanwhile.
 */
void
deadlock_check(DeadlockWait *w)
{
	char	   *data = entry_json(w);
	Graph		g = {0};
	Member	   *self;
	NodeInfo	info;
	volatile bool found;

	/*
	 * Look again later while the wait lasts, after deadlock_timeout, twice
	 * that, four times, up to sixteen times: a member that looked before
	 * another had published misses their cycle, and its victim may not be
	 * poked (an ACL) or may have looked too early as well.  A look cut short
	 * by a lost reply is tried again sooner.
	 */
	w->checked = true;
	w->retry_at = bridge_now_ms() + DeadlockTimeout * (1 << Min(w->looks, 4));
	w->looks++;
	if (!w->published)
	{
		if (!publish(w, data))
			return;
	}
	else
	{
		/* A poke consumed the watch: set it again before looking. */
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
	}

	g.w = w;
	g.closing = -1;
	g.members = palloc(sizeof(Member) * MAX_MEMBERS);
	g.nmembers = 1;
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
		found = find_cycle(&g);
	}
	PG_FINALLY();
	{
		abandon_requests(&g);
	}
	PG_END_TRY();

	if (found && g.closing >= 0)
	{
		int		   *path = palloc(sizeof(int) * g.nmembers);
		int64	   *czxids = palloc0(sizeof(int64) * g.nmembers);
		int			n = cycle_path(&g, path);
		int			victim = 0;
		bool		real;

		if (!still_there(&g, path, n, &real, czxids) || !real)
		{
			stats_deadlock_checked(false);
			return;
		}
		for (int k = 1; k < n; k++)
			if (czxids[k] > czxids[victim])
				victim = k;
		if (victim == 0)
			report_deadlock(&g, path, n);
		poke(w, &g.members[path[victim]]);
	}
	stats_deadlock_checked(false);
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
