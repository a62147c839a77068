//! Text evidence: what an out-of-memory message, a training log around one, a
//! `torch.cuda.memory_summary()` table or an `nvidia-smi` screen says, as read from the text
//! (`importers::oom_message`, `importers::memory_summary`, `importers::nvidia_smi_screen`).
//! Every figure is the printed value converted exactly; what the text does not say is `None`.

use memlens_api::{MemorySummaryFacts, OomBackend, ProcessMemory};

/// Everything one text file holds, in the order it appears.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TextEvidence {
    pub ooms: Vec<OomMessage>,
    pub summaries: Vec<MemorySummaryTable>,
    pub screens: Vec<SmiScreen>,
}

impl TextEvidence {
    pub fn is_empty(&self) -> bool {
        self.ooms.is_empty() && self.summaries.is_empty() && self.screens.is_empty()
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
