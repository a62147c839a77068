//! What a report leads with: `#verdict`, in the first screen. For an OOM, its verdict (cause,
//! phase, biggest live category, first remedy with its number) and two links: the timeline at
//! the failure and the segment map there. Without one, the device's most important finding.

use leptos::prelude::*;
use memlens_api::{DeviceSummary, OomExplanation};

use super::state::ReportState;

fn scroll_to(id: &str) {
    if let Some(e) = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.get_element_by_id(id))
    {
        e.scroll_into_view();
    }
}

/// Zooms the timeline onto the failure, opens its explanation, and scrolls there.
fn show_failure(st: ReportState, o: &OomExplanation) {
    let event_axis = st.view.with_value(|v| v.event_axis);
    let Some(t) = (if event_axis {
        Some(o.event_index as i64)
    } else {
        o.time_us
    }) else {
        return;
    };
    let (lo, hi) = st.full_range.get_value();
    let span = ((hi - lo) / 20).max(1);
    st.view.update_value(|v| {
        v.start = (t - span).max(lo);
        v.end = (t + span / 4).min(hi).max(v.start + 1);
    });
    st.oom.set(Some(o.clone()));
    st.fetch_timeline();
    scroll_to("timeline");
}

#[component]
pub fn Verdict(st: ReportState) -> impl IntoView {
    move || {
        st.dev_summary.get().map(|s: DeviceSummary| {
            let oom = s.ooms.first().cloned();
            let is_oom = oom.is_some();
            let links = oom.map(|o| {
                let at = o.event_index;
                let o2 = o.clone();
                view! {
                    <p class="verdict-links">
                        <a href="#timeline" id="verdict-timeline" on:click=move |ev: web_sys::MouseEvent| {
                            ev.prevent_default();
                            show_failure(st, &o2);
                        }>"the timeline at the failure"</a>
                        " · "
                        <a href="#segments" id="verdict-segments" on:click=move |ev: web_sys::MouseEvent| {
                            ev.prevent_default();
                            st.load_segments_after(Some(at));
                            scroll_to("segments");
                        }>"the segment map there"</a>
                    </p>
                }
            });
            view! {
                <section class="verdict" class:alert=is_oom id="verdict">
                    <p class="verdict-text">{s.verdict.clone()}</p>
                    {links}
                </section>
            }
        })
    }
}
