/*
 * session_file.c
 *	  The session worker's note of its ZooKeeper session in the data
 *	  directory, so that the worker that follows a crash can end it.
 *
 * After a crash the old session lives on in ZooKeeper for its timeout and
 * keeps every lock this server held.  Its id and password are enough to
 * reattach to it and close it at once.  The file is written (durably, mode
 * 0600: the password lets anyone end the session) before the session is
 * published to backends, so before any lock is taken in it, and removed when
 * the session is closed.
 *
 * Ending a session frees every lock in it, so only a session that is
 * provably this server's own is ended: the file names the host, the data
 * directory, the boot and PID namespace, and the postmaster (pid and start
 * time) it was written under, and is acted on only by the same postmaster
 * (a crash restart), or by another one of the same boot, host, directory
 * and namespace once that postmaster is gone (an immediate shutdown).  A
 * copy of the directory (a snapshot, a cloned VM, a container, a copy
 * started at the same path in a mount namespace of its own) finds the
 * original's postmaster alive, or another boot, and leaves the session to
 * expire.  The file lives in pg_dynshmem, whose contents pg_basebackup does
 * not copy and PostgreSQL does not clear.
 */
#include "postgres.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "miscadmin.h"
#include "storage/fd.h"
#include "utils/timestamp.h"

#include "session_file.h"

#define SESSION_FILE "pg_dynshmem/zklock.session"
#define SESSION_FILE_TMP "pg_dynshmem/zklock.session.tmp"
/* Where zklock 1.3 and 1.4 kept it: removed, never acted on. */
#define OLD_SESSION_FILE "zklock.session"

#define SESSION_FILE_HEADER "zklock session 2"
#define SESSION_FILE_LINES 7

/* This host and data directory. */
static void
place_line(char *buf, size_t size)
{
	char		host[256] = "";

	if (gethostname(host, sizeof(host)) != 0)
		host[0] = '\0';
	host[sizeof(host) - 1] = '\0';
	snprintf(buf, size, "%s:%s", host, DataDir);
}

/* This boot and PID namespace ("" where the system does not tell). */
static void
boot_line(char *buf, size_t size)
{
	char		boot_id[64] = "";
	struct stat st;
	FILE	   *f = fopen("/proc/sys/kernel/random/boot_id", "r");

	if (f != NULL)
	{
		if (fgets(boot_id, sizeof(boot_id), f) == NULL)
			boot_id[0] = '\0';
		fclose(f);
		boot_id[strcspn(boot_id, "\n")] = '\0';
	}
	if (boot_id[0] == '\0' || stat("/proc/self/ns/pid", &st) != 0)
		buf[0] = '\0';
	else
		snprintf(buf, size, "%s %llu", boot_id, (unsigned long long) st.st_ino);
}

/* This server's postmaster: pid and start time. */
static void
postmaster_line(char *buf, size_t size)
{
	snprintf(buf, size, "%d %lld", (int) PostmasterPid, (long long) PgStartTime);
}

/* Record the session; false (with a LOG) if it could not be done. */
bool
session_file_write(int64 session_id, const char *passwd)
{
	char		place[MAXPGPATH + 300];
	char		boot[128];
	char		postmaster[64];
	char		text[MAXPGPATH + 600];
	char		hex[2 * ZK_PASSWD_LEN + 1];
	int			fd;
	int			len;

	place_line(place, sizeof(place));
	boot_line(boot, sizeof(boot));
	postmaster_line(postmaster, sizeof(postmaster));
	for (int i = 0; i < ZK_PASSWD_LEN; i++)
		snprintf(hex + 2 * i, 3, "%02x", (unsigned char) passwd[i]);
	len = snprintf(text, sizeof(text), "%s\n%s\n%s\n%s\n%llx\n%s\n",
				   SESSION_FILE_HEADER, place, boot, postmaster,
				   (unsigned long long) session_id, hex);

	fd = OpenTransientFilePerm(SESSION_FILE_TMP, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY,
							   S_IRUSR | S_IWUSR);
	if (fd < 0)
	{
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("zklock: could not create file \"%s\": %m", SESSION_FILE_TMP)));
		return false;
	}
	if (write(fd, text, len) != len || pg_fsync(fd) != 0)
	{
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("zklock: could not write file \"%s\": %m", SESSION_FILE_TMP)));
		CloseTransientFile(fd);
		unlink(SESSION_FILE_TMP);
		return false;
	}
	CloseTransientFile(fd);
	return durable_rename(SESSION_FILE_TMP, SESSION_FILE, LOG) == 0;
}

