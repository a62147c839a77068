//! How numbers and devices are written for people, the same on the server and in the browser.

/// The device number pinned host memory (`host_segments`, `host_traces`) is shown under.
pub const HOST_DEVICE: i64 = -1;

/// A device as people name it: `cuda:0`, or `host (pinned)` for [`HOST_DEVICE`].
pub fn device_label(device: i64) -> String {
    if device == HOST_DEVICE {
        "host (pinned)".to_owned()
    } else {
        format!("cuda:{device}")
    }
}

/// Bytes for people: `1.84 GiB`, `16.0 MiB`, `343.3 KiB`, `512 B` (powers of 1024), the same on
/// the server (labels it makes up) and in the browser.
pub fn bytes_label(b: i64) -> String {
    let f = b as f64;
    let a = f.abs();
    if a >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", f / (1u64 << 30) as f64)
    } else if a >= (1u64 << 20) as f64 {
        format!("{:.1} MiB", f / (1u64 << 20) as f64)
    } else if a >= 1024.0 {
        format!("{:.1} KiB", f / 1024.0)
    } else {
        format!("{b} B")
    }
}
