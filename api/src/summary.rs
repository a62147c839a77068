//! What the analyses say of a file: `memlens analyze --json`'s output, a snapshot's summary per
//! device (peak, pools, categories, OOMs, leaks, iterations, phases) and where it came from.

use serde::{Deserialize, Serialize};

use crate::*;

/// What `memlens analyze --json` prints: one entry per input file.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct AnalyzeOutput {
    /// Allocator snapshots, one summary each.
    pub files: Vec<FileSummary>,
    /// NVML-based logs (nvidia-smi CSV, dmon, pynvml JSON lines), one summary each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_logs: Vec<GpuLogSummary>,
    /// Files recognised but with nothing to analyse, each with why (kept aside).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedFile>,
    /// With several snapshot files: the ranks of one job side by side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunOverview>,
}

/// A file a report kept but could not analyse, and why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct SkippedFile {
    pub file: String,
    pub reason: String,
}

/// The summary of one analysed input file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct FileSummary {
    /// The file name as given.
    pub file: String,
    /// The sniffed format, e.g. `pytorch_snapshot`.
    pub format: Format,
    /// Whether the input was gzip-compressed.
    pub gzip: bool,
    /// Facts about the snapshot's shape (PyTorch version era, settings).
    pub source: SourceInfo,
    /// One summary per device that has a trace or segments.
    pub devices: Vec<DeviceSummary>,
    /// The device a report opens on: the one with OOMs (the most), else the one with the
    /// largest leak, else the highest peak.
    #[serde(default)]
    pub focus_device: Option<i64>,
    /// What a vLLM or SGLang startup log says of the server's memory, when the file is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving: Option<ServingSummary>,
}

/// What the importer learnt about the producer of the file.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct SourceInfo {
    /// `true` when trace entries carry `time_us` (PyTorch ≥ 2.2); otherwise times are event indices.
    pub has_time_us: bool,
    /// `expandable_segments` from `allocator_settings`, when present.
    pub expandable_segments: Option<bool>,
    /// The raw `PYTORCH_CUDA_ALLOC_CONF` string, when present.
    pub alloc_conf: Option<String>,
    /// Number of `external_annotations` entries (`record_function` START/END markers).
    pub annotation_count: usize,
    /// Number of distinct stack traces (frame lists) in the file.
    pub stack_count: usize,
    /// Top-level keys the importer did not know and ignored.
    pub ignored_keys: Vec<String>,
    /// What the producer can and cannot see, for formats other than PyTorch snapshots.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The distributed rank the script wrote into `user_metadata` (`rank=3`), when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
}

