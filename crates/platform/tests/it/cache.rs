//! The versioned object cache on both layouts: in-process, and Redis with a near cache.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::time::Duration;

use axum::body::Bytes;
use platform::testing::{redis_url, RedisServer};
use platform::{
    cache::{Lookup, VersionedCache},
    redis::Redis,
};

const TTL: Duration = Duration::from_secs(60);

/// A cache of each layout; the Redis one under a fresh prefix (returned for sharing).
async fn caches() -> Vec<(&'static str, VersionedCache, Option<(Redis, String)>)> {
    let redis = Redis::connect(&redis_url()).await.unwrap();
    let prefix = format!("test-{}", uuid::Uuid::new_v4().simple());
    vec![
        (
            "local",
            VersionedCache::new("probe", 1 << 20, TTL, None),
            None,
        ),
        (
            "redis",
            VersionedCache::new("probe", 1 << 20, TTL, Some((&redis, &prefix))),
            Some((redis, prefix)),
        ),
    ]
}

fn hit(lookup: Lookup) -> Option<Bytes> {
    match lookup {
        Lookup::Hit(bytes) => Some(bytes),
        Lookup::Miss(_) => None,
    }
}

#[tokio::test]
async fn a_miss_filled_becomes_a_hit() {
    for (layout, cache, _) in caches().await {
        let Lookup::Miss(token) = cache.get("k").await else {
            panic!("{layout}: hit on empty")
        };
        cache.fill("k", token, Bytes::from_static(b"v1")).await;
        assert_eq!(
            hit(cache.get("k").await).as_deref(),
            Some(&b"v1"[..]),
            "{layout}"
        );
    }
}

#[tokio::test]
async fn writes_replace_and_invalidate() {
    for (layout, cache, _) in caches().await {
        cache.set("k", Bytes::from_static(b"v1")).await;
        assert_eq!(
            hit(cache.get("k").await).as_deref(),
            Some(&b"v1"[..]),
            "{layout}"
        );
        cache.set("k", Bytes::from_static(b"v2")).await;
        assert_eq!(
            hit(cache.get("k").await).as_deref(),
            Some(&b"v2"[..]),
            "{layout}"
        );
        cache.invalidate("k").await;
        assert!(
            hit(cache.get("k").await).is_none(),
            "{layout}: served after invalidate"
        );
    }
}

#[tokio::test]
async fn a_fill_that_lost_the_race_to_a_writer_is_refused() {
    for (layout, cache, _) in caches().await {
        // A reader misses and goes to the database…
        let Lookup::Miss(token) = cache.get("k").await else {
            panic!()
        };
        // …a writer commits and invalidates…
        cache.invalidate("k").await;
        // …and the reader's stale value must not land.
        cache.fill("k", token, Bytes::from_static(b"stale")).await;
        assert!(
            hit(cache.get("k").await).is_none(),
            "{layout}: stale fill accepted after invalidate"
        );

        let Lookup::Miss(token) = cache.get("k").await else {
            panic!()
        };
        cache.set("k", Bytes::from_static(b"new")).await;
        cache.fill("k", token, Bytes::from_static(b"stale")).await;
        assert_eq!(
            hit(cache.get("k").await).as_deref(),
            Some(&b"new"[..]),
            "{layout}: stale fill overwrote a write"
        );

        // A reader after the write may fill again.
        cache.invalidate("k").await;
        let Lookup::Miss(token) = cache.get("k").await else {
            panic!()
        };
        cache.fill("k", token, Bytes::from_static(b"fresh")).await;
        assert_eq!(
            hit(cache.get("k").await).as_deref(),
            Some(&b"fresh"[..]),
            "{layout}"
        );
    }
}

#[tokio::test]
async fn a_writer_refills_after_its_invalidation_unless_a_later_writer_came() {
    for (layout, cache, _) in caches().await {
        cache.set("k", Bytes::from_static(b"old")).await;
        // The writer's own refill (the state it read after committing) is served.
        let token = cache.invalidate_for_refill("k").await;
        assert!(
            hit(cache.get("k").await).is_none(),
            "{layout}: served after invalidate"
        );
        cache
            .fill("k", token, Bytes::from_static(b"refilled"))
            .await;
        assert_eq!(
            hit(cache.get("k").await).as_deref(),
            Some(&b"refilled"[..]),
            "{layout}"
        );
        // A second writer invalidated after the first read its state: the first one's refill
        // (possibly older than the second write) is refused.
        let first = cache.invalidate_for_refill("k").await;
        let second = cache.invalidate_for_refill("k").await;
        cache.fill("k", first, Bytes::from_static(b"stale")).await;
        assert!(
            hit(cache.get("k").await).is_none(),
            "{layout}: stale refill accepted"
        );
        cache.fill("k", second, Bytes::from_static(b"newest")).await;
        assert_eq!(
            hit(cache.get("k").await).as_deref(),
            Some(&b"newest"[..]),
            "{layout}"
        );
    }
}

