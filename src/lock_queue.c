/*
 * lock_queue.c
 *	  Reading a lock's queue from ZooKeeper: who holds it, who waits and for
 *	  whom, for zk_lock_queue and zk_lock_holders, from whichever PostgreSQL
 *	  node and client they are.
 *
 * The queue is listed, then every node's data (the JSON zklock stores, or
 * whatever another client stored) and czxid are read in one pipelined batch.
 * It is a snapshot: nodes come and go between the two steps, and those that
 * went are left out.  Whether a node holds, and which nodes it waits for, is
 * judged the way its owner judges (lock_node_blocks), from the names alone.
 * Every wait is bounded by zklock.connect_timeout.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

#include "compat.h"
#include "guc.h"
#include "lock_name.h"
#include "lock_recipe.h"
#include "lock_table.h"
#include "node_info.h"
#include "zk_bridge.h"
#include "zk_session.h"

PG_FUNCTION_INFO_V1(zk_lock_queue);
PG_FUNCTION_INFO_V1(zk_lock_holders);

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
	ZkRequest  *get;
	bool		gone;			/* deleted before it could be read */
	int64		czxid;
	char	   *data;
	int			data_len;
	NodeInfo	info;
} QueueNode;

/* One call's reading; requests it still owns are abandoned on ERROR. */
typedef struct QueueRead
{
	zhandle_t  *zh;
	int64		deadline;
	ZkRequest  *listing;
	QueueNode  *nodes;
	int			nnodes;
	int			maxnodes;
} QueueRead;

/* What one row of a function shows of a node. */
typedef void (*QueueRowEmitter) (QueueRead *r, const char *name, int i,
								 int position, ReturnSetInfo *rsinfo);

static void
await_request(QueueRead *r, ZkRequest *req)
{
	if (!zk_session_await(req, r->deadline, "reading a lock queue"))
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("ZooKeeper did not answer within %d ms while reading a lock queue",
						zklock_connect_timeout),
				 errhint("The session may be disconnected; see zk_session().")));
}

static int
by_sequence(const void *a, const void *b)
{
	int64		x = ((const QueueNode *) a)->seq;
	int64		y = ((const QueueNode *) b)->seq;

	return (x > y) - (x < y);
}

