//! Formatting bytes and times, and stable colours for stacks.

pub fn bytes(b: i64) -> String {
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

/// A time on the axis, relative to the trace start: seconds (µs axis) or an entry number.
pub fn axis_time(t: i64, origin: i64, event_axis: bool) -> String {
    if event_axis {
        format!("#{t}")
    } else {
        let s = (t - origin) as f64 / 1e6;
        if s.abs() >= 10.0 {
            format!("{s:.1} s")
        } else if s.abs() >= 0.01 {
            format!("{s:.3} s")
        } else {
            format!("{:.0} µs", s * 1e6)
        }
    }
}

/// A stable colour per stack id (golden-angle hues), never red: red marks leaks and OOMs.
pub fn stack_colour(stack: u32, alpha: f64) -> String {
    let hue = 25.0 + (stack as f64 * 137.508) % 310.0;
    format!("hsla({hue:.0}, 55%, 55%, {alpha})")
}
