//! Test-chain generator for Ethereum history: a valid chain from genesis, deterministic per
//! seed, written as era1 files ([`super::era1_writer`]) or a geth chain freezer
//! ([`super::freezer_writer`]).
//!
//! What is real and what is not:
//!
//! * Real: header encodings of every fork the [`ChainConfig`] activates (base fee from London,
//!   withdrawals root from Shanghai, blob gas and parent beacon root from Cancun, requests hash
//!   from Prague); difficulty ([`calc_difficulty`]), base fee ([`calc_base_fee`]), excess blob
//!   gas ([`calc_excess_blob_gas`]), gas-limit steps within geth's bound; transaction, receipt,
//!   withdrawal and ommer roots and the logs bloom; total difficulty; transactions signed with
//!   secp256k1 (RFC 6979) by four keys derived from the seed, so sender recovery gives
//!   [`EthGenSummary::senders`], with per-sender nonces counting up. Transaction kinds follow the
//!   schedule: legacy always (EIP-155 replay-protected ones once Byzantium is active — the config
//!   has no Spurious Dragon block, Byzantium comes after it on every network), EIP-2930 and
//!   EIP-1559 from London (which follows Berlin), EIP-4844 blob transactions from Cancun.
//!   Genesis: mainnet's and Sepolia's real genesis headers (their hashes are the networks'); the
//!   `dev` network has its own.
//! * Synthetic: nothing is executed. State roots (header and pre-Byzantium receipts) are hashes
//!   of the block number and parent root; gas used is intrinsic gas plus a random execution
//!   cost; logs are random events of a few "contract" addresses; balances are not tracked;
//!   blob versioned hashes point at no blob. No uncles are generated.
//! * No proof of work: pre-merge headers carry difficulty, but `mixHash` and `nonce` are zero —
//!   the marker of a generated block — so they fail [`super::validate::check_pow`] (import them
//!   with the importer's `--no-pow`). Every other rule of [`super::validate`] passes.
//! * The merge: generated chains switch to proof of stake (difficulty 0, zero nonce, random
//!   `prevRandao` in `mixHash`) at the first Shanghai block, as real networks had merged by
//!   then. era1 holds pre-merge blocks only, so era1 output refuses a chain that reaches it.
//!
//! Mainnet from genesis is Frontier with genesis' gas limit of 5,000: the limit grows by at most
//! 1/1024 a block, so blocks hold no transaction until it passes 21,000 (block 1,770; one with
//! data fits from about block 2,000); the generator fills blocks with what fits.

use super::accumulator::EPOCH_SIZE;
use super::chain_config::{ChainConfig, DEV, DEVMERGE, DEVMERGE_GENESIS_TIME, MAINNET, SEPOLIA};
use super::era1_writer::Era1DirWriter;
use super::ere_writer::{EreDirWriter, EreProfile};
use super::error::{Error, ErrorKind, Result};
use super::freezer_writer::{FreezerBlock, FreezerOptions, FreezerWriter};
use super::header::{decode_header, EMPTY_OMMERS_HASH, EMPTY_REQUESTS_HASH, EMPTY_ROOT_HASH};
use super::receipt::slim_from_storage;
use super::rules::{
    calc_base_fee, calc_difficulty, calc_excess_blob_gas, fake_exponential, DAO_EXTRA_DATA,
    GAS_PER_BLOB, MINIMUM_DIFFICULTY, MIN_GAS_LIMIT,
};
use alloy_consensus::{
    Eip658Value, Header, ReceiptEnvelope, ReceiptWithBloom, SignableTransaction, Signed, TxEip1559,
    TxEip2930, TxEip4844, TxEip4844Variant, TxEnvelope, TxLegacy, TxType,
};
use alloy_eips::eip2718::Encodable2718;
use alloy_eips::eip2930::{AccessList, AccessListItem};
use alloy_eips::eip4895::Withdrawal;
use alloy_primitives::{
    b256, keccak256, Address, Bloom, Bytes, Log, Signature, TxKind, B256, B64, U256,
};
use alloy_rlp::Encodable;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};

/// `dev`: chain id of geth's `--dev` mode.
pub const DEV_CHAIN_ID: u64 = 1337;
/// `devmerge`: `dev`'s chain id plus one (a chain of its own).
pub const DEVMERGE_CHAIN_ID: u64 = 1338;
/// Gas limit the generator steers towards.
pub const TARGET_GAS_LIMIT: u64 = 30_000_000;
/// Extra data of generated proof-of-work headers.
pub const GENERATED_EXTRA_DATA: &[u8] = b"rechain-gen";
const SENDERS: usize = 4;
const RECIPIENTS: usize = 12;
/// The first recipients are "contracts": calls to them emit logs.
const CONTRACTS: usize = 4;

/// Where generated blocks go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// One era1 file per 8192 blocks in the output directory.
    Era1,
    /// A geth chain freezer in the output directory (the `chain/` folder of `ancient/`).
    Freezer(FreezerOptions),
    /// Ere files of 8192 blocks in the output directory, across the merge.
    Ere(EreProfile),
}

/// What to generate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EthGenConfig {
    /// Network name used in era1 file names.
    pub network: String,
    pub chain: ChainConfig,
    pub chain_id: u64,
    /// Block 0, its fork fields matching `chain` at its timestamp.
    pub genesis: Header,
    /// Blocks to generate, genesis included.
    pub blocks: u64,
    pub seed: u64,
    pub tx_min: usize,
    pub tx_max: usize,
    pub format: OutputFormat,
}

impl EthGenConfig {
    /// `mainnet`, `sepolia` or `dev`, with that network's genesis, chain id and schedule.
    pub fn for_network(
        name: &str,
        blocks: u64,
        seed: u64,
        tx_min: usize,
        tx_max: usize,
        format: OutputFormat,
    ) -> Result<Self> {
        let (chain, chain_id, genesis) = match name {
            "mainnet" => (MAINNET, 1, mainnet_genesis()),
            "sepolia" => (SEPOLIA, 11_155_111, sepolia_genesis()),
            "dev" => (DEV, DEV_CHAIN_ID, dev_genesis(&DEV, 1_700_000_000)),
            "devmerge" => (DEVMERGE, DEVMERGE_CHAIN_ID, devmerge_genesis()),
            _ => {
                return Err(Error::new(ErrorKind::Layout(format!(
                    "unknown network {name:?} (mainnet, sepolia, dev, devmerge)"
                ))))
            }
        };
        Ok(EthGenConfig {
            network: name.to_string(),
            chain,
            chain_id,
            genesis,
            blocks,
            seed,
            tx_min,
            tx_max,
            format,
        })
    }
}

