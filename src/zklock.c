/*
 * zklock.c
 *	  Module entry point: settings, transaction callbacks, the DISCARD ALL
 *	  hook and, when preloaded, shared memory for statistics.
 *
 * Nothing connects here.  Under shared_preload_libraries this runs in the
 * postmaster, and the ZooKeeper client's threads would not survive fork();
 * each backend opens its own session on first use (zk_session.c).
 */
#include "postgres.h"

#include "fmgr.h"

#include "guc.h"
#include "stats.h"
#include "utility_hook.h"
#include "xact_hooks.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

void
_PG_init(void)
{
	zklock_define_gucs();
	zklock_register_xact_hooks();
	zklock_install_utility_hook();
	stats_init();
}
