"""Bitcoin Core's own script test vectors (src/test/data: tx_valid.json, tx_invalid.json,
script_tests.json) through rechain's binding to Core's script interpreter
(``_native.core_verify_tx``), checked as Core's unit tests check them: transaction_tests.cpp's
tx_valid and tx_invalid cases and script_tests.cpp's script_json_test, flag loops included.

The vectors are those of the Core source the Core oracle's build vendors (libbitcoinkernel-sys);
the binding's interpreter is Core 26's (the bitcoinconsensus crate). Where the newer Core
reports a different error by design, a vector expecting the newer error gets Core 26's: those
are CORE26_DIVERGENCES, each with its reason, counted and held to exactly Core 26's error.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from bitcoin.core.script import OP_NOP, OP_NOP10, OP_RESERVED, OPCODE_NAMES, CScriptOp
from rechain.workers import _native

from tests.core_oracle import CORE_CACHE
from tests.test_btc_core_oracle import core_oracle

Spent = list[tuple[int, bytes]]
Verdict = tuple[str, int, str]

# ---------------------------------------------------------------------------------------------
# Core's test script notation: core_io.cpp's ParseScript.

# OpCodeParser takes the opcodes OP_NOP..MAX_OPCODE (OP_NOP10 in Core: OP_CHECKSIGADD is not
# parsable) and OP_RESERVED, under GetOpName's names, with and without "OP_". GetOpName names
# 0xb1 and 0xb2 only OP_CHECKLOCKTIMEVERIFY and OP_CHECKSEQUENCEVERIFY, so, as in Core, "NOP2"
# and "NOP3" are not script words (no vector uses them).
_CORE_OP_NAMES = {0xB1: "OP_CHECKLOCKTIMEVERIFY", 0xB2: "OP_CHECKSEQUENCEVERIFY"}


def _opcode_words() -> dict[str, int]:
    words: dict[str, int] = {}
    for op in [int(OP_RESERVED), *range(int(OP_NOP), int(OP_NOP10) + 1)]:
        name = _CORE_OP_NAMES.get(op) or OPCODE_NAMES[CScriptOp(op)]
        words[name] = op
        if name.startswith("OP_"):
            words[name[3:]] = op
    return words


OPCODE_WORDS = _opcode_words()
_HEX = set("0123456789abcdefABCDEF")


def script_num(n: int) -> bytes:
    """CScriptNum::serialize: little-endian magnitude, sign in the top bit of the last byte."""
    if n == 0:
        return b""
    out = bytearray()
    magnitude = abs(n)
    while magnitude:
        out.append(magnitude & 0xFF)
        magnitude >>= 8
    if out[-1] & 0x80:
        out.append(0x80 if n < 0 else 0x00)
    elif n < 0:
        out[-1] |= 0x80
    return bytes(out)


def push_data(data: bytes) -> bytes:
    """CScript << bytes: the shortest of a direct push, OP_PUSHDATA1, 2 or 4."""
    n = len(data)
    if n < 0x4C:
        return bytes([n]) + data
    if n <= 0xFF:
        return bytes([0x4C, n]) + data
    if n <= 0xFFFF:
        return b"\x4d" + n.to_bytes(2, "little") + data
    return b"\x4e" + n.to_bytes(4, "little") + data


def push_int(n: int) -> bytes:
    """CScript::push_int64: OP_1NEGATE, OP_0, OP_1..OP_16, else a CScriptNum push."""
    if n == -1 or 1 <= n <= 16:
        return bytes([n + 0x50])
    if n == 0:
        return b"\x00"
    return push_data(script_num(n))


def _is_digits(s: str) -> bool:
    return s != "" and all("0" <= c <= "9" for c in s)


def parse_script(text: str) -> bytes:
    """core_io.cpp's ParseScript: words split on space, tab and newline; a decimal number in
    -0xFFFFFFFF..0xFFFFFFFF is pushed as a number, 0x<hex> inserted raw, 'text' pushed as data,
    anything else an opcode name."""
    out = bytearray()
    for word in text.replace("\t", " ").replace("\n", " ").split(" "):
        if word == "":
            continue
        if _is_digits(word) or (word[0] == "-" and _is_digits(word[1:])):
            n = int(word)
            # ToIntegral<int64_t> fails on overflow; ParseScript then bounds the value.
            if not (-(2**63) <= n < 2**63) or not (-0xFFFFFFFF <= n <= 0xFFFFFFFF):
                raise ValueError(f"script parse error: number out of range: {word}")
            out += push_int(n)
        elif (
            word.startswith("0x") and len(word) > 2 and len(word) % 2 == 0 and set(word[2:]) <= _HEX
        ):
            out += bytes.fromhex(word[2:])
        elif len(word) >= 2 and word[0] == "'" and word[-1] == "'":
            out += push_data(word[1:-1].encode())
        elif word in OPCODE_WORDS:
            out.append(OPCODE_WORDS[word])
        else:
            raise ValueError(f"script parse error: unknown opcode {word!r}")
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# Flags: transaction_tests.cpp's ParseScriptFlags, TrimFlags, FillFlags, ExcludeIndividualFlags.


@dataclass(frozen=True)
class Flags:
    bits: dict[str, int]  # mapFlagNames (Core's ScriptFlagNamesToEnum), from the binding

    @property
    def all(self) -> int:
        """Every flag: Core's ~x sets undefined bits too, which no interpreter reads; the
        binding's flags are the 21 defined ones."""
        out = 0
        for bit in self.bits.values():
            out |= bit
        return out

    def inv(self, flags: int) -> int:
        return self.all & ~flags

    def parse(self, text: str) -> int:
        if text in ("", "NONE"):
            return 0
        out = 0
        for word in text.split(","):
            if word not in self.bits:
                raise ValueError(f"Bad test: unknown verification flag {word!r}")
            out |= self.bits[word]
        return out

    def valid_combination(self, flags: int) -> bool:
        """test/util/script.cpp's IsValidFlagCombination (VerifyScript asserts it)."""
        p2sh, witness = self.bits["P2SH"], self.bits["WITNESS"]
        if flags & self.bits["CLEANSTACK"] and (~flags & (p2sh | witness)):
            return False
        return not (flags & witness and ~flags & p2sh)

    def trim(self, flags: int) -> int:
        if not flags & self.bits["P2SH"]:
            flags &= ~self.bits["WITNESS"]
        if not flags & self.bits["WITNESS"]:
            flags &= ~self.bits["CLEANSTACK"]
        assert self.valid_combination(flags)
        return flags

    def fill(self, flags: int) -> int:
        if flags & self.bits["CLEANSTACK"]:
            flags |= self.bits["WITNESS"]
        if flags & self.bits["WITNESS"]:
            flags |= self.bits["P2SH"]
        assert self.valid_combination(flags)
        return flags

    def exclude_individual(self, flags: int) -> set[int]:
        combos = set()
        for name in sorted(self.bits):
            without = self.trim(flags & ~self.bits[name])
            if without != flags:
                combos.add(without)
        return combos

    def random(self, rng: random.Random) -> int:
        """m_rng.randbits(MAX_SCRIPT_VERIFY_FLAGS_BITS): a random subset of the flags."""
        return sum(bit for bit in self.bits.values() if rng.getrandbits(1))


