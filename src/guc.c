/*
 * guc.c
 *	  Definitions and validation of the zklock.* settings.
 *
 * Where the backend connects (hosts, root) and with which credentials
 * (auth) is superuser-only: an ordinary user must not be able to point the
 * backend at another ensemble or lock tree, nor read the credentials.  The
 * session timeout is superuser-only too, because it decides how long a
 * crashed holder blocks everybody else.  So is the list of absolute ZooKeeper
 * paths other roles may lock (absolute_paths): it opens parts of the
 * ensemble outside zklock.root to them.
 */
#include "postgres.h"

#include <limits.h>
#include <zookeeper/zookeeper.h>

#include "miscadmin.h"
#include "utils/guc.h"

#include "guc.h"
#include "znode_path.h"

char	   *zklock_hosts = NULL;
char	   *zklock_root = NULL;
int			zklock_session_timeout = 10000;
int			zklock_connect_timeout = 5000;
char	   *zklock_auth = NULL;
char	   *zklock_absolute_paths = NULL;
int			zklock_on_lost_lock = ON_LOST_LOCK_ERROR;
int			zklock_exclusive_naming = EXCLUSIVE_NAMING_MUTEX;
int			zklock_log_level = ZKLOCK_LOG_OFF;
bool		zklock_revocable = false;
char	   *zklock_fence_token = NULL;
int			zklock_max_tracked_locks = 1000;

static const struct config_enum_entry on_lost_lock_options[] = {
	{"error", ON_LOST_LOCK_ERROR, false},
	{"warning", ON_LOST_LOCK_WARNING, false},
	{NULL, 0, false}
};

/*
 * The ZooKeeper client's own levels, and "off" (ZKLOCK_LOG_OFF): zklock
 * writes its own line for each event of the session, and the client's lines
 * go to DEBUG1 only.
 */
static const struct config_enum_entry log_level_options[] = {
	{"off", ZKLOCK_LOG_OFF, false},
	{"error", ZOO_LOG_LEVEL_ERROR, false},
	{"warn", ZOO_LOG_LEVEL_WARN, false},
	{"warning", ZOO_LOG_LEVEL_WARN, true},
	{"info", ZOO_LOG_LEVEL_INFO, false},
	{"debug", ZOO_LOG_LEVEL_DEBUG, false},
	{NULL, 0, false}
};

/*
 * The level is the client library's, for all handles of the process; it
 * says ERRORs always, which the session worker reads (zk_worker.c).
 */
static void
assign_log_level(int newval, void *extra)
{
	zoo_set_debug_level((ZooLogLevel) Max(newval, ZOO_LOG_LEVEL_ERROR));
}

static const struct config_enum_entry exclusive_naming_options[] = {
	{"mutex", EXCLUSIVE_NAMING_MUTEX, false},
	{"readwrite", EXCLUSIVE_NAMING_READWRITE, false},
	{NULL, 0, false}
};

/*
 * A ZooKeeper connection string: host:port[,host:port...][/chroot].
 * The client accepts a missing port, but it silently means 2181; we insist
 * on explicit, valid ports so that a typo fails at SET time, not at connect.
 */
static bool
check_hosts(char **newval, void **extra, GucSource source)
{
	const char *s = *newval;
	const char *chroot;
	const char *p;

	if (s == NULL || *s == '\0')
	{
		GUC_check_errdetail("zklock.hosts must not be empty.");
		return false;
	}

	chroot = strchr(s, '/');
	p = s;
	while (p < (chroot ? chroot : s + strlen(s)))
	{
		const char *end = strchr(p, ',');
		const char *colon;
		long		port;
		char	   *portend;

		if (end == NULL || (chroot && end > chroot))
			end = chroot ? chroot : s + strlen(s);
		colon = NULL;
		for (const char *q = p; q < end; q++)
			if (*q == ':')
				colon = q;
		if (colon == NULL || colon == p)
		{
			GUC_check_errdetail("Each server must be given as host:port, separated by commas.");
			return false;
		}
		for (const char *q = p; q < colon; q++)
		{
			if (*q == ' ' || *q == '\t' || (unsigned char) *q < 0x20)
			{
				GUC_check_errdetail("Host names must not contain white space or control characters.");
				return false;
			}
		}
		errno = 0;
		port = strtol(colon + 1, &portend, 10);
		if (colon + 1 == end || portend != end || errno != 0 ||
			port < 1 || port > 65535)
		{
			GUC_check_errdetail("Port numbers must be between 1 and 65535.");
			return false;
		}
		p = end;
		if (*p == ',')
		{
			p++;
			if (p == (chroot ? chroot : s + strlen(s)))
			{
				GUC_check_errdetail("Each server must be given as host:port, separated by commas.");
				return false;
			}
		}
	}
	if (chroot && strcmp(chroot, "/") != 0 &&
		!zklock_valid_znode_path(chroot))
	{
		GUC_check_errdetail("The chroot suffix must be a valid ZooKeeper path.");
		return false;
	}
	return true;
}

static bool
check_root(char **newval, void **extra, GucSource source)
{
	char	   *problem = zklock_subtree_problem("zklock.root",
												 *newval ? *newval : "");

	if (problem != NULL)
	{
		GUC_check_errdetail("%s", problem);
		return false;
	}
	return true;
}

