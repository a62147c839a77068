//! `memlens serve`: wires the store, the ingest queue and the HTTP router, recovers reports a
//! crash left unfinished, and sweeps expired ones. On a shared store it is stateless: any
//! number run behind a load balancer, and reports are claimed from the store's queue (by its
//! own `--workers` loops and by `memlens worker`s).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use crate::http::auth::{UploadAuth, UploadLimit};
use crate::http::{router, AppState, HttpConfig};
use crate::ingest::Ingest;
use crate::metrics::Metrics;
use crate::process::StartupError;
use crate::storage::filecache::LoadedFiles;
use crate::storage::store::StoreArgs;

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "MEMLENS_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    #[command(flatten)]
    pub store: StoreArgs,
    /// Largest upload accepted, in bytes (all files of one report together).
    #[arg(long, env = "MEMLENS_MAX_UPLOAD", default_value_t = 4 << 30)]
    pub max_upload: u64,
    /// Reports expire after this many days (0: never).
    #[arg(long, env = "MEMLENS_RETENTION_DAYS", default_value_t = 0)]
    pub retention_days: u64,
    /// Seconds a client may take to send a request's headers before the connection is closed
    /// (slow and "slowloris" clients).
    #[arg(long, env = "MEMLENS_HEADER_TIMEOUT", default_value_t = 15)]
    pub header_timeout: u64,
    /// Memory for loaded reports kept between queries, in MiB (their frames, estimated); a
    /// report file larger than this is loaded for each query and dropped after.
    #[arg(long, env = "MEMLENS_CACHE_MB", default_value_t = 4096)]
    pub cache_mb: u64,
    /// Seconds an upload's body may send nothing before the upload is dropped with 408.
    #[arg(long, env = "MEMLENS_BODY_TIMEOUT", default_value_t = 60)]
    pub body_timeout: u64,
    /// API requests served at once; beyond it the server answers 503 with `Retry-After`
    /// instead of queueing without bound (`/healthz`, `/metrics` and pages are not counted).
    #[arg(long, env = "MEMLENS_MAX_IN_FLIGHT", default_value_t = 512)]
    pub max_in_flight: usize,
    /// The built frontend (`memlens-bundle`'s `dist`).
    #[arg(long, env = "MEMLENS_STATIC_DIR", default_value = "dist")]
    pub static_dir: PathBuf,
    /// Category rules for every report (`category: regex` lines, see `memlens analyze --help`).
    #[arg(long, env = "MEMLENS_CATEGORY_RULES", value_name = "FILE")]
    pub category_rules: Option<PathBuf>,
    /// Reports processed at the same time (with a shared store: by this server, beside any
    /// `memlens worker`s; 0 leaves them all to the workers).
    #[arg(long, env = "MEMLENS_WORKERS", default_value_t = 2)]
    pub workers: usize,
    /// With a shared store: seconds a report claimed by this server stays its without a
    /// renewal (see `memlens worker --help`).
    #[arg(long, env = "MEMLENS_LEASE_SECONDS", default_value_t = 30)]
    pub lease_seconds: u64,
    /// A token uploads must carry (`Authorization: Bearer TOKEN`); repeat, or comma-separate in
    /// the variable, for several. None (and no tokens file): anyone may upload.
    #[arg(
        long = "upload-token",
        env = "MEMLENS_UPLOAD_TOKENS",
        value_delimiter = ',',
        value_name = "TOKEN"
    )]
    pub upload_tokens: Vec<String>,
    /// A file of upload tokens, one per line, re-read whenever it changes (rotation without a
    /// restart).
    #[arg(long, env = "MEMLENS_UPLOAD_TOKENS_FILE", value_name = "FILE")]
    pub upload_tokens_file: Option<PathBuf>,
    /// Uploads each client address may make per minute (0: no limit); more get 429.
    #[arg(long, env = "MEMLENS_UPLOADS_PER_MINUTE", default_value_t = 60)]
    pub uploads_per_minute: u32,
    /// Uploads one client address may have in progress at once (0: no limit); more get 429.
    #[arg(long, env = "MEMLENS_UPLOADS_AT_ONCE", default_value_t = 4)]
    pub uploads_at_once: usize,
}

pub fn serve(args: ServeArgs) -> std::process::ExitCode {
    crate::process::run_process(run(args))
}

