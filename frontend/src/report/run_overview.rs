//! The run overview of a report of several ranks: one bar per rank with its allocated peak
//! (the reserved peak as a lighter bar behind it), the median as a line, the worst rank named
//! with how far it is above the median, and imbalance flagged. A bar opens that rank's view;
//! two pickers open the compare page of any two ranks.

use leptos::prelude::*;
use memlens_api::{RunOverview, SideRef};

use crate::display::bytes;
use crate::{browser, client};

fn side(id: &str, file: usize) -> SideRef {
    SideRef {
        report: id.to_owned(),
        file: Some(file),
        device: None,
    }
}

/// Two rank pickers and a button that opens their comparison.
#[component]
fn RankCompare(id: String, run: RunOverview) -> impl IntoView {
    let worst = run
        .ranks
        .iter()
        .find(|r| r.rank == run.worst_rank)
        .map_or(0, |r| r.file_index);
    // B defaults to the rank nearest the median that is not the worst.
    let typical = run
        .ranks
        .iter()
        .filter(|r| r.file_index != worst)
        .min_by_key(|r| (r.peak_allocated_bytes - run.median_peak_bytes).abs())
        .map_or(0, |r| r.file_index);
    let a = RwSignal::new(worst);
    let b = RwSignal::new(typical);
    let options = move |sel: RwSignal<usize>| {
        run.ranks
            .iter()
            .map(|r| {
                let fi = r.file_index;
                view! { <option value=fi.to_string() selected=move || sel.get() == fi>{format!("rank {}", r.rank)}</option> }
            })
            .collect_view()
    };
    let (oa, ob) = (options(a), options(b));
    let go = move |_| {
        browser::navigate(&client::compare_page(
            &side(&id, a.get_untracked()),
            &side(&id, b.get_untracked()),
        ))
    };
    let pick = |sel: RwSignal<usize>| {
        move |ev| {
            if let Ok(v) = event_target_value(&ev).parse::<usize>() {
                sel.set(v);
            }
        }
    };
    view! {
        <div class="rank-compare">
            "Compare "
            <select id="rank-a" on:change=pick(a)>{oa}</select>
            " with "
            <select id="rank-b" on:change=pick(b)>{ob}</select>
            <button id="rank-compare-go" on:click=go>"Compare"</button>
        </div>
    }
}

#[component]
pub fn RunOverviewPanel(id: String, run: RunOverview, shown: usize) -> impl IntoView {
    let top = run
        .ranks
        .iter()
        .map(|r| r.peak_reserved_bytes.max(r.peak_allocated_bytes))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let median = run.median_peak_bytes as f64 / top;
    let bars = run
        .ranks
        .iter()
        .map(|r| {
            let h = 100.0 * r.peak_allocated_bytes as f64 / top;
            let hr = 100.0 * r.peak_reserved_bytes as f64 / top;
            let worst = r.rank == run.worst_rank;
            let is_shown = r.file_index == shown;
            let has_oom = r.oom_count > 0;
            let title = format!(
                "rank {}: peak allocated {}, reserved {}, {} OOM(s) — {}",
                r.rank,
                bytes(r.peak_allocated_bytes),
                bytes(r.peak_reserved_bytes),
                r.oom_count,
                r.file
            );
            view! {
                <a class="rank" class:worst=worst class:shown=is_shown class:oom=has_oom
                    href=client::report_file_page(&id, r.file_index) title=title data-rank=r.rank.to_string()>
                    <div class="rank-plot">
                        <div class="rank-reserved" style:height=format!("{hr:.2}%")></div>
                        <div class="rank-allocated" style:height=format!("{h:.2}%")></div>
                    </div>
                    <div class="rank-label">{r.rank.to_string()}</div>
                </a>
            }
        })
        .collect_view();
    let verdict = format!(
        "Worst: rank {} at {}, {:.0}% above the median {}. Min {}, max {}, spread {}.",
        run.worst_rank,
        bytes(run.max_peak_bytes),
        100.0 * run.worst_above_median,
        bytes(run.median_peak_bytes),
        bytes(run.min_peak_bytes),
        bytes(run.max_peak_bytes),
        bytes(run.spread_bytes)
    );
    view! {
        <section class="panel" id="run-overview">
            <h2>{format!("Run of {} ranks", run.ranks.len())}</h2>
            <p id="run-verdict" class:alert=run.imbalanced>
                {verdict}
                {run.imbalanced.then(|| view! { <b>" Imbalanced."</b> })}
            </p>
            <p class="muted">{format!("Rank numbers from {}. Each bar is a rank's allocated peak (reserved behind it, lighter); click one to open it.", run.rank_source.describe())}</p>
            <div class="ranks" style:width=format!("min(100%, {}px)", 68 * run.ranks.len())>
                <div class="rank-median" style:bottom=format!("calc(18px + (100% - 18px) * {median:.4})") title="median"></div>
                {bars}
            </div>
            <RankCompare id=id.clone() run=run.clone() />
        </section>
    }
}
