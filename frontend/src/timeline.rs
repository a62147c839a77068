//! The memory timeline canvas, flame-style: every allocation band stacked in allocation order
//! on top of one aggregated band for the allocations not drawn individually, with reserved
//! memory as an envelope above, phase ranges along the top, the peak, OOMs and leaks marked, and
//! (when an NVML log of the same GPU was uploaded) the whole GPU's `used` memory as a line.
//!
//! Drawing is imperative over `web_sys::CanvasRenderingContext2d`. A view (start..end) can be
//! drawn from data fetched for another window: pan and zoom redraw at once from what is loaded,
//! and the level-of-detail answer for the new window refines it when it arrives.

use std::collections::HashSet;

use memlens_api::{Band, DeviceSummary, GpuSeries, PhaseRange, Timeline};
use web_sys::CanvasRenderingContext2d;

use crate::display::{axis_time, bytes, stack_colour};

pub const LEFT: f64 = 72.0;
pub const RIGHT: f64 = 12.0;
pub const TOP: f64 = 26.0;
pub const BOTTOM: f64 = 26.0;

/// Search matches' colour (magenta, as memory_viz marks its matches).
pub const MATCH_COLOUR: &str = "rgba(200,0,160,0.95)";

/// What the timeline shows and how.
pub struct TimelineView {
    pub data: Option<Timeline>,
    pub start: i64,
    pub end: i64,
    pub width: f64,
    pub height: f64,
    pub event_axis: bool,
    pub origin: i64,
    pub leak_stacks: HashSet<u32>,
    pub summary: Option<DeviceSummary>,
    pub phases: Vec<PhaseRange>,
    pub hovered: Option<usize>,
    pub pinned: Option<usize>,
    pub selection: Option<(f64, f64)>,
    pub cursor_x: Option<f64>,
    /// The same GPU's `used` memory from an NVML log, with its label.
    pub gpu: Option<(GpuSeries, String)>,
    /// Search matches: drawn in magenta where they are bands, and as spans under the plot.
    pub matches: HashSet<(i64, Option<i64>)>,
    pub match_spans: Vec<(Option<i64>, Option<i64>)>,
}

impl TimelineView {
    pub fn new() -> Self {
        TimelineView {
            data: None,
            start: 0,
            end: 1,
            width: 800.0,
            height: 360.0,
            event_axis: false,
            origin: 0,
            leak_stacks: HashSet::new(),
            summary: None,
            phases: Vec::new(),
            hovered: None,
            pinned: None,
            selection: None,
            cursor_x: None,
            gpu: None,
            matches: HashSet::new(),
            match_spans: Vec::new(),
        }
    }

    fn plot_w(&self) -> f64 {
        (self.width - LEFT - RIGHT).max(1.0)
    }
    fn plot_h(&self) -> f64 {
        (self.height - TOP - BOTTOM).max(1.0)
    }

    pub fn time_to_x(&self, t: i64) -> f64 {
        LEFT + (t - self.start) as f64 / (self.end - self.start).max(1) as f64 * self.plot_w()
    }

    pub fn x_to_time(&self, x: f64) -> i64 {
        self.start + (((x - LEFT) / self.plot_w()) * (self.end - self.start) as f64).round() as i64
    }

    fn y_max(&self) -> f64 {
        let d = match &self.data {
            Some(d) => d,
            None => return 1.0,
        };
        let m = d
            .reserved_max
            .iter()
            .chain(d.allocated_max.iter())
            .copied()
            .max()
            .unwrap_or(1);
        let gpu = self
            .gpu
            .as_ref()
            .and_then(|(g, _)| {
                g.points
                    .iter()
                    .filter(|p| p.time_us >= self.start && p.time_us <= self.end)
                    .map(|p| p.used_max)
                    .max()
            })
            .unwrap_or(0);
        (m.max(gpu).max(1) as f64) * 1.08
    }

    fn y_of(&self, bytes: f64, ymax: f64) -> f64 {
        TOP + self.plot_h() * (1.0 - bytes / ymax)
    }

