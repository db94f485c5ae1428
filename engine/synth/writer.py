"""Writing synthetic checkpoints: the folder, the sharding, and routing variants that share
expert bytes with an existing checkpoint.

Sharding: when the tensors do not fit in one ``model.safetensors``, the tensors a routing
mode changes (embeddings and every router, ~1.2 GB at 120b shape) form shard 0 on their own
and every other tensor (experts, attention, norms, lm_head) is packed in layer order into the
following shards. A routing variant then rewrites shard 0 and hard-links the rest.
Shards are written by ``jobs`` threads; every tensor depends only on the seed and its name,
so the bytes do not depend on the number of threads.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ..checkpoint import INDEX_NAME, SINGLE_NAME, Checkpoint, expected_tensors
from ..config import ModelConfig
from ..safetensors_io import DTYPES, CheckpointError, SafetensorsFile, encode_header
from ..tokenizer import build_synthetic_tokenizer
from .calibrated import CalibratedTables
from .routing import DriftTables, RoutingSpec, token_topics
from .shapes import SynthShape
from .tensors import Chunks, _Fast, is_routing_tensor, producer

log = logging.getLogger(__name__)
GENERATOR = 2  # bumped when the bytes a (seed, shape, routing, fast) produces change
NOTE = "random weights (synthetic checkpoint written by neural synth)"
SMALL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")
COPY_CHUNK = 64 << 20


@dataclass(frozen=True)
class _Tensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    chunks: Callable[[], Chunks]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * DTYPES[self.dtype][1]


def _write_shard(path: Path, tensors: list[_Tensor], tick: Callable[[int], None]) -> None:
    """One safetensors file, streamed chunk by chunk (temp file, then rename: a hard-linked
    file at ``path`` is replaced, never written through)."""
    head, _ = encode_header(((t.name, t.dtype, t.shape, t.nbytes) for t in tensors), {"format": "pt"})
    tmp = path.with_name(path.name + ".partial")
    with open(tmp, "wb") as f:
        f.write(head)
        for t in tensors:
            done = 0
            for chunk in t.chunks():
                data = np.ascontiguousarray(chunk).reshape(-1).view(np.uint8)
                f.write(data.data)
                done += data.nbytes
                tick(data.nbytes)
            if done != t.nbytes:
                raise ValueError(f"{t.name}: produced {done} B, expected {t.nbytes} B")
    os.replace(tmp, path)


def _shard_names(n: int) -> list[str]:
    return [SINGLE_NAME] if n == 1 else [f"model-{k:05d}-of-{n - 1:05d}.safetensors" for k in range(n)]


def _plan(tensors: list[_Tensor], max_shard_bytes: int) -> list[list[_Tensor]]:
    if sum(t.nbytes for t in tensors) <= max_shard_bytes:
        return [tensors]
    shards = [[t for t in tensors if is_routing_tensor(t.name)]]
    size = max_shard_bytes  # start a new shard at the first other tensor
    for t in tensors:
        if is_routing_tensor(t.name):
            continue
        if size + t.nbytes > max_shard_bytes and size:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += t.nbytes
    return shards


class _Progress:
    def __init__(self, total: int, progress: Callable[[int, int], None] | None) -> None:
        self.total, self.done, self.progress = total, 0, progress
        self.lock = threading.Lock()

    def __call__(self, n: int) -> None:
        with self.lock:
            self.done += n
            if self.progress is not None:
                self.progress(self.done, self.total)


def _run(jobs: int, work: list[Callable[[], None]]) -> None:
    if jobs <= 1 or len(work) <= 1:
        for w in work:
            w()
        return
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="synth") as pool:
        for fut in [pool.submit(w) for w in work]:
            fut.result()


def default_jobs() -> int:
    return max(1, min(8, os.cpu_count() or 1))


def _tensors(cfg: ModelConfig, shape: SynthShape, seed: int, routing: RoutingSpec, fast: bool,
             texts: list[str], only: Callable[[str], bool] = lambda n: True) -> list[_Tensor]:
    drift: DriftTables | CalibratedTables | None = None
    if routing.mode == "drift":
        drift = DriftTables(routing, seed, shape, token_topics(texts, shape.vocab_size))
    elif routing.mode == "calibrated":
        drift = CalibratedTables(seed, shape)
    pool = _Fast(seed) if fast else None
    return [_Tensor(n, dt, shp, producer(n, dt, shp, cfg, seed, routing, drift, pool))
            for n, (dt, shp) in expected_tensors(cfg).items() if only(n)]


def _token_texts(tok: Any, vocab_size: int) -> list[str]:
    n = min(vocab_size, tok.get_vocab_size())
    return list(tok.decode_batch([[i] for i in range(n)], skip_special_tokens=True))


def _synthetic_json(shape: SynthShape, seed: int, routing: RoutingSpec, fast: bool,
                    extra: dict[str, Any] | None = None) -> str:
    meta: dict[str, Any] = {"note": NOTE, "seed": seed, "skew": routing.skew, "fast": fast,
                            "routing": routing.params(shape),
                            "generator": GENERATOR}
    meta.update(extra or {})
    meta["shape"] = asdict(shape)
    return json.dumps(meta, indent=2)


def _clear(out: Path) -> None:
    for stale in [*out.glob("model*.safetensors"), *out.glob("model*.safetensors.partial"), out / INDEX_NAME]:
        stale.unlink(missing_ok=True)


def uses_o200k(shape: SynthShape) -> bool:
    from .o200k import VOCAB_SIZE

    return shape.tokenizer == "o200k" and shape.vocab_size == VOCAB_SIZE


def _resolve_tokenizer(shape: SynthShape) -> SynthShape:
    """``shape`` with the tokenizer it really gets (SYNTHETIC.json records that one): the real
    o200k when the vocabulary is its 201,088 ids and the cache folder can be had, else the
    synthetic one — with a warning when o200k was asked for (a machine without quicktok-v1 /
    transformers and no ``NEURAL_O200K_DIR``: prompts then count ~2.8x the real tokens)."""
    if shape.tokenizer != "o200k":
        return shape
    if not uses_o200k(shape):
        return replace(shape, tokenizer="synthetic")
    from .o200k import O200kError, ensure_o200k

    try:
        ensure_o200k()
    except O200kError as exc:
        log.warning("real tokenizer unavailable (%s): writing the synthetic one", exc)
        return replace(shape, tokenizer="synthetic")
    return shape


def _write_tokenizer(shape: SynthShape, out: Path) -> tuple[Callable[[str], int], Callable[[], Any]]:
    """``tokenizer.json`` for ``shape`` in ``out``; returns (special token → id, the tokenizer).
    The real o200k_harmony file is copied from its cache folder (built there once, see
    engine/synth/o200k.py) and only parsed when asked for (drift routing): that takes seconds."""
    if uses_o200k(shape):
        from tokenizers import Tokenizer

        from .o200k import N_RANKS, O200K_HARMONY_SPECIALS, tokenizer_json_path

        src = tokenizer_json_path()
        shutil.copyfile(src, out / "tokenizer.json")
        return (lambda s: N_RANKS + O200K_HARMONY_SPECIALS.index(s)), (lambda: Tokenizer.from_file(str(src)))
    tok = build_synthetic_tokenizer(shape.vocab_size)
    tok.save(str(out / "tokenizer.json"))

    def special_id(s: str) -> int:
        i = tok.token_to_id(s)
        assert i is not None, s
        return int(i)

    return special_id, (lambda: tok)


def write_synthetic_checkpoint(out_dir: str | Path, shape: SynthShape, seed: int = 0, skew: float | None = None,
                               max_shard_bytes: int = 2 << 30, fast: bool = False,
                               progress: Callable[[int, int], None] | None = None,
                               routing: str | RoutingSpec | None = None, jobs: int | None = None) -> Path:
    """Write a complete HF-layout gpt-oss folder; returns its path.

    ``routing`` is ``uniform``, ``static`` or ``drift`` (see :mod:`engine.synth.routing`);
    left out, ``skew`` > 0 means static and 0 uniform. ``progress(done_bytes, total_bytes)``
    is called as data is written.
    """
    spec = routing if isinstance(routing, RoutingSpec) else RoutingSpec.resolve(routing, skew)
    shape = _resolve_tokenizer(shape)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cdict = shape.config_dict()
    cfg = ModelConfig.from_dict(cdict)
    special_id, tokenizer = _write_tokenizer(shape, out)
    (out / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>",
        "tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
    }, indent=2))
    ret, call, eot = (special_id(s) for s in ("<|return|>", "<|call|>", "<|endoftext|>"))
    cdict["eos_token_id"] = ret
    cdict["pad_token_id"] = eot
    (out / "config.json").write_text(json.dumps(cdict, indent=2))
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": special_id("<|startoftext|>"), "eos_token_id": [ret, eot, call],
         "pad_token_id": eot, "do_sample": True}, indent=2))
    (out / "SYNTHETIC.json").write_text(_synthetic_json(shape, seed, spec, fast))

    texts = _token_texts(tokenizer(), shape.vocab_size) if spec.mode == "drift" else []
    tensors = _tensors(cfg, shape, seed, spec, fast, texts)
    shards = _plan(tensors, max_shard_bytes)
    names = _shard_names(len(shards))
    tick = _Progress(sum(t.nbytes for t in tensors), progress)
    _clear(out)
    _run(jobs or default_jobs(), [partial(_write_shard, out / nm, g, tick)
                                  for nm, g in zip(names, shards, strict=True)])
    if len(shards) > 1:
        weight_map = {t.name: nm for nm, g in zip(names, shards, strict=True) for t in g}
        (out / INDEX_NAME).write_text(json.dumps({"metadata": {"total_size": tick.total},
                                                  "weight_map": weight_map}, indent=2))
    return out


# ---- routing variants ---------------------------------------------------------------------------
@dataclass
class VariantReport:
    out: Path
    routing: RoutingSpec
    linked: list[str]  # shard files hard-linked to the source's
    copied: list[str]  # shard files copied byte for byte (no hard link possible)
    rewritten: list[str]  # shard files written anew (they hold routing tensors)
    shared_bytes: int  # bytes of linked + copied shards
    written_bytes: int


def _source_chunks(f: SafetensorsFile, name: str) -> Callable[[], Chunks]:
    def chunks() -> Iterator[np.ndarray]:
        info = f.tensors[name]
        data = f._mapped()
        for a in range(info.start, info.end, COPY_CHUNK):
            yield data[a : min(a + COPY_CHUNK, info.end)]
    return chunks


def _link_or_copy(src: Path, dst: Path) -> bool:
    """Hard link, else copy; True when linked."""
    try:
        os.link(src, dst)
        return True
    except OSError:
        shutil.copyfile(src, dst)
        return False


def read_synthetic_meta(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "SYNTHETIC.json"
    try:
        meta = json.loads(path.read_text())
        if not isinstance(meta, dict):
            raise TypeError("not a JSON object")
        SynthShape(**meta["shape"])
        int(meta["seed"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{path}: not a synthetic checkpoint written by neural synth ({exc})") from exc
    return meta


def source_routing(meta: dict[str, Any]) -> RoutingSpec:
    r = meta.get("routing")
    if isinstance(r, dict):
        return RoutingSpec(str(r["mode"]), float(r["skew"]))
    return RoutingSpec.resolve(None, float(meta.get("skew", 0.0)))  # written before routing modes


def write_routing_variant(source: str | Path, out_dir: str | Path, routing: RoutingSpec, jobs: int | None = None,
                          progress: Callable[[int, int], None] | None = None) -> VariantReport:
    """A copy of the synthetic checkpoint ``source`` with another routing: shard files holding
    no routing tensor are hard-linked (copied where links are impossible, e.g. across file
    systems), shards holding any are rewritten with the new routing tensors and the source's
    bytes for everything else. Expert bytes are therefore identical to the source's."""
    src, out = Path(source), Path(out_dir)
    meta = read_synthetic_meta(src)
    shape = SynthShape(**meta["shape"])
    seed, fast = int(meta["seed"]), bool(meta.get("fast", False))
    if source_routing(meta) == routing:
        raise ValueError(f"{src} already has routing {routing.mode} (skew {routing.skew:g})")
    if out.exists() and out.resolve() == src.resolve():
        raise ValueError("the variant must go to another folder than its source")
    ck = Checkpoint.open(src)
    out.mkdir(parents=True, exist_ok=True)
    _clear(out)
    for name in SMALL_FILES:
        if (src / name).is_file():
            shutil.copyfile(src / name, out / name)
    tok_texts = []
    if routing.mode == "drift":
        from tokenizers import Tokenizer

        tok_texts = _token_texts(Tokenizer.from_file(str(src / "tokenizer.json")), shape.vocab_size)
    fresh = {t.name: t for t in _tensors(ck.config, shape, seed, routing, fast, tok_texts, is_routing_tensor)}
    files = ck._files
    report = VariantReport(out, routing, [], [], [], 0, 0)
    rewrites: list[tuple[Path, list[_Tensor]]] = []
    for fname, f in sorted(files.items()):
        order = sorted(f.tensors.values(), key=lambda i: i.start)
        if not any(is_routing_tensor(i.name) for i in order):
            linked = _link_or_copy(f.path, out / fname)
            (report.linked if linked else report.copied).append(fname)
            report.shared_bytes += f.path.stat().st_size
            continue
        group = [fresh[i.name] if i.name in fresh else _Tensor(i.name, i.dtype, i.shape, _source_chunks(f, i.name))
                 for i in order]
        report.rewritten.append(fname)
        rewrites.append((out / fname, group))
    tick = _Progress(sum(t.nbytes for _, g in rewrites for t in g), progress)
    _run(jobs or default_jobs(), [partial(_write_shard, p, g, tick) for p, g in rewrites])
    report.written_bytes = tick.total
    if (src / INDEX_NAME).is_file():
        shutil.copyfile(src / INDEX_NAME, out / INDEX_NAME)
    (out / "SYNTHETIC.json").write_text(_synthetic_json(shape, seed, routing, fast, {
        "variant_of": {"dir": str(src.resolve()), "fingerprint": ck.fingerprint(), "routing": source_routing(meta).mode,
                       "linked": report.linked, "copied": report.copied, "rewritten": report.rewritten}}))
    ck.close()
    return report

