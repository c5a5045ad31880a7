/*
 * zk_bridge.c
 *	  The only place where the ZooKeeper client's threads and the backend meet.
 *
 * libzookeeper_mt runs completions and watchers on its own threads.  Those
 * must never call into PostgreSQL (no palloc, elog, SetLatch), so everything
 * they produce is copied into malloc'ed memory under bridge_mutex and the
 * backend is woken through a pipe, which it waits on together with its latch
 * and postmaster death.
 *
 * Two rules keep the threads from waiting for each other for good.  The
 * client holds its own locks while it calls our watchers and log callback
 * (its IO thread logs from inside host name resolution, under its reconfig
 * lock).  So: bridge_mutex is a leaf, nothing of the client is ever called
 * while holding it; and the log callback takes no lock at all (messages go
 * through a lock-free array).
 *
 * Everything counted for a handle (pending deletes, session events) belongs
 * to its epoch.  When a handle is closed, the client may never call back
 * what it still had queued; the epoch changes and those leftovers no longer
 * count.  The handle itself is opened on a thread of its own, with every
 * signal blocked, because zookeeper_init resolves host names synchronously
 * and its threads inherit the signal mask of the thread that starts them:
 * the backend waits for it like for any reply, cancellable.  It is closed on
 * one too, because zookeeper_close waits for the server's answer, up to 3 s,
 * uninterruptibly; the backend waits for that only at exit.
 *
 * A request the backend gives up on (an ERROR during a wait, a timeout) is
 * finished by whichever thread sees its reply: a node it created is deleted,
 * a watch it set is removed.  A create whose reply was lost may still have
 * happened, so it is looked for by the attempt tag in its name.  Nothing a
 * backend abandons can be left behind in ZooKeeper while its session lives,
 * even if the backend never calls zklock again.
 */
#include "postgres.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "zk_bridge.h"

/* The client threads count with these; GCC and Clang have them. */
#if !defined(__ATOMIC_RELAXED)
#error "zklock needs a compiler with __atomic builtins (GCC or Clang)"
#endif

/*
 * Helgrind does not see the ordering that __atomic operations give.  The
 * stress run under it (test/helgrind/run.sh) builds with ZKLOCK_HELGRIND to
 * tell it; these cost nothing otherwise.
 */
#ifdef ZKLOCK_HELGRIND
#include <valgrind/helgrind.h>
#define HAPPENS_BEFORE(p) ANNOTATE_HAPPENS_BEFORE(p)
#define HAPPENS_AFTER(p) ANNOTATE_HAPPENS_AFTER(p)
#define ATOMIC_ONLY(p, size) ANNOTATE_BENIGN_RACE_SIZED(p, size, "accessed atomically")
#else
#define HAPPENS_BEFORE(p) ((void) 0)
#define HAPPENS_AFTER(p) ((void) 0)
#define ATOMIC_ONLY(p, size) ((void) 0)
#endif

/*
 * Messages queued by client threads for the backend to log.  A thread claims
 * a free slot with a compare-and-swap, the backend empties the slots; the
 * sequence number restores the order.
 */
#define BRIDGE_MAX_MESSAGES 64

typedef struct BridgeMessage
{
	uint64_t	seq;
	int			elevel;
	char		text[FLEXIBLE_ARRAY_MEMBER];
} BridgeMessage;

static BridgeMessage *message_slots[BRIDGE_MAX_MESSAGES];
static uint64_t message_seq;
static uint64_t dropped_messages;

/*
 * Connections a server accepted and closed before answering the session
 * handshake, since the handle was opened: what a server does beyond its
 * maxClientCnxns, or without a quorum.  Counted from the client's log lines
 * (it reports nothing else), atomically: the log callback takes no lock.
 */
static uint64_t closed_by_server;

/*
 * A leaf: no function of the ZooKeeper client may be called while holding
 * it (not even zoo_get_current_server or zoo_state, which take the client's
 * locks), and nothing else that could wait.  The client calls our watchers
 * while holding its own locks; a call into the client under this mutex would
 * be a lock-order inversion that freezes the backend for good.
 */
static pthread_mutex_t bridge_mutex = PTHREAD_MUTEX_INITIALIZER;

/* All of these are protected by bridge_mutex. */
static uint64_t handle_epoch;	/* of the open (or opening) handle; 0: none */
static uint64_t last_epoch;
static ZkSessionSnapshot session_state;
static uint64_t watch_events;
static bool poked;				/* a published wait was asked to check again */
static int	deletes_in_flight;	/* janitor deletes of handle_epoch */
static int64_t last_contact;	/* see bridge_last_contact */
static HeldWatch *held_watches; /* every HeldWatch not yet freed */
static uint64_t held_deletions; /* held nodes deleted by others, so far */

/* Backend-only. */
static int	wake_read_fd = -1;
static WaitEventSet *wait_set = NULL;

/* Written once by the backend before any client thread exists. */
static int	wake_write_fd = -1;

/*
 * The watch on a node the backend created (held, or queued for a lock): its
 * deletion by anybody but this backend is a lost lock.  Freed when its last
 * reference goes: the backend's (bridge_unwatch_held), and the client's
 * (an armed watch or a request in flight); every one left when its handle
 * closes, after zookeeper_close, when no callback can come any more.
 */
struct HeldWatch
{
	zhandle_t  *zh;
	uint64_t	epoch;			/* of zh */
	char	   *path;
	int			refs;			/* under bridge_mutex, like the flags */
	bool		released;		/* the backend deletes it itself, or forgot it */
	bool		deleted;		/* by somebody else */
	HeldWatch  *prev;
	HeldWatch  *next;
};

/* A fire-and-forget cleanup running on the client threads. */
typedef struct JanitorTask
{
	zhandle_t  *zh;
	uint64_t	epoch;			/* of zh */
	char	   *path;			/* node to delete, or parent to search */
	char	   *tag;			/* when searching: the attempt tag */
	bool		counted;		/* in deletes_in_flight */
	int			watch_type;		/* when removing a watch */
} JanitorTask;

static void janitor_delete(zhandle_t *zh, uint64_t epoch, const char *path);
static void janitor_delete_tagged(zhandle_t *zh, uint64_t epoch,
								  const char *parent, const char *tag);

