//! The scanner's record columns (kept in Arrow layout, absent values and reasons as row lists)
//! give back every record exactly, and the `btc_records` batch has its nulls and reasons in the
//! right rows, including across the growth of the columns.

use arrow_array::{Array, FixedSizeBinaryArray, StringArray, UInt32Array, UInt64Array};
use rechain_native::btc::scan::{Record, RecordColumns, RecordStatus};
use rechain_native::datasets::btc_records;

fn record(i: u64) -> Record {
    let mut header = [0u8; 80];
    for (k, b) in header.iter_mut().enumerate() {
        *b = (i as usize * 31 + k * 7) as u8;
    }
    let status = match i % 7 {
        3 => RecordStatus::InvalidHeader,
        5 => RecordStatus::BodyError,
        _ => RecordStatus::Ok,
    };
    Record {
        magic_offset: 1000 + 200 * i,
        declared_size: 150 + i as u32,
        consumed: (i % 7 != 3).then_some(140 + i as u32),
        status,
        reason: (status != RecordStatus::Ok).then(|| format!("reason {i}")),
        hash: [i as u8 ^ 0x5a; 32],
        header,
        n_tx: (i % 7 != 3 && i % 7 != 5).then_some(i % 4),
        body_checked: i.is_multiple_of(2),
    }
}

fn same(a: &Record, b: &Record) -> bool {
    (
        a.magic_offset,
        a.declared_size,
        a.consumed,
        a.status,
        &a.reason,
        a.hash,
        a.header,
        a.n_tx,
        a.body_checked,
    ) == (
        b.magic_offset,
        b.declared_size,
        b.consumed,
        b.status,
        &b.reason,
        b.hash,
        b.header,
        b.n_tx,
        b.body_checked,
    )
}

#[test]
fn columns_give_back_every_record_and_the_batch_matches() {
    // More rows than the first allocation, with an explicit reservation midway, as the scanner
    // does; 2500 rows cross both.
    let n = 2500u64;
    let mut cols = RecordColumns::default();
    for i in 0..n {
        if i == 1500 {
            cols.reserve_rows(1800);
            assert!(cols.capacity() >= 1800);
        }
        cols.push(record(i));
    }
    assert_eq!(cols.len(), n as usize);
    for i in 0..n {
        let got = cols.get(i as usize);
        assert!(same(&got, &record(i)), "row {i}: {got:?}");
    }

    let batch = btc_records::build(7, cols);
    assert_eq!(batch.num_rows(), n as usize);
    let col = |name: &str| batch.column_by_name(name).unwrap().clone();
    let file = col("file");
    let file = file.as_any().downcast_ref::<UInt32Array>().unwrap();
    let data_pos = col("data_pos");
    let data_pos = data_pos.as_any().downcast_ref::<UInt64Array>().unwrap();
    let consumed = col("consumed");
    let consumed = consumed.as_any().downcast_ref::<UInt32Array>().unwrap();
    let n_tx = col("n_tx");
    let n_tx = n_tx.as_any().downcast_ref::<UInt64Array>().unwrap();
    let status = col("status");
    let status = status.as_any().downcast_ref::<StringArray>().unwrap();
    let reason = col("reason");
    let reason = reason.as_any().downcast_ref::<StringArray>().unwrap();
    let prev = col("prev_hash");
    let prev = prev
        .as_any()
        .downcast_ref::<FixedSizeBinaryArray>()
        .unwrap();
    let bits = col("bits");
    let bits = bits.as_any().downcast_ref::<UInt32Array>().unwrap();
    for i in 0..n as usize {
        let want = record(i as u64);
        assert_eq!(file.value(i), 7);
        assert_eq!(data_pos.value(i), want.magic_offset + 8);
        assert_eq!(
            consumed.is_valid(i).then(|| consumed.value(i)),
            want.consumed
        );
        assert_eq!(n_tx.is_valid(i).then(|| n_tx.value(i)), want.n_tx);
        assert_eq!(status.value(i), want.status.name());
        assert_eq!(
            reason.is_valid(i).then(|| reason.value(i).to_string()),
            want.reason
        );
        assert_eq!(prev.value(i), &want.header[4..36]);
        assert_eq!(
            bits.value(i),
            u32::from_le_bytes(want.header[72..76].try_into().unwrap())
        );
    }
    assert_eq!(
        reason.null_count(),
        (0..n).filter(|i| i % 7 != 3 && i % 7 != 5).count()
    );
}

#[test]
fn empty_columns_build_an_empty_batch() {
    let batch = btc_records::build(0, RecordColumns::default());
    assert_eq!(batch.num_rows(), 0);
    assert_eq!(batch.schema(), btc_records::schema());
}
