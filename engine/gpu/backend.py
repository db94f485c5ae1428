"""The hybrid GPU backend behind engine/session.py (see engine/backend.py for the protocol).

``GpuBackend.create(checkpoint, settings)`` raises :class:`GpuUnavailable` with a sentence
for the user when there is no CUDA device, the GPU is unsupported, Triton is missing, or the
VRAM plan does not fit; the session then falls back to the CPU engine. Decode runs through
:class:`~engine.gpu.decoder.Decoder`; prompts are fed token by token through the same path
prompts of more than one token go through the layer-major, expert-grouped prompt path
(:mod:`engine.gpu.prefill`), with the token-by-token path as its fallback.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from ..checkpoint import Checkpoint
from ..settings import EngineSettings
from ..types import CancelToken, PromptCancelled, Telemetry

log = logging.getLogger(__name__)
ProgressFn = Callable[[int, int], None]
LoadProgress = Callable[[str, float], None]
MAX_CHECKPOINTS = 8
# prompt-path warm-up blocks, run back to back from position 0: starts 0, 64, 101, 165 cover
# (start, length) multiple-of-16 or not in all four combinations
WARM_BLOCKS = (64, 37, 64, 37)
MIN_CAPABILITY = (8, 0)


class GpuUnavailable(RuntimeError):
    """The GPU backend cannot run here; the message says why (shown to the user)."""


def cache_dir() -> Path:
    base = os.environ.get("NEURAL_CACHE_DIR")
    if base is None:
        try:
            from platformdirs import user_cache_dir

            base = user_cache_dir("neural")
        except ImportError:
            base = str(Path.home() / ".cache" / "neural")
    return Path(base)


def hot_set_path(fingerprint: str) -> Path:
    return cache_dir() / f"hotset-{fingerprint}.npy"


def use_kernel_cache() -> None:
    """Keep Triton's compiled kernels in the app's cache folder (set before Triton compiles
    anything), so a fresh process loads them instead of compiling: the cold start pays no
    compilation after the first run. A TRITON_CACHE_DIR the user set wins."""
    os.environ.setdefault("TRITON_CACHE_DIR", str(cache_dir() / "triton"))


class GpuBackend:
    name = "gpu-hybrid"

    def __init__(self, ck: Checkpoint, settings: EngineSettings, device: torch.device, interpret: bool,
                 use_graphs: bool, progress: LoadProgress | None, prefer_native: bool,
                 hot_set_file: Path | None, prefault: bool = False) -> None:
        from .admission import AdmissionPolicy, AdmissionSettings, Residency
        from .budget import plan_vram
        from .core import GpuCore
        from .cpu_experts import make_miss_experts
        from .decoder import CudaCopier, Decoder, SyncCopier
        from .pool import SlotPool

        cfg = ck.config
        self.ck = ck
        self.settings = settings
        # engine/plan.py: what Preferences and doctor show (on CUDA: the lookahead slots too)
        self.plan = plan_vram(cfg, settings, cuda=device.type == "cuda")
        self.core = GpuCore(ck, self.plan, settings.context, settings.kv_ring, device, interpret=interpret,
                            progress=progress)
        adm = AdmissionSettings(settings.refresh_every, settings.refresh_m, settings.prefill_weight,
                                capture_buffers=max(1, min(16, settings.refresh_m)))
        sb = self.plan.slot_bytes
        self.capture = torch.zeros((adm.capture_buffers, sb), dtype=torch.uint8, pin_memory=self.core.cuda)
        capture_np = [self.capture[i].numpy() for i in range(adm.capture_buffers)]
        self.pool = SlotPool(self.plan.n_slots, 0, self.core.np_table)
        self.policy = AdmissionPolicy(cfg.num_hidden_layers, cfg.num_local_experts, adm)
        copier = CudaCopier(self.core, self.capture) if self.core.cuda else SyncCopier(self.core, self.capture)
        self.residency = Residency(self.pool, self.policy, copier, adm.capture_buffers)
        self.misses = make_miss_experts(ck, self.core.layout, settings.threads(), prefer_native)
        self.load_phases: dict[str, float] = {}  # seconds of load's longer steps (benches print them)
        self.lane_check: dict[str, float] = {}  # the copy lane's load-time measurement (copy_lane.py)
        if prefault:
            if progress is not None:
                progress("Mapping expert pages", 0.9)
            self.load_phases["prefault"] = self.misses.prefault()
            log.info("expert pages touched in %.1f s", self.load_phases["prefault"])
        self.decoder = Decoder(self.core, self.misses, self.pool, self.policy, self.residency, capture_np)
        from .prefill.runner import PrefillRunner

        self.prefill = PrefillRunner(self.core, ck, settings, prefer_native=prefer_native)
        if settings.warm_prompt and settings.gpu_prefill and self.core.cuda:
            self._warm_prompt_path(progress)
        self.ids: list[int] = []
        self.checkpoints: list = []
        self.hot_set_file = hot_set_file
        self.hot_set_installed = False
        if hot_set_file is not None and hot_set_file.is_file():
            try:
                counts = np.load(hot_set_file)
                if counts.shape == self.policy.counts.shape:
                    self.policy.counts[:] = counts
                    self.install_hot_set()
            except (OSError, ValueError) as exc:
                log.warning("ignoring unreadable hot set %s (%s)", hot_set_file, exc)
        if use_graphs and self.core.cuda:
            if progress is not None:
                progress("Compiling and capturing GPU graphs", 0.95)
            self.core.kern.set_poll(settings.early_poll_ns, self.core.cuda)
            self.core.capture_graphs(early=settings.early_launch)
            self.decoder.early_launch = settings.early_launch
            self.decoder.lane_early = settings.early_poll_ns > 0
            self.load_phases.update(self.core.capture_s)
        self.decoder.lane_beside = settings.decode_lane_beside
        if settings.decode_lane != "off":
            self._start_lane()
        if settings.decode_native_layer and self.core.cuda:
            self._start_native_layer()
        self.ram_residency = self._start_ram_residency()
        self.residency.ram = self.ram_residency  # admissions and evictions change what the CPU reads
        log.info("GPU backend: %s; CPU misses: %s", self.plan.describe(), self.misses.name)

    def _warm_prompt_path(self, progress: LoadProgress | None) -> None:
        """Cold start: compile (or load from Triton's disk cache) the prompt kernels for both
        length classes Triton specialises on, touch the CPU kernel's team and the staging ring,
        then measure this machine's CPU-kernel and packing rates for the prompt split. Nothing
        is held afterwards (the rows written are beyond length 0)."""
        t0 = time.perf_counter()
        if progress is not None:
            progress("Compiling the prompt kernels (cached on disk after the first run)", 0.96)
        # Triton specialises the attention kernel on whether the block's length and its start
        # position are multiples of 16: one run of each pair, so a follow-up (start > 0) never
        # compiles inside a user's request (it cost 1.35 s of attention, MEASURED on the H200)
        at = 0
        for n in WARM_BLOCKS:
            if at + n > self.settings.context:  # a tiny context: its follow-ups compile when they come
                break
            self.prefill.run([0] * n, at)
            at += n
        self.prefill.last = None
        if self.prefill.direct is not None:
            if progress is not None:
                progress("Locking the checkpoint's pages for direct copies to the GPU", 0.965)
            ready = self.prefill.wait_direct(30.0)  # a cold disk cache: later layers use the ring until ready
            log.info("direct expert copies: %d of %d layers (%.1f GiB locked%s)", ready, len(self.prefill.direct.spans),
                     self.prefill.direct.locked_bytes / 2**30,
                     f"; {self.prefill.direct.error}" if self.prefill.direct.error else "")
        if self.settings.prompt_split == "auto":  # the rates matter only to the measured split
            if progress is not None:
                progress("Measuring this machine's CPU and copy rates for prompts", 0.97)
            self.prefill.calibrate()
        self.load_phases["warm_prompt"] = time.perf_counter() - t0
        log.info("prompt path warmed in %.2f s", self.load_phases["warm_prompt"])

    def _start_lane(self) -> None:
        """The decode copy lane (copy_lane.py) where direct copies exist: "auto" keeps it if the load-time check
        says it pays on this machine, "on" keeps it anyway."""
        from .copy_lane import WIDTH, CopyLane

        direct = self.prefill.direct
        if not self.core.cuda or direct is None or self.plan.n_scratch < 2 * WIDTH:
            return
        t0 = time.perf_counter()
        try:
            native = getattr(getattr(self.misses, "experts", None), "kernel", None)  # NativeMisses' kernel
            lane = CopyLane(self.core, direct,
                            split_units=self.settings.decode_lane_split and self.plan.n_scratch >= 2 * WIDTH + 2,
                            native=native if self.settings.decode_lane_native else None,
                            pull=self.settings.decode_lane_pull, batch=self.settings.decode_lane_batch)
            lane.capture()
            lane.verify_batch()  # decode_lane_batch: back to the 2-D copies where the batch fails its check
            pays, info = lane.worth_it(self.misses)
        except Exception:  # a failed capture or copy: decode as before
            log.exception("decode copy lane unavailable")
            return
        self.load_phases["lane_check"] = time.perf_counter() - t0
        self.lane_check = info
        if pays or self.settings.decode_lane == "on":
            self.decoder.lane = lane
        log.info("decode copy lane %s: %s", "on" if self.decoder.lane is not None else "off", info or "no check")

    def _start_native_layer(self) -> None:
        """A decode layer's host work in one native call (native_layer.py, settings.decode_native_layer): beside the
        copy lane (plain launches), or without it for the early launch, where the kernel and the runtime allow."""
        from .native_layer import NativeLayer, early_runtime_for, runtime_for

        lane = self.decoder.lane
        experts = getattr(self.misses, "experts", None)
        if lane is None and not self.settings.decode_native_early:
            log.info("decode native layer off: no copy lane (decode_native_early is off)")
            return
        if lane is not None:
            rt = runtime_for(self.core, lane, self.settings.decode_front_end_wait) if lane.native is not None else None
        else:
            rt = early_runtime_for(self.core) if self.decoder.early_launch else None
        if rt is None or experts is None:
            log.info("decode native layer off: no native kernel, bare graph launches or runtime functions")
            return
        self.decoder.native_layer = NativeLayer(self.core, experts, lane, rt, self.pool.n_static,
                                                self.policy.wanted_mask())

    def _start_ram_residency(self):  # -> ResidencyManager | None
        """RAM residency for the experts the CPU reads (the misses): warm-up in the order of the
        saved routing counts (the calibration ranking), lock/telemetry per the settings. The static
        hot set lives in VRAM, so its pages are excluded from the RAM budget. The engine picks
        this up as its ``ram_residency`` (pausing warm-up while computing, faults per token)."""
        try:
            from ..residency.manager import ResidencyManager
            from ..residency.ranking import ExpertRanking

            static = [s.key for s in self.pool.slots if s.static and s.key is not None]
            counts = self.policy.counts
            ranking = ExpertRanking(counts, self.ck.fingerprint()) if counts.any() else None
            res = ResidencyManager.for_checkpoint(self.ck, self.settings, ranking=ranking, exclude=static)
            res.start()
            return res
        except Exception as exc:  # residency is an optimisation: never a reason to fail a load
            log.warning("RAM residency management unavailable: %s", exc)
            return None

    # ---- construction ---------------------------------------------------------------------
    @classmethod
    def create(cls, ck: Checkpoint, settings: EngineSettings, progress: LoadProgress | None = None, *,
               interpret: bool = False, use_graphs: bool = True, prefer_native: bool = True,
               hot_set_file: Path | bool | None = True, prefault: bool = False) -> GpuBackend:
        """Build the backend or raise GpuUnavailable. ``interpret`` runs the same kernels on the
        CPU under TRITON_INTERPRET=1 (tests only). ``prefault`` touches every expert page of the
        checkpoint mapping once (one read of the expert bytes) so decode takes no first-touch
        page faults."""
        if interpret:
            if os.environ.get("TRITON_INTERPRET") != "1":
                raise GpuUnavailable("interpret mode needs TRITON_INTERPRET=1 before Triton is imported")
            device = torch.device("cpu")
        else:
            if not torch.cuda.is_available():
                raise GpuUnavailable("no CUDA device (PyTorch was built without CUDA or no NVIDIA GPU is visible)")
            cap = torch.cuda.get_device_capability()
            if cap < MIN_CAPABILITY:
                raise GpuUnavailable(f"{torch.cuda.get_device_name()} (compute capability {cap[0]}.{cap[1]}) is "
                                     f"not supported; the GPU path needs {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} "
                                     "or newer (RTX 30xx and later)")
            device = torch.device("cuda")
        use_kernel_cache()
        try:
            import triton  # noqa: F401
        except ImportError as exc:
            raise GpuUnavailable(f"Triton is not installed ({exc})") from exc
        from .budget import PlanError, plan_vram

        try:
            plan = plan_vram(ck.config, settings, cuda=device.type == "cuda")
        except PlanError as exc:
            raise GpuUnavailable(str(exc)) from exc
        if device.type == "cuda":
            free, _total = torch.cuda.mem_get_info()
            need = plan.total - plan.overhead
            if need > free:
                raise GpuUnavailable(f"the GPU has {free / 2**30:.2f} GiB free, the plan needs {need / 2**30:.2f} GiB "
                                     f"({plan.describe()}); lower vram_budget_gib or pool_gib")
        path = hot_set_path(ck.fingerprint()) if hot_set_file is True else (hot_set_file or None)
        try:
            return cls(ck, settings, device, interpret, use_graphs, progress, prefer_native, path, prefault)
        except torch.cuda.OutOfMemoryError as exc:
            torch.cuda.empty_cache()
            raise GpuUnavailable(f"out of GPU memory while loading ({exc})") from exc
        except ValueError as exc:  # e.g. kv_ring below the window
            raise GpuUnavailable(str(exc)) from exc

    # ---- residency --------------------------------------------------------------------------
    def install_hot_set(self, keys: list[tuple[int, int]] | None = None) -> int:
        """Fill the static slots with the hot set (default: ranked from the routing counts so far)
        and turn the rest of the pool adaptive. Returns the number of static experts."""
        from .admission import rank_hot_set
        from .pool import SlotPool
        from .prefill.direct import plan_copies, run_copies

        self.drain()
        if keys is None:
            keys = rank_hot_set(self.policy.counts, self.plan.n_static)
        keys = keys[: self.plan.n_static]
        self.pool = SlotPool(self.plan.n_slots, len(keys), self.core.np_table)
        self.residency.pool = self.pool
        self.decoder.pool = self.pool
        lay, core = self.core.layout, self.core
        nbuf = self.capture.shape[0]
        # experts of layers registered for direct prompt copies go straight from the mapping
        # (the same bytes as packing them, direct.py), the rest through the capture buffers
        prefill = getattr(self, "prefill", None)  # None while __init__ installs a saved hot set
        direct = prefill.direct if prefill is not None and core.cuda else None
        for start in range(0, len(keys), nbuf):
            batch = keys[start : start + nbuf]
            mapped = [direct is not None and direct.ready(layer) for layer, _ in batch]
            for j, (layer, e) in enumerate(batch):
                if not mapped[j]:
                    lay.pack_expert(self.ck, layer, e, self.capture[j].numpy())
            for j, key in enumerate(batch):
                slot = start + j
                self.pool.begin_copy(slot, key)
                if mapped[j]:
                    assert direct is not None
                    run_copies(direct, core.pool, plan_copies(direct, key[0], [key[1]], [slot], self.plan.slot_bytes))
                else:
                    core.slot_view(slot).copy_(self.capture[j], non_blocking=core.cuda)
            if core.cuda:
                torch.cuda.synchronize()
            for j in range(len(batch)):
                self.pool.finish_copy(start + j)
        self.hot_set_installed = True
        res = getattr(self, "ram_residency", None)  # None while __init__ installs a saved hot set
        if res is not None and keys:
            res.experts_released(keys)  # in VRAM for good: the CPU will not read them
        self._plan_fill()  # the new pool's adaptive slots are all free
        return len(keys)

    def save_hot_set(self) -> None:
        if self.hot_set_file is None:
            return
        try:
            self.hot_set_file.parent.mkdir(parents=True, exist_ok=True)
            np.save(self.hot_set_file, self.policy.counts)
        except OSError as exc:
            log.warning("could not save the hot set to %s (%s)", self.hot_set_file, exc)

    def drain(self) -> None:
        """Wait for admission copies in flight and flip their slots."""
        if self.core.cuda:
            torch.cuda.synchronize()
        self.residency.poll()

    # ---- Backend protocol -------------------------------------------------------------------
    @property
    def length(self) -> int:
        return len(self.ids)

    def truncate(self, n: int) -> None:
        n = max(0, n)
        if n >= len(self.ids):
            return
        kv = self.core.kv
        self.checkpoints = [cp for cp in self.checkpoints if cp.length <= n]
        if n >= kv.min_rewind(len(self.ids)):
            del self.ids[n:]
            return
        keep = self.ids[:n]
        if any(t < 0 for t in keep):
            raise ValueError("cannot rewind a loaded state this far without its token ids (call set_ids first)")
        cp = self.checkpoints[-1] if self.checkpoints else None  # the latest ring checkpoint at or before n
        start = 0
        if cp is not None:
            kv.restore(cp)
            start = cp.length
        self.ids = keep[:start]
        if start < n:  # re-run what the rings lost since the checkpoint
            if n - start > 1:
                self._prefill(keep[start:n])
            else:
                self._run(keep[start:n])

    def set_ids(self, ids: list[int]) -> None:
        """Tell the backend which tokens a loaded state holds (lets truncate re-run from a checkpoint)."""
        if len(ids) != len(self.ids):
            raise ValueError(f"{len(ids)} ids for a state of {len(self.ids)} tokens")
        self.ids = [int(t) for t in ids]

    def _run(self, ids: list[int], progress: ProgressFn | None = None, cancel: CancelToken | None = None) -> None:
        w = self.policy.prompt_weight(len(ids)) if len(ids) > 1 else 1.0
        start = len(self.ids)
        for j, tok in enumerate(ids):
            if cancel is not None and cancel.cancelled:
                self.truncate(start)  # the ring checkpoints make the rewind exact
                cancel.check()
            pos = len(self.ids)
            if pos >= self.settings.context:
                raise ValueError(f"context of {self.settings.context} tokens is full")
            self.decoder.step(int(tok), pos, prompt_weight=w)
            self.ids.append(int(tok))
            if progress is not None and (j + 1 == len(ids) or (j + 1) % 16 == 0):
                progress(j + 1, len(ids))

    def _prefill(self, ids: list[int], progress: ProgressFn | None = None,
                 cancel: CancelToken | None = None) -> torch.Tensor:
        """A prompt through the layer-major path; on failure, token by token (slow, correct).
        A stop (PromptCancelled) restores the sliding rings as they were and keeps the held tokens."""
        start = len(self.ids)
        self.residency.poll()  # flip admissions that have landed: more experts resident
        # the prompt overwrites ring rows of positions before it: a stop must put them back
        before = self.core.kv.checkpoint(start) if cancel is not None and self.core.kv.sliding else None
        try:
            logits = self.prefill.run(ids, start, progress, cancel=cancel)
        except PromptCancelled:
            if before is not None:
                self.core.kv.restore(before)
            raise
        except ValueError:
            self.ids, self.checkpoints = [], []  # cache and rings hold part of the prompt
            raise
        except Exception:
            history = self.ids + [int(t) for t in ids]
            self.ids, self.checkpoints = [], []
            if any(t < 0 for t in history):
                raise
            log.exception("GPU prompt path failed; reprocessing %d tokens one by one", len(history))
            self._run(history, progress)
            return self.core.logits.to("cpu", copy=True)
        self.ids.extend(int(t) for t in ids)
        if self.decoder.lane is not None:
            self.decoder.lane.after_prompt()  # its copies overwrite scratch slots the prompt's GEMMs read
        assert self.prefill.last is not None
        self.policy.observe_prompt(self.prefill.last.routing)  # prompt routing counts toward admission
        self._plan_fill()
        self.core.logits.copy_(logits.to(self.core.logits.device))  # as after a decode step
        return logits

    def forward(self, ids: list[int], progress: ProgressFn | None = None,
                cancel: CancelToken | None = None) -> torch.Tensor:
        if not ids:
            raise ValueError("forward needs at least one token")
        if len(ids) > 1 and self.settings.gpu_prefill:  # False: token by token (checks)
            logits = self._prefill(ids, progress, cancel)
        else:
            self._run(ids, progress, cancel)
            logits = None
        if len(ids) > 1 and self.core.kv.sliding:
            self.checkpoints.append(self.core.kv.checkpoint(len(self.ids)))
            self.checkpoints = self.checkpoints[-MAX_CHECKPOINTS:]
        if len(ids) == 1:  # never inside a prompt: the user is waiting for its first token
            self._hot_set_due()
        return logits if logits is not None else self.core.logits.to("cpu", copy=True)

    def forward_device(self, ids: list[int]) -> torch.Tensor:
        """``forward`` for the decode loop: a single token's fp32 logits stay on the device (no
        201k-entry copy per token; engine/sampling.py samples them where they are). The tensor is
        the core's buffer: valid until the next step."""
        if len(ids) != 1:
            return self.forward(ids)
        self._run(ids)
        self._hot_set_due()
        return self.core.logits

    def _plan_fill(self) -> None:
        """Aim the adaptive slots at the last prompt's final tokens (Residency.plan_fill)."""
        last = self.prefill.last if getattr(self, "prefill", None) is not None else None
        if last is not None:
            n = self.residency.plan_fill(last.routing, self.settings.fill_tokens)
            log.debug("fill set: %d experts from the prompt's last %d tokens", n, self.settings.fill_tokens)

    def _hot_set_due(self) -> None:
        """A process with no saved hot set ranks one from what the model has routed so far, at
        the first decode step after 64 tokens: installing it copies gigabytes into VRAM (0.7 s
        of a first-ever prompt's TTFT when it ran inside the prompt, MEASURED on the H200)."""
        if not self.hot_set_installed and self.plan.n_static and len(self.ids) >= 64:
            self.install_hot_set()
            self.save_hot_set()

    def sample_next(self, token: int, temperature: float = 0.0, seed: int = 0) -> int:
        """Process ``token`` and sample the next one inside the tail graph (greedy at 0)."""
        pos = len(self.ids)
        out = self.decoder.step(int(token), pos, temperature=temperature, seed=seed)
        self.ids.append(int(token))
        return out

    def fill_telemetry(self, t: Telemetry) -> None:
        st = self.decoder.stats
        t.backend = f"{self.name} ({self.misses.name})"
        t.slots = self.pool.occupancy()
        t.slot_hits = [[float(x) for x in row] for row in st.per_layer_kinds]
        t.vram_hit_rate = st.hits / st.routed if st.routed else 0.0
        t.phases_ms = st.phases_ms()
        if st.wall > 0:
            t.decode_tps = st.tokens / st.wall
        last = self.prefill.last
        if last is not None and last.stats.tokens_per_s:
            t.prompt_tps = last.stats.tokens_per_s
        if self.core.cuda:
            t.vram_used_bytes = int(torch.cuda.memory_allocated())
            t.vram_reserved_bytes = int(torch.cuda.memory_reserved())

    def state_tensors(self) -> dict[str, torch.Tensor]:
        self.drain()
        return self.core.kv.export(len(self.ids))

    def load_state_tensors(self, tensors: dict[str, torch.Tensor], length: int) -> None:
        self.core.kv.load(tensors, length)
        self.ids = [-1] * length  # unknown until set_ids(); only needed to re-run past a checkpoint
        self.checkpoints = [self.core.kv.checkpoint(length)] if self.core.kv.sliding else []

    def close(self) -> None:
        if self.ram_residency is not None:
            self.ram_residency.close()  # idempotent: the engine may have closed it already
        self.prefill.close()
        self.drain()
        if self.hot_set_installed:
            self.save_hot_set()
        self.ids = []
        self.checkpoints = []
