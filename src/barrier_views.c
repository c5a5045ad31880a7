/*
 * barrier_views.c
 *	  Barriers and gates as ZooKeeper holds them, read from any PostgreSQL
 *	  node (zk_barriers, zk_barrier_members, zk_gates), and a superuser's
 *	  reset of a barrier (zk_barrier_reset).
 *
 * A barrier is listed, then its children are read in one pipelined round
 * (each one's data and czxid: zklock's members carry their owner's JSON
 * and parties, Kazoo's "fqdn-pid", Curator's an address).  It is a
 * snapshot: children that went between the two steps are left out.
 * Whether a member waits or is inside, ZooKeeper cannot tell: the views say
 * it for this server's backends only.  Reading raises nothing for what any
 * client may have written; each request has zklock.connect_timeout to be
 * answered.  With NULL for a name, the views read every barrier or gate
 * below zklock.root, and no absolute path.
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

#include "barrier.h"
#include "guc.h"
#include "lock_name.h"
#include "node_info.h"
#include "zk_bridge.h"
#include "zk_nodes.h"
#include "zk_session.h"

PG_FUNCTION_INFO_V1(zk_barriers);
PG_FUNCTION_INFO_V1(zk_barrier_members);
PG_FUNCTION_INFO_V1(zk_gates);
PG_FUNCTION_INFO_V1(zk_barrier_reset);

/* One child of a barrier, or a gate, as read. */
typedef struct NodeRead
{
	char	   *path;
	char	   *child;			/* its name */
	ZkRequest  *get;			/* in flight */
	bool		gone;			/* deleted before it could be read */
	int64		czxid;
	char	   *data;
	int			data_len;
	NodeInfo	info;
} NodeRead;

/* One barrier: its members, sorted by name, and its ready. */
typedef struct BarrierRead
{
	char	   *name;
	char	   *path;
	NodeRead   *members;
	int			n;
	NodeRead	ready;
	bool		has_ready;
} BarrierRead;

/* Requests of a reading in flight, abandoned on ERROR. */
static ZkRequest *listing_in_flight = NULL;
static NodeRead *reads_in_flight = NULL;
static int	nreads_in_flight = 0;

static void
abandon_reading(void)
{
	if (listing_in_flight != NULL)
		bridge_abandon(listing_in_flight);
	listing_in_flight = NULL;
	for (int i = 0; i < nreads_in_flight; i++)
		if (reads_in_flight[i].get != NULL)
			bridge_abandon(reads_in_flight[i].get);
	reads_in_flight = NULL;
	nreads_in_flight = 0;
}

/* The children of path (none if it does not exist), sorted by name. */
static char **
list_children(const char *path, int *n)
{
	ZkRequest  *l = bridge_get_children(path);
	char	  **children;

	listing_in_flight = l;
	barrier_await(l);
	if (l->rc != ZOK && l->rc != ZNONODE)
		zk_report_error(l->rc, ZK_ACTION_LIST, path);
	*n = l->rc == ZOK ? l->nchildren : 0;
	children = palloc(sizeof(char *) * (*n + 1));
	for (int i = 0; i < *n; i++)
		children[i] = pstrdup(l->children[i]);
	listing_in_flight = NULL;
	bridge_free(l);
	qsort(children, *n, sizeof(char *), pg_qsort_strcmp);
	return children;
}

/* Read nodes' data and czxid in one pipelined round. */
static void
read_nodes(NodeRead *nodes, int n)
{
	reads_in_flight = nodes;
	nreads_in_flight = n;
	for (int i = 0; i < n; i++)
		nodes[i].get = bridge_get(nodes[i].path);
	for (int i = 0; i < n; i++)
	{
		NodeRead   *r = &nodes[i];

		barrier_await(r->get);
		if (r->get->rc == ZNONODE)
			r->gone = true;
		else if (r->get->rc != ZOK)
			zk_report_error(r->get->rc, ZK_ACTION_READ, r->path);
		else
		{
			r->czxid = r->get->czxid;
			r->data = pnstrdup(r->get->data, r->get->data_len);
			r->data_len = r->get->data_len;
			node_info_parse(r->data, r->data_len, &r->info);
		}
		bridge_free(r->get);
		r->get = NULL;
	}
	reads_in_flight = NULL;
	nreads_in_flight = 0;
}

static void
read_barrier(BarrierRead *b)
{
	int			nchildren;
	char	  **children = list_children(b->path, &nchildren);
	NodeRead   *nodes = palloc0(sizeof(NodeRead) * (nchildren + 1));

	b->members = nodes;
	b->n = 0;
	for (int i = 0; i < nchildren; i++)
	{
		NodeRead   *r;

		if (strcmp(children[i], BARRIER_READY) == 0)
		{
			b->has_ready = true;
			continue;
		}
		r = &nodes[b->n++];
		r->child = children[i];
		r->path = psprintf("%s/%s", b->path, children[i]);
	}
	/* ready last, in the same round. */
	if (b->has_ready)
	{
		nodes[b->n].child = BARRIER_READY;
		nodes[b->n].path = psprintf("%s/%s", b->path, BARRIER_READY);
	}
	read_nodes(nodes, b->n + (b->has_ready ? 1 : 0));
	if (b->has_ready)
	{
		b->ready = nodes[b->n];
		b->has_ready = !b->ready.gone;
	}
}