/// Mainnet's genesis header (spec §4.1): hash `d4e56740…8fa3`.
pub fn mainnet_genesis() -> Header {
    Header {
        state_root: b256!("d7f8974fb5ac78d9ac099b9ad5018bedc2ce0a72dad1827a1709da30580f0544"),
        difficulty: U256::from(17_179_869_184u64),
        gas_limit: 5000,
        extra_data: Bytes::from_static(&[
            0x11, 0xbb, 0xe8, 0xdb, 0x4e, 0x34, 0x7b, 0x4e, 0x8c, 0x93, 0x7c, 0x1c, 0x83, 0x70,
            0xe4, 0xb5, 0xed, 0x33, 0xad, 0xb3, 0xdb, 0x69, 0xcb, 0xdb, 0x7a, 0x38, 0xe1, 0xe5,
            0x0b, 0x1b, 0x82, 0xfa,
        ]),
        nonce: B64::from(66u64),
        ..empty_header()
    }
}

/// Sepolia's genesis header (geth `DefaultSepoliaGenesisBlock`): hash `25a5cc10…6dd9`.
pub fn sepolia_genesis() -> Header {
    Header {
        state_root: b256!("5eb6e371a698b8d68f665192350ffcecbbbf322916f4b51bd79bb6887da3f494"),
        difficulty: U256::from(0x20000),
        gas_limit: 30_000_000,
        timestamp: 1_633_267_481,
        extra_data: Bytes::from_static(b"Sepolia, Athens, Attica, Greece!"),
        base_fee_per_gas: Some(1_000_000_000),
        ..empty_header()
    }
}

/// A genesis for `chain` at `timestamp`: fork fields as the schedule wants them there.
pub fn dev_genesis(chain: &ChainConfig, timestamp: u64) -> Header {
    let cancun = chain.is_cancun(timestamp);
    Header {
        state_root: keccak256(b"rechain dev genesis"),
        difficulty: U256::from(MINIMUM_DIFFICULTY),
        gas_limit: TARGET_GAS_LIMIT,
        timestamp,
        extra_data: Bytes::from_static(b"rechain dev genesis"),
        base_fee_per_gas: chain.is_london(0).then_some(1_000_000_000),
        withdrawals_root: chain.is_shanghai(timestamp).then_some(EMPTY_ROOT_HASH),
        blob_gas_used: cancun.then_some(0),
        excess_blob_gas: cancun.then_some(0),
        parent_beacon_block_root: cancun.then_some(B256::ZERO),
        requests_hash: chain.is_prague(timestamp).then_some(EMPTY_REQUESTS_HASH),
        ..empty_header()
    }
}

/// `devmerge`'s genesis: `dev`'s, with the empty state root, so that geth builds the same
/// block from [`geth_genesis_json`] (an empty allocation).
pub fn devmerge_genesis() -> Header {
    Header {
        state_root: EMPTY_ROOT_HASH,
        ..dev_genesis(&DEVMERGE, DEVMERGE_GENESIS_TIME)
    }
}

/// The genesis file geth needs to hold a generated `devmerge` chain (`geth init`, or the
/// history import of the geth harness): the schedule of [`DEVMERGE`] in geth's JSON names,
/// `terminal_td` the TD of the last proof-of-work block, the genesis fields of
/// [`devmerge_genesis`] and no allocation.
pub fn geth_genesis_json(cfg: &EthGenConfig, terminal_td: U256) -> String {
    let c = &cfg.chain;
    let g = &cfg.genesis;
    let time = |t: Option<u64>| t.map_or("null".to_string(), |t| t.to_string());
    let blob = |name: &str, t: Option<u64>| {
        t.and_then(|t| c.blob_config(t)).map(|b| {
            format!(
                "\"{name}\": {{\"target\": {}, \"max\": {}, \"baseFeeUpdateFraction\": {}}}",
                b.target, b.max, b.update_fraction
            )
        })
    };
    let schedule: Vec<String> = [blob("cancun", c.cancun_time), blob("prague", c.prague_time)]
        .into_iter()
        .flatten()
        .collect();
    let blocks = [
        "homesteadBlock",
        "eip150Block",
        "eip155Block",
        "eip158Block",
        "byzantiumBlock",
        "constantinopleBlock",
        "petersburgBlock",
        "istanbulBlock",
        "muirGlacierBlock",
        "berlinBlock",
        "londonBlock",
        "arrowGlacierBlock",
        "grayGlacierBlock",
    ]
    .iter()
    .map(|k| format!("    \"{k}\": 0,\n"))
    .collect::<String>();
    format!(
        "{{\n  \"config\": {{\n    \"chainId\": {},\n{blocks}    \"terminalTotalDifficulty\": {terminal_td},\n    \"shanghaiTime\": {},\n    \"cancunTime\": {},\n    \"pragueTime\": {},\n    \"blobSchedule\": {{{}}}\n  }},\n  \"nonce\": \"0x0\",\n  \"timestamp\": \"{:#x}\",\n  \"extraData\": \"0x{}\",\n  \"gasLimit\": \"{:#x}\",\n  \"difficulty\": \"{:#x}\",\n  \"mixHash\": \"{}\",\n  \"coinbase\": \"{}\",\n  \"baseFeePerGas\": \"{:#x}\",\n  \"alloc\": {{}}\n}}\n",
        cfg.chain_id,
        time(c.shanghai_time),
        time(c.cancun_time),
        time(c.prague_time),
        schedule.join(", "),
        g.timestamp,
        alloy_primitives::hex::encode(&g.extra_data),
        g.gas_limit,
        g.difficulty,
        g.mix_hash,
        g.beneficiary,
        g.base_fee_per_gas.unwrap_or(0),
    )
}

fn empty_header() -> Header {
    Header {
        ommers_hash: EMPTY_OMMERS_HASH,
        transactions_root: EMPTY_ROOT_HASH,
        receipts_root: EMPTY_ROOT_HASH,
        ..Default::default()
    }
}

/// One generated era1 file or freezer directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenFile {
    pub path: PathBuf,
    pub first_block: u64,
    pub blocks: u64,
    /// era1: the file's accumulator root.
    pub accumulator: Option<B256>,
}

