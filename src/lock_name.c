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
 */
#include "postgres.h"

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
	char	   *encoded = zklock_encode_name(name);
	char	   *path = psprintf("%s/%s", zklock_root, encoded);

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
