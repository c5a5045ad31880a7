/*
 * lock_recipe.h
 *	  The ZooKeeper lock recipes: exclusive and shared locks, semaphores.
 */
#ifndef ZKLOCK_LOCK_RECIPE_H
#define ZKLOCK_LOCK_RECIPE_H

#include "lock_node.h"
#include "zk_bridge.h"

/* What to acquire. */
typedef struct LockRequest
{
	const char *name;			/* the lock's name, for messages */
	const char *parent;			/* the lock's parent znode */
	LockMode	mode;
	int			permits;		/* SEMAPHORE: holders allowed at once */
	const char *own_writer;		/* SHARED: our exclusive node on it, if any */
	int			timeout_ms;		/* -1 waits without limit, 0 never waits */
} LockRequest;

/* A node we hold: where it is and its fencing token. */
typedef struct HeldNode
{
	char	   *path;			/* palloc'd in the caller's context */
	int64		token;			/* czxid */
	char	   *recheck_tag;	/* see lock_recipe_release; usually NULL */
	HeldWatch  *watch;			/* on path: tells if another client deletes it */
} HeldNode;

extern bool lock_recipe_acquire(const LockRequest *req,
								HeldNode *held);
extern void lock_recipe_release(const char *node, const char *recheck_tag,
								HeldWatch *watch, const char *name);
extern int	lock_recipe_await_releases(bool interruptible, bool report);

/* Who hears of releases that proved nothing: one name, how many. */
typedef void (*UnprovenReleaseReporter) (const char *name, int count);
extern void lock_recipe_set_unproven_reporter(UnprovenReleaseReporter reporter);

#endif							/* ZKLOCK_LOCK_RECIPE_H */
