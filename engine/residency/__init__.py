"""RAM residency of the expert store: fault telemetry, warm-up, locking, release policy, VRAM hygiene.

See docs/perf-residency.md for the method and the benchmark (bench/residency/residency_bench.py).
"""

from .budget import GIB, MemoryInfo, RamBudget, default_headroom, ram_advice
from .faults import FaultMeter, FaultSummary
from .lock import LockResult, ReleasePolicy, lock_hot, unlock
from .manager import ResidencyManager, ResidencyStats
from .os_memory import FaultCounts, OsCallError, read_faults
from .ranking import ExpertRanking, RankingError, WarmupPlan, ranking_path
from .regions import ExpertKey, Mapping, Region, checkpoint_regions, store_mapping, store_regions
from .resident import StoreResidency
from .vram import VramRelease, VramReport, release_unused_vram, vram_report
from .warmer import Warmer, WarmProgress, evict, prefetch

__all__ = [
    "GIB", "ExpertKey", "ExpertRanking", "FaultCounts", "FaultMeter", "FaultSummary", "LockResult", "Mapping",
    "MemoryInfo", "OsCallError", "RamBudget", "RankingError", "Region", "ReleasePolicy", "ResidencyManager",
    "ResidencyStats", "StoreResidency", "VramRelease", "VramReport", "WarmProgress", "Warmer", "WarmupPlan",
    "checkpoint_regions", "default_headroom", "evict", "lock_hot", "prefetch", "ram_advice", "ranking_path",
    "read_faults", "release_unused_vram", "store_mapping", "store_regions", "unlock", "vram_report",
]
