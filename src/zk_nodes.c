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

/*
 * Create path and every ancestor of it that is missing, root first, in one
 * pipelined batch.  All are containers, so the server removes each once its
 * last child is gone (zklock.root too: a lock tree nobody uses leaves
 * nothing behind).  False if deadline (0: none) passed first.  An error
 * raises, unless error is given: then the first one is left there.
 */
bool
zk_create_path(const char *target, int64 deadline, int *error)
{
	char	   *path = pstrdup(target);
	int			n = 0;
	ZkRequest **reqs;
	char	   *p;
	volatile bool answered = true;

	for (p = path + 1; *p; p++)
		if (*p == '/')
			n++;
	reqs = palloc0(sizeof(ZkRequest *) * (n + 1));

	n = 0;
	for (p = path + 1;; p++)
	{
		if (*p == '/' || *p == '\0')
		{
			bool		last = (*p == '\0');

			*p = '\0';
			reqs[n++] = bridge_create(path, "", 0, ZOO_CONTAINER, NULL);
			if (last)
				break;
			*p = '/';
		}
	}

	PG_TRY();
	{
		for (int i = 0; i < n &&
			 (answered = zk_session_await(reqs[i], deadline, ZK_CREATING_NODES));
			 i++)
		{
			int			rc = reqs[i]->rc;

			if (error != NULL)
			{
				if (rc != ZOK && rc != ZNODEEXISTS && *error == ZOK)
					*error = rc;
			}
			else if (rc == ZNONODE && i == 0)
				zk_report_missing_chroot(reqs[i]->path, rc);
			/* Lost replies are harmless: the next create attempt retries. */
			else if (rc != ZOK && rc != ZNODEEXISTS && !bridge_reply_lost(rc) &&
					 rc != ZNONODE)
				zk_report_error(rc, ZK_ACTION_CREATE, reqs[i]->path);
			bridge_free(reqs[i]);
			reqs[i] = NULL;
		}
	}
	PG_CATCH();
	{
		for (int i = 0; i < n; i++)
			if (reqs[i] != NULL)
				bridge_abandon(reqs[i]);
		PG_RE_THROW();
	}
	PG_END_TRY();
	for (int i = 0; i < n; i++)
		if (reqs[i] != NULL)
			bridge_abandon(reqs[i]);
	pfree(reqs);
	pfree(path);
	return answered;
}
