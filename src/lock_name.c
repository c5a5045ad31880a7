/*
 * lock_name.c
 *	  Lock names and the znode paths they map to.
 *
 * A lock name is any non-empty text up to ZKLOCK_NAME_MAX bytes.  It becomes
 * one path component below zklock.root, so it is percent-encoded: bytes
 * outside a conservative safe set (and '%' itself) become %XX.  Because '%'
 * is always encoded the mapping is injective, so 'a/b' ("a%2Fb") and 'a%2Fb'
 * ("a%252Fb") never share a node, and "." / ".." (which ZooKeeper rejects as
 * components) are encoded in full.
 *
 * A name that begins with '/' is an absolute znode path instead (below the
 * chroot of zklock.hosts, if any), used as the lock's parent as it is, so
 * that zklock can share locks with Curator, Kazoo and other clients.  Only
 * superusers may use any such path; other roles only those that
 * zklock.absolute_paths allows (see zklock_parent_path).
 *
 * Names go to ZooKeeper in UTF-8 whatever the database's encoding, so that
 * 'café' is one lock in a UTF8 and a LATIN1 database, and are read back
 * into it.  A SQL_ASCII database, which knows no encoding, sends its bytes
 * as they are.
 */
#include "postgres.h"

#include <ctype.h>

#include "catalog/namespace.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"

#include "guc.h"
#include "lock_name.h"
#include "znode_path.h"

static bool
is_safe_byte(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		(c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' ||
		c == '~' || c == ':' || c == '@' || c == '+' || c == '=' || c == ',';
}

/* The name as it goes to ZooKeeper. */
static char *
name_to_utf8(const char *name)
{
	if (GetDatabaseEncoding() == PG_SQL_ASCII)
		return unconstify(char *, name);
	return pg_server_to_any(name, strlen(name), PG_UTF8);
}

/*
 * A name read from ZooKeeper, in the database's encoding; NULL if it has no
 * such text (not UTF-8, or a character the encoding lacks).
 */
static char *
name_from_utf8(char *utf8)
{
	int			encoding = GetDatabaseEncoding();
	int			len = strlen(utf8);
	int			room = len * MAX_CONVERSION_GROWTH + 1;
	unsigned char *converted;
	Oid			proc;

	if (encoding == PG_SQL_ASCII)
		return utf8;
	if (!pg_verify_mbstr(PG_UTF8, utf8, len, true))
		return NULL;
	if (encoding == PG_UTF8)
		return utf8;
	proc = FindDefaultConversionProc(PG_UTF8, encoding);
	if (!OidIsValid(proc))
		return NULL;
	converted = palloc(room);
	if (pg_do_encoding_conversion_buf(proc, PG_UTF8, encoding,
									  (unsigned char *) utf8, len,
									  converted, room, true) != len)
	{
		pfree(converted);
		return NULL;
	}
	return (char *) converted;
}

/* ERROR unless name is usable as a lock name. NULL is checked by callers. */
void
zklock_check_name(const char *name)
{
	zklock_check_name_of("lock", name);
}

/* The same for the name of what ("lock", "barrier", "gate"). */
void
zklock_check_name_of(const char *what, const char *name)
{
	size_t		len = strlen(name);

	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s name must not be empty", what)));
	if (len > ZKLOCK_NAME_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s name is too long", what),
				 errdetail("The name has %zu bytes; the limit is %d bytes.",
						   len, ZKLOCK_NAME_MAX)));
	if (name[0] != '/')
		return;
	if (!zklock_valid_znode_path(name_to_utf8(name)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s name \"%s\" is not a valid ZooKeeper path", what, name),
				 errdetail("A lock name that begins with \"/\" is an absolute path: its components must be non-empty, not \".\" or \"..\", in UTF-8 without control characters nor others ZooKeeper refuses (U+007F to U+009F, U+D800 to U+F8FF, U+FFF0 and above), and it must not end with \"/\"."),
				 errhint("Names without a leading \"/\" may contain any characters.")));
	if (zklock_in_reserved_tree(name))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s name \"%s\" is inside ZooKeeper's reserved /zookeeper tree", what, name)));
}

