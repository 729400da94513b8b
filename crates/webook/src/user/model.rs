//! User domain types and the validation rules of `API.md` → Users.

use chrono::Datelike as _;
use serde::{Deserialize, Serialize};

use platform::{
    error::{AppError, Msg},
    text::{self, Lines},
};

/// Topic of the event recorded when a user's profile (nickname, birthday, about me) changes.
pub const TOPIC_PROFILE_CHANGED: &str = "user_profile_changed";

/// Payload of [`TOPIC_PROFILE_CHANGED`] events (key: the user id). Consumers read the profile
/// as it is when they apply the event, so an older event never brings back older values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileEvent {
    /// Whose profile.
    pub uid: i64,
    /// When it changed (Unix ms).
    pub time: i64,
}

/// Longest accepted email (RFC 5321 path limit).
pub const MAX_EMAIL_LEN: usize = 254;
/// Shortest accepted password, in characters.
pub const MIN_PASSWORD_CHARS: usize = 8;
/// Longest accepted password, in bytes: bounds the hashing work one request can ask for.
pub const MAX_PASSWORD_BYTES: usize = 256;
/// Longest nickname, in characters.
pub const MAX_NICKNAME_CHARS: usize = 64;
/// Longest "about me", in characters.
pub const MAX_ABOUT_ME_CHARS: usize = 1024;

/// A stored account, as the service sees it. The password hash never leaves the service.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct User {
    /// Id.
    pub id: i64,
    /// Normalised email, when the account has one.
    pub email: Option<String>,
    /// Phone number, when the account has one.
    pub phone: Option<String>,
    /// Display name ('' when not set).
    pub nickname: String,
    /// `YYYY-MM-DD`, or '' when not given.
    pub birthday: String,
    /// Free text ('' when not set).
    pub about_me: String,
    /// Creation time, ms.
    pub ctime: i64,
    /// Last update, ms.
    pub utime: i64,
}

/// `GET /users/profile`: the bare object the course frontend reads (no envelope).
#[derive(Debug, Clone, Serialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "PascalCase")]
pub struct Profile {
    /// Id.
    pub id: i64,
    /// Email ('' when none).
    pub email: String,
    /// Phone ('' when none).
    pub phone: String,
    /// Nickname.
    pub nickname: String,
    /// `YYYY-MM-DD` or ''.
    pub birthday: String,
    /// About me.
    pub about_me: String,
}

impl From<User> for Profile {
    fn from(user: User) -> Self {
        Self {
            id: user.id,
            email: user.email.unwrap_or_default(),
            phone: user.phone.unwrap_or_default(),
            nickname: user.nickname,
            birthday: user.birthday,
            about_me: user.about_me,
        }
    }
}

/// A validated profile change: `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProfileEdit {
    /// New nickname.
    pub nickname: Option<String>,
    /// New birthday (`YYYY-MM-DD`, or '' to clear it).
    pub birthday: Option<String>,
    /// New "about me".
    pub about_me: Option<String>,
}

impl ProfileEdit {
    /// Validates raw input: lengths in characters, the text rules of [`platform::text`] (a
    /// nickname is one line with something visible and few combining marks on a character, or
    /// empty), a real calendar date not in the
    /// future.
    pub fn parse(
        nickname: Option<String>,
        birthday: Option<String>,
        about_me: Option<String>,
        today: chrono::NaiveDate,
    ) -> Result<Self, AppError> {
        let nickname = nickname.map(|n| n.trim().to_owned());
        if let Some(nickname) = &nickname {
            if nickname.chars().count() > MAX_NICKNAME_CHARS {
                return Err(invalid(
                    "nickname",
                    format!("at most {MAX_NICKNAME_CHARS} characters"),
                    format!("最多 {MAX_NICKNAME_CHARS} 个字符"),
                ));
            }
            text::check("nickname", nickname, Lines::Single)?;
            text::require_visible("nickname", nickname)?;
            text::limit_combining_marks("nickname", nickname)?;
        }
        if let Some(about_me) = &about_me {
            if about_me.chars().count() > MAX_ABOUT_ME_CHARS {
                return Err(invalid(
                    "aboutMe",
                    format!("at most {MAX_ABOUT_ME_CHARS} characters"),
                    format!("最多 {MAX_ABOUT_ME_CHARS} 个字符"),
                ));
            }
            text::check("aboutMe", about_me, Lines::Multi)?;
        }
        let birthday = match birthday.map(|b| b.trim().to_owned()) {
            Some(b) if b.is_empty() => Some(b),
            Some(b) => {
                let date = chrono::NaiveDate::parse_from_str(&b, "%Y-%m-%d")
                    .ok()
                    .filter(|_| b.len() == 10)
                    .ok_or_else(|| {
                        invalid(
                            "birthday",
                            "expected a date as YYYY-MM-DD",
                            "须为 YYYY-MM-DD 格式的日期",
                        )
                    })?;
                if date > today || date.year() < 1900 {
                    return Err(invalid(
                        "birthday",
                        "must be between 1900-01-01 and today",
                        "须在 1900-01-01 与今天之间",
                    ));
                }
                Some(date.format("%Y-%m-%d").to_string())
            }
            None => None,
        };
        Ok(Self {
            nickname,
            birthday,
            about_me,
        })
    }
}

