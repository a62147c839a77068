//! The job's limits, and for its owner (the token its first upload answered with) a form that
//! sets them: how far the allocated and reserved peaks may grow from the run before, in percent.

use leptos::prelude::*;
use leptos::task::spawn_local;
use memlens_api::{JobView, Limit, Thresholds};

use crate::client;

fn limit_text(l: Option<Limit>) -> String {
    l.map_or_else(|| "unchecked".to_owned(), |l| l.to_string())
}

/// A limit as the form shows it: the percentage, or empty.
fn percent_field(l: Option<Limit>) -> String {
    match l {
        Some(Limit::Ratio(r)) => Limit::Ratio(r).to_arg().trim_end_matches('%').to_owned(),
        _ => String::new(),
    }
}

/// The form's field back: empty is unchecked, else a percentage.
fn parse_percent(s: &str) -> Result<Option<Limit>, String> {
    let s = s.trim().trim_end_matches('%').trim();
    if s.is_empty() {
        return Ok(None);
    }
    match s.parse::<f64>() {
        Ok(p) if p.is_finite() && p >= 0.0 => Ok(Some(Limit::Ratio(p / 100.0))),
        _ => Err(format!("{s:?} is not a percentage")),
    }
}

#[component]
pub fn Limits(job: JobView, id: String, answer: RwSignal<Option<Result<JobView, String>>>) -> impl IntoView {
    let t = job.thresholds.clone();
    let categories: Vec<String> = t
        .max_category_increase
        .iter()
        .map(|c| format!("{} {}", c.category.name(), c.limit))
        .collect();
    let shown = format!(
        "Each run is held to the run before: allocated peak {}, reserved peak {}{}.",
        limit_text(t.max_peak_increase),
        limit_text(t.max_reserved_increase),
        if categories.is_empty() {
            String::new()
        } else {
            format!(", {}", categories.join(", "))
        }
    );
    let (peak, reserved, token) = (
        RwSignal::new(percent_field(t.max_peak_increase)),
        RwSignal::new(percent_field(t.max_reserved_increase)),
        RwSignal::new(String::new()),
    );
    let error = RwSignal::new(None::<String>);
    let save = move |_| {
        let parsed = (parse_percent(&peak.get()), parse_percent(&reserved.get()));
        let (Ok(p), Ok(r)) = parsed.clone() else {
            error.set(parsed.0.err().or(parsed.1.err()));
            return;
        };
        let thresholds = Thresholds {
            max_peak_increase: p,
            max_reserved_increase: r,
            max_category_increase: t.max_category_increase.clone(),
        };
        let (id, token) = (id.clone(), token.get());
        spawn_local(async move {
            match client::set_job_thresholds(&id, &token, &thresholds).await {
                Ok(j) => answer.set(Some(Ok(j))),
                Err(e) => error.set(Some(e.message)),
            }
        });
    };
    view! {
        <section class="panel" id="job-limits">
            <p id="job-limits-now">{shown}</p>
            <details>
                <summary>"Change the limits (the job's owner)"</summary>
                <label>"allocated peak may grow by (%) "
                    <input id="job-max-peak" type="text" prop:value=peak on:input=move |e| peak.set(event_target_value(&e)) />
                </label>
                <label>" reserved peak (%) "
                    <input id="job-max-reserved" type="text" placeholder="unchecked" prop:value=reserved on:input=move |e| reserved.set(event_target_value(&e)) />
                </label>
                <label>" owner token "
                    <input id="job-owner-token" type="password" prop:value=token on:input=move |e| token.set(event_target_value(&e)) />
                </label>
                " "
                <button id="job-limits-save" on:click=save>"save"</button>
                {move || error.get().map(|e| view! { <p class="error" id="job-limits-error">{e}</p> })}
            </details>
        </section>
    }
}
