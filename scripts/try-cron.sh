#!/usr/bin/env bash
# Try the cron flow (a ghost cron line found, disabled, undone) without the host's real
# crontabs: a private Debian cron in its own mount namespace, with DIR's cron.d, crontab,
# spool and /run bind-mounted over the real ones inside that namespace only. The host's
# cron, crontabs and /run are not touched; the daemon runs outside, told by DIR/config.yaml
# where the sandbox's cron files are (paths.cron_d, paths.crontab, paths.cron_spool).
#
#   bash scripts/try-cron.sh start DIR   # DIR (absolute, new or empty) and the private cron
#   bash scripts/try-cron.sh stop DIR    # stop that cron and every job it started, and say which
#
# docs/first-week.md, "Try the cron flow in a sandbox", walks it; tests/system/
# test_try_cron.py runs those steps as printed. Needs root, unshare(1) and cron(8).
set -euo pipefail

usage() { echo "usage: bash scripts/try-cron.sh start|stop DIR (an absolute path)" >&2; exit 2; }
[ $# -eq 2 ] || usage
cmd=$1 dir=$2
case "$dir" in /*) ;; *) usage ;; esac
dir=${dir%/}
marker="$dir/.rogue-watchdog-try-cron"

# The sandbox's processes: every process in a mount namespace that sees DIR's cron.d at
# /etc/cron.d (the private cron's and its jobs', identified by the directory itself, so
# a job whose cron is already gone is still found), and every descendant of one. One
# `find` reads every process's namespace: a `readlink` per process took 20 s on a host
# with 2,259 processes (fresh user F, 2026-12-06), long enough for cron to start a job
# behind the listing.
sandbox_pids() {
  local want ours ns pid id seeds='' seen=' '
  want=$(stat -c %d:%i "$dir/cron.d" 2>/dev/null) || return 0
  ours=$(readlink /proc/self/ns/mnt)
  while read -r pid ns; do
    pid=${pid#/proc/} pid=${pid%/ns/mnt}
    [ -n "$ns" ] && [ "$ns" != "$ours" ] || continue  # never our own namespace
    case "$seen" in *" $ns:"*) ;; *)
      # One identity check per namespace, through one of its processes' root (one that
      # just exited decides nothing: the next process of that namespace is asked).
      if id=$(stat -L -c %d:%i "/proc/$pid/root/etc/cron.d" 2>/dev/null); then
        if [ "$id" = "$want" ]; then seen="$seen$ns:yes "; else seen="$seen$ns:no "; fi
      fi ;;
    esac
    case "$seen" in *" $ns:yes "*) seeds="$seeds $pid" ;; esac
  done < <(find /proc/[0-9]*/ns/mnt -maxdepth 0 -printf '%p %l\n' 2>/dev/null)
  [ -n "$seeds" ] || return 0
  # Descendants (a job that made its own namespace is still the sandbox's): the PPid
  # lines of every process, one grep; never this script's own shell.
  grep -H '^PPid:' /proc/[0-9]*/status 2>/dev/null | awk -v seeds="$seeds" -v self="$$" '
    { split($1, p, "/"); parent[p[3]] = $2 }
    END {
      n = split(seeds, s, " "); for (i = 1; i <= n; i++) in_box[s[i]] = 1
      do { grew = 0
        for (c in parent) if (!(c in in_box) && (parent[c] in in_box)) { in_box[c] = 1; grew = 1 }
      } while (grew)
      for (c in in_box) if (c != self) print c
    }' | sort -n
  return 0
}

# One line for a stopped process: its PID and command line (host text: made printable).
describe() {
  local cmd
  cmd=$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | LC_ALL=C tr -c '[:print:]' '?') || true
  cmd=${cmd% }
  echo "$1 ${cmd:-?}"
}

cron_pid() {
  # The pid file names our cron only while that process is cron in another namespace.
  local pid
  pid=$(cat "$dir/cron.pid" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = cron ] || return 1
  [ "$(readlink "/proc/$pid/ns/mnt")" != "$(readlink /proc/self/ns/mnt)" ] || return 1
  echo "$pid"
}

