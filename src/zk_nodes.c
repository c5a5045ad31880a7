/*
 * zk_nodes.c
 *	  What every part that talks to ZooKeeper shares: creating a node's path
 *	  (as containers), and ZooKeeper's errors as PostgreSQL errors.
 */
#include "postgres.h"

#include <zookeeper/zookeeper.h>

#include "zk_bridge.h"
#include "zk_nodes.h"
#include "zk_session.h"

/*
 * ERROR (55000): the chroot of zklock.hosts does not exist, as a request
 * for path below it found (ZNONODE).  Nothing can be created or listed then.
 */
void
zk_report_missing_chroot(const char *path, int rc)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("the chroot in zklock.hosts does not exist"),
			 errdetail("A request for \"%s\" below it failed: %s.",
					   path, zerror(rc)),
			 errhint("Create the chroot node, or remove it from zklock.hosts.")));
}

/* The message of a refused request: one whole sentence per action. */
static int
denied_message(ZkAction action, const char *path)
{
	switch (action)
	{
		case ZK_ACTION_CREATE:
			return errmsg("permission denied to create ZooKeeper node \"%s\"", path);
		case ZK_ACTION_LIST:
			return errmsg("permission denied to list children of ZooKeeper node \"%s\"", path);
		case ZK_ACTION_READ:
			return errmsg("permission denied to read ZooKeeper node \"%s\"", path);
		case ZK_ACTION_WATCH:
			return errmsg("permission denied to watch ZooKeeper node \"%s\"", path);
		case ZK_ACTION_WRITE:
			return errmsg("permission denied to write ZooKeeper node \"%s\"", path);
		case ZK_ACTION_DELETE:
			return errmsg("permission denied to delete ZooKeeper node \"%s\"", path);
	}
	return 0;
}

/* The message of a request that failed otherwise. */
static int
failed_message(ZkAction action, const char *path, int rc)
{
	switch (action)
	{
		case ZK_ACTION_CREATE:
			return errmsg("could not create ZooKeeper node \"%s\": %s", path, zerror(rc));
		case ZK_ACTION_LIST:
			return errmsg("could not list children of ZooKeeper node \"%s\": %s", path, zerror(rc));
		case ZK_ACTION_READ:
			return errmsg("could not read ZooKeeper node \"%s\": %s", path, zerror(rc));
		case ZK_ACTION_WATCH:
			return errmsg("could not watch ZooKeeper node \"%s\": %s", path, zerror(rc));
		case ZK_ACTION_WRITE:
			return errmsg("could not write ZooKeeper node \"%s\": %s", path, zerror(rc));
		case ZK_ACTION_DELETE:
			return errmsg("could not delete ZooKeeper node \"%s\": %s", path, zerror(rc));
	}
	return 0;
}

/* Raise ZooKeeper's answer rc to action on path as an ERROR. */
void
zk_report_error(int rc, ZkAction action, const char *path)
{
	if (rc == ZNOAUTH || rc == ZAUTHFAILED)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 denied_message(action, path),
				 errdetail("ZooKeeper answered: %s.", zerror(rc)),
				 errhint("The node's ACL does not admit this session's credentials: set zklock.auth to the credentials the lock tree was created with.")));

	ereport(ERROR,
			(errcode(rc == ZCONNECTIONLOSS || rc == ZSESSIONEXPIRED ||
					 rc == ZOPERATIONTIMEOUT || rc == ZCLOSING ||
					 rc == ZINVALIDSTATE ?
					 ERRCODE_CONNECTION_FAILURE : ERRCODE_SYSTEM_ERROR),
			 failed_message(action, path, rc)));
}

/* Creates in flight for a path, root first; see zk_send_path_creates. */
struct ZkPathCreates
{
	int			n;
	bool		from_top;		/* reqs[0] creates a child of "/" */
	ZkRequest  *reqs[FLEXIBLE_ARRAY_MEMBER];
};

/*
 * Send, without waiting, the create of path and, with ancestors, of every
 * ancestor of it first, root first: one pipelined batch, answered in order.
 * All are containers, so the server removes each once its last child is gone
 * (zklock.root too: a lock tree nobody uses leaves nothing behind).
 */
ZkPathCreates *
zk_send_path_creates(const char *target, bool ancestors)
{
	char	   *path = pstrdup(target);
	int			depth = 0;
	ZkPathCreates *pc;

	for (char *p = path + 1; *p; p++)
		if (*p == '/')
			depth++;
	pc = palloc0(offsetof(ZkPathCreates, reqs) +
				 sizeof(ZkRequest *) * (ancestors ? depth + 1 : 1));
	pc->from_top = ancestors || depth == 0;
	for (char *p = ancestors ? path + 1 : path + strlen(path);; p++)
	{
		if (*p == '/' || *p == '\0')
		{
			bool		last = (*p == '\0');

			*p = '\0';
			pc->reqs[pc->n++] = bridge_create(path, "", 0, ZOO_CONTAINER, NULL);
			if (last)
				break;
			*p = '/';
		}
	}
	pfree(path);
	return pc;
}

/* Forget the creates' answers; never raises. */
void
zk_path_creates_abandon(ZkPathCreates *pc)
{
	for (int i = 0; i < pc->n; i++)
		if (pc->reqs[i] != NULL)
			bridge_abandon(pc->reqs[i]);
	pfree(pc);
}

/*
 * Wait for the creates' answers and free them.  False if deadline (0: none)
 * passed first.  An error raises, unless error is given: then the first one
 * is left there.  A missing node (ZNONODE: an ancestor not created in front,
 * or removed again since) is not an error: the caller's next attempt tells.
 */
bool
zk_path_creates_finish(ZkPathCreates *pc, int64 deadline, int *error)
{
	volatile bool answered = true;

	PG_TRY();
	{
		for (int i = 0; i < pc->n &&
			 (answered = zk_session_await(pc->reqs[i], deadline, ZK_CREATING_NODES));
			 i++)
		{
			int			rc = pc->reqs[i]->rc;

			if (error != NULL)
			{
				if (rc != ZOK && rc != ZNODEEXISTS && *error == ZOK)
					*error = rc;
			}
			else if (rc == ZNONODE && i == 0 && pc->from_top)
				zk_report_missing_chroot(pc->reqs[i]->path, rc);
			/* Lost replies are harmless: the next create attempt retries. */
			else if (rc != ZOK && rc != ZNODEEXISTS && !bridge_reply_lost(rc) &&
					 rc != ZNONODE)
				zk_report_error(rc, ZK_ACTION_CREATE, pc->reqs[i]->path);
			bridge_free(pc->reqs[i]);
			pc->reqs[i] = NULL;
		}
	}
	PG_CATCH();
	{
		zk_path_creates_abandon(pc);
		PG_RE_THROW();
	}
	PG_END_TRY();
	zk_path_creates_abandon(pc);
	return answered;
}

/* Create path and every ancestor of it that is missing, in one round trip. */
bool
zk_create_path(const char *target, int64 deadline, int *error)
{
	return zk_path_creates_finish(zk_send_path_creates(target, true),
								  deadline, error);
}
