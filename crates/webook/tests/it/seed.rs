//! `webook seed` on SQLite and PostgreSQL: the dataset is consistent (counters equal the like
//! and collect rows, reader copies match their status, times in their windows), skewed as
//! Zipf's law says, made of content the article feature would have stored (sanitised bodies,
//! their abstracts, Chinese and English), readable through the real stores (login, reader copy,
//! counters, liked flags), with follows whose counts equal their rows and the feed the runtime
//! would have built from them (one item per published article, pushed or pulled by the
//! author's followers, capped inboxes, read back through the feed service), reproducible for a
//! seed whatever the memory budget of a pass, added after existing rows (sequences moved on
//! PostgreSQL), and an impossible plan writes nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::collections::{BTreeMap, BTreeSet, HashMap};

use indicatif::ProgressBar;
use platform::{config::DatabaseKind, testing::TestDb};
use sha2::{Digest, Sha256};
use sqlx::Row;
use webook::schema::MIGRATIONS;
use webook::{
    article::{
        model::{abstract_of, sanitize_html, Draft, MAX_TITLE_CHARS},
        store::ArticleStore,
    },
    auth::password::PasswordHasher,
    feed::{store::FeedStore, FeedService, FeedSettings},
    interactive::store::InteractiveStore,
    seed::{seed, Plan, Report},
    tag::{
        store::{Created, TagStore},
        TagName,
    },
    user::store::UserStore,
};

const DAY_MS: i64 = 24 * 3600 * 1000;
/// 2026-11-30T00:00:00Z: a fixed window end, so runs are comparable.
const UNTIL: i64 = 1_796_083_200_000;
const FOLLOWS: u64 = 3_000;
/// Small feed settings, so that a few of the 500 users are above the push threshold and many
/// inboxes reach the cap.
const FEED: FeedSettings = FeedSettings {
    feed_push_threshold: 100,
    feed_inbox_cap: 20,
};

/// Comments spread over the articles, and the extra comments of each of the two hot threads.
const COMMENTS: u64 = 2_000;
const HOT_THREAD_COMMENTS: u64 = 1_500;

fn plan(seed: u64) -> Plan {
    Plan {
        users: 500,
        articles: 600,
        likes: 4_000,
        collects: 500,
        reads: 300_000,
        follows: FOLLOWS,
        comments: COMMENTS,
        hot_threads: 2,
        hot_thread_comments: HOT_THREAD_COMMENTS,
        feed: FEED,
        days: 7,
        seed,
        until: UNTIL,
        ..Plan::default()
    }
}

async fn scalar(test: &TestDb, sql: &str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(test.db.pool())
        .await
        .unwrap_or_else(|err| panic!("{sql}: {err}"))
}

async fn run(test: &TestDb, plan: &Plan) -> Report {
    seed(&test.db, plan, &ProgressBar::hidden()).await.unwrap()
}

/// A digest of every seeded row (all columns but the password hash, whose salt is random).
async fn digest(test: &TestDb) -> String {
    let queries = [
        "SELECT id, email, nickname, about_me, ctime, utime FROM users ORDER BY id",
        "SELECT id, author_id, title, content, abstract, status, ctime, utime FROM articles ORDER BY id",
        "SELECT id, author_id, title, content, abstract, status, ctime, utime FROM published_articles ORDER BY id",
        "SELECT biz, biz_id, read_cnt, like_cnt, collect_cnt, comment_cnt, ctime, utime FROM interactives ORDER BY biz_id",
        "SELECT uid, biz, biz_id, status, ctime, utime FROM user_likes ORDER BY uid, biz_id",
        "SELECT uid, biz, biz_id, cid, status, ctime, utime FROM user_collects ORDER BY uid, biz_id",
        "SELECT follower, followee, status, ctime, utime FROM follows ORDER BY follower, followee",
        "SELECT uid, followers, followees, utime FROM follow_counts ORDER BY uid",
        "SELECT id, kind, actor, recipient, article_id, comment_id, detail, dedup_key, delivery, \
         fanout_time, fanout_id, ctime FROM feed_events ORDER BY id",
        "SELECT uid, ctime FROM feed_pull_authors ORDER BY uid",
        "SELECT uid, event_id, actor, kind, ctime FROM feed_inbox ORDER BY uid, event_id",
        "SELECT id, biz, biz_id, uid, root_id, parent_id, content, deleted, child_cnt, reply_cnt, \
         ctime, utime FROM comments ORDER BY id",
        "SELECT id, uid, name, name_key, ctime, utime FROM tags ORDER BY id",
        "SELECT tid, uid, biz, biz_id, ctime FROM tag_bizs ORDER BY biz_id, tid",
    ];
    let mut hasher = Sha256::new();
    for sql in queries {
        for row in sqlx::query(sql).fetch_all(test.db.pool()).await.unwrap() {
            for column in 0..row.len() {
                let value = match row.try_get::<i64, _>(column) {
                    Ok(number) => number.to_string(),
                    Err(_) => row.get::<String, _>(column),
                };
                hasher.update(value.as_bytes());
                hasher.update([0]);
            }
        }
    }
    hex::encode(hasher.finalize())
}

