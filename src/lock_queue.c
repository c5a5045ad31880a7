/*
 * lock_queue.c
 *	  Reading a lock's queue from ZooKeeper: who holds it and who waits, for
 *	  zk_lock_holders, from whichever node and client they are.
 *
 * The queue is listed, then every node's data (the JSON zklock stores, or
 * whatever another client stored) and czxid are read in one pipelined batch.
 * It is a snapshot: nodes come and go between the two steps, and those that
 * went are left out.  Whether a node holds is judged the way its owner does
 * (see lock_recipe.c), from the names alone.
 */
#include "postgres.h"

#include "common/jsonapi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

#include "compat.h"
#include "guc.h"
#include "lock_name.h"
#include "lock_recipe.h"
#include "lock_table.h"
#include "zk_bridge.h"
#include "zk_session.h"

PG_FUNCTION_INFO_V1(zk_lock_queue);

#define ZK_LOCK_QUEUE_COLS 7

typedef struct QueueNode
{
	char	   *child;			/* name below its parent */
	int64		seq;
	LockMode	mode;
	bool		gate;			/* a semaphore waiter's place in <name>/locks */
	bool		holding;
	ZkRequest  *get;
} QueueNode;

/* Requests this call still owns, to abandon on ERROR. */
typedef struct QueueRead
{
	zhandle_t  *zh;
	ZkRequest  *pending[2];		/* listing of the root, of a parent */
	QueueNode  *nodes;
	int			nnodes;
} QueueRead;

