//! `memlens worker`: ingest for a shared store. Any number of workers (and of API servers)
//! share one Postgres + S3 store; each claims queued reports from the index, renews its lease
//! while it processes one, and records the outcome only while it still holds the lease. A
//! worker that dies (even `kill -9`) leaves its task to be claimed again when the lease runs
//! out. `memlens serve` runs the same claim loops in-process when its `--workers` is above 0.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;

use crate::ingest::{Ingest, IngestOutcome};
use crate::metrics::Metrics;
use crate::process::StartupError;
use crate::storage::store::{IngestQueue, ReportId, ReportState, StoreArgs, MAX_ATTEMPTS};

#[derive(Args, Debug, Clone)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Reports processed at the same time.
    #[arg(long, env = "MEMLENS_WORKERS", default_value_t = 2)]
    pub workers: usize,
    /// Seconds a claimed report stays this worker's without a renewal (renewed every third of
    /// it); after that another worker may take it over.
    #[arg(long, env = "MEMLENS_LEASE_SECONDS", default_value_t = 30)]
    pub lease_seconds: u64,
    /// Category rules for every report (`category: regex` lines, see `memlens analyze --help`).
    #[arg(long, env = "MEMLENS_CATEGORY_RULES", value_name = "FILE")]
    pub category_rules: Option<std::path::PathBuf>,
}

pub fn worker(args: WorkerArgs) -> std::process::ExitCode {
    crate::process::run_process(run(args))
}

async fn run(args: WorkerArgs) -> Result<(), StartupError> {
    let store = args.store.open().await?;
    if store.ingest_queue().is_none() {
        return Err(StartupError::WorkerNeedsSharedStore);
    }
    let rules = memlens_core::analysis::categories::FrameRules::load(args.category_rules.as_deref())?;
    // No HTTP here, so no cache of loaded files to fill.
    let ingest = Ingest::new(store.clone(), args.workers, Arc::new(Metrics::default()), rules, None);
    let stop = Arc::new(AtomicBool::new(false));
    let loops = spawn_claim_loops(
        &ingest,
        args.workers.max(1),
        Duration::from_secs(args.lease_seconds.max(3)),
        &stop,
    );
    println!("memlens worker claiming reports with {} loop(s)", loops.len());
    use std::io::Write;
    let _ = std::io::stdout().flush();
    crate::process::shutdown_signal().await;
    // Stop claiming; the reports in progress finish (their leases stay renewed meanwhile).
    stop.store(true, Ordering::Relaxed);
    for l in loops {
        let _ = l.await;
    }
    tracing::info!("memlens worker stopped");
    Ok(())
}

/// Starts `n` claim loops on the blocking pool; they return once `stop` is set and their
/// current report is done.
pub fn spawn_claim_loops(
    ingest: &Arc<Ingest>,
    n: usize,
    lease: Duration,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let tag = &crate::ids::random_hex(4);
    (0..n)
        .map(|i| {
            let (ingest, stop) = (ingest.clone(), stop.clone());
            let name = format!("{}-{}-{tag}-{i}", hostname(), std::process::id());
            tokio::task::spawn_blocking(move || claim_loop(&ingest, &name, lease, &stop))
        })
        .collect()
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".into())
}

/// How long an idle loop waits before asking the queue again.
const IDLE_POLL: Duration = Duration::from_millis(300);

fn claim_loop(ingest: &Arc<Ingest>, worker: &str, lease: Duration, stop: &AtomicBool) {
    let store = ingest.store();
    let Some(jobs) = store.ingest_queue() else { return };
    while !stop.load(Ordering::Relaxed) {
        match jobs.claim(worker, lease) {
            Ok(Some(claim)) => {
                tracing::info!(report = %claim.id, attempt = claim.attempt, "claimed");
                let outcome = with_lease(jobs, &claim.id, worker, lease, || ingest.process_report(&claim.id));
                let (state, error) = settle(outcome, claim.attempt);
                match jobs.finish(&claim.id, worker, state, error.as_deref()) {
                    Ok(true) if state == ReportState::Ready => ingest.prepare_first_view(&claim.id),
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(report = %claim.id, "lost the lease before finishing; another worker has it")
                    }
                    Err(e) => tracing::error!(report = %claim.id, "cannot record the outcome: {e}"),
                }
            }
            Ok(None) => std::thread::sleep(IDLE_POLL),
            Err(e) => {
                tracing::error!("claiming a report: {e}");
                std::thread::sleep(Duration::from_secs(2));
            }
        }
    }
}

/// Runs `work` while a second thread renews the lease every third of it.
fn with_lease<T>(jobs: &dyn IngestQueue, id: &ReportId, worker: &str, lease: Duration, work: impl FnOnce() -> T) -> T {
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut last = Instant::now();
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                if last.elapsed() >= lease / 3 {
                    last = Instant::now();
                    match jobs.renew(id, worker, lease) {
                        Ok(true) => {}
                        Ok(false) => {
                            tracing::warn!(report = %id, "lease lost while processing");
                            return;
                        }
                        Err(e) => tracing::warn!(report = %id, "renewing the lease: {e}"),
                    }
                }
            }
        });
        let out = work();
        done.store(true, Ordering::Relaxed);
        out
    })
}

/// The state a task ends in: failed for an input error (it would fail the same way again) or
/// for a second internal failure; queued again for a first one.
fn settle(outcome: IngestOutcome, attempt: i32) -> (ReportState, Option<String>) {
    match outcome {
        IngestOutcome::InternalError(_) if attempt < MAX_ATTEMPTS => (ReportState::Queued, None),
        o => o.state(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_errors_fail_at_once_and_internal_ones_are_retried_once() {
        assert_eq!(settle(IngestOutcome::Ready, 1), (ReportState::Ready, None));
        assert_eq!(
            settle(IngestOutcome::InputError("bad".into()), 1).0,
            ReportState::Failed
        );
        assert_eq!(
            settle(IngestOutcome::InternalError("x".into()), 1).0,
            ReportState::Queued
        );
        assert_eq!(
            settle(IngestOutcome::InternalError("x".into()), 2).0,
            ReportState::Failed
        );
    }
}
