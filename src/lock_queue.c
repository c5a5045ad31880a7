/*
 * lock_queue.c
 *	  Reading a lock's queue from ZooKeeper: who holds it, who waits and for
 *	  whom, for zk_lock_queue and zk_lock_holders, from whichever PostgreSQL
 *	  node and client they are; and asking the holders to let go
 *	  (zk_lock_request_release).
 *
 * The queue is listed, then every node's data (the JSON zklock stores, or
 * whatever another client stored) and czxid are read in one pipelined batch.
 * It is a snapshot: nodes come and go between the two steps, and those that
 * went are left out.  Whether a node holds, and which nodes it waits for, is
 * judged the way its owner judges (lock_node_blocks), from the names alone.
 * Nothing read raises an error: data that is not a JSON document reads as
 * NULL, a node we may not read shows no token, and in the listing of every
 * lock a lock we may not list is left out.  Each request is given
 * zklock.connect_timeout to be answered.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/tuplestore.h"

#include "compat.h"
#include "guc.h"
#include "lock_name.h"
#include "lock_node.h"
#include "lock_table.h"
#include "node_info.h"
#include "sql_functions.h"
#include "zk_bridge.h"
#include "zk_nodes.h"
#include "zk_session.h"

PG_FUNCTION_INFO_V1(zk_lock_queue);
PG_FUNCTION_INFO_V1(zk_lock_holders);
PG_FUNCTION_INFO_V1(zk_lock_request_release);

typedef struct QueueNode
{
	char	   *child;			/* full path */
	int64		seq;
	LockMode	mode;
	bool		gate;			/* a semaphore waiter's place in <name>/locks */
	bool		hidden;			/* a gate node whose waiter's lease is listed */
	bool		holding;
	int			nblockers;		/* the nodes it waits for, lower in the queue */
	int		   *blockers;
	ZkRequest  *request;	/* in flight: the read of its data, or a write */
	bool		gone;			/* deleted before it could be read */
	bool		unreadable;		/* its ACL does not let us read it */
	int64		czxid;
	char	   *data;
	int			data_len;
	NodeInfo	info;
} QueueNode;

/*
 * One lock's queues: the lock's own nodes, then, if a semaphore of the same
 * name exists, its leases and the waiters at its gate.  A lock and a
 * semaphore of one name are separate things; both are listed.
 */
typedef struct LockRead
{
	char	   *name;
	char	   *parent;
	ZkRequest  *listing;		/* in flight: parent's children */
	ZkRequest  *leases_listing; /* ... the semaphore's leases */
	ZkRequest  *gate_listing;	/* ... and its gate */
	bool		skipped;		/* unreadable, and not asked for by name */
	QueueNode  *nodes;
	int			nnodes;
	int			maxnodes;
	int			nlock;			/* nodes[0, nlock): the lock's queue */
	int			nleases;		/* then the leases, then the gate */
} LockRead;

/*
 * One call's reading.  The tree is read in batches of locks, each batch
 * pipelined (its listings, then its nodes' data), so that any number of
 * locks is read in a bounded number of round trips per batch, and each
 * request is given zklock.connect_timeout from when it was sent, not one
 * deadline for the whole tree.  Requests it still owns are abandoned on
 * ERROR.
 */
typedef struct QueueRead
{
	bool		by_name;		/* one lock asked for: errors are raised */
	bool		names_only;		/* who holds is enough: no node's data read */
	ZkRequest  *sync;			/* in flight: the server catching up first */
	ZkRequest  *listing;		/* of zklock.root */
	LockRead   *locks;
	int			nlocks;
} QueueRead;

/* Locks read in one pipelined batch. */
#define READ_BATCH 256

/* What one row of a function shows of a node. */
typedef void (*QueueRowEmitter) (QueueRead *r, LockRead *l, const char *name,
								 int i, int position, ReturnSetInfo *rsinfo);

static void
await_request(ZkRequest *req)
{
	if (!zk_session_await(req, req->sent_at + zklock_connect_timeout,
						  ZK_READING_QUEUE))
		zk_session_no_answer(ZK_READING_QUEUE);
}

