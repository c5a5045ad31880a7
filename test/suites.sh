#!/bin/bash
# Builds zklock for one PostgreSQL major, installs it and runs the test
# suites against a ZooKeeper that the caller started.  As root, on Debian 12
# (test/run-all.sh, major 15) or in a chroot of another Debian release
# (test/majors.sh); the packages must be installed already.
#
#   bash test/suites.sh MAJOR HOSTS
#
# HOSTS is the connection string of the ZooKeeper for pg_regress and the
# isolation specs (the TAP tests and the nemesis run start their own).
# $ZKLOCK_SUITES picks suites (default "pg_regress isolation TAP package";
# also "nemesis"), $ZKLOCK_TAP_TESTS TAP
# scripts (default all of test/tap).  One line per part is
# appended to $ZKLOCK_RESULTS: major, where, part, result, counts, seconds,
# tab-separated.  Exits non-zero if any part failed.
set -euo pipefail

major=${1:?usage: suites.sh MAJOR HOSTS}
hosts=${2:?usage: suites.sh MAJOR HOSTS}
ZKLOCK_PG_MAJOR=$major
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

results=${ZKLOCK_RESULTS:-/dev/null}
where=${ZKLOCK_WHERE:-native}
pg_config=/usr/lib/postgresql/$major/bin/pg_config
if [ ! -x "$pg_config" ]; then
	echo "PostgreSQL $major is not installed here ($pg_config)" >&2
	exit 1
fi

work=$(mktemp -d /tmp/zklock-test.XXXXXX)
cleanup()
{
	if [ "${KEEP_TEST_DIR:-}" = "" ]; then rm -rf "$work"; fi
}
trap cleanup EXIT

# PostgreSQL refuses to run as root: the tests run as postgres, in a copy of
# the tree that postgres can write to.
tree=$work/tree
zklock_copy_tree "$tree"
chown -R postgres: "$work"
cat > "$work/regress.conf" <<CONF
shared_preload_libraries = 'zklock'
zklock.hosts = '$hosts'
zklock.root = '/zklock_regress'
zklock.session_timeout = 4000
max_prepared_transactions = 2
CONF

# Host names under .zklock.test are answered by a stand-in for DNS, so that
# the tests send no query to a name server.
cc -shared -fPIC -O2 -Wall -Werror -o "$work/fakedns.so" "$tree/test/zk/fakedns.c" -ldl

postgres_home=$(getent passwd postgres | cut -d: -f6)
as_postgres()
{
	runuser -u postgres -- env PATH="$PATH" HOME="$postgres_home" LD_PRELOAD="$work/fakedns.so" "$@"
}

wanted()
{
	case " ${ZKLOCK_SUITES:-pg_regress isolation TAP package} " in
		*" $1 "*) return 0 ;;
		*) return 1 ;;
	esac
}

failed=0
record()
{
	local part=$1 status=$2 counts=$3 seconds=$4
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$major" "$where" "$part" "$status" "$counts" "$seconds" >>"$results"
	if [ "$status" != ok ]; then failed=1; fi
}

# Counts of a pg_regress or pg_isolation_regress run, from its output: 15
# prints "test NAME ... ok", 16 and later "ok N - NAME" (TAP style).
regress_counts()
{
	local log=$1 passed failed_tests
	passed=$(grep -cE '^ok [0-9]+ |^test .* \.\.\. ok ' "$log" || true)
	failed_tests=$(grep -cE '^not ok [0-9]+ |^test .* \.\.\. FAILED' "$log" || true)
	echo "$passed/$((passed + failed_tests)) passed"
}

# Counts of a prove run, from its closing lines ("Files=17, Tests=412, ...").
prove_counts()
{
	local log=$1 files tests bad_files bad_tests
	files=$(sed -n 's/^Files=\([0-9]*\), Tests=\([0-9]*\),.*/\1/p' "$log" | tail -n 1)
	tests=$(sed -n 's/^Files=\([0-9]*\), Tests=\([0-9]*\),.*/\2/p' "$log" | tail -n 1)
	# prove's "Test Summary Report": one line per failed script, "NAME
	# (Wstat: 256 (exited 1) Tests: 20 Failed: 1)".
	bad_files=$(grep -cE '^[^ ]+ +\(Wstat: ' "$log" || true)
	bad_tests=$(sed -n 's/^[^ ]* *(Wstat: .* Failed: \([0-9]*\))$/\1/p' "$log" | awk '{ n += $1 } END { print n + 0 }')
	echo "$((${files:-0} - ${bad_files:-0}))/${files:-0} files, $((${tests:-0} - ${bad_tests:-0}))/${tests:-0} tests passed"
}

