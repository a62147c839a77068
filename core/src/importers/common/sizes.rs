//! Sizes as PyTorch prints them, read back exactly: the OOM message's `format_size` (`512
//! bytes`, `1.50 KiB`, `20.00 MiB`, `6080.27 GiB`; MPS's `KB`/`MB`/`GB` are binary too) and the
//! memory summary's whole numbers in a unit (`12 GiB`, 1.13's `12 GB`). A value is its digits
//! times the unit, rounded to the nearest byte: `2.00 GiB` is 2147483648.

/// Bytes in one of PyTorch's printed units (binary whatever the spelling), or `None`.
pub fn unit_bytes(unit: &str) -> Option<i64> {
    Some(match unit {
        "B" | "bytes" | "byte" => 1,
        "KiB" | "KB" => 1 << 10,
        "MiB" | "MB" => 1 << 20,
        "GiB" | "GB" => 1 << 30,
        "TiB" | "TB" => 1 << 40,
        "PiB" | "PB" => 1 << 50,
        "EiB" | "EB" => 1 << 60,
        _ => return None,
    })
}

/// `digits[.digits]` times `unit` bytes, exactly (rounded to the nearest byte), or `None` when
/// the number is not one or the product overflows.
pub fn scaled(number: &str, unit: i64) -> Option<i64> {
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let frac = &frac[..frac.len().min(9)];
    let whole: i128 = whole.parse().ok()?;
    let denominator = 10i128.pow(frac.len() as u32);
    let numerator: i128 = if frac.is_empty() { 0 } else { frac.parse().ok()? };
    let bytes = whole * unit as i128 + (numerator * unit as i128 * 2 + denominator) / (denominator * 2);
    i64::try_from(bytes).ok()
}

/// The first `NUMBER UNIT` at the start of `text` (after spaces): its bytes and the rest of the
/// text after it.
pub fn leading_size(text: &str) -> Option<(i64, &str)> {
    let t = text.trim_start();
    let end = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, rest) = t.split_at(end);
    let number = number.trim_end_matches('.');
    let rest = rest.trim_start();
    let unit_end = rest.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(rest.len());
    let (unit, after) = rest.split_at(unit_end);
    Some((scaled(number, unit_bytes(unit)?)?, after))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed_sizes_convert_exactly() {
        assert_eq!(leading_size("2.00 GiB").map(|s| s.0), Some(2_147_483_648));
        assert_eq!(leading_size("20.00 MiB. GPU").map(|s| s.0), Some(20 << 20));
        assert_eq!(leading_size("1024 bytes").map(|s| s.0), Some(1024));
        assert_eq!(leading_size("0 bytes").map(|s| s.0), Some(0));
        assert_eq!(leading_size("1.50 KiB").map(|s| s.0), Some(1536));
        // 1.37 × 2^30 = 1471026298.88: to the nearest byte.
        assert_eq!(leading_size("1.37 GiB").map(|s| s.0), Some(1_471_026_299));
        assert_eq!(leading_size("6080.27 GiB").map(|s| s.0), Some(6_528_640_200_212));
        assert_eq!(leading_size("12 GB").map(|s| s.0), Some(12 << 30));
        assert_eq!(
            leading_size("17179869184.00 GiB").map(|s| s.0),
            None,
            "2^64 bytes overflows i64"
        );
        assert_eq!(leading_size("2.00 furlongs"), None);
        assert_eq!(leading_size("GiB"), None);
    }
}