CORE_FLAG_NAMES = frozenset(
    """P2SH STRICTENC DERSIG LOW_S NULLDUMMY SIGPUSHONLY MINIMALDATA DISCOURAGE_UPGRADABLE_NOPS
    CLEANSTACK CHECKLOCKTIMEVERIFY CHECKSEQUENCEVERIFY WITNESS DISCOURAGE_UPGRADABLE_WITNESS_PROGRAM
    MINIMALIF NULLFAIL WITNESS_PUBKEYTYPE CONST_SCRIPTCODE TAPROOT
    DISCOURAGE_UPGRADABLE_TAPROOT_VERSION DISCOURAGE_OP_SUCCESS DISCOURAGE_UPGRADABLE_PUBKEYTYPE
    """.split()
)


def verify(flags: Flags, tx: bytes, spent: Spent, verify_flags: int) -> Verdict:
    # Core's VerifyScript asserts a valid combination (an abort, not an error): the mirrored
    # loops never build another, as Core's do not.
    assert flags.valid_combination(verify_flags), hex(verify_flags)
    verdict: Verdict = _native.core_verify_tx(tx, spent, verify_flags)
    return verdict


def _as_expected(verdict: Verdict, expect_valid: bool) -> bool:
    """CheckTxScripts' verdict: valid, or a script failure; anything else (an unreadable
    transaction, a spent-output mismatch) is a broken vector or binding and never expected."""
    return verdict[0] == ("valid" if expect_valid else "script")


