#!/usr/bin/env bash
# (used for docs/PERFORMANCE.md → Topics, sitemaps and followed topics under load)
# topic-lat.sh BINARY: seeds the default dataset with BINARY, serves it, prints median/max of 21
# sequential requests per URL (curl, one client), and the feed of a reader following 0, 3 and
# all 40 topics.
set -euo pipefail
bin=$1 dir=$(mktemp -d) port=18181
trap 'kill $pid 2>/dev/null; rm -rf "$dir"' EXIT
WEBOOK_DATA_DIR=$dir WEBOOK_LOG=warn "$bin" seed --articles 100000 --users 10000 --likes 500000 \
  --collects 50000 --reads 10000000 --days 30 --seed 1 >/dev/null
WEBOOK_DATA_DIR=$dir WEBOOK_LISTEN=127.0.0.1:$port WEBOOK_LOG=warn WEBOOK_AUTH_RATE_LIMIT=1000000000 \
  WEBOOK_WRITE_RATE_LIMIT=0 "$bin" serve >"$dir/serve.log" 2>&1 & pid=$!
until curl -sf "localhost:$port/healthz" >/dev/null; do sleep 0.2; done
t() { # PATH [TOKEN] LABEL
  for _ in $(seq 21); do
    curl -s -o /dev/null ${2:+-H "authorization: Bearer $2"} -w "%{time_total}\n" "localhost:$port$1"
  done | sort -n | awk -v l="${3:-$1}" '{a[NR]=$1} END {printf "%-28s median %7.1f ms  max %7.1f ms\n", l, a[11]*1000, a[NR]*1000}'
}
for p in /topics/rust "/topics/rust?sort=hot" /t/rust "/t/rust?sort=hot" /t/rust/feed.atom \
  /sitemaps/topics /sitemaps/authors/0 /sitemaps/articles/0 /a/5; do t "$p"; done
token=$(curl -s -D - -o /dev/null -H 'content-type: application/json' \
  -d '{"email":"seed1@example.com","password":"seed-Password-1!"}' "localhost:$port/users/login" |
  awk -F': ' 'tolower($1) == "x-jwt-token" { sub(/\r$/, "", $2); print $2 }')
t /feed "$token" "feed, 0 topics"
follow() { curl -s -o /dev/null -H "authorization: Bearer $token" -H 'content-type: application/json' \
  -d "$(python3 -c 'import json,sys; print(json.dumps({"name": sys.argv[1], "follow": True}))' "$1")" "localhost:$port/topics/follow"; }
for k in Rust Go Java; do follow "$k"; done
t /feed "$token" "feed, 3 topics"
python3 -c "import sqlite3; print('\n'.join(r[0] for r in sqlite3.connect('$dir/webook.db').execute('SELECT DISTINCT name_key FROM tags')))" |
  while read -r k; do follow "$k"; done
t /feed "$token" "feed, 40 topics"
