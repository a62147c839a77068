//! Importer for Nsight Systems SQLite exports (`nsys export --type sqlite`) of captures made with
//! `nsys profile --trace=cuda --cuda-memory-usage=true`.
//!
//! Nsight sees the CUDA driver's allocations (`cudaMalloc`, `cudaMallocAsync`, …), not the
//! tensors a caching allocator hands out. Each device allocation in
//! `CUDA_GPU_MEMORY_USAGE_EVENTS` becomes a segment holding one block, so the canonical tables
//! (and every analysis over them) apply unchanged, with reserved = allocated. The stack of an
//! allocation is the runtime call that made it (joined through `correlationId`) and its size,
//! the only "call site" such traces carry. Times are epoch µs when the export has
//! `TARGET_INFO_SESSION_START_TIME`, else µs since the session start.
//!
//! Columns are read by name (they move between schema versions); a table missing because the
//! export was lazy means "no events". Pinned-host and managed allocations are counted in a note
//! but not charted as device memory. SQLite needs a file: the input is copied to a temporary
//! file (removed on drop) and opened read-only.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::PathBuf;

use rusqlite::{Connection, OpenFlags};

use crate::error::ImportError;
use crate::importers::{ImportOptions, Imported, Importer};
use crate::sniff::Format;
use crate::source::{map_pipe_err, Source};
use crate::tables::{Action, BlockState, SnapshotColumns};

pub struct NsysSqliteImporter;

impl Importer for NsysSqliteImporter {
    fn format(&self) -> Format {
        Format::NsysSqlite
    }

    fn sniff(&self, head: &[u8]) -> bool {
        head.starts_with(b"SQLite format 3\0")
    }

    fn import(&self, source: Source, _options: &ImportOptions) -> Result<Imported, ImportError> {
        let copy = TempCopy::of(source)?;
        let conn = Connection::open_with_flags(
            &copy.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sql_err)?;
        let columns = read_export(&conn)?;
        Ok(Imported::Snapshot(Box::new(columns.into_tables()?)))
    }
}

fn sql_err(e: rusqlite::Error) -> ImportError {
    ImportError::Nsys(format!("SQLite: {e}"))
}

/// The input copied to a temporary file, removed when dropped.
struct TempCopy {
    path: PathBuf,
}

impl TempCopy {
    fn of(source: Source) -> Result<TempCopy, ImportError> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = std::env::temp_dir().join(format!(
            "memlens-nsys-{}-{nanos}-{}.sqlite",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).open(&path)?;
        let copy = TempCopy { path };
        let mut reader = source.reader.take(source.bound);
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = reader.read(&mut buf).map_err(map_pipe_err)?;
            if n == 0 {
                break;
            }
            file.write_all(&buf[..n])?;
        }
        file.flush()?;
        Ok(copy)
    }
}

impl Drop for TempCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn has_table(conn: &Connection, name: &str) -> Result<bool, ImportError> {
    conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
        [name],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n > 0)
    .map_err(sql_err)
}

fn columns_of(conn: &Connection, table: &str) -> Result<Vec<String>, ImportError> {
    let mut stmt = conn.prepare(&format!("PRAGMA table_info({table})")).map_err(sql_err)?;
    let names = stmt
        .query_map([], |r| r.get::<_, String>(1))
        .map_err(sql_err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(sql_err)?;
    Ok(names)
}

/// `cudaMalloc_v3020` → `cudaMalloc`.
fn api_name(raw: &str) -> &str {
    match raw.rfind("_v") {
        Some(i) if raw[i + 2..].bytes().all(|b| b.is_ascii_digit()) && i + 2 < raw.len() => &raw[..i],
        _ => raw,
    }
}

/// `ENUM_CUDA_MEM_KIND`: 2 Device, 5 Device Static are device memory.
fn is_device_memory(kind: i64) -> bool {
    matches!(kind, 2 | 5)
}

fn size_label(bytes: i64) -> String {
    let b = bytes as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", b / (1u64 << 30) as f64)
    } else if b >= (1u64 << 20) as f64 {
        format!("{:.1} MiB", b / (1u64 << 20) as f64)
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{bytes} B")
    }
}