async fn seeds_a_consistent_skewed_dataset(test: TestDb) {
    let plan = plan(7);
    let report = run(&test, &plan).await;
    assert_eq!(
        (
            report.users,
            report.articles(),
            report.likes,
            report.collects,
            report.reads
        ),
        (500, 600, 4_000, 500, 300_000)
    );
    assert!(
        report.published > 480 && report.drafts > 10 && report.withdrawn > 5,
        "{report:?}"
    );

    // Rows as reported.
    assert_eq!(scalar(&test, "SELECT COUNT(*) FROM users").await, 500);
    assert_eq!(scalar(&test, "SELECT COUNT(*) FROM articles").await, 600);
    let reader_copies = (report.published + report.withdrawn) as i64;
    assert_eq!(
        scalar(&test, "SELECT COUNT(*) FROM published_articles").await,
        reader_copies
    );
    assert_eq!(
        scalar(
            &test,
            "SELECT COUNT(*) FROM articles a JOIN published_articles p ON p.id = a.id \
             WHERE p.status = a.status AND p.status IN (2, 3) AND p.content = a.content"
        )
        .await,
        reader_copies,
        "reader copies equal their author's copy, published or withdrawn"
    );
    assert_eq!(
        scalar(&test, "SELECT COUNT(*) FROM articles WHERE status = 1").await,
        report.drafts as i64
    );
    assert_eq!(
        scalar(&test, "SELECT COUNT(*) FROM user_likes WHERE status = 1").await,
        4_000
    );
    assert_eq!(
        scalar(
            &test,
            "SELECT COUNT(*) FROM user_collects WHERE status = 1 AND cid = 0"
        )
        .await,
        500
    );

    // Counters equal the rows behind them, and only reader copies have any.
    for (counter, table) in [("like_cnt", "user_likes"), ("collect_cnt", "user_collects")] {
        let mismatched = scalar(
            &test,
            &format!(
                "SELECT COUNT(*) FROM interactives i WHERE i.{counter} <> \
                 (SELECT COUNT(*) FROM {table} t WHERE t.biz = i.biz AND t.biz_id = i.biz_id AND t.status = 1)"
            ),
        )
        .await;
        assert_eq!(mismatched, 0, "{counter} differs from {table}");
        let orphans = scalar(
            &test,
            &format!(
                "SELECT COUNT(*) FROM {table} t WHERE NOT EXISTS (SELECT 1 FROM interactives i \
                 WHERE i.biz = t.biz AND i.biz_id = t.biz_id)"
            ),
        )
        .await;
        assert_eq!(orphans, 0, "{table} rows without counters");
    }
    assert_eq!(
        scalar(
            &test,
            "SELECT CAST(SUM(read_cnt) AS BIGINT) FROM interactives"
        )
        .await,
        300_000
    );
    assert_eq!(
        scalar(
            &test,
            "SELECT COUNT(*) FROM interactives i LEFT JOIN published_articles p \
             ON p.id = i.biz_id WHERE p.id IS NULL OR i.biz <> 'article'"
        )
        .await,
        0,
        "counters only on reader copies"
    );

    // Times: articles in the window, likes after their article, users registered before.
    let window_start = UNTIL - 7 * DAY_MS;
    assert_eq!(
        scalar(
            &test,
            &format!(
                "SELECT COUNT(*) FROM articles WHERE ctime < {window_start} \
             OR ctime >= {UNTIL} OR utime < ctime OR utime > {UNTIL}"
            )
        )
        .await,
        0
    );
    assert!(scalar(&test, "SELECT MAX(ctime) FROM articles").await > UNTIL - DAY_MS);
    assert!(scalar(&test, "SELECT MIN(ctime) FROM articles").await < window_start + DAY_MS);
    assert_eq!(
        scalar(
            &test,
            &format!(
                "SELECT COUNT(*) FROM user_likes l JOIN articles a ON a.id = l.biz_id \
             WHERE l.ctime < a.ctime OR l.ctime > {UNTIL}"
            )
        )
        .await,
        0
    );
    assert_eq!(
        scalar(
            &test,
            &format!("SELECT COUNT(*) FROM users WHERE ctime >= {window_start}")
        )
        .await,
        0
    );
    // Article ids follow publication order (times spread evenly, jitter within a slot).
    assert_eq!(
        scalar(
            &test,
            "SELECT COUNT(*) FROM articles a JOIN articles b ON b.id = a.id + 1 \
             WHERE b.ctime < a.ctime"
        )
        .await,
        0
    );

    // Zipf: the top tenth of the articles holds most likes and reads; many have none.
    let likes: Vec<i64> =
        sqlx::query_scalar("SELECT like_cnt FROM interactives ORDER BY like_cnt DESC")
            .fetch_all(test.db.pool())
            .await
            .unwrap();
    let top_tenth: i64 = likes.iter().take(reader_copies as usize / 10).sum();
    assert!(
        top_tenth * 2 > 4_000,
        "top tenth holds {top_tenth} of 4000 likes"
    );
    assert!(
        likes[0] > 40 * likes[likes.len() / 2].max(1),
        "head {} vs median {}",
        likes[0],
        likes[likes.len() / 2]
    );
    let reads: Vec<i64> =
        sqlx::query_scalar("SELECT read_cnt FROM interactives ORDER BY read_cnt DESC")
            .fetch_all(test.db.pool())
            .await
            .unwrap();
    let top_reads: i64 = reads.iter().take(reader_copies as usize / 10).sum();
    assert!(
        top_reads * 2 > 300_000,
        "top tenth holds {top_reads} of 300000 reads"
    );
    // Popular in reads means popular in likes: the most read article is in the top tenth of likes.
    let most_read_likes = scalar(
        &test,
        "SELECT like_cnt FROM interactives ORDER BY read_cnt DESC LIMIT 1",
    )
    .await;
    assert!(
        most_read_likes >= likes[reader_copies as usize / 10],
        "{most_read_likes}"
    );

    // Content as the article feature stores it: sanitised, with its abstract; both languages;
    // lengths that vary.
    let rows = sqlx::query("SELECT title, content, abstract FROM articles")
        .fetch_all(test.db.pool())
        .await
        .unwrap();
    let (mut chinese, mut english, mut sizes) = (0, 0, Vec::new());
    for row in &rows {
        let (title, content, abstract_text): (String, String, String) =
            (row.get(0), row.get(1), row.get(2));
        assert_eq!(
            sanitize_html(&content),
            content,
            "content the sanitiser would change"
        );
        assert_eq!(
            abstract_of(&content),
            abstract_text,
            "abstract of {content}"
        );
        let draft = Draft::parse(&title, &content, true).expect("publishable");
        assert_eq!(draft.title, title);
        assert!(!title.is_empty() && title.chars().count() <= MAX_TITLE_CHARS);
        if title
            .chars()
            .any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c))
        {
            chinese += 1;
        } else if title.chars().any(|c| c.is_ascii_alphabetic()) {
            english += 1;
        }
        sizes.push(content.len());
    }
    assert!(
        chinese > 200 && english > 150,
        "chinese {chinese}, english {english}"
    );
    sizes.sort_unstable();
    let (median, largest) = (sizes[sizes.len() / 2], sizes[sizes.len() - 1]);
    assert!(
        sizes[0] < median / 2 && largest > 5 * median,
        "sizes {} / {median} / {largest}",
        sizes[0]
    );

    // The features read it: a seeded user signs in; reader copy, counters and liked flag.
    let users = UserStore::new(test.db.clone());
    let email = format!("seed{}@example.com", report.first_user_id + 3);
    let (uid, hash) = users
        .find_credentials(&email)
        .await
        .unwrap()
        .expect("seeded user");
    assert_eq!(uid, report.first_user_id + 3);
    assert!(hash.is_some(), "a seeded user has a password");
    let hasher = PasswordHasher::new().unwrap();
    assert!(hasher
        .verify(plan.password.clone(), hash.clone())
        .await
        .unwrap());
    assert!(!hasher
        .verify("wrong-Password-1!".into(), hash)
        .await
        .unwrap());

    let liked = sqlx::query("SELECT uid, biz_id FROM user_likes ORDER BY biz_id LIMIT 1")
        .fetch_one(test.db.pool())
        .await
        .unwrap();
    let (liker, article): (i64, i64) = (liked.get(0), liked.get(1));
    let interactive = InteractiveStore::new(test.db.clone());
    assert!(
        interactive
            .user_flags(liker, webook::biz::Biz::Article, article)
            .await
            .unwrap()
            .liked
    );
    let counts = interactive
        .counts(webook::biz::Biz::Article, article)
        .await
        .unwrap();
    assert_eq!(
        counts.like_cnt,
        scalar(
            &test,
            &format!("SELECT COUNT(*) FROM user_likes WHERE biz_id = {article}")
        )
        .await
    );
    let published_id = scalar(
        &test,
        "SELECT MIN(id) FROM published_articles WHERE status = 2",
    )
    .await;
    let copy = ArticleStore::new(test.db.clone())
        .reader_copy(published_id)
        .await
        .unwrap()
        .expect("reader copy");
    assert!(!copy.title.is_empty());

    // Tags: five of each author's own, 0-3 of them on each published article (about three in
    // four carry some), each on an article of the tag's owner; read back through the store.
    let authors = scalar(
        &test,
        "SELECT COUNT(DISTINCT author_id) FROM published_articles WHERE status = 2",
    )
    .await;
    assert_eq!(report.tags.tags as i64, 5 * authors);
    assert_eq!(
        scalar(&test, "SELECT COUNT(*) FROM tags").await,
        5 * authors
    );
    assert_eq!(
        scalar(&test, "SELECT COUNT(*) FROM tag_bizs").await,
        report.tags.tag_rows as i64
    );
    assert_eq!(
        scalar(
            &test,
            "SELECT COUNT(*) FROM tag_bizs b JOIN tags t ON t.id = b.tid \
             JOIN published_articles p ON p.id = b.biz_id \
             WHERE b.biz = 'article' AND p.status = 2 AND t.uid = p.author_id AND b.uid = t.uid \
             AND b.ctime = p.ctime AND t.ctime < p.ctime"
        )
        .await,
        report.tags.tag_rows as i64,
        "tag rows on published articles, with their owner's tags"
    );
    assert_eq!(
        scalar(
            &test,
            "SELECT COUNT(*) FROM (SELECT biz_id FROM tag_bizs GROUP BY biz_id HAVING COUNT(*) > 3) AS many"
        )
        .await,
        0
    );
    let tagged = report.tags.tagged_articles;
    assert!(
        tagged * 10 > report.published * 6 && tagged * 10 < report.published * 9,
        "{tagged} of {} published articles tagged",
        report.published
    );
    let (tagged_article, owner): (i64, i64) =
        sqlx::query_as("SELECT biz_id, uid FROM tag_bizs ORDER BY biz_id LIMIT 1")
            .fetch_one(test.db.pool())
            .await
            .unwrap();
    let on_it = TagStore::new(test.db.clone())
        .on_object(webook::biz::Biz::Article, tagged_article, Some(owner))
        .await
        .unwrap();
    assert!(!on_it.is_empty() && on_it.len() <= 3, "{on_it:?}");
}