/// Per-device headline numbers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct DeviceSummary {
    pub device: i64,
    /// `time_us` or `event_order` (PyTorch < 2.2 snapshots have no timestamps).
    pub time_axis: TimeAxis,
    pub event_count: usize,
    /// Number of `alloc` trace entries.
    pub alloc_count: usize,
    /// Peak of requested bytes (PyTorch's `requested_bytes.all.peak`).
    pub peak_allocated_bytes: i64,
    /// When the peak was first reached (µs since the Unix epoch); `None` without timestamps.
    pub peak_time_us: Option<i64>,
    /// Index of the trace entry that reached the peak; `None` when the peak predates the trace.
    pub peak_event_index: Option<usize>,
    /// Peak of reserved bytes (PyTorch's `reserved_bytes.all.peak`).
    pub peak_reserved_bytes: i64,
    /// Requested bytes live before the first trace entry (allocated before recording began).
    pub initial_allocated_bytes: i64,
    pub initial_reserved_bytes: i64,
    pub final_allocated_bytes: i64,
    pub final_reserved_bytes: i64,
    /// Live allocations at the peak, grouped by folded stack, largest first.
    pub peak_stacks: Vec<StackGroup>,
    /// Live allocations at the peak, grouped by the model-code frame that asked, largest first.
    #[serde(default)]
    pub peak_modules: Vec<ModuleGroup>,
    /// Fragmentation at the peak.
    pub fragmentation_at_peak: Option<FragmentationPoint>,
    pub oom_count: usize,
    pub ooms: Vec<OomExplanation>,
    pub leaks: Vec<LeakCandidate>,
    /// Iterations the leak analysis used, and where they came from.
    pub iterations: IterationInfo,
    /// `record_function` ranges of this device, in start order.
    pub phases: Vec<PhaseRange>,
    /// What the memory is made of: every category with allocations, in `Category` order.
    #[serde(default)]
    pub categories: Vec<CategorySummary>,
    /// The trace does not reach back to the start of the run: it frees memory it never saw
    /// allocated (the ring buffer, `max_entries`, dropped its start, or recording began late).
    /// What predates it is counted from the final state.
    #[serde(default)]
    pub trace_truncated: bool,
    /// With a truncated trace: when its history is complete from (its first entry, µs; `None`
    /// without timestamps), and how many of its frees are of memory from before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complete_from_us: Option<i64>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub frees_before_trace: usize,
    /// The allocator's pools on this device, the default one first.
    #[serde(default)]
    pub pools: Vec<PoolSummary>,
    /// Frees that waited on another stream (`record_stream`) for a millisecond or more, by the
    /// stack that allocated the block, most bytes × wait first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_free_stalls: Vec<FreeStall>,
    /// The most bytes those stalled frees held at once (freed, not yet reusable).
    #[serde(default, skip_serializing_if = "is_zero_bytes")]
    pub pending_free_peak_bytes: i64,
    /// What a `torch.cuda.memory_summary()` table said of this device, when one was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_summary: Option<MemorySummaryFacts>,
    /// The key/value cache of generation, when the snapshot shows one (category `cache`, rule
    /// `kv_cache`): its bytes at the peak, per token and per sequence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache: Option<KvCacheSummary>,
    /// What the report leads with, in one or two sentences: the first OOM's verdict, else the
    /// most important finding (a leak, fragmentation at the peak, what the peak is made of).
    #[serde(default)]
    pub verdict: String,
}

impl DeviceSummary {
    /// The bytes of every allocation a rule placed, in whichever category (a rule's share).
    pub fn bytes_by_rule(&self, rule: CategoryRule) -> i64 {
        self.categories
            .iter()
            .flat_map(|c| &c.rules)
            .filter(|r| r.rule == rule)
            .map(|r| r.bytes)
            .sum()
    }
}

/// A generation's key/value cache as the snapshot shows it (`devices[].kv_cache`). Tokens and
/// sequences are read from the allocations themselves: a cache grown by `torch.cat` grows each
/// of its tensors by one token of every sequence a step, and generation's own token ids (int64,
/// batch × length) grow by 8 bytes a sequence a step.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct KvCacheSummary {
    /// The cache's tensors live at the peak of allocated bytes, without the old copy a
    /// `torch.cat` growing one of them was replacing there (`growth_copy_bytes_at_peak`).
    pub bytes_at_peak: i64,
    /// Its tensors at the peak (keys and values of every layer: 2 × layers for one cache).
    pub tensors_at_peak: usize,
    /// The old tensor a `torch.cat` was replacing at the peak (0 when none was).
    pub growth_copy_bytes_at_peak: i64,
    /// The most the cache held at once, copies included.
    pub max_bytes: i64,
    /// The cache was grown by `torch.cat` (a dynamic cache): every step makes each of its
    /// tensors again, one token longer.
    pub grown_by_copy: bool,
    /// Tokens a sequence the cache held at the peak, when read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_at_peak: Option<i64>,
    /// Sequences generated at once (the batch), when read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequences: Option<i64>,
    /// Bytes one token of one sequence costs over every layer's key and value
    /// (2 × layers × kv heads × head dim × dtype bytes), when read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_token: Option<i64>,
    /// Bytes one sequence's cache held at the peak (`bytes_per_token` × `tokens_at_peak`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_sequence: Option<i64>,
    /// How tokens and sequences were read, or why they were not.
    pub how: String,
}

impl KvCacheSummary {
    /// One line for people: its bytes at the peak, per token and per sequence where read.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{} at the peak in {} tensor(s)",
            crate::bytes_label(self.bytes_at_peak),
            self.tensors_at_peak
        );
        if let (Some(t), Some(b)) = (self.tokens_at_peak, self.sequences) {
            s += &format!(", {t} tokens × {b} sequences");
        } else if let Some(b) = self.sequences {
            s += &format!(", {b} sequences");
        }
        if let Some(p) = self.bytes_per_token {
            s += &format!(", {} a token a sequence", crate::bytes_label(p));
        }
        if let Some(q) = self.bytes_per_sequence {
            s += &format!(", {} a sequence", crate::bytes_label(q));
        }
        if self.grown_by_copy {
            s += &format!(
                "; grown by torch.cat (a {} copy at the peak)",
                crate::bytes_label(self.growth_copy_bytes_at_peak)
            );
        }
        s
    }
}

