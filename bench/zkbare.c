/*
 * zkbare.c
 *	  The ZooKeeper lock recipe done by a bare C client, as the yardstick for
 *	  zklock's benchmark (bench/run.sh).
 *
 * The same ZooKeeper C client as zklock's session worker, in its
 * multi-threaded flavour (libzookeeper_mt), with synchronous calls and
 * nothing around them: create an EPHEMERAL_SEQUENTIAL "_c_<uuid>-lock-"
 * child, list the children, watch the next lower child with a get-data watch
 * if there is one, and delete the child to release.  Every round trip is
 * waited for, so an acquisition costs two (create, list) where zklock
 * pipelines them into one.
 *
 *	 zkbare HOSTS mkdir PATH
 *		 create PATH and its ancestors as persistent nodes
 *	 zkbare HOSTS cycle PARENT N
 *		 N uncontended acquire+release cycles after one to warm up; prints
 *		 the seconds the N took
 *	 zkbare HOSTS handoff PARENT CLIENTS SECONDS
 *		 CLIENTS threads, each with its own session, take turns for SECONDS
 *		 once all are connected; prints "start <epoch>" and "end <epoch>",
 *		 then one line per grant: "<token> <acquired> <released>" (seconds
 *		 since the epoch, CLOCK_REALTIME like PostgreSQL's clock_timestamp())
 *	 zkbare HOSTS pin PREFIX N
 *		 make PREFIX1 .. PREFIXN exist, each with a persistent child "pin",
 *		 so that the server does not remove them as empty containers
 *	 zkbare HOSTS queue PARENT
 *		 prints "<child> <ephemeral owner>" for each child of PARENT
 *	 zkbare HOSTS throughput PREFIX THREADS SECONDS
 *		 THREADS threads sharing one session, each cycling on a lock of its
 *		 own (PREFIX1 .. PREFIXn) for SECONDS; prints the cycles per second
 *		 of all of them together
 *	 zkbare HOSTS revoke PARENT N
 *		 Curator's revocation: a holder's session takes the lock and watches
 *		 its own node's data; another session syncs, lists PARENT's children
 *		 and writes __REVOKE__ into the lowest, the holder's, N times after one to
 *		 warm up; prints, one line each, the seconds from the listing's start
 *		 to the holder having read the request (its watch fired and it read
 *		 the data again, as Curator's holder does)
 *
 * For the commit guard's proof (issue 47), whose costs have no recipe of
 * their own to compare with, the same session's plain lock operations at
 * the same moments:
 *
 *	 zkbare HOSTS hold PARENT IDLE_S HOLD_S
 *		 one cycle to warm up, then IDLE_S seconds of silence, then an
 *		 acquire, held until HOLD_S seconds after it started, and its
 *		 release; prints "<acquire ms> <release ms>"
 *	 zkbare HOSTS paced HELD_PARENT ACQ_PARENT SECONDS READ_MS MIN_PAUSE_MS MAX_PAUSE_MS
 *		 one session, two threads, for SECONDS: one holds a lock below
 *		 HELD_PARENT and reads its queue every READ_MS (list the children,
 *		 then read each one's data: what zk_lock_holders asks), the other
 *		 acquires and releases below ACQ_PARENT, pausing a random
 *		 MIN_PAUSE_MS to MAX_PAUSE_MS after each; prints "holders <ms>" and
 *		 "acquire <ms>",
 *		 one line per call
 *	 zkbare HOSTS load PATH THREADS SECONDS
 *		 write load: THREADS threads sharing one session set PATH's data,
 *		 one synchronous set after another, for SECONDS; prints the sets
 *		 per second
 *	 zkbare HOSTS idle SECONDS
 *		 a session that sends nothing of its own for SECONDS (the client
 *		 library pings it); prints its session id (0x...) once connected
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <zookeeper/zookeeper.h>

#define SESSION_TIMEOUT_MS 10000
#define CONNECT_TIMEOUT_S 10
#define PATH_MAX_LEN 1024

/* One ZooKeeper session and what its watchers report to its thread. */
typedef struct Client
{
	zhandle_t  *zh;
	pthread_mutex_t mutex;
	pthread_cond_t cond;
	bool		connected;
	bool		watch_fired;
	uint64_t	rng;
} Client;

