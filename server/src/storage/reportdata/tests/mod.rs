//! The stored report's round trips: written at ingest, loaded back part by part, answering
//! as the in-memory report did. Reports stored by earlier versions are in [`old_reports`]; objects
//! encoded during the analyses, and a trace that lets go of its addresses, in [`early`].

mod early;
mod old_reports;

use memlens_core::pipeline::Pipeline;
use std::sync::Arc;

use memlens_api::AnalyzeOutput;
use memlens_core::query::CategoryIndex;
use memlens_core::stored::{DeviceEvents, SegmentCheckpoints};
use memlens_core::tables::{SnapshotMeta, SnapshotTables, TABLE_NAMES};
use polars_core::prelude::*;

use super::read::{read_json, read_parquet};
use super::write::put_parquet;
use super::*;
use crate::storage::parquet_object::RowGroups;
use crate::storage::store::{DataWriter, ReportId, ReportStore};
use crate::storage::store::{LocalStore, ReportRecord, ReportState};
use memlens_core::pipeline::{HandOver, Input, Keep, PipelineSink, SinkError, SnapshotOutput};

/// A report id for a test (any one key segment).
pub(crate) fn rid(s: &str) -> ReportId {
    ReportId::parse(s).expect("a report id")
}

pub(crate) fn store_with_report(id: &ReportId) -> (tempfile::TempDir, Arc<dyn ReportStore>) {
    let root = tempfile::tempdir().expect("tmp");
    let store: Arc<dyn ReportStore> = Arc::new(LocalStore::open(root.path()).expect("open"));
    store.upload_writer(id, "0-x").expect("w").finish().expect("finish");
    store
        .create(&ReportRecord::bare(id, ReportState::Queued))
        .expect("create");
    (root, store)
}

#[test]
fn large_frames_come_back_contiguous() {
    let id = &rid("00000000000000000000000000000001");
    let (_root, store) = store_with_report(id);
    let n = 3_000_000i64;
    let mut df = DataFrame::new(
        n as usize,
        vec![
            Column::new("a".into(), (0..n).collect::<Vec<i64>>()),
            Column::new(
                "b".into(),
                (0..n).map(|x| (x % 7 != 0).then_some(x)).collect::<Vec<Option<i64>>>(),
            ),
        ],
    )
    .expect("frame");
    let mut w = store.data_writer(id).expect("writer");
    put_parquet(w.as_mut(), "x.parquet", &mut df).expect("write");
    w.commit().expect("commit");
    let back = read_parquet(store.as_ref(), id, "x.parquet").expect("read");
    let a = back.column("a").expect("a").i64().expect("i64");
    assert_eq!(a.chunks().len(), 1);
    assert!(a.cont_slice().is_ok());
    assert_eq!(
        back.column("b").expect("b").null_count(),
        df.column("b").expect("b").null_count()
    );
}

/// A file's tables as the pipeline handed them over: its frames in [`TABLE_NAMES`] order, the
/// events' `(size, stack)` pairs, and its meta.
pub(crate) struct Written {
    frames: Vec<DataFrame>,
    size_stacks: DataFrame,
    meta: SnapshotMeta,
}

/// Keeps what the pipeline hands over, as the server's ingest does; the objects encoded during
/// the analyses are those of the `early` it shares with the pipeline ([`pipeline_for`]).
struct KeepingSink<'a> {
    data: &'a mut dyn DataWriter,
    written: Vec<Written>,
    early: &'a EarlyObjects,
    /// The keys of the objects encoded early, and every device frame as the pipeline gave it.
    early_keys: Vec<String>,
    frames: Vec<(String, DataFrame)>,
}
impl<'a> KeepingSink<'a> {
    fn new(data: &'a mut dyn DataWriter, early: &'a EarlyObjects) -> Self {
        KeepingSink {
            data,
            written: Vec::new(),
            early,
            early_keys: Vec::new(),
            frames: Vec::new(),
        }
    }
}

