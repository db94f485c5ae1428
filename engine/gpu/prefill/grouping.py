"""Host-side plan of one layer's prompt experts (numpy only; no CUDA, no Triton).

After the routing sync the host knows how many of the prompt's (token, k) pairs each
expert got. Each expert with pairs goes one of three ways (design doc, "Prompt processing"):

* resident in a VRAM slot -> the grouped GEMM reads it from its slot;
* not resident, at most ``cpu_max`` pairs -> the native multi-token CPU kernel (a worker
  thread), so a few tokens never cost a 13 MB copy;
* not resident, more pairs -> copied through the pinned ring into a scratch slot, then the
  same grouped GEMM. Staged expert i uses scratch slot ``scratch_base + i % n_scratch``.

The GEMM work is cut into tiles (<= ``block_m`` rows of one expert) and the tiles into
*waves* (one gate_up + one down launch each, <= ``max_rows`` rows so the activation
workspace stays bounded). Resident experts share waves; staged experts get their own waves,
one expert per wave by default (the GPU waits for exactly that copy) or ``staged_group``
experts together (fewer, fuller launches).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

TILE_FIELDS = 4  # slot, first sorted row, rows, first workspace row


@dataclass(frozen=True)
class Wave:
    tile0: int
    n_tiles: int
    rows: int
    needs: int = -1  # staged experts 0..needs (LayerPlan.staged order) must be in VRAM first
    frees: tuple[int, ...] = ()  # staged experts read for the last time by this wave


@dataclass
class LayerPlan:
    counts: np.ndarray  # [E] pairs per expert
    offsets: np.ndarray  # [E + 1] first sorted row of each expert
    resident: list[int] = field(default_factory=list)
    staged: list[int] = field(default_factory=list)
    staged_slots: list[int] = field(default_factory=list)
    cpu: list[int] = field(default_factory=list)
    tiles: np.ndarray = field(default_factory=lambda: np.zeros((0, TILE_FIELDS), np.int32))
    waves: list[Wave] = field(default_factory=list)

    @property
    def gpu_rows(self) -> int:
        return int(sum(w.rows for w in self.waves))

    @property
    def cpu_rows(self) -> int:
        return int(sum(int(self.counts[e]) for e in self.cpu))

    def rows_of(self, e: int) -> tuple[int, int]:
        return int(self.offsets[e]), int(self.offsets[e + 1])


def _expert_tiles(first_row: int, count: int, slot: int, block_m: int) -> list[tuple[int, int, int]]:
    return [(slot, first_row + r, min(block_m, count - r)) for r in range(0, count, block_m)]


def _cut_waves(tiles: list[tuple[int, int, int, int]], max_rows: int, out_tiles: list[list[int]],
               out_waves: list[Wave]) -> None:
    """Append ``tiles`` (slot, first row, rows, staged index or -1) as waves of <= max_rows rows
    (at least one tile per wave), with the staged experts each wave needs and frees."""
    last_tile = {st: i for i, (_, _, _, st) in enumerate(tiles) if st >= 0}
    i = 0
    while i < len(tiles):
        tile0 = len(out_tiles)
        rows, needs, frees = 0, -1, []
        while i < len(tiles) and (rows == 0 or rows + tiles[i][2] <= max_rows):
            slot, r0, n, st = tiles[i]
            out_tiles.append([slot, r0, n, rows])
            rows += n
            if st >= 0:
                needs = max(needs, st)
                if last_tile[st] == i:
                    frees.append(st)
            i += 1
        out_waves.append(Wave(tile0, len(out_tiles) - tile0, rows, needs, tuple(frees)))


def plan_layer(counts: np.ndarray, table_row: np.ndarray, scratch_base: int, n_scratch: int, cpu_max: int,
               block_m: int, max_rows: int, staged_group: int = 1, cpu_set: set[int] | None = None) -> LayerPlan:
    """Split one layer's experts between slots, the CPU and staging; build tiles and waves.

    ``table_row[e]`` is the readable VRAM slot of expert e or -1 (engine/gpu/pool.py).
    ``cpu_set``: the non-resident experts the CPU computes (split.py's choice); None = those
    with at most ``cpu_max`` pairs.
    ``staged_group`` staged experts share waves (fewer, fuller launches; the wave waits for
    all of their copies); at most ``n_scratch``, since they occupy scratch slots together."""
    counts = np.asarray(counts, dtype=np.int64)
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    plan = LayerPlan(counts, offsets)
    resident_tiles: list[tuple[int, int, int, int]] = []
    staged_tiles: list[list[tuple[int, int, int, int]]] = []
    for e in np.flatnonzero(counts).tolist():
        n = int(counts[e])
        slot = int(table_row[e])
        if slot >= 0:
            plan.resident.append(e)
            resident_tiles += [(*t, -1) for t in _expert_tiles(int(offsets[e]), n, slot, block_m)]
        elif n_scratch <= 0 or (e in cpu_set if cpu_set is not None else n <= cpu_max):
            plan.cpu.append(e)
        else:
            i = len(plan.staged)
            s = scratch_base + i % n_scratch
            plan.staged.append(e)
            plan.staged_slots.append(s)
            staged_tiles.append([(*t, i) for t in _expert_tiles(int(offsets[e]), n, s, block_m)])
    tiles: list[list[int]] = []
    _cut_waves(resident_tiles, max_rows, tiles, plan.waves)
    group = max(1, min(staged_group, n_scratch))
    for g0 in range(0, len(staged_tiles), group):
        _cut_waves([t for st in staged_tiles[g0 : g0 + group] for t in st], max_rows, tiles, plan.waves)
    plan.tiles = np.asarray(tiles, dtype=np.int32).reshape(-1, TILE_FIELDS)
    return plan
