//! Round trips of the store's Parquet objects: row groups, pages read a page at a time,
//! one-value columns, encodings.

use std::io::Cursor;

use polars_core::prelude::*;

use super::encode::deltas_pay;
use super::*;

#[test]
fn device_frames_are_one_row_group_and_tables_several() {
    // More rows than polars' default groups hold.
    let n = 3_000_000i64;
    let frame =
        || DataFrame::new(n as usize, vec![Column::new("a".into(), (0..n).collect::<Vec<i64>>())]).expect("frame");
    let row_groups = |groups| {
        let bytes = encode(&frame(), groups).expect("write");
        let metadata = polars_parquet::read::read_metadata(&mut Cursor::new(bytes.as_slice())).expect("read");
        metadata.row_groups.len()
    };
    assert_eq!(row_groups(RowGroups::One), 1);
    let several = row_groups(RowGroups::Default);
    assert!(several > 1, "{several} row groups");
    // Decoded, either is one contiguous chunk per column, with the values written.
    let bytes = encode(&frame(), RowGroups::Default).expect("write");
    let back = decode(bytes).expect("decode");
    let a = back.column("a").expect("a").as_materialized_series();
    assert_eq!(a.n_chunks(), 1);
    assert!(back.equals(&frame()));
}

#[test]
fn a_column_read_a_page_at_a_time_is_stored_as_the_same_bytes_as_held() {
    // Several of polars' pages (about a MiB of values each) and more than one row group,
    // beside a one-value column and columns of other types; values that rise (deltas) and
    // values that jump about (plain).
    let n = 600_000usize;
    let units: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2_654_435_761) >> 8).collect();
    let rising: Vec<i64> = (0..n as i64).map(|i| 0x7e00_0000_0000 + i * 512).collect();
    let rest = || {
        vec![
            Column::new_scalar(
                "addr_base".into(),
                Scalar::new(DataType::Int64, AnyValue::Int64(0x7e00_0000_0000)),
                n,
            ),
            Column::new("size".into(), (0..n as u32).map(|i| i % 977).collect::<Vec<_>>()),
            Column::new("alloc_idx".into(), (0..n as i32).collect::<Vec<_>>()),
        ]
    };
    let read_units = |rows: std::ops::Range<usize>| Series::new("addr_units".into(), &units[rows]);
    let read_rising = |rows: std::ops::Range<usize>| Series::new("addr".into(), &rising[rows]);
    let cases: [(&str, DataType, ReadRows<'_>, Column, bool); 2] = [
        (
            "addr_units",
            DataType::UInt32,
            &read_units,
            Column::new("addr_units".into(), &units),
            false,
        ),
        (
            "addr",
            DataType::Int64,
            &read_rising,
            Column::new("addr".into(), &rising),
            true,
        ),
    ];
    for (name, dtype, read, held, deltas) in cases {
        let mut whole = rest();
        whole.insert(0, held.clone());
        let whole = DataFrame::new(n, whole).expect("frame");
        assert_eq!(deltas_pay(&held), deltas, "{name}");
        let apart = DataFrame::new(n, rest()).expect("frame");
        let paged = PagedColumn {
            at: 0,
            name: name.into(),
            dtype,
            len: n,
            read,
            deltas,
        };
        for groups in [RowGroups::One, RowGroups::Default] {
            let want = encode(&whole, groups).expect("held");
            let got = encode_with_paged(&apart, std::slice::from_ref(&paged), groups).expect("paged");
            assert!(got == want, "{name}: {} bytes against {}", got.len(), want.len());
        }
        assert!(decode(encode(&whole, RowGroups::One).expect("held"))
            .expect("decode")
            .equals_missing(&whole));
    }
    // A paged column of another length than the frame's is refused.
    let short = PagedColumn {
        at: 0,
        name: "addr".into(),
        dtype: DataType::Int64,
        len: n - 1,
        read: &read_rising,
        deltas: true,
    };
    let apart = DataFrame::new(n, rest()).expect("frame");
    assert!(encode_with_paged(&apart, &[short], RowGroups::One).is_err());
}