/// `HandOver::WhileOthersRun` where `early`, else `HandOver::Never`.
fn while_others_run(early: bool) -> HandOver {
    if early {
        HandOver::WhileOthersRun
    } else {
        HandOver::Never
    }
}

/// A pipeline that keeps what the ingest keeps, handing objects to `early` while the analyses
/// run as `hand_over` says, and with `lets_go` letting the trace's addresses go before
/// `snapshot` (which first hands over every object that needs them).
fn pipeline_for(early: &EarlyObjects, hand_over: HandOver, lets_go: bool) -> Pipeline<'_> {
    Pipeline::new()
        .keep(Keep {
            tables: true,
            segment_checkpoints: true,
            hand_over,
            release_addresses_from: lets_go.then_some(0),
        })
        .objects(early)
}
impl PipelineSink for KeepingSink<'_> {
    fn snapshot(&mut self, out: SnapshotOutput<'_>) -> Result<(), SinkError> {
        self.written.push(Written {
            frames: out.tables.frames_mut().into_iter().map(|(_, df)| df.clone()).collect(),
            size_stacks: out.tables.size_stacks.clone(),
            meta: out.tables.meta(),
        });
        for d in out.devices.iter() {
            let dir = format!("f{}/d{}", out.index, d.device);
            self.frames.push((format!("{dir}/usage.parquet"), d.usage.clone()));
            // As stored: with their addresses, read from the trace while it holds them.
            let lifetimes = if out.tables.holds_addresses() {
                let ev = DeviceEvents::new(out.tables, d.device)?;
                d.whole_lifetimes(&ev)?
            } else {
                d.lifetimes.clone()
            };
            self.frames.push((format!("{dir}/lifetimes.parquet"), lifetimes));
        }
        let early = self.early.take(out.index);
        self.early_keys.extend(early.iter().map(|(key, _)| key.clone()));
        write_file(self.data, out.index, out.summary, out.tables, out.devices, early).map_err(SinkError::from)
    }
}

/// Processes trace `name` into report `id` of `store` as the ingest does: what was
/// written (each file's tables and meta) and the summary.
pub(crate) fn process_into(store: &Arc<dyn ReportStore>, id: &ReportId, name: &str) -> (Vec<Written>, AnalyzeOutput) {
    let mut w = store.data_writer(id).expect("writer");
    let early = EarlyObjects::default();
    let mut keep = KeepingSink::new(w.as_mut(), &early);
    let path = memlens_tests_trace(name);
    let out = pipeline_for(&early, HandOver::WhileOthersRun, false)
        .run(vec![Input::path(&path)], &mut keep)
        .expect("run");
    let written = std::mem::take(&mut keep.written);
    write_summary(w.as_mut(), &out).expect("summary");
    w.commit().expect("commit");
    (written, out)
}

/// The tables file `i` was analysed from, as [`process_into`] kept them.
fn written_tables(written: &[Written], i: usize) -> SnapshotTables {
    let w = &written[i];
    let frames: [DataFrame; 7] = w.frames.clone().try_into().expect("seven tables");
    let mut t = SnapshotTables::from_frames(frames, w.meta.clone());
    t.size_stacks = w.size_stacks.clone();
    t
}

#[test]
fn a_stored_report_keeps_the_tables_its_queries_read_and_not_the_trace() {
    let id = &rid("00000000000000000000000000000002");
    let (_root, store) = store_with_report(id);
    // A snapshot with event notes (user_metadata / compile_context) and settings.
    let (written, out) = process_into(&store, id, "leak.pickle");
    let Written { frames, meta, .. } = &written[0];
    assert_eq!(
        &read_json::<SnapshotMeta>(store.as_ref(), id, "f0/meta.json").expect("meta"),
        meta
    );
    for (name, want) in TABLE_NAMES.iter().zip(frames) {
        let key = format!("f0/{name}.parquet");
        if QUERY_TABLES.contains(name) {
            let got = read_parquet(store.as_ref(), id, &key).expect("stored");
            assert!(got.equals_missing(want), "{name} differs after a round trip");
        } else {
            assert!(
                read_object(store.as_ref(), id, &key).expect("read").is_none(),
                "{key} is stored"
            );
        }
    }
    // The report loads whole without them; asked for, the trace is missing, by name.
    let loaded = load(&store, id).expect("load");
    assert_eq!(loaded.files[0].loaded_parts(), ["stacks", "devices"]);
    let missing = LoadedFile::open(store.clone(), id, 0, &out.files[0]).tables().err();
    assert!(
        missing.is_some_and(|e| e.to_string().contains("f0/events.parquet")),
        "the trace of a new report is not stored"
    );
}

