//! Prometheus metrics (the `prometheus-client` crate), rendered in the OpenMetrics text format
//! at `GET /metrics`.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Upper bounds (seconds) of the ingest-duration histogram.
const BUCKETS: [f64; 8] = [0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0];

pub struct Metrics {
    registry: Registry,
    uploads: Counter,
    upload_bytes: Counter,
    uploads_rejected: Counter,
    ingest_ok: Counter,
    ingest_failed: Counter,
    ingest_seconds: Histogram,
    file_loads: Counter,
    view_warms: Counter,
    imports_ahead: Counter,
    imports_ahead_pending: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut m = Metrics {
            registry: Registry::default(),
            uploads: Counter::default(),
            upload_bytes: Counter::default(),
            uploads_rejected: Counter::default(),
            ingest_ok: Counter::default(),
            ingest_failed: Counter::default(),
            ingest_seconds: Histogram::new(BUCKETS),
            file_loads: Counter::default(),
            view_warms: Counter::default(),
            imports_ahead: Counter::default(),
            imports_ahead_pending: Gauge::default(),
        };
        m.registry
            .register("memlens_uploads", "Reports uploaded", m.uploads.clone());
        m.registry
            .register("memlens_upload_bytes", "Bytes uploaded", m.upload_bytes.clone());
        m.registry.register(
            "memlens_uploads_rejected",
            "Uploads refused (too large or malformed requests)",
            m.uploads_rejected.clone(),
        );
        m.registry.register(
            "memlens_ingest_success",
            "Reports processed successfully",
            m.ingest_ok.clone(),
        );
        m.registry.register(
            "memlens_ingest_failures",
            "Reports whose processing failed",
            m.ingest_failed.clone(),
        );
        m.registry.register(
            "memlens_ingest_seconds",
            "Time to process a report",
            m.ingest_seconds.clone(),
        );
        m.registry.register(
            "memlens_file_loads",
            "Snapshot files of reports loaded from the store for queries",
            m.file_loads.clone(),
        );
        m.registry.register(
            "memlens_view_warms",
            "Views whose zoom indexes were built behind a stored first view (a page opened after a restart)",
            m.view_warms.clone(),
        );
        m.registry.register(
            "memlens_imports_ahead",
            "Uploaded files whose import began while they arrived",
            m.imports_ahead.clone(),
        );
        m.registry.register(
            "memlens_imports_ahead_pending",
            "Imports begun while uploads arrived and not yet taken by a job (each holds a file's tables)",
            m.imports_ahead_pending.clone(),
        );
        m
    }
}

impl Metrics {
    pub fn upload_accepted(&self, bytes: u64) {
        self.uploads.inc();
        self.upload_bytes.inc_by(bytes);
    }

    pub fn upload_rejected(&self) {
        self.uploads_rejected.inc();
    }

    pub fn record_ingest(&self, seconds: f64, ok: bool) {
        if ok {
            self.ingest_ok.inc();
        } else {
            self.ingest_failed.inc();
        }
        self.ingest_seconds.observe(seconds);
    }

    /// A report's snapshot file was loaded from the store (not found in the cache).
    pub fn file_loaded(&self) {
        self.file_loads.inc();
    }

    /// A view's zoom indexes began to be built behind its stored first view.
    pub fn view_warm_begun(&self) {
        self.view_warms.inc();
    }

    /// An upload's import began while it arrived.
    pub fn import_ahead_begun(&self) {
        self.imports_ahead.inc();
    }

    /// Imports begun ahead and not yet taken, as of now (set when the metrics are read).
    pub fn set_imports_ahead_pending(&self, n: usize) {
        self.imports_ahead_pending.set(n as i64);
    }

    pub fn render(&self) -> String {
        let mut s = String::new();
        if let Err(e) = encode(&mut s, &self.registry) {
            tracing::error!("encoding metrics: {e}");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_the_histogram_are_exposed() {
        let m = Metrics::default();
        m.upload_accepted(10);
        m.upload_rejected();
        m.record_ingest(0.7, true);
        let text = m.render();
        assert!(text.contains("memlens_uploads_total 1"), "{text}");
        assert!(text.contains("memlens_upload_bytes_total 10"), "{text}");
        assert!(text.contains("memlens_uploads_rejected_total 1"), "{text}");
        assert!(text.contains("memlens_ingest_seconds_bucket{le=\"1.0\"} 1"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
