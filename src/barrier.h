/*
 * barrier.h
 *	  Gates and double barriers (ZooKeeper's barrier recipes): what
 *	  barrier.c shares with their views and with DISCARD ALL.
 */
#ifndef ZKLOCK_BARRIER_H
#define ZKLOCK_BARRIER_H

#include "fmgr.h"

#include "zk_bridge.h"

/* Where relative names live below zklock.root (see zklock_place_path). */
#define BARRIERS_PLACE "%barriers"
#define GATES_PLACE "%gates"

/* A double barrier's child that says that enough members entered. */
#define BARRIER_READY "ready"

extern char *barrier_path_arg(FunctionCallInfo fcinfo, const char *what,
							  const char *place, char **name);
extern void barrier_await(ZkRequest *req);
extern void barrier_await_reconnect(void);
extern void barrier_discard_all(void);

#endif							/* ZKLOCK_BARRIER_H */