/// Every row of `sql`, as numbers.
async fn numbers<const N: usize>(test: &TestDb, sql: &str) -> Vec<[i64; N]> {
    sqlx::query(sql)
        .fetch_all(test.db.pool())
        .await
        .unwrap_or_else(|err| panic!("{sql}: {err}"))
        .iter()
        .map(|row| std::array::from_fn(|column| row.get::<i64, _>(column)))
        .collect()
}

/// The feed tables' indexes: name and definition.
async fn feed_indexes(test: &TestDb) -> Vec<(String, String)> {
    let sql = match test.db.kind() {
        DatabaseKind::Sqlite => {
            "SELECT name, COALESCE(sql, '') FROM sqlite_master WHERE type = 'index' \
             AND tbl_name IN ('follows', 'follow_counts', 'feed_events', 'feed_inbox', 'feed_pull_authors') \
             ORDER BY name"
        }
        DatabaseKind::Postgres => {
            "SELECT indexname::text, indexdef FROM pg_indexes WHERE tablename IN \
             ('follows', 'follow_counts', 'feed_events', 'feed_inbox', 'feed_pull_authors') \
             ORDER BY indexname"
        }
    };
    sqlx::query_as(sql).fetch_all(test.db.pool()).await.unwrap()
}

async fn seeds_follows_and_the_feed_the_runtime_would_have(test: TestDb) {
    let (threshold, cap) = (FEED.feed_push_threshold, FEED.feed_inbox_cap as usize);
    let indexes_before = feed_indexes(&test).await;
    let report = run(&test, &plan(7)).await;
    // The indexes the seed builds after its rows are in are all back.
    assert_eq!(feed_indexes(&test).await, indexes_before);
    assert!(indexes_before.len() >= 4, "{indexes_before:?}");

    // Follows: as many as asked, all on, none of oneself, no pair twice, each made after both
    // users registered and before the first article.
    assert_eq!(report.follows, FOLLOWS);
    assert_eq!(
        scalar(&test, "SELECT COUNT(*) FROM follows WHERE status = 1").await,
        FOLLOWS as i64
    );
    assert_eq!(
        scalar(&test, "SELECT COUNT(*) FROM follows").await,
        FOLLOWS as i64
    );
    assert_eq!(
        scalar(
            &test,
            "SELECT COUNT(*) FROM follows WHERE follower = followee"
        )
        .await,
        0,
        "self-follows"
    );
    assert_eq!(
        scalar(
            &test,
            "SELECT COUNT(*) FROM (SELECT follower, followee FROM follows \
             GROUP BY follower, followee HAVING COUNT(*) > 1) AS repeated"
        )
        .await,
        0,
        "pairs followed twice"
    );
    assert_eq!(
        scalar(
            &test,
            "SELECT COUNT(*) FROM follows f JOIN users a ON a.id = f.follower \
             JOIN users b ON b.id = f.followee WHERE f.utime <> f.ctime OR f.ctime <= a.ctime \
             OR f.ctime <= b.ctime OR f.ctime > (SELECT MIN(ctime) FROM articles)"
        )
        .await,
        0,
        "follow times"
    );

    // Counts equal the rows, for every user; utime is the last follow either way.
    assert_eq!(
        scalar(
            &test,
            "SELECT COUNT(*) FROM users u LEFT JOIN follow_counts c ON c.uid = u.id \
             WHERE COALESCE(c.followers, 0) <> (SELECT COUNT(*) FROM follows f WHERE f.followee = u.id AND f.status = 1) \
             OR COALESCE(c.followees, 0) <> (SELECT COUNT(*) FROM follows f WHERE f.follower = u.id AND f.status = 1)"
        )
        .await,
        0,
        "follow_counts differ from the rows"
    );
    assert_eq!(
        scalar(
            &test,
            "SELECT COUNT(*) FROM follow_counts c WHERE NOT EXISTS (SELECT 1 FROM users u WHERE u.id = c.uid) \
             OR c.utime <> (SELECT MAX(f.utime) FROM follows f WHERE f.follower = c.uid OR f.followee = c.uid)"
        )
        .await,
        0,
        "follow_counts of no user, or not dated by the last follow"
    );

    // Zipf: a few users above the push threshold, the most followed far above the median.
    let followers: HashMap<i64, i64> = numbers::<2>(
        &test,
        "SELECT u.id, COALESCE(c.followers, 0) FROM users u LEFT JOIN follow_counts c ON c.uid = u.id",
    )
    .await
    .into_iter()
    .map(|[uid, count]| (uid, count))
    .collect();
    let mut ranked: Vec<i64> = followers.values().copied().collect();
    ranked.sort_unstable_by(|a, b| b.cmp(a));
    let above = ranked.iter().filter(|&&count| count > threshold).count();
    assert!((1..=20).contains(&above), "{above} above {threshold}");
    let median = ranked[ranked.len() / 2];
    assert!(
        ranked[0] > 20 * median.max(1),
        "most followed {} vs median {median}",
        ranked[0]
    );

    // Items: exactly one per published article, as the consumer makes it, pulled when its author
    // is above the threshold.
    let articles = numbers::<3>(
        &test,
        "SELECT id, author_id, ctime FROM published_articles WHERE status = 2 ORDER BY id",
    )
    .await;
    let items = sqlx::query(
        "SELECT id, kind, actor, recipient, article_id, comment_id, detail, dedup_key, delivery, \
         fanout_time, fanout_id, ctime FROM feed_events ORDER BY id",
    )
    .fetch_all(test.db.pool())
    .await
    .unwrap();
    assert_eq!(items.len(), articles.len());
    assert_eq!(
        (report.feed_items, report.published),
        (articles.len() as u64, articles.len() as u64)
    );
    let mut pushed_by_author: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
    let mut pulled_by_author: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
    let mut delivery_of = HashMap::new();
    for (k, (item, &[article, author, ctime])) in items.iter().zip(&articles).enumerate() {
        let id: i64 = item.get("id");
        assert_eq!(id, report.first_feed_item_id + k as i64);
        assert_eq!(item.get::<String, _>("kind"), "article");
        assert_eq!(
            item.get::<String, _>("dedup_key"),
            format!("article:{article}")
        );
        assert_eq!(item.get::<String, _>("detail"), "");
        assert_eq!(
            [
                item.get::<i64, _>("article_id"),
                item.get("actor"),
                item.get("recipient"),
                item.get("comment_id"),
                item.get("fanout_time"),
                item.get("fanout_id"),
                item.get("ctime"),
            ],
            [article, author, 0, 0, -1, 0, ctime],
            "item {id}"
        );
        let delivery: i64 = item.get("delivery");
        let pulled = followers[&author] > threshold;
        assert_eq!(delivery, if pulled { 2 } else { 1 }, "item {id}");
        delivery_of.insert(id, delivery);
        let outbox = if pulled {
            &mut pulled_by_author
        } else {
            &mut pushed_by_author
        };
        outbox.entry(author).or_default().push((ctime, id));
    }
    let pulled = delivery_of.values().filter(|&&d| d == 2).count() as u64;
    assert_eq!(pulled, report.pulled);
    assert!(
        pulled > 0 && pulled < report.feed_items,
        "both deliveries: {pulled} of {} pulled",
        report.feed_items
    );

    // Pull authors: every author above the threshold with a reader copy, since the first.
    let mut expected_pull_authors: Vec<[i64; 2]> = numbers::<2>(
        &test,
        "SELECT author_id, MIN(ctime) FROM published_articles GROUP BY author_id ORDER BY author_id",
    )
    .await
    .into_iter()
    .filter(|[author, _]| followers[author] > threshold)
    .collect();
    expected_pull_authors.sort_unstable();
    assert_eq!(
        numbers::<2>(
            &test,
            "SELECT uid, ctime FROM feed_pull_authors ORDER BY uid"
        )
        .await,
        expected_pull_authors
    );
    assert_eq!(report.pull_authors, expected_pull_authors.len() as u64);
    assert!(pulled_by_author
        .keys()
        .all(|author| expected_pull_authors.iter().any(|[uid, _]| uid == author)));

    // Inboxes: each follower holds the newest `cap` pushed items of the authors they follow,
    // and nothing else.
    let mut followees: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for [follower, followee] in numbers::<2>(
        &test,
        "SELECT follower, followee FROM follows WHERE status = 1",
    )
    .await
    {
        followees.entry(follower).or_default().push(followee);
    }
    let mut expected_inbox = BTreeSet::new();
    let mut capped = 0;
    for (&follower, authors) in &followees {
        let mut wanted: Vec<(i64, i64, i64)> = authors
            .iter()
            .flat_map(|author| {
                pushed_by_author
                    .get(author)
                    .into_iter()
                    .flatten()
                    .map(move |&(ctime, id)| (ctime, id, *author))
            })
            .collect();
        if wanted.len() > cap {
            capped += 1;
        }
        wanted.sort_unstable_by(|a, b| b.cmp(a));
        for (ctime, id, author) in wanted.into_iter().take(cap) {
            expected_inbox.insert((follower, id, author, ctime));
        }
    }
    let inbox: BTreeSet<(i64, i64, i64, i64)> =
        sqlx::query("SELECT uid, event_id, actor, kind, ctime FROM feed_inbox")
            .fetch_all(test.db.pool())
            .await
            .unwrap()
            .iter()
            .map(|row| {
                assert_eq!(row.get::<String, _>("kind"), "article");
                (
                    row.get("uid"),
                    row.get("event_id"),
                    row.get("actor"),
                    row.get("ctime"),
                )
            })
            .collect();
    assert_eq!(report.inbox_rows, inbox.len() as u64);
    assert_eq!(inbox, expected_inbox, "inbox rows");
    assert!(inbox.iter().all(|(_, id, _, _)| delivery_of[id] == 1));
    let mut per_user: HashMap<i64, usize> = HashMap::new();
    for (uid, ..) in &inbox {
        *per_user.entry(*uid).or_default() += 1;
    }
    assert!(per_user.values().all(|&rows| rows <= cap));
    assert!(
        capped > 10 && per_user.values().any(|&rows| rows < cap),
        "{capped} inboxes capped"
    );

    // The feed service reads it as the runtime wrote it: a follower of a pull author and of
    // pushed authors pages through their inbox merged with the pull author's outbox.
    let (reader, expected_feed) = followees
        .iter()
        .find_map(|(&reader, authors)| {
            let pulls: Vec<(i64, i64)> = authors
                .iter()
                .filter_map(|author| pulled_by_author.get(author))
                .flatten()
                .copied()
                .collect();
            let own: Vec<(i64, i64)> = expected_inbox
                .iter()
                .filter(|(uid, ..)| *uid == reader)
                .map(|&(_, id, _, ctime)| (ctime, id))
                .collect();
            (!pulls.is_empty() && !own.is_empty()).then(|| {
                let mut feed: Vec<(i64, i64)> = pulls.into_iter().chain(own).collect();
                feed.sort_unstable_by(|a, b| b.cmp(a));
                (reader, feed)
            })
        })
        .expect("a reader following pushed and pulled authors");
    let feed = FeedService::new(FeedStore::new(test.db.clone()), threshold);
    let (mut served, mut cursor) = (Vec::new(), None::<String>);
    loop {
        let page = feed.page(reader, cursor.as_deref(), 20).await.unwrap();
        served.extend(page.items.iter().map(|item| (item.ctime, item.id)));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
        assert!(served.len() <= expected_feed.len(), "the feed does not end");
    }
    assert_eq!(served, expected_feed, "reader {reader}'s feed");

    // Without follows, every published article is still an item (pushed to no one), so a
    // follow made later back-fills it.
    let alone = TestDb::new(test.db.kind(), &MIGRATIONS).await;
    let report = run(
        &alone,
        &Plan {
            follows: 0,
            ..plan(7)
        },
    )
    .await;
    assert_eq!(
        (
            report.follows,
            report.pulled,
            report.pull_authors,
            report.inbox_rows
        ),
        (0, 0, 0, 0)
    );
    assert_eq!(
        scalar(
            &alone,
            "SELECT COUNT(*) FROM feed_events e JOIN published_articles p ON p.id = e.article_id \
             WHERE e.delivery = 1 AND p.status = 2 AND e.actor = p.author_id"
        )
        .await,
        report.published as i64
    );
    for table in [
        "follows",
        "follow_counts",
        "feed_pull_authors",
        "feed_inbox",
    ] {
        assert_eq!(
            scalar(&alone, &format!("SELECT COUNT(*) FROM {table}")).await,
            0,
            "{table}"
        );
    }
}

