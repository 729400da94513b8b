//! Cost of password hashing with the production argon2id parameters
//! (`webook::auth::password`): hashing a new password, verifying a correct one, and verifying
//! against an unknown account (the dummy hash), which must cost the same as a real verify.
//!
//! ```text
//! cargo bench -p webook --bench password
//! ```
//!
//! One operation takes tens of milliseconds, so the sample count and measurement time are kept
//! small; the whole run finishes in about ten seconds. Figures go to `docs/PERFORMANCE.md`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{hint::black_box, time::Duration};

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};
use webook::auth::password::PasswordHasher;

const PASSWORD: &str = "bench#pass1";

fn password(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let hasher = PasswordHasher::new().expect("password hasher");

    // Check once what the benchmarks measure, so a broken hasher cannot produce fast figures.
    let stored = runtime
        .block_on(hasher.hash(PASSWORD.to_owned()))
        .expect("hash");
    assert!(runtime
        .block_on(hasher.verify(PASSWORD.to_owned(), Some(stored.clone())))
        .expect("verify"));
    assert!(!runtime
        .block_on(hasher.verify(PASSWORD.to_owned(), None))
        .expect("verify unknown account"));

    let mut group = c.benchmark_group("password");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));

    group.bench_function("hash", |b| {
        b.to_async(&runtime)
            .iter(|| async { hasher.hash(black_box(PASSWORD.to_owned())).await.unwrap() });
    });
    group.bench_function("verify_ok", |b| {
        b.to_async(&runtime).iter(|| async {
            hasher
                .verify(black_box(PASSWORD.to_owned()), Some(stored.clone()))
                .await
                .unwrap()
        });
    });
    group.bench_function("verify_unknown_account", |b| {
        b.to_async(&runtime).iter(|| async {
            hasher
                .verify(black_box(PASSWORD.to_owned()), None)
                .await
                .unwrap()
        });
    });
    group.finish();
}

criterion_group!(benches, password);
criterion_main!(benches);