    /// The x extent of data bucket `b`.
    fn bucket_x(&self, d: &Timeline, b: usize) -> (f64, f64) {
        let span = (d.end - d.start) as f64;
        let t0 = d.start as f64 + span * b as f64 / d.width as f64;
        let t1 = d.start as f64 + span * (b + 1) as f64 / d.width as f64;
        let to_x = |t: f64| LEFT + (t - self.start as f64) / (self.end - self.start).max(1) as f64 * self.plot_w();
        (to_x(t0), to_x(t1))
    }

    /// Bucket range `[b0, b1)` a band covers in the data's buckets.
    fn band_buckets(d: &Timeline, band: &Band) -> (usize, usize) {
        let span = (d.end - d.start).max(1) as f64;
        let w = d.width as f64;
        let b_of = |t: i64| (((t.clamp(d.start, d.end) - d.start) as f64 / span) * w).floor() as usize;
        // Both ends included, as the server counts them: freed inside a bucket still shows there.
        let b0 = band.t_alloc.map_or(0, b_of).min(d.width - 1);
        let b1 = band.t_free.map_or(d.width, |f| (b_of(f) + 1).min(d.width));
        (b0, b1.max(b0 + 1).min(d.width))
    }

    /// Draws everything. Returns nothing; errors from the canvas are ignored (nothing to do).
    pub fn draw(&self, ctx: &CanvasRenderingContext2d) {
        ctx.set_fill_style_str("#ffffff");
        ctx.fill_rect(0.0, 0.0, self.width, self.height);
        let Some(d) = &self.data else {
            ctx.set_fill_style_str("#667");
            ctx.set_font("14px sans-serif");
            let _ = ctx.fill_text("loading the timeline…", LEFT + 10.0, TOP + 30.0);
            return;
        };
        if d.width == 0 {
            return;
        }
        let ymax = self.y_max();
        ctx.save();
        ctx.begin_path();
        ctx.rect(LEFT, TOP, self.plot_w(), self.plot_h());
        ctx.clip();

        // Aggregated band of the allocations not drawn individually.
        let mut base = vec![0f64; d.width];
        ctx.set_fill_style_str("rgba(140,150,165,0.55)");
        for (b, slot) in base.iter_mut().enumerate() {
            let (x0, x1) = self.bucket_x(d, b);
            let rest = d.rest_max[b] as f64;
            *slot = rest;
            if rest > 0.0 {
                let y = self.y_of(rest, ymax);
                ctx.fill_rect(x0, y, (x1 - x0).max(0.5), TOP + self.plot_h() - y);
            }
        }
        // Bands stacked in allocation order; one rectangle per run of constant height.
        for (i, band) in d.bands.iter().enumerate() {
            let (b0, b1) = Self::band_buckets(d, band);
            let leak = self.leak_stacks.contains(&band.stack_id);
            let highlighted = self.hovered == Some(i) || self.pinned == Some(i);
            let fill = if highlighted {
                "rgba(255,200,0,0.95)".to_owned()
            } else if self.matches.contains(&(band.addr, band.t_alloc)) {
                MATCH_COLOUR.to_owned()
            } else if leak {
                "rgba(214,39,40,0.85)".to_owned()
            } else {
                stack_colour(band.stack_id, 0.8)
            };
            ctx.set_fill_style_str(&fill);
            let size = band.size as f64;
            let mut run_start = b0;
            for b in b0..=b1 {
                let end_run = b == b1 || (b > run_start && base[b] != base[run_start]);
                if end_run {
                    let (x0, _) = self.bucket_x(d, run_start);
                    let (_, x1) = self.bucket_x(d, b - 1);
                    let y_top = self.y_of(base[run_start] + size, ymax);
                    let y_bot = self.y_of(base[run_start], ymax);
                    ctx.fill_rect(x0, y_top, (x1 - x0).max(0.5), (y_bot - y_top).max(0.3));
                    run_start = b;
                }
            }
            for v in base.iter_mut().take(b1).skip(b0) {
                *v += size;
            }
        }
        // Allocated envelope (max) and reserved envelope.
        ctx.set_line_width(1.0);
        ctx.set_stroke_style_str("rgba(30,60,120,0.9)");
        self.step_line(ctx, d, &d.allocated_max, ymax);
        ctx.set_line_width(2.0);
        ctx.set_stroke_style_str("rgba(60,60,60,0.9)");
        self.step_line(ctx, d, &d.reserved_max, ymax);
        self.draw_pools(ctx, ymax);
        if !self.event_axis {
            self.draw_outside_pytorch(ctx, d, ymax);
            self.draw_gpu(ctx, ymax);
        }
        ctx.restore();

        self.draw_axes(ctx, ymax);
        self.draw_phases(ctx);
        self.draw_iterations(ctx);
        self.draw_markers(ctx, ymax);
        if let Some((a, b)) = self.selection {
            ctx.set_fill_style_str("rgba(52,101,164,0.18)");
            ctx.fill_rect(a.min(b), TOP, (a - b).abs(), self.plot_h());
        }
        if let Some(x) = self.cursor_x {
            ctx.set_stroke_style_str("rgba(0,0,0,0.35)");
            ctx.set_line_width(1.0);
            ctx.begin_path();
            ctx.move_to(x, TOP);
            ctx.line_to(x, TOP + self.plot_h());
            ctx.stroke();
        }
    }

