"""The hot list's scan as a small script would do it: the candidate query in keyset batches of
1 000 with Python's standard sqlite3 module, the Hacker News score (gravity 1.5, 7-day window)
and a bounded heap of 100. scripts/rank-bench.sh times it next to `webook rank --once`.

    python3 scripts/bench/rank_keyset.py DATABASE_FILE NOW_MS
"""

import heapq
import sqlite3
import sys

BATCH, SIZE, GRAVITY, WINDOW_MS = 1000, 100, 1.5, 7 * 24 * 3600 * 1000
QUERY = """SELECT p.id, p.author_id, p.ctime, p.utime, COALESCE(i.like_cnt, 0)
  FROM published_articles p LEFT JOIN interactives i ON i.biz = 'article' AND i.biz_id = p.id
  WHERE p.status = 2 AND p.ctime >= ? AND p.ctime >= ? AND (p.ctime > ? OR (p.ctime = ? AND p.id > ?))
  ORDER BY p.ctime, p.id LIMIT ?"""


def main():
    path, now = sys.argv[1], int(sys.argv[2])
    since = now - WINDOW_MS
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    top, after, scanned = [], (since - 1, 2**63 - 1), 0
    while True:
        rows = db.execute(QUERY, (since, after[0], after[0], after[0], after[1], BATCH)).fetchall()
        for article_id, _author, ctime, _utime, likes in rows:
            hours = max(now - min(ctime, now), 0) / 3_600_000
            entry = ((likes - 1) / (hours + 2) ** GRAVITY, article_id)
            if len(top) < SIZE:
                heapq.heappush(top, entry)
            elif entry > top[0]:
                heapq.heapreplace(top, entry)
        scanned += len(rows)
        if len(rows) < BATCH:
            break
        after = (rows[-1][2], rows[-1][0])
    print(f"{scanned} candidates, best {max(top)[1] if top else None}")


main()
