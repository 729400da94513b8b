#!/usr/bin/env bash
# HTTP load benchmark of the shipped binary (`--profile dist`), embedded mode (SQLite, in-process everything).
#
#   scripts/bench.sh [--duration SECS] [--rounds N] [--dataset ARTICLES]
#                    [--database-url URL [--redis-url URL]] [SCENARIO...]
#       scenarios: healthz login reads browse pages topics likes mixed ranking (default: all)
#
# Builds `cargo build --profile dist` (or takes the binary BENCH_BIN names, e.g. a release build
# with line tables to profile under load), seeds a dataset into a fresh temp data dir (or the database
# given) with `webook seed --articles N --users N/10 --likes 5N --collects N/2 --reads 100N
# --days 30 --seed 1` (--dataset N, default 100000), starts `webook serve` on it on a free local
# port (auth rate limit lifted so the limiter does not answer instead of the handler), and
# measures:
#   - the seed's duration;
#   - "ready after": spawn to the first 200 from /healthz, on that existing database (migrations
#     already applied; new secrets);
#   - "search index built after": spawn to /readyz reporting the search index ready (a freshly
#     seeded database is indexed after start-up; the scenarios wait for it, so the indexer does
#     not share the cores with them);
#   - idle RSS (VmRSS) before any load;
#   - healthz: wrk -t2 -c64 against GET /healthz (the HTTP stack alone);
#   - login:   signs up one user, checks that a login answers "code":0 (else the figures are
#              meaningless and the script fails), then wrk -t2 -c16 POST /users/login
#              (dominated by argon2id verification, one hash per request);
#   - reads:   wrk -t2 -c64 GET /articles/pub/ID as a logged-in reader (each request counts one
#              read through the event stream); afterwards the read count must equal the number
#              of reads the server served (its request counter), exactly, or the script fails;
#   - browse:  wrk -t2 -c64 GET /articles/pub/ID over the dataset's published articles, ids
#              drawn by Zipf's law (s = 1) over one random order of them, the same for both wrk
#              threads and every run (the article cache and the database see a realistic mix of
#              hot and cold articles, and one site-wide ranking of them), with a browser's
#              Accept-Encoding (so answers are gzipped, as browsers get them); afterwards the sum of
#              all read counters must have grown by the reads answered, as for reads (the
#              database is read with python3's sqlite3 module, or psql for PostgreSQL), a
#              check line gives the read counter's batches, their mean size, the share of the
#              run it was busy and the reads that waited for room in its queue (0: the counter
#              never held a request back), and one each in-process cache's hit rate during the
#              run (/metrics);
#   - pages:   wrk -t2 -c64 GET /a/ID, the public site's server-rendered article pages, as an
#              anonymous visitor with a browser's User-Agent and Accept-Encoding, ids by the same
#              Zipf draw as browse (a page is first checked to be a rendered article with its share
#              card); a check line gives its requests/s as a ratio to browse's in the same run, and
#              the caches' hit rates;
#   - topics:  the dataset's topics (every tag key; 40 names, ~3 400 articles each at 100 000),
#              each page checked to answer "code":0 with articles first: wrk -t2 -c64 GET
#              /topics/KEY (newest first) over all topics in turn, then ?sort=hot (most liked
#              first), then GET /feed as the reader once it follows every topic (a page merges
#              the newest items of 40 topics); a check line gives each as a ratio to reads;
#   - likes:   wrk -t2 -c64 POST /articles/pub/like, each connection alternating like/unlike
#              (every request a write transaction); afterwards likeCnt must be 0 or 1 and agree
#              with the reader's "liked" flag;
#   - mixed:   wrk -t2 -c64, nine article reads to one like/unlike per connection (a reader's
#              traffic); afterwards reads are exact and likes consistent, as above, and a check
#              line gives the notification delay (a like's event to its notification in the
#              author's inbox) at p50 and p99, from the server's histogram (/metrics);
#   - ranking: on the dataset's articles and likes, runs the
#              `ranking` job (`webook jobs trigger ranking` on the same database), waits for a
#              list computed after the trigger, checks that GET /ranking/top answers a JSON
#              envelope with code 0 and at least one item (else the script fails), then wrk
#              -t2 -c64 GET /ranking/top against webook and, with the same settings, against
#              nginx (installed with apt when missing, run from a config of its own in the temp
#              dir on another free port, not the system service) serving those exact bytes as a
#              static file, alternating N times (--rounds, default 3; this machine's throughput
#              drifts by ±10 % within minutes, so one pair of runs decides nothing): a row per
#              run, and the ratio of the medians as a check line. wrk runs without a Lua
#              body check here (as for healthz), since with ~20 kB bodies the check itself
#              would cost wrk a sizeable share of the two cores; each server's bytes are
#              compared with the saved body beforehand instead;
# --database-url postgres://… runs the server on PostgreSQL instead of SQLite, and with
# --redis-url redis://… in cluster mode (Redis caches, sessions, event stream, shared hot list;
# fresh random JWT secrets; after reads, browse and mixed a check line gives Redis round trips and
# commands per request, `redis-cli` needed), e.g.
#   scripts/with-services.sh bash -c 'scripts/bench.sh --database-url "$WEBOOK_TEST_DATABASE_URL" reads likes';
#   scripts/with-services.sh bash -c 'scripts/bench.sh --database-url "$WEBOOK_TEST_DATABASE_URL" --redis-url "$WEBOOK_TEST_REDIS_URL"';
# and prints one markdown table (requests/s, p50, p99, p99.9, errors, RSS after the scenario;
# p99.9 from wrk's latency histogram, printed by a Lua done() hook) with the
# machine, the git commit and the start-up figures above it. wrk's raw output goes to stderr.
# Everything it started is stopped and the temp dir removed on exit.
#
# Figures in docs/PERFORMANCE.md come from `scripts/bench.sh --duration 10` (the default) on a
# quiet machine; say which machine, and re-measure when the request path changes.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

