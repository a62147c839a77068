//! Both allocated lines on one x axis (iteration against iteration, or fractions of each run's
//! span), the gap between them shaded in the colour of the side that is higher, and each side's
//! reserved line dashed.

use leptos::prelude::*;
use memlens_api::{AlignedTimelines, CompareAxis, Comparison};

use crate::display::bytes;
use crate::report::panel_canvas;

const HEIGHT: f64 = 300.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 40.0;
const COLOUR_A: &str = "#c0562b";
const COLOUR_B: &str = "#3465a4";

fn draw(c: &web_sys::HtmlCanvasElement, t: &AlignedTimelines) {
    let Some((ctx, width)) = panel_canvas(c, HEIGHT) else {
        return;
    };
    let n = t.width.max(1);
    let top = [&t.allocated_a, &t.allocated_b, &t.reserved_a, &t.reserved_b]
        .iter()
        .flat_map(|s| s.iter().flatten().copied())
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let (pw, ph) = (width - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let x = |i: usize| LEFT + pw * (i as f64 + 0.5) / n as f64;
    let y = |v: i64| TOP + ph * (1.0 - v as f64 / top);
    // The gap, one column at a time, in the higher side's colour.
    let col = pw / n as f64;
    for i in 0..n {
        if let (Some(a), Some(b)) = (t.allocated_a[i], t.allocated_b[i]) {
            if a == b {
                continue;
            }
            ctx.set_fill_style_str(if a > b {
                "rgba(192,86,43,0.22)"
            } else {
                "rgba(52,101,164,0.22)"
            });
            let (hi, lo) = (a.max(b), a.min(b));
            ctx.fill_rect(LEFT + col * i as f64, y(hi), col + 0.3, y(lo) - y(hi));
        }
    }
    let line = |s: &[Option<i64>], colour: &str, dashed: bool| {
        ctx.begin_path();
        ctx.set_stroke_style_str(colour);
        ctx.set_line_width(if dashed { 1.0 } else { 1.8 });
        let dash = js_sys::Array::new();
        if dashed {
            dash.push(&4.0.into());
            dash.push(&3.0.into());
        }
        let _ = ctx.set_line_dash(&dash);
        let mut open = false;
        for (i, v) in s.iter().enumerate() {
            match v {
                Some(v) if open => ctx.line_to(x(i), y(*v)),
                Some(v) => {
                    ctx.move_to(x(i), y(*v));
                    open = true;
                }
                None => open = false,
            }
        }
        ctx.stroke();
    };
    line(&t.reserved_a, COLOUR_A, true);
    line(&t.reserved_b, COLOUR_B, true);
    line(&t.allocated_a, COLOUR_A, false);
    line(&t.allocated_b, COLOUR_B, false);
    let _ = ctx.set_line_dash(&js_sys::Array::new());
    // Axes: bytes on the left, iterations (or % of the run) below.
    ctx.set_fill_style_str("#333");
    ctx.set_font("11px sans-serif");
    let _ = ctx.fill_text(&bytes(top as i64), 4.0, TOP + 10.0);
    let _ = ctx.fill_text("0 B", 4.0, TOP + ph);
    ctx.set_stroke_style_str("#ccd");
    ctx.set_line_width(1.0);
    match t.axis {
        CompareAxis::Iteration => {
            let units = t.x_max.round() as usize;
            for k in 0..=units {
                let px = LEFT + pw * k as f64 / t.x_max.max(1.0);
                ctx.begin_path();
                ctx.move_to(px, TOP);
                ctx.line_to(px, TOP + ph);
                ctx.stroke();
                if k < units {
                    let label = match k {
                        0 => "before".to_owned(),
                        k if k == units - 1 => "after".to_owned(),
                        k => format!("iter {}", k - 1),
                    };
                    let _ = ctx.fill_text(&label, px + 4.0, TOP + ph + 14.0);
                }
            }
        }
        CompareAxis::NormalizedTime => {
            for k in 0..=4 {
                let px = LEFT + pw * k as f64 / 4.0;
                let _ = ctx.fill_text(&format!("{}%", k * 25), px - 8.0, TOP + ph + 14.0);
            }
        }
    }
    let legend = [(COLOUR_A, "A allocated"), (COLOUR_B, "B allocated")];
    let mut lx = LEFT;
    for (colour, name) in legend {
        ctx.set_fill_style_str(colour);
        ctx.fill_rect(lx, HEIGHT - 14.0, 10.0, 10.0);
        ctx.set_fill_style_str("#333");
        let _ = ctx.fill_text(name, lx + 14.0, HEIGHT - 5.0);
        lx += 110.0;
    }
    let _ = ctx.fill_text(
        "dashed: reserved · shaded: the gap, in the higher side's colour",
        lx,
        HEIGHT - 5.0,
    );
}

#[component]
pub fn AlignedChart(c: Comparison) -> impl IntoView {
    let canvas = NodeRef::<leptos::html::Canvas>::new();
    let t = c.timeline.clone();
    Effect::new(move |_| {
        if let Some(el) = canvas.get() {
            draw(&el, &t);
            let _ = el.set_attribute("data-drawn", "1");
        }
    });
    let axis = match c.timeline.axis {
        CompareAxis::Iteration => "Aligned iteration by iteration (both runs have iteration ranges).",
        CompareAxis::NormalizedTime => {
            "Aligned by the fraction of each run's span (no iteration ranges on both sides)."
        }
    };
    view! {
        <section class="panel" id="compare-timeline">
            <h2>"Both timelines"</h2>
            <p class="muted">{axis}</p>
            <canvas id="compare-chart" node_ref=canvas></canvas>
        </section>
    }
}
