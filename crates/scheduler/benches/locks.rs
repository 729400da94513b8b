//! Cost of the lock operations a job run makes ([`LockBackend`]): an acquire + release round trip
//! on [`InProcessLocks`] and on [`RedisLocks`], an acquire that also claims a fire time (what a
//! driver does at every tick) + release on Redis, and an extend of a held Redis lock (what a long
//! lock's keep-alive does every ttl / 3).
//!
//! ```text
//! SCHEDULER_TEST_REDIS_URL=redis://127.0.0.1:6390/ cargo bench -p scheduler --bench locks
//! ```
//!
//! The Redis benchmarks need a real Redis at `SCHEDULER_TEST_REDIS_URL` and panic when it is
//! unset (they never skip silently); a throwaway server will do:
//! `redis-server --port 6390 --save '' --appendonly no --daemonize yes`, stopped afterwards with
//! `redis-cli -p 6390 shutdown nosave`. Keys go under a fresh `bench:<uuid>:` prefix and are
//! deleted at the end. Each backend's contract (mutual exclusion, owner-checked release and
//! extend, claimed ticks) is checked once before it is measured, so a broken backend cannot
//! produce fast figures. Figures go to `docs/PERFORMANCE.md`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use scheduler::{InProcessLocks, LockBackend, RedisLocks};
use tokio::runtime::Runtime;

/// Environment variable with the Redis URL (the one the tests use).
const REDIS_URL_ENV: &str = "SCHEDULER_TEST_REDIS_URL";
/// Lock ttl for every benchmark: long enough that no lock expires while measured.
const TTL: Duration = Duration::from_secs(60);

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Checks once that `locks` honours the contract the benchmarks rely on.
async fn check_contract(locks: &dyn LockBackend) {
    const KEY: &str = "contract";
    let grant = locks
        .try_acquire(KEY, TTL, Some(1))
        .await
        .unwrap()
        .expect("a free lock is granted");
    assert!(
        locks.try_acquire(KEY, TTL, None).await.unwrap().is_none(),
        "a held lock must not be granted again"
    );
    assert!(
        !locks.release(KEY, "not-the-owner").await.unwrap(),
        "only the owner may release"
    );
    assert!(
        !locks.extend(KEY, "not-the-owner", TTL).await.unwrap(),
        "only the owner may extend"
    );
    assert!(locks.extend(KEY, &grant.owner, TTL).await.unwrap());
    assert!(locks.release(KEY, &grant.owner).await.unwrap());
    assert!(
        locks
            .try_acquire(KEY, TTL, Some(1))
            .await
            .unwrap()
            .is_none(),
        "a claimed fire time must not be claimed again"
    );
    let next = locks
        .try_acquire(KEY, TTL, Some(2))
        .await
        .unwrap()
        .expect("a later fire time is granted");
    assert!(next.fencing_token > grant.fencing_token);
    assert!(locks.release(KEY, &next.owner).await.unwrap());
}

fn in_process(c: &mut Criterion) {
    let runtime = runtime();
    let locks = InProcessLocks::new();
    runtime.block_on(check_contract(&locks));

    let mut group = c.benchmark_group("in_process");
    group.bench_function("acquire_release", |b| {
        b.to_async(&runtime).iter(|| async {
            let grant = locks
                .try_acquire("acquire_release", TTL, None)
                .await
                .unwrap()
                .expect("free lock");
            assert!(locks
                .release("acquire_release", &grant.owner)
                .await
                .unwrap());
        });
    });
    group.finish();
}

/// The Redis URL; panics with instructions when unset.
fn redis_url() -> String {
    std::env::var(REDIS_URL_ENV).unwrap_or_else(|_| {
        panic!(
            "{REDIS_URL_ENV} is not set: the Redis lock benchmarks need a real Redis. Start a \
             throwaway one (redis-server --port 6390 --save '' --appendonly no --daemonize yes) \
             and run {REDIS_URL_ENV}=redis://127.0.0.1:6390/ cargo bench -p scheduler --bench locks"
        )
    })
}

async fn connect(url: &str) -> ConnectionManager {
    let client = redis::Client::open(url).expect("redis URL");
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_millis(500)))
        .set_response_timeout(Some(Duration::from_millis(500)))
        .set_number_of_retries(1);
    ConnectionManager::new_with_config(client, config)
        .await
        .unwrap_or_else(|err| panic!("cannot connect to {REDIS_URL_ENV} {url}: {err}"))
}

fn redis(c: &mut Criterion) {
    let url = redis_url();
    let runtime = runtime();
    let connection = runtime.block_on(connect(&url));
    let prefix = format!("bench:{}:", uuid::Uuid::new_v4().simple());
    let locks = RedisLocks::new(connection.clone(), prefix.clone());
    runtime.block_on(check_contract(&locks));

    let mut group = c.benchmark_group("redis");
    group.bench_function("acquire_release", |b| {
        b.to_async(&runtime).iter(|| async {
            let grant = locks
                .try_acquire("acquire_release", TTL, None)
                .await
                .unwrap()
                .expect("free lock");
            assert!(locks
                .release("acquire_release", &grant.owner)
                .await
                .unwrap());
        });
    });

    // Fire times only move forward, as a driver's do: one millisecond per iteration from now.
    let mut tick = chrono::Utc::now().timestamp_millis();
    group.bench_function("claim_release", |b| {
        b.to_async(&runtime).iter(|| {
            tick += 1;
            let tick = tick;
            let locks = &locks;
            async move {
                let grant = locks
                    .try_acquire("claim_release", TTL, Some(tick))
                    .await
                    .unwrap()
                    .expect("free lock, new fire time");
                assert!(locks.release("claim_release", &grant.owner).await.unwrap());
            }
        });
    });

    let held = runtime
        .block_on(locks.try_acquire("extend", TTL, None))
        .unwrap()
        .expect("free lock");
    group.bench_function("extend", |b| {
        b.to_async(&runtime).iter(|| async {
            assert!(locks.extend("extend", &held.owner, TTL).await.unwrap());
        });
    });
    group.finish();
    assert!(runtime
        .block_on(locks.release("extend", &held.owner))
        .unwrap());

    // Every key the backend wrote: `<prefix>{<key>}` plus its `:fence` and `:tick` companions.
    let keys: Vec<String> = ["contract", "acquire_release", "claim_release", "extend"]
        .iter()
        .flat_map(|key| {
            let lock = format!("{prefix}{{{key}}}");
            [format!("{lock}:fence"), format!("{lock}:tick"), lock]
        })
        .collect();
    let mut connection = connection;
    let _: i64 = runtime
        .block_on(redis::cmd("DEL").arg(&keys).query_async(&mut connection))
        .expect("delete the benchmark's keys");
}

criterion_group!(benches, in_process, redis);
criterion_main!(benches);
