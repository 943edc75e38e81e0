#!/usr/bin/env bash
# Builds rogue-watchdog_<version>_<arch>.deb with dh-virtualenv (docs/install.md).
# The build runs in a copy of the checkout's tracked files, so nothing is written beside
# the checkout; the .deb lands in OUT_DIR (default: dist/).
#   scripts/build-deb.sh [OUT_DIR] [VERSION]
# VERSION (default: debian/changelog's) is for rebuilding a newer package from one tree.
# Needs: dpkg-dev, debhelper, dh-virtualenv, python3-venv; pip must reach an index that
# holds requirements.lock's pinned files (their hashes are checked).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-dist}")
version=${2:-}
mkdir -p "$out"
work=$(mktemp -d /var/tmp/rogue-watchdog-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir "$work/src"
git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$work/src"
cd "$work/src"
if [ -n "$version" ]; then
  sed -i "1s/^rogue-watchdog ([^)]*)/rogue-watchdog ($version)/" debian/changelog
fi
dpkg-buildpackage -us -uc -b >"$work/build.log" 2>&1 || { tail -50 "$work/build.log" >&2; exit 1; }
cp "$work"/rogue-watchdog_*.deb "$out/"
ls "$out"/rogue-watchdog_*.deb
