//! The server's cache of loaded report files, bounded by the bytes their loaded parts hold
//! (`--cache-mb`). The HTTP queries fill it as they read files; the ingest of this process
//! puts in the device frames of the report it just processed, so that its first timeline is
//! answered from memory rather than read back from the store. An ingest takes the memory it
//! will hold out of the same budget while it runs ([`LoadedFiles::reserve`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::storage::reportdata::LoadedFile;
use crate::storage::store::ReportId;

/// A loaded file in the cache, with its bytes when it was (re)inserted: the cache needs a
/// weight that does not change while the entry is in it.
#[derive(Clone)]
struct CachedFile {
    file: Arc<LoadedFile>,
    bytes: u64,
    /// When it was last asked for ([`LoadedFiles::tick`]), shared by the entry's clones.
    used: Arc<AtomicU64>,
}

/// Weighs a cached file by the memory its loaded parts held when it was put in.
#[derive(Clone)]
struct FileWeight;

impl quick_cache::Weighter<(ReportId, usize), CachedFile> for FileWeight {
    fn weight(&self, _key: &(ReportId, usize), file: &CachedFile) -> u64 {
        file.bytes.max(1)
    }
}

/// Loaded snapshot files expected in the cache (its bound is bytes).
const EXPECTED_FILES: usize = 8;

/// Loaded files by report id and file index.
pub struct LoadedFiles {
    cache: quick_cache::sync::Cache<(ReportId, usize), CachedFile, FileWeight>,
    budget: u64,
    /// What running ingests have taken out of the budget.
    reserved: Mutex<u64>,
    /// The budget less what is reserved: what the cached files may hold now.
    capacity: AtomicU64,
    /// Counts requests for files: the order files were last used in.
    clock: AtomicU64,
}

/// Bytes taken out of the cache's budget until dropped ([`LoadedFiles::reserve`]).
pub struct Reservation {
    files: Arc<LoadedFiles>,
    bytes: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.files.take_out(|reserved| reserved.saturating_sub(self.bytes));
    }
}

impl LoadedFiles {
    /// A cache holding at most `budget` bytes of loaded parts.
    pub fn new(budget: u64) -> LoadedFiles {
        let budget = budget.max(1);
        LoadedFiles {
            cache: quick_cache::sync::Cache::with_options(
                quick_cache::OptionsBuilder::new()
                    .estimated_items_capacity(EXPECTED_FILES)
                    .weight_capacity(budget)
                    // Every file up to the whole budget is admitted: by default 3 % is kept for
                    // newcomers and a file heavier than the rest is refused. Which files leave
                    // is decided by `put`.
                    .hot_allocation(1.0)
                    .build()
                    .expect("valid cache options"),
                FileWeight,
                Default::default(),
                Default::default(),
            ),
            budget,
            reserved: Mutex::new(0),
            capacity: AtomicU64::new(budget),
            clock: AtomicU64::new(0),
        }
    }

    /// Takes `bytes` (at most the whole budget) out of the budget while the reservation lives:
    /// the files used least recently leave until the rest fits, so that an ingest's working
    /// memory comes out of `--cache-mb` instead of on top of it. Files loaded meanwhile share
    /// what is left, and may be let go as soon as their query is answered.
    pub fn reserve(self: &Arc<Self>, bytes: u64) -> Reservation {
        let bytes = bytes.min(self.budget);
        self.take_out(|reserved| reserved + bytes);
        Reservation {
            files: self.clone(),
            bytes,
        }
    }

    fn take_out(&self, change: impl FnOnce(u64) -> u64) {
        let mut reserved = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
        *reserved = change(*reserved);
        let capacity = self.budget.saturating_sub(*reserved).max(1);
        self.capacity.store(capacity, Ordering::Relaxed);
        self.cache.set_capacity(capacity);
    }

    /// File `file` of report `id`, opened by `open` when the cache does not hold it (concurrent
    /// callers for the same file wait for one open).
    pub fn get_or_open(&self, id: &ReportId, file: usize, open: impl FnOnce() -> LoadedFile) -> Arc<LoadedFile> {
        let key = (id.clone(), file);
        match self.cache.get_or_insert_with(&key, || {
            let f = Arc::new(open());
            let bytes = f.bytes();
            Ok::<_, std::convert::Infallible>(self.entry(f, bytes))
        }) {
            Ok(c) => {
                c.used.store(self.tick(), Ordering::Relaxed);
                c.file
            }
            Err(never) => match never {},
        }
    }

    /// File `file` of report `id` if the cache holds it.
    pub fn get(&self, id: &ReportId, file: usize) -> Option<Arc<LoadedFile>> {
        self.cache.get(&(id.clone(), file)).map(|c| {
            c.used.store(self.tick(), Ordering::Relaxed);
            c.file
        })
    }