typedef struct Grant
{
	int64_t		token;
	struct timespec acquired;
	struct timespec released;
} Grant;

/* A handoff thread: what it needs, and the grants it got. */
typedef struct Worker
{
	pthread_t	thread;
	const char *hosts;
	const char *parent;
	pthread_barrier_t *ready;
	const struct timespec *end;
	Grant	   *grants;
	int			ngrants;
	int			maxgrants;
} Worker;

static void
die(const char *what, int rc)
{
	fprintf(stderr, "zkbare: %s: %s\n", what, zerror(rc));
	exit(1);
}

static double
seconds_of(const struct timespec *ts)
{
	return ts->tv_sec + ts->tv_nsec / 1e9;
}

/* ts, seconds later. */
static void
add_seconds(struct timespec *ts, double seconds)
{
	ts->tv_sec += (time_t) seconds;
	ts->tv_nsec += (long) ((seconds - (time_t) seconds) * 1e9);
	if (ts->tv_nsec >= 1000000000L)
	{
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

static bool
before(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec < b->tv_sec ||
		(a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/*
 * Session events and the predecessor's watch.  Runs on the client's
 * completion thread, so it only flags and signals.
 */
static void
watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	Client	   *c = (Client *) ctx;

	(void) zh;
	(void) path;
	pthread_mutex_lock(&c->mutex);
	if (type == ZOO_SESSION_EVENT)
		c->connected = (state == ZOO_CONNECTED_STATE);
	else
		c->watch_fired = true;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->mutex);
}

static void
client_open(Client *c, const char *hosts)
{
	struct timespec deadline;

	memset(c, 0, sizeof(*c));
	pthread_mutex_init(&c->mutex, NULL);
	pthread_cond_init(&c->cond, NULL);
	if (getrandom(&c->rng, sizeof(c->rng), 0) != sizeof(c->rng))
		c->rng = (uint64_t) (uintptr_t) c ^ (uint64_t) time(NULL);
	c->rng |= 1;

	c->zh = zookeeper_init(hosts, watcher, SESSION_TIMEOUT_MS, NULL, c, 0);
	if (c->zh == NULL)
	{
		fprintf(stderr, "zkbare: zookeeper_init(%s): %s\n", hosts,
				strerror(errno));
		exit(1);
	}
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += CONNECT_TIMEOUT_S;
	pthread_mutex_lock(&c->mutex);
	while (!c->connected)
		if (pthread_cond_timedwait(&c->cond, &c->mutex, &deadline) == ETIMEDOUT)
			die("connecting", ZOPERATIONTIMEOUT);
	pthread_mutex_unlock(&c->mutex);
}

/* Closing the session removes its nodes at once, also after a failure. */
static void
client_close(Client *c)
{
	zookeeper_close(c->zh);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->mutex);
}

/* xorshift64*: the random part of the protected child name. */
static uint64_t
next_random(Client *c)
{
	c->rng ^= c->rng >> 12;
	c->rng ^= c->rng << 25;
	c->rng ^= c->rng >> 27;
	return c->rng * UINT64_C(2685821657736338717);
}

/* The trailing 10-digit sequence number of a lock child, -1 if none. */
static int64_t
sequence_of(const char *name)
{
	size_t		len = strlen(name);
	int64_t		seq = 0;

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
 * Acquire the lock below parent: the recipe, one synchronous call at a time.
 * Leaves our child's path in node; returns its czxid, the fencing token.
 */
static int64_t
acquire(Client *c, const char *parent, char *node)
{
	char		prefix[PATH_MAX_LEN];
	uint64_t	r1 = next_random(c);
	uint64_t	r2 = next_random(c);
	struct Stat stat;
	int64_t		own_seq;
	int			rc;

	snprintf(prefix, sizeof(prefix),
			 "%s/_c_%08x-%04x-%04x-%04x-%012" PRIx64 "-lock-", parent,
			 (unsigned) (r1 >> 32), (unsigned) (r1 >> 16) & 0xFFFF,
			 (unsigned) r1 & 0xFFFF, (unsigned) (r2 >> 48),
			 r2 & UINT64_C(0xFFFFFFFFFFFF));
	rc = zoo_create2(c->zh, prefix, "", 0, &ZOO_OPEN_ACL_UNSAFE,
					 ZOO_EPHEMERAL_SEQUENTIAL, node, PATH_MAX_LEN, &stat);
	if (rc != ZOK)
		die("create", rc);
	own_seq = sequence_of(strrchr(node, '/') + 1);

	for (;;)
	{
		struct String_vector children;
		char		pred[PATH_MAX_LEN] = "";
		int64_t		pred_seq = -1;
		char		data[64];
		int			datalen = sizeof(data);

		rc = zoo_get_children(c->zh, parent, 0, &children);
		if (rc != ZOK)
			die("get children", rc);
		for (int i = 0; i < children.count; i++)
		{
			int64_t		seq = sequence_of(children.data[i]);

			if (seq >= 0 && seq < own_seq && seq > pred_seq)
			{
				pred_seq = seq;
				snprintf(pred, sizeof(pred), "%s/%s", parent,
						 children.data[i]);
			}
		}
		deallocate_String_vector(&children);
		if (pred_seq < 0)
			return stat.czxid;

		/* Watch the predecessor only; ZNONODE means it left meanwhile. */
		pthread_mutex_lock(&c->mutex);
		c->watch_fired = false;
		pthread_mutex_unlock(&c->mutex);
		rc = zoo_wget(c->zh, pred, watcher, c, data, &datalen, NULL);
		if (rc == ZNONODE)
			continue;
		if (rc != ZOK)
			die("watch", rc);
		pthread_mutex_lock(&c->mutex);
		while (!c->watch_fired)
			pthread_cond_wait(&c->cond, &c->mutex);
		pthread_mutex_unlock(&c->mutex);
	}
}

static void
release(Client *c, const char *node)
{
	int			rc = zoo_delete(c->zh, node, -1);

	if (rc != ZOK)
		die("delete", rc);
}

/* Create path and its missing ancestors as persistent nodes. */
static void
make_path(Client *c, const char *path)
{
	char		buf[PATH_MAX_LEN];

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1;; p++)
	{
		if (*p == '/' || *p == '\0')
		{
			char		saved = *p;
			int			rc;

			*p = '\0';
			rc = zoo_create(c->zh, buf, "", 0, &ZOO_OPEN_ACL_UNSAFE,
							ZOO_PERSISTENT, NULL, 0);
			if (rc != ZOK && rc != ZNODEEXISTS)
				die("create", rc);
			*p = saved;
			if (saved == '\0')
				break;
		}
	}
}

/*
 * Open a session, make parent if missing, and run one cycle below it first,
 * as zklock's loops do.
 */
static void
client_open_warm(Client *c, const char *hosts, const char *parent)
{
	char		node[PATH_MAX_LEN];

	client_open(c, hosts);
	make_path(c, parent);
	acquire(c, parent, node);
	release(c, node);
}

static int
cmd_cycle(const char *hosts, const char *parent, int n)
{
	Client		c;
	char		node[PATH_MAX_LEN];
	struct timespec t0;
	struct timespec t1;

	client_open_warm(&c, hosts, parent);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < n; i++)
	{
		acquire(&c, parent, node);
		release(&c, node);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("%.6f\n", seconds_of(&t1) - seconds_of(&t0));
	client_close(&c);
	return 0;
}

/* array of *max elements of size bytes, with room for twice as many. */
static void *
grown(void *array, int *max, size_t size)
{
	*max = *max ? *max * 2 : 1024;
	array = realloc(array, *max * size);
	if (array == NULL)
	{
		fprintf(stderr, "zkbare: out of memory\n");
		exit(1);
	}
	return array;
}

static void
record(Worker *w, int64_t token, const struct timespec *acquired,
	   const struct timespec *released)
{
	if (w->ngrants == w->maxgrants)
		w->grants = grown(w->grants, &w->maxgrants, sizeof(Grant));
	w->grants[w->ngrants].token = token;
	w->grants[w->ngrants].acquired = *acquired;
	w->grants[w->ngrants].released = *released;
	w->ngrants++;
}

/*
 * Connect, wait for the others, then take turns until the end.  Timestamps
 * are taken right after acquire returns and right before the release
 * starts, as bench_handoff() does in PL/pgSQL.
 */
static void *
handoff_worker(void *arg)
{
	Worker	   *w = (Worker *) arg;
	Client		c;
	char		node[PATH_MAX_LEN];
	struct timespec acquired;
	struct timespec released;

	client_open(&c, w->hosts);
	pthread_barrier_wait(w->ready);
	pthread_barrier_wait(w->ready);	/* the main thread set the end */
	do
	{
		int64_t		token = acquire(&c, w->parent, node);

		clock_gettime(CLOCK_REALTIME, &acquired);
		clock_gettime(CLOCK_REALTIME, &released);
		release(&c, node);
		record(w, token, &acquired, &released);
	} while (before(&released, w->end));
	client_close(&c);
	return NULL;
}

static int
cmd_handoff(const char *hosts, const char *parent, int nworkers,
			double seconds)
{
	Worker	   *workers = calloc(nworkers, sizeof(Worker));
	pthread_barrier_t ready;
	struct timespec start;
	struct timespec end;

	if (workers == NULL || nworkers < 1)
		return 1;
	pthread_barrier_init(&ready, NULL, nworkers + 1);
	for (int i = 0; i < nworkers; i++)
	{
		workers[i].hosts = hosts;
		workers[i].parent = parent;
		workers[i].ready = &ready;
		workers[i].end = &end;
		if (pthread_create(&workers[i].thread, NULL, handoff_worker,
						   &workers[i]) != 0)
		{
			fprintf(stderr, "zkbare: could not start thread %d\n", i);
			return 1;
		}
	}
	/* Every session is connected: start the clock for all at once. */
	pthread_barrier_wait(&ready);
	clock_gettime(CLOCK_REALTIME, &start);
	end = start;
	add_seconds(&end, seconds);
	pthread_barrier_wait(&ready);

	for (int i = 0; i < nworkers; i++)
		pthread_join(workers[i].thread, NULL);
	printf("start %.6f\nend %.6f\n", seconds_of(&start), seconds_of(&end));
	for (int i = 0; i < nworkers; i++)
	{
		for (int j = 0; j < workers[i].ngrants; j++)
		{
			Grant	   *g = &workers[i].grants[j];

			printf("%" PRId64 " %.6f %.6f\n", g->token,
				   seconds_of(&g->acquired), seconds_of(&g->released));
		}
		free(workers[i].grants);
	}
	free(workers);
	pthread_barrier_destroy(&ready);
	return 0;
}

/* Creates of a pipelined batch still unanswered, and those that failed. */
typedef struct Batch
{
	pthread_mutex_t mutex;
	pthread_cond_t cond;
	int			outstanding;
	int			failed;
} Batch;

static void
batch_done(int rc, const char *value, const void *data)
{
	Batch	   *batch = (Batch *) data;

	(void) value;
	pthread_mutex_lock(&batch->mutex);
	if (rc != ZOK && rc != ZNODEEXISTS)
		batch->failed++;
	batch->outstanding--;
	pthread_cond_signal(&batch->cond);
	pthread_mutex_unlock(&batch->mutex);
}

static void
batch_create(Client *c, Batch *batch, const char *path, int mode)
{
	int			rc;

	pthread_mutex_lock(&batch->mutex);
	batch->outstanding++;
	pthread_mutex_unlock(&batch->mutex);
	rc = zoo_acreate(c->zh, path, "", 0, &ZOO_OPEN_ACL_UNSAFE, mode,
					 batch_done, batch);
	if (rc != ZOK)
		die("create", rc);
}

/*
 * All creates go out pipelined; a session's requests are applied in order,
 * so each parent is created (or found) before its pin.  The server may
 * remove an empty container between the two: then that pin fails, and all
 * are made again one at a time.
 */
static int
cmd_pin(const char *hosts, const char *prefix, int n)
{
	Client		c;
	Batch		batch;
	char		path[PATH_MAX_LEN];

	memset(&batch, 0, sizeof(batch));
	pthread_mutex_init(&batch.mutex, NULL);
	pthread_cond_init(&batch.cond, NULL);
	client_open(&c, hosts);
	for (int i = 1; i <= n; i++)
	{
		snprintf(path, sizeof(path), "%s%d", prefix, i);
		batch_create(&c, &batch, path, ZOO_CONTAINER);
		snprintf(path, sizeof(path), "%s%d/pin", prefix, i);
		batch_create(&c, &batch, path, ZOO_PERSISTENT);
	}
	pthread_mutex_lock(&batch.mutex);
	while (batch.outstanding > 0)
		pthread_cond_wait(&batch.cond, &batch.mutex);
	pthread_mutex_unlock(&batch.mutex);

	if (batch.failed > 0)
		for (int i = 1; i <= n; i++)
		{
			snprintf(path, sizeof(path), "%s%d/pin", prefix, i);
			make_path(&c, path);
		}
	client_close(&c);
	pthread_cond_destroy(&batch.cond);
	pthread_mutex_destroy(&batch.mutex);
	return 0;
}

static int
cmd_queue(const char *hosts, const char *parent)
{
	Client		c;
	struct String_vector children;
	char		path[PATH_MAX_LEN];
	int			rc;

	client_open(&c, hosts);
	rc = zoo_get_children(c.zh, parent, 0, &children);
	if (rc == ZNONODE)
		children.count = 0;
	else if (rc != ZOK)
		die("get children", rc);
	for (int i = 0; i < children.count; i++)
	{
		struct Stat stat;

		snprintf(path, sizeof(path), "%s/%s", parent, children.data[i]);
		if (zoo_exists(c.zh, path, 0, &stat) == ZOK)
			printf("%s 0x%" PRIx64 "\n", children.data[i],
				   (uint64_t) stat.ephemeralOwner);
	}
	if (rc == ZOK)
		deallocate_String_vector(&children);
	client_close(&c);
	return 0;
}

/*
 * A throughput thread: its own lock, the shared session; or, for the write
 * load, a node it sets again and again.
 */
typedef struct Cycler
{
	pthread_t	thread;
	Client		client;			/* a copy sharing the session's handle */
	char		parent[PATH_MAX_LEN];
	bool		sets;			/* set parent's data instead of cycling */
	pthread_barrier_t *ready;
	const struct timespec *end;
	long		cycles;
} Cycler;

static void *
cycler_main(void *arg)
{
	Cycler	   *w = (Cycler *) arg;
	char		node[PATH_MAX_LEN];
	struct timespec now;

	pthread_barrier_wait(w->ready);
	for (;;)
	{
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (!before(&now, w->end))
			break;
		if (w->sets)
		{
			int			rc = zoo_set(w->client.zh, w->parent, "load", 4, -1);

			if (rc != ZOK)
				die("set", rc);
		}
		else
		{
			acquire(&w->client, w->parent, node);
			release(&w->client, node);
		}
		w->cycles++;
	}
	return NULL;
}

/*
 * threads threads on one session cycle for seconds, each on prefix<n>; or,
 * with sets, all set prefix.  Prints cycles (sets) per second.
 */
static int
cmd_throughput(const char *hosts, const char *prefix, int threads, double seconds,
			   bool sets)
{
	Client		c;
	Cycler	   *w = calloc(threads, sizeof(Cycler));
	pthread_barrier_t ready;
	struct timespec end;
	long		total = 0;

	if (w == NULL)
	{
		fprintf(stderr, "zkbare: out of memory\n");
		return 1;
	}
	client_open(&c, hosts);
	pthread_barrier_init(&ready, NULL, threads + 1);
	for (int i = 0; i < threads; i++)
	{
		w[i].client = c;
		w[i].client.rng = c.rng + 2 * (uint64_t) i + 2;
		pthread_mutex_init(&w[i].client.mutex, NULL);
		pthread_cond_init(&w[i].client.cond, NULL);
		if (sets)
			snprintf(w[i].parent, sizeof(w[i].parent), "%s", prefix);
		else
			snprintf(w[i].parent, sizeof(w[i].parent), "%s%d", prefix, i + 1);
		make_path(&c, w[i].parent);
		w[i].sets = sets;
		w[i].ready = &ready;
		w[i].end = &end;
		if (pthread_create(&w[i].thread, NULL, cycler_main, &w[i]) != 0)
		{
			fprintf(stderr, "zkbare: could not start a thread\n");
			return 1;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &end);
	add_seconds(&end, seconds);
	pthread_barrier_wait(&ready);
	for (int i = 0; i < threads; i++)
	{
		pthread_join(w[i].thread, NULL);
		total += w[i].cycles;
	}
	printf("%.1f\n", total / seconds);
	client_close(&c);
	free(w);
	return 0;
}

/* ---- the commit guard's proof (issue 47) ---- */

static double
ms_between(const struct timespec *a, const struct timespec *b)
{
	return (seconds_of(b) - seconds_of(a)) * 1000;
}

/* Sleep until seconds after from (CLOCK_MONOTONIC). */
static void
sleep_until(const struct timespec *from, double seconds)
{
	struct timespec until = *from;

	add_seconds(&until, seconds);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR)
		;
}

static int
cmd_hold(const char *hosts, const char *parent, double idle_s, double hold_s)
{
	Client		c;
	char		node[PATH_MAX_LEN];
	struct timespec t0;
	struct timespec t1;
	struct timespec t2;
	struct timespec t3;

	client_open_warm(&c, hosts, parent);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	sleep_until(&t0, idle_s);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	acquire(&c, parent, node);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	sleep_until(&t0, hold_s);
	clock_gettime(CLOCK_MONOTONIC, &t2);
	release(&c, node);
	clock_gettime(CLOCK_MONOTONIC, &t3);
	printf("%.3f %.3f\n", ms_between(&t0, &t1), ms_between(&t2, &t3));
	client_close(&c);
	return 0;
}

/* A thread of cmd_paced: its copy of the session, and its timings. */
typedef struct Pacer
{
	pthread_t	thread;
	Client		client;
	const char *parent;
	const struct timespec *end;
	int			every_ms;		/* readers: the pause between reads */
	int			min_pause_ms;	/* acquirers: the shortest pause */
	int			max_pause_ms;	/* acquirers: the longest pause */
	double	   *ms;
	int			n;
	int			max;
} Pacer;

static void
pacer_record(Pacer *p, double ms)
{
	if (p->n == p->max)
		p->ms = grown(p->ms, &p->max, sizeof(double));
	p->ms[p->n++] = ms;
}

static void
pause_ms(double ms)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	sleep_until(&now, ms / 1000);
}