/// Someone as others see them — an article's author, a commenter, a feed item's actor: the
/// user id and the display name ([`display_name`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Person {
    /// User id.
    pub id: i64,
    /// Display name (the nickname, or `user<id>`).
    pub name: String,
}

impl Person {
    /// User `id`, whose nickname is `nickname` (empty or absent: none set).
    pub fn new(id: i64, nickname: Option<&str>) -> Self {
        Self {
            id,
            name: display_name(nickname.unwrap_or(""), id),
        }
    }
}

/// The name others see for user `uid`: the nickname, or `user<id>` when none was set (authors
/// in article views and the hot list; later comments and the feed).
pub fn display_name(nickname: &str, uid: i64) -> String {
    if nickname.trim().is_empty() {
        format!("user{uid}")
    } else {
        nickname.to_owned()
    }
}

/// The calendar date of `now` in the time zone furthest ahead (UTC+14): the latest "today" any
/// user can have, so a birthday entered as someone's local today is never "in the future" (UTC's
/// date trails Asia's by up to a day).
pub fn latest_today(now: chrono::DateTime<chrono::Utc>) -> chrono::NaiveDate {
    (now + chrono::Duration::hours(14)).date_naive()
}

fn invalid(field: &str, en: impl std::fmt::Display, zh: impl std::fmt::Display) -> AppError {
    AppError::InvalidInput(Msg::field(field, en, zh))
}

/// Trims and lower-cases an email, then checks its shape: one `@`, a non-empty local part of at
/// most 64 bytes, a dotted domain of letters, digits, hyphens, no spaces or control characters.
pub fn normalize_email(raw: &str) -> Result<String, AppError> {
    let email = raw.trim().to_lowercase();
    let bad = || invalid("email", "not a valid email address", "不是有效的邮箱地址");
    if email.len() > MAX_EMAIL_LEN {
        return Err(bad());
    }
    let (local, domain) = email.split_once('@').ok_or_else(bad)?;
    let local_ok = !local.is_empty()
        && local.len() <= 64
        && !local.starts_with('.')
        && !local.ends_with('.')
        && !local.contains("..")
        && local
            .chars()
            .all(|c| c.is_alphanumeric() || "!#$%&'*+-/=?^_`{|}~.".contains(c));
    let labels: Vec<&str> = domain.split('.').collect();
    let domain_ok = labels.len() >= 2
        && labels.iter().all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_alphanumeric() || c == '-')
        });
    if local_ok && domain_ok {
        Ok(email)
    } else {
        Err(bad())
    }
}