/*
 * Milliseconds on a clock that keeps running while the machine is suspended
 * (CLOCK_BOOTTIME; CLOCK_MONOTONIC stops then): ZooKeeper's servers go on
 * counting a session's silence during a VM's suspension, and so must we.
 */
int64_t
bridge_now_ms(void)
{
	struct timespec ts;

#ifdef CLOCK_BOOTTIME
	clock_gettime(CLOCK_BOOTTIME, &ts);
#else
	clock_gettime(CLOCK_MONOTONIC, &ts);
#endif
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Counts since the backend last took them; any thread adds, with atomics
 * rather than the mutex, since janitor requests are issued under it too.
 */
static uint64_t counts[BRIDGE_NCOUNTERS];

static void
count(BridgeCounter c)
{
	__atomic_fetch_add(&counts[c], 1, __ATOMIC_RELAXED);
}

/* Backend: move the counts into counts_out[], zeroing them. */
void
bridge_take_counts(uint64_t *counts_out)
{
	for (int i = 0; i < BRIDGE_NCOUNTERS; i++)
		counts_out[i] = __atomic_exchange_n(&counts[i], 0, __ATOMIC_RELAXED);
}

/* Any thread: make the backend's wait return. */
static void
wake_backend(void)
{
	char		one = 1;
	ssize_t		rc;

	do
		rc = write(wake_write_fd, &one, 1);
	while (rc < 0 && errno == EINTR);
	/* EAGAIN means the pipe is full: the backend is awake anyway. */
}

/* Any thread: queue a line for the backend to report.  Takes no lock. */
static void
queue_message(int elevel, const char *text)
{
	size_t		len = strlen(text);
	BridgeMessage *m = malloc(offsetof(BridgeMessage, text) + len + 1);

	if (m != NULL)
	{
		m->seq = __atomic_fetch_add(&message_seq, 1, __ATOMIC_RELAXED);
		m->elevel = elevel;
		memcpy(m->text, text, len + 1);
		for (int i = 0; i < BRIDGE_MAX_MESSAGES; i++)
		{
			BridgeMessage *expected = NULL;

			HAPPENS_BEFORE(&message_slots[i]);
			if (__atomic_compare_exchange_n(&message_slots[i], &expected, m,
											false, __ATOMIC_RELEASE,
											__ATOMIC_RELAXED))
				return;
		}
		free(m);
	}
	__atomic_fetch_add(&dropped_messages, 1, __ATOMIC_RELAXED);
}

/*
 * Client threads: the client's log lines.  Called with the client's locks
 * held (see bridge_mutex), so it must never wait for anything.
 */
void
bridge_log_callback(const char *message)
{
	/*
	 * "failed while receiving a server response": EOF, right after the
	 * handshake was sent when no session was accepted yet; "refused" with
	 * EPIPE or ECONNRESET: closed before it could be (ECONNREFUSED is nobody
	 * listening).  Counted always, but read only while waiting for a first
	 * session (wait_connected), when an EOF can only be the first kind.
	 */
	if (strstr(message, "failed while receiving a server response") != NULL ||
		(strstr(message, "server refused to accept the client") != NULL &&
		 (strstr(message, "errno=32(") != NULL ||
		  strstr(message, "errno=104(") != NULL)))
		__atomic_fetch_add(&closed_by_server, 1, __ATOMIC_RELAXED);
	queue_message(LOG, message);
}

/* Backend: connections closed by a server since the handle was opened. */
uint64_t
bridge_closed_by_server(void)
{
	return __atomic_load_n(&closed_by_server, __ATOMIC_RELAXED);
}

static int
by_seq(const void *a, const void *b)
{
	uint64_t	x = (*(BridgeMessage *const *) a)->seq;
	uint64_t	y = (*(BridgeMessage *const *) b)->seq;

	return (x > y) - (x < y);
}

/* Backend: report what client threads queued. */
void
bridge_emit_messages(void)
{
	BridgeMessage *local[BRIDGE_MAX_MESSAGES];
	int			n = 0;
	uint64_t	dropped;

	for (int i = 0; i < BRIDGE_MAX_MESSAGES; i++)
	{
		BridgeMessage *m = __atomic_exchange_n(&message_slots[i], NULL,
											   __ATOMIC_ACQUIRE);

		if (m != NULL)
		{
			HAPPENS_AFTER(&message_slots[i]);
			local[n++] = m;
		}
	}
	dropped = __atomic_exchange_n(&dropped_messages, 0, __ATOMIC_RELAXED);
	qsort(local, n, sizeof(BridgeMessage *), by_seq);

	for (int i = 0; i < n; i++)
	{
		char	   *text = pstrdup(local[i]->text);
		int			elevel = local[i]->elevel;
		size_t		len = strlen(text);

		free(local[i]);
		while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r'))
			text[--len] = '\0';
		ereport(elevel,
				(errmsg_internal("zklock: %s", text)));
	}
	if (dropped > 0)
		ereport(LOG,
				(errmsg_internal("zklock: %llu ZooKeeper client messages were dropped",
								 (unsigned long long) dropped)));
}

static void
set_nonblock_cloexec(int fd)
{
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0 ||
		fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("zklock: could not set up the wake-up pipe: %m")));
}

void
bridge_init(void)
{
	MemoryContext old;
	int			fds[2];

	if (wait_set != NULL)
		return;

	ATOMIC_ONLY(counts, sizeof(counts));
	ATOMIC_ONLY(message_slots, sizeof(message_slots));
	ATOMIC_ONLY(&message_seq, sizeof(message_seq));
	ATOMIC_ONLY(&dropped_messages, sizeof(dropped_messages));
	ATOMIC_ONLY(&closed_by_server, sizeof(closed_by_server));

	if (pipe(fds) < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("zklock: could not create the wake-up pipe: %m")));
	set_nonblock_cloexec(fds[0]);
	set_nonblock_cloexec(fds[1]);
	wake_read_fd = fds[0];
	wake_write_fd = fds[1];

	old = MemoryContextSwitchTo(TopMemoryContext);
#if PG_VERSION_NUM >= 170000
	wait_set = CreateWaitEventSet(NULL, 3);
#else
	wait_set = CreateWaitEventSet(TopMemoryContext, 3);
