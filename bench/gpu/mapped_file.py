"""A file of random bytes in /dev/shm mapped read-only, as the engine maps the checkpoint's shards: what the GPU
probes register with CUDA and copy from (bench/gpu/zero_copy_probe.py, bench/gpu/batch_copy_probe.py)."""

from __future__ import annotations

import mmap
import os

import numpy as np


def random_mapping(name: str, n: int, seed: int = 0) -> np.ndarray:
    """The bytes of /dev/shm/NAME, ``n`` random ones, as a uint8 array over its read-only mapping (which the array
    keeps alive)."""
    path = f"/dev/shm/{name}"
    with open(path, "wb") as f:
        f.write(np.random.default_rng(seed).integers(0, 255, n, dtype=np.uint8).tobytes())
    fd = os.open(path, os.O_RDONLY)
    try:
        mm = mmap.mmap(fd, n, prot=mmap.PROT_READ)
    finally:
        os.close(fd)  # the mapping keeps the file
    return np.frombuffer(mm, dtype=np.uint8)
