//! Execution-layer block headers of every mainnet fork, Frontier to Prague (spec §3.1).
//!
//! Decoding is alloy's (`alloy_consensus::Header`, strict RLP: canonical integers, fixed-size
//! hashes, addresses, bloom and nonce). This module adds what history readers need on top: the
//! hash of the bytes read (never of a re-encoding), the number of RLP fields (15 Frontier,
//! 16 London, 17 Shanghai, 20 Cancun, 21 Prague; checked against the fork schedule by
//! [`super::validate`]) and a refusal of trailing bytes.

use super::error::{Error, Result};
use alloy_primitives::{keccak256, B256};
use alloy_rlp::Decodable;

pub use alloy_consensus::Header;

/// `keccak256(rlp([]))`, the ommers hash of a block without uncles.
pub const EMPTY_OMMERS_HASH: B256 = alloy_consensus::constants::EMPTY_OMMER_ROOT_HASH;
/// `keccak256(rlp(""))`, the root of an empty trie.
pub const EMPTY_ROOT_HASH: B256 = alloy_trie::EMPTY_ROOT_HASH;
/// `sha256("")`, the requests hash of a Prague block without requests.
pub const EMPTY_REQUESTS_HASH: B256 = alloy_eips::eip7685::EMPTY_REQUESTS_HASH;

/// A decoded header with its hash and field count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedHeader {
    /// `keccak256` of the RLP bytes read.
    pub hash: B256,
    /// Number of fields in the RLP list.
    pub fields: usize,
    /// Length of the RLP encoding read.
    pub size: usize,
    pub header: Header,
}

impl DecodedHeader {
    pub fn number(&self) -> u64 {
        self.header.number
    }
}

/// Keccak-256 of many messages at once: headers of the same length in rate blocks share the
/// SIMD lanes of one sponge (`flow::keccak`), the rest go through alloy's `keccak256`. Keeps its
/// buffers between calls.
#[derive(Default)]
pub struct KeccakBatch {
    padded: Vec<Vec<u64>>,
    out: Vec<[u8; 32]>,
}

impl KeccakBatch {
    /// The digest of each of `msgs`, in order.
    pub fn hash(&mut self, msgs: &[&[u8]]) -> &[[u8; 32]] {
        crate::flow::keccak::digests_into(
            crate::flow::keccak::Backend::detect(),
            0x01,
            msgs,
            |m| keccak256(m).0,
            &mut self.padded,
            &mut self.out,
        );
        &self.out
    }
}

/// Decode one header from exactly `raw` (an RLP list, nothing after it).
pub fn decode_header(raw: &[u8]) -> Result<DecodedHeader> {
    decode_header_hashed(raw, keccak256(raw))
}

/// [`decode_header`] of a header whose `keccak256` the caller has computed (in a batch).
pub fn decode_header_hashed(raw: &[u8], hash: B256) -> Result<DecodedHeader> {
    let mut buf = raw;
    let header = Header::decode(&mut buf).map_err(|e| Error::rlp("header", e))?;
    if !buf.is_empty() {
        return Err(Error::rlp(
            "header",
            alloy_rlp::Error::Custom("trailing bytes after the header"),
        ));
    }
    Ok(DecodedHeader {
        hash,
        fields: count_list_items(raw).map_err(|e| Error::rlp("header", e))?,
        size: raw.len(),
        header,
    })
}

/// Number of items in the RLP list `raw` (which must be one list).
pub fn count_list_items(raw: &[u8]) -> std::result::Result<usize, alloy_rlp::Error> {
    let mut payload = list_payload(raw)?;
    let mut n = 0;
    while !payload.is_empty() {
        skip_item(&mut payload)?;
        n += 1;
    }
    Ok(n)
}

/// The payload of the RLP list at the start of `buf` (advancing past it is the caller's job).
pub(crate) fn list_payload(raw: &[u8]) -> std::result::Result<&[u8], alloy_rlp::Error> {
    let mut buf = raw;
    let h = alloy_rlp::Header::decode(&mut buf)?;
    if !h.list {
        return Err(alloy_rlp::Error::UnexpectedString);
    }
    if buf.len() < h.payload_length {
        return Err(alloy_rlp::Error::InputTooShort);
    }
    Ok(&buf[..h.payload_length])
}

/// Split off the next RLP item (its whole encoding, header included) from `buf`.
pub(crate) fn skip_item<'a>(buf: &mut &'a [u8]) -> std::result::Result<&'a [u8], alloy_rlp::Error> {
    let start = *buf;
    let h = alloy_rlp::Header::decode(buf)?;
    if buf.len() < h.payload_length {
        return Err(alloy_rlp::Error::InputTooShort);
    }
    *buf = &buf[h.payload_length..];
    Ok(&start[..start.len() - buf.len()])
}

/// The payload of an RLP item that must be a byte string.
pub(crate) fn string_payload(item: &[u8]) -> std::result::Result<&[u8], alloy_rlp::Error> {
    let mut buf = item;
    let h = alloy_rlp::Header::decode(&mut buf)?;
    if h.list {
        return Err(alloy_rlp::Error::UnexpectedList);
    }
    Ok(&buf[..h.payload_length])
}

/// Length of the payload of the RLP list `raw` (0 if `raw` is not one).
pub(crate) fn list_payload_len(raw: &[u8]) -> usize {
    list_payload(raw).map_or(0, <[u8]>::len)
}

/// Split an RLP list into the full encodings of its items.
pub(crate) fn list_items(raw: &[u8]) -> std::result::Result<Vec<&[u8]>, alloy_rlp::Error> {
    let mut payload = list_payload(raw)?;
    let mut items = Vec::new();
    while !payload.is_empty() {
        items.push(skip_item(&mut payload)?);
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_constants() {
        // Spec §3.1.
        assert_eq!(EMPTY_OMMERS_HASH, keccak256([0xc0]));
        assert_eq!(EMPTY_ROOT_HASH, keccak256([0x80]));
        assert_eq!(
            format!("{EMPTY_REQUESTS_HASH:x}"),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
