//! The script verification flags Core applies to a block (`GetBlockScriptFlags` in Core's
//! validation.cpp): P2SH, WITNESS and TAPROOT on every block but the network's exception
//! blocks, then DERSIG, CHECKLOCKTIMEVERIFY, CHECKSEQUENCEVERIFY and NULLDUMMY from the heights
//! of BIP66, BIP65, BIP112 and segwit (Core's buried deployments, `kernel/chainparams.cpp`).

use super::super::network::Network;

pub const VERIFY_NONE: u32 = 0;
pub const VERIFY_P2SH: u32 = 1 << 0;
pub const VERIFY_DERSIG: u32 = 1 << 2;
pub const VERIFY_NULLDUMMY: u32 = 1 << 4;
pub const VERIFY_CHECKLOCKTIMEVERIFY: u32 = 1 << 9;
pub const VERIFY_CHECKSEQUENCEVERIFY: u32 = 1 << 10;
pub const VERIFY_WITNESS: u32 = 1 << 11;
pub const VERIFY_TAPROOT: u32 = 1 << 17;

/// Every flag of Core's interpreter by the name its test vectors use (`script/interpreter.h`):
/// the consensus flags above and the policy ones the vectors also exercise.
pub const FLAG_NAMES: [(&str, u32); 21] = [
    ("P2SH", VERIFY_P2SH),
    ("STRICTENC", 1 << 1),
    ("DERSIG", VERIFY_DERSIG),
    ("LOW_S", 1 << 3),
    ("NULLDUMMY", VERIFY_NULLDUMMY),
    ("SIGPUSHONLY", 1 << 5),
    ("MINIMALDATA", 1 << 6),
    ("DISCOURAGE_UPGRADABLE_NOPS", 1 << 7),
    ("CLEANSTACK", 1 << 8),
    ("CHECKLOCKTIMEVERIFY", VERIFY_CHECKLOCKTIMEVERIFY),
    ("CHECKSEQUENCEVERIFY", VERIFY_CHECKSEQUENCEVERIFY),
    ("WITNESS", VERIFY_WITNESS),
    ("DISCOURAGE_UPGRADABLE_WITNESS_PROGRAM", 1 << 12),
    ("MINIMALIF", 1 << 13),
    ("NULLFAIL", 1 << 14),
    ("WITNESS_PUBKEYTYPE", 1 << 15),
    ("CONST_SCRIPTCODE", 1 << 16),
    ("TAPROOT", VERIFY_TAPROOT),
    ("DISCOURAGE_UPGRADABLE_TAPROOT_VERSION", 1 << 18),
    ("DISCOURAGE_OP_SUCCESS", 1 << 19),
    ("DISCOURAGE_UPGRADABLE_PUBKEYTYPE", 1 << 20),
];

/// Activation heights of the buried deployments that add script flags.
struct Heights {
    dersig: u32,
    cltv: u32,
    csv: u32,
    segwit: u32,
}

fn heights(network: Network) -> Heights {
    match network {
        Network::Main => Heights {
            dersig: network.bip66_height(),
            cltv: network.bip65_height(),
            csv: network.csv_height(),
            segwit: 481_824,
        },
        Network::Testnet3 => Heights {
            dersig: network.bip66_height(),
            cltv: network.bip65_height(),
            csv: network.csv_height(),
            segwit: 834_624,
        },
        Network::Testnet4 | Network::Signet => Heights {
            dersig: network.bip66_height(),
            cltv: network.bip65_height(),
            csv: network.csv_height(),
            segwit: 1,
        },
        Network::Regtest => Heights {
            dersig: network.bip66_height(),
            cltv: network.bip65_height(),
            csv: network.csv_height(),
            segwit: 0,
        },
    }
}

/// Blocks that broke a rule before it was enforced (display hex) and the flags Core gives them
/// instead of P2SH | WITNESS | TAPROOT.
fn exceptions(network: Network) -> &'static [(&'static str, u32)] {
    match network {
        Network::Main => &[
            // BIP16 exception
            (
                "00000000000002dc756eebf4f49723ed8d30cc28a5f108eb94b1ba88ac4f9c22",
                VERIFY_NONE,
            ),
            // Taproot exception
            (
                "0000000000000000000f14c35b2d841e986ab5441de8c585d5ffe55ea1e395ad",
                VERIFY_P2SH | VERIFY_WITNESS,
            ),
        ],
        Network::Testnet3 => &[(
            // BIP16 exception
            "00000000dd30457c001f4095d208cc1296b0eed002427aa599874af7a432b105",
            VERIFY_NONE,
        )],
        _ => &[],
    }
}

