/*
 * zk_bridge.h
 *	  The meeting point of the ZooKeeper client's threads and the backend.
 */
#ifndef ZKLOCK_ZK_BRIDGE_H
#define ZKLOCK_ZK_BRIDGE_H

#include <stdint.h>
#include <zookeeper/zookeeper.h>

typedef enum ZkRequestKind
{
	ZKREQ_CREATE,				/* zoo_acreate2: path of the new node, czxid */
	ZKREQ_CHILDREN,				/* zoo_aget_children: names */
	ZKREQ_WATCH,				/* zoo_awget(_children) with the waiter's watcher */
	ZKREQ_GET,					/* zoo_aget without a watch: data, czxid */
	ZKREQ_SYNC,					/* zoo_async: catch the server up with the leader */
	ZKREQ_EXISTS,				/* zoo_aexists without a watch */
	ZKREQ_SET,					/* zoo_aset of any version */
	ZKREQ_POKE_WATCH			/* zoo_awget on a published wait (deadlock.c) */
} ZkRequestKind;

/*
 * One asynchronous request.  malloc'ed, because the client thread may finish
 * it after the backend has given up on it (see bridge_abandon).  Result fields
 * are valid once bridge_done() has returned true.
 */
typedef struct ZkRequest
{
	ZkRequestKind kind;
	zhandle_t  *zh;
	uint64_t	epoch;			/* of zh, see zk_bridge.c */
	int64_t		sent_at;		/* bridge_now_ms() when issued */
	char	   *path;			/* the request's path */
	char	   *tag;			/* CREATE of a lock child: attempt tag in its name */
	bool		done;
	bool		abandoned;
	bool		counted;		/* abandoned CREATE: in the pending deletes */
	int			rc;
	char	   *created;		/* CREATE: full path of the new node */
	int64_t		czxid;			/* CREATE, GET, EXISTS: the node's creation zxid */
	int32_t		version;		/* GET, EXISTS, SET: the node's data version */
	int			watch_type;		/* WATCH: ZWATCHTYPE_DATA or _CHILD */
	char	   *data;			/* GET: the node's data, NUL-terminated */
	int			data_len;		/* GET: its length, without the NUL */
	int			nchildren;		/* CHILDREN */
	char	  **children;
} ZkRequest;

/* A copy of what the session watcher last saw. */
typedef struct ZkSessionSnapshot
{
	int			zk_state;		/* ZOO_*_STATE of the last session event */
	int64_t		session_id;
	int			timeout_ms;		/* negotiated session timeout */
	char		server[64];		/* server of the current connection */
	int64_t		changed_at_ms;	/* monotonic ms of the last state change */
	uint64_t	events;			/* count of session events so far */
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

extern void bridge_take_counts(uint64_t *counts);

/*
 * A reply lost with the connection, or given up on by the client when the
 * server fell silent: the request may or may not have been carried out.
 */
static inline bool
bridge_reply_lost(int rc)
{
	return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT;
}

extern void bridge_init(void);
extern int64_t bridge_now_ms(void);

/* Opening and closing the handle (backend). */
typedef struct BridgeOpen BridgeOpen;
extern BridgeOpen *bridge_open_start(const char *hosts, int timeout_ms);
extern bool bridge_open_finished(BridgeOpen *op, zhandle_t **zh, int *error);
extern void bridge_open_abandon(BridgeOpen *op);
extern void bridge_handle_closing(void);
extern void bridge_close(zhandle_t *zh);
extern void bridge_await_closes(int timeout_ms);

/* Issuing requests (backend). */
extern ZkRequest *bridge_create(zhandle_t *zh, const char *path,
								const char *data, int datalen,
								const struct ACL_vector *acl, int mode,
								const char *tag);
extern ZkRequest *bridge_get_children(zhandle_t *zh, const char *path);
extern ZkRequest *bridge_watch(zhandle_t *zh, const char *path, int watch_type);
extern ZkRequest *bridge_get(zhandle_t *zh, const char *path);
extern ZkRequest *bridge_sync(zhandle_t *zh, const char *path);
extern ZkRequest *bridge_exists(zhandle_t *zh, const char *path);
extern ZkRequest *bridge_set(zhandle_t *zh, const char *path,
							 const char *data, int datalen, int version);
extern ZkRequest *bridge_watch_pokes(zhandle_t *zh, const char *path);
extern bool bridge_take_poke(void);
extern bool bridge_done(ZkRequest *req);
extern void bridge_free(ZkRequest *req);
extern void bridge_abandon(ZkRequest *req);

/* How recently the server is known to have held the session. */
extern int64_t bridge_last_contact(void);

/* Watches on the nodes the backend created: deleted by others = lost. */
typedef struct HeldWatch HeldWatch;
extern HeldWatch *bridge_watch_held(zhandle_t *zh, const char *path);
extern void bridge_unwatch_held(HeldWatch *hw);
extern bool bridge_held_deleted(HeldWatch *hw);
extern void bridge_held_mark_deleted(HeldWatch *hw);
extern uint64_t bridge_held_deletions(void);

/* Finished by the client threads, retried across reconnects. */
extern void bridge_delete_node(zhandle_t *zh, const char *path);
extern void bridge_delete_tagged(zhandle_t *zh, const char *parent,
								 const char *tag);
extern void bridge_delete_sibling_tagged(zhandle_t *zh, const char *node,
										 const char *tag);
extern void bridge_remove_watch(zhandle_t *zh, const char *path, int watch_type);
extern bool bridge_deletes_pending(void);

/* Waiting (backend). */
extern uint64_t bridge_watch_events(void);
extern void bridge_wait(long timeout_ms);
extern void bridge_wait_quietly(long timeout_ms);
extern void bridge_emit_messages(void);

/* Session events. */
extern void bridge_session_watcher(zhandle_t *zh, int type, int state,
								   const char *path, void *ctx);
extern void bridge_session_snapshot(ZkSessionSnapshot *out);
extern void bridge_log_callback(const char *message);
extern uint64_t bridge_closed_by_server(void);

#endif							/* ZKLOCK_ZK_BRIDGE_H */