/*
 * Take a listing's sequential children into l->nodes; ZNONODE lists
 * nothing.  False if it may not be read (ZNOAUTH), unless the lock was
 * asked for by name: then that raises.  *leases: whether the listed node has
 * the children of a semaphore ("leases", "locks"); may be NULL.
 */
static bool
take_listing(QueueRead *r, LockRead *l, ZkRequest **slot, bool gate,
			 bool *leases, bool *gate_exists)
{
	ZkRequest  *req = *slot;

	await_request(req);
	if (req->rc == ZNOAUTH && !r->by_name)
	{
		bridge_free(req);
		*slot = NULL;
		return false;
	}
	if (req->rc != ZOK && req->rc != ZNONODE)
		zk_report_error(req->rc, ZK_ACTION_LIST, req->path);
	if (req->rc == ZOK)
		qsort(req->children, req->nchildren, sizeof(char *), lock_node_order);
	for (int i = 0; req->rc == ZOK && i < req->nchildren; i++)
	{
		const char *child = req->children[i];
		int64		seq = lock_node_sequence(child);
		QueueNode  *n;

		if (seq < 0)
		{
			if (leases && strcmp(child, "leases") == 0)
				*leases = true;
			if (gate_exists && strcmp(child, "locks") == 0)
				*gate_exists = true;
			continue;
		}
		if (l->nnodes == l->maxnodes)
		{
			l->maxnodes = Max(16, l->maxnodes * 2);
			l->nodes = l->nodes ? repalloc(l->nodes, l->maxnodes * sizeof(QueueNode)) :
				palloc(l->maxnodes * sizeof(QueueNode));
		}
		n = &l->nodes[l->nnodes++];
		memset(n, 0, sizeof(*n));
		n->child = psprintf("%s/%s", req->path, child);
		n->seq = seq;
		n->mode = gate ? LOCK_MODE_SEMAPHORE : lock_node_mode(child);
		n->gate = gate;
	}
	bridge_free(req);
	*slot = NULL;
	return true;
}

/* Node j, lower than q (node i), blocks q: at most i of them. */
static void
add_blocker(QueueNode *q, int i, int j)
{
	if (q->blockers == NULL)
		q->blockers = palloc(sizeof(int) * i);
	q->blockers[q->nblockers++] = j;
}

/*
 * Who holds, and whom each waiter waits for, judged from the sorted queue
 * nodes[from, to) as each owner judges it.  nleases: how many of those are a
 * semaphore's leases (the rest are its gate); -1 for a lock.  Blockers are
 * indexes into nodes.
 */
static void
judge(QueueNode *nodes, int from, int to, int nleases)
{
	bool		lease_waits = false;
	const char **names = palloc(sizeof(char *) * (to - from + 1));

	/* The rule reads node names, not paths (a parent could say __READ__). */
	for (int i = from; i < to; i++)
		names[i - from] = strrchr(nodes[i].child, '/') + 1;

	for (int i = from; i < to; i++)
	{
		QueueNode  *q = &nodes[i];

		if (nleases < 0)
		{
			q->blockers = palloc(sizeof(int) * (i - from + 1));
			q->nblockers = lock_node_blockers(names, i - from, q->blockers);
			for (int k = 0; k < q->nblockers; k++)
				q->blockers[k] += from;
			q->holding = q->nblockers == 0;
		}
		else if (i < from + nleases)
		{
			int			permits = lock_node_permits(q->child);

			q->holding = i - from < (permits > 0 ? permits : 1);
			lease_waits |= !q->holding;
			for (int j = from; !q->holding && j < i; j++)
				add_blocker(q, i, j);
		}
		else
		{
			/* The head of the gate waits as its lease, listed above. */
			if (i == from + nleases && lease_waits)
				q->hidden = true;
			for (int j = from + nleases; j < i; j++)
				add_blocker(q, i, j);
		}
	}
}

/*
 * Read the queues of a batch of locks: their listings, the listings of the
 * semaphores among them, then every node's data, each step one pipelined
 * round.
 */
