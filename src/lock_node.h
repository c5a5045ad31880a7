/*
 * lock_node.h
 *	  A lock's queue nodes: their names and the rules read from them.
 */
#ifndef ZKLOCK_LOCK_NODE_H
#define ZKLOCK_LOCK_NODE_H

/*
 * How the names of one backend's nodes of one ZooKeeper session begin, after
 * "_c_": the backend's own part, then the session's (lock_node_owner).
 */
#define ZK_OWNER_LEN 18
/* The backend's own part, "xxxxxxxx-xxxx", the same in all its sessions. */
#define ZK_OWNER_BACKEND_LEN 13
/* Length of an attempt tag, a UUID-shaped string, without the NUL. */
#define ZK_TAG_LEN 36
/* Its first part, the same for every attempt of one backend in one session. */
#define ZK_TAG_SESSION_LEN ZK_OWNER_LEN
/* "_c_" and that part: what every lock node of one backend's name begins with. */
#define ZK_SESSION_KEY_LEN (3 + ZK_TAG_SESSION_LEN)

/*
 * A release request, as Curator's Revoker writes it: the bare bytes replace
 * the data of the holder's node.
 */
#define ZK_REVOKE_MESSAGE "__REVOKE__"
#define ZK_REVOKE_MESSAGE_LEN (sizeof(ZK_REVOKE_MESSAGE) - 1)

static inline bool
lock_node_revoke_message(const char *data, int len)
{
	return data != NULL && len == (int) ZK_REVOKE_MESSAGE_LEN &&
		memcmp(data, ZK_REVOKE_MESSAGE, ZK_REVOKE_MESSAGE_LEN) == 0;
}

typedef enum LockMode
{
	LOCK_MODE_EXCLUSIVE,
	LOCK_MODE_SHARED,
	LOCK_MODE_SEMAPHORE
} LockMode;

extern const char *const lock_mode_names[];

/*
 * What a queue's listing means for one of its nodes (lock_node_judge), as
 * Curator's getsTheLock: held, or which node to wait for.  Indexes are into
 * the listing; -1 for none.
 */
typedef struct LockVerdict
{
	bool		own_found;		/* the node is in the listing */
	bool		held;
	int			predecessor;	/* the nearest node below that blocks it */
	int			other_permits;	/* a lease below taken with other permits */
} LockVerdict;

extern char *lock_node_prefix(const char *parent, const char *tag,
							  LockMode mode, int permits, bool writer_naming);
extern void lock_node_owner(char *owner, const char *backend, uint64 generation);
extern int64 lock_node_sequence(const char *name);
extern bool lock_node_session_key(const char *name, char *key);
extern LockMode lock_node_mode(const char *name);
extern int	lock_node_permits(const char *name);
extern bool lock_node_blocks(LockMode mode, const char *own, const char *lower);
extern int	lock_node_blockers(const char *const *sorted, int c, int *blockers);
extern int	lock_node_order(const void *a, const void *b);
extern void lock_node_judge(const char *const *children, int n,
							const char *own, LockMode mode, int permits,
							const char *skip_tag, LockVerdict *v);

#endif							/* ZKLOCK_LOCK_NODE_H */