# ---------------------------------------------------------------------------------------------
# Serialization.


def compact_size(n: int) -> bytes:
    if n < 0xFD:
        return bytes([n])
    if n <= 0xFFFF:
        return b"\xfd" + n.to_bytes(2, "little")
    if n <= 0xFFFFFFFF:
        return b"\xfe" + n.to_bytes(4, "little")
    return b"\xff" + n.to_bytes(8, "little")


def _read_compact(s: io.BytesIO) -> int:
    first = _read(s, 1)[0]
    if first < 0xFD:
        return first
    return int.from_bytes(_read(s, {0xFD: 2, 0xFE: 4, 0xFF: 8}[first]), "little")


def _read(s: io.BytesIO, n: int) -> bytes:
    b = s.read(n)
    if len(b) != n:
        raise ValueError("transaction ends early")
    return b


def tx_prevouts(tx: bytes) -> list[tuple[bytes, int]]:
    """The (txid in internal order, index) each input spends, read as Core's deserializer reads
    a transaction (an empty input list followed by a nonzero flag byte: BIP144's form)."""
    s = io.BytesIO(tx)
    _read(s, 4)
    n = _read_compact(s)
    if n == 0 and _read(s, 1)[0] != 0:
        n = _read_compact(s)
    out = []
    for _ in range(n):
        txid, index = _read(s, 32), int.from_bytes(_read(s, 4), "little")
        _read(s, _read_compact(s))
        _read(s, 4)
        out.append((txid, index))
    return out


def sha256d(b: bytes) -> bytes:
    return hashlib.sha256(hashlib.sha256(b).digest()).digest()


def serialize_tx(
    inputs: list[tuple[bytes, int, bytes, int]],
    outputs: list[tuple[int, bytes]],
    witnesses: list[list[bytes]],
) -> bytes:
    """Version 1, locktime 0; BIP144's form when any input has a witness (Core's
    TX_WITH_WITNESS)."""
    has_witness = any(witnesses)
    out = bytearray((1).to_bytes(4, "little"))
    if has_witness:
        out += b"\x00\x01"
    out += compact_size(len(inputs))
    for txid, index, script_sig, sequence in inputs:
        out += txid + index.to_bytes(4, "little") + compact_size(len(script_sig)) + script_sig
        out += sequence.to_bytes(4, "little")
    out += compact_size(len(outputs))
    for value, script in outputs:
        out += value.to_bytes(8, "little", signed=True) + compact_size(len(script)) + script
    if has_witness:
        for stack in witnesses:
            out += compact_size(len(stack))
            for item in stack:
                out += compact_size(len(item)) + item
    out += (0).to_bytes(4, "little")
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# Taproot, for script_tests.json's #CONTROLBLOCK# and #TAPROOTOUTPUT#: script_tests.cpp builds
# a one-leaf tree (depth 0, leaf version 0xc0) over the witness's last element with KeyData's
# key0 (secret key 1) as internal key.

_P = 2**256 - 2**32 - 977
_G = (
    0x79BE667EF9DCBBAC55A06295CE870B07029BFCDB2DCE28D959F2815B16F81798,
    0x483ADA7726A3C4655DA4FBFC0E1108A8FD17B448A68554199C47D08FFB10D4B8,
)
Point = tuple[int, int] | None


def _add(a: Point, b: Point) -> Point:
    if a is None:
        return b
    if b is None:
        return a
    if a[0] == b[0] and (a[1] + b[1]) % _P == 0:
        return None
    if a == b:
        lam = 3 * a[0] * a[0] * pow(2 * a[1], -1, _P) % _P
    else:
        lam = (b[1] - a[1]) * pow(b[0] - a[0], -1, _P) % _P
    x = (lam * lam - a[0] - b[0]) % _P
    return x, (lam * (a[0] - x) - a[1]) % _P


def _mul(k: int, pt: Point) -> Point:
    out: Point = None
    while k:
        if k & 1:
            out = _add(out, pt)
        pt = _add(pt, pt)
        k >>= 1
    return out


def _tagged(tag: str, data: bytes) -> bytes:
    t = hashlib.sha256(tag.encode()).digest()
    return hashlib.sha256(t + t + data).digest()


