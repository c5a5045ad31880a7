#!/bin/bash
# The whole zklock test suite, on a fresh Debian 12 machine, as root:
# installs what it needs, builds, installs, runs pg_regress, the isolation
# specs and the TAP tests against ZooKeeper servers it starts, and stops
# everything it started.  Exit status 0 only if every suite passed.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
zklock_setup

work=$(mktemp -d /tmp/zklock-test.XXXXXX)
zkdir=$work/zk
cleanup()
{
	"$ZKLOCK_SRC/test/zk/zkctl" stop "$zkdir" || true
	if [ "${KEEP_TEST_DIR:-}" = "" ]; then rm -rf "$work"; fi
}
trap cleanup EXIT

# PostgreSQL refuses to run as root: the tests run as postgres, in a copy of
# the tree that postgres can write to.
cp -a "$ZKLOCK_SRC/." "$work/tree"
chown -R postgres: "$work"

echo "== starting ZooKeeper for pg_regress and isolation tests"
hosts=$("$ZKLOCK_SRC/test/zk/zkctl" start "$zkdir")
echo "   $hosts"
cat > "$work/regress.conf" <<CONF
zklock.hosts = '$hosts'
zklock.root = '/zklock_regress'
zklock.session_timeout = 4000
max_prepared_transactions = 2
CONF

# Host names under .zklock.test are answered by a stand-in for DNS, so that
# the tests send no query to a name server.
cc -shared -fPIC -O2 -Wall -Werror -o "$work/fakedns.so" "$ZKLOCK_SRC/test/zk/fakedns.c" -ldl

as_postgres()
{
	runuser -u postgres -- env PATH="$PATH" LD_PRELOAD="$work/fakedns.so" "$@"
}

failed=()
# ZKLOCK_SUITES picks suites for a quicker run, e.g. "pg_regress isolation".
wanted()
{
	case " ${ZKLOCK_SUITES:-pg_regress isolation TAP package} " in
		*" $1 "*) return 0 ;;
		*) return 1 ;;
	esac
}

suite()
{
	local name=$1
	shift
	wanted "$name" || return 0
	echo "== $name"
	if ! as_postgres make -C "$work/tree" -s "$@"; then
		failed+=("$name")
		for diffs in "$work"/tree/regression.diffs "$work"/tree/output_iso/regression.diffs; do
			[ -f "$diffs" ] && cat "$diffs"
		done
	fi
	return 0
}

temp_opts="--temp-instance=$work/tmp_instance --temp-config=$work/regress.conf"
suite "pg_regress" installcheck ISOLATION= TAP_TESTS= EXTRA_REGRESS_OPTS="$temp_opts"
suite "isolation" installcheck REGRESS= TAP_TESTS= EXTRA_REGRESS_OPTS="$temp_opts"
# Every session of those suites has ended: no lock node may be left.
echo "== ZooKeeper tree after pg_regress and isolation"
leftover=$(/usr/bin/python3 "$ZKLOCK_SRC/test/zk/zktree.py" "$hosts" /zklock_regress | awk -F'\t' '$2 != "0x0"')
if [ -n "$leftover" ]; then
	echo "ephemeral nodes left behind:"
	echo "$leftover"
	failed+=("leftover nodes")
else
	echo "   no ephemeral node left"
fi

suite "TAP" installcheck REGRESS= ISOLATION= PROVE_FLAGS="--timer"

# The Debian package: built, installed over what `make install` put there,
# and pg_regress run again against the packaged files.
if wanted package; then
	echo "== building and installing the Debian package"
	if bash "$ZKLOCK_SRC/test/package.sh" "$work/debs" &&
		dpkg -S "$(pg_config --pkglibdir)/zklock.so" | grep -q '^postgresql-15-zklock:'; then
		suite "package" installcheck ISOLATION= TAP_TESTS= EXTRA_REGRESS_OPTS="$temp_opts"
	else
		failed+=("package build")
	fi
fi

if [ ${#failed[@]} -gt 0 ]; then
	echo "== FAILED: ${failed[*]}"
	for log in "$work"/tree/tmp_check/log/*; do
		[ -f "$log" ] && { echo "--- $log"; tail -n 80 "$log"; }
	done
	exit 1
fi
echo "== all test suites passed"
