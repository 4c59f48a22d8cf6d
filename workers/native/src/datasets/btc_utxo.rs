//! The `utxo` table (`btc dump-utxo --format parquet`): one row per coin of the UTXO set at a
//! height, in chainstate key order (txid, then output index). Columns are built by name for
//! the schema `schemas/tables.py` declares.

use crate::btc::columns::StrCol;
use crate::btc::network::Network;
use crate::btc::script::{classify, AddressBatch};
use crate::btc::utxo_snapshot::SetCoin;
use crate::datasets::btc_bodies::strings;
use crate::datasets::btc_chain_rows::HexCol;
use arrow_array::{ArrayRef, BooleanArray, RecordBatch, UInt32Array, UInt64Array};
use arrow_schema::{ArrowError, SchemaRef};
use std::sync::Arc;

/// Coins gathered for one batch of `utxo` rows.
pub struct UtxoRows {
    txid: HexCol,
    vout: Vec<u32>,
    value: Vec<u64>,
    height: Vec<u32>,
    coinbase: Vec<bool>,
    scripts: Vec<u8>,
    script_ends: Vec<usize>,
}

impl Default for UtxoRows {
    fn default() -> Self {
        UtxoRows {
            txid: HexCol::with_capacity(0, 0),
            vout: Vec::new(),
            value: Vec::new(),
            height: Vec::new(),
            coinbase: Vec::new(),
            scripts: Vec::new(),
            script_ends: Vec::new(),
        }
    }
}

impl UtxoRows {
    pub fn push(&mut self, c: SetCoin<'_>) {
        self.txid.push_display(c.txid);
        self.vout.push(c.vout);
        self.value.push(c.value);
        self.height.push(c.height);
        self.coinbase.push(c.coinbase);
        self.scripts.extend_from_slice(c.script);
        self.script_ends.push(self.scripts.len());
    }

    pub fn len(&self) -> usize {
        self.vout.len()
    }

    pub fn is_empty(&self) -> bool {
        self.vout.is_empty()
    }

    /// Held bytes, to cut batches by size.
    pub fn bytes(&self) -> usize {
        self.scripts.len() + self.len() * 96
    }

    /// The rows as a batch of `schema`; the builder is empty afterwards.
    pub fn finish(
        &mut self,
        schema: SchemaRef,
        network: Network,
    ) -> Result<RecordBatch, ArrowError> {
        let rows = std::mem::take(self);
        let n = rows.len();
        let script = |i: usize| {
            let start = if i == 0 { 0 } else { rows.script_ends[i - 1] };
            &rows.scripts[start..rows.script_ends[i]]
        };
        let kinds: Vec<_> = (0..n).map(|i| classify(script(i))).collect();
        let mut script_pubkey = HexCol::with_capacity(n, rows.scripts.len());
        let mut script_type = HexCol::with_capacity(n, 8 * n);
        for (i, kind) in kinds.iter().enumerate() {
            script_pubkey.push(script(i));
            script_type.push_str(kind.name());
        }
        let mut address = StrCol::default();
        AddressBatch::default().push_all(
            (0..n).map(|i| (script(i), kinds[i])),
            network,
            &mut address,
        );
        let (mut txid, mut script_pubkey, mut script_type, mut address) = (
            Some(rows.txid),
            Some(script_pubkey),
            Some(script_type),
            Some(address),
        );
        let (mut vout, mut value, mut height, mut coinbase) = (
            Some(rows.vout),
            Some(rows.value),
            Some(rows.height),
            Some(rows.coinbase),
        );
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        for f in schema.fields() {
            let gone = || ArrowError::SchemaError(format!("utxo: column {} twice", f.name()));
            let col: ArrayRef = match f.name().as_str() {
                "txid" => Arc::new(txid.take().ok_or_else(gone)?.finish()),
                "vout" => Arc::new(UInt32Array::from(vout.take().ok_or_else(gone)?)),
                "value" => Arc::new(UInt64Array::from(value.take().ok_or_else(gone)?)),
                "height" => Arc::new(UInt32Array::from(height.take().ok_or_else(gone)?)),
                "coinbase" => Arc::new(BooleanArray::from(coinbase.take().ok_or_else(gone)?)),
                "script_pubkey" => Arc::new(script_pubkey.take().ok_or_else(gone)?.finish()),
                "script_type" => Arc::new(script_type.take().ok_or_else(gone)?.finish()),
                "address" => strings(address.take().ok_or_else(gone)?),
                other => return Err(ArrowError::SchemaError(format!("utxo: no column {other}"))),
            };
            cols.push(col);
        }
        RecordBatch::try_new(schema, cols)
    }
}