/* Holds a lock below its parent and reads the queue, as zk_lock_holders. */
static void *
reader_main(void *arg)
{
	Pacer	   *p = (Pacer *) arg;
	char		node[PATH_MAX_LEN];
	char		path[PATH_MAX_LEN];
	char		data[1024];
	struct timespec t0;
	struct timespec t1;

	acquire(&p->client, p->parent, node);
	for (;;)
	{
		struct String_vector children;
		int			rc;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		if (!before(&t0, p->end))
			break;
		rc = zoo_get_children(p->client.zh, p->parent, 0, &children);
		if (rc != ZOK)
			die("get children", rc);
		for (int i = 0; i < children.count; i++)
		{
			int			datalen = sizeof(data);

			snprintf(path, sizeof(path), "%s/%s", p->parent, children.data[i]);
			rc = zoo_get(p->client.zh, path, 0, data, &datalen, NULL);
			if (rc != ZOK && rc != ZNONODE)
				die("get", rc);
		}
		deallocate_String_vector(&children);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		pacer_record(p, ms_between(&t0, &t1));
		pause_ms(p->every_ms);
	}
	release(&p->client, node);
	return NULL;
}

static void *
acquirer_main(void *arg)
{
	Pacer	   *p = (Pacer *) arg;
	char		node[PATH_MAX_LEN];
	struct timespec t0;
	struct timespec t1;

	for (;;)
	{
		clock_gettime(CLOCK_MONOTONIC, &t0);
		if (!before(&t0, p->end))
			break;
		acquire(&p->client, p->parent, node);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		release(&p->client, node);
		pacer_record(p, ms_between(&t0, &t1));
		pause_ms(p->min_pause_ms + (double) (next_random(&p->client) % 1000000) / 1e6 *
				 (p->max_pause_ms - p->min_pause_ms));
	}
	return NULL;
}

