/*
 * zk_worker.h
 *	  The session worker, which owns the server's ZooKeeper session.
 */
#ifndef ZKLOCK_ZK_WORKER_H
#define ZKLOCK_ZK_WORKER_H

extern bool zk_worker_register(void);

#endif							/* ZKLOCK_ZK_WORKER_H */