static void
await_request(ZkRequest *req)
{
	while (!bridge_done(req))
	{
		bridge_wait(-1);
		zk_session_check_alive("reading a lock queue");
	}
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
list_children(QueueRead *r, const char *parent, bool gate, int *maxnodes)
{
	ZkRequest  *req = bridge_get_children(r->zh, parent);

	r->pending[1] = req;
	await_request(req);
	if (req->rc != ZOK && req->rc != ZNONODE)
		zk_report_error(req->rc, "list children of", parent);
	for (int i = 0; req->rc == ZOK && i < req->nchildren; i++)
	{
		const char *child = req->children[i];
		int64		seq = lock_node_sequence(child);
		QueueNode  *n;

		if (seq < 0)
			continue;
		if (r->nnodes == *maxnodes)
		{
			*maxnodes *= 2;
			r->nodes = repalloc(r->nodes, *maxnodes * sizeof(QueueNode));
		}
		n = &r->nodes[r->nnodes++];
		memset(n, 0, sizeof(*n));
		n->child = psprintf("%s/%s", parent, child);
		n->seq = seq;
		n->mode = gate ? LOCK_MODE_SEMAPHORE : lock_node_mode(child);
		n->gate = gate;
	}
	bridge_free(req);
	r->pending[1] = NULL;
}

/*
 * Does a writer below reader i block it?  Not one of the same zklock session:
 * a backend that holds the exclusive lock may take the shared one too.  The
 * session part of a zklock node's tag is its first ZK_TAG_SESSION_LEN bytes.
 */
static bool
blocked_by_writer(QueueNode *nodes, int i)
{
	const char *mine = strstr(nodes[i].child, "/_c_");

	for (int j = 0; j < i; j++)
	{
		const char *theirs = strstr(nodes[j].child, "/_c_");

		if (nodes[j].mode == LOCK_MODE_SHARED)
			continue;
		if (mine == NULL || theirs == NULL ||
			strncmp(mine, theirs, 4 + ZK_TAG_SESSION_LEN) != 0)
			return true;
	}
	return false;
}

/* Who holds, judged from the sorted queue as each owner judges it. */
static void
judge(QueueNode *nodes, int n)
{
	int			leases = 0;
	bool		lease_waits = false;

	for (int i = 0; i < n; i++)
	{
		QueueNode  *q = &nodes[i];

		if (q->gate)
			continue;
		if (q->mode == LOCK_MODE_SEMAPHORE)
		{
			int			permits = lock_node_permits(q->child);

			q->holding = leases++ < (permits > 0 ? permits : 1);
			lease_waits |= !q->holding;
		}
		else if (q->mode == LOCK_MODE_SHARED)
			q->holding = !blocked_by_writer(nodes, i);
		else
			q->holding = i == 0;
	}
	/* The first gate node belongs to the waiter whose lease is listed. */
	for (int i = 0; lease_waits && i < n; i++)
		if (nodes[i].gate)
		{
			nodes[i].seq = -1;
			break;
		}
}

static bool
is_json_object(const char *data)
{
	JsonLexContext *lex;

	if (data[0] != '{')
		return false;
	lex = zk_json_lexer(data, GetDatabaseEncoding());
	return pg_parse_json(lex, &nullSemAction) == JSON_SUCCESS;
}

static void
emit_queue(QueueRead *r, const char *name, const char *parent,
		   Tuplestorestate *store, TupleDesc desc)
{
	int			maxnodes = 16;
	int			position = 0;

	r->nodes = palloc(maxnodes * sizeof(QueueNode));
	r->nnodes = 0;
	list_children(r, parent, false, &maxnodes);
	/* A semaphore's queue: leases, then the waiters at its gate. */
	if (r->nnodes == 0)
	{
		char	   *leases = psprintf("%s/leases", parent);
		char	   *locks = psprintf("%s/locks", parent);

		list_children(r, leases, false, &maxnodes);
		if (r->nnodes > 0)
		{
			int			nleases = r->nnodes;

			list_children(r, locks, true, &maxnodes);
			qsort(r->nodes, nleases, sizeof(QueueNode), by_sequence);
			qsort(r->nodes + nleases, r->nnodes - nleases, sizeof(QueueNode),
				  by_sequence);
		}
	}
	else
		qsort(r->nodes, r->nnodes, sizeof(QueueNode), by_sequence);
	judge(r->nodes, r->nnodes);

	for (int i = 0; i < r->nnodes; i++)
		if (r->nodes[i].seq >= 0)
			r->nodes[i].get = bridge_get(r->zh, r->nodes[i].child);

	for (int i = 0; i < r->nnodes; i++)
	{
		QueueNode  *q = &r->nodes[i];
		Datum		values[ZK_LOCK_QUEUE_COLS];
		bool		nulls[ZK_LOCK_QUEUE_COLS] = {0};

		if (q->get == NULL)
			continue;
		await_request(q->get);
		if (q->get->rc == ZNONODE)
		{
			bridge_free(q->get);
			q->get = NULL;
			continue;
		}
		if (q->get->rc != ZOK)
			zk_report_error(q->get->rc, "read", q->child);

		values[0] = CStringGetTextDatum(name);
		values[1] = Int32GetDatum(++position);
		values[2] = CStringGetTextDatum(lock_mode_names[q->mode]);
		values[3] = BoolGetDatum(q->holding);
		values[4] = Int64GetDatum(q->get->czxid);
		values[5] = CStringGetTextDatum(q->child);
		if (is_json_object(q->get->data))
			values[6] = CStringGetTextDatum(q->get->data);
		else
			nulls[6] = true;
		tuplestore_putvalues(store, desc, values, nulls);
		bridge_free(q->get);
		q->get = NULL;
	}
}

static void
abandon_all(QueueRead *r)
{
	for (int i = 0; i < (int) lengthof(r->pending); i++)
		if (r->pending[i])
			bridge_abandon(r->pending[i]);
	for (int i = 0; i < r->nnodes; i++)
		if (r->nodes[i].get)
			bridge_abandon(r->nodes[i].get);
}

/*
 * zk_lock_queue(name text): the queue of one lock; with NULL, of every lock
 * below zklock.root.
 */
Datum
zk_lock_queue(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	QueueRead	r = {0};

	InitMaterializedSRF(fcinfo, 0);
	r.zh = zk_session_require(lock_table_count() > 0);

	PG_TRY();
	{
		if (!PG_ARGISNULL(0))
		{
			char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));

			zklock_check_name(name);
			emit_queue(&r, name, zklock_parent_path(name),
					   rsinfo->setResult, rsinfo->setDesc);
		}
		else
		{
			ZkRequest  *req = bridge_get_children(r.zh, zklock_root);

			r.pending[0] = req;
			await_request(req);
			if (req->rc != ZOK && req->rc != ZNONODE)
				zk_report_error(req->rc, "list children of", zklock_root);
			for (int i = 0; req->rc == ZOK && i < req->nchildren; i++)
			{
				char	   *name = zklock_decode_name(req->children[i]);

				if (name != NULL)
					emit_queue(&r, name, zklock_parent_path(name),
							   rsinfo->setResult, rsinfo->setDesc);
			}
			bridge_free(req);
			r.pending[0] = NULL;
		}
	}
	PG_CATCH();
	{
		abandon_all(&r);
		PG_RE_THROW();
	}
	PG_END_TRY();
	return (Datum) 0;
}
