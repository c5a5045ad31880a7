/*
 * sim_core.c
 *	  The simulation's machinery: its random numbers, its event queue, its
 *	  trace, and the in-order streams that carry every message (each
 *	  direction of a quorum or client connection), with their delays, the
 *	  adversary's holds and lags, and closes.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <zookeeper/zookeeper.h>

#include "sim.h"

/* ---- random ---- */

static uint64_t rs[4];

static uint64_t
rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

void
rng_seed(uint64_t seed)
{
	for (int i = 0; i < 4; i++)
	{
		uint64_t	z = (seed += 0x9e3779b97f4a7c15ULL);

		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
		rs[i] = z ^ (z >> 31);
	}
}

uint64_t
rng_u64(void)
{
	uint64_t	result = rotl(rs[1] * 5, 7) * 9;
	uint64_t	t = rs[1] << 17;

	rs[2] ^= rs[0];
	rs[3] ^= rs[1];
	rs[1] ^= rs[2];
	rs[0] ^= rs[3];
	rs[2] ^= t;
	rs[3] = rotl(rs[3], 45);
	return result;
}

int64_t
rng_between(int64_t lo, int64_t hi)
{
	if (hi <= lo)
		return lo;
	return lo + (int64_t) (rng_u64() % (uint64_t) (hi - lo + 1));
}

bool
rng_chance(double p)
{
	return p > 0 && (double) (rng_u64() >> 11) < p * 9007199254740992.0;
}

/* A thread's small delay between steps. */
usec
step_delay(usec lo, usec hi)
{
	return cfg.scripted ? lo : rng_between(lo, hi);
}

/* ---- events: a binary heap on (time, sequence) ---- */

typedef struct Event
{
	usec		at;
	uint64_t	seq;
	EvKind		kind;
	int			a;
	int64_t		b;
} Event;

usec		now;
static Event *heap;
static int	nheap;
static int	heap_cap;
static uint64_t next_seq;

void
ev_reset(void)
{
	nheap = 0;
	next_seq = 0;
	now = 0;
}

static bool
ev_before(const Event *x, const Event *y)
{
	return x->at < y->at || (x->at == y->at && x->seq < y->seq);
}

void
ev_at(usec at, EvKind kind, int a, int64_t b)
{
	int			i;

	if (at < now)
		at = now;
	if (nheap == heap_cap)
	{
		heap_cap = heap_cap ? heap_cap * 2 : 1024;
		heap = realloc(heap, sizeof(Event) * heap_cap);
		if (heap == NULL)
			abort();
	}
	i = nheap++;
	heap[i] = (Event)
	{
		at, next_seq++, kind, a, b
	};
	while (i > 0 && ev_before(&heap[i], &heap[(i - 1) / 2]))
	{
		Event		t = heap[i];

		heap[i] = heap[(i - 1) / 2];
		heap[(i - 1) / 2] = t;
		i = (i - 1) / 2;
	}
}

bool
ev_next(EvKind *kind, int *a, int64_t *b)
{
	Event		top;
	int			i = 0;

	if (nheap == 0)
		return false;
	top = heap[0];
	heap[0] = heap[--nheap];
	for (;;)
	{
		int			l = 2 * i + 1;
		int			m = i;

		if (l < nheap && ev_before(&heap[l], &heap[m]))
			m = l;
		if (l + 1 < nheap && ev_before(&heap[l + 1], &heap[m]))
			m = l + 1;
		if (m == i)
			break;
		{
			Event		t = heap[i];

			heap[i] = heap[m];
			heap[m] = t;
		}
		i = m;
	}
	now = top.at;
	*kind = top.kind;
	*a = top.a;
	*b = top.b;
	return true;
}

/* ---- trace ---- */

bool		tracing = false;

