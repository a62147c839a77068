//! [`RowPipe`]: the trace's rows pushed into their columns on a thread beside the decoder.
//!
//! Pushing a row into [`TraceRows`] — each narrow column checked against its base, the
//! `(size, stack)` pair's code looked up in a hash table, the stream compared with the one
//! before, pages asked for ahead — was about 250 of the 1,650 instructions an entry costs the
//! decoder's thread, while the machine's other core was mostly idle. The decoder now writes each
//! row as one fixed-size [`Row`] into a batch; a full batch goes to a thread that pushes its rows
//! in order and sends it back empty. A trace of fewer than [`BATCH`] rows starts no thread, and
//! where no thread can be started the rows are pushed on the decoder's.
//!
//! Only the columns travel: the sparse rows (`device_free`, notes) stay with the lowering, which
//! numbers rows itself ([`RowPipe::len`]). The rows in flight are bounded: the decoder waits
//! when [`IN_FLIGHT`] batches are queued.

use std::sync::mpsc::{channel, sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use crate::infra::fault_ahead::FaultAhead;
use crate::tables::{Action, TraceRows};

/// Rows a batch holds (320 KiB: it stays in the caches between the two threads).
pub const BATCH: usize = 8192;
/// Full batches queued for the pushing thread before the decoder waits.
const IN_FLIGHT: usize = 2;

/// One trace row as the lowering read it.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    pub action: Action,
    pub addr: i64,
    pub size: i64,
    pub stream: i64,
    pub time_us: i64,
    pub stack: u32,
}

/// Rows pushed in order into one [`TraceRows`], on a thread of their own once there are more
/// than a batch of them.
pub struct RowPipe {
    /// Rows not yet handed over.
    batch: Vec<Row>,
    /// Rows pushed so far (handed over or not).
    len: usize,
    /// The pushing thread, once started.
    beside: Option<Beside>,
    /// Whether starting it was tried (once: the first full batch, when `here` is still empty).
    tried: bool,
    /// The columns while no thread pushes them.
    here: TraceRows,
    /// `here`'s pages asked for ahead of its rows.
    here_ahead: [FaultAhead; 5],
}

/// The pushing thread and its two queues.
struct Beside {
    full: SyncSender<Vec<Row>>,
    empty: Receiver<Vec<Row>>,
    thread: JoinHandle<TraceRows>,
}

impl Default for RowPipe {
    fn default() -> Self {
        RowPipe {
            batch: Vec::with_capacity(BATCH),
            len: 0,
            beside: None,
            tried: false,
            here: TraceRows::default(),
            here_ahead: Default::default(),
        }
    }
}

impl RowPipe {
    /// Rows pushed so far: the next row's number.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn push(&mut self, row: Row) {
        self.batch.push(row);
        self.len += 1;
        if self.batch.len() == BATCH {
            self.hand_over();
        }
    }

    /// Sends the full batch to the pushing thread (started on the first), taking back an empty
    /// one; pushes it here when no thread could be started.
    #[cold]
    #[inline(never)]
    fn hand_over(&mut self) {
        if !self.tried {
            self.tried = true;
            self.beside = start_pushing(std::mem::take(&mut self.here), self.here_ahead);
        }
        let Some(beside) = &self.beside else {
            push_all(&mut self.here, &mut self.here_ahead, &mut self.batch);
            return;
        };
        let next = beside.empty.try_recv().unwrap_or_else(|_| Vec::with_capacity(BATCH));
        let full = std::mem::replace(&mut self.batch, next);
        if let Err(back) = beside.full.send(full) {
            // The thread is gone (it panicked): `finish` says so.
            self.batch = back.0;
            self.batch.clear();
        }
    }

    /// Every row pushed, in order, as columns.
    pub fn finish(&mut self) -> TraceRows {
        let Some(Beside { full, empty, thread }) = self.beside.take() else {
            push_all(&mut self.here, &mut self.here_ahead, &mut self.batch);
            return std::mem::take(&mut self.here);
        };
        if !self.batch.is_empty() {
            let _ = full.send(std::mem::take(&mut self.batch));
        }
        drop((full, empty));
        match thread.join() {
            Ok(rows) => rows,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

impl Drop for RowPipe {
    /// A decode that failed: the thread ends once its queue is closed.
    fn drop(&mut self) {
        if let Some(Beside { full, thread, .. }) = self.beside.take() {
            drop(full);
            let _ = thread.join();
        }
    }
}

/// Starts the thread that pushes batches into `rows`; `None` when it cannot be started.
fn start_pushing(mut rows: TraceRows, mut ahead: [FaultAhead; 5]) -> Option<Beside> {
    let (full, full_rx) = sync_channel::<Vec<Row>>(IN_FLIGHT);
    let (empty_tx, empty) = channel::<Vec<Row>>();
    let thread = std::thread::Builder::new()
        .name("memlens-rows".into())
        .spawn(move || {
            for mut batch in full_rx {
                push_all(&mut rows, &mut ahead, &mut batch);
                let _ = empty_tx.send(batch);
            }
            rows
        })
        .ok()?;
    Some(Beside { full, empty, thread })
}

/// Pushes and empties `batch`.
fn push_all(rows: &mut TraceRows, ahead: &mut [FaultAhead; 5], batch: &mut Vec<Row>) {
    for r in batch.drain(..) {
        rows.push(r.action, r.addr, r.size, r.stream, r.time_us, r.stack);
        rows.fault_ahead(ahead);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(i: usize) -> Row {
        Row {
            action: if i.is_multiple_of(3) { Action::FreeRequested } else { Action::Alloc },
            addr: (1 << 40) + 512 * (i as i64 % 1000),
            size: 512 * (i as i64 % 7),
            stream: (i / 10_000) as i64,
            time_us: 1_000 + i as i64,
            stack: (i % 5) as u32,
        }
    }

    fn pushed_directly(n: usize) -> TraceRows {
        let mut rows = TraceRows::default();
        for i in 0..n {
            let r = row(i);
            rows.push(r.action, r.addr, r.size, r.stream, r.time_us, r.stack);
        }
        rows
    }

    #[test]
    fn rows_through_the_pipe_are_the_rows_pushed_directly_in_order() {
        // Less than a batch (no thread), exactly one, and several with a partial last one.
        for n in [0, 1, BATCH - 1, BATCH, 5 * BATCH + 17] {
            let mut pipe = RowPipe::default();
            for i in 0..n {
                assert_eq!(pipe.len(), i);
                pipe.push(row(i));
            }
            assert_eq!(pipe.beside.is_some(), n >= BATCH, "a thread only past a batch ({n} rows)");
            assert_eq!(pipe.finish(), pushed_directly(n), "{n} rows");
        }
    }
}
