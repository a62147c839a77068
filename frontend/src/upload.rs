//! The upload page: drop or pick several files, watch the upload and then the processing, land
//! on the report. Reports opened in this browser are listed from local storage.

use leptos::prelude::*;
use leptos::task::spawn_local;
use wasm_bindgen::JsCast;

use crate::display::bytes;
use crate::{browser, client, recent};

fn files_of(list: Option<web_sys::FileList>) -> Vec<web_sys::File> {
    let Some(list) = list else { return Vec::new() };
    (0..list.length()).filter_map(|i| list.get(i)).collect()
}

#[component]
pub fn UploadPage() -> impl IntoView {
    let (phase, set_phase) = signal(String::new());
    let (progress, set_progress) = signal(0.0f64);
    let (error, set_error) = signal(None::<String>);
    let (dragging, set_dragging) = signal(false);
    let busy = RwSignal::new(false);
    let recent = recent::recent_reports();

    let start = move |files: Vec<web_sys::File>| {
        if files.is_empty() || busy.get_untracked() {
            return;
        }
        busy.set(true);
        set_error.set(None);
        let total: f64 = files.iter().map(|f| f.size()).sum();
        let names: Vec<String> = files.iter().map(|f| f.name()).collect();
        set_phase.set(format!("uploading {} ({})", names.join(", "), bytes(total as i64)));
        spawn_local(async move {
            // Refuse what the server would refuse, before sending gigabytes for nothing.
            if let Ok(limits) = client::limits().await {
                if total > limits.max_upload_bytes as f64 {
                    set_phase.set(String::new());
                    set_error.set(Some(format!(
                        "{} ({}) is over this server's upload limit of {} (memlens serve --max-upload)",
                        names.join(", "),
                        bytes(total as i64),
                        bytes(limits.max_upload_bytes as i64)
                    )));
                    busy.set(false);
                    return;
                }
            }
            let created = client::upload(files, move |sent, all| {
                if all > 0.0 {
                    set_progress.set(sent / all);
                }
            })
            .await;
            let created = match created {
                Ok(c) => c,
                Err(e) => {
                    set_error.set(Some(format!("upload failed: {}", e.message)));
                    busy.set(false);
                    return;
                }
            };
            set_progress.set(0.0);
            loop {
                match client::status(&created.id).await {
                    Ok(s) => {
                        if s.bytes_total > 0 {
                            set_progress.set(s.bytes_read as f64 / s.bytes_total as f64);
                        }
                        set_phase.set(format!(
                            "processing: {} ({} of {})",
                            s.stage.name(),
                            bytes(s.bytes_read as i64),
                            bytes(s.bytes_total as i64)
                        ));
                        if s.state.is_final() {
                            break;
                        }
                    }
                    Err(e) => {
                        set_error.set(Some(e.message));
                        busy.set(false);
                        return;
                    }
                }
                browser::sleep(300).await;
            }
            browser::navigate(&created.url);
        });
    };

    let on_drop = move |ev: web_sys::DragEvent| {
        ev.prevent_default();
        set_dragging.set(false);
        start(files_of(ev.data_transfer().and_then(|d| d.files())));
    };
    let on_pick = move |ev: web_sys::Event| {
        let input = ev.target().and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok());
        start(files_of(input.and_then(|i| i.files())));
    };
    // Pasted text (an OOM message, a log, a memory_summary() table, an nvidia-smi screen) is
    // uploaded as a file of its own: the server recognises it by content like any other.
    let pasted = RwSignal::new(String::new());
    let send_pasted = move |_| {
        let text = pasted.get_untracked();
        if text.trim().is_empty() {
            set_error.set(Some(
                "paste the error message, the log, memory_summary() or nvidia-smi first".into(),
            ));
            return;
        }
        let parts = js_sys::Array::of1(&wasm_bindgen::JsValue::from_str(&text));
        match web_sys::File::new_with_str_sequence(&parts, "pasted.txt") {
            Ok(f) => start(vec![f]),
            Err(_) => set_error.set(Some("this browser cannot make a file of the pasted text".into())),
        }
    };

    view! {
        <main class="upload">
            <h1>"Explain your GPU memory"</h1>
            <p class="lead">
                "Drop what your training job left behind — a PyTorch allocator snapshot, and the NVML log of the same run if you have one — or paste the out-of-memory error. memlens says why it ran out and what to change to fit, finds the peak and what is in it and what leaks each iteration; the NVML log adds what the whole GPU used, and Nsight Systems exports are charted at the driver level."
            </p>
            <p id="plan-link">"Not run yet? "<a href=memlens_api::routes::PLAN_PAGE>"Plan it from the model's config.json"</a>" — will it fit, and at what batch?"</p>
            <FormatList />
            <label
                class="dropzone"
                class:dragging=move || dragging.get()
                on:dragover=move |ev: web_sys::DragEvent| {
                    ev.prevent_default();
                    set_dragging.set(true);
                }
                on:dragleave=move |_| set_dragging.set(false)
                on:drop=on_drop
            >
                <input id="file-input" type="file" multiple=true on:change=on_pick />
                <span>"Drop files here, or click to choose"</span>
            </label>
            <div class="paste">
                <label for="paste-text">"No snapshot? Paste the CUDA out-of-memory error, the log around it, torch.cuda.memory_summary() or nvidia-smi:"</label>
                <textarea id="paste-text" rows="6" placeholder="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate …"
                    prop:value=move || pasted.get() on:input=move |ev| pasted.set(event_target_value(&ev))></textarea>
                <button id="paste-go" on:click=send_pasted>"Explain it"</button>
            </div>
            <Show when=move || !phase.get().is_empty()>
                <div class="progress">
                    <div class="phase" id="upload-phase">{move || phase.get()}</div>
                    <div class="bar"><div class="fill" style:width=move || format!("{:.1}%", progress.get() * 100.0)></div></div>
                </div>
            </Show>
            <Show when=move || error.get().is_some()>
                <p class="error" id="upload-error">{move || error.get().unwrap_or_default()}</p>
            </Show>
            <section class="recent">
                <h2>"Reports opened in this browser"</h2>
                {if recent.is_empty() {
                    view! { <p class="muted">"None yet. Reports are private to their link: nothing lists them."</p> }.into_any()
                } else {
                    view! {
                        <ul>
                            {recent
                                .into_iter()
                                .map(|r| {
                                    let href = client::report_page(&r.id);
                                    let when = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(r.opened_ms))
                                        .to_locale_string("en-GB", &wasm_bindgen::JsValue::UNDEFINED);
                                    view! {
                                        <li>
                                            <a href=href>{r.name}</a>
                                            <span class="muted">{format!(" — opened {}", String::from(when))}</span>
                                        </li>
                                    }
                                })
                                .collect_view()}
                        </ul>
                    }
                        .into_any()
                }}
            </section>
        </main>
    }
}

/// The formats memlens reads, from the format table (the same rows the server's importers are
/// registered from).
#[component]
fn FormatList() -> impl IntoView {
    view! {
        <details class="formats" id="formats">
            <summary>"Formats read (recognised by content, any file name)"</summary>
            <ul>
                {memlens_api::FORMATS
                    .iter()
                    .map(|f| view! { <li><code>{f.name}</code>{format!(": {}", f.description)}</li> })
                    .collect_view()}
            </ul>
        </details>
    }
}
