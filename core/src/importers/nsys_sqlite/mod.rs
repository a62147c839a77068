//! `nsys export --type sqlite`: rows of `CUDA_GPU_MEMORY_USAGE_EVENTS` joined to the runtime call
//! that made them (`CUPTI_ACTIVITY_KIND_RUNTIME` through `correlationId`, names in `StringIds`).
//! Times are epoch µs when the export has `TARGET_INFO_SESSION_START_TIME`.
//!
//! Columns are read by name (they move between schema versions); a table missing because the
//! export was lazy means "no events". SQLite needs a file: the input is copied to a temporary
//! file (removed on drop) and opened read-only.

use std::io::{Read, Write};

use rusqlite::{Connection, OpenFlags};

use crate::importers::common::nsys::{lower_driver_allocations, Row, NSYS_NOTE};
use crate::error::ImportError;
use crate::importers::{ImportOptions, Parsed, Importer};
use crate::source::{map_pipe_err, Source};
use crate::tables::SnapshotColumns;

pub struct NsysSqliteImporter;

pub static IMPORTER: NsysSqliteImporter = NsysSqliteImporter;

impl Importer for NsysSqliteImporter {
    fn sniff(&self, head: &[u8]) -> bool {
        head.starts_with(b"SQLite format 3\0")
    }

    fn import(&self, source: Source, _options: &ImportOptions) -> Result<Parsed, ImportError> {
        let copy = temp_copy(source)?;
        let conn = Connection::open_with_flags(
            copy.path(),
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sql_err)?;
        let columns = read_export(&conn)?;
        Ok(Parsed::Snapshot(Box::new(columns)))
    }
}

fn sql_err(e: rusqlite::Error) -> ImportError {
    ImportError::Nsys(format!("SQLite: {e}"))
}

/// The input copied to a file of its own temporary folder (SQLite reads files, not streams).
/// The folder goes when this drops, with whatever SQLite put beside the file: a read-only
/// connection to a WAL-mode database leaves its `-shm` and `-wal` files behind.
struct TempCopy {
    dir: tempfile::TempDir,
}

impl TempCopy {
    fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("export.sqlite")
    }
}

fn temp_copy(source: Source) -> Result<TempCopy, ImportError> {
    let copy = TempCopy {
        dir: tempfile::Builder::new().prefix("memlens-nsys-").tempdir()?,
    };
    let mut file = std::fs::File::create(copy.path())?;
    let mut reader = source.reader.take(source.bound);
    std::io::copy(&mut reader, &mut file).map_err(map_pipe_err)?;
    file.flush()?;
    Ok(copy)
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
                ops: Vec::new(),
                category: None,
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

    let rows = rows.collect::<Result<Vec<Row>, _>>().map_err(sql_err)?;
    let mut out = lower_driver_allocations(rows, epoch_ns, NSYS_NOTE);
    out.format = memlens_api::Format::NsysSqlite;
    Ok(out)
}
