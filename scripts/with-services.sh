#!/usr/bin/env bash
# Run a command with a throwaway PostgreSQL and a throwaway Redis.
#
#   scripts/with-services.sh COMMAND [ARGS...]
#
# Starts both services on free localhost ports, exports
#   WEBOOK_TEST_DATABASE_URL  postgres://webook@127.0.0.1:PORT/webook  (trust auth,
#                             user `webook` may create databases)
#   WEBOOK_TEST_REDIS_URL     redis://127.0.0.1:PORT/
#   SCHEDULER_TEST_REDIS_URL  the same (the scheduler crate's tests and benches read it)
#   WEBOOK_TEST_REDIS_SERVER  path of redis-server (tests may spawn their own)
#   WEBOOK_TEST_LIBFAKETIME   path of libfaketime.so.1 (tests run a process whose wall clock
#                             is off by LD_PRELOADing it)
# and makes sure /usr/bin/chromium and /usr/bin/chromedriver exist (the web console's
# browser tests drive them),
# runs the command, and stops everything it started when the command ends, fails,
# or the script is interrupted (Ctrl-C / SIGTERM). Exits with the command's status.
# WEBOOK_PG_SETTINGS="name=value ..." passes extra server settings to PostgreSQL (e.g.
# shared_buffers=1GB for benchmarks at a scale the 128 MB default cannot cache).
#
# State (data dirs, logs, pid files) lives in target/test-services/ and is wiped at
# start (stopping services left over by a killed run) and removed at exit.
# Installs redis-server / postgresql / libfaketime / chromium + chromium-driver, and prometheus
# (for /usr/bin/promtool) + nginx (the tests of deploy/), with apt-get when missing and running as
# root; prometheus and nginx are installed without starting their services, and left disabled.
set -euo pipefail

