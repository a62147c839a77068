//! The compare page `/compare/{a}/{b}`: two devices side by side, A − B — two runs, two ranks
//! of one run or two devices of one snapshot, each side a report id with an optional file and
//! device (`id`, `id:file`, `id:file:device`). The headline says where the difference is;
//! cards put each side's peak, reserved, fragmentation and OOMs next to the difference; the
//! aligned timeline ([`chart`]) draws both allocated lines on one axis with the gap shaded; the
//! tables ([`tables`]) split the difference by category and by stack and show each iteration's
//! peak of both. The link is the share link.

mod chart;
mod tables;

use leptos::prelude::*;
use leptos::task::spawn_local;
use memlens_api::{CompareParams, ComparedRun, Comparison, SideRef};

use crate::client;
use crate::display::bytes;

/// `+1.2 GiB` / `−300.0 MiB`.
pub(crate) fn signed(b: i64) -> String {
    if b >= 0 {
        format!("+{}", bytes(b))
    } else {
        format!("−{}", bytes(-b))
    }
}

fn side_link(r: &ComparedRun) -> Option<String> {
    r.report
        .as_ref()
        .map(|id| format!("{}&device={}", client::report_file_page(id, r.file_index), r.device))
}

fn side_card(name: &'static str, r: &ComparedRun) -> impl IntoView {
    let frag = r
        .fragmentation_at_peak
        .as_ref()
        .map_or("n/a".to_owned(), |f| format!("{:.2}", f.fragmentation_index));
    let ooms = if r.oom_count == 0 {
        "none".to_owned()
    } else {
        let causes: Vec<String> = r.oom_causes.iter().map(|c| c.to_string()).collect();
        format!("{} ({})", r.oom_count, causes.join(", "))
    };
    let title = match side_link(r) {
        Some(href) => view! { <a href=href>{r.label.clone()}</a> }.into_any(),
        None => view! { <span>{r.label.clone()}</span> }.into_any(),
    };
    view! {
        <div class="card side" id=format!("side-{}", name.to_ascii_lowercase())>
            <div class="k">{name}</div>
            <div class="side-title">{title}</div>
            <div class="v" id=format!("peak-{}", name.to_ascii_lowercase())>{bytes(r.peak_allocated_bytes)}</div>
            <div class="s">{format!("reserved {} · fragmentation at the peak {frag} · OOMs {ooms}", bytes(r.peak_reserved_bytes))}</div>
        </div>
    }
}

fn comparison_view(c: Comparison) -> impl IntoView {
    let delta_card = view! {
        <div class="card delta" id="delta">
            <div class="k">"A − B"</div>
            <div class="v" id="peak-delta" data-bytes=c.peak_delta_bytes.to_string()>{signed(c.peak_delta_bytes)}</div>
            <div class="s">{format!("{} B allocated · reserved {}", c.peak_delta_bytes, signed(c.reserved_delta_bytes))}</div>
        </div>
    };
    view! {
        <p id="compare-headline" class="lead">{c.headline.clone()}</p>
        <div class="cards">{side_card("A", &c.a)}{side_card("B", &c.b)}{delta_card}</div>
        <chart::AlignedChart c=c.clone() />
        {tables::by_category(&c)}
        {tables::by_stack(&c)}
        {tables::iterations(&c)}
    }
}

#[component]
pub fn ComparePage(a: String, b: String) -> impl IntoView {
    let answer = RwSignal::new(None::<Result<Comparison, String>>);
    let (ra, rb) = (SideRef::parse(&a), SideRef::parse(&b));
    match (ra, rb) {
        (Some(ra), Some(rb)) => {
            let params = CompareParams {
                a: ra.to_string(),
                b: rb.to_string(),
                width: Some(600),
            };
            spawn_local(async move {
                answer.set(Some(client::compare(&params).await.map_err(|e| e.message)));
            });
        }
        _ => answer.set(Some(Err(
            "each side is a report id, `id:file` or `id:file:device`".to_owned()
        ))),
    }
    view! {
        <main class="report compare" id="compare">
            <h1>"Compare"</h1>
            {move || match answer.get() {
                None => view! { <p id="compare-waiting">"comparing…"</p> }.into_any(),
                Some(Err(e)) => view! { <p class="error" id="compare-error">{e}</p> }.into_any(),
                Some(Ok(c)) => comparison_view(c).into_any(),
            }}
        </main>
    }
}
