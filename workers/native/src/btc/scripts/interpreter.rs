//! One transaction's inputs through Bitcoin Core's script interpreter (`cpp/core_script.cpp`,
//! built by build.rs against the Core 26.0 sources of the `bitcoinconsensus` crate, whose
//! library holds the interpreter and libsecp256k1). The transaction is deserialized and its
//! signature-hash midstates precomputed once, then every input is verified in order.

use std::ffi::{c_char, c_int, c_uint, CStr};

// The crate is linked for the library its build compiles (VerifyScript and libsecp256k1),
// which `rechain_core_verify_tx` calls; none of its Rust API is used.
extern crate bitcoinconsensus as _;

extern "C" {
    #[allow(clippy::too_many_arguments)]
    fn rechain_core_verify_tx(
        tx: *const u8,
        tx_len: usize,
        amounts: *const i64,
        scripts: *const *const u8,
        script_lens: *const usize,
        n_spent: usize,
        flags: c_uint,
        failed_input: *mut u32,
        error: *mut c_char,
        error_cap: usize,
    ) -> c_int;
}

/// The output an input spends, as the interpreter needs it.
#[derive(Clone, Copy, Debug)]
pub struct Spent<'a> {
    pub amount: u64,
    pub script_pubkey: &'a [u8],
}

/// What Core's interpreter made of a transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxVerdict {
    Valid,
    /// Input `input` failed; `error` is Core's `ScriptErrorString`.
    ScriptFailed {
        input: u32,
        error: String,
    },
    /// Core's deserializer refused the bytes (its message).
    Unreadable(String),
    /// Bytes were left after the transaction.
    Trailing,
    /// The spent outputs given do not number the inputs.
    SpentMismatch,
}

/// Verifies every input of the serialized transaction `tx` (witness form where it has one)
/// against `spent` (one per input, in order) with the interpreter flags `flags`; stops at the
/// first input that fails.
pub fn verify_tx(tx: &[u8], spent: &[Spent], flags: u32) -> TxVerdict {
    let amounts: Vec<i64> = spent.iter().map(|s| s.amount as i64).collect();
    let scripts: Vec<*const u8> = spent.iter().map(|s| s.script_pubkey.as_ptr()).collect();
    let lens: Vec<usize> = spent.iter().map(|s| s.script_pubkey.len()).collect();
    let mut failed = 0u32;
    let mut error = [0 as c_char; 256];
    // SAFETY: every pointer is valid for the length passed beside it for the whole call, and
    // the callee writes at most `error.len()` bytes, NUL included.
    let code = unsafe {
        rechain_core_verify_tx(
            tx.as_ptr(),
            tx.len(),
            amounts.as_ptr(),
            scripts.as_ptr(),
            lens.as_ptr(),
            spent.len(),
            flags,
            &mut failed,
            error.as_mut_ptr(),
            error.len(),
        )
    };
    // SAFETY: the callee NUL-terminates what it writes; untouched, the buffer is all NULs.
    let text = || {
        unsafe { CStr::from_ptr(error.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    };
    match code {
        0 => TxVerdict::Valid,
        1 => TxVerdict::ScriptFailed {
            input: failed,
            error: text(),
        },
        2 => TxVerdict::Unreadable(text()),
        3 => TxVerdict::Trailing,
        _ => TxVerdict::SpentMismatch,
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::gen_keys::{spend_of_each_kind, KeyRing};
    use super::super::flags::{VERIFY_P2SH, VERIFY_TAPROOT, VERIFY_WITNESS};
    use super::*;

    const FLAGS: u32 = VERIFY_P2SH | VERIFY_WITNESS | VERIFY_TAPROOT;

    /// A spend of one coin of each kind the generator's wallet signs (P2PKH, P2WPKH, P2TR),
    /// with the scripts and amounts of the coins it spends.
    fn spend(ring: &KeyRing, bad_first: bool) -> (Vec<u8>, Vec<(u64, Vec<u8>)>) {
        let (signed, inputs) = spend_of_each_kind(ring, bad_first);
        let spent = inputs
            .iter()
            .map(|o| (o.value, ring.script_pubkey(o.kind, o.key)))
            .collect();
        (signed.bytes, spent)
    }

    fn as_spent(coins: &[(u64, Vec<u8>)]) -> Vec<Spent<'_>> {
        coins
            .iter()
            .map(|(amount, script)| Spent {
                amount: *amount,
                script_pubkey: script,
            })
            .collect()
    }

    #[test]
    fn cores_interpreter_accepts_the_generators_signatures() {
        let ring = KeyRing::new(42);
        let (tx, coins) = spend(&ring, false);
        assert_eq!(verify_tx(&tx, &as_spent(&coins), FLAGS), TxVerdict::Valid);
        // The amounts are signed (BIP143, BIP341): another amount fails the input that signs it.
        let mut other = coins.clone();
        other[1].0 += 1;
        assert!(matches!(
            verify_tx(&tx, &as_spent(&other), FLAGS),
            TxVerdict::ScriptFailed { input: 1, .. }
        ));
    }

    #[test]
    fn a_wrong_signature_fails_with_cores_error() {
        let (tx, coins) = spend(&KeyRing::new(42), true);
        match verify_tx(&tx, &as_spent(&coins), FLAGS) {
            TxVerdict::ScriptFailed { input: 0, error } => {
                assert_eq!(
                    error,
                    "Script evaluated without error but finished with a false/empty top stack element"
                )
            }
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn bad_bytes_are_verdicts() {
        let (tx, coins) = spend(&KeyRing::new(1), false);
        let spent = as_spent(&coins);
        assert_eq!(verify_tx(&tx, &spent[..2], FLAGS), TxVerdict::SpentMismatch);
        assert!(matches!(
            verify_tx(&tx[..50], &spent, FLAGS),
            TxVerdict::Unreadable(_)
        ));
        assert!(matches!(
            verify_tx(&[], &[], FLAGS),
            TxVerdict::Unreadable(_)
        ));
        let mut long = tx.clone();
        long.push(0);
        assert_eq!(verify_tx(&long, &spent, FLAGS), TxVerdict::Trailing);
    }
}
