//! The built frontend (`--static-dir`): each asset's gzipped twin (written beside it by
//! `memlens-bundle`) goes to clients that accept gzip, and assets named by their
//! content hash (`memlens-frontend-<hash>.js`, `…_bg.wasm`, `style-<hash>.css`) are cached
//! for a year without revalidation: a new build has new names. Everything else (the page
//! itself, unknown paths answered with it) is revalidated on every load.

use std::path::Path;

use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use tower_http::services::{ServeDir, ServeFile};

/// How long a content-hashed asset is fresh (it never changes under its name).
const IMMUTABLE: &str = "public, max-age=31536000, immutable";
const REVALIDATE: &str = "no-cache";

/// The static files of `dir`, unknown paths answered with `dir/index.html`.
pub fn service<S: Clone + Send + Sync + 'static>(dir: &Path) -> Router<S> {
    let index = dir.join("index.html");
    Router::new()
        .fallback_service(ServeDir::new(dir).precompressed_gzip().fallback(ServeFile::new(index)))
        .layer(axum::middleware::from_fn(cache_policy))
}

async fn cache_policy(req: Request, next: Next) -> Response {
    let hashed = is_content_hashed(req.uri().path());
    let mut res = next.run(req).await;
    if res.status().is_success() {
        let policy = if hashed { IMMUTABLE } else { REVALIDATE };
        res.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static(policy));
    }
    res
}

/// Whether a path names a file by its content: a `-` then 16 hex digits, then `.` or `_`
/// (`memlens-bundle`'s `name-<hash>.ext` and `name-<hash>_bg.wasm`).
fn is_content_hashed(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or("");
    name.rsplit_once('-').is_some_and(|(_, rest)| {
        rest.len() > 16
            && rest.as_bytes()[..16].iter().all(u8::is_ascii_hexdigit)
            && matches!(rest.as_bytes()[16], b'.' | b'_')
    })
}

#[cfg(test)]
mod tests {
    use super::is_content_hashed;

    #[test]
    fn only_names_carrying_a_content_hash_are_immutable() {
        for hashed in [
            "/memlens-frontend-c18ffd8493cfd427.js",
            "/memlens-frontend-c18ffd8493cfd427_bg.wasm",
            "/memlens-frontend-c18ffd8493cfd427_bg.wasm.gz",
            "/style-3c3d954f41961701.css",
        ] {
            assert!(is_content_hashed(hashed), "{hashed}");
        }
        for plain in [
            "/",
            "/index.html",
            "/r/0123456789abcdef0123456789abcdef",
            "/favicon.ico",
            "/style-3c3d954f4196170.css",
            "/style-3c3d954f41961701",
            "/x-3c3d954f4196170z.js",
        ] {
            assert!(!is_content_hashed(plain), "{plain}");
        }
    }
}