#endif
	AddWaitEventToSet(wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(wait_set, WL_SOCKET_READABLE, wake_read_fd, NULL, NULL);
	AddWaitEventToSet(wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	MemoryContextSwitchTo(old);
}

/*
 * Backend: sleep until a client thread reports something, the latch is set,
 * or timeout_ms (-1: no limit) passes; then serve interrupts, so cancel,
 * statement_timeout, lock_timeout and termination all end a wait here.
 * Callers re-check their condition in a loop; the pipe is drained only
 * after waking, so an event that lands between a check and the next wait
 * makes that wait return at once.
 */
void
bridge_wait(long timeout_ms)
{
	bridge_wait_quietly(timeout_ms);
	CHECK_FOR_INTERRUPTS();
	bridge_emit_messages();
}

/*
 * The same, for transaction callbacks: serves no interrupts (they are held
 * there anyway) and reports nothing.
 */
void
bridge_wait_quietly(long timeout_ms)
{
	WaitEvent	event;
	char		buf[64];

	if (WaitEventSetWait(wait_set, timeout_ms, &event, 1, ZKLOCK_WAIT_EVENT()) > 0 &&
		(event.events & WL_LATCH_SET))
		ResetLatch(MyLatch);

	while (read(wake_read_fd, buf, sizeof(buf)) > 0)
		;
}

/* ---- opening a handle ---- */

/*
 * An open in progress, malloc'ed: the opening thread owns it once the
 * backend has abandoned it.
 */
struct BridgeOpen
{
	char	   *hosts;
	int			timeout_ms;
	uint64_t	epoch;
	bool		done;			/* under bridge_mutex, like abandoned */
	bool		abandoned;
	zhandle_t  *zh;
	int			error;			/* errno when zh is NULL */
};

static void
open_destroy(BridgeOpen *op)
{
	free(op->hosts);
	free(op);
}

/*
 * The opening thread.  zookeeper_init resolves the hosts (as slowly as the
 * name server answers) and starts the client's threads, which inherit this
 * thread's mask: every signal blocked, so that they all reach the backend.
 */
static void *
open_thread(void *arg)
{
	BridgeOpen *op = (BridgeOpen *) arg;
	zhandle_t  *zh;
	int			error;
	bool		abandoned;

	errno = 0;
	zh = zookeeper_init2(op->hosts, bridge_session_watcher, op->timeout_ms,
						 NULL, (void *) (uintptr_t) op->epoch, 0,
						 bridge_log_callback);
	error = errno;

	/*
	 * Resolve again only when reconnecting, not on every pass of the IO
	 * thread: with an unresolvable or slow name that would be a failed
	 * look-up (and a log line) per request.
	 */
	if (zh != NULL)
		zoo_set_servers_resolution_delay(zh, -1);

	pthread_mutex_lock(&bridge_mutex);
	abandoned = op->abandoned;
	op->zh = zh;
	op->error = error;
	op->done = true;
	pthread_mutex_unlock(&bridge_mutex);

	if (!abandoned)
		wake_backend();
	else
	{
		if (zh != NULL)
			zookeeper_close(zh);
		open_destroy(op);
	}
	return NULL;
}

/*
 * Backend: start opening a handle for hosts; its session events count from
 * now on, those of any earlier handle no longer do.
 */
/*
 * Start a detached thread with every signal blocked (it, and the client's
 * threads it may start, inherit the mask: signals keep going to the
 * backend's own thread).  Returns pthread_create's result.
 */
static int
start_thread(void *(*fn) (void *), void *arg)
{
	pthread_t	thread;
	pthread_attr_t attr;
	sigset_t	all;
	sigset_t	saved;
	int			rc;

	sigfillset(&all);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_sigmask(SIG_SETMASK, &all, &saved);
	rc = pthread_create(&thread, &attr, fn, arg);
	pthread_sigmask(SIG_SETMASK, &saved, NULL);
	pthread_attr_destroy(&attr);
	return rc;
}

BridgeOpen *
bridge_open_start(const char *hosts, int timeout_ms)
{
	BridgeOpen *op = calloc(1, sizeof(BridgeOpen));
	int			rc;

	if (op == NULL || (op->hosts = strdup(hosts)) == NULL)
	{
		free(op);
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	}
	op->timeout_ms = timeout_ms;

	__atomic_store_n(&closed_by_server, 0, __ATOMIC_RELAXED);
	pthread_mutex_lock(&bridge_mutex);
	op->epoch = handle_epoch = ++last_epoch;
	memset(&session_state, 0, sizeof(session_state));
	session_state.changed_at_ms = bridge_now_ms();
	deletes_in_flight = 0;
	pthread_mutex_unlock(&bridge_mutex);

	rc = start_thread(open_thread, op);
	if (rc != 0)
	{
		open_destroy(op);
		bridge_handle_closing();
		errno = rc;
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("zklock: could not start a thread to open the ZooKeeper session: %m")));
	}
	return op;
}

/*
 * Backend: the opened handle, once the opening thread is done; NULL with
 * *error set if zookeeper_init failed.  false while still opening.
 */
bool
bridge_open_finished(BridgeOpen *op, zhandle_t **zh, int *error)
{
	bool		done;

	pthread_mutex_lock(&bridge_mutex);
	done = op->done;
	pthread_mutex_unlock(&bridge_mutex);
	if (!done)
		return false;
	*zh = op->zh;
	*error = op->error;
	open_destroy(op);
	return true;
}

/* Backend: give up on an open; the opening thread closes what it opens. */
void
bridge_open_abandon(BridgeOpen *op)
{
	bool		done;

	pthread_mutex_lock(&bridge_mutex);
	done = op->done;
	op->abandoned = true;
	if (handle_epoch == op->epoch)
		handle_epoch = 0;
	pthread_mutex_unlock(&bridge_mutex);

	if (done)
	{
		if (op->zh != NULL)
			zookeeper_close(op->zh);
		open_destroy(op);
	}
}

/*
 * Backend, before closing the open handle: from now on nothing of it counts.
 * The client may or may not still call back what it had queued.
 */
void
bridge_handle_closing(void)
{
	pthread_mutex_lock(&bridge_mutex);
	handle_epoch = 0;
	deletes_in_flight = 0;
	last_contact = 0;
	memset(&session_state, 0, sizeof(session_state));
	session_state.changed_at_ms = bridge_now_ms();
	pthread_mutex_unlock(&bridge_mutex);
}

