"""The engine interface every front end uses (GUI, API server, CLI).

``Engine.load(model_dir, settings)`` opens a checkpoint and picks a backend;
``engine.generate(conversation, params, cancel)`` renders the conversation in harmony,
reuses the K/V of the longest common token prefix with what the backend already holds,
processes only the new tokens, then samples and yields events (text per channel, tool
calls, progress) ending in exactly one :class:`Done`. It is a synchronous generator meant
to run on a worker thread; one generation runs at a time.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from tokenizers.decoders import DecodeStream

from .backend import Backend, ReferenceBackend
from .checkpoint import Checkpoint
from .config import ModelConfig
from .grammar.guide import HarmonyGuide
from .harmony import HarmonyStreamParser, render_conversation
from .sampling import Sampler
from .settings import EngineSettings
from .state_file import load_state, save_state
from .stops import StopMatcher
from .tokenizer import SpecialTokens, load_tokenizer
from .types import (
    CancelToken,
    Conversation,
    Done,
    Event,
    FinishReason,
    GenerationParams,
    Progress,
    PromptCancelled,
    Telemetry,
    TextDelta,
    ToolCallEvent,
    Usage,
)

if TYPE_CHECKING:
    import numpy as np

    from .grammar import CompiledConstraint

log = logging.getLogger(__name__)
LoadProgress = Callable[[str, float], None]


@dataclass(frozen=True)
class ModelInfo:
    name: str
    model_dir: Path
    config: ModelConfig
    fingerprint: str
    note: str = ""  # e.g. "random weights" for synthetic checkpoints
    backend_note: str = ""  # why a faster backend was not used, if it wasn't
    extra: dict[str, object] = field(default_factory=dict)


def _select_backend(ck: Checkpoint, settings: EngineSettings, progress: LoadProgress | None,
                    store_path: str | Path | None = None) -> tuple[Backend, str]:
    dtype = torch.bfloat16 if settings.dtype == "bfloat16" else torch.float32
    want = settings.backend
    note = ""
    if want in ("auto", "gpu"):
        try:
            from .gpu.backend import GpuBackend, GpuUnavailable  # type: ignore[import-not-found]
        except ImportError as exc:
            note = f"GPU backend not available ({exc}); using the CPU engine"
        else:
            try:
                return GpuBackend.create(ck, settings, progress=progress), ""
            except GpuUnavailable as exc:
                note = f"GPU not used: {exc}; using the CPU engine"
            except Exception as exc:  # a GPU bug or driver problem must not cost the user the engine
                log.exception("GPU backend failed to start")
                note = f"GPU backend failed to start ({type(exc).__name__}: {exc}); using the CPU engine"
        if note:
            log.warning(note)
    if want in ("auto", "gpu", "cpu"):
        try:
            from native.kernel import load_kernel

            from .native_attention import NativeAttention
            from .native_decode import NativeDecode
            from .native_linear import NativeLinear
            from .native_rows import NativeRows
            from .store.experts_cpu import native_experts_fn  # type: ignore[import-not-found]

            fn = native_experts_fn(ck, threads=settings.threads(), store_path=store_path,
                                   bf16_inputs=dtype == torch.bfloat16)
            kernel = load_kernel()
            return ReferenceBackend(ck, dtype, experts_fn=fn, name="cpu-native", native_linear=NativeLinear(kernel),
                                    native_attention=NativeAttention(kernel), native_rows=NativeRows(kernel),
                                    native_decode=NativeDecode(kernel)), note
        except Exception as exc:  # the extension may be missing or fail to load: fall back, say why
            msg = f"native CPU expert kernel unavailable ({exc}); using the PyTorch reference"
            log.warning(msg)
            note = f"{note}; {msg}" if note else msg
    return ReferenceBackend(ck, dtype), note


def _start_residency(ck: Checkpoint, backend: Backend, settings: EngineSettings):  # -> ResidencyManager | None
    """RAM residency for the expert bytes the CPU reads: warm-up, optional mlock, fault telemetry.
    The GPU backend manages its own (it knows the static slots); here the CPU engine's."""
    model = getattr(backend, "model", None)
    fn = getattr(model, "experts_fn", None)
    if fn is None:  # the pure reference dequantizes into its own cache; nothing to keep resident
        return None
    try:
        from .residency.manager import ResidencyManager

        store = getattr(getattr(fn, "__self__", None), "store", None)
        res = (ResidencyManager.for_store(store, settings) if store is not None
               else ResidencyManager.for_checkpoint(ck, settings))
        res.start()
        return res
    except Exception as exc:  # residency is an optimisation: never a reason to fail a load
        log.warning("RAM residency management unavailable: %s", exc)
        return None