    /// Whether a file of `bytes` could be kept at all (it is at most the whole budget).
    pub fn could_keep(&self, bytes: u64) -> bool {
        bytes <= self.budget
    }

    /// Puts a file in (one larger than the whole budget is not kept).
    pub fn insert(&self, id: &ReportId, file: usize, f: Arc<LoadedFile>) {
        let bytes = f.bytes();
        self.put((id.clone(), file), f, bytes);
    }

    /// Weighs a cached file again after a query loaded more of it (or did not load what it
    /// made room for), so that the bound counts what files hold now; one grown past the whole
    /// budget leaves the cache. A file the cache no longer holds is not put back.
    pub fn reweigh(&self, id: &ReportId, file: usize, f: &Arc<LoadedFile>) {
        let key = (id.clone(), file);
        if self
            .cache
            .get(&key)
            .is_some_and(|cur| Arc::ptr_eq(&cur.file, f) && cur.bytes != f.bytes().max(1))
        {
            self.insert(id, file, f.clone());
        }
    }

    /// Makes room for `extra` bytes that cached file `f` is about to load: it is weighed as
    /// if they were loaded, so that the cache lets other files go first and a file being
    /// loaded is not in memory together with all those it will push out. One that would not
    /// fit at all leaves the cache (and is not kept after its load either).
    pub fn make_room(&self, id: &ReportId, file: usize, f: &Arc<LoadedFile>, extra: u64) {
        let key = (id.clone(), file);
        if !self.cache.get(&key).is_some_and(|cur| Arc::ptr_eq(&cur.file, f)) {
            return;
        }
        self.put(key, f.clone(), f.bytes() + extra);
    }

    /// Puts `f` in weighing `bytes`, after letting other files go, least recently used first,
    /// until it fits beside those that stay; one over the whole budget leaves instead. The
    /// cache's own policy cannot be left to choose: it keeps a file already in ahead of a
    /// newcomer that does not fit beside it, so a 2 GB report browsed first stayed, and each
    /// one opened after it, as large, was let go as it made room for its frames: loaded again
    /// by every query, while both were in memory (1.6 GB under `--cache-mb 1300`).
    fn put(&self, key: (ReportId, usize), f: Arc<LoadedFile>, bytes: u64) {
        if bytes > self.budget {
            self.cache.remove(&key);
            return;
        }
        let capacity = self.capacity.load(Ordering::Relaxed);
        let mut others: Vec<((ReportId, usize), u64, u64)> = self
            .cache
            .iter()
            .filter(|(k, _)| *k != key)
            .map(|(k, c)| (k, c.bytes.max(1), c.used.load(Ordering::Relaxed)))
            .collect();
        let mut total = others.iter().map(|o| o.1).sum::<u64>() + bytes.max(1);
        others.sort_unstable_by_key(|o| o.2);
        for (other, weight, _) in others {
            if total <= capacity {
                break;
            }
            self.cache.remove(&other);
            total -= weight;
        }
        let entry = self.entry(f, bytes);
        self.cache.insert(key, entry);
    }

    /// A cache entry for `f` weighing `bytes`, used now.
    fn entry(&self, file: Arc<LoadedFile>, bytes: u64) -> CachedFile {
        CachedFile {
            file,
            bytes,
            used: Arc::new(AtomicU64::new(self.tick())),
        }
    }

