//! `webook seed` on SQLite and PostgreSQL: the dataset is consistent (counters equal the like
//! and collect rows, reader copies match their status, times in their windows), skewed as
//! Zipf's law says, made of content the article feature would have stored (sanitised bodies,
//! their abstracts, Chinese and English), readable through the real stores (login, reader copy,
//! counters, liked flags), reproducible for a seed whatever the memory budget of a pass, added
//! after existing rows (sequences moved on PostgreSQL), and an impossible plan writes nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use indicatif::ProgressBar;
use platform::testing::TestDb;
use sha2::{Digest, Sha256};
use sqlx::Row;
use webook::schema::MIGRATIONS;
use webook::{
    article::{
        model::{abstract_of, sanitize_html, Draft, MAX_TITLE_CHARS},
        store::ArticleStore,
    },
    auth::password::PasswordHasher,
    interactive::store::InteractiveStore,
    seed::{seed, Plan, Report},
    user::store::UserStore,
};

const DAY_MS: i64 = 24 * 3600 * 1000;
/// 2026-11-30T00:00:00Z: a fixed window end, so runs are comparable.
const UNTIL: i64 = 1_796_083_200_000;

fn plan(seed: u64) -> Plan {
    Plan {
        users: 500,
        articles: 600,
        likes: 4_000,
        collects: 500,
        reads: 300_000,
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
        "SELECT biz, biz_id, read_cnt, like_cnt, collect_cnt, ctime, utime FROM interactives ORDER BY biz_id",
        "SELECT uid, biz, biz_id, status, ctime, utime FROM user_likes ORDER BY uid, biz_id",
        "SELECT uid, biz, biz_id, cid, status, ctime, utime FROM user_collects ORDER BY uid, biz_id",
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
    let hasher = PasswordHasher::new().unwrap();
    assert!(hasher
        .verify(plan.password.clone(), Some(hash.clone()))
        .await
        .unwrap());
    assert!(!hasher
        .verify("wrong-Password-1!".into(), Some(hash))
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
}

async fn an_impossible_plan_writes_nothing(test: TestDb) {
    // 20 users can like each of the ~540 published articles at most once each.
    let too_many = Plan {
        users: 20,
        likes: 20 * 600,
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
    for table in ["users", "articles", "interactives", "user_likes"] {
        assert_eq!(
            scalar(&test, &format!("SELECT COUNT(*) FROM {table}")).await,
            0,
            "{table}"
        );
    }
}

platform::backend_tests!(webook::schema::MIGRATIONS;
    seeds_a_consistent_skewed_dataset,
    the_same_seed_gives_the_same_data,
    seeding_again_adds_after_existing_rows,
    an_impossible_plan_writes_nothing,
);