log() { printf 'with-services: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
tail_log() { [ -f "$1" ] && { log "--- last lines of $1:"; tail -n 30 "$1" >&2; }; return 0; }

[ $# -gt 0 ] || die "usage: $0 COMMAND [ARGS...]"

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
STATE=$ROOT/target/test-services
PGDIR=$STATE/pg          # owned by the user that runs postgres
PGDATA_DIR=$PGDIR/data
PGLOG=$PGDIR/postgres.log
REDIS_PID=$STATE/redis.pid
REDIS_LOG=$STATE/redis.log

IS_ROOT=; [ "$(id -u)" = 0 ] && IS_ROOT=1
PG_AS=          # OS user to run initdb/pg_ctl as (only when we are root)
PGBIN=
SOCKDIR=
CHILD=
CLEANED=
APT_UPDATED=
POLICY_RC_D=/usr/sbin/policy-rc.d
ADDED_POLICY=   # set while our policy-rc.d keeps installed packages' services from starting

# --- helpers -----------------------------------------------------------------

# pid_is PID PATTERN: PID is alive and its command line matches PATTERN.
pid_is() {
  [[ "${1:-}" =~ ^[0-9]+$ ]] && grep -qa -- "$2" "/proc/$1/cmdline" 2>/dev/null
}

# stop_pid PID SIGNAL: send SIGNAL, wait up to 10s, then SIGKILL.
stop_pid() {
  local pid=$1 i
  kill -"$2" "$pid" 2>/dev/null || return 0
  for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}

descendants() {
  local c
  for c in $(pgrep -P "$1" 2>/dev/null); do echo "$c"; descendants "$c"; done
}

# logged FILE CMD...: run CMD with its output appended to FILE. The redirection lives
# in a subshell so that a signal trap firing meanwhile still logs to our stderr.
logged() { local f=$1; shift; ( exec >>"$f" 2>&1; "$@" ); }

# Run a postgres tool, as $PG_AS when we are root (initdb refuses to run as root).
run_pg() {
  if [ -z "$PG_AS" ]; then
    "$@"
  elif command -v runuser >/dev/null; then
    (cd / && runuser -u "$PG_AS" -- "$@")
  else
    (cd / && su -s /bin/bash "$PG_AS" -c "$(printf '%q ' "$@")")
  fi
}

# as_root CMD...: run as root directly, or via passwordless sudo; fail otherwise.
as_root() {
  if [ -n "$IS_ROOT" ]; then "$@"
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo -n "$@"
  else return 1
  fi
}

apt_install() {
  command -v apt-get >/dev/null || return 1
  if [ -z "$APT_UPDATED" ]; then
    log "apt-get update"
    logged "$STATE/apt.log" as_root apt-get update -qq || { tail_log "$STATE/apt.log"; return 1; }
    APT_UPDATED=1
  fi
  log "apt-get install $*"
  logged "$STATE/apt.log" as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" ||
    { tail_log "$STATE/apt.log"; return 1; }
}

free_port() {
  local py p
  if py=$(command -v python3); then
    "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
    return
  fi
  for _ in $(seq 200); do
    p=$((20000 + RANDOM % 40000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
  return 1
}

find_pgbin() {
  local d
  if command -v pg_config >/dev/null && d=$(pg_config --bindir 2>/dev/null) && [ -x "$d/initdb" ]; then
    echo "$d"; return
  fi
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$d" ] && [ -x "$d/initdb" ]; then echo "$d"; return; fi
  d=$(command -v initdb) || return 1
  dirname "$(readlink -f "$d")"
}

stop_postgres() {
  local pid
  [ -f "$PGDATA_DIR/postmaster.pid" ] || return 0
  pid=$(head -n 1 "$PGDATA_DIR/postmaster.pid" 2>/dev/null || true)
  if [ -n "$PGBIN" ]; then
    run_pg "$PGBIN/pg_ctl" -D "$PGDATA_DIR" -m immediate -w -t 10 stop >/dev/null 2>&1 || true
  fi
  # Fallback (or stale run): SIGQUIT is postgres' immediate shutdown.
  if pid_is "$pid" postgres; then stop_pid "$pid" QUIT; fi
}

stop_redis() {
  local pid
  pid=$(cat "$REDIS_PID" 2>/dev/null || true)
  if pid_is "$pid" redis-server; then stop_pid "$pid" TERM; fi
}

cleanup() {
  local rc=$? pid
  [ -z "$CLEANED" ] || return "$rc"
  CLEANED=1
  set +e
  trap '' INT TERM HUP   # don't let a second Ctrl-C interrupt the cleanup
  if [ -n "$CHILD" ] && kill -0 "$CHILD" 2>/dev/null; then
    log "stopping command (pid $CHILD)"
    local pids
    pids="$CHILD $(descendants "$CHILD")"
    kill -TERM $pids 2>/dev/null
    for _ in $(seq 50); do kill -0 "$CHILD" 2>/dev/null || break; sleep 0.1; done
    for pid in $pids; do kill -KILL "$pid" 2>/dev/null; done
  fi
  stop_postgres
  stop_redis
  [ -z "$ADDED_POLICY" ] || as_root rm -f "$POLICY_RC_D"
  rm -rf "$STATE"
  [ -z "$SOCKDIR" ] || [[ "$SOCKDIR" == "$STATE"/* ]] || rm -rf "$SOCKDIR"
  log "stopped services"
  return "$rc"
}

trap cleanup EXIT
trap 'log "interrupted (SIGINT)"; exit 130' INT
trap 'log "terminated (SIGTERM)"; exit 143' TERM
trap 'log "hangup (SIGHUP)"; exit 129' HUP

# --- stale state from a previous (killed) run ---------------------------------

if [ -d "$STATE" ]; then
  owner=$(cat "$STATE/owner.pid" 2>/dev/null || true)
  if pid_is "$owner" with-services; then
    CLEANED=1   # not ours: leave it alone
    die "another with-services.sh (pid $owner) is using $STATE"
  fi
  log "removing stale state in $STATE"
  pid=$(head -n 1 "$PGDATA_DIR/postmaster.pid" 2>/dev/null || true)
  if pid_is "$pid" postgres; then log "stopping stale postgres (pid $pid)"; stop_pid "$pid" QUIT; fi
  pid=$(cat "$REDIS_PID" 2>/dev/null || true)
  if pid_is "$pid" redis-server; then log "stopping stale redis (pid $pid)"; stop_pid "$pid" TERM; fi
  rm -rf "$STATE" || { CLEANED=1; die "cannot remove $STATE (owned by another user?)"; }
fi
mkdir -p "$STATE"
chmod 755 "$STATE"
echo $$ >"$STATE/owner.pid"

# --- PostgreSQL ---------------------------------------------------------------

if ! PGBIN=$(find_pgbin); then
  apt_install postgresql ||
    die "PostgreSQL not found (need initdb/pg_ctl); install it, e.g. 'apt-get install postgresql'"
  PGBIN=$(find_pgbin) || die "PostgreSQL still not found after installing it"
fi
for tool in initdb pg_ctl createdb; do
  [ -x "$PGBIN/$tool" ] || die "$PGBIN/$tool not found"
done

mkdir -p "$PGDIR"
if [ -n "$IS_ROOT" ]; then
  if id postgres >/dev/null 2>&1; then
    PG_AS=postgres
  else
    id webook-pg >/dev/null 2>&1 || useradd --system --no-create-home webook-pg ||
      die "cannot create system user webook-pg"
    PG_AS=webook-pg
  fi
  chown -R "$PG_AS:" "$PGDIR"
  run_pg test -w "$PGDIR" ||
    die "user $PG_AS cannot write $PGDIR (are its parent directories traversable?)"
fi

# Unix socket paths are limited to ~107 bytes; fall back to /tmp for deep checkouts.
SOCKDIR=$PGDIR/sock
if [ ${#SOCKDIR} -gt 90 ]; then
  SOCKDIR=$(mktemp -d /tmp/webook-pgsock.XXXXXX)
  [ -z "$PG_AS" ] || chown "$PG_AS:" "$SOCKDIR"
else
  run_pg mkdir -p "$SOCKDIR"
fi

logged "$STATE/initdb.log" \
  run_pg "$PGBIN/initdb" -D "$PGDATA_DIR" -A trust -U webook --no-sync -E UTF8 --locale=C ||
  { tail_log "$STATE/initdb.log"; die "initdb failed"; }

PG_PORT=$(free_port) || die "could not find a free port"
PG_EXTRA=
for setting in ${WEBOOK_PG_SETTINGS:-}; do
  [[ $setting == *=* ]] || die "WEBOOK_PG_SETTINGS: '$setting' is not name=value"
  PG_EXTRA+=" -c $setting"
done
logged "$STATE/pg_ctl.log" run_pg "$PGBIN/pg_ctl" -w -t 60 -D "$PGDATA_DIR" -l "$PGLOG" \
  -o "-k '$SOCKDIR' -p $PG_PORT -h 127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300$PG_EXTRA" \
  start ||
  { tail_log "$STATE/pg_ctl.log"; tail_log "$PGLOG"; die "postgres failed to start"; }

"$PGBIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U webook webook >&2 ||
  { tail_log "$PGLOG"; die "createdb webook failed"; }
log "postgres on 127.0.0.1:$PG_PORT ($("$PGBIN/postgres" --version))${PG_EXTRA:+, with$PG_EXTRA}"

# --- Redis --------------------------------------------------------------------

if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
  apt_install redis-server ||
    die "redis-server not found; install it (Debian/Ubuntu: 'apt-get install redis-server')"
  hash -r
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null ||
    die "redis-server/redis-cli still not found after installing redis-server"
fi
REDIS_SERVER=$(command -v redis-server)

REDIS_PORT=$(free_port) || die "could not find a free port"
[ "$REDIS_PORT" != "$PG_PORT" ] || REDIS_PORT=$(free_port)
"$REDIS_SERVER" --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
  --daemonize yes --pidfile "$REDIS_PID" --logfile "$REDIS_LOG" --dir "$STATE" >&2 ||
  { tail_log "$REDIS_LOG"; die "redis-server failed to start"; }
ok=
for _ in $(seq 100); do   # 10s deadline
  if [ "$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ]; then ok=1; break; fi
  sleep 0.1
done
[ -n "$ok" ] || { tail_log "$REDIS_LOG"; die "redis on port $REDIS_PORT did not answer PING within 10s"; }
log "redis on 127.0.0.1:$REDIS_PORT ($("$REDIS_SERVER" --version | cut -d' ' -f1-3))"

# --- libfaketime (a process whose wall clock is off, for clock-skew tests) -----

find_libfaketime() {
  local lib
  for lib in /usr/lib/*/faketime/libfaketime.so.1 /usr/lib/faketime/libfaketime.so.1; do
    [ -f "$lib" ] && { echo "$lib"; return 0; }
  done
  return 1
}
if ! LIBFAKETIME=$(find_libfaketime); then
  apt_install libfaketime ||
    die "libfaketime not found; install it (Debian/Ubuntu: 'apt-get install libfaketime')"
  LIBFAKETIME=$(find_libfaketime) || die "libfaketime still not found after installing it"
fi

# --- Chromium and ChromeDriver (the web console's browser tests) ---------------

find_chromium() {
  [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]
}
if ! find_chromium; then
  apt_install chromium chromium-driver ||
    die "chromium / chromedriver not found; install them (Debian: 'apt-get install chromium chromium-driver')"
  find_chromium || die "chromium / chromedriver still not found after installing them"
fi

# --- promtool and nginx (tests of deploy/: the alert rules, the reverse-proxy example) ---

find_deploy_tools() {
  [ -x /usr/bin/promtool ] && [ -x /usr/sbin/nginx ]
}
if ! find_deploy_tools; then
  # The tests want the tools, not the services: Debian starts both when they are installed.
  # A policy-rc.d that refuses every start keeps them stopped meanwhile (unless the host has a
  # policy of its own); afterwards they are disabled, so they do not start at boot either.
  if [ ! -e "$POLICY_RC_D" ] &&
    as_root sh -c "printf '#!/bin/sh\\n# with-services.sh: no service starts while it installs\\nexit 101\\n' >'$POLICY_RC_D' && chmod 755 '$POLICY_RC_D'"; then
    ADDED_POLICY=1
  fi
  installed=
  apt_install --no-install-recommends prometheus nginx && installed=1
  if [ -n "$ADDED_POLICY" ]; then as_root rm -f "$POLICY_RC_D"; ADDED_POLICY=; fi
  [ -n "$installed" ] ||
    die "promtool / nginx not found; install them (Debian: 'apt-get install --no-install-recommends prometheus nginx')"
  for unit in prometheus nginx; do
    if [ -d /run/systemd/system ]; then as_root systemctl stop "$unit" >/dev/null 2>&1 || true; fi
    if command -v systemctl >/dev/null; then as_root systemctl disable "$unit" >/dev/null 2>&1 || true; fi
  done
  find_deploy_tools || die "promtool / nginx still not found after installing prometheus and nginx"
fi

# --- run the command ----------------------------------------------------------

export WEBOOK_TEST_DATABASE_URL="postgres://webook@127.0.0.1:$PG_PORT/webook"
export WEBOOK_TEST_REDIS_URL="redis://127.0.0.1:$REDIS_PORT/"
export WEBOOK_TEST_REDIS_SERVER="$REDIS_SERVER"
export WEBOOK_TEST_LIBFAKETIME="$LIBFAKETIME"
export SCHEDULER_TEST_REDIS_URL="$WEBOOK_TEST_REDIS_URL"

cmdline="$*"; cmdline=${cmdline//$'\n'/ }
log "services ready after ${SECONDS} s; running: ${cmdline:0:200}"
# Run in the background so SIGTERM/SIGINT traps fire immediately; restore default
# SIGINT/SIGQUIT (bash ignores them for background jobs) and keep our stdin.
( trap - INT QUIT; exec "$@" ) <&0 &
CHILD=$!
rc=0
wait "$CHILD" || rc=$?
CHILD=
exit "$rc"