static void
read_batch(QueueRead *r, LockRead *locks, int n)
{
	for (int k = 0; k < n; k++)
		locks[k].listing = bridge_get_children(locks[k].parent);
	for (int k = 0; k < n; k++)
	{
		LockRead   *l = &locks[k];
		bool		leases = false;
		bool		gate_exists = false;

		if (!take_listing(r, l, &l->listing, false, &leases, &gate_exists))
		{
			l->skipped = true;
			continue;
		}
		l->nlock = l->nnodes;
		if (leases)
			l->leases_listing = bridge_get_children(psprintf("%s/leases", l->parent));
		if (gate_exists)
			l->gate_listing = bridge_get_children(psprintf("%s/locks", l->parent));
	}
	for (int k = 0; k < n; k++)
	{
		LockRead   *l = &locks[k];

		if (l->leases_listing)
			take_listing(r, l, &l->leases_listing, false, NULL, NULL);
		l->nleases = l->nnodes - l->nlock;
		if (l->gate_listing)
			take_listing(r, l, &l->gate_listing, true, NULL, NULL);
		judge(l->nodes, 0, l->nlock, -1);
		judge(l->nodes, l->nlock, l->nnodes, l->nleases);
		for (int i = 0; i < l->nnodes && !r->names_only; i++)
			l->nodes[i].request = bridge_get(l->nodes[i].child);
	}
	for (int k = 0; k < n && !r->names_only; k++)
	{
		for (int i = 0; i < locks[k].nnodes; i++)
		{
			QueueNode  *q = &locks[k].nodes[i];

			await_request(q->request);
			if (q->request->rc == ZNONODE)
				q->gone = true;
			else if (q->request->rc == ZNOAUTH)
				q->unreadable = true;
			else if (q->request->rc != ZOK)
				zk_report_error(q->request->rc, ZK_ACTION_READ, q->child);
			else
			{
				q->czxid = q->request->czxid;
				q->data = pstrdup(q->request->data);
				q->data_len = q->request->data_len;
				node_info_parse(q->data, q->data_len, &q->info);
			}
			bridge_free(q->request);
			q->request = NULL;
		}
	}
}

static void
abandon_all(QueueRead *r)
{
	if (r->listing)
		bridge_abandon(r->listing);
	if (r->sync)
		bridge_abandon(r->sync);
	for (int k = 0; k < r->nlocks; k++)
	{
		LockRead   *l = &r->locks[k];

		if (l->listing)
			bridge_abandon(l->listing);
		if (l->leases_listing)
			bridge_abandon(l->leases_listing);
		if (l->gate_listing)
			bridge_abandon(l->gate_listing);
		for (int i = 0; i < l->nnodes; i++)
			if (l->nodes[i].request)
				bridge_abandon(l->nodes[i].request);
	}
}

/* Emit a row for every node of a lock's queues that is still there. */
static void
emit_lock(QueueRead *r, LockRead *l, QueueRowEmitter emit, ReturnSetInfo *rsinfo)
{
	int			position = 0;

	for (int i = 0; i < l->nnodes; i++)
	{
		/* The semaphore's queue is numbered from 1 again. */
		if (i == l->nlock)
			position = 0;
		if (!l->nodes[i].gone && !l->nodes[i].hidden)
			emit(r, l, l->name, i, ++position, rsinfo);
	}
}

/*
 * The queue of the lock named by the first argument, or with NULL of every
 * lock below zklock.root, one row per node.
 */