/* The epoch of the open handle, to tag work issued on it. */
static uint64_t
current_epoch(void)
{
	uint64_t	epoch;

	pthread_mutex_lock(&bridge_mutex);
	epoch = handle_epoch;
	pthread_mutex_unlock(&bridge_mutex);
	return epoch;
}

/* ---- requests ---- */

/* What each kind of request counts as in zk_session_stats. */
static const BridgeCounter counter_of[] = {
	[ZKREQ_CREATE] = BRIDGE_CREATES,
	[ZKREQ_CHILDREN] = BRIDGE_CHILDREN_LISTS,
	[ZKREQ_WATCH] = BRIDGE_WATCHES,
	[ZKREQ_GET] = BRIDGE_GETS,
	[ZKREQ_SYNC] = BRIDGE_SYNCS,
	[ZKREQ_EXISTS] = BRIDGE_GETS,
	[ZKREQ_SET] = BRIDGE_SETS,
	[ZKREQ_POKE_WATCH] = BRIDGE_WATCHES,
};

/* Backend: a new request of kind, counted as sent. */
static ZkRequest *
request_new(ZkRequestKind kind, zhandle_t *zh, const char *path, const char *tag)
{
	ZkRequest  *req = calloc(1, sizeof(ZkRequest));

	if (req != NULL)
	{
		req->path = strdup(path);
		req->tag = tag ? strdup(tag) : NULL;
		if (req->path == NULL || (tag && req->tag == NULL))
		{
			free(req->path);
			free(req->tag);
			free(req);
			req = NULL;
		}
	}
	if (req == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	req->kind = kind;
	req->zh = zh;
	req->epoch = current_epoch();
	req->sent_at = bridge_now_ms();
	count(counter_of[kind]);
	return req;
}

static void
request_destroy(ZkRequest *req)
{
	free(req->path);
	free(req->tag);
	free(req->created);
	free(req->children);
	free(req->data);
	free(req);
}

/* Any thread: what a request that nobody waits for any more leaves to do. */
static void
finish_abandoned(ZkRequest *req)
{
	switch (req->kind)
	{
		case ZKREQ_CREATE:
			/* Only a tagged create made a node that is ours alone. */
			if (req->tag == NULL)
				break;
			if (req->rc == ZOK)
				janitor_delete(req->zh, req->epoch, req->created);
			else if (bridge_reply_lost(req->rc))
			{
				/* The create may have happened: find it by its tag. */
				char	   *slash = strrchr(req->path, '/');

				*slash = '\0';
				janitor_delete_tagged(req->zh, req->epoch, req->path, req->tag);
			}
			/* The delete, if any, counts itself now: see bridge_abandon. */
			if (req->counted)
			{
				pthread_mutex_lock(&bridge_mutex);
				if (req->epoch == handle_epoch)
					deletes_in_flight--;
				pthread_mutex_unlock(&bridge_mutex);
				wake_backend();
			}
			break;
		case ZKREQ_WATCH:
			if (req->rc == ZOK)
				bridge_remove_watch(req->zh, req->path, req->watch_type);
			break;
		case ZKREQ_CHILDREN:
		case ZKREQ_GET:
		case ZKREQ_SYNC:
		case ZKREQ_EXISTS:
		case ZKREQ_SET:
		case ZKREQ_POKE_WATCH:	/* consumed when the wait is withdrawn */
			break;
	}
	request_destroy(req);
}

/*
 * A reply the server itself gave, which proves that it still held the
 * session when it processed the request.
 */
static bool
server_answered(int rc)
{
	return rc == ZOK || rc == ZNONODE || rc == ZNODEEXISTS ||
		rc == ZBADVERSION || rc == ZNOTEMPTY || rc == ZNOAUTH ||
		rc == ZNOCHILDRENFOREPHEMERALS;
}

/* Under bridge_mutex: a reply to a request sent at sent_at came. */
static void
heard_from_server(uint64_t epoch, int64_t sent_at, int rc)
{
	if (epoch == handle_epoch && server_answered(rc) && sent_at > last_contact)
		last_contact = sent_at;
}

/* Client thread: publish a reply, or finish the request if abandoned. */
static void
complete(ZkRequest *req, int rc)
{
	bool		abandoned;

	req->rc = rc;
	pthread_mutex_lock(&bridge_mutex);
	heard_from_server(req->epoch, req->sent_at, rc);
	abandoned = req->abandoned;
	req->done = true;
	pthread_mutex_unlock(&bridge_mutex);

	if (abandoned)
		finish_abandoned(req);
	else
		wake_backend();
}

static void
create_completion(int rc, const char *value, const struct Stat *stat,
				  const void *data)
{
	ZkRequest  *req = (ZkRequest *) data;

	if (rc == ZOK)
	{
		req->created = strdup(value);
		req->czxid = stat->czxid;
		if (req->created == NULL)
		{
			/* We cannot hand the node over; do not leave it behind either. */
			janitor_delete(req->zh, req->epoch, value);
			rc = ZSYSTEMERROR;
		}
	}
	complete(req, rc);
}

static void
children_completion(int rc, const struct String_vector *strings, const void *data)
{
	ZkRequest  *req = (ZkRequest *) data;

	if (rc == ZOK)
	{
		size_t		size = 0;
		char	   *p;

		for (int i = 0; i < strings->count; i++)
			size += sizeof(char *) + strlen(strings->data[i]) + 1;
		req->children = malloc(size > 0 ? size : 1);
		if (req->children == NULL)
			rc = ZSYSTEMERROR;
		else
		{
			p = (char *) (req->children + strings->count);
			for (int i = 0; i < strings->count; i++)
			{
				size_t		len = strlen(strings->data[i]) + 1;

				req->children[i] = p;
				memcpy(p, strings->data[i], len);
				p += len;
			}
			req->nchildren = strings->count;
		}
	}
	complete(req, rc);
}

static void
watch_completion(int rc, const char *value, int value_len,
				 const struct Stat *stat, const void *data)
{
	complete((ZkRequest *) data, rc);
}

static void
watch_children_completion(int rc, const struct String_vector *strings,
						  const void *data)
{
	complete((ZkRequest *) data, rc);
}

static void
get_completion(int rc, const char *value, int value_len,
			   const struct Stat *stat, const void *data)
{
	ZkRequest  *req = (ZkRequest *) data;

	if (rc == ZOK)
	{
		int			len = value != NULL && value_len > 0 ? value_len : 0;

		req->czxid = stat->czxid;
		req->version = stat->version;
		req->data = malloc(len + 1);
		if (req->data == NULL)
			rc = ZSYSTEMERROR;
		else
		{
			memcpy(req->data, value, len);
			req->data[len] = '\0';
			req->data_len = len;
		}
	}
	complete(req, rc);
}

static void
sync_completion(int rc, const char *value, const void *data)
{
	complete((ZkRequest *) data, rc);
}

/*
 * Client thread: the watch a waiter set (on its predecessor, or on a
 * semaphore's leases) fired.  Session events reach
 * every watcher too; those are the session watcher's business.
 */
static void
waiter_watcher(zhandle_t *zh, int type, int state, const char *path,
					void *ctx)
{
	if (type == ZOO_SESSION_EVENT)
		return;
	pthread_mutex_lock(&bridge_mutex);
	watch_events++;
	pthread_mutex_unlock(&bridge_mutex);
	wake_backend();
}

/*
 * Client thread: another backend asks ours, by rewriting the wait it
 * published, to look for a deadlock again (see deadlock.c).  The entry's
 * deletion by its owner is no such request.
 */
static void
poke_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	if (type != ZOO_CHANGED_EVENT)
		return;
	pthread_mutex_lock(&bridge_mutex);
	if ((uint64_t) (uintptr_t) ctx == handle_epoch)
		poked = true;
	pthread_mutex_unlock(&bridge_mutex);
	wake_backend();
}

