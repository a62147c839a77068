//! Turning stack ids into readable frames: `file:line:function`, innermost first, with the
//! interpreter- and dispatcher-internal frames PyTorch's own viewer hides folded away.

use polars::prelude::*;

/// Frame names containing one of these are interpreter/unwinder internals (memory_viz's list).
const HIDDEN_NAMES: &[&str] = &[
    "unwind::unwind",
    "CapturedTraceback::gather",
    "gather_with_cpp",
    "_start",
    "__libc_start_main",
    "PyEval_",
    "PyObject_",
    "PyFunction_",
];

/// File names containing one of these are dispatcher/interpreter internals.
const HIDDEN_FILES: &[&str] = &[
    "core/boxing",
    "/Register",
    "/Redispatch",
    "pythonrun.c",
    "Modules/main.c",
    "Objects/call.c",
    "Objects/methodobject.c",
    "pycore_ceval.h",
    "ceval.c",
    "cpython/abstract.h",
];

/// Whether a frame is an interpreter-internal one that views fold by default.
pub fn is_internal_frame(name: &str, file: &str) -> bool {
    HIDDEN_NAMES.iter().any(|h| name.contains(h)) || HIDDEN_FILES.iter().any(|h| file.contains(h))
}

/// A frame as it reads across machines: the file shortened to what follows `site-packages/`
/// (or `dist-packages/`), other paths to their last two components —
/// `/opt/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py:134:forward` →
/// `torch/nn/modules/linear.py:134:forward`, `/home/me/proj/train.py:39:step` →
/// `proj/train.py:39:step`. Frames without a path are kept as they are.
pub fn short_frame(frame: &str) -> String {
    if let Some(i) = frame.rfind("-packages/") {
        return frame[i + "-packages/".len()..].to_owned();
    }
    let path_end = frame.find(':').unwrap_or(frame.len());
    let path = &frame[..path_end];
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    if parts.len() <= 2 {
        return frame.to_owned();
    }
    format!("{}{}", parts[parts.len() - 2..].join("/"), &frame[path_end..])
}

/// Resolves stack ids against a report's `frames` and `stack_frames` tables.
pub struct StackResolver {
    names: Vec<String>,
    files: Vec<String>,
    lines: Vec<i64>,
    offsets: Vec<usize>,
    flat: Vec<u32>,
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
        Ok(StackResolver {
            names,
            files,
            lines,
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

    /// Frames without interpreter internals, innermost first.
    pub fn user_frames(&self, stack: u32) -> Vec<String> {
        self.frame_ids(stack)
            .iter()
            .filter(|&&f| !is_internal_frame(&self.names[f as usize], &self.files[f as usize]))
            .map(|&f| self.format(f))
            .collect()
    }

    /// `file:line:function`; frames an importer made up (a bracketed file such as `[cuda]`,
    /// line 0) read `name [kind]` instead.
    fn format(&self, f: u32) -> String {
        let f = f as usize;
        let file = &self.files[f];
        if self.lines[f] == 0 && file.starts_with('[') && file.ends_with(']') {
            return format!("{} {file}", self.names[f]);
        }
        format!("{}:{}:{}", file, self.lines[f], self.names[f])
    }
}
