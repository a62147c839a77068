//! Details under the timeline: the hovered or pinned band with its stack (internal frames
//! folded), and an OOM's explanation.

use leptos::prelude::*;
use memlens_api::{Band, FrameView, OomExplanation};

use crate::display::{axis_time, bytes, stack_colour};

fn frames_view(frames: Vec<FrameView>, show_internal: RwSignal<bool>) -> impl IntoView {
    let hidden = frames.iter().filter(|f| f.internal).count();
    view! {
        <ol class="stack">
            {move || {
                let all = show_internal.get();
                frames.iter().filter(|f| all || !f.internal).map(|f| view! { <li class:internal=f.internal>{f.frame.clone()}</li> }).collect_view()
            }}
        </ol>
        {(hidden > 0).then(|| view! {
            <button class="link" on:click=move |_| show_internal.update(|v| *v = !*v)>
                {move || if show_internal.get() { format!("fold {hidden} internal frames") } else { format!("show {hidden} internal frames") }}
            </button>
        })}
    }
}

pub fn band_panel(
    b: &Band,
    (origin, event_axis): (i64, bool),
    frames: Option<(u32, Vec<FrameView>)>,
    show_internal: RwSignal<bool>,
) -> impl IntoView {
    let life = format!(
        "{} → {}",
        b.t_alloc
            .map_or_else(|| "before recording".to_owned(), |t| axis_time(t, origin, event_axis)),
        b.t_free.map_or_else(
            || "still live at the end".to_owned(),
            |t| axis_time(t, origin, event_axis)
        ),
    );
    let frames = frames.filter(|(s, _)| *s == b.stack_id).map(|(_, f)| f);
    view! {
        <div class="detail" id="band-detail">
            <div class="swatch" style:background=stack_colour(b.stack_id, 0.9)></div>
            <b>{bytes(b.size)}</b>
            {format!(" at 0x{:x} · {life} · stream {} · stack #{}", b.addr, b.stream, b.stack_id)}
            {b.user_metadata.clone().map(|m| view! { <p class="user-metadata">{format!("user metadata: {m}")}</p> })}
            {match frames {
                Some(f) if f.is_empty() => view! { <p class="muted">"no stack recorded (allocated before recording, or recorded without context)"</p> }.into_any(),
                Some(f) => frames_view(f, show_internal).into_any(),
                None => view! { <p class="muted">"loading the stack…"</p> }.into_any(),
            }}
        </div>
    }
}

pub fn oom_panel(o: &OomExplanation, sig: RwSignal<Option<OomExplanation>>) -> impl IntoView {
    view! {
        <div class="detail oom" id="oom-detail">
            <button class="close" on:click=move |_| sig.set(None)>"×"</button>
            <h3>{format!("Out of memory: {} requested ({})", bytes(o.requested_bytes), o.cause)}</h3>
            <p>{format!(
                "reserved {} · allocated {} · reserved but free {} · largest free block {}{}",
                bytes(o.reserved_bytes),
                bytes(o.allocated_bytes),
                bytes(o.reserved_free_bytes),
                bytes(o.largest_free_block_bytes),
                o.device_free_bytes.map(|d| format!(" · device free {}", bytes(d))).unwrap_or_default()
            )}</p>
            <p class="remedy">{o.remedy.clone()}</p>
            <h4>"Live at the failure"</h4>
            <ul>{o.live_stacks.iter().map(|g| view! { <li>{format!("{} in {} allocation(s) — {}", bytes(g.bytes), g.count, g.stack.first().cloned().unwrap_or_else(|| "(no stack)".into()))}</li> }).collect_view()}</ul>
        </div>
    }
}
