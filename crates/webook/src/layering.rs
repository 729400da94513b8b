//! The layering rule, checked: a feature reaches another only through that feature's `mod.rs`
//! (its re-exports), never into its submodules, so a feature can reorganise its insides without
//! breaking others. (The platform crate cannot name a feature at all: the compiler holds that.)

/// The feature folders under `src/`.
const FEATURES: &[&str] = &[
    "account",
    "article",
    "auth",
    "comment",
    "feed",
    "interactive",
    "jobs",
    "payment",
    "phone_login",
    "ranking",
    "reward",
    "search",
    "sms",
    "tag",
    "user",
    "wechat_login",
];

/// `other::submodule::` paths written in `source`: after `crate::`, or inside a `use crate::{…}`
/// group (after `{` or `,` and whitespace).
fn reaches_into(source: &str, other: &str) -> Vec<String> {
    let needle = format!("{other}::");
    let mut found = Vec::new();
    for (at, _) in source.match_indices(&needle) {
        let before = source[..at].trim_end();
        let qualified = before.ends_with("crate::");
        let grouped = before.ends_with('{') || before.ends_with(',');
        let starts_word = !source[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
        if !(qualified || (grouped && starts_word)) {
            continue;
        }
        let rest = &source[at + needle.len()..];
        let segment: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        if !segment.is_empty() && rest[segment.len()..].starts_with("::") {
            found.push(format!("{other}::{segment}::"));
        }
    }
    found
}

#[test]
fn features_reach_each_other_only_through_mod_rs() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut violations = Vec::new();
    for feature in FEATURES {
        let mut dirs = vec![src.join(feature)];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                let source = std::fs::read_to_string(&path).unwrap();
                for other in FEATURES.iter().filter(|other| *other != feature) {
                    for path_used in reaches_into(&source, other) {
                        violations.push(format!("{}: {path_used}", path.display()));
                    }
                }
            }
        }
    }
    assert!(violations.is_empty(), "{violations:#?}");
}

#[test]
fn the_check_sees_qualified_and_grouped_paths() {
    assert_eq!(
        reaches_into("use crate::article::model::X;", "article"),
        ["article::model::"]
    );
    assert_eq!(
        reaches_into(
            "use crate::{auth::{AuthUser}, article::store::S};",
            "article"
        ),
        ["article::store::"]
    );
    assert!(reaches_into(
        "use crate::article::{ArticleEvent, ArticleStatus};",
        "article"
    )
    .is_empty());
    assert!(reaches_into("platform::jobs::JobRegistry; scheduler::sql::x", "jobs").is_empty());
}
