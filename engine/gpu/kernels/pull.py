"""Experts pulled by the GPU itself from the page-locked checkpoint mapping into scratch slots.

The decode copy lane queued six ``cudaMemcpy2DAsync`` per layer (one per slot part): 26-54 us of host time a layer
in the runtime alone (bench/gpu/zero_copy_probe.py, H200 host, warm), on the critical path before the CPU's misses.
Here one kernel, captured in the lane's graph ahead of the expert kernels, reads a table the host writes into pinned
memory (per row: device address of the source bytes, byte offset of the destination in the slot pool, 8-byte words)
and copies every row, its programs striding over blocks of words. The mapping is registered with
``cudaHostRegisterMapped``, so the source is reachable from the GPU at its device address (the host address on UVA
systems). MEASURED on the H200 machine: 47.9 GB/s for an expert pair at 264 programs of 2,048 words (8 warps)
against the DMA's 52.4 in the same run. Rows with 0 words are skipped; the bytes land unchanged.
Off by default (settings.decode_lane_pull): in session 25's A/B the queueing was barely shorter and the lane slower,
0.957x of the runtime copies over 6 mirrored pairs on calibrated routing (docs/performance.md).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def pull_rows_kernel(tab_ptr, pool_ptr, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    """tab int64 [ROWS, 3]: (source device address, destination byte offset in pool, words); pool as int64 words."""
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    for r in tl.static_range(ROWS):
        src = tl.load(tab_ptr + 3 * r).to(tl.pointer_type(tl.int64))
        dst = pool_ptr + tl.load(tab_ptr + 3 * r + 1) // 8
        words = tl.load(tab_ptr + 3 * r + 2).to(tl.int32)  # < 2^31 words a part; the loop bounds one type
        for start in range(pid * BLOCK, words, step):
            offs = start + tl.arange(0, BLOCK)
            m = offs < words
            tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)


def pull_rows(tab, pool64, grid: int = 264, block: int = 2048, warps: int = 8) -> None:  # type: ignore[no-untyped-def]
    """Launch :func:`pull_rows_kernel` on the current stream (``tab`` pinned int64 [rows, 3], ``pool64`` the slot
    pool viewed as int64)."""
    pull_rows_kernel[(grid,)](tab, pool64, ROWS=int(tab.shape[0]), BLOCK=block, num_warps=warps)
