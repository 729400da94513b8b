//! When a job fires: [`Schedule`], cron expressions and fixed intervals evaluated in an IANA
//! time zone with exact daylight-saving semantics. The grammar and the firing rules are documented
//! on [`Schedule`], the public face of this module.
//!
//! We parse cron ourselves instead of using the `cron` crate: that crate numbers Sunday as 1 (we
//! follow Vixie cron, where Sunday is 0 or 7), its errors do not say which field is wrong, and
//! its behaviour around daylight-saving transitions is not the one specified on [`Schedule`].

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{
    DateTime, Datelike, NaiveDate, NaiveDateTime, Offset, TimeDelta, TimeZone, Timelike, Utc,
};
use chrono_tz::Tz;

/// A parsed schedule: a cron expression or an `@every` interval, with the time zone its
/// wall-clock fields are read in.
///
/// A schedule is parsed once from the text a user wrote (plus an optional time zone, UTC by
/// default) and then answers one question, [`Schedule::next_after`]: the first fire time strictly
/// after a given instant. The job engine stores that instant as the job's next time; it never
/// needs anything else from a schedule.
///
/// # Grammar
///
/// Leading and trailing whitespace is ignored. An expression is either a cron expression or a
/// descriptor starting with `@`.
///
/// ## Cron expressions
///
/// Fields are separated by any amount of whitespace:
///
/// | fields | layout                                  |
/// | ------ | --------------------------------------- |
/// | 5      | `min hour dom month dow` (second is 0)  |
/// | 6      | `sec min hour dom month dow`            |
/// | 7      | `sec min hour dom month dow year`       |
///
/// | field        | values                                          |
/// | ------------ | ----------------------------------------------- |
/// | second       | 0-59                                            |
/// | minute       | 0-59                                            |
/// | hour         | 0-23                                            |
/// | day-of-month | 1-31                                            |
/// | month        | 1-12 or `JAN`-`DEC`                             |
/// | day-of-week  | 0-7 (0 and 7 are both Sunday) or `SUN`-`SAT`    |
/// | year         | 1970-2199                                       |
///
/// Names are three letters and case-insensitive. Each field is a comma-separated list of items;
/// an item is one of
///
/// - `*` — every value of the field; `?` means the same but is accepted only in day-of-month and
///   day-of-week;
/// - `n` — one value (a number, or a name where the field has names);
/// - `a-b` — every value from `a` to `b` inclusive; `a` must not be after `b` (ranges do not wrap
///   around, so write `FRI-SAT,SUN` or `5-7`, not `FRI-SUN`);
/// - `*/s`, `a/s`, `a-b/s` — every `s`-th value of the whole field, of `a` to the field's
///   maximum, or of `a` to `b`; `s` is at least 1. For day-of-week, "the whole field" and "the
///   maximum" stop at 6 (Saturday): 7 is only another spelling of Sunday, so `1/2` is Monday,
///   Wednesday and Friday.
///
/// Day-of-month and day-of-week combine as in Vixie cron (and Go's robfig/cron): if either field
/// is unrestricted — written exactly `*` or `?`, nothing else (`*/1` counts as restricted) — a
/// day must match both (which amounts to matching the other one); if both are restricted, a day
/// matches when *either* matches. So `0 0 0 15 * FRI` fires on the 15th and on every Friday.
///
/// An expression that can be seen never to fire is rejected: day-of-month restricted,
/// day-of-week unrestricted, and no selected month has a selected day (`0 0 0 30 2 *`). An
/// expression whose only impossibility lies in the year field (`0 0 0 29 2 * 2100`) parses, and
/// [`Schedule::next_after`] returns `None` for it.
///
/// ## Descriptors
///
/// Case-insensitive:
///
/// | descriptor               | equivalent    |
/// | ------------------------ | ------------- |
/// | `@yearly`, `@annually`   | `0 0 0 1 1 *` |
/// | `@monthly`               | `0 0 0 1 * *` |
/// | `@weekly`                | `0 0 0 * * 0` |
/// | `@daily`, `@midnight`    | `0 0 0 * * *` |
/// | `@hourly`                | `0 0 * * * *` |
/// | `@every <duration>`      | fixed interval, see below |
///
/// These (except `@every`) are ordinary cron expressions, evaluated in the schedule's zone.
///
/// `<duration>` is Go-style: one or more `<whole number><unit>` with units `h`, `m`, `s` and
/// `ms` (lower case), e.g. `90s`, `1m30s`, `1h0m5s`, `1500ms`; the total must be at least 1s.
///
/// # When a schedule fires
///
/// [`Schedule::next_after`] returns the first fire time *strictly* after the given instant, so
/// feeding each result back in enumerates the fire times without repeats. It does not allocate.
///
/// ## `@every`
///
/// An interval fires at every whole multiple of the interval since the Unix epoch:
/// `next = (floor(after_ms / d_ms) + 1) * d_ms`. It is measured in absolute time, so the time zone
/// and daylight saving never affect it. Anchoring to the epoch rather than to, say, process start
/// means every instance of a cluster computes the same ticks, so a tick identifies one run across
/// processes (the lock and the run history key on it).
///
/// ## Cron
///
/// Cron fields describe wall-clock times in the schedule's zone. The search converts `after` to
/// local time (dropping its fraction of a second), then walks the matching local times after it
/// in order, skipping whole years, months, days, hours and minutes that cannot match (each field
/// is a bitset). Each matching local time `N` is then mapped back to an instant:
///
/// - **Normal** (`N` occurs once): fire at that instant.
/// - **Fall-back overlap** (`N` occurs twice, e.g. 01:30 on 2026-11-01 in New York, at 05:30Z
///   in daylight time and again at 06:30Z in standard time): fire at the *earlier* instant only.
///   If that is not after `after`, the local time already fired during the first pass and is
///   skipped. A job therefore runs once at a repeated wall-clock time, and an hourly job does
///   not run twice in the repeated hour (`0 0 * * * *` in New York fires at 05:00Z, 01:00 EDT,
///   then 07:00Z, 02:00 EST; 06:00Z, 01:00 EST, is skipped). While the clock repeats the hour,
///   nothing in that hour fires a second time.
/// - **Spring-forward gap** (`N` does not exist, e.g. 02:30 on 2026-03-08 in New York): fire at
///   the instant the gap ends, i.e. the first valid local time after it (03:00 EDT = 07:00Z), so
///   a daily 02:30 job still runs that day, just late. All fire times inside one gap collapse
///   onto that one instant and fire once: `0 */15 * * * *` in New York fires at 06:45Z (01:45
///   EST), once at 07:00Z (standing for 02:00, 02:15, 02:30, 02:45 and the real 03:00), then at
///   07:15Z.
///
/// Put differently: each matching local time `N` stands for one instant `f(N)` — its earliest
/// occurrence, or the end of the gap it falls in — and `next_after` returns the smallest `f(N)`
/// strictly after `after`. `f` never decreases as `N` increases, which is why walking local
/// times in order and returning the first `f(N) > after` is exact. (A result is never at or
/// before `after`, whatever the offsets do.)
///
/// The search gives up, returning `None`, after the last year the year field selects (2199 at
/// most). It jumps straight to the next selected year, month, day, hour, minute and second, so
/// even a search that ends in `None` takes a few thousand cheap steps at most.
///
/// Reference transitions (used by the tests): New York springs forward on 2026-03-08 at 02:00
/// EST → 03:00 EDT (07:00Z) and falls back on 2026-11-01 at 02:00 EDT → 01:00 EST (06:00Z);
/// Berlin springs forward on 2026-03-29 at 02:00 CET → 03:00 CEST (01:00Z) and falls back on
/// 2026-10-25 at 03:00 CEST → 02:00 CET (01:00Z).
#[derive(Clone, Debug)]
pub struct Schedule {
    expression: String,
    time_zone: Tz,
    kind: Kind,
}

#[derive(Clone, Debug)]
enum Kind {
    Cron(Cron),
    /// Interval in milliseconds, at least 1000.
    Every(i64),
}

impl Schedule {
    /// Parses `expr` in UTC.
    pub fn parse(expr: &str) -> Result<Schedule, ScheduleError> {
        Self::parse_with_zone(expr, Tz::UTC)
    }

    /// Parses `expr` evaluated in the IANA time zone `time_zone` (e.g. "America/New_York").
    ///
    /// The zone name is case-sensitive, as in the tz database; surrounding whitespace is ignored.
    pub fn parse_in(expr: &str, time_zone: &str) -> Result<Schedule, ScheduleError> {
        let zone = time_zone
            .trim()
            .parse::<Tz>()
            .map_err(|_| ScheduleError::UnknownTimeZone(time_zone.to_owned()))?;
        Self::parse_with_zone(expr, zone)
    }

