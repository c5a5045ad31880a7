/*
 * lock_node.c
 *	  A lock's queue nodes: how zklock names them, and the rules the lock
 *	  recipe, the queue views and the deadlock detector read from names.
 *
 * A queue node is an EPHEMERAL_SEQUENTIAL child of the lock's parent:
 * "_c_<tag>-lock-NNNNNNNNNN" (exclusive; "_c_<tag>-__WRIT__" with
 * zklock.exclusive_naming = readwrite), "_c_<tag>-__READ__" (shared), or
 * "_c_<tag>-permits<N>-lease-" (a semaphore's lease), ordered by the
 * 10-digit sequence suffix the server appends.  The tag's first part is the
 * same for every node of one backend in one session (its session key).
 * Curator's and Kazoo's nodes follow the same conventions, so the rules read
 * theirs too.
 *
 * Pure functions of names: no ZooKeeper, no shared state, no errors.
 */
#include "postgres.h"

#include <ctype.h>

#include "lock_node.h"

const char *const lock_mode_names[] = {
	[LOCK_MODE_EXCLUSIVE] = "exclusive",
	[LOCK_MODE_SHARED] = "shared",
	[LOCK_MODE_SEMAPHORE] = "semaphore",
};

/*
 * The path prefix of a new queue node, below parent, for the server to
 * append the sequence to (palloc'd).  writer_naming: an exclusive node is
 * named as Curator's read-write lock names its writers.
 */
char *
lock_node_prefix(const char *parent, const char *tag, LockMode mode,
				 int permits, bool writer_naming)
{
	switch (mode)
	{
		case LOCK_MODE_SHARED:
			return psprintf("%s/_c_%s-__READ__", parent, tag);
		case LOCK_MODE_SEMAPHORE:
			return psprintf("%s/_c_%s-permits%d-lease-", parent, tag, permits);
		case LOCK_MODE_EXCLUSIVE:
			break;
	}
	return psprintf("%s/_c_%s-%s", parent, tag, writer_naming ? "__WRIT__" : "lock-");
}

/*
 * The owner part of the names of a backend's nodes in one session of this
 * server's (ZK_OWNER_LEN + 1 bytes): the backend's own part and 16 bits of
 * the session's generation.  A member of a wait-for graph is a backend in one
 * session: the nodes that an old session of the backend leaves until it
 * expires are another member's, not the new session's, and are waited for
 * like anyone's.
 */
void
lock_node_owner(char *owner, const char *backend, uint64 generation)
{
	snprintf(owner, ZK_OWNER_LEN + 1, "%.*s-%04x", ZK_OWNER_BACKEND_LEN,
			 backend, (unsigned int) (generation & 0xFFFF));
}

/* The trailing 10-digit sequence number of a lock child, -1 if none. */
int64
lock_node_sequence(const char *name)
{
	size_t		len = strlen(name);
	int64		seq = 0;

	if (len < 10)
		return -1;
	for (const char *p = name + len - 10; *p; p++)
	{
		if (*p < '0' || *p > '9')
			return -1;
		seq = seq * 10 + (*p - '0');
	}
	return seq;
}

/*
 * The kind of a lock child, by the naming conventions of zklock, Curator and
 * Kazoo: readers are "__READ__" (Curator) or "__rlock__" (Kazoo), semaphore
 * leases "-lease-"; everything else is a writer.
 */
LockMode
lock_node_mode(const char *name)
{
	if (strstr(name, "__READ__") != NULL || strstr(name, "__rlock__") != NULL)
		return LOCK_MODE_SHARED;
	if (strstr(name, "-lease-") != NULL)
		return LOCK_MODE_SEMAPHORE;
	return LOCK_MODE_EXCLUSIVE;
}

/* The permits a semaphore lease was taken with, from its name; -1 if none. */
int
lock_node_permits(const char *name)
{
	const char *p = strstr(name, "-permits");

	return p ? atoi(p + strlen("-permits")) : -1;
}

/*
 * The part of a lock node's name that all nodes of one zklock backend's
 * ZooKeeper session share: "_c_" and the session part of the attempt tag.
 * Copied into key (ZK_SESSION_KEY_LEN + 1 bytes); false for a name of another
 * shape (Kazoo's, say).  Curator's protected names have the same shape with
 * a random UUID, which no zklock session shares.
 */
