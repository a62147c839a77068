//! Wire types shared by the memlens server, the CLI's `--json` output and the WASM frontend.
//!
//! Invariant: this crate depends on `serde` only, so it compiles for `wasm32-unknown-unknown`
//! and never pulls tokio, polars or anything with system dependencies into the frontend.

mod check;
mod compare;
mod enums;
mod formats;
mod gpu_log;
mod jax;
mod jobs;
mod labels;
mod meta;
mod params;
mod payloads;
mod plan;
pub mod routes;
mod segments;
mod serving;
mod stacks;
mod summary;

pub use gpu_log::*;
pub use jax::{BfcBin, BufferAssignmentStats, PeakBuffer, XlaOomText, XlaOomWording};
pub use jobs::{JobRegression, JobRun, JobView};
pub use payloads::*;
pub use segments::*;
pub use serving::{
    KvCacheDtype, ServingAction, ServingCause, ServingEngine, ServingFailure, ServingPlan, ServingRemedy,
    ServingSummary,
};
pub use summary::*;

pub use labels::{bytes_label, device_label, HOST_DEVICE};
pub use meta::{MetaPatch, ReportMeta};
pub use stacks::{stack_headline, FlameGraph, FlameNode, FreeStall, ModuleGroup, StackGroup};

pub use check::{
    delta_ratio, signed_bytes_label, signed_ratio_label, CategoryCheck, CategoryLimit, CheckMeasure, CheckOutcome,
    CheckedRun, Limit, Thresholds, Violation,
};
pub use compare::{
    AlignedTimelines, CategoryDelta, CategorySteady, CompareAxis, ComparedRun, Comparison, RankPeak, RankSource,
    RunOverview, Side, SideRef, StackDelta,
};

pub use enums::{
    ActivationDtype, BlockState, Category, CategoryRule, IterationEvidence, NoStackReason, OomBackend, OomCause,
    OomPhase, OptimizerKind, PoolKind, RemedyAction, ReportState, SampleClock, Stage, TimelineAxis, UnknownUsedMeaning,
    UsedMeaning,
};
pub use formats::{formats_markdown, formats_sentence, Format, FormatInfo, FORMATS};
pub use params::{
    ChartParams, CheckParams, CompareParams, DeleteParams, DeviceParams, FileParams, GpuSamplesParams, SearchParams,
    SegmentsParams, TimelineParams, UploadParams, WhatIfParams,
};
pub use plan::{
    AutocastDtype, ModelFamily, Plan, PlanAlternative, PlanChange, PlanModel, PlanOptimizer, PlanParams, PlanPhase,
    WeightsDtype,
};
