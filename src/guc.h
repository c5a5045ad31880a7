/*
 * guc.h
 *	  zklock.* settings.
 */
#ifndef ZKLOCK_GUC_H
#define ZKLOCK_GUC_H

extern char *zklock_hosts;
extern char *zklock_root;
extern int	zklock_session_timeout;
extern int	zklock_connect_timeout;
extern char *zklock_auth;
extern char *zklock_absolute_paths;
extern int	zklock_on_lost_lock;
extern int	zklock_exclusive_naming;
/* zklock.log_level: below the client's ZOO_LOG_LEVEL_ERROR. */
#define ZKLOCK_LOG_OFF 0
extern int	zklock_log_level;
extern bool zklock_revocable;
extern char *zklock_fence_token;
extern int	zklock_max_tracked_locks;

/* zklock.on_lost_lock */
typedef enum OnLostLock
{
	ON_LOST_LOCK_ERROR,
	ON_LOST_LOCK_WARNING
} OnLostLock;

/* zklock.exclusive_naming: how exclusive lock nodes are named */
typedef enum ExclusiveNaming
{
	EXCLUSIVE_NAMING_MUTEX,		/* _c_<tag>-lock-: InterProcessMutex, Kazoo */
	EXCLUSIVE_NAMING_READWRITE	/* _c_<tag>-__WRIT__: InterProcessReadWriteLock */
} ExclusiveNaming;

extern void zklock_define_gucs(void);

#endif							/* ZKLOCK_GUC_H */