#[test]
fn one_value_columns_are_kept_in_the_metadata_and_read_back_as_scalars_in_their_places() {
    let n = 100_000;
    let scalar = |name: &str, dtype: DataType, value: AnyValue<'static>| {
        Column::new_scalar(name.into(), Scalar::new(dtype, value), n)
    };
    let frame = DataFrame::new(
        n,
        vec![
            scalar("addr_base", DataType::Int64, AnyValue::Int64(0x7e00_0000_0000)),
            Column::new("addr_units".into(), (0..n as u32).collect::<Vec<_>>()),
            scalar("stream", DataType::Int64, AnyValue::Int64(-7)),
            scalar("device_free", DataType::Int64, AnyValue::Null),
            Column::new("size".into(), (0..n as i64).map(|i| i * 512).collect::<Vec<_>>()),
            scalar("stack", DataType::UInt16, AnyValue::UInt16(65_535)),
            scalar("device", DataType::Int32, AnyValue::Int32(3)),
        ],
    )
    .expect("frame");
    for groups in [RowGroups::One, RowGroups::Default] {
        let bytes = encode(&frame, groups).expect("write");
        // Stored as values, not as columns of a value a row.
        let metadata = polars_parquet::read::read_metadata(&mut Cursor::new(bytes.as_slice())).expect("read");
        let schema = polars_parquet::read::infer_schema(&metadata).expect("schema");
        assert_eq!(schema.iter_names().collect::<Vec<_>>(), ["addr_units", "size"]);
        let back = decode(bytes).expect("decode");
        assert_eq!(back.get_column_names(), frame.get_column_names());
        assert!(back.equals_missing(&frame));
        for name in ["addr_base", "stream", "device_free", "stack", "device"] {
            let c = back.column(name).expect(name);
            assert!(c.as_scalar_column().is_some(), "{name}");
            assert_eq!(c.dtype(), frame.column(name).expect(name).dtype(), "{name}");
        }
    }
    // A frame of nothing but one-value columns keeps them as columns: a Parquet file's
    // rows are counted in its columns.
    let only = DataFrame::new(n, vec![scalar("stream", DataType::Int64, AnyValue::Int64(1))]).expect("frame");
    let back = decode(encode(&only, RowGroups::One).expect("write")).expect("decode");
    assert!(back.equals(&only) && back.height() == n);
}

#[test]
fn objects_are_plain_or_delta_encoded_and_read_back_as_written() {
    let n = 300_000usize;
    let frame = DataFrame::new(
        n,
        vec![
            // Few values: polars' own writer would make each of these a dictionary.
            Column::new("size".into(), (0..n).map(|i| (i % 7) as i64 * 512).collect::<Vec<_>>()),
            Column::new("action".into(), (0..n).map(|i| (i % 3) as u8).collect::<Vec<_>>()),
            Column::new("stack".into(), (0..n).map(|i| (i % 50) as u32).collect::<Vec<_>>()),
            Column::new(
                "time".into(),
                (0..n).map(|i| (i % 5 != 0).then_some(i as i64)).collect::<Vec<_>>(),
            ),
            Column::new("name".into(), (0..n).map(|i| format!("f{}", i % 4)).collect::<Vec<_>>()),
            Column::new("flag".into(), (0..n).map(|i| i % 2 == 0).collect::<Vec<_>>()),
            // Delta-encoded: entry indexes, times that never decrease, running totals.
            Column::new(
                "free_idx".into(),
                (0..n)
                    .map(|i| if i % 9 == 0 { -1 } else { i as i32 * 3 })
                    .collect::<Vec<_>>(),
            ),
            Column::new(
                "t".into(),
                (0..n).map(|i| 1_700_000_000_000 + (i / 4) as i64).collect::<Vec<_>>(),
            ),
            Column::new(
                "t_after_first".into(),
                (0..n).map(|i| (i / 3) as u32).collect::<Vec<_>>(),
            ),
            // A running total, which goes down as well as up, in bytes and in units.
            Column::new(
                "allocated".into(),
                (0..n)
                    .map(|i| (1 << 30) + ((i % 11) as i64 - 5) * 4096)
                    .collect::<Vec<_>>(),
            ),
            Column::new(
                "allocated_units".into(),
                (0..n)
                    .map(|i| {
                        if i % 2 == 0 {
                            u32::MAX - (i % 13) as u32
                        } else {
                            (i % 7) as u32
                        }
                    })
                    .collect::<Vec<_>>(),
            ),
        ],
    )
    .expect("frame");
    let delta: Vec<&str> = frame
        .columns()
        .iter()
        .filter(|c| deltas_pay(c))
        .map(|c| c.name().as_str())
        .collect();
    assert_eq!(
        delta,
        ["free_idx", "t", "t_after_first", "allocated", "allocated_units"]
    );
    for groups in [RowGroups::Default, RowGroups::One] {
        let bytes = encode(&frame, groups).expect("write");
        let back = decode(bytes.clone()).expect("read");
        assert!(back.equals_missing(&frame));
        let meta = polars_parquet::read::read_metadata(&mut Cursor::new(bytes)).expect("metadata");
        for column in meta.row_groups.iter().flat_map(|g| g.parquet_columns()) {
            assert_eq!(column.dictionary_page_offset(), None, "{:?}", column.descriptor());
        }
    }
    // An empty frame keeps its columns and their types.
    let empty = frame.slice(0, 0);
    let bytes = encode(&empty, RowGroups::Default).expect("write");
    let back = decode(bytes).expect("read");
    assert_eq!(back.schema(), empty.schema());
    assert_eq!(back.height(), 0);
}
