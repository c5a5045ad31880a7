/*
 * lock_table.c
 *	  The backend's table of the locks it holds, with their hold counts.
 *
 * One znode per lock name and mode (exclusive, shared, semaphore), however
 * often and in whichever scopes the backend holds it.  Holds are counted like
 * pg_advisory_lock's: session holds stack and are released one by one,
 * transaction holds go at transaction end.
 *
 * Unlike pg_advisory_lock, a session hold taken in a (sub)transaction that
 * aborts is undone.  Each entry keeps a stack of the holds taken in still
 * open (sub)transactions, innermost last; subtransaction commit folds a level
 * into its parent, abort pops it, top-level commit forgets the stack.  Only
 * entries with a non-empty stack are on touched_locks, so transaction end
 * costs what the transaction touched, not what the backend holds.
 */
#include "postgres.h"

#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "compat.h"
#include "lock_recipe.h"
#include "lock_table.h"
#include "stats.h"
#include "zk_session.h"

static HTAB *lock_table = NULL;
static dlist_head touched_locks = DLIST_STATIC_INIT(touched_locks);

/*
 * The ZooKeeper session every entry belongs to, unless mixed_generations:
 * then some entry may belong to an older one.  Lets the check for lost
 * locks, made by every zklock call and COMMIT, skip the scan of the table.
 */
static uint64 table_generation = 0;
static bool mixed_generations = false;

