//! What memlens reads from, and makes of, the names people give their files: an uploaded name
//! reduced to a safe base name ([`safe_file_name`]), the name a rank's upload is stored under
//! ([`upload_name`]), and the rank a name or a `user_metadata` string states. Needs no polars:
//! the upload fuzz target (`core/fuzz/`) checks these on arbitrary names.

use std::sync::LazyLock;

use regex::Regex;

/// Longest safe name kept (characters, after reduction).
pub const MAX_NAME_CHARS: usize = 120;

/// `rank3`, `rank_3`, `rank-3`, `RANK.3` anywhere in a file's base name not preceded by a
/// letter (so `cranky3` is not a rank).
static RANK_IN_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)(?:^|[^a-z])rank[_\-. ]?(\d{1,6})(?:\D|$)").expect("static regex"));

/// `rank=3`, `rank: 3`, `"rank": 3`, `global_rank=3` in a `user_metadata` string.
static RANK_IN_METADATA: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"(?i)(?:^|[^a-z_])(?:global_)?rank"?\s*[=:]\s*"?(\d{1,6})"#).expect("static regex"));

/// The client's file name reduced to a safe base name: the part after the last `/` or `\`,
/// every character but ASCII letters, digits and `._-` replaced by `_`, at most
/// [`MAX_NAME_CHARS`], no leading dot; `upload` when nothing is left.
pub fn safe_file_name(name: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or(name);
    let s: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .take(MAX_NAME_CHARS)
        .collect();
    let s = s.trim_start_matches('.').to_owned();
    if s.is_empty() {
        "upload".to_owned()
    } else {
        s
    }
}

/// The name an upload is kept under: its safe name, prefixed `rank{r}-` when it is rank `r`'s
/// upload into a run and its name does not already say which rank it is.
pub fn upload_name(client_name: &str, rank: Option<u32>) -> String {
    let name = safe_file_name(client_name);
    match rank {
        Some(r) if rank_from_file_name(&name).is_none() => format!("rank{r}-{name}"),
        _ => name,
    }
}

/// Whether `name` could have come from [`safe_file_name`] (what [`upload_name`] promises the
/// store).
pub fn is_safe_file_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

/// The rank a file's name gives, if any.
pub fn rank_from_file_name(file: &str) -> Option<u32> {
    let base = file.rsplit(['/', '\\']).next().unwrap_or(file);
    RANK_IN_NAME.captures(base)?.get(1)?.as_str().parse().ok()
}

/// The rank a `user_metadata` string states, if any.
pub fn rank_in_metadata(meta: &str) -> Option<u32> {
    RANK_IN_METADATA.captures(meta)?.get(1)?.as_str().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_names_become_safe_base_names() {
        assert_eq!(safe_file_name("../../etc/passwd"), "passwd");
        assert_eq!(safe_file_name("C:\\x\\snap shot.pickle"), "snap_shot.pickle");
        assert_eq!(safe_file_name("..."), "upload");
        assert_eq!(safe_file_name(".hidden"), "hidden");
        assert_eq!(safe_file_name("a\u{202e}b"), "a_b");
        assert_eq!(safe_file_name(&"x".repeat(500)).len(), MAX_NAME_CHARS);
        for n in ["../../etc/passwd", "...", "a\u{202e}b", "", "/"] {
            assert!(is_safe_file_name(&safe_file_name(n)), "{n}");
        }
    }

    #[test]
    fn rank_uploads_are_named_by_their_rank_once() {
        assert_eq!(upload_name("snap.pickle", Some(3)), "rank3-snap.pickle");
        assert_eq!(upload_name("rank_3.pickle", Some(3)), "rank_3.pickle");
        assert_eq!(upload_name("snap.pickle", None), "snap.pickle");
        assert_eq!(rank_from_file_name("cranky3.pickle"), None);
        assert_eq!(rank_in_metadata("global_rank=7"), Some(7));
    }
}
