//! HTTP tests against a real `memlens serve` process bound on loopback, with real traces. Run
//! with `MEMLENS_TEST_BACKEND=shared` inside `scripts/with-shared-store`, every server runs on
//! the shared Postgres + S3 store instead of the embedded one (tests of the embedded store's own
//! files say so and skip). One file per theme; this one the helpers they share.

#[path = "../common/mod.rs"]
mod common;

mod cache;
mod disk;
mod encoding;
mod jobs;
mod lifecycle;
mod limits;
mod plan;
mod queries;
mod schema;
mod streaming;
mod windows;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// A server in a fresh data directory `tag` holding one ready report of `name`, and its id.
fn server_with_report(tag: &str, extra: &[&str], name: &str) -> (Server, String) {
    let s = Server::serve_in(tmpdir(tag), extra);
    let id = ready_report(&s, name);
    (s, id)
}

/// Uploads the trace `name` to `s` and waits for its report to be ready; its id.
fn ready_report(s: &Server, name: &str) -> String {
    let id = upload_trace(s, name)["id"].as_str().expect("id").to_owned();
    assert_eq!(wait_done(s, &id)["state"], "ready");
    id
}

/// Runs the CLI and checks it refused with exit status 2 and a message naming `needle`.
fn assert_cli_refuses(cmd: &mut Command, needle: &str) {
    let out = cmd.output().expect("cli");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(needle), "{err}");
}

/// The first half of an upload of `bytes` named `name`, its whole length declared, on a
/// connection left open (closed by the server once the rest is sent and answered).
fn half_an_upload(s: &Server, name: &str, bytes: &[u8]) -> std::net::TcpStream {
    use std::io::Write;
    let addr = s.base.trim_start_matches("http://");
    let mut c = std::net::TcpStream::connect(addr).expect("connect");
    write!(
        c,
        "POST /api/reports?name={name} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        bytes.len()
    )
    .expect("head");
    c.write_all(&bytes[..bytes.len() / 2]).expect("half");
    c.flush().expect("flush");
    c
}
