//! The reports opened in this browser, kept in its local storage: the upload page lists them
//! (a server keeps no list of reports, whose links are capabilities).

/// Reports opened in this browser, newest first (there is no global list).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct RecentReport {
    pub id: String,
    pub name: String,
    pub opened_ms: f64,
}

const RECENT_KEY: &str = "memlens.recent";

/// The list kept in this browser's local storage (empty when there is none).
pub fn recent_reports() -> Vec<RecentReport> {
    web_sys::window()
        .and_then(|w| w.local_storage().ok().flatten())
        .and_then(|s| s.get_item(RECENT_KEY).ok().flatten())
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// Puts a report first in the list (at most 50 kept).
pub fn remember_report(id: &str, name: &str) {
    let mut list = recent_reports();
    list.retain(|r| r.id != id);
    list.insert(
        0,
        RecentReport {
            id: id.to_owned(),
            name: name.to_owned(),
            opened_ms: js_sys::Date::now(),
        },
    );
    list.truncate(50);
    keep(&list);
}

/// Takes a report off the list (one the server no longer has).
pub fn forget_report(id: &str) {
    let mut list = recent_reports();
    list.retain(|r| r.id != id);
    keep(&list);
}

fn keep(list: &[RecentReport]) {
    if let (Some(s), Ok(t)) = (
        web_sys::window().and_then(|w| w.local_storage().ok().flatten()),
        serde_json::to_string(list),
    ) {
        let _ = s.set_item(RECENT_KEY, &t);
    }
}
