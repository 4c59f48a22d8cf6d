//! The test-chain generator's keys and signatures (gen.rs): a ring of secp256k1 keys derived from
//! the seed, the three output kinds its wallet owns (P2PKH, P2WPKH, P2TR key path) and real
//! signatures for their spends (legacy, BIP143 and BIP341 sighashes through rust-bitcoin; RFC 6979
//! ECDSA and BIP340 Schnorr without aux randomness, so a seed gives the same bytes every time).
//! Bitcoin Core validates generated chains with every script check on.

use bitcoin::consensus::encode::serialize;
use bitcoin::hashes::{hash160, sha256, Hash};
use bitcoin::key::TapTweak;
use bitcoin::secp256k1::{All, Keypair, Message, Secp256k1, SecretKey};
use bitcoin::sighash::{EcdsaSighashType, Prevouts, SighashCache, TapSighashType};
use bitcoin::{
    absolute, transaction, Amount, OutPoint, Script, ScriptBuf, Sequence, Transaction, TxIn, TxOut,
    Txid, Witness,
};

/// Keys in the ring; outputs pick one at random.
pub const KEY_COUNT: usize = 16;

/// What kind of output the wallet owns, and so how it signs a spend of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    P2pkh,
    P2wpkh,
    P2tr,
}

pub const KINDS: [Kind; 3] = [Kind::P2pkh, Kind::P2wpkh, Kind::P2tr];

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
    pubkey: [u8; 33],
    keyhash: [u8; 20],
    /// The BIP86 key-path keypair (internal key tweaked with no script tree) and its x-only key.
    tweaked: Keypair,
    output_key: [u8; 32],
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

impl KeyRing {
    /// `KEY_COUNT` keys, key i the SHA-256 of a tag, the seed and i (the next counter when a
    /// digest is not a valid scalar).
    pub fn new(seed: u64) -> Self {
        let secp = Secp256k1::new();
        let mut keys = Vec::with_capacity(KEY_COUNT);
        let mut counter = 0u32;
        while keys.len() < KEY_COUNT {
            let mut engine_input = b"rechain/gen/btc-key".to_vec();
            engine_input.extend_from_slice(&seed.to_le_bytes());
            engine_input.extend_from_slice(&counter.to_le_bytes());
            counter += 1;
            let digest = sha256::Hash::hash(&engine_input).to_byte_array();
            let Ok(secret) = SecretKey::from_slice(&digest) else {
                continue;
            };
            let pubkey = secret.public_key(&secp).serialize();
            let keypair = Keypair::from_secret_key(&secp, &secret);
            let tweaked = keypair.tap_tweak(&secp, None).to_keypair();
            keys.push(Key {
                secret,
                pubkey,
                keyhash: hash160::Hash::hash(&pubkey).to_byte_array(),
                output_key: tweaked.x_only_public_key().0.serialize(),
                tweaked,
            });
        }
        KeyRing { secp, keys }
    }

    /// The output script paying `kind` to key number `key`.
    pub fn script_pubkey(&self, kind: Kind, key: u8) -> Vec<u8> {
        let k = &self.keys[key as usize % KEY_COUNT];
        match kind {
            Kind::P2pkh => [&[0x76, 0xa9, 0x14][..], &k.keyhash, &[0x88, 0xac]].concat(),
            Kind::P2wpkh => [&[0x00, 0x14][..], &k.keyhash].concat(),
            Kind::P2tr => [&[0x51, 0x20][..], &k.output_key].concat(),
        }
    }

    /// A version-2, lock-time-0 transaction spending `inputs` (sequence 0xfffffffd) into
    /// `outputs` (value, script), every input signed with SIGHASH_ALL (taproot: DEFAULT). With
    /// `bad_first`, the first input's signature is a valid encoding over the wrong digest (test
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
                let spk: &Script = &prev.script_pubkey;
                match c.kind {
                    Kind::P2pkh => cache
                        .legacy_signature_hash(i, spk, EcdsaSighashType::All.to_u32())
                        .expect("input index in range")
                        .to_byte_array(),
                    Kind::P2wpkh => cache
                        .p2wpkh_signature_hash(i, spk, prev.value, EcdsaSighashType::All)
                        .expect("a P2WPKH script")
                        .to_byte_array(),
                    Kind::P2tr => cache
                        .taproot_key_spend_signature_hash(
                            i,
                            &Prevouts::All(&prevouts[..]),
                            TapSighashType::Default,
                        )
                        .expect("input index in range")
                        .to_byte_array(),
                }
            })
            .collect();
        for (i, ((txin, c), mut digest)) in tx.input.iter_mut().zip(inputs).zip(digests).enumerate()
        {
            let k = &self.keys[c.key as usize % KEY_COUNT];
            if bad_first && i == 0 {
                digest[0] ^= 1;
            }
            let msg = Message::from_digest(digest);
            match c.kind {
                Kind::P2pkh | Kind::P2wpkh => {
                    let mut sig = self
                        .secp
                        .sign_ecdsa(&msg, &k.secret)
                        .serialize_der()
                        .to_vec();
                    sig.push(EcdsaSighashType::All as u8);
                    if c.kind == Kind::P2pkh {
                        let mut script = Vec::with_capacity(sig.len() + 35);
                        script.push(sig.len() as u8);
                        script.extend_from_slice(&sig);
                        script.push(33);
                        script.extend_from_slice(&k.pubkey);
                        txin.script_sig = ScriptBuf::from_bytes(script);
                    } else {
                        txin.witness = Witness::from_slice(&[&sig[..], &k.pubkey[..]]);
                    }
                }
                Kind::P2tr => {
                    let sig = self.secp.sign_schnorr_no_aux_rand(&msg, &k.tweaked);
                    txin.witness = Witness::from_slice(&[sig.serialize()]);
                }
            }
        }
        Signed {
            bytes: serialize(&tx),
            txid: tx.compute_txid().to_byte_array(),
            wtxid: tx.compute_wtxid().to_byte_array(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::consensus::encode::deserialize;

    fn spend_of_each_kind(ring: &KeyRing) -> Signed {
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
        ring.sign(&inputs, &outputs, false)
    }

    #[test]
    fn same_seed_same_bytes_other_seed_other_keys() {
        let a = spend_of_each_kind(&KeyRing::new(7));
        let b = spend_of_each_kind(&KeyRing::new(7));
        let c = spend_of_each_kind(&KeyRing::new(8));
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
        let signed = spend_of_each_kind(&ring);
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
