//! The device overview of a snapshot with several devices: each device's peak, reserved peak,
//! OOMs and leaks in one table, the shown one marked, a row click switching to it; and why the
//! report opened where it did (the device with the OOM or the biggest problem).

use leptos::prelude::*;
use memlens_api::FileSummary;

use super::state::ReportState;
use crate::display::bytes;

/// Why the report opened on `focus` (when it is not the first device), in plain words.
fn opened_because(file: &FileSummary, focus: i64) -> Option<String> {
    let first = file.devices.first()?.device;
    let d = file.devices.iter().find(|d| d.device == focus)?;
    if focus == first {
        return None;
    }
    let with_ooms = file.devices.iter().filter(|d| d.oom_count > 0).count();
    Some(if d.oom_count > 0 && with_ooms == 1 {
        format!("Opened on cuda:{focus}: the only device with an OOM ({}).", d.oom_count)
    } else if d.oom_count > 0 {
        format!(
            "Opened on cuda:{focus}: the device with the most OOMs ({}).",
            d.oom_count
        )
    } else if !d.leaks.is_empty() {
        format!("Opened on cuda:{focus}: the device whose memory leaks fastest.")
    } else {
        format!("Opened on cuda:{focus}: the device with the highest peak.")
    })
}

#[component]
pub fn DeviceOverview(st: ReportState, file: FileSummary) -> impl IntoView {
    (file.devices.len() > 1).then(|| {
        let opened = crate::browser::query_param("device")
            .is_none()
            .then(|| file.focus_device.and_then(|f| opened_because(&file, f)))
            .flatten();
        let rows = file
            .devices
            .iter()
            .map(|d| {
                let device = d.device;
                let leak: i64 = d.leaks.iter().map(|l| l.bytes_per_iteration).sum();
                let has_oom = d.oom_count > 0;
                view! {
                    <tr class="device-row" class:shown=move || st.device.get() == device class:alert=has_oom
                        data-device=device.to_string() on:click=move |_| st.device.set(device)>
                        <td>{memlens_api::device_label(device)}</td>
                        <td class="num">{bytes(d.peak_allocated_bytes)}</td>
                        <td class="num">{bytes(d.peak_reserved_bytes)}</td>
                        <td class="num">{d.oom_count.to_string()}</td>
                        <td class="num">{if d.leaks.is_empty() { "—".to_owned() } else { format!("{} (+{}/iter)", d.leaks.len(), bytes(leak)) }}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <section class="panel" id="devices">
                <h2>{format!("{} devices", file.devices.len())}</h2>
                {opened.map(|o| view! { <p id="focus-note" class="alert-text">{o}</p> })}
                <table class="compare-table devices">
                    <thead><tr><th>"device"</th><th>"peak allocated"</th><th>"peak reserved"</th><th>"OOMs"</th><th>"leaks"</th></tr></thead>
                    <tbody>{rows}</tbody>
                </table>
            </section>
        }
    })
}
