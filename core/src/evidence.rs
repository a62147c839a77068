//! Text evidence: what an out-of-memory message, a training log around one, a
//! `torch.cuda.memory_summary()` table, an `nvidia-smi` screen or a vLLM / SGLang startup log
//! says, as read from the text (`importers::oom_message`, `importers::memory_summary`,
//! `importers::nvidia_smi_screen`, `importers::serving_log`). Every figure is the printed value
//! converted exactly; what the text does not say is `None`.

use memlens_api::{MemorySummaryFacts, OomBackend, ProcessMemory, ServingEngine};

/// Everything one text file holds, in the order it appears.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TextEvidence {
    pub ooms: Vec<OomMessage>,
    pub summaries: Vec<MemorySummaryTable>,
    pub screens: Vec<SmiScreen>,
    /// Startups of a vLLM or SGLang server (a log may hold several restarts).
    pub serving: Vec<ServingStartup>,
}

impl TextEvidence {
    pub fn is_empty(&self) -> bool {
        self.ooms.is_empty() && self.summaries.is_empty() && self.screens.is_empty() && self.serving.is_empty()
    }
}

/// One out-of-memory message.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OomMessage {
    /// 1-based line where the message starts.
    pub line: usize,
    /// `[rankN]:` before it (torchrun).
    pub rank: Option<u32>,
    /// The exception's name before the message (`torch.OutOfMemoryError`, `RuntimeError`, …).
    pub exception: Option<String>,
    pub backend: OomBackend,
    /// PyTorch's device index (after `CUDA_VISIBLE_DEVICES`).
    pub device: Option<i64>,
    /// The request as the allocator rounded it (`Tried to allocate`).
    pub requested: Option<i64>,
    pub device_total: Option<i64>,
    pub device_free: Option<i64>,
    /// The per-process cap (`allowed`; MPS's `max allowed`; cudaMallocAsync's `PyTorch limit`).
    pub allowed: Option<i64>,
    /// Live tensors' bytes (the message's allocated figure less what sits in private pools).
    pub allocated: Option<i64>,
    /// PyTorch's whole reserve.
    pub reserved: Option<i64>,
    /// `reserved by PyTorch but unallocated`.
    pub reserved_unallocated: Option<i64>,
    /// `allocated in private pools (e.g., CUDA Graphs)`.
    pub private_pool: Option<i64>,
    /// `Process N has …` and `Including non-PyTorch memory, this process has …`.
    pub processes: Vec<ProcessMemory>,
    /// MPS's `other allocations`: memory of this process outside PyTorch's allocator.
    pub other_allocations: Option<i64>,
    /// The traceback's frames before the message, outermost first, as `file:line:function`.
    pub traceback: Vec<String>,
    /// Figures this message's shape holds that the text did not (cut short).
    pub missing: Vec<String>,
    /// How many times the same message (same rank, same text) stood in the file.
    pub occurrences: usize,
    /// What XLA printed around a JAX out-of-memory error (`importers::oom_message::xla`).
    pub xla: Option<memlens_api::XlaOomText>,
    /// Generation's `max_new_tokens=N` and `max_length=N` on the traceback's source lines.
    pub max_new_tokens: Option<i64>,
    pub max_length: Option<i64>,
}

/// One `torch.cuda.memory_summary()` table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemorySummaryTable {
    /// 1-based line of its first row.
    pub line: usize,
    pub device: i64,
    pub facts: MemorySummaryFacts,
}

/// One `nvidia-smi` screen (the default output, no arguments).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SmiScreen {
    /// 1-based line of its version row.
    pub line: usize,
    /// The timestamp above the table as µs since the epoch, read as UTC (it has no zone).
    pub time_us: Option<i64>,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    pub gpus: Vec<SmiGpu>,
    pub processes: Vec<SmiProcess>,
}

/// One GPU of the screen's GPU box.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SmiGpu {
    pub index: i32,
    pub name: String,
    pub bus_id: Option<String>,
    /// `Memory-Usage` (`{used}MiB / {total}MiB`); `None` where it reads `Not Supported`.
    pub used_bytes: Option<i64>,
    pub total_bytes: Option<i64>,
    pub util_pct: Option<f64>,
}

/// One row of the screen's `Processes:` box.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SmiProcess {
    pub gpu: i32,
    pub pid: i64,
    /// `C`, `G`, `C+G`, `M`, …
    pub kind: String,
    pub name: String,
    /// `None` where it reads `N/A` (Windows in WDDM mode).
    pub used_bytes: Option<i64>,
}