struct Row {
    start_ns: i64,
    device: i64,
    pid: i64,
    address: i64,
    bytes: i64,
    kind: i64,
    free: bool,
    stream: i64,
    api: Option<String>,
    var_name: Option<String>,
}

/// Reads the memory events of an export into canonical columns.
fn read_export(conn: &Connection) -> Result<SnapshotColumns, ImportError> {
    let is_nsys = [
        "EXPORT_META_DATA",
        "META_DATA_EXPORT",
        "TARGET_INFO_SESSION_START_TIME",
        "StringIds",
    ]
    .iter()
    .map(|t| has_table(conn, t))
    .collect::<Result<Vec<_>, _>>()?
    .into_iter()
    .any(|b| b);
    if !is_nsys {
        return Err(ImportError::Nsys(
            "a SQLite database, but not an Nsight Systems export (no nsys metadata tables)".into(),
        ));
    }
    const TABLE: &str = "CUDA_GPU_MEMORY_USAGE_EVENTS";
    if !has_table(conn, TABLE)? {
        return Err(ImportError::Nsys(
            "an Nsight Systems export without CUDA memory events: profile with \
             `nsys profile --trace=cuda --cuda-memory-usage=true` (the table is only exported when it has rows)"
                .into(),
        ));
    }
    let cols = columns_of(conn, TABLE)?;
    let has = |c: &str| cols.iter().any(|x| x == c);
    for required in ["start", "address", "bytes", "memoryOperationType"] {
        if !has(required) {
            return Err(ImportError::Nsys(format!("{TABLE} has no `{required}` column")));
        }
    }
    let opt = |c: &str, default: &str| if has(c) { format!("m.{c}") } else { default.to_owned() };
    let runtime = has_table(conn, "CUPTI_ACTIVITY_KIND_RUNTIME")?
        && has_table(conn, "StringIds")?
        && has("correlationId")
        && columns_of(conn, "CUPTI_ACTIVITY_KIND_RUNTIME")?
            .iter()
            .any(|c| c == "nameId");
    let (api_col, join) = if runtime {
        let pid_match = if has("globalPid") {
            " AND r.globalTid / 16777216 = m.globalPid / 16777216"
        } else {
            ""
        };
        (
            "s.value",
            format!(
                " LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = m.correlationId{pid_match} \
                 LEFT JOIN StringIds s ON s.id = r.nameId"
            ),
        )
    } else {
        ("NULL", String::new())
    };
    let sql = format!(
        "SELECT m.start, {device}, {pid}, m.address, m.bytes, {kind}, m.memoryOperationType, {stream}, {api_col}, {name} \
         FROM {TABLE} m{join} ORDER BY m.start",
        device = opt("deviceId", "0"),
        pid = opt("globalPid", "0"),
        kind = opt("memKind", "2"),
        stream = opt("streamId", "0"),
        name = opt("name", "NULL"),
    );
    let mut stmt = conn.prepare(&sql).map_err(sql_err)?;
    let rows = stmt
        .query_map([], |r| {
            Ok(Row {
                start_ns: r.get::<_, Option<i64>>(0)?.unwrap_or(0),
                device: r.get::<_, Option<i64>>(1)?.unwrap_or(0),
                pid: r.get::<_, Option<i64>>(2)?.unwrap_or(0),
                address: r.get::<_, Option<i64>>(3)?.unwrap_or(0),
                bytes: r.get::<_, Option<i64>>(4)?.unwrap_or(0),
                kind: r.get::<_, Option<i64>>(5)?.unwrap_or(2),
                free: r.get::<_, Option<i64>>(6)?.unwrap_or(0) != 0,
                stream: r.get::<_, Option<i64>>(7)?.unwrap_or(0),
                api: r.get::<_, Option<String>>(8)?,
                var_name: r.get::<_, Option<String>>(9)?,
            })
        })
        .map_err(sql_err)?;
    let epoch_ns: Option<i64> = if has_table(conn, "TARGET_INFO_SESSION_START_TIME")? {
        conn.query_row(
            "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1",
            [],
            |r| r.get(0),
        )
        .ok()
    } else {
        None
    };

    let mut out = SnapshotColumns::default();
    let mut per_device: std::collections::BTreeMap<i64, Vec<Row>> = std::collections::BTreeMap::new();
    let (mut host, mut managed, mut other) = (0usize, 0usize, 0usize);
    for row in rows {
        let row = row.map_err(sql_err)?;
        if !is_device_memory(row.kind) {
            if row.free {
                continue;
            }
            match row.kind {
                1 | 0 => host += 1,
                4 | 6 => managed += 1,
                _ => other += 1,
            }
            continue;
        }
        per_device.entry(row.device).or_default().push(row);
    }
    let mut live_at_end: Vec<(i64, i64, i64, i64, u32)> = Vec::new(); // device, addr, size, stream, stack
    let mut unmatched_frees = 0usize;
    for (device, rows) in per_device {
        let first = out.trace.len() as u32;
        let mut live: HashMap<(i64, i64), (i64, u32, i64)> = HashMap::new();
        for r in rows {
            let time_us = (epoch_ns.unwrap_or(0).saturating_add(r.start_ns)).div_euclid(1000);
            if r.free {
                let (size, stack) = match live.remove(&(r.pid, r.address)) {
                    Some((size, stack, _)) => (size, stack),
                    None => {
                        unmatched_frees += 1;
                        (r.bytes, out.frames.empty_stack())
                    }
                };
                for action in [Action::FreeRequested, Action::FreeCompleted, Action::SegmentFree] {
                    out.trace.push(action, r.address, size, r.stream, time_us, stack);
                }
            } else {
                let api = r.api.as_deref().map_or("allocation", api_name).to_owned();
                let mut frames = vec![out.frames.intern_frame(&api, "[cuda]", 0)];
                frames.push(out.frames.intern_frame(&size_label(r.bytes), "[size]", 0));
                if let Some(v) = r.var_name.as_deref().filter(|v| !v.is_empty()) {
                    frames.insert(0, out.frames.intern_frame(v, "[variable]", 0));
                }
                let stack = out.frames.intern_stack(&frames);
                out.trace
                    .push(Action::SegmentAlloc, r.address, r.bytes, r.stream, time_us, stack);
                out.trace
                    .push(Action::Alloc, r.address, r.bytes, r.stream, time_us, stack);
                live.insert((r.pid, r.address), (r.bytes, stack, r.stream));
            }
        }
        out.device_ranges.push((device, (first, out.trace.len() as u32)));
        let mut rest: Vec<_> = live.into_iter().collect();
        rest.sort_by_key(|((_, addr), _)| *addr);
        for ((_, addr), (size, stack, stream)) in rest {
            live_at_end.push((device, addr, size, stream, stack));
        }
    }
    for (device, addr, size, stream, stack) in live_at_end {
        let seg = out.segments.len() as u32;
        out.segments.push(
            device,
            addr,
            size,
            size,
            size,
            size,
            stream,
            "driver".into(),
            (0, 0),
            false,
            stack,
        );
        out.blocks
            .push(device, seg, addr, size, size, BlockState::ActiveAllocated, stack);
    }
    let mut notes = vec![
        "Nsight Systems trace: CUDA driver allocations (cudaMalloc, cudaMallocAsync, …), not individual tensors; \
         each allocation is its own segment, so reserved equals allocated"
            .to_owned(),
    ];
    if epoch_ns.is_none() {
        notes.push("no session start time in the export: times are µs since the capture began".into());
    }
    if host + managed + other > 0 {
        notes.push(format!(
            "not counted as device memory: {host} pinned/pageable host, {managed} managed, {other} other allocations"
        ));
    }
    if unmatched_frees > 0 {
        notes.push(format!(
            "{unmatched_frees} frees of allocations made before the capture began"
        ));
    }
    out.format = Format::NsysSqlite;
    out.source.has_time_us = true;
    out.source.notes = notes;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_api_names_lose_their_version_suffix() {
        assert_eq!(api_name("cudaMalloc_v3020"), "cudaMalloc");
        assert_eq!(api_name("cudaMallocAsync_v11020"), "cudaMallocAsync");
        assert_eq!(api_name("cudaMalloc"), "cudaMalloc");
        assert_eq!(api_name("odd_v"), "odd_v");
    }
}