static int
cmd_paced(const char *hosts, const char *held_parent, const char *acq_parent,
		  double seconds, int read_ms, int min_pause_ms, int max_pause_ms)
{
	Client		c;
	Pacer		pacers[2];
	void	   *(*mains[2]) (void *) = {reader_main, acquirer_main};
	const char *labels[2] = {"holders", "acquire"};
	struct timespec end;

	memset(pacers, 0, sizeof(pacers));
	client_open_warm(&c, hosts, acq_parent);
	make_path(&c, held_parent);
	clock_gettime(CLOCK_MONOTONIC, &end);
	add_seconds(&end, seconds);
	for (int i = 0; i < 2; i++)
	{
		Pacer	   *p = &pacers[i];

		p->client = c;
		p->client.rng = c.rng + 2 * (uint64_t) i + 2;
		pthread_mutex_init(&p->client.mutex, NULL);
		pthread_cond_init(&p->client.cond, NULL);
		p->parent = i == 0 ? held_parent : acq_parent;
		p->end = &end;
		p->every_ms = read_ms;
		p->min_pause_ms = min_pause_ms;
		p->max_pause_ms = max_pause_ms;
		if (pthread_create(&p->thread, NULL, mains[i], p) != 0)
		{
			fprintf(stderr, "zkbare: could not start a thread\n");
			return 1;
		}
	}
	for (int i = 0; i < 2; i++)
	{
		pthread_join(pacers[i].thread, NULL);
		for (int j = 0; j < pacers[i].n; j++)
			printf("%s %.3f\n", labels[i], pacers[i].ms[j]);
		free(pacers[i].ms);
	}
	client_close(&c);
	return 0;
}