/// What [`generate`] wrote.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EthGenSummary {
    pub network: String,
    pub chain_id: u64,
    pub blocks: u64,
    pub genesis_hash: B256,
    pub tip_number: u64,
    pub tip_hash: B256,
    /// Total difficulty of the tip.
    pub final_td: U256,
    pub transactions: u64,
    /// Transactions by kind: legacy without chain id, legacy with (EIP-155), EIP-2930,
    /// EIP-1559, EIP-4844.
    pub tx_kinds: [u64; 5],
    pub logs: u64,
    pub withdrawals: u64,
    pub blobs: u64,
    /// Blocks after the merge (difficulty 0).
    pub pos_blocks: u64,
    /// Addresses of the signing keys (what sender recovery must return).
    pub senders: Vec<Address>,
    pub files: Vec<GenFile>,
    /// Ere output: the genesis file geth needs to hold the chain ([`geth_genesis_json`]).
    pub geth_genesis: Option<String>,
}

/// One generated block, encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenBlock {
    pub number: u64,
    pub hash: B256,
    pub header: Vec<u8>,
    pub body: Vec<u8>,
    /// Consensus form (era1).
    pub receipts: Vec<u8>,
    /// Storage form (freezer).
    pub storage_receipts: Vec<u8>,
    /// Total difficulty including this block.
    pub td: U256,
    pub transactions: usize,
}

struct Sender {
    secret: B256,
    address: Address,
    nonce: u64,
}