/*
 * The barriers (or gates) to read: the one named by the first argument, or
 * with NULL every one in place below zklock.root.  *names gets their names.
 */
static char **
named_paths(FunctionCallInfo fcinfo, const char *what, const char *place,
			char ***names, int *n)
{
	char	  **paths;
	char	  **children;
	char	   *dir = psprintf("%s/%s", zklock_root, place);
	int			nchildren;

	if (!PG_ARGISNULL(0))
	{
		*names = palloc(sizeof(char *));
		paths = palloc(sizeof(char *));
		paths[0] = barrier_path_arg(fcinfo, what, place, &(*names)[0]);
		*n = 1;
		return paths;
	}
	children = list_children(dir, &nchildren);
	*names = palloc(sizeof(char *) * (nchildren + 1));
	paths = palloc(sizeof(char *) * (nchildren + 1));
	*n = 0;
	for (int i = 0; i < nchildren; i++)
	{
		char	   *name = zklock_decode_name(children[i]);

		if (name == NULL)
			continue;
		(*names)[*n] = name;
		paths[(*n)++] = psprintf("%s/%s", dir, children[i]);
	}
	return paths;
}

/* A node's data as text of this database, if it is text and not zklock's JSON. */
static char *
foreign_data(NodeRead *r)
{
	if (r->info.valid || r->data == NULL || r->data_len == 0 ||
		memchr(r->data, '\0', r->data_len) != NULL ||
		!pg_verify_mbstr(GetDatabaseEncoding(), r->data, r->data_len, true))
		return NULL;
	return r->data;
}

typedef void (*BarrierEmitter) (BarrierRead *b, ReturnSetInfo *rsinfo);

/* Read the barriers the first argument names, and emit each. */
static void
emit_barriers(FunctionCallInfo fcinfo, BarrierEmitter emit)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	  **names;
	char	  **paths;
	int			n;

	InitMaterializedSRF(fcinfo, 0);
	zk_session_require();
	PG_TRY();
	{
		paths = named_paths(fcinfo, "barrier", BARRIERS_PLACE, &names, &n);
		for (int i = 0; i < n; i++)
		{
			BarrierRead b = {0};

			b.name = names[i];
			b.path = paths[i];
			read_barrier(&b);
			if (b.n > 0 || b.has_ready || !PG_ARGISNULL(0))
				emit(&b, rsinfo);
		}
	}
	PG_CATCH();
	{
		abandon_reading();
		PG_RE_THROW();
	}
	PG_END_TRY();
}

/* ---- zk_barriers ---- */

#define ZK_BARRIERS_COLS 6

