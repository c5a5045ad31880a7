#!/bin/bash
# The double barrier against Curator's (bench/barriers.py), on a fresh
# Debian 12 machine, as root: `bash bench/barriers.sh` (a few minutes;
# BENCH_QUICK=1 for fewer rounds, BENCH_NO_SETUP=1 without building and
# installing zklock first).  barriers.py stops what it started.
set -euo pipefail

bench=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$bench/../test/setup.sh"

if [ "${BENCH_NO_SETUP:-}" != 1 ]; then
	zklock_setup
fi
work=$(mktemp -d /tmp/zklock-barriers.XXXXXX)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 "$bench/barriers.py" --work "$work"
