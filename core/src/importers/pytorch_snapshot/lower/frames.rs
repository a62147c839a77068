//! Frame dicts and frame lists as the trace's frames and stacks: a frame list becomes a stack id
//! (shared through the pickle memo when the list is), a frame dict a frame id, and a frame of
//! FX-generated code also the frames of its original source trace.

use super::super::pickle::{Heap, Kind, PResult, PickleError, Val, V};
use crate::tables::FrameTable;

/// Interned ids of a frame dict's keys: `name`, `filename`, `line`, and the FX debug fields
/// `augment_with_fx_traces=True` adds to frames of FX-generated code.
#[derive(Debug, Clone, Copy)]
pub(super) struct FrameKeys {
    pub(super) name: u32,
    pub(super) filename: u32,
    pub(super) line: u32,
    pub(super) fx_node_name: u32,
    pub(super) fx_node_target: u32,
    pub(super) fx_original_trace: u32,
}

impl FrameKeys {
    pub(super) fn intern(heap: &mut Heap) -> FrameKeys {
        let mut k = |s: &str| heap.strings.intern(s);
        FrameKeys {
            name: k("name"),
            filename: k("filename"),
            line: k("line"),
            fx_node_name: k("fx_node_name"),
            fx_node_target: k("fx_node_target"),
            fx_original_trace: k("fx_original_trace"),
        }
    }
}

/// `File "model.py", line 12, in forward` lines of an FX node's original source trace.
static TRACE_LINE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r#"File "([^"]+)", line (\d+), in (\S+)"#).expect("static regex")
});

impl FrameTable {
    /// The stack id of a frame list value (a list of frame dicts, already-interned frames, or a
    /// list already lowered to a stack id).
    pub(super) fn stack_of(&mut self, heap: &mut Heap, v: Val, keys: &FrameKeys, offset: u64) -> PResult<u32> {
        match heap.get(v) {
            V::Stack(id) => Ok(id),
            V::Obj(l) if matches!(heap.kind(l), Kind::List | Kind::Tuple) => {
                if let V::Stack(id) = heap.get(heap.objs[l as usize].lowered) {
                    return Ok(id);
                }
                let n = heap.seq(l).len();
                let mut ids = std::mem::take(&mut self.pending);
                ids.clear();
                for i in 0..n {
                    let f = heap.seq(l)[i];
                    self.frames_of(heap, f, keys, offset, &mut ids)?;
                }
                let id = self.intern_stack(&ids);
                self.pending = ids;
                heap.objs[l as usize].lowered = Val::stack(id);
                Ok(id)
            }
            V::None => Ok(self.empty_stack()),
            _ => Err(PickleError::Malformed {
                offset,
                msg: "`frames` is not a list".into(),
            }),
        }
    }

    /// The stack id of a frame list read flat: its items.
    pub(super) fn stack_of_items(&mut self, heap: &mut Heap, items: &[Val], keys: &FrameKeys, offset: u64) -> PResult<u32> {
        let mut ids = std::mem::take(&mut self.pending);
        ids.clear();
        for &f in items {
            // A frame seen before (nearly every one) is its id; a new frame dict is read.
            match heap.interned_frame(f) {
                Some(id) => ids.push(id),
                None => self.frames_of(heap, f, keys, offset, &mut ids)?,
            }
        }
        let id = self.intern_stack(&ids);
        self.pending = ids;
        Ok(id)
    }

    /// The frame(s) one frame value stands for, appended to `out`: the frame itself, and for a
    /// frame of FX-generated code with an original source trace, that trace's frames
    /// (innermost first) as its callers. A frame with an FX node names it:
    /// `forward [fx addmm: aten.addmm.default]`.
    pub(super) fn frames_of(&mut self, heap: &mut Heap, v: Val, k: &FrameKeys, offset: u64, out: &mut Vec<u32>) -> PResult<()> {
        match heap.get(v) {
            V::Frame(id) => out.push(id),
            V::Consumed => return Err(super::trace::entry_referenced_twice(offset)),
            V::Obj(d) if heap.kind(d) == Kind::Dict => {
                match heap.get(heap.objs[d as usize].lowered) {
                    V::Frame(id) => {
                        out.push(id);
                        return Ok(());
                    }
                    V::Consumed => return Err(super::trace::entry_referenced_twice(offset)),
                    _ => {}
                }
                let text = |key: u32| heap.dict_get(d, key).and_then(|v| heap.str_of(v));
                let mut name = text(k.name).unwrap_or("??").to_owned();
                let file = text(k.filename).unwrap_or("??").to_owned();
                let line = heap.dict_get(d, k.line).and_then(|v| heap.int_of(v)).unwrap_or(0);
                if let Some(node) = text(k.fx_node_name) {
                    name = match text(k.fx_node_target) {
                        Some(t) => format!("{name} [fx {node}: {t}]"),
                        None => format!("{name} [fx {node}]"),
                    };
                }
                let original: Vec<(String, String, i64)> = text(k.fx_original_trace)
                    .map(|t| {
                        TRACE_LINE
                            .captures_iter(t)
                            .filter_map(|c| Some((c[3].to_owned(), c[1].to_owned(), c[2].parse().ok()?)))
                            .collect()
                    })
                    .unwrap_or_default();
                let id = self.intern_frame(&name, &file, line);
                out.push(id);
                if original.is_empty() {
                    heap.objs[d as usize].lowered = Val::frame(id);
                }
                // A Python traceback lists the outermost call first.
                for (n, f, l) in original.iter().rev() {
                    out.push(self.intern_frame(n, f, *l));
                }
            }
            _ => {
                return Err(PickleError::Malformed {
                    offset,
                    msg: "a frame is not a dict".into(),
                })
            }
        }
        Ok(())
    }
}
