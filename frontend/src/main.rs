//! memlens web UI (leptos, client-side rendered, built with trunk).
//!
//! Two pages: `/` (upload, then follow processing; reports opened in this browser are listed
//! from local storage) and `/r/{id}` (the shareable report: cards, the flame-style timeline,
//! segment map, fragmentation, leaks, OOMs). The URL carries the view (device, window, axis).
//!
//! Invariant: this crate depends on `memlens-api`, leptos and the web-sys family only — never on
//! tokio or polars — so it builds for `wasm32-unknown-unknown`. It never receives a raw trace.

mod api;
mod client;
mod format;
mod report;
mod timeline;
mod upload;

use leptos::prelude::*;

#[component]
fn App() -> impl IntoView {
    let path = web_sys::window()
        .and_then(|w| w.location().pathname().ok())
        .unwrap_or_default();
    let id = path.strip_prefix("/r/").map(|s| s.trim_end_matches('/').to_owned());
    view! {
        <header class="top">
            <a href="/" class="brand">"memlens"</a>
            <span class="tagline">"where your GPU memory went"</span>
        </header>
        {match id {
            Some(id) if !id.is_empty() => view! { <report::ReportPage id=id /> }.into_any(),
            _ => view! { <upload::UploadPage /> }.into_any(),
        }}
    }
}

fn main() {
    leptos::mount::mount_to_body(App);
}
