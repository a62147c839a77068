//! How vLLM and SGLang print their numbers, read back: sizes in GiB (both engines also print
//! `GB` for 2^30 bytes: vLLM's `Loading model weights took %.4f GB` divides by `float(2**30)`,
//! SGLang's `GB` constant and `get_available_gpu_memory` by `1 << 30`), token counts with
//! thousands separators (`428,000`), fractions and Python reprs of settings (`'fp8'`, `None`).

use regex::Regex;

use crate::importers::common::sizes::{scaled, unit_bytes};

/// A number as the engines print it, sign included (vLLM prints negative KV budgets).
pub const NUM: &str = r"-?\d+(?:\.\d+)?";

/// A count, with or without thousands separators.
pub const COUNT: &str = r"\d{1,3}(?:,\d{3})+|\d+";

/// A regex of this importer's, with `NUM` and `COUNT` spelt out.
pub fn re(pattern: &str) -> Regex {
    // The patterns are constants of this importer, checked by its tests.
    Regex::new(&pattern.replace("NUM", NUM).replace("COUNT", COUNT))
        .unwrap_or_else(|e| panic!("bad pattern {pattern}: {e}"))
}

/// A printed size in `unit` (`GiB`, `GB`, `MiB`, …; decimal spellings are binary here) to the
/// nearest byte, negative where printed so.
pub fn size(number: &str, unit: &str) -> Option<i64> {
    let unit = unit_bytes(unit)?;
    match number.strip_prefix('-') {
        Some(n) => scaled(n, unit).map(|b| -b),
        None => scaled(number, unit),
    }
}

/// A printed size in GiB (or `GB` meaning GiB).
pub fn gib(number: &str) -> Option<i64> {
    size(number, "GiB")
}

/// `428,000` or `428000`.
pub fn count(text: &str) -> Option<i64> {
    text.replace(',', "").parse().ok()
}

/// `0.90`, `0.9764`.
pub fn fraction(text: &str) -> Option<f64> {
    text.parse::<f64>().ok().filter(|f| f.is_finite())
}

/// A setting's value as Python printed it: quotes taken off, `None` and empty as nothing.
pub fn setting(text: &str) -> Option<String> {
    let t = text.trim().trim_matches(|c| c == '\'' || c == '"');
    (!t.is_empty() && t != "None").then(|| t.to_owned())
}

/// `key=value` settings as a Python repr prints them (`model='x', tensor_parallel_size=2,
/// dtype=torch.bfloat16`) and `'key': value` ones as a dict prints them (`{'max_model_len':
/// 131072, 'kv_cache_dtype': 'fp8'}`), in order.
pub fn pairs(text: &str) -> Vec<(String, String)> {
    static PAIR: std::sync::LazyLock<Regex> = std::sync::LazyLock::new(|| {
        re(r#"(?:\b([A-Za-z_]\w*)=|'([A-Za-z_]\w*)': )('[^']*'|"[^"]*"|\[[^\]]*\]|[^,\s)}]+)"#)
    });
    PAIR.captures_iter(text)
        .filter_map(|c| {
            let key = c.get(1).or_else(|| c.get(2))?.as_str().to_owned();
            Some((key, c.get(3)?.as_str().to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed_figures_read_back() {
        assert_eq!(gib("14.9888"), Some(16_094_101_452));
        assert_eq!(gib("-7.83"), Some(-8_407_398_482));
        assert_eq!(size("24.00", "MiB"), Some(24 << 20));
        assert_eq!(count("428,000"), Some(428_000));
        assert_eq!(count("1207"), Some(1207));
        assert_eq!(fraction("0.90"), Some(0.9));
        assert_eq!(setting("'fp8'"), Some("fp8".into()));
        assert_eq!(setting("None"), None);
        let p = pairs("model='microsoft/phi-1_5', dtype=torch.float16, max_seq_len=2048, x=None)");
        assert_eq!(p[0], ("model".into(), "'microsoft/phi-1_5'".into()));
        assert_eq!(p[1], ("dtype".into(), "torch.float16".into()));
        assert_eq!(p[2], ("max_seq_len".into(), "2048".into()));
        let d =
            pairs("{'model': '/models', 'max_model_len': 131072, 'served_model_name': ['q'], 'kv_cache_dtype': 'fp8'}");
        assert_eq!(d.len(), 4);
        assert_eq!(d[3], ("kv_cache_dtype".into(), "'fp8'".into()));
    }
}
