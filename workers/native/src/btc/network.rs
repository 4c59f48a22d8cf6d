//! Network parameters (spec bitcoin-blk.md §1.3, §5.2): magic, genesis, proof-of-work limit.
//! The one place these constants live; Python reads them through the extension.

use primitive_types::U256;

/// The consensus parameters of Core's difficulty adjustment (`GetNextWorkRequired`).
#[derive(Clone, Copy, Debug)]
pub struct PowRules {
    /// Seconds between blocks aimed at (`nPowTargetSpacing`).
    pub spacing: i64,
    /// Seconds a retarget period aims at (`nPowTargetTimespan`); the period is
    /// `timespan / spacing` blocks.
    pub timespan: i64,
    /// Testnets: a block more than two spacings after its parent may use the limit's bits.
    pub allow_min_difficulty: bool,
    /// Regtest: the target never changes.
    pub no_retargeting: bool,
    /// Testnet4 (BIP94): a retarget starts from the period's first block's bits.
    pub bip94: bool,
    pub pow_limit: U256,
}

impl PowRules {
    /// Blocks per retarget period (`DifficultyAdjustmentInterval`).
    pub fn interval(&self) -> u32 {
        (self.timespan / self.spacing) as u32
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Network {
    Main,
    Testnet3,
    Testnet4,
    Signet,
    Regtest,
}

pub const ALL_NETWORKS: [Network; 5] = [
    Network::Main,
    Network::Testnet3,
    Network::Testnet4,
    Network::Signet,
    Network::Regtest,
];

impl Network {
    /// Accepts the CLI names (`main`, `testnet`, `testnet3`, `testnet4`, `signet`, `regtest`).
    pub fn from_name(name: &str) -> Option<Network> {
        match name {
            "main" | "mainnet" | "bitcoin" => Some(Network::Main),
            "testnet" | "testnet3" | "test" => Some(Network::Testnet3),
            "testnet4" => Some(Network::Testnet4),
            "signet" => Some(Network::Signet),
            "regtest" => Some(Network::Regtest),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Network::Main => "main",
            Network::Testnet3 => "testnet",
            Network::Testnet4 => "testnet4",
            Network::Signet => "signet",
            Network::Regtest => "regtest",
        }
    }

    /// Message start bytes as they appear (after de-obfuscation) in a blk file.
    pub fn magic(self) -> [u8; 4] {
        match self {
            Network::Main => [0xf9, 0xbe, 0xb4, 0xd9],
            Network::Testnet3 => [0x0b, 0x11, 0x09, 0x07],
            Network::Testnet4 => [0x1c, 0x16, 0x3f, 0x28],
            Network::Signet => [0x0a, 0x03, 0xcf, 0x40],
            Network::Regtest => [0xfa, 0xbf, 0xb5, 0xda],
        }
    }

    /// Genesis block hash in display (reversed) hex.
    pub fn genesis_hash_hex(self) -> &'static str {
        match self {
            Network::Main => "000000000019d6689c085ae165831e934ff763ae46a2a6c172b3f1b60a8ce26f",
            Network::Testnet3 => "000000000933ea01ad0ee984209779baaec3ced90fa3f408719526f8d77f4943",
            Network::Testnet4 => "00000000da84f2bafbbc53dee25a72ae507ff4914b867c565be350b0da8bf043",
            Network::Signet => "00000008819873e925422c1ff0f99f7cc9bbb232af63a077a480a3633bee1ef6",
            Network::Regtest => "0f9188f13cb7b2c71f2a335e3a4fc328bf5beb436012afca590b1a11466e2206",
        }
    }

    /// Genesis hash in internal byte order.
    pub fn genesis_hash(self) -> [u8; 32] {
        let mut out = [0u8; 32];
        let hex = self.genesis_hash_hex().as_bytes();
        for i in 0..32 {
            let hi = (hex[2 * i] as char).to_digit(16).unwrap() as u8;
            let lo = (hex[2 * i + 1] as char).to_digit(16).unwrap() as u8;
            out[31 - i] = (hi << 4) | lo;
        }
        out
    }

    /// Compact bits of the genesis block (and of the proof-of-work limit).
    pub fn genesis_bits(self) -> u32 {
        match self {
            Network::Main | Network::Testnet3 | Network::Testnet4 => 0x1d00ffff,
            Network::Signet => 0x1e0377ae,
            Network::Regtest => 0x207fffff,
        }
    }

    /// powLimit as a 256-bit integer.
    pub fn pow_limit(self) -> U256 {
        match self {
            Network::Main | Network::Testnet3 | Network::Testnet4 => {
                (U256::one() << 224) - U256::one()
            }
            Network::Signet => U256::from(0x0377aeu64) << 216,
            Network::Regtest => (U256::one() << 255) - U256::one(),
        }
    }

    /// (time, nonce) of the genesis header; the rest is shared (spec §8.2).
    pub fn genesis_time_nonce(self) -> (u32, u32) {
        match self {
            Network::Main => (1231006505, 2083236893),
            Network::Testnet3 => (1296688602, 414098458),
            Network::Testnet4 => (1714777860, 393743547),
            Network::Signet => (1598918400, 52613770),
            Network::Regtest => (1296688602, 2),
        }
    }

    /// Address encodings: (base58 P2PKH version, base58 P2SH version, bech32 human-readable part).
    pub fn address_params(self) -> (u8, u8, &'static str) {
        match self {
            Network::Main => (0x00, 0x05, "bc"),
            Network::Testnet3 | Network::Testnet4 | Network::Signet => (0x6f, 0xc4, "tb"),
            Network::Regtest => (0x6f, 0xc4, "bcrt"),
        }
    }

    /// First height whose coinbase must start with a push of its height (BIP34).
    pub fn bip34_height(self) -> u64 {
        match self {
            Network::Main => 227_931,
            Network::Testnet3 => 21_111,
            Network::Testnet4 | Network::Signet | Network::Regtest => 1,
        }
    }

    /// First height whose header must have version 3 or more (BIP66, also DERSIG's script flag).
    pub fn bip66_height(self) -> u32 {
        match self {
            Network::Main => 363_725,
            Network::Testnet3 => 330_776,
            Network::Testnet4 | Network::Signet | Network::Regtest => 1,
        }
    }

    /// First height whose header must have version 4 or more (BIP65, also CHECKLOCKTIMEVERIFY's).
    pub fn bip65_height(self) -> u32 {
        match self {
            Network::Main => 388_381,
            Network::Testnet3 => 581_885,
            Network::Testnet4 | Network::Signet | Network::Regtest => 1,
        }
    }

    /// First height of BIP68, BIP112 and BIP113 (Core's `CSVHeight`): sequence locks, the
    /// CHECKSEQUENCEVERIFY script flag, and lock times measured against the median time past.
    pub fn csv_height(self) -> u32 {
        match self {
            Network::Main => 419_328,
            Network::Testnet3 => 770_112,
            Network::Testnet4 | Network::Signet | Network::Regtest => 1,
        }
    }

    /// Core's difficulty rules for this network (`GetNextWorkRequired`'s consensus params).
    pub fn pow_rules(self) -> PowRules {
        let two_weeks = 14 * 24 * 60 * 60;
        let (timespan, allow_min_difficulty, no_retargeting, bip94) = match self {
            Network::Main | Network::Signet => (two_weeks, false, false, false),
            Network::Testnet3 => (two_weeks, true, false, false),
            Network::Testnet4 => (two_weeks, true, false, true),
            Network::Regtest => (24 * 60 * 60, true, true, false),
        };
        PowRules {
            spacing: self.target_spacing() as i64,
            timespan,
            allow_min_difficulty,
            no_retargeting,
            bip94,
            pow_limit: self.pow_limit(),
        }
    }

    /// Core's `nMinimumChainWork` (hex, big-endian): below it, `-assumevalid` skips nothing.
    pub fn minimum_chain_work_hex(self) -> &'static str {
        match self {
            Network::Main => "1128750f82f4c366153a3a030",
            Network::Testnet3 => "17dde1c649f3708d14b6",
            Network::Testnet4 => "9a0fe15d0177d086304",
            Network::Signet => "b463ea0a4b8",
            Network::Regtest => "0",
        }
    }

    /// Seconds between blocks the difficulty aims at (Core's `nPowTargetSpacing`).
    pub fn target_spacing(self) -> u64 {
        600
    }

    /// Blocks between subsidy halvings (regtest halves every 150).
    pub fn halving_interval(self) -> u64 {
        match self {
            Network::Regtest => 150,
            _ => 210_000,
        }
    }

    pub fn from_magic(magic: [u8; 4]) -> Option<Network> {
        ALL_NETWORKS.iter().copied().find(|n| n.magic() == magic)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for n in ALL_NETWORKS {
            assert_eq!(Network::from_name(n.name()), Some(n));
            assert_eq!(Network::from_magic(n.magic()), Some(n));
        }
    }

    #[test]
    fn genesis_internal_order_is_reversed_display() {
        let g = Network::Main.genesis_hash();
        assert_eq!(g[31], 0x00);
        assert_eq!(g[0], 0x6f);
    }
}