void
trace_line(const char *fmt,...)
{
	va_list		ap;

	printf("%8lld.%03lld  ", (long long) (now / MS), (long long) (now % MS));
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

/* ---- streams ---- */

typedef struct Stream
{
	StreamKind	kind;
	int			a;				/* for dispatch: see stream_open */
	int			b;
	int			c;
	bool		open;
	int			arm_gen;		/* EV_DELIVER events of older arms are stale */
	Packet	   *q;
	int			head;
	int			n;
	int			cap;
	usec		last_arrive;
	bool		armed;
	usec		base;
	/* a hold: from hold_from, what was sent before hold_mark until until1 */
	usec		hold_from;
	usec		hold_until1;
	usec		hold_mark;
	usec		hold_until2;
	/* a lag: what is sent before lag_until takes lag_lo..lag_hi more */
	usec		lag_until;
	usec		lag_lo;
	usec		lag_hi;
} Stream;

static Stream *streams;
static int	nstreams;
static int	streams_cap;

void
streams_reset(void)
{
	for (int i = 0; i < nstreams; i++)
		streams[i].n = 0;
	nstreams = 0;
}

/*
 * A new stream of kind; a, b, c say whom it connects (sim_zk.c and
 * sim_worker.c give them meaning).
 */
int
stream_open(StreamKind kind, int a, int b, int c)
{
	Stream	   *s;

	if (nstreams == streams_cap)
	{
		int			old = streams_cap;

		streams_cap = streams_cap ? streams_cap * 2 : 64;
		streams = realloc(streams, sizeof(Stream) * streams_cap);
		if (streams == NULL)
			abort();
		memset(streams + old, 0, sizeof(Stream) * (streams_cap - old));
	}
	s = &streams[nstreams];
	s->kind = kind;
	s->a = a;
	s->b = b;
	s->c = c;
	s->open = true;
	s->arm_gen = 0;
	s->head = 0;
	s->n = 0;
	s->last_arrive = now;
	s->armed = false;
	s->base = cfg.scripted ? cfg.link_base[kind] :
		cfg.link_base[kind] / 2 + rng_between(0, cfg.link_base[kind]);
	s->hold_from = NEVER;
	s->lag_until = 0;
	return nstreams++;
}

bool
stream_open_p(int s)
{
	return s >= 0 && s < nstreams && streams[s].open;
}

static Packet *
head_packet(Stream *s)
{
	return &s->q[s->head];
}

/* When the head packet may be delivered, the hold considered. */
static usec
head_due(Stream *s)
{
	Packet	   *p = head_packet(s);
	usec		due = p->arrive;

	if (s->hold_from != NEVER && now >= s->hold_from)
	{
		usec		release = p->sent < s->hold_mark ? s->hold_until1 : s->hold_until2;

		if (now >= s->hold_until2)
			s->hold_from = NEVER;
		else if (due < release)
			due = release;
	}
	return due;
}

static void
arm(int id)
{
	Stream	   *s = &streams[id];

	if (!s->armed && s->n > 0 && s->open)
	{
		s->armed = true;
		ev_at(head_due(s), EV_DELIVER, id, s->arm_gen);
	}
}

void
stream_send(int id, PacketType type, int64_t x, int64_t y)
{
	Stream	   *s = &streams[id];
	Packet	   *p;
	usec		delay;

	if (!s->open)
		return;
	if (s->n == s->cap)
	{
		Packet	   *q = malloc(sizeof(Packet) * (s->cap ? s->cap * 2 : 16));

		if (q == NULL)
			abort();
		for (int i = 0; i < s->n; i++)
			q[i] = s->q[(s->head + i) % s->cap];
		free(s->q);
		s->q = q;
		s->head = 0;
		s->cap = s->cap ? s->cap * 2 : 16;
	}
	p = &s->q[(s->head + s->n) % s->cap];
	s->n++;
	delay = cfg.scripted ? s->base : 20 + rng_between(s->base / 2, s->base + s->base / 2);
	if (now < s->lag_until)
		delay += rng_between(s->lag_lo, s->lag_hi);
	p->type = type;
	p->x = x;
	p->y = y;
	p->sent = now;
	p->arrive = now + delay > s->last_arrive ? now + delay : s->last_arrive;
	s->last_arrive = p->arrive;
	arm(id);
}

/* The receiving side is gone: nothing more is delivered. */
void
stream_close(int id)
{
	if (id >= 0 && id < nstreams)
	{
		streams[id].open = false;
		streams[id].n = 0;
	}
}

/*
 * Hold the stream from now: what was sent before mark comes at until1,
 * the rest at until2 (until1 <= until2), in order.  A hold already on is
 * extended.
 */
void
stream_hold(int id, usec until1, usec mark, usec until2)
{
	Stream	   *s = &streams[id];

	if (s->hold_from != NEVER && now < s->hold_until2)
	{
		if (until2 > s->hold_until2)
			s->hold_until2 = until2;
		return;
	}
	s->hold_from = now;
	s->hold_until1 = until1;
	s->hold_mark = mark;
	s->hold_until2 = until2 > until1 ? until2 : until1;
	TRACE("adversary: hold %s until %lld.%03lld (what was sent before %lld.%03lld), the rest until %lld.%03lld",
		  stream_name(id), (long long) (until1 / MS), (long long) (until1 % MS),
		  (long long) (mark / MS), (long long) (mark % MS),
		  (long long) (s->hold_until2 / MS), (long long) (s->hold_until2 % MS));
}

/* Delay what is sent until `until` by lo..hi more, in order. */
void
stream_lag(int id, usec until, usec lo, usec hi)
{
	Stream	   *s = &streams[id];

	s->lag_until = until;
	s->lag_lo = lo;
	s->lag_hi = hi;
	TRACE("adversary: lag %s by %lld..%lld ms until %lld ms", stream_name(id),
		  (long long) (lo / MS), (long long) (hi / MS), (long long) (until / MS));
}

/*
 * Release a hold on the stream (if one is on) at other times: what was
 * sent before mark at until1, the rest at until2.
 */
void
stream_release(int id, usec until1, usec mark, usec until2)
{
	Stream	   *s = &streams[id];

	if (s->hold_from == NEVER || now >= s->hold_until2)
		return;
	s->hold_until1 = until1;
	s->hold_mark = mark;
	s->hold_until2 = until2 > until1 ? until2 : until1;
	TRACE("adversary: release %s at %lld.%03lld (what was sent before %lld.%03lld), the rest at %lld.%03lld",
		  stream_name(id), (long long) (until1 / MS), (long long) (until1 % MS),
		  (long long) (mark / MS), (long long) (mark % MS),
		  (long long) (s->hold_until2 / MS), (long long) (s->hold_until2 % MS));
	s->arm_gen++;
	s->armed = false;
	arm(id);
}

/* EV_DELIVER: the head packet, if it is due. */
void
stream_deliver_due(int id, int64_t gen)
{
	Stream	   *s = &streams[id];
	Packet		p;
	usec		due;

	if (gen != s->arm_gen)
		return;
	s->armed = false;
	if (!s->open || s->n == 0)
		return;
	due = head_due(s);
	if (due > now)
	{
		s->armed = true;
		ev_at(due, EV_DELIVER, id, s->arm_gen);
		return;
	}
	p = *head_packet(s);
	s->head = (s->head + 1) % s->cap;
	s->n--;
	if (s->kind == SK_CDOWN)
		worker_deliver(s->a, &p);
	else
		zk_deliver(id, s->kind, s->a, s->b, s->c, &p);
	arm(id);
}

const char *
stream_name(int id)
{
	static char buf[4][64];
	static int	next;
	char	   *out = buf[next++ % 4];
	Stream	   *s = &streams[id];

	switch (s->kind)
	{
		case SK_QDOWN:
			snprintf(out, 64, "S%d->S%d (quorum)", s->b, s->c);
			break;
		case SK_QUP:
			snprintf(out, 64, "S%d->S%d (quorum)", s->c, s->b);
			break;
		case SK_CUP:
			snprintf(out, 64, "worker->S%d (conn %d)", s->b, s->a);
			break;
		case SK_CDOWN:
			snprintf(out, 64, "S%d->worker (conn %d)", s->b, s->a);
			break;
	}
	return out;
}

const char *
packet_name(PacketType type)
{
	static const char *const names[] = {
		"PING", "PROPOSAL", "COMMIT", "SYNC", "REVALIDATE reply",
		"PING reply", "ACK", "REQUEST", "REVALIDATE",
		"connect", "request", "connect reply", "reply", "close"
	};

	return names[type];
}

const char *
rc_name(int rc)
{
	switch (rc)
	{
		case ZOK:
			return "ZOK";
		case ZBADVERSION:
			return "ZBADVERSION";
		case ZNOAUTH:
			return "ZNOAUTH";
		case ZSESSIONEXPIRED:
			return "ZSESSIONEXPIRED";
		case ZSESSIONMOVED:
			return "ZSESSIONMOVED";
		case ZCONNECTIONLOSS:
			return "ZCONNECTIONLOSS";
		default:
			return "rc?";
	}
}
