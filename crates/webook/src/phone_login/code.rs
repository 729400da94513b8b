//! The small pure parts of SMS sign-in: reading a phone number as the API accepts it, drawing a
//! code, and checking the shape of a code a person typed.

use platform::error::{AppError, Msg};

/// Digits in a login code.
pub const CODE_DIGITS: usize = 6;

/// A mainland mobile number: `1[3-9]` and 9 more digits; an optional `+86` prefix and
/// surrounding spaces are accepted and dropped. Code 4 otherwise.
pub fn normalize_phone(input: &str) -> Result<String, AppError> {
    let trimmed = input.trim();
    let number = trimmed.strip_prefix("+86").unwrap_or(trimmed).trim_start();
    let bytes = number.as_bytes();
    let valid = bytes.len() == 11
        && bytes[0] == b'1'
        && (b'3'..=b'9').contains(&bytes[1])
        && bytes.iter().all(u8::is_ascii_digit);
    if valid {
        Ok(number.to_owned())
    } else {
        Err(AppError::InvalidInput(Msg::field(
            "phone",
            "must be a mainland mobile number (11 digits starting 13–19)",
            "请输入正确的手机号码（以 13–19 开头的 11 位数字）",
        )))
    }
}

/// A fresh code: [`CODE_DIGITS`] digits, uniform, from the OS's CSPRNG.
pub fn draw_code() -> anyhow::Result<String> {
    // 4 294 000 000 is the largest multiple of 10^6 below 2^32: rejecting draws at or above
    // it keeps every code equally likely.
    const LIMIT: u32 = 4_294_000_000;
    loop {
        let mut bytes = [0u8; 4];
        getrandom::fill(&mut bytes).map_err(|err| anyhow::anyhow!("no OS randomness: {err}"))?;
        let draw = u32::from_le_bytes(bytes);
        if draw < LIMIT {
            return Ok(format!("{:06}", draw % 1_000_000));
        }
    }
}

/// Whether `code` could be a code at all (six ASCII digits); anything else is simply wrong.
pub fn looks_like_a_code(code: &str) -> bool {
    code.len() == CODE_DIGITS && code.bytes().all(|byte| byte.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phones_are_mainland_mobiles_with_an_optional_country_prefix() {
        for (input, expected) in [
            ("13812345678", "13812345678"),
            (" +8619912345678 ", "19912345678"),
            ("+86 15012345678", "15012345678"),
        ] {
            assert_eq!(normalize_phone(input).unwrap(), expected, "{input:?}");
        }
        for bad in [
            "",
            "12812345678",
            "1381234567",
            "138123456789",
            "+8513812345678",
            "1381234567a",
            "１３８１２３４５６７８",
            "86 13812345678",
        ] {
            assert!(normalize_phone(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn codes_are_six_digits_and_spread_over_all_of_them() {
        let codes: Vec<String> = (0..2000).map(|_| draw_code().unwrap()).collect();
        assert!(codes.iter().all(|code| looks_like_a_code(code)));
        // Each position takes every digit (2000 draws: missing one by chance is ~10^-91).
        for position in 0..CODE_DIGITS {
            let mut seen = [false; 10];
            for code in &codes {
                seen[usize::from(code.as_bytes()[position] - b'0')] = true;
            }
            assert!(seen.iter().all(|&s| s), "position {position}: {seen:?}");
        }
        let distinct: std::collections::HashSet<_> = codes.iter().collect();
        assert!(distinct.len() > 1990, "{} distinct of 2000", distinct.len());
        assert!(!looks_like_a_code("12345") && !looks_like_a_code("12345a"));
    }
}
