//! Store objects encoded on several threads and put by one: a processed file's Parquet objects
//! (its tables, each device's frames, the segment map's checkpoints) take most of an ingest's
//! "storing" stage, and encoding one of them is single-threaded. [`put_all`] runs the
//! encodings on up to one thread per core and hands each finished object to the
//! [`DataWriter`] on the calling thread as soon as it is ready, so at most one finished object
//! per encoding thread waits in memory.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};

use crate::storage::store::DataWriter;

/// An object to write: its key, and how to make its bytes.
pub struct EncodeJob<'a, E> {
    pub key: String,
    pub encode: Box<dyn FnOnce() -> Result<Vec<u8>, E> + Send + 'a>,
}

impl<'a, E> EncodeJob<'a, E> {
    pub fn new(key: String, encode: impl FnOnce() -> Result<Vec<u8>, E> + Send + 'a) -> Self {
        EncodeJob {
            key,
            encode: Box::new(encode),
        }
    }
}

/// Encodes `jobs` (taken in the order given: put the largest first) on up to `threads` threads
/// and puts each object through `put` on this thread. The first error (an encoding's or a
/// put's) stops the jobs not yet begun and is returned; objects already put stay put (the
/// caller's [`DataWriter`] is committed only on success).
pub fn put_all<'a, E: Send>(
    w: &mut dyn DataWriter,
    jobs: Vec<EncodeJob<'a, E>>,
    threads: usize,
    put: impl Fn(&mut dyn DataWriter, &str, &[u8]) -> Result<(), E>,
) -> Result<(), E> {
    let threads = threads.clamp(1, jobs.len().max(1));
    let queue = Mutex::new(jobs.into_iter());
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::sync_channel::<(String, Result<Vec<u8>, E>)>(0);
        for _ in 0..threads {
            let (tx, queue, stop) = (tx.clone(), &queue, &stop);
            scope.spawn(move || loop {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let Some(job) = queue.lock().ok().and_then(|mut q| q.next()) else {
                    return;
                };
                let started = std::time::Instant::now();
                let bytes = (job.encode)();
                if let Ok(b) = &bytes {
                    tracing::debug!(key = %job.key, bytes = b.len(), "encoded in {:.0} ms", started.elapsed().as_secs_f64() * 1e3);
                }
                if tx.send((job.key, bytes)).is_err() {
                    return;
                }
            });
        }
        drop(tx);
        let mut first_error = None;
        for (key, bytes) in rx.iter() {
            let done = bytes.and_then(|b| put(w, &key, &b));
            if let Err(e) = done {
                stop.store(true, Ordering::Relaxed);
                first_error = Some(e);
                break;
            }
        }
        // Dropping the receiver fails the senders still waiting; they stop.
        drop(rx);
        first_error.map_or(Ok(()), Err)
    })
}

/// How many threads encode a file's objects: one per core the process may use.
pub fn encode_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::store::StoreResult;

    /// A data writer that keeps what it is given.
    #[derive(Default)]
    struct Kept {
        objects: Vec<(String, Vec<u8>)>,
    }

    impl DataWriter for Kept {
        fn put(&mut self, key: &str, bytes: &[u8]) -> StoreResult<()> {
            self.objects.push((key.to_owned(), bytes.to_vec()));
            Ok(())
        }
        fn commit(self: Box<Self>) -> StoreResult<()> {
            Ok(())
        }
    }

    fn put(w: &mut dyn DataWriter, key: &str, bytes: &[u8]) -> Result<(), String> {
        w.put(key, bytes).map_err(|e| e.to_string())
    }

    fn jobs(n: usize, failing: Option<usize>) -> Vec<EncodeJob<'static, String>> {
        (0..n)
            .map(|i| {
                EncodeJob::new(format!("k{i}"), move || {
                    if Some(i) == failing {
                        Err(format!("k{i} cannot be encoded"))
                    } else {
                        Ok(vec![i as u8; i + 1])
                    }
                })
            })
            .collect()
    }

    #[test]
    fn every_object_is_put_once_with_its_own_bytes() {
        for threads in [1, 2, 7] {
            let mut w = Kept::default();
            put_all(&mut w, jobs(20, None), threads, put).expect("all put");
            let mut got = w.objects;
            got.sort_by_key(|(k, _)| k[1..].parse::<usize>().unwrap());
            assert_eq!(got.len(), 20);
            for (i, (k, b)) in got.iter().enumerate() {
                assert_eq!(k, &format!("k{i}"));
                assert_eq!(b, &vec![i as u8; i + 1]);
            }
        }
    }

    #[test]
    fn an_encoding_error_is_returned_and_stops_the_rest() {
        let mut w = Kept::default();
        let err = put_all(&mut w, jobs(50, Some(3)), 2, put).expect_err("k3 fails");
        assert_eq!(err, "k3 cannot be encoded");
        assert!(w.objects.iter().all(|(k, _)| k != "k3"));
        assert!(w.objects.len() < 50);
    }

    #[test]
    fn a_put_error_is_returned() {
        let mut w = Kept::default();
        let refusing = |w: &mut dyn DataWriter, key: &str, bytes: &[u8]| -> Result<(), String> {
            if key == "k1" {
                return Err("disk full".into());
            }
            put(w, key, bytes)
        };
        assert_eq!(put_all(&mut w, jobs(5, None), 2, refusing), Err("disk full".into()));
        assert!(w.objects.iter().all(|(k, _)| k != "k1"));
    }

    #[test]
    fn no_jobs_put_nothing() {
        let mut w = Kept::default();
        put_all(&mut w, jobs(0, None), 4, put).expect("nothing to do");
        assert!(w.objects.is_empty());
    }
}