    fn parse_with_zone(expr: &str, time_zone: Tz) -> Result<Schedule, ScheduleError> {
        let expression = expr.trim();
        let kind = if expression.starts_with('@') {
            parse_descriptor(expression)?
        } else {
            Kind::Cron(Cron::parse(expression, expression)?)
        };
        Ok(Schedule {
            expression: expression.to_owned(),
            time_zone,
            kind,
        })
    }

    /// The first fire time strictly after `after`, or None if the schedule never fires again.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.kind {
            Kind::Every(millis) => {
                let next = after
                    .timestamp_millis()
                    .div_euclid(*millis)
                    .checked_add(1)?
                    .checked_mul(*millis)?;
                DateTime::from_timestamp_millis(next)
            }
            Kind::Cron(cron) => cron.next_after(self.time_zone, after),
        }
    }

    /// The time zone the cron fields are read in (UTC unless parsed with [`Schedule::parse_in`]).
    /// It has no effect on `@every`.
    pub fn time_zone(&self) -> Tz {
        self.time_zone
    }

    /// The expression as written (trimmed).
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// For `@every`, the interval.
    pub fn interval(&self) -> Option<Duration> {
        match self.kind {
            Kind::Every(millis) => Some(Duration::from_millis(millis.unsigned_abs())),
            Kind::Cron(_) => None,
        }
    }
}

/// Shows the expression and, for cron expressions, the zone: `0 30 2 * * * (America/New_York)`,
/// `@daily (UTC)`, `@every 1m30s`.
impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            Kind::Cron(_) => write!(f, "{} ({})", self.expression, self.time_zone.name()),
            Kind::Every(_) => f.write_str(&self.expression),
        }
    }
}

/// Same as [`Schedule::parse`] (UTC).
impl FromStr for Schedule {
    type Err = ScheduleError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Schedule::parse(s)
    }
}

/// Why an expression or a time zone was rejected. Every message quotes the offending text.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ScheduleError {
    /// The cron expression has a number of fields other than 5, 6 or 7.
    #[error(
        "cron expression \"{expression}\" has {count} fields; expected 5 (min hour dom month dow), \
         6 (with seconds first) or 7 (with a year last)"
    )]
    FieldCount {
        /// The whole (trimmed) expression.
        expression: String,
        /// How many whitespace-separated fields it has.
        count: usize,
    },
    /// One item of one field is invalid.
    #[error("invalid cron expression \"{expression}\": {field} field \"{item}\": {problem}")]
    Field {
        /// The whole (trimmed) expression.
        expression: String,
        /// The field the item belongs to.
        field: CronField,
        /// The offending comma-separated item of that field.
        item: String,
        /// What is wrong with it.
        problem: FieldProblem,
    },
    /// Day-of-month is restricted, day-of-week is not, and no selected month has a selected day.
    #[error(
        "invalid cron expression \"{expression}\": never fires: no month selected by the month \
         field \"{month}\" has a day selected by the day-of-month field \"{day_of_month}\""
    )]
    NeverFires {
        /// The whole (trimmed) expression.
        expression: String,
        /// The day-of-month field as written.
        day_of_month: String,
        /// The month field as written.
        month: String,
    },
    /// The duration of an `@every` descriptor is invalid.
    #[error("invalid @every interval \"{interval}\": {problem}")]
    Interval {
        /// The duration as written (trimmed).
        interval: String,
        /// What is wrong with it.
        problem: IntervalProblem,
    },
    /// The expression starts with `@` but is not a known descriptor.
    #[error(
        "unknown descriptor \"{0}\"; expected @yearly, @annually, @monthly, @weekly, @daily, \
         @midnight, @hourly or @every <duration>"
    )]
    UnknownDescriptor(String),
    /// The time zone is not an IANA zone name known to the tz database.
    #[error("unknown time zone \"{0}\"")]
    UnknownTimeZone(String),
}

/// A field of a cron expression, displayed as its name in error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CronField {
    /// Seconds, 0-59.
    Second,
    /// Minutes, 0-59.
    Minute,
    /// Hours, 0-23.
    Hour,
    /// Day of the month, 1-31.
    DayOfMonth,
    /// Month, 1-12 or `JAN`-`DEC`.
    Month,
    /// Day of the week, 0-7 (Sunday is 0 and 7) or `SUN`-`SAT`.
    DayOfWeek,
    /// Year, 1970-2199.
    Year,
}

impl fmt::Display for CronField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CronField::Second => "second",
            CronField::Minute => "minute",
            CronField::Hour => "hour",
            CronField::DayOfMonth => "day-of-month",
            CronField::Month => "month",
            CronField::DayOfWeek => "day-of-week",
            CronField::Year => "year",
        })
    }
}

/// What is wrong with one item of a cron field.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum FieldProblem {
    /// Two commas in a row, or a comma at either end.
    #[error("empty list item")]
    EmptyItem,
    /// A number outside the field's range.
    #[error("{value} is out of range {min}-{max}")]
    OutOfRange {
        /// The number as written.
        value: String,
        /// The field's smallest value.
        min: u32,
        /// The field's largest value.
        max: u32,
    },
    /// A word that is not one of the field's names.
    #[error("unknown name")]
    UnknownName,
    /// Something that is neither a number nor (in fields with names) a word.
    #[error("expected a number, found \"{0}\"")]
    NotANumber(String),
    /// Something that is neither a number nor a name, in a field with names.
    #[error("expected a number or a name, found \"{0}\"")]
    NotANumberOrName(String),
    /// The step after `/` is not a whole number.
    #[error("step must be a whole number, found \"{0}\"")]
    InvalidStep(String),
    /// The step after `/` is 0.
    #[error("step must be at least 1")]
    ZeroStep,
    /// A range `a-b` with `a` after `b`.
    #[error("range start {start} is after end {end}")]
    ReversedRange {
        /// The start value.
        start: u32,
        /// The end value.
        end: u32,
    },
    /// `a-b-c`.
    #[error("expected at most one \"-\"")]
    TooManyDashes,
    /// `a/b/c`.
    #[error("expected at most one \"/\"")]
    TooManySlashes,
    /// `?` outside day-of-month and day-of-week.
    #[error("? is only allowed in the day-of-month and day-of-week fields")]
    QuestionMark,
}

/// What is wrong with the duration of an `@every` descriptor.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum IntervalProblem {
    /// Nothing follows `@every`.
    #[error("is empty")]
    Empty,
    /// A unit other than `h`, `m`, `s` or `ms`.
    #[error("unknown unit \"{0}\"")]
    UnknownUnit(String),
    /// A number with no unit after it.
    #[error("missing unit after {0}")]
    MissingUnit(String),
    /// A unit (or other text) where a number was expected.
    #[error("expected a number, found \"{0}\"")]
    MissingNumber(String),
    /// A decimal point.
    #[error("only whole numbers are allowed")]
    Fraction,
    /// The total is under one second.
    #[error("must be at least 1s")]
    TooShort,
    /// The total does not fit in 64-bit milliseconds.
    #[error("is too long")]
    TooLong,
}

// ---------------------------------------------------------------------------------------------
// Descriptors and intervals

fn parse_descriptor(expression: &str) -> Result<Kind, ScheduleError> {
    let (head, rest) = expression
        .split_once(char::is_whitespace)
        .unwrap_or((expression, ""));
    if head.eq_ignore_ascii_case("@every") {
        let interval = rest.trim();
        return parse_interval(interval)
            .map(Kind::Every)
            .map_err(|problem| ScheduleError::Interval {
                interval: interval.to_owned(),
                problem,
            });
    }
    const DESCRIPTORS: [(&str, &str); 7] = [
        ("@yearly", "0 0 0 1 1 *"),
        ("@annually", "0 0 0 1 1 *"),
        ("@monthly", "0 0 0 1 * *"),
        ("@weekly", "0 0 0 * * 0"),
        ("@daily", "0 0 0 * * *"),
        ("@midnight", "0 0 0 * * *"),
        ("@hourly", "0 0 * * * *"),
    ];
    DESCRIPTORS
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(expression))
        .ok_or_else(|| ScheduleError::UnknownDescriptor(expression.to_owned()))
        .and_then(|(_, cron)| Cron::parse(cron, expression).map(Kind::Cron))
}

