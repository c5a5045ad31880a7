#!/bin/bash
# Everything zklock needs on a fresh Debian 12 machine, as root: packages,
# a warning-free build, and the installed extension.  Sourced or run by
# test/run-all.sh and demo/run.sh; safe to run again.
set -euo pipefail

ZKLOCK_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The PostgreSQL major to build and test: Debian 12's, unless test/majors.sh
# runs us in a chroot of a Debian release that ships another one.
ZKLOCK_PG_MAJOR=${ZKLOCK_PG_MAJOR:-15}
export PATH=/usr/lib/postgresql/$ZKLOCK_PG_MAJOR/bin:$PATH

zklock_packages=(
	build-essential
	postgresql-15
	postgresql-server-dev-15
	libzookeeper-st-dev
	libzookeeper-mt2
	zookeeper
	libipc-run-perl
	gdb
	python3-kazoo
	patroni
	libcurator-recipes-java
	openjdk-17-jdk-headless
	pgbouncer
	postgresql-15-cron
)

zklock_install_packages()
{
	local missing=()
	# In a chroot, test/majors.sh installed that release's packages from its
	# own list (these names are Debian 12's).
	if [ -n "${ZKLOCK_IN_CHROOT:-}" ]; then
		return 0
	fi
	for p in "${zklock_packages[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		echo "== installing packages: ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	fi
}

# Copies the tree to DEST (a new or empty directory) without build products:
# in a git checkout the work tree as it is, committed or not (tracked files
# unless deleted, and new files that .gitignore does not exclude), so that no
# stale src/*.o of the checkout is taken for up to date; otherwise
# everything (the copy's users clean it before building).
zklock_copy_tree()
{
	local dest=$1
	mkdir -p "$dest"
	if command -v git >/dev/null &&
		git -C "$ZKLOCK_SRC" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
		(
			cd "$ZKLOCK_SRC"
			git ls-files -z --cached --others --exclude-standard |
				while IFS= read -r -d '' f; do
					if [ -e "$f" ] || [ -L "$f" ]; then
						printf '%s\0' "$f"
					fi
				done |
				tar --null -T - -cf -
		) | tar -C "$dest" -xf -
	else
		cp -a "$ZKLOCK_SRC/." "$dest"
	fi
}

zklock_build_install()
{
	echo "== building and installing zklock"
	make -C "$ZKLOCK_SRC" -s clean
	make -C "$ZKLOCK_SRC" -s WERROR=1
	make -C "$ZKLOCK_SRC" -s install >/dev/null
}

zklock_setup()
{
	if [ "$(id -u)" -ne 0 ]; then
		echo "run this as root: it installs packages and the extension" >&2
		exit 1
	fi
	zklock_install_packages
	zklock_build_install
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	zklock_setup
fi
