#!/bin/bash
# The whole zklock test suite, on a fresh Debian 12 machine, as root: for
# every PostgreSQL major below, builds zklock with -Werror, installs it and
# runs pg_regress, the isolation specs, the TAP tests (on 15 also the
# randomized fault run, test/nemesis.sh) and the Debian package checks
# against ZooKeeper servers it starts on 127.0.0.1, and stops
# everything it started.  PostgreSQL 15 runs natively; the others in chroots
# of the Debian releases that ship them (test/majors.sh), made on first use
# and cached.  Prints a summary per major; exit status 0 only if every part
# passed.
#
# ZKLOCK_MAJORS and ZKLOCK_SUITES pick majors and suites for a quicker run,
# e.g. ZKLOCK_MAJORS=15 ZKLOCK_SUITES="pg_regress isolation" (the suites:
# pg_regress, isolation, TAP, nemesis, package).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

# What runs where: major, where (native, or the chroot of test/majors.sh),
# suites.  The TAP suite runs on 15 and on the newest stable major.
matrix=(
	"15 native       pg_regress isolation TAP nemesis package"
	"17 trixie       pg_regress isolation package"
	"18 sid          pg_regress isolation TAP package"
	"19 experimental pg_regress isolation TAP package"
)
# Majors whose TAP run is only these scripts, what has code paths of its
# own there at run time; 15 runs every script.  On both: shared memory, the
# session worker and its dynamic area, the LWLock tranche, the executor and
# utility hooks, signal handlers, the lock manager's blocking data, a
# background worker's restart, and the crash restart.  On 18, the newest
# stable major, also a backend's exit (before_shmem_exit), the PL/pgSQL
# plugin and commits in procedures (058), backend crashes and a standby.
# The long fault and load runs exercise the session worker's, ZooKeeper's
# and the detector's paths, which are the same on every major.
declare -A tap_subset=(
	[18]="test/tap/003_kill9.pl test/tap/007_stats.pl test/tap/015_backend_crashes.pl test/tap/022_standby.pl test/tap/030_deadlock.pl test/tap/039_server_session.pl test/tap/041_revocation.pl test/tap/050_worker_sigterm.pl test/tap/056_exit_in_transaction.pl test/tap/058_revocation_commit_paths.pl"
	[19]="test/tap/003_kill9.pl test/tap/007_stats.pl test/tap/030_deadlock.pl test/tap/039_server_session.pl test/tap/041_revocation.pl test/tap/050_worker_sigterm.pl"
)

# The TAP scripts for a major (empty: all of them).
tap_tests()
{
	echo "${tap_subset[$1]:-}"
}

if [ "$(id -u)" -ne 0 ]; then
	echo "run this as root: it installs packages, the extension and chroots" >&2
	exit 1
fi

wanted_major()
{
	case " ${ZKLOCK_MAJORS:-15 17 18 19} " in
		*" $1 "*) return 0 ;;
		*) return 1 ;;
	esac
}

# The host runs ZooKeeper for every major (the chroots reach it over the
# shared loopback) and checks its tree with Kazoo; debootstrap makes chroots.
for entry in "${matrix[@]}"; do
	read -r major where _ <<<"$entry"
	if wanted_major "$major" && [ "$where" != native ]; then
		zklock_packages+=(debootstrap)
		break
	fi
done
zklock_install_packages

work=$(mktemp -d /tmp/zklock-test.XXXXXX)
results=$work/results
: >"$results"
zkdir=""
cleanup()
{
	if [ -n "${prepare_pid:-}" ] && kill -0 "$prepare_pid" 2>/dev/null; then
		# majors.sh unmounts what it mounted when it is terminated.
		pkill -TERM -P "$prepare_pid" || true
		kill "$prepare_pid" 2>/dev/null || true
		wait "$prepare_pid" 2>/dev/null || true
	fi
	if [ -n "$zkdir" ]; then "$ZKLOCK_SRC/test/zk/zkctl" stop "$zkdir" || true; fi
	if [ "${KEEP_TEST_DIR:-}" = "" ]; then rm -rf "$work"; fi
}
trap cleanup EXIT