static HTAB *
get_table(void)
{
	if (lock_table == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = ZKLOCK_NAME_MAX + 2;
		ctl.entrysize = sizeof(LockEntry);
		ctl.hcxt = TopMemoryContext;
		lock_table = hash_create("zklock held locks", 64, &ctl,
								 HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	}
	return lock_table;
}

/* The hash key of a lock: one letter for the mode, then the name. */
static void
make_key(char *key, const char *name, LockMode mode)
{
	static const char letters[] = {
		[LOCK_MODE_EXCLUSIVE] = 'X',
		[LOCK_MODE_SHARED] = 'S',
		[LOCK_MODE_SEMAPHORE] = 'P',
	};

	key[0] = letters[mode];
	strlcpy(key + 1, name, ZKLOCK_NAME_MAX + 1);
}

LockEntry *
lock_table_find(const char *name, LockMode mode)
{
	char		key[ZKLOCK_NAME_MAX + 2];

	make_key(key, name, mode);
	return (LockEntry *) hash_search(get_table(), key, HASH_FIND, NULL);
}

int
lock_table_count(void)
{
	return lock_table ? (int) hash_get_num_entries(lock_table) : 0;
}

/* Remove an entry; delete its node if its session is still ours. */
static void
drop_entry(LockEntry *entry, bool delete_node)
{
	if (delete_node && zk_session_is_current(entry->generation))
		lock_recipe_release(entry->node, entry->recheck_tag, entry->watch,
							LOCK_ENTRY_NAME(entry));
	else
		bridge_unwatch_held(entry->watch);
	stats_hold_ended(LOCK_ENTRY_NAME(entry), !delete_node);
	if (entry->npending > 0)
		dlist_delete(&entry->touched);
	pfree(entry->node);
	if (entry->recheck_tag)
		pfree(entry->recheck_tag);
	pfree(entry->pending);
	hash_search(lock_table, entry->key, HASH_REMOVE, NULL);
}

static void
drop_if_unheld(LockEntry *entry)
{
	if (entry->session_count == 0 && entry->xact_count == 0)
		drop_entry(entry, true);
}

/* Make room for one more pending level, before anything is changed. */
static void
reserve_pending(LockEntry *entry)
{
	if (entry->npending == entry->maxpending)
	{
		int			newmax = entry->maxpending * 2;

		entry->pending = repalloc(entry->pending, newmax * sizeof(PendingHolds));
		entry->maxpending = newmax;
	}
}

void
lock_table_add_hold(LockEntry *entry, LockScope scope)
{
	SubTransactionId subid = GetCurrentSubTransactionId();
	PendingHolds *top;

	reserve_pending(entry);
	if (entry->npending == 0)
		dlist_push_tail(&touched_locks, &entry->touched);
	if (entry->npending == 0 || entry->pending[entry->npending - 1].subid != subid)
	{
		top = &entry->pending[entry->npending++];
		top->subid = subid;
		top->session = 0;
		top->xact = 0;
	}
	top = &entry->pending[entry->npending - 1];
	if (scope == LOCK_SCOPE_SESSION)
	{
		entry->session_count++;
		top->session++;
	}
	else
	{
		entry->xact_count++;
		top->xact++;
	}
}

/*
 * Enter a newly acquired lock with its first hold.  Everything that can fail
 * happens before the table changes, so on ERROR the caller only has to delete
 * the node.
 */
LockEntry *
lock_table_insert(const char *name, LockMode mode, int32 permits,
				  const char *node, const char *recheck_tag,
				  int64 token, uint64 generation, HeldWatch *watch,
				  LockScope scope)
{
	char		key[ZKLOCK_NAME_MAX + 2];
	char	   *node_copy = MemoryContextStrdup(TopMemoryContext, node);
	char	   *tag_copy = recheck_tag ?
		MemoryContextStrdup(TopMemoryContext, recheck_tag) : NULL;
	PendingHolds *pending = MemoryContextAlloc(TopMemoryContext,
											   2 * sizeof(PendingHolds));
	LockEntry  *entry;
	bool		found;

	make_key(key, name, mode);
	entry = (LockEntry *) hash_search(get_table(), key, HASH_ENTER, &found);
	Assert(!found);
	if (hash_get_num_entries(lock_table) == 1)
	{
		table_generation = generation;
		mixed_generations = false;
	}
	else if (generation != table_generation)
		mixed_generations = true;
	entry->mode = mode;
	entry->permits = permits;
	entry->node = node_copy;
	entry->recheck_tag = tag_copy;
	entry->token = token;
	entry->acquired_at = GetCurrentTimestamp();
	entry->generation = generation;
	entry->watch = watch;
	entry->revoke_raised = false;
	entry->session_count = 0;
	entry->xact_count = 0;
	entry->npending = 0;
	entry->maxpending = 2;
	entry->pending = pending;
	lock_table_add_hold(entry, scope);
	return entry;
}

/* Remove the empty level i from the pending stack. */
static void
remove_pending_level(LockEntry *entry, int i)
{
	memmove(&entry->pending[i], &entry->pending[i + 1],
			(entry->npending - i - 1) * sizeof(PendingHolds));
	if (--entry->npending == 0)
		dlist_delete(&entry->touched);
}

/* Give up one session hold.  False if there is none. */
bool
lock_table_release_session(LockEntry *entry)
{
	if (entry->session_count == 0)
		return false;
	entry->session_count--;

	/* The most recent uncommitted session hold is the one released. */
	for (int i = entry->npending - 1; i >= 0; i--)
	{
		PendingHolds *level = &entry->pending[i];

		if (level->session > 0)
		{
			level->session--;
			if (level->session == 0 && level->xact == 0)
				remove_pending_level(entry, i);
			break;
		}
	}
	drop_if_unheld(entry);
	return true;
}

/* Give up all of an entry's session holds; the entry may go. */
static void
release_session_holds(LockEntry *entry)
{
	entry->session_count = 0;
	for (int i = entry->npending - 1; i >= 0; i--)
	{
		entry->pending[i].session = 0;
		if (entry->pending[i].xact == 0)
			remove_pending_level(entry, i);
	}
	/* Deleting the entry just returned is allowed during a scan. */
	drop_if_unheld(entry);
}

/*
 * Give up every session hold (only of the locks whose release request
 * interrupted the backend, if revoked_only); returns how many locks had one.
 */
int
lock_table_release_all_session(bool revoked_only)
{
	HASH_SEQ_STATUS status;
	LockEntry  *entry;
	int			released = 0;

	if (lock_table == NULL)
		return 0;
	hash_seq_init(&status, lock_table);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (entry->session_count == 0 || (revoked_only && !entry->revoke_raised))
			continue;
		released++;
		release_session_holds(entry);
	}
	return released;
}

/* The WARNING's message for a lost lock or semaphore. */
static int
lost_message(LockEntry *entry)
{
	if (entry->mode == LOCK_MODE_SEMAPHORE)
		return errmsg("zklock semaphore \"%s\" was lost", LOCK_ENTRY_NAME(entry));
	return errmsg("zklock lock \"%s\" was lost", LOCK_ENTRY_NAME(entry));
}

/*
 * Forget, with a WARNING each, the locks whose ZooKeeper session is gone,
 * and, when deletions is true, those whose node another client deleted.
 * live_generation is the session still usable, 0 if none is.  Returns how
 * many were forgotten; *first gets the name of one of them, *named_lost
 * whether one was called name, in mode.
 */
