//! The test-chain generator's keys and signatures (gen.rs): a ring of secp256k1 keys derived from
//! the seed, the output kinds its wallet owns and real signatures for their spends (legacy,
//! BIP143 and BIP341 sighashes through rust-bitcoin; RFC 6979 ECDSA and BIP340 Schnorr without
//! aux randomness, so a seed gives the same bytes every time). By default the wallet owns
//! P2PKH, P2WPKH and P2TR key-path outputs; `ALL_KINDS` adds P2PK, bare multisig, P2SH-wrapped
//! P2WPKH, P2WSH multisig and P2TR script path. Bitcoin Core validates generated chains with
//! every script check on.

use bitcoin::consensus::encode::serialize;
use bitcoin::hashes::{hash160, sha256, Hash};
use bitcoin::key::{TapTweak, UntweakedPublicKey};
use bitcoin::secp256k1::{All, Keypair, Message, Secp256k1, SecretKey};
use bitcoin::sighash::{EcdsaSighashType, Prevouts, SighashCache, TapSighashType};
use bitcoin::taproot::{LeafVersion, TapLeafHash, TapNodeHash};
use bitcoin::{
    absolute, transaction, Amount, OutPoint, Script, ScriptBuf, Sequence, Transaction, TxIn, TxOut,
    Txid, Witness,
};

/// Keys in the ring; outputs pick one at random.
pub const KEY_COUNT: usize = 16;

/// What kind of output the wallet owns, and so how it signs a spend of it. Multisig kinds use
/// the owning key and the next ones in the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    P2pkh,
    P2wpkh,
    /// Taproot key path (BIP86: no script tree).
    P2tr,
    /// `<pubkey> OP_CHECKSIG`.
    P2pk,
    /// Bare 2-of-3 `OP_CHECKMULTISIG`.
    Multisig,
    /// P2WPKH inside P2SH (BIP141's nested form).
    P2shP2wpkh,
    /// 2-of-2 multisig witness script.
    P2wsh,
    /// Taproot script path: one leaf `<x-only key> OP_CHECKSIG`.
    P2trScript,
}

/// The kinds a default generated wallet owns (the bytes of default chains depend on this list).
pub const KINDS: [Kind; 3] = [Kind::P2pkh, Kind::P2wpkh, Kind::P2tr];

/// Every kind the generator signs (`--script-kinds all`).
pub const ALL_KINDS: [Kind; 8] = [
    Kind::P2pkh,
    Kind::P2wpkh,
    Kind::P2tr,
    Kind::P2pk,
    Kind::Multisig,
    Kind::P2shP2wpkh,
    Kind::P2wsh,
    Kind::P2trScript,
];

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::P2pkh => "p2pkh",
            Kind::P2wpkh => "p2wpkh",
            Kind::P2tr => "p2tr",
            Kind::P2pk => "p2pk",
            Kind::Multisig => "multisig",
            Kind::P2shP2wpkh => "p2sh-p2wpkh",
            Kind::P2wsh => "p2wsh",
            Kind::P2trScript => "p2tr-script",
        }
    }

    pub fn from_name(name: &str) -> Option<Kind> {
        ALL_KINDS.into_iter().find(|k| k.name() == name)
    }
}

/// An output the wallet can spend: where it is, whose key, what kind, how much.
#[derive(Clone, Copy, Debug)]
pub struct Owned {
    pub txid: [u8; 32],
    pub vout: u32,
    pub value: u64,
    pub kind: Kind,
    pub key: u8,
}

struct Key {
    secret: SecretKey,
    /// Untweaked, for tapscript signatures.
    keypair: Keypair,
    pubkey: [u8; 33],
    keyhash: [u8; 20],
    /// The BIP86 key-path keypair (internal key tweaked with no script tree) and its x-only key.
    tweaked: Keypair,
    output_key: [u8; 32],
    /// Hash160 of the P2WPKH program the P2SH-wrapped output commits to.
    nested_hash: [u8; 20],
    /// The 2-of-2 witness script (this key and the next) and its SHA-256.
    wsh_script: Vec<u8>,
    wsh_hash: [u8; 32],
    /// The script-path output: the leaf (the next key's x-only key, OP_CHECKSIG), its hash, the
    /// output key committing to it, and the control block.
    leaf: Vec<u8>,
    leaf_hash: TapLeafHash,
    script_output_key: [u8; 32],
    control_block: [u8; 33],
}