fn display_hex(internal: &[u8; 32]) -> String {
    internal.iter().rev().map(|b| format!("{b:02x}")).collect()
}

/// The flags Core verifies the scripts of block `hash` (internal byte order) at `height` with.
pub fn block_script_flags(network: Network, height: u32, hash: &[u8; 32]) -> u32 {
    let mut flags = VERIFY_P2SH | VERIFY_WITNESS | VERIFY_TAPROOT;
    let listed = exceptions(network);
    if !listed.is_empty() {
        let shown = display_hex(hash);
        if let Some(&(_, f)) = listed.iter().find(|(h, _)| *h == shown) {
            flags = f;
        }
    }
    let at = heights(network);
    if height >= at.dersig {
        flags |= VERIFY_DERSIG;
    }
    if height >= at.cltv {
        flags |= VERIFY_CHECKLOCKTIMEVERIFY;
    }
    if height >= at.csv {
        flags |= VERIFY_CHECKSEQUENCEVERIFY;
    }
    if height >= at.segwit {
        flags |= VERIFY_NULLDUMMY;
    }
    flags
}

#[cfg(test)]
mod tests {
    use super::*;

    fn internal(display: &str) -> [u8; 32] {
        let mut h = [0u8; 32];
        for i in 0..32 {
            h[31 - i] = u8::from_str_radix(&display[2 * i..2 * i + 2], 16).unwrap();
        }
        h
    }

    const BASE: u32 = VERIFY_P2SH | VERIFY_WITNESS | VERIFY_TAPROOT;

    #[test]
    fn mainnet_adds_each_flag_at_its_height() {
        let other = [7u8; 32];
        let f = |h| block_script_flags(Network::Main, h, &other);
        assert_eq!(f(0), BASE);
        assert_eq!(f(363_724), BASE);
        assert_eq!(f(363_725), BASE | VERIFY_DERSIG);
        assert_eq!(
            f(388_381),
            BASE | VERIFY_DERSIG | VERIFY_CHECKLOCKTIMEVERIFY
        );
        let csv = BASE | VERIFY_DERSIG | VERIFY_CHECKLOCKTIMEVERIFY | VERIFY_CHECKSEQUENCEVERIFY;
        assert_eq!(f(419_328), csv);
        assert_eq!(f(481_823), csv);
        assert_eq!(f(481_824), csv | VERIFY_NULLDUMMY);
    }

    #[test]
    fn exception_blocks_lose_p2sh_or_taproot() {
        let bip16 = internal("00000000000002dc756eebf4f49723ed8d30cc28a5f108eb94b1ba88ac4f9c22");
        assert_eq!(
            block_script_flags(Network::Main, 170_060, &bip16),
            VERIFY_NONE
        );
        // Only on its own network.
        assert_eq!(block_script_flags(Network::Testnet3, 170_060, &bip16), BASE);
        let taproot = internal("0000000000000000000f14c35b2d841e986ab5441de8c585d5ffe55ea1e395ad");
        let all = VERIFY_DERSIG
            | VERIFY_CHECKLOCKTIMEVERIFY
            | VERIFY_CHECKSEQUENCEVERIFY
            | VERIFY_NULLDUMMY;
        assert_eq!(
            block_script_flags(Network::Main, 692_261, &taproot),
            VERIFY_P2SH | VERIFY_WITNESS | all
        );
        let testnet = internal("00000000dd30457c001f4095d208cc1296b0eed002427aa599874af7a432b105");
        assert_eq!(
            block_script_flags(Network::Testnet3, 514, &testnet),
            VERIFY_NONE
        );
    }

    #[test]
    fn regtest_has_segwit_from_genesis_and_the_rest_from_one() {
        let h = [1u8; 32];
        assert_eq!(
            block_script_flags(Network::Regtest, 0, &h),
            BASE | VERIFY_NULLDUMMY
        );
        let all = BASE
            | VERIFY_DERSIG
            | VERIFY_CHECKLOCKTIMEVERIFY
            | VERIFY_CHECKSEQUENCEVERIFY
            | VERIFY_NULLDUMMY;
        for n in [Network::Regtest, Network::Signet, Network::Testnet4] {
            assert_eq!(block_script_flags(n, 1, &h), all);
        }
        assert_eq!(block_script_flags(Network::Signet, 0, &h), BASE);
    }
}