/// The counters of a `torch.cuda.memory_summary()` table. Byte cells are printed rounded down
/// in the column's unit, so they are exact only below 768 KiB; each is the printed value
/// converted exactly (`12 GiB` = 12 × 2^30).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct MemorySummaryFacts {
    /// `CUDA OOMs` (exact).
    pub num_ooms: i64,
    /// `cudaMalloc retries` (exact): allocations that had to free the cache and try again.
    pub num_alloc_retries: i64,
    /// `Allocated memory` (block sizes; `memory_stats()`'s `allocated_bytes.all`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated: Option<SummaryRow>,
    /// `Active memory`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<SummaryRow>,
    /// `Requested memory` (2.x only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested: Option<SummaryRow>,
    /// `GPU reserved memory`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved: Option<SummaryRow>,
    /// `Non-releasable memory`: free parts of split blocks (fragmentation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub non_releasable: Option<SummaryRow>,
    /// `Allocations` (counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocations: Option<SummaryRow>,
    /// `GPU reserved segments` (counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segments: Option<SummaryRow>,
}

/// One metric's four columns in a memory summary: `Cur Usage`, `Peak Usage`, `Tot Alloc`,
/// `Tot Freed`.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct SummaryRow {
    pub current: i64,
    pub peak: i64,
    pub allocated: i64,
    pub freed: i64,
}

fn is_zero_bytes(n: &i64) -> bool {
    *n == 0
}

/// One memory pool of a device.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct PoolSummary {
    /// `segment_pool_id`: `[0, 0]` the default pool, `[0, n]` a MemPool, `[n, 0]` a CUDA graph's.
    pub pool_id: [i64; 2],
    pub kind: PoolKind,
    /// The pool's name, when the snapshot says it: `pool=NAME` (or `pool_name`, `mempool`) in
    /// the `user_metadata` of what was allocated in it (`_set_memory_metadata("pool=kv_cache")`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The most the pool reserved at once (segments freed before the end count in the default pool).
    pub peak_reserved_bytes: i64,
    pub final_reserved_bytes: i64,
    pub final_allocated_bytes: i64,
    pub segments_at_end: usize,
    /// A private pool's reserved bytes over the trace, for drawing its envelope: one point per
    /// change, or the most of each of at most [`POOL_SERIES_POINTS`] runs of changes. `x` is on
    /// the device's time axis (µs, or the entry index without timestamps). Empty for the
    /// default pool, which is the device's reserved less the private ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reserved_series: Vec<AxisPoint>,
}

/// How many points a pool's `reserved_series` has at most.
pub const POOL_SERIES_POINTS: usize = 256;

/// A value at one place on a device's time axis.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct AxisPoint {
    pub x: i64,
    pub bytes: i64,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One category's share of a device's memory.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct CategorySummary {
    pub category: Category,
    /// Requested bytes of this category live at the allocated peak.
    pub bytes_at_peak: i64,
    /// The most requested bytes of this category live at any one time.
    pub max_bytes: i64,
    /// The steady state: this category's most bytes within one training iteration, median over
    /// the iterations (`None` without iterations).
    #[serde(default)]
    pub steady_bytes: Option<i64>,
    /// Allocations placed in this category.
    pub count: usize,
    /// The rules that placed them, with how many allocations and bytes each.
    pub rules: Vec<RuleShare>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct RuleShare {
    pub rule: CategoryRule,
    pub count: usize,
    /// Σ requested bytes of those allocations (over the whole run, not at one time).
    pub bytes: i64,
}

/// The x axis of a device's trace.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum TimeAxis {
    TimeUs,
    EventOrder,
}

