//! What XLA printed around a JAX out-of-memory error (`ooms[].text.xla`): which wording the
//! failure had, the BFC allocator's dump (its limit, bytes in use, the chunk table by bin, the
//! memory map's share in use) and the buffer assignment's stats (what the failing program
//! needed, by kind). Every figure is the printed one, converted to bytes; what the text did not
//! print is `None` or empty.

use serde::{Deserialize, Serialize};

/// How XLA worded the failure (the `ooms[].text.xla.wording` contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum XlaOomWording {
    /// `RESOURCE_EXHAUSTED: Out of memory while trying to allocate N bytes.` (jaxlib's
    /// `XlaRuntimeError`, jax's `JaxRuntimeError`, older `RuntimeError`), or `Out of memory
    /// allocating N bytes.`.
    OutOfMemory,
    /// `Resource exhausted: Failed to allocate request for 32.00MiB (33554432B) on device
    /// ordinal 0` (jaxlib of 2019–2021).
    FailedToAllocateRequest,
    /// TPU: `RESOURCE_EXHAUSTED: Allocation (size=N) would exceed memory (size=M)`.
    AllocationWouldExceedMemory,
    /// The BFC allocator's own line, without an error after it in the text:
    /// `Allocator (GPU_0_bfc) ran out of memory trying to allocate 27.93GiB (rounded to N)`.
    BfcRanOutOfMemory,
}

/// One row of the BFC allocator's chunk table: `Bin (256): Total Chunks: 12, Chunks in use:
/// 11. 3.0KiB allocated for chunks. 2.8KiB in use in bin. 56B client-requested in use in bin.`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct BfcBin {
    /// The bin's smallest chunk size.
    pub bin_bytes: i64,
    pub total_chunks: i64,
    pub chunks_in_use: i64,
    pub allocated_bytes: i64,
    pub in_use_bytes: i64,
    pub client_requested_bytes: i64,
}

/// The buffer assignment's stats (`BufferAssignment OOM Debugging.`): what the failing
/// program needed, by kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct BufferAssignmentStats {
    /// `parameter allocation`: the program's inputs.
    pub parameter_bytes: Option<i64>,
    pub constant_bytes: Option<i64>,
    /// `maybe_live_out allocation`: its outputs.
    pub maybe_live_out_bytes: Option<i64>,
    /// `preallocated temp allocation`: its temporaries (activations, workspaces).
    pub preallocated_temp_bytes: Option<i64>,
    pub total_bytes: Option<i64>,
    pub total_fragmentation_bytes: Option<i64>,
    /// The largest buffers at the program's peak, as printed: `(bytes, shape, op)`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peak_buffers: Vec<PeakBuffer>,
}

/// One of the buffer assignment's `Peak buffers`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct PeakBuffer {
    pub bytes: i64,
    /// `f32[4096,128,3]`.
    pub shape: Option<String>,
    /// The operator's `op_name` (`jit(train_step)/…/mul`), or `entry parameter`.
    pub op: Option<String>,
    /// `file:line` of the operator's source, when printed.
    pub source: Option<String>,
}

/// What XLA printed around one out-of-memory error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct XlaOomText {
    pub wording: XlaOomWording,
    /// The BFC allocator's name (`GPU_0_bfc`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocator: Option<String>,
    /// `Limit`: what the allocator may hold (the preallocated pool: 75 % of the GPU by default,
    /// `XLA_PYTHON_CLIENT_MEM_FRACTION` of it when set).
    pub limit_bytes: Option<i64>,
    /// `InUse` (or `Sum Total of in-use chunks`).
    pub in_use_bytes: Option<i64>,
    pub max_in_use_bytes: Option<i64>,
    pub largest_free_block_bytes: Option<i64>,
    pub num_allocs: Option<i64>,
    pub max_alloc_size_bytes: Option<i64>,
    /// What the allocator's regions hold (`Total size in pool`, `total_region_allocated_bytes_`).
    pub pool_bytes: Option<i64>,
    /// The memory map line (`****____`): the share of its marks in use, 0–1.
    pub memory_map_in_use: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bins: Vec<BfcBin>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffer_assignment: Option<BufferAssignmentStats>,
    /// The driver refused the allocator this many bytes (`failed to allocate 3.39G (3640655872
    /// bytes) from device: CUDA_ERROR_OUT_OF_MEMORY`): the GPU itself was full.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_refused_bytes: Option<i64>,
    /// The device's memory as a TPU error states it (`would exceed memory (size=M)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_memory_bytes: Option<i64>,
}