    /// Each private pool's reserved bytes (MemPool, CUDA graph pool) as its own envelope, named
    /// at its highest point.
    fn draw_pools(&self, ctx: &CanvasRenderingContext2d, ymax: f64) {
        let Some(s) = &self.summary else { return };
        const COLOURS: [&str; 4] = [
            "rgba(0,128,128,0.95)",
            "rgba(214,120,0,0.95)",
            "rgba(120,40,160,0.95)",
            "rgba(40,140,40,0.95)",
        ];
        let private = s.pools.iter().filter(|p| !p.reserved_series.is_empty());
        for (k, p) in private.enumerate() {
            let colour = COLOURS[k % COLOURS.len()];
            ctx.set_stroke_style_str(colour);
            ctx.set_line_width(1.5);
            ctx.begin_path();
            for (i, pt) in p.reserved_series.iter().enumerate() {
                let x = self.time_to_x(pt.x).max(LEFT - 1.0);
                let y = self.y_of(pt.bytes as f64, ymax);
                if i == 0 {
                    ctx.move_to(x, y);
                } else {
                    ctx.line_to(x, y);
                }
                let next = p
                    .reserved_series
                    .get(i + 1)
                    .map_or(LEFT + self.plot_w(), |n| self.time_to_x(n.x));
                ctx.line_to(next, y);
            }
            ctx.stroke();
            let label = match &p.name {
                Some(n) => format!("pool {n}"),
                None => format!("pool ({}, {})", p.pool_id[0], p.pool_id[1]),
            };
            ctx.set_fill_style_str(colour);
            ctx.set_font("11px sans-serif");
            let y = self.y_of(p.peak_reserved_bytes as f64, ymax);
            let _ = ctx.fill_text(&label, LEFT + 6.0, (y - 3.0).max(TOP + 10.0));
        }
    }

    /// Memory outside PyTorch's allocator over time: where the NVML log's `used` (the lowest of
    /// the samples in effect) is above PyTorch's reserved, the gap is shaded.
    fn draw_outside_pytorch(&self, ctx: &CanvasRenderingContext2d, d: &Timeline, ymax: f64) {
        let Some((g, _)) = &self.gpu else { return };
        if g.points.is_empty() {
            return;
        }
        ctx.set_fill_style_str("rgba(117,80,123,0.16)");
        let mut k = 0;
        for (b, &reserved) in d.reserved_max.iter().enumerate() {
            let (x0, x1) = self.bucket_x(d, b);
            while k + 1 < g.points.len() && self.time_to_x(g.points[k + 1].time_us) <= x0 {
                k += 1;
            }
            let p = &g.points[k];
            if self.time_to_x(p.time_us) > x1 || p.used_min <= reserved {
                continue;
            }
            let (y_used, y_reserved) = (self.y_of(p.used_min as f64, ymax), self.y_of(reserved as f64, ymax));
            ctx.fill_rect(x0, y_used, (x1 - x0).max(0.5), y_reserved - y_used);
        }
    }

