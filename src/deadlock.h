/*
 * deadlock.h
 *	  Cluster-wide deadlock detection for waits on zklock locks.
 */
#ifndef ZKLOCK_DEADLOCK_H
#define ZKLOCK_DEADLOCK_H

#include "lock_node.h"

/* A wait the recipe hands to the detector. */
typedef struct DeadlockWait
{
	const char *name;			/* the lock's name, for messages */
	const char *parent;			/* its parent znode */
	const char *node;			/* our node in its queue, full path */
	int64		czxid;			/* when our wait began, in ZooKeeper's order */
	LockMode	mode;
	int64		deadline;		/* of the acquisition; 0 for none */
	bool		checked;		/* looked for a deadlock at least once */
	int			looks;			/* how often */
	int64		retry_at;		/* look again then */
	char	   *entry;			/* our published wait's path, from the first look */
	bool		published;		/* ... and watched for pokes */
	bool		rearm;			/* a poke used the watch up: set it again */
} DeadlockWait;

extern bool deadlock_poked(DeadlockWait *w);
extern void deadlock_check(DeadlockWait *w);
extern void deadlock_withdraw(DeadlockWait *w);

#endif							/* ZKLOCK_DEADLOCK_H */