pub struct KeyRing {
    secp: Secp256k1<All>,
    keys: Vec<Key>,
}

/// A signed transaction: serialization (BIP144 when any input has a witness), txid, wtxid.
pub struct Signed {
    pub bytes: Vec<u8>,
    pub txid: [u8; 32],
    pub wtxid: [u8; 32],
}

fn push(script: &mut Vec<u8>, data: &[u8]) {
    debug_assert!(data.len() < 0x4c);
    script.push(data.len() as u8);
    script.extend_from_slice(data);
}

impl KeyRing {
    /// `KEY_COUNT` keys, key i the SHA-256 of a tag, the seed and i (the next counter when a
    /// digest is not a valid scalar).
    pub fn new(seed: u64) -> Self {
        let secp = Secp256k1::new();
        let mut secrets = Vec::with_capacity(KEY_COUNT);
        let mut counter = 0u32;
        while secrets.len() < KEY_COUNT {
            let mut engine_input = b"rechain/gen/btc-key".to_vec();
            engine_input.extend_from_slice(&seed.to_le_bytes());
            engine_input.extend_from_slice(&counter.to_le_bytes());
            counter += 1;
            let digest = sha256::Hash::hash(&engine_input).to_byte_array();
            if let Ok(secret) = SecretKey::from_slice(&digest) {
                secrets.push(secret);
            }
        }
        let pubkeys: Vec<[u8; 33]> = secrets
            .iter()
            .map(|s| s.public_key(&secp).serialize())
            .collect();
        let keys = secrets
            .iter()
            .enumerate()
            .map(|(i, &secret)| {
                let pubkey = pubkeys[i];
                let next = &pubkeys[(i + 1) % KEY_COUNT];
                let keypair = Keypair::from_secret_key(&secp, &secret);
                let tweaked = keypair.tap_tweak(&secp, None).to_keypair();
                let keyhash = hash160::Hash::hash(&pubkey).to_byte_array();
                let nested = [&[0x00, 0x14][..], &keyhash].concat();
                let mut wsh_script = vec![0x52];
                push(&mut wsh_script, &pubkey);
                push(&mut wsh_script, next);
                wsh_script.extend_from_slice(&[0x52, 0xae]);
                let mut leaf = Vec::with_capacity(34);
                push(&mut leaf, &next[1..]);
                leaf.push(0xac);
                let leaf_hash =
                    TapLeafHash::from_script(Script::from_bytes(&leaf), LeafVersion::TapScript);
                let internal: UntweakedPublicKey = keypair.x_only_public_key().0;
                let (script_key, parity) =
                    internal.tap_tweak(&secp, Some(TapNodeHash::from(leaf_hash)));
                let mut control_block = [0u8; 33];
                control_block[0] = LeafVersion::TapScript.to_consensus() | parity.to_u8();
                control_block[1..].copy_from_slice(&internal.serialize());
                Key {
                    secret,
                    keypair,
                    pubkey,
                    keyhash,
                    output_key: tweaked.x_only_public_key().0.serialize(),
                    tweaked,
                    nested_hash: hash160::Hash::hash(&nested).to_byte_array(),
                    wsh_hash: sha256::Hash::hash(&wsh_script).to_byte_array(),
                    wsh_script,
                    leaf,
                    leaf_hash,
                    script_output_key: script_key.to_x_only_public_key().serialize(),
                    control_block,
                }
            })
            .collect();
        KeyRing { secp, keys }
    }

    fn key(&self, key: u8, offset: usize) -> &Key {
        &self.keys[(key as usize + offset) % KEY_COUNT]
    }

    /// The output script paying `kind` to key number `key`.
    pub fn script_pubkey(&self, kind: Kind, key: u8) -> Vec<u8> {
        let k = self.key(key, 0);
        match kind {
            Kind::P2pkh => [&[0x76, 0xa9, 0x14][..], &k.keyhash, &[0x88, 0xac]].concat(),
            Kind::P2wpkh => [&[0x00, 0x14][..], &k.keyhash].concat(),
            Kind::P2tr => [&[0x51, 0x20][..], &k.output_key].concat(),
            Kind::P2pk => [&[0x21][..], &k.pubkey, &[0xac]].concat(),
            Kind::Multisig => {
                let mut s = vec![0x52];
                for i in 0..3 {
                    push(&mut s, &self.key(key, i).pubkey);
                }
                s.extend_from_slice(&[0x53, 0xae]);
                s
            }
            Kind::P2shP2wpkh => [&[0xa9, 0x14][..], &k.nested_hash, &[0x87]].concat(),
            Kind::P2wsh => [&[0x00, 0x20][..], &k.wsh_hash].concat(),
            Kind::P2trScript => [&[0x51, 0x20][..], &k.script_output_key].concat(),
        }
    }

