//! Timestamps: milliseconds since the Unix epoch, shown as ISO 8601 UTC.

/// Formats `ms` since the Unix epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`
/// (digit by digit: every task read formats its timestamps, and
/// `format!` with widths cost several times as much).
pub fn iso8601_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    let mut out = String::with_capacity(24);
    if y > 9999 {
        // Past year 9999: as many digits as it takes.
        out.push_str(&y.to_string());
    } else {
        push_digits(&mut out, y, 4);
    }
    let fields = [
        ('-', m, 2),
        ('-', d, 2),
        ('T', rem / 3600, 2),
        (':', rem / 60 % 60, 2),
        (':', rem % 60, 2),
        ('.', ms % 1000, 3),
    ];
    for (sep, value, width) in fields {
        out.push(sep);
        push_digits(&mut out, value, width);
    }
    out.push('Z');
    out
}

/// Pushes the last `width` decimal digits of `value`, zero-padded.
fn push_digits(out: &mut String, value: u64, width: u32) {
    for place in (0..width).rev() {
        let digit = value / 10u64.pow(place) % 10;
        // A digit is 0..=9: always a char.
        out.push(char::from_digit(digit as u32, 10).unwrap_or('0'));
    }
}

/// The proleptic Gregorian date of `days` after 1970-01-01, by counting
/// 400-year eras of 146,097 days from 0000-03-01.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// Parses an ISO 8601 UTC instant (`YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`)
/// into ms since the Unix epoch; `None` for anything else or before 1970.
pub fn parse_iso8601_ms(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    if b.get(4) != Some(&b'-')
        || b.get(7) != Some(&b'-')
        || !matches!(b.get(10), Some(b'T' | b't'))
        || b.get(13) != Some(&b':')
        || b.get(16) != Some(&b':')
    {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo)
        || !(1..=days_in_month(y, mo)).contains(&d)
        || h > 23
        || mi > 59
        || sec > 60
    {
        return None;
    }
    let mut rest = s.get(19..)?;
    let mut ms = 0i64;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let padded: String = frac
            .get(..digits)?
            .chars()
            .chain("000".chars())
            .take(3)
            .collect();
        ms = padded.parse().ok()?;
        rest = frac.get(digits..)?;
    }
    let offset_min = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let (oh, om) = rest.get(1..)?.split_once(':')?;
            if oh.len() != 2 || om.len() != 2 {
                return None;
            }
            sign * (oh.parse::<i64>().ok()? * 60 + om.parse::<i64>().ok()?)
        }
    };
    let days = days_from_civil(y, mo, d);
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset_min * 60;
    u64::try_from(secs * 1000 + ms).ok()
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to the given proleptic Gregorian date (the inverse of
/// [`civil_from_days`]).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        assert_eq!(iso8601_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso8601_ms(1_796_004_000_123), "2026-11-30T02:00:00.123Z");
        assert_eq!(iso8601_ms(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
        assert_eq!(iso8601_ms(253_402_300_800_000), "10000-01-01T00:00:00.000Z");
    }

    #[test]
    fn parsing_inverts_formatting() {
        for ms in [0, 951_782_400_000, 1_796_004_000_123, 4_102_444_799_999] {
            assert_eq!(parse_iso8601_ms(&iso8601_ms(ms)), Some(ms));
        }
        assert_eq!(
            parse_iso8601_ms("2024-03-15T10:15:00Z"),
            Some(1_710_497_700_000)
        );
        assert_eq!(
            parse_iso8601_ms("2024-03-15T12:15:00.5+02:00"),
            Some(1_710_497_700_500)
        );
        for bad in [
            "",
            "2024-03-15",
            "2024-13-01T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2024-03-15T10:15:00",
            "1969-12-31T23:59:59Z",
            "2024-03-15T10:15:00.Z",
        ] {
            assert_eq!(parse_iso8601_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn every_day_follows_the_previous_one() {
        let mut prev = civil_from_days(0);
        for day in 1..200_000u64 {
            let cur = civil_from_days(day);
            let next_in_month = (prev.0, prev.1, prev.2 + 1);
            let next_month = if prev.1 == 12 {
                (prev.0 + 1, 1, 1)
            } else {
                (prev.0, prev.1 + 1, 1)
            };
            assert!(
                cur == next_in_month || cur == next_month,
                "{prev:?} -> {cur:?}"
            );
            prev = cur;
        }
    }
}
