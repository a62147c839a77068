//! NVML logs in a report: a section per log (per GPU its cards and chart, the processes it
//! saw), and the page of a report made of NVML logs alone.

use leptos::prelude::*;
use memlens_api::{AnalyzeOutput, ChartParams, GpuLogSummary, GpuSeriesSummary, SampleClock};

use super::skipped_note;
use super::state::InTrace;
use crate::client;
use crate::display::bytes;

fn gpu_cards(g: &GpuSeriesSummary, beside_trace: Option<AnyView>) -> impl IntoView {
    let of_total = g.total_bytes.map_or(String::new(), |t| format!("of {}", bytes(t)));
    let span = format!(
        "{} samples over {:.1} s{}",
        g.sample_count,
        (g.end_time_us - g.start_time_us) as f64 / 1e6,
        g.median_interval_ms
            .map_or(String::new(), |ms| format!(", every {ms:.0} ms"))
    );
    view! {
        <div class="cards">
            <div class="card gpu-peak"><div class="k">{format!("GPU {} peak used", g.gpu)}</div><div class="v">{g.peak_used_bytes.map_or("n/a".into(), bytes)}</div><div class="s">{of_total}</div></div>
            <div class="card"><div class="k">"lowest used"</div><div class="v">{g.min_used_bytes.map_or("n/a".into(), bytes)}</div><div class="s">{span}</div></div>
            {g.driver_reserved_bytes.map(|r| view! { <div class="card"><div class="k">"driver reserved"</div><div class="v">{bytes(r)}</div><div class="s">"not counted in used"</div></div> })}
            {g.non_pytorch_peak_bytes.map(|o| view! { <div class="card" id="non-pytorch"><div class="k">"outside PyTorch"</div><div class="v">{bytes(o)}</div><div class="s">"at most, while the snapshot ran: used − PyTorch's reserved (CUDA context, NCCL, cuBLAS, other libraries)"</div></div> })}
            {beside_trace}
        </div>
    }
}

/// One section per NVML log: per GPU its cards and chart. `in_trace` (with a snapshot) carries
/// the NVML peak during the shown device's trace, compared with PyTorch's reserved peak.
pub fn gpu_logs_section(id: &str, logs: &[GpuLogSummary], in_trace: Option<RwSignal<InTrace>>) -> impl IntoView {
    logs.iter()
        .enumerate()
        .map(|(li, l)| {
            let clock = match (l.clock, l.clock_offset_minutes) {
                (SampleClock::LocalNoZone, 0) => "local times without a zone, read as UTC".to_owned(),
                (SampleClock::LocalNoZone, m) => format!("local times without a zone, shifted {m:+} min to line up with the snapshot"),
                (SampleClock::Epoch, _) => "epoch times".to_owned(),
            };
            let gpus = l
                .gpus
                .iter()
                .map(|g| {
                    let gpu = g.gpu;
                    let beside = in_trace.map(|sig| {
                        (move || {
                            sig.get().filter(|(l, g, _, _)| *l == li && *g == gpu).map(|(_, _, used, reserved)| {
                                view! {
                                    <div class="card" id="gpu-in-trace">
                                        <div class="k">"during the trace"</div>
                                        <div class="v">{bytes(used)}</div>
                                        <div class="s">{if used >= reserved {
                                            format!("peak used: {} beyond PyTorch's reserved peak of {} (CUDA context, NCCL/cuBLAS workspaces, other processes)", bytes(used - reserved), bytes(reserved))
                                        } else {
                                            format!("peak used: below PyTorch's reserved peak of {}; the log's samples missed or lagged that moment", bytes(reserved))
                                        }}</div>
                                    </div>
                                }
                            })
                        })
                        .into_any()
                    });
                    let src = client::chart_svg_url(
                        id,
                        &ChartParams {
                            log: Some(li),
                            gpu: Some(g.gpu),
                            ..ChartParams::default()
                        },
                    );
                    let name = g.name.clone().map_or(String::new(), |n| format!(" — {n}"));
                    view! {
                        <h3>{format!("GPU {}{name}", g.gpu)}</h3>
                        {gpu_cards(g, beside)}
                        <img class="gpu-chart" src=src alt=format!("GPU {} used memory over time", g.gpu) />
                    }
                })
                .collect_view();
            view! {
                <section class="panel gpu-log">
                    <h2>{format!("{} ({})", l.file, l.format)}</h2>
                    <p class="muted">{format!("{clock}. {}", l.used_meaning.note())}</p>
                    {gpus}
                    {(!l.processes.is_empty()).then(|| processes_view(&l.processes))}
                    {(!l.notes.is_empty()).then(|| view! { <p class="muted">{l.notes.join("; ")}</p> })}
                    {(!l.skipped_lines.is_empty()).then(|| view! { <p class="muted">{format!("skipped: {}", l.skipped_lines.join("; "))}</p> })}
                </section>
            }
        })
        .collect_view()
}

/// The processes an NVML log saw: which process held how much of which GPU.
fn processes_view(processes: &[memlens_api::ProcessSummary]) -> impl IntoView {
    let items = processes
        .iter()
        .map(|p| {
            let gpu = match (p.gpu, &p.bus_id) {
                (Some(g), _) => format!("GPU {g}"),
                (None, Some(b)) => format!("bus {b}"),
                (None, None) => "an unnamed GPU".to_owned(),
            };
            let text = format!(
                "pid {} ({}) on {gpu}: peak {} — {} samples over {:.1} s",
                p.pid,
                p.name.as_deref().unwrap_or("name not logged"),
                p.peak_used_bytes.map_or("n/a".into(), bytes),
                p.sample_count,
                (p.last_time_us - p.first_time_us) as f64 / 1e6
            );
            view! { <li>{text}</li> }
        })
        .collect_view();
    view! {
        <h3>"Processes"</h3>
        <ul class="groups processes">{items}</ul>
    }
}

/// A report of NVML logs only.
pub fn gpu_logs_page(id: &str, summary: &AnalyzeOutput) -> AnyView {
    let title = summary
        .gpu_logs
        .iter()
        .map(|l| l.file.clone())
        .collect::<Vec<_>>()
        .join(", ");
    let skipped = summary.skipped.clone();
    view! {
        <main class="report" id="report">
            <div class="report-head"><h1 id="report-title">{title}</h1></div>
            {skipped_note(&skipped)}
            <p class="muted">"GPU-level samples only: upload a PyTorch memory snapshot of the same run to see what was allocated."</p>
            {gpu_logs_section(id, &summary.gpu_logs, None)}
        </main>
    }
    .into_any()
}
