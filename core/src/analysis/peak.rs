//! The peak: when requested bytes were highest and which stacks held them.

use memlens_api::StackGroup;
use polars::prelude::*;

use super::lifetimes::live_by_stack;
use crate::stacks::StackResolver;

/// Turns a `stack`/`bytes`/`count` frame into stack groups.
pub fn stack_groups(df: &DataFrame, stacks: &StackResolver) -> PolarsResult<Vec<StackGroup>> {
    let s = df.column("stack")?.u32()?;
    let b = df.column("bytes")?.i64()?;
    let c = df.column("count")?.cast(&DataType::UInt64)?;
    let c = c.u64()?;
    Ok((0..df.height())
        .map(|i| {
            let id = s.get(i).unwrap_or(0);
            StackGroup {
                stack_id: Some(id),
                stack: stacks.user_frames(id),
                bytes: b.get(i).unwrap_or(0),
                count: c.get(i).unwrap_or(0) as usize,
            }
        })
        .collect())
}

/// The live allocations at `idx`, grouped by stack, largest `top` groups.
pub fn live_groups_at(
    lifetimes: &DataFrame,
    idx: Option<usize>,
    top: usize,
    stacks: &StackResolver,
) -> PolarsResult<Vec<StackGroup>> {
    stack_groups(&live_by_stack(lifetimes, idx, top)?, stacks)
}
