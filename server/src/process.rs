//! What a long-lived command (`memlens serve`, `memlens worker`) needs of its process: a
//! runtime, logs on stderr, and an end on Ctrl-C or SIGTERM.

/// Logs to stderr, filtered by `MEMLENS_LOG` (default `info`).
fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("MEMLENS_LOG").unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .try_init();
}

/// Why a long-lived command could not start or go on: one line on stderr, a failure status.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Store(#[from] crate::storage::store::OpenStoreError),
    /// Its message names the rules file and line.
    #[error(transparent)]
    CategoryRules(#[from] memlens_core::analysis::categories::FrameRulesError),
    #[error("upload tokens file {}: {error}", path.display())]
    UploadTokens {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    #[error("index: {0}")]
    Index(#[from] crate::storage::store::StoreError),
    #[error("cannot listen on {addr}: {error}")]
    Listen {
        addr: std::net::SocketAddr,
        error: std::io::Error,
    },
    #[error("`memlens worker` needs a shared store: set --database-url and --s3-url (a server on the embedded store processes its own uploads)")]
    WorkerNeedsSharedStore,
    #[error("MCP: {0}")]
    Mcp(String),
    #[error("a startup task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// Runs a long-lived command (`serve`, `worker`, `mcp`) on a multi-threaded runtime, logging to
/// stderr; an error ends it with one line and a failure status.
pub fn run_process(main: impl std::future::Future<Output = Result<(), StartupError>>) -> std::process::ExitCode {
    init_logging();
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("memlens: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(main) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memlens: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Ctrl-C, or SIGTERM (`docker stop`; as PID 1 in a container nothing else would stop us).
/// Unfinished ingests are resumed from their kept uploads at the next start. The handlers are
/// installed when this is called, not when the future is first polled: a SIGTERM arriving
/// while the first connections are served must not meet the default action and kill the
/// process.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let (interrupt, term) = {
        use tokio::signal::unix::{signal, SignalKind};
        let listen = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!("cannot listen for {name}: {e}");
                None
            }
        };
        (
            listen(SignalKind::interrupt(), "SIGINT"),
            listen(SignalKind::terminate(), "SIGTERM"),
        )
    };
    async move {
        #[cfg(unix)]
        {
            let wait = |s: Option<tokio::signal::unix::Signal>| async move {
                match s {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = wait(interrupt) => {}
                _ = wait(term) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