static int
cmd_idle(const char *hosts, double seconds)
{
	Client		c;
	struct timespec t0;

	client_open(&c, hosts);
	printf("0x%" PRIx64 "\n", (uint64_t) zoo_client_id(c.zh)->client_id);
	fflush(stdout);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	sleep_until(&t0, seconds);
	client_close(&c);
	return 0;
}

static int
usage(void)
{
	fprintf(stderr,
			"usage: zkbare HOSTS mkdir PATH\n"
			"       zkbare HOSTS cycle PARENT N\n"
			"       zkbare HOSTS handoff PARENT CLIENTS SECONDS\n"
			"       zkbare HOSTS pin PREFIX N\n"
			"       zkbare HOSTS queue PARENT\n"
			"       zkbare HOSTS throughput PREFIX THREADS SECONDS\n"
			"       zkbare HOSTS revoke PARENT N\n"
			"       zkbare HOSTS hold PARENT IDLE_S HOLD_S\n"
			"       zkbare HOSTS paced HELD_PARENT ACQ_PARENT SECONDS READ_MS MIN_PAUSE_MS MAX_PAUSE_MS\n"
			"       zkbare HOSTS load PATH THREADS SECONDS\n"
			"       zkbare HOSTS idle SECONDS\n");
	return 2;
}