/// Fragmentation of the cached segments at one instant.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct FragmentationPoint {
    pub event_index: usize,
    pub time_us: Option<i64>,
    pub reserved_bytes: i64,
    /// Bytes in blocks handed out (block sizes, after rounding).
    pub active_bytes: i64,
    /// Reserved bytes in free (inactive) blocks.
    pub reserved_free_bytes: i64,
    pub largest_free_block_bytes: i64,
    /// `1 - largest_free / reserved_free`: 0 when all free memory is one block, near 1 when it is shattered.
    pub fragmentation_index: f64,
}

/// Why an allocation failed, in numbers, and what to do about it. A snapshot's OOMs and those
/// read from text (an error message, a log) carry the same fields; what a source does not say
/// is `None` (or, for the allocator's free blocks, 0 with `text.missing` naming it).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct OomExplanation {
    /// The trace entry of the failure (0 for an OOM read from text: see `text.line`).
    pub event_index: usize,
    pub time_us: Option<i64>,
    /// Bytes the failing request asked for (already rounded by the allocator).
    pub requested_bytes: i64,
    /// Bytes CUDA reported free on the device at the failure.
    pub device_free_bytes: Option<i64>,
    pub reserved_bytes: i64,
    pub allocated_bytes: i64,
    /// Reserved bytes sitting in free blocks of cached segments.
    pub reserved_free_bytes: i64,
    pub largest_free_block_bytes: i64,
    /// What stood in the way (see [`OomCause`]).
    pub cause: OomCause,
    /// Where in the training step it failed.
    #[serde(default)]
    pub phase: OomPhase,
    /// The per-process cap, when the evidence names it (the message's `allowed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_bytes: Option<i64>,
    /// The device's whole memory, when the evidence names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_total_bytes: Option<i64>,
    /// Processes on the device and what each held (the message's `Process N has …`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<ProcessMemory>,
    /// Memory of this process outside PyTorch's reserve (context, NCCL, other libraries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub non_pytorch_bytes: Option<i64>,
    /// Bytes in private pools (CUDA graphs, MemPools) that other allocations cannot use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_pool_bytes: Option<i64>,
    /// The verdict in one or two sentences, with the first remedy and its number.
    #[serde(default)]
    pub remedy: String,
    /// Changes that make it fit, most useful first, each with the bytes it saves at the failure.
    #[serde(default)]
    pub remedies: Vec<Remedy>,
    /// How much of this step's batch fits under the limit the failure hit (forward/backward).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fits: Option<OomFit>,
    /// What was live at the failure, grouped by stack, largest first.
    pub live_stacks: Vec<StackGroup>,
    /// What was live at the failure, by category (see `DeviceSummary::categories`).
    #[serde(default)]
    pub live_categories: Vec<CategoryBytes>,
    /// The stack of the failing request.
    pub stack: Vec<String>,
    /// For an OOM read from text: where it was and what the text left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<OomText>,
}

/// One process on the device at an OOM, as the message names it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct ProcessMemory {
    /// The pid as printed (a host pid inside a container); `None` for the failing process's
    /// own sentence, which prints none.
    pub pid: Option<i64>,
    pub bytes: i64,
    /// `Including non-PyTorch memory, this process has …`: the failing process itself.
    pub this_process: bool,
}

/// One change that makes a failed step fit.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct Remedy {
    pub action: RemedyAction,
    /// Bytes it frees at the failure (0 where it frees none there but fixes the cause).
    pub saves_bytes: i64,
    /// What to do and what it rests on, in plain words.
    pub note: String,
}

/// How much of a failed step's batch fits.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct OomFit {
    /// The largest fraction of this step's batch that fits under `limit_bytes` (0 when even the
    /// part that does not scale with the batch does not fit; at most 1).
    pub batch_fraction: f64,
    /// The limit the failure hit: the cap, or what the device had for this process.
    pub limit_bytes: i64,
    /// Bytes the whole step needs that do not scale with the batch (weights, optimizer state,
    /// gradients).
    pub fixed_bytes: i64,
    /// Bytes the whole step needs at the full batch that scale with it (activations, inputs,
    /// backward's working set), extrapolated from what was made before the failure.
    pub batch_bytes: i64,
    /// How `batch_bytes` was extrapolated, in plain words.
    pub how: String,
    /// A generation's parts of the need, for counting its cache at another length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<GenerationFit>,
}

