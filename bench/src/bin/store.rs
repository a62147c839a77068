//! `memlens-bench-store [FILE]`: times what the server's ingest does with a snapshot, in one
//! process and without HTTP: the pipeline keeping the tables and the segment map's checkpoints,
//! then every report object encoded and put into a throwaway local store as the server writes
//! them (`reportdata::write_file`, the encode pool, fsync). Prints the time to the storing stage
//! (and of it the analyses, apart from the decode, whose time varies more between runs), the
//! storing stage itself (`MEMLENS_BENCH_EARLY=0`: no frame encoded before it, as the ingest
//! did before `early_frames`), the bytes stored and the peak RSS; then loads the stored report's
//! device frames and stacks back as a restarted server does, timing each. Defaults to the shared
//! benchmark file. Run it in release mode.

use memlens_core::pipeline::Pipeline;
use std::sync::Arc;
use std::time::Instant;

use memlens::storage::reportdata;
use memlens::storage::store::{DataWriter, LocalStore, ReportId, ReportRecord, ReportState, ReportStore};
use memlens_api::Stage;
use memlens_core::pipeline::{Input, PipelineSink, SinkError, SnapshotOutput};

/// Writes each analysed file as the ingest does, noting when storing begins.
struct StoreSink<'a> {
    data: &'a mut dyn DataWriter,
    analysing_at: Option<Instant>,
    /// The process's CPU seconds when the analyses began.
    cpu_at_analysis: Option<f64>,
    storing_at: Option<Instant>,
    early: &'a reportdata::EarlyObjects,
}

impl PipelineSink for StoreSink<'_> {
    fn stage(&mut self, stage: Stage, _file: Option<&str>) {
        if stage == Stage::Analysing {
            self.cpu_at_analysis.get_or_insert_with(memlens_bench::cpu_seconds);
        }
        let at = match stage {
            Stage::Analysing => &mut self.analysing_at,
            Stage::Storing => &mut self.storing_at,
            _ => return,
        };
        at.get_or_insert_with(Instant::now);
    }
    fn snapshot(&mut self, out: SnapshotOutput<'_>) -> Result<(), SinkError> {
        let early = self.early.take(out.index);
        reportdata::write_file(self.data, out.index, out.summary, out.tables, out.devices, early)
            .map_err(SinkError::from)
    }
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .flatten()
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => dir_bytes(&e.path()),
                _ => e.metadata().map_or(0, |m| m.len()),
            })
            .sum()
    })
}

fn main() {
    // As the `memlens` binary starts.
    memlens_core::infra::free_memory::one_arena_per_cpu();
    let path = memlens_bench::bench_file();
    let fail = |what: &str, e: &dyn std::fmt::Display| -> ! {
        eprintln!("memlens-bench-store: {what}: {e}");
        std::process::exit(2);
    };
    let root = tempfile::tempdir().unwrap_or_else(|e| fail("a temporary folder", &e));
    let store: Arc<dyn ReportStore> = Arc::new(LocalStore::open(root.path()).unwrap_or_else(|e| fail("the store", &e)));
    let id = &ReportId::new();
    // A report is created from its uploads; this one has an empty one (the bench reads FILE).
    store
        .upload_writer(id, "0-bench")
        .and_then(|w| w.finish())
        .unwrap_or_else(|e| fail("the upload", &e));
    store
        .create(&ReportRecord::bare(id, ReportState::Processing))
        .unwrap_or_else(|e| fail("the report", &e));
    let mut data = store.data_writer(id).unwrap_or_else(|e| fail("the data writer", &e));
    let t0 = Instant::now();
    let early = reportdata::EarlyObjects::default();
    let mut sink = StoreSink {
        data: data.as_mut(),
        analysing_at: None,
        cpu_at_analysis: None,
        storing_at: None,
        early: &early,
    };
    // As the server's ingest; `MEMLENS_BENCH_EARLY=0`: every frame encoded in the storing
    // stage, for comparison.
    let mut pipeline = Pipeline::new().keep(memlens::ingest::KEEP);
    if std::env::var("MEMLENS_BENCH_EARLY").as_deref() != Ok("0") {
        pipeline = pipeline.objects(&early);
    }
    let out = pipeline
        .run(vec![Input::path(&path)], &mut sink)
        .unwrap_or_else(|e| fail(&path.display().to_string(), &e));
    let storing_at = sink.storing_at.unwrap_or_else(Instant::now);
    let analysing_at = sink.analysing_at.unwrap_or(storing_at);
    let cpu_at_analysis = sink.cpu_at_analysis;
    reportdata::write_summary(data.as_mut(), &out).unwrap_or_else(|e| fail("the summary", &e));
    data.commit().unwrap_or_else(|e| fail("the commit", &e));
    let end = Instant::now();
    let cpu_after_decode = memlens_bench::cpu_seconds() - cpu_at_analysis.unwrap_or_else(memlens_bench::cpu_seconds);
    println!("file                {}", path.display());
    println!(
        "to storing          {:.3} s (decode, tables, analyses)",
        (storing_at - t0).as_secs_f64()
    );
    println!(
        "  analyses          {:.3} s (with the frames encoded while the replay runs)",
        (storing_at - analysing_at).as_secs_f64()
    );
    println!(
        "storing             {:.3} s (encode, put, commit)",
        (end - storing_at).as_secs_f64()
    );
    println!("total               {:.3} s", (end - t0).as_secs_f64());
    // The work an upload leaves once it has arrived (decoded as it came), on every thread: the
    // analyses and storing share it out between the cores as each finds time, so their wall
    // times move work between them run to run; this does not.
    println!("cpu after decode    {cpu_after_decode:.3} s (analyses and storing, all threads)");
    println!(
        "stored              {:.1} MiB",
        memlens_bench::mib(dir_bytes(&root.path().join("reports")))
    );
    println!(
        "peak RSS            {:.1} MiB",
        memlens_bench::mib(memlens_bench::rss().0)
    );
    // What a restarted server reads on a report's first zoom (its device frames), and for the
    // stacks of a band, a flame graph or the findings (its two stack tables).
    let Some(summary) = out.files.first() else { return };
    let file = reportdata::LoadedFile::open(store.clone(), id, 0, summary);
    let t = Instant::now();
    file.devices().unwrap_or_else(|e| fail("loading the device frames", &e));
    println!(
        "loading frames      {:.3} s (what a first zoom after a restart reads)",
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    file.stacks().unwrap_or_else(|e| fail("loading the stacks", &e));
    println!("loading stacks      {:.3} s", t.elapsed().as_secs_f64());
}
