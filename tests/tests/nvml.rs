//! NVML-based logs from the same H200 run as the snapshots: nvidia-smi `--query-gpu` CSV, `dmon`
//! and a pynvml JSON-lines poller. Expected numbers were read off the files independently of
//! memlens (awk over the CSV/dmon columns, Python's json over the JSON lines); the dmon log is
//! also checked against the CSV, which sampled the same GPU ten times as often.

use memlens_api::{AnalyzeOutput, GpuSeriesSummary};
use memlens_core::importers::{import_source, ImportOptions, Imported};
use memlens_core::pipeline::analyze_paths;
use memlens_core::samples::GpuSampleTables;
use memlens_core::source::{Source, SourceLimits};
use memlens_core::ImportError;
use memlens_tests::trace;

const MIB: i64 = 1 << 20;
/// 2026-11-29 00:00:00 UTC in µs; the run's clock was UTC.
const DAY_US: i64 = 1_795_910_400_000_000;

fn at(h: i64, m: i64, s: i64, ms: i64) -> i64 {
    DAY_US + ((h * 60 + m) * 60 + s) * 1_000_000 + ms * 1000
}

fn analyze(names: &[&str]) -> AnalyzeOutput {
    let paths: Vec<_> = names.iter().map(|n| trace(n)).collect();
    analyze_paths(&paths).unwrap_or_else(|e| panic!("{e}"))
}

fn only_gpu(out: &AnalyzeOutput) -> &GpuSeriesSummary {
    assert_eq!(out.gpu_logs.len(), 1);
    assert_eq!(out.gpu_logs[0].gpus.len(), 1);
    &out.gpu_logs[0].gpus[0]
}

fn samples_of(bytes: Vec<u8>) -> Result<GpuSampleTables, ImportError> {
    let len = bytes.len() as u64;
    let source = Source::from_reader(Box::new(std::io::Cursor::new(bytes)), len, SourceLimits::default())?;
    match import_source(source, &ImportOptions::default())?.data {
        Imported::GpuSamples(t) => Ok(*t),
        Imported::Snapshot(_) => panic!("read as a snapshot"),
        Imported::Text(_) => panic!("read as text evidence"),
    }
}

#[test]
fn nvidia_smi_csv_peak_total_and_reserved() {
    let out = analyze(&["nvidia_smi_gpu.csv"]);
    let log = &out.gpu_logs[0];
    assert_eq!(log.format, memlens_api::Format::NvidiaSmiCsv);
    assert_eq!(log.clock, memlens_api::SampleClock::LocalNoZone);
    assert_eq!(log.clock_offset_minutes, 0);
    let g = only_gpu(&out);
    assert_eq!(g.name.as_deref(), Some("NVIDIA H200"));
    assert_eq!(g.bus_id.as_deref(), Some("00000000:00:06.0"));
    assert_eq!(g.sample_count, 507);
    // awk: max of memory.used is 9915 MiB, first at 14:21:38.993.
    assert_eq!(g.peak_used_bytes, Some(9915 * MIB));
    assert_eq!(g.peak_time_us, Some(at(14, 21, 38, 993)));
    assert_eq!(g.min_used_bytes, Some(0));
    assert_eq!(g.total_bytes, Some(143_771 * MIB));
    assert_eq!(g.driver_reserved_bytes, Some(616 * MIB));
    assert_eq!(g.start_time_us, at(14, 20, 48, 551));
    assert_eq!(g.end_time_us, at(14, 21, 40, 212));
    // The same log written with `nounits` reads the same.
    let nounits = analyze(&["nvidia_smi_gpu.nounits.csv"]);
    assert_eq!(only_gpu(&nounits), g);
}