def taproot_leaf(script: bytes) -> tuple[bytes, bytes]:
    """(control block, output key) of the one-leaf tree over ``script`` (TaprootBuilder)."""
    internal = _mul(1, _G)
    assert internal is not None
    if internal[1] & 1:  # XOnlyPubKey: the even-Y point of that X
        internal = internal[0], _P - internal[1]
    x_only = internal[0].to_bytes(32, "big")
    leaf = _tagged("TapLeaf", b"\xc0" + compact_size(len(script)) + script)
    tweak = int.from_bytes(_tagged("TapTweak", x_only + leaf), "big")
    output = _add(internal, _mul(tweak, _G))
    assert output is not None
    return bytes([0xC0 | (output[1] & 1)]) + x_only, output[0].to_bytes(32, "big")


# ---------------------------------------------------------------------------------------------
# Script errors: script_tests.cpp's script_errors table (the JSON's names) with
# script_error.cpp's ScriptErrorString text of each.

SCRIPT_ERRORS: dict[str, str] = {
    "OK": "No error",
    "EVAL_FALSE": (
        "Script evaluated without error but finished with a false/empty top stack element"
    ),
    "OP_RETURN": "OP_RETURN was encountered",
    "SCRIPT_SIZE": "Script is too big",
    "PUSH_SIZE": "Push value size limit exceeded",
    "OP_COUNT": "Operation limit exceeded",
    "STACK_SIZE": "Stack size limit exceeded",
    "SIG_COUNT": "Signature count negative or greater than pubkey count",
    "PUBKEY_COUNT": "Pubkey count negative or limit exceeded",
    "VERIFY": "Script failed an OP_VERIFY operation",
    "EQUALVERIFY": "Script failed an OP_EQUALVERIFY operation",
    "CHECKMULTISIGVERIFY": "Script failed an OP_CHECKMULTISIGVERIFY operation",
    "CHECKSIGVERIFY": "Script failed an OP_CHECKSIGVERIFY operation",
    "NUMEQUALVERIFY": "Script failed an OP_NUMEQUALVERIFY operation",
    "BAD_OPCODE": "Opcode missing or not understood",
    "DISABLED_OPCODE": "Attempted to use a disabled opcode",
    "INVALID_STACK_OPERATION": "Operation not valid with the current stack size",
    "INVALID_ALTSTACK_OPERATION": "Operation not valid with the current altstack size",
    "UNBALANCED_CONDITIONAL": "Invalid OP_IF construction",
    "NEGATIVE_LOCKTIME": "Negative locktime",
    "UNSATISFIED_LOCKTIME": "Locktime requirement not satisfied",
    "SIG_HASHTYPE": "Signature hash type missing or not understood",
    "SIG_DER": "Non-canonical DER signature",
    "MINIMALDATA": "Data push larger than necessary",
    "SIG_PUSHONLY": "Only push operators allowed in signatures",
    "SIG_HIGH_S": "Non-canonical signature: S value is unnecessarily high",
    "SIG_NULLDUMMY": "Dummy CHECKMULTISIG argument must be zero",
    "PUBKEYTYPE": "Public key is neither compressed or uncompressed",
    "CLEANSTACK": "Stack size must be exactly one after execution",
    "MINIMALIF": "OP_IF/NOTIF argument must be minimal",
    "NULLFAIL": "Signature must be zero for failed CHECK(MULTI)SIG operation",
    "DISCOURAGE_UPGRADABLE_NOPS": "NOPx reserved for soft-fork upgrades",
    "DISCOURAGE_UPGRADABLE_WITNESS_PROGRAM": "Witness version reserved for soft-fork upgrades",
    "WITNESS_PROGRAM_WRONG_LENGTH": "Witness program has incorrect length",
    "WITNESS_PROGRAM_WITNESS_EMPTY": "Witness program was passed an empty witness",
    "WITNESS_PROGRAM_MISMATCH": "Witness program hash mismatch",
    "WITNESS_MALLEATED": "Witness requires empty scriptSig",
    "WITNESS_MALLEATED_P2SH": "Witness requires only-redeemscript scriptSig",
    "WITNESS_UNEXPECTED": "Witness provided for non-witness script",
    "WITNESS_PUBKEYTYPE": "Using non-compressed keys in segwit",
    "TAPSCRIPT_EMPTY_PUBKEY": "Empty public key in tapscript",
    "OP_CODESEPARATOR": "Using OP_CODESEPARATOR in non-witness script",
    "SIG_FINDANDDELETE": "Signature is found in scriptCode",
    "SCRIPTNUM": "Script number overflowed or is non-minimally encoded",
}


