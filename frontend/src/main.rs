//! memlens web UI (leptos, client-side rendered, built with trunk).
//!
//! Invariant: this crate depends on `memlens-api` and leptos only — never on tokio or polars —
//! so it builds for `wasm32-unknown-unknown`. It talks to the server's JSON API and never
//! receives a raw trace.

use leptos::prelude::*;

/// The landing page. The report views arrive with the server's API.
#[component]
fn App() -> impl IntoView {
    view! {
        <main class="landing">
            <h1>"memlens"</h1>
            <p>"Explains GPU memory: where the peak is and what is in it, what leaks each iteration, and why an allocation ran out of memory with gigabytes free."</p>
            <p>"Analyse a PyTorch allocator snapshot from the command line:"</p>
            <pre>"memlens analyze snapshot.pickle"</pre>
        </main>
    }
}

fn main() {
    leptos::mount::mount_to_body(App);
}