/// Seeded signing keys: `keccak256("rechain-eth-gen" | seed | i | attempt)`.
fn sender_keys(seed: u64) -> Vec<Sender> {
    (0..SENDERS as u64)
        .map(|i| {
            let mut attempt = 0u64;
            loop {
                let mut pre = b"rechain-eth-gen".to_vec();
                pre.extend_from_slice(&seed.to_be_bytes());
                pre.extend_from_slice(&i.to_be_bytes());
                pre.extend_from_slice(&attempt.to_be_bytes());
                let secret = keccak256(&pre);
                if let Ok(k) = k256::ecdsa::SigningKey::from_slice(&secret[..]) {
                    // keccak256 of the uncompressed public key without its 0x04 prefix.
                    let point = k.verifying_key().to_encoded_point(false);
                    let address =
                        alloy_primitives::Address::from_raw_public_key(&point.as_bytes()[1..]);
                    return Sender {
                        secret,
                        address,
                        nonce: 0,
                    };
                }
                attempt += 1;
            }
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Legacy,
    Legacy155,
    Eip2930,
    Eip1559,
    Eip4844,
}

/// Gas of the transaction's data (EIP-2028 prices from Istanbul, which the generator takes as
/// active with Byzantium's successors — only consistency between transaction and receipt
/// matters here).
fn data_gas(data: &[u8], cheap: bool) -> u64 {
    data.iter()
        .map(|b| match (*b == 0, cheap) {
            (true, _) => 4,
            (false, true) => 16,
            (false, false) => 68,
        })
        .sum()
}

/// Chain generator: yields block 0 (genesis), then each next block.
pub struct ChainBuilder {
    cfg: EthGenConfig,
    rng: SmallRng,
    senders: Vec<Sender>,
    recipients: Vec<Address>,
    coinbase: Address,
    parent: Option<(Header, B256, U256)>,
    withdrawal_index: u64,
    pub summary: EthGenSummary,
}

impl ChainBuilder {
    pub fn new(cfg: &EthGenConfig) -> Self {
        let mut rng = SmallRng::seed_from_u64(cfg.seed);
        let senders = sender_keys(cfg.seed);
        let recipients = (0..RECIPIENTS)
            .map(|_| Address::from(rng.gen::<[u8; 20]>()))
            .collect();
        let coinbase = Address::from(rng.gen::<[u8; 20]>());
        let summary = EthGenSummary {
            network: cfg.network.clone(),
            chain_id: cfg.chain_id,
            senders: senders.iter().map(|s| s.address).collect(),
            ..Default::default()
        };
        ChainBuilder {
            cfg: cfg.clone(),
            rng,
            senders,
            recipients,
            coinbase,
            parent: None,
            withdrawal_index: 0,
            summary,
        }
    }

    fn pick_kind(&mut self, number: u64, time: u64, blob_room: u64) -> Kind {
        let c = &self.cfg.chain;
        let mut kinds = vec![Kind::Legacy];
        if c.byzantium.is_some_and(|b| number >= b) {
            kinds.push(Kind::Legacy155);
        }
        if c.is_london(number) {
            kinds.extend([Kind::Eip2930, Kind::Eip1559]);
        }
        if c.is_cancun(time) && blob_room > 0 {
            kinds.push(Kind::Eip4844);
        }
        kinds[self.rng.gen_range(0..kinds.len())]
    }

    fn random_bytes(&mut self, max: usize) -> Vec<u8> {
        let n = self.rng.gen_range(0..=max);
        (0..n)
            .map(|_| {
                if self.rng.gen_bool(0.3) {
                    0
                } else {
                    self.rng.gen()
                }
            })
            .collect()
    }

    fn access_list(&mut self) -> AccessList {
        let n = self.rng.gen_range(0..=2);
        AccessList(
            (0..n)
                .map(|_| AccessListItem {
                    address: self.recipients[self.rng.gen_range(0..RECIPIENTS)],
                    storage_keys: (0..self.rng.gen_range(0..=2))
                        .map(|_| B256::from(self.rng.gen::<[u8; 32]>()))
                        .collect(),
                })
                .collect(),
        )
    }

    fn logs_for(&mut self, to: Address) -> Vec<Log> {
        let n = self.rng.gen_range(0..=3);
        (0..n)
            .map(|_| {
                let mut topics = vec![keccak256("Transfer(address,address,uint256)")];
                for _ in 0..self.rng.gen_range(0..=3) {
                    topics.push(B256::from(self.rng.gen::<[u8; 32]>()));
                }
                let data = self.random_bytes(64);
                Log::new_unchecked(to, topics, data.into())
            })
            .collect()
    }

    /// Block 0, then the next block on each call.
    pub fn next_block(&mut self) -> Result<GenBlock> {
        let Some((parent, parent_hash, parent_td)) = self.parent.clone() else {
            return Ok(self.emit(
                self.cfg.genesis.clone(),
                Vec::new(),
                Vec::new(),
                None,
                U256::ZERO,
            ));
        };
        let c = self.cfg.chain;
        let number = parent.number + 1;
        let pos_parent = parent.difficulty.is_zero() && parent.number > 0;
        let dt = if pos_parent {
            12
        } else {
            self.rng.gen_range(5..=20)
        };
        let time = parent.timestamp + dt;
        let pos = pos_parent || c.is_shanghai(time);
        if pos && self.cfg.format == OutputFormat::Era1 {
            return Err(Error::new(ErrorKind::Layout(format!(
                "block {number} is past the merge (Shanghai); era1 files hold pre-merge blocks only"
            )))
            .for_block(number));
        }
        // Gas limit: towards the target by at most geth's bound (|Δ| < limit/1024).
        let parent_limit = if c.is_london(number) && !c.is_london(parent.number) {
            parent.gas_limit * 2
        } else {
            parent.gas_limit
        };
        let step = (parent_limit / 1024).saturating_sub(1);
        let gas_limit = if parent_limit < TARGET_GAS_LIMIT {
            (parent_limit + step).min(TARGET_GAS_LIMIT)
        } else {
            parent_limit.saturating_sub(step).max(TARGET_GAS_LIMIT)
        }
        .max(MIN_GAS_LIMIT);
        let base_fee = c.is_london(number).then(|| calc_base_fee(&c, &parent));
        let cancun = c.is_cancun(time);
        let excess_blob_gas = cancun.then(|| calc_excess_blob_gas(&c, &parent, time));
        let blob_cfg = c.blob_config(time);
        let blob_base_fee = match (excess_blob_gas, blob_cfg) {
            (Some(e), Some(b)) => fake_exponential(1, e, b.update_fraction).saturating_to::<u128>(),
            _ => 0,
        };
        let mut blob_room = blob_cfg.map(|b| b.max).unwrap_or(0);
        let cheap_data = c.byzantium.is_some_and(|b| number >= b);
        let state_root = {
            let mut pre = parent.state_root.to_vec();
            pre.extend_from_slice(&number.to_be_bytes());
            keccak256(pre)
        };

        let want = self
            .rng
            .gen_range(self.cfg.tx_min..=self.cfg.tx_max.max(self.cfg.tx_min));
        let mut txs: Vec<TxEnvelope> = Vec::new();
        let mut receipts: Vec<(TxType, alloy_consensus::Receipt)> = Vec::new();
        let mut cumulative = 0u64;
        let mut blobs_used = 0u64;
        for i in 0..want {
            let kind = self.pick_kind(number, time, blob_room);
            let si = self.rng.gen_range(0..SENDERS);
            let create = kind != Kind::Eip4844 && self.rng.gen_bool(0.1);
            let to_idx = self.rng.gen_range(0..RECIPIENTS);
            let to = self.recipients[to_idx];
            let input: Bytes = self.random_bytes(96).into();
            let access_list = match kind {
                Kind::Eip2930 | Kind::Eip1559 | Kind::Eip4844 => self.access_list(),
                _ => AccessList::default(),
            };
            let success = !(cheap_data && self.rng.gen_bool(0.05));
            let logs = if success && !create && to_idx < CONTRACTS {
                self.logs_for(to)
            } else {
                Vec::new()
            };
            let mut gas = 21_000 + data_gas(&input, cheap_data);
            if create {
                gas += 32_000;
            }
            for item in access_list.iter() {
                gas += 2_400 + 1_900 * item.storage_keys.len() as u64;
            }
            if to_idx < CONTRACTS || create {
                gas += self.rng.gen_range(0..40_000);
            }
            for l in &logs {
                gas += 375 + 375 * l.topics().len() as u64 + 8 * l.data.data.len() as u64;
            }
            let tx_gas_limit = gas + self.rng.gen_range(0..10_000);
            if cumulative + tx_gas_limit > gas_limit {
                break;
            }
            let blob_count = if kind == Kind::Eip4844 {
                self.rng.gen_range(1..=blob_room.min(2))
            } else {
                0
            };
            let tip: u128 = self.rng.gen_range(1..=2_000_000_000);
            let base = base_fee.map(|b| b as u128).unwrap_or(20_000_000_000);
            let value = U256::from(self.rng.gen_range(0u64..1_000_000_000_000_000_000));
            let kind_to = if create {
                TxKind::Create
            } else {
                TxKind::Call(to)
            };
            let (secret, nonce) = (self.senders[si].secret, self.senders[si].nonce);
            let sign = |hash: B256| -> Result<Signature> {
                alloy_consensus::crypto::secp256k1::sign_message(secret, hash)
                    .map_err(|e| Error::new(ErrorKind::Layout(format!("signing: {e}"))))
            };
            let env: TxEnvelope = match kind {
                Kind::Legacy | Kind::Legacy155 => {
                    let tx = TxLegacy {
                        chain_id: (kind == Kind::Legacy155).then_some(self.cfg.chain_id),
                        nonce,
                        gas_price: base + tip,
                        gas_limit: tx_gas_limit,
                        to: kind_to,
                        value,
                        input,
                    };
                    let sig = sign(tx.signature_hash())?;
                    tx.into_signed(sig).into()
                }
                Kind::Eip2930 => {
                    let tx = TxEip2930 {
                        chain_id: self.cfg.chain_id,
                        nonce,
                        gas_price: base + tip,
                        gas_limit: tx_gas_limit,
                        to: kind_to,
                        value,
                        access_list,
                        input,
                    };
                    let sig = sign(tx.signature_hash())?;
                    tx.into_signed(sig).into()
                }
                Kind::Eip1559 => {
                    let tx = TxEip1559 {
                        chain_id: self.cfg.chain_id,
                        nonce,
                        gas_limit: tx_gas_limit,
                        max_fee_per_gas: 2 * base + tip,
                        max_priority_fee_per_gas: tip,
                        to: kind_to,
                        value,
                        access_list,
                        input,
                    };
                    let sig = sign(tx.signature_hash())?;
                    tx.into_signed(sig).into()
                }
                Kind::Eip4844 => {
                    let hashes = (0..blob_count)
                        .map(|_| {
                            let mut h: [u8; 32] = self.rng.gen();
                            h[0] = 0x01; // KZG versioned hash
                            B256::from(h)
                        })
                        .collect();
                    let tx = TxEip4844 {
                        chain_id: self.cfg.chain_id,
                        nonce,
                        gas_limit: tx_gas_limit,
                        max_fee_per_gas: 2 * base + tip,
                        max_priority_fee_per_gas: tip,
                        to,
                        value,
                        access_list,
                        blob_versioned_hashes: hashes,
                        max_fee_per_blob_gas: 2 * blob_base_fee + 1,
                        input,
                    };
                    let sig = sign(tx.signature_hash())?;
                    let signed: Signed<TxEip4844Variant> = tx.into_signed(sig).into();
                    TxEnvelope::Eip4844(signed)
                }
            };
            self.senders[si].nonce += 1;
            blob_room -= blob_count;
            blobs_used += blob_count;
            cumulative += gas;
            let status = if cheap_data {
                Eip658Value::Eip658(success)
            } else {
                let mut pre = state_root.to_vec();
                pre.extend_from_slice(&(i as u64).to_be_bytes());
                Eip658Value::PostState(keccak256(pre))
            };
            let ty = match kind {
                Kind::Legacy | Kind::Legacy155 => TxType::Legacy,
                Kind::Eip2930 => TxType::Eip2930,
                Kind::Eip1559 => TxType::Eip1559,
                Kind::Eip4844 => TxType::Eip4844,
            };
            self.summary.tx_kinds[kind as usize] += 1;
            self.summary.logs += logs.len() as u64;
            txs.push(env);
            receipts.push((
                ty,
                alloy_consensus::Receipt {
                    status,
                    cumulative_gas_used: cumulative,
                    logs,
                },
            ));
        }
        let withdrawals = c.is_shanghai(time).then(|| {
            (0..self.rng.gen_range(0..=4))
                .map(|_| {
                    self.withdrawal_index += 1;
                    Withdrawal {
                        index: self.withdrawal_index - 1,
                        validator_index: self.rng.gen_range(0..1_000_000),
                        address: self.recipients[self.rng.gen_range(0..RECIPIENTS)],
                        amount: self.rng.gen_range(1..40_000_000_000),
                    }
                })
                .collect::<Vec<_>>()
        });
        self.summary.blobs += blobs_used;
        let tx_leaves: Vec<Vec<u8>> = txs.iter().map(|t| t.encoded_2718()).collect();
        let receipt_leaves: Vec<Vec<u8>> = receipts
            .iter()
            .map(|(ty, r)| {
                let bloom = logs_bloom(&r.logs);
                ReceiptEnvelope::from_typed(*ty, ReceiptWithBloom::new(r.clone(), bloom))
                    .encoded_2718()
            })
            .collect();
        let mut bloom = Bloom::ZERO;
        for (_, r) in &receipts {
            bloom |= logs_bloom(&r.logs);
        }
        let mut mix_hash = B256::ZERO;
        if pos {
            mix_hash = B256::from(self.rng.gen::<[u8; 32]>());
        }
        let dao_block = c.dao.is_some_and(|d| number >= d && number < d + 10);
        let header = Header {
            parent_hash,
            ommers_hash: EMPTY_OMMERS_HASH,
            beneficiary: self.coinbase,
            state_root,
            transactions_root: alloy_trie::root::ordered_trie_root_encoded(&tx_leaves),
            receipts_root: alloy_trie::root::ordered_trie_root_encoded(&receipt_leaves),
            logs_bloom: bloom,
            difficulty: if pos {
                U256::ZERO
            } else {
                calc_difficulty(&c, time, &parent)
            },
            number,
            gas_limit,
            gas_used: cumulative,
            timestamp: time,
            extra_data: if pos {
                Bytes::new()
            } else if dao_block {
                Bytes::from_static(DAO_EXTRA_DATA)
            } else {
                Bytes::from_static(GENERATED_EXTRA_DATA)
            },
            mix_hash,
            nonce: B64::ZERO,
            base_fee_per_gas: base_fee,
            withdrawals_root: withdrawals.as_ref().map(|w| {
                let leaves: Vec<Vec<u8>> = w.iter().map(alloy_rlp::encode).collect();
                alloy_trie::root::ordered_trie_root_encoded(&leaves)
            }),
            blob_gas_used: cancun.then_some(blobs_used * GAS_PER_BLOB),
            excess_blob_gas,
            parent_beacon_block_root: cancun.then(|| B256::from(self.rng.gen::<[u8; 32]>())),
            requests_hash: c.is_prague(time).then_some(EMPTY_REQUESTS_HASH),
            ..Default::default()
        };
        if pos {
            self.summary.pos_blocks += 1;
        }
        self.summary.withdrawals += withdrawals.as_ref().map_or(0, |w| w.len() as u64);
        Ok(self.emit(header, tx_leaves, receipts, withdrawals, parent_td))
    }

    fn emit(
        &mut self,
        header: Header,
        tx_leaves: Vec<Vec<u8>>,
        receipts: Vec<(TxType, alloy_consensus::Receipt)>,
        withdrawals: Option<Vec<Withdrawal>>,
        parent_td: U256,
    ) -> GenBlock {
        let header_rlp = alloy_rlp::encode(&header);
        let hash = keccak256(&header_rlp);
        let td = parent_td + header.difficulty;
        // Body: [txs (legacy as lists, typed as byte strings), uncles, withdrawals?].
        let txs: Vec<Vec<u8>> = tx_leaves.iter().map(|t| wrap_typed(t)).collect();
        let mut parts = vec![rlp_list(&txs), rlp_list(&[])];
        if let Some(w) = &withdrawals {
            let items: Vec<Vec<u8>> = w.iter().map(alloy_rlp::encode).collect();
            parts.push(rlp_list(&items));
        }
        let body = rlp_list(&parts);
        let consensus: Vec<Vec<u8>> = receipts
            .iter()
            .map(|(ty, r)| {
                let env = ReceiptEnvelope::from_typed(
                    *ty,
                    ReceiptWithBloom::new(r.clone(), logs_bloom(&r.logs)),
                );
                wrap_typed(&env.encoded_2718())
            })
            .collect();
        let storage: Vec<Vec<u8>> = receipts.iter().map(|(_, r)| storage_receipt(r)).collect();
        let s = &mut self.summary;
        s.blocks += 1;
        s.transactions += tx_leaves.len() as u64;
        if header.number == 0 {
            s.genesis_hash = hash;
        }
        s.tip_number = header.number;
        s.tip_hash = hash;
        s.final_td = td;
        self.parent = Some((header.clone(), hash, td));
        GenBlock {
            number: header.number,
            hash,
            header: header_rlp,
            body,
            receipts: rlp_list(&consensus),
            storage_receipts: rlp_list(&storage),
            td,
            transactions: tx_leaves.len(),
        }
    }
}

fn logs_bloom(logs: &[Log]) -> Bloom {
    let mut b = Bloom::ZERO;
    for l in logs {
        b.accrue_log(l);
    }
    b
}

/// RLP list of already-encoded items.
pub(crate) fn rlp_list(items: &[Vec<u8>]) -> Vec<u8> {
    let len: usize = items.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(len + 9);
    alloy_rlp::Header {
        list: true,
        payload_length: len,
    }
    .encode(&mut out);
    for i in items {
        out.extend_from_slice(i);
    }
    out
}

/// An EIP-2718 encoding as a list element: legacy (an RLP list) as is, typed as a byte string.
pub(crate) fn wrap_typed(enc: &[u8]) -> Vec<u8> {
    if enc.first().is_some_and(|b| *b >= 0xc0) {
        return enc.to_vec();
    }
    let mut out = Vec::with_capacity(enc.len() + 9);
    alloy_rlp::Header {
        list: false,
        payload_length: enc.len(),
    }
    .encode(&mut out);
    out.extend_from_slice(enc);
    out
}

/// geth's `ReceiptForStorage`: `[statusOrPostState, cumulativeGasUsed, logs]`.
fn storage_receipt(r: &alloy_consensus::Receipt) -> Vec<u8> {
    let payload = r.status.length() + r.cumulative_gas_used.length() + r.logs.length();
    let mut out = Vec::with_capacity(payload + 9);
    alloy_rlp::Header {
        list: true,
        payload_length: payload,
    }
    .encode(&mut out);
    r.status.encode(&mut out);
    r.cumulative_gas_used.encode(&mut out);
    r.logs.encode(&mut out);
    out
}

/// Generate `cfg.blocks` blocks from genesis into `out_dir` (era1 files, or the freezer's
/// tables).
pub fn generate(cfg: &EthGenConfig, out_dir: &Path) -> Result<EthGenSummary> {
    if cfg.blocks == 0 {
        return Err(Error::new(ErrorKind::Layout("no block to generate".into())));
    }
    if cfg.tx_max < cfg.tx_min {
        return Err(Error::new(ErrorKind::Layout(format!(
            "tx per block {}:{}: MIN above MAX",
            cfg.tx_min, cfg.tx_max
        ))));
    }
    let mut chain = ChainBuilder::new(cfg);
    match cfg.format {
        OutputFormat::Era1 => {
            let mut w = Era1DirWriter::new(out_dir, &cfg.network)?;
            for _ in 0..cfg.blocks {
                let b = chain.next_block()?;
                w.add_block_numbered(b.number, b.hash, &b.header, &b.body, &b.receipts, b.td)?;
            }
            chain.summary.files = w
                .finish()?
                .into_iter()
                .map(|f| GenFile {
                    path: f.path,
                    first_block: f.first_block,
                    blocks: f.blocks,
                    accumulator: Some(f.accumulator),
                })
                .collect();
            debug_assert!(chain
                .summary
                .files
                .iter()
                .all(|f| f.blocks <= EPOCH_SIZE as u64));
        }
        OutputFormat::Ere(profile) => {
            let mut w = EreDirWriter::new(out_dir, &cfg.network, profile)?;
            let mut terminal_td = None;
            for _ in 0..cfg.blocks {
                let b = chain.next_block()?;
                let pow = !decode_header(&b.header)?.header.difficulty.is_zero();
                if pow {
                    terminal_td = Some(b.td);
                }
                let types: Vec<u8> = super::body::decode_body(&b.body)?
                    .transactions
                    .iter()
                    .map(|t| t.tx_type)
                    .collect();
                let slim = slim_from_storage(&b.storage_receipts, &types)?;
                w.add_block(
                    b.number,
                    b.hash,
                    &b.header,
                    &b.body,
                    &slim,
                    pow.then_some(b.td),
                    None,
                )?;
            }
            chain.summary.files = w
                .finish()?
                .into_iter()
                .map(|f| GenFile {
                    path: f.path,
                    first_block: f.first_block,
                    blocks: f.blocks,
                    accumulator: f.accumulator,
                })
                .collect();
            chain.summary.geth_genesis =
                Some(geth_genesis_json(cfg, terminal_td.unwrap_or_default()));
        }
        OutputFormat::Freezer(opts) => {
            let mut w = FreezerWriter::create(out_dir, opts)?;
            for _ in 0..cfg.blocks {
                let b = chain.next_block()?;
                w.append(&FreezerBlock {
                    number: b.number,
                    hash: b.hash,
                    header: &b.header,
                    body: &b.body,
                    receipts: &b.storage_receipts,
                    td: Some(b.td),
                })?;
            }
            let n = w.finish()?;
            chain.summary.files = vec![GenFile {
                path: out_dir.to_path_buf(),
                first_block: 0,
                blocks: n,
                accumulator: None,
            }];
        }
    }
    Ok(chain.summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eth::body::decode_body;
    use crate::eth::era1::Era1;
    use crate::eth::freezer::Freezer;
    use crate::eth::freezer_writer::FreezerVersion;
    use crate::eth::header::decode_header;
    use crate::eth::rules::Rule;
    use crate::eth::validate::{check_pow, verify_era1, verify_freezer};
    use alloy_consensus::transaction::SignerRecoverable;
    use std::collections::HashMap;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rechain-ethgen-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn genesis_hashes_are_the_networks() {
        let g = alloy_rlp::encode(mainnet_genesis());
        assert_eq!(
            keccak256(&g),
            b256!("d4e56740f876aef8c010b86a40d5f56745a118d0906a34e69aec8c0db1cb8fa3")
        );
        assert_eq!(
            keccak256(alloy_rlp::encode(sepolia_genesis())),
            b256!("25a5cc106eea7138acab33231d7160d69cb777ee0c2c553fcddf5138993e6dd9")
        );
    }

    /// Senders recover to the summary's keys with per-sender nonces 0, 1, 2, ...
    fn check_senders(body: &[u8], senders: &[Address], nonces: &mut HashMap<Address, u64>) {
        for t in decode_body(body).unwrap().transactions {
            let from = t.envelope.recover_signer().unwrap();
            assert!(senders.contains(&from), "{from}");
            let n = nonces.entry(from).or_default();
            assert_eq!(alloy_consensus::Transaction::nonce(&t.envelope), *n);
            *n += 1;
        }
    }

    /// dev: two era1 files (8192 + 108 blocks), every rule but PoW passes, the accumulators
    /// match the names, senders recover; PoW fails as documented.
    #[test]
    fn dev_era1_verifies() {
        let d = scratch("era1");
        let cfg = EthGenConfig::for_network("dev", 8300, 7, 0, 3, OutputFormat::Era1).unwrap();
        let s = generate(&cfg, &d).unwrap();
        assert_eq!((s.blocks, s.tip_number), (8300, 8299));
        assert_eq!(s.files.len(), 2);
        assert_eq!((s.files[1].first_block, s.files[1].blocks), (8192, 108));
        assert!(
            s.tx_kinds.iter().take(4).all(|k| *k > 0),
            "{:?}",
            s.tx_kinds
        );
        assert_eq!(s.tx_kinds[4], 0);
        assert!(s.logs > 0);
        let mut nonces = HashMap::new();
        let mut last_td = U256::ZERO;
        for f in &s.files {
            let era = Era1::open(&f.path).unwrap();
            let name = f.path.file_name().unwrap().to_str().unwrap();
            let r = verify_era1(&era, &DEV, Some(name), None);
            assert_eq!(r.violations, vec![], "{name}");
            assert_eq!(Some(r.accumulator), f.accumulator);
            for b in era.blocks() {
                check_senders(&b.unwrap().body, &s.senders, &mut nonces);
            }
            last_td = r.final_td;
            if f.first_block == 8192 {
                assert_eq!(r.last_hash, s.tip_hash);
            }
        }
        assert_eq!(last_td, s.final_td);
        assert_eq!(nonces.values().sum::<u64>(), s.transactions);
        // Proof of work is the one rule generated headers break.
        let era = Era1::open(&s.files[0].path).unwrap();
        let b = era.block(1).unwrap();
        let h = decode_header(&b.header).unwrap();
        let cache = crate::eth::ethash::Cache::new(0);
        let rules: Vec<Rule> = check_pow(&cache, &b.header, &h)
            .iter()
            .map(|v| v.rule)
            .collect();
        assert!(rules.contains(&Rule::PowMixHash), "{rules:?}");
        // Same seed, same chain.
        let d2 = scratch("era1-again");
        let s2 = generate(&cfg, &d2).unwrap();
        assert_eq!(
            s2,
            EthGenSummary {
                files: s2.files.clone(),
                ..s.clone()
            }
        );
        assert_eq!(
            std::fs::read(&s.files[1].path).unwrap(),
            std::fs::read(&s2.files[1].path).unwrap()
        );
        std::fs::remove_dir_all(d).unwrap();
        std::fs::remove_dir_all(d2).unwrap();
    }

    /// The merge, Shanghai, Cancun and Prague in Ere files of every profile: each reads back
    /// with no violation, the transition epoch carries TDs (the final one after the merge)
    /// and an accumulator over its pre-merge blocks; proofs are refused past the merge and
    /// lead to the accumulator before it; a damaged proof or receipt is reported.
    #[test]
    fn ere_through_the_merge_verifies_in_every_profile() {
        use crate::eth::ere::{Component, Ere};
        use crate::eth::validate::verify_ere_into;
        let t0 = 1_700_000_000;
        let chain = ChainConfig {
            shanghai_time: Some(t0 + 2_000),
            cancun_time: Some(t0 + 2_600),
            prague_time: Some(t0 + 3_000),
            ..DEV
        };
        let base = EthGenConfig {
            chain,
            genesis: dev_genesis(&chain, t0),
            ..EthGenConfig::for_network("dev", 400, 5, 1, 4, OutputFormat::Era1).unwrap()
        };
        for (name, profile) in [("noproofs", true), ("noreceipts", false)] {
            let cfg = EthGenConfig {
                format: OutputFormat::Ere(EreProfile::by_name(name).unwrap()),
                ..base.clone()
            };
            let d = scratch(&format!("ere-{name}"));
            let s = generate(&cfg, &d).unwrap();
            assert!(s.pos_blocks > 100 && s.pos_blocks < 399, "{}", s.pos_blocks);
            assert!(s.blobs > 0 && s.withdrawals > 0);
            let f = &s.files[0];
            assert!(f.path.to_string_lossy().ends_with(&format!("-{name}.ere")));
            let ere = Ere::open(&f.path).unwrap();
            assert_eq!((ere.start(), ere.count()), (0, 400));
            assert_eq!(ere.has(Component::Receipts), profile);
            assert!(ere.has(Component::TotalDifficulty));
            assert_eq!(ere.accumulator(), f.accumulator);
            let last = ere.block(399).unwrap();
            assert_eq!(last.total_difficulty, Some(s.final_td));
            let mut seen = 0;
            let r = verify_ere_into(
                &ere,
                &chain,
                f.path.file_name().and_then(|n| n.to_str()),
                None,
                &mut |b, _| {
                    seen += 1;
                    assert_eq!(b.receipts.is_some(), profile);
                },
            );
            assert_eq!(r.violations, vec![], "{name}");
            assert_eq!((seen, r.transactions), (400, s.transactions));
            assert_eq!(r.accumulator, f.accumulator);
            std::fs::remove_dir_all(d).unwrap();
        }
        // Proofs: refused past the merge, checked before it.
        let full = EreProfile::by_name("full").unwrap();
        let d = scratch("ere-full");
        let cfg = EthGenConfig {
            format: OutputFormat::Ere(full),
            ..base.clone()
        };
        let err = generate(&cfg, &d).unwrap_err().to_string();
        assert!(err.contains("beacon chain"), "{err}");
        let _ = std::fs::remove_dir_all(&d);
        let cfg = EthGenConfig {
            blocks: 120,
            format: OutputFormat::Ere(full),
            ..base.clone()
        };
        let s = generate(&cfg, &d).unwrap();
        let path = &s.files[0].path;
        assert!(!path.to_string_lossy().contains("-no"));
        let ere = Ere::open(path).unwrap();
        assert_eq!(ere.components(), 5);
        let name = path.file_name().and_then(|n| n.to_str()).map(String::from);
        let r = verify_ere_into(&ere, &chain, name.as_deref(), None, &mut |_, _| {});
        assert_eq!(
            (r.violations.len(), r.proofs, r.proofs_checked),
            (0, 120, 120)
        );
        // A proof with one byte changed: that block's proof fails, nothing else.
        let mut bytes = std::fs::read(path).unwrap();
        let proof_rec = crate::eth::e2store::Records::new(&bytes)
            .map(|r| r.unwrap())
            .find(|r| r.typ == crate::eth::e2store::PROOF)
            .unwrap()
            .offset as usize;
        // The first proof's value is a framed snappy stream: a byte flipped inside it fails
        // its chunk's checksum, a decode violation for block 0 alone (the accumulator cannot
        // be recomputed without it; the other proofs still lead to the file's record).
        bytes[proof_rec + 8 + 30] ^= 1;
        let ere = Ere::from_bytes(bytes).unwrap();
        let r = verify_ere_into(&ere, &chain, None, None, &mut |_, _| {});
        let rules: Vec<(u64, Rule)> = r.violations.iter().map(|v| (v.block, v.rule)).collect();
        assert_eq!(
            rules,
            vec![(0, Rule::Decode), (0, Rule::AccumulatorRecord)],
            "{:?} at {proof_rec}",
            r.violations
        );
        std::fs::remove_dir_all(d).unwrap();
    }

    /// Proofs are data: a file whose post-merge blocks carry proofs of another type (beacon
    /// summaries, given here as opaque bytes) reads back with them, counts them without
    /// checking them, and exports as `full` byte for byte; `noproofs` drops them.
    #[test]
    fn ere_proofs_of_any_type_are_kept_through_an_export() {
        use crate::eth::ere::{encode_proof, BlockProof, Ere};
        use crate::eth::ere_writer::EreDirWriter;
        use crate::eth::export::{export_ere, ExportSource};
        use crate::eth::validate::verify_ere_into;
        let t0 = 1_700_000_000;
        let chain = ChainConfig {
            shanghai_time: Some(t0 + 2_000),
            cancun_time: Some(t0 + 2_600),
            ..DEV
        };
        let cfg = EthGenConfig {
            chain,
            genesis: dev_genesis(&chain, t0),
            ..EthGenConfig::for_network("dev", 300, 9, 0, 2, OutputFormat::Era1).unwrap()
        };
        let full = EreProfile::by_name("full").unwrap();
        let cfg = EthGenConfig {
            format: OutputFormat::Ere(full),
            ..cfg
        };
        let d = scratch("ere-given-proofs");
        let mut w = EreDirWriter::new(d.join("src"), "dev", full).unwrap();
        let mut builder = ChainBuilder::new(&cfg);
        let mut given = HashMap::new();
        for _ in 0..cfg.blocks {
            let b = builder.next_block().unwrap();
            let pow = !decode_header(&b.header)
                .unwrap()
                .header
                .difficulty
                .is_zero();
            let types: Vec<u8> = decode_body(&b.body)
                .unwrap()
                .transactions
                .iter()
                .map(|t| t.tx_type)
                .collect();
            let slim = slim_from_storage(&b.storage_receipts, &types).unwrap();
            let proof = (!pow).then(|| {
                encode_proof(&BlockProof {
                    proof_type: crate::eth::ere::PROOF_HISTORICAL_SUMMARIES,
                    data: vec![b.number as u8; 96],
                })
            });
            if let Some(p) = &proof {
                given.insert(b.number, p.clone());
            }
            let td = pow.then_some(b.td);
            w.add_block(
                b.number,
                b.hash,
                &b.header,
                &b.body,
                &slim,
                td,
                proof.as_deref(),
            )
            .unwrap();
        }
        let files = w.finish().unwrap();
        let path = &files[0].path;
        let ere = Ere::open(path).unwrap();
        let name = path.file_name().and_then(|n| n.to_str()).map(String::from);
        let r = verify_ere_into(&ere, &chain, name.as_deref(), None, &mut |_, _| {});
        assert_eq!(r.violations, vec![]);
        let pre = 300 - given.len() as u64;
        assert!(pre > 50 && !given.is_empty());
        assert_eq!((r.proofs, r.proofs_checked), (300, pre));
        for (n, p) in &given {
            assert_eq!(ere.block(*n).unwrap().proof.as_ref(), Some(p));
        }
        let source = ExportSource::Archives(vec![path.clone()]);
        let out = export_ere(&source, "dev", &d.join("full"), 0, 300, None, full).unwrap();
        assert_eq!(
            std::fs::read(&out[0].path).unwrap(),
            std::fs::read(path).unwrap()
        );
        let noproofs = EreProfile::by_name("noproofs").unwrap();
        let out = export_ere(&source, "dev", &d.join("np"), 0, 300, None, noproofs).unwrap();
        let np = Ere::open(&out[0].path).unwrap();
        assert!(!np.has(crate::eth::ere::Component::Proof));
        std::fs::remove_dir_all(d).unwrap();
    }

    /// A schedule reaching the merge, Shanghai, Cancun and Prague in a freezer: PoS headers,
    /// withdrawals and blob transactions pass every rule.
    #[test]
    fn freezer_through_cancun_verifies() {
        let t0 = 1_700_000_000;
        let chain = ChainConfig {
            shanghai_time: Some(t0 + 400),
            cancun_time: Some(t0 + 800),
            prague_time: Some(t0 + 1_200),
            ..DEV
        };
        let cfg = EthGenConfig {
            chain,
            genesis: dev_genesis(&chain, t0),
            format: OutputFormat::Freezer(FreezerOptions {
                version: FreezerVersion::V1_10,
                max_file_size: 64 * 1024,
            }),
            ..EthGenConfig::for_network("dev", 200, 3, 1, 4, OutputFormat::Era1).unwrap()
        };
        let d = scratch("freezer");
        let s = generate(&cfg, &d.join("chain")).unwrap();
        assert!(s.pos_blocks > 100 && s.pos_blocks < 200, "{}", s.pos_blocks);
        assert!(
            s.tx_kinds[4] > 0 && s.blobs > 0 && s.withdrawals > 0,
            "{s:?}"
        );
        let f = Freezer::open(&d).unwrap();
        assert_eq!(f.check_lengths().unwrap(), 200);
        let r = verify_freezer(&f, &chain, 0, u64::MAX);
        assert_eq!(r.violations, vec![]);
        assert_eq!((r.last_hash, r.final_td), (s.tip_hash, Some(s.final_td)));
        assert_eq!(r.transactions, s.transactions);
        let mut nonces = HashMap::new();
        for n in 0..200 {
            check_senders(&f.body(n).unwrap(), &s.senders, &mut nonces);
        }
        assert!(std::fs::read_dir(d.join("chain")).unwrap().count() > 16);
        // Era1 refuses a chain past the merge.
        let e = generate(
            &EthGenConfig {
                format: OutputFormat::Era1,
                ..cfg.clone()
            },
            &d.join("era1"),
        )
        .unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Layout(_)), "{e}");
        std::fs::remove_dir_all(d).unwrap();
    }

    /// Mainnet and Sepolia start from their real genesis; mainnet stays Frontier (legacy
    /// transactions once the gas limit allows) and passes the mainnet rules.
    #[test]
    fn mainnet_and_sepolia_freezers_verify() {
        for (net, n) in [("mainnet", 2_600), ("sepolia", 60)] {
            let cfg = EthGenConfig::for_network(
                net,
                n,
                11,
                1,
                2,
                OutputFormat::Freezer(FreezerOptions::default()),
            )
            .unwrap();
            let d = scratch(net);
            let s = generate(&cfg, &d).unwrap();
            let f = Freezer::open(&d).unwrap();
            let r = verify_freezer(&f, &cfg.chain, 0, u64::MAX);
            assert_eq!(r.violations, vec![], "{net}");
            assert_eq!(f.hash(0).unwrap(), s.genesis_hash);
            assert!(f.diffs.is_none());
            if net == "mainnet" {
                assert_eq!(s.tx_kinds[1..], [0, 0, 0, 0]);
            } else {
                assert!(s.tx_kinds[2] + s.tx_kinds[3] > 0, "{:?}", s.tx_kinds);
            }
            assert!(s.transactions > 0, "{net}: {s:?}");
            std::fs::remove_dir_all(d).unwrap();
        }
    }
}
