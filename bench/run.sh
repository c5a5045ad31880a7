#!/bin/bash
# zklock's benchmark, on a fresh Debian 12 machine, as root:
#
#   bash bench/run.sh                  everything, about an hour
#   BENCH_QUICK=1 bash bench/run.sh    fewer rounds and sizes, for development
#   BENCH_NO_SETUP=1 bash bench/run.sh without installing packages and
#                                      building and installing zklock first
#   BENCH_KEEP=1 bash bench/run.sh     keep the work directory (logs) at the end
#   BENCH_GUARD=0 bash bench/run.sh    without the guard's worst cases (tests 062
#                                      and 068)
#   BENCH_SIM=0 bash bench/run.sh      without the proof simulation's million
#   BENCH_ONLY=proof bash bench/run.sh only what the commit guard's proof
#                                      costs (issue 47), about 8 minutes;
#                                      BENCH_PROOF_LABEL names its column
#   BENCH_PGBIN=DIR                    PostgreSQL's bin directory (default
#                                      /usr/lib/postgresql/15/bin): a private
#                                      copy, with BENCH_NO_SETUP=1 and
#                                      zklock installed there beforehand
#
# Installs what it needs, builds and installs zklock, builds bench/zkbare.c,
# then bench/bench.py starts ZooKeeper (standalone, then a 3-server ensemble,
# fsync on; then both again with forceSync=no for the cycles and a long
# queue) and two PostgreSQL nodes, all on 127.0.0.1, prints the table and
# writes bench/RESULTS.md; last, the proof's costs on a durable ensemble of
# their own, whose section of RESULTS.md keeps a column per build (from
# bench/proof-runs.json).  Everything it started is stopped on exit.
set -euo pipefail

bench=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$bench/../test/setup.sh"

if [ "${BENCH_NO_SETUP:-}" != 1 ]; then
	# pgbench is part of postgresql-15; the compiler of build-essential, the
	# client headers (libzookeeper-st-dev; the same for both flavours) and
	# the multi-threaded client library (libzookeeper-mt2) build zkbare.
	zklock_setup
	# The driver's own needs.
	zklock_packages=(python3)
	zklock_install_packages
	export BENCH_BUILT=1
fi

work=$(mktemp -d /tmp/zklock-bench.XXXXXX)
chmod 755 "$work"

# bench.py stops what it started; this is the net for when it cannot (killed
# hard): servers are stopped by the pids they recorded.
cleanup()
{
	local d
	for d in "$work"/zk*/; do
		[ -d "$d" ] && "$ZKLOCK_SRC/test/zk/zkctl" stop "$d" || true
	done
	for d in "$work"/node_*/data; do
		if [ -f "$d/postmaster.pid" ]; then
			runuser -u postgres -- "${BENCH_PGBIN:-/usr/lib/postgresql/15/bin}/pg_ctl" -D "$d" -m immediate -s stop || true
		fi
	done
	if [ "${BENCH_KEEP:-}" = 1 ]; then
		echo "== kept $work" >&2
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT

# The commit guard's proof policy under 1,000,000 simulated schedules
# (test/sim; docs/testing.md, "The proof simulation").
if [ "${BENCH_SIM:-1}" = 1 ] && [ -z "${BENCH_ONLY:-}" ]; then
	echo "== the proof simulation, 1,000,000 schedules"
	make -s -C "$ZKLOCK_SRC/test/sim" bench | sed -n '1,3p;/^first/p' ||
		echo "== the proof simulation FAILED: make -C test/sim bench" >&2
fi

cc -O2 -Wall -Wextra -Werror -DTHREADED -o "$work/zkbare" "$bench/zkbare.c" \
	-l:libzookeeper_mt.so.2 -lpthread

/usr/bin/python3 "$bench/bench.py" --work "$work" --zkbare "$work/zkbare"

# The commit guard's worst cases with a follower: the rounds of
# test/tap/062 (issue 41: a follower cut off) and test/tap/068 (issue 47:
# the leader's stream to it held and released late), 30 per shape at T =
# 4 s and 8 s (about 40 and 60 minutes; with BENCH_QUICK, 3 at 4 s), one
# line of figures per round; BENCH_GUARD=0 leaves them out.  Runs as the TAP
# suite does, with its own ensembles.
if [ "${BENCH_GUARD:-1}" = 1 ] && [ -z "${BENCH_ONLY:-}" ]; then
	if [ "${BENCH_QUICK:-}" = 1 ]; then guard=(3 4000); else guard=(30 "4000 8000"); fi
	ZKLOCK_GUARD_ROUNDS=${guard[0]} ZKLOCK_GUARD_TIMEOUTS="${guard[1]}" ZKLOCK_SUITES=TAP \
		ZKLOCK_TAP_TESTS="test/tap/062_guard_follower_worst_case.pl test/tap/068_guard_late_delivery.pl" \
		bash "$bench/../test/suites.sh" 15 127.0.0.1:1 2>&1 |
		grep -E '^# T=|^(not )?ok |^Files=' || true
fi
