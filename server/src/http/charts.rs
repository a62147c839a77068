//! `chart.png` / `chart.svg`: the report's stored default chart, or one drawn on request for a
//! chosen snapshot device or NVML GPU.

use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use memlens_api::routes;
use memlens_api::ChartParams;

use super::error::{internal, ApiError, Q};
use super::queries::{frames_of, pick, pick_gpu};
use super::state::{loaded_file, loaded_gpu_logs, summary_of, ReportPath, Shared};
use crate::charts::{render_png, render_svg, Chart};
use crate::ids::ReportId;
use crate::storage::reportdata::{self, CHART_PNG, CHART_SVG};

/// What a chart request draws.
#[derive(Clone, Copy)]
enum Target {
    Device { file: usize, device: i64 },
    Gpu { log: usize, gpu: i64 },
}

async fn chart(st: Shared, id: ReportId, q: ChartParams, svg: bool) -> Result<Response, ApiError> {
    let r = summary_of(&st, &id).await?;
    let (ctype, key) = if svg {
        ("image/svg+xml", CHART_SVG)
    } else {
        ("image/png", CHART_PNG)
    };
    let stored = if q.is_default() {
        let store = st.reports.store.clone();
        let id = id.clone();
        tokio::task::spawn_blocking(move || reportdata::read_object(store.as_ref(), &id, key))
            .await
            .map_err(internal)?
            .map_err(internal)?
    } else {
        None
    };
    let body: Vec<u8> = match stored {
        Some(bytes) => bytes,
        None => {
            let gpu_chart = q.log.is_some() || q.gpu.is_some() || r.files.is_empty();
            let target = if gpu_chart {
                let (log, g) = pick_gpu(&r, q.log, q.gpu)?;
                Target::Gpu { log, gpu: g.gpu }
            } else {
                let (file, d) = pick(&r, q.file, q.device)?;
                Target::Device { file, device: d.device }
            };
            // Only what the chart draws is loaded: the NVML samples or the one file.
            let (logs, file_data) = match target {
                Target::Gpu { .. } => (Some(loaded_gpu_logs(&st, &id).await?), None),
                Target::Device { file, .. } => (None, Some(loaded_file(&st, &id, file).await?)),
            };
            let file_to_reweigh = file_data.clone();
            let drawn = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, ApiError> {
                let missing = |what: &str| ApiError::Internal(format!("{what} missing"));
                let devices;
                let chart = match target {
                    Target::Gpu { log, gpu } => {
                        let summary = &r.gpu_logs[log];
                        let g = summary
                            .gpus
                            .iter()
                            .find(|g| g.gpu == gpu)
                            .ok_or_else(|| missing("GPU summary"))?;
                        let samples = logs
                            .as_deref()
                            .and_then(|l| l.get(log))
                            .ok_or_else(|| missing("GPU samples"))?;
                        Chart::Gpu(samples, summary, g)
                    }
                    Target::Device { file, device } => {
                        let d = r.files[file]
                            .devices
                            .iter()
                            .find(|d| d.device == device)
                            .ok_or_else(|| missing("device summary"))?;
                        let loaded = file_data.as_deref().ok_or_else(|| missing("file"))?;
                        devices = loaded.devices().map_err(internal)?;
                        Chart::Device(frames_of(&devices, device)?, d)
                    }
                };
                if svg {
                    render_svg(&chart).map(String::into_bytes).map_err(internal)
                } else {
                    render_png(&chart).map_err(internal)
                }
            })
            .await
            .map_err(internal)?;
            if let (Some(f), Target::Device { file, .. }) = (file_to_reweigh, target) {
                st.reports.files.reweigh(&id, file, &f);
            }
            drawn?
        }
    };
    Ok((
        [
            (header::CONTENT_TYPE, ctype),
            (header::CACHE_CONTROL, "private, max-age=3600"),
        ],
        Body::from(body),
    )
        .into_response())
}

#[utoipa::path(get, path = routes::CHART_PNG, tag = "charts", params(("id" = String, Path), ChartParams), responses((status = 200, content_type = "image/png")))]
pub async fn chart_png(
    State(st): State<Shared>,
    ReportPath(id): ReportPath,
    Q(q): Q<ChartParams>,
) -> Result<Response, ApiError> {
    chart(st, id, q, false).await
}

#[utoipa::path(get, path = routes::CHART_SVG, tag = "charts", params(("id" = String, Path), ChartParams), responses((status = 200, content_type = "image/svg+xml")))]
pub async fn chart_svg(
    State(st): State<Shared>,
    ReportPath(id): ReportPath,
    Q(q): Q<ChartParams>,
) -> Result<Response, ApiError> {
    chart(st, id, q, true).await
}