static void
emit_queues(FunctionCallInfo fcinfo, QueueRowEmitter emit)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	QueueRead	r = {0};
	MemoryContext batch_cxt;
	MemoryContext old;

	InitMaterializedSRF(fcinfo, 0);
	zk_session_require();
	batch_cxt = AllocSetContextCreate(CurrentMemoryContext, "zklock queue batch",
									  ALLOCSET_DEFAULT_SIZES);

	PG_TRY();
	{
		if (!PG_ARGISNULL(0))
		{
			char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));

			zklock_check_name(name);
			r.by_name = true;
			r.locks = palloc0(sizeof(LockRead));
			r.nlocks = 1;
			r.locks[0].name = name;
			r.locks[0].parent = zklock_parent_path(name);
			read_batch(&r, r.locks, 1);
			emit_lock(&r, &r.locks[0], emit, rsinfo);
		}
		else
		{
			int			n;
			char	  **children;

			r.listing = bridge_get_children(zklock_root);
			await_request(r.listing);
			if (r.listing->rc != ZOK && r.listing->rc != ZNONODE)
				zk_report_error(r.listing->rc, ZK_ACTION_LIST, zklock_root);
			n = r.listing->rc == ZOK ? r.listing->nchildren : 0;
			children = palloc(sizeof(char *) * (n + 1));
			for (int i = 0; i < n; i++)
				children[i] = pstrdup(r.listing->children[i]);

			/*
			 * No zklock.root: no lock was ever taken, unless the chroot
			 * itself is missing, where none can be (and the listing would
			 * only look empty).
			 */
			if (r.listing->rc == ZNONODE && strchr(zklock_hosts, '/') != NULL)
			{
				bridge_free(r.listing);
				r.listing = NULL;
				r.listing = bridge_exists("/");
				await_request(r.listing);
				if (r.listing->rc == ZNONODE)
					zk_report_missing_chroot(zklock_root, ZNONODE);
			}
			bridge_free(r.listing);
			r.listing = NULL;

			for (int first = 0; first < n; first += READ_BATCH)
			{
				old = MemoryContextSwitchTo(batch_cxt);
				r.locks = palloc0(sizeof(LockRead) * READ_BATCH);
				r.nlocks = 0;
				for (int i = first; i < n && i < first + READ_BATCH; i++)
				{
					char	   *name = zklock_decode_name(children[i]);

					if (name == NULL)
						continue;
					r.locks[r.nlocks].name = name;
					r.locks[r.nlocks].parent = psprintf("%s/%s", zklock_root, children[i]);
					r.nlocks++;
				}
				read_batch(&r, r.locks, r.nlocks);
				MemoryContextSwitchTo(old);
				for (int k = 0; k < r.nlocks; k++)
					if (!r.locks[k].skipped)
						emit_lock(&r, &r.locks[k], emit, rsinfo);
				r.nlocks = 0;
				MemoryContextReset(batch_cxt);
			}
		}
	}
	PG_CATCH();
	{
		abandon_all(&r);
		PG_RE_THROW();
	}
	PG_END_TRY();
	MemoryContextDelete(batch_cxt);
}

/* ---- zk_lock_queue ---- */

#define ZK_LOCK_QUEUE_COLS 7