# ---------------------------------------------------------------------------------------------
# Where Core 26's interpreter (the binding's) and the vectors' Core differ by design. Each is a
# vector that fails under both, with another error; nothing that passes under one fails under
# the other (the flag loops, which check only pass or fail, run on these too).


@dataclass(frozen=True)
class Divergence:
    core26_text: str  # Core 26's ScriptErrorString for these vectors
    reason: str
    count: int  # vectors it covers in the vendored script_tests.json


# By the error a vector expects: every vector expecting it gets Core 26's.
DIVERGENT_ERRORS: dict[str, Divergence] = {
    "SCRIPTNUM": Divergence(
        "unknown error",
        "Core 26 has no SCRIPT_ERR_SCRIPTNUM: a number operand over 4 bytes or non-minimally "
        "encoded under MINIMALDATA throws scriptnum_error, which EvalScript's catch (...) turns "
        "into SCRIPT_ERR_UNKNOWN_ERROR; newer Core catches it as SCRIPT_ERR_SCRIPTNUM",
        66,
    ),
    "TAPSCRIPT_EMPTY_PUBKEY": Divergence(
        "Public key is neither compressed or uncompressed",
        "Core 26's EvalChecksigTapscript reports an empty tapscript public key as "
        "SCRIPT_ERR_PUBKEYTYPE; newer Core has SCRIPT_ERR_TAPSCRIPT_EMPTY_PUBKEY for it",
        1,
    ),
}

# By vector: (witness elements, scriptSig, scriptPubKey, flags), as the JSON spells them.
_IF_ON_EMPTY_STACK = Divergence(
    "Invalid OP_IF construction",
    "an OP_IF or OP_NOTIF executed on an empty stack: Core 26 reports "
    "SCRIPT_ERR_UNBALANCED_CONDITIONAL, newer Core SCRIPT_ERR_INVALID_STACK_OPERATION",
    12,
)
# IF 1 ENDIF (0x635168) and NOTIF 1 ENDIF (0x645168) as P2SH, P2WSH and P2SH-P2WSH scripts,
# spent with no argument for the IF.
_IF, _NOTIF = "635168", "645168"
_P2SH_IF = "HASH160 0x14 0xe7309652a8e3f600f06f5d8d52d6df03d2176cc3 EQUAL"
_P2SH_NOTIF = "HASH160 0x14 0x0c3f8fe3d6ca266e76311ecda544c67d15fdd5b0 EQUAL"
_WSH_IF = "0x20 0xc7eaf06d5ae01a58e376e126eb1e6fab2036076922b96b2711ffbec1e590665d"
_WSH_NOTIF = "0x20 0xf913eacf2e38a5d6fc3a8311d72ae704cb83866350a984dd3e5eb76d2a8c28e8"
_P2SH_WSH_IF = "HASH160 0x14 0x9b27ee6d9010c21bf837b334d043be5d150e7ba7 EQUAL"
_P2SH_WSH_NOTIF = "HASH160 0x14 0xdbb7d1c0a56b7a9c423300c8cca6e6e065baf1dc EQUAL"
_REDEEM_WSH_IF = "0x22 0x0020" + _WSH_IF[len("0x20 0x") :]
_REDEEM_WSH_NOTIF = "0x22 0x0020" + _WSH_NOTIF[len("0x20 0x") :]
_W, _WM = "P2SH,WITNESS", "P2SH,WITNESS,MINIMALIF"
DIVERGENT_VECTORS: dict[tuple[tuple[str, ...], str, str, str], Divergence] = {
    key: _IF_ON_EMPTY_STACK
    for key in [
        ((), "NOP", "IF 1 ENDIF", "P2SH,STRICTENC"),
        ((), "NOP", "NOTIF 1 ENDIF", "P2SH,STRICTENC"),
        ((), "0x03 0x" + _IF, _P2SH_IF, _WM),
        ((), "0x03 0x" + _NOTIF, _P2SH_NOTIF, _WM),
        ((_IF,), "", "0 " + _WSH_IF, _W),
        ((_IF,), "", "0 " + _WSH_IF, _WM),
        ((_NOTIF,), "", "0 " + _WSH_NOTIF, _W),
        ((_NOTIF,), "", "0 " + _WSH_NOTIF, _WM),
        ((_IF,), _REDEEM_WSH_IF, _P2SH_WSH_IF, _W),
        ((_IF,), _REDEEM_WSH_IF, _P2SH_WSH_IF, _WM),
        ((_NOTIF,), _REDEEM_WSH_NOTIF, _P2SH_WSH_NOTIF, _W),
        ((_NOTIF,), _REDEEM_WSH_NOTIF, _P2SH_WSH_NOTIF, _WM),
    ]
}

