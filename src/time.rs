//! Timestamps: milliseconds since the Unix epoch, shown as ISO 8601 UTC.

/// Formats `ms` since the Unix epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn iso8601_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        ms % 1000
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        assert_eq!(iso8601_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso8601_ms(1_796_004_000_123), "2026-11-30T02:00:00.123Z");
        assert_eq!(iso8601_ms(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
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
