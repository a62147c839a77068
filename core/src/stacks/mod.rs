//! Turning stack ids into readable frames. Every frame keeps its raw `file:line:function`
//! (what rules match and the full stack shows); what a reader is shown first is the folded
//! stack: frames the folding table ([`fold`]) hides are gone, paths are shortened (to what
//! follows `site-packages/`, or past the common prefix of the script's own files), Python
//! frames read `file:line function`, native ones their function without its arguments, and a
//! stack with Python frames shows only those. The innermost frame of model code (the user's
//! or a model library's, not `torch/`) is the stack's [`StackResolver::module_of`].

pub mod fold;

use polars_core::prelude::*;

pub use fold::FrameKind;
use fold::{classify, is_python, short_native_name};

/// Whether a frame is folded away by default (kept for callers that only have the parts).
pub fn is_internal_frame(name: &str, file: &str) -> bool {
    classify(name, file).folded()
}

/// Resolves stack ids against a report's `frames` and `stack_frames` tables.
pub struct StackResolver {
    names: Vec<String>,
    files: Vec<String>,
    lines: Vec<i64>,
    /// Per frame: its kind and how it reads in a folded stack.
    kinds: Vec<FrameKind>,
    shown: Vec<String>,
    offsets: Vec<usize>,
    flat: Vec<u32>,
}

/// Where a library path's readable part starts: after `site-packages/` or `dist-packages/`,
/// or after the standard library's `lib/pythonX.Y/`.
fn library_start(file: &str) -> Option<usize> {
    if let Some(i) = file.rfind("-packages/") {
        return Some(i + "-packages/".len());
    }
    let i = file.rfind("/lib/python")?;
    let rest = &file[i + "/lib/python".len()..];
    let version = rest.find('/')?;
    rest[..version]
        .chars()
        .all(|c| c.is_ascii_digit() || c == '.')
        .then_some(i + "/lib/python".len() + version + 1)
}

/// The directory all of the script's own (absolute, non-library) Python files share, with its
/// trailing `/`; empty when there is none.
fn own_files_prefix(files: &[String]) -> String {
    let mut prefix: Option<&str> = None;
    for f in files
        .iter()
        .filter(|f| is_python(f) && f.starts_with('/') && library_start(f).is_none())
    {
        let dir = &f[..f.rfind('/').map_or(0, |i| i + 1)];
        prefix = Some(match prefix {
            None => dir,
            Some(p) => {
                let common = p.bytes().zip(dir.bytes()).take_while(|(a, b)| a == b).count();
                &p[..p[..common].rfind('/').map_or(0, |i| i + 1)]
            }
        });
    }
    prefix.unwrap_or("").to_owned()
}

/// A Python file as a reader sees it: what follows `site-packages/` (or `dist-packages/`, or
/// the standard library's `lib/pythonX.Y/`), or what follows `own` for the script's own files.
fn short_path<'a>(file: &'a str, own: &str) -> &'a str {
    if let Some(i) = library_start(file) {
        return &file[i..];
    }
    file.strip_prefix(own).filter(|r| !r.is_empty()).unwrap_or(file)
}

impl StackResolver {
    pub fn new(frames: &DataFrame, stack_frames: &DataFrame) -> PolarsResult<Self> {
        let strs = |c: &str| -> PolarsResult<Vec<String>> {
            Ok(frames
                .column(c)?
                .str()?
                .iter()
                .map(|s| s.unwrap_or("??").to_owned())
                .collect())
        };
        let names = strs("name")?;
        let files = strs("filename")?;
        let lines: Vec<i64> = frames.column("line")?.i64()?.iter().map(|v| v.unwrap_or(0)).collect();
        let stack: Vec<u32> = stack_frames
            .column("stack")?
            .u32()?
            .iter()
            .map(|v| v.unwrap_or(0))
            .collect();
        let flat: Vec<u32> = stack_frames
            .column("frame")?
            .u32()?
            .iter()
            .map(|v| v.unwrap_or(0))
            .collect();
        // `stack_frames` is grouped by stack in id order; build offsets.
        let n_stacks = stack.last().map_or(0, |s| *s as usize + 1);
        let mut offsets = vec![0usize; n_stacks + 1];
        for s in &stack {
            offsets[*s as usize + 1] += 1;
        }
        for i in 0..n_stacks {
            offsets[i + 1] += offsets[i];
        }
        let own = own_files_prefix(&files);
        let kinds: Vec<FrameKind> = names.iter().zip(&files).map(|(n, f)| classify(n, f)).collect();
        let shown = (0..names.len())
            .map(|i| {
                let (name, file, line) = (&names[i], &files[i], lines[i]);
                if line == 0 && file.starts_with('[') && file.ends_with(']') {
                    format!("{name} {file}")
                } else if is_python(file) {
                    format!("{}:{line} {name}", short_path(file, &own))
                } else {
                    short_native_name(name).to_owned()
                }
            })
            .collect();
        Ok(StackResolver {
            names,
            files,
            lines,
            kinds,
            shown,
            offsets,
            flat,
        })
    }

