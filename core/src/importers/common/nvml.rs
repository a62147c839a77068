//! What the importers of NVML-based logs share. Those logs sample whole GPUs (driver-level
//! memory, utilisation) rather than allocations — `nvidia-smi --query-gpu=… --format=csv`,
//! `nvidia-smi dmon`, pynvml JSON lines — and fill the canonical device-sample table
//! ([`crate::samples`]).
//!
//! Shared here: timestamp parsing (nvidia-smi's zone-less local
//! time, ISO 8601, epoch numbers) and quantities with units (`143771 MiB`, `N/A`,
//! `[Not Supported]`). Column sets differ between driver versions and loggers, so columns are
//! always mapped by their header names.

pub use super::line_problem::{Field, LineProblem};
pub use super::lines::{line_error, LineReader};

use crate::samples::{civil_to_us, SampleClock};

/// dmon/pmon `-o DT` columns: `20261129` + `14:20:48` → µs (local time without a zone, read as UTC).
pub fn dmon_date_time_us(date: &str, time: &str) -> Option<i64> {
    if date.len() != 8 || time.len() != 8 {
        return None;
    }
    // `get`, not indexing: eight bytes need not be eight characters.
    let y: i64 = date.get(0..4)?.parse().ok()?;
    let mo: u32 = date.get(4..6)?.parse().ok()?;
    let d: u32 = date.get(6..8)?.parse().ok()?;
    let mut hms = time.split(':').map(|p| p.parse::<u32>().ok());
    let (h, mi, s) = (hms.next()??, hms.next()??, hms.next()??);
    civil_to_us(y, mo, d, h, mi, s, 0)
}

/// Parses a timestamp: `YYYY/MM/DD HH:MM:SS[.fff]` (nvidia-smi, local time without zone),
/// ISO 8601 `YYYY-MM-DD[T ]HH:MM:SS[.fff][Z|±HH:MM]`, or a number since the epoch (seconds,
/// milliseconds, microseconds or nanoseconds, told apart by magnitude).
pub fn parse_timestamp(s: &str) -> Option<(i64, SampleClock)> {
    let s = s.trim();
    if let Some(us) = parse_epoch_decimal(s) {
        return Some((us, SampleClock::Epoch));
    }
    if let Ok(x) = s.parse::<f64>() {
        if !x.is_finite() || x <= 0.0 {
            return None;
        }
        let us = if x < 1e11 {
            x * 1e6
        } else if x < 1e14 {
            x * 1e3
        } else if x < 1e17 {
            x
        } else {
            x / 1e3
        };
        return Some((us.round() as i64, SampleClock::Epoch));
    }
    let b = s.as_bytes();
    if b.len() < 19 || !(b[4] == b'/' || b[4] == b'-') || b[7] != b[4] || !(b[10] == b' ' || b[10] == b'T') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r).and_then(|v| v.parse::<u32>().ok());
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut rest = &s[19..];
    let mut frac_us = 0i64;
    if let Some(f) = rest.strip_prefix('.') {
        let digits = f.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let mut scaled = 0i64;
        for (i, c) in f[..digits].bytes().enumerate().take(6) {
            scaled += (c - b'0') as i64 * 10i64.pow(5 - i as u32);
        }
        frac_us = scaled;
        rest = &f[digits..];
    }
    let mut t = civil_to_us(y as i64, mo, d, h, mi, sec, frac_us)?;
    let rest = rest.trim();
    if rest.is_empty() {
        return Some((t, SampleClock::LocalNoZone));
    }
    if rest == "Z" || rest == "z" {
        return Some((t, SampleClock::Epoch));
    }
    let sign = match rest.as_bytes()[0] {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let z = rest[1..].replace(':', "");
    if z.len() != 4 {
        return None;
    }
    let zh: i64 = z.get(..2)?.parse().ok()?;
    let zm: i64 = z.get(2..)?.parse().ok()?;
    t -= sign * (zh * 60 + zm) * 60_000_000;
    Some((t, SampleClock::Epoch))
}