/* List parent's sequential children into r->nodes; ZNONODE lists nothing. */
static void
list_children(QueueRead *r, const char *parent, bool gate)
{
	ZkRequest  *req = bridge_get_children(r->zh, parent);

	r->listing = req;
	await_request(r, req);
	if (req->rc != ZOK && req->rc != ZNONODE)
		zk_report_error(req->rc, "list children of", parent);
	for (int i = 0; req->rc == ZOK && i < req->nchildren; i++)
	{
		const char *child = req->children[i];
		int64		seq = lock_node_sequence(child);
		QueueNode  *n;

		if (seq < 0)
			continue;
		if (r->nnodes == r->maxnodes)
		{
			r->maxnodes *= 2;
			r->nodes = repalloc(r->nodes, r->maxnodes * sizeof(QueueNode));
		}
		n = &r->nodes[r->nnodes++];
		memset(n, 0, sizeof(*n));
		n->child = psprintf("%s/%s", parent, child);
		n->seq = seq;
		n->mode = gate ? LOCK_MODE_SEMAPHORE : lock_node_mode(child);
		n->gate = gate;
	}
	bridge_free(req);
	r->listing = NULL;
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
 * Who holds, and whom each waiter waits for, judged from the sorted queue as
 * each owner judges it.  nleases: how many of the nodes are a semaphore's
 * leases (the rest are its gate); -1 for a lock.
 */
static void
judge(QueueNode *nodes, int n, int nleases)
{
	bool		lease_waits = false;

	for (int i = 0; i < n; i++)
	{
		QueueNode  *q = &nodes[i];

		if (nleases < 0)
		{
			for (int j = 0; j < i; j++)
				if (lock_node_blocks(q->mode, q->child, nodes[j].child))
					add_blocker(q, i, j);
			q->holding = q->nblockers == 0;
		}
		else if (i < nleases)
		{
			int			permits = lock_node_permits(q->child);

			q->holding = i < (permits > 0 ? permits : 1);
			lease_waits |= !q->holding;
			for (int j = 0; !q->holding && j < i; j++)
				add_blocker(q, i, j);
		}
		else
		{
			/* The head of the gate waits as its lease, listed above. */
			if (i == nleases && lease_waits)
				q->hidden = true;
			for (int j = nleases; j < i; j++)
				add_blocker(q, i, j);
		}
	}
}

/*
 * Read the queue of the lock whose parent is parent into r->nodes, with
 * every node's data.  A semaphore's queue is its leases, then the waiters at
 * its gate.
 */
static void
read_queue(QueueRead *r, const char *parent)
{
	int			nleases = -1;

	r->maxnodes = 16;
	r->nodes = palloc(r->maxnodes * sizeof(QueueNode));
	r->nnodes = 0;
	list_children(r, parent, false);
	if (r->nnodes == 0)
	{
		list_children(r, psprintf("%s/leases", parent), false);
		if (r->nnodes > 0)
		{
			nleases = r->nnodes;
			list_children(r, psprintf("%s/locks", parent), true);
			qsort(r->nodes + nleases, r->nnodes - nleases, sizeof(QueueNode),
				  by_sequence);
		}
	}
	qsort(r->nodes, nleases >= 0 ? nleases : r->nnodes, sizeof(QueueNode),
		  by_sequence);
	judge(r->nodes, r->nnodes, nleases);

	for (int i = 0; i < r->nnodes; i++)
		r->nodes[i].get = bridge_get(r->zh, r->nodes[i].child);
	for (int i = 0; i < r->nnodes; i++)
	{
		QueueNode  *q = &r->nodes[i];

		await_request(r, q->get);
		if (q->get->rc == ZNONODE)
			q->gone = true;
		else if (q->get->rc != ZOK)
			zk_report_error(q->get->rc, "read", q->child);
		else
		{
			q->czxid = q->get->czxid;
			q->data = pstrdup(q->get->data);
			q->data_len = q->get->data_len;
			node_info_parse(q->data, q->data_len, &q->info);
		}
		bridge_free(q->get);
		q->get = NULL;
	}
}

static void
abandon_all(QueueRead *r)
{
	if (r->listing)
		bridge_abandon(r->listing);
	for (int i = 0; i < r->nnodes; i++)
		if (r->nodes[i].get)
			bridge_abandon(r->nodes[i].get);
}

/* Emit a row for every node of the lock's queue that is still there. */
static void
emit_queue(QueueRead *r, const char *name, const char *parent,
		   QueueRowEmitter emit, ReturnSetInfo *rsinfo)
{
	int			position = 0;

	read_queue(r, parent);
	for (int i = 0; i < r->nnodes; i++)
		if (!r->nodes[i].gone && !r->nodes[i].hidden)
			emit(r, name, i, ++position, rsinfo);
}

/*
 * The name a child of zklock.root stands for, as text of this database; a
 * name another server wrote in an encoding this one cannot read is shown as
 * its encoded node name.
 */
static char *
listed_name(const char *encoded)
{
	char	   *name = zklock_decode_name(encoded);

	if (name == NULL)
		return NULL;
	if (!pg_verifymbstr(name, strlen(name), true))
		return pstrdup(encoded);
	return name;
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

	InitMaterializedSRF(fcinfo, 0);
	r.zh = zk_session_require(lock_table_count() > 0);
	r.deadline = bridge_now_ms() + zklock_connect_timeout;

	PG_TRY();
	{
		if (!PG_ARGISNULL(0))
		{
			char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));

			zklock_check_name(name);
			emit_queue(&r, name, zklock_parent_path(name), emit, rsinfo);
		}
		else
		{
			ZkRequest  *req = bridge_get_children(r.zh, zklock_root);
			int			n;
			char	  **locks;

			r.listing = req;
			await_request(&r, req);
			if (req->rc != ZOK && req->rc != ZNONODE)
				zk_report_error(req->rc, "list children of", zklock_root);
			n = req->rc == ZOK ? req->nchildren : 0;
			locks = palloc(sizeof(char *) * (n + 1));
			for (int i = 0; i < n; i++)
				locks[i] = pstrdup(req->children[i]);
			bridge_free(req);
			r.listing = NULL;

			for (int i = 0; i < n; i++)
			{
				char	   *name = listed_name(locks[i]);

				if (name != NULL)
					emit_queue(&r, name, psprintf("%s/%s", zklock_root, locks[i]),
							   emit, rsinfo);
			}
		}
	}
	PG_CATCH();
	{
		abandon_all(&r);
		PG_RE_THROW();
	}
	PG_END_TRY();
}

