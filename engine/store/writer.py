"""Writing expert stores atomically: temp file, records, table, header last, fsync, rename.

An interrupted build leaves at most a ``*.partial-<pid>`` file whose prefix is still zero, so
neither the final name nor the temp file can ever be opened as a store.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .format import (
    CHECKPOINT_PART,
    DATA_ALIGN,
    MAGIC,
    PART_NAMES,
    PREFIX,
    PREFIX_BYTES,
    RECORD_ALIGN,
    TABLE_ENTRY,
    VERSION,
    RecordLayout,
    align,
    encode_record,
)

if TYPE_CHECKING:
    from ..checkpoint import Checkpoint

Progress = Callable[[int, int], None]  # (records done, records total)


def store_meta(layout: RecordLayout, layers: int, experts: int, fingerprint: str, limit: float, alpha: float,
               source: str = "", sample_crc: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    return {
        "sample_crc": list(sample_crc),
        "format": layout.fmt,
        "version": VERSION,
        "fingerprint": fingerprint,
        "hidden_size": layout.hidden,
        "intermediate_size": layout.intermediate,
        "num_hidden_layers": layers,
        "num_local_experts": experts,
        "swiglu_limit": limit,
        "swiglu_alpha": alpha,
        "record_offsets": list(layout.offsets),
        "record_fixed_bytes": layout.fixed_bytes,
        "payload_bytes_per_expert": layout.payload_bytes,
        "source": source,
        "created_by": "neural build-store",
    }


class StoreWriter:
    """Appends records in (layer, expert) order; ``commit`` publishes the file atomically."""

    def __init__(self, path: str | Path, meta: dict[str, Any]) -> None:
        self.path = Path(path)
        self.meta = meta
        self.n = int(meta["num_hidden_layers"]) * int(meta["num_local_experts"])
        self.json = json.dumps(meta, sort_keys=True).encode()
        self.table_off = align(PREFIX_BYTES + len(self.json), RECORD_ALIGN)
        self.data_off = align(self.table_off + self.n * TABLE_ENTRY.size, DATA_ALIGN)
        self.entries: list[tuple[int, int, int, int]] = []
        self.pos = self.data_off
        self.tmp = self.path.with_name(f"{self.path.name}.partial-{os.getpid()}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(self.tmp, "wb")  # noqa: SIM115 - closed in commit/abort
        self.f.truncate(self.data_off)  # zero prefix + header area until commit
        self.f.seek(self.data_off)

    def add(self, record: np.ndarray, n_exc: int) -> None:
        if len(self.entries) >= self.n:
            raise ValueError("more records than the header declares")
        data = np.ascontiguousarray(record, dtype=np.uint8).reshape(-1).data
        self.entries.append((self.pos, len(data), zlib.crc32(data), n_exc))
        self.f.write(data)
        pad = align(len(data), RECORD_ALIGN) - len(data)
        if pad:
            self.f.write(b"\0" * pad)
        self.pos += len(data) + pad

    def commit(self) -> Path:
        if len(self.entries) != self.n:
            raise ValueError(f"store has {len(self.entries)} of {self.n} records")
        table = b"".join(TABLE_ENTRY.pack(*e) for e in self.entries)
        crc = zlib.crc32(self.json + table)
        self.f.seek(PREFIX_BYTES)
        self.f.write(self.json)
        self.f.seek(self.table_off)
        self.f.write(table)
        self.f.flush()
        os.fsync(self.f.fileno())
        # The magic goes in last: before this point the file can never parse as a store.
        self.f.seek(0)
        self.f.write(PREFIX.pack(MAGIC, VERSION, len(self.json), crc, 0, self.table_off, self.data_off,
                                 self.pos, self.n))
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()
        os.replace(self.tmp, self.path)
        _fsync_dir(self.path.parent)
        return self.path

    def abort(self) -> None:
        if not self.f.closed:
            self.f.close()
        self.tmp.unlink(missing_ok=True)

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is not None:
            self.abort()


def _fsync_dir(d: Path) -> None:
    if os.name != "posix":
        return  # directories cannot be opened for fsync on Windows; the rename is durable there
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def expert_parts(ck: Checkpoint, layer: int, expert: int) -> dict[str, np.ndarray]:
    """One expert's six checkpoint tensors under the store's part names (zero-copy views)."""
    arrays = ck.expert_arrays(layer, expert)
    return {p: arrays[CHECKPOINT_PART[p]] for p in PART_NAMES}


def sample_crcs(ck: Checkpoint, layout: RecordLayout) -> tuple[int, int]:
    """CRC-32 of the first and last expert's record: the checkpoint fingerprint covers shapes and
    file layout only, so this is what tells two same-shape checkpoints (a fine-tune) apart."""
    cfg = ck.config
    out = []
    for layer, e in ((0, 0), (cfg.num_hidden_layers - 1, cfg.num_local_experts - 1)):
        rec, _ = encode_record(expert_parts(ck, layer, e), layout)
        out.append(zlib.crc32(rec.data))
    return out[0], out[1]


@dataclass(frozen=True)
class BuildSummary:
    path: Path
    fmt: str
    records: int
    file_bytes: int
    payload_bytes_per_expert: int
    record_bytes_per_expert: int
    fallback_rows: int


def build_store(ck: Checkpoint, out: str | Path, fmt: str = "raw", progress: Progress | None = None) -> BuildSummary:
    """Repack every expert of ``ck`` into a store at ``out`` (atomically)."""
    cfg = ck.config
    layout = RecordLayout.build(cfg.hidden_size, cfg.intermediate_size, fmt)
    meta = store_meta(layout, cfg.num_hidden_layers, cfg.num_local_experts, ck.fingerprint(), cfg.swiglu_limit,
                      cfg.swiglu_alpha, source=str(ck.model_dir), sample_crc=sample_crcs(ck, layout))
    total, fallback = cfg.num_hidden_layers * cfg.num_local_experts, 0
    with StoreWriter(out, meta) as w:
        for layer in range(cfg.num_hidden_layers):
            pre = f"model.layers.{layer}.mlp.experts."
            tensors = {p: ck.array(pre + CHECKPOINT_PART[p]) for p in PART_NAMES}
            for e in range(cfg.num_local_experts):
                rec, n_exc = encode_record({p: tensors[p][e] for p in PART_NAMES}, layout)
                w.add(rec, n_exc)
                fallback += n_exc
                if progress is not None:
                    progress(layer * cfg.num_local_experts + e + 1, total)
        path = w.commit()
    return BuildSummary(path, fmt, total, path.stat().st_size, layout.payload_bytes, layout.fixed_bytes, fallback)
