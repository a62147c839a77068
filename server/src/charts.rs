//! Server-rendered charts (plotters), as PNG (for `og:image` unfurls and pasting into issues)
//! and SVG: a snapshot device's usage over time with the peak, OOMs and leaks marked, or a
//! GPU's `used` memory from an NVML log. The font is embedded, so rendering needs no system
//! font libraries.

use std::sync::Once;

use memlens_api::{DeviceSummary, GpuLogSummary, GpuSeriesSummary};
use memlens_core::analysis::gpu_samples::gpu_series;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{register_font, FontStyle};
use polars_core::prelude::DataFrame;

use memlens_core::pipeline::DeviceFrames;
use memlens_core::query::{bucket_min_max, bucket_min_max_steps};
use memlens_core::tables::columns::usage as usage_col;

pub const WIDTH: u32 = 1200;
pub const HEIGHT: u32 = 630;
const POINTS: usize = 600;
const FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    #[error("chart: {0}")]
    Draw(String),
    #[error("chart data: {0}")]
    Data(#[from] polars_core::error::PolarsError),
}

fn draw_err<E: std::fmt::Debug>(e: E) -> ChartError {
    ChartError::Draw(format!("{e:?}"))
}

fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

/// Bytes → (divisor, unit) so the axis reads in GiB or MiB.
fn unit(max: i64) -> (f64, &'static str) {
    if max >= 1 << 30 {
        ((1u64 << 30) as f64, "GiB")
    } else {
        ((1u64 << 20) as f64, "MiB")
    }
}

/// A snapshot device's series as its chart draws them: bucketed once, however many times the
/// chart is drawn (the ingest draws a PNG and an SVG; each bucketing reads every entry).
struct DeviceSeries {
    t0: i64,
    t1: i64,
    a_max: Vec<i64>,
    r_max: Vec<i64>,
}

impl DeviceSeries {
    fn of(dev: &DeviceFrames, d: &DeviceSummary) -> Result<DeviceSeries, ChartError> {
        let usage = &dev.usage;
        let time = usage_col::times(usage)?;
        let allocated = usage_col::allocated(usage)?;
        let t0 = time.first().unwrap_or(0);
        let t1 = time.last().unwrap_or(0).max(t0 + 1);
        let (_, a_max) = bucket_min_max(time, allocated, d.initial_allocated_bytes, t0, t1, POINTS);
        let (_, r_max) = bucket_min_max_steps(time, &dev.reserved, t0, t1, POINTS);
        Ok(DeviceSeries { t0, t1, a_max, r_max })
    }
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    d: &DeviceSummary,
    series: &DeviceSeries,
) -> Result<(), ChartError>
where
    DB::ErrorType: 'static,
{
    let DeviceSeries { t0, t1, a_max, r_max } = series;
    let (t0, t1) = (*t0, *t1);
    let has_time = d.peak_time_us.is_some() || matches!(d.time_axis, memlens_api::TimeAxis::TimeUs);
    let ymax = d.peak_reserved_bytes.max(d.peak_allocated_bytes).max(1);
    let (div, unit_name) = unit(ymax);
    let x_of = |t: i64| {
        if has_time {
            (t - t0) as f64 / 1e6
        } else {
            t as f64
        }
    };
    let x_of_bucket = |b: usize| x_of(t0) + (b as f64 + 0.5) * (x_of(t1) - x_of(t0)) / POINTS as f64;
    let x_label = if has_time {
        "seconds since the first trace entry"
    } else {
        "trace entry (no timestamps)"
    };

    root.fill(&WHITE).map_err(draw_err)?;
    let title = format!(
        "device {} — peak {:.2} {unit_name} allocated, {:.2} {unit_name} reserved",
        d.device,
        d.peak_allocated_bytes as f64 / div,
        d.peak_reserved_bytes as f64 / div
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 26))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(x_of(t0)..x_of(t1), 0f64..(ymax as f64 / div) * 1.12)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(unit_name)
        .label_style(("sans-serif", 16))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(draw_err)?;

    let blue = RGBColor(52, 101, 164);
    chart
        .draw_series(
            AreaSeries::new(
                (0..POINTS).map(|b| (x_of_bucket(b), a_max[b] as f64 / div)),
                0.0,
                blue.mix(0.35),
            )
            .border_style(blue),
        )
        .map_err(draw_err)?
        .label("allocated (requested)")
        .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 18, y + 6)], blue.mix(0.5).filled()));
    let grey = RGBColor(90, 90, 90);
    chart
        .draw_series(LineSeries::new(
            (0..POINTS).map(|b| (x_of_bucket(b), r_max[b] as f64 / div)),
            grey.stroke_width(2),
        ))
        .map_err(draw_err)?
        .label("reserved")
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], grey.stroke_width(2)));

    let red = RGBColor(204, 0, 0);
    let top = (ymax as f64 / div) * 1.1;
    for o in &d.ooms {
        let x = match o.time_us {
            Some(t) => x_of(t),
            None => o.event_index as f64,
        };
        chart
            .draw_series(std::iter::once(PathElement::new(
                [(x, 0.0), (x, top)],
                red.stroke_width(2),
            )))
            .map_err(draw_err)?;
        chart
            .draw_series(std::iter::once(Text::new(
                format!("OOM: {:.0} MiB requested", o.requested_bytes as f64 / (1 << 20) as f64),
                (x, top),
                ("sans-serif", 16).into_font().color(&red),
            )))
            .map_err(draw_err)?;
    }
    if let Some(i) = d.peak_event_index {
        let x = d.peak_time_us.map_or(i as f64, x_of);
        let y = d.peak_allocated_bytes as f64 / div;
        mark_peak(&mut chart, (x, y), unit_name, x > (x_of(t0) + x_of(t1)) / 2.0)?;
    }
    if !d.leaks.is_empty() {
        let per_iter: i64 = d.leaks.iter().map(|l| l.bytes_per_iteration).sum();
        let text = format!(
            "{} leak candidate(s): +{:.1} MiB per iteration",
            d.leaks.len(),
            per_iter as f64 / (1 << 20) as f64
        );
        chart
            .draw_series(std::iter::once(Text::new(
                text,
                (x_of(t0), top * 0.97),
                ("sans-serif", 18).into_font().color(&RGBColor(170, 80, 0)),
            )))
            .map_err(draw_err)?;
    }
    finish(chart, &root, SeriesLabelPosition::UpperRight)
}