/* ---- zk_lock_queue ---- */

#define ZK_LOCK_QUEUE_COLS 7

static void
emit_raw_row(QueueRead *r, const char *name, int i, int position,
			 ReturnSetInfo *rsinfo)
{
	QueueNode  *q = &r->nodes[i];
	Datum		values[ZK_LOCK_QUEUE_COLS];
	bool		nulls[ZK_LOCK_QUEUE_COLS] = {0};

	values[0] = CStringGetTextDatum(name);
	values[1] = Int32GetDatum(position);
	values[2] = CStringGetTextDatum(lock_mode_names[q->mode]);
	values[3] = BoolGetDatum(q->holding);
	values[4] = Int64GetDatum(q->czxid);
	values[5] = CStringGetTextDatum(q->child);
	/* Only what any role could cast to jsonb. */
	if (q->info.valid)
		values[6] = CStringGetTextDatum(q->data);
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

#define ZK_LOCK_HOLDERS_COLS 14

/* How a node's owner is named: "<node>/<pid>", else the node's own name. */
static char *
owner_of(QueueNode *q)
{
	char	   *owner = node_info_owner(&q->info);

	return owner ? owner : pstrdup(strrchr(q->child, '/') + 1);
}

/* The owners a waiter waits for, each once, in queue order. */
static Datum
blocked_by(QueueRead *r, QueueNode *q)
{
	Datum	   *owners = palloc(sizeof(Datum) * (q->nblockers + 1));
	char	  **seen = palloc(sizeof(char *) * (q->nblockers + 1));
	int			n = 0;

	for (int k = 0; k < q->nblockers; k++)
	{
		QueueNode  *b = &r->nodes[q->blockers[k]];
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
set_text(Datum *values, bool *nulls, int col, const char *text)
{
	if (text != NULL)
		values[col] = CStringGetTextDatum(text);
	else
		nulls[col] = true;
}

static void
emit_holder_row(QueueRead *r, const char *name, int i, int position,
				ReturnSetInfo *rsinfo)
{
	QueueNode  *q = &r->nodes[i];
	NodeInfo   *info = &q->info;
	Datum		values[ZK_LOCK_HOLDERS_COLS];
	bool		nulls[ZK_LOCK_HOLDERS_COLS] = {0};

	values[0] = CStringGetTextDatum(name);
	values[1] = Int32GetDatum(position);
	values[2] = CStringGetTextDatum(lock_mode_names[q->mode]);
	values[3] = BoolGetDatum(q->holding);
	set_text(values, nulls, 4, info->cluster_name);
	set_text(values, nulls, 5, info->host && info->has_port ?
			 psprintf("%s:%d", info->host, info->port) : NULL);
	values[6] = Int32GetDatum(info->pid);
	nulls[6] = !info->has_pid;
	set_text(values, nulls, 7, info->database);
	set_text(values, nulls, 8, info->user);
	set_text(values, nulls, 9, info->application_name);
	values[10] = TimestampTzGetDatum(info->requested_at);
	nulls[10] = !info->has_requested_at;
	values[11] = Int64GetDatum(q->czxid);
	values[12] = CStringGetTextDatum(q->child);
	if (q->holding)
		nulls[13] = true;
	else
		values[13] = blocked_by(r, q);
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
