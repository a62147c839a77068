//! Prometheus counters, rendered in the text exposition format at `GET /metrics`.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Upper bounds (seconds) of the ingest-duration histogram.
const BUCKETS: [f64; 8] = [0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0];

#[derive(Default)]
pub struct Metrics {
    pub uploads: AtomicU64,
    pub upload_bytes: AtomicU64,
    pub uploads_rejected: AtomicU64,
    pub ingest_ok: AtomicU64,
    pub ingest_failed: AtomicU64,
    ingest_seconds: Mutex<(Vec<u64>, f64, u64)>,
}

impl Metrics {
    pub fn record_ingest(&self, seconds: f64, ok: bool) {
        if ok {
            self.ingest_ok.fetch_add(1, Ordering::Relaxed);
        } else {
            self.ingest_failed.fetch_add(1, Ordering::Relaxed);
        }
        if let Ok(mut h) = self.ingest_seconds.lock() {
            if h.0.is_empty() {
                h.0 = vec![0; BUCKETS.len()];
            }
            for (i, b) in BUCKETS.iter().enumerate() {
                if seconds <= *b {
                    h.0[i] += 1;
                }
            }
            h.1 += seconds;
            h.2 += 1;
        }
    }

    pub fn render(&self) -> String {
        let mut s = String::new();
        let counter = |s: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
        };
        counter(
            &mut s,
            "memlens_uploads_total",
            "Reports uploaded.",
            self.uploads.load(Ordering::Relaxed),
        );
        counter(
            &mut s,
            "memlens_upload_bytes_total",
            "Bytes uploaded.",
            self.upload_bytes.load(Ordering::Relaxed),
        );
        counter(
            &mut s,
            "memlens_uploads_rejected_total",
            "Uploads refused (too large or malformed requests).",
            self.uploads_rejected.load(Ordering::Relaxed),
        );
        counter(
            &mut s,
            "memlens_ingest_success_total",
            "Reports processed successfully.",
            self.ingest_ok.load(Ordering::Relaxed),
        );
        counter(
            &mut s,
            "memlens_ingest_failures_total",
            "Reports whose processing failed.",
            self.ingest_failed.load(Ordering::Relaxed),
        );
        let _ = writeln!(
            s,
            "# HELP memlens_ingest_seconds Time to process a report.\n# TYPE memlens_ingest_seconds histogram"
        );
        if let Ok(h) = self.ingest_seconds.lock() {
            for (i, b) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "memlens_ingest_seconds_bucket{{le=\"{b}\"}} {}",
                    h.0.get(i).copied().unwrap_or(0)
                );
            }
            let _ = writeln!(s, "memlens_ingest_seconds_bucket{{le=\"+Inf\"}} {}", h.2);
            let _ = writeln!(s, "memlens_ingest_seconds_sum {}", h.1);
            let _ = writeln!(s, "memlens_ingest_seconds_count {}", h.2);
        }
        s
    }
}
