/*
 * zk_nodes.h
 *	  Creating node paths, and ZooKeeper's errors as PostgreSQL errors.
 */
#ifndef ZKLOCK_ZK_NODES_H
#define ZKLOCK_ZK_NODES_H

/* What was asked of ZooKeeper, for the message of its error. */
typedef enum ZkAction
{
	ZK_ACTION_CREATE,
	ZK_ACTION_LIST,
	ZK_ACTION_READ,
	ZK_ACTION_WATCH,
	ZK_ACTION_WRITE,
	ZK_ACTION_DELETE
} ZkAction;

extern void zk_report_error(int rc, ZkAction action, const char *path);
extern void zk_report_missing_chroot(const char *path, int rc);
extern bool zk_create_path(const char *path, int64 deadline, int *error);

typedef struct ZkPathCreates ZkPathCreates;
extern ZkPathCreates *zk_send_path_creates(const char *path, bool ancestors);
extern bool zk_path_creates_finish(ZkPathCreates *pc, int64 deadline, int *error);
extern void zk_path_creates_abandon(ZkPathCreates *pc);

#endif							/* ZKLOCK_ZK_NODES_H */
