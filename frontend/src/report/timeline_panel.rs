//! The timeline panel: the flame-style canvas with its fragmentation strip, zoom (wheel,
//! drag-select, keys), pan (Shift-drag, arrows), hover and pinned bands, OOM markers, and the
//! band and OOM details under it.

use leptos::prelude::*;
use leptos::task::spawn_local;

use super::panels::{band_panel, oom_panel};
use super::state::ReportState;
use crate::browser;
use crate::timeline::{LEFT, RIGHT};

/// The mouse position in canvas pixels.
fn canvas_xy(st: ReportState, ev: &web_sys::MouseEvent) -> (f64, f64) {
    let Some(c) = st.canvas.get_untracked() else {
        return (0.0, 0.0);
    };
    let r = c.get_bounding_client_rect();
    (ev.client_x() as f64 - r.left(), ev.client_y() as f64 - r.top())
}

/// Hovering: the band under the cursor, its stack, and the segment map once the cursor rests.
fn hover(st: ReportState, x: f64, y: f64) {
    let hit = st.view.with_value(|v| v.band_at(x, y));
    let changed = st.view.with_value(|v| v.hovered != hit);
    st.view.update_value(|v| {
        v.hovered = hit;
        v.cursor_x = Some(x);
    });
    // The segment map follows the cursor once it rests for a moment (unless pinned).
    if !st.pinned.get_untracked() {
        let seq = st.seg_seq.get_value() + 1;
        st.seg_seq.set_value(seq);
        let t = st.view.with_value(|v| v.x_to_time(x));
        spawn_local(async move {
            browser::sleep(300).await;
            if st.seg_seq.get_value() == seq {
                st.load_segments_at(t);
            }
        });
    }
    if changed && !st.pinned.get_untracked() {
        let band = st.band(hit);
        if let Some(b) = &band {
            st.show_stack(b);
        }
        st.hovered.set(band);
    }
    st.redraw();
}

/// A click: an OOM marker explains itself; a band is pinned; the segment map follows.
fn click(st: ReportState, x: f64, y: f64) {
    if let Some(i) = st.view.with_value(|v| v.oom_at(x)) {
        st.oom.set(
            st.view
                .with_value(|v| v.summary.as_ref().and_then(|s| s.ooms.get(i).cloned())),
        );
        return;
    }
    let hit = st.view.with_value(|v| v.band_at(x, y));
    st.view.update_value(|v| v.pinned = hit);
    st.pinned.set(hit.is_some());
    let band = st.band(hit);
    if let Some(b) = &band {
        st.show_stack(b);
    }
    st.hovered.set(band);
    st.load_segments_at(st.view.with_value(|v| v.x_to_time(x)));
    st.redraw();
}

/// Keyboard zoom and pan; `true` when the key was one of ours.
fn key(st: ReportState, key: &str) -> bool {
    let full = st.full_range.get_value();
    let mid = st.view.with_value(|v| (v.width - LEFT - RIGHT) / 2.0 + LEFT);
    match key {
        "+" | "=" => st.view.update_value(|v| v.zoom_at(mid, 0.7, full)),
        "-" | "_" => st.view.update_value(|v| v.zoom_at(mid, 1.4, full)),
        "ArrowLeft" => st.view.update_value(|v| v.pan(-0.2)),
        "ArrowRight" => st.view.update_value(|v| v.pan(0.2)),
        "0" | "Home" => st.view.update_value(|v| {
            v.start = full.0;
            v.end = full.1;
        }),
        "Escape" => {
            st.view.update_value(|v| v.pinned = None);
            st.pinned.set(false);
            st.hovered.set(None);
        }
        _ => return false,
    }
    true
}

/// Search by address (`0x7f3a…`, memory_viz's `7f3a…_2`) or frame text; matches turn magenta.
#[component]
fn SearchBox(st: ReportState) -> impl IntoView {
    let text = RwSignal::new(String::new());
    let go = move || st.search(text.get_untracked());
    view! {
        <span class="search">
            <input id="search" placeholder="address or frame text" prop:value=move || text.get()
                on:input=move |ev| text.set(event_target_value(&ev))
                on:keydown=move |ev: web_sys::KeyboardEvent| if ev.key() == "Enter" { go() } />
            <button id="search-go" on:click=move |_| go()>"Find"</button>
            <span id="search-result" class="muted">{move || st.search.get().map(|(q, r)| match r {
                Ok(0) => format!("nothing matches “{q}”"),
                Ok(n) => format!("{n} allocation(s) match “{q}” (magenta)"),
                Err(e) => e,
            })}</span>
        </span>
    }
}

