//! Lock backends against their contract, each test run on the in-process and the real Redis
//! implementation: mutual exclusion over many rounds, owner-checked extend and release (an
//! expired holder cannot delete its successor's lock), strictly increasing fencing tokens, fire
//! times claimed once — and, on Redis, a holder cut off from the server (a paused proxy) stops
//! considering itself the owner before another instance takes the lock.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use crate::common::{
    connect, in_process_locks, redis_locks, redis_socket_addr, redis_url, unique_prefix,
    wait_until, PausableProxy,
};
use scheduler::{Lease, LockBackend, RedisLocks};

/// Runs each listed test body against both backends.
macro_rules! both_backends {
    ($($name:ident),+ $(,)?) => {
        mod in_process {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name(super::in_process_locks()).await
                }
            )+
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name(super::redis_locks().await).await
                }
            )+
        }
    };
}

both_backends!(
    holders_never_overlap,
    fencing_tokens_strictly_increase,
    expired_holder_cannot_release_or_extend_successor,
    only_the_owner_extends_and_releases,
    each_fire_time_is_claimed_once,
);

const KEY: &str = "job:contended";

async fn holders_never_overlap(locks: Arc<dyn LockBackend>) {
    const CONTENDERS: usize = 6;
    const ROUNDS: usize = 300;
    let inside = Arc::new(AtomicBool::new(false));
    let acquired = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..CONTENDERS {
        let (locks, inside, acquired, tokens) = (
            locks.clone(),
            inside.clone(),
            acquired.clone(),
            tokens.clone(),
        );
        tasks.push(tokio::spawn(async move {
            while acquired.load(Ordering::SeqCst) < ROUNDS {
                let Some(grant) = locks
                    .try_acquire(KEY, Duration::from_secs(30), None)
                    .await
                    .unwrap()
                else {
                    tokio::task::yield_now().await;
                    continue;
                };
                assert!(
                    !inside.swap(true, Ordering::SeqCst),
                    "two holders at once (token {})",
                    grant.fencing_token
                );
                tokens.lock().unwrap().push(grant.fencing_token);
                tokio::task::yield_now().await;
                inside.store(false, Ordering::SeqCst);
                acquired.fetch_add(1, Ordering::SeqCst);
                assert!(locks.release(KEY, &grant.owner).await.unwrap());
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let tokens = tokens.lock().unwrap().clone();
    assert!(tokens.len() >= ROUNDS);
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens in acquisition order must strictly increase: {tokens:?}"
    );
}

async fn fencing_tokens_strictly_increase(locks: Arc<dyn LockBackend>) {
    let mut last = 0;
    for _ in 0..50 {
        let grant = locks
            .try_acquire("job:fenced", Duration::from_secs(30), None)
            .await
            .unwrap()
            .expect("free lock");
        assert!(
            grant.fencing_token > last,
            "{} after {last}",
            grant.fencing_token
        );
        last = grant.fencing_token;
        assert!(locks.release("job:fenced", &grant.owner).await.unwrap());
    }
    // A refused acquisition issues no token.
    let holder = locks
        .try_acquire("job:fenced", Duration::from_secs(30), None)
        .await
        .unwrap()
        .unwrap();
    assert!(locks
        .try_acquire("job:fenced", Duration::from_secs(30), None)
        .await
        .unwrap()
        .is_none());
    locks.release("job:fenced", &holder.owner).await.unwrap();
    let next = locks
        .try_acquire("job:fenced", Duration::from_secs(30), None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.fencing_token, holder.fencing_token + 1);
}

async fn expired_holder_cannot_release_or_extend_successor(locks: Arc<dyn LockBackend>) {
    let old = locks
        .try_acquire("job:expiring", Duration::from_millis(200), None)
        .await
        .unwrap()
        .unwrap();
    // The successor gets the lock once the old holder's ttl has run out.
    let successor = Arc::new(Mutex::new(None));
    wait_until("the old lock to expire and a successor to take it", || {
        let (locks, successor) = (locks.clone(), successor.clone());
        async move {
            let grant = locks
                .try_acquire("job:expiring", Duration::from_secs(30), None)
                .await
                .unwrap();
            let taken = grant.is_some();
            *successor.lock().unwrap() = grant;
            taken
        }
    })
    .await;
    let successor = successor.lock().unwrap().clone().unwrap();
    assert!(successor.fencing_token > old.fencing_token);
    assert!(!locks.release("job:expiring", &old.owner).await.unwrap());
    assert!(!locks
        .extend("job:expiring", &old.owner, Duration::from_secs(30))
        .await
        .unwrap());
    // The successor's lock survived both attempts.
    assert!(locks
        .try_acquire("job:expiring", Duration::from_secs(30), None)
        .await
        .unwrap()
        .is_none());
    assert!(locks
        .extend("job:expiring", &successor.owner, Duration::from_secs(30))
        .await
        .unwrap());
    assert!(locks
        .release("job:expiring", &successor.owner)
        .await
        .unwrap());
}

async fn only_the_owner_extends_and_releases(locks: Arc<dyn LockBackend>) {
    let grant = locks
        .try_acquire("job:owned", Duration::from_secs(30), None)
        .await
        .unwrap()
        .unwrap();
    assert!(!locks
        .extend("job:owned", "someone-else", Duration::from_secs(30))
        .await
        .unwrap());
    assert!(!locks.release("job:owned", "someone-else").await.unwrap());
    assert!(locks
        .extend("job:owned", &grant.owner, Duration::from_secs(30))
        .await
        .unwrap());
    assert!(locks.release("job:owned", &grant.owner).await.unwrap());
    assert!(!locks.release("job:owned", &grant.owner).await.unwrap());
    // Other keys are independent.
    assert!(locks
        .try_acquire("job:other", Duration::from_secs(30), None)
        .await
        .unwrap()
        .is_some());
}

async fn each_fire_time_is_claimed_once(locks: Arc<dyn LockBackend>) {
    let ttl = Duration::from_secs(30);
    let first = locks
        .try_acquire("job:ticked", ttl, Some(60_000))
        .await
        .unwrap()
        .unwrap();
    locks.release("job:ticked", &first.owner).await.unwrap();
    // Free again, but the fire time is spent — as is any earlier one (a lagging clock).
    assert!(locks
        .try_acquire("job:ticked", ttl, Some(60_000))
        .await
        .unwrap()
        .is_none());
    assert!(locks
        .try_acquire("job:ticked", ttl, Some(59_000))
        .await
        .unwrap()
        .is_none());
    let next = locks
        .try_acquire("job:ticked", ttl, Some(61_000))
        .await
        .unwrap()
        .unwrap();
    assert!(next.fencing_token > first.fencing_token);
    // A held lock refuses a later fire time too, without spending it.
    assert!(locks
        .try_acquire("job:ticked", ttl, Some(62_000))
        .await
        .unwrap()
        .is_none());
    locks.release("job:ticked", &next.owner).await.unwrap();
    assert!(locks
        .try_acquire("job:ticked", ttl, Some(62_000))
        .await
        .unwrap()
        .is_some());
}

/// A holder whose refreshes cannot reach Redis marks itself lost before its lock expires, and
/// only then does another instance get the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cut_off_holder_stops_before_another_takes_over() {
    let url = redis_url();
    let proxy = PausableProxy::start(redis_socket_addr(&url)).await;
    let prefix = unique_prefix();
    let through_proxy: Arc<dyn LockBackend> =
        Arc::new(RedisLocks::new(connect(&proxy.url()).await, prefix.clone()));
    let direct: Arc<dyn LockBackend> = Arc::new(RedisLocks::new(connect(&url).await, prefix));
    let ttl = Duration::from_millis(1500);
    let margin = scheduler::lock_margin(ttl);

    let holder = Arc::new(
        Lease::acquire(through_proxy, "job:partitioned", ttl, margin, None)
            .await
            .unwrap()
            .expect("free lock"),
    );
    let keep_alive = tokio::spawn({
        let holder = holder.clone();
        async move {
            holder
                .keep_alive(tokio_util::sync::CancellationToken::new())
                .await;
            tokio::time::Instant::now()
        }
    });
    // Refreshes work while connected: the lease outlives several ttls.
    tokio::time::sleep(ttl * 2).await;
    assert!(holder.is_valid(), "refreshes should keep the lease valid");
    assert!(direct
        .try_acquire("job:partitioned", ttl, None)
        .await
        .unwrap()
        .is_none());

    proxy.pause();
    let taken_at = Arc::new(Mutex::new(None));
    wait_until("another instance to take the lock", || {
        let (direct, taken_at) = (direct.clone(), taken_at.clone());
        async move {
            match direct
                .try_acquire("job:partitioned", ttl, None)
                .await
                .unwrap()
            {
                Some(grant) => {
                    *taken_at.lock().unwrap() = Some((tokio::time::Instant::now(), grant));
                    true
                }
                None => false,
            }
        }
    })
    .await;
    let (taken_at, successor) = taken_at.lock().unwrap().clone().unwrap();
    let stopped_at = tokio::time::timeout(crate::common::WAIT_LIMIT, keep_alive)
        .await
        .expect("the cut-off holder never stopped considering itself the owner")
        .unwrap();
    assert!(!holder.is_valid());
    assert!(
        stopped_at < taken_at,
        "the cut-off holder must stop owning before the successor acquires"
    );
    assert!(successor.fencing_token > holder.fencing_token());
    proxy.resume();
}
