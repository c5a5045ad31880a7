#!/bin/bash
# Runs zklock's test suites (test/suites.sh) for a PostgreSQL major that
# Debian 12 does not ship, in a chroot of the Debian release that does.  As
# root, on Debian 12; test/run-all.sh calls it once per major.
#
#   bash test/majors.sh SUITE MAJOR HOSTS
#
# With ZKLOCK_PREPARE_ONLY=1 it only makes the chroot or brings it up to
# date (HOSTS is not used).
#
# SUITE is a key of chroot_packages below (trixie, sid, experimental); HOSTS
# is the ZooKeeper that pg_regress and the isolation specs use: it runs on
# the host, which the chroot reaches over the shared loopback.
#
# The chroots are made with debootstrap from the mirror apt uses here and kept
# in /var/cache/zklock/chroots/SUITE (or $ZKLOCK_CHROOT_CACHE/SUITE): a later
# run reuses them and only installs what the list below gained since, without
# downloading anything otherwise.  Delete a directory to have it made afresh
# (sid and experimental move: that is how to test against their newest
# packages).  proc (and a tmpfs on /dev/shm) is mounted in the chroot only
# while this script uses it, and everything mounted below the chroot is
# unmounted when it exits, whichever way.
#
# Results go to $ZKLOCK_RESULTS as test/suites.sh writes them, with one more
# line for the chroot itself.  Exits non-zero if any part failed.
set -euo pipefail

# ---- The chroots: what each one is and what is installed in it ----------
#
# Every chroot builds zklock with -Werror and its Debian package, and runs
# pg_regress and the isolation specs.  Where TAP tests run (test/run-all.sh's
# subsets: on sid, PostgreSQL 18, and on experimental, 19) the chroot also
# needs what they start or talk to: ZooKeeper itself (java), Kazoo,
# IPC::Run; on sid also gdb (056 forces an order with it).  The scripts
# that need more are in neither subset: the Java clients of 020 and 078
# (default-jdk-headless, libcurator-recipes-java, libslf4j-java: the JDK
# alone is 351 MB to download), PgBouncer (021), pg_cron (023);
# ZKLOCK_CHROOT_EXTRA="PACKAGE..." installs more for a run of those.
# Extend these lists here: a cached chroot gets what it lacks on its next
# use.
build_packages=(build-essential make gcc libc6-dev libzookeeper-st-dev
	dpkg-dev debhelper postgresql-server-dev-all)
# What any TAP test needs (a ZooKeeper server, Kazoo to read its tree).
tap_packages=(zookeeper python3 python3-kazoo libipc-run-perl)
declare -A chroot_release=(
	[trixie]=trixie
	[sid]=sid
	[experimental]=sid
)
# Experimental holds only what is newer than sid: add it to sid's sources.
declare -A chroot_extra_suite=(
	[experimental]=experimental
)
# A chroot made as a copy of another when that one exists: sid's packages
# are most of experimental's, so the copy spares a debootstrap and most
# downloads (about 4 of 12 minutes on a new machine).
declare -A chroot_copy_of=(
	[experimental]=sid
)
declare -A chroot_packages=(
	[trixie]="${build_packages[*]} postgresql-17 postgresql-server-dev-17"
	[sid]="${build_packages[*]} postgresql-18 postgresql-server-dev-18
		${tap_packages[*]} gdb"
	# Named with /experimental: `apt-get -t experimental` would upgrade
	# everything it can from there, down to an uninstallable perl.
	[experimental]="${build_packages[*]} postgresql-19/experimental
		postgresql-client-19/experimental postgresql-server-dev-19/experimental
		libpq-dev/experimental libpq5/experimental ${tap_packages[*]}"
)

# --------------------------------------------------------------------------

