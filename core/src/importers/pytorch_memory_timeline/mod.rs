//! PyTorch's memory timeline (`prof.export_memory_timeline(path, device)` of a profile taken
//! with `profile_memory=True, record_shapes=True, with_stack=True`), plain or gzip, in its two
//! JSON shapes:
//! - `.json`: `[times, sizes]`, `times` in µs since the epoch and each row of `sizes` the bytes
//!   live per category at that time: `[0, parameter, optimizer_state, input, temporary,
//!   activation, gradient, autograd_detail, unknown]` (column 0 is padding);
//! - `.raw.json`: `[[t_ns, action, bytes, category], …]`, action 1 pre-existing (t = −1),
//!   2 create, 3 increment version (one free of the old version, one allocation of the new),
//!   4 destroy (bytes negative), category the index into the same list without the padding.
//!
//! Both become allocations and frees of tensors that carry the profiler's category, which then
//! places them (rule `profiler_category`). The file records no addresses, stacks, allocator
//! segments or device: each tensor is its own segment (reserved equals allocated), a free is
//! matched with the newest live tensor of its category and size (which of equal tensors it was
//! changes no total), and the device is cuda:0, the export's default. In the summed shape each
//! change of a category between two rows is one allocation or free, frees first, so the peak is
//! the largest row.

use serde_json::Value;

use crate::error::ImportError;
use crate::importers::common::nsys::{lower_driver_allocations, Row};
use crate::importers::{ImportOptions, Parsed, Importer};
use crate::source::{leading_text, Source};

pub struct MemoryTimelineImporter;

pub static IMPORTER: MemoryTimelineImporter = MemoryTimelineImporter;

/// The profiler's categories in the files' order (`_CATEGORY_TO_INDEX`, `None` as unknown last).
const CATEGORIES: [&str; 8] = [
    "parameter",
    "optimizer_state",
    "input",
    "temporary",
    "activation",
    "gradient",
    "autograd_detail",
    "unknown",
];

/// One change of one category's live bytes: positive an allocation, negative a free.
#[derive(Debug, Clone, Copy)]
struct Change {
    /// ns since the epoch; `None` for what existed before profiling (raw `t = −1`).
    time_ns: Option<i64>,
    category: usize,
    bytes: i64,
}

fn malformed(msg: String) -> ImportError {
    ImportError::Log(format!("memory timeline: {msg}"))
}

fn int(v: &Value, what: impl Fn() -> String) -> Result<i64, ImportError> {
    v.as_i64()
        .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
        .ok_or_else(|| malformed(format!("{} is not an integer: {v}", what())))
}

/// `[times, sizes]`: each category's change between consecutive rows, frees before allocations.
fn summed_changes(times: &[Value], sizes: &[Value]) -> Result<Vec<Change>, ImportError> {
    if times.len() != sizes.len() {
        return Err(malformed(format!(
            "{} times but {} rows of sizes",
            times.len(),
            sizes.len()
        )));
    }
    let mut prev = [0i64; 8];
    let mut out = Vec::new();
    for (k, (t, row)) in times.iter().zip(sizes).enumerate() {
        let t = int(t, || format!("time {k}"))?;
        let row = row
            .as_array()
            .filter(|r| r.len() == CATEGORIES.len() + 1)
            .ok_or_else(|| malformed(format!("row {k} of sizes is not a list of 9 byte counts")))?;
        let mut now = [0i64; 8];
        for (c, v) in row[1..].iter().enumerate() {
            now[c] = int(v, || format!("row {k}, column {}", c + 1))?;
            if now[c] < 0 {
                return Err(malformed(format!("row {k}: negative bytes for {}", CATEGORIES[c])));
            }
        }
        for freeing in [true, false] {
            for c in 0..CATEGORIES.len() {
                let d = now[c] - prev[c];
                if d != 0 && (d < 0) == freeing {
                    out.push(Change {
                        time_ns: Some(t.saturating_mul(1000)),
                        category: c,
                        bytes: d,
                    });
                }
            }
        }
        prev = now;
    }
    Ok(out)
}

/// `[[t_ns, action, bytes, category], …]`.
fn raw_changes(events: &[Value]) -> Result<Vec<Change>, ImportError> {
    let mut out = Vec::with_capacity(events.len());
    for (k, e) in events.iter().enumerate() {
        let f = e
            .as_array()
            .filter(|f| f.len() == 4)
            .ok_or_else(|| malformed(format!("event {k} is not [time, action, bytes, category]")))?;
        let t = int(&f[0], || format!("event {k}'s time"))?;
        let action = int(&f[1], || format!("event {k}'s action"))?;
        let bytes = int(&f[2], || format!("event {k}'s bytes"))?;
        let category = int(&f[3], || format!("event {k}'s category"))?;
        if !(1..=4).contains(&action) {
            return Err(malformed(format!("event {k}: action {action} is not 1–4")));
        }
        let category = usize::try_from(category)
            .ok()
            .filter(|&c| c < CATEGORIES.len())
            .ok_or_else(|| malformed(format!("event {k}: category {category} is not 0–7")))?;
        out.push(Change {
            time_ns: (t >= 0).then_some(t),
            category,
            bytes,
        });
    }
    Ok(out)
}

