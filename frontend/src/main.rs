//! memlens web UI (leptos, client-side rendered, bundled by `memlens-bundle`).
//!
//! Five pages: `/` (upload, then follow processing; reports opened in this browser are listed
//! from local storage), `/r/{id}` (the shareable report: cards, the flame-style timeline,
//! segment map, fragmentation, leaks, OOMs; a run of several ranks adds its overview) and
//! `/compare/{a}/{b}` (two runs, ranks or devices side by side) and `/j/{id}` (a job's runs over
//! time, each checked against the one before) and `/plan` (a training run's memory before it runs,
//! from a model's config). The URL carries the view
//! (file, device, window, axis).
//!
//! Invariant: this crate depends on `memlens-api`, leptos and the web-sys family only — never on
//! tokio or polars — so it builds for `wasm32-unknown-unknown`. It never receives a raw trace.

mod browser;
mod client;
mod compare;
mod display;
mod fetch;
mod fragmentation_chart;
mod job;
mod plan;
mod recent;
mod report;
mod timeline;
mod upload;

use leptos::prelude::*;
use memlens_api::routes::Page;

/// A path segment as written (`%3A` → `:`).
fn decode(segment: &str) -> String {
    js_sys::decode_uri_component(segment)
        .ok()
        .and_then(|s| s.as_string())
        .unwrap_or_else(|| segment.to_owned())
}

#[component]
fn App() -> impl IntoView {
    let path = web_sys::window()
        .and_then(|w| w.location().pathname().ok())
        .unwrap_or_default();
    let page = Page::parse(&path);
    view! {
        <header class="top">
            <a href="/" class="brand">"memlens"</a>
            <span class="tagline">"where your GPU memory went"</span>
        </header>
        {match page {
            Some(Page::Plan) => view! { <plan::PlanPage /> }.into_any(),
            Some(Page::Job { id }) => view! { <job::JobPage id=id /> }.into_any(),
            Some(Page::Compare { a, b }) => view! { <compare::ComparePage a=decode(&a) b=decode(&b) /> }.into_any(),
            Some(Page::Report { id }) => view! { <report::ReportPage id=id /> }.into_any(),
            None => view! { <upload::UploadPage /> }.into_any(),
        }}
    }
}

fn main() {
    leptos::mount::mount_to_body(App);
}
