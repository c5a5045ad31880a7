/*
 * zk_session.h
 *	  A backend's view of the server's ZooKeeper session.
 */
#ifndef ZKLOCK_ZK_SESSION_H
#define ZKLOCK_ZK_SESSION_H

#include <zookeeper/zookeeper.h>

#include "zk_bridge.h"

/* What a backend was doing when its session was lost, for the message. */
typedef enum ZkActivity
{
	ZK_ACQUIRING,				/* queueing for a lock */
	ZK_WAITING,					/* waiting for its turn */
	ZK_READING_QUEUE,			/* zk_lock_holders and the like */
	ZK_LOOKING_FOR_DEADLOCK,
	ZK_CREATING_NODES,			/* a lock's parents */
	ZK_BARRIER					/* at a barrier or a gate */
} ZkActivity;

typedef enum ZkSessionStatus
{
	ZK_SESSION_NONE,			/* no session worker */
	ZK_SESSION_CONNECTING,		/* being opened, not yet accepted by a server */
	ZK_SESSION_CONNECTED,
	ZK_SESSION_SUSPENDED,		/* disconnected; may still be alive */
	ZK_SESSION_LOST				/* expired, refused, or silent too long */
} ZkSessionStatus;

/* What zk_session() shows. */
typedef struct ZkSessionInfo
{
	ZkSessionStatus status;
	int64		session_id;		/* 0 before the first connect */
	int			timeout_ms;		/* negotiated */
	char		server[64];		/* last connected server */
	int64		since_contact_ms;	/* 0 while connected */
	int			worker_pid;		/* 0: no session worker runs */
	int			requests_in_flight; /* sent by the worker, not answered */
	int			requests_queued;	/* waiting for their turn in the worker */
} ZkSessionInfo;

extern void zk_session_require(void);
extern void zk_session_close_if_lost(void);
extern void zk_session_confirm(const char *probe, HeldWatch *probe_watch);
extern void zk_session_describe(ZkSessionInfo *info);
extern ZkSessionStatus zk_session_status(void);
extern uint64 zk_session_generation(void);
extern bool zk_session_is_current(uint64 generation);
extern void zk_session_new_tag(char *tag);
extern void zk_session_check_alive(ZkActivity doing);
extern void zk_session_no_answer(ZkActivity doing);
extern void zk_session_wait(long timeout_ms);
extern bool zk_session_await(ZkRequest *req, int64 deadline,
							 ZkActivity doing);

#endif							/* ZKLOCK_ZK_SESSION_H */