#[test]
fn a_timeline_reads_only_the_device_frames_and_their_stored_user_metadata() {
    let id = &rid("00000000000000000000000000000004");
    let (_root, store) = store_with_report(id);
    // traces/capture/labels.py: batches allocated under `_set_memory_metadata`.
    let (written, out) = process_into(&store, id, "labels.pickle");
    let f = LoadedFile::open(store.clone(), id, 0, &out.files[0]);
    assert_eq!(f.bytes(), 0);
    let devices = f.devices().expect("devices");
    assert_eq!(f.loaded_parts(), ["devices"], "the trace itself stays unread");
    let with_devices = f.bytes();
    assert!(with_devices > 0);
    // The timeline index is built once and weighs on the file.
    let index = f.timeline_index(&devices[0], Axis::Time).expect("index");
    let with_index = f.bytes();
    assert_eq!(with_index, with_devices + index.bytes() as u64);
    assert!(Arc::ptr_eq(
        &index,
        &f.timeline_index(&devices[0], Axis::Time).expect("index")
    ));
    assert_eq!(f.bytes(), with_index);
    // The stored map equals the one found from the trace.
    let tables = written_tables(&written, 0);
    let mut any = false;
    for d in devices.iter() {
        let from_trace = memlens_core::stored::alloc_metadata(&tables, d.device).expect("metadata");
        any |= !from_trace.is_empty();
        assert_eq!(d.user_metadata, from_trace);
    }
    assert!(any, "labels.pickle sets user metadata on some allocations");
}

#[test]
fn a_first_view_builds_the_focus_devices_indexes_that_its_queries_then_use() {
    let id = &rid("00000000000000000000000000000005");
    let (_root, store) = store_with_report(id);
    // Two devices: the report opens on device 1, where the leak is.
    let (_, out) = process_into(&store, id, "leak.two_devices.pickle");
    let summary = &out.files[0];
    assert_eq!(summary.focus_device, Some(1));
    let f = LoadedFile::open(store.clone(), id, 0, summary);
    let devices = f.devices().expect("devices");
    let before = f.bytes();
    f.prepare_first_view().expect("first view");
    let prepared = f.bytes();
    let focus = devices.iter().find(|d| d.device == 1).expect("device 1");
    let (timeline, categories) = (
        f.timeline_index(focus, Axis::Time).expect("timeline index"),
        f.category_index(focus).expect("category index"),
    );
    let built = timeline.bytes() + categories.as_ref().as_ref().map_or(0, CategoryIndex::bytes);
    assert!(categories.is_some());
    assert_eq!(prepared, before + built as u64, "the first view built both");
    assert_eq!(f.bytes(), prepared, "and its queries found them built");
    assert_eq!(f.loaded_parts(), ["devices"]);
}

