//! Answers that fit a model's context: a JSON answer whose lists are longer than a few items is
//! cut to its first ones (each cut list says so beside it: `<key>_cut: {shown, total}`), fewer
//! each round until the whole answer is under a size — never megabytes into a context.

use serde_json::{Map, Value};

/// The most bytes an answer takes, its text summary included.
pub const MAX_ANSWER_BYTES: usize = 60 << 10;

/// `value` with every list cut to at most `keep` items (the first ones), each cut noted.
fn cut_lists(value: &Value, keep: usize) -> Value {
    match value {
        Value::Object(map) => {
            let mut out = Map::with_capacity(map.len());
            for (k, v) in map {
                if let Value::Array(items) = v {
                    if items.len() > keep {
                        out.insert(
                            format!("{k}_cut"),
                            serde_json::json!({"shown": keep, "total": items.len()}),
                        );
                    }
                }
                out.insert(k.clone(), cut_lists(v, keep));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().take(keep).map(|v| cut_lists(v, keep)).collect()),
        other => other.clone(),
    }
}

/// `value` as compact JSON within `budget` bytes: lists cut to `max_list` items, then fewer
/// until it fits; `None` when even one item per list does not.
pub fn bounded_json(value: &Value, max_list: usize, budget: usize) -> Option<String> {
    let mut keep = max_list.max(1);
    loop {
        let text = serde_json::to_string(&cut_lists(value, keep)).ok()?;
        if text.len() <= budget {
            return Some(text);
        }
        if keep == 1 {
            return None;
        }
        keep = (keep / 2).max(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lists_are_cut_and_say_so() {
        let v = serde_json::json!({"a": [1, 2, 3, 4, 5], "b": {"c": [1, 2]}});
        let out: Value = serde_json::from_str(&bounded_json(&v, 3, 1000).unwrap()).unwrap();
        assert_eq!(out["a"], serde_json::json!([1, 2, 3]));
        assert_eq!(out["a_cut"], serde_json::json!({"shown": 3, "total": 5}));
        assert_eq!(out["b"]["c"], serde_json::json!([1, 2]));
        assert!(out["b"].get("c_cut").is_none());
    }

    #[test]
    fn a_large_answer_is_cut_until_it_fits() {
        let v = serde_json::json!({"items": (0..10_000).collect::<Vec<_>>()});
        let text = bounded_json(&v, 5000, 2_000).unwrap();
        assert!(text.len() <= 2_000);
        let out: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(out["items_cut"]["total"], 10_000);
    }
}