static void
emit_raw_row(QueueRead *r, LockRead *l, const char *name, int i, int position,
			 ReturnSetInfo *rsinfo)
{
	QueueNode  *q = &l->nodes[i];
	Datum		values[ZK_LOCK_QUEUE_COLS];
	bool		nulls[ZK_LOCK_QUEUE_COLS] = {0};

	values[0] = CStringGetTextDatum(name);
	values[1] = Int32GetDatum(position);
	values[2] = CStringGetTextDatum(lock_mode_names[q->mode]);
	values[3] = BoolGetDatum(q->holding);
	values[4] = Int64GetDatum(q->czxid);
	nulls[4] = q->unreadable;
	values[5] = CStringGetTextDatum(q->child);
	/* node_info_parse accepted it as jsonb_in would: this cannot fail. */
	if (q->info.valid)
		values[6] = DirectFunctionCall1(jsonb_in, CStringGetDatum(q->data));
	else
		nulls[6] = true;
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * zk_lock_queue(name text): the raw queue of a lock; with NULL, of every
 * lock below zklock.root.
 */
Datum
zk_lock_queue(PG_FUNCTION_ARGS)
{
	emit_queues(fcinfo, emit_raw_row);
	return (Datum) 0;
}

/* ---- zk_lock_holders ---- */

#define ZK_LOCK_HOLDERS_COLS 15

/* How a node's owner is named: "<node>/<pid>", else the node's own name. */
static char *
owner_of(QueueNode *q)
{
	char	   *owner = node_info_owner(&q->info);

	return owner ? owner : pstrdup(strrchr(q->child, '/') + 1);
}

/* The owners a waiter waits for, each once, in queue order. */
static Datum
blocked_by(LockRead *l, QueueNode *q)
{
	Datum	   *owners = palloc(sizeof(Datum) * (q->nblockers + 1));
	char	  **seen = palloc(sizeof(char *) * (q->nblockers + 1));
	int			n = 0;

	for (int k = 0; k < q->nblockers; k++)
	{
		QueueNode  *b = &l->nodes[q->blockers[k]];
		char	   *owner;
		bool		dup = false;

		if (b->gone)
			continue;
		owner = owner_of(b);
		for (int m = 0; m < n && !dup; m++)
			dup = strcmp(seen[m], owner) == 0;
		if (dup)
			continue;
		seen[n] = owner;
		owners[n++] = CStringGetTextDatum(owner);
	}
	return PointerGetDatum(construct_array(owners, n, TEXTOID, -1, false,
										   TYPALIGN_INT));
}

static void
emit_holder_row(QueueRead *r, LockRead *l, const char *name, int i,
				int position, ReturnSetInfo *rsinfo)
{
	QueueNode  *q = &l->nodes[i];
	NodeInfo   *info = &q->info;
	Datum		values[ZK_LOCK_HOLDERS_COLS];
	bool		nulls[ZK_LOCK_HOLDERS_COLS] = {0};

	values[0] = CStringGetTextDatum(name);
	values[1] = Int32GetDatum(position);
	values[2] = CStringGetTextDatum(lock_mode_names[q->mode]);
	values[3] = BoolGetDatum(q->holding);
	node_info_owner_columns(info, values, nulls, 4);
	values[11] = Int64GetDatum(q->czxid);
	nulls[11] = q->unreadable;
	values[12] = CStringGetTextDatum(q->child);
	if (q->holding)
		nulls[13] = true;
	else
		values[13] = blocked_by(l, q);
	/* Bare, until its holder (if it is a zklock backend) writes itself back. */
	values[14] = BoolGetDatum(lock_node_revoke_message(q->data, q->data_len) ||
							  info->has_release_requested_at);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * zk_lock_holders(name text): every holder and waiter of a lock (NULL: of
 * every lock below zklock.root) with who they are, read from their nodes.
 */
Datum
zk_lock_holders(PG_FUNCTION_ARGS)
{
	emit_queues(fcinfo, emit_holder_row);
	return (Datum) 0;
}

/* ---- zk_lock_request_release ---- */

/*
 * zk_lock_request_release(name text): ask every holder of a lock to let go,
 * as Curator's Revoker does: write __REVOKE__ into the data of each holder's
 * node (not the waiters').  Returns how many nodes it was written to; a
 * holder that released meanwhile is not counted.  Who holds is judged from
 * the listing alone (no node's data is read), so the writes go out one
 * round trip after it (and the sync that goes with it).  The node's ACL
 * decides who may: a node this session's credentials may not write raises
 * 42501.
 */
Datum
zk_lock_request_release(PG_FUNCTION_ARGS)
{
	char	   *name = zklock_name_arg(fcinfo, 0);
	QueueRead	r = {0};
	LockRead   *l;
	int			reached = 0;

	zk_session_require();
	r.by_name = true;
	r.names_only = true;
	r.locks = l = palloc0(sizeof(LockRead));
	r.nlocks = 1;
	l->name = name;
	l->parent = zklock_parent_path(name);

	PG_TRY();
	{
		/*
		 * Our server may lag behind the one a holder was granted by: it
		 * catches up with the leader before it lists (answered in order), so
		 * that every holder granted before this call is asked.
		 */
		r.sync = bridge_sync(l->parent);
		read_batch(&r, l, 1);
		await_request(r.sync);
		bridge_free(r.sync);
		r.sync = NULL;
		/*
		 * The writes go out together; their replies come in order.  A holder
		 * gone since the listing answers ZNONODE.
		 */
		for (int i = 0; i < l->nnodes; i++)
			if (l->nodes[i].holding)
				l->nodes[i].request = bridge_set(l->nodes[i].child, ZK_REVOKE_MESSAGE,
											 ZK_REVOKE_MESSAGE_LEN, -1);
		for (int i = 0; i < l->nnodes; i++)
		{
			QueueNode  *q = &l->nodes[i];

			if (q->request == NULL)
				continue;
			await_request(q->request);
			if (q->request->rc == ZOK)
				reached++;
			else if (q->request->rc != ZNONODE)
				zk_report_error(q->request->rc, ZK_ACTION_WRITE, q->child);
			bridge_free(q->request);
			q->request = NULL;
		}
	}
	PG_CATCH();
	{
		abandon_all(&r);
		PG_RE_THROW();
	}
	PG_END_TRY();
	PG_RETURN_INT32(reached);
}
