/*
 * worker_proof.h
 *	  The session worker's half of the commit guard's proof.
 */
#ifndef ZKLOCK_WORKER_PROOF_H
#define ZKLOCK_WORKER_PROOF_H

#include <stdint.h>
#include <stdbool.h>

extern void proof_connection(int64_t connect_sent_after, int timeout_ms);
extern void proof_sent(int64_t now);
extern void proof_answered(int64_t sent_at, bool write);
extern long proof_heartbeat_in(void);

#endif							/* ZKLOCK_WORKER_PROOF_H */
