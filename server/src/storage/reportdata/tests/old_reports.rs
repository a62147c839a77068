//! Reports stored by earlier versions still load and answer: written as those versions wrote
//! them (the trace's tables beside the frames, its events holding sizes and stacks apart; no
//! `meta.json`, `event_notes` or category columns).

use super::*;
use memlens_core::pipeline::Pipeline;
use memlens_core::pipeline::SinkError;

/// Puts the tables a report stored before 2026-12 also had (the trace, segments, blocks,
/// annotations, event notes), as that version wrote them: its events held each entry's `size`
/// and `stack`, not codes of pairs.
fn put_trace_tables(w: &mut dyn DataWriter, index: usize, t: &mut SnapshotTables) {
    let mut events = events_apart(t);
    for (name, df) in t.frames_mut() {
        let df = if name == "events" { &mut events } else { df };
        if !QUERY_TABLES.contains(&name) {
            put_parquet(w, &format!("f{index}/{name}.parquet"), df).expect("put");
        }
    }
}

/// `t.events` with each `size_stack` code replaced by its pair's `size` (i64) and `stack`
/// (u32), as the events were held before the `size_stacks` table.
fn events_apart(t: &SnapshotTables) -> DataFrame {
    let mut events = t.events.clone();
    let Some(at) = events.get_column_index("size_stack") else {
        return events;
    };
    let codes = events.drop_in_place("size_stack").expect("codes");
    let codes = codes.u16().expect("u16");
    let (sizes, stacks) = (
        t.size_stacks.column("size").expect("size").i64().expect("i64"),
        t.size_stacks.column("stack").expect("stack").u32().expect("u32"),
    );
    let pair = |c: Option<u16>| c.map(usize::from);
    let size: Int64Chunked = codes.iter().map(|c| pair(c).and_then(|c| sizes.get(c))).collect();
    let stack: UInt32Chunked = codes.iter().map(|c| pair(c).and_then(|c| stacks.get(c))).collect();
    events
        .insert_column(at, size.with_name("size".into()).into_column())
        .expect("size");
    events
        .with_column(stack.with_name("stack".into()).into_column())
        .expect("stack");
    events
}

#[test]
fn a_loaded_file_weighs_its_parts_without_making_their_one_value_columns() {
    let id = &rid("0000000000000000000000000000000a");
    let (_root, store) = store_with_report(id);
    // As a report stored before 2026-12, with its trace.
    let mut w = store.data_writer(id).expect("writer");
    let early = EarlyObjects::default();
    let mut keep = KeepingSink::new(w.as_mut(), &early);
    let path = memlens_tests_trace("mlp_train.pickle");
    let out = pipeline_for(&early, HandOver::WhileOthersRun, false)
        .run(vec![Input::path(&path)], &mut keep)
        .expect("run");
    let mut t = written_tables(&keep.written, 0);
    put_trace_tables(w.as_mut(), 0, &mut t);
    write_summary(w.as_mut(), &out).expect("summary");
    w.commit().expect("commit");
    let f = LoadedFile::open(store.clone(), id, 0, &out.files[0]);
    let (tables, devices) = (f.tables().expect("tables"), f.devices().expect("frames"));
    // One device on one stream: those columns stay scalars once weighed.
    let unmade = |df: &DataFrame, name: &str| {
        df.column(name)
            .expect(name)
            .as_scalar_column()
            .is_some_and(|s| s.lazy_as_materialized_series().is_none())
    };
    assert!(unmade(&tables.events, "device") && unmade(&tables.events, "stream"));
    assert!(unmade(&devices[0].lifetimes, "stream"));
    let entries = tables.events.height() as u64;
    assert!(f.bytes() > entries * 16, "{} bytes for {entries} entries", f.bytes());
}