/* Each entry a path that a setting may name as a subtree, none empty. */
static bool
check_absolute_paths(char **newval, void **extra, GucSource source)
{
	List	   *entries = zklock_split_path_list(*newval ? *newval : "");
	ListCell   *lc;

	foreach(lc, entries)
	{
		const char *entry = lfirst(lc);
		char	   *problem;

		if (entry[0] == '\0')
		{
			GUC_check_errdetail("zklock.absolute_paths must not have empty entries.");
			return false;
		}
		problem = zklock_subtree_problem(psprintf("Entry \"%s\" of zklock.absolute_paths", entry),
										 entry);
		if (problem != NULL)
		{
			GUC_check_errdetail("%s", problem);
			return false;
		}
	}
	list_free_deep(entries);
	return true;
}

/* zklock.fence_token: empty, or a bigint. */
static bool
check_fence_token(char **newval, void **extra, GucSource source)
{
	const char *s = *newval;
	char	   *end;

	if (s == NULL || *s == '\0')
		return true;
	errno = 0;
	(void) strtoll(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0')
	{
		GUC_check_errdetail("zklock.fence_token must be empty or a bigint.");
		return false;
	}
	return true;
}

void
zklock_define_gucs(void)
{
	DefineCustomStringVariable("zklock.hosts",
							   "ZooKeeper connection string: host:port[,host:port...][/chroot].",
							   "Server-wide: the session worker's session.  A reload that changes it closes that session; the locks held in it are lost.",
							   &zklock_hosts,
							   "127.0.0.1:2181",
							   PGC_SIGHUP,
							   0,
							   check_hosts, NULL, NULL);

	DefineCustomStringVariable("zklock.root",
							   "ZooKeeper path under which zklock keeps its locks.",
							   NULL,
							   &zklock_root,
							   "/zklock",
							   PGC_SUSET,
							   0,
							   check_root, NULL, NULL);

	DefineCustomStringVariable("zklock.absolute_paths",
							   "ZooKeeper paths at or below which roles that are not superusers may lock by absolute path.",
							   "Comma-separated absolute paths; empty: only superusers use lock names that begin with \"/\".",
							   &zklock_absolute_paths,
							   "",
							   PGC_SUSET,
							   GUC_LIST_INPUT,
							   check_absolute_paths, NULL, NULL);

	DefineCustomIntVariable("zklock.session_timeout",
							"ZooKeeper session timeout requested by the session worker.",
							"Server-wide.  Locks of a server that stalls or is cut off from ZooKeeper are freed after this long.",
							&zklock_session_timeout,
							10000, 1000, 600000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("zklock.connect_timeout",
							"How long a zklock call waits for ZooKeeper: for a session, for a lost connection to come back, and for the answer to each request it sends.",
							"Counted from each request's sending: a COMMIT that follows a release does not wait for its delete again.",
							&zklock_connect_timeout,
							5000, 100, INT_MAX,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	/*
	 * No check hook: PostgreSQL would echo a rejected value, password and
	 * all, in the error message.  The session worker checks the form.
	 */
	DefineCustomStringVariable("zklock.auth",
							   "ZooKeeper digest credentials, user:password.",
							   "Server-wide.  Empty: no authentication.  Nodes created with credentials can be changed only by that identity.",
							   &zklock_auth,
							   "",
							   PGC_SIGHUP,
							   GUC_SUPERUSER_ONLY,
							   NULL, NULL, NULL);

	DefineCustomEnumVariable("zklock.on_lost_lock",
							 "What COMMIT does when a zklock lock held during the transaction was lost.",
							 "error rolls the transaction back; warning commits it with a WARNING.",
							 &zklock_on_lost_lock,
							 ON_LOST_LOCK_ERROR,
							 on_lost_lock_options,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomBoolVariable("zklock.revocable",
							 "Whether a release requested for a lock this session holds interrupts it.",
							 "on: the running statement, or the next one, fails with SQLSTATE 57Z01 and the lock is released when the transaction rolls back.  off: the request is only recorded (zk_lock_release_requested).",
							 &zklock_revocable,
							 false,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomEnumVariable("zklock.exclusive_naming",
							 "How exclusive lock nodes are named, for locks shared with Curator.",
							 "mutex: _c_<id>-lock-, as Curator's InterProcessMutex and Kazoo's Lock; readwrite: _c_<id>-__WRIT__, as the write side of Curator's InterProcessReadWriteLock.",
							 &zklock_exclusive_naming,
							 EXCLUSIVE_NAMING_MUTEX,
							 exclusive_naming_options,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomEnumVariable("zklock.log_level",
							 "Least severe ZooKeeper client message written to the server log.",
							 "The session worker logs the client's messages at LOG level, the others at DEBUG1.",
							 &zklock_log_level,
							 ZKLOCK_LOG_OFF,
							 log_level_options,
							 PGC_SIGHUP,
							 0,
							 NULL, assign_log_level, NULL);

	/* Read by zk_lock_fence_trigger, as a placeholder where not loaded. */
	DefineCustomStringVariable("zklock.fence_token",
							   "Fencing token of the writing transaction, for zk_lock_fence_trigger.",
							   "Empty: none; a row's token column, where the trigger names one, comes first.",
							   &zklock_fence_token,
							   "",
							   PGC_USERSET,
							   0,
							   check_fence_token, NULL, NULL);

	/*
	 * Only when preloaded: a PGC_POSTMASTER setting cannot be defined later.
	 * Before the prefix is reserved, which would remove its value.
	 */
	if (process_shared_preload_libraries_in_progress)
		DefineCustomIntVariable("zklock.max_tracked_locks",
								"Lock names whose statistics are kept in zk_lock_stats.",
								"The least used name is evicted to make room.",
								&zklock_max_tracked_locks,
								1000, 10, 1000000,
								PGC_POSTMASTER,
								0,
								NULL, NULL, NULL);

	/* After every zklock.* setting: the rest of the prefix is refused. */
	MarkGUCPrefixReserved("zklock");
}