record()
{
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$results"
}

# One major: a fresh ZooKeeper for its pg_regress and isolation runs, the
# suites, and then the check that no lock node outlived its session.
run_major()
{
	local major=$1 where=$2 suites=$3 hosts leftover label status=0 start=$SECONDS
	zkdir=$work/zk-$major
	echo "== starting ZooKeeper for PostgreSQL $major"
	hosts=$("$ZKLOCK_SRC/test/zk/zkctl" start "$zkdir")
	echo "   $hosts"
	if [ "$where" = native ]; then
		label="$(. /etc/os-release && echo "$VERSION_CODENAME") (native)"
		ZKLOCK_RESULTS=$results ZKLOCK_WHERE=$label ZKLOCK_SUITES=$suites \
			ZKLOCK_TAP_TESTS=$(tap_tests "$major") \
			bash "$ZKLOCK_SRC/test/suites.sh" "$major" "$hosts" || status=$?
	else
		label="$where chroot"
		ZKLOCK_RESULTS=$results ZKLOCK_SUITES=$suites \
			ZKLOCK_TAP_TESTS=$(tap_tests "$major") \
			bash "$ZKLOCK_SRC/test/majors.sh" "$where" "$major" "$hosts" || status=$?
	fi
	# Every session of those suites has ended: no lock node may be left.
	echo "== ZooKeeper tree after PostgreSQL $major"
	if ! leftover=$(/usr/bin/python3 "$ZKLOCK_SRC/test/zk/zktree.py" "$hosts" /zklock_regress | awk -F'\t' '$2 != "0x0"'); then
		record "$major" "$label" "no node left" FAILED "could not read the tree" 0
	elif [ -n "$leftover" ]; then
		echo "ephemeral nodes left behind:"
		echo "$leftover"
		record "$major" "$label" "no node left" FAILED "$(echo "$leftover" | wc -l) ephemeral nodes left" 0
	else
		echo "   no ephemeral node left"
		record "$major" "$label" "no node left" ok "0 ephemeral nodes left" 0
	fi
	"$ZKLOCK_SRC/test/zk/zkctl" stop "$zkdir" || true
	zkdir=""
	major_time[$major]=$((${major_time[$major]:-0} + SECONDS - start))
	if [ $status -ne 0 ] && ! awk -F'\t' -v m="$major" '$1 == m && $4 != "ok"' "$results" | grep -q .; then
		# Failed before it could say what failed.
		record "$major" "$label" "run" FAILED "exit status $status" 0
	fi
}

# The suites of an entry of the matrix that ZKLOCK_SUITES selects.
selected_suites()
{
	local s selected=""
	for s in "$@"; do
		case " ${ZKLOCK_SUITES:-pg_regress isolation TAP nemesis package} " in
			*" $s "*) selected+="$s " ;;
		esac
	done
	echo "$selected"
}

# The chroots are made (or brought up to date) while the checks of the
# manual and the sources, the simulation and the native major's parts that
# do not time anything closely run (its build, pg_regress, isolation and
# the TAP scripts that run two at a time): test/suites.sh
# waits for $ZKLOCK_BUSY_PID to end before its other parts.  Making them
# takes minutes, mostly of downloads and package scripts.
prepare_pid=""
prepare_done=""

# The majors of the run that are in a chroot, "major where" a line.
chroot_majors()
{
	local entry major where suites
	for entry in "${matrix[@]}"; do
		read -r major where suites <<<"$entry"
		if wanted_major "$major" && [ "$where" != native ] &&
			[ -n "$(selected_suites $suites)" ]; then
			echo "$major $where"
		fi
	done
}