#[component]
pub fn TimelinePanel(st: ReportState) -> impl IntoView {
    let on_wheel = move |ev: web_sys::WheelEvent| {
        ev.prevent_default();
        let (x, _) = canvas_xy(st, &ev);
        let factor = if ev.delta_y() > 0.0 { 1.25 } else { 0.8 };
        let full = st.full_range.get_value();
        st.view.update_value(|v| v.zoom_at(x, factor, full));
        st.redraw();
        st.fetch_timeline();
    };
    let on_down = move |ev: web_sys::MouseEvent| {
        let (x, _) = canvas_xy(st, &ev);
        let (s, e) = st.view.with_value(|v| (v.start, v.end));
        st.drag.set_value(Some((x, ev.shift_key() || ev.button() == 1, s, e)));
        if let Some(c) = st.canvas.get_untracked() {
            let _ = c.focus();
        }
    };
    let on_move = move |ev: web_sys::MouseEvent| {
        let (x, y) = canvas_xy(st, &ev);
        match st.drag.get_value() {
            Some((x0, true, s, e)) => {
                st.view.update_value(|v| {
                    let dt = ((x0 - x) / (v.width - LEFT - RIGHT) * (e - s) as f64) as i64;
                    v.start = s + dt;
                    v.end = e + dt;
                });
                st.redraw();
            }
            Some((x0, false, _, _)) => {
                st.view.update_value(|v| v.selection = Some((x0, x)));
                st.redraw();
            }
            None => hover(st, x, y),
        }
    };
    let on_up = move |ev: web_sys::MouseEvent| {
        let (x, y) = canvas_xy(st, &ev);
        let Some((x0, panning, _, _)) = st.drag.get_value() else {
            return;
        };
        st.drag.set_value(None);
        if panning {
            st.fetch_timeline();
            return;
        }
        st.view.update_value(|v| v.selection = None);
        if (x - x0).abs() > 5.0 {
            st.view.update_value(|v| {
                let (a, b) = (v.x_to_time(x0.min(x)), v.x_to_time(x0.max(x)));
                v.start = a;
                v.end = b.max(a + 2);
            });
            st.redraw();
            st.fetch_timeline();
            return;
        }
        click(st, x, y);
    };
    let on_leave = move |_| {
        st.view.update_value(|v| v.cursor_x = None);
        st.redraw();
    };
    let on_key = move |ev: web_sys::KeyboardEvent| {
        if key(st, ev.key().as_str()) {
            ev.prevent_default();
            st.redraw();
            st.fetch_timeline();
        }
    };
    let reset = move |_| {
        let full = st.full_range.get_value();
        st.view.update_value(|v| {
            v.start = full.0;
            v.end = full.1;
        });
        st.redraw();
        st.fetch_timeline();
    };
    view! {
        <section class="panel">
            <div class="toolbar">
                <button on:click=reset>"Reset zoom"</button>
                <label>
                    <input type="checkbox" id="event-axis" prop:checked=move || st.event_axis.get() on:change=move |ev| {
                        st.event_axis.set(event_target_checked(&ev));
                    } />
                    " event order"
                </label>
                <span class="muted">"wheel or drag to zoom · Shift-drag or ←/→ to pan · +/− · 0 resets · click pins"</span>
                <SearchBox st=st />
            </div>
            <div class="canvas-wrap">
                <canvas
                    id="timeline"
                    node_ref=st.canvas
                    tabindex="0"
                    on:wheel=on_wheel
                    on:mousedown=on_down
                    on:mousemove=on_move
                    on:mouseup=on_up
                    on:mouseleave=on_leave
                    on:keydown=on_key
                ></canvas>
                <canvas id="fragmentation" node_ref=st.frag_canvas></canvas>
            </div>
            {move || st.hovered.get().map(|b| band_panel(&b, st.view.with_value(|v| (v.origin, v.event_axis)), st.stack_frames.get(), st.show_internal))}
            {move || st.oom.get().map(|o| oom_panel(&o, st.oom))}
        </section>
    }
}