static void
ignore_sync(int rc, const char *value, const void *data)
{
	(void) rc;
	(void) value;
	(void) data;
}

/*
 * The path of parent's child with the lowest sequence number, into path,
 * after the server caught up with the leader (the sync is answered before
 * the listing, in order, as zklock pipelines them).
 */
static const char *
lowest_child(Client *c, const char *parent, char *path)
{
	struct String_vector children;
	int64_t		lowest = -1;
	int			rc = zoo_async(c->zh, parent, ignore_sync, NULL);

	if (rc != ZOK)
		die("sync", rc);
	rc = zoo_get_children(c->zh, parent, 0, &children);

	if (rc != ZOK)
		die("get children", rc);
	for (int i = 0; i < children.count; i++)
	{
		int64_t		seq = sequence_of(children.data[i]);

		if (seq >= 0 && (lowest < 0 || seq < lowest))
		{
			lowest = seq;
			snprintf(path, PATH_MAX_LEN, "%s/%s", parent, children.data[i]);
		}
	}
	deallocate_String_vector(&children);
	if (lowest < 0)
		die("no lock child", ZNONODE);
	return path;
}

static int
cmd_revoke(const char *hosts, const char *parent, int n)
{
	Client		holder;
	Client		asker;
	char		node[PATH_MAX_LEN];
	char		holder_node[PATH_MAX_LEN];

	client_open(&holder, hosts);
	client_open(&asker, hosts);
	acquire(&holder, parent, node);
	for (int i = 0; i <= n; i++)
	{
		char		data[64];
		int			datalen = sizeof(data);
		struct timespec t0;
		struct timespec t1;
		int			rc;

		pthread_mutex_lock(&holder.mutex);
		holder.watch_fired = false;
		pthread_mutex_unlock(&holder.mutex);
		rc = zoo_wget(holder.zh, node, watcher, &holder, data, &datalen, NULL);
		if (rc != ZOK)
			die("watch own node", rc);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		rc = zoo_set(asker.zh, lowest_child(&asker, parent, holder_node),
					 "__REVOKE__", 10, -1);
		if (rc != ZOK)
			die("set", rc);
		pthread_mutex_lock(&holder.mutex);
		while (!holder.watch_fired)
			pthread_cond_wait(&holder.cond, &holder.mutex);
		pthread_mutex_unlock(&holder.mutex);
		datalen = sizeof(data);
		rc = zoo_get(holder.zh, node, 0, data, &datalen, NULL);
		if (rc != ZOK)
			die("get", rc);
		if (datalen != 10 || memcmp(data, "__REVOKE__", 10) != 0)
		{
			fprintf(stderr, "zkbare: the holder read no request\n");
			return 1;
		}
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (i > 0)
			printf("%.6f\n", seconds_of(&t1) - seconds_of(&t0));
	}
	release(&holder, node);
	client_close(&asker);
	client_close(&holder);
	return 0;
}

