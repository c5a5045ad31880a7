/*
 * stats.h
 *	  Server-wide lock and session statistics in shared memory.
 */
#ifndef ZKLOCK_STATS_H
#define ZKLOCK_STATS_H

typedef enum StatsOutcome
{
	STATS_GRANTED,
	STATS_TRY_FAILED,
	STATS_TIMED_OUT,
	STATS_CANCELLED
} StatsOutcome;

/* Waits at barriers and gates, counted server-wide by kind. */
typedef enum StatsBarrierKind
{
	STATS_GATE,					/* zk_gate_wait */
	STATS_ENTER,				/* zk_barrier_enter */
	STATS_LEAVE,				/* zk_barrier_leave */
	STATS_BARRIER_KINDS
} StatsBarrierKind;

extern void stats_init(void);
extern void stats_barrier_wait_begin(StatsBarrierKind kind);
extern void stats_barrier_wait_end(StatsOutcome outcome);
extern void stats_wait_begin(const char *name);
extern void stats_wait_end(StatsOutcome outcome);
extern void stats_hold_ended(const char *name, bool lost);
extern void stats_count_session_opened(void);
extern void stats_count_session_lost(void);
extern void stats_count_reconnect(void);
extern void stats_deadlock_checked(int members, int cycles, int victims, bool victim);
extern void stats_flush(void);
extern void stats_backend_exit(void);

#endif							/* ZKLOCK_STATS_H */
