//! The growable Arrow-shaped column buffers a block decode fills (strings and binaries),
//! kept apart from the decoder so that the script classifier can fill them too without
//! depending on the decoder.

/// Growable string column that can be built without a per-value allocation.
#[derive(Default)]
pub struct StrCol {
    pub data: Vec<u8>,
    pub offsets: Vec<i32>,
    pub valid: Vec<bool>,
}

impl StrCol {
    fn start(&mut self) {
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
    }
    /// Appends the bytes `write` adds to `data` as one value. They must be ASCII:
    /// `btc_bodies::strings` asserts that, which spares it Arrow's UTF-8 checks.
    pub(crate) fn push_with(&mut self, write: impl FnOnce(&mut Vec<u8>) -> bool) {
        self.start();
        let before = self.data.len();
        let ok = write(&mut self.data);
        if !ok {
            self.data.truncate(before);
        }
        self.offsets.push(self.data.len() as i32);
        self.valid.push(ok);
    }
    pub fn len(&self) -> usize {
        self.valid.len()
    }
    pub fn is_empty(&self) -> bool {
        self.valid.is_empty()
    }
}

/// Growable binary column (raw script and witness bytes, 64-bit offsets): staged as
/// `large_binary`, turned into the published hex only at publish.
#[derive(Default)]
pub struct BinCol {
    pub data: Vec<u8>,
    pub offsets: Vec<i64>,
}

impl BinCol {
    /// Appends each of `values` (one pass over them for the offsets, one for the bytes).
    pub(crate) fn extend<'a, I>(&mut self, values: I)
    where
        I: Iterator<Item = &'a [u8]> + Clone,
    {
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        let mut end = self.data.len() as i64;
        self.offsets.extend(values.clone().map(|v| {
            end += v.len() as i64;
            end
        }));
        for v in values {
            self.data.extend_from_slice(v);
        }
    }
    /// Room for `values` more values of `bytes` bytes in total.
    pub(crate) fn reserve(&mut self, values: usize, bytes: usize) {
        self.offsets.reserve(values + 1);
        self.data.reserve(bytes);
    }
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn value(&self, i: usize) -> &[u8] {
        &self.data[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }
}
