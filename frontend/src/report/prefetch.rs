//! The first timeline of a report page, asked for together with its status and summary, so
//! that the first paint does not wait for the summary, the view's layout and then one more
//! round trip. It is asked for with what the link says (file, device, axis, window) and a
//! width guessed from the window; the view takes it when its own first request is the same one
//! (the device is checked on the answer). A guessed width that turns out wrong is still drawn at
//! once, and the exact width is asked for after it.

use std::cell::RefCell;

use futures_util::future::{FutureExt, LocalBoxFuture, Shared};
use leptos::task::spawn_local;
use memlens_api::{Timeline, TimelineAxis, TimelineParams};

use crate::timeline::{LEFT, RIGHT};
use crate::{browser, client};

/// The answer to come (`None`: the request failed).
pub type Pending = Shared<LocalBoxFuture<'static, Option<Timeline>>>;

struct Prefetch {
    id: String,
    params: TimelineParams,
    answer: Pending,
}

thread_local! {
    static PREFETCH: RefCell<Option<Prefetch>> = const { RefCell::new(None) };
}

/// `main`'s widest (style.css `max-width`), and the room between its width and the timeline
/// canvas': main's padding (1.5rem each side) and the panel's padding (0.8rem) and border (1px).
const MAIN_MAX: f64 = 1500.0;
const MAIN_TO_CANVAS: f64 = 76.0;

fn storage() -> Option<web_sys::Storage> {
    web_sys::window().and_then(|w| w.local_storage().ok().flatten())
}

fn viewport_width() -> Option<f64> {
    Some(web_sys::window()?.document()?.document_element()?.client_width() as f64)
}

fn remembered_key(viewport: f64) -> String {
    format!("memlens.timeline-width.{viewport}")
}

/// The timeline canvas' width the view measured, remembered for this window width (the next
/// page opened in a window this wide guesses it exactly).
pub fn remember_canvas_width(width: f64) {
    if let (Some(s), Some(vw)) = (storage(), viewport_width()) {
        let _ = s.set_item(&remembered_key(vw), &width.to_string());
    }
}

/// The canvas width the view will measure, guessed before it exists.
fn guessed_canvas_width() -> Option<f64> {
    let vw = viewport_width()?;
    let remembered = storage()
        .and_then(|s| s.get_item(&remembered_key(vw)).ok().flatten())
        .and_then(|w| w.parse::<f64>().ok());
    Some(remembered.unwrap_or(vw.min(MAIN_MAX) - MAIN_TO_CANVAS).max(400.0))
}

/// The first request as the link describes it.
fn link_params(width: usize) -> TimelineParams {
    let int = |name: &str| browser::query_param(name).and_then(|v| v.parse::<i64>().ok());
    let (start, end) = match (int("start"), int("end")) {
        (Some(s), Some(e)) if e > s => (Some(s), Some(e)),
        _ => (None, None),
    };
    TimelineParams {
        file: browser::query_param("file").and_then(|f| f.parse().ok()),
        device: int("device"),
        width: Some(width),
        axis: Some(if browser::query_param("axis").as_deref() == Some("event") {
            TimelineAxis::Event
        } else {
            TimelineAxis::Time
        }),
        start,
        end,
        // The whole range may come at the width stored at ingest when that is ready sooner
        // (a report whose frames the server has not loaded): drawn at once, then asked exactly.
        overview: start.is_none().then_some(true),
    }
}

/// Asks for report `id`'s first timeline now.
pub fn start(id: &str) {
    let Some(canvas) = guessed_canvas_width() else { return };
    let params = link_params((canvas - LEFT - RIGHT).max(50.0) as usize);
    let (rid, p) = (id.to_owned(), params);
    let answer: Pending = async move { client::timeline(&rid, &p).await.ok() }
        .boxed_local()
        .shared();
    // A shared future runs only when polled: polling it once sends the request now (before
    // the status and summary are asked for), and a task drives it to its answer.
    let _ = answer.clone().now_or_never();
    let run = answer.clone();
    spawn_local(async move {
        let _ = run.await;
    });
    PREFETCH.with(|slot| {
        *slot.borrow_mut() = Some(Prefetch {
            id: id.to_owned(),
            params,
            answer,
        })
    });
}

/// The prefetched timeline, when it was asked for as `params` asks (width aside); taken once.
/// The caller checks the answer's device, which a link without one leaves to the server.
pub fn take(id: &str, params: &TimelineParams) -> Option<Pending> {
    let p = PREFETCH.with(|slot| slot.borrow_mut().take())?;
    let same = p.id == id
        && p.params.file.unwrap_or(0) == params.file.unwrap_or(0)
        && p.params.device.is_none_or(|d| Some(d) == params.device)
        && p.params.axis == params.axis
        && p.params.start == params.start
        && p.params.end == params.end;
    same.then_some(p.answer)
}
