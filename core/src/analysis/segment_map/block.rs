//! [`Block`]: one block of a segment in a replayed state — its size, what was asked for it,
//! its state and the stack that made it.

use crate::tables::BlockState;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Block {
    pub(crate) size: i64,
    pub(crate) requested: i64,
    pub(crate) state: BlockState,
    pub(crate) stack: u32,
}

impl Block {
    /// Makes the block free: no request, no stack.
    pub(crate) fn set_free(&mut self) {
        self.state = BlockState::Inactive;
        self.requested = 0;
        self.stack = 0;
    }
}