/* Backend: whether a poke came since the last call. */
bool
bridge_take_poke(void)
{
	bool		was;

	pthread_mutex_lock(&bridge_mutex);
	was = poked;
	poked = false;
	pthread_mutex_unlock(&bridge_mutex);
	return was;
}

static void
stat_completion(int rc, const struct Stat *stat, const void *data)
{
	ZkRequest  *req = (ZkRequest *) data;

	if (rc == ZOK && stat != NULL)
	{
		req->czxid = stat->czxid;
		req->version = stat->version;
	}
	complete(req, rc);
}

/* Backend: a request that failed to be queued completes at once. */
static ZkRequest *
issued(ZkRequest *req, int rc)
{
	if (rc != ZOK)
	{
		req->rc = rc;
		req->done = true;
	}
	return req;
}

ZkRequest *
bridge_create(zhandle_t *zh, const char *path, const char *data, int datalen,
			  const struct ACL_vector *acl, int mode, const char *tag)
{
	ZkRequest  *req = request_new(ZKREQ_CREATE, zh, path, tag);

	return issued(req, zoo_acreate2(zh, path, data, datalen, acl, mode,
									create_completion, req));
}

ZkRequest *
bridge_get_children(zhandle_t *zh, const char *path)
{
	ZkRequest  *req = request_new(ZKREQ_CHILDREN, zh, path, NULL);

	return issued(req, zoo_aget_children(zh, path, 0, children_completion, req));
}

/*
 * A get-data watch on a node (unlike an exists watch it is not left armed if
 * the node is gone), or a children watch on a parent.
 */
ZkRequest *
bridge_watch(zhandle_t *zh, const char *path, int watch_type)
{
	ZkRequest  *req = request_new(ZKREQ_WATCH, zh, path, NULL);

	req->watch_type = watch_type;
	if (watch_type == ZWATCHTYPE_CHILD)
		return issued(req, zoo_awget_children(zh, path, waiter_watcher, NULL,
											  watch_children_completion, req));
	return issued(req, zoo_awget(zh, path, waiter_watcher, NULL,
								 watch_completion, req));
}

ZkRequest *
bridge_get(zhandle_t *zh, const char *path)
{
	ZkRequest  *req = request_new(ZKREQ_GET, zh, path, NULL);

	return issued(req, zoo_aget(zh, path, 0, get_completion, req));
}

ZkRequest *
bridge_sync(zhandle_t *zh, const char *path)
{
	ZkRequest  *req = request_new(ZKREQ_SYNC, zh, path, NULL);

	return issued(req, zoo_async(zh, path, sync_completion, req));
}

ZkRequest *
bridge_exists(zhandle_t *zh, const char *path)
{
	ZkRequest  *req = request_new(ZKREQ_EXISTS, zh, path, NULL);

	return issued(req, zoo_aexists(zh, path, 0, stat_completion, req));
}

/* Set a node's data if its version is still version (-1: any). */
ZkRequest *
bridge_set(zhandle_t *zh, const char *path, const char *data, int datalen,
		   int version)
{
	ZkRequest  *req = request_new(ZKREQ_SET, zh, path, NULL);

	return issued(req, zoo_aset(zh, path, data, datalen, version,
								stat_completion, req));
}

/* A data watch on the wait this backend published, for pokes. */
ZkRequest *
bridge_watch_pokes(zhandle_t *zh, const char *path)
{
	ZkRequest  *req = request_new(ZKREQ_POKE_WATCH, zh, path, NULL);

	pthread_mutex_lock(&bridge_mutex);
	poked = false;
	pthread_mutex_unlock(&bridge_mutex);
	return issued(req, zoo_awget(zh, path, poke_watcher,
								 (void *) (uintptr_t) req->epoch,
								 watch_completion, req));
}

bool
bridge_done(ZkRequest *req)
{
	bool		done;

	pthread_mutex_lock(&bridge_mutex);
	done = req->done;
	pthread_mutex_unlock(&bridge_mutex);
	return done;
}

/* Backend: the results of a finished request have been used. */
void
bridge_free(ZkRequest *req)
{
	Assert(bridge_done(req));
	request_destroy(req);
}

/* Backend: nobody will read this request's results; undo what it did. */
void
bridge_abandon(ZkRequest *req)
{
	bool		done;

	pthread_mutex_lock(&bridge_mutex);
	done = req->done;
	if (!done)
		req->abandoned = true;

	/*
	 * A create of ours still on its way will be undone when its reply comes:
	 * count it as a delete pending already, so that a release, COMMIT or
	 * ROLLBACK that waits for the deletes waits for it too (a cancelled
	 * waiter's node must not outlive its ROLLBACK).
	 */
	if (!done && req->kind == ZKREQ_CREATE && req->tag != NULL &&
		req->epoch == handle_epoch)
	{
		req->counted = true;
		deletes_in_flight++;
	}
	pthread_mutex_unlock(&bridge_mutex);

	if (done)
		finish_abandoned(req);
}