/// One startup of a vLLM or SGLang server, as its log prints it: settings, the memory budget
/// the engine drew, the KV cache it sized, and the error that stopped it. Byte figures are the
/// printed GiB (both engines print `GB` for 2^30 bytes) converted to the nearest byte, negative
/// where the engine printed a negative budget.
#[derive(Debug, Clone, PartialEq)]
pub struct ServingStartup {
    pub engine: ServingEngine,
    /// 1-based lines of its first and last line read.
    pub line: usize,
    pub end_line: usize,
    /// Ranks that printed memory lines (their figures are the first rank's).
    pub ranks: usize,
    pub version: Option<String>,
    pub model: Option<String>,
    pub dtype: Option<String>,
    pub kv_cache_dtype: Option<String>,
    pub tensor_parallel_size: Option<i64>,
    pub pipeline_parallel_size: Option<i64>,
    pub gpu_memory_utilization: Option<f64>,
    pub mem_fraction_static: Option<f64>,
    pub max_model_len: Option<i64>,
    pub max_num_seqs: Option<i64>,
    pub enforce_eager: Option<bool>,
    pub total_gpu_memory: Option<i64>,
    /// SGLang's `avail mem` before the weights (free memory at startup).
    pub free_at_start: Option<i64>,
    pub weights: Option<i64>,
    /// vLLM 0.6.4's `peak_torch_memory`: the weights and the activation peak together.
    pub peak_torch: Option<i64>,
    pub activation_peak: Option<i64>,
    pub non_torch: Option<i64>,
    /// Newer vLLM's `consumed memory (weights + non-torch)`.
    pub weights_and_non_torch: Option<i64>,
    pub cuda_graph: Option<i64>,
    /// The CUDA graph figure is vLLM's estimate before capture (no capture line followed).
    pub cuda_graph_estimated: bool,
    pub kv_cache_bytes: Option<i64>,
    pub kv_cache_tokens: Option<i64>,
    pub gpu_blocks: Option<i64>,
    pub block_size: Option<i64>,
    pub max_concurrency: Option<f64>,
    pub concurrency_tokens: Option<i64>,
    /// Where the startup was when lines of each stage were printed (for an OOM's stage).
    pub stages: ServingStages,
    pub error: Option<ServingError>,
}

impl ServingStartup {
    /// A startup of `engine` beginning on `line`, nothing read yet.
    pub fn new(engine: ServingEngine, line: usize) -> ServingStartup {
        ServingStartup {
            engine,
            line,
            end_line: line,
            ranks: 1,
            version: None,
            model: None,
            dtype: None,
            kv_cache_dtype: None,
            tensor_parallel_size: None,
            pipeline_parallel_size: None,
            gpu_memory_utilization: None,
            mem_fraction_static: None,
            max_model_len: None,
            max_num_seqs: None,
            enforce_eager: None,
            total_gpu_memory: None,
            free_at_start: None,
            weights: None,
            peak_torch: None,
            activation_peak: None,
            non_torch: None,
            weights_and_non_torch: None,
            cuda_graph: None,
            cuda_graph_estimated: false,
            kv_cache_bytes: None,
            kv_cache_tokens: None,
            gpu_blocks: None,
            block_size: None,
            max_concurrency: None,
            concurrency_tokens: None,
            stages: ServingStages::default(),
            error: None,
        }
    }

    /// Whether it printed any memory figure or an error (not settings alone).
    pub fn has_figures(&self) -> bool {
        [
            self.total_gpu_memory,
            self.weights,
            self.peak_torch,
            self.activation_peak,
            self.non_torch,
            self.weights_and_non_torch,
            self.cuda_graph,
            self.kv_cache_bytes,
            self.kv_cache_tokens,
            self.gpu_blocks,
        ]
        .iter()
        .any(Option::is_some)
            || self.error.is_some()
    }

    /// Takes every setting this startup lacks from `other` (a command line's).
    pub fn fill_settings_from(&mut self, other: &ServingStartup) {
        fn take<T: Clone>(a: &mut Option<T>, b: &Option<T>) {
            if a.is_none() {
                a.clone_from(b);
            }
        }
        take(&mut self.model, &other.model);
        take(&mut self.dtype, &other.dtype);
        take(&mut self.kv_cache_dtype, &other.kv_cache_dtype);
        take(&mut self.tensor_parallel_size, &other.tensor_parallel_size);
        take(&mut self.pipeline_parallel_size, &other.pipeline_parallel_size);
        take(&mut self.gpu_memory_utilization, &other.gpu_memory_utilization);
        take(&mut self.mem_fraction_static, &other.mem_fraction_static);
        take(&mut self.max_model_len, &other.max_model_len);
        take(&mut self.max_num_seqs, &other.max_num_seqs);
        take(&mut self.enforce_eager, &other.enforce_eager);
    }
}

/// The 1-based line each stage of a startup ended or began on, where printed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServingStages {
    pub weights_loaded: Option<usize>,
    pub kv_cache_sized: Option<usize>,
    pub graph_capture_began: Option<usize>,
}

/// The error that stopped a startup, with the figures it prints.
#[derive(Debug, Clone, PartialEq)]
pub struct ServingError {
    pub kind: ServingErrorKind,
    /// 1-based line.
    pub line: usize,
    /// The line from the error's message on.
    pub message: String,
}

/// What a serving engine's startup error says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ServingErrorKind {
    /// vLLM: `The model's max seq len (L) is larger than the maximum number of tokens that can
    /// be stored in KV cache (T)`; v1: `To serve at least one request with the models's max seq
    /// len (L), (N GiB KV cache is needed, which is larger than the available KV cache memory (A
    /// GiB). Based on the available memory, the estimated maximum model length is E.`
    MaxSeqLenOverKvCache {
        max_model_len: i64,
        tokens: Option<i64>,
        needed_bytes: Option<i64>,
        available_bytes: Option<i64>,
        estimated_max_len: Option<i64>,
    },
    /// vLLM's `No available memory for the cache blocks`, SGLang's `Not enough memory` or a
    /// negative profiled token count, and other "insufficient memory" for the KV cache.
    NoKvCacheMemory { profiled_tokens: Option<i64> },
    /// vLLM v1: `Free memory on device (F/T GiB) on startup is less than desired GPU memory
    /// utilization (U, R GiB)`.
    FreeBelowUtilization {
        free: Option<i64>,
        total: Option<i64>,
        utilization: Option<f64>,
    },
}
