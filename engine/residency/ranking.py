"""Which experts to bring into RAM first: a calibration ranking and the warm-up plan built from it.

The ranking is routing counts per (layer, expert), gathered from real prompts and answers and
saved per model as JSON (keyed by the checkpoint fingerprint so a ranking never leaks onto a
different model). The plan orders the store's records: the static hot set first, then the
ranking by count, then everything else in file order (sequential reads are fastest), and keeps
the prefix that fits the RAM budget.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .regions import ExpertKey, Region

RANKING_FORMAT = "neural-expert-ranking"
RANKING_VERSION = 1


class RankingError(ValueError):
    """A ranking file is malformed or belongs to another model."""


class ExpertRanking:
    """Routing counts per (layer, expert)."""

    def __init__(self, counts: np.ndarray, fingerprint: str = "", tokens: int = 0) -> None:
        counts = np.asarray(counts, dtype=np.int64)
        if counts.ndim != 2:
            raise RankingError(f"counts must be [layers, experts], got shape {counts.shape}")
        if (counts < 0).any():
            raise RankingError("counts must be >= 0")
        self.counts = counts
        self.fingerprint = fingerprint
        self.tokens = tokens

    @classmethod
    def empty(cls, layers: int, experts: int, fingerprint: str = "") -> ExpertRanking:
        return cls(np.zeros((layers, experts), dtype=np.int64), fingerprint)

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.counts.shape[0]), int(self.counts.shape[1])

    def record(self, layer: int, experts: Iterable[int], weight: int = 1) -> None:
        """Count one token's routing at ``layer`` (``weight`` > 1 for prompt tokens batched together)."""
        for e in experts:
            self.counts[layer, int(e)] += weight

    def record_token(self, routed: Sequence[Iterable[int]]) -> None:
        """One token's top-k experts for every layer, ``routed[layer] = [e0, e1, ...]``."""
        for layer, experts in enumerate(routed):
            self.record(layer, experts)
        self.tokens += 1

    def order(self) -> list[ExpertKey]:
        """Experts seen at least once, most used first; ties by (layer, expert) so the order is stable."""
        flat = self.counts.reshape(-1)
        nz = np.flatnonzero(flat)
        # lexsort sorts by the last key first: count descending, then flat index ascending
        ranked = nz[np.lexsort((nz, -flat[nz]))]
        experts = self.counts.shape[1]
        return [(int(i) // experts, int(i) % experts) for i in ranked]

    def top(self, n: int) -> list[ExpertKey]:
        return self.order()[:n]

    # -- persistence ------------------------------------------------------------------------
    def to_json(self) -> dict[str, object]:
        return {"format": RANKING_FORMAT, "version": RANKING_VERSION, "fingerprint": self.fingerprint,
                "layers": self.shape[0], "experts": self.shape[1], "tokens": self.tokens,
                "counts": self.counts.tolist()}

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write atomically (temp file + rename) so a crash never leaves half a ranking."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(p.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), separators=(",", ":")))
        os.replace(tmp, p)
        return p

    @classmethod
    def from_json(cls, d: object, expect_fingerprint: str | None = None,
                  expect_shape: tuple[int, int] | None = None) -> ExpertRanking:
        if not isinstance(d, dict) or d.get("format") != RANKING_FORMAT:
            raise RankingError("not an expert ranking file")
        if d.get("version") != RANKING_VERSION:
            raise RankingError(f"unsupported ranking version {d.get('version')!r}")
        fp = str(d.get("fingerprint", ""))
        if expect_fingerprint is not None and fp != expect_fingerprint:
            raise RankingError(f"ranking is for model {fp!r}, not {expect_fingerprint!r}")
        try:
            counts = np.asarray(d["counts"], dtype=np.int64)
        except (KeyError, ValueError, TypeError) as exc:
            raise RankingError(f"bad counts: {exc}") from exc
        if counts.shape != (d.get("layers"), d.get("experts")):
            raise RankingError(f"counts shape {counts.shape} does not match layers/experts")
        if expect_shape is not None and counts.shape != expect_shape:
            raise RankingError(f"ranking shape {counts.shape} does not match the model {expect_shape}")
        return cls(counts, fp, int(d.get("tokens", 0)))

    @classmethod
    def load(cls, path: str | os.PathLike[str], expect_fingerprint: str | None = None,
             expect_shape: tuple[int, int] | None = None) -> ExpertRanking:
        try:
            d = json.loads(Path(path).read_text())
        except json.JSONDecodeError as exc:
            raise RankingError(f"{path}: not JSON ({exc})") from exc
        return cls.from_json(d, expect_fingerprint, expect_shape)

    @classmethod
    def load_or_none(cls, path: str | os.PathLike[str], expect_fingerprint: str | None = None,
                     expect_shape: tuple[int, int] | None = None) -> ExpertRanking | None:
        """The saved ranking, or None when missing or unusable (warm-up then uses file order)."""
        try:
            return cls.load(path, expect_fingerprint, expect_shape)
        except (OSError, RankingError):
            return None


def ranking_path(cache_dir: str | os.PathLike[str], fingerprint: str) -> Path:
    """Where a model's ranking lives: one JSON per checkpoint fingerprint."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in fingerprint) or "unknown"
    return Path(cache_dir) / f"expert-ranking-{safe}.json"


@dataclass(frozen=True)
class WarmupPlan:
    """Regions to warm, in order, and how the budget was spent."""

    regions: tuple[Region, ...]
    hot_count: int  # how many experts (keys) came from the hot set
    ranked_count: int  # ... from the calibration ranking
    rest_count: int  # ... from the rest of the store in file order
    budget_bytes: int
    store_bytes: int

    @property
    def planned_bytes(self) -> int:
        return sum(r.length for r in self.regions)

    @property
    def keys(self) -> list[ExpertKey]:
        return list(dict.fromkeys(r.key for r in self.regions))

    @classmethod
    def build(cls, regions: Sequence[Region], budget_bytes: int, hot: Iterable[ExpertKey] = (),
              ranking: ExpertRanking | None = None, exclude: Iterable[ExpertKey] = ()) -> WarmupPlan:
        """Hot set, then ranking, then the rest in file order, cut at the first record past the budget.

        ``exclude``: records that need no RAM (e.g. experts held in static VRAM slots)."""
        by_key: dict[ExpertKey, list[Region]] = {}
        for r in regions:  # a key may own several regions (e.g. one per tensor part)
            by_key.setdefault(r.key, []).append(r)
        skip = set(exclude)
        seen: set[ExpertKey] = set()
        sections: list[list[ExpertKey]] = [[], [], []]

        def take(section: int, keys: Iterable[ExpertKey]) -> None:
            for k in keys:
                k = (int(k[0]), int(k[1]))
                if k in seen or k in skip or k not in by_key:
                    continue
                seen.add(k)
                sections[section].append(k)

        take(0, hot)
        if ranking is not None:
            take(1, ranking.order())
        take(2, (r.key for r in sorted(regions, key=lambda r: r.offset)))

        chosen: list[Region] = []
        counts = [0, 0, 0]
        used = 0
        budget = max(0, int(budget_bytes))
        for s, section in enumerate(sections):
            for k in section:
                size = sum(r.length for r in by_key[k])
                if used + size > budget:
                    break
                used += size
                chosen.extend(by_key[k])
                counts[s] += 1
            else:
                continue
            break
        store = sum(r.length for k, rs in by_key.items() if k not in skip for r in rs)
        return cls(tuple(chosen), counts[0], counts[1], counts[2], budget, store)
