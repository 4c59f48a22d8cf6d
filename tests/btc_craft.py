"""Hand-built Bitcoin blocks for consensus tests, written with hashlib and struct only (so they
do not share a line with the Rust core they test): transactions with or without witnesses,
coinbases with BIP34 heights and BIP141 commitments, merkle roots, regtest proof of work, and
a new blk file to append a block to a generated (unobfuscated) folder."""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field
from pathlib import Path

REGTEST_MAGIC = bytes.fromhex("fabfb5da")
REGTEST_BITS = 0x207FFFFF
REGTEST_TARGET = 0x7FFFFF << (8 * 29)
COIN = 100_000_000
# The BIP141 commitment output's prefix: OP_RETURN, push 36, 0xaa21a9ed.
WITNESS_COMMITMENT_PREFIX = bytes.fromhex("6a24aa21a9ed")


def sha256d(b: bytes) -> bytes:
    return hashlib.sha256(hashlib.sha256(b).digest()).digest()


def compact_size(n: int) -> bytes:
    if n < 0xFD:
        return bytes([n])
    if n <= 0xFFFF:
        return b"\xfd" + struct.pack("<H", n)
    if n <= 0xFFFFFFFF:
        return b"\xfe" + struct.pack("<I", n)
    return b"\xff" + struct.pack("<Q", n)


def pushdata(data: bytes) -> bytes:
    if len(data) < 0x4C:
        return bytes([len(data)]) + data
    if len(data) <= 0xFF:
        return b"\x4c" + bytes([len(data)]) + data
    return b"\x4d" + struct.pack("<H", len(data)) + data


def internal(display_hash: str) -> bytes:
    return bytes.fromhex(display_hash)[::-1]


@dataclass
class TxIn:
    txid: bytes  # internal byte order
    vout: int
    script_sig: bytes = b""
    sequence: int = 0xFFFFFFFF
    witness: list[bytes] = field(default_factory=list)


@dataclass
class Tx:
    vin: list[TxIn]
    vout: list[tuple[int, bytes]]  # (value in satoshis, may be negative; scriptPubKey)
    version: int = 2
    locktime: int = 0

    def serialize(self, witness: bool = True) -> bytes:
        has_witness = witness and any(i.witness for i in self.vin)
        out = struct.pack("<i", self.version)
        if has_witness:
            out += b"\x00\x01"
        out += compact_size(len(self.vin))
        for i in self.vin:
            out += i.txid + struct.pack("<I", i.vout)
            out += compact_size(len(i.script_sig)) + i.script_sig + struct.pack("<I", i.sequence)
        out += compact_size(len(self.vout))
        for value, script in self.vout:
            out += struct.pack("<q", value) + compact_size(len(script)) + script
        if has_witness:
            for i in self.vin:
                out += compact_size(len(i.witness))
                out += b"".join(compact_size(len(item)) + item for item in i.witness)
        return out + struct.pack("<I", self.locktime)

    @property
    def txid(self) -> bytes:
        return sha256d(self.serialize(witness=False))

    @property
    def wtxid(self) -> bytes:
        return sha256d(self.serialize())


def bip34_height(height: int) -> bytes:
    """The height as the coinbase's first push (CScript() << height)."""
    if height == 0:
        return b"\x00"
    if 1 <= height <= 16:
        return bytes([0x50 + height])
    n = height.to_bytes((height.bit_length() + 8) // 8, "little")
    return pushdata(n)


def coinbase(
    height: int,
    value: int,
    *,
    script_sig_tail: bytes = b"\x01\x02",
    commitment: bytes | None = None,
    nonce: list[bytes] | None = None,
    pay_to: bytes = b"\x51",
) -> Tx:
    """A coinbase paying ``value`` to ``pay_to`` (OP_TRUE), with a BIP141 commitment output
    when given (and the witness ``nonce`` stack, by default one 32-byte zero item, when it
    is)."""
    vout = [(value, pay_to)]
    if commitment is not None:
        vout.append((0, WITNESS_COMMITMENT_PREFIX + commitment))
    witness = nonce if nonce is not None else ([bytes(32)] if commitment is not None else [])
    txin = TxIn(bytes(32), 0xFFFFFFFF, bip34_height(height) + script_sig_tail, witness=witness)
    return Tx([txin], vout)


def merkle_root(hashes: list[bytes]) -> bytes:
    if not hashes:
        return bytes(32)
    level = list(hashes)
    while len(level) > 1:
        if len(level) % 2:
            level.append(level[-1])
        level = [sha256d(level[i] + level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def witness_commitment(txs: list[Tx], nonce: bytes = bytes(32)) -> bytes:
    """BIP141: SHA-256d of the wtxid merkle root (the coinbase's wtxid taken as zero) and the
    nonce."""
    wtxids = [bytes(32)] + [t.wtxid for t in txs[1:]]
    return sha256d(merkle_root(wtxids) + nonce)


def header(
    prev: str,
    merkle: bytes,
    time: int,
    *,
    bits: int = REGTEST_BITS,
    version: int = 0x20000000,
    valid_pow: bool = True,
) -> bytes:
    """An 80-byte header whose hash meets the regtest target, or (``valid_pow=False``) misses
    it."""
    for nonce in range(1 << 24):
        h = struct.pack("<i", version) + internal(prev) + merkle
        h += struct.pack("<III", time, bits, nonce)
        if (int.from_bytes(sha256d(h), "little") <= REGTEST_TARGET) == valid_pow:
            return h
    raise AssertionError("no nonce found")


def block(
    prev: str, txs: list[Tx], time: int, *, merkle: bytes | None = None, **header_args: object
) -> bytes:
    root = merkle if merkle is not None else merkle_root([t.txid for t in txs])
    head = header(prev, root, time, **header_args)  # type: ignore[arg-type]
    return head + compact_size(len(txs)) + b"".join(t.serialize() for t in txs)


def block_hash(block_bytes: bytes) -> str:
    return sha256d(block_bytes[:80])[::-1].hex()


def append_blocks(blocks_dir: Path, *records: bytes) -> Path:
    """Writes ``records`` as a new blk file after the folder's last one (the folder must be
    unobfuscated: generated with --no-xor)."""
    assert not any((blocks_dir / "xor.dat").read_bytes()), "generate with --no-xor"
    last = sorted(blocks_dir.glob("blk*.dat"))[-1]
    path = blocks_dir / f"blk{int(last.stem[3:]) + 1:05d}.dat"
    path.write_bytes(b"".join(REGTEST_MAGIC + struct.pack("<I", len(r)) + r for r in records))
    return path
