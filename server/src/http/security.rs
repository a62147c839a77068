//! Response headers that keep what memlens serves from being turned against its readers: a
//! Content-Security-Policy the UI works under (scripts only from this origin plus the page's
//! own inline module loader, pinned by its hash; WebAssembly compilation; no framing, plugins or
//! foreign connections), `X-Content-Type-Options: nosniff` so nothing is run as a type it was
//! not served as, and `Referrer-Policy: no-referrer` so report links do not leak.

use axum::http::{header, HeaderValue};
use base64::Engine;
use sha2::{Digest, Sha256};

/// `'sha256-…'` sources for every inline `<script>` of the page (the bundle's module loader).
fn inline_script_hashes(html: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(open) = rest.find("<script") {
        let after = &rest[open..];
        let Some(tag_end) = after.find('>') else { break };
        let tag = &after[..tag_end];
        let body_start = tag_end + 1;
        let Some(close) = after[body_start..].find("</script>") else {
            break;
        };
        if !tag.contains("src=") {
            let body = &after[body_start..body_start + close];
            let digest = Sha256::digest(body.as_bytes());
            out.push(format!(
                "'sha256-{}'",
                base64::engine::general_purpose::STANDARD.encode(digest)
            ));
        }
        rest = &after[body_start + close..];
    }
    out
}

/// The Content-Security-Policy for pages built from `index_html` (the UI's index page).
pub fn content_security_policy(index_html: &str) -> HeaderValue {
    let scripts = inline_script_hashes(index_html).join(" ");
    let policy = format!(
        "default-src 'self'; script-src 'self' 'wasm-unsafe-eval' {scripts}; style-src 'self' 'unsafe-inline'; \
         img-src 'self' data: blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; \
         form-action 'self'; frame-ancestors 'none'"
    );
    HeaderValue::from_str(&policy).unwrap_or_else(|_| HeaderValue::from_static("default-src 'self'"))
}

/// The headers every response carries, as (name, value).
pub fn headers(index_html: &str) -> [(header::HeaderName, HeaderValue); 3] {
    [
        (header::CONTENT_SECURITY_POLICY, content_security_policy(index_html)),
        (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
        (header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_scripts_are_pinned_by_hash_and_external_ones_by_origin() {
        let html = "<head><script type=\"module\">\nimport init from '/a.js';\n</script>\
                    <script src=\"/b.js\"></script></head>";
        let hashes = inline_script_hashes(html);
        assert_eq!(hashes.len(), 1);
        let want = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(b"\nimport init from '/a.js';\n"));
        assert_eq!(hashes[0], format!("'sha256-{want}'"));
        let csp = content_security_policy(html);
        let csp = csp.to_str().expect("ascii");
        assert!(
            csp.contains("frame-ancestors 'none'") && csp.contains(&hashes[0]),
            "{csp}"
        );
        assert!(!csp.contains("'unsafe-eval'") && !csp.contains("script-src 'self' 'unsafe-inline'"));
    }
}
