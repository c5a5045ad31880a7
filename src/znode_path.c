/*
 * znode_path.c
 *	  ZooKeeper paths as zklock's settings and absolute lock names give them:
 *	  which ones ZooKeeper accepts, its reserved tree, lists of paths.
 *
 * Pure functions: the settings' checks (guc.c) and the lock names
 * (lock_name.c) both use them.
 */
#include "postgres.h"

#include "mb/pg_wchar.h"
#include "nodes/pg_list.h"

#include "znode_path.h"

/*
 * Whether ZooKeeper takes the character at p, which it reads as UTF-8, in a
 * path; *len is set to its length in bytes.  Its server refuses control
 * characters and, as Java chars, U+007F-U+009F, U+D800-U+F8FF (with the
 * surrogates that every character beyond U+FFFF is made of) and
 * U+FFF0-U+FFFF (the replacement for bytes that are not UTF-8 among them).
 */
static bool
zk_takes_character(const unsigned char *p, int *len)
{
	pg_wchar	c;

	*len = pg_utf_mblen(p);
	if (*len > 4 || strnlen((const char *) p, *len) < (size_t) *len ||
		!pg_utf8_islegal(p, *len))
	{
		*len = 1;
		return false;
	}
	c = utf8_to_unicode(p);
	return !(c < 0x20 || (c >= 0x7F && c <= 0x9F) ||
			 (c >= 0xD800 && c <= 0xF8FF) || c >= 0xFFF0);
}

/*
 * An absolute znode path ZooKeeper accepts: components non-empty, not "." or
 * "..", only characters it takes (see above), no trailing slash.  "/" alone
 * is not allowed here (callers that mean the root handle it themselves).
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
			int			len;

			if (!zk_takes_character((const unsigned char *) p, &len))
				return false;
			p += len;
		}
		n = p - start;
		if (n == 0 || (n == 1 && start[0] == '.') ||
			(n == 2 && start[0] == '.' && start[1] == '.'))
			return false;
	}
	return *p == '\0';
}

/* Is path /zookeeper or below it, the tree ZooKeeper keeps for itself? */
bool
zklock_in_reserved_tree(const char *path)
{
	return strcmp(path, "/zookeeper") == 0 || strncmp(path, "/zookeeper/", 11) == 0;
}

/*
 * Why path cannot be the top of a subtree named in a zklock setting
 * (zklock.root, an entry of zklock.absolute_paths), as a detail sentence
 * about what; NULL if it can be.
 */
char *
zklock_subtree_problem(const char *what, const char *path)
{
	if (path[0] != '/')
		return psprintf("%s must be an absolute ZooKeeper path, starting with \"/\".", what);
	if (strcmp(path, "/") == 0)
		return psprintf("%s must not be the ZooKeeper root itself.", what);
	if (zklock_in_reserved_tree(path))
		return psprintf("%s is inside the /zookeeper subtree, which ZooKeeper reserves.", what);
	if (!zklock_valid_znode_path(path))
		return psprintf("%s must be a valid ZooKeeper path: no empty, \".\" or \"..\" components, no trailing \"/\", no control characters nor others ZooKeeper refuses (U+007F to U+009F, U+D800 to U+F8FF, U+FFF0 and above).", what);
	return NULL;
}

/*
 * The entries of a comma-separated list of paths (zklock.absolute_paths),
 * without the blanks around them, as a List of palloc'd strings; an empty
 * entry is an empty string.  An empty or blank list has no entries.
 */
List *
zklock_split_path_list(const char *list)
{
	List	   *entries = NIL;
	const char *p = list;

	if (p[strspn(p, " \t")] == '\0')
		return NIL;
	for (;;)
	{
		const char *end = strchr(p, ',');
		const char *stop = end ? end : p + strlen(p);

		while (p < stop && (*p == ' ' || *p == '\t'))
			p++;
		while (stop > p && (stop[-1] == ' ' || stop[-1] == '\t'))
			stop--;
		entries = lappend(entries, pnstrdup(p, stop - p));
		if (end == NULL)
			return entries;
		p = end + 1;
	}
}
