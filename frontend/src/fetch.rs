//! Talking to the memlens server: JSON GETs (taken over from the page's early requests) and
//! uploads with progress, failing with the server's own message. The browser only ever
//! receives summaries and level-of-detail answers.

use serde::de::DeserializeOwned;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

/// A failed request, with the server's own message when it sent one.
#[derive(Debug, Clone, PartialEq)]
pub struct FetchError {
    /// HTTP status (0: the request never completed).
    pub status: u16,
    pub message: String,
}

fn js_err(e: JsValue) -> FetchError {
    FetchError {
        status: 0,
        message: e.as_string().unwrap_or_else(|| format!("{e:?}")),
    }
}

/// The request for `url` that the page's loader sent before the app started (index.html's
/// `memlensEarly`), taken once.
fn early_request(window: &web_sys::Window, url: &str) -> Option<js_sys::Promise> {
    let early = js_sys::Reflect::get(window, &JsValue::from_str("memlensEarly")).ok()?;
    if !early.is_object() {
        return None;
    }
    let key = JsValue::from_str(url);
    let request = js_sys::Reflect::get(&early, &key)
        .ok()?
        .dyn_into::<js_sys::Promise>()
        .ok()?;
    let _ = js_sys::Reflect::delete_property(early.unchecked_ref::<js_sys::Object>(), &key);
    Some(request)
}

/// GETs `url` (or takes the loader's request for it) and decodes JSON; non-2xx answers become
/// errors carrying `error` from the body.
pub async fn get_json<T: DeserializeOwned>(url: &str) -> Result<T, FetchError> {
    let window = web_sys::window().ok_or_else(|| js_err("no window".into()))?;
    let request = early_request(&window, url).unwrap_or_else(|| window.fetch_with_str(url));
    let resp: web_sys::Response = JsFuture::from(request)
        .await
        .map_err(js_err)?
        .dyn_into()
        .map_err(js_err)?;
    let status = resp.status();
    let text = JsFuture::from(resp.text().map_err(js_err)?)
        .await
        .map_err(js_err)?
        .as_string()
        .unwrap_or_default();
    if status == 202 {
        return Err(error_of(status, text));
    }
    answer_of(status, text)
}

/// A non-2xx answer as an error carrying `error` from its body (else the body).
fn error_of(status: u16, text: String) -> FetchError {
    let message = serde_json::from_str::<memlens_api::ErrorBody>(&text)
        .map(|e| e.error)
        .unwrap_or(text);
    FetchError { status, message }
}

/// An answer decoded as JSON, or the error it carries.
fn answer_of<T: DeserializeOwned>(status: u16, text: String) -> Result<T, FetchError> {
    if !(200..300).contains(&status) {
        return Err(error_of(status, text));
    }
    serde_json::from_str(&text).map_err(|e| FetchError {
        status,
        message: format!("unexpected answer: {e}"),
    })
}

/// A promise that settles when `xhr` has ended, whatever its outcome.
fn load_end(xhr: &web_sys::XmlHttpRequest) -> js_sys::Promise {
    js_sys::Promise::new(&mut |resolve, _reject| {
        let r = resolve.clone();
        let cb = Closure::<dyn FnMut()>::new(move || {
            let _ = r.call0(&JsValue::NULL);
        });
        xhr.set_onloadend(Some(cb.as_ref().unchecked_ref()));
        cb.forget();
    })
}

/// Uploads files as multipart to `url`; `on_progress(sent, total)` follows the upload.
pub async fn upload_to(
    url: &str,
    files: Vec<web_sys::File>,
    on_progress: impl Fn(f64, f64) + 'static,
) -> Result<memlens_api::Created, FetchError> {
    let form = web_sys::FormData::new().map_err(js_err)?;
    for f in &files {
        form.append_with_blob_and_filename("file", f, &f.name())
            .map_err(js_err)?;
    }
    let xhr = web_sys::XmlHttpRequest::new().map_err(js_err)?;
    xhr.open("POST", url).map_err(js_err)?;
    let progress = Closure::<dyn FnMut(web_sys::ProgressEvent)>::new(move |e: web_sys::ProgressEvent| {
        on_progress(e.loaded(), e.total());
    });
    if let Ok(up) = xhr.upload() {
        up.set_onprogress(Some(progress.as_ref().unchecked_ref()));
    }
    let done = load_end(&xhr);
    xhr.send_with_opt_form_data(Some(&form)).map_err(js_err)?;
    JsFuture::from(done).await.map_err(js_err)?;
    drop(progress);
    let status = xhr.status().unwrap_or(0);
    let text = xhr.response_text().ok().flatten().unwrap_or_default();
    if status != 201 {
        let message = serde_json::from_str::<memlens_api::ErrorBody>(&text)
            .map(|e| e.error)
            .unwrap_or_else(|_| {
                if status == 0 {
                    "the upload did not complete".into()
                } else {
                    text
                }
            });
        return Err(FetchError { status, message });
    }
    serde_json::from_str(&text).map_err(|e| FetchError {
        status,
        message: format!("unexpected answer: {e}"),
    })
}

/// PATCHes `body` (JSON) to `url` with the owner token (`X-Delete-Token`) and decodes the JSON
/// answer; non-2xx answers become errors carrying `error` from the body.
pub async fn patch_json<T: DeserializeOwned>(url: &str, token: &str, body: &str) -> Result<T, FetchError> {
    let xhr = web_sys::XmlHttpRequest::new().map_err(js_err)?;
    xhr.open("PATCH", url).map_err(js_err)?;
    xhr.set_request_header("Content-Type", "application/json")
        .map_err(js_err)?;
    xhr.set_request_header("X-Delete-Token", token).map_err(js_err)?;
    let done = load_end(&xhr);
    xhr.send_with_opt_str(Some(body)).map_err(js_err)?;
    JsFuture::from(done).await.map_err(js_err)?;
    answer_of(
        xhr.status().unwrap_or(0),
        xhr.response_text().ok().flatten().unwrap_or_default(),
    )
}