char *
zklock_encode_name(const char *name)
{
	static const char hex[] = "0123456789ABCDEF";
	bool		all_dots = strspn(name, ".") == strlen(name);
	StringInfoData buf;

	initStringInfo(&buf);
	for (const unsigned char *p = (const unsigned char *) name; *p; p++)
	{
		if (is_safe_byte(*p) && !(all_dots && *p == '.'))
			appendStringInfoChar(&buf, (char) *p);
		else
		{
			appendStringInfoChar(&buf, '%');
			appendStringInfoChar(&buf, hex[*p >> 4]);
			appendStringInfoChar(&buf, hex[*p & 0x0F]);
		}
	}
	return buf.data;
}

/*
 * ERROR (42501) unless the current role may use path, the absolute path of a
 * lock name: superusers any, other roles only paths at or below an entry of
 * zklock.absolute_paths, matched by whole components ("/a/b" allows "/a/b"
 * and "/a/b/c", not "/a/bc").  Otherwise any role could create nodes
 * anywhere in the ensemble, or read any node's children and data through
 * zk_lock_queue.  The current role is the one superuser() sees, so a
 * superuser's SECURITY DEFINER function may hand one path to other roles.
 */
static void
check_path_access(const char *path)
{
	List	   *prefixes;
	ListCell   *lc;

	if (superuser())
		return;
	prefixes = zklock_split_path_list(zklock_absolute_paths);
	foreach(lc, prefixes)
	{
		const char *prefix = lfirst(lc);
		size_t		n = strlen(prefix);

		if (strncmp(path, prefix, n) == 0 && (path[n] == '\0' || path[n] == '/'))
			return;
	}
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied for ZooKeeper path \"%s\"", path),
			 errdetail("A lock name that begins with \"/\" is an absolute ZooKeeper path; only superusers may use one that is not at or below a path of zklock.absolute_paths."),
			 errhint("Use a name without a leading \"/\", which lives below zklock.root, or ask a superuser to add the path to zklock.absolute_paths.")));
}

/*
 * The parent znode whose children queue for the lock called name.  The only
 * way from a lock name to ZooKeeper, for locking and for reading a queue:
 * an absolute path the current role may not use fails here (42501).
 */
char *
zklock_parent_path(const char *name)
{
	return zklock_place_path(name, NULL);
}

/*
 * The same in a place of its own below zklock.root (place, NULL for locks):
 * barriers' nodes are <zklock.root>/%barriers/<encoded name>, gates'
 * <zklock.root>/%gates/<encoded name>.  Such a place is the encoding of no
 * lock name (a '%' is always followed by two capital hex digits there), so
 * it is never read as a lock, nor a lock as a barrier.  Absolute paths are
 * the same for every recipe.
 */
char *
zklock_place_path(const char *name, const char *place)
{
	char	   *encoded;
	char	   *path;

	if (name[0] == '/')
	{
		path = pstrdup(name_to_utf8(name));
		check_path_access(path);
		return path;
	}
	encoded = zklock_encode_name(name_to_utf8(name));
	path = place ? psprintf("%s/%s/%s", zklock_root, place, encoded) :
		psprintf("%s/%s", zklock_root, encoded);

	pfree(encoded);
	return path;
}

/*
 * The lock name a child of zklock.root stands for, as text of this
 * database; NULL if the child is not the encoding of any name.  A name this
 * database cannot show (another client's bytes, or a character its encoding
 * lacks) is shown as the child's own name.
 */
char *
zklock_decode_name(const char *encoded)
{
	StringInfoData buf;
	char	   *again;
	char	   *name;

	initStringInfo(&buf);
	for (const char *p = encoded; *p; p++)
	{
		if (*p == '%' && isxdigit((unsigned char) p[1]) &&
			isxdigit((unsigned char) p[2]))
		{
			char		hex[3] = {p[1], p[2], '\0'};

			appendStringInfoChar(&buf, (char) strtol(hex, NULL, 16));
			p += 2;
		}
		else
			appendStringInfoChar(&buf, *p);
	}
	/* Only a canonical encoding names a lock; "/x" would be a path. */
	again = zklock_encode_name(buf.data);
	if (strcmp(again, encoded) != 0 || buf.len == 0 || buf.data[0] == '/')
	{
		pfree(buf.data);
		buf.data = NULL;
	}
	pfree(again);
	if (buf.data == NULL)
		return NULL;
	name = name_from_utf8(buf.data);
	return name ? name : pstrdup(encoded);
}
