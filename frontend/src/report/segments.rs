//! The segment map: the allocator's segments and blocks at the cursor's instant.

use leptos::prelude::*;
use memlens_api::{BlockState, SegmentMap};

use super::context_2d;
use super::segment_layout::{bar_pixels, canvas_width, LABEL_WIDTH, SEGMENT_ROWS};
use super::state::ReportState;
use crate::display::{axis_time, bytes, stack_colour};

const SEG_ROW: f64 = 14.0;
/// The segment map panel: a summary line and the drawing, following the timeline's cursor.
#[component]
pub fn SegmentPanel(st: ReportState) -> impl IntoView {
    // Redraws when a new map arrives.
    Effect::new(move |_| {
        let Some(map) = st.seg_map.get() else { return };
        if let Some(c) = st.seg_canvas.get() {
            draw_segments(&c, &map);
        }
    });
    view! {
        <section class="panel">
            <h2>"Segment map"</h2>
            {move || st.seg_map.get().map(|m| {
                let when = match (m.event_index, m.time_us) {
                    (Some(i), Some(t)) => format!("after entry {i} (t = {})", axis_time(t, st.view.with_value(|v| v.origin), false)),
                    (Some(i), None) => format!("after entry {i}"),
                    _ => "before the first entry".to_owned(),
                };
                view! {
                    <p class="muted" id="segment-summary">
                        {format!("{when}: {} segments, {} reserved, {} active, {} free (largest {}), {} rounding waste, {} pending free — follows the cursor; click pins",
                            m.segment_count, bytes(m.reserved_bytes), bytes(m.active_bytes), bytes(m.free_bytes), bytes(m.largest_free_block_bytes), bytes(m.rounding_waste_bytes), bytes(m.pending_free_bytes))}
                    </p>
                }
            })}
            <canvas id="segments" node_ref=st.seg_canvas></canvas>
        </section>
    }
}

/// Segments as bars (rows sorted by address, width relative to the largest), their blocks
/// coloured by state: allocated (by stack), pending free (red), free gaps (light), rounding
/// waste (dark sliver at the block's end).
fn draw_segments(c: &web_sys::HtmlCanvasElement, m: &SegmentMap) {
    let Some(ctx) = context_2d(c) else { return };
    let width = canvas_width(c);
    let rows = m.segments.len().min(SEGMENT_ROWS);
    let height = (rows as f64 * SEG_ROW + 24.0).max(40.0);
    c.set_width(width as u32);
    c.set_height(height as u32);
    ctx.set_fill_style_str("#fff");
    ctx.fill_rect(0.0, 0.0, width, height);
    let mut segs: Vec<&memlens_api::SegmentView> = m.segments.iter().collect();
    segs.sort_by(|a, b| b.size.cmp(&a.size).then(a.address.cmp(&b.address)));
    let largest = segs.first().map_or(1, |s| s.size).max(1) as f64;
    let usable = bar_pixels(Some(c)) as f64;
    ctx.set_font("10px sans-serif");
    for (r, s) in segs.iter().take(rows).enumerate() {
        let y = 4.0 + r as f64 * SEG_ROW;
        ctx.set_fill_style_str("#333");
        let _ = ctx.fill_text(
            &format!("{} {}", bytes(s.size), if s.expandable { "exp" } else { "" }),
            2.0,
            y + 10.0,
        );
        let x0 = LABEL_WIDTH;
        for b in &s.blocks {
            let bx = x0 + (b.address - s.address) as f64 / largest * usable;
            let bw = (b.size as f64 / largest * usable).max(0.5);
            let fill = match b.state {
                BlockState::Inactive => "#e8ebf0".to_owned(),
                BlockState::ActivePendingFree => "#d62728".to_owned(),
                BlockState::ActiveAllocated => stack_colour(b.stack_id, 0.85),
            };
            ctx.set_fill_style_str(&fill);
            ctx.fill_rect(bx, y, bw, SEG_ROW - 3.0);
            if b.state != BlockState::Inactive && b.size > b.requested_bytes {
                let ww = ((b.size - b.requested_bytes) as f64 / largest * usable).max(0.5);
                ctx.set_fill_style_str("#222");
                ctx.fill_rect(bx + bw - ww, y, ww, SEG_ROW - 3.0);
            }
        }
    }
    if m.segment_count > rows {
        ctx.set_fill_style_str("#555");
        let _ = ctx.fill_text(
            &format!("… {} smaller segments not drawn", m.segment_count - rows),
            2.0,
            height - 6.0,
        );
    }
}
