//! [`EntryRows`]: the columns of consecutive trace entries that undoing them reads, borrowed
//! from a device's events or decoded from a stored window.

use crate::analysis::{DeviceEvents, Streams};
use crate::tables::int_slice::IntSlice;
use crate::tables::stack_ids::StackIds;

/// The columns undoing reads of consecutive trace entries: row `i` is entry `first + i`.
#[derive(Debug, Clone, Copy)]
pub struct EntryRows<'a> {
    pub first: usize,
    pub action: &'a [u8],
    pub addr: IntSlice<'a>,
    pub size: IntSlice<'a>,
    pub stack: StackIds<'a>,
    pub stream: Streams<'a>,
}

impl<'a> EntryRows<'a> {
    /// Every entry of a device.
    pub fn of(ev: &'a DeviceEvents) -> EntryRows<'a> {
        EntryRows {
            first: 0,
            action: ev.action(),
            addr: ev.addr(),
            size: ev.size(),
            stack: ev.stack(),
            stream: ev.stream(),
        }
    }

    /// The entries from `first` to before `end`.
    pub fn range(&self, first: usize, end: usize) -> EntryRows<'a> {
        let (a, b) = (first - self.first, end - self.first);
        EntryRows {
            first,
            action: &self.action[a..b],
            addr: self.addr.slice(a..b),
            size: self.size.slice(a..b),
            stack: self.stack.slice(a..b),
            stream: self.stream.range(a, b),
        }
    }

    /// One past the last entry held.
    pub fn end(&self) -> usize {
        self.first + self.action.len()
    }
}
