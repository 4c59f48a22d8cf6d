//! Ethereum chain configurations: the fork schedule of mainnet, Sepolia and rechain's generated
//! `dev` and `devmerge` chains (block-number and timestamp activations, the first proof-of-stake
//! block where it is known) and the blob schedule each fork sets. The rules (`rules.rs`) read
//! them; nothing here checks a block.

/// Block-number and timestamp fork activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainConfig {
    pub homestead: Option<u64>,
    pub dao: Option<u64>,
    pub byzantium: Option<u64>,
    pub constantinople: Option<u64>,
    pub muir_glacier: Option<u64>,
    pub london: Option<u64>,
    pub arrow_glacier: Option<u64>,
    pub gray_glacier: Option<u64>,
    pub shanghai_time: Option<u64>,
    pub cancun_time: Option<u64>,
    pub prague_time: Option<u64>,
    pub osaka_time: Option<u64>,
    pub bpo1_time: Option<u64>,
    pub bpo2_time: Option<u64>,
    /// The first proof-of-stake block, where the network's history fixes it (mainnet, spec
    /// §3.2). From it on a header with difficulty is not a block of this chain.
    pub merge_block: Option<u64>,
}

/// `params/config.go: MainnetChainConfig` (spec §3.2).
pub const MAINNET: ChainConfig = ChainConfig {
    homestead: Some(1_150_000),
    dao: Some(1_920_000),
    byzantium: Some(4_370_000),
    constantinople: Some(7_280_000),
    muir_glacier: Some(9_200_000),
    london: Some(12_965_000),
    arrow_glacier: Some(13_773_000),
    gray_glacier: Some(15_050_000),
    shanghai_time: Some(1_681_338_455),
    cancun_time: Some(1_710_338_135),
    prague_time: Some(1_746_612_311),
    osaka_time: Some(1_764_798_551),
    bpo1_time: Some(1_765_290_071),
    bpo2_time: Some(1_767_747_671),
    merge_block: Some(15_537_394),
};

/// `params/config.go: SepoliaChainConfig`: every block fork through London at genesis, no
/// Arrow/Gray Glacier, no DAO. Time forks after Prague are left out (not in the spec).
pub const SEPOLIA: ChainConfig = ChainConfig {
    homestead: Some(0),
    dao: None,
    byzantium: Some(0),
    constantinople: Some(0),
    muir_glacier: Some(0),
    london: Some(0),
    arrow_glacier: None,
    gray_glacier: None,
    shanghai_time: Some(1_677_557_088),
    cancun_time: Some(1_706_655_072),
    prague_time: Some(1_741_159_776),
    osaka_time: None,
    bpo1_time: None,
    bpo2_time: None,
    merge_block: None,
};

/// rechain's `dev` network (`eth::gen`): every pre-merge block fork at genesis (London's base
/// fee and typed transactions from block 0, the last bomb delay), no DAO, no time forks.
pub const DEV: ChainConfig = ChainConfig {
    homestead: Some(0),
    dao: None,
    byzantium: Some(0),
    constantinople: Some(0),
    muir_glacier: Some(0),
    london: Some(0),
    arrow_glacier: Some(0),
    gray_glacier: Some(0),
    shanghai_time: None,
    cancun_time: None,
    prague_time: None,
    osaka_time: None,
    bpo1_time: None,
    bpo2_time: None,
    merge_block: None,
};

pub(crate) fn at(fork: Option<u64>, x: u64) -> bool {
    fork.is_some_and(|f| x >= f)
}

/// Start of `devmerge`'s genesis (the same as `dev`'s); its time forks are offsets from it.
pub const DEVMERGE_GENESIS_TIME: u64 = 1_700_000_000;

/// rechain's `devmerge` network (`eth::gen`): `dev`'s block forks, then Shanghai (where the
/// generator switches to proof of stake: about block 12,000), Cancun (about 16,200) and Prague
/// (about 18,700), so a 20,000-block chain crosses the merge and both blob schedules in three
/// Ere files: one before the merge, one transition epoch, one after.
pub const DEVMERGE: ChainConfig = ChainConfig {
    shanghai_time: Some(DEVMERGE_GENESIS_TIME + 150_000),
    cancun_time: Some(DEVMERGE_GENESIS_TIME + 200_000),
    prague_time: Some(DEVMERGE_GENESIS_TIME + 230_000),
    ..DEV
};

impl ChainConfig {
    pub fn by_name(name: &str) -> Option<ChainConfig> {
        match name {
            "mainnet" => Some(MAINNET),
            "sepolia" => Some(SEPOLIA),
            "dev" => Some(DEV),
            "devmerge" => Some(DEVMERGE),
            _ => None,
        }
    }
    pub fn is_london(&self, number: u64) -> bool {
        at(self.london, number)
    }
    pub fn is_shanghai(&self, time: u64) -> bool {
        at(self.shanghai_time, time)
    }
    pub fn is_cancun(&self, time: u64) -> bool {
        at(self.cancun_time, time)
    }
    pub fn is_prague(&self, time: u64) -> bool {
        at(self.prague_time, time)
    }
    pub fn is_osaka(&self, time: u64) -> bool {
        at(self.osaka_time, time)
    }

    /// Blob parameters active at `time`, `None` before Cancun.
    pub fn blob_config(&self, time: u64) -> Option<BlobConfig> {
        let c = if at(self.bpo2_time, time) {
            BlobConfig {
                target: 14,
                max: 21,
                update_fraction: 11_684_671,
            }
        } else if at(self.bpo1_time, time) {
            BlobConfig {
                target: 10,
                max: 15,
                update_fraction: 8_346_193,
            }
        } else if self.is_prague(time) {
            BlobConfig {
                target: 6,
                max: 9,
                update_fraction: 5_007_716,
            }
        } else if self.is_cancun(time) {
            BlobConfig {
                target: 3,
                max: 6,
                update_fraction: 3_338_477,
            }
        } else {
            return None;
        };
        Some(c)
    }

    /// Number of header fields a header with this number and time must have (15..=21).
    pub fn expected_fields(&self, number: u64, time: u64) -> usize {
        15 + self.is_london(number) as usize
            + self.is_shanghai(time) as usize
            + 3 * self.is_cancun(time) as usize
            + self.is_prague(time) as usize
    }
}

/// Blob schedule entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobConfig {
    pub target: u64,
    pub max: u64,
    pub update_fraction: u64,
}