async fn the_same_seed_gives_the_same_data(test: TestDb) {
    let kind = test.db.kind();
    run(&test, &plan(11)).await;
    let expected = digest(&test).await;

    // Same plan, likes sorted in many small passes instead of one: the same rows.
    let again = TestDb::new(kind, &MIGRATIONS).await;
    run(
        &again,
        &Plan {
            likes_per_pass: 300,
            ..plan(11)
        },
    )
    .await;
    assert_eq!(digest(&again).await, expected);

    let other = TestDb::new(kind, &MIGRATIONS).await;
    run(&other, &plan(12)).await;
    assert_ne!(digest(&other).await, expected);
}

async fn seeding_again_adds_after_existing_rows(test: TestDb) {
    let users = UserStore::new(test.db.clone());
    let before = users
        .insert("existing@example.com", "hash", UNTIL)
        .await
        .unwrap();
    let first = run(&test, &plan(3)).await;
    assert_eq!(first.first_user_id, before + 1);
    let second = run(&test, &plan(4)).await;
    assert_eq!(second.first_user_id, first.first_user_id + 500);
    assert_eq!(second.first_article_id, first.first_article_id + 600);
    assert_eq!(
        second.first_comment_id,
        first.first_comment_id + first.comments as i64
    );
    assert_eq!(scalar(&test, "SELECT COUNT(*) FROM users").await, 1_001);
    assert_eq!(
        scalar(&test, "SELECT COUNT(*) FROM user_likes").await,
        8_000
    );
    assert_eq!(
        scalar(
            &test,
            "SELECT CAST(SUM(like_cnt) AS BIGINT) FROM interactives"
        )
        .await,
        8_000
    );
    // The second seed's follows are among its own users; its items continue the ids.
    assert_eq!(
        scalar(&test, "SELECT COUNT(*) FROM follows").await,
        2 * FOLLOWS as i64
    );
    assert_eq!(
        scalar(
            &test,
            &format!(
                "SELECT COUNT(*) FROM follows WHERE (follower >= {0}) <> (followee >= {0})",
                second.first_user_id
            )
        )
        .await,
        0
    );
    assert_eq!(
        second.first_feed_item_id,
        first.first_feed_item_id + first.feed_items as i64
    );
    assert_eq!(
        scalar(&test, "SELECT COUNT(*) FROM feed_events").await,
        (first.feed_items + second.feed_items) as i64
    );

    // The application's own inserts get fresh ids after the seeded ones (PostgreSQL's identity
    // sequences were moved past the explicit ids).
    let after = users
        .insert("later@example.com", "hash", UNTIL)
        .await
        .unwrap();
    assert_eq!(after, second.first_user_id + 500);
    let draft = Draft::parse("t", "<p>c</p>", true).unwrap();
    let article = ArticleStore::new(test.db.clone())
        .save_draft(after, None, &draft, UNTIL)
        .await
        .unwrap();
    assert_eq!(article, second.first_article_id + 600);
    let item: i64 = sqlx::query_scalar(
        "INSERT INTO feed_events (kind, actor, recipient, article_id, comment_id, detail, \
         dedup_key, delivery, fanout_time, fanout_id, ctime) \
         VALUES ('follow', $1, $1, 0, 0, '', 'follow:later', 1, -1, 0, $2) RETURNING id",
    )
    .bind(after)
    .bind(UNTIL)
    .fetch_one(test.db.writer())
    .await
    .unwrap();
    assert_eq!(item, second.first_feed_item_id + second.feed_items as i64);
    let commented: i64 = sqlx::query_scalar("SELECT biz_id FROM comments ORDER BY id DESC LIMIT 1")
        .fetch_one(test.db.pool())
        .await
        .unwrap();
    let comment = webook::comment::NewComment::new(
        after,
        webook::biz::Biz::Article,
        commented,
        None,
        "after the seed".to_owned(),
    )
    .unwrap();
    let written = webook::comment::CommentStore::new(test.db.clone())
        .create(&comment, UNTIL, false, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(written.id, second.first_comment_id + second.comments as i64);
    let tag = TagStore::new(test.db.clone())
        .create(after, &TagName::parse("later").unwrap(), 1000, UNTIL)
        .await
        .unwrap();
    assert_eq!(
        tag,
        Created::New((first.tags.tags + second.tags.tags) as i64 + 1)
    );
}

async fn an_impossible_plan_writes_nothing(test: TestDb) {
    // 20 users can like each of the ~540 published articles at most once each.
    let too_many = Plan {
        users: 20,
        likes: 20 * 600,
        follows: 0,
        ..plan(5)
    };
    let err = seed(&test.db, &too_many, &ProgressBar::hidden())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("--likes"), "{err:#}");
    let no_days = Plan { days: 0, ..plan(5) };
    let err = seed(&test.db, &no_days, &ProgressBar::hidden())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("--days"), "{err:#}");
    let no_authors = Plan {
        users: 0,
        likes: 0,
        collects: 0,
        ..plan(5)
    };
    let err = seed(&test.db, &no_authors, &ProgressBar::hidden())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("--users"), "{err:#}");
    // 20 users can make 20 × 19 follows at most.
    let too_many_follows = Plan {
        users: 20,
        likes: 0,
        collects: 0,
        follows: 20 * 19 + 1,
        ..plan(5)
    };
    let err = seed(&test.db, &too_many_follows, &ProgressBar::hidden())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("--follows"), "{err:#}");
    let too_many_tags = Plan {
        tags_per_author: 1_000,
        ..plan(5)
    };
    let err = seed(&test.db, &too_many_tags, &ProgressBar::hidden())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("--tags-per-author"), "{err:#}");
    for table in [
        "users",
        "articles",
        "interactives",
        "user_likes",
        "follows",
        "follow_counts",
        "feed_events",
        "feed_inbox",
        "comments",
        "tags",
    ] {
        assert_eq!(
            scalar(&test, &format!("SELECT COUNT(*) FROM {table}")).await,
            0,
            "{table}"
        );
    }
}

