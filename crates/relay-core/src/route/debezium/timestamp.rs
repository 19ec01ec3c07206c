//! `table.field.event.timestamp`: a PostgreSQL `timestamp` as Debezium turns it into a record
//! timestamp (milliseconds since the epoch, the column read as UTC, sub-millisecond digits
//! truncated toward zero as Java's `long` division does). `timestamptz` (which Debezium refuses:
//! it is a ZonedTimestamp string there) is accepted with its offset applied.

/// Milliseconds since the epoch of a pgoutput `timestamp`/`timestamptz` text value
/// (`YYYY-MM-DD HH:MM:SS[.ffffff][+HH[:MM[:SS]]]`); `None` for anything else (BC dates,
/// `infinity`).
pub(crate) fn timestamp_ms(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = text.get(r)?;
        if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    let dash = text.find('-')?;
    let year = num(0..dash)?;
    if b.get(dash + 3) != Some(&b'-') || b.get(dash + 6) != Some(&b' ') {
        return None;
    }
    let month = num(dash + 1..dash + 3)?;
    let day = num(dash + 4..dash + 6)?;
    let t = dash + 7;
    if b.get(t + 2) != Some(&b':') || b.get(t + 5) != Some(&b':') {
        return None;
    }
    let (h, m, s) = (num(t..t + 2)?, num(t + 3..t + 5)?, num(t + 6..t + 8)?);
    let mut i = t + 8;
    let mut micros = 0i64;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        let digits = &text[start..i];
        if digits.is_empty() || digits.len() > 6 {
            return None;
        }
        micros = digits.parse::<i64>().ok()? * 10i64.pow(6 - digits.len() as u32);
    }
    let mut offset = 0i64;
    if let Some(&sign) = b.get(i) {
        let sign = match sign {
            b'+' => 1,
            b'-' => -1,
            _ => return None,
        };
        let parts: Vec<&str> = text[i + 1..].split(':').collect();
        if parts.is_empty() || parts.len() > 3 || parts.iter().any(|p| p.len() != 2) {
            return None;
        }
        let mut secs = 0;
        for (p, unit) in parts.iter().zip([3600, 60, 1]) {
            secs += num_str(p)? * unit;
        }
        offset = sign * secs;
    }
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || h > 24 || m > 59 || s > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + h * 3600 + m * 60 + s - offset;
    let total_micros = secs.checked_mul(1_000_000)?.checked_add(micros)?;
    Some(total_micros / 1000)
}

fn num_str(s: &str) -> Option<i64> {
    if !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn timestamps_as_debezium_reads_them() {
        // Debezium 3.6.1: '2024-01-02 03:04:07.678912' -> record timestamp 1704164647678.
        assert_eq!(
            timestamp_ms("2024-01-02 03:04:07.678912"),
            Some(1_704_164_647_678)
        );
        assert_eq!(timestamp_ms("1970-01-01 00:00:00"), Some(0));
        assert_eq!(
            timestamp_ms("1969-12-31 23:59:59.9995"),
            Some(0),
            "toward zero"
        );
        assert_eq!(
            timestamp_ms("2024-01-02 05:04:07.678+02"),
            Some(1_704_164_647_678)
        );
        assert_eq!(
            timestamp_ms("2024-01-02 02:34:07.678-00:30"),
            Some(1_704_164_647_678)
        );
        for bad in [
            "infinity",
            "2024-01-02",
            "2024-01-02 03:04:07 BC",
            "2024-13-02 03:04:07",
        ] {
            assert_eq!(timestamp_ms(bad), None, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn days_match_a_day_by_day_count(days in -800_000i64..800_000) {
            // Walk from the epoch with the civil calendar's month lengths.
            let (mut y, mut m, mut d) = (1970i64, 1i64, 1i64);
            let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
            let len = |y: i64, m: i64| match m { 2 => if leap(y) { 29 } else { 28 }, 4 | 6 | 9 | 11 => 30, _ => 31 };
            let step = days.signum();
            for _ in 0..days.abs().min(2000) {
                if step > 0 {
                    d += 1;
                    if d > len(y, m) { d = 1; m += 1; if m > 12 { m = 1; y += 1; } }
                } else {
                    d -= 1;
                    if d < 1 { m -= 1; if m < 1 { m = 12; y -= 1; } d = len(y, m); }
                }
            }
            prop_assert_eq!(days_from_civil(y, m, d), days.signum() * days.abs().min(2000));
        }
    }
}