    /// The NVML `used` line: a step from each sample to the next, min..max where aggregated.
    fn draw_gpu(&self, ctx: &CanvasRenderingContext2d, ymax: f64) {
        let Some((g, label)) = &self.gpu else { return };
        if g.points.is_empty() {
            return;
        }
        ctx.set_stroke_style_str("rgba(117,80,123,0.95)");
        ctx.set_line_width(1.5);
        let _ = ctx.set_line_dash(&js_sys::Array::of2(&6.0.into(), &3.0.into()));
        ctx.begin_path();
        for (i, p) in g.points.iter().enumerate() {
            let x = self.time_to_x(p.time_us).max(LEFT - 1.0);
            let (y_hi, y_lo) = (self.y_of(p.used_max as f64, ymax), self.y_of(p.used_min as f64, ymax));
            if i == 0 {
                ctx.move_to(x, y_lo);
            } else {
                ctx.line_to(x, y_lo);
            }
            if y_hi != y_lo {
                ctx.line_to(x, y_hi);
                ctx.line_to(x, y_lo);
            }
            let next_x = g
                .points
                .get(i + 1)
                .map_or(LEFT + self.plot_w(), |n| self.time_to_x(n.time_us));
            ctx.line_to(next_x, y_lo);
        }
        ctx.stroke();
        let _ = ctx.set_line_dash(&js_sys::Array::new());
        ctx.set_fill_style_str("rgba(117,80,123,1)");
        ctx.set_font("11px sans-serif");
        let w = ctx.measure_text(label).map(|m| m.width()).unwrap_or(120.0);
        let _ = ctx.fill_text(label, LEFT + self.plot_w() - w - 6.0, TOP + 12.0);
    }

    fn step_line(&self, ctx: &CanvasRenderingContext2d, d: &Timeline, v: &[i64], ymax: f64) {
        ctx.begin_path();
        for (b, &val) in v.iter().enumerate() {
            let (x0, x1) = self.bucket_x(d, b);
            let y = self.y_of(val as f64, ymax);
            if b == 0 {
                ctx.move_to(x0, y);
            } else {
                ctx.line_to(x0, y);
            }
            ctx.line_to(x1, y);
        }
        ctx.stroke();
    }

    fn draw_axes(&self, ctx: &CanvasRenderingContext2d, ymax: f64) {
        ctx.set_fill_style_str("#333");
        ctx.set_font("11px sans-serif");
        ctx.set_stroke_style_str("rgba(0,0,0,0.08)");
        ctx.set_line_width(1.0);
        for k in 0..=4 {
            let v = ymax / 1.08 * k as f64 / 4.0;
            let y = self.y_of(v, ymax);
            ctx.begin_path();
            ctx.move_to(LEFT, y);
            ctx.line_to(LEFT + self.plot_w(), y);
            ctx.stroke();
            let _ = ctx.fill_text(&bytes(v as i64), 4.0, y + 4.0);
        }
        for k in 0..=6 {
            let x = LEFT + self.plot_w() * k as f64 / 6.0;
            let t = self.x_to_time(x);
            let label = axis_time(t, self.origin, self.event_axis);
            let _ = ctx.fill_text(&label, (x - 20.0).max(LEFT), self.height - 8.0);
        }
    }

    /// Where a span of time lies across the plot, `(x0, x1)`, when any of it shows.
    fn visible_span(&self, start: i64, end: i64) -> Option<(f64, f64)> {
        let x0 = self.time_to_x(start).max(LEFT);
        let x1 = self.time_to_x(end).min(LEFT + self.plot_w());
        (x1 > LEFT && x0 < LEFT + self.plot_w() && x1 - x0 >= 0.5).then_some((x0, x1))
    }

