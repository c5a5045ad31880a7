#!/bin/bash
# The double barrier against Curator's (bench/barriers.py), on a fresh
# Debian 12 machine, as root: `bash bench/barriers.sh` (a few minutes;
# BENCH_QUICK=1 for fewer rounds, BENCH_NO_SETUP=1 without building and
# installing zklock first, BENCH_KEEP=1 to keep the work directory).
set -euo pipefail

bench=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$bench/../test/setup.sh"

if [ "${BENCH_NO_SETUP:-}" != 1 ]; then
	zklock_setup
fi

work=$(mktemp -d /tmp/zklock-barriers.XXXXXX)
chmod 755 "$work"
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

/usr/bin/python3 "$bench/barriers.py" --work "$work"