/// Writes like the version before `meta.json`, `event_notes` and category columns.
struct OldLayout<'a>(&'a mut dyn DataWriter);
impl DataWriter for OldLayout<'_> {
    fn put(&mut self, key: &str, bytes: &[u8]) -> crate::storage::store::StoreResult<()> {
        if key.ends_with("meta.json")
            || key.ends_with("event_notes.parquet")
            || key.ends_with("user_metadata.parquet")
            || key.ends_with("reserved.parquet")
            || key == "schema.json"
        {
            return Ok(());
        }
        if key.ends_with("lifetimes.parquet") {
            // Its entry indexes were 64-bit.
            let mut df = crate::storage::parquet_object::decode(bytes.to_vec()).expect("decode");
            for idx in ["alloc_idx", "free_idx"] {
                let wide = df.column(idx).expect("idx").cast(&DataType::Int64).expect("cast");
                df.with_column(wide).expect("column");
            }
            let bytes = crate::storage::parquet_object::encode(&df, RowGroups::One).expect("encode");
            return self.0.put(key, &bytes);
        }
        self.0.put(key, bytes)
    }
    fn commit(self: Box<Self>) -> crate::storage::store::StoreResult<()> {
        Ok(())
    }
}
struct WriteOld<'a>(OldLayout<'a>);
impl PipelineSink for WriteOld<'_> {
    fn snapshot(&mut self, out: SnapshotOutput<'_>) -> Result<(), SinkError> {
        for d in out.devices.iter_mut() {
            let _ = d.lifetimes.drop_in_place("category");
            let _ = d.lifetimes.drop_in_place("category_rule");
            // The usage had reserved (and active) bytes as columns of their own.
            let reserved: Vec<i64> = d.reserved.values().collect();
            d.usage
                .with_column(Column::new("active".into(), reserved.clone()))
                .expect("column");
            d.usage
                .with_column(Column::new("reserved".into(), reserved))
                .expect("column");
            // The usage's allocated bytes were i64 and its times one i64 column.
            let allocated: Int64Chunked = memlens_core::tables::columns::usage::allocated(&d.usage)
                .expect("allocated")
                .iter()
                .map(Some)
                .collect();
            for narrow in ["allocated_units", "allocated_base", "allocated_shift"] {
                let _ = d.usage.drop_in_place(narrow);
            }
            d.usage
                .with_column(allocated.with_name("allocated".into()).into_column())
                .expect("column");
            let time: Int64Chunked = memlens_core::tables::columns::usage::times(&d.usage)
                .expect("times")
                .iter()
                .map(Some)
                .collect();
            for narrow in ["time_after_first", "first_time"] {
                let _ = d.usage.drop_in_place(narrow);
            }
            d.usage
                .insert_column(0, time.clone().with_name("time".into()).into_column())
                .expect("column");
            // The allocations' times had columns of their own (null outside the trace).
            for (name, idx) in [("t_alloc", "alloc_idx"), ("t_free", "free_idx")] {
                let wide = d
                    .lifetimes
                    .column(idx)
                    .expect("idx")
                    .cast(&DataType::Int64)
                    .expect("cast");
                let at: Int64Chunked = wide
                    .i64()
                    .expect("i64")
                    .into_no_null_iter()
                    .map(|i| usize::try_from(i).ok().and_then(|i| time.get(i)))
                    .collect();
                d.lifetimes
                    .with_column(at.with_name(name.into()).into_column())
                    .expect("column");
            }
        }
        put_trace_tables(&mut self.0, out.index, out.tables);
        write_file(&mut self.0, out.index, out.summary, out.tables, out.devices, Vec::new()).map_err(SinkError::from)
    }
}

#[test]
fn a_report_stored_by_the_previous_version_still_loads_and_answers() {
    let id = &rid("00000000000000000000000000000003");
    let (_root, store) = store_with_report(id);
    let mut w = store.data_writer(id).expect("writer");
    let mut sink = WriteOld(OldLayout(w.as_mut()));
    let path = memlens_tests_trace("leak.pickle");
    let out = Pipeline::keeping_frames()
        .run(vec![Input::path(&path)], &mut sink)
        .expect("run");
    write_summary(w.as_mut(), &out).expect("summary");
    w.commit().expect("commit");
    let loaded = load(&store, id).expect("an old report loads");
    let f = &loaded.files[0];
    // Its allocations' own time columns are dropped as it loads; its timeline is the one
    // the pipeline's own frames draw, band times and all.
    let devices = f.devices().expect("devices");
    assert!(devices[0].lifetimes.column("t_alloc").is_err());
    assert_eq!(
        devices[0].lifetimes.column("free_idx").expect("free_idx").dtype(),
        &DataType::Int32
    );
    let mut fresh = memlens_core::pipeline::KeepFrames::default();
    Pipeline::keeping_frames()
        .run(vec![Input::path(&path)], &mut fresh)
        .expect("run");
    // Its reserved column is read as the changes and not held; its times stay one i64
    // column, where the pipeline now shares the events' narrow ones.
    assert_eq!(devices[0].usage.get_column_names(), ["time", "allocated"]);
    assert_eq!(
        fresh.files[0][0].usage.get_column_names(),
        [
            "time_after_first",
            "first_time",
            "allocated_units",
            "allocated_base",
            "allocated_shift"
        ]
    );
    assert_eq!(devices[0].reserved, fresh.files[0][0].reserved);
    assert!(devices[0].reserved.changes().len() > 0);
    let draw = |d: &memlens_core::stored::DeviceFrames| {
        let t = memlens_core::query::timeline(d, true, 0, None, None, 200).expect("timeline");
        assert!(t.bands.iter().any(|b| b.t_alloc.is_some() && b.t_free.is_some()));
        serde_json::to_value(t).expect("json")
    };
    assert_eq!(draw(&devices[0]), draw(&fresh.files[0][0]));
    let tables = f.tables().expect("tables");
    assert_eq!(tables.event_notes.height(), 0);
    assert_eq!(tables.format, memlens_api::Format::PytorchSnapshot);
    // What-if on it replays the run unchanged (its allocations read as unplaced).
    let w = memlens_core::analysis::whatif::what_if_file(
        &loaded.summary.files[0],
        &f.devices().expect("devices"),
        &[],
        &memlens_api::WhatIfParams::default(),
    )
    .expect("what-if");
    assert_eq!(
        w.devices[0].predicted_peak_allocated_bytes,
        loaded.summary.files[0].devices[0].peak_allocated_bytes
    );
    // It has no stored segment checkpoints: its maps are replayed from the trace.
    let at = crate::storage::reportdata::stored_segments::SegmentAt::End;
    let detail = memlens_core::stored::SegmentDetail::FULL;
    assert_eq!(f.stored_segment_map(0, at, detail).expect("read"), None);
}