int
lock_table_forget_lost(uint64 live_generation, bool deletions,
					   const char *name, LockMode mode, bool *named_lost,
					   char *first)
{
	HASH_SEQ_STATUS status;
	LockEntry  *entry;
	int			forgotten = 0;

	if (lock_table == NULL || hash_get_num_entries(lock_table) == 0 ||
		(!mixed_generations && table_generation == live_generation &&
		 !deletions))
		return 0;
	hash_seq_init(&status, lock_table);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		/* In the live session: lost only if another client deleted its node. */
		bool		deleted = entry->generation == live_generation;
		ZkCloseReason why;

		if (deleted && !bridge_held_deleted(entry->watch))
			continue;
		why = bridge_close_reason(entry->generation);
		ereport(WARNING,
				(errcode(deleted ? ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE :
						 ERRCODE_CONNECTION_FAILURE),
				 lost_message(entry),
				 deleted ?
				 errdetail("Its ZooKeeper node \"%s\" was deleted by another client, so other sessions may have held it since.",
						   entry->node) :
				 why == ZK_CLOSED_SETTINGS ?
				 errdetail("The server's session worker closed its ZooKeeper session because zklock.hosts, zklock.session_timeout or zklock.auth changed at a reload, so other sessions may have held it since.") :
				 why == ZK_CLOSED_SERVER_FAULT ?
				 errdetail("The server's session worker closed its ZooKeeper session because its ZooKeeper server left a request unanswered, so other sessions may have held it since.") :
				 errdetail("Its ZooKeeper session expired or was disconnected for longer than the session timeout, so other sessions may have held it since."),
				 errhint("Use fencing tokens (zk_lock_token) to make stale holders harmless.")));
		if (forgotten++ == 0)
			strlcpy(first, LOCK_ENTRY_NAME(entry), ZKLOCK_NAME_MAX + 1);
		if (name != NULL && entry->mode == mode &&
			strcmp(LOCK_ENTRY_NAME(entry), name) == 0)
			*named_lost = true;
		drop_entry(entry, false);
	}
	table_generation = live_generation;
	mixed_generations = false;
	return forgotten;
}

void
lock_table_subxact_commit(SubTransactionId mine, SubTransactionId parent)
{
	dlist_iter	iter;

	dlist_foreach(iter, &touched_locks)
	{
		LockEntry  *entry = dlist_container(LockEntry, touched, iter.cur);
		PendingHolds *top = &entry->pending[entry->npending - 1];

		if (top->subid != mine)
			continue;
		if (entry->npending >= 2 && top[-1].subid == parent)
		{
			top[-1].session += top->session;
			top[-1].xact += top->xact;
			entry->npending--;
		}
		else
			top->subid = parent;
	}
}

void
lock_table_subxact_abort(SubTransactionId mine)
{
	dlist_mutable_iter iter;

	dlist_foreach_modify(iter, &touched_locks)
	{
		LockEntry  *entry = dlist_container(LockEntry, touched, iter.cur);

		while (entry->npending > 0 &&
			   entry->pending[entry->npending - 1].subid >= mine)
		{
			PendingHolds *top = &entry->pending[entry->npending - 1];

			entry->session_count -= top->session;
			entry->xact_count -= top->xact;
			remove_pending_level(entry, entry->npending - 1);
		}
		drop_if_unheld(entry);
	}
}

/*
 * Top-level commit or abort: transaction holds end either way; uncommitted
 * session holds become permanent on commit and are undone on abort.  Runs in
 * transaction callbacks, so it never waits and never raises: node deletions
 * are sent and not waited for.
 */
void
lock_table_xact_end(bool commit)
{
	dlist_mutable_iter iter;

	dlist_foreach_modify(iter, &touched_locks)
	{
		LockEntry  *entry = dlist_container(LockEntry, touched, iter.cur);

		if (!commit)
			for (int i = 0; i < entry->npending; i++)
				entry->session_count -= entry->pending[i].session;
		entry->xact_count = 0;
		entry->npending = 0;
		dlist_delete(&entry->touched);
		drop_if_unheld(entry);
	}
}

/* An entry of the live session, to probe it with; NULL if there is none. */
LockEntry *
lock_table_any_live(uint64 live_generation)
{
	HASH_SEQ_STATUS status;
	LockEntry  *entry;

	if (lock_table == NULL)
		return NULL;
	hash_seq_init(&status, lock_table);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (entry->generation == live_generation)
		{
			hash_seq_term(&status);
			return entry;
		}
	}
	return NULL;
}

bool
lock_table_xact_touched(void)
{
	return !dlist_is_empty(&touched_locks);
}

void
lock_table_visit(LockTableVisitor visit, void *arg)
{
	HASH_SEQ_STATUS status;
	LockEntry  *entry;

	if (lock_table == NULL)
		return;
	hash_seq_init(&status, lock_table);
	while ((entry = hash_seq_search(&status)) != NULL)
		visit(entry, arg);
}