prepare_chroots()
{
	local major where
	while read -r major where; do
		ZKLOCK_RESULTS=$results ZKLOCK_PREPARE_ONLY=1 \
			bash "$ZKLOCK_SRC/test/majors.sh" "$where" "$major" - </dev/null || true
	done < <(chroot_majors)
}

declare -A major_time=()
run_start=$SECONDS

if [ -n "$(chroot_majors)" ]; then
	echo "== making the chroots in the background ($work/prepare.log)"
	prepare_chroots >"$work/prepare.log" 2>&1 &
	prepare_pid=$!
fi

# The manual, once, against the code (test/docs_check.py says what it
# checks).
echo "== the manual"
docs_status=ok
docs_out=$(/usr/bin/python3 "$ZKLOCK_SRC/test/docs_check.py" 2>&1) || docs_status=FAILED
echo "$docs_out"
record - "(any)" manual "$docs_status" "$(echo "$docs_out" | tail -1 | sed 's/^docs: //')" 0

# The sources: their files depend on each other one way only.
echo "== the sources"
src_status=ok
src_out=$(/usr/bin/python3 "$ZKLOCK_SRC/test/src_graph.py" 2>&1) || src_status=FAILED
echo "$src_out"
record - "(any)" "source graph" "$src_status" "$(echo "$src_out" | head -1 | sed 's/^src: //')" 0

# The commit guard's proof policy (src/worker_proof.c) under 100,000
# simulated schedules and its mutants (test/sim: no PostgreSQL, no
# ZooKeeper; docs/testing.md, "The proof simulation").
echo "== the proof simulation"
sim_status=ok
sim_start=$SECONDS
sim_out=$(make -s -C "$ZKLOCK_SRC/test/sim" check 2>&1) || sim_status=FAILED
echo "$sim_out" | grep -E '^(#|ok|not ok|[0-9]+ passed)'
[ "$sim_status" = ok ] || echo "$sim_out" | grep -vE '^(#|ok|not ok|[0-9]+ passed)' | tail -300
record - "(any)" "proof simulation" "$sim_status" "$(echo "$sim_out" | tail -1)" $((SECONDS - sim_start))
for entry in "${matrix[@]}"; do
	read -r major where suites <<<"$entry"
	wanted_major "$major" || continue
	selected=$(selected_suites $suites)
	if [ "$where" != native ] && [ -n "$prepare_pid" ] && [ -z "$prepare_done" ]; then
		wait "$prepare_pid" || true
		prepare_done=1
		echo "== the chroots ($work/prepare.log)"
		cat "$work/prepare.log"
	fi
	if [ -n "$selected" ]; then
		if [ -n "$prepare_done" ]; then busy=""; else busy=$prepare_pid; fi
		ZKLOCK_BUSY_PID=$busy run_major "$major" "$where" "$selected"
	fi
done

mmss()
{
	printf '%dm%02ds' $(($1 / 60)) $(($1 % 60))
}

echo
echo "== summary"
printf '%-5s %-18s %-22s %-7s %-9s %s\n' major where part result time counts
while IFS=$'\t' read -r major where part status counts seconds; do
	printf '%-5s %-18s %-22s %-7s %-9s %s\n' "$major" "$where" "$part" "$status" "$(mmss "$seconds")" "$counts"
done <"$results"
for entry in "${matrix[@]}"; do
	read -r major _ <<<"$entry"
	if [ -n "${major_time[$major]:-}" ]; then
		printf 'PostgreSQL %s: %s\n' "$major" "$(mmss "${major_time[$major]}")"
	fi
done
printf 'total: %s\n' "$(mmss $((SECONDS - run_start)))"

if awk -F'\t' '$4 != "ok"' "$results" | grep -q .; then
	echo "== FAILED: $(awk -F'\t' '$4 != "ok" { printf "%s%s %s", sep, $1, $3; sep = ", " }' "$results")"
	exit 1
fi
echo "== all test suites passed"
