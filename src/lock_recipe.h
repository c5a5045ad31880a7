/*
 * lock_recipe.h
 *	  The ZooKeeper lock recipe.
 */
#ifndef ZKLOCK_LOCK_RECIPE_H
#define ZKLOCK_LOCK_RECIPE_H

#include <zookeeper/zookeeper.h>

/* A node we hold: where it is and its fencing token. */
typedef struct HeldNode
{
	char	   *path;			/* palloc'd in the caller's context */
	int64		token;			/* czxid */
	char	   *recheck_tag;	/* see lock_recipe_release; usually NULL */
} HeldNode;

extern bool lock_recipe_acquire(zhandle_t *zh, const char *parent,
								int timeout_ms, HeldNode *held);
extern void lock_recipe_release(zhandle_t *zh, const char *node,
								const char *recheck_tag);
extern void lock_recipe_await_releases(bool interruptible);
extern void zk_report_error(int rc, const char *action, const char *path);

#endif							/* ZKLOCK_LOCK_RECIPE_H */
