//! What the analyses found for a device: what is live at the peak, leak candidates, OOMs.

use leptos::prelude::*;
use memlens_api::DeviceSummary;

use crate::format::bytes;

pub fn details(s: &DeviceSummary) -> impl IntoView {
    view! {
        <section class="panel">
            <h2>"At the peak"</h2>
            <ul class="groups">
                {s.peak_stacks.iter().map(|g| view! {
                    <li><b>{bytes(g.bytes)}</b>{format!(" in {} allocation(s) — {}", g.count, g.stack.iter().take(3).cloned().collect::<Vec<_>>().join(" ← "))}</li>
                }).collect_view()}
            </ul>
            <h2>"Leak candidates"</h2>
            {if s.leaks.is_empty() {
                let why = match &s.iterations.note {
                    Some(note) => format!("No leak candidate: {note}."),
                    None => format!("No allocation piled up across iterations ({} iterations from {}).", s.iterations.count, s.iterations.source),
                };
                view! { <p class="muted" id="no-leaks">{why}</p> }.into_any()
            } else {
                view! {
                    {s.iterations.note.clone().map(|n| view! { <p class="muted">{n}</p> })}
                    <ul class="groups" id="leaks">
                        {s.leaks.iter().map(|l| view! {
                            <li><b>{format!("+{} per iteration", bytes(l.bytes_per_iteration))}</b>
                                {format!(" — {} live in {} allocation(s) over {} iterations — {}", bytes(l.bytes), l.count, l.iterations_seen, l.stack.iter().take(3).cloned().collect::<Vec<_>>().join(" ← "))}</li>
                        }).collect_view()}
                    </ul>
                }.into_any()
            }}
            <h2>"OOMs"</h2>
            {if s.ooms.is_empty() {
                view! { <p class="muted">"No allocation failed."</p> }.into_any()
            } else {
                view! {
                    <ul class="groups">
                        {s.ooms.iter().map(|o| view! { <li><b>{format!("{} requested", bytes(o.requested_bytes))}</b>{format!(" — {}", o.remedy)}</li> }).collect_view()}
                    </ul>
                }.into_any()
            }}
        </section>
    }
}