#[tokio::test]
async fn a_fill_is_refused_after_the_writers_tombstone_was_evicted() {
    // Room for a handful of entries (each weighs its bytes plus ~256 of bookkeeping).
    let cache = VersionedCache::new("tiny", 4_000, TTL, None);
    let Lookup::Miss(reader) = cache.get("k").await else {
        panic!("hit on empty")
    };
    // The reader loads the old row; meanwhile a writer commits and invalidates.
    cache.invalidate("k").await;
    // Other, more popular keys push the tombstone out (W-TinyLFU keeps what is read often, so
    // "k" is looked at only now and then). Once it is gone, each miss on "k" gets a fresh token
    // instead of the tombstone's version.
    let tombstone_gone = async {
        for n in 0..50_000 {
            let other = format!("other-{n}");
            cache.set(&other, Bytes::from(vec![b'x'; 500])).await;
            for _ in 0..3 {
                cache.get(&other).await;
            }
            if n % 100 == 99 {
                let (Lookup::Miss(a), Lookup::Miss(b)) =
                    (cache.get("k").await, cache.get("k").await)
                else {
                    panic!("hit after invalidate")
                };
                if a != b {
                    return;
                }
            }
        }
        panic!("the tombstone was never evicted");
    };
    tokio::time::timeout(Duration::from_secs(20), tombstone_gone)
        .await
        .expect("eviction within 20 s");
    // The reader's fill would put back the row from before the write: refused.
    cache.fill("k", reader, Bytes::from_static(b"stale")).await;
    assert!(
        hit(cache.get("k").await).is_none(),
        "a fill from before the evicted tombstone was accepted"
    );
    // A reader that misses now fills as usual.
    let Lookup::Miss(fresh) = cache.get("k").await else {
        panic!("hit")
    };
    cache.fill("k", fresh, Bytes::from_static(b"new")).await;
    assert_eq!(hit(cache.get("k").await).as_deref(), Some(&b"new"[..]));
}

#[tokio::test]
async fn near_caches_of_other_instances_see_writes_at_once() {
    let redis = Redis::connect(&redis_url()).await.unwrap();
    let prefix = format!("test-{}", uuid::Uuid::new_v4().simple());
    let first = VersionedCache::new("probe", 1 << 20, TTL, Some((&redis, &prefix)));
    let second = VersionedCache::new("probe", 1 << 20, TTL, Some((&redis, &prefix)));
    first.set("k", Bytes::from_static(b"v1")).await;
    assert_eq!(hit(second.get("k").await).as_deref(), Some(&b"v1"[..]));
    // second now holds v1 in its near cache; a write elsewhere must win over it.
    first.set("k", Bytes::from_static(b"v2")).await;
    assert_eq!(hit(second.get("k").await).as_deref(), Some(&b"v2"[..]));
    first.invalidate("k").await;
    assert!(hit(second.get("k").await).is_none());
}

#[tokio::test]
async fn a_redis_outage_is_a_miss_not_an_error() {
    let mut server = RedisServer::start().await;
    let redis = Redis::connect(&server.url()).await.unwrap();
    let cache = VersionedCache::new("probe", 1 << 20, TTL, Some((&redis, "test")));
    cache.set("k", Bytes::from_static(b"v1")).await;
    server.stop();
    let Lookup::Miss(token) = cache.get("k").await else {
        panic!("served without Redis")
    };
    // Neither fills nor writes panic or hang while Redis is away.
    cache.fill("k", token, Bytes::from_static(b"v2")).await;
    cache.set("k", Bytes::from_static(b"v3")).await;
    cache.invalidate("k").await;
}

/// `calls` of `command` in `INFO commandstats` (0 when it never ran).
async fn command_calls(redis: &Redis, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut redis.connection())
        .await
        .unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

