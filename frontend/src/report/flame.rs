//! The flame graph of the timeline's window (memviz-neo's view): bytes × lifetime by folded
//! stack, the outermost frame on top, each frame as wide as what it held over the window;
//! hovering a frame names it with its share. It follows the timeline's zoom and pan.

use leptos::prelude::*;
use memlens_api::FlameGraph;

use super::panel_canvas;
use super::state::ReportState;
use crate::display::stack_colour;

const ROW: f64 = 18.0;
const MAX_ROWS: u32 = 16;

fn hash(name: &str) -> u32 {
    name.bytes()
        .fold(2166136261u32, |h, b| (h ^ b as u32).wrapping_mul(16777619))
}

fn draw(c: &web_sys::HtmlCanvasElement, g: &FlameGraph) {
    let rows = g.nodes.iter().map(|n| n.depth + 1).max().unwrap_or(1).min(MAX_ROWS);
    let Some((ctx, width)) = panel_canvas(c, rows as f64 * ROW + 4.0) else {
        return;
    };
    let total = g.total.max(f64::MIN_POSITIVE);
    ctx.set_font("11px sans-serif");
    for n in g.nodes.iter().filter(|n| n.depth < MAX_ROWS) {
        let x = width * n.offset / total;
        let w = width * n.value / total;
        let y = n.depth as f64 * ROW;
        let colour = if n.depth == 0 {
            "hsla(215, 20%, 75%, 0.9)".to_owned()
        } else {
            stack_colour(hash(&n.name), 0.85)
        };
        ctx.set_fill_style_str(&colour);
        ctx.fill_rect(x, y, (w - 0.5).max(0.5), ROW - 1.0);
        if w > 40.0 {
            ctx.save();
            ctx.begin_path();
            ctx.rect(x, y, w - 2.0, ROW);
            ctx.clip();
            ctx.set_fill_style_str("#111");
            let _ = ctx.fill_text(&n.name, x + 3.0, y + 13.0);
            ctx.restore();
        }
    }
}

/// What the frame under (x, y) is, with its share of the window.
fn label_at(g: &FlameGraph, width: f64, x: f64, y: f64) -> Option<String> {
    let depth = (y / ROW) as u32;
    let total = g.total.max(f64::MIN_POSITIVE);
    let at = x / width * total;
    let n = g
        .nodes
        .iter()
        .find(|n| n.depth == depth && n.offset <= at && at < n.offset + n.value)?;
    Some(format!(
        "{} — {:.1}% of the window's bytes × time",
        n.name,
        100.0 * n.value / total
    ))
}

#[component]
pub fn FlamePanel(st: ReportState) -> impl IntoView {
    let hover = RwSignal::new(None::<String>);
    Effect::new(move |_| {
        let Some(g) = st.flame_data.get() else { return };
        if let Some(c) = st.flame_canvas.get() {
            draw(&c, &g);
            let _ = c.set_attribute("data-nodes", &g.nodes.len().to_string());
        }
    });
    let on_move = move |ev: web_sys::MouseEvent| {
        let (Some(g), Some(c)) = (st.flame_data.get_untracked(), st.flame_canvas.get_untracked()) else {
            return;
        };
        hover.set(label_at(
            &g,
            c.width() as f64,
            ev.offset_x() as f64,
            ev.offset_y() as f64,
        ));
    };
    view! {
        <section class="panel" id="flame">
            <h2>"Bytes × lifetime by stack"</h2>
            <p class="muted">"The timeline's window as a flame graph: each frame as wide as the memory its calls held, times how long (outermost frame on top)."</p>
            <canvas id="flame-chart" node_ref=st.flame_canvas on:mousemove=on_move on:mouseleave=move |_| hover.set(None)></canvas>
            <p class="muted" id="flame-hover">{move || hover.get().unwrap_or_else(|| "hover a frame".to_owned())}</p>
        </section>
    }
}