/// The parts of a generation's need at its whole batch (`fits.generation`): the fraction is
/// `(budget_bytes - fixed_bytes) / max(prefill_bytes, decode_bytes)`, the decode step's need
/// holding `cache_bytes` counted at `cache_tokens` a sequence.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct GenerationFit {
    /// What the allocator can hand out under the limit (the limit over the reserve's overhead).
    pub budget_bytes: i64,
    pub prefill_bytes: i64,
    pub decode_bytes: i64,
    /// The cache (with its `torch.cat` copy) in `decode_bytes`.
    pub cache_bytes: i64,
    /// Tokens a sequence the cache was counted at, when read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_tokens: Option<i64>,
    /// The prompt's tokens a sequence, when read (the first cache tensor over the growth a step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<i64>,
}

/// Where an OOM read from text stood and what the text left out.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct OomText {
    /// 1-based line of the message in the file.
    pub line: usize,
    /// The `[rankN]:` prefix of a distributed launcher, when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// `torch.OutOfMemoryError`, `torch.cuda.OutOfMemoryError`, `RuntimeError`, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exception: Option<String>,
    pub backend: OomBackend,
    /// Figures the message would hold but did not (cut short, or an older PyTorch's shape).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    /// The code that captures a snapshot at the next OOM (`memlens.torch.on_oom`).
    pub capture_next_time: String,
    /// What XLA printed around a JAX out-of-memory error: its wording, the BFC allocator's dump,
    /// the buffer assignment's stats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xla: Option<crate::XlaOomText>,
    /// Generation's lengths the traceback's source lines set (`max_new_tokens=512`,
    /// `max_length=1024` on the `generate(...)` line), read to count a snapshot's key/value
    /// cache at its full length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_new_tokens: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_length: Option<i64>,
}

/// Allocations still live at the end that piled up over iterations.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct LeakCandidate {
    pub stack_id: Option<u32>,
    /// The folded stack (see [`StackGroup::stack`]).
    pub stack: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_stack_reason: Option<NoStackReason>,
    /// Bytes (requested) live at the end from this stack.
    pub bytes: i64,
    /// Allocations live at the end from this stack.
    pub count: usize,
    /// How many distinct iterations those allocations were made in (without iterations: at how
    /// many separate moments of the run they were made).
    pub iterations_seen: usize,
    /// Average bytes added per iteration (or per moment of growth).
    pub bytes_per_iteration: i64,
}

/// The run's loop steps and where they came from: what the leak analysis counts in, what the
/// timeline draws as iteration bands and what a comparison puts side by side.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct IterationInfo {
    /// `annotations:<range name>` for step ranges, `optimizer_steps:<range name>` for optimizer
    /// steps, `allocation_pattern` for the allocation rhythm, `none` when the run shows no
    /// loop (a label for people; `evidence` is the closed set).
    pub source: String,
    /// Steps found (0 with `none`).
    pub count: usize,
    /// With `none`: what leak detection did instead, in plain words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Which evidence found the steps.
    #[serde(default)]
    pub evidence: IterationEvidence,
    /// The name family of the ranges that gave the steps (`iteration`, `Optimizer.step#SGD.step`),
    /// with `step_ranges` and `optimizer_steps`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range_name: Option<String>,
    /// Each step, whole, in order (only with timestamps, and for at most 10,000 steps).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<IterationStep>,
}

impl IterationInfo {
    /// Where the steps came from, for people: `the script's "iteration" ranges`, `optimizer
    /// steps`, `the allocation rhythm`.
    pub fn found_from(&self) -> String {
        match self.evidence {
            IterationEvidence::StepRanges => {
                format!("the script's \"{}\" ranges", self.range_name.as_deref().unwrap_or(""))
            }
            IterationEvidence::OptimizerSteps => "optimizer steps".to_owned(),
            IterationEvidence::AllocationRhythm => "the allocation rhythm".to_owned(),
            IterationEvidence::None => self.source.clone(),
        }
    }
}

/// One step of a run's loop: from where it starts to where the next starts (the last, to its
/// own end), and the most bytes allocated within it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct IterationStep {
    pub start_us: i64,
    pub end_us: i64,
    pub peak_allocated_bytes: i64,
}

/// A `record_function` range from `external_annotations`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct PhaseRange {
    pub device: i64,
    pub name: String,
    pub start_us: i64,
    /// `None` when the END marker is missing (range still open at dump time).
    pub end_us: Option<i64>,
}