/// Live tensors of each category, newest last: `(address, bytes)`.
#[derive(Default)]
struct Live {
    by_category: [Vec<(i64, i64)>; 8],
    next_address: i64,
    /// Frees that matched no live tensor of their size, taken from the newest ones instead.
    split: usize,
}

impl Live {
    fn row(time_ns: i64, address: i64, bytes: i64, free: bool, category: usize) -> Row {
        Row {
            start_ns: time_ns,
            device: 0,
            pid: 0,
            address,
            bytes,
            kind: 2,
            free,
            stream: 0,
            api: None,
            var_name: None,
            ops: vec![format!("{} (memory profiler)", CATEGORIES[category])],
            category: Some(CATEGORIES[category].to_owned()),
        }
    }

    fn alloc(&mut self, rows: &mut Vec<Row>, time_ns: i64, category: usize, bytes: i64) {
        self.next_address += 1;
        let address = self.next_address;
        self.by_category[category].push((address, bytes));
        rows.push(Self::row(time_ns, address, bytes, false, category));
    }

    fn free(&mut self, rows: &mut Vec<Row>, time_ns: i64, category: usize, bytes: i64) -> Result<(), ImportError> {
        let live = &mut self.by_category[category];
        if let Some(i) = live.iter().rposition(|&(_, b)| b == bytes) {
            let (address, b) = live.remove(i);
            rows.push(Self::row(time_ns, address, b, true, category));
            return Ok(());
        }
        self.split += 1;
        let mut need = bytes;
        while need > 0 {
            let Some((address, b)) = self.by_category[category].pop() else {
                return Err(malformed(format!(
                    "at {} µs it frees {need} more bytes of {} than are live",
                    time_ns / 1000,
                    CATEGORIES[category]
                )));
            };
            rows.push(Self::row(time_ns, address, b, true, category));
            if b > need {
                self.alloc(rows, time_ns, category, b - need);
            }
            need -= b.min(need);
        }
        Ok(())
    }
}

impl Importer for MemoryTimelineImporter {
    fn sniff(&self, head: &[u8]) -> bool {
        let t = leading_text(head);
        let Some(rest) = t.strip_prefix('[') else {
            return false;
        };
        let Some(rest) = rest.trim_start().strip_prefix('[') else {
            return false;
        };
        rest.trim_start().starts_with(|c: char| c.is_ascii_digit() || c == '-')
    }

    fn import(&self, source: Source, _options: &ImportOptions) -> Result<Parsed, ImportError> {
        let v: Value = serde_json::from_reader(std::io::BufReader::new(source.reader))
            .map_err(|e| malformed(format!("not JSON: {e}")))?;
        let items = v.as_array().ok_or_else(|| malformed("expected a JSON list".into()))?;
        let summed = items.len() == 2
            && items[1]
                .as_array()
                .is_some_and(|rows| rows.first().is_none_or(Value::is_array));
        let (changes, shape) = if summed {
            let times = items[0]
                .as_array()
                .ok_or_else(|| malformed("the first element (times) is not a list".into()))?;
            let sizes = items[1].as_array().map(Vec::as_slice).unwrap_or(&[]);
            (summed_changes(times, sizes)?, "times and bytes per category (.json)")
        } else {
            (raw_changes(items)?, "raw events (.raw.json)")
        };
        if changes.is_empty() {
            return Err(ImportError::KeptAside("a memory timeline without memory events".into()));
        }
        let first = changes.iter().filter_map(|c| c.time_ns).min().unwrap_or(0);
        let mut live = Live::default();
        let mut rows = Vec::with_capacity(changes.len() + changes.len() / 4);
        for c in &changes {
            let t = c.time_ns.unwrap_or(first);
            if c.bytes > 0 {
                live.alloc(&mut rows, t, c.category, c.bytes);
            } else if c.bytes < 0 {
                live.free(&mut rows, t, c.category, -c.bytes)?;
            }
        }
        let mut columns = lower_driver_allocations(
            rows,
            Some(0),
            "PyTorch memory timeline (export_memory_timeline): tensors by the memory profiler's category; \
             the file records no addresses, stacks, allocator segments or device, so each tensor is its own \
             segment (reserved equals allocated) and the device is taken to be cuda:0, the export's default",
        );
        columns.source.notes.push(format!("read as {shape}"));
        if live.split > 0 {
            columns.source.notes.push(format!(
                "{} frees matched no live tensor of their size and were taken from the newest of their category \
                 (the totals per category are exact; which tensors they were is not known)",
                live.split
            ));
        }
        columns.format = memlens_api::Format::PytorchMemoryTimeline;
        Ok(Parsed::Snapshot(Box::new(columns)))
    }
}
