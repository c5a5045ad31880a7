/*
 * zk_bridge.h
 *	  A backend's side of the session worker: requests, replies, watches.
 */
#ifndef ZKLOCK_ZK_BRIDGE_H
#define ZKLOCK_ZK_BRIDGE_H

#include <stdint.h>
#include <stdbool.h>
#include <zookeeper/zookeeper.h>

#include "lock_node.h"
#include "zk_requests.h"

/*
 * One asynchronous request, as the backend sees it: malloc'ed, so that
 * transaction callbacks may free it.  Result fields are valid once
 * bridge_done() has returned true.
 */
typedef struct ZkRequest
{
	ZkRequestKind kind;
	uint64_t	shared;			/* its SharedRequest (dsa_pointer) until done */
	uint64_t	epoch;			/* session generation it was sent for */
	int64_t		sent_at;		/* bridge_now_ms() when issued */
	char	   *path;			/* the request's path */
	char	   *tag;			/* CREATE of a lock child: attempt tag in its name */
	bool		tagged;			/* CREATE of a lock child */
	bool		done;
	int			rc;
	char	   *created;		/* CREATE: full path of the new node */
	int64_t		czxid;			/* CREATE, GET, EXISTS, WATCH: the node's czxid */
	int32_t		version;		/* GET, EXISTS, SET: the node's data version */
	int			watch_type;		/* WATCH: ZWATCHTYPE_DATA or _CHILD */
	char	   *data;			/* GET: the node's data, NUL-terminated */
	int			data_len;		/* GET: its length, without the NUL */
	int			nchildren;		/* CHILDREN */
	char	  **children;
	struct HeldWatch *held;		/* CREATE of a lock node: see bridge_create_held */
	/* This backend's requests not done: their shared part is its own. */
	struct ZkRequest *prev_live;
	struct ZkRequest *next_live;
} ZkRequest;

extern void bridge_take_counts(uint64_t *counts);

/*
 * A reply lost with the connection, given up on by the client when the
 * server fell silent, or dropped with the connection when the client could
 * not match a reply to its request (ZRUNTIMEINCONSISTENCY: it then closes
 * the connection and reconnects with the same session): the request may or
 * may not have been carried out.
 */
static inline bool
bridge_reply_lost(int rc)
{
	return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT ||
		rc == ZRUNTIMEINCONSISTENCY;
}

extern void bridge_attach(void);
extern bool bridge_attached(void);
extern int64_t bridge_now_ms(void);

/* Issuing requests on the server's session. */
extern ZkRequest *bridge_create(const char *path, const char *data, int datalen,
								int mode, const char *tag);
extern ZkRequest *bridge_get_children(const char *path);
extern ZkRequest *bridge_watch(const char *path, int watch_type);
extern ZkRequest *bridge_get(const char *path);
extern ZkRequest *bridge_sync(const char *path);
extern ZkRequest *bridge_exists(const char *path);
extern ZkRequest *bridge_set(const char *path, const char *data, int datalen,
							 int version);
extern ZkRequest *bridge_watch_pokes(const char *path);
extern ZkRequest *bridge_watch_exists(const char *path);
extern ZkRequest *bridge_delete_shared(const char *path, int version);
extern bool bridge_take_poke(void);
extern bool bridge_done(ZkRequest *req);
extern void bridge_free(ZkRequest *req);
extern void bridge_abandon(ZkRequest *req);

/* How recently the server is known to have held the session. */
extern int64_t bridge_proof(int64_t *provable);

/*
 * Watches on the nodes the backend created: deleted by others = lost;
 * set to __REVOKE__ = a release requested.
 */
typedef struct HeldWatch HeldWatch;
extern HeldWatch *bridge_watch_held(const char *path, const char *data);
extern ZkRequest *bridge_create_held(const char *path, const char *data,
									 const char *tag, int mode);
extern HeldWatch *bridge_take_held(ZkRequest *req);
extern void bridge_held_granted(HeldWatch *hw);
extern bool bridge_held_release_requested(HeldWatch *hw);
extern void bridge_held_mark_interrupted(HeldWatch *hw);
extern uint64_t bridge_release_requests(void);
extern void bridge_set_revocable(bool revocable);
extern void bridge_set_quiet(bool quiet);
extern bool bridge_take_revoke_signal(void);
extern void bridge_unwatch_held(HeldWatch *hw);
extern bool bridge_release_held(HeldWatch *hw, const char *path);
extern ReleaseVerdict bridge_release_verdict(HeldWatch *hw);
extern bool bridge_held_deleted(HeldWatch *hw);
extern void bridge_held_mark_deleted(HeldWatch *hw);
extern uint64_t bridge_held_deletions(void);

/* Barrier waits, as the views show them. */
extern void bridge_set_barrier_wait(BarrierPhase phase, const char *node);
extern BarrierPhase bridge_barrier_wait_of(pid_t pid, const char *node);

/* Carried out by the worker, retried across reconnects. */
extern void bridge_delete_node(const char *path);
extern void bridge_delete_tagged(const char *parent, const char *tag);
extern void bridge_delete_sibling_tagged(const char *node, const char *tag);
extern void bridge_remove_watch(const char *path, int watch_type);
extern bool bridge_deletes_pending(int64_t *sent_at);

/* Lock parents seen to exist by any backend of the server. */
extern bool bridge_parent_known(uint64_t key);
extern void bridge_parent_seen(uint64_t key, bool exists);

/* Waiting. */
extern uint64_t bridge_watch_events(void);
extern bool bridge_woken_since(uint64_t watch_events, uint64_t session_events);
extern uint64_t bridge_exists_events(void);
extern void bridge_wait(long timeout_ms);
extern void bridge_wait_quietly(long timeout_ms);

/* The session. */
extern void bridge_session_snapshot(ZkSessionSnapshot *out);
extern void bridge_worker_load(int *pid, int *in_flight, int *queued);
extern bool bridge_worker_running(void);
extern bool bridge_worker_registered(void);
extern ZkCloseReason bridge_close_reason(uint64 generation);
extern int	bridge_open_error(void);
extern uint64_t bridge_closed_by_server(void);
extern void bridge_write_off(uint64_t generation);
extern bool bridge_commit_begin(uint64_t generation);
extern void bridge_commit_end(void);
extern const char *bridge_owner(void);
extern pid_t bridge_local_pid(const char *owner);

#endif							/* ZKLOCK_ZK_BRIDGE_H */
