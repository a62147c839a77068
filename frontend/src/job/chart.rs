//! A job's runs side by side: one bar per run, its allocated peak stacked by category, its
//! reserved peak a tick above it, and a red mark over each run that broke the job's limits.

use leptos::prelude::*;
use memlens_api::{Category, JobView};

use crate::display::bytes;
use crate::report::colour;
use crate::report::panel_canvas;

const HEIGHT: f64 = 260.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 18.0;
const BOTTOM: f64 = 40.0;
/// The mark of a run past the limits (red marks problems across the app).
const REGRESSION: &str = "#d62728";

fn draw(c: &web_sys::HtmlCanvasElement, j: &JobView) {
    let Some((ctx, width)) = panel_canvas(c, HEIGHT) else {
        return;
    };
    let n = j.runs.len().max(1);
    let top = j
        .runs
        .iter()
        .flat_map(|r| [r.peak_allocated_bytes, r.peak_reserved_bytes])
        .flatten()
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let (pw, ph) = (width - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let slot = pw / n as f64;
    let bar = (slot * 0.6).max(2.0);
    let y = |v: f64| TOP + ph * (1.0 - v / top);
    for (i, r) in j.runs.iter().enumerate() {
        let x = LEFT + slot * i as f64 + (slot - bar) / 2.0;
        let mut base = 0.0;
        for c in Category::ALL {
            let Some(b) = r.by_category.iter().find(|b| b.category == c) else {
                continue;
            };
            let v = b.bytes as f64;
            ctx.set_fill_style_str(colour(c));
            ctx.fill_rect(x, y(base + v), bar, y(base) - y(base + v));
            base += v;
        }
        if let Some(res) = r.peak_reserved_bytes {
            ctx.set_fill_style_str("#333");
            ctx.fill_rect(x - 2.0, y(res as f64) - 1.0, bar + 4.0, 2.0);
        }
        if r.regression.is_some() {
            ctx.set_fill_style_str(REGRESSION);
            ctx.fill_rect(x, TOP - 12.0, bar, 6.0);
        }
        ctx.set_fill_style_str("#333");
        ctx.set_font("11px sans-serif");
        let _ = ctx.fill_text(&format!("#{}", i + 1), x, HEIGHT - BOTTOM + 14.0);
    }
    ctx.set_fill_style_str("#333");
    ctx.set_font("11px sans-serif");
    let _ = ctx.fill_text(&bytes(top as i64), 4.0, TOP + 4.0);
    let _ = ctx.fill_text("0 B", 4.0, TOP + ph);
    let mut x = LEFT;
    for c in Category::ALL
        .iter()
        .filter(|c| j.runs.iter().any(|r| r.by_category.iter().any(|b| b.category == **c)))
    {
        ctx.set_fill_style_str(colour(*c));
        ctx.fill_rect(x, HEIGHT - 14.0, 10.0, 10.0);
        ctx.set_fill_style_str("#333");
        let _ = ctx.fill_text(c.name(), x + 14.0, HEIGHT - 5.0);
        x += 24.0 + 7.0 * c.name().len() as f64;
    }
    let _ = ctx.fill_text("▬ reserved peak", x + 8.0, HEIGHT - 5.0);
}

#[component]
pub fn JobChart(job: JobView) -> impl IntoView {
    let canvas = NodeRef::<leptos::html::Canvas>::new();
    Effect::new(move |_| {
        if let Some(c) = canvas.get() {
            draw(&c, &job);
            let _ = c.set_attribute("data-drawn", "1");
        }
    });
    view! { <div class="panel"><canvas id="job-chart" node_ref=canvas></canvas></div> }
}
