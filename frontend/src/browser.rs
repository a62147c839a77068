//! The page's browser around it: timers, the next painted frame, and the view state kept in
//! the URL's query (so a link always carries the current view).

use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

/// Sleeps `ms` milliseconds.
pub async fn sleep(ms: i32) {
    let p = js_sys::Promise::new(&mut |resolve, _| {
        if let Some(w) = web_sys::window() {
            let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms);
        }
    });
    let _ = JsFuture::from(p).await;
}

/// Waits until the browser has painted the next frame: a timer set from that frame's
/// animation callback, which runs once the frame is on its way to the screen.
pub async fn after_next_paint() {
    let p = js_sys::Promise::new(&mut |resolve, _| {
        let Some(w) = web_sys::window() else { return };
        let frame = Closure::once_into_js(move || {
            if let Some(w) = web_sys::window() {
                let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, 0);
            }
        });
        let _ = w.request_animation_frame(frame.unchecked_ref());
    });
    let _ = JsFuture::from(p).await;
}

/// A query parameter of the current URL.
pub fn query_param(name: &str) -> Option<String> {
    let search = web_sys::window()?.location().search().ok()?;
    web_sys::UrlSearchParams::new_with_str(&search).ok()?.get(name)
}

/// Replaces the URL's query (no navigation), so the link always carries the current view.
pub fn set_query(pairs: &[(&str, String)]) {
    let Some(w) = web_sys::window() else { return };
    let path = w.location().pathname().unwrap_or_default();
    let q: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", js_sys::encode_uri_component(v)))
        .collect();
    let url = if q.is_empty() {
        path
    } else {
        format!("{path}?{}", q.join("&"))
    };
    if let Ok(h) = w.history() {
        let _ = h.replace_state_with_url(&JsValue::NULL, "", Some(&url));
    }
}

/// Opens another page.
pub fn navigate(url: &str) {
    if let Some(w) = web_sys::window() {
        let _ = w.location().set_href(url);
    }
}
