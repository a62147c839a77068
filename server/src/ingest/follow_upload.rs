//! An upload imported while it arrives, as the HTTP layer sees it: it says what arrived and
//! what is stored, and the ingest keeps the memory plan — the cache makes room for the import
//! ahead of it, by the rule here, from the upload's first bytes on (which say whether it is
//! gzipped).

use std::sync::Arc;

use super::pre_import::FeedGuard;
use super::Ingest;
use crate::storage::store::ReportId;

/// Room is first made for at least this much of an upload.
const FIRST_ROOM: u64 = 4 << 20;

/// One upload being imported as it arrives ([`Ingest::follow_upload`]). Dropped before
/// [`UploadFollower::complete`], the import ahead fails and ends.
pub struct UploadFollower {
    ingest: Arc<Ingest>,
    id: ReportId,
    key: String,
    feed: FeedGuard,
    /// At least the upload's final size: room is never made beyond it.
    bound: u64,
    /// The upload's first two bytes, once they have arrived.
    head: Vec<u8>,
    /// How much of the upload the cache has made room for so far.
    covered: u64,
}

impl UploadFollower {
    pub(super) fn new(ingest: Arc<Ingest>, id: &ReportId, key: &str, feed: FeedGuard, bound: u64) -> UploadFollower {
        UploadFollower {
            ingest,
            id: id.clone(),
            key: key.to_owned(),
            feed,
            bound,
            head: Vec::with_capacity(2),
            covered: 0,
        }
    }

    /// `chunk` arrived, `written` bytes in all. The import ahead grows with what arrives: the
    /// cache makes room for twice to four times what has arrived (so a few times in all), never
    /// beyond the bound — an upload that declares no length is not taken for the largest
    /// allowed. Files leaving memory are freed on the blocking pool.
    pub async fn arrived(&mut self, chunk: &[u8], written: u64) -> Result<(), tokio::task::JoinError> {
        if self.head.len() < 2 {
            let take = (2 - self.head.len()).min(chunk.len());
            self.head.extend_from_slice(&chunk[..take]);
        }
        if self.head.len() < 2 || self.covered >= self.bound || written.saturating_mul(2) <= self.covered {
            return Ok(());
        }
        self.covered = self.bound.min(written.saturating_mul(4).max(FIRST_ROOM));
        let (ingest, id, key, upto, head) = (
            self.ingest.clone(),
            self.id.clone(),
            self.key.clone(),
            self.covered,
            self.head.clone(),
        );
        tokio::task::spawn_blocking(move || ingest.reserve_for_pre_import(&id, &key, upto, &head)).await
    }

    /// The first `stored` bytes are in the store: the import may read them.
    pub fn stored(&self, stored: u64) {
        self.feed.advance(stored);
    }

    /// The upload is whole, `written` bytes.
    pub fn complete(self, written: u64) {
        self.feed.complete(written);
    }
}