bool
bridge_deletes_pending(void)
{
	bool		pending;

	pthread_mutex_lock(&bridge_mutex);
	pending = deletes_in_flight > 0;
	pthread_mutex_unlock(&bridge_mutex);
	return pending;
}

uint64_t
bridge_watch_events(void)
{
	uint64_t	n;

	pthread_mutex_lock(&bridge_mutex);
	n = watch_events;
	pthread_mutex_unlock(&bridge_mutex);
	return n;
}

/*
 * The session was heard from, through a reply to a request sent at the time
 * returned (bridge_now_ms; 0: not since the handle was opened).  The server
 * held the session at some moment after that time, so it cannot expire it
 * before that time plus the session timeout.  Pings and session events do
 * not count: the client does not tell when their request was sent, and a
 * reply read long after it came (by a process that was stopped meanwhile)
 * proves nothing about the present.
 */
int64_t
bridge_last_contact(void)
{
	int64_t		t;

	pthread_mutex_lock(&bridge_mutex);
	t = last_contact;
	pthread_mutex_unlock(&bridge_mutex);
	return t;
}

/* ---- watches on the nodes the backend created ---- */

static void held_watch_issue(HeldWatch *hw);

/* Under bridge_mutex: drop a reference, freeing the watch with the last. */
static void
held_watch_unref(HeldWatch *hw)
{
	if (--hw->refs > 0)
		return;
	if (hw->prev)
		hw->prev->next = hw->next;
	else
		held_watches = hw->next;
	if (hw->next)
		hw->next->prev = hw->prev;
	free(hw->path);
	free(hw);
}

/* Under bridge_mutex: the node is gone; a loss unless we deleted it. */
static void
held_watch_gone(HeldWatch *hw)
{
	if (!hw->released && !hw->deleted && hw->epoch == handle_epoch)
	{
		hw->deleted = true;
		held_deletions++;
		/* A waiter whose own node went must look at its queue again. */
		watch_events++;
	}
}

/* Client thread: the node was deleted, or its data changed. */
static void
held_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	HeldWatch  *hw = (HeldWatch *) ctx;
	bool		again = false;

	if (type == ZOO_SESSION_EVENT)
		return;
	pthread_mutex_lock(&bridge_mutex);
	if (type == ZOO_DELETED_EVENT)
		held_watch_gone(hw);
	/* Data rewritten by another client: the node is still there. */
	again = type == ZOO_CHANGED_EVENT && !hw->released &&
		hw->epoch == handle_epoch;
	if (!again)
		held_watch_unref(hw);
	pthread_mutex_unlock(&bridge_mutex);
	if (again)
		held_watch_issue(hw);
	else
		wake_backend();
}

static void
held_watch_done(int rc, const char *value, int value_len,
				const struct Stat *stat, const void *data)
{
	HeldWatch  *hw = (HeldWatch *) data;
	bool		again;

	pthread_mutex_lock(&bridge_mutex);
	/* The watch is armed (ZOK) and keeps the reference, or set again. */
	again = bridge_reply_lost(rc) && !hw->released && hw->epoch == handle_epoch;
	if (rc == ZNONODE)
		held_watch_gone(hw);
	if (rc != ZOK && !again)
		held_watch_unref(hw);
	pthread_mutex_unlock(&bridge_mutex);
	if (again)
		held_watch_issue(hw);
	else if (rc == ZNONODE)
		wake_backend();
}

/* Any thread: (re)arm the watch; the reference it holds carries over. */
static void
held_watch_issue(HeldWatch *hw)
{
	count(BRIDGE_WATCHES);
	if (zoo_awget(hw->zh, hw->path, held_watcher, hw, held_watch_done, hw) != ZOK)
	{
		/* The handle is closing: it is freed with it. */
		pthread_mutex_lock(&bridge_mutex);
		held_watch_unref(hw);
		pthread_mutex_unlock(&bridge_mutex);
	}
}

/*
 * Backend: watch a node it just created, without waiting for the reply, so
 * that the watch goes out behind the requests already sent and costs no
 * round trip.  NULL if out of memory: the node is then not watched.
 */
HeldWatch *
bridge_watch_held(zhandle_t *zh, const char *path)
{
	HeldWatch  *hw = calloc(1, sizeof(HeldWatch));

	if (hw == NULL || (hw->path = strdup(path)) == NULL)
	{
		free(hw);
		return NULL;
	}
	hw->zh = zh;
	hw->epoch = current_epoch();
	hw->refs = 2;				/* the backend's, and the request's */
	pthread_mutex_lock(&bridge_mutex);
	hw->next = held_watches;
	if (held_watches)
		held_watches->prev = hw;
	held_watches = hw;
	pthread_mutex_unlock(&bridge_mutex);
	held_watch_issue(hw);
	return hw;
}

/*
 * Backend: it deletes the node itself now, or forgets it: nothing that
 * happens to the node is a loss any more.  Only for a watch of the open
 * handle (a closed one's are freed with it).
 */
void
bridge_unwatch_held(HeldWatch *hw)
{
	if (hw == NULL)
		return;
	pthread_mutex_lock(&bridge_mutex);
	hw->released = true;
	held_watch_unref(hw);
	pthread_mutex_unlock(&bridge_mutex);
}

/* Backend: was the node deleted by somebody else? */
bool
bridge_held_deleted(HeldWatch *hw)
{
	bool		deleted;

	if (hw == NULL)
		return false;
	pthread_mutex_lock(&bridge_mutex);
	deleted = hw->deleted;
	pthread_mutex_unlock(&bridge_mutex);
	return deleted;
}

/* Backend: a read found the node gone before its watch said so. */
void
bridge_held_mark_deleted(HeldWatch *hw)
{
	if (hw == NULL)
		return;
	pthread_mutex_lock(&bridge_mutex);
	held_watch_gone(hw);
	pthread_mutex_unlock(&bridge_mutex);
}

