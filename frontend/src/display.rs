//! Formatting bytes and times, and stable colours for stacks.

pub use memlens_api::bytes_label as bytes;

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
