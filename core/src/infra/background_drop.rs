//! Dropping a large value on a thread of its own: handing hundreds of megabytes back to the
//! kernel (unmapping, freeing their pages) is time that whoever waits for the thread that
//! owned the value need not spend — the decoder's memo at the end of a decode, a file's tables
//! once a run that keeps nothing is done with them.

/// Below this many bytes a value is dropped where it is.
const BACKGROUND_FROM: usize = 8 << 20;

/// Drops `value`, which holds about `bytes` of memory, on a thread of its own when that is a
/// lot (else here, now).
pub fn drop_in_background<T: Send + 'static>(value: T, bytes: usize) {
    if bytes < BACKGROUND_FROM {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("memlens-drop".into())
        .spawn(move || drop(value));
    // Without a thread it is dropped here, as it would have been.
    drop(spawned);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_dropped_aside_are_dropped_here_or_on_their_own_thread() {
        struct Signals(std::sync::mpsc::Sender<std::thread::ThreadId>);
        impl Drop for Signals {
            fn drop(&mut self) {
                let _ = self.0.send(std::thread::current().id());
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        drop_in_background(Signals(tx.clone()), 1 << 10);
        assert_eq!(
            rx.try_recv(),
            Ok(std::thread::current().id()),
            "a small value, here and now"
        );
        drop_in_background(Signals(tx), BACKGROUND_FROM);
        let on = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("dropped");
        assert_ne!(on, std::thread::current().id(), "a large one, elsewhere");
    }
}
