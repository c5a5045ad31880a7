/*
 * zk_requests.h
 *	  What backends and the session worker exchange, as types: the kinds of
 *	  request, the session's published state, the request counters.
 */
#ifndef ZKLOCK_ZK_REQUESTS_H
#define ZKLOCK_ZK_REQUESTS_H

#include <stdint.h>

/* Why the worker closed a session of its own will. */
typedef enum ZkCloseReason
{
	ZK_CLOSED_UNKNOWN,			/* not closed by the worker, or not the last */
	ZK_CLOSED_SETTINGS,			/* zklock.hosts, .session_timeout or .auth
								 * changed at a reload */
	ZK_CLOSED_SERVER_FAULT		/* its server left a request unanswered */
} ZkCloseReason;

typedef enum ZkRequestKind
{
	ZKREQ_CREATE,				/* zoo_acreate2: path of the new node, czxid */
	ZKREQ_CHILDREN,				/* zoo_aget_children: names */
	ZKREQ_WATCH,				/* zoo_awget(_children) with the waiter's watcher */
	ZKREQ_GET,					/* zoo_aget without a watch: data, czxid */
	ZKREQ_SYNC,					/* zoo_async: catch the server up with the leader */
	ZKREQ_EXISTS,				/* zoo_aexists without a watch */
	ZKREQ_SET,					/* zoo_aset of any version */
	ZKREQ_POKE_WATCH,			/* zoo_awget on a published wait (deadlock.c) */
	ZKREQ_EXISTS_WATCH,			/* zoo_awexists with the waiter's watcher:
								 * set also on a node that does not exist */
	ZKREQ_DELETE_SHARED,		/* zoo_adelete of a node nobody owns (a
								 * barrier's ready, a gate), at a version */
	/* One-way: the worker carries them out, nobody waits for a reply. */
	ZKREQ_DELETE,				/* one of the backend's nodes */
	ZKREQ_DELETE_TAGGED,		/* its child of path whose name has the tag */
	ZKREQ_UNWATCH,				/* the backend's watch on path */
	ZKREQ_HELD_WATCH			/* watch a node the backend found again */
} ZkRequestKind;

/*
 * What the server said to the delete of a lock the backend released: proof
 * that the lock was held until then (its node was still there, in the same
 * session), or none (see lock_recipe_release).
 */
typedef enum ReleaseVerdict
{
	RELEASE_PENDING,
	RELEASE_PROVEN,
	RELEASE_UNPROVEN
} ReleaseVerdict;

/* Where a backend waits at a barrier, for the views (zk_barrier_members). */
typedef enum BarrierPhase
{
	BARRIER_INSIDE,				/* not waiting */
	BARRIER_ENTERING,
	BARRIER_LEAVING
} BarrierPhase;

/* A copy of what the session watcher last saw. */
typedef struct ZkSessionSnapshot
{
	int			zk_state;		/* ZOO_*_STATE of the last session event */
	int64_t		session_id;
	int			timeout_ms;		/* negotiated session timeout */
	char		server[64];		/* server of the current connection */
	int64_t		changed_at_ms;	/* bridge_now_ms() of the last state change */
	uint64_t	events;			/* count of session events so far */
	uint64_t	generation;		/* of the handle; 0: none open */
} ZkSessionSnapshot;

/* Requests sent and reconnects, counted for zk_session_stats. */
typedef enum BridgeCounter
{
	BRIDGE_CREATES,
	BRIDGE_DELETES,
	BRIDGE_CHILDREN_LISTS,
	BRIDGE_GETS,
	BRIDGE_WATCHES,
	BRIDGE_SYNCS,
	BRIDGE_SETS,
	BRIDGE_WATCH_REMOVALS,
	BRIDGE_RECONNECTS,
	BRIDGE_NCOUNTERS
} BridgeCounter;

#endif							/* ZKLOCK_ZK_REQUESTS_H */
