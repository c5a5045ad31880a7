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


extern void stats_init(void);
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