    /// The next tick of the clock files are ordered by use with.
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Drops every file of report `id`.
    pub fn forget(&self, id: &ReportId) {
        self.cache.retain(|(r, _), _| r != id);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::storage::reportdata::tests::{process_into, rid, store_with_report};

    #[test]
    fn the_cache_lets_other_files_go_before_a_file_loads_its_frames() {
        let id = &rid("00000000000000000000000000000008");
        let (_root, store) = store_with_report(id);
        let (_, out) = process_into(&store, id, "mlp_train.pickle");
        let summary = &out.files[0];
        let probe = LoadedFile::open(store.clone(), id, 0, summary);
        probe.devices().expect("frames");
        // Room for one file's frames, not two.
        let files = Arc::new(LoadedFiles::new(probe.bytes() * 3 / 2));
        let open = || LoadedFile::open(store.clone(), id, 0, summary);
        let a = files.get_or_open(&rid("a"), 0, open);
        a.devices().expect("frames");
        files.reweigh(&rid("a"), 0, &a);
        assert!(files.get(&rid("a"), 0).is_some());
        let b = files.get_or_open(&rid("b"), 0, open);
        let a_kept_when_b_loads = Arc::new(Mutex::new(None));
        {
            let (files, me, seen) = (files.clone(), Arc::downgrade(&b), a_kept_when_b_loads.clone());
            b.set_make_room(Box::new(move |extra| {
                let me = me.upgrade().expect("b");
                files.make_room(&rid("b"), 0, &me, extra);
                *seen.lock().unwrap() = Some(files.get(&rid("a"), 0).is_some());
            }));
        }
        b.devices().expect("frames");
        assert_eq!(
            *a_kept_when_b_loads.lock().unwrap(),
            Some(false),
            "a left before b loaded"
        );
        files.reweigh(&rid("b"), 0, &b);
        assert!(files.get(&rid("b"), 0).is_some(), "b, loaded, fits");
        // A file that could never fit leaves the cache as soon as it says what it will load.
        let c = files.get_or_open(&rid("c"), 0, open);
        files.make_room(&rid("c"), 0, &c, probe.bytes() * 2);
        assert!(files.get(&rid("c"), 0).is_none());
    }

    #[test]
    fn a_file_about_to_load_takes_the_place_of_the_one_used_before_it() {
        let id = &rid("0000000000000000000000000000000b");
        let (_root, store) = store_with_report(id);
        let (_, out) = process_into(&store, id, "mlp_train.pickle");
        let open = || LoadedFile::open(store.clone(), id, 0, &out.files[0]);
        // Files that have loaded nothing yet, weighed by what they are about to load: room for
        // one, not two.
        let files = LoadedFiles::new(1000);
        let a = files.get_or_open(&rid("a"), 0, open);
        files.make_room(&rid("a"), 0, &a, 600);
        // Weighed again once loaded (as `reweigh` does), then read by its queries.
        files.make_room(&rid("a"), 0, &a, 580);
        for _ in 0..3 {
            assert!(files.get(&rid("a"), 0).is_some(), "a is read by its queries");
        }
        let b = files.get_or_open(&rid("b"), 0, open);
        files.make_room(&rid("b"), 0, &b, 600);
        assert!(files.get(&rid("b"), 0).is_some(), "the file about to load is kept");
        assert!(files.get(&rid("a"), 0).is_none(), "the one used before it made room");
        // Used more recently than b, c stays when d comes; b goes.
        let c = files.get_or_open(&rid("c"), 0, open);
        files.make_room(&rid("c"), 0, &c, 300);
        assert!(files.get(&rid("b"), 0).is_some() && files.get(&rid("c"), 0).is_some());
        assert!(files.get(&rid("c"), 0).is_some());
        let d = files.get_or_open(&rid("d"), 0, open);
        files.make_room(&rid("d"), 0, &d, 600);
        assert!(files.get(&rid("b"), 0).is_none(), "the least recently used left");
        assert!(files.get(&rid("c"), 0).is_some() && files.get(&rid("d"), 0).is_some());
        // A file of nearly the whole budget is kept too, alone.
        let e = files.get_or_open(&rid("e"), 0, open);
        files.make_room(&rid("e"), 0, &e, 990);
        assert!(
            files.get(&rid("e"), 0).is_some(),
            "a file of 99 % of the budget is kept"
        );
        assert!(files.get(&rid("c"), 0).is_none() && files.get(&rid("d"), 0).is_none());
    }

    #[test]
    fn an_ingest_takes_its_memory_out_of_the_cache_while_it_runs() {
        let id = &rid("00000000000000000000000000000009");
        let (_root, store) = store_with_report(id);
        let (_, out) = process_into(&store, id, "mlp_train.pickle");
        let summary = &out.files[0];
        let open = || LoadedFile::open(store.clone(), id, 0, summary);
        let loaded = |files: &LoadedFiles, name: &ReportId| {
            let f = files.get_or_open(name, 0, open);
            f.devices().expect("frames");
            files.reweigh(name, 0, &f);
        };
        let probe = open();
        probe.devices().expect("frames");
        // Room for two files' frames.
        let files = Arc::new(LoadedFiles::new(probe.bytes() * 5 / 2));
        loaded(&files, &rid("a"));
        loaded(&files, &rid("b"));
        assert!(files.get(&rid("a"), 0).is_some() && files.get(&rid("b"), 0).is_some());
        {
            // An ingest that needs room for one and a half: one file stays.
            let _ingest = files.reserve(probe.bytes() * 3 / 2);
            assert_eq!(
                [files.get(&rid("a"), 0).is_some(), files.get(&rid("b"), 0).is_some()]
                    .iter()
                    .filter(|&&kept| kept)
                    .count(),
                1
            );
            // One larger than the whole budget takes all of it, and files loaded meanwhile
            // are let go.
            let _other = files.reserve(probe.bytes() * 10);
            loaded(&files, &rid("c"));
            assert!(
                files.get(&rid("a"), 0).is_none()
                    && files.get(&rid("b"), 0).is_none()
                    && files.get(&rid("c"), 0).is_none()
            );
        }
        // Once the ingests end, the budget is whole again.
        loaded(&files, &rid("a"));
        loaded(&files, &rid("b"));
        assert!(files.get(&rid("a"), 0).is_some() && files.get(&rid("b"), 0).is_some());
    }
}
