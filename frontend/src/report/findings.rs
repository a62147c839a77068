//! What the analyses found for a device: what is live at the peak — by the model code that
//! asked, or by whole folded stack, each stack one click from its frames and its full raw
//! stack, each empty one with why — and leak candidates; the OOMs, with their remedies, have a
//! section of their own right under the verdict ([`ooms_section`]).

use leptos::prelude::*;
use leptos::task::spawn_local;
use memlens_api::{DeviceSummary, FrameView, StackGroup};

use super::state::ReportState;
use crate::client;
use crate::display::bytes;

/// One stack group: its headline, and on click its folded frames and the whole raw stack.
#[component]
fn GroupItem(st: ReportState, g: StackGroup) -> impl IntoView {
    let open = RwSignal::new(false);
    let full = RwSignal::new(None::<Vec<FrameView>>);
    let id = g.stack_id;
    let load_full = move |_| {
        let Some(stack) = id else { return };
        let (report, file) = (st.id.get_value(), st.file.get_value());
        spawn_local(async move {
            if let Ok(f) = client::stack(&report, file, stack).await {
                full.set(Some(f));
            }
        });
    };
    let headline = g.headline();
    let frames = g.stack.clone();
    let has_frames = !frames.is_empty();
    view! {
        <li class="group" class:no-stack=!has_frames>
            <b>{bytes(g.bytes)}</b>
            {format!(" in {} allocation(s) — ", g.count)}
            <span class="headline">{headline}</span>
            {has_frames.then(|| view! {
                " "
                <button class="link" on:click=move |_| open.update(|o| *o = !*o)>{move || if open.get() { "hide stack" } else { "stack" }}</button>
            })}
            {move || open.get().then(|| view! {
                <ol class="stack">{frames.iter().map(|f| view! { <li>{f.clone()}</li> }).collect_view()}</ol>
                {move || match full.get() {
                    None => view! { <button class="link" on:click=load_full>"full stack (every frame, raw)"</button> }.into_any(),
                    Some(f) => view! {
                        <ol class="stack full">{f.iter().map(|x| view! { <li class:internal=x.internal>{x.frame.clone()}</li> }).collect_view()}</ol>
                    }.into_any(),
                }}
            })}
        </li>
    }
}

#[component]
fn AtThePeak(st: ReportState, s: DeviceSummary) -> impl IntoView {
    let by_code = RwSignal::new(!s.peak_modules.is_empty());
    let modules = s.peak_modules.clone();
    let groups = s.peak_stacks.clone();
    view! {
        <div class="toolbar">
            <h2>"At the peak"</h2>
            {(!modules.is_empty()).then(|| view! {
                <label><input type="radio" name="peak-by" id="peak-by-code" prop:checked=move || by_code.get() on:change=move |_| by_code.set(true) />" by model code"</label>
                <label><input type="radio" name="peak-by" id="peak-by-stack" prop:checked=move || !by_code.get() on:change=move |_| by_code.set(false) />" by stack"</label>
            })}
        </div>
        {move || if by_code.get() {
            view! {
                <ul class="groups" id="peak-modules">
                    {modules.iter().map(|m| view! {
                        <li><b>{bytes(m.bytes)}</b>{format!(" in {} allocation(s) — ", m.count)}
                            <span class="headline">{m.module.clone().unwrap_or_else(|| "no model-code frame (torch internals, autograd, or no stack)".to_owned())}</span></li>
                    }).collect_view()}
                </ul>
            }.into_any()
        } else {
            view! {
                <ul class="groups" id="peak-stacks">
                    {groups.iter().map(|g| view! { <GroupItem st=st g=g.clone() /> }).collect_view()}
                </ul>
            }.into_any()
        }}
    }
}

/// Each OOM right under the verdict: cause, phase, how much of the batch fits, and every
/// remedy with what it saves at the failure.
pub fn ooms_section(s: &DeviceSummary) -> impl IntoView {
    view! {
        <section class="panel" id="ooms">
            <h2>"OOMs"</h2>
            {if s.ooms.is_empty() {
                view! { <p class="muted">"No allocation failed."</p> }.into_any()
            } else {
                view! {
                    <ul class="groups">
                        {s.ooms.iter().map(|o| view! {
                            <li><b>{format!("{} · {} · {} requested", o.cause, o.phase.describe(), bytes(o.requested_bytes))}</b>
                                {o.fits.as_ref().map(|f| format!(" · {:.0} % of the batch fits", f.batch_fraction * 100.0))}
                                {format!(" — {}", o.remedy)}
                                {(!o.live_categories.is_empty()).then(|| view! {
                                    <p class="muted">{format!("live at the failure: {}", o.live_categories.iter()
                                        .map(|c| format!("{} {}", c.category.name(), bytes(c.bytes)))
                                        .collect::<Vec<_>>().join(", "))}</p>
                                })}
                                <ul class="remedies">{o.remedies.iter().filter(|r| r.saves_bytes > 0).map(|r| view! {
                                    <li>{format!("saves {} — {}", bytes(r.saves_bytes), r.note)}</li>
                                }).collect_view()}</ul>
                            </li>
                        }).collect_view()}
                    </ul>
                }.into_any()
            }}
        </section>
    }
}

pub fn details(st: ReportState, s: &DeviceSummary) -> impl IntoView {
    view! {
        <section class="panel" id="findings">
            <AtThePeak st=st s=s.clone() />
            <h2>"Leak candidates"</h2>
            {if s.leaks.is_empty() {
                let why = match &s.iterations.note {
                    Some(note) => format!("No leak candidate: {note}."),
                    None => format!("No allocation piled up across iterations ({} iterations from {}).", s.iterations.count, s.iterations.found_from()),
                };
                view! { <p class="muted" id="no-leaks">{why}</p> }.into_any()
            } else {
                view! {
                    {s.iterations.note.clone().map(|n| view! { <p class="muted">{n}</p> })}
                    <ul class="groups" id="leaks">
                        {s.leaks.iter().map(|l| view! {
                            <li><b>{format!("+{} per iteration", bytes(l.bytes_per_iteration))}</b>
                                {format!(" — {} live in {} allocation(s) over {} iterations — {}", bytes(l.bytes), l.count, l.iterations_seen, l.headline())}</li>
                        }).collect_view()}
                    </ul>
                }.into_any()
            }}
            {(!s.pending_free_stalls.is_empty()).then(|| view! {
                <h2>"Frees stalled on another stream"</h2>
                <p class="muted">{format!("Freed while another stream still used them (record_stream): up to {} at once could not be reused.", bytes(s.pending_free_peak_bytes))}</p>
                <ul class="groups" id="stalls">
                    {s.pending_free_stalls.iter().map(|st| view! {
                        <li><b>{format!("{} × up to {}", st.count, bytes(st.largest_block_bytes))}</b>
                            {format!(" waited up to {:.1} ms (mean {:.1} ms) — ", st.longest_wait_us as f64 / 1000.0, st.mean_wait_us as f64 / 1000.0)}
                            <span class="headline">{memlens_api::stack_headline(st.module.as_deref(), &st.stack, None, None)}</span></li>
                    }).collect_view()}
                </ul>
            })}
        </section>
    }
}
