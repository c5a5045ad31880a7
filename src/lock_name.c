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
 * that zklock can share locks with Curator, Kazoo and other clients.
 */
#include "postgres.h"

#include <ctype.h>

#include "lib/stringinfo.h"

#include "guc.h"
#include "lock_name.h"

static bool
is_safe_byte(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		(c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' ||
		c == '~' || c == ':' || c == '@' || c == '+' || c == '=' || c == ',';
}

/* ERROR unless name is usable as a lock name. NULL is checked by callers. */
void
zklock_check_name(const char *name)
{
	size_t		len = strlen(name);

	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lock name must not be empty")));
	if (len > ZKLOCK_NAME_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lock name is too long"),
				 errdetail("The name has %zu bytes; the limit is %d bytes.",
						   len, ZKLOCK_NAME_MAX)));
	if (name[0] != '/')
		return;
	if (!zklock_valid_znode_path(name))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lock name \"%s\" is not a valid ZooKeeper path", name),
				 errdetail("A lock name that begins with \"/\" is an absolute path: its components must be non-empty, not \".\" or \"..\", without control characters, and it must not end with \"/\"."),
				 errhint("Names without a leading \"/\" may contain any characters.")));
	if (strcmp(name, "/zookeeper") == 0 || strncmp(name, "/zookeeper/", 11) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lock name \"%s\" is inside ZooKeeper's reserved /zookeeper tree", name)));
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

/* The parent znode whose children queue for the lock called name. */
char *
zklock_parent_path(const char *name)
{
	char	   *encoded;
	char	   *path;

	if (name[0] == '/')
		return pstrdup(name);
	encoded = zklock_encode_name(name);
	path = psprintf("%s/%s", zklock_root, encoded);

	pfree(encoded);
	return path;
}

/*
 * An absolute znode path ZooKeeper accepts: components non-empty, not "." or
 * "..", no control characters, no trailing slash.  "/" alone is not allowed
 * here (callers that mean the root handle it themselves).
 */
bool
zklock_valid_znode_path(const char *path)
{
	const char *p = path;

	if (p[0] != '/' || p[1] == '\0')
		return false;
	while (*p == '/')
	{
		const char *start = ++p;
		size_t		n;

		while (*p && *p != '/')
		{
			unsigned char c = (unsigned char) *p;

			if (c < 0x20 || c == 0x7F)
				return false;
			p++;
		}
		n = p - start;
		if (n == 0 || (n == 1 && start[0] == '.') ||
			(n == 2 && start[0] == '.' && start[1] == '.'))
			return false;
	}
	return *p == '\0';
}

/*
 * The lock name a child of zklock.root stands for; NULL if the child is not
 * the encoding of any name.
 */
char *
zklock_decode_name(const char *encoded)
{
	StringInfoData buf;
	char	   *again;

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
	return buf.data;
}
