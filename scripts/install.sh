#!/usr/bin/env bash
# Installs rogue-watchdog as a system service (docs/install.md):
#   - its own virtual environment at PREFIX (default /opt/rogue-watchdog);
#   - the configuration CONFIG_DIR/config.yaml (default /etc/rogue-watchdog), copied from
#     config/example.yaml only when absent: an existing configuration is never touched;
#   - the systemd unit UNIT_DIR/rogue-watchdog.service, enabled and (re)started;
#   - with the default prefix, /usr/local/bin/rogue-watchdog linking to the venv's command.
# Idempotent: run it again to upgrade. --uninstall removes the venv and the unit and keeps
# the configuration and state (--purge removes those too).
#
# Usage: scripts/install.sh [--prefix DIR] [--config-dir DIR] [--unit-dir DIR]
#                           [--python PY] [--no-enable] [--uninstall [--purge]]
# Environment: PIP_OPTS (extra pip options, e.g. "--no-index --find-links /srv/wheels"),
#              SYSTEMCTL (the systemctl command, default "systemctl").
set -euo pipefail
# The same modes whatever the caller's umask (sudo keeps it; 000 would give a world-
# writable venv and config dir, and the daemon refuses files others can write).
umask 022

REPO=$(cd "$(dirname "$0")/.." && pwd)
PREFIX=/opt/rogue-watchdog
CONFIG_DIR=/etc/rogue-watchdog
UNIT_DIR=/etc/systemd/system
UNIT=rogue-watchdog.service
PY=${PYTHON:-python3}
ENABLE=1
UNINSTALL=0
PURGE=0
SYSTEMCTL=${SYSTEMCTL:-systemctl}
LINK=/usr/local/bin/rogue-watchdog

die() { echo "install: $*" >&2; exit 2; }
say() { echo "install: $*"; }
# A path as the replacement of a sed s|...|...| command: |, & and \ stand for themselves.
sed_repl() { printf '%s' "$1" | sed -e 's/[|&\\]/\\&/g'; }

while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) PREFIX=${2:?--prefix needs a directory}; shift 2 ;;
    --config-dir) CONFIG_DIR=${2:?--config-dir needs a directory}; shift 2 ;;
    --unit-dir) UNIT_DIR=${2:?--unit-dir needs a directory}; shift 2 ;;
    --python) PY=${2:?--python needs an interpreter}; shift 2 ;;
    --no-enable) ENABLE=0; shift ;;
    --uninstall) UNINSTALL=1; shift ;;
    --purge) PURGE=1; shift ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