#[test]
fn dmon_matches_the_csv_it_ran_beside() {
    let out = analyze(&["nvidia_smi_dmon.txt"]);
    let g = only_gpu(&out);
    assert_eq!(out.gpu_logs[0].format, memlens_api::Format::NvidiaSmiDmon);
    assert_eq!(g.sample_count, 53);
    // awk: max of fb is 9781 MB (MiB), first at 14:21:27.
    assert_eq!(g.peak_used_bytes, Some(9781 * MIB));
    assert_eq!(g.peak_time_us, Some(at(14, 21, 27, 0)));
    // dmon's fb is nvidia-smi's memory.used: a dmon sample shows one of the values the 0.1 s CSV
    // saw in the same second, except where memory changed right at the second's edge.
    let dmon = samples_of(std::fs::read(trace("nvidia_smi_dmon.txt")).expect("dmon")).expect("dmon");
    let csv = samples_of(std::fs::read(trace("nvidia_smi_gpu.csv")).expect("csv")).expect("csv");
    let col = |t: &GpuSampleTables, c: &str| -> Vec<(i64, i64)> {
        let time = t.samples.column("time_us").expect("time").i64().expect("i64");
        let used = t.samples.column(c).expect("used").i64().expect("i64");
        time.iter()
            .zip(used.iter())
            .filter_map(|(t, u)| Some((t?, u?)))
            .collect()
    };
    let csv_used = col(&csv, "used_bytes");
    let mut exact = 0;
    let dmon_used = col(&dmon, "used_bytes");
    for &(t, fb) in &dmon_used {
        let same_second: Vec<i64> = csv_used
            .iter()
            .filter(|(ct, _)| *ct >= t && *ct < t + 1_000_000)
            .map(|(_, u)| *u)
            .collect();
        if same_second.contains(&fb) {
            exact += 1;
        }
    }
    // Python over the two files: 49 of the 53 seconds agree exactly.
    assert_eq!((exact, dmon_used.len()), (49, 53));
}

#[test]
fn pynvml_json_lines_in_bytes_with_epoch_times() {
    let out = analyze(&["pynvml_log.jsonl"]);
    let log = &out.gpu_logs[0];
    assert_eq!(log.format, memlens_api::Format::NvmlJsonl);
    assert_eq!(log.clock, memlens_api::SampleClock::Epoch);
    let g = only_gpu(&out);
    assert_eq!(g.sample_count, 194);
    // Python: max(memory_used) = 1218314240 at 1795962103.6027398; min 648347648.
    assert_eq!(g.peak_used_bytes, Some(1_218_314_240));
    assert_eq!(g.peak_time_us, Some(1_795_962_103_602_740));
    assert_eq!(g.min_used_bytes, Some(648_347_648));
    assert_eq!(g.total_bytes, Some(150_754_820_096));
    assert_eq!(log.used_meaning, memlens_api::UsedMeaning::IncludesDriverReserved);
}

#[test]
fn a_log_from_another_time_zone_is_lined_up_with_the_snapshot() {
    // gpt_train ran 14:21:02–14:21:04 UTC; the IST log says 19:51:02 for the same moments.
    let out = analyze(&["gpt_train.pickle", "nvidia_smi_gpu.ist.csv"]);
    assert_eq!(out.files.len(), 1);
    assert_eq!(out.gpu_logs[0].clock_offset_minutes, -330);
    let reference = analyze(&["gpt_train.pickle", "nvidia_smi_gpu.csv"]);
    assert_eq!(reference.gpu_logs[0].clock_offset_minutes, 0);
    let (a, b) = (only_gpu(&out), only_gpu(&reference));
    assert_eq!(a.peak_time_us, b.peak_time_us);
    assert_eq!(a.start_time_us, b.start_time_us);
    // Alone, the IST log is read as UTC: nothing to line it up with.
    let alone = analyze(&["nvidia_smi_gpu.ist.csv"]);
    assert_eq!(alone.gpu_logs[0].clock_offset_minutes, 0);
    assert_eq!(only_gpu(&alone).start_time_us, at(19, 50, 48, 551));
}