int
main(int argc, char **argv)
{
	const char *hosts;
	const char *cmd;

	if (argc < 4)
		return usage();
	hosts = argv[1];
	cmd = argv[2];
	zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);

	if (strcmp(cmd, "mkdir") == 0 && argc == 4)
	{
		Client		c;

		client_open(&c, hosts);
		make_path(&c, argv[3]);
		client_close(&c);
		return 0;
	}
	if (strcmp(cmd, "cycle") == 0 && argc == 5)
		return cmd_cycle(hosts, argv[3], atoi(argv[4]));
	if (strcmp(cmd, "handoff") == 0 && argc == 6)
		return cmd_handoff(hosts, argv[3], atoi(argv[4]), atof(argv[5]));
	if (strcmp(cmd, "pin") == 0 && argc == 5)
		return cmd_pin(hosts, argv[3], atoi(argv[4]));
	if (strcmp(cmd, "queue") == 0 && argc == 4)
		return cmd_queue(hosts, argv[3]);
	if (strcmp(cmd, "throughput") == 0 && argc == 6)
		return cmd_throughput(hosts, argv[3], atoi(argv[4]), atof(argv[5]), false);
	if (strcmp(cmd, "revoke") == 0 && argc == 5)
		return cmd_revoke(hosts, argv[3], atoi(argv[4]));
	if (strcmp(cmd, "hold") == 0 && argc == 6)
		return cmd_hold(hosts, argv[3], atof(argv[4]), atof(argv[5]));
	if (strcmp(cmd, "paced") == 0 && argc == 9)
		return cmd_paced(hosts, argv[3], argv[4], atof(argv[5]), atoi(argv[6]),
						 atoi(argv[7]), atoi(argv[8]));
	if (strcmp(cmd, "load") == 0 && argc == 6)
		return cmd_throughput(hosts, argv[3], atoi(argv[4]), atof(argv[5]), true);
	if (strcmp(cmd, "idle") == 0 && argc == 4)
		return cmd_idle(hosts, atof(argv[3]));
	return usage();
}
