//! What goes out on the wire: built assets and API answers gzipped, assets cached by hash.

use super::*;

/// A GET on loopback with `headers`, answered in full: (head, body).
fn raw_get(s: &Server, path: &str, headers: &str) -> (String, Vec<u8>) {
    use std::io::{Read, Write};
    let addr = s.base.trim_start_matches("http://");
    let mut c = std::net::TcpStream::connect(addr).expect("connect");
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\n\r\n"
    )
    .expect("request");
    let mut answer = Vec::new();
    c.read_to_end(&mut answer).expect("answer");
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n").expect("head") + 4;
    (
        String::from_utf8_lossy(&answer[..split]).to_lowercase(),
        answer[split..].to_vec(),
    )
}

#[test]
fn built_assets_go_out_gzipped_and_cached_by_their_content_hash() {
    let dir = tmpdir("gzip");
    let s = Server::serve_on(&dir, &[]);
    // An asset named by its hash and its gzipped twin, as the frontend build writes them
    // (`memlens-bundle`).
    let name = "app-0123456789abcdef_bg.wasm";
    let wasm: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let asset = dir.join("dist").join(name);
    std::fs::write(&asset, &wasm).expect("asset");
    let gz = Command::new("gzip")
        .args(["-9", "-k"])
        .arg(&asset)
        .status()
        .expect("gzip");
    assert!(gz.success());
    let gzipped = std::fs::read(dir.join("dist").join(format!("{name}.gz"))).expect("gz");
    let (head, body) = raw_get(&s, &format!("/{name}"), "Accept-Encoding: gzip, deflate, br\r\n");
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("content-encoding: gzip"), "{head}");
    assert!(head.contains("content-type: application/wasm"), "{head}");
    assert!(
        head.contains("cache-control: public, max-age=31536000, immutable"),
        "{head}"
    );
    assert_eq!(body, gzipped);
    assert!(body.len() < wasm.len() / 5);
    // A client that does not accept gzip gets the file as it is.
    let (head, body) = raw_get(&s, &format!("/{name}"), "");
    assert!(!head.contains("content-encoding"), "{head}");
    assert_eq!(body, wasm);
    // The page itself (and any path it answers) is revalidated on every load.
    for page in ["/", "/index.html", "/no-such-file"] {
        let (head, _) = raw_get(&s, page, "");
        assert!(head.starts_with("http/1.1 200"), "{page}: {head}");
        assert!(head.contains("cache-control: no-cache"), "{page}: {head}");
    }
}

/// The body of a `Transfer-Encoding: chunked` answer.
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = raw.windows(2).position(|w| w == b"\r\n").expect("chunk size line");
        let size_text = std::str::from_utf8(&raw[..line_end]).expect("chunk size");
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16).expect("hex size");
        raw = &raw[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&raw[..size]);
        raw = &raw[size + 2..];
    }
}

#[test]
fn api_answers_go_out_gzipped_to_clients_that_accept_gzip() {
    use std::io::Read;
    let dir = tmpdir("json-gzip");
    let s = Server::serve_on(&dir, &[]);
    let (code, v) = upload(
        &s,
        &[(
            "mlp_train.pickle",
            std::fs::read(trace("mlp_train.pickle")).expect("trace"),
        )],
    );
    assert_eq!(code, 201, "{v}");
    let id = v["id"].as_str().expect("id").to_owned();
    assert_eq!(wait_done(&s, &id)["state"], "ready");
    for path in [
        format!("/api/reports/{id}/timeline?width=800"),
        format!("/api/reports/{id}"),
    ] {
        let (head, plain) = raw_get(&s, &path, "");
        assert!(head.starts_with("http/1.1 200"), "{path}: {head}");
        assert!(!head.contains("content-encoding"), "{path}: {head}");
        let (head, body) = raw_get(&s, &path, "Accept-Encoding: gzip\r\n");
        assert!(head.starts_with("http/1.1 200"), "{path}: {head}");
        assert!(head.contains("content-encoding: gzip"), "{path}: {head}");
        assert!(head.contains("content-type: application/json"), "{path}: {head}");
        let gzipped = if head.contains("transfer-encoding: chunked") {
            dechunk(&body)
        } else {
            body
        };
        let mut json = Vec::new();
        flate2::read::GzDecoder::new(&gzipped[..])
            .read_to_end(&mut json)
            .expect("a gzip stream");
        assert_eq!(json, plain, "{path}: the same answer, compressed");
        // JSON of numbers compresses well: a timeline to a fifth or less.
        let most = if path.contains("timeline") {
            plain.len() / 3
        } else {
            plain.len()
        };
        assert!(
            gzipped.len() < most,
            "{path}: {} of {} bytes",
            gzipped.len(),
            plain.len()
        );
    }
    // A chart (an image) is sent as it is, whatever the client accepts.
    let (head, _) = raw_get(&s, &format!("/api/reports/{id}/chart.png"), "Accept-Encoding: gzip\r\n");
    assert!(!head.contains("content-encoding"), "{head}");
}
