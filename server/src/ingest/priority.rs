//! CPU priorities of the server's threads: ingests are batch work and run below everything
//! else (nice 10), so a machine saturated by uploads still answers its readers and its health
//! check (`server/tests/http/limits.rs`, its two hundred readers beside ten ingests). Best
//! effort: where the system refuses, nothing changes.

/// Nice value of ingest threads (and the import threads they start, which inherit it).
pub const INGEST: i32 = 10;

/// Lowers the calling thread's CPU priority to `nice` (never raises it).
pub fn lower_to(nice: i32) {
    #[cfg(target_os = "linux")]
    // SAFETY: get/setpriority have no memory effects; on Linux `who = 0` with PRIO_PROCESS
    // names the calling thread only.
    unsafe {
        let current = libc::getpriority(libc::PRIO_PROCESS, 0);
        if current < nice {
            let _ = libc::setpriority(libc::PRIO_PROCESS, 0, nice);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}
