//! The planned peak as one bar stacked by category, drawn against the GPU's memory (the CUDA
//! context beside the allocator's reserved bytes), with the GPU's capacity marked.

use leptos::prelude::*;
use memlens_api::Plan;

use crate::display::bytes;
use crate::report::colour;

#[component]
pub fn BudgetBar(plan: Plan) -> impl IntoView {
    let used = plan.predicted_peak_reserved_bytes + plan.outside_allocator_bytes;
    let scale = plan.gpu_memory_bytes.unwrap_or(used).max(used).max(1) as f64;
    let pct = |b: i64| format!("{:.3}%", 100.0 * b.max(0) as f64 / scale);
    let mut segments: Vec<_> = plan
        .by_category
        .iter()
        .map(|c| {
            let title = format!("{}: {}", c.category.name(), bytes(c.bytes));
            view! { <div class="plan-seg" data-category=c.category.name() title=title style=format!("width:{};background:{}", pct(c.bytes), colour(c.category))></div> }
        })
        .collect();
    let cached = plan.predicted_peak_reserved_bytes - plan.predicted_peak_allocated_bytes;
    segments.push(view! { <div class="plan-seg" data-category="reserved-free" title=format!("cached by the allocator: {}", bytes(cached)) style=format!("width:{};background:#ddd", pct(cached))></div> });
    segments.push(view! { <div class="plan-seg" data-category="cuda-context" title=format!("CUDA context: {}", bytes(plan.outside_allocator_bytes)) style=format!("width:{};background:#555", pct(plan.outside_allocator_bytes))></div> });
    let capacity = plan.gpu_memory_bytes.map(|g| {
        view! { <div id="plan-capacity" class="plan-capacity" style=format!("left:{}", pct(g)) title=format!("GPU memory {}", bytes(g))></div> }
    });
    view! {
        <div class="panel">
            <div id="plan-bar" class="plan-bar" class:over=plan.fits == Some(false)>{segments}{capacity}</div>
            <p class="muted plan-legend">{plan.by_category.iter().map(|c| view! {
                <span><span class="swatch" style=format!("background:{}", colour(c.category))></span>{format!("{} {} ", c.category.name(), bytes(c.bytes))}</span>
            }).collect_view()}</p>
        </div>
    }
}
