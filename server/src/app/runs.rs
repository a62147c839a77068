//! Uploads that gather into one report: every rank of a job uploads its own snapshot with the
//! job's run id (`?run=…&rank=N&world_size=W`), and all of them land in one report — one share
//! link for the job — created when `world_size` files have arrived, or when none came for
//! [`RUN_QUIET`] (a rank that died before dumping does not hold the others back). Until then the
//! report answers `queued` with the files so far.
//!
//! The ranks' files are received into the report's staging area like any upload; the gathering
//! itself lives in memory, so a restart before the report is created loses it (the staging
//! area is cleared at start-up, as for any half-received upload).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use memlens_api::{ReportMeta, ReportState};

use crate::ids::{self, JobId, ReportId};
use crate::storage::store::{ReportRecord, StoredFile};

/// How long a run waits for its next rank before it is created with what it has.
pub const RUN_QUIET: Duration = Duration::from_secs(120);
/// Longest run id kept.
const MAX_RUN_KEY: usize = 200;

/// A run still gathering its ranks.
pub struct Gathering {
    pub id: ReportId,
    /// The owner token every rank's answer carries (the ranks of a job share it).
    pub token: String,
    pub files: Vec<StoredFile>,
    /// Upload keys handed out so far (each rank's files get their own).
    next_key: usize,
    pub expected: Option<u32>,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub meta: ReportMeta,
    /// The job the run is one of.
    pub job: Option<JobId>,
    last: Instant,
}

impl Gathering {
    /// The report this run will be, as the index will hold it.
    pub fn record(&self) -> ReportRecord {
        ReportRecord {
            id: self.id.clone(),
            state: ReportState::Queued,
            created_at: self.created_at,
            expires_at: self.expires_at,
            error: None,
            files: self.files.clone(),
            delete_token_hash: ids::token_hash(&self.token),
            meta: self.meta.clone(),
            job: self.job.clone(),
        }
    }
}

/// Runs being gathered, by run id.
#[derive(Default)]
pub struct Runs {
    open: Mutex<HashMap<String, Gathering>>,
}

/// Where one rank's upload goes.
pub struct Slot {
    pub id: ReportId,
    pub token: String,
    /// The first upload key index for this rank's files.
    pub first_key: usize,
}

impl Runs {
    /// The report a rank of run `key` uploads into (opening the run for its first rank), with
    /// `keys` upload keys reserved for it.
    pub fn join(&self, key: &str, keys: usize, open: impl FnOnce() -> Gathering) -> Slot {
        let key: String = key.chars().take(MAX_RUN_KEY).collect();
        let mut runs = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let g = runs.entry(key).or_insert_with(open);
        let first_key = g.next_key;
        g.next_key += keys;
        g.last = Instant::now();
        Slot {
            id: g.id.clone(),
            token: g.token.clone(),
            first_key,
        }
    }

    /// Adds a rank's received files; returns the run, closed, when it is complete.
    pub fn arrived(&self, id: &ReportId, files: Vec<StoredFile>, expected: Option<u32>) -> Option<Gathering> {
        let mut runs = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let key = runs.iter().find(|(_, g)| &g.id == id).map(|(k, _)| k.clone())?;
        let g = runs.get_mut(&key)?;
        g.files.extend(files);
        g.last = Instant::now();
        if expected.is_some() {
            g.expected = expected;
        }
        let complete = g.expected.is_some_and(|n| g.files.len() >= n as usize);
        complete.then(|| runs.remove(&key)).flatten()
    }

    /// Runs that waited [`RUN_QUIET`] for another rank, closed (those with files).
    pub fn quiet(&self, now: Instant) -> Vec<Gathering> {
        let mut runs = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let done: Vec<String> = runs
            .iter()
            .filter(|(_, g)| now.duration_since(g.last) >= RUN_QUIET)
            .map(|(k, _)| k.clone())
            .collect();
        done.into_iter()
            .filter_map(|k| runs.remove(&k))
            .filter(|g| !g.files.is_empty())
            .collect()
    }

    /// A run still gathering, as its report will be.
    pub fn pending(&self, id: &ReportId) -> Option<ReportRecord> {
        let runs = self.open.lock().unwrap_or_else(|p| p.into_inner());
        runs.values().find(|g| &g.id == id).map(Gathering::record)
    }
}

/// A new run's gathering state.
pub fn open_run(meta: ReportMeta, job: Option<JobId>, created_at: i64, expires_at: Option<i64>) -> Gathering {
    Gathering {
        id: ReportId::new(),
        token: ids::new_delete_token(),
        files: Vec::new(),
        next_key: 0,
        expected: None,
        created_at,
        expires_at,
        meta,
        job,
        last: Instant::now(),
    }
}