bool
lock_node_session_key(const char *name, char *key)
{
	const char *p = strrchr(name, '/');

	p = p ? p + 1 : name;
	if (strncmp(p, "_c_", 3) != 0 || strlen(p) < ZK_SESSION_KEY_LEN)
		return false;
	for (int i = 3; i < ZK_SESSION_KEY_LEN; i++)
	{
		char		c = p[i];
		bool		dash = i == 3 + 8 || i == 3 + 13;

		if (dash ? c != '-' : !isxdigit((unsigned char) c))
			return false;
	}
	memcpy(key, p, ZK_SESSION_KEY_LEN);
	key[ZK_SESSION_KEY_LEN] = '\0';
	return true;
}

/*
 * Does the node lower, queued below own in the same lock, keep own (of mode)
 * from holding?  The one rule for the recipe, the queue listing and the
 * deadlock check.  A reader waits only for writers, and not for a writer of
 * its own backend: a backend that holds the exclusive lock may take the
 * shared one too (see refuse_downgrade in lock_recipe.c).  Semaphore leases
 * are counted instead: none blocks on its own.
 */
bool
lock_node_blocks(LockMode mode, const char *own, const char *lower)
{
	char		own_key[ZK_SESSION_KEY_LEN + 1];
	char		lower_key[ZK_SESSION_KEY_LEN + 1];

	switch (mode)
	{
		case LOCK_MODE_EXCLUSIVE:
			return true;
		case LOCK_MODE_SHARED:
			if (lock_node_mode(lower) == LOCK_MODE_SHARED)
				return false;
			return !(lock_node_session_key(own, own_key) &&
					 lock_node_session_key(lower, lower_key) &&
					 strcmp(own_key, lower_key) == 0);
		case LOCK_MODE_SEMAPHORE:
			return false;
	}
	return true;
}

/*
 * The nodes of sorted[0, c) (a queue's node names in lock_node_order) that
 * keep sorted[c] from holding, by lock_node_blocks: their indexes go to
 * blockers (if not NULL); returns how many there are.  The queue listing and
 * the deadlock check judge by it; for semaphores it is not the rule (see
 * lock_queue.c).
 */
int
lock_node_blockers(const char *const *sorted, int c, int *blockers)
{
	LockMode	mode = lock_node_mode(sorted[c]);
	int			n = 0;

	for (int i = 0; i < c; i++)
		if (lock_node_blocks(mode, sorted[c], sorted[i]))
		{
			if (blockers)
				blockers[n] = i;
			n++;
		}
	return n;
}

/* qsort order of node names (char *): by their sequence suffix. */
int
lock_node_order(const void *a, const void *b)
{
	int64		x = lock_node_sequence(*(const char *const *) a);
	int64		y = lock_node_sequence(*(const char *const *) b);

	return (x > y) - (x < y);
}

/*
 * Judge a queue's listing (children, unsorted) for our node own, of mode
 * (and permits, for a semaphore's lease): whether it holds, and if not, the
 * nearest node below it that blocks it, the one to wait for.  A lock is
 * held when nothing below blocks it; a lease when fewer than permits leases
 * are below it.  Nodes whose names carry skip_tag (our own lost creates) do
 * not count.
 */
void
lock_node_judge(const char *const *children, int n, const char *own,
				LockMode mode, int permits, const char *skip_tag,
				LockVerdict *v)
{
	int64		own_seq = lock_node_sequence(own);
	int64		pred_seq = -1;
	int			lower = 0;

	v->own_found = false;
	v->predecessor = -1;
	v->other_permits = -1;
	for (int i = 0; i < n; i++)
	{
		const char *child = children[i];
		int64		seq = lock_node_sequence(child);

		if (strcmp(child, own) == 0)
		{
			v->own_found = true;
			continue;
		}
		if (strstr(child, skip_tag) != NULL || seq < 0 || seq >= own_seq)
			continue;
		lower++;
		if (mode == LOCK_MODE_SEMAPHORE && lock_node_permits(child) != permits)
			v->other_permits = i;
		if (lock_node_blocks(mode, own, child) && seq > pred_seq)
		{
			v->predecessor = i;
			pred_seq = seq;
		}
	}
	v->held = mode == LOCK_MODE_SEMAPHORE ? lower < permits : v->predecessor < 0;
}