CORE26_DIVERGENCES = (*DIVERGENT_ERRORS.values(), _IF_ON_EMPTY_STACK)  # 79 vectors


# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data() -> Path:
    core_oracle()  # builds or takes from its cache the Core source the vectors come with
    folder = CORE_CACHE / "build" / "kernel-sys" / "bitcoin" / "src" / "test" / "data"
    assert folder.is_dir(), folder
    return folder


@pytest.fixture(scope="module")
def flags() -> Flags:
    bits = dict(_native.script_flag_bits())
    # CheckMapFlagNames: every flag Core's tests name, and no other.
    assert set(bits) == CORE_FLAG_NAMES
    assert len(set(bits.values())) == len(bits)
    assert all(b > 0 and b & (b - 1) == 0 for b in bits.values())
    return Flags(bits)


def _load(path: Path) -> list[Any]:
    tests: list[Any] = json.loads(path.read_text(), parse_float=Decimal)
    return tests


def _report(failures: list[str]) -> str:
    return f"{len(failures)} failures, the first 10:\n" + "\n".join(failures[:10])


def _spent_outputs(test: list[Any], tx: bytes) -> tuple[Spent, set[int]]:
    """Each input's (amount, scriptPubKey) from the vector's prevouts, looked up by outpoint as
    CheckTxScripts does (an absent amount is 0, as there), and the inputs with no prevout.

    Core's lookup of an absent prevout throws (map.at): a bad test, but only once the loop
    reaches that input, which it never does past the first failing one. The binding wants
    every input's output, so such an input gets an empty scriptPubKey of amount 0, and the
    vector is a bad test when the binding evaluates it (_Run.expect). No vector has one."""
    coins: dict[tuple[bytes, int], tuple[int, bytes]] = {}
    for prevout in test[0]:
        assert isinstance(prevout, list) and 3 <= len(prevout) <= 4, prevout
        txid = bytes.fromhex(prevout[0])[::-1]
        assert len(txid) == 32
        amount = int(prevout[3]) if len(prevout) == 4 else 0
        coins[(txid, prevout[1] & 0xFFFFFFFF)] = (amount, parse_script(prevout[2]))
    outpoints = tx_prevouts(tx)
    missing = {i for i, outpoint in enumerate(outpoints) if outpoint not in coins}
    return [coins.get(outpoint, (0, b"")) for outpoint in outpoints], missing


@dataclass
class _Run:
    """One transaction of tx_valid.json or tx_invalid.json under several flag sets
    (CheckTxScripts), its unexpected verdicts appended to ``failures``."""

    flags: Flags
    tx: bytes
    spent: Spent
    missing: set[int]  # inputs whose prevout the vector lacks
    where: str
    failures: list[str]

    def expect(self, verify_flags: int, expect_valid: bool, why: str) -> None:
        verdict = verify(self.flags, self.tx, self.spent, verify_flags)
        evaluated = range(len(self.spent)) if verdict[0] == "valid" else range(verdict[1] + 1)
        if self.missing.intersection(evaluated):
            self.failures.append(f"bad test: an input without prevout evaluated: {self.where}")
        elif not _as_expected(verdict, expect_valid):
            self.failures.append(f"{why} (flags {verify_flags:#x}): {verdict}: {self.where}")


def _tx_vectors(tests: list[Any]) -> Iterable[tuple[list[Any], str, bytes, str]]:
    """transaction_tests.cpp's reading: entries whose first element is not an array are
    comments; the others are [[prevout...], serialized tx, flags]."""
    for test in tests:
        if not isinstance(test[0], list):
            continue
        assert len(test) == 3 and isinstance(test[1], str) and isinstance(test[2], str), test
        yield test, json.dumps(test, default=str), bytes.fromhex(test[1]), test[2]


