#!/usr/bin/env bash
# Figures of the online database move (docs/PERFORMANCE.md → Database move): an embedded server
# on a seeded SQLite of 1 000 000 articles moves to PostgreSQL under wrk's `mixed` workload (as
# in scripts/bench.sh: nine reads of an article to one like/unlike). Prints the copy and
# validation rates the CLI reports and wrk's latency before, during each step and after.
#
#   scripts/with-services.sh scripts/move-bench.sh [ARTICLES] [SWITCHES]
#       (defaults 1000000 and 10: the switch DstFirst ⇄ SrcFirst is made SWITCHES times each way
#       under the load, for the pause's percentiles)
#
# Needs the release binary (cargo build --profile dist), wrk (installed with apt when root) and the
# PostgreSQL of scripts/with-services.sh (WEBOOK_TEST_DATABASE_URL), where it creates a fresh
# database for the destination.
set -euo pipefail

articles=${1:-1000000}
switches=${2:-10}
bin=${WEBOOK_BIN:-$PWD/target/dist/webook}
duration=${MOVE_BENCH_SECONDS:-20}
[[ -x $bin ]] || { echo "no $bin: cargo build --profile dist -p webook" >&2; exit 1; }
[[ -n ${WEBOOK_TEST_DATABASE_URL:-} ]] || { echo "run under scripts/with-services.sh" >&2; exit 1; }
if ! command -v wrk >/dev/null; then
  apt-get install -y wrk >&2 || { apt-get update >&2 && apt-get install -y wrk >&2; }
fi