/// A plain decimal number since the epoch, converted exactly (no float rounding): seconds,
/// milliseconds, microseconds or nanoseconds by the magnitude of its integer part.
fn parse_epoch_decimal(s: &str) -> Option<i64> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if int.is_empty()
        || int.len() > 19
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let i: i64 = int.parse().ok()?;
    if i == 0 {
        return None;
    }
    // Digits of the fraction that land in whole microseconds.
    let (per_unit, frac_digits): (i64, usize) = if i < 100_000_000_000 {
        (1_000_000, 6)
    } else if i < 100_000_000_000_000 {
        (1_000, 3)
    } else if i < 100_000_000_000_000_000 {
        (1, 0)
    } else {
        return Some(i / 1000 + i64::from(i % 1000 >= 500));
    };
    let digits = frac.as_bytes();
    let mut f = 0i64;
    for k in 0..frac_digits {
        f = f * 10 + digits.get(k).map_or(0, |d| (d - b'0') as i64);
    }
    let round_up = digits.get(frac_digits).is_some_and(|d| *d >= b'5');
    i.checked_mul(per_unit)?.checked_add(f + i64::from(round_up))
}

/// A value the tools print for missing data: `N/A`, `[N/A]`, `[Not Supported]`, `-`, empty.
pub fn is_missing(s: &str) -> bool {
    let s = s.trim();
    s.is_empty() || s == "-" || s.eq_ignore_ascii_case("n/a") || s.starts_with('[')
}

/// Bytes per unit for memory quantities; nvidia-smi's `MB` means MiB.
pub fn memory_unit(unit: &str) -> Option<f64> {
    match unit.trim().to_ascii_lowercase().as_str() {
        "b" | "bytes" => Some(1.0),
        "kib" | "kb" => Some(1024.0),
        "mib" | "mb" => Some((1u64 << 20) as f64),
        "gib" | "gb" => Some((1u64 << 30) as f64),
        _ => None,
    }
}

/// Splits `143771 MiB` into (143771, Some("MiB")); `None` for missing values.
pub fn split_quantity(s: &str) -> Option<(f64, Option<&str>)> {
    if is_missing(s) {
        return None;
    }
    let s = s.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E'))
        .unwrap_or(s.len());
    let value: f64 = s[..end].parse().ok()?;
    let unit = s[end..].trim();
    Some((value, (!unit.is_empty()).then_some(unit)))
}

/// A memory quantity in bytes: the value's own unit, else `default_unit` (from the header).
pub fn parse_memory(s: &str, default_unit: f64) -> Result<Option<i64>, LineProblem> {
    let Some((value, unit)) = split_quantity(s) else {
        return Ok(None);
    };
    let scale = match unit {
        Some(u) => memory_unit(u).ok_or_else(|| LineProblem::MemoryUnit {
            unit: u.to_owned(),
            text: s.trim().to_owned(),
        })?,
        None => default_unit,
    };
    Ok(Some((value * scale).round() as i64))
}

/// A percentage (`18 %`, `18`), `None` when missing.
pub fn parse_percent(s: &str) -> Option<f64> {
    split_quantity(s).map(|(v, _)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_in_every_shape() {
        let local = parse_timestamp("2026/11/29 14:20:48.551").expect("smi");
        assert_eq!(local, (1_795_962_048_551_000, SampleClock::LocalNoZone));
        assert_eq!(
            parse_timestamp("2026-11-29T14:20:48.551Z"),
            Some((1_795_962_048_551_000, SampleClock::Epoch))
        );
        assert_eq!(
            parse_timestamp("2026-11-29 15:20:48.551+01:00"),
            Some((1_795_962_048_551_000, SampleClock::Epoch))
        );
        assert_eq!(
            parse_timestamp("1795962103.4496624"),
            Some((1_795_962_103_449_662, SampleClock::Epoch))
        );
        assert_eq!(
            parse_timestamp("1795962103449"),
            Some((1_795_962_103_449_000, SampleClock::Epoch))
        );
        assert_eq!(parse_timestamp("yesterday"), None);
        assert_eq!(parse_timestamp("2026/13/29 14:20:48"), None);
    }

    #[test]
    fn quantities_with_units_and_missing_markers() {
        assert_eq!(parse_memory("143771 MiB", 1.0), Ok(Some(143_771 << 20)));
        assert_eq!(parse_memory("616", (1u64 << 20) as f64), Ok(Some(616 << 20)));
        assert_eq!(parse_memory("[Not Supported]", 1.0), Ok(None));
        assert_eq!(parse_memory(" N/A ", 1.0), Ok(None));
        assert!(parse_memory("3 parsecs", 1.0).is_err());
        assert_eq!(parse_percent("18 %"), Some(18.0));
        assert_eq!(parse_percent("-"), None);
    }
}
