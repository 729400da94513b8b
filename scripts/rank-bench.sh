#!/usr/bin/env bash
# The hot list's computation on an embedded SQLite of N articles, next to its floor:
#
#   scripts/rank-bench.sh [ARTICLES (default 1000000)] [ROUNDS (default 5)]
#
# Seeds a fresh data dir (`webook seed --users N/10 --articles N --likes N --collects N/10
# --reads 10N --days 30 --seed 1`, as scripts/move-bench.sh), then ROUNDS times, interleaved:
#   - webook:    wall time of `webook rank --once` (the whole command: start, connect, scan,
#                score, heap, winners' details, serialise, store the shared copy);
#   - floor:     SQLite computing the scan's join and filter as one aggregate over the same
#                columns (python3's sqlite3 module; the query's own time, no process start);
#   - python:    wall time of scripts/bench/rank_keyset.py, the scan as a 30-line script would
#                do it (keyset batches of 1 000, the score, a bounded heap);
# and prints each run and the medians with webook / floor and webook / python.
# Uses target/dist/webook (WEBOOK_BIN to override); build it first.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
articles=${1:-1000000}
rounds=${2:-5}
bin=${WEBOOK_BIN:-$PWD/target/dist/webook}
[[ -x $bin ]] || { echo "rank-bench: no $bin (cargo build --profile dist -p webook)" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export WEBOOK_DATA_DIR=$dir/data WEBOOK_LOG=warn
file=$WEBOOK_DATA_DIR/webook.db

echo "==> seed: $articles articles" >&2
/usr/bin/time -f 'seeded in %e s' "$bin" seed --users $((articles / 10)) --articles "$articles" \
  --likes "$articles" --collects $((articles / 10)) --reads $((articles * 10)) --days 30 --seed 1 >/dev/null
[[ -f $file ]] || { echo "rank-bench: no database at $file" >&2; exit 1; }

floor() {
  python3 - "$file" <<'PY'
import sqlite3, sys, time
db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
since = int(time.time() * 1000) - 7 * 24 * 3600 * 1000
started = time.perf_counter()
n, _ = db.execute("""SELECT count(*), sum(p.id + p.author_id + p.ctime + p.utime
    + COALESCE(i.like_cnt, 0) + COALESCE(i.collect_cnt, 0) + COALESCE(i.read_cnt, 0))
  FROM published_articles p LEFT JOIN interactives i ON i.biz = 'article' AND i.biz_id = p.id
  WHERE p.status = 2 AND p.ctime >= ?""", (since,)).fetchone()
print(f"{time.perf_counter() - started:.3f} {n}")
PY
}
wall() { local started=$EPOCHREALTIME; "$@" >"$dir/out" 2>&1 || { cat "$dir/out" >&2; exit 1; }; \
  awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }'; }

"$bin" rank --once >/dev/null   # warms the page cache; not counted
echo "| round | webook rank --once (s) | one aggregate (s) | python keyset (s) | candidates |"
echo "| ---: | ---: | ---: | ---: | ---: |"
: >"$dir/runs"
for round in $(seq "$rounds"); do
  w=$(wall "$bin" rank --once)
  scanned=$(grep -o '[0-9]* candidates' "$dir/out" | cut -d' ' -f1)
  read -r f n < <(floor)
  p=$(wall python3 scripts/bench/rank_keyset.py "$file" "$(date +%s%3N)")
  echo "| $round | $w | $f | $p | $scanned ($n) |"
  echo "$w $f $p" >>"$dir/runs"
done
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
w=$(cut -d' ' -f1 "$dir/runs" | median); f=$(cut -d' ' -f2 "$dir/runs" | median); p=$(cut -d' ' -f3 "$dir/runs" | median)
echo
echo "medians: webook $w s, one aggregate $f s, python keyset $p s;" \
  "webook / aggregate $(awk -v a="$w" -v b="$f" 'BEGIN { printf "%.2f", a / b }')×," \
  "webook / python $(awk -v a="$w" -v b="$p" 'BEGIN { printf "%.2f", a / b }')×"
