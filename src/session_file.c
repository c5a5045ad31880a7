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
 * the session is closed.  It names the host and the data directory it was
 * written for: a copy of the directory (a base backup restored elsewhere)
 * must not end the session of the server it was copied from.
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "miscadmin.h"
#include "storage/fd.h"

#include "session_file.h"

#define SESSION_FILE "zklock.session"
#define SESSION_FILE_TMP "zklock.session.tmp"

/* Who the file is for: this host and this data directory. */
static void
owner_line(char *buf, size_t size)
{
	char		host[256] = "";

	if (gethostname(host, sizeof(host)) != 0)
		host[0] = '\0';
	host[sizeof(host) - 1] = '\0';
	snprintf(buf, size, "%s:%s", host, DataDir);
}

/* Record the session; false (with a LOG) if it could not be done. */
bool
session_file_write(int64 session_id, const char *passwd)
{
	char		owner[MAXPGPATH + 300];
	char		text[MAXPGPATH + 400];
	char		hex[2 * ZK_PASSWD_LEN + 1];
	int			fd;
	int			len;

	owner_line(owner, sizeof(owner));
	for (int i = 0; i < ZK_PASSWD_LEN; i++)
		snprintf(hex + 2 * i, 3, "%02x", (unsigned char) passwd[i]);
	len = snprintf(text, sizeof(text), "zklock session 1\n%s\n%llx\n%s\n",
				   owner, (unsigned long long) session_id, hex);

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

/*
 * The session a previous worker of this server left, if its file is there
 * and was written here.  A file written for another host or directory is
 * ignored (and removed: it is not ours to act on).
 */
bool
session_file_read(int64 *session_id, char *passwd)
{
	char		text[MAXPGPATH + 400];
	char		owner[MAXPGPATH + 300];
	char	   *lines[4];
	int			fd;
	ssize_t		len;
	unsigned long long id;

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
	for (int i = 1; i < 4; i++)
	{
		char	   *nl = strchr(lines[i - 1], '\n');

		if (nl == NULL)
			goto bad;
		*nl = '\0';
		lines[i] = nl + 1;
	}
	if (strchr(lines[3], '\n'))
		*strchr(lines[3], '\n') = '\0';
	owner_line(owner, sizeof(owner));
	if (strcmp(lines[0], "zklock session 1") != 0 ||
		strlen(lines[3]) != 2 * ZK_PASSWD_LEN ||
		sscanf(lines[2], "%llx", &id) != 1)
		goto bad;
	if (strcmp(lines[1], owner) != 0)
	{
		ereport(LOG,
				(errmsg("zklock: ignoring file \"%s\", written for \"%s\", not for this server (\"%s\")",
						SESSION_FILE, lines[1], owner)));
		session_file_remove();
		return false;
	}
	for (int i = 0; i < ZK_PASSWD_LEN; i++)
	{
		unsigned int byte;

		if (sscanf(lines[3] + 2 * i, "%2x", &byte) != 1)
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