#[test]
fn per_process_logs_name_each_process_and_its_gpu() {
    // Python over nvidia_smi_apps.csv, grouped by pid: 421 peaks at 9772 MiB (366 rows, two of
    // them named `[No data]`), 683 at 9906 MiB (51 rows); pynvml's process lists: pid 710 peaks
    // at 564133888 B over 193 samples.
    let out = analyze(&["nvidia_smi_apps.csv", "nvidia_smi_gpu.csv", "pynvml_log.jsonl"]);
    let apps = &out.gpu_logs[0];
    assert!(apps.gpus.is_empty());
    let p: Vec<_> = apps
        .processes
        .iter()
        .map(|p| (p.pid, p.name.as_deref(), p.gpu, p.sample_count, p.peak_used_bytes))
        .collect();
    assert_eq!(
        p,
        vec![
            (421, Some("python3"), Some(0), 366, Some(9772 * MIB)),
            (683, Some("python3"), Some(0), 51, Some(9906 * MIB)),
        ],
        "bus 00000000:00:06.0 is GPU 0 in nvidia_smi_gpu.csv"
    );
    let nvml = &out.gpu_logs[2].processes;
    assert_eq!(nvml.len(), 1);
    assert_eq!(
        (nvml[0].pid, nvml[0].gpu, nvml[0].sample_count, nvml[0].peak_used_bytes),
        (710, Some(0), 193, Some(564_133_888))
    );
    // Alone, the per-process log keeps the bus id and no index.
    let alone = analyze(&["nvidia_smi_apps.csv"]);
    assert_eq!(alone.gpu_logs[0].processes[0].gpu, None);
    assert_eq!(
        alone.gpu_logs[0].processes[0].bus_id.as_deref(),
        Some("00000000:00:06.0")
    );
}

#[test]
fn nvidia_smi_pmon_logs_give_each_process_and_its_gpu() {
    // Real `pmon -s m -o DT` (and `-s um`) on the H200 while two processes held 3 GiB and 1 GiB
    // (traces/capture/capture.sh). Read off the files: pid 434 at 3682 MiB on 5 lines, pid 435
    // at 1634 MiB on 4; with `-s um` 3 lines each; the idle first line (`-`) is no process.
    for (name, lines) in [("nvidia_smi_pmon.txt", (5, 4)), ("nvidia_smi_pmon_um.txt", (3, 3))] {
        let out = analyze(&[name]);
        let log = &out.gpu_logs[0];
        assert_eq!(log.format, memlens_api::Format::NvidiaSmiPmon, "{name}");
        assert!(log.gpus.is_empty(), "{name}: no whole-GPU samples in a pmon log");
        let p: Vec<_> = log
            .processes
            .iter()
            .map(|p| (p.pid, p.name.as_deref(), p.gpu, p.sample_count, p.peak_used_bytes))
            .collect();
        assert_eq!(
            p,
            vec![
                (434, Some("python3"), Some(0), lines.0, Some(3682 * MIB)),
                (435, Some("python3"), Some(0), lines.1, Some(1634 * MIB)),
            ],
            "{name}"
        );
    }
    // A pmon log is not a dmon log, whichever importer is asked.
    let pmon = std::fs::read(trace("nvidia_smi_pmon.txt")).expect("pmon");
    let dmon = memlens_core::importers::nvidia_smi_dmon::read_dmon(
        Source::from_reader(
            Box::new(std::io::Cursor::new(pmon.clone())),
            pmon.len() as u64,
            SourceLimits::default(),
        )
        .expect("source"),
    );
    assert!(dmon.is_err_and(|e| e.to_string().contains("pmon")));
    // Without `-o DT` there are no timestamps to line up: refused on the header line.
    let no_dt = "# gpu   pid  type   fb  command
# Idx     #   C/G   MB  name
    0   434     C 3682  python3
";
    let e = samples_of(no_dt.as_bytes().to_vec()).map(|_| ()).expect_err("no date");
    assert!(e.to_string().starts_with("line 1: no Date and Time columns"), "{e}");
}