usage() { sed -n '4,5p' "$0" | sed 's/^#   //' >&2; exit 2; }
die() { printf 'bench: %s\n' "$*" >&2; exit 1; }
note() { printf '==> %s\n' "$*" >&2; }

duration=10
rounds=3
dataset=100000
database_url=
redis_url=
scenarios=()
while (($#)); do
  case "$1" in
    --duration) (($# >= 2)) || usage; duration=$2; shift 2 ;;
    --duration=*) duration=${1#--duration=}; shift ;;
    --rounds) (($# >= 2)) || usage; rounds=$2; shift 2 ;;
    --rounds=*) rounds=${1#--rounds=}; shift ;;
    --dataset) (($# >= 2)) || usage; dataset=$2; shift 2 ;;
    --dataset=*) dataset=${1#--dataset=}; shift ;;
    --database-url) (($# >= 2)) || usage; database_url=$2; shift 2 ;;
    --redis-url) (($# >= 2)) || usage; redis_url=$2; shift 2 ;;
    -h | --help) usage ;;
    healthz | login | reads | browse | pages | likes | mixed | ranking) scenarios+=("$1"); shift ;;
    *) printf 'bench: unknown argument %q\n' "$1" >&2; usage ;;
  esac
done
[[ $duration =~ ^[1-9][0-9]*$ ]] || die "--duration must be a positive whole number of seconds, got '$duration'"
[[ $dataset =~ ^[0-9]+$ ]] || die "--dataset must be a whole number of articles, got '$dataset'"
((${#scenarios[@]})) || scenarios=(healthz login reads browse pages topics likes mixed ranking)
if ((dataset < 1000)); then
  for scenario in "${scenarios[@]}"; do
    [[ $scenario != browse && $scenario != pages && $scenario != topics && $scenario != ranking ]] ||
      die "the $scenario scenario needs a dataset: --dataset of at least 1000 articles"
  done
fi
[[ -z $redis_url || -n $database_url ]] || die "--redis-url needs --database-url (cluster mode is PostgreSQL + Redis)"

# --- tools ---------------------------------------------------------------------------------------
if ! command -v wrk >/dev/null; then
  if ((EUID == 0)) && command -v apt-get >/dev/null; then
    note "installing wrk"
    apt-get install -y wrk >&2 || { apt-get update >&2 && apt-get install -y wrk >&2; }
  fi
  command -v wrk >/dev/null || die "wrk is not installed (apt-get install wrk, as root)"
fi
for tool in curl python3 cargo git; do
  command -v "$tool" >/dev/null || die "$tool is required"
done
[[ -z $database_url ]] || command -v psql >/dev/null || die "psql is required with --database-url"
[[ -z $redis_url ]] || command -v redis-cli >/dev/null || die "redis-cli is required with --redis-url"
nginx=
if [[ " ${scenarios[*]} " == *' ranking '* ]]; then
  nginx=$(PATH=$PATH:/usr/sbin:/sbin command -v nginx || true)
  if [[ -z $nginx ]] && ((EUID == 0)) && command -v apt-get >/dev/null; then
    note "installing nginx (the ranking scenario's static-file baseline)"
    apt-get install -y nginx >&2 || { apt-get update >&2 && apt-get install -y nginx >&2; }
    nginx=$(PATH=$PATH:/usr/sbin:/sbin command -v nginx || true)
  fi
  [[ -n $nginx ]] || die "nginx is not installed (apt-get install nginx, as root)"
fi

# --- build ---------------------------------------------------------------------------------------
if [[ -n ${BENCH_BIN:-} ]]; then
  # Another build of the server (e.g. a release build with line tables, to profile under load).
  bin=$(realpath "$BENCH_BIN")
  note "using $bin (BENCH_BIN), not building"
else
  note "cargo build --profile dist"
  cargo build --profile dist -p webook --bin webook >&2
  target_dir=${CARGO_TARGET_DIR:-target}
  bin=$(cd "$target_dir/dist" && pwd)/webook
fi
[[ -x $bin ]] || die "no binary at $bin after the build"

# --- start the server ----------------------------------------------------------------------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/webook-bench.XXXXXX")
server_pid= nginx_pid=
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [[ -n $nginx_pid ]] && kill -0 "$nginx_pid" 2>/dev/null; then
    kill -TERM "$nginx_pid" 2>/dev/null || true   # fast shutdown: the master stops its workers
    for _ in $(seq 50); do kill -0 "$nginx_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$nginx_pid" 2>/dev/null || true
    wait "$nginx_pid" 2>/dev/null || true
  fi
  if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
base=http://127.0.0.1:$port

# No inherited WEBOOK_* setting (a database URL, a config file) may turn this into another setup;
# the server runs in the temp dir so no ./webook.toml is picked up either.
for var in $(compgen -e | grep '^WEBOOK_' || true); do unset "$var"; done

now_ms() { date +%s%3N; }
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$server_pid/status"; }
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
log_tail() { printf -- '--- server log (last 30 lines) ---\n' >&2; tail -n 30 "$tmp/server.log" >&2 || true; }

# The dataset, through the same configuration the server gets.
seed_command=(seed --articles "$dataset" --users $((dataset / 10)) --likes $((dataset * 5))
  --collects $((dataset / 2)) --reads $((dataset * 100)) --days 30 --seed 1)
seed_ms=
if ((dataset > 0)); then
  note "webook ${seed_command[*]}"
  seed_started=$(now_ms)
  (
    cd "$tmp"
    if [[ -n $database_url ]]; then export WEBOOK_DATABASE_URL=$database_url; fi
    WEBOOK_DATA_DIR=$tmp/data WEBOOK_LOG=warn exec "$bin" "${seed_command[@]}"
  ) >&2 || die "seeding the dataset failed"
  seed_ms=$(($(now_ms) - seed_started))
fi
db_query() { # SQL -> rows, one per line, columns separated by '|'
  if [[ -n $database_url ]]; then
    psql "$database_url" -XAtqc "$1"
  else
    python3 - "$tmp/data/webook.db" "$1" <<'PY'
import sqlite3, sys
db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True, timeout=30)
for row in db.execute(sys.argv[2]):
    print("|".join(str(v) for v in row))
PY
  fi
}

note "starting $bin serve on 127.0.0.1:$port (data dir $tmp/data)"
spawned=$(now_ms)
(
  cd "$tmp"
  if [[ -n $database_url ]]; then export WEBOOK_DATABASE_URL=$database_url; fi
  if [[ -n $redis_url ]]; then
    export WEBOOK_REDIS_URL=$redis_url
    WEBOOK_JWT_ACCESS_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
    WEBOOK_JWT_REFRESH_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
    export WEBOOK_JWT_ACCESS_SECRET WEBOOK_JWT_REFRESH_SECRET
  fi
  # Load comes from a few users at machine speed: the per-IP limit is lifted and the per-user
  # write limit turned off, or the figures would measure the limiters, not the server.
  WEBOOK_DATA_DIR=$tmp/data WEBOOK_LISTEN=127.0.0.1:$port WEBOOK_LOG=warn \
    WEBOOK_AUTH_RATE_LIMIT=1000000000 WEBOOK_WRITE_RATE_LIMIT=0 exec "$bin" serve
) >"$tmp/server.log" 2>&1 &
server_pid=$!

deadline=$((spawned + 30000))
until curl -fsS --max-time 1 -o /dev/null "$base/healthz" 2>/dev/null; do
  if ! kill -0 "$server_pid" 2>/dev/null; then
    log_tail
    die "the server exited before answering /healthz"
  fi
  if (($(now_ms) > deadline)); then
    log_tail
    die "the server did not answer /healthz within 30 s"
  fi
  sleep 0.02
done
ready_ms=$(($(now_ms) - spawned))

# The search index of a freshly seeded database is built after start-up (/readyz reports its
# progress under details.search); measured while it builds, every scenario would share the two
# cores with the indexer. Wait for it, and report how long it took.
search_ms=
if curl -sS --max-time 5 "$base/readyz" 2>/dev/null | grep -q '"search"'; then
  note "waiting for the search index to be built"
  deadline=$(($(now_ms) + 900000))
  until curl -sS --max-time 5 "$base/readyz" 2>/dev/null | grep -q '"search":"ready"'; do
    kill -0 "$server_pid" 2>/dev/null || { log_tail; die "the server exited while building its search index"; }
    (($(now_ms) < deadline)) || { log_tail; die "the search index was not built within 15 min"; }
    sleep 0.5
  done
  search_ms=$(($(now_ms) - spawned))
fi
idle_rss=$(rss_kib)

# --- scenarios -----------------------------------------------------------------------------------
# wrk runs bounded: its own -d plus a hard timeout in case it hangs.
run_wrk() { # OUTPUT_FILE WRK_ARGS...
  local out=$1
  shift
  timeout --foreground --kill-after=5 $((duration + 60)) wrk -d"${duration}s" --timeout 10s --latency "$@" >"$out" ||
    { cat "$out" >&2; die "wrk failed: wrk $*"; }
  cat "$out" >&2
}

# Prints "REQ_PER_SEC P50 P99 P999 ERRORS" from wrk --latency output plus the "P99.9: …" and
# optional "Bad bodies: N" lines our Lua done() hooks write.
parse_wrk() {
  awk '
    /^Requests\/sec:/                    { rps = $2 }
    /Latency Distribution/              { dist = 1 }
    dist && $1 == "50%"                 { p50 = $2 }
    dist && $1 == "99%"                 { p99 = $2 }
    /^P99\.9:/                          { p999 = $2 }
    /Non-2xx or 3xx responses:/         { errors += $NF }
    /Socket errors:/                    { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+,?$/) errors += $i + 0 }
    /^Bad bodies:/                      { errors += $NF }
    END {
      if (rps == "" || p50 == "" || p99 == "" || p999 == "") exit 1
      printf "%s %s %s %s %d\n", rps, p50, p99, p999, errors
    }' "$1"
}

rows=()
last_rps=
record() { # SCENARIO WRK_OUTPUT [RSS_KIB (default: the server's)]
  local parsed rps p50 p99 p999 errors
  parsed=$(parse_wrk "$2") || die "$1: could not read wrk's output (above)"
  read -r rps p50 p99 p999 errors <<<"$parsed"
  awk -v r="$rps" 'BEGIN { exit !(r > 0) }' || die "$1: no request completed"
  kill -0 "$server_pid" 2>/dev/null || { log_tail; die "$1: the server died under load"; }
  last_rps=$rps
  rows+=("| $1 | $(awk -v r="$rps" 'BEGIN { printf (r >= 100 ? "%.0f" : "%.1f"), r }') | $p50 | $p99 | $p999 | $errors | $(mib "${3:-$(rss_kib)}") |")
}

# wrk_script FILE < LUA: writes the scenario's Lua (stdin) followed by the body check every
# scenario shares: answers without "code":0 are counted and reported as "Bad bodies: N" (gzipped
# ones are not read: browse's exact read count checks those).
wrk_script() {
  { cat; cat <<'LUA'; } >"$1"
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) bad = 0 end
function response(status, headers, body)
  -- A gzipped body cannot be read here (browse): its scenario's exact read count vouches for it.
  local encoding = headers["content-encoding"] or headers["Content-Encoding"]
  if encoding ~= "gzip" and not string.find(body, '"code":0', 1, true) then bad = bad + 1 end
end
function done(summary, latency, requests)
  local total = 0
  for _, thread in ipairs(threads) do total = total + thread:get("bad") end
  io.write(string.format("Bad bodies: %d\n", total))
  io.write(string.format("P99.9: %.2fms\n", latency:percentile(99.9) / 1000))
end
LUA
}

# The hook alone, for scenarios without a body check (healthz, ranking): no per-request Lua.
p999_script() {
  cat >"$1" <<'LUA'
function done(summary, latency, requests)
  io.write(string.format("P99.9: %.2fms\n", latency:percentile(99.9) / 1000))
end
LUA
}

json_post() { # PATH BODY -> response body
  curl -sS --max-time 30 -H 'Content-Type: application/json' -d "$2" "$base$1"
}

# A logged-in reader and one published article, for the reads and likes scenarios. Tokens are
# bound to the User-Agent they were issued to, so wrk sends the same one.
ua=webook-bench/1
token= article=
reader_and_article() {
  [[ -z $token ]] || return 0
  local email=reader-$RANDOM@example.com password='bench#pass1' headers answer
  answer=$(json_post /users/signup "{\"email\":\"$email\",\"password\":\"$password\",\"confirmPassword\":\"$password\"}")
  [[ $answer == *'"code":0'* ]] || { log_tail; die "reader sign-up failed: $answer"; }
  headers=$(curl -sS --max-time 30 -D - -o /dev/null -A "$ua" -H 'Content-Type: application/json' \
    -d "{\"email\":\"$email\",\"password\":\"$password\"}" "$base/users/login")
  token=$(printf '%s' "$headers" | awk -F': ' 'tolower($1) == "x-jwt-token" { sub(/\r$/, "", $2); print $2 }')
  [[ -n $token ]] || { log_tail; die "reader login failed: $headers"; }
  answer=$(curl -sS --max-time 30 -A "$ua" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -d '{"title":"Benchmark article","content":"<p>Hello from the benchmark.</p>"}' "$base/articles/publish")
  article=$(printf '%s' "$answer" | python3 -c 'import json, sys; print(json.load(sys.stdin)["data"])') ||
    die "publishing the benchmark article failed: $answer"
}
reader_view() { # FIELD -> value of data.FIELD in the reader view (this counts one read)
  curl -sS --max-time 30 -A "$ua" -H "Authorization: Bearer $token" "$base/articles/pub/$article" |
    python3 -c "import json, sys; print(json.load(sys.stdin)['data']['$1'])"
}
# Exactness after a scenario that read the article: every answered GET of it (the server's own
# request counter, status 200) must be counted once as a read, across all scenarios so far. GETs
# the client abandoned mid-request (wrk closing its connections at the end; counted as 499) may
# or may not have counted, depending on where they stopped, so the count must lie in
# [answered, answered + abandoned].
browse_served=0 browse_abandoned=0   # GETs of other articles (browse), not the reader's article
route_requests() { # STATUS -> GETs of /articles/pub/{id} with that status so far
  curl -sS --max-time 30 "$base/metrics" |
    awk -v status="status=\"$1\"" '/^http_requests_total\{/ && /method="GET"/ && /route="\/articles\/pub\/\{id\}"/ && index($0, status) { n += $NF } END { printf "%d\n", n }'
}
# Waits until the reads counted (COUNTER, a command printing a count, minus COUNT_BASE) reach the
# GETs answered since SERVED_BASE; fails when they pass answered + abandoned (since
# ABANDONED_BASE). Sets the caller's served, abandoned and counted.
await_reads_counted() { # SCENARIO COUNTER SERVED_BASE ABANDONED_BASE COUNT_BASE
  for _ in $(seq 100); do
    served=$(($(route_requests 200) - $3))
    abandoned=$(($(route_requests 499) - $4))
    counted=$(($($2) - $5))
    ((counted <= served + abandoned)) ||
      die "$1: counted $counted reads, more than the $served answered + $abandoned abandoned"
    ((counted >= served)) && return 0
    sleep 0.1
  done
  die "$1: counted $counted reads of $served answered"
}
check_reads_exact() { # SCENARIO
  local counted= served= abandoned=
  # The reader's view shows the count before its own read, so it is at least $served.
  await_reads_counted "$1" "reader_view readCnt" "$browse_served" "$browse_abandoned" 0
  checks+=("$1: $served reads answered and $abandoned abandoned so far, $counted counted (exact within the abandoned)")
}
# After a scenario that liked and unliked: likeCnt must be 0 or 1 and agree with "liked".
check_likes_consistent() { # SCENARIO
  local likes liked want=0
  likes=$(reader_view likeCnt)
  liked=$(reader_view liked)
  [[ $liked == True ]] && want=1
  [[ $likes == "$want" ]] || die "$1: likeCnt $likes does not agree with liked=$liked"
  checks+=("$1: likeCnt $likes agrees with the reader's liked=$liked after the run")
}
# Every read counter's sum, for the browse scenario's check.
reads_total() { db_query "SELECT COALESCE(SUM(read_cnt), 0) FROM interactives WHERE biz = 'article'"; }
# After browse: the counters grew by the reads answered during it (within the abandoned).
check_browse_exact() { # SERVED_BEFORE ABANDONED_BEFORE READS_BEFORE
  local counted= served= abandoned=
  await_reads_counted browse reads_total "$1" "$2" "$3"
  browse_served=$((browse_served + served)) browse_abandoned=$((browse_abandoned + abandoned))
  checks+=("browse: $served reads of $(wc -l <"$tmp/published.txt") articles answered and $abandoned abandoned, the counters grew by $counted (exact within the abandoned)")
}

# The published articles the Zipf scenarios draw from, once: all but the reader's own (the reads
# and mixed checks count its reads alone).
browse_rps=
published_ids() {
  reader_and_article
  [[ -s $tmp/published.txt ]] && return 0
  db_query "SELECT id FROM published_articles WHERE status = 2 AND id <> $article ORDER BY id" >"$tmp/published.txt"
  (($(wc -l <"$tmp/published.txt") > 0)) || die "the dataset has no published article"
}
# A browser's User-Agent (a crawler's reads are not what pages measures).
browser_ua='Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0 Safari/537.36'
# zipf_lua PREFIX: a wrk request() drawing GET PREFIX<id> by Zipf's law (s = 1) over one random
# order of the published ids — the site's popularity ranking, the same in every thread and every
# run (a seed of its own); each thread then draws its own sequence.
zipf_lua() {
  cat <<LUA
local ids, cumulative, total = {}, {}, 0
for line in io.lines("$tmp/published.txt") do ids[#ids + 1] = line end
math.randomseed(1)
for i = #ids, 2, -1 do local j = math.random(i); ids[i], ids[j] = ids[j], ids[i] end
math.randomseed(os.time() + tonumber(tostring({}):match("0x(%x+)") or "0", 16) % 1000003)
for i = 1, #ids do total = total + 1 / i; cumulative[i] = total end
function request()
  local target, low, high = math.random() * total, 1, #ids
  while low < high do
    local middle = math.floor((low + high) / 2)
    if cumulative[middle] < target then low = middle + 1 else high = middle end
  end
  return wrk.format("GET", "$1" .. ids[low])
end
LUA
}

# The in-process caches' lookups so far, one "CACHE HITS MISSES" line per cache (the local layer:
# embedded, every lookup; cluster, the near caches in front of Redis).
cache_lookups() {
  curl -sS --max-time 30 "$base/metrics" |
    awk '/^cache_requests_total\{/ && /layer="local"/ {
        match($0, /cache="[^"]*"/); cache = substr($0, RSTART + 7, RLENGTH - 8)
        if (/result="hit"/) hits[cache] += $NF; else misses[cache] += $NF; seen[cache] = 1 }
      END { for (c in seen) printf "%s %d %d\n", c, hits[c], misses[c] }' | sort
}
# The notification delay histogram of the likes' events so far (event published → its
# notification committed), one "LE COUNT" line per bucket, by bound.
notification_delays() {
  curl -sS --max-time 30 "$base/metrics" |
    awk '/^notification_delay_seconds_bucket\{/ && /topic="like_changed"/ {
        match($0, /le="[^"]*"/); le = substr($0, RSTART + 4, RLENGTH - 5)
        if (le == "+Inf") le = 1e9; printf "%s %d\n", le, $NF }' | sort -g
}
# A check line with the p50 and p99 of the notification delay since DELAYS_BEFORE (a
# notification_delays output): the first bucket bound holding that share of the events.
check_notification_delay() { # SCENARIO DELAYS_BEFORE
  checks+=("$1: notification delay (like → author's inbox) $(awk 'NR == FNR { before[$1] = $2; next }
      { print $1, $2 - before[$1] }' <(printf '%s\n' "$2") <(notification_delays) |
    awk '{ le[NR] = $1; n[NR] = $2 } END { total = n[NR]
      if (total == 0) { print "not measured (no like event handled)"; exit }
      for (i = 1; i <= NR; i++) { if (!p50 && n[i] >= 0.5 * total) p50 = le[i]; if (!p99 && n[i] >= 0.99 * total) p99 = le[i] }
      printf "p50 <= %s ms, p99 <= %s ms over %d events", p50 * 1000, p99 * 1000, total }')")
}

# The read counter's work so far: "BATCHES EVENTS BUSY_SECONDS PUBLISH_WAITS" (the
# interactive_read topic's consumer group: batches handled, events in them, seconds in its
# handler; in-process publishes of the topic that found the group's queue full and waited).
read_counter_work() {
  curl -sS --max-time 30 "$base/metrics" |
    awk '/topic="interactive_read"/ && /group="read_counter"/ {
          if (/^event_batch_size_count\{/) batches += $NF
          else if (/^event_batch_size_sum\{/) events += $NF
          else if (/^event_batch_duration_seconds_sum\{/) busy += $NF }
        /^events_publish_waits_total\{/ && /topic="interactive_read"/ { waits += $NF }
        END { printf "%d %d %.3f %d\n", batches, events, busy, waits }'
}
# A check line with what the read counter did since WORK_BEFORE (a read_counter_work output)
# over SECONDS: its batches, their mean size, the share of the run it was busy, and how many
# reads waited for room in its queue (0: it never held a request back).
check_read_counter() { # SCENARIO WORK_BEFORE SECONDS
  checks+=("$1: read counter: $(awk -v seconds="$3" 'NR == 1 { b = $1; e = $2; t = $3; w = $4; next }
      { b = $1 - b; e = $2 - e; t = $3 - t; w = $4 - w
        printf "%d batches of %.0f reads on average, busy %.0f %% of the run, %d reads waited for its queue", b, (b > 0 ? e / b : 0), 100 * t / seconds, w }' \
    <(printf '%s\n' "$2") <(read_counter_work))")
}

# A check line with each cache's hit rate since LOOKUPS_BEFORE (a cache_lookups output).
check_cache_hits() { # SCENARIO LOOKUPS_BEFORE
  checks+=("$1: local cache hit rates: $(join -a1 -e0 -o 0,1.2,1.3,2.2,2.3 <(cache_lookups) <(printf '%s\n' "$2") |
    awk '{ h = $2 - $4; m = $3 - $5; if (h + m > 0) printf "%s%s %.1f %% of %d", sep, $1, 100 * h / (h + m), h + m; sep = ", " }')")
}

# The hot list of the ranking scenario, over the dataset: asks the running server for one
# computation through the CLI on the same database, and waits for a list computed after that
# request; its body is saved in $tmp/ranking.json.
ranking_list() {
  local asked answer computed
  asked=$(now_ms)
  (
    cd "$tmp"
    if [[ -n $database_url ]]; then export WEBOOK_DATABASE_URL=$database_url; fi
    WEBOOK_DATA_DIR=$tmp/data WEBOOK_LOG=warn exec "$bin" jobs trigger ranking
  ) >&2 || die "ranking: webook jobs trigger ranking failed"
  for _ in $(seq 300); do   # 30 s
    computed=$(curl -sS --max-time 5 -D - -o "$tmp/ranking.json" "$base/ranking/top" 2>/dev/null |
      awk -F': ' 'tolower($1) == "x-ranking-computed-at" { sub(/\r$/, "", $2); print $2 }')
    [[ -n $computed ]] && ((computed >= asked)) && break
    sleep 0.1
  done
  [[ -n $computed ]] && ((computed >= asked)) ||
    { log_tail; die "ranking: no hot list computed after the trigger within 30 s"; }
  answer=$(python3 - "$tmp/ranking.json" <<'PY'
import json, sys
body = json.load(open(sys.argv[1], "rb"))
items = body.get("data") if isinstance(body, dict) else None
if not isinstance(body, dict) or body.get("code") != 0 or not isinstance(items, list) or not items:
    raise SystemExit(f"want an envelope with code 0 and at least one item, got {str(body)[:300]}")
print(len(items), items[0]["likeCnt"], items[0]["id"])
PY
  ) || die "ranking: GET /ranking/top is not a non-empty list"
  read -r ranking_items ranking_top_likes ranking_top_id <<<"$answer"
}

# nginx serving FILE as /ranking/top from a config of its own (temp dir, free port, no access
# log, keep-alive connections never closed by nginx, as webook never closes them); sets $nginx_base.
start_nginx() { # FILE
  local dir=$tmp/nginx nport
  mkdir -p "$dir/www/ranking" "$dir/temp"
  cp "$1" "$dir/www/ranking/top"
  # Its workers run as an unprivileged user when nginx starts as root: let them reach the file.
  chmod 711 "$tmp"
  chmod -R a+rX "$dir"
  nport=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
  cat >"$dir/nginx.conf" <<NGINX
daemon off;
worker_processes auto;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 100000000;
  default_type application/json;
  client_body_temp_path $dir/temp/body;
  proxy_temp_path $dir/temp/proxy;
  fastcgi_temp_path $dir/temp/fastcgi;
  uwsgi_temp_path $dir/temp/uwsgi;
  scgi_temp_path $dir/temp/scgi;
  server {
    listen 127.0.0.1:$nport;
    root $dir/www;
  }
}
NGINX
  note "starting $nginx on 127.0.0.1:$nport ($dir/nginx.conf)"
  "$nginx" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" >"$dir/stdout.log" 2>&1 &
  nginx_pid=$!
  nginx_base=http://127.0.0.1:$nport
  for _ in $(seq 100); do
    curl -fsS --max-time 1 -o /dev/null "$nginx_base/ranking/top" 2>/dev/null && return 0
    kill -0 "$nginx_pid" 2>/dev/null || break
    sleep 0.05
  done
  cat "$dir/stdout.log" "$dir/error.log" >&2 2>/dev/null || true
  die "nginx did not serve $nginx_base/ranking/top"
}
nginx_rss_kib() {
  local pid total=0
  for pid in "$nginx_pid" $(pgrep -P "$nginx_pid" || true); do
    total=$((total + $(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status")))
  done
  echo "$total"
}

checks=()

# Cluster mode: what Redis was asked, as "ROUND_TRIPS COMMANDS" so far — webook's
# redis_round_trips_total (a command, a script call or a pipeline each count once: what a caller
# waits for) and the calls in Redis's INFO commandstats (which counts the commands inside
# scripts and pipelines too; INFO itself left out).
redis_asked() {
  local trips commands
  trips=$(curl -sS --max-time 30 "$base/metrics" |
    awk '/^redis_round_trips_total[ {]/ { n += $NF } END { printf "%d\n", n }')
  commands=$(redis-cli -u "$redis_url" INFO commandstats |
    awk -F'[:=,]' '/^cmdstat_/ && $1 != "cmdstat_info" { n += $3 } END { printf "%d\n", n }')
  echo "$trips $commands"
}
# Adds a check line: Redis round trips and commands per request of a scenario (its wrk output),
# counted from ASKED_BEFORE to now — the requests and the background work they caused (reads
# counted, caches refreshed), since the scenario's checks waited for that.
check_redis_per_request() { # SCENARIO WRK_OUTPUT ASKED_BEFORE
  local requests trips commands trips_before commands_before
  requests=$(awk '/ requests in / { print $1; exit }' "$2")
  read -r trips commands <<<"$(redis_asked)"
  read -r trips_before commands_before <<<"$3"
  checks+=("$1: Redis per request: $(awk -v t=$((trips - trips_before)) -v c=$((commands - commands_before)) -v r="$requests" \
    'BEGIN { printf "%.2f round trips, %.2f commands", t / r, c / r }') ($requests requests; redis_round_trips_total, INFO commandstats)")
}

login_check=
for scenario in "${scenarios[@]}"; do
  asked_before=
  [[ -z $redis_url ]] || asked_before=$(redis_asked)
  case "$scenario" in
    healthz)
      note "healthz: wrk -t2 -c64 -d${duration}s GET /healthz"
      p999_script "$tmp/p999.lua"
      run_wrk "$tmp/healthz.txt" -t2 -c64 -s "$tmp/p999.lua" "$base/healthz"
      record healthz "$tmp/healthz.txt"
      ;;
    login)
      email=bench@example.com password='bench#pass1'
      if [[ -z $login_check ]]; then
        signup=$(json_post /users/signup \
          "{\"email\":\"$email\",\"password\":\"$password\",\"confirmPassword\":\"$password\"}")
        [[ $signup == *'"code":0'* ]] || { log_tail; die "sign-up failed: $signup"; }
      fi
      body="{\"email\":\"$email\",\"password\":\"$password\"}"
      answer=$(json_post /users/login "$body")
      [[ $answer == *'"code":0'* ]] || { log_tail; die "login check failed (want \"code\":0): $answer"; }
      login_check="passed (POST /users/login answered $answer)"

      # Every answer's body is checked too: bodies without "code":0 count as errors.
      wrk_script "$tmp/login.lua" <<LUA
wrk.method = "POST"
wrk.body = '$body'
wrk.headers["Content-Type"] = "application/json"
LUA
      note "login: wrk -t2 -c16 -d${duration}s POST /users/login"
      run_wrk "$tmp/login.txt" -t2 -c16 -s "$tmp/login.lua" "$base/users/login"
      record login "$tmp/login.txt"
      ;;
    reads)
      reader_and_article
      wrk_script "$tmp/reads.lua" <<LUA
wrk.headers["Authorization"] = "Bearer $token"
wrk.headers["User-Agent"] = "$ua"
LUA
      note "reads: wrk -t2 -c64 -d${duration}s GET /articles/pub/$article"
      run_wrk "$tmp/reads.txt" -t2 -c64 -s "$tmp/reads.lua" "$base/articles/pub/$article"
      record reads "$tmp/reads.txt"
      check_reads_exact reads
      [[ -z $redis_url ]] || check_redis_per_request reads "$tmp/reads.txt" "$asked_before"
      ;;
    browse)
      published_ids
      { zipf_lua /articles/pub/; cat <<LUA; } | wrk_script "$tmp/browse.lua"
wrk.headers["Authorization"] = "Bearer $token"
wrk.headers["User-Agent"] = "$ua"
wrk.headers["Accept-Encoding"] = "gzip, deflate, br, zstd"
LUA
      before_served=$(route_requests 200)
      before_abandoned=$(route_requests 499)
      before_reads=$(reads_total)
      lookups_before=$(cache_lookups)
      counter_before=$(read_counter_work)
      note "browse: wrk -t2 -c64 -d${duration}s GET /articles/pub/ID (gzip accepted), Zipf over $(wc -l <"$tmp/published.txt") published articles"
      run_wrk "$tmp/browse.txt" -t2 -c64 -s "$tmp/browse.lua" "$base"
      record browse "$tmp/browse.txt"
      browse_rps=$last_rps
      check_browse_exact "$before_served" "$before_abandoned" "$before_reads"
      check_read_counter browse "$counter_before" "$duration"
      check_cache_hits browse "$lookups_before"
      [[ -z $redis_url ]] || check_redis_per_request browse "$tmp/browse.txt" "$asked_before"
      ;;
    pages)
      published_ids
      first_page=$(curl -sS --max-time 30 -A "$browser_ua" "$base/a/$(head -1 "$tmp/published.txt")")
      [[ $first_page == *'property="og:title"'* && $first_page == *'data-test="ssr-article"'* ]] ||
        die "pages: /a/ID did not answer a rendered article page: ${first_page:0:300}"
      { zipf_lua /a/; cat <<LUA; } | wrk_script "$tmp/pages.lua"
wrk.headers["User-Agent"] = "$browser_ua"
wrk.headers["Accept-Encoding"] = "gzip, deflate, br, zstd"
LUA
      lookups_before=$(cache_lookups)
      note "pages: wrk -t2 -c64 -d${duration}s GET /a/ID as a visitor (gzip accepted), Zipf over $(wc -l <"$tmp/published.txt") published articles"
      run_wrk "$tmp/pages.txt" -t2 -c64 -s "$tmp/pages.lua" "$base"
      record pages "$tmp/pages.txt"
      check_cache_hits pages "$lookups_before"
      [[ -z $browse_rps ]] ||
        checks+=("pages: $(awk -v p="$last_rps" -v b="$browse_rps" 'BEGIN { printf "%.2f", p / b }') × browse's requests/s in this run")
      [[ -z $redis_url ]] || check_redis_per_request pages "$tmp/pages.txt" "$asked_before"
      ;;
    topics)
      reader_and_article
      db_query "SELECT DISTINCT name_key FROM tags ORDER BY name_key" >"$tmp/topics.txt"
      (($(wc -l <"$tmp/topics.txt") > 0)) || die "topics: the dataset has no tag"
      topic_paths="$tmp/topic-paths.txt"
      python3 -c 'import sys, urllib.parse
for key in sys.stdin.read().splitlines(): print("/topics/" + urllib.parse.quote(key, safe=""))' \
        <"$tmp/topics.txt" >"$topic_paths"
      first_topic=$(curl -sS --max-time 30 -A "$ua" "$base$(head -1 "$topic_paths")?sort=hot")
      [[ $first_topic == *'"code":0'* && $first_topic == *'"items":[{'* ]] ||
        die "topics: a topic did not answer its articles: ${first_topic:0:300}"
      reads_rps=
      for row in "${rows[@]}"; do [[ $row == "| reads |"* ]] && reads_rps=$(awk -F'|' '{ print $3 }' <<<"$row"); done
      for order in new hot; do
        wrk_script "$tmp/topics-$order.lua" <<LUA
wrk.headers["User-Agent"] = "$ua"
local paths, n = {}, 0
for line in io.lines("$topic_paths") do paths[#paths + 1] = line .. "?sort=$order" end
function request()
  n = n + 1
  return wrk.format("GET", paths[(n % #paths) + 1])
end
LUA
        note "topics: wrk -t2 -c64 -d${duration}s GET /topics/KEY?sort=$order over $(wc -l <"$topic_paths") topics"
        run_wrk "$tmp/topics-$order.txt" -t2 -c64 -s "$tmp/topics-$order.lua" "$base"
        record "topics_$order" "$tmp/topics-$order.txt"
        [[ -z $reads_rps ]] ||
          checks+=("topics_$order: $(awk -v p="$last_rps" -v b="$reads_rps" 'BEGIN { printf "%.2f", p / b }') × reads' requests/s in this run")
      done
      while IFS= read -r key; do
        answer=$(curl -sS --max-time 30 -A "$ua" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
          -d "$(python3 -c 'import json, sys; print(json.dumps({"name": sys.argv[1], "follow": True}))' "$key")" "$base/topics/follow")
        [[ $answer == *'"code":0'* ]] || die "topics: following $key failed: $answer"
      done <"$tmp/topics.txt"
      wrk_script "$tmp/topic-feed.lua" <<LUA
wrk.headers["Authorization"] = "Bearer $token"
wrk.headers["User-Agent"] = "$ua"
LUA
      note "topics: wrk -t2 -c64 -d${duration}s GET /feed as a reader following all $(wc -l <"$tmp/topics.txt") topics"
      run_wrk "$tmp/topic-feed.txt" -t2 -c64 -s "$tmp/topic-feed.lua" "$base/feed"
      record topic_feed "$tmp/topic-feed.txt"
      [[ -z $reads_rps ]] ||
        checks+=("topic_feed: $(awk -v p="$last_rps" -v b="$reads_rps" 'BEGIN { printf "%.2f", p / b }') × reads' requests/s in this run")
      ;;
    likes)
      reader_and_article
      wrk_script "$tmp/likes.lua" <<LUA
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer $token"
wrk.headers["User-Agent"] = "$ua"
wrk.headers["Content-Type"] = "application/json"
n = 0
function request()
  n = n + 1
  local like = (n % 2 == 1) and "true" or "false"
  return wrk.format(nil, nil, nil, '{"id":$article,"like":' .. like .. '}')
end
LUA
      note "likes: wrk -t2 -c64 -d${duration}s POST /articles/pub/like (alternating like/unlike)"
      run_wrk "$tmp/likes.txt" -t2 -c64 -s "$tmp/likes.lua" "$base/articles/pub/like"
      record likes "$tmp/likes.txt"
      check_likes_consistent likes
      ;;
    mixed)
      reader_and_article
      wrk_script "$tmp/mixed.lua" <<LUA
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
      note "mixed: wrk -t2 -c64 -d${duration}s, 9 GET /articles/pub/$article to 1 POST /articles/pub/like"
      delays_before=$(notification_delays)
      run_wrk "$tmp/mixed.txt" -t2 -c64 -s "$tmp/mixed.lua" "$base"
      record mixed "$tmp/mixed.txt"
      check_reads_exact mixed
      check_likes_consistent mixed
      check_notification_delay mixed "$delays_before"
      [[ -z $redis_url ]] || check_redis_per_request mixed "$tmp/mixed.txt" "$asked_before"
      ;;
    ranking)
      ranking_list
      start_nginx "$tmp/ranking.json"
      p999_script "$tmp/p999.lua"
      for server in "$base" "$nginx_base"; do
        curl -fsS --max-time 30 -o "$tmp/served.json" "$server/ranking/top" ||
          die "ranking: GET $server/ranking/top failed"
        cmp -s "$tmp/served.json" "$tmp/ranking.json" ||
          die "ranking: $server/ranking/top does not serve the saved list"
      done
      webook_runs=() nginx_runs=()
      for round in $(seq "$rounds"); do
        note "ranking $round/$rounds: wrk -t2 -c64 -d${duration}s GET /ranking/top ($(wc -c <"$tmp/ranking.json") bytes)"
        run_wrk "$tmp/ranking-$round.txt" -t2 -c64 -s "$tmp/p999.lua" "$base/ranking/top"
        record "ranking (run $round)" "$tmp/ranking-$round.txt"
        webook_runs+=("$last_rps")
        note "ranking $round/$rounds: wrk -t2 -c64 -d${duration}s the same bytes from nginx (static file)"
        run_wrk "$tmp/ranking-nginx-$round.txt" -t2 -c64 -s "$tmp/p999.lua" "$nginx_base/ranking/top"
        kill -0 "$nginx_pid" 2>/dev/null || die "ranking: nginx died under load"
        record "ranking, nginx static file (run $round)" "$tmp/ranking-nginx-$round.txt" "$(nginx_rss_kib)"
        nginx_runs+=("$last_rps")
      done
      median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
      webook_rps=$(median "${webook_runs[@]}")
      nginx_rps=$(median "${nginx_runs[@]}")
      checks+=("ranking: GET /ranking/top is code 0 with $ranking_items items (top: article $ranking_top_id, $ranking_top_likes likes), $(wc -c <"$tmp/ranking.json") bytes, byte-identical from nginx")
      checks+=("ranking: median of $rounds runs: webook $(printf '%.0f' "$webook_rps")/s, nginx $(printf '%.0f' "$nginx_rps")/s; webook / nginx $(awk -v w="$webook_rps" -v n="$nginx_rps" 'BEGIN { printf "%.2f", w / n }') (target >= 0.9)")
      ;;
  esac
done

# --- report --------------------------------------------------------------------------------------
cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null)
[[ -n $cpu ]] || cpu=$(lscpu 2>/dev/null | awk -F': +' '/^Model name/ { print $2; exit }')
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -z $(git status --porcelain 2>/dev/null) ]] || commit+=-dirty

printf '\n'
printf -- '- machine: %s CPUs, %s\n' "$(nproc)" "${cpu:-unknown CPU}"
printf -- '- commit: %s\n' "$commit"
if ((dataset > 0)); then
  printf -- '- dataset: `webook %s`, %.1f s\n' "${seed_command[*]}" "$(awk -v ms="$seed_ms" 'BEGIN { print ms / 1000 }')"
  printf -- '- ready after: %d ms (spawn to first /healthz answer, on the seeded database)\n' "$ready_ms"
  [[ -z $search_ms ]] || printf -- '- search index built after: %.1f s (spawn to details.search "ready" in /readyz; the scenarios start then)\n' "$(awk -v ms="$search_ms" 'BEGIN { print ms / 1000 }')"
else
  printf -- '- ready after: %d ms (spawn to first /healthz answer, fresh data dir)\n' "$ready_ms"
fi
printf -- '- idle RSS: %s MB\n' "$(mib "$idle_rss")"
printf -- '- duration: %s s per scenario\n' "$duration"
[[ -z $login_check ]] || printf -- '- login check: %s\n' "$login_check"
if [[ -n $redis_url ]]; then db_label='PostgreSQL + Redis (cluster mode)'
elif [[ -n $database_url ]]; then db_label=PostgreSQL; else db_label='SQLite (embedded)'; fi
printf -- '- database: %s\n' "$db_label"
for check in "${checks[@]}"; do printf -- '- check: %s\n' "$check"; done
printf '\n'
printf '| scenario | requests/s | p50 | p99 | p99.9 | errors | RSS after (MB) |\n'
printf '|---|---:|---:|---:|---:|---:|---:|\n'
printf '%s\n' "${rows[@]}"