/// Parses a Go-style duration (`1h0m5s`, `1500ms`) into milliseconds, at least 1000.
fn parse_interval(text: &str) -> Result<i64, IntervalProblem> {
    if text.is_empty() {
        return Err(IntervalProblem::Empty);
    }
    let mut total: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (digits, tail) = rest.split_at(digits_len);
        if digits.is_empty() {
            return Err(IntervalProblem::MissingNumber(rest.to_owned()));
        }
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let unit_millis: u64 = match unit {
            "h" => 3_600_000,
            "m" => 60_000,
            "s" => 1_000,
            "ms" => 1,
            "" => return Err(IntervalProblem::MissingUnit(digits.to_owned())),
            _ if unit.starts_with('.') => return Err(IntervalProblem::Fraction),
            _ => return Err(IntervalProblem::UnknownUnit(unit.to_owned())),
        };
        total = digits
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(unit_millis))
            .and_then(|millis| total.checked_add(millis))
            .ok_or(IntervalProblem::TooLong)?;
        rest = tail;
    }
    if total < 1_000 {
        return Err(IntervalProblem::TooShort);
    }
    i64::try_from(total).map_err(|_| IntervalProblem::TooLong)
}

// ---------------------------------------------------------------------------------------------
// Cron fields

const MIN_YEAR: i32 = 1970;
const MAX_YEAR: i32 = 2199;
const MONTH_NAMES: &[&str] = &[
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const WEEKDAY_NAMES: &[&str] = &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
/// The most days each month can have (February: 29), indexed by month - 1.
const MAX_DAYS: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/// How one cron field is written.
struct FieldSpec {
    field: CronField,
    min: u32,
    max: u32,
    /// The end of `*` and of `a/s`: `max`, except for day-of-week, where 7 is only another
    /// spelling of Sunday (so `1/2` is Monday, Wednesday, Friday, not Sunday too).
    span_max: u32,
    /// Names for the values `name_base`, `name_base + 1`, ….
    names: &'static [&'static str],
    name_base: u32,
}

impl FieldSpec {
    const fn new(field: CronField, min: u32, max: u32) -> Self {
        FieldSpec {
            field,
            min,
            max,
            span_max: max,
            names: &[],
            name_base: 0,
        }
    }

    /// Bit `value - bit_base` represents `value`; only the year field needs an offset.
    fn bit_base(&self) -> u32 {
        match self.field {
            CronField::Year => self.min,
            _ => 0,
        }
    }
}

const SECOND: FieldSpec = FieldSpec::new(CronField::Second, 0, 59);
const MINUTE: FieldSpec = FieldSpec::new(CronField::Minute, 0, 59);
const HOUR: FieldSpec = FieldSpec::new(CronField::Hour, 0, 23);
const DAY_OF_MONTH: FieldSpec = FieldSpec::new(CronField::DayOfMonth, 1, 31);
const MONTH: FieldSpec = FieldSpec {
    names: MONTH_NAMES,
    name_base: 1,
    ..FieldSpec::new(CronField::Month, 1, 12)
};
const DAY_OF_WEEK: FieldSpec = FieldSpec {
    span_max: 6,
    names: WEEKDAY_NAMES,
    name_base: 0,
    ..FieldSpec::new(CronField::DayOfWeek, 0, 7)
};
const YEAR: FieldSpec = FieldSpec::new(CronField::Year, MIN_YEAR as u32, MAX_YEAR as u32);

/// A parsed cron expression: one bitset per field, bit `v` set when value `v` is selected
/// (years: bit `year - 1970`).
#[derive(Clone, Debug)]
struct Cron {
    seconds: u64,
    minutes: u64,
    hours: u64,
    /// Bits 1..=31.
    days_of_month: u64,
    /// Bits 1..=12.
    months: u64,
    /// The day-of-week set (bits 0..=6, Sunday = 0) repeated every 7 bits, so that shifting it
    /// right by the weekday of the 1st of a month lines the weekdays up with the days.
    weekday_pattern: u64,
    years: [u64; 4],
    /// The last selected year: the search gives up after it.
    last_year: i32,
    /// Day-of-month written as bare `*` or `?`.
    dom_unrestricted: bool,
    /// Day-of-week written as bare `*` or `?`.
    dow_unrestricted: bool,
}

impl Cron {
    /// Parses a cron expression. `reported` is the text quoted in errors (the descriptor, for
    /// descriptors).
    fn parse(text: &str, reported: &str) -> Result<Cron, ScheduleError> {
        let mut parts = [""; 7];
        let mut count = 0;
        for part in text.split_whitespace() {
            if let Some(slot) = parts.get_mut(count) {
                *slot = part;
            }
            count += 1;
        }
        let [sec, min, hour, dom, month, dow, year] = match count {
            5 => ["0", parts[0], parts[1], parts[2], parts[3], parts[4], "*"],
            6 => [
                parts[0], parts[1], parts[2], parts[3], parts[4], parts[5], "*",
            ],
            7 => parts,
            _ => {
                return Err(ScheduleError::FieldCount {
                    expression: reported.to_owned(),
                    count,
                })
            }
        };
        let field = |spec: &FieldSpec, field_text: &str| parse_field(spec, field_text, reported);
        // Left to right, so that the first bad field is the one reported.
        let seconds = field(&SECOND, sec)?[0];
        let minutes = field(&MINUTE, min)?[0];
        let hours = field(&HOUR, hour)?[0];
        let days_of_month = field(&DAY_OF_MONTH, dom)?[0];
        let months = field(&MONTH, month)?[0];
        let days_of_week = field(&DAY_OF_WEEK, dow)?[0];
        let years = field(&YEAR, year)?;

        // Sunday is both 0 and 7.
        let days_of_week = (days_of_week | days_of_week >> 7) & 0x7f;
        let weekday_pattern =
            (0..9).fold(0u64, |pattern, week| pattern | days_of_week << (7 * week));
        let last_year = years
            .iter()
            .enumerate()
            .rev()
            .find(|(_, word)| **word != 0)
            .map_or(MIN_YEAR - 1, |(index, word)| {
                MIN_YEAR + 64 * index as i32 + 63 - word.leading_zeros() as i32
            });
        let cron = Cron {
            seconds,
            minutes,
            hours,
            days_of_month,
            months,
            weekday_pattern,
            years,
            last_year,
            dom_unrestricted: matches!(dom, "*" | "?"),
            dow_unrestricted: matches!(dow, "*" | "?"),
        };

        if !cron.dom_unrestricted && cron.dow_unrestricted {
            let possible = (1..=12u32).any(|m| {
                cron.months & (1 << m) != 0
                    && cron.days_of_month & days_up_to(MAX_DAYS[m as usize - 1]) != 0
            });
            if !possible {
                return Err(ScheduleError::NeverFires {
                    expression: reported.to_owned(),
                    day_of_month: dom.to_owned(),
                    month: month.to_owned(),
                });
            }
        }
        Ok(cron)
    }

    fn next_after(&self, zone: Tz, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if after.year() > self.last_year {
            return None;
        }
        let mut from = if after.year() < MIN_YEAR - 1 {
            // Every fire time is in 1970 or later (local time): start the search just before.
            NaiveDate::from_ymd_opt(MIN_YEAR - 1, 1, 1)?.and_hms_opt(0, 0, 0)?
        } else {
            // Dropping the fraction and adding a second gives the first whole local second
            // after `after`; the `> after` check below keeps the result strictly later whatever
            // the offsets do.
            let utc = after.naive_utc();
            let local = utc.checked_add_offset(zone.offset_from_utc_datetime(&utc).fix())?;
            local
                .with_nanosecond(0)?
                .checked_add_signed(TimeDelta::seconds(1))?
        };
        loop {
            let candidate = self.next_local_match(from)?;
            let fire = match zone.from_local_datetime(&candidate).earliest() {
                // Normal, or the first pass of a repeated (fall-back) local time.
                Some(instant) => Some(instant),
                // In a spring-forward gap: the instant the gap ends.
                None => gap_end(zone, candidate),
            };
            if let Some(instant) = fire {
                let instant = instant.with_timezone(&Utc);
                if instant > after {
                    return Some(instant);
                }
            }
            from = candidate.checked_add_signed(TimeDelta::seconds(1))?;
        }
    }