/// What a chart shows.
pub enum Chart<'a> {
    /// A snapshot device: allocated and reserved over time, peak, OOMs, leaks.
    Device(&'a DeviceFrames, &'a DeviceSummary),
    /// One GPU of an NVML log: `used` over time with its peak.
    Gpu(&'a DataFrame, &'a GpuLogSummary, &'a GpuSeriesSummary),
}

/// A chart with what it draws read from its frames.
enum Prepared<'a> {
    Device(&'a DeviceSummary, DeviceSeries),
    Gpu(&'a DataFrame, &'a GpuLogSummary, &'a GpuSeriesSummary),
}

fn prepare<'a>(c: &Chart<'a>) -> Result<Prepared<'a>, ChartError> {
    Ok(match *c {
        Chart::Device(dev, d) => Prepared::Device(d, DeviceSeries::of(dev, d)?),
        Chart::Gpu(samples, log, g) => Prepared::Gpu(samples, log, g),
    })
}

fn draw_chart<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    c: &Prepared<'_>,
) -> Result<(), ChartError>
where
    DB::ErrorType: 'static,
{
    match c {
        Prepared::Device(d, series) => draw(root, d, series),
        Prepared::Gpu(samples, log, g) => draw_gpu(root, samples, log, g),
    }
}

fn draw_gpu<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    samples: &DataFrame,
    log: &GpuLogSummary,
    g: &GpuSeriesSummary,
) -> Result<(), ChartError>
where
    DB::ErrorType: 'static,
{
    let (t0, t1, _, points) = gpu_series(samples, g.gpu, Some(g.start_time_us), Some(g.end_time_us), POINTS)?;
    let t1 = t1.max(t0 + 1);
    let peak = g.peak_used_bytes.unwrap_or(0).max(1);
    let (div, unit_name) = unit(peak);
    let x_of = |t: i64| (t - t0) as f64 / 1e6;
    root.fill(&WHITE).map_err(draw_err)?;
    let name = g.name.as_deref().map_or(String::new(), |n| format!(" ({n})"));
    let of_total = g
        .total_bytes
        .map_or(String::new(), |t| format!(" of {:.1} {unit_name}", t as f64 / div));
    let title = format!(
        "GPU {}{name} — peak used {:.2} {unit_name}{of_total} ({})",
        g.gpu,
        peak as f64 / div,
        log.format
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x_of(t1), 0f64..(peak as f64 / div) * 1.12)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc("seconds since the first sample")
        .y_desc(unit_name)
        .label_style(("sans-serif", 16))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(draw_err)?;
    let purple = RGBColor(117, 80, 123);
    chart
        .draw_series(
            AreaSeries::new(
                points
                    .iter()
                    .map(|p| (x_of(p.time_us.max(t0)), p.used_max as f64 / div)),
                0.0,
                purple.mix(0.25),
            )
            .border_style(purple.stroke_width(2)),
        )
        .map_err(draw_err)?
        .label("used (whole GPU, as the driver sees it)")
        .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 18, y + 6)], purple.mix(0.5).filled()));
    if let Some(t) = g.peak_time_us {
        let (x, y) = (x_of(t), peak as f64 / div);
        mark_peak(&mut chart, (x, y), unit_name, x > x_of(t1) / 2.0)?;
    }
    finish(chart, &root, SeriesLabelPosition::UpperLeft)
}