def test_tx_valid(data: Path, flags: Flags) -> None:
    """transaction_tests.cpp's tx_valid: valid with every flag but the excluded ones, still
    valid with any further flag (or random flags) removed, and invalid when any one excluded
    flag is added back (the exclusions are maximal). Core's CheckTransaction on each vector is
    not the interpreter's and not checked here."""
    tests = _load(data / "tx_valid.json")
    rng = random.Random(20240101)
    failures: list[str] = []
    checked = 0
    for test, where, tx, flag_text in _tx_vectors(tests):
        checked += 1
        spent, missing = _spent_outputs(test, tx)
        excluded = flags.parse(flag_text)
        if flags.inv(excluded) != flags.fill(flags.inv(excluded)):
            failures.append(f"bad test flags: {where}")
            continue

        run = _Run(flags, tx, spent, missing, where, failures)
        run.expect(flags.inv(excluded), True, "tx unexpectedly failed")
        # Removing any flag(s) does not invalidate a valid transaction.
        for name in sorted(flags.bits):
            unset = flags.trim(flags.inv(excluded | flags.bits[name]))
            run.expect(unset, True, f"fails with {name} unset")
            unset = flags.trim(flags.inv(excluded | flags.random(rng)))
            run.expect(unset, True, "fails with random flags unset")
        # The exclusions are maximal: setting any excluded flag makes the transaction fail.
        for without_one in flags.exclude_individual(excluded):
            run.expect(flags.inv(without_one), False, "too many flags unset")
    comments = sum(1 for t in tests if not isinstance(t[0], list))
    assert checked == len(tests) - comments
    assert checked > 100
    assert not failures, _report(failures)


# tx_invalid.json's entries that fail Core's CheckTransaction (duplicate inputs, no inputs or
# outputs, negative or oversized amounts, coinbase rules...): Core's test skips them with the
# flags "BADTX", as here; they are not script failures and the binding has no CheckTransaction.
BADTX_ENTRIES = 9


def test_tx_invalid(data: Path, flags: Flags) -> None:
    """transaction_tests.cpp's tx_invalid: a script fails with the vector's flags, still fails
    with any one flag (or random flags) added, and passes when any one of its flags is removed
    (the flags are minimal)."""
    tests = _load(data / "tx_invalid.json")
    rng = random.Random(20240102)
    failures: list[str] = []
    checked = skipped = 0
    for test, where, tx, flag_text in _tx_vectors(tests):
        if flag_text == "BADTX":
            skipped += 1
            continue
        checked += 1
        # CheckTxScripts stops at the first failing input, as the binding does (an input
        # without prevout past it is never evaluated: _spent_outputs).
        spent, missing = _spent_outputs(test, tx)
        verify_flags = flags.parse(flag_text)
        if verify_flags != flags.fill(verify_flags):
            failures.append(f"bad test flags: {where}")
            continue

        run = _Run(flags, tx, spent, missing, where, failures)
        # Not FillFlags'd: an invalid combination would be a bad vector (checked above).
        run.expect(verify_flags, False, "tx unexpectedly passed")
        # Adding any flag(s) does not validate an invalid transaction.
        for name in sorted(flags.bits):
            added = flags.fill(verify_flags | flags.bits[name])
            run.expect(added, False, f"passes with {name} set")
            added = flags.fill(verify_flags | flags.random(rng))
            run.expect(added, False, "passes with random flags set")
        # The flags are minimal: removing any one makes the transaction pass.
        for without_one in flags.exclude_individual(verify_flags):
            run.expect(without_one, True, "too many flags set")
    comments = sum(1 for t in tests if not isinstance(t[0], list))
    assert skipped == BADTX_ENTRIES
    assert checked + skipped == len(tests) - comments
    assert checked > 80
    assert not failures, _report(failures)


def _amount(value: Any) -> int:
    """AmountFromValue: BTC with at most 8 decimals, within MoneyRange."""
    sats = Decimal(value) * 100_000_000
    assert sats == sats.to_integral_value() and 0 <= sats <= 21_000_000 * 100_000_000, value
    return int(sats)


@dataclass
class ScriptVector:
    where: str
    witness: tuple[str, ...]  # the JSON's witness elements (placeholders unexpanded)
    script_sig: str
    script_pub_key: str
    flag_text: str
    error: str
    tx: bytes
    spent: Spent


