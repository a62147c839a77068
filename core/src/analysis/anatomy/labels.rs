//! What a run's own files say an allocation is: labels the entries carry (the script's
//! `user_metadata`, PyTorch's memory-profiler `category`) and the user's frame rules
//! (`--category-rules`), which the category analysis weighs before, and after, its own evidence.

use memlens_api::{Category, CategoryRule};
use polars_core::prelude::*;

use crate::analysis::{device_notes, DeviceEvents};

/// User rules for what the built-in evidence cannot place: `category: regex` lines, matched
/// against each frame (`file:line:function`) of an allocation's stack; the first rule that
/// matches wins. Blank lines and `#` comments are skipped.
#[derive(Debug, Default)]
pub struct FrameRules {
    rules: Vec<(regex::Regex, Category)>,
}

/// Why a rules file cannot be used; each names the file and, inside it, the line.
#[derive(Debug, thiserror::Error)]
pub enum FrameRulesError {
    #[error("{}: {source}", path.display())]
    Unreadable {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    InFile {
        path: std::path::PathBuf,
        source: Box<FrameRulesError>,
    },
    #[error("line {line}: expected `category: regex`")]
    NotARule { line: usize },
    #[error("line {line}: `{name}` is not a category")]
    NotACategory { line: usize, name: String },
    #[error("line {line}: {source}")]
    BadPattern { line: usize, source: regex::Error },
}

impl FrameRules {
    /// Reads the rules file a user named (`--category-rules`); no file, no rules. Errors name
    /// the file (and the line).
    pub fn load(path: Option<&std::path::Path>) -> Result<FrameRules, FrameRulesError> {
        let Some(path) = path else {
            return Ok(FrameRules::default());
        };
        let text = std::fs::read_to_string(path).map_err(|source| FrameRulesError::Unreadable {
            path: path.to_owned(),
            source,
        })?;
        FrameRules::parse(&text).map_err(|e| FrameRulesError::InFile {
            path: path.to_owned(),
            source: Box::new(e),
        })
    }

    /// Parses a rules file; errors name the line.
    pub fn parse(text: &str) -> Result<FrameRules, FrameRulesError> {
        let mut rules = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line_no = i + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, pattern) = line
                .split_once(':')
                .ok_or(FrameRulesError::NotARule { line: line_no })?;
            let name = name.trim();
            let category =
                Category::ALL
                    .into_iter()
                    .find(|c| c.name() == name)
                    .ok_or_else(|| FrameRulesError::NotACategory {
                        line: line_no,
                        name: name.to_owned(),
                    })?;
            let re = regex::Regex::new(pattern.trim())
                .map_err(|source| FrameRulesError::BadPattern { line: line_no, source })?;
            rules.push((re, category));
        }
        Ok(FrameRules { rules })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The category of the first rule one of `frames` matches.
    pub(crate) fn category_of(&self, frames: &[String]) -> Option<Category> {
        self.rules
            .iter()
            .find(|(re, _)| frames.iter().any(|f| re.is_match(f)))
            .map(|(_, c)| *c)
    }
}

/// A category named by an allocation's `user_metadata`: `category=NAME`, `memlens.category=NAME`,
/// a JSON object with a `category` key, or the bare name.
pub fn label_category(metadata: &str) -> Option<Category> {
    let m = metadata.trim();
    let name = if m.starts_with('{') {
        serde_json::from_str::<serde_json::Value>(m)
            .ok()?
            .get("category")?
            .as_str()?
            .to_owned()
    } else {
        m.strip_prefix("memlens.category=")
            .or_else(|| m.strip_prefix("category="))
            .unwrap_or(m)
            .trim()
            .to_owned()
    };
    Category::ALL.into_iter().find(|c| c.name() == name)
}

/// The category PyTorch's memory profiler gave an entry (`category` in a profiler-derived
/// snapshot; `_memory_profiler.Category` names in lower case). Its `autograd_detail` (tensors
/// autograd makes and drops inside backward) is a temporary; `unknown` places nothing.
pub fn profiler_category(name: &str) -> Option<Category> {
    Some(match name {
        "parameter" => Category::Parameter,
        "optimizer_state" => Category::OptimizerState,
        "input" => Category::Input,
        "temporary" | "autograd_detail" => Category::Temporary,
        "activation" => Category::Activation,
        "gradient" => Category::Gradient,
        _ => return None,
    })
}

/// Labels the device's allocations carry: alloc entry index → category and rule, from the
/// `user_metadata` the script set ([`CategoryRule::ExplicitLabel`]) or the `category` of a
/// profiler-derived snapshot ([`CategoryRule::ProfilerCategory`]), both kept in `event_notes`
/// (rows of the `events` table). The script's label wins.
pub fn explicit_labels(event_notes: &DataFrame, ev: &DeviceEvents) -> PolarsResult<Labels> {
    let action = ev.action();
    let is_alloc = |i: usize| action[i] == crate::tables::Action::Alloc as u8;
    let mut out = Labels::default();
    for (i, c) in device_notes(event_notes, ev, "category")? {
        if let Some(c) = profiler_category(c).filter(|_| is_alloc(i)) {
            out.insert(i, (c, CategoryRule::ProfilerCategory));
        }
    }
    // The script's label wins: inserted last.
    for (i, m) in device_notes(event_notes, ev, "user_metadata")? {
        if let Some(c) = label_category(m).filter(|_| is_alloc(i)) {
            out.insert(i, (c, CategoryRule::ExplicitLabel));
        }
    }
    Ok(out)
}

/// Alloc entry index → the category a label gave it, and which kind of label.
pub type Labels = rustc_hash::FxHashMap<usize, (Category, CategoryRule)>;