    /// A band of the strip above the plot in `fill`, named where it is wider than `min_label`.
    fn draw_strip_band(
        &self,
        ctx: &CanvasRenderingContext2d,
        (x0, x1): (f64, f64),
        fill: &str,
        name: &str,
        min_label: f64,
    ) {
        ctx.set_fill_style_str(fill);
        ctx.fill_rect(x0, 4.0, x1 - x0, 16.0);
        if x1 - x0 > min_label {
            ctx.set_fill_style_str("#223");
            let _ = ctx.fill_text(name, x0 + 3.0, 15.0);
        }
    }

    /// The loop's steps (`iterations.steps`, whatever evidence found them) as alternating bands:
    /// a thin strip under the phases, or, when the run has no phases, the phases' own strip,
    /// each step named with its peak where it is wide enough.
    fn draw_iterations(&self, ctx: &CanvasRenderingContext2d) {
        let Some(s) = self.summary.as_ref().filter(|_| !self.event_axis) else {
            return;
        };
        ctx.set_font("10px sans-serif");
        for (k, step) in s.iterations.steps.iter().enumerate() {
            let Some((x0, x1)) = self.visible_span(step.start_us, step.end_us) else {
                continue;
            };
            let fill = if k % 2 == 0 {
                "rgba(78,154,6,0.30)"
            } else {
                "rgba(78,154,6,0.14)"
            };
            if self.phases.is_empty() {
                let name = format!("iteration {k} · peak {}", bytes(step.peak_allocated_bytes));
                self.draw_strip_band(ctx, (x0, x1), fill, &name, 110.0);
            } else {
                ctx.set_fill_style_str(fill);
                ctx.fill_rect(x0, 20.5, x1 - x0, 4.5);
            }
        }
    }

    fn draw_phases(&self, ctx: &CanvasRenderingContext2d) {
        ctx.set_font("10px sans-serif");
        for (i, p) in self.phases.iter().enumerate() {
            if self.event_axis {
                break; // phases are timed; they have no place on the entry axis
            }
            if p.end_us == Some(p.start_us) {
                // An instant (an `annotate` entry): a tick and its name.
                let x = self.time_to_x(p.start_us);
                if x >= LEFT && x <= LEFT + self.plot_w() {
                    ctx.set_fill_style_str("rgba(150,60,20,0.9)");
                    ctx.fill_rect(x - 0.5, 4.0, 1.5, 16.0);
                    let _ = ctx.fill_text(&p.name, x + 3.0, 15.0);
                }
                continue;
            }
            let Some(span) = self.visible_span(p.start_us, p.end_us.unwrap_or(self.end)) else {
                continue;
            };
            let fill = if i % 2 == 0 {
                "rgba(52,101,164,0.25)"
            } else {
                "rgba(52,101,164,0.12)"
            };
            self.draw_strip_band(ctx, span, fill, &p.name, 50.0);
        }
    }

    /// Search matches as spans along the bottom of the plot (alloc → free), each starting with a tick.
    fn draw_matches(&self, ctx: &CanvasRenderingContext2d) {
        if self.match_spans.is_empty() {
            return;
        }
        let (lo, hi) = (LEFT, LEFT + self.plot_w());
        let y = TOP + self.plot_h() - 4.0;
        ctx.set_stroke_style_str(MATCH_COLOUR);
        ctx.set_line_width(2.0);
        for &(a, f) in &self.match_spans {
            let x0 = a.map_or(lo, |t| self.time_to_x(t)).max(lo);
            let x1 = f.map_or(hi, |t| self.time_to_x(t)).min(hi);
            if x1 < lo || x0 > hi {
                continue;
            }
            ctx.begin_path();
            ctx.move_to(x0, y - 6.0);
            ctx.line_to(x0, y);
            ctx.line_to(x1.max(x0 + 1.0), y);
            ctx.stroke();
        }
    }

