/*
 * zklock.c
 *	  Module entry point: settings, and under shared_preload_libraries the
 *	  shared memory, the session worker, transaction callbacks, the
 *	  DISCARD ALL hook and the hooks that turn release requests into
 *	  interrupts.
 *
 * zklock works only preloaded: the server's ZooKeeper session is held by a
 * background worker, and backends reach it through shared memory.  Loaded
 * any other way, in binary-upgrade mode or in single-user mode, it defines
 * its settings and nothing else; every function that needs the session then
 * fails with 55000 (zk_shared_attach), as pg_stat_statements does.
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"

#include "guc.h"
#include "lock_recipe.h"
#include "lost_locks.h"
#include "revocation.h"
#include "stats.h"
#include "utility_hook.h"
#include "xact_hooks.h"
#include "zk_shared.h"
#include "zk_worker.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

void
_PG_init(void)
{
	zklock_define_gucs();
	lock_recipe_set_unproven_reporter(lost_locks_release_unproven);
	/*
	 * pg_upgrade's servers (binary upgrade mode) must not open ZooKeeper
	 * sessions nor take part in locking, as pg_cron's launcher does not.  A
	 * single-user server (postgres --single) has no postmaster to start the
	 * session worker, nor one whose death a wait could watch.
	 */
	if (!process_shared_preload_libraries_in_progress || IsBinaryUpgrade ||
		!IsPostmasterEnvironment)
		return;
	zklock_register_xact_hooks();
	zklock_install_utility_hook();
	zklock_install_revocation_hooks();
	stats_init();
	zk_shared_init(zk_worker_register());
}