type Plot<'a, DB> =
    ChartContext<'a, DB, Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>>;

/// The peak: a dot and its value, the label anchored away from the nearer edge so it is never
/// clipped.
fn mark_peak<'a, DB: DrawingBackend + 'a>(
    chart: &mut Plot<'a, DB>,
    (x, y): (f64, f64),
    unit_name: &str,
    right_half: bool,
) -> Result<(), ChartError>
where
    DB::ErrorType: 'static,
{
    let red = RGBColor(204, 0, 0);
    chart
        .draw_series(std::iter::once(Circle::new((x, y), 6, red.filled())))
        .map_err(draw_err)?;
    let anchor = if right_half { HPos::Right } else { HPos::Left };
    let style = ("sans-serif", 18)
        .into_font()
        .color(&red)
        .pos(Pos::new(anchor, VPos::Bottom));
    chart
        .draw_series(std::iter::once(Text::new(
            format!("peak {y:.2} {unit_name}"),
            (x, y * 1.02),
            style,
        )))
        .map_err(draw_err)?;
    Ok(())
}

/// Draws the legend at `legend` and presents the drawing.
fn finish<'a, DB: DrawingBackend + 'a>(
    mut chart: Plot<'a, DB>,
    root: &DrawingArea<DB, plotters::coord::Shift>,
    legend: SeriesLabelPosition,
) -> Result<(), ChartError>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .position(legend)
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(draw_err)?;
    root.present().map_err(draw_err)?;
    Ok(())
}

/// The chart as PNG bytes.
pub fn render_png(c: &Chart) -> Result<Vec<u8>, ChartError> {
    png_of(&prepare(c)?)
}

/// The chart as an SVG document.
pub fn render_svg(c: &Chart) -> Result<String, ChartError> {
    svg_of(&prepare(c)?)
}

/// The chart as PNG bytes and as an SVG document, its series read once.
pub fn render_png_and_svg(c: &Chart) -> Result<(Vec<u8>, String), ChartError> {
    let prepared = prepare(c)?;
    Ok((png_of(&prepared)?, svg_of(&prepared)?))
}

fn png_of(c: &Prepared<'_>) -> Result<Vec<u8>, ChartError> {
    register();
    let mut rgb = vec![0u8; (WIDTH * HEIGHT * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (WIDTH, HEIGHT)).into_drawing_area();
        draw_chart(root, c)?;
    }
    let mut png = Vec::new();
    let encoder = image::codecs::png::PngEncoder::new(&mut png);
    image::ImageEncoder::write_image(encoder, &rgb, WIDTH, HEIGHT, image::ColorType::Rgb8).map_err(draw_err)?;
    Ok(png)
}

fn svg_of(c: &Prepared<'_>) -> Result<String, ChartError> {
    register();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        draw_chart(root, c)?;
    }
    Ok(svg)
}