#[test]
fn damaged_logs_fail_on_the_line_or_skip_a_cut_off_end() {
    let csv = std::fs::read_to_string(trace("nvidia_smi_gpu.csv")).expect("csv");
    // A log killed mid-write: the cut-off last line is skipped and noted.
    let cut = &csv[..csv.len() - 40];
    let t = samples_of(cut.as_bytes().to_vec()).expect("cut log");
    assert_eq!(t.samples.height(), 506);
    assert_eq!(t.skipped_lines.len(), 1);
    assert!(
        t.skipped_lines[0].starts_with("line 508 (cut off)"),
        "{:?}",
        t.skipped_lines
    );
    // A damaged line in the middle is an error naming the line.
    let mut lines: Vec<&str> = csv.lines().collect();
    lines[100] = "2026/11/29 14:20:58.720, 0, NVIDIA H200";
    let err = samples_of(lines.join("\n").into_bytes())
        .expect_err("refused")
        .to_string();
    assert_eq!(err, "line 101: 3 fields, but the header has 12");
    let mut lines: Vec<&str> = csv.lines().collect();
    lines[7] = "2026/11/29 14:20:49.300, 0, NVIDIA H200, 00000000:00:06.0, 143771 parsecs, 0 MiB, 143156 MiB, 616 MiB, 0 %, 0 %, 35, 123.00 W";
    let err = samples_of(lines.join("\n").into_bytes())
        .expect_err("refused")
        .to_string();
    assert_eq!(err, "line 8: unknown memory unit `parsecs` in `143771 parsecs`");
    // A CSV without memory columns says what to record.
    let err = samples_of(b"timestamp, index, temperature.gpu\n2026/11/29 14:20:48.551, 0, 35\n".to_vec())
        .expect_err("refused")
        .to_string();
    assert!(err.contains("--query-gpu=timestamp,index,memory.used"), "{err}");
    // dmon without timestamps says how to get them.
    let dmon = std::fs::read_to_string(trace("nvidia_smi_dmon.txt")).expect("dmon");
    let no_dt: String = dmon
        .lines()
        .map(|l| l.split_whitespace().skip(2).collect::<Vec<_>>().join(" "))
        .map(|l| {
            if l.starts_with("Idx") || l.starts_with("gpu") {
                format!("# {l}")
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let err = samples_of(no_dt.into_bytes()).expect_err("refused").to_string();
    assert!(err.contains("-o DT"), "{err}");
    // A JSON line that is not JSON names its line.
    let jsonl = std::fs::read_to_string(trace("pynvml_log.jsonl")).expect("jsonl");
    let mut lines: Vec<&str> = jsonl.lines().collect();
    lines[3] = "{\"timestamp\": 1795962103.6, \"gpu\": 0, \"memory_used\": ";
    let err = samples_of(lines.join("\n").into_bytes())
        .expect_err("refused")
        .to_string();
    assert!(err.starts_with("line 4: not JSON"), "{err}");
}

/// One GPU of a log: (gpu, bus id, samples, peak used bytes).
type SeriesFacts = (i64, Option<String>, usize, i64);

/// A log given as bytes through the pipeline: its summary, each GPU as (gpu, bus id, samples,
/// peak used), and its notes.
fn series(bytes: Vec<u8>) -> (Vec<SeriesFacts>, Vec<String>) {
    use memlens_core::pipeline::{run, Input};
    let size = bytes.len() as u64;
    let input = Input::reader(
        "poller.csv",
        size,
        Box::new(move || Ok(Box::new(std::io::Cursor::new(bytes.clone())) as Box<dyn std::io::Read + Send>)),
    );
    let out = run(vec![input], ImportOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let log = &out.gpu_logs[0];
    let gpus = log
        .gpus
        .iter()
        .map(|g| (g.gpu, g.bus_id.clone(), g.sample_count, g.peak_used_bytes.unwrap_or(0)))
        .collect();
    (gpus, log.notes.clone())
}

#[test]
fn hand_made_logs_tell_gpus_apart_by_the_column_that_does() {
    // A poller that writes a constant `index` and the GPU's identity in `gpu_uuid`: two GPUs.
    let uuid = b"timestamp, index, gpu_uuid, memory.used [MiB], memory.total [MiB]\n\
        2026/11/29 10:00:00.000, 0, GPU-aaaa, 100 MiB, 1000 MiB\n\
        2026/11/29 10:00:00.000, 0, GPU-bbbb, 700 MiB, 1000 MiB\n\
        2026/11/29 10:00:01.000, 0, GPU-aaaa, 300 MiB, 1000 MiB\n\
        2026/11/29 10:00:01.000, 0, GPU-bbbb, 500 MiB, 1000 MiB\n"
        .to_vec();
    let (gpus, notes) = series(uuid);
    assert_eq!(
        gpus,
        vec![(0, None, 2, 300 * MIB), (1, None, 2, 700 * MIB)],
        "never one merged series"
    );
    assert!(notes.iter().any(|n| n.contains("`gpu_uuid`")), "{notes:?}");
    // `gpu` numbers the GPUs itself; a bus id column without an index numbers them in order.
    let gpu = b"timestamp,gpu,memory.used\n2026/11/29 10:00:00,3,10\n2026/11/29 10:00:00,5,20\n".to_vec();
    assert_eq!(series(gpu).0, vec![(3, None, 1, 10 * MIB), (5, None, 1, 20 * MIB)]);
    let bus = b"timestamp, pci.bus_id, memory.used [MiB]\n\
        2026/11/29 10:00:00.000, 00000000:19:00.0, 10 MiB\n\
        2026/11/29 10:00:00.000, 00000000:3B:00.0, 20 MiB\n"
        .to_vec();
    assert_eq!(
        series(bus).0,
        vec![
            (0, Some("00000000:19:00.0".into()), 1, 10 * MIB),
            (1, Some("00000000:3B:00.0".into()), 1, 20 * MIB)
        ]
    );
    // A constant index and nothing else, two rows at every timestamp: two GPUs, in order.
    let looped = b"timestamp, index, memory.used [MiB]\n\
        2026/11/29 10:00:00.000, 0, 10 MiB\n\
        2026/11/29 10:00:00.000, 0, 50 MiB\n\
        2026/11/29 10:00:01.000, 0, 20 MiB\n\
        2026/11/29 10:00:01.000, 0, 40 MiB\n"
        .to_vec();
    let (gpus, notes) = series(looped);
    assert_eq!(gpus, vec![(0, None, 2, 20 * MIB), (1, None, 2, 50 * MIB)]);
    assert!(notes.iter().any(|n| n.contains("order within it")), "{notes:?}");
    // One GPU with a constant index: the index, and nothing to say.
    let one = b"timestamp, index, pci.bus_id, memory.used [MiB]\n\
        2026/11/29 10:00:00.000, 0, 00000000:19:00.0, 10 MiB\n\
        2026/11/29 10:00:01.000, 0, 00000000:19:00.0, 30 MiB\n"
        .to_vec();
    let (gpus, notes) = series(one);
    assert_eq!(gpus, vec![(0, Some("00000000:19:00.0".into()), 2, 30 * MIB)]);
    assert!(notes.is_empty(), "{notes:?}");
    // The same GPU twice at one instant (a poller with second resolution): kept, and the
    // lines named.
    let twice = b"timestamp, index, memory.used [MiB]\n\
        2026/11/29 10:00:00, 0, 10 MiB\n\
        2026/11/29 10:00:00, 0, 12 MiB\n\
        2026/11/29 10:00:01, 0, 30 MiB\n"
        .to_vec();
    let (gpus, notes) = series(twice);
    assert_eq!(gpus, vec![(0, None, 3, 30 * MIB)]);
    assert!(
        notes
            .iter()
            .any(|n| n.contains("lines 2 and 3 (GPU 0 at 2026/11/29 10:00:00)")),
        "{notes:?}"
    );
}
