//! Cost of the schedule arithmetic the job engine does once per fire time
//! (`scheduler::Schedule`): [`Schedule::next_after`] for second, minute and daily cron
//! expressions — in UTC, across New York's 2026 daylight-saving transitions, in Berlin over a
//! weekend — and for `@every`; and [`Schedule::parse`] of a 6-field expression.
//!
//! ```text
//! cargo bench -p scheduler --bench schedule
//! ```
//!
//! Every case is checked once against its known answer before it is measured, so a broken
//! search cannot produce fast figures. Figures go to `docs/PERFORMANCE.md`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{hint::black_box, time::Duration};

use chrono::{DateTime, Utc};
use criterion::{criterion_group, criterion_main, Criterion};
use scheduler::Schedule;

/// One `next_after` case: benchmark name, expression, zone, the instant searched from and the
/// fire time it must find.
struct Case {
    name: &'static str,
    expression: &'static str,
    zone: &'static str,
    after: &'static str,
    expected: &'static str,
}

const CASES: &[Case] = &[
    Case {
        name: "every_10s_utc",
        expression: "*/10 * * * * *",
        zone: "UTC",
        after: "2026-11-29T12:00:03Z",
        expected: "2026-11-29T12:00:10Z",
    },
    Case {
        name: "every_5min_utc",
        expression: "0 */5 * * * *",
        zone: "UTC",
        after: "2026-11-29T12:01:03Z",
        expected: "2026-11-29T12:05:00Z",
    },
    // 01:59 EST, just before New York springs forward (02:00 EST → 03:00 EDT = 07:00Z): 02:30
    // does not exist that day and fires when the gap ends.
    Case {
        name: "daily_0230_new_york_spring_forward",
        expression: "0 30 2 * * *",
        zone: "America/New_York",
        after: "2026-03-08T06:59:00Z",
        expected: "2026-03-08T07:00:00Z",
    },
    // 01:59 EDT, just before New York falls back (02:00 EDT → 01:00 EST = 06:00Z): 02:30 then
    // occurs once, in standard time.
    Case {
        name: "daily_0230_new_york_fall_back",
        expression: "0 30 2 * * *",
        zone: "America/New_York",
        after: "2026-11-01T05:59:00Z",
        expected: "2026-11-01T07:30:00Z",
    },
    // Friday 2026-11-27 10:00 CET, after that day's run: the search skips the weekend to
    // Monday 09:00 CET.
    Case {
        name: "weekdays_0900_berlin",
        expression: "0 0 9 * * MON-FRI",
        zone: "Europe/Berlin",
        after: "2026-11-27T09:00:00Z",
        expected: "2026-11-30T08:00:00Z",
    },
    Case {
        name: "every_1m30s",
        expression: "@every 1m30s",
        zone: "UTC",
        after: "2026-11-29T12:00:00Z",
        expected: "2026-11-29T12:01:30Z",
    },
];

/// The 6-field expression parsed by `parse`: lists, ranges, steps and names in one.
const PARSE_EXPRESSION: &str = "0 */15 9-17 * JAN-MAR,OCT-DEC MON-FRI";

fn instant(text: &str) -> DateTime<Utc> {
    text.parse().expect("RFC 3339 instant")
}

fn schedule(c: &mut Criterion) {
    let mut group = c.benchmark_group("next_after");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for case in CASES {
        let schedule = Schedule::parse_in(case.expression, case.zone).expect("valid schedule");
        let after = instant(case.after);
        assert_eq!(
            schedule.next_after(after),
            Some(instant(case.expected)),
            "{}: next fire time of {schedule} after {after}",
            case.name
        );
        group.bench_function(case.name, |b| {
            b.iter(|| schedule.next_after(black_box(after)));
        });
    }
    group.finish();

    let mut group = c.benchmark_group("parse");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    Schedule::parse(PARSE_EXPRESSION).expect("valid expression");
    group.bench_function("six_fields", |b| {
        b.iter(|| Schedule::parse(black_box(PARSE_EXPRESSION)).unwrap());
    });
    group.finish();
}

criterion_group!(benches, schedule);
criterion_main!(benches);