case "$cmd" in
start)
  [ "$(id -u)" = 0 ] || { echo "try-cron: needs root (mount namespaces, cron)" >&2; exit 2; }
  for tool in unshare cron; do
    command -v "$tool" >/dev/null || { echo "try-cron: $tool not found (apt-get install cron util-linux)" >&2; exit 2; }
  done
  if [ -e "$dir" ] && [ ! -e "$marker" ] && [ -n "$(ls -A "$dir")" ]; then
    echo "try-cron: $dir exists and is not empty: pick a new directory" >&2
    exit 2
  fi
  if cron_pid >/dev/null; then
    echo "try-cron: the sandbox cron of $dir runs already (PID $(cron_pid))" >&2
    exit 2
  fi
  mkdir -p "$dir"/{cron.d,crontabs,run,ghost}
  touch "$marker"
  chmod 755 "$dir" "$dir/cron.d"
  : >"$dir/crontab"
  chmod 644 "$dir/crontab"
  # A stand-in trainer: a training-shaped name that sleeps 40 seconds.
  printf 'import time\ntime.sleep(40)\n' >"$dir/ghost/train_ghost.py"
  cat >"$dir/config.yaml" <<EOF
# rogue-watchdog in the try-cron sandbox (scripts/try-cron.sh): its cron files, state,
# socket and alert log live in $dir; everything else is the defaults (observe mode).
paths:
  crontab: $dir/crontab
  cron_d: $dir/cron.d
  cron_spool: [$dir/crontabs]
daemon:
  state_dir: $dir/state
  socket: $dir/status.sock
alerts:
  sinks:
    - type: log
      path: $dir/alerts.log
      min_severity: info
EOF
  # In a new mount namespace (private propagation: nothing leaks back to the host), the
  # sandbox replaces cron's files and /run (cron's pid file: the host's cron keeps its
  # own); then cron runs in the foreground of that namespace, detached from this shell.
  setsid unshare --mount --propagation private bash -c '
    set -e
    d=$1
    mount --bind "$d/cron.d" /etc/cron.d
    mount --bind "$d/crontab" /etc/crontab
    mount --bind "$d/crontabs" /var/spool/cron/crontabs
    mount --bind "$d/run" /run
    echo $$ >"$d/cron.pid"
    exec cron -f
  ' try-cron "$dir" </dev/null >"$dir/cron.log" 2>&1 &
  for _ in $(seq 50); do
    cron_pid >/dev/null && break
    sleep 0.1
  done
  pid=$(cron_pid) || { echo "try-cron: cron did not start; see $dir/cron.log" >&2; cat "$dir/cron.log" >&2; exit 1; }
  # cron notices a new cron.d file by the directory's mtime, in whole seconds: a line
  # written in the second cron read the directory would wait for a later change.
  sleep 2
  echo "try-cron: sandbox cron PID $pid reads $dir/cron.d, $dir/crontab and $dir/crontabs"
  echo "try-cron: daemon configuration $dir/config.yaml"
  ;;
stop)
  [ -e "$marker" ] || { echo "try-cron: $dir is not a try-cron sandbox" >&2; exit 2; }
  # First cron itself, so it starts nothing more; then freeze every sandbox process until
  # a listing finds none that is not frozen (a stopped process forks nothing, so the set
  # is then complete), and only then kill them all; then wait until none is left.
  frozen=' ' lines=()
  if pid=$(cron_pid) && kill -STOP "$pid" 2>/dev/null; then
    frozen=" $pid " lines=("$(describe "$pid")")
  else
    pid=''
  fi
  for _ in $(seq 50); do
    new=''
    for p in $(sandbox_pids); do
      case "$frozen" in *" $p "*) continue ;; esac
      kill -STOP "$p" 2>/dev/null || continue
      frozen="$frozen$p " new=1
      lines+=("$(describe "$p")")
    done
    [ -n "$new" ] || break
  done
  # shellcheck disable=SC2086  # one PID a word
  [ "$frozen" = ' ' ] || kill -KILL $frozen 2>/dev/null || true
  left=''
  for _ in $(seq 50); do
    left=$(sandbox_pids)
    [ -n "$left" ] || break
    # shellcheck disable=SC2086
    kill -KILL $left 2>/dev/null || true
    sleep 0.1
  done
  rm -f "$dir/cron.pid"
  if [ -n "$pid" ]; then
    echo "try-cron: stopped the sandbox cron (PID $pid) and what it ran:" $frozen
  elif [ "$frozen" != ' ' ]; then
    echo "try-cron: no sandbox cron of $dir runs; stopped what it had started:" $frozen
  else
    echo "try-cron: no sandbox cron of $dir runs, and nothing it started is left"
  fi
  for line in "${lines[@]}"; do echo "try-cron:   $line"; done
  if [ -n "$left" ]; then
    echo "try-cron: still running after SIGKILL:" $left >&2
    exit 1
  fi
  ;;
*) usage ;;
esac
