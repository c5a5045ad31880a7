#!/bin/bash
# Everything zklock needs on a fresh Debian 12 machine, as root: packages,
# a warning-free build, and the installed extension.  Sourced or run by
# test/run-all.sh and demo/run.sh; safe to run again.
set -euo pipefail

ZKLOCK_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH=/usr/lib/postgresql/15/bin:$PATH

zklock_packages=(
	build-essential
	postgresql-15
	postgresql-server-dev-15
	libzookeeper-mt-dev
	zookeeper
	libipc-run-perl
	python3-kazoo
	libcurator-recipes-java
	openjdk-17-jdk-headless
	pgbouncer
	postgresql-15-cron
)

zklock_install_packages()
{
	local missing=()
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