#[tokio::test]
async fn lookups_made_together_cost_one_round_trip_and_stay_exact() {
    // A private server: its command statistics are this test's alone.
    let server = RedisServer::start().await;
    let here = Redis::connect(&server.url()).await.unwrap();
    let elsewhere = Redis::connect(&server.url()).await.unwrap();
    let caches = |redis: &Redis| {
        ["copies", "counts", "flags"]
            .map(|name| VersionedCache::new(name, 1 << 20, TTL, Some((redis, "test"))))
    };
    let (ours, theirs) = (caches(&here), caches(&elsewhere));
    ours[0].set("k", Bytes::from_static(b"copy")).await;
    ours[1].set("k", Bytes::from_static(b"counts-1")).await;
    // Another instance changes the counters: our near copy is stale. Nobody has flags.
    theirs[1].set("k", Bytes::from_static(b"counts-2")).await;
    let lookups = || async { tokio::join!(ours[0].get("k"), ours[1].get("k"), ours[2].get("k")) };
    let check = |(copy, counts, flags): (Lookup, Lookup, Lookup)| {
        assert_eq!(
            hit(copy).as_deref(),
            Some(&b"copy"[..]),
            "unchanged near copy"
        );
        assert_eq!(
            hit(counts).as_deref(),
            Some(&b"counts-2"[..]),
            "changed elsewhere"
        );
        assert!(hit(flags).is_none(), "absent everywhere");
    };

    // The script's first call on a server is refused (`NOSCRIPT`) and repeated after loading it.
    ours[2].get("warm-up").await;
    let before = command_calls(&here, "evalsha").await;
    check(platform::redis_probe::together(lookups()).await);
    assert_eq!(
        command_calls(&here, "evalsha").await - before,
        1,
        "together"
    );
    assert_eq!(command_calls(&here, "hmget").await, 0);

    // Each on its own: a round trip each (and the same answers; counts-2 is now near).
    theirs[1].set("k", Bytes::from_static(b"counts-2")).await;
    let before = command_calls(&here, "evalsha").await;
    check(lookups().await);
    assert_eq!(command_calls(&here, "evalsha").await - before, 3, "apart");
}

#[tokio::test]
async fn invalidating_and_refilling_many_at_once_keeps_the_rules_of_one() {
    for (layout, cache, _) in caches().await {
        cache.set("a", Bytes::from_static(b"a1")).await;
        cache.set("b", Bytes::from_static(b"b1")).await;
        // A reader misses on c (never cached) and loads it; the writer's change reaches the
        // database before that reader fills.
        let Lookup::Miss(reader_token) = cache.get("c").await else {
            panic!("{layout}: c was never cached");
        };
        let keys: Vec<String> = ["a", "b", "c"].map(str::to_owned).to_vec();
        let tokens = cache.invalidate_many_for_refill(&keys).await;
        assert_eq!(tokens.len(), 3, "{layout}");
        assert!(tokens[0].is_some() && tokens[1].is_some(), "{layout}");
        // In-process, a key that held nothing is not worth refilling (and costs no entry);
        // in Redis every key is, for the other instances.
        assert_eq!(
            tokens[2].is_some(),
            layout == "redis",
            "{layout}: c's token"
        );
        for key in &keys {
            assert!(
                hit(cache.get(key).await).is_none(),
                "{layout}: {key} invalidated"
            );
        }
        // The reader that missed before the invalidation cannot put its old value back.
        cache
            .fill("c", reader_token, Bytes::from_static(b"c-stale"))
            .await;
        assert!(
            hit(cache.get("c").await).is_none(),
            "{layout}: a fill older than the invalidation was refused"
        );
        // A writer reaches b between the invalidation and the refill: b's refill is refused.
        cache.set("b", Bytes::from_static(b"b-writer")).await;
        let refills = keys
            .iter()
            .zip(tokens)
            .zip(["a2", "b-stale", "c2"])
            .filter_map(|((key, token), value)| {
                Some((key.clone(), token?, Bytes::from_static(value.as_bytes())))
            })
            .collect();
        cache.fill_many(refills).await;
        let c_after = if layout == "redis" { Some("c2") } else { None };
        for (key, want) in [("a", Some("a2")), ("b", Some("b-writer")), ("c", c_after)] {
            assert_eq!(
                hit(cache.get(key).await).as_deref(),
                want.map(str::as_bytes),
                "{layout}: {key}"
            );
        }
    }
}
