"""Opening, checking and verifying expert stores (memory-mapped, zero-copy records)."""

from __future__ import annotations

import contextlib
import json
import mmap
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .format import (
    CHECKPOINT_PART,
    MAGIC,
    PART_NAMES,
    PREFIX,
    TABLE_ENTRY,
    VERSION,
    RecordLayout,
    StoreError,
    decode_record,
    exception_area,
    record_parts,
)

if TYPE_CHECKING:
    from ..checkpoint import Checkpoint

STORE_NAMES = {"packed": "experts-packed.nstore", "raw": "experts-raw.nstore"}


class StoreMismatch(StoreError):
    """The store was built from a different checkpoint (fingerprint or shapes differ)."""


class StoreCorrupt(StoreError):
    """A record's bytes do not match its checksum, or the header is damaged."""


def default_store_path(model_dir: str | Path, fmt: str) -> Path:
    return Path(model_dir) / STORE_NAMES[fmt]


def find_store(model_dir: str | Path) -> Path | None:
    """The store next to a checkpoint, packed preferred (it is smaller and reads faster)."""
    for fmt in ("packed", "raw"):
        p = default_store_path(model_dir, fmt)
        if p.is_file():
            return p
    return None


class ExpertStore:
    def __init__(self, path: Path, meta: dict[str, Any], table: np.ndarray, mm: mmap.mmap) -> None:
        self.path = path
        self.meta = meta
        self.table = table  # [n, 4] uint64: offset, size, crc32, n_exc
        self._mm = mm
        self.buf = np.frombuffer(mm, dtype=np.uint8)
        self.fmt = str(meta["format"])
        self.layers = int(meta["num_hidden_layers"])
        self.experts = int(meta["num_local_experts"])
        self.fingerprint = str(meta["fingerprint"])
        self.layout = RecordLayout.build(int(meta["hidden_size"]), int(meta["intermediate_size"]), self.fmt)
        if list(self.layout.offsets) != [int(v) for v in meta["record_offsets"]]:
            raise StoreError(f"{path}: record layout in the header does not match format {self.fmt!r} "
                             "(written by another version?) — rebuild with neural build-store")

    @classmethod
    def open(cls, path: str | Path) -> ExpertStore:
        p = Path(path)
        try:
            f = open(p, "rb")  # noqa: SIM115 - the mapping outlives the file object
        except OSError as exc:
            raise StoreError(f"{p}: cannot open expert store ({exc.strerror or exc})") from exc
        with f:
            size = p.stat().st_size
            head = f.read(PREFIX.size)
            if len(head) < PREFIX.size:
                raise StoreError(f"{p}: not an expert store (file too short)")
            magic, version, jlen, crc, _, table_off, data_off, file_size, n = PREFIX.unpack(head)
            if magic != MAGIC:
                raise StoreError(f"{p}: not an expert store, or an unfinished build (no valid header)")
            if version != VERSION:
                raise StoreError(f"{p}: store format version {version}, this build reads {VERSION} — rebuild it")
            if file_size != size:
                raise StoreCorrupt(f"{p}: truncated or extended ({size} B on disk, header says {file_size} B)")
            f.seek(64)
            raw_json = f.read(jlen)
            f.seek(table_off)
            raw_table = f.read(n * TABLE_ENTRY.size)
            if zlib.crc32(raw_json + raw_table) != crc:
                raise StoreCorrupt(f"{p}: header checksum mismatch — the store is damaged, rebuild it")
            meta = json.loads(raw_json)
            table = np.frombuffer(raw_table, dtype=np.dtype([("off", "<u8"), ("size", "<u8"), ("crc", "<u4"),
                                                             ("n_exc", "<u4")]))
            if len(table) != int(meta["num_hidden_layers"]) * int(meta["num_local_experts"]):
                raise StoreCorrupt(f"{p}: record table does not cover every (layer, expert)")
            ends = table["off"].astype(np.int64) + table["size"].astype(np.int64)
            if len(table) and (int(table["off"].min()) < data_off or int(ends.max()) > size):
                raise StoreCorrupt(f"{p}: record table points outside the file")
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return cls(p, meta, table, mm)

    # ---- access -----------------------------------------------------------------------------
    def index(self, layer: int, expert: int) -> int:
        if not (0 <= layer < self.layers and 0 <= expert < self.experts):
            raise IndexError(f"(layer {layer}, expert {expert}) outside the store's {self.layers}x{self.experts}")
        return layer * self.experts + expert

    def record(self, layer: int, expert: int) -> np.ndarray:
        t = self.table[self.index(layer, expert)]
        return self.buf[int(t["off"]) : int(t["off"]) + int(t["size"])]

    def offset(self, layer: int, expert: int) -> int:
        return int(self.table[self.index(layer, expert)]["off"])

    def n_exc(self, layer: int, expert: int) -> int:
        return int(self.table[self.index(layer, expert)]["n_exc"])

    def parts(self, layer: int, expert: int) -> dict[str, np.ndarray]:
        return record_parts(self.record(layer, expert), self.layout)

    def exceptions(self, layer: int, expert: int) -> np.ndarray:
        area, _ = exception_area(self.record(layer, expert), self.layout, self.n_exc(layer, expert))
        return area

    # ---- checks -----------------------------------------------------------------------------
    def check_matches(self, ck: Checkpoint) -> None:
        cfg = ck.config
        want = (cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, cfg.num_local_experts)
        have = (self.layout.hidden, self.layout.intermediate, self.layers, self.experts)
        if want != have:
            raise StoreMismatch(f"{self.path}: store shapes (hidden, intermediate, layers, experts) = {have} "
                                f"but the checkpoint at {ck.model_dir} has {want}; rebuild with "
                                f"`neural build-store {ck.model_dir}`")
        fp = ck.fingerprint()
        if fp != self.fingerprint:
            raise StoreMismatch(f"{self.path}: store was built from a different checkpoint (fingerprint "
                                f"{self.fingerprint}, this checkpoint is {fp}); rebuild with "
                                f"`neural build-store {ck.model_dir}`")
        from .writer import sample_crcs

        if list(sample_crcs(ck, self.layout)) != [int(v) for v in self.meta.get("sample_crc", [])]:
            raise StoreMismatch(f"{self.path}: store holds different expert weights than the checkpoint at "
                                f"{ck.model_dir} (same shapes, different bytes); rebuild with "
                                f"`neural build-store {ck.model_dir}`")

    def verify(self, progress: Callable[[int, int], None] | None = None) -> list[tuple[int, int]]:
        """Recompute every record's CRC-32; returns the (layer, expert) pairs that fail."""
        bad = []
        for i, t in enumerate(self.table):
            rec = self.buf[int(t["off"]) : int(t["off"]) + int(t["size"])]
            if zlib.crc32(rec.data) != int(t["crc"]):
                bad.append(divmod(i, self.experts))
            if progress is not None:
                progress(i + 1, len(self.table))
        return bad

    def verify_against_checkpoint(self, ck: Checkpoint,
                                  progress: Callable[[int, int], None] | None = None) -> list[tuple[int, int]]:
        """Decode every record and compare it byte for byte with the checkpoint's tensors."""
        self.check_matches(ck)
        bad = []
        for layer in range(self.layers):
            pre = f"model.layers.{layer}.mlp.experts."
            tensors = {p: ck.array(pre + CHECKPOINT_PART[p]) for p in PART_NAMES}
            for e in range(self.experts):
                got = decode_record(self.record(layer, e), self.layout, self.n_exc(layer, e))
                if not all(np.array_equal(got[p], tensors[p][e]) for p in PART_NAMES):
                    bad.append((layer, e))
                if progress is not None:
                    progress(layer * self.experts + e + 1, self.layers * self.experts)
        return bad

    def close(self) -> None:
        self.buf = np.zeros(0, np.uint8)
        with contextlib.suppress(BufferError):  # views still alive: the OS unmaps when they go
            self._mm.close()

    def __enter__(self) -> ExpertStore:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