/// The password rule: at least 8 characters with a letter, a digit and a symbol; at most 256
/// bytes.
pub fn check_password_strength(password: &str) -> Result<(), AppError> {
    let long_enough = password.chars().count() >= MIN_PASSWORD_CHARS;
    let has_letter = password.chars().any(char::is_alphabetic);
    let has_digit = password.chars().any(|c| c.is_ascii_digit());
    let has_symbol = password
        .chars()
        .any(|c| !c.is_alphanumeric() && !c.is_whitespace());
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(invalid(
            "password",
            format!("at most {MAX_PASSWORD_BYTES} bytes"),
            format!("最多 {MAX_PASSWORD_BYTES} 字节"),
        ));
    }
    if long_enough && has_letter && has_digit && has_symbol {
        Ok(())
    } else {
        Err(invalid(
            "password",
            format!("at least {MIN_PASSWORD_CHARS} characters with a letter, a digit and a symbol"),
            format!("至少 {MIN_PASSWORD_CHARS} 个字符，且包含字母、数字和符号"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn today() -> chrono::NaiveDate {
        chrono::NaiveDate::from_ymd_opt(2026, 11, 29).unwrap()
    }

    #[test]
    fn the_display_name_falls_back_to_the_id_only_without_a_nickname() {
        assert_eq!(display_name("", 7), "user7");
        assert_eq!(display_name(" \t", 7), "user7");
        assert_eq!(display_name("小明", 7), "小明");
        assert_eq!(display_name(" Ann ", 7), " Ann ");
    }

    #[test]
    fn today_is_the_latest_date_on_earth() {
        use chrono::TimeZone;
        // 23:00 UTC on 29 November is already 30 November in Beijing (and Kiribati).
        let late = chrono::Utc
            .with_ymd_and_hms(2026, 11, 29, 23, 0, 0)
            .unwrap();
        let today = latest_today(late);
        assert_eq!(
            today,
            chrono::NaiveDate::from_ymd_opt(2026, 11, 30).unwrap()
        );
        assert!(ProfileEdit::parse(None, Some("2026-11-30".into()), None, today).is_ok());
        assert!(ProfileEdit::parse(None, Some("2026-12-01".into()), None, today).is_err());
    }

    #[test]
    fn emails_are_normalised_and_checked() {
        assert_eq!(
            normalize_email("  Alice@Example.COM ").unwrap(),
            "alice@example.com"
        );
        assert_eq!(
            normalize_email("a.b+tag@sub.example.cn").unwrap(),
            "a.b+tag@sub.example.cn"
        );
        assert_eq!(normalize_email("用户@例子.中国").unwrap(), "用户@例子.中国");
        for bad in [
            "",
            "plain",
            "@example.com",
            "a@",
            "a@b",
            "a b@example.com",
            "a@exa mple.com",
            "a@@example.com",
            ".a@example.com",
            "a..b@example.com",
            "a@-x.com",
            "a@x..com",
            "a<b>@example.com",
        ] {
            assert!(normalize_email(bad).is_err(), "{bad:?} accepted");
        }
        assert!(normalize_email(&format!("{}@example.com", "a".repeat(65))).is_err());
    }

    #[test]
    fn password_rule_needs_length_letter_digit_symbol() {
        assert!(check_password_strength("hello#123").is_ok());
        assert!(check_password_strength("密码密码#1ab").is_ok());
        for weak in ["short#1", "nodigits#", "nosymbol12", "12345678#", ""] {
            assert!(check_password_strength(weak).is_err(), "{weak:?} accepted");
        }
        assert!(check_password_strength(&format!("a1#{}", "x".repeat(300))).is_err());
    }

    #[test]
    fn profile_edits_validate_lengths_and_dates() {
        let edit = ProfileEdit::parse(
            Some(" 小明 ".into()),
            Some("1990-02-28".into()),
            Some("hi".into()),
            today(),
        )
        .unwrap();
        assert_eq!(edit.nickname.as_deref(), Some("小明"));
        assert_eq!(edit.birthday.as_deref(), Some("1990-02-28"));

        let clear = ProfileEdit::parse(None, Some(String::new()), None, today()).unwrap();
        assert_eq!(clear.birthday.as_deref(), Some(""));
        assert_eq!(clear.nickname, None);

        for bad_date in [
            "1990-02-30",
            "1990-2-3",
            "yesterday",
            "2027-01-01",
            "1800-01-01",
        ] {
            assert!(
                ProfileEdit::parse(None, Some(bad_date.into()), None, today()).is_err(),
                "{bad_date} accepted"
            );
        }
        // 64 multi-byte characters are fine, 65 are not.
        assert!(ProfileEdit::parse(Some("字".repeat(64)), None, None, today()).is_ok());
        assert!(ProfileEdit::parse(Some("字".repeat(65)), None, None, today()).is_err());
        assert!(ProfileEdit::parse(None, None, Some("x".repeat(1025)), today()).is_err());
        // Text rules: no NUL (PostgreSQL cannot store it), no overrides, something visible.
        for (nickname, about_me) in [
            (Some("a\u{0}b"), None),
            (None, Some("about\u{0}")),
            (Some("\u{202E}evil"), None),
            (Some("\u{200B}\u{200B}"), None),
            (Some("two\nlines"), None),
        ] {
            assert!(
                ProfileEdit::parse(
                    nickname.map(str::to_owned),
                    None,
                    about_me.map(str::to_owned),
                    today()
                )
                .is_err(),
                "{nickname:?} {about_me:?} accepted"
            );
        }
        let multi_line = ProfileEdit::parse(None, None, Some("one\ntwo".into()), today());
        assert_eq!(multi_line.unwrap().about_me.as_deref(), Some("one\ntwo"));
        let cleared = ProfileEdit::parse(Some(String::new()), None, None, today()).unwrap();
        assert_eq!(cleared.nickname.as_deref(), Some(""));
    }
}