    fn frame_ids(&self, stack: u32) -> &[u32] {
        let s = stack as usize;
        if s + 1 >= self.offsets.len() {
            return &[];
        }
        &self.flat[self.offsets[s]..self.offsets[s + 1]]
    }

    /// All frames of a stack, innermost first, as `file:line:function`.
    pub fn frames(&self, stack: u32) -> Vec<String> {
        self.frame_ids(stack).iter().map(|&f| self.format(f)).collect()
    }

    /// The folded stack, innermost first: what a reader is shown (see the module docs).
    pub fn user_frames(&self, stack: u32) -> Vec<String> {
        let ids = self.frame_ids(stack);
        let has_python = ids.iter().any(|&f| is_python(&self.files[f as usize]));
        ids.iter()
            .filter(|&&f| {
                let k = self.kinds[f as usize];
                !k.folded() && (!has_python || matches!(k, FrameKind::Torch | FrameKind::Model))
            })
            .map(|&f| self.shown[f as usize].clone())
            .collect()
    }

    /// The innermost frame of model code — the user's own or a model library's, never
    /// `torch/` or call plumbing — as it reads (`transformers/models/llama/modeling_llama.py:175
    /// forward`); `None` when the stack has none.
    pub fn module_of(&self, stack: u32) -> Option<String> {
        self.frame_ids(stack)
            .iter()
            .find(|&&f| self.kinds[f as usize] == FrameKind::Model)
            .map(|&f| self.shown[f as usize].clone())
    }

    /// Whether the stack has any frame at all (before folding).
    pub fn is_recorded(&self, stack: u32) -> bool {
        !self.frame_ids(stack).is_empty()
    }

    /// How many stacks there are: their ids are `0..stack_count()`.
    pub fn stack_count(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    /// Whether any stack of the file has a frame (the recording kept stacks).
    pub fn any_recorded(&self) -> bool {
        !self.flat.is_empty()
    }

    /// Each frame of a stack, innermost first: its raw `file:line:function` and whether the
    /// folded stack leaves it out.
    pub fn frames_with_folding(&self, stack: u32) -> Vec<(String, bool)> {
        let ids = self.frame_ids(stack);
        let has_python = ids.iter().any(|&f| is_python(&self.files[f as usize]));
        ids.iter()
            .map(|&f| {
                let k = self.kinds[f as usize];
                let hidden = k.folded() || (has_python && !matches!(k, FrameKind::Torch | FrameKind::Model));
                (self.format(f), hidden)
            })
            .collect()
    }

    /// `file:line:function`, the path with `/` between its parts whatever machine wrote it (the
    /// evidence rules match `torch/optim/` on a Windows run's `torch\optim\sgd.py` too);
    /// frames an importer made up (a bracketed file such as `[cuda]`, line 0) read
    /// `name [kind]` instead.
    fn format(&self, f: u32) -> String {
        let f = f as usize;
        let file = &self.files[f];
        if self.lines[f] == 0 && file.starts_with('[') && file.ends_with(']') {
            return format!("{} {file}", self.names[f]);
        }
        if file.contains('\\') {
            return format!("{}:{}:{}", file.replace('\\', "/"), self.lines[f], self.names[f]);
        }
        format!("{}:{}:{}", file, self.lines[f], self.names[f])
    }
}