    fn draw_markers(&self, ctx: &CanvasRenderingContext2d, ymax: f64) {
        self.draw_matches(ctx);
        let Some(s) = &self.summary else { return };
        ctx.set_font("bold 12px sans-serif");
        for o in &s.ooms {
            let t = if self.event_axis {
                Some(o.event_index as i64)
            } else {
                o.time_us
            };
            let Some(t) = t else { continue };
            let x = self.time_to_x(t);
            if !(LEFT..=LEFT + self.plot_w()).contains(&x) {
                continue;
            }
            ctx.set_stroke_style_str("#cc0000");
            ctx.set_line_width(2.0);
            ctx.begin_path();
            ctx.move_to(x, TOP);
            ctx.line_to(x, TOP + self.plot_h());
            ctx.stroke();
            ctx.set_fill_style_str("#cc0000");
            let _ = ctx.fill_text("OOM", x + 3.0, TOP + 12.0);
        }
        let peak_t = if self.event_axis {
            s.peak_event_index.map(|i| i as i64)
        } else {
            s.peak_time_us
        };
        if let Some(t) = peak_t {
            let x = self.time_to_x(t);
            if (LEFT..=LEFT + self.plot_w()).contains(&x) {
                let y = self.y_of(s.peak_allocated_bytes as f64, ymax);
                ctx.set_fill_style_str("#cc0000");
                ctx.begin_path();
                let _ = ctx.arc(x, y, 5.0, 0.0, std::f64::consts::TAU);
                ctx.fill();
                let label = format!("peak {}", bytes(s.peak_allocated_bytes));
                let w = ctx.measure_text(&label).map(|m| m.width()).unwrap_or(80.0);
                let lx = if x + w + 10.0 > LEFT + self.plot_w() {
                    x - w - 8.0
                } else {
                    x + 8.0
                };
                let _ = ctx.fill_text(&label, lx, (y - 6.0).max(TOP + 12.0));
            }
        }
    }

    /// The band under (x, y), if any.
    pub fn band_at(&self, x: f64, y: f64) -> Option<usize> {
        let d = self.data.as_ref()?;
        if x < LEFT || x > LEFT + self.plot_w() || d.width == 0 {
            return None;
        }
        let ymax = self.y_max();
        let t = self.x_to_time(x);
        let b = ((((t - d.start) as f64) / (d.end - d.start).max(1) as f64) * d.width as f64).floor();
        if b < 0.0 || b >= d.width as f64 {
            return None;
        }
        let b = b as usize;
        let target = (1.0 - (y - TOP) / self.plot_h()) * ymax;
        let mut base = d.rest_max[b] as f64;
        if target < base {
            return None;
        }
        for (i, band) in d.bands.iter().enumerate() {
            let (b0, b1) = Self::band_buckets(d, band);
            if b < b0 || b >= b1 {
                continue;
            }
            let top = base + band.size as f64;
            if target >= base && target < top {
                return Some(i);
            }
            base = top;
        }
        None
    }

    /// The OOM marker near x, if any.
    pub fn oom_at(&self, x: f64) -> Option<usize> {
        let s = self.summary.as_ref()?;
        s.ooms.iter().position(|o| {
            let t = if self.event_axis {
                Some(o.event_index as i64)
            } else {
                o.time_us
            };
            t.is_some_and(|t| (self.time_to_x(t) - x).abs() <= 5.0)
        })
    }

    /// Zooms by `factor` (<1 zooms in) around x.
    pub fn zoom_at(&mut self, x: f64, factor: f64, full: (i64, i64)) {
        let t = self.x_to_time(x.clamp(LEFT, LEFT + self.plot_w()));
        let span = ((self.end - self.start) as f64 * factor).max(2.0);
        let frac = (x - LEFT) / self.plot_w();
        let mut s = t - (span * frac) as i64;
        let mut e = s + span as i64;
        let (fs, fe) = full;
        if e - s >= fe - fs {
            s = fs;
            e = fe;
        }
        self.start = s;
        self.end = e.max(s + 2);
    }

    /// Pans by a fraction of the visible span.
    pub fn pan(&mut self, frac: f64) {
        let shift = ((self.end - self.start) as f64 * frac) as i64;
        self.start += shift;
        self.end += shift;
    }
}

impl Default for TimelineView {
    fn default() -> Self {
        Self::new()
    }
}