async fn run(args: ServeArgs) -> Result<(), StartupError> {
    let store = args.store.open().await?;
    let metrics = Arc::new(Metrics::default());
    let rules = memlens_core::analysis::categories::FrameRules::load(args.category_rules.as_deref())?;
    // Bytes of loaded report files kept in memory between queries (a file larger than this is
    // loaded for each query and dropped after).
    let files = Arc::new(LoadedFiles::new(args.cache_mb.saturating_mul(1 << 20)));
    let ingest = Ingest::new(store.clone(), args.workers, metrics.clone(), rules, Some(files.clone()));
    let stop_claiming = Arc::new(AtomicBool::new(false));
    let claim_loops = if store.ingest_queue().is_some() {
        // A shared store: reports are claimed from its queue, by this server's loops and by
        // any `memlens worker`; one a crash left unfinished is claimed once its lease ran out.
        let lease = Duration::from_secs(args.lease_seconds.max(3));
        crate::ingest::worker::spawn_claim_loops(&ingest, args.workers, lease, &stop_claiming)
    } else {
        let s = store.clone();
        let unfinished = tokio::task::spawn_blocking(move || s.unfinished()).await??;
        for id in unfinished {
            tracing::info!(report = %id, "resuming processing left unfinished");
            ingest.enqueue(id);
        }
        Vec::new()
    };
    let config = HttpConfig {
        max_upload: args.max_upload,
        retention_days: args.retention_days,
        static_dir: args.static_dir.clone(),
        max_in_flight: args.max_in_flight.max(1),
        body_timeout: Duration::from_secs(args.body_timeout.max(1)),
    };
    let auth = UploadAuth::new(args.upload_tokens.clone(), args.upload_tokens_file.clone()).map_err(|e| {
        StartupError::UploadTokens {
            path: e.path,
            error: e.error,
        }
    })?;
    if auth.required() {
        tracing::info!("uploads need a token");
    }
    let gate = (auth, UploadLimit::new(args.uploads_per_minute, args.uploads_at_once));
    let reports = Arc::new(crate::app::reports::Reports::new(store.clone(), ingest, metrics, files));
    tokio::spawn(crate::app::reports::close_quiet_runs(reports.clone()));
    let state = AppState::new(reports, config, gate);
    {
        let store = store.clone();
        tokio::spawn(async move {
            loop {
                let s = store.clone();
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64);
                match tokio::task::spawn_blocking(move || s.purge_expired(now)).await {
                    Ok(Ok(ids)) if !ids.is_empty() => {
                        tracing::info!("purged {} expired report(s)", ids.len())
                    }
                    Ok(Err(e)) => tracing::error!("purging expired reports: {e}"),
                    _ => {}
                }
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
        });
    }
    let listener = tokio::net::TcpListener::bind(args.bind)
        .await
        .map_err(|error| StartupError::Listen { addr: args.bind, error })?;
    let addr = listener
        .local_addr()
        .map_err(|error| StartupError::Listen { addr: args.bind, error })?;
    println!("memlens listening on http://{addr}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let header_timeout = Duration::from_secs(args.header_timeout.max(1));
    serve_connections(listener, router(state), header_timeout).await;
    stop_claiming.store(true, Ordering::Relaxed);
    for l in claim_loops {
        let _ = l.await;
    }
    tracing::info!("memlens stopped");
    Ok(())
}

/// Accepts connections until shutdown and serves each over HTTP/1 or HTTP/2 with a header
/// read timeout (`axum::serve` has none: a slow or "slowloris" client that trickles its
/// headers is cut off instead of holding a connection for ever), the peer address as
/// `ConnectInfo`, and a graceful stop that lets requests in flight finish.
async fn serve_connections(listener: tokio::net::TcpListener, app: axum::Router, header_timeout: Duration) {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use hyper_util::server::conn::auto::Builder;
    use tower::ServiceExt;

    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    builder.http2().timer(TokioTimer::new());
    let shutdown = crate::process::shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait a moment rather than spin.
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // Each write goes out at once: an answer's last small piece (a compressed body is
        // written as it is made) otherwise waited for the client's delayed ack, 40 ms.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY for {peer}: {e}");
        }
        let app = app.clone();
        let service = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(axum::extract::ConnectInfo(peer));
            app.clone().oneshot(req.map(axum::body::Body::new))
        });
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
        let conn = graceful.watch(conn.into_owned());
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!("connection from {peer}: {e}");
            }
        });
    }
    graceful.shutdown().await;
}