static void
emit_barrier_row(BarrierRead *b, ReturnSetInfo *rsinfo)
{
	Datum		values[ZK_BARRIERS_COLS];
	bool		nulls[ZK_BARRIERS_COLS] = {0};
	int			members = 0;
	int64		oldest = PG_INT64_MAX;

	nulls[3] = true;
	for (int i = 0; i < b->n; i++)
	{
		if (b->members[i].gone)
			continue;
		members++;
		oldest = Min(oldest, b->members[i].czxid);
		if (nulls[3] && b->members[i].info.has_parties)
		{
			values[3] = Int32GetDatum(b->members[i].info.parties);
			nulls[3] = false;
		}
	}
	values[0] = CStringGetTextDatum(b->name);
	values[1] = CStringGetTextDatum(b->path);
	values[2] = Int32GetDatum(members);
	values[4] = BoolGetDatum(b->has_ready);
	/* Older than every member: a round in which nobody left left it. */
	values[5] = BoolGetDatum(b->has_ready && b->ready.czxid < oldest);
	nulls[5] = !b->has_ready;
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * zk_barriers(name text): a barrier's members, parties and ready; NULL:
 * every barrier below zklock.root.
 */
Datum
zk_barriers(PG_FUNCTION_ARGS)
{
	emit_barriers(fcinfo, emit_barrier_row);
	return (Datum) 0;
}

/* ---- zk_barrier_members ---- */

#define ZK_BARRIER_MEMBERS_COLS 15

static void
emit_member_rows(BarrierRead *b, ReturnSetInfo *rsinfo)
{
	static const char *const phases[] = {
		[BARRIER_INSIDE] = "inside",
		[BARRIER_ENTERING] = "entering",
		[BARRIER_LEAVING] = "leaving",
	};
	int			position = 0;

	for (int i = 0; i < b->n; i++)
	{
		NodeRead   *r = &b->members[i];
		Datum		values[ZK_BARRIER_MEMBERS_COLS];
		bool		nulls[ZK_BARRIER_MEMBERS_COLS] = {0};
		pid_t		local;

		if (r->gone)
			continue;
		values[0] = CStringGetTextDatum(b->name);
		values[1] = Int32GetDatum(++position);
		values[2] = CStringGetTextDatum(r->path);
		values[3] = Int64GetDatum(r->czxid);
		values[4] = Int32GetDatum(r->info.parties);
		nulls[4] = !r->info.has_parties;
		node_info_owner_columns(&r->info, values, nulls, 5);
		/* Only this server's backends say whether they wait. */
		local = strlen(r->child) == ZK_TAG_LEN ? bridge_local_pid(r->child) : 0;
		node_info_text_column(values, nulls, 12, local != 0 ?
				 phases[bridge_barrier_wait_of(local, r->child)] : NULL);
		/* Entered before ready was made: counted in for this round. */
		values[13] = BoolGetDatum(b->has_ready && b->ready.czxid > r->czxid);
		node_info_text_column(values, nulls, 14, foreign_data(r));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
}

/*
 * zk_barrier_members(name text): a barrier's members, in the order the
 * recipe sorts them, with who they are; NULL: of every barrier below
 * zklock.root.
 */
Datum
zk_barrier_members(PG_FUNCTION_ARGS)
{
	emit_barriers(fcinfo, emit_member_rows);
	return (Datum) 0;
}

/* ---- zk_gates ---- */

#define ZK_GATES_COLS 12

/*
 * zk_gates(name text): whether a gate is closed, and by whom; NULL: every
 * closed gate below zklock.root.
 */
Datum
zk_gates(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	  **names;
	char	  **paths;
	int			n;
	NodeRead   *gates;

	InitMaterializedSRF(fcinfo, 0);
	zk_session_require();
	PG_TRY();
	{
		paths = named_paths(fcinfo, "gate", GATES_PLACE, &names, &n);
		gates = palloc0(sizeof(NodeRead) * (n + 1));
		for (int i = 0; i < n; i++)
			gates[i].path = paths[i];
		read_nodes(gates, n);
	}
	PG_CATCH();
	{
		abandon_reading();
		PG_RE_THROW();
	}
	PG_END_TRY();
	for (int i = 0; i < n; i++)
	{
		NodeRead   *r = &gates[i];
		Datum		values[ZK_GATES_COLS];
		bool		nulls[ZK_GATES_COLS] = {0};

		if (r->gone && PG_ARGISNULL(0))
			continue;
		values[0] = CStringGetTextDatum(names[i]);
		values[1] = CStringGetTextDatum(r->path);
		values[2] = BoolGetDatum(!r->gone);
		values[3] = Int64GetDatum(r->czxid);
		nulls[3] = r->gone;
		node_info_owner_columns(&r->info, values, nulls, 4);
		node_info_text_column(values, nulls, 11,
							  r->gone ? NULL : foreign_data(r));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* ---- zk_barrier_reset ---- */

/*
 * zk_barrier_reset(name text): delete every child of a barrier's node, ready
 * and the members' nodes whoever they are, so that it starts afresh.  For
 * a barrier stuck on a member that will not come, or on a ready left
 * behind.  Members that lose their node learn it at their next call (a
 * waiting zklock member at once).  Returns how many nodes it deleted.
 * Superuser only, unless granted.
 */
Datum
zk_barrier_reset(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *path = barrier_path_arg(fcinfo, "barrier", BARRIERS_PLACE, &name);
	int			n;
	char	  **children;
	ZkRequest **deletes;
	int			deleted = 0;

	zk_session_require();
	PG_TRY();
	{
		children = list_children(path, &n);
	}
	PG_CATCH();
	{
		abandon_reading();
		PG_RE_THROW();
	}
	PG_END_TRY();
	deletes = palloc0(sizeof(ZkRequest *) * (n + 1));
	PG_TRY();
	{
		for (int i = 0; i < n; i++)
			deletes[i] = bridge_delete_shared(psprintf("%s/%s", path, children[i]), -1);
		for (int i = 0; i < n; i++)
		{
			int			rc;

			barrier_await(deletes[i]);
			rc = deletes[i]->rc;
			if (rc == ZOK)
				deleted++;
			else if (rc != ZNONODE)
				zk_report_error(rc, ZK_ACTION_DELETE, deletes[i]->path);
			bridge_free(deletes[i]);
			deletes[i] = NULL;
		}
	}
	PG_CATCH();
	{
		for (int i = 0; i < n; i++)
			if (deletes[i] != NULL)
				bridge_abandon(deletes[i]);
		PG_RE_THROW();
	}
	PG_END_TRY();
	PG_RETURN_INT32(deleted);
}
