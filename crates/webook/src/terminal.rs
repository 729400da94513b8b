//! What the CLI's commands print — tables of left-aligned columns and times in RFC 3339 UTC,
//! the same for every feature's commands (`webook jobs list`, `webook events groups`, …) — and
//! who runs a command that changes something ([`operator`]).

use chrono::{DateTime, SecondsFormat, Utc};

/// `ms` since the epoch as RFC 3339 UTC (fractions only when there are any).
pub fn time_text(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |time| time.to_rfc3339_opts(SecondsFormat::AutoSi, true),
    )
}

/// Left-aligned columns two spaces apart; no trailing spaces.
pub fn table(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let header: Vec<String> = header.iter().map(|&title| title.to_owned()).collect();
    let mut widths: Vec<usize> = header.iter().map(|title| title.chars().count()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (cell, &width) in row.iter().zip(&widths) {
            // `{:<width$}` pads by characters, as the widths are counted.
            line.push_str(&format!("{cell:<width$}  "));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Who runs a command line that changes something, for the audit, for the audit: `cli:<user>@<host>`.
pub fn operator() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "unknown".to_owned());
    format!("cli:{user}@{}", platform::host_name())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns_and_trim_lines() {
        let text = table(
            &["ID", "NAME"],
            vec![
                vec!["1".into(), "nightly".into()],
                vec!["12".into(), "x".into()],
            ],
        );
        assert_eq!(text, "ID  NAME\n1   nightly\n12  x\n");
        assert_eq!(table(&["ID", "NAME"], Vec::new()), "ID  NAME\n");
    }

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(time_text(1_767_225_600_000), "2026-01-01T00:00:00Z");
        assert_eq!(time_text(1_767_225_600_250), "2026-01-01T00:00:00.250Z");
    }
}
