/*
 * lock_table.h
 *	  The backend's table of the locks (and semaphores) it holds.
 */
#ifndef ZKLOCK_LOCK_TABLE_H
#define ZKLOCK_LOCK_TABLE_H

#include "access/xact.h"
#include "lib/ilist.h"
#include "utils/timestamp.h"

#include "lock_name.h"
#include "lock_node.h"
#include "zk_bridge.h"

typedef enum LockScope
{
	LOCK_SCOPE_SESSION,
	LOCK_SCOPE_XACT
} LockScope;

/* Holds taken in one (sub)transaction that are not yet committed. */
typedef struct PendingHolds
{
	SubTransactionId subid;
	int32		session;
	int32		xact;
} PendingHolds;

typedef struct LockEntry
{
	char		key[ZKLOCK_NAME_MAX + 2];	/* hash key: mode letter, name */
	LockMode	mode;
	int32		permits;		/* SEMAPHORE */
	char	   *node;			/* our znode (TopMemoryContext) */
	char	   *recheck_tag;	/* see lock_recipe_release; usually NULL */
	int64		token;			/* its czxid: the fencing token */
	TimestampTz acquired_at;
	uint64		generation;		/* ZooKeeper session that owns node */
	HeldWatch  *watch;			/* on node; only while generation is open */
	bool		revoke_raised;	/* its release request interrupted us */
	int32		session_count;	/* session holds, committed or not */
	int32		xact_count;		/* transaction holds */
	int			npending;		/* stack of uncommitted holds, innermost last */
	int			maxpending;
	PendingHolds *pending;
	dlist_node	touched;		/* in touched_locks while npending > 0 */
} LockEntry;

#define LOCK_ENTRY_NAME(entry) ((entry)->key + 1)

extern LockEntry *lock_table_find(const char *name, LockMode mode);
extern LockEntry *lock_table_insert(const char *name, LockMode mode,
									int32 permits, const char *node,
									const char *recheck_tag, int64 token,
									uint64 generation, HeldWatch *watch,
									LockScope scope);
extern void lock_table_add_hold(LockEntry *entry, LockScope scope);
extern bool lock_table_release_session(LockEntry *entry);
extern int	lock_table_release_all_session(bool revoked_only);
extern int	lock_table_count(void);
extern int	lock_table_forget_lost(uint64 live_generation, bool deletions,
								   const char *name, LockMode mode,
								   bool *named_lost, char *first);
extern LockEntry *lock_table_any_live(uint64 live_generation);

extern void lock_table_subxact_commit(SubTransactionId mine,
									  SubTransactionId parent);
extern void lock_table_subxact_abort(SubTransactionId mine);
extern void lock_table_xact_end(bool commit);
extern bool lock_table_xact_touched(void);

typedef void (*LockTableVisitor) (LockEntry *entry, void *arg);
extern void lock_table_visit(LockTableVisitor visit, void *arg);

#endif							/* ZKLOCK_LOCK_TABLE_H */
