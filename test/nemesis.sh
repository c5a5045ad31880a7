#!/bin/bash
# A seeded randomized fault run (issue 43), as root on Debian 12 with the
# suite's packages (test/setup.sh):
#
#   test/nemesis.sh [--seconds N] [--seed S] [--broken] [--keep] [--no-install]
#
# Builds and installs zklock from this tree for PostgreSQL 15 (unless
# --no-install), then runs test/nemesis.py: a 3-server ensemble with every
# follower-to-leader link through test/zk/zkrelay.py, three PostgreSQL nodes
# each reaching one server through test/zk/tcpproxy.py --refuse, a fenced
# resource database, clients and a nemesis for N seconds (default 180; 60
# with --broken), then a heal, the checker and a summary.  Everything is torn
# down by pid, also on Ctrl-C.  Exit: 0 no violation and everything
# exercised; 1 a violation or an anomaly; 2 nothing (or not enough) could
# be exercised.  --broken swaps zklock for per-node advisory locks without a
# fence and exits 0 only if the checker reports violations.  See
# docs/testing.md, "The nemesis run".
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
install=1
args=()
for a in "$@"; do
	case $a in
	--no-install) install= ;;
	-h|--help) sed -n '2,18p' "${BASH_SOURCE[0]}"; exit 0 ;;
	*) args+=("$a") ;;
	esac
done

if [ "$(id -u)" != 0 ]; then
	echo "nemesis.sh: run as root (PostgreSQL runs as postgres through runuser)" >&2
	exit 2
fi

if [ -n "$install" ]; then
	ZKLOCK_PG_MAJOR=15
	source "$here/setup.sh"
	build=$(mktemp -d /tmp/zklock-nemesis-build.XXXXXX)
	trap 'rm -rf "$build"' EXIT
	zklock_copy_tree "$build/tree"
	chown -R postgres: "$build"
	pg_config=/usr/lib/postgresql/15/bin/pg_config
	echo "== building and installing zklock for PostgreSQL 15"
	if ! runuser -u postgres -- make -C "$build/tree" -s PG_CONFIG=$pg_config WERROR=1 >/dev/null ||
		! make -C "$build/tree" -s PG_CONFIG=$pg_config install >/dev/null; then
		echo "nemesis.sh: the build failed" >&2
		exit 2
	fi
	rm -rf "$build"
	trap - EXIT
fi

exec /usr/bin/python3 "$here/nemesis.py" "${args[@]}"
