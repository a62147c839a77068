//! [`Block`]: one block of a segment in a replayed state — its size, what was asked for it,
//! its state and the stack that made it.

use crate::tables::BlockState;

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Block {
    pub(super) size: i64,
    pub(super) requested: i64,
    pub(super) state: BlockState,
    pub(super) stack: u32,
}

impl Block {
    /// Makes the block free: no request, no stack.
    pub(super) fn set_free(&mut self) {
        self.state = BlockState::Inactive;
        self.requested = 0;
        self.stack = 0;
    }
}