#[test]
fn a_stored_report_answers_segment_maps_from_its_checkpoints_without_the_trace() {
    use crate::storage::reportdata::stored_segments::SegmentAt;
    use memlens_core::stored::SegmentDetail;
    let id = &rid("00000000000000000000000000000006");
    for name in ["expandable_oom_fragmentation.pickle", "leak.two_devices.pickle"] {
        let (_root, store) = store_with_report(id);
        let (written, out) = process_into(&store, id, name);
        let summary = &out.files[0];
        let stored = LoadedFile::open(store.clone(), id, 0, summary);
        let tables = written_tables(&written, 0);
        for d in &summary.devices {
            let ev = DeviceEvents::new(&tables, d.device).expect("device");
            let cp = SegmentCheckpoints::build_every(&tables, &ev, ev.len() / 16).expect("checkpoints");
            let n = ev.len();
            let mut asked = vec![
                SegmentAt::End,
                SegmentAt::Entry(0),
                SegmentAt::Entry(n - 1),
                SegmentAt::Entry(n + 5),
                SegmentAt::Time(i64::MIN),
                SegmentAt::Time(ev.time().at(n / 2)),
                SegmentAt::Time(i64::MAX),
            ];
            asked.extend((0..n).step_by((n / 40).max(1)).map(SegmentAt::Entry));
            for at in asked {
                let detail = SegmentDetail::FULL;
                let from_store = stored
                    .stored_segment_map(d.device, at, detail)
                    .expect("read")
                    .expect("stored checkpoints");
                let from_trace = match at {
                    SegmentAt::Entry(e) => cp.map_at(&ev, Some(e), detail),
                    SegmentAt::Time(t) => cp.map_at_time(&ev, t, detail),
                    SegmentAt::End => cp.map_at(&ev, n.checked_sub(1), detail),
                }
                .expect("replayed");
                assert_eq!(Some(from_store), from_trace, "{name} device {} at {at:?}", d.device);
            }
        }
        assert_eq!(stored.loaded_parts(), ["devices"], "{name}: the trace stays unread");
    }
}

#[test]
fn a_stored_report_answers_its_first_view_without_loading_its_frames() {
    let id = &rid("00000000000000000000000000000007");
    for name in ["mlp_train.pickle", "leak.two_devices.pickle", "many_small.pickle.gz"] {
        let (_root, store) = store_with_report(id);
        let (_, out) = process_into(&store, id, name);
        let summary = &out.files[0];
        let stored = LoadedFile::open(store.clone(), id, 0, summary);
        let live = LoadedFile::open(store.clone(), id, 0, summary);
        let devices = live.devices().expect("frames");
        for d in &summary.devices {
            let axis = default_axis(d);
            let overview = stored
                .stored_overview(d.device, axis)
                .expect("read")
                .expect("stored at ingest");
            let frames = devices.iter().find(|f| f.device == d.device).expect("device");
            let computed =
                memlens_core::query::timeline_on(frames, axis, d.initial_allocated_bytes, None, None, OVERVIEW_WIDTH)
                    .expect("timeline");
            assert_eq!(overview, computed, "{name} device {}", d.device);
            // Only the default axis is stored.
            let other = if axis == Axis::Time { Axis::Event } else { Axis::Time };
            assert_eq!(stored.stored_overview(d.device, other).expect("read"), None);
            // Once the index is built, any width is as fast: the stored view steps aside.
            stored.timeline_index(frames, axis).expect("index");
            assert_eq!(stored.stored_overview(d.device, axis).expect("read"), None);
        }
        assert_eq!(live.loaded_parts(), ["devices"], "{name}");
    }
    // Before the index is built, the stored view is read without any frames.
    let (_root, store) = store_with_report(id);
    let (_, out) = process_into(&store, id, "mlp_train.pickle");
    let fresh = LoadedFile::open(store.clone(), id, 0, &out.files[0]);
    let d = &out.files[0].devices[0];
    assert!(fresh
        .stored_overview(d.device, default_axis(d))
        .expect("read")
        .is_some());
    assert!(fresh.loaded_parts().is_empty(), "{:?}", fresh.loaded_parts());
    // While an index is being built (its map locked), the stored view answers at once.
    let building = fresh.timeline_indexes.lock().expect("lock");
    assert!(fresh
        .stored_overview(d.device, default_axis(d))
        .expect("read")
        .is_some());
    drop(building);
}

fn memlens_tests_trace(name: &str) -> std::path::PathBuf {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest.join("..").join("traces").join(name)
}