/* Backend: how many held nodes were deleted by others so far. */
uint64_t
bridge_held_deletions(void)
{
	uint64_t	n;

	pthread_mutex_lock(&bridge_mutex);
	n = held_deletions;
	pthread_mutex_unlock(&bridge_mutex);
	return n;
}

/*
 * Under bridge_mutex, after zookeeper_close of the handle of epoch: no
 * callback of it can come any more, so the watches it kept go, whatever
 * their references.
 */
static void
free_watches_of(uint64_t epoch)
{
	for (HeldWatch *hw = held_watches, *next; hw != NULL; hw = next)
	{
		next = hw->next;
		if (hw->epoch == epoch)
		{
			hw->refs = 1;
			held_watch_unref(hw);
		}
	}
}

/* A handle being closed on a thread of its own. */
typedef struct BridgeClose
{
	zhandle_t  *zh;
	uint64_t	epoch;
} BridgeClose;

static int	closes_running;		/* under bridge_mutex */

static void *
close_thread(void *arg)
{
	BridgeClose *c = (BridgeClose *) arg;

	zookeeper_close(c->zh);
	pthread_mutex_lock(&bridge_mutex);
	free_watches_of(c->epoch);
	closes_running--;
	pthread_mutex_unlock(&bridge_mutex);
	free(c);
	wake_backend();
	return NULL;
}

/*
 * Backend: close the open handle, which ends its session at once if a
 * server can still hear it.  zookeeper_close sends the close request and
 * waits for it to be answered, up to 3 s when the server does not answer,
 * and nothing interrupts it: so it runs on a thread of its own, and the
 * backend goes on at once (a new session may open meanwhile).  Only at exit
 * does the backend wait for it (bridge_await_closes).
 */
void
bridge_close(zhandle_t *zh)
{
	BridgeClose *c = malloc(sizeof(BridgeClose));
	uint64_t	epoch = current_epoch();

	bridge_handle_closing();
	if (c != NULL)
	{
		c->zh = zh;
		c->epoch = epoch;
		pthread_mutex_lock(&bridge_mutex);
		closes_running++;
		pthread_mutex_unlock(&bridge_mutex);
		if (start_thread(close_thread, c) == 0)
			return;
		pthread_mutex_lock(&bridge_mutex);
		closes_running--;
		pthread_mutex_unlock(&bridge_mutex);
		free(c);
	}
	/* No thread to be had: close here, then. */
	zookeeper_close(zh);
	pthread_mutex_lock(&bridge_mutex);
	free_watches_of(epoch);
	pthread_mutex_unlock(&bridge_mutex);
}

/*
 * Backend, at exit: wait up to timeout_ms, without serving interrupts, for
 * the closes under way, so that the servers end those sessions (and delete
 * their nodes) at once rather than after their timeout.
 */
void
bridge_await_closes(int timeout_ms)
{
	int64_t		deadline = bridge_now_ms() + timeout_ms;

	for (;;)
	{
		int			running;
		int64_t		left = deadline - bridge_now_ms();

		pthread_mutex_lock(&bridge_mutex);
		running = closes_running;
		pthread_mutex_unlock(&bridge_mutex);
		if (running == 0 || left <= 0 || wait_set == NULL)
			return;
		bridge_wait_quietly(left);
	}
}

/* ---- janitor: cleanups that outlive the backend's interest ---- */

static JanitorTask *
janitor_task(zhandle_t *zh, uint64_t epoch, const char *path, const char *tag,
			 bool counted)
{
	JanitorTask *task = calloc(1, sizeof(JanitorTask));

	if (task == NULL || (task->path = strdup(path)) == NULL ||
		(tag != NULL && (task->tag = strdup(tag)) == NULL))
	{
		if (task)
			free(task->path);
		free(task);
		queue_message(WARNING, "out of memory while scheduling a znode cleanup; the node goes with the session");
		return NULL;
	}
	task->zh = zh;
	task->epoch = epoch;
	if (counted)
	{
		pthread_mutex_lock(&bridge_mutex);
		task->counted = epoch == handle_epoch;
		if (task->counted)
			deletes_in_flight++;
		pthread_mutex_unlock(&bridge_mutex);
	}
	return task;
}

static void
janitor_free(JanitorTask *task)
{
	if (task->counted)
	{
		pthread_mutex_lock(&bridge_mutex);
		/* Not if its handle was closed meanwhile: the count was reset. */
		if (task->epoch == handle_epoch)
			deletes_in_flight--;
		pthread_mutex_unlock(&bridge_mutex);
		wake_backend();
	}
	free(task->path);
	free(task->tag);
	free(task);
}

/* A reply after which there is nothing left to clean up or to report. */
static bool
nothing_left(int rc)
{
	return rc == ZOK || rc == ZNONODE || rc == ZSESSIONEXPIRED ||
		rc == ZCLOSING || rc == ZINVALIDSTATE;
}

static void janitor_delete_issue(JanitorTask *task);
static void janitor_children_issue(JanitorTask *task);

/*
 * A cleanup that failed for good: the node it was to delete (task->path, or
 * this backend's child of it) stays until the session ends.
 */
static void
janitor_report(JanitorTask *task, bool listing, int rc)
{
	char		text[1024];
	bool		closing;

	/*
	 * Its handle is being closed (which fails what is retried on it): the
	 * session ends, and the node with it.
	 */
	pthread_mutex_lock(&bridge_mutex);
	closing = task->epoch != handle_epoch;
	pthread_mutex_unlock(&bridge_mutex);
	if (closing)
		return;

	if (listing)
		snprintf(text, sizeof(text), "could not look for this backend's node under znode \"%s\": %s; the node, if there is one, goes when this backend's ZooKeeper session ends",
				 task->path, zerror(rc));
	else
		snprintf(text, sizeof(text), "could not delete znode \"%s\": %s; it goes when this backend's ZooKeeper session ends",
				 task->path, zerror(rc));
	queue_message(WARNING, text);
}

static void
janitor_delete_done(int rc, const void *data)
{
	JanitorTask *task = (JanitorTask *) data;

	/* Requests made while disconnected wait for the reconnect: no spinning. */
	if (bridge_reply_lost(rc))
		janitor_delete_issue(task);
	else
	{
		if (!nothing_left(rc))
			janitor_report(task, false, rc);
		janitor_free(task);
	}
}