dir=$(mktemp -d /tmp/move-bench.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT
destination_db=move_bench_$$
psql -q "$WEBOOK_TEST_DATABASE_URL" -c "CREATE DATABASE $destination_db"
destination=${WEBOOK_TEST_DATABASE_URL%/*}/$destination_db
# The bench's own user (signed up after the seeded ones) is the admin: the copy is started
# through the admin API, so it runs inside the server and takes its turns with the server's
# writers on SQLite.
export WEBOOK_DATA_DIR=$dir/data WEBOOK_AUTH_RATE_LIMIT=1000000 WEBOOK_WRITE_RATE_LIMIT=0 WEBOOK_LOG=warn
export WEBOOK_ADMINS="[$((articles / 10 + 1))]"

step() { printf '\n== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }
step "seed: $articles articles"
/usr/bin/time -f '%e s' "$bin" seed --users $((articles / 10)) --articles "$articles" \
  --likes "$articles" --collects $((articles / 10)) --reads $((articles * 10)) \
  --comments $((articles / 10)) --days 30 --seed 1 >/dev/null
# The search index built now, not by the server while it is measured.
/usr/bin/time -f '%e s' "$bin" search reindex >/dev/null

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base=http://127.0.0.1:$port
"$bin" serve --listen "127.0.0.1:$port" >"$dir/server.log" 2>&1 &
for _ in $(seq 300); do curl -fsS "$base/readyz" >/dev/null 2>&1 && break; sleep 0.1; done

ua="move-bench"
password='bench#pass1'
curl -fsS -A "$ua" -H 'Content-Type: application/json' \
  -d "{\"email\":\"mover@example.com\",\"password\":\"$password\",\"confirmPassword\":\"$password\"}" \
  "$base/users/signup" >/dev/null
token=$(curl -sS -D - -o /dev/null -A "$ua" -H 'Content-Type: application/json' \
  -d "{\"email\":\"mover@example.com\",\"password\":\"$password\"}" "$base/users/login" |
  awk -F': ' 'tolower($1) == "x-jwt-token" { sub(/\r$/, "", $2); print $2 }')
article=$(curl -fsS -A "$ua" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
  -d '{"title":"Benchmark article","content":"<p>Hello.</p>"}' "$base/articles/publish" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["data"])')
cat >"$dir/mixed.lua" <<LUA
wrk.headers["Authorization"] = "Bearer $token"
wrk.headers["User-Agent"] = "$ua"
wrk.headers["Content-Type"] = "application/json"
n = 0
likes = 0
function request()
  n = n + 1
  if n % 10 == 0 then
    likes = likes + 1
    local like = (likes % 2 == 1) and "true" or "false"
    return wrk.format("POST", "/articles/pub/like", nil, '{"id":$article,"like":' .. like .. '}')
  end
  return wrk.format("GET", "/articles/pub/$article")
end
LUA
mixed() { # LABEL SECONDS: wrk's summary line for the mixed workload
  wrk -t2 -c64 -d"$2s" --timeout 10s --latency -s "$dir/mixed.lua" "$base" >"$dir/wrk-$1.txt"
  awk -v label="$1" '
    /^Requests\/sec:/ { rps = $2 }
    /^ +50%/ { p50 = $2 } /^ +99%/ { p99 = $2 }
    /Latency/ && !max { max = $4 }
    /Non-2xx|Socket errors/ { errors = errors " " $0 }
    END { printf "mixed %-22s %9s req/s  p50 %-8s p99 %-8s max %-8s%s\n", label, rps, p50, p99, max, errors }
  ' "$dir/wrk-$1.txt"
}
cli() { "$bin" db-move "$@"; }
timed() { # LABEL COMMAND...: runs it, prints its last line and wall time
  local label=$1 started=$SECONDS output
  shift
  output=$("$@" | grep -v '^[ {}"]' | tail -1)
  printf '%-16s %4d s  %s\n' "$label" $((SECONDS - started)) "$output"
}

step "before the move"
mixed before "$duration"

api() { # METHOD PATH [BODY]: the admin API's data
  curl -fsS -X "$1" -A "$ua" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    ${3:+-d "$3"} "$base$2" | python3 -c 'import json, sys; d = json.load(sys.stdin); assert d["code"] == 0, d; print(json.dumps(d["data"]))'
}
task() { python3 -c 'import json, sys; t = json.load(sys.stdin)["task"] or {}; print(t.get("kind"), t.get("state"), t.get("message", ""))'; }

step "start (migrate, capture, copy in the server) under load"
mixed during-copy "$duration" &
load=$!
started=$SECONDS
api POST /admin/db-move/start "{\"destination\":\"$destination\"}" >/dev/null
while [[ $(api GET /admin/db-move | task) == "copy running"* ]]; do sleep 1; done
printf '%-16s %4d s  %s\n' start $((SECONDS - started)) "$(api GET /admin/db-move | task)"
wait $load

step "SrcFirst: replication under load"
cli switch SrcFirst | tail -1
mixed src-first "$duration"

step "validate (full, both directions) under load"
mixed during-validation "$duration" &
load=$!
timed validate cli validate
wait $load
timed fix cli fix

step "switch DstFirst ⇄ SrcFirst $switches times each way under load"
mixed during-switches $((switches * 4 + 10)) &
load=$!
sleep 3
for _ in $(seq "$switches"); do
  for phase in DstFirst SrcFirst; do
    cli switch "$phase" | grep '^switched' | tee -a "$dir/switches.txt"
    sleep 1
  done
done
cli switch DstFirst | grep '^switched' | tee -a "$dir/switches.txt"
wait $load
# The pause of every switch, as the coordinator measured it (pause → flip).
grep -o 'paused [0-9]* ms' "$dir/switches.txt" | awk '{ print $2 }' | sort -n | awk '
  { v[NR] = $1 } END { printf "switch pauses: %d, p50 %d ms, p99 %d ms, max %d ms\n", NR, v[int((NR + 1) / 2)], v[int(NR * 0.99 + 0.999)], v[NR] }'

step "DstFirst: PostgreSQL authoritative"
mixed dst-first "$duration"
cli switch DstOnly | tail -1
step "DstOnly"
mixed dst-only "$duration"
printf 'server errors logged: %s\n' "$(grep -c ERROR "$dir/server.log" || true)"
# The kinds of error, most frequent first (timestamps cut).
grep ERROR "$dir/server.log" | cut -d' ' -f2- | sort | uniq -c | sort -rn | head -5 || true
