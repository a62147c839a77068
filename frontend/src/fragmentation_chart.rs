//! The fragmentation chart under the timeline: reserved-but-free bytes, the largest free block
//! and the fragmentation index over the same x mapping as the timeline above it.

use memlens_api::FragmentationSeries;
use web_sys::CanvasRenderingContext2d;

use crate::display::bytes;
use crate::timeline::{TimelineView, LEFT, RIGHT};

/// The fragmentation chart under the timeline, sharing its x mapping.
pub fn draw_fragmentation(ctx: &CanvasRenderingContext2d, view: &TimelineView, f: &FragmentationSeries, height: f64) {
    ctx.set_fill_style_str("#ffffff");
    ctx.fill_rect(0.0, 0.0, view.width, height);
    let top = 8.0;
    let h = height - top - 20.0;
    let xs: Vec<f64> = f
        .time
        .iter()
        .zip(&f.event_index)
        .map(|(&t, &i)| view.time_to_x(if view.event_axis { i as i64 } else { t }))
        .collect();
    let ymax = f.reserved.iter().copied().max().unwrap_or(1).max(1) as f64;
    let y = |v: f64| top + h * (1.0 - v / ymax);
    ctx.save();
    ctx.begin_path();
    ctx.rect(LEFT, 0.0, view.width - LEFT - RIGHT, height);
    ctx.clip();
    // Reserved but free (area), largest free block (line), fragmentation index (dashed, 0..1).
    ctx.set_fill_style_str("rgba(230,140,20,0.35)");
    ctx.begin_path();
    ctx.move_to(xs.first().copied().unwrap_or(LEFT), y(0.0));
    for (i, &x) in xs.iter().enumerate() {
        ctx.line_to(x, y(f.free[i] as f64));
    }
    ctx.line_to(xs.last().copied().unwrap_or(LEFT), y(0.0));
    ctx.close_path();
    ctx.fill();
    ctx.set_stroke_style_str("rgba(160,80,0,0.9)");
    ctx.set_line_width(1.5);
    ctx.begin_path();
    for (i, &x) in xs.iter().enumerate() {
        if i == 0 {
            ctx.move_to(x, y(f.largest_free[i] as f64));
        } else {
            ctx.line_to(x, y(f.largest_free[i] as f64));
        }
    }
    ctx.stroke();
    ctx.set_stroke_style_str("rgba(120,0,160,0.8)");
    ctx.begin_path();
    for (i, &x) in xs.iter().enumerate() {
        let v = top + h * (1.0 - f.fragmentation_index[i]);
        if i == 0 {
            ctx.move_to(x, v);
        } else {
            ctx.line_to(x, v);
        }
    }
    ctx.stroke();
    ctx.restore();
    ctx.set_fill_style_str("#333");
    ctx.set_font("11px sans-serif");
    let _ = ctx.fill_text(&bytes(ymax as i64), 4.0, top + 8.0);
    let _ = ctx.fill_text("0", 4.0, top + h);
    let _ = ctx.fill_text(
        "orange: reserved but free · brown: largest free block · purple: fragmentation index (0–1)",
        LEFT,
        height - 4.0,
    );
}