class Engine:
    def __init__(self, ck: Checkpoint, settings: EngineSettings, backend: Backend, backend_note: str) -> None:
        self.ck = ck
        self.settings = settings
        self.backend = backend
        self.tokenizer, self.special = load_tokenizer(ck.model_dir)
        note = ""
        for label in ("SYNTHETIC.json", "DEMO.json"):  # written by neural synth / the demo recipe
            path = ck.model_dir / label
            if path.is_file():
                try:
                    note = str(json.loads(path.read_text())["note"])
                except (ValueError, KeyError, OSError):
                    note = "synthetic checkpoint"
                break
        self.info = ModelInfo(ck.model_dir.name, ck.model_dir, ck.config, ck.fingerprint(), note, backend_note)
        self._ids: list[int] = []  # tokens whose K/V the backend holds
        self._lock = threading.Lock()
        # prompts run here while generate() yields their progress; one thread, so a backend
        # always sees the same thread for its prompts
        self._prompt_thread = ThreadPoolExecutor(1, thread_name_prefix="neural-prompt")
        self._telemetry = Telemetry(state="ready", backend=backend.name, model_name=self.info.name,
                                    model_note=note, layers=ck.config.num_hidden_layers,
                                    experts_per_layer=ck.config.num_local_experts)
        backend.fill_telemetry(self._telemetry)
        existing = getattr(backend, "ram_residency", None)
        self.ram_residency = existing if existing is not None else _start_residency(ck, backend, settings)

    @classmethod
    def load(cls, model_dir: str | Path, settings: EngineSettings | None = None,
             progress: LoadProgress | None = None, store_path: str | Path | None = None) -> Engine:
        """``store_path``: the CPU kernel's expert store when it is not next to the checkpoint
        (the app keeps its stores in its data folder); checked against the checkpoint either way."""
        settings = settings or EngineSettings()
        if progress:
            progress("Opening checkpoint", 0.0)
        ck = Checkpoint.open(model_dir)
        load_tokenizer(ck.model_dir)  # fail early, before any heavy backend work
        backend, note = _select_backend(ck, settings, progress, store_path)
        prepare = getattr(backend, "prepare", None)  # the CPU engine's packed projections: here, not in a first prompt
        if prepare is not None:
            prepare(None if progress is None else
                    lambda i, n: progress(f"Preparing the CPU engine's projections ({i}/{n})", i / n))
        eng = cls(ck, settings, backend, note)
        if progress:
            progress("Ready", 1.0)
        return eng

    # ---- tokens ------------------------------------------------------------------------
    @property
    def config(self) -> ModelConfig:
        return self.ck.config

    def render(self, conv: Conversation) -> list[int]:
        return render_conversation(conv, self.tokenizer, self.special)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    @property
    def cached_ids(self) -> list[int]:
        return list(self._ids)

    def telemetry(self) -> Telemetry:
        t = self._telemetry
        self.backend.fill_telemetry(t)
        if self.ram_residency is not None:
            self.ram_residency.fill_telemetry(t)
        return t

    # ---- generation ----------------------------------------------------------------------
    def generate(self, conv: Conversation, params: GenerationParams,
                 cancel: CancelToken | None = None, guide: CompiledConstraint | None = None) -> Iterator[Event]:
        """``guide``: a constraint from ``engine.grammar.compile_constraint`` masking the answer's channel."""
        ids = self.render(conv)
        parser = HarmonyStreamParser(self.tokenizer, self.special)
        return self._run(ids, params, cancel, parser=parser, guide=guide)

    def complete(self, prompt: str | list[int], params: GenerationParams,
                 cancel: CancelToken | None = None) -> Iterator[Event]:
        """Raw completion: the prompt as text (special-token strings allowed) or ids."""
        ids = prompt if isinstance(prompt, list) else self.tokenizer.encode(prompt, add_special_tokens=True).ids
        return self._run(list(ids), params, cancel, parser=None)

    def prefill(self, ids: list[int], progress: Callable[[int, int], None] | None = None,
                cancel: CancelToken | None = None) -> tuple[torch.Tensor, int]:
        """Make the backend hold ``ids``; returns (logits of the last token, reused prefix length).
        A stop raises PromptCancelled with the engine holding the reused prefix."""
        common = self._reuse_prefix(ids)
        return self._forward_prompt(ids, common, progress, cancel), common

    def _reuse_prefix(self, ids: list[int]) -> int:
        """Rewind the backend to the longest prefix of ``ids`` it holds; returns its length."""
        if not ids:
            raise ValueError("empty prompt")
        if len(ids) >= self.settings.context:
            raise ValueError(f"prompt of {len(ids)} tokens does not fit the context of {self.settings.context}")
        common = 0
        for a, b in zip(self._ids, ids, strict=False):
            if a != b:
                break
            common += 1
        common = min(common, len(ids) - 1, self.backend.length)  # always recompute at least one token
        self.backend.truncate(common)
        self._ids = self._ids[:common]
        return common

    def _forward_prompt(self, ids: list[int], common: int, progress: Callable[[int, int], None] | None,
                        cancel: CancelToken | None) -> torch.Tensor:
        try:
            logits = self.backend.forward(ids[common:], progress, cancel)
        except BaseException:  # a stop or a failure: keep only K/V the backend still holds exactly
            n = min(common, self.backend.length)
            self.backend.truncate(n)
            self._ids = self._ids[:n]
            raise
        self._ids = list(ids)
        return logits

    def _prefill_live(self, ids: list[int], cancel: CancelToken,
                      tel: Telemetry) -> Generator[Progress, None, torch.Tensor]:
        """The prompt on the prompt thread while this generator yields its Progress events live.
        Closing the generator (a consumer that went away) stops the prompt and waits for it."""
        common = self._reuse_prefix(ids)
        tel.cached_tokens = common
        events: queue.SimpleQueue[Progress | None] = queue.SimpleQueue()
        stop = cancel.child()

        def on_progress(done: int, total: int) -> None:
            tel.prompt_done, tel.prompt_total = done, total
            events.put(Progress(done, total))

        def work() -> torch.Tensor:
            try:
                return self._forward_prompt(ids, common, on_progress, stop)
            finally:
                events.put(None)

        job = self._prompt_thread.submit(work)
        try:
            while (ev := events.get()) is not None:
                yield ev
        except BaseException:
            stop.cancel()
            with contextlib.suppress(BaseException):
                job.result()
            raise
        finally:
            tel.prompt_done = tel.prompt_total = 0
        return job.result()

    def _run(self, ids: list[int], params: GenerationParams, cancel: CancelToken | None,
             parser: HarmonyStreamParser | None, guide: CompiledConstraint | None = None) -> Iterator[Event]:
        cancel = cancel or CancelToken()
        res = self.ram_residency
        with self._lock, (res.computing() if res is not None else contextlib.nullcontext()):
            tel = self._telemetry
            tel.state = "generating"
            t0 = time.perf_counter()
            generated: list[int] = []
            finish: FinishReason = "length"
            cached = 0
            prompt_s = decode_s = 0.0
            error: str | None = None
            try:
                logits = yield from self._prefill_live(ids, cancel, tel)
                cached = tel.cached_tokens
                prompt_s = time.perf_counter() - t0
                tel.prompt_tps = (len(ids) - cached) / prompt_s if prompt_s > 0 else 0.0
                tel.cached_tokens = cached
                t1 = time.perf_counter()
                sampler = Sampler.from_params(params, prompt=ids)
                self.last_sampler = sampler  # its calls/seconds/fallbacks: neural bench decode reads them
                # the GPU backend hands its logits over where they are: no 201k-entry copy per token
                forward = getattr(self.backend, "forward_device", self.backend.forward)
                mask = HarmonyGuide(guide) if guide is not None else None
                stops = StopMatcher(params.stop)
                decoder = DecodeStream(skip_special_tokens=False) if parser is None else None
                raw_stop = {self.special.return_, self.special.call, self.special.endoftext}
                budget = min(params.max_tokens, self.settings.context - len(ids))
                while True:
                    if cancel.cancelled:
                        finish = "cancelled"
                        break
                    tok = sampler(mask.apply(logits) if mask is not None else logits)
                    if mask is not None:
                        mask.advance(tok)
                    generated.append(tok)
                    events: list[TextDelta | ToolCallEvent]
                    if parser is not None:
                        events = parser.feed(tok)
                    elif tok in raw_stop:
                        events = []
                    else:
                        piece = decoder.step(self.tokenizer, tok) if decoder else None
                        events = [TextDelta("final", piece)] if piece else []
                    done_now = False
                    for ev in events:
                        if isinstance(ev, TextDelta) and ev.channel == "final" and params.stop:
                            text = stops.push(ev.text)
                            if text:
                                yield TextDelta("final", text)
                            if stops.hit:
                                finish, done_now = "stop", True
                                break
                        else:
                            if isinstance(ev, ToolCallEvent):
                                finish = "tool_calls"
                            yield ev
                    if done_now:
                        break
                    if parser is not None and parser.stop_reason is not None:
                        finish = "tool_calls" if parser.stop_reason == "tool_calls" else "stop"
                        break
                    if parser is None and tok in raw_stop:
                        finish = "stop"
                        break
                    if len(generated) >= budget:
                        finish = "length"
                        break
                    if res is not None:
                        res.token_started()
                    logits = forward([tok])
                    if res is not None:
                        res.token_finished()
                    self._ids.append(tok)
                    decode_s = time.perf_counter() - t1
                    tel.decode_tps = (len(generated)) / decode_s if decode_s > 0 else 0.0
                    tel.tokens_generated += 1
                if parser is not None and finish != "stop":
                    for ev in parser.finish():
                        if isinstance(ev, ToolCallEvent):
                            finish = "tool_calls"
                        yield ev
                if params.stop and not stops.hit:
                    tail = stops.flush()
                    if tail:
                        yield TextDelta("final", tail)
                decode_s = time.perf_counter() - t1
            except PromptCancelled:  # stopped mid-prompt; the backend holds the reused prefix
                finish, cached = "cancelled", tel.cached_tokens
                prompt_s = time.perf_counter() - t0
            except Exception as exc:  # reported as an event: a front end must never lose its session
                log.exception("generation failed")
                finish, error = "error", f"{type(exc).__name__}: {exc}"
            finally:
                tel.state = "ready"
            usage = Usage(prompt_tokens=len(ids), cached_tokens=cached, completion_tokens=len(generated),
                          prompt_seconds=prompt_s, decode_seconds=decode_s)
            if usage.decode_tps:
                tel.decode_tps = usage.decode_tps
            yield Done(finish, usage, tuple(generated), error)

    def logits(self, ids: list[int]) -> np.ndarray:
        """fp32 logits [T, vocab] of a fresh forward pass over ``ids`` through this engine's backend
        (token by token, so every backend's decode path is what gets checked)."""
        import numpy as np

        with self._lock:
            self.backend.truncate(0)
            self._ids = []
            rows = [self.backend.forward([i]).float().numpy() for i in ids]
            self.backend.truncate(0)
            return np.stack(rows).astype(np.float32)

    # ---- state ---------------------------------------------------------------------------
    def save_state(self, path: str | Path) -> None:
        with self._lock:
            save_state(Path(path), self.info.fingerprint, self._ids[: self.backend.length],
                       self.backend.state_tensors())

    def restore_state(self, path: str | Path) -> bool:
        """Load a saved conversation state; False (and nothing changed) if missing or stale."""
        with self._lock:
            loaded = load_state(Path(path), self.info.fingerprint)
            if loaded is None:
                return False
            ids, tensors = loaded
            self.backend.load_state_tensors(tensors, len(ids))
            set_ids = getattr(self.backend, "set_ids", None)
            if set_ids is not None:  # the GPU ring re-runs from checkpoints and needs the ids
                set_ids(ids)
            self._ids = ids
            return True

    def reset(self) -> None:
        with self._lock:
            self.backend.truncate(0)
            self._ids = []

    def close(self) -> None:
        self._prompt_thread.shutdown(wait=True)
        if self.ram_residency is not None:
            self.ram_residency.close()
        self.backend.close()
        self.ck.close()


__all__ = ["Engine", "EngineSettings", "ModelInfo", "SpecialTokens"]
