//! The lifetimes' addresses read from the trace when they are written, instead of held as a
//! column through the analyses.
//!
//! No analysis reads a lifetime's address: only a stored report's queries do. Yet a run that
//! stores its lifetimes would hold them as a column (4 bytes an allocation) beside the whole
//! trace, at the top of a server's ingest. Each address
//! is the trace's at one of the allocation's ends: its `alloc` entry (`alloc_idx`), else its
//! `free_completed` (`free_idx`). Only the rows of blocks live in the snapshot that no entry
//! explains (the last rows, neither end in the trace) keep theirs here
//! ([`LifetimeAddresses`]). [`AddressColumn`] reads any run of rows' addresses from the trace,
//! so that an encoder takes them a page at a time; [`AddressColumn::columns`] makes them the
//! columns [`allocation_lifetimes`](super::lifetimes::allocation_lifetimes) would have held.
//! A trace that lets go of its addresses before its frames are stored has those of its largest
//! allocations kept first ([`LifetimeAddresses::keep_addresses_of`]): the bands a timeline of
//! the whole trace draws, its stored first view.

use std::ops::Range;

use polars_core::prelude::*;

use super::DeviceEvents;
use crate::tables::columns::{address_columns, lifetimes as lt_col};
use crate::tables::int_slice::IntSlice;
use crate::tables::{NarrowI64, ADDRESS_SHIFT};

/// What, beside the trace, gives each row of lifetimes built without their addresses its
/// address ([`super::lifetimes::allocation_lifetimes_apart`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LifetimeAddresses {
    /// The addresses of the last rows: blocks live in the snapshot that no entry of the trace
    /// explains, in row order.
    pub(super) predating: Vec<i64>,
    /// Addresses of some rows, by row (ascending), kept while the trace held them
    /// ([`LifetimeAddresses::keep_addresses_of`]).
    kept: Vec<(usize, i64)>,
}

impl LifetimeAddresses {
    pub(super) fn new(predating: Vec<i64>) -> LifetimeAddresses {
        LifetimeAddresses {
            predating,
            kept: Vec::new(),
        }
    }

    /// Keeps the addresses of `rows` of `lifetimes`, read from `ev`: what [`Self::kept_at`]
    /// answers once the trace has let go of its addresses.
    pub fn keep_addresses_of(&mut self, ev: &DeviceEvents, lifetimes: &DataFrame, rows: &[usize]) -> PolarsResult<()> {
        let column = self.column(ev, lifetimes)?;
        let mut kept: Vec<(usize, i64)> = rows
            .iter()
            .filter(|&&r| r < column.len())
            .map(|&r| (r, column.at(r)))
            .collect();
        kept.sort_unstable();
        kept.dedup();
        self.kept = kept;
        Ok(())
    }

    /// Row `row`'s address where it was kept ([`Self::keep_addresses_of`]).
    pub fn kept_at(&self, row: usize) -> Option<i64> {
        self.kept
            .binary_search_by_key(&row, |&(r, _)| r)
            .ok()
            .map(|k| self.kept[k].1)
    }

    /// The addresses of `lifetimes` (built apart from them, from `ev`'s trace), read from `ev`.
    pub fn column<'a>(&'a self, ev: &'a DeviceEvents, lifetimes: &'a DataFrame) -> PolarsResult<AddressColumn<'a>> {
        let alloc = lt_col::ALLOC_IDX.slice(lifetimes)?;
        let free = lt_col::FREE_IDX.slice(lifetimes)?;
        polars_ensure!(
            self.predating.len() <= alloc.len(),
            ComputeError: "{} lifetimes, {} of them blocks from before the trace", alloc.len(), self.predating.len()
        );
        Ok(AddressColumn {
            trace: ev.addr(),
            alloc,
            free,
            predating: &self.predating,
        })
    }
}

/// How [`AddressColumn`]'s addresses are held as columns, as
/// [`address_columns`] makes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressForm {
    /// `addr_units` (u32), 512-byte units after `base`, and `addr_base` (one scalar).
    Units { base: i64 },
    /// `addr` (i64).
    Wide,
}

/// The addresses of a device's lifetimes, read from its trace row by row.
pub struct AddressColumn<'a> {
    trace: IntSlice<'a>,
    alloc: &'a [i32],
    free: &'a [i32],
    predating: &'a [i64],
}

impl AddressColumn<'_> {
    pub fn len(&self) -> usize {
        self.alloc.len()
    }

    pub fn is_empty(&self) -> bool {
        self.alloc.is_empty()
    }

    /// The first row of a block from before the trace.
    fn first_predating(&self) -> usize {
        self.alloc.len() - self.predating.len()
    }

    /// The trace entry row `row`'s address is read at, `None` for a block from before it.
    #[inline]
    fn entry(&self, row: usize) -> Option<usize> {
        let (a, f) = (self.alloc[row], self.free[row]);
        if a >= 0 {
            Some(a as usize)
        } else if f >= 0 {
            Some(f as usize)
        } else {
            None
        }
    }

    /// Row `row`'s address.
    #[inline]
    pub fn at(&self, row: usize) -> i64 {
        match self.entry(row) {
            Some(i) => self.trace.at(i),
            None => self.predating[row - self.first_predating()],
        }
    }

    /// As the lifetimes would hold them: 512-byte units after the trace's base while the trace
    /// holds its own so and every block from before it fits, else i64.
    pub fn form(&self) -> AddressForm {
        match self.trace {
            IntSlice::U32 { base, shift, .. } if shift == ADDRESS_SHIFT => {
                let fits = |v: i64| {
                    let d = v.wrapping_sub(base);
                    v >= base && d & ((1 << shift) - 1) == 0 && u32::try_from(d >> shift).is_ok()
                };
                if self.predating.iter().all(|&v| fits(v)) {
                    AddressForm::Units { base }
                } else {
                    AddressForm::Wide
                }
            }
            _ => AddressForm::Wide,
        }
    }

    /// Rows `rows`' addresses as units after the base (only where [`AddressColumn::form`] said
    /// [`AddressForm::Units`]).
    pub fn units(&self, rows: Range<usize>) -> Vec<u32> {
        let IntSlice::U32 { base, shift, offsets } = self.trace else {
            panic!("addresses held as i64 read as units");
        };
        let first_predating = self.first_predating();
        rows.map(|row| match self.entry(row) {
            Some(i) => offsets[i],
            None => (self.predating[row - first_predating].wrapping_sub(base) >> shift) as u32,
        })
        .collect()
    }

    /// Rows `rows`' addresses as i64.
    pub fn wide(&self, rows: Range<usize>) -> Vec<i64> {
        rows.map(|row| self.at(row)).collect()
    }

    /// Whether the addresses never decrease, row after row.
    pub fn never_decrease(&self) -> bool {
        let mut last = i64::MIN;
        (0..self.len()).all(|row| {
            let now = self.at(row);
            let rises = last <= now;
            last = now;
            rises
        })
    }

    /// The whole address columns, as lifetimes built with their addresses hold them.
    pub fn columns(&self) -> Vec<Column> {
        let n = self.len();
        let mut addr = match self.trace {
            IntSlice::U32 { base, shift, .. } => NarrowI64::Narrow {
                base,
                shift,
                offsets: Vec::with_capacity(n),
            },
            IntSlice::Coded { .. } | IntSlice::I64(_) => NarrowI64::Wide(Vec::with_capacity(n)),
        };
        for row in 0..n {
            addr.push(self.at(row));
        }
        address_columns(addr, n)
    }
}
