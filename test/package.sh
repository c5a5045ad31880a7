#!/bin/bash
# Builds the Debian package of zklock (postgresql-NN-zklock) from this tree
# with dpkg-buildpackage, installs it, and checks that its files are where
# PostgreSQL looks for them.  As root, on a fresh Debian 12 machine, or in a
# chroot of another Debian release (test/majors.sh).
#
#   bash test/package.sh [OUTDIR]
#
# It builds for every PostgreSQL major whose server headers are installed
# (pg_buildext's "installed", within debian/pgversions), or for the majors in
# $ZKLOCK_PACKAGE_MAJORS: postgresql-15-zklock on Debian 12.
#
# The .deb files are copied to OUTDIR (or $ZKLOCK_DEB_DIR, or a new
# /tmp/zklock-deb.XXXXXX); the last line printed is the path of the installed
# .deb (one line per major).  The regression tests are not run here: the
# package build cannot run them (they need ZooKeeper), test/suites.sh runs
# them against the installed package.  Exits non-zero on any failure.
set -euo pipefail

# ZKLOCK_SRC, zklock_packages, zklock_install_packages and zklock_copy_tree.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

if [ "$(id -u)" -ne 0 ]; then
	echo "run this as root: it installs packages" >&2
	exit 1
fi

# What the build and the tests need, plus the packaging tools.
zklock_packages+=(dpkg-dev debhelper postgresql-server-dev-all)
zklock_install_packages

outdir=${1:-${ZKLOCK_DEB_DIR:-}}
if [ -z "$outdir" ]; then
	outdir=$(mktemp -d /tmp/zklock-deb.XXXXXX)
fi
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)

work=$(mktemp -d /tmp/zklock-pkg.XXXXXX)
trap 'rm -rf "$work"' EXIT

version=$(dpkg-parsechangelog -l "$ZKLOCK_SRC/debian/changelog" -S Version)
arch=$(dpkg --print-architecture)
# dpkg-buildpackage writes its products next to the tree it builds: build in
# a copy inside $work, so that nothing lands next to the checkout.
tree=$work/zklock-${version%-*}
mkdir "$tree"

echo "== copying the tree to $tree"
zklock_copy_tree "$tree"

# pg_buildext (here and in debian/rules) builds for the majors that
# PG_SUPPORTED_VERSIONS names and debian/pgversions lists.
export PG_SUPPORTED_VERSIONS=${ZKLOCK_PACKAGE_MAJORS:-installed}
majors=$(cd "$tree" && pg_buildext supported-versions)
if [ -z "$majors" ]; then
	echo "no PostgreSQL major both in debian/pgversions and installed here" >&2
	exit 1
fi
# debian/control, generated from control.in, names one package per major:
# the committed one is Debian 12's (postgresql-15-zklock).  For other majors
# generate it in the copy; the build would refuse a stale one.
listed=$(sed -n 's/^Package: postgresql-\([0-9]*\)-zklock$/\1/p' "$tree/debian/control")
if [ "$(echo $listed)" != "$(echo $majors)" ]; then
	echo "== debian/control for PostgreSQL $(echo $majors) (the committed one is for $(echo $listed))"
	(cd "$tree" && pg_buildext updatecontrol) >/dev/null
fi

echo "== dpkg-buildpackage -us -uc -b (PostgreSQL $(echo $majors))"
if ! (cd "$tree" && dpkg-buildpackage -us -uc -b) >"$work/build.log" 2>&1; then
	cat "$work/build.log"
	echo "== package build FAILED" >&2
	exit 1
fi
# WERROR=1 (debian/rules) makes compiler warnings errors; no other tool of
# the build may warn either.
if grep -i 'warning:' "$work/build.log"; then
	echo "== the package build printed warnings" >&2
	exit 1
fi
cp "$work"/*.deb "$outdir/"

debs=()
for v in $majors; do
	pkg=postgresql-$v-zklock
	deb=$outdir/${pkg}_${version}_${arch}.deb
	if [ ! -f "$deb" ]; then
		echo "$deb was not built; built: $(ls "$work"/*.deb)" >&2
		exit 1
	fi
	dpkg-deb -I "$deb" control | sed 's/^/   /'
	debs+=("$deb")
done

echo "== installing ${debs[*]}"
# apt-get, not dpkg -i, so that the dependencies (libzookeeper-st2, the
# server) are resolved; --reinstall, so that a rebuilt package of the same
# version replaces the installed one.
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --reinstall --no-install-recommends "${debs[@]}" >"$work/install.log" 2>&1 ||
	{ cat "$work/install.log"; exit 1; }

for v in $majors; do
	pkg=postgresql-$v-zklock
	pg_config=/usr/lib/postgresql/$v/bin/pg_config
	pkglibdir=$("$pg_config" --pkglibdir)
	extdir=$("$pg_config" --sharedir)/extension

	status=$(dpkg-query -W -f='${Status} ${Version}' "$pkg")
	if [ "$status" != "install ok installed $version" ]; then
		echo "$pkg: $status, expected version $version installed" >&2
		exit 1
	fi

	echo "== checking the files of $pkg"
	listed=$(dpkg -L "$pkg")
	expected=("$pkglibdir/zklock.so" "$extdir/zklock.control")
	for sql in "$tree"/sql/zklock--*.sql; do
		expected+=("$extdir/$(basename "$sql")")
	done
	for f in "${expected[@]}"; do
		if ! grep -qxF "$f" <<<"$listed"; then
			echo "$pkg does not install $f" >&2
			exit 1
		fi
		if [ ! -f "$f" ]; then
			echo "$f is missing after installing $pkg" >&2
			exit 1
		fi
		echo "   $f"
	done
	# Every page of the manual is in the package's documentation
	# (dh_compress may have gzipped it).
	docdir=/usr/share/doc/$pkg
	for doc in "$tree"/README.md "$tree"/docs/*.md; do
		name=$(basename "$doc")
		if ! grep -qxF -e "$docdir/$name" -e "$docdir/$name.gz" <<<"$listed"; then
			echo "$pkg does not install $docdir/$name" >&2
			exit 1
		fi
		echo "   $docdir/$name"
	done
	# The README's Debian 12 instructions name this package and its scripts.
	if [ "$v" = 15 ]; then
		grep -qF "${pkg}_${version}_${arch}.deb" "$tree/README.md" ||
			{ echo "README.md does not name ${pkg}_${version}_${arch}.deb" >&2; exit 1; }
		for sql in "$tree"/sql/zklock--*--*.sql; do
			step=$(basename "$sql" .sql)
			step=${step#zklock--}
			grep -qF "${step%--*}→${step#*--}" "$tree/README.md" ||
				{ echo "README.md does not list the update ${step%--*}→${step#*--} of $pkg" >&2; exit 1; }
		done
	fi
	# The installed scripts and control file are this tree's.
	for f in "$tree"/zklock.control "$tree"/sql/zklock--*.sql; do
		cmp -s "$f" "$extdir/$(basename "$f")" ||
			{ echo "$extdir/$(basename "$f") differs from ${f#"$tree"/}" >&2; exit 1; }
	done
	# The module finds the ZooKeeper client it was linked with.
	libs=$(ldd "$pkglibdir/zklock.so")
	if grep -q 'not found' <<<"$libs" || ! grep -q 'libzookeeper_st\.so\.[0-9]* => /' <<<"$libs"; then
		echo "$pkglibdir/zklock.so: unresolved libraries:" >&2
		echo "$libs" >&2
		exit 1
	fi
done

echo "== installed: ${debs[*]}"
printf '%s\n' "${debs[@]}"
