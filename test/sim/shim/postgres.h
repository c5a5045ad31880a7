/*
 * postgres.h (test/sim shim)
 *	  Just what src/worker_proof.c takes from PostgreSQL, so that the
 *	  simulation compiles the real file with no PostgreSQL installed.
 */
#ifndef ZKLOCK_SIM_POSTGRES_H
#define ZKLOCK_SIM_POSTGRES_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef int64_t int64;
typedef int32_t int32;
typedef uint64_t uint64;
typedef uint32_t uint32;

#define Max(x, y) ((x) > (y) ? (x) : (y))
#define Min(x, y) ((x) < (y) ? (x) : (y))
#define Assert(condition) assert(condition)

#endif							/* ZKLOCK_SIM_POSTGRES_H */
