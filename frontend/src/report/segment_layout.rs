//! The segment map's layout on its canvas: how many segments it draws and how wide their bars
//! are, which is also what the map is asked for (the report state's request and the panel's
//! drawing read the same numbers).

/// Segments drawn, largest first: the map is asked for only these.
pub const SEGMENT_ROWS: usize = 80;
/// Left of the bars: the segment's size label; right of them: margin.
pub const LABEL_WIDTH: f64 = 100.0;
const BAR_MARGIN: f64 = 70.0;

/// The canvas width the map is drawn at (its panel's width).
pub fn canvas_width(c: &web_sys::HtmlCanvasElement) -> f64 {
    c.parent_element().map(|p| p.client_width()).unwrap_or(900).max(400) as f64
}

/// The pixels the largest segment's bar spans on `c` (what the map is asked for at).
pub fn bar_pixels(c: Option<&web_sys::HtmlCanvasElement>) -> usize {
    (c.map_or(900.0, canvas_width) - LABEL_WIDTH - BAR_MARGIN) as usize
}