    /// The first local time at or after `start` that matches every field, or None after the last
    /// selected year. Whenever a field has no match left in its unit, the next unit up is
    /// advanced, the lower ones reset, and the search starts over from the year.
    fn next_local_match(&self, start: NaiveDateTime) -> Option<NaiveDateTime> {
        let mut year = start.year();
        let mut month = start.month();
        let mut day = start.day();
        let mut hour = start.hour();
        let mut minute = start.minute();
        let mut second = start.second();
        loop {
            let next_year = self.next_year(year)?;
            if next_year != year {
                (year, month, day, hour, minute, second) = (next_year, 1, 1, 0, 0, 0);
            }
            let Some(next_month) = next_bit(self.months, month) else {
                (year, month, day, hour, minute, second) = (year + 1, 1, 1, 0, 0, 0);
                continue;
            };
            if next_month != month {
                (month, day, hour, minute, second) = (next_month, 1, 0, 0, 0);
            }
            let Some(next_day) = next_bit(self.day_mask(year, month), day) else {
                (month, day, hour, minute, second) = (month + 1, 1, 0, 0, 0);
                continue;
            };
            if next_day != day {
                (day, hour, minute, second) = (next_day, 0, 0, 0);
            }
            let Some(next_hour) = next_bit(self.hours, hour) else {
                (day, hour, minute, second) = (day + 1, 0, 0, 0);
                continue;
            };
            if next_hour != hour {
                (hour, minute, second) = (next_hour, 0, 0);
            }
            let Some(next_minute) = next_bit(self.minutes, minute) else {
                (hour, minute, second) = (hour + 1, 0, 0);
                continue;
            };
            if next_minute != minute {
                (minute, second) = (next_minute, 0);
            }
            let Some(next_second) = next_bit(self.seconds, second) else {
                (minute, second) = (minute + 1, 0);
                continue;
            };
            return NaiveDate::from_ymd_opt(year, month, day)?.and_hms_opt(
                hour,
                minute,
                next_second,
            );
        }
    }

    /// The first selected year at or after `year`, if it is not after the last selected one.
    fn next_year(&self, year: i32) -> Option<i32> {
        if year > self.last_year {
            return None;
        }
        let index = year.saturating_sub(MIN_YEAR).max(0) as u32;
        let word = (index / 64) as usize;
        let first = next_bit(self.years[word], index % 64).map(|bit| word as u32 * 64 + bit);
        let found = first.or_else(|| {
            self.years[word + 1..]
                .iter()
                .enumerate()
                .find(|(_, bits)| **bits != 0)
                .map(|(offset, bits)| (word + 1 + offset) as u32 * 64 + bits.trailing_zeros())
        })?;
        Some(MIN_YEAR + found as i32)
    }

    /// The days (bits 1..=31) of `year`-`month` matching day-of-month and day-of-week.
    fn day_mask(&self, year: i32, month: u32) -> u64 {
        let in_month = days_up_to(days_in_month(year, month));
        let by_weekday = NaiveDate::from_ymd_opt(year, month, 1).map_or(0, |first| {
            (self.weekday_pattern >> first.weekday().num_days_from_sunday()) << 1
        });
        let days = if self.dom_unrestricted || self.dow_unrestricted {
            self.days_of_month & by_weekday
        } else {
            self.days_of_month | by_weekday
        };
        days & in_month
    }
}

/// Parses one field into a 256-bit set (only the year field uses more than the first word).
fn parse_field(spec: &FieldSpec, text: &str, expression: &str) -> Result<[u64; 4], ScheduleError> {
    let mut bits = [0u64; 4];
    for item in text.split(',') {
        parse_item(spec, item, &mut bits).map_err(|problem| ScheduleError::Field {
            expression: expression.to_owned(),
            field: spec.field,
            item: item.to_owned(),
            problem,
        })?;
    }
    Ok(bits)
}

/// Parses one comma-separated item (`*`, `n`, `a-b`, with an optional `/step`) into `bits`.
fn parse_item(spec: &FieldSpec, item: &str, bits: &mut [u64; 4]) -> Result<(), FieldProblem> {
    if item.is_empty() {
        return Err(FieldProblem::EmptyItem);
    }
    let (range, step) = match item.split_once('/') {
        Some((_, step)) if step.contains('/') => return Err(FieldProblem::TooManySlashes),
        Some((range, step)) => (range, Some(parse_step(step)?)),
        None => (item, None),
    };
    let (start, end) = match range {
        "*" => (spec.min, spec.span_max),
        "?" if matches!(spec.field, CronField::DayOfMonth | CronField::DayOfWeek) => {
            (spec.min, spec.span_max)
        }
        "?" => return Err(FieldProblem::QuestionMark),
        _ => match range.split_once('-') {
            Some((_, end)) if end.contains('-') => return Err(FieldProblem::TooManyDashes),
            Some((start, end)) => {
                let (start, end) = (parse_value(spec, start)?, parse_value(spec, end)?);
                if start > end {
                    return Err(FieldProblem::ReversedRange { start, end });
                }
                (start, end)
            }
            None => {
                let value = parse_value(spec, range)?;
                // `a/s` means `a` to the field's maximum, every `s`.
                (
                    value,
                    if step.is_some() {
                        spec.span_max.max(value)
                    } else {
                        value
                    },
                )
            }
        },
    };
    let base = spec.bit_base();
    for value in (start..=end).step_by(step.unwrap_or(1)) {
        let bit = value - base;
        bits[(bit / 64) as usize] |= 1 << (bit % 64);
    }
    Ok(())
}

fn parse_step(text: &str) -> Result<usize, FieldProblem> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(FieldProblem::InvalidStep(text.to_owned()));
    }
    // A step longer than the field selects just the start, so saturating is exact.
    match text.parse::<usize>().unwrap_or(usize::MAX) {
        0 => Err(FieldProblem::ZeroStep),
        step => Ok(step),
    }
}

fn parse_value(spec: &FieldSpec, text: &str) -> Result<u32, FieldProblem> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return match text.parse::<u32>() {
            Ok(value) if (spec.min..=spec.max).contains(&value) => Ok(value),
            _ => Err(FieldProblem::OutOfRange {
                value: text.to_owned(),
                min: spec.min,
                max: spec.max,
            }),
        };
    }
    if spec.names.is_empty() {
        return Err(FieldProblem::NotANumber(text.to_owned()));
    }
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(FieldProblem::NotANumberOrName(text.to_owned()));
    }
    spec.names
        .iter()
        .zip(spec.name_base..)
        .find(|(name, _)| name.eq_ignore_ascii_case(text))
        .map(|(_, value)| value)
        .ok_or(FieldProblem::UnknownName)
}

// ---------------------------------------------------------------------------------------------
// Calendar helpers

/// The first set bit of `mask` at or above `from`.
fn next_bit(mask: u64, from: u32) -> Option<u32> {
    if from >= 64 {
        return None;
    }
    let remaining = mask & (u64::MAX << from);
    (remaining != 0).then(|| remaining.trailing_zeros())
}

/// Bits 1..=`days`.
fn days_up_to(days: u32) -> u64 {
    (u64::MAX >> (63 - days.min(63))) & !1
}

fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        _ => 0,
    }
}

