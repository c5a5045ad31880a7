#!/bin/bash
# The TAP fault suite with every PostgreSQL backend under Helgrind, which
# watches zklock's threads (the backend's and the ZooKeeper client's IO,
# completion and opening threads) for data races and lock-order
# inversions.  Fails if Helgrind reports any outside the ZooKeeper client's
# own internals (zookeeper.supp).
#
#   bash test/helgrind/run.sh [TAP test files...]   (default: the fault tests)
#
# As root on Debian 12.  A private copy of PostgreSQL whose bin/postgres
# runs the server under Helgrind; zklock built with -DZKLOCK_HELGRIND, which
# tells Helgrind about the ordering its atomic operations give.  Under
# Helgrind the backends run many times slower, so the tests' own timing
# assertions may fail: what this checks is Helgrind's reports, which it
# prints with the test results.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../setup.sh"
zklock_packages+=(valgrind)
zklock_install_packages

work=$(mktemp -d /tmp/zklock-helgrind.XXXXXX)
zkdirs=$work/zk
cleanup()
{
	if [ "${KEEP_TEST_DIR:-}" = "" ]; then rm -rf "$work"; fi
}
trap cleanup EXIT

tests=("$@")
if [ ${#tests[@]} -eq 0 ]; then
	tests=(test/tap/01[0-9]_*.pl test/tap/02[5-7]_*.pl test/tap/032_*.pl)
fi

# PostgreSQL, relocated: its programs find the rest relative to themselves.
major=$(pg_config --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
prefix=$work/pg
mkdir -p "$prefix/usr/lib/postgresql" "$prefix/usr/share/postgresql"
cp -a "/usr/lib/postgresql/$major" "$prefix/usr/lib/postgresql/"
cp -a "/usr/share/postgresql/$major" "$prefix/usr/share/postgresql/"
ln -s /usr/include "$prefix/usr/include"
bin=$prefix/usr/lib/postgresql/$major/bin
mv "$bin/postgres" "$bin/postgres.real"
cp "$ZKLOCK_SRC/test/helgrind/postgres-wrapper" "$bin/postgres"
cp "$ZKLOCK_SRC/test/helgrind/zookeeper.supp" "$bin/"

cp -a "$ZKLOCK_SRC/." "$work/tree"
rm -rf "$work/tree/.git"
make -C "$work/tree" -s clean
make -C "$work/tree" -s PG_CONFIG="$bin/pg_config" WERROR=1 with_llvm=no \
	PG_CFLAGS="-Wall -Wextra -Wno-unused-parameter -Werror -g -O1 -DZKLOCK_HELGRIND"
make -C "$work/tree" -s PG_CONFIG="$bin/pg_config" with_llvm=no install >/dev/null
cc -shared -fPIC -O2 -Wall -Werror -o "$work/fakedns.so" "$ZKLOCK_SRC/test/zk/fakedns.c" -ldl
mkdir -p "$work/logs"
chown -R postgres: "$work"

echo "== TAP under Helgrind: ${tests[*]}"
status=0
runuser -u postgres -- env PATH="$bin:$PATH" LD_PRELOAD="$work/fakedns.so" \
	ZKLOCK_HELGRIND_LOGS="$work/logs" \
	make -C "$work/tree" -s installcheck PG_CONFIG="$bin/pg_config" \
	REGRESS= ISOLATION= PROVE_TESTS="${tests[*]}" PROVE_FLAGS="--timer" || status=$?
[ $status -eq 0 ] || echo "(some test assertions failed under Helgrind's slowdown; see above)"

# Each backend's log: reports are blocks that begin with a thread or a
# "Possible data race" / "lock order" line.
backends=$(ls "$work/logs" | wc -l)
reports=$(grep -l -E 'Possible data race|lock order' "$work"/logs/hg.* 2>/dev/null || true)
echo "== Helgrind watched $backends server processes"
if [ -n "$reports" ]; then
	for f in $reports; do
		echo "--- $f"
		cat "$f"
	done
	echo "== Helgrind reported races or lock-order inversions in $(echo "$reports" | wc -l) processes"
	exit 1
fi
echo "== Helgrind reported no data race and no lock-order inversion"
