//! The rate limiter (`platform::rate_limit`) itself, in-process and in Redis: an attempt
//! acquired and then refunded is given back (the SMS code limits count only codes that are
//! sent), one kept stays counted, and while Redis is down a shared limiter holds its limit on
//! this instance instead of letting everything through — also for the app's sign-in limit, with
//! the fallback counted.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::time::Duration;

use platform::{
    error::AppError,
    rate_limit::RateLimiter,
    redis::Redis,
    testing::{redis_url, RedisServer, TestDb},
};
use reqwest::StatusCode;
use serde_json::json;
use webook::{schema::MIGRATIONS, testing::TestApp};

use crate::common::post;

const WINDOW: Duration = Duration::from_secs(3600);

async fn refused(limiter: &RateLimiter, key: &str) -> Duration {
    match limiter.acquire(key).await {
        Err(AppError::RateLimited { retry_after }) => retry_after,
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("{key}: admitted over the limit"),
    }
}

async fn refunds_give_attempts_back(limiter: RateLimiter) {
    let kept = limiter.acquire("k").await.unwrap();
    let given_back = limiter.acquire("k").await.unwrap();
    assert!(refused(&limiter, "k").await > Duration::from_secs(60));
    given_back.refund().await;
    limiter.check("k").await.unwrap();
    refused(&limiter, "k").await;
    drop(kept);
    refused(&limiter, "k").await;
    // Other keys have limits of their own.
    limiter.check("other").await.unwrap();
}

#[tokio::test]
async fn a_refunded_attempt_is_given_back_in_process() {
    refunds_give_attempts_back(RateLimiter::local("test", 2, WINDOW).unwrap()).await;
}

#[tokio::test]
async fn a_refunded_attempt_is_given_back_in_redis() {
    let redis = Redis::connect(&redis_url()).await.unwrap();
    let prefix = format!("test-{}", uuid::Uuid::new_v4().simple());
    let limiter = RateLimiter::redis("test", redis.clone(), &prefix, 2, WINDOW).unwrap();
    refunds_give_attempts_back(limiter.clone()).await;
    // Shared: another instance's limiter sees the same counts.
    let elsewhere = Redis::connect(&redis_url()).await.unwrap();
    let other = RateLimiter::redis("test", elsewhere, &prefix, 2, WINDOW).unwrap();
    refused(&other, "k").await;
}

#[tokio::test]
async fn while_redis_is_down_a_shared_limiter_holds_its_limit_here() {
    let mut server = RedisServer::start().await;
    let redis = Redis::connect(&server.url()).await.unwrap();
    let limiter = RateLimiter::redis("test_fallback", redis, "test", 2, WINDOW).unwrap();
    server.stop();
    let first = limiter.acquire("k").await.unwrap();
    limiter.check("k").await.unwrap();
    refused(&limiter, "k").await;
    // Refunds work on the fallback too.
    first.refund().await;
    limiter.check("k").await.unwrap();
    refused(&limiter, "k").await;
}

/// Issue 46, item 3: while Redis is down, the shared sign-in limit is held by each instance on
/// its own (it used to let every attempt through), and the fallback is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sign_in_limit_holds_while_redis_is_down() {
    let mut redis = platform::testing::RedisServer::start().await;
    let url = redis.url();
    let app = TestApp::spawn_with(TestDb::sqlite(&MIGRATIONS).await, |config| {
        webook::testing::make_cluster(config, url);
        config
            .settings_mut::<webook::auth::settings::AuthSettings>()
            .auth_rate_limit = 2;
    })
    .await;
    redis.stop();
    let attempt = || {
        post(
            &app,
            "/users/login",
            None,
            json!({"email": "down@example.com", "password": "x"}),
        )
    };
    assert_eq!(attempt().await.code(), 401002);
    assert_eq!(attempt().await.code(), 401002);
    let limited = attempt().await;
    assert_eq!(
        limited.status_and_code(),
        (StatusCode::OK, 429001),
        "a course route: HTTP 200; {}",
        limited.raw
    );
    let metrics = app.metrics_text().await;
    assert!(
        metrics.contains("rate_limit_fallback_total{limiter=\"auth\"}"),
        "{metrics}"
    );
}