static void
janitor_delete_issue(JanitorTask *task)
{
	int			rc;

	count(BRIDGE_DELETES);
	rc = zoo_adelete(task->zh, task->path, -1, janitor_delete_done, task);

	if (rc != ZOK)
	{
		if (!nothing_left(rc))
			janitor_report(task, false, rc);
		janitor_free(task);
	}
}

static void
janitor_delete(zhandle_t *zh, uint64_t epoch, const char *path)
{
	JanitorTask *task = janitor_task(zh, epoch, path, NULL, true);

	if (task)
		janitor_delete_issue(task);
}

static void
janitor_children_done(int rc, const struct String_vector *strings, const void *data)
{
	JanitorTask *task = (JanitorTask *) data;

	if (bridge_reply_lost(rc))
	{
		janitor_children_issue(task);
		return;
	}
	if (rc == ZOK)
	{
		for (int i = 0; i < strings->count; i++)
		{
			size_t		size;
			char	   *child;

			if (strstr(strings->data[i], task->tag) == NULL)
				continue;
			size = strlen(task->path) + strlen(strings->data[i]) + 2;
			child = malloc(size);
			if (child == NULL)
			{
				janitor_report(task, true, ZSYSTEMERROR);
				continue;
			}
			snprintf(child, size, "%s/%s", task->path, strings->data[i]);
			janitor_delete(task->zh, task->epoch, child);
			free(child);
		}
	}
	else if (!nothing_left(rc))
		janitor_report(task, true, rc);
	janitor_free(task);
}

static void
janitor_children_issue(JanitorTask *task)
{
	int			rc;

	count(BRIDGE_CHILDREN_LISTS);
	rc = zoo_aget_children(task->zh, task->path, 0,
									   janitor_children_done, task);

	if (rc != ZOK)
	{
		if (!nothing_left(rc))
			janitor_report(task, true, rc);
		janitor_free(task);
	}
}

static void
janitor_delete_tagged(zhandle_t *zh, uint64_t epoch, const char *parent,
					  const char *tag)
{
	JanitorTask *task = janitor_task(zh, epoch, parent, tag, true);

	if (task)
		janitor_children_issue(task);
}

/*
 * Backend: delete a node of the open handle's without waiting; retried
 * across reconnects.  Allocates nothing of PostgreSQL's, so it is safe in
 * transaction callbacks.
 */
void
bridge_delete_node(zhandle_t *zh, const char *path)
{
	janitor_delete(zh, current_epoch(), path);
}

/*
 * Backend: delete whatever child of the node's parent carries tag, if any
 * does (a late twin of a create whose reply was lost).
 */
void
bridge_delete_sibling_tagged(zhandle_t *zh, const char *node, const char *tag)
{
	char	   *parent = strdup(node);

	if (parent == NULL)
	{
		queue_message(WARNING, "out of memory while scheduling a znode cleanup; the node goes with the session");
		return;
	}
	*strrchr(parent, '/') = '\0';
	janitor_delete_tagged(zh, current_epoch(), parent, tag);
	free(parent);
}

/* Backend: delete whatever child of parent carries tag, if any does. */
void
bridge_delete_tagged(zhandle_t *zh, const char *parent, const char *tag)
{
	janitor_delete_tagged(zh, current_epoch(), parent, tag);
}

static void
remove_watch_done(int rc, const void *data)
{
	JanitorTask *task = (JanitorTask *) data;

	/*
	 * The server forgets a connection's watches when it drops; only the
	 * client's copy, which it would re-register on reconnect, is left.
	 */
	if (bridge_reply_lost(rc))
		zoo_remove_all_watches(task->zh, task->path, task->watch_type, 1);
	janitor_free(task);
}

/*
 * Any thread: stop watching a predecessor we no longer wait for.  "All"
 * watches, because only that request (removeWatches) drops the server's
 * watch: the other one (checkWatches) only forgets the client's.  We never
 * set more than one watch of a type on a path.
 */
void
bridge_remove_watch(zhandle_t *zh, const char *path, int watch_type)
{
	JanitorTask *task = janitor_task(zh, 0, path, NULL, false);

	if (task)
		task->watch_type = watch_type;
	count(BRIDGE_WATCH_REMOVALS);
	if (task && zoo_aremove_all_watches(zh, path, watch_type, 0,
										(void_completion_t *) remove_watch_done,
										task) != ZOK)
		janitor_free(task);		/* ZNOWATCHER: it fired already */
}

/* ---- session events ---- */

/*
 * Client threads: the handle's default watcher, for session events.  What
 * it needs from the client is asked before taking bridge_mutex (see there).
 */
void
bridge_session_watcher(zhandle_t *zh, int type, int state, const char *path,
					   void *ctx)
{
	uint64_t	epoch = (uint64_t) (uintptr_t) ctx;
	int64_t		session_id = 0;
	int			timeout_ms = 0;
	char		server[sizeof(session_state.server)] = "";

	if (type != ZOO_SESSION_EVENT)
		return;
	if (state == ZOO_CONNECTED_STATE)
	{
		const clientid_t *id = zoo_client_id(zh);
		const char *current = zoo_get_current_server(zh);

		session_id = id ? id->client_id : 0;
		timeout_ms = zoo_recv_timeout(zh);
		snprintf(server, sizeof(server), "%s", current ? current : "");
	}

	pthread_mutex_lock(&bridge_mutex);
	if (epoch != handle_epoch)
	{
		/* A handle closed or given up on: not ours to report any more. */
		pthread_mutex_unlock(&bridge_mutex);
		return;
	}
	if (state != session_state.zk_state)
		session_state.changed_at_ms = bridge_now_ms();
	session_state.zk_state = state;
	session_state.events++;
	if (state == ZOO_CONNECTED_STATE)
	{
		if (session_state.session_id != 0 &&
			session_state.session_id == session_id)
			count(BRIDGE_RECONNECTS);
		session_state.session_id = session_id;
		session_state.timeout_ms = timeout_ms;
		memcpy(session_state.server, server, sizeof(server));
	}
	pthread_mutex_unlock(&bridge_mutex);
	wake_backend();
}

void
bridge_session_snapshot(ZkSessionSnapshot *out)
{
	pthread_mutex_lock(&bridge_mutex);
	*out = session_state;
	pthread_mutex_unlock(&bridge_mutex);
}
