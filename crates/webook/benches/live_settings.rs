//! Live settings benchmarks: what reading a setting at the time of use costs a request, against
//! the baseline of reading it from the start-up configuration as before — a live read
//! (`LiveConfig::current` then the section), a grey-release decision (`Switch::on_for`: the
//! live read, a hash of the user id and the variant's counter), and an off live rate limit's check (the generation
//! compare) — and what applying a change costs an instance (`LiveConfig::apply`: the start-up
//! configuration re-read with the stored values on top, validated, swapped in).

use std::{collections::BTreeMap, hint::black_box, sync::Arc};

use criterion::{criterion_group, criterion_main, Criterion};
use platform::{
    config::Config,
    live::{LiveConfig, LiveRateLimiter, Switch},
};
use webook::{auth::AuthSettings, notifications::NotificationSettings};

fn live() -> LiveConfig {
    let mut config = Config::with_defaults(&webook::app::settings());
    config.settings_mut::<AuthSettings>().write_rate_limit = 0;
    let live = LiveConfig::new(Arc::new(config));
    // One stored value, as a site that tuned something has.
    live.apply(
        1,
        BTreeMap::from([("notifications_stream".to_owned(), serde_json::json!("25%"))]),
    );
    live
}

fn reads(c: &mut Criterion) {
    // The process's recorder, as a server has it: a switch's decision counts its variant.
    platform::telemetry::install_metrics(&[]).unwrap_or_else(|err| panic!("{err}"));
    let live = live();
    let start = live.start().clone();
    let mut group = c.benchmark_group("live_settings");
    group.bench_function("start_up_read (baseline)", |b| {
        b.iter(|| {
            black_box(&start)
                .settings::<AuthSettings>()
                .is_ok_and(|settings| settings.anonymous_reading)
        });
    });
    group.bench_function("live_read", |b| {
        b.iter(|| {
            black_box(&live)
                .current()
                .settings::<AuthSettings>()
                .is_ok_and(|settings| settings.anonymous_reading)
        });
    });
    let switch = Switch::new(live.clone(), "notifications_stream", |config| {
        config
            .settings::<NotificationSettings>()
            .ok()
            .map(|settings| &settings.notifications_stream)
    });
    let mut uid = 0_i64;
    group.bench_function("switch_on_for", |b| {
        b.iter(|| {
            uid += 1;
            black_box(switch.on_for(Some(uid)))
        });
    });
    let limiter = LiveRateLimiter::new("write", &live, None, |config| {
        let settings = config.settings::<AuthSettings>()?;
        Ok((settings.write_rate_limit, settings.write_rate_window))
    })
    .unwrap_or_else(|err| panic!("{err}"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap_or_else(|err| panic!("{err}"));
    group.bench_function("live_limit_check_off", |b| {
        b.iter(|| runtime.block_on(limiter.check(black_box("42"))));
    });
    let mut version = 1;
    group.bench_function("apply_a_change", |b| {
        b.iter(|| {
            version += 1;
            let percent = format!("{}%", version % 100);
            live.apply(
                version,
                BTreeMap::from([(
                    "notifications_stream".to_owned(),
                    serde_json::json!(percent),
                )]),
            )
        });
    });
    group.finish();
}

criterion_group!(benches, reads);
criterion_main!(benches);