async fn seeds_comment_threads_with_exact_counters(test: TestDb) {
    let report = run(&test, &plan(5)).await;
    let all = COMMENTS + 2 * HOT_THREAD_COMMENTS;
    assert_eq!(report.comments, all);
    assert_eq!(
        scalar(&test, "SELECT COUNT(*) FROM comments").await,
        all as i64
    );
    assert_eq!(
        scalar(&test, "SELECT COUNT(DISTINCT biz_id) FROM comments").await,
        report.commented_articles as i64
    );
    // Every counter matches its rows, as the runtime keeps them.
    for (what, sql) in [
        (
            "comment_cnt",
            "SELECT COUNT(*) FROM interactives i WHERE i.biz = 'article' AND i.comment_cnt <> \
             (SELECT COUNT(*) FROM comments c WHERE c.biz_id = i.biz_id)",
        ),
        (
            "articles without their count",
            "SELECT COUNT(DISTINCT c.biz_id) FROM comments c WHERE NOT EXISTS \
             (SELECT 1 FROM interactives i WHERE i.biz = 'article' AND i.biz_id = c.biz_id)",
        ),
        (
            "child_cnt",
            "SELECT COUNT(*) FROM comments c WHERE c.child_cnt <> \
             (SELECT COUNT(*) FROM comments k WHERE k.parent_id = c.id)",
        ),
        (
            "reply_cnt",
            "SELECT COUNT(*) FROM comments c WHERE c.reply_cnt <> CASE WHEN c.root_id = 0 THEN \
             (SELECT COUNT(*) FROM comments k WHERE k.root_id = c.id) ELSE 0 END",
        ),
        (
            "replies outside their parent's thread",
            "SELECT COUNT(*) FROM comments c JOIN comments p ON p.id = c.parent_id \
             WHERE c.root_id <> CASE WHEN p.root_id = 0 THEN p.id ELSE p.root_id END \
             OR p.biz_id <> c.biz_id OR p.id >= c.id",
        ),
        (
            "orphans",
            "SELECT COUNT(*) FROM comments c WHERE c.parent_id <> 0 AND NOT EXISTS \
             (SELECT 1 FROM comments p WHERE p.id = c.parent_id)",
        ),
        (
            "comments on drafts or before their article",
            "SELECT COUNT(*) FROM comments c LEFT JOIN published_articles p ON p.id = c.biz_id \
             WHERE p.id IS NULL OR c.ctime < p.ctime",
        ),
    ] {
        assert_eq!(scalar(&test, sql).await, 0, "{what}");
    }
    // The two hot threads are the two biggest, each past its extra comments.
    let biggest = numbers::<1>(
        &test,
        "SELECT COUNT(*) FROM comments GROUP BY biz_id ORDER BY COUNT(*) DESC LIMIT 3",
    )
    .await;
    assert!(biggest[1][0] >= HOT_THREAD_COMMENTS as i64, "{biggest:?}");
    assert!(biggest[2][0] < HOT_THREAD_COMMENTS as i64, "{biggest:?}");
    // Threads nest: replies to replies, and top-level comments with many replies.
    assert!(
        scalar(
            &test,
            "SELECT COUNT(*) FROM comments WHERE parent_id <> root_id"
        )
        .await
            > 500
    );
    assert!(scalar(&test, "SELECT MAX(reply_cnt) FROM comments").await > 100);
}

platform::backend_tests!(webook::schema::MIGRATIONS;
    seeds_a_consistent_skewed_dataset,
    seeds_comment_threads_with_exact_counters,
    seeds_follows_and_the_feed_the_runtime_would_have,
    the_same_seed_gives_the_same_data,
    seeding_again_adds_after_existing_rows,
    an_impossible_plan_writes_nothing,
);