    /// A version-2, lock-time-0 transaction spending `inputs` (sequence 0xfffffffd) into
    /// `outputs` (value, script), every input signed with SIGHASH_ALL (taproot: DEFAULT). With
    /// `bad_first`, the first input's signatures are valid encodings over the wrong digest (test
    /// damage a script check rejects).
    pub fn sign(&self, inputs: &[Owned], outputs: &[(u64, Vec<u8>)], bad_first: bool) -> Signed {
        let mut tx = Transaction {
            version: transaction::Version::TWO,
            lock_time: absolute::LockTime::ZERO,
            input: inputs
                .iter()
                .map(|c| TxIn {
                    previous_output: OutPoint {
                        txid: Txid::from_byte_array(c.txid),
                        vout: c.vout,
                    },
                    script_sig: ScriptBuf::new(),
                    sequence: Sequence::ENABLE_RBF_NO_LOCKTIME,
                    witness: Witness::new(),
                })
                .collect(),
            output: outputs
                .iter()
                .map(|(v, s)| TxOut {
                    value: Amount::from_sat(*v),
                    script_pubkey: ScriptBuf::from_bytes(s.clone()),
                })
                .collect(),
        };
        let prevouts: Vec<TxOut> = inputs
            .iter()
            .map(|c| TxOut {
                value: Amount::from_sat(c.value),
                script_pubkey: ScriptBuf::from_bytes(self.script_pubkey(c.kind, c.key)),
            })
            .collect();
        // Every sighash first (none of them covers another input's scriptSig or witness).
        let mut cache = SighashCache::new(&tx);
        let digests: Vec<[u8; 32]> = inputs
            .iter()
            .zip(&prevouts)
            .enumerate()
            .map(|(i, (c, prev))| {
                let k = self.key(c.key, 0);
                let spk: &Script = &prev.script_pubkey;
                let all = EcdsaSighashType::All;
                match c.kind {
                    Kind::P2pkh | Kind::P2pk | Kind::Multisig => cache
                        .legacy_signature_hash(i, spk, all.to_u32())
                        .expect("input index in range")
                        .to_byte_array(),
                    Kind::P2wpkh => cache
                        .p2wpkh_signature_hash(i, spk, prev.value, all)
                        .expect("a P2WPKH script")
                        .to_byte_array(),
                    Kind::P2shP2wpkh => {
                        let program = [&[0x00, 0x14][..], &k.keyhash].concat();
                        cache
                            .p2wpkh_signature_hash(i, Script::from_bytes(&program), prev.value, all)
                            .expect("a P2WPKH program")
                            .to_byte_array()
                    }
                    Kind::P2wsh => cache
                        .p2wsh_signature_hash(i, Script::from_bytes(&k.wsh_script), prev.value, all)
                        .expect("input index in range")
                        .to_byte_array(),
                    Kind::P2tr => cache
                        .taproot_key_spend_signature_hash(
                            i,
                            &Prevouts::All(&prevouts[..]),
                            TapSighashType::Default,
                        )
                        .expect("input index in range")
                        .to_byte_array(),
                    Kind::P2trScript => cache
                        .taproot_script_spend_signature_hash(
                            i,
                            &Prevouts::All(&prevouts[..]),
                            k.leaf_hash,
                            TapSighashType::Default,
                        )
                        .expect("input index in range")
                        .to_byte_array(),
                }
            })
            .collect();
        for (i, ((txin, c), mut digest)) in tx.input.iter_mut().zip(inputs).zip(digests).enumerate()
        {
            if bad_first && i == 0 {
                digest[0] ^= 1;
            }
            let msg = Message::from_digest(digest);
            let ecdsa = |offset: usize| {
                let mut sig = self
                    .secp
                    .sign_ecdsa(&msg, &self.key(c.key, offset).secret)
                    .serialize_der()
                    .to_vec();
                sig.push(EcdsaSighashType::All as u8);
                sig
            };
            let k = self.key(c.key, 0);
            let mut script_sig = Vec::new();
            match c.kind {
                Kind::P2pkh => {
                    push(&mut script_sig, &ecdsa(0));
                    push(&mut script_sig, &k.pubkey);
                }
                Kind::P2pk => push(&mut script_sig, &ecdsa(0)),
                Kind::Multisig => {
                    // OP_0: CHECKMULTISIG's extra pop; signatures in the keys' order.
                    script_sig.push(0x00);
                    push(&mut script_sig, &ecdsa(0));
                    push(&mut script_sig, &ecdsa(1));
                }
                Kind::P2wpkh => txin.witness = Witness::from_slice(&[&ecdsa(0)[..], &k.pubkey[..]]),
                Kind::P2shP2wpkh => {
                    push(&mut script_sig, &[&[0x00, 0x14][..], &k.keyhash].concat());
                    txin.witness = Witness::from_slice(&[&ecdsa(0)[..], &k.pubkey[..]]);
                }
                Kind::P2wsh => {
                    txin.witness =
                        Witness::from_slice(&[&[][..], &ecdsa(0), &ecdsa(1), &k.wsh_script]);
                }
                Kind::P2tr => {
                    let sig = self.secp.sign_schnorr_no_aux_rand(&msg, &k.tweaked);
                    txin.witness = Witness::from_slice(&[sig.serialize()]);
                }
                Kind::P2trScript => {
                    let signer = &self.key(c.key, 1).keypair;
                    let sig = self.secp.sign_schnorr_no_aux_rand(&msg, signer).serialize();
                    txin.witness = Witness::from_slice(&[&sig[..], &k.leaf, &k.control_block]);
                }
            }
            txin.script_sig = ScriptBuf::from_bytes(script_sig);
        }
        Signed {
            bytes: serialize(&tx),
            txid: tx.compute_txid().to_byte_array(),
            wtxid: tx.compute_wtxid().to_byte_array(),
        }
    }
}