/* Whether no process pid runs: none, or one that exited (a zombie). */
static bool
process_gone(int pid)
{
	char		path[64];
	char		stat[512];
	char	   *state;
	FILE	   *f;

	if (kill(pid, 0) != 0 && errno == ESRCH)
		return true;
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if ((f = fopen(path, "r")) == NULL)
		return false;
	state = fgets(stat, sizeof(stat), f) ? strrchr(stat, ')') : NULL;
	fclose(f);
	return state != NULL && (state[2] == 'Z' || state[2] == 'X');
}

/*
 * Whether the postmaster of this line ("pid start") is this server's, or is
 * gone: a pid that is alive and not ours may be the postmaster of the
 * server this directory was copied from.
 */
static bool
postmaster_ours_or_gone(const char *line)
{
	int			pid;
	long long	started;

	if (sscanf(line, "%d %lld", &pid, &started) != 2 || pid <= 0)
		return false;
	if (pid == PostmasterPid)
		return started == (long long) PgStartTime;
	return process_gone(pid);
}

/*
 * The session a previous worker of this server left, if its file is there
 * and provably this server's own (see the header).  A file that is not is
 * removed, with a LOG: its session expires by itself.
 */
bool
session_file_read(int64 *session_id, char *passwd)
{
	char		text[MAXPGPATH + 600];
	char		place[MAXPGPATH + 300];
	char		boot[128];
	char	   *lines[SESSION_FILE_LINES];
	int			fd;
	ssize_t		len;
	unsigned long long id;

	if (unlink(OLD_SESSION_FILE) == 0)
		ereport(LOG,
				(errmsg("zklock: removed file \"%s\" of an earlier version; its session, if any, expires by itself",
						OLD_SESSION_FILE)));
	fd = OpenTransientFile(SESSION_FILE, O_RDONLY | PG_BINARY);
	if (fd < 0)
	{
		if (errno != ENOENT)
			ereport(LOG,
					(errcode_for_file_access(),
					 errmsg("zklock: could not open file \"%s\": %m", SESSION_FILE)));
		return false;
	}
	len = read(fd, text, sizeof(text) - 1);
	CloseTransientFile(fd);
	if (len <= 0)
	{
		session_file_remove();
		return false;
	}
	text[len] = '\0';

	lines[0] = text;
	for (int i = 1; i < SESSION_FILE_LINES; i++)
	{
		char	   *nl = strchr(lines[i - 1], '\n');

		if (nl == NULL)
			goto bad;
		*nl = '\0';
		lines[i] = nl + 1;
	}
	if (strcmp(lines[0], SESSION_FILE_HEADER) != 0 ||
		strlen(lines[5]) != 2 * ZK_PASSWD_LEN ||
		sscanf(lines[4], "%llx", &id) != 1)
		goto bad;
	place_line(place, sizeof(place));
	boot_line(boot, sizeof(boot));
	if (strcmp(lines[1], place) != 0 || boot[0] == '\0' ||
		strcmp(lines[2], boot) != 0 || !postmaster_ours_or_gone(lines[3]))
	{
		ereport(LOG,
				(errmsg("zklock: not ending ZooKeeper session 0x%llx named in file \"%s\": it is not provably this server's",
						id, SESSION_FILE),
				 errdetail("It was written for \"%s\" under postmaster %s (pid, start time), in another boot or PID namespace or by a postmaster that still runs: this data directory may be a copy of another server's.",
						   lines[1], lines[3]),
				 errhint("The session, if it still lives, expires after its timeout.")));
		session_file_remove();
		return false;
	}
	for (int i = 0; i < ZK_PASSWD_LEN; i++)
	{
		unsigned int byte;

		if (sscanf(lines[5] + 2 * i, "%2x", &byte) != 1)
			goto bad;
		passwd[i] = (char) byte;
	}
	*session_id = (int64) id;
	return true;

bad:
	ereport(LOG,
			(errmsg("zklock: ignoring malformed file \"%s\"", SESSION_FILE)));
	session_file_remove();
	return false;
}

/* The session ended: forget it. */
void
session_file_remove(void)
{
	if (unlink(SESSION_FILE) != 0 && errno != ENOENT)
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("zklock: could not remove file \"%s\": %m", SESSION_FILE)));
}
