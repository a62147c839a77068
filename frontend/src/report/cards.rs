//! The headline cards of a device.

use leptos::prelude::*;
use memlens_api::DeviceSummary;

use crate::display::bytes;

pub fn cards(s: &DeviceSummary) -> impl IntoView {
    let when = s
        .peak_time_us
        .map(|_| "during the trace".to_owned())
        .unwrap_or_else(|| match s.peak_event_index {
            Some(i) => format!("at entry {i}"),
            None => "before the trace".to_owned(),
        });
    let frag = s
        .fragmentation_at_peak
        .as_ref()
        .map(|f| {
            format!(
                "{:.2} ({} free, largest {})",
                f.fragmentation_index,
                bytes(f.reserved_free_bytes),
                bytes(f.largest_free_block_bytes)
            )
        })
        .unwrap_or_else(|| "n/a".into());
    let leak_bytes: i64 = s.leaks.iter().map(|l| l.bytes_per_iteration).sum();
    view! {
        <div class="cards">
            <div class="card" id="card-peak"><div class="k">"peak allocated"</div><div class="v" id="peak-value">{bytes(s.peak_allocated_bytes)}</div><div class="s">{when}</div></div>
            <div class="card"><div class="k">"peak reserved"</div><div class="v">{bytes(s.peak_reserved_bytes)}</div><div class="s">{format!("{} allocations", s.alloc_count)}</div></div>
            <div class="card" class:alert=!s.ooms.is_empty()><div class="k">"OOMs"</div><div class="v">{s.oom_count.to_string()}</div><div class="s">{s.ooms.last().map(|o| o.cause.to_string()).unwrap_or_default()}</div></div>
            <div class="card" class:alert=!s.leaks.is_empty()><div class="k">"leak candidates"</div><div class="v">{s.leaks.len().to_string()}</div><div class="s">{if s.leaks.is_empty() { "none".to_owned() } else { format!("+{} per iteration", bytes(leak_bytes)) }}</div></div>
            <div class="card"><div class="k">"fragmentation at peak"</div><div class="v small">{frag}</div></div>
        </div>
    }
}