/// A spend of one coin of each kind the default wallet signs (`KINDS`), its first signature
/// wrong with `bad_first`, and the coins it spends: for the tests here and the interpreter's.
#[cfg(test)]
pub(crate) fn spend_of_each_kind(ring: &KeyRing, bad_first: bool) -> (Signed, Vec<Owned>) {
    let inputs: Vec<Owned> = KINDS
        .iter()
        .enumerate()
        .map(|(i, &kind)| Owned {
            txid: [i as u8 + 1; 32],
            vout: i as u32,
            value: 10_000 * (i as u64 + 1),
            kind,
            key: i as u8 * 5,
        })
        .collect();
    let outputs = vec![(55_000, ring.script_pubkey(Kind::P2tr, 3))];
    (ring.sign(&inputs, &outputs, bad_first), inputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::consensus::encode::deserialize;

    /// A spend of every kind passes Bitcoin Core's interpreter with every consensus and policy
    /// flag on (the generated chains are standard as well as valid); a wrong digest on the first
    /// input fails it there, whatever the kind.
    #[test]
    fn every_kind_passes_cores_interpreter_and_a_bad_signature_fails_it() {
        use crate::btc::scripts::flags::FLAG_NAMES;
        use crate::btc::scripts::interpreter::{verify_tx, Spent, TxVerdict};
        let ring = KeyRing::new(11);
        let every_flag = FLAG_NAMES.iter().fold(0, |a, (_, f)| a | f);
        for (n, &first) in ALL_KINDS.iter().enumerate() {
            // Each kind first once, with every other kind after it.
            let kinds: Vec<Kind> = ALL_KINDS.iter().cycle().skip(n).take(8).copied().collect();
            assert_eq!(kinds[0], first);
            let inputs: Vec<Owned> = kinds
                .iter()
                .enumerate()
                .map(|(i, &kind)| Owned {
                    txid: [i as u8 + 9; 32],
                    vout: i as u32,
                    value: 20_000 + i as u64,
                    kind,
                    key: (i * 3 + n) as u8,
                })
                .collect();
            let scripts: Vec<Vec<u8>> = inputs
                .iter()
                .map(|c| ring.script_pubkey(c.kind, c.key))
                .collect();
            let spent: Vec<Spent> = inputs
                .iter()
                .zip(&scripts)
                .map(|(c, s)| Spent {
                    amount: c.value,
                    script_pubkey: s,
                })
                .collect();
            let outputs = vec![(100_000, ring.script_pubkey(first, 1))];
            let good = ring.sign(&inputs, &outputs, false);
            assert_eq!(
                verify_tx(&good.bytes, &spent, every_flag),
                TxVerdict::Valid,
                "{first:?}"
            );
            let bad = ring.sign(&inputs, &outputs, true);
            match verify_tx(&bad.bytes, &spent, every_flag) {
                TxVerdict::ScriptFailed { input: 0, .. } => {}
                other => panic!("{first:?}: a wrong signature gave {other:?}"),
            }
        }
    }

    #[test]
    fn kind_names_round_trip() {
        for k in ALL_KINDS {
            assert_eq!(Kind::from_name(k.name()), Some(k));
        }
        assert_eq!(Kind::from_name("p2sh"), None);
    }

    #[test]
    fn same_seed_same_bytes_other_seed_other_keys() {
        let a = spend_of_each_kind(&KeyRing::new(7), false).0;
        let b = spend_of_each_kind(&KeyRing::new(7), false).0;
        let c = spend_of_each_kind(&KeyRing::new(8), false).0;
        assert_eq!(a.bytes, b.bytes);
        assert_ne!(a.bytes, c.bytes);
        assert_ne!(a.txid, a.wtxid, "segwit inputs give a witness");
    }

    /// Each signature checks against its sighash and key with libsecp256k1's verifier, and the
    /// witness/scriptSig carry what the output's kind asks for.
    #[test]
    fn signatures_verify() {
        use bitcoin::secp256k1::{ecdsa, schnorr, PublicKey, XOnlyPublicKey};
        let ring = KeyRing::new(42);
        let signed = spend_of_each_kind(&ring, false).0;
        let tx: Transaction = deserialize(&signed.bytes).unwrap();
        assert_eq!(tx.compute_txid().to_byte_array(), signed.txid);
        let prevouts: Vec<TxOut> = (0..3)
            .map(|i| TxOut {
                value: Amount::from_sat(10_000 * (i as u64 + 1)),
                script_pubkey: ScriptBuf::from_bytes(ring.script_pubkey(KINDS[i], i as u8 * 5)),
            })
            .collect();
        let mut cache = SighashCache::new(&tx);
        let secp = Secp256k1::verification_only();
        // P2PKH: <sig> <pubkey> in the scriptSig.
        let ss = tx.input[0].script_sig.as_bytes();
        let sig_len = ss[0] as usize;
        let der = &ss[1..sig_len];
        assert_eq!(ss[sig_len], 0x01);
        let pk = PublicKey::from_slice(&ss[sig_len + 2..]).unwrap();
        let h = cache
            .legacy_signature_hash(0, &prevouts[0].script_pubkey, 1)
            .unwrap();
        secp.verify_ecdsa(
            &Message::from_digest(h.to_byte_array()),
            &ecdsa::Signature::from_der(der).unwrap(),
            &pk,
        )
        .unwrap();
        // P2WPKH: [sig, pubkey] in the witness.
        let w = &tx.input[1].witness;
        let h = cache
            .p2wpkh_signature_hash(
                1,
                &prevouts[1].script_pubkey,
                prevouts[1].value,
                EcdsaSighashType::All,
            )
            .unwrap();
        let sig = w.nth(0).unwrap();
        secp.verify_ecdsa(
            &Message::from_digest(h.to_byte_array()),
            &ecdsa::Signature::from_der(&sig[..sig.len() - 1]).unwrap(),
            &PublicKey::from_slice(w.nth(1).unwrap()).unwrap(),
        )
        .unwrap();
        // P2TR key path: one 64-byte signature against the output key itself.
        let w = &tx.input[2].witness;
        assert_eq!(w.len(), 1);
        let h = cache
            .taproot_key_spend_signature_hash(2, &Prevouts::All(&prevouts), TapSighashType::Default)
            .unwrap();
        let out_key =
            XOnlyPublicKey::from_slice(&prevouts[2].script_pubkey.as_bytes()[2..]).unwrap();
        secp.verify_schnorr(
            &schnorr::Signature::from_slice(w.nth(0).unwrap()).unwrap(),
            &Message::from_digest(h.to_byte_array()),
            &out_key,
        )
        .unwrap();
    }
}
