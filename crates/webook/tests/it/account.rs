//! The double-entry ledger on SQLite and PostgreSQL: a posting is balanced or refused, posted
//! once however often (and however concurrently) it is repeated, a different repeat is refused,
//! concurrent postings to one account keep its balance the sum of its entries, the whole ledger
//! sums to 0, and `GET /account` pages a user's entries newest first.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use crate::common::{get, member, Setup};
use platform::{config::DatabaseKind, testing::TestDb};
use webook::{
    account::{AccountRef, Ledger, Line, PostError, Posted, Posting, Unbalanced},
    schema::MIGRATIONS,
};

/// The split of a reward of `amt` fen from the clearing account: 10 % to the platform.
fn reward(id: i64, author: i64, amt: i64) -> Posting {
    let platform = amt / 10;
    Posting {
        biz: "reward",
        biz_id: id,
        lines: vec![
            Line {
                account: AccountRef::clearing(),
                amt: -amt,
                memo: format!("reward {id}"),
            },
            Line {
                account: AccountRef::user(author),
                amt: amt - platform,
                memo: format!("reward {id}"),
            },
            Line {
                account: AccountRef::platform_revenue(),
                amt: platform,
                memo: format!("reward {id} share"),
            },
        ],
    }
}

async fn ledger(kind: DatabaseKind) -> (TestDb, Ledger) {
    let db = TestDb::new(kind, &MIGRATIONS).await;
    let ledger = Ledger::new(db.db.clone());
    (db, ledger)
}

async fn balance_of(ledger: &Ledger, uid: i64) -> i64 {
    ledger.user_account(uid, None, 1).await.unwrap().balance
}

async fn assert_sound(ledger: &Ledger) {
    let audit = ledger.audit().await.unwrap();
    assert_eq!(audit.total_balance, 0, "{audit:?}");
    assert_eq!(audit.total_entries, 0, "{audit:?}");
    assert!(audit.mismatched.is_empty(), "{audit:?}");
}

async fn a_repeated_posting_is_posted_once(kind: DatabaseKind) {
    let (_db, ledger) = ledger(kind).await;
    let posting = reward(1, 7, 1000);
    let attempts = (0..10).map(|_| {
        let (ledger, posting) = (ledger.clone(), posting.clone());
        tokio::spawn(async move { ledger.post_once(&posting).await.unwrap() })
    });
    let outcomes: Vec<Posted> = futures_util::future::join_all(attempts)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        outcomes.iter().filter(|o| **o == Posted::Posted).count(),
        1,
        "{outcomes:?}"
    );
    assert_eq!(balance_of(&ledger, 7).await, 900);
    let entries = ledger
        .user_account(7, None, 10)
        .await
        .unwrap()
        .entries
        .items;
    assert_eq!(entries.len(), 1);
    assert_sound(&ledger).await;
}

async fn a_different_repeat_or_an_unbalanced_posting_changes_nothing(kind: DatabaseKind) {
    let (_db, ledger) = ledger(kind).await;
    assert_eq!(
        ledger.post_once(&reward(1, 7, 1000)).await.unwrap(),
        Posted::Posted
    );
    let altered = reward(1, 7, 5000);
    assert!(matches!(
        ledger.post_once(&altered).await,
        Err(PostError::Conflicting {
            biz: "reward",
            biz_id: 1
        })
    ));
    let mut unbalanced = reward(2, 7, 1000);
    unbalanced.lines[1].amt += 1;
    assert!(matches!(
        ledger.post_once(&unbalanced).await,
        Err(PostError::Unbalanced(Unbalanced::NotZero(1)))
    ));
    assert_eq!(balance_of(&ledger, 7).await, 900);
    assert_sound(&ledger).await;
}

async fn concurrent_postings_keep_each_balance_the_sum_of_its_entries(kind: DatabaseKind) {
    let (_db, ledger) = ledger(kind).await;
    // 60 rewards to two authors at once, from amounts that do not split evenly.
    let postings = (1..=60).map(|id| {
        let ledger = ledger.clone();
        tokio::spawn(async move {
            let author = 100 + id % 2;
            ledger
                .post_once(&reward(id, author, 37 * id + 3))
                .await
                .unwrap()
        })
    });
    for outcome in futures_util::future::join_all(postings).await {
        assert_eq!(outcome.unwrap(), Posted::Posted);
    }
    let expected = |parity: i64| -> i64 {
        (1..=60)
            .filter(|id| id % 2 == parity)
            .map(|id| {
                let amt = 37 * id + 3;
                amt - amt / 10
            })
            .sum()
    };
    assert_eq!(balance_of(&ledger, 100).await, expected(0));
    assert_eq!(balance_of(&ledger, 101).await, expected(1));
    assert_sound(&ledger).await;
}

macro_rules! both_databases {
    ($($name:ident),+ $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(platform::config::DatabaseKind::Sqlite).await
                }
            )+
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(platform::config::DatabaseKind::Postgres).await
                }
            )+
        }
    };
}

both_databases!(
    a_repeated_posting_is_posted_once,
    a_different_repeat_or_an_unbalanced_posting_changes_nothing,
    concurrent_postings_keep_each_balance_the_sum_of_its_entries,
);

async fn the_account_route_pages_the_callers_entries_newest_first(setup: Setup) {
    let app = setup.spawn(|_| {}).await;
    let reader = member(&app, "account-reader").await;
    let empty = get(&app, "/account", Some(&reader.token)).await.json();
    assert_eq!(empty["code"], 0);
    assert_eq!(empty["data"]["balance"], 0);
    assert_eq!(empty["data"]["currency"], "CNY");
    assert!(empty["data"]["entries"]["items"]
        .as_array()
        .unwrap()
        .is_empty());
    assert_eq!(get(&app, "/account", None).await.status, 401);

    let ledger: Ledger = app.service();
    for id in 1..=5 {
        ledger
            .post_once(&reward(id, reader.uid, 100 * id))
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(cursor) => format!("/account?limit=2&cursor={cursor}"),
            None => "/account?limit=2".to_owned(),
        };
        let page = get(&app, &path, Some(&reader.token)).await.json();
        assert_eq!(
            page["data"]["balance"],
            (1..=5).map(|id| 90 * id).sum::<i64>()
        );
        for entry in page["data"]["entries"]["items"].as_array().unwrap() {
            seen.push((
                entry["bizId"].as_i64().unwrap(),
                entry["amt"].as_i64().unwrap(),
            ));
        }
        match page["data"]["entries"]["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, [(5, 450), (4, 360), (3, 270), (2, 180), (1, 90)]);
}

crate::setup_tests!(the_account_route_pages_the_callers_entries_newest_first);
