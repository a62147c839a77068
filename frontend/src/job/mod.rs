//! The job page `/j/{id}`: a job's runs in upload order. It leads with its verdict (the last
//! run against the one before, and how many runs broke the job's limits); the chart
//! ([`chart`]) stacks each run's peak by category with its reserved peak marked and the runs
//! that broke a limit flagged; the table lists every run with its change, links it, and
//! compares it with the run before; any two runs open the compare page; the job's owner edits
//! the limits ([`limits`]).

mod chart;
mod limits;

use leptos::prelude::*;
use leptos::task::spawn_local;
use memlens_api::{JobRun, JobView, ReportState, SideRef};

use crate::client;
use crate::compare::signed;
use crate::display::bytes;

/// The job's verdict in one line.
fn verdict(j: &JobView) -> String {
    let analysed: Vec<&JobRun> = j.runs.iter().filter(|r| r.peak_allocated_bytes.is_some()).collect();
    let regressions = j.runs.iter().filter(|r| r.regression.is_some()).count();
    let broke = match regressions {
        0 => "no run broke the job's limits".to_owned(),
        1 => "1 run broke the job's limits".to_owned(),
        n => format!("{n} runs broke the job's limits"),
    };
    let last = match analysed.as_slice() {
        [] => "no run analysed yet".to_owned(),
        [only] => format!(
            "one run analysed: peak {}",
            bytes(only.peak_allocated_bytes.unwrap_or(0))
        ),
        [.., before, last] => {
            let (b, l) = (
                before.peak_allocated_bytes.unwrap_or(0),
                last.peak_allocated_bytes.unwrap_or(0),
            );
            match &last.regression {
                Some(r) => r.verdict.clone(),
                None => format!(
                    "last run within limits: allocated peak {} ({} → {})",
                    signed(l - b),
                    bytes(b),
                    bytes(l)
                ),
            }
        }
    };
    format!("{last} · {} runs · {broke}", j.runs.len())
}

fn run_label(i: usize, r: &JobRun) -> String {
    format!(
        "#{} {}",
        i + 1,
        r.title.clone().unwrap_or_else(|| r.id.chars().take(8).collect())
    )
}

fn runs_table(j: &JobView) -> impl IntoView {
    let mut previous: Option<&JobRun> = None;
    let rows: Vec<_> = j
        .runs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let peak = r.peak_allocated_bytes.map_or_else(|| state_word(r.state), bytes);
            let reserved = r.peak_reserved_bytes.map_or(String::new(), bytes);
            let before = previous.filter(|p| p.peak_allocated_bytes.is_some());
            let change = match (before.and_then(|p| p.peak_allocated_bytes), r.peak_allocated_bytes) {
                (Some(b), Some(n)) => signed(n - b),
                _ => String::new(),
            };
            let compare = before.map(|p| {
                let href = client::compare_page(&side(&p.id), &side(&r.id));
                view! { <a class="job-compare-previous" href=href>"compare with the run before"</a> }
            });
            let flag = r.regression.as_ref().map(|g| g.verdict.clone()).unwrap_or_default();
            if r.peak_allocated_bytes.is_some() {
                previous = Some(r);
            }
            view! {
                <tr data-run=r.id.clone() class:regression=r.regression.is_some()>
                    <td><a href=r.url.clone()>{run_label(i, r)}</a></td>
                    <td class="num">{peak}</td>
                    <td class="num">{reserved}</td>
                    <td class="num">{change}</td>
                    <td class="flag">{flag}</td>
                    <td>{compare}</td>
                </tr>
            }
        })
        .collect();
    view! {
        <table id="job-runs" class="table">
            <thead><tr><th>"run"</th><th>"allocated peak"</th><th>"reserved peak"</th><th>"change"</th><th>"limits"</th><th></th></tr></thead>
            <tbody>{rows}</tbody>
        </table>
    }
}

fn state_word(s: ReportState) -> String {
    match s {
        ReportState::Failed => "failed".to_owned(),
        ReportState::Ready => "—".to_owned(),
        _ => "analysing…".to_owned(),
    }
}

fn side(id: &str) -> SideRef {
    SideRef {
        report: id.to_owned(),
        file: None,
        device: None,
    }
}

/// Two runs picked from the job, opened on the compare page.
fn pick_two(j: &JobView) -> impl IntoView {
    let options = |selected: usize| {
        j.runs
            .iter()
            .enumerate()
            .map(|(i, r)| view! { <option value=r.id.clone() selected=i == selected>{run_label(i, r)}</option> })
            .collect::<Vec<_>>()
    };
    let n = j.runs.len();
    let (a, b) = (
        NodeRef::<leptos::html::Select>::new(),
        NodeRef::<leptos::html::Select>::new(),
    );
    let go = move |_| {
        if let (Some(a), Some(b)) = (a.get(), b.get()) {
            let href = client::compare_page(&side(&a.value()), &side(&b.value()));
            if let Some(w) = web_sys::window() {
                let _ = w.location().set_href(&href);
            }
        }
    };
    view! {
        <p class="pick-two">
            "Compare "
            <select id="job-compare-a" node_ref=a>{options(n.saturating_sub(1))}</select>
            " with "
            <select id="job-compare-b" node_ref=b>{options(n.saturating_sub(2))}</select>
            " "
            <button id="job-compare-go" on:click=go>"compare"</button>
        </p>
    }
}

fn job_view(j: JobView, id: String, answer: RwSignal<Option<Result<JobView, String>>>) -> impl IntoView {
    view! {
        <h1 id="job-name">{format!("Job {}", j.name)}</h1>
        <p id="job-verdict" class="lead">{verdict(&j)}</p>
        <chart::JobChart job=j.clone() />
        {runs_table(&j)}
        {(j.runs.len() >= 2).then(|| pick_two(&j))}
        <limits::Limits job=j.clone() id=id answer=answer />
    }
}

#[component]
pub fn JobPage(id: String) -> impl IntoView {
    let answer = RwSignal::new(None::<Result<JobView, String>>);
    let load = id.clone();
    spawn_local(async move {
        answer.set(Some(client::job(&load).await.map_err(|e| e.message)));
    });
    view! {
        <main class="report job" id="job">
            {move || match answer.get() {
                None => view! { <p id="job-waiting">"loading the job…"</p> }.into_any(),
                Some(Err(e)) => view! { <p class="error" id="job-error">{e}</p> }.into_any(),
                Some(Ok(j)) => job_view(j, id.clone(), answer).into_any(),
            }}
        </main>
    }
}