/// The instant a spring-forward gap containing the nonexistent local time `local` ends: the
/// first valid local second after it. Steps forward a minute at a time to a valid local time,
/// then back a second at a time while the previous second is still valid (transitions need not
/// fall on whole minutes). Gives up after 48 hours.
fn gap_end(zone: Tz, local: NaiveDateTime) -> Option<DateTime<Tz>> {
    let minute = TimeDelta::minutes(1);
    let second = TimeDelta::seconds(1);
    let mut probe = local;
    for _ in 0..48 * 60 {
        probe = probe.checked_add_signed(minute)?;
        if let Some(mut valid) = zone.from_local_datetime(&probe).earliest() {
            for _ in 0..60 {
                probe = probe.checked_sub_signed(second)?;
                match zone.from_local_datetime(&probe).earliest() {
                    Some(earlier) => valid = earlier,
                    None => break,
                }
            }
            return Some(valid);
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use chrono::SecondsFormat;

    fn at(rfc3339: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(rfc3339)
            .unwrap()
            .with_timezone(&Utc)
    }

    fn show(instant: DateTime<Utc>) -> String {
        instant.to_rfc3339_opts(SecondsFormat::AutoSi, true)
    }

    /// The first `n` fire times of `expr` in `tz` after `from`, as RFC 3339 UTC strings.
    fn fires(expr: &str, tz: &str, from: &str, n: usize) -> Vec<String> {
        let schedule = Schedule::parse_in(expr, tz).unwrap();
        let mut t = at(from);
        (0..n)
            .map(|i| {
                t = schedule
                    .next_after(t)
                    .unwrap_or_else(|| panic!("{expr}: no fire time #{i} after {}", show(t)));
                show(t)
            })
            .collect()
    }

    fn utc(expr: &str, from: &str, n: usize) -> Vec<String> {
        fires(expr, "UTC", from, n)
    }

    fn error(expr: &str) -> String {
        Schedule::parse(expr).unwrap_err().to_string()
    }

    // --- plain cron ---------------------------------------------------------------------------

    #[test]
    fn second_fields() {
        assert_eq!(
            utc("*/10 * * * * *", "2026-01-01T00:00:00Z", 4),
            [
                "2026-01-01T00:00:10Z",
                "2026-01-01T00:00:20Z",
                "2026-01-01T00:00:30Z",
                "2026-01-01T00:00:40Z"
            ]
        );
        assert_eq!(
            utc("*/10 * * * * *", "2026-01-01T00:00:55Z", 2),
            ["2026-01-01T00:01:00Z", "2026-01-01T00:01:10Z"]
        );
        assert_eq!(
            utc("15,45 * * * * *", "2026-01-01T00:00:50Z", 3),
            [
                "2026-01-01T00:01:15Z",
                "2026-01-01T00:01:45Z",
                "2026-01-01T00:02:15Z"
            ]
        );
        assert_eq!(
            utc("0 */5 * * * *", "2026-01-01T00:02:00Z", 3),
            [
                "2026-01-01T00:05:00Z",
                "2026-01-01T00:10:00Z",
                "2026-01-01T00:15:00Z"
            ]
        );
    }

    #[test]
    fn five_field_form_fires_on_the_minute() {
        assert_eq!(
            utc("30 9 * * *", "2026-01-01T10:00:00Z", 2),
            ["2026-01-02T09:30:00Z", "2026-01-03T09:30:00Z"]
        );
        assert_eq!(
            utc("*/20 * * * *", "2026-01-01T00:00:01Z", 3),
            [
                "2026-01-01T00:20:00Z",
                "2026-01-01T00:40:00Z",
                "2026-01-01T01:00:00Z"
            ]
        );
    }

    #[test]
    fn seven_field_form_with_year_ends() {
        let schedule = Schedule::parse("0 0 12 1 1 * 2027,2029").unwrap();
        assert_eq!(
            utc("0 0 12 1 1 * 2027,2029", "2026-06-01T00:00:00Z", 2),
            ["2027-01-01T12:00:00Z", "2029-01-01T12:00:00Z"]
        );
        assert_eq!(schedule.next_after(at("2029-01-01T12:00:00Z")), None);
        // Only the year makes it impossible: parses, never fires.
        let never = Schedule::parse("0 0 0 29 2 * 2100").unwrap();
        assert_eq!(never.next_after(at("2026-01-01T00:00:00Z")), None);
        // Before 1970 the search starts at the first selected year.
        assert_eq!(
            utc("0 0 0 1 1 * 1970-2199/100", "1960-01-01T00:00:00Z", 3),
            [
                "1970-01-01T00:00:00Z",
                "2070-01-01T00:00:00Z",
                "2170-01-01T00:00:00Z"
            ]
        );
        // Past 2199 nothing fires.
        let last = Schedule::parse("@yearly").unwrap();
        assert_eq!(
            last.next_after(at("2199-01-01T00:00:00Z")),
            None,
            "2200 is beyond the year range"
        );
    }

    #[test]
    fn names_ranges_and_steps() {
        // 2026-01-02 is a Friday.
        assert_eq!(
            utc("0 0 9 * * MON-FRI", "2026-01-02T10:00:00Z", 6),
            [
                "2026-01-05T09:00:00Z",
                "2026-01-06T09:00:00Z",
                "2026-01-07T09:00:00Z",
                "2026-01-08T09:00:00Z",
                "2026-01-09T09:00:00Z",
                "2026-01-12T09:00:00Z"
            ]
        );
        assert_eq!(
            utc("0 0 0 1 JAN,JUL *", "2026-01-01T00:00:00Z", 3),
            [
                "2026-07-01T00:00:00Z",
                "2027-01-01T00:00:00Z",
                "2027-07-01T00:00:00Z"
            ]
        );
        assert_eq!(
            utc("0 0 0 1 jan-Mar/2 *", "2026-01-01T00:00:00Z", 2),
            ["2026-03-01T00:00:00Z", "2027-01-01T00:00:00Z"]
        );
        // `a/s` runs from a to the field's maximum.
        assert_eq!(
            utc("0 50/5 * * * *", "2026-01-01T00:00:00Z", 3),
            [
                "2026-01-01T00:50:00Z",
                "2026-01-01T00:55:00Z",
                "2026-01-01T01:50:00Z"
            ]
        );
        assert_eq!(
            utc("0 10-20/5,59 * * * *", "2026-01-01T00:00:00Z", 4),
            [
                "2026-01-01T00:10:00Z",
                "2026-01-01T00:15:00Z",
                "2026-01-01T00:20:00Z",
                "2026-01-01T00:59:00Z"
            ]
        );
        // A step larger than the range selects just the start.
        assert_eq!(
            utc("0 0 5/100 * * *", "2026-01-01T00:00:00Z", 2),
            ["2026-01-01T05:00:00Z", "2026-01-02T05:00:00Z"]
        );
    }

    #[test]
    fn sunday_is_zero_and_seven() {
        // 2026-01-04 is a Sunday.
        let expected = ["2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"];
        for expr in [
            "0 0 0 * * 0",
            "0 0 0 * * 7",
            "0 0 0 * * sun",
            "0 0 0 * * 7-7",
        ] {
            assert_eq!(utc(expr, "2026-01-01T00:00:00Z", 2), expected, "{expr}");
        }
        // Steps stop at Saturday: 7 is not a separate day.
        assert_eq!(
            utc("0 0 0 * * 1/2", "2026-01-03T00:00:00Z", 4),
            [
                "2026-01-05T00:00:00Z",
                "2026-01-07T00:00:00Z",
                "2026-01-09T00:00:00Z",
                "2026-01-12T00:00:00Z"
            ]
        );
        // 5-7 is Friday, Saturday, Sunday.
        assert_eq!(
            utc("0 0 0 * * 5-7", "2026-01-01T00:00:00Z", 4),
            [
                "2026-01-02T00:00:00Z",
                "2026-01-03T00:00:00Z",
                "2026-01-04T00:00:00Z",
                "2026-01-09T00:00:00Z"
            ]
        );
    }

    #[test]
    fn day_of_month_and_day_of_week_combine_with_or_when_both_restricted() {
        // Fridays in February 2026: 6, 13, 20, 27; the 15th is a Sunday.
        assert_eq!(
            utc("0 0 0 15 * FRI", "2026-02-01T00:00:00Z", 6),
            [
                "2026-02-06T00:00:00Z",
                "2026-02-13T00:00:00Z",
                "2026-02-15T00:00:00Z",
                "2026-02-20T00:00:00Z",
                "2026-02-27T00:00:00Z",
                "2026-03-06T00:00:00Z"
            ]
        );
        // Either unrestricted (`*` or `?`): the other one decides.
        assert_eq!(
            utc("0 0 0 15 * *", "2026-02-01T00:00:00Z", 2),
            ["2026-02-15T00:00:00Z", "2026-03-15T00:00:00Z"]
        );
        assert_eq!(
            utc("0 0 0 15 * ?", "2026-02-01T00:00:00Z", 2),
            ["2026-02-15T00:00:00Z", "2026-03-15T00:00:00Z"]
        );
        assert_eq!(
            utc("0 0 0 ? * FRI", "2026-02-01T00:00:00Z", 2),
            ["2026-02-06T00:00:00Z", "2026-02-13T00:00:00Z"]
        );
        // Only a bare `*` is unrestricted: `*/1` restricts, so FRI is OR-ed with every day.
        assert_eq!(
            utc("0 0 0 */1 * FRI", "2026-02-01T00:00:00Z", 2),
            ["2026-02-02T00:00:00Z", "2026-02-03T00:00:00Z"]
        );
        assert_eq!(
            utc("0 0 0 1,15 * 1-5", "2026-02-13T00:00:00Z", 3),
            [
                "2026-02-15T00:00:00Z",
                "2026-02-16T00:00:00Z",
                "2026-02-17T00:00:00Z"
            ]
        );
    }

    #[test]
    fn month_ends_and_leap_years() {
        assert_eq!(
            utc("0 0 0 29 2 *", "2026-01-01T00:00:00Z", 2),
            ["2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"]
        );
        // 2100 is not a leap year.
        assert_eq!(
            utc("0 0 0 29 2 *", "2096-03-01T00:00:00Z", 1),
            ["2104-02-29T00:00:00Z"]
        );
        assert_eq!(
            utc("0 0 0 31 * *", "2026-01-31T00:00:00Z", 4),
            [
                "2026-03-31T00:00:00Z",
                "2026-05-31T00:00:00Z",
                "2026-07-31T00:00:00Z",
                "2026-08-31T00:00:00Z"
            ]
        );
        assert_eq!(
            utc("59 59 23 * * *", "2026-12-31T23:59:59Z", 1),
            ["2027-01-01T23:59:59Z"]
        );
    }

    #[test]
    fn descriptors() {
        assert_eq!(
            utc("@hourly", "2026-01-01T00:30:00Z", 2),
            ["2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z"]
        );
        assert_eq!(
            utc("@weekly", "2026-01-01T00:00:00Z", 2),
            ["2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"]
        );
        assert_eq!(
            utc("@MONTHLY", "2026-01-15T00:00:00Z", 2),
            ["2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"]
        );
        for expr in ["@yearly", "@annually"] {
            assert_eq!(
                utc(expr, "2026-01-01T00:00:00Z", 1),
                ["2027-01-01T00:00:00Z"]
            );
        }
        for expr in ["@daily", "@midnight", "  @Daily  "] {
            assert_eq!(
                utc(expr, "2026-01-01T12:00:00Z", 1),
                ["2026-01-02T00:00:00Z"]
            );
        }
    }

    #[test]
    fn daily_in_a_zone_is_local_midnight() {
        assert_eq!(
            fires("@daily", "America/New_York", "2026-01-01T00:00:00Z", 2),
            ["2026-01-01T05:00:00Z", "2026-01-02T05:00:00Z"]
        );
        assert_eq!(
            fires("@daily", "America/New_York", "2026-07-01T00:00:00Z", 2),
            ["2026-07-01T04:00:00Z", "2026-07-02T04:00:00Z"]
        );
    }

    #[test]
    fn every_is_aligned_to_the_epoch() {
        assert_eq!(
            utc("@every 1m30s", "2026-01-01T00:00:10Z", 3),
            [
                "2026-01-01T00:01:30Z",
                "2026-01-01T00:03:00Z",
                "2026-01-01T00:04:30Z"
            ]
        );
        // 3605 s does not divide a day: ticks are multiples since 1970, not since midnight.
        assert_eq!(
            utc("@every 1h0m5s", "2026-01-01T00:00:00Z", 3),
            [
                "2026-01-01T00:51:20Z",
                "2026-01-01T01:51:25Z",
                "2026-01-01T02:51:30Z"
            ]
        );
        assert_eq!(
            utc("@every 1500ms", "1970-01-01T00:00:00Z", 3),
            [
                "1970-01-01T00:00:01.500Z",
                "1970-01-01T00:00:03Z",
                "1970-01-01T00:00:04.500Z"
            ]
        );
        // Before the epoch too.
        assert_eq!(
            utc("@every 7s", "1969-12-31T23:59:50Z", 2),
            ["1969-12-31T23:59:53Z", "1970-01-01T00:00:00Z"]
        );
        let schedule = Schedule::parse("@EVERY   2h").unwrap();
        assert_eq!(schedule.interval(), Some(Duration::from_secs(7200)));
        assert_eq!(
            Schedule::parse("@every 90s").unwrap().interval(),
            Some(Duration::from_secs(90))
        );
        assert_eq!(Schedule::parse("@daily").unwrap().interval(), None);
    }

    #[test]
    fn every_ignores_zone_and_daylight_saving() {
        let spring = [
            "2026-03-08T07:00:00Z",
            "2026-03-08T08:00:00Z",
            "2026-03-08T09:00:00Z",
        ];
        let fall = [
            "2026-11-01T05:00:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-01T07:00:00Z",
        ];
        for tz in ["UTC", "America/New_York", "Asia/Kolkata"] {
            assert_eq!(
                fires("@every 1h", tz, "2026-03-08T06:30:00Z", 3),
                spring,
                "{tz}"
            );
            assert_eq!(
                fires("@every 1h", tz, "2026-11-01T04:30:00Z", 3),
                fall,
                "{tz}"
            );
        }
    }

    #[test]
    fn results_are_strictly_after() {
        assert_eq!(
            utc("0 0 * * * *", "2026-01-01T01:00:00Z", 1),
            ["2026-01-01T02:00:00Z"]
        );
        assert_eq!(
            utc("0 0 * * * *", "2026-01-01T00:59:59.999Z", 1),
            ["2026-01-01T01:00:00Z"]
        );
        assert_eq!(
            utc("0 0 * * * *", "2026-01-01T01:00:00.001Z", 1),
            ["2026-01-01T02:00:00Z"]
        );
        assert_eq!(
            utc("* * * * * *", "2026-01-01T00:00:00.500Z", 2),
            ["2026-01-01T00:00:01Z", "2026-01-01T00:00:02Z"]
        );
        assert_eq!(
            utc("@every 1m", "2026-01-01T00:01:00Z", 1),
            ["2026-01-01T00:02:00Z"]
        );
        assert_eq!(
            utc("@every 1m", "2026-01-01T00:00:59.999Z", 1),
            ["2026-01-01T00:01:00Z"]
        );
        assert_eq!(
            fires("0 0 * * * *", "Asia/Kolkata", "2026-01-01T00:30:00Z", 2),
            ["2026-01-01T01:30:00Z", "2026-01-01T02:30:00Z"]
        );
    }

    // --- daylight saving ----------------------------------------------------------------------

    #[test]
    fn daily_job_in_the_new_york_gap_fires_when_the_gap_ends() {
        assert_eq!(
            fires(
                "0 30 2 * * *",
                "America/New_York",
                "2026-03-06T12:00:00Z",
                4
            ),
            [
                "2026-03-07T07:30:00Z", // 02:30 EST
                "2026-03-08T07:00:00Z", // 02:30 does not exist: 03:00 EDT
                "2026-03-09T06:30:00Z", // 02:30 EDT
                "2026-03-10T06:30:00Z"
            ]
        );
    }

    #[test]
    fn daily_job_in_the_berlin_gap_fires_when_the_gap_ends() {
        assert_eq!(
            fires("0 30 2 * * *", "Europe/Berlin", "2026-03-27T12:00:00Z", 4),
            [
                "2026-03-28T01:30:00Z", // 02:30 CET
                "2026-03-29T01:00:00Z", // 02:30 does not exist: 03:00 CEST
                "2026-03-30T00:30:00Z", // 02:30 CEST
                "2026-03-31T00:30:00Z"
            ]
        );
    }

    #[test]
    fn quarter_hourly_job_across_the_gap_collapses_onto_one_instant() {
        assert_eq!(
            fires(
                "0 */15 * * * *",
                "America/New_York",
                "2026-03-08T06:30:00Z",
                4
            ),
            [
                "2026-03-08T06:45:00Z", // 01:45 EST
                "2026-03-08T07:00:00Z", // 02:00-02:45 and 03:00 EDT, once
                "2026-03-08T07:15:00Z",
                "2026-03-08T07:30:00Z"
            ]
        );
        assert_eq!(
            fires("0 */15 * * * *", "Europe/Berlin", "2026-03-29T00:30:00Z", 4),
            [
                "2026-03-29T00:45:00Z", // 01:45 CET
                "2026-03-29T01:00:00Z", // 02:00-02:45 and 03:00 CEST, once
                "2026-03-29T01:15:00Z",
                "2026-03-29T01:30:00Z"
            ]
        );
        // Every minute of the missing hour: one run, then the next day as usual.
        assert_eq!(
            fires("0 * 2 * * *", "America/New_York", "2026-03-08T06:58:00Z", 3),
            [
                "2026-03-08T07:00:00Z",
                "2026-03-09T06:00:00Z",
                "2026-03-09T06:01:00Z"
            ]
        );
        // Sub-second `after` just before the gap.
        assert_eq!(
            fires(
                "0 30 2 * * *",
                "America/New_York",
                "2026-03-08T06:59:59.900Z",
                1
            ),
            ["2026-03-08T07:00:00Z"]
        );
    }

    #[test]
    fn gap_end_is_exact_to_the_second() {
        let zone: Tz = "America/New_York".parse().unwrap();
        let local = NaiveDate::from_ymd_opt(2026, 3, 8)
            .unwrap()
            .and_hms_opt(2, 17, 42)
            .unwrap();
        let end = gap_end(zone, local).unwrap().with_timezone(&Utc);
        assert_eq!(show(end), "2026-03-08T07:00:00Z");
    }

    #[test]
    fn daily_job_in_the_repeated_hour_fires_once() {
        let expected = ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"];
        assert_eq!(
            fires(
                "0 30 1 * * *",
                "America/New_York",
                "2026-10-31T12:00:00Z",
                2
            ),
            expected
        );
        // After the first pass, and from inside the second pass: straight to the next day.
        for from in [
            "2026-11-01T05:30:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-01T06:29:59Z",
        ] {
            assert_eq!(
                fires("0 30 1 * * *", "America/New_York", from, 1),
                ["2026-11-02T06:30:00Z"],
                "from {from}"
            );
        }
    }

    #[test]
    fn hourly_job_does_not_repeat_the_new_york_fall_back_hour() {
        assert_eq!(
            fires("0 0 * * * *", "America/New_York", "2026-11-01T04:30:00Z", 3),
            [
                "2026-11-01T05:00:00Z", // 01:00 EDT
                "2026-11-01T07:00:00Z", // 02:00 EST; 06:00Z (01:00 EST) skipped
                "2026-11-01T08:00:00Z"
            ]
        );
        assert_eq!(
            fires(
                "0 */15 * * * *",
                "America/New_York",
                "2026-11-01T05:40:00Z",
                2
            ),
            ["2026-11-01T05:45:00Z", "2026-11-01T07:00:00Z"]
        );
    }

    #[test]
    fn quarter_hourly_job_does_not_repeat_the_berlin_fall_back_hour() {
        assert_eq!(
            fires("0 */15 * * * *", "Europe/Berlin", "2026-10-25T00:30:00Z", 4),
            [
                "2026-10-25T00:45:00Z", // 02:45 CEST
                "2026-10-25T02:00:00Z", // 03:00 CET; 02:00-02:45 CET skipped
                "2026-10-25T02:15:00Z",
                "2026-10-25T02:30:00Z"
            ]
        );
        // From inside the second pass (02:10 CET).
        assert_eq!(
            fires("0 */15 * * * *", "Europe/Berlin", "2026-10-25T01:10:00Z", 1),
            ["2026-10-25T02:00:00Z"]
        );
    }

    #[test]
    fn daily_in_berlin_across_both_transitions() {
        assert_eq!(
            fires("@daily", "Europe/Berlin", "2026-03-27T12:00:00Z", 4),
            [
                "2026-03-27T23:00:00Z", // 28 Mar 00:00 CET
                "2026-03-28T23:00:00Z", // 29 Mar 00:00 CET
                "2026-03-29T22:00:00Z", // 30 Mar 00:00 CEST
                "2026-03-30T22:00:00Z"
            ]
        );
        assert_eq!(
            fires("@daily", "Europe/Berlin", "2026-10-23T12:00:00Z", 4),
            [
                "2026-10-23T22:00:00Z", // 24 Oct 00:00 CEST
                "2026-10-24T22:00:00Z", // 25 Oct 00:00 CEST
                "2026-10-25T23:00:00Z", // 26 Oct 00:00 CET
                "2026-10-26T23:00:00Z"
            ]
        );
    }

    // --- cross-check against a brute-force reference ------------------------------------------

    /// The fire time of a matching local time: its earliest occurrence, or the end of the gap.
    fn reference_instant(zone: Tz, local: NaiveDateTime) -> Option<DateTime<Utc>> {
        match zone.from_local_datetime(&local).earliest() {
            Some(t) => Some(t.with_timezone(&Utc)),
            None => gap_end(zone, local).map(|t| t.with_timezone(&Utc)),
        }
    }

    /// How far [`reference_next`] looks ahead of `after`.
    const REFERENCE_WINDOW_DAYS: i64 = 3;

    /// Scans every local minute from three hours before `after` to [`REFERENCE_WINDOW_DAYS`] after it
    /// and returns the first fire time after `after`. Only for expressions with second 0.
    fn reference_next(cron: &Cron, zone: Tz, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let bit = |mask: u64, value: u32| mask >> value & 1 == 1;
        let mut local =
            after.with_timezone(&zone).naive_local().with_second(0)? - TimeDelta::hours(3);
        for _ in 0..REFERENCE_WINDOW_DAYS * 24 * 60 + 180 {
            local += TimeDelta::minutes(1);
            let dom = bit(cron.days_of_month, local.day());
            let dow = bit(cron.weekday_pattern, local.weekday().num_days_from_sunday());
            let day = if cron.dom_unrestricted || cron.dow_unrestricted {
                dom && dow
            } else {
                dom || dow
            };
            let index = (local.year() - MIN_YEAR) as usize;
            let year = cron.years[index / 64] >> (index % 64) & 1 == 1;
            let matches = day
                && year
                && bit(cron.months, local.month())
                && bit(cron.hours, local.hour())
                && bit(cron.minutes, local.minute())
                && bit(cron.seconds, 0);
            if matches {
                if let Some(t) = reference_instant(zone, local).filter(|t| *t > after) {
                    return Some(t);
                }
            }
        }
        None
    }

    #[test]
    fn agrees_with_brute_force_around_transitions() {
        let expressions = [
            "* * * * *",
            "*/15 * * * *",
            "*/7 * * * *",
            "0 * * * *",
            "30 * * * *",
            "0 */2 * * *",
            "30 2 * * *",
            "30 1 * * *",
            "0 2 * * *",
            "15 2,3 * * *",
            "45 0-3 * * *",
            "0,30 1-2 * * *",
            "59 1 * * *",
            "0 0 * * *",
            "10 2 * * SUN",
            "10 2 1,15 * SUN",
            "0 2 ? * MON-FRI,SUN",
        ];
        let cases = [
            ("America/New_York", "2026-03-07T20:00:00Z"),
            ("America/New_York", "2026-10-31T20:00:00Z"),
            ("Europe/Berlin", "2026-03-28T20:00:00Z"),
            ("Europe/Berlin", "2026-10-24T20:00:00Z"),
            // Half-hour shifts: 02:00 -> 02:30 in October, 02:00 -> 01:30 in April.
            ("Australia/Lord_Howe", "2026-10-03T10:00:00Z"),
            ("Australia/Lord_Howe", "2026-04-04T10:00:00Z"),
            ("Asia/Kathmandu", "2026-01-01T00:00:00Z"),
            ("UTC", "2026-12-30T00:00:00Z"),
        ];
        for (tz, start) in cases {
            let zone: Tz = tz.parse().unwrap();
            for expr in expressions {
                let schedule = Schedule::parse_in(expr, tz).unwrap();
                let Kind::Cron(cron) = &schedule.kind else {
                    panic!("{expr} is not cron");
                };
                // For 30 hours, starting points alternate between the previous fire time and
                // 20 minutes after the previous starting point.
                let mut after = at(start);
                let end = after + TimeDelta::hours(30);
                for step in 0.. {
                    if after >= end {
                        break;
                    }
                    let actual = schedule.next_after(after);
                    match reference_next(cron, zone, after) {
                        Some(expected) => assert_eq!(
                            actual.map(show),
                            Some(show(expected)),
                            "{expr} in {tz} after {}",
                            show(after)
                        ),
                        // Beyond the reference's window.
                        None => assert!(
                            actual.unwrap() > after + TimeDelta::days(REFERENCE_WINDOW_DAYS - 1),
                            "{expr} in {tz} after {}",
                            show(after)
                        ),
                    }
                    after = if step % 2 == 0 {
                        actual.unwrap()
                    } else {
                        after + TimeDelta::minutes(20)
                    };
                }
            }
        }
    }

    // --- accessors ----------------------------------------------------------------------------

    #[test]
    fn accessors_display_and_from_str() {
        let schedule = Schedule::parse_in("  0 30 2 * * *\t", "America/New_York").unwrap();
        assert_eq!(schedule.expression(), "0 30 2 * * *");
        assert_eq!(schedule.time_zone(), chrono_tz::America::New_York);
        assert_eq!(schedule.to_string(), "0 30 2 * * * (America/New_York)");

        let every: Schedule = " @every 1m30s ".parse().unwrap();
        assert_eq!(every.to_string(), "@every 1m30s");
        assert_eq!(every.time_zone(), Tz::UTC);
        assert_eq!(
            Schedule::parse("@daily").unwrap().to_string(),
            "@daily (UTC)"
        );
        assert_eq!(
            "0 0 25 * * *".parse::<Schedule>().unwrap_err(),
            Schedule::parse("0 0 25 * * *").unwrap_err()
        );
    }

    // --- errors -------------------------------------------------------------------------------

    #[test]
    fn unknown_time_zone() {
        assert_eq!(
            Schedule::parse_in("@daily", "Mars/Olympus")
                .unwrap_err()
                .to_string(),
            "unknown time zone \"Mars/Olympus\""
        );
        assert_eq!(
            Schedule::parse_in("@every 1m", "Mars/Olympus").unwrap_err(),
            ScheduleError::UnknownTimeZone("Mars/Olympus".to_owned())
        );
    }

    #[test]
    fn wrong_field_count() {
        assert_eq!(
            error("0 0 * *"),
            "cron expression \"0 0 * *\" has 4 fields; expected 5 (min hour dom month dow), \
             6 (with seconds first) or 7 (with a year last)"
        );
        assert_eq!(
            error("0 0 0 * * * 2026 1"),
            "cron expression \"0 0 0 * * * 2026 1\" has 8 fields; expected 5 (min hour dom \
             month dow), 6 (with seconds first) or 7 (with a year last)"
        );
        assert_eq!(
            error("   "),
            "cron expression \"\" has 0 fields; expected 5 (min hour dom month dow), \
             6 (with seconds first) or 7 (with a year last)"
        );
    }

    #[test]
    fn field_errors() {
        let cases = [
            (
                "0 0 25 * * *",
                "invalid cron expression \"0 0 25 * * *\": hour field \"25\": 25 is out of range 0-23",
            ),
            (
                "0 0 0 * * FUNDAY",
                "invalid cron expression \"0 0 0 * * FUNDAY\": day-of-week field \"FUNDAY\": unknown name",
            ),
            (
                "0 */0 * * * *",
                "invalid cron expression \"0 */0 * * * *\": minute field \"*/0\": step must be at least 1",
            ),
            (
                "5-2 * * * * *",
                "invalid cron expression \"5-2 * * * * *\": second field \"5-2\": range start 5 is after end 2",
            ),
            (
                "0 0 0 * 1,,3 *",
                "invalid cron expression \"0 0 0 * 1,,3 *\": month field \"\": empty list item",
            ),
            (
                "0 0 ? * * *",
                "invalid cron expression \"0 0 ? * * *\": hour field \"?\": ? is only allowed in the day-of-month and day-of-week fields",
            ),
            (
                "60 * * * * *",
                "invalid cron expression \"60 * * * * *\": second field \"60\": 60 is out of range 0-59",
            ),
            (
                "0 0 0 0 * *",
                "invalid cron expression \"0 0 0 0 * *\": day-of-month field \"0\": 0 is out of range 1-31",
            ),
            (
                "0 0 0 1 13 *",
                "invalid cron expression \"0 0 0 1 13 *\": month field \"13\": 13 is out of range 1-12",
            ),
            (
                "0 0 0 * * 8",
                "invalid cron expression \"0 0 0 * * 8\": day-of-week field \"8\": 8 is out of range 0-7",
            ),
            (
                "0 0 0 1 1 * 1969",
                "invalid cron expression \"0 0 0 1 1 * 1969\": year field \"1969\": 1969 is out of range 1970-2199",
            ),
            (
                "0 99999999999 * * * *",
                "invalid cron expression \"0 99999999999 * * * *\": minute field \"99999999999\": 99999999999 is out of range 0-59",
            ),
            (
                "0 0 0 1 FEB-JANUARY *",
                "invalid cron expression \"0 0 0 1 FEB-JANUARY *\": month field \"FEB-JANUARY\": unknown name",
            ),
            (
                "0 0 0 * * SAT-SUN",
                "invalid cron expression \"0 0 0 * * SAT-SUN\": day-of-week field \"SAT-SUN\": range start 6 is after end 0",
            ),
            (
                "0 0 x * * *",
                "invalid cron expression \"0 0 x * * *\": hour field \"x\": expected a number, found \"x\"",
            ),
            (
                "0 0 0 * * 1x",
                "invalid cron expression \"0 0 0 * * 1x\": day-of-week field \"1x\": expected a number or a name, found \"1x\"",
            ),
            (
                "0 0 0 * * MON-",
                "invalid cron expression \"0 0 0 * * MON-\": day-of-week field \"MON-\": expected a number or a name, found \"\"",
            ),
            (
                "0 0 1-2-3 * * *",
                "invalid cron expression \"0 0 1-2-3 * * *\": hour field \"1-2-3\": expected at most one \"-\"",
            ),
            (
                "0 0 */2/3 * * *",
                "invalid cron expression \"0 0 */2/3 * * *\": hour field \"*/2/3\": expected at most one \"/\"",
            ),
            (
                "0 0 */x * * *",
                "invalid cron expression \"0 0 */x * * *\": hour field \"*/x\": step must be a whole number, found \"x\"",
            ),
            (
                "61 0 0 * * FUNDAY",
                "invalid cron expression \"61 0 0 * * FUNDAY\": second field \"61\": 61 is out of range 0-59",
            ),
            (
                "0 0 MON * * *",
                "invalid cron expression \"0 0 MON * * *\": hour field \"MON\": expected a number, found \"MON\"",
            ),
        ];
        for (expr, message) in cases {
            assert_eq!(error(expr), message, "{expr}");
        }
        assert_eq!(
            Schedule::parse("0 0 25 * * *").unwrap_err(),
            ScheduleError::Field {
                expression: "0 0 25 * * *".to_owned(),
                field: CronField::Hour,
                item: "25".to_owned(),
                problem: FieldProblem::OutOfRange {
                    value: "25".to_owned(),
                    min: 0,
                    max: 23
                },
            }
        );
    }

    #[test]
    fn extreme_instants_do_not_panic() {
        for expr in ["@yearly", "* * * * * *", "@every 1h"] {
            let schedule = Schedule::parse_in(expr, "Asia/Tokyo").unwrap();
            assert_eq!(
                schedule.next_after(DateTime::<Utc>::MAX_UTC),
                None,
                "{expr}"
            );
            let _ = schedule.next_after(DateTime::<Utc>::MIN_UTC);
        }
        let berlin = Schedule::parse_in("@yearly", "Europe/Berlin").unwrap();
        assert_eq!(
            berlin
                .next_after(DateTime::<Utc>::MIN_UTC)
                .map(show)
                .as_deref(),
            Some("1969-12-31T23:00:00Z")
        );
        let new_york = Schedule::parse_in("@yearly", "America/New_York").unwrap();
        assert_eq!(
            new_york
                .next_after(at("1900-06-01T00:00:00Z"))
                .map(show)
                .as_deref(),
            Some("1970-01-01T05:00:00Z")
        );
    }

    #[test]
    fn question_mark_is_allowed_in_day_fields() {
        assert!(Schedule::parse("0 0 0 ? * MON").is_ok());
        assert!(Schedule::parse("0 0 0 1 * ?").is_ok());
    }

    #[test]
    fn expressions_that_never_fire_are_rejected() {
        assert_eq!(
            error("0 0 0 30 2 *"),
            "invalid cron expression \"0 0 0 30 2 *\": never fires: no month selected by the \
             month field \"2\" has a day selected by the day-of-month field \"30\""
        );
        assert_eq!(
            error("0 0 31 APR,JUN,SEP,NOV ?"),
            "invalid cron expression \"0 0 31 APR,JUN,SEP,NOV ?\": never fires: no month \
             selected by the month field \"APR,JUN,SEP,NOV\" has a day selected by the \
             day-of-month field \"31\""
        );
        // Possible in some month, or day-of-week OR-ed in: accepted.
        assert!(Schedule::parse("0 0 0 31 APR,MAY *").is_ok());
        assert!(Schedule::parse("0 0 0 29 2 *").is_ok());
        assert!(Schedule::parse("0 0 0 30 2 MON").is_ok());
    }

    #[test]
    fn every_errors() {
        let cases = [
            (
                "@every 1x",
                "invalid @every interval \"1x\": unknown unit \"x\"",
            ),
            (
                "@every 500ms",
                "invalid @every interval \"500ms\": must be at least 1s",
            ),
            (
                "@every 0s",
                "invalid @every interval \"0s\": must be at least 1s",
            ),
            ("@every", "invalid @every interval \"\": is empty"),
            ("@every   ", "invalid @every interval \"\": is empty"),
            (
                "@every 90",
                "invalid @every interval \"90\": missing unit after 90",
            ),
            (
                "@every h",
                "invalid @every interval \"h\": expected a number, found \"h\"",
            ),
            (
                "@every 1.5h",
                "invalid @every interval \"1.5h\": only whole numbers are allowed",
            ),
            (
                "@every -1m",
                "invalid @every interval \"-1m\": expected a number, found \"-1m\"",
            ),
            (
                "@every 1H",
                "invalid @every interval \"1H\": unknown unit \"H\"",
            ),
            (
                "@every 99999999999999999999h",
                "invalid @every interval \"99999999999999999999h\": is too long",
            ),
        ];
        for (expr, message) in cases {
            assert_eq!(error(expr), message, "{expr}");
        }
    }

    #[test]
    fn unknown_descriptors() {
        assert_eq!(
            error("@often"),
            "unknown descriptor \"@often\"; expected @yearly, @annually, @monthly, @weekly, \
             @daily, @midnight, @hourly or @every <duration>"
        );
        assert_eq!(
            Schedule::parse("@daily 5").unwrap_err(),
            ScheduleError::UnknownDescriptor("@daily 5".to_owned())
        );
        assert_eq!(
            Schedule::parse("@every1m").unwrap_err(),
            ScheduleError::UnknownDescriptor("@every1m".to_owned())
        );
    }
}
