"""The expert store file format: record layout, packed scale rows, header.

A store holds every (layer, expert) of a checkpoint as one contiguous record, 64-byte aligned,
in the order layer-major then expert. A record's parts, each starting on a 64-byte boundary:

    gu_codes  [2I][H/32][16]  gate_up MXFP4 codes      (byte-exact copy of the checkpoint)
    gu_scales [2I][...]       gate_up scale rows        (raw: [H/32] E8M0 bytes; packed: below)
    dn_codes  [H][I/32][16]   down codes
    dn_scales [H][...]        down scale rows
    gu_bias   [2I] bf16, dn_bias [H] bf16
    exc       packed only: exception area (fallback scale rows), may be empty

Packed scale row for G blocks: 1 + ceil(G/2) bytes: a base exponent, then G 4-bit offsets (low
nibble first), s_g = base + offset_g. Rows whose exponent range exceeds 15 (or whose minimum is
255) get base 0xFF and their raw bytes go to the exception area: uint32 row ids (sorted; gate_up
rows 0..2I-1, down row h is 2I+h) followed by the raw rows in the same order. The encoding is
lossless, so the kernel produces bit-identical outputs from raw and packed stores.

File: a 64-byte prefix (magic, version, JSON length, CRC-32 of JSON+table, table/data offsets,
file size, record count), the JSON metadata (fingerprint, shapes, layout), the record table
(offset u64, size u64, crc32 u32, n_exc u32 per record) and, from a 4096-byte boundary, the
records. The prefix is written last, so an interrupted build never has a valid magic.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

MAGIC = b"NEURALXS"
VERSION = 1
PREFIX = struct.Struct("<8sIIIIQQQQ")  # magic, version, json_len, header_crc, reserved, table, data, size, n
PREFIX_BYTES = 64
TABLE_ENTRY = struct.Struct("<QQII")  # offset, size, crc32, n_exc
DATA_ALIGN = 4096
RECORD_ALIGN = 64
FORMATS = ("raw", "packed")
FALLBACK = 0xFF

PART_NAMES = ("gu_codes", "gu_scales", "dn_codes", "dn_scales", "gu_bias", "dn_bias")
CHECKPOINT_PART = {
    "gu_codes": "gate_up_proj_blocks",
    "gu_scales": "gate_up_proj_scales",
    "dn_codes": "down_proj_blocks",
    "dn_scales": "down_proj_scales",
    "gu_bias": "gate_up_proj_bias",
    "dn_bias": "down_proj_bias",
}


class StoreError(ValueError):
    """An expert store is unreadable, incomplete, corrupt or belongs to another checkpoint."""


def align(v: int, a: int) -> int:
    return (v + a - 1) // a * a


def scale_row_bytes(blocks: int, fmt: str) -> int:
    return 1 + (blocks + 1) // 2 if fmt == "packed" else blocks


@dataclass(frozen=True)
class RecordLayout:
    hidden: int
    intermediate: int
    fmt: str
    offsets: tuple[int, ...]  # six parts + exception area
    sizes: tuple[int, ...]  # six parts

    @classmethod
    def build(cls, hidden: int, intermediate: int, fmt: str) -> RecordLayout:
        if fmt not in FORMATS:
            raise ValueError(f"store format must be one of {FORMATS}, got {fmt!r}")
        g1, g2 = hidden // 32, intermediate // 32
        sizes = (
            2 * intermediate * g1 * 16,
            2 * intermediate * scale_row_bytes(g1, fmt),
            hidden * g2 * 16,
            hidden * scale_row_bytes(g2, fmt),
            2 * intermediate * 2,
            hidden * 2,
        )
        offsets, off = [], 0
        for size in sizes:
            off = align(off, RECORD_ALIGN)
            offsets.append(off)
            off += size
        offsets.append(align(off, RECORD_ALIGN))
        return cls(hidden, intermediate, fmt, tuple(offsets), sizes)

    @property
    def blocks(self) -> tuple[int, int]:
        return self.hidden // 32, self.intermediate // 32

    @property
    def fixed_bytes(self) -> int:
        """Record bytes without the exception area (all of it for raw)."""
        return self.offsets[6]

    @property
    def payload_bytes(self) -> int:
        """MXFP4 codes + scales per expert (the figure the design doc quotes)."""
        return sum(self.sizes[:4])

    @property
    def bias_bytes(self) -> int:
        return self.sizes[4] + self.sizes[5]

    def part_shape(self, name: str) -> tuple[int, ...]:
        h, i = self.hidden, self.intermediate
        g1, g2 = self.blocks
        return {
            "gu_codes": (2 * i, g1, 16),
            "gu_scales": (2 * i, scale_row_bytes(g1, self.fmt)),
            "dn_codes": (h, g2, 16),
            "dn_scales": (h, scale_row_bytes(g2, self.fmt)),
            "gu_bias": (2 * i,),
            "dn_bias": (h,),
        }[name]

    def exc_bytes(self, row_ids: np.ndarray) -> int:
        g1, g2 = self.blocks
        n_gu = int(np.count_nonzero(row_ids < 2 * self.intermediate))
        return 4 * len(row_ids) + n_gu * g1 + (len(row_ids) - n_gu) * g2


def pack_scales(scales: np.ndarray, first_row_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[R, G] E8M0 rows -> (packed [R, 1+ceil(G/2)], fallback row ids uint32, fallback raw rows [n, G])."""
    s = np.asarray(scales, dtype=np.uint8)
    rows, g = s.shape
    lo, hi = s.min(axis=1), s.max(axis=1)
    fits = (hi.astype(np.int16) - lo <= 15) & (lo != FALLBACK)
    base = np.where(fits, lo, FALLBACK).astype(np.uint8)
    off = np.where(fits[:, None], s - base[:, None], 0).astype(np.uint8)
    if g % 2:
        off = np.concatenate([off, np.zeros((rows, 1), np.uint8)], axis=1)
    packed = np.empty((rows, 1 + off.shape[1] // 2), np.uint8)
    packed[:, 0] = base
    packed[:, 1:] = off[:, 0::2] | (off[:, 1::2] << 4)
    bad = np.flatnonzero(~fits)
    return packed, (bad + first_row_id).astype(np.uint32), s[bad]


def unpack_scales(packed: np.ndarray, blocks: int, fallback: dict[int, np.ndarray], first_row_id: int) -> np.ndarray:
    """Inverse of pack_scales; ``fallback`` maps row id -> raw row."""
    p = np.asarray(packed, dtype=np.uint8)
    off = np.empty((p.shape[0], 2 * (p.shape[1] - 1)), np.uint8)
    off[:, 0::2] = p[:, 1:] & 15
    off[:, 1::2] = p[:, 1:] >> 4
    out = (p[:, :1].astype(np.uint16) + off[:, :blocks]).astype(np.uint8)
    for r in np.flatnonzero(p[:, 0] == FALLBACK):
        row = fallback.get(int(r) + first_row_id)
        if row is None:
            raise StoreError(f"packed scale row {int(r) + first_row_id} is marked fallback but has no exception entry")
        out[r] = row
    return out


def encode_record(parts: dict[str, np.ndarray], layout: RecordLayout) -> tuple[np.ndarray, int]:
    """The record bytes for one expert's checkpoint parts (BF16 parts as uint16 bits) and its n_exc."""
    exc_ids = np.zeros(0, np.uint32)
    exc_rows: list[np.ndarray] = []
    body = dict(parts)
    if layout.fmt == "packed":
        gu, gu_ids, gu_raw = pack_scales(parts["gu_scales"], 0)
        dn, dn_ids, dn_raw = pack_scales(parts["dn_scales"], 2 * layout.intermediate)
        body["gu_scales"], body["dn_scales"] = gu, dn
        exc_ids = np.concatenate([gu_ids, dn_ids])
        exc_rows = [r.reshape(-1) for r in (gu_raw, dn_raw)]
    size = layout.fixed_bytes + (layout.exc_bytes(exc_ids) if len(exc_ids) else 0)
    rec = np.zeros(size, np.uint8)
    for name, off, n in zip(PART_NAMES, layout.offsets, layout.sizes, strict=False):
        src = np.ascontiguousarray(body[name]).view(np.uint8).reshape(-1)
        if src.size != n:
            raise StoreError(f"{name}: {src.size} B, the store layout expects {n} B")
        rec[off : off + n] = src
    if len(exc_ids):
        e = layout.offsets[6]
        rec[e : e + 4 * len(exc_ids)] = exc_ids.astype("<u4").view(np.uint8)
        raw = np.concatenate(exc_rows)
        rec[e + 4 * len(exc_ids) : e + 4 * len(exc_ids) + raw.size] = raw
    return rec, len(exc_ids)


def record_parts(rec: np.ndarray, layout: RecordLayout) -> dict[str, np.ndarray]:
    """Zero-copy views of a record's six parts in their stored form."""
    out = {}
    for name, off, n in zip(PART_NAMES, layout.offsets, layout.sizes, strict=False):
        view = rec[off : off + n]
        if name.endswith("bias"):
            view = view.view(np.uint16)
        out[name] = view.reshape(layout.part_shape(name))
    return out


def exception_area(rec: np.ndarray, layout: RecordLayout, n_exc: int) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """(the area's bytes, row id -> raw scale row)."""
    e = layout.offsets[6]
    if n_exc == 0:
        return rec[e:e], {}
    ids = rec[e : e + 4 * n_exc].view("<u4")
    g1, g2 = layout.blocks
    rows: dict[int, np.ndarray] = {}
    pos = e + 4 * n_exc
    for rid in ids.tolist():
        g = g1 if rid < 2 * layout.intermediate else g2
        rows[int(rid)] = rec[pos : pos + g]
        pos += g
    return rec[e:pos], rows


def decode_record(rec: np.ndarray, layout: RecordLayout, n_exc: int) -> dict[str, np.ndarray]:
    """The checkpoint-form parts (raw scales) of a stored record."""
    parts = record_parts(rec, layout)
    if layout.fmt == "packed":
        _, fb = exception_area(rec, layout, n_exc)
        g1, g2 = layout.blocks
        parts["gu_scales"] = unpack_scales(parts["gu_scales"], g1, fb, 0)
        parts["dn_scales"] = unpack_scales(parts["dn_scales"], g2, fb, 2 * layout.intermediate)
    return parts
