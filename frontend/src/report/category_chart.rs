//! Memory by category over the timeline's window: stacked areas, one per category, drawn from
//! the level-of-detail category timeline (it follows the timeline's zoom and pan).

use leptos::prelude::*;
use memlens_api::CategoryTimeline;

use super::budget::colour;
use super::panel_canvas;
use super::state::ReportState;
use crate::display::bytes;
use crate::timeline::{LEFT, RIGHT};

const HEIGHT: f64 = 160.0;

fn draw(c: &web_sys::HtmlCanvasElement, tl: &CategoryTimeline) {
    let Some((ctx, width)) = panel_canvas(c, HEIGHT) else {
        return;
    };
    let cols = tl.width.max(1);
    let top = (0..cols)
        .map(|b| tl.series.iter().map(|s| s.bytes[b]).sum::<i64>())
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let plot_w = width - LEFT - RIGHT;
    let plot_h = HEIGHT - 30.0;
    let col_w = plot_w / cols as f64;
    let mut base = vec![0f64; cols];
    for s in &tl.series {
        ctx.set_fill_style_str(colour(s.category));
        for (b, slot) in base.iter_mut().enumerate() {
            let v = s.bytes[b] as f64;
            if v <= 0.0 {
                continue;
            }
            let y0 = 8.0 + plot_h * (1.0 - *slot / top);
            let y1 = 8.0 + plot_h * (1.0 - (*slot + v) / top);
            ctx.fill_rect(LEFT + b as f64 * col_w, y1, col_w.max(0.5) + 0.3, y0 - y1);
            *slot += v;
        }
    }
    ctx.set_fill_style_str("#333");
    ctx.set_font("11px sans-serif");
    let _ = ctx.fill_text(&bytes(top as i64), 4.0, 16.0);
    let _ = ctx.fill_text("0 B", 4.0, 8.0 + plot_h);
    let mut x = LEFT;
    for s in &tl.series {
        ctx.set_fill_style_str(colour(s.category));
        ctx.fill_rect(x, HEIGHT - 14.0, 10.0, 10.0);
        ctx.set_fill_style_str("#333");
        let _ = ctx.fill_text(s.category.name(), x + 14.0, HEIGHT - 5.0);
        x += 24.0 + 7.0 * s.category.name().len() as f64;
    }
}

/// The panel; [`ReportState::fetch_timeline`] loads its data for each window.
#[component]
pub fn CategoryChart(st: ReportState) -> impl IntoView {
    Effect::new(move |_| {
        let Some(tl) = st.cat_data.get() else { return };
        if let Some(c) = st.cat_canvas.get() {
            draw(&c, &tl);
        }
    });
    view! {
        <section class="panel" id="by-category">
            <h2>"Memory by category"</h2>
            <p class="muted">"The timeline's window, stacked by category (each column at its highest moment)."</p>
            <canvas id="category-chart" node_ref=st.cat_canvas></canvas>
        </section>
    }
}
