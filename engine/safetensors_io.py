"""Minimal safetensors reading (memory-mapped, lazy per tensor) and streaming writing.

We parse the container ourselves rather than through ``safetensors.safe_open`` because the
native expert kernel needs raw, zero-copy pointers into the mapped file, and because a
corrupt or truncated file must produce an error naming the file and the tensor. Writing is
streamed tensor by tensor so a 60 GB checkpoint never has to sit in memory.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DTYPES: dict[str, tuple[np.dtype, int]] = {
    "U8": (np.dtype(np.uint8), 1),
    "I8": (np.dtype(np.int8), 1),
    "BF16": (np.dtype(np.uint16), 2),  # kept as raw bits; converted by the caller
    "F16": (np.dtype(np.float16), 2),
    "F32": (np.dtype(np.float32), 4),
    "I32": (np.dtype(np.int32), 4),
    "I64": (np.dtype(np.int64), 8),
}
_MAX_HEADER = 100 * 1024 * 1024


class CheckpointError(ValueError):
    """A checkpoint file or tensor is missing, corrupt, truncated or mis-shaped."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute byte offset in the file
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


class SafetensorsFile:
    """One ``.safetensors`` file: header parsed eagerly, data mapped on first use."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            size = self.path.stat().st_size
            with open(self.path, "rb") as f:
                head = f.read(8)
                if len(head) < 8:
                    raise CheckpointError(f"{self.path}: truncated (no safetensors header)")
                (hlen,) = struct.unpack("<Q", head)
                if hlen <= 0 or hlen > _MAX_HEADER or 8 + hlen > size:
                    raise CheckpointError(f"{self.path}: corrupt safetensors header (length {hlen}, file {size} B)")
                raw = f.read(hlen)
        except OSError as exc:
            raise CheckpointError(f"{self.path}: cannot be read ({exc.strerror or exc})") from exc
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"{self.path}: corrupt safetensors header ({exc})") from exc
        if not isinstance(header, dict):
            raise CheckpointError(f"{self.path}: corrupt safetensors header (not an object)")
        self.metadata: dict[str, str] = header.pop("__metadata__", None) or {}
        base = 8 + hlen
        self.data_start = base
        self.tensors: dict[str, TensorInfo] = {}
        for name, meta in header.items():
            try:
                dtype = meta["dtype"]
                shape = tuple(int(s) for s in meta["shape"])
                a, b = (int(x) for x in meta["data_offsets"])
            except (KeyError, TypeError, ValueError) as exc:
                raise CheckpointError(f"{self.path}: tensor {name!r} has a malformed header entry") from exc
            if dtype not in DTYPES:
                raise CheckpointError(f"{self.path}: tensor {name!r} has unsupported dtype {dtype}")
            want = int(np.prod(shape, dtype=np.int64)) * DTYPES[dtype][1]
            if b - a != want or a < 0:
                raise CheckpointError(
                    f"{self.path}: tensor {name!r} spans {b - a} B but shape {list(shape)} {dtype} needs {want} B"
                )
            if base + b > size:
                raise CheckpointError(
                    f"{self.path}: truncated — tensor {name!r} ends at byte {base + b} but the file has {size} B"
                )
            self.tensors[name] = TensorInfo(name, dtype, shape, base + a, base + b)
        self._map: np.memmap | None = None

    def _mapped(self) -> np.memmap:
        if self._map is None:
            self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        return self._map

    def array(self, name: str) -> np.ndarray:
        """Zero-copy read-only view of a tensor (BF16 as uint16 bits)."""
        info = self.tensors[name]
        dt = DTYPES[info.dtype][0]
        buf = self._mapped()[info.start : info.end]
        return buf.view(dt).reshape(info.shape)

    def close(self) -> None:
        m, self._map = self._map, None
        if m is not None and hasattr(m, "_mmap") and m._mmap is not None:
            # views may still be alive elsewhere; then the OS unmaps when they go
            with contextlib.suppress(BufferError):
                m._mmap.close()


@dataclass(frozen=True)
class TensorSpec:
    """A tensor to be written: its bytes come from ``produce`` at write time."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    produce: Callable[[], np.ndarray]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * DTYPES[self.dtype][1]


def encode_header(entries: Iterable[tuple[str, str, Sequence[int], int]],
                  metadata: dict[str, str] | None = None) -> tuple[bytes, int]:
    """The length-prefixed safetensors header for (name, dtype, shape, nbytes) tensors laid out
    back to back in that order, padded so the data starts 8-byte aligned; and the data's size."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = metadata
    off = 0
    for name, dtype, shape, nbytes in entries:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + nbytes]}
        off += nbytes
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    return struct.pack("<Q", len(hb)) + hb, off


def write_safetensors(
    path: str | Path,
    specs: Iterable[TensorSpec],
    metadata: dict[str, str] | None = None,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Stream tensors into a safetensors file (atomically: temp file, then rename)."""
    specs = list(specs)
    head, total = encode_header(((s.name, s.dtype, s.shape, s.nbytes) for s in specs), metadata)
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    with open(tmp, "wb") as f:
        f.write(head)
        for s in specs:
            arr = np.ascontiguousarray(s.produce())
            if arr.nbytes != s.nbytes:
                raise ValueError(f"{s.name}: produced {arr.nbytes} B, expected {s.nbytes} B")
            f.write(arr.reshape(-1).view(np.uint8).data)
            if progress is not None:
                progress(s.nbytes)
    os.replace(tmp, path)
    return total