case "$PREFIX" in /*) ;; *) die "--prefix must be an absolute path" ;; esac
case "$CONFIG_DIR" in /*) ;; *) die "--config-dir must be an absolute path" ;; esac
case "$PREFIX$CONFIG_DIR" in *$'\n'*) die "--prefix and --config-dir must not contain a newline (the unit is line-based)" ;; esac
PREFIX=${PREFIX%/}
CONFIG_DIR=${CONFIG_DIR%/}
CONFIG=$CONFIG_DIR/config.yaml

# systemd is running (sd_booted(3)): only then can the unit be started.
booted() { [ -d /run/systemd/system ] || [ "$SYSTEMCTL" != systemctl ]; }
sc() { $SYSTEMCTL "$@"; }

# The state directory this instance used: the running daemon's (its status says), else
# daemon.state_dir of its configuration, read by the installed code itself; empty when
# neither can be read (then nothing is named as ours, and nothing is purged).
instance_state_dir() {
  local py=$PREFIX/bin/python
  [ -x "$py" ] || return 0
  "$py" - "$CONFIG" <<'PY' 2>/dev/null || true
import os, sys
from rogue_watchdog.config import Config, load_config
from rogue_watchdog.daemon.ipc import StatusError, query_status
config = load_config(sys.argv[1]) if os.path.exists(sys.argv[1]) else Config()
try:
    doc = query_status(config.daemon.socket, timeout_s=2.0)
except StatusError:
    doc = {}
state = doc.get("state_dir")
print(state if isinstance(state, str) and os.path.isabs(state) else config.daemon.state_dir)
PY
}

# What rogue-watchdog writes in a state directory; a purge removes these and then the
# directory only if nothing else is left in it (state_dir may name a shared folder).
purge_state_dir() {
  local d=$1
  [ -n "$d" ] && [ "$d" != / ] && [ -d "$d" ] || return 0
  rm -rf -- "$d/state.db" "$d/state.db-wal" "$d/state.db-shm" "$d/state.db-journal" \
    "$d/daemon.lock" "$d/backups" "$d/slurm-drain.json" "$d/slurm-sweep.lock" \
    "$d/config-in-force.yaml" "$d"/.config-in-force.yaml.* "$d"/state.db.corrupt-*
  if rmdir -- "$d" 2>/dev/null; then
    say "removed $d"
  else
    say "left $d: it holds files rogue-watchdog did not write"
  fi
}

if [ "$UNINSTALL" = 1 ]; then
  # Before the venv goes: the installed code reads the configuration.
  USED_STATE_DIR=$(instance_state_dir)
  if [ "$ENABLE" = 1 ] && booted; then
    sc disable --now "$UNIT" >/dev/null 2>&1 || true
  fi
  rm -f "$UNIT_DIR/$UNIT"
  if [ "$(readlink "$LINK" 2>/dev/null)" = "$PREFIX/bin/rogue-watchdog" ]; then rm -f "$LINK"; fi
  if [ "$ENABLE" = 1 ] && booted; then sc daemon-reload || true; fi
  # Only a directory that holds our venv marker is removed: never an arbitrary --prefix.
  if [ -f "$PREFIX/.rogue-watchdog-venv" ]; then
    rm -rf "$PREFIX"
    say "removed $PREFIX"
  fi
  if [ "$PURGE" = 1 ]; then
    rm -f "$CONFIG" "$CONFIG.example"
    rmdir "$CONFIG_DIR" 2>/dev/null || true
    if [ -n "$USED_STATE_DIR" ]; then
      purge_state_dir "$USED_STATE_DIR"
      say "purged configuration and state"
    else
      say "purged configuration; the state directory could not be read from $CONFIG: left alone"
    fi
  elif [ -n "$USED_STATE_DIR" ]; then
    say "kept $CONFIG and the state in $USED_STATE_DIR (use --purge to remove them)"
  else
    say "kept $CONFIG and the state (its directory could not be read from $CONFIG)"
  fi
  say "uninstalled"
  exit 0
fi

"$PY" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null \
  || die "$PY is not Python >= 3.11 (use --python)"
if [ -e "$PREFIX" ] && [ ! -f "$PREFIX/.rogue-watchdog-venv" ] && [ -n "$(ls -A "$PREFIX")" ]; then
  die "$PREFIX exists and is not a rogue-watchdog venv; refusing to install into it"
fi

# 1. The venv (recreated when its interpreter is gone, e.g. after an OS upgrade).
if [ ! -x "$PREFIX/bin/python" ] || ! "$PREFIX/bin/python" -c '' 2>/dev/null; then
  rm -rf "$PREFIX"
  "$PY" -m venv "$PREFIX"
  touch "$PREFIX/.rogue-watchdog-venv"
  say "created venv $PREFIX"
fi
# shellcheck disable=SC2086  # PIP_OPTS is a list of options
"$PREFIX/bin/python" -m pip install -q ${PIP_OPTS:-} --upgrade "$REPO"
# A venv made by an earlier run under a looser umask: root runs this code.
chmod -R go-w "$PREFIX"
"$PREFIX/bin/rogue-watchdog" --version >/dev/null
# pip builds the compiled weights check (setup.py's optional extension) only where gcc and
# Python's headers (python3-dev) are found; without it verify-weights is slower, not wrong.
if ! "$PREFIX/bin/python" -c 'from rogue_watchdog.weights import finite
raise SystemExit(finite._KERNEL is None)' 2>/dev/null; then
  say "note: the compiled weights check was not built (install gcc and python3-dev, then run this again): verify-weights reads F16/BF16 at about half speed (docs/performance.md)"
fi
mkdir -p "$PREFIX/share/doc"
cp "$REPO/docs/install.md" "$REPO/docs/status.md" "$PREFIX/share/doc/"
say "installed $("$PREFIX/bin/rogue-watchdog" --version) into $PREFIX"
# The command on PATH, for the default prefix only (never replacing someone else's file).
if [ "$PREFIX" = /opt/rogue-watchdog ] && [ -d /usr/local/bin ]; then
  if [ ! -e "$LINK" ] || [ "$(readlink "$LINK")" = "$PREFIX/bin/rogue-watchdog" ]; then
    ln -sfn "$PREFIX/bin/rogue-watchdog" "$LINK"
  else
    say "$LINK exists and is not ours; left alone"
  fi
fi

# 2. The configuration: never overwrite the operator's file.
mkdir -p "$CONFIG_DIR"
chmod go-w "$CONFIG_DIR"  # also when it exists: the daemon refuses a directory others can write
install -m 0644 "$REPO/config/example.yaml" "$CONFIG.example"
if [ ! -e "$CONFIG" ]; then
  install -m 0640 "$REPO/config/example.yaml" "$CONFIG"
  say "wrote $CONFIG from config/example.yaml: edit the sanctioned rules"
else
  say "kept existing $CONFIG"
fi
"$PREFIX/bin/rogue-watchdog" check-config "$CONFIG"

# 3. The unit, pointing at this prefix and configuration.
mkdir -p "$UNIT_DIR"
tmp=$(mktemp "$UNIT_DIR/.$UNIT.XXXXXX")
# Every path under the default configuration directory follows --config-dir: the config
# and secrets.env (EnvironmentFile=) beside it, where the daemon also looks for it.
sed -e "s|/opt/rogue-watchdog|$(sed_repl "$PREFIX")|g" \
  -e "s|/etc/rogue-watchdog/|$(sed_repl "$CONFIG_DIR")/|g" \
  "$REPO/systemd/$UNIT" >"$tmp"
chmod 0644 "$tmp"
if cmp -s "$tmp" "$UNIT_DIR/$UNIT"; then
  rm -f "$tmp"
  say "unit $UNIT_DIR/$UNIT unchanged"
else
  mv -f "$tmp" "$UNIT_DIR/$UNIT"
  say "installed unit $UNIT_DIR/$UNIT"
fi

if [ "$ENABLE" = 0 ]; then
  say "not enabling (--no-enable); start it with: systemctl enable --now $UNIT"
elif booted; then
  sc daemon-reload
  sc enable "$UNIT"
  sc restart "$UNIT"  # start, or pick up the upgraded code
  say "enabled and started $UNIT; check it with: $PREFIX/bin/rogue-watchdog status"
else
  say "systemd is not running here: start the daemon with"
  say "  $PREFIX/bin/rogue-watchdog run --config $CONFIG --daemonize --pidfile /run/rogue-watchdog.pid"
fi