def _script_vector(test: list[Any]) -> ScriptVector | None:
    """script_json_test's reading of one entry, None for a comment: [[wit..., amount]?,
    scriptSig, scriptPubKey, flags, expected error, comment...]."""
    where = json.dumps(test, default=str)
    witness: list[bytes] = []
    control: tuple[bytes, bytes] | None = None
    value = 0
    pos = 0
    if test and isinstance(test[0], list):
        for element in test[0][:-1]:
            if element.startswith("#SCRIPT#"):
                witness.append(parse_script(element[len("#SCRIPT#") :]))
            elif element == "#CONTROLBLOCK#":
                control = taproot_leaf(witness[-1])
                witness.append(control[0])
            else:
                witness.append(bytes.fromhex(element))
        value = _amount(test[0][-1])
        pos = 1
    if len(test) < 4 + pos:
        assert len(test) == 1, f"bad test: {where}"
        return None
    script_sig_text, spk_text, flag_text, error = test[pos : pos + 4]
    script_sig = parse_script(script_sig_text)
    if spk_text == "0x51 0x20 #TAPROOTOUTPUT#":
        assert control is not None, f"no tapscript to build the output of: {where}"
        script_pub_key = b"\x51" + push_data(control[1])
    else:
        script_pub_key = parse_script(spk_text)
    # BuildCreditingTransaction and BuildSpendingTransaction (test/util/transaction_utils.cpp).
    credit = serialize_tx(
        [(b"\x00" * 32, 0xFFFFFFFF, push_int(0) + push_int(0), 0xFFFFFFFF)],
        [(value, script_pub_key)],
        [[]],
    )
    spend = serialize_tx([(sha256d(credit), 0, script_sig, 0xFFFFFFFF)], [(value, b"")], [witness])
    witness_text = tuple(test[0][:-1]) if pos else ()
    return ScriptVector(
        where,
        witness_text,
        script_sig_text,
        spk_text,
        flag_text,
        error,
        spend,
        [(value, script_pub_key)],
    )


def test_script_tests(data: Path, flags: Flags) -> None:
    """script_tests.cpp's script_json_test (DoTest): the vector's scriptSig, witness and
    scriptPubKey spent in a one-input transaction with its flags (CLEANSTACK adding P2SH and
    WITNESS), Core's exact error expected; then 256 random flag sets removed from a passing
    vector, or added to a failing one, must not change whether it passes."""
    tests = _load(data / "script_tests.json")
    rng = random.Random(20240103)
    failures: list[str] = []
    diverged: dict[Divergence, int] = {d: 0 for d in CORE26_DIVERGENCES}
    vectors_seen: set[tuple[tuple[str, ...], str, str, str]] = set()
    checked = comments = 0
    p2sh, witness = flags.bits["P2SH"], flags.bits["WITNESS"]
    cleanstack = flags.bits["CLEANSTACK"]
    for test in tests:
        vector = _script_vector(test)
        if vector is None:
            comments += 1
            continue
        checked += 1
        assert vector.error in SCRIPT_ERRORS, f"unknown script error: {vector.where}"
        verify_flags = flags.parse(vector.flag_text)
        if verify_flags & cleanstack:
            verify_flags |= p2sh | witness
        expect_valid = vector.error == "OK"
        want: Verdict = ("script", 0, SCRIPT_ERRORS[vector.error])
        if expect_valid:
            want = ("valid", 0, "")
        got = verify(flags, vector.tx, vector.spent, verify_flags)
        key = (vector.witness, vector.script_sig, vector.script_pub_key, vector.flag_text)
        divergence = DIVERGENT_VECTORS.get(key) or DIVERGENT_ERRORS.get(vector.error)
        if divergence is not None:
            vectors_seen.add(key)
            diverged[divergence] += 1
            want = ("script", 0, divergence.core26_text)
        if got != want:
            failures.append(f"{got} where {want} expected: {vector.where}")

        for _ in range(256):
            extra = flags.random(rng)
            combined = verify_flags & ~extra if expect_valid else verify_flags | extra
            # Weed out invalid flag combinations, as DoTest does.
            if not flags.valid_combination(combined):
                continue
            verdict = verify(flags, vector.tx, vector.spent, combined)
            if not _as_expected(verdict, expect_valid):
                failures.append(f"{verdict} with flags {combined:#x}: {vector.where}")
                break
    assert checked + comments == len(tests)
    assert checked > 1000
    # Every listed vector is in the data, and each divergence covers the vectors it says.
    assert set(DIVERGENT_VECTORS) <= vectors_seen, set(DIVERGENT_VECTORS) - vectors_seen
    counts = {d.reason: (diverged[d], d.count) for d in CORE26_DIVERGENCES}
    assert all(n == want for n, want in counts.values()), counts
    assert not failures, _report(failures)
