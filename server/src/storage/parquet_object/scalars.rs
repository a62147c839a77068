//! One-value columns: kept in a Parquet object's metadata by the encoder, put back as scalar
//! columns by the decoder.

use polars_core::prelude::*;

/// The file metadata key under which a frame's one-value columns are stored.
pub(super) const SCALAR_COLUMNS: &str = "memlens:scalar_columns";

/// A one-value (scalar) integer column, stored as its value in the file's metadata instead of
/// as a Parquet column: written as one, it was made into an array of its every row first (a
/// device's lifetimes have two such, the stream and the addresses' base: 8 bytes a row each,
/// 94 MB apiece on the 2 GB generated snapshot, at the top of the server's ingest).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct ScalarColumn {
    pub(super) name: String,
    /// Its place among the frame's columns.
    pub(super) at: usize,
    pub(super) dtype: ScalarType,
    /// `None`: every row is null.
    pub(super) value: Option<i64>,
}

#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum ScalarType {
    I64,
    I32,
    U32,
    U16,
    U8,
}

impl ScalarType {
    pub(super) fn of(dtype: &DataType) -> Option<ScalarType> {
        Some(match dtype {
            DataType::Int64 => ScalarType::I64,
            DataType::Int32 => ScalarType::I32,
            DataType::UInt32 => ScalarType::U32,
            DataType::UInt16 => ScalarType::U16,
            DataType::UInt8 => ScalarType::U8,
            _ => return None,
        })
    }

    pub(super) fn dtype(self) -> DataType {
        match self {
            ScalarType::I64 => DataType::Int64,
            ScalarType::I32 => DataType::Int32,
            ScalarType::U32 => DataType::UInt32,
            ScalarType::U16 => DataType::UInt16,
            ScalarType::U8 => DataType::UInt8,
        }
    }
}
