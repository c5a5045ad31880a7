/*
 * lost_locks.h
 *	  Locks lost with their ZooKeeper session.
 */
#ifndef ZKLOCK_LOST_LOCKS_H
#define ZKLOCK_LOST_LOCKS_H

#include "lock_table.h"

extern const char *lost_locks_state(LockEntry *entry);
extern bool lost_locks_forget(const char *name, LockMode mode);
extern void lost_locks_release_unproven(const char *name, int count);
extern void lost_locks_pre_commit(void);
extern void lost_locks_xact_end(void);

#endif							/* ZKLOCK_LOST_LOCKS_H */