# Runs one suite (a make target in the copy, as postgres) and records it.
suite()
{
	local name=$1 kind=$2
	shift 2
	local log=$work/$name.log start=$SECONDS status=ok
	echo "== $name (PostgreSQL $major, $where)"
	if ! as_postgres make -C "$tree" -s PG_CONFIG="$pg_config" "$@" 2>&1 | tee "$log"; then
		status=FAILED
		for diffs in "$tree"/regression.diffs "$tree"/output_iso/regression.diffs; do
			if [ -f "$diffs" ]; then cat "$diffs"; fi
		done
		# The logs of the TAP scripts that failed, named in prove's report.
		for t in $(sed -n '/^Test Summary Report/,$ s/^test\/tap\/\([^ ]*\)\.pl .*/\1/p' "$log"); do
			for f in "$tree"/tmp_check/log/*"$t"*; do
				if [ -f "$f" ]; then echo "--- $f"; tail -n 80 "$f"; fi
			done
		done
	fi
	if [ "$kind" = tap ]; then
		record "$name" "$status" "$(prove_counts "$log")" $((SECONDS - start))
	else
		record "$name" "$status" "$(regress_counts "$log")" $((SECONDS - start))
	fi
	# The next suite starts afresh (pg_regress reuses these names).
	rm -rf "$tree/regression.diffs" "$tree/output_iso/regression.diffs"
}

# Build with -Werror and install, as root (the install).
start=$SECONDS
echo "== building and installing zklock for PostgreSQL $major ($where)"
zk_client=$(dpkg-query -W -f='${Version}' libzookeeper-st2 2>/dev/null || echo unknown)
pg_full=$("$pg_config" --version | sed 's/^PostgreSQL //')
if as_postgres make -C "$tree" -s PG_CONFIG="$pg_config" clean &&
	as_postgres make -C "$tree" -s PG_CONFIG="$pg_config" WERROR=1 &&
	make -C "$tree" -s PG_CONFIG="$pg_config" install >/dev/null; then
	record build ok "PostgreSQL $pg_full, ZooKeeper C client $zk_client" $((SECONDS - start))
else
	record build FAILED "PostgreSQL $pg_full, ZooKeeper C client $zk_client" $((SECONDS - start))
	exit 1
fi

temp_opts="--temp-instance=$work/tmp_instance --temp-config=$work/regress.conf"
if wanted pg_regress; then
	suite pg_regress regress installcheck ISOLATION= TAP_TESTS= EXTRA_REGRESS_OPTS="$temp_opts"
fi
if wanted isolation; then
	suite isolation regress installcheck REGRESS= TAP_TESTS= EXTRA_REGRESS_OPTS="$temp_opts"
fi
# Before a part that times things closely: $ZKLOCK_BUSY_PID (run-all.sh
# making the chroots) must have ended.
wait_until_quiet()
{
	local pid=${ZKLOCK_BUSY_PID:-} start=$SECONDS
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		echo "== waiting for process $pid (the chroots) to end"
		while kill -0 "$pid" 2>/dev/null; do sleep 1; done
		echo "   waited $((SECONDS - start)) s"
	fi
}

if wanted TAP; then
	# $ZKLOCK_TAP_TESTS: only these scripts (test/run-all.sh says which).
	# Most scripts spend their time waiting out session timeouts and
	# stalls, so they run two at a time; a script whose header says "Runs
	# alone" (a bound on elapsed time, hundreds of backends) runs after
	# them, by itself.  Each make run starts tmp_check afresh, after suite
	# has shown the logs of the last one's failures.
	paired=() alone=()
	for t in ${ZKLOCK_TAP_TESTS:-$(cd "$tree" && echo test/tap/*.pl)}; do
		if grep -q '^# Runs alone: ' "$tree/$t"; then alone+=("$t"); else paired+=("$t"); fi
	done
	if [ ${#paired[@]} -gt 0 ]; then
		suite "TAP, two at a time" tap installcheck REGRESS= ISOLATION= \
			PROVE_FLAGS="--timer -j2" PROVE_TESTS="${paired[*]}"
	fi
	if [ ${#alone[@]} -gt 0 ]; then
		wait_until_quiet
		suite "TAP, one at a time" tap installcheck REGRESS= ISOLATION= \
			PROVE_FLAGS="--timer" PROVE_TESTS="${alone[*]}"
	fi
fi

# The randomized fault run (test/nemesis.sh; docs/testing.md, "The nemesis
# run"), on the extension just installed: a fixed seed, a random one (each
# run prints its seed), 3 minutes each, and --broken, which proves the
# checker by finding the overlaps of per-node advisory locks.
if wanted nemesis; then
	wait_until_quiet
	for run in "--seed 7" "" "--broken --seed 3"; do
		start=$SECONDS
		log=$work/nemesis.log
		echo "== nemesis ${run:-(random seed)} (PostgreSQL $major, $where)"
		status=ok
		# shellcheck disable=SC2086
		bash "$tree/test/nemesis.sh" --no-install $run 2>&1 | tee "$log" || status=FAILED
		record "nemesis ${run:-(random seed)}" "$status" \
			"$(sed -n 's/^\[ *[0-9.]*\] zklock nemesis: seed \([0-9]*\),.*/seed \1/p' "$log"), $(grep -m1 -o '^violations: [0-9]*' "$log"), $(grep -m1 '^anomalies:' "$log")" \
			$((SECONDS - start))
	done
fi

# The Debian package: built, installed over what `make install` put there,
# and pg_regress run again against the packaged files.
if wanted package; then
	start=$SECONDS
	echo "== building and installing the Debian package (PostgreSQL $major, $where)"
	pkg=postgresql-$major-zklock
	if ZKLOCK_PACKAGE_MAJORS=$major bash "$ZKLOCK_SRC/test/package.sh" "$work/debs" &&
		dpkg -S "$("$pg_config" --pkglibdir)/zklock.so" | grep -q "^$pkg:"; then
		record package ok "$pkg $(dpkg-query -W -f='${Version}' "$pkg") installed" $((SECONDS - start))
		suite "pg_regress (package)" regress installcheck ISOLATION= TAP_TESTS= EXTRA_REGRESS_OPTS="$temp_opts"
	else
		record package FAILED "$pkg" $((SECONDS - start))
	fi
fi

exit $failed