suite=${1:?usage: majors.sh SUITE MAJOR HOSTS}
major=${2:?usage: majors.sh SUITE MAJOR HOSTS}
hosts=${3:?usage: majors.sh SUITE MAJOR HOSTS}
if [ -z "${chroot_release[$suite]:-}" ]; then
	echo "unknown chroot $suite; known: ${!chroot_release[*]}" >&2
	exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "run this as root: it makes chroots and mounts proc in them" >&2
	exit 1
fi

ZKLOCK_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
results=${ZKLOCK_RESULTS:-/dev/null}
cache=${ZKLOCK_CHROOT_CACHE:-/var/cache/zklock/chroots}
dir=$cache/$suite
where="$suite chroot"

# The mirror apt uses here (the first URIs of the deb822 sources), so that
# the chroots come from the same place; Debian's own if there is none.
mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)
mirror=${mirror:-http://deb.debian.org/debian}

export DEBIAN_FRONTEND=noninteractive

# Everything mounted below $dir (and $dir.new, a chroot being made), deepest
# first.  Only this run mounts there: it holds the chroot's lock.
mounts_below()
{
	awk -v a="$dir/" -v b="$dir.new/" \
		'index($5, a) == 1 || index($5, b) == 1 { print $5 }' /proc/self/mountinfo | sort -r
}

# Processes whose root is in the chroot: only this run starts any there.
chroot_pids()
{
	local p root
	for p in /proc/[0-9]*; do
		root=$(readlink "$p/root" 2>/dev/null) || continue
		case "$root" in
			"$dir" | "$dir"/* | "$dir.new" | "$dir.new"/*) echo "${p#/proc/}" ;;
		esac
	done
}

cleanup()
{
	local pids m i
	# A suite interrupted midway can leave servers running in the chroot
	# (PostgreSQL, ZooKeeper); they hold the proc mount.  TERM, then KILL.
	pids=$(chroot_pids)
	if [ -n "$pids" ]; then
		echo "== stopping what is left in the $suite chroot: $(echo $pids)"
		kill $pids 2>/dev/null || true
		for i in $(seq 1 50); do
			pids=$(chroot_pids)
			[ -z "$pids" ] && break
			sleep 0.2
		done
		if [ -n "$pids" ]; then kill -KILL $pids 2>/dev/null || true; sleep 0.5; fi
	fi
	for m in $(mounts_below); do
		umount "$m" 2>/dev/null || { sleep 1; umount "$m" 2>/dev/null; } || umount -l "$m" || true
	done
	if [ -n "$(mounts_below)" ]; then
		echo "could not unmount: $(mounts_below)" >&2
	fi
	if [ -n "${inside:-}" ]; then rm -rf "${dir:?}$inside"; fi
}

# One run at a time per chroot: two would install into the same server.
mkdir -p "$cache"
exec {lock_fd}>"$dir.lock"
if ! flock -n "$lock_fd"; then
	echo "== waiting for another run that uses the $suite chroot"
	flock "$lock_fd"
fi
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

in_chroot()
{
	chroot "$dir" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
		LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}

record()
{
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$major" "$where" chroot "$1" "$2" "$3" >>"$results"
}

# ---- The chroot: made once, then reused ----------------------------------
start=$SECONDS
made=""
if [ ! -d "$dir" ]; then
	rm -rf "$dir.new"
	base=${chroot_copy_of[$suite]:-}
	if [ -n "$base" ] && [ -d "$cache/$base" ]; then
		echo "== making the $suite chroot in $dir (a copy of the $base chroot)"
		# Under the other chroot's lock: nothing is mounted in it then.
		exec {base_fd}>"$cache/$base.lock"
		flock "$base_fd"
		if ! cp -a "$cache/$base" "$dir.new"; then
			record FAILED "copying the $base chroot failed" $((SECONDS - start))
			exit 1
		fi
		exec {base_fd}>&-
		made="a copy of $base"
	else
		echo "== making the $suite chroot in $dir (debootstrap ${chroot_release[$suite]}, $mirror)"
		command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
		if ! debootstrap --variant=minbase "${chroot_release[$suite]}" "$dir.new" "$mirror" >"$cache/$suite.debootstrap.log" 2>&1; then
			tail -n 30 "$cache/$suite.debootstrap.log"
			record FAILED "debootstrap ${chroot_release[$suite]} failed" $((SECONDS - start))
			exit 1
		fi
		made="made"
	fi
	# Package scripts must not start services (PostgreSQL's "main"
	# cluster, ZooKeeper): the tests start their own.
	printf '#!/bin/sh\nexit 101\n' >"$dir.new/usr/sbin/policy-rc.d"
	chmod 755 "$dir.new/usr/sbin/policy-rc.d"
	# sid's and experimental's Release files can be past their Valid-Until
	# on the archive this machine reaches.
	echo 'Acquire::Check-Valid-Until "false";' >"$dir.new/etc/apt/apt.conf.d/99zklock"
	if [ -n "${chroot_extra_suite[$suite]:-}" ]; then
		echo "deb $mirror ${chroot_extra_suite[$suite]} main" >"$dir.new/etc/apt/sources.list.d/zklock.list"
	fi
	# Complete, so a later run may use it.
	mv "$dir.new" "$dir"
fi

mount -t proc proc "$dir/proc"
# PostgreSQL's dynamic shared memory (POSIX, as on any Debian system) lives
# in /dev/shm, which a chroot's /dev does not mount.
mount -t tmpfs -o mode=1777,size=512m tmpfs "$dir/dev/shm"

# What the list names and the chroot lacks (an empty list once cached).
missing=()
for p in ${chroot_packages[$suite]} ${ZKLOCK_CHROOT_EXTRA:-}; do
	name=${p%/*}
	if ! in_chroot dpkg-query -W -f='${Status}' "$name" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
# An install that an earlier run left half done (interrupted) is finished
# in the same apt-get run (-f).
broken=$(in_chroot dpkg --audit 2>&1 || true)
if [ ${#missing[@]} -gt 0 ] || [ -n "$broken" ]; then
	echo "== installing in the $suite chroot: ${missing[*]:-}${broken:+ (and finishing an interrupted install)}"
	{ in_chroot dpkg --configure -a || true; } >"$cache/$suite.apt.log" 2>&1
	if ! { in_chroot apt-get update -qq &&
		in_chroot apt-get install -y -q -f --no-install-recommends "${missing[@]}"; } \
		>>"$cache/$suite.apt.log" 2>&1; then
		tail -n 40 "$cache/$suite.apt.log"
		record FAILED "apt-get install failed" $((SECONDS - start))
		exit 1
	fi
	made="${made:+$made, }${#missing[@]} packages installed"
fi
# Made in the background beforehand (test/run-all.sh): said there.
if [ -n "${ZKLOCK_PREPARE_ONLY:-}" ] || [ -n "$made" ]; then
	record ok "${made:-cached}" $((SECONDS - start))
fi
if [ -n "${ZKLOCK_PREPARE_ONLY:-}" ]; then
	exit 0
fi

# ---- The suites, on a copy of this tree ----------------------------------
inside=$(in_chroot mktemp -d /tmp/zklock-src.XXXXXX)
(
	source "$ZKLOCK_SRC/test/setup.sh"
	zklock_copy_tree "$dir$inside/tree"
)
status=0
in_chroot env ZKLOCK_IN_CHROOT=1 ZKLOCK_WHERE="$where" ZKLOCK_RESULTS="$inside/results" \
	ZKLOCK_SUITES="${ZKLOCK_SUITES:-pg_regress isolation TAP package}" \
	ZKLOCK_TAP_TESTS="${ZKLOCK_TAP_TESTS:-}" \
	KEEP_TEST_DIR="${KEEP_TEST_DIR:-}" \
	bash "$inside/tree/test/suites.sh" "$major" "$hosts" || status=$?
if [ -f "$dir$inside/results" ]; then
	cat "$dir$inside/results" >>"$results"
fi
exit $status
