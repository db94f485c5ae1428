"""Tokenizer loading (``tokenizer.json`` via the ``tokenizers`` library) and the synthetic
byte-level tokenizer written into synthetic checkpoints.

The engine never hard-codes special-token ids: real gpt-oss puts ``<|return|>`` at 200002,
a synthetic model at the end of its small vocabulary. :class:`SpecialTokens` is looked up
by name from whatever ``tokenizer.json`` the model folder carries.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

# The first 21 specials of o200k_harmony in id order starting at 199998, named as tiktoken and
# openai-harmony name them (gpt-oss-facts §5; HF's tokenizer.json calls 200018 <|endofprompt|>, a
# name o200k_harmony does not have). The real tokenizer reserves every id up to 201087
# (engine/synth/o200k.py builds it).
HARMONY_SPECIALS: tuple[str, ...] = (
    "<|startoftext|>", "<|endoftext|>", "<|reserved_200000|>", "<|reserved_200001|>",
    "<|return|>", "<|constrain|>", "<|reserved_200004|>", "<|channel|>", "<|start|>",
    "<|end|>", "<|message|>", "<|reserved_200009|>", "<|reserved_200010|>",
    "<|reserved_200011|>", "<|call|>", "<|reserved_200013|>", "<|reserved_200014|>",
    "<|reserved_200015|>", "<|reserved_200016|>", "<|reserved_200017|>", "<|reserved_200018|>",
)


class TokenizerError(ValueError):
    """The model folder's tokenizer is missing or lacks the harmony special tokens."""


@dataclass(frozen=True)
class SpecialTokens:
    start: int
    end: int
    message: int
    channel: int
    constrain: int
    return_: int
    call: int
    endoftext: int

    @classmethod
    def from_tokenizer(cls, tok: Tokenizer, source: str = "tokenizer.json") -> SpecialTokens:
        def tid(s: str) -> int:
            i = tok.token_to_id(s)
            if i is None:
                raise TokenizerError(f"{source}: harmony special token {s} is missing")
            return int(i)

        return cls(
            start=tid("<|start|>"), end=tid("<|end|>"), message=tid("<|message|>"),
            channel=tid("<|channel|>"), constrain=tid("<|constrain|>"), return_=tid("<|return|>"),
            call=tid("<|call|>"), endoftext=tid("<|endoftext|>"),
        )

    @property
    def stop_ids(self) -> frozenset[int]:
        """Sampling stops (harmony stop_tokens_for_assistant_actions)."""
        return frozenset((self.return_, self.call))


def load_tokenizer(model_dir: str | Path) -> tuple[Tokenizer, SpecialTokens]:
    path = Path(model_dir) / "tokenizer.json"
    if not path.is_file():
        raise TokenizerError(f"{path}: not found — the model folder needs its tokenizer.json")
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on parse errors
        raise TokenizerError(f"{path}: cannot be parsed ({exc})") from exc
    return tok, SpecialTokens.from_tokenizer(tok, str(path))


_CORPUS = (
    "def main():\n    return 0\n\nclass Model:\n    def __init__(self, config):\n        self.config = config\n"
    "import os\nimport sys\nfor i in range(10):\n    print(i)\n"
    "The quick brown fox jumps over the lazy dog. Hello, world! assistant analysis final commentary "
    "user system developer functions json The answer is: here is the code you asked for.\n"
)


def build_synthetic_tokenizer(vocab_size: int) -> Tokenizer:
    """A byte-level BPE whose harmony specials sit at their real ids (199998…) when the
    vocabulary is large enough, else at the last 21 ids of ``vocab_size``."""
    return train_byte_bpe([_CORPUS] * 20, vocab_size)


def train_byte_bpe(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """Train a byte-level BPE on ``texts`` and append the harmony specials (see
    :func:`build_synthetic_tokenizer` for where they land)."""
    real_start = 199998
    n_model = real_start if vocab_size >= real_start + len(HARMONY_SPECIALS) else vocab_size - len(HARMONY_SPECIALS)
    if n_model < 256:
        raise ValueError(f"vocab_size {vocab_size} too small: need >= {256 + len(HARMONY_SPECIALS)}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=n_model, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[], show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    # Pad the model vocabulary to exactly n_model so special ids are predictable.
    data = json.loads(tok.to_str())
    vocab: dict[str, int] = data["model"]["vocab"]
    # Fill up with byte-level letter pairs/triples so random ids still decode to text.
    letters = "etaoinshrdlucmfwypvbgkqjxz"
    fillers = (p + q for p in ("", "\u0120") for q in (a + b for a in letters for b in letters))
    fillers3 = ("\u0120" + a + b + c for a in letters for b in letters for c in letters)
    for piece in (*fillers, *fillers3):
        if len(vocab) >= n_model:
            break
        vocab.setdefault(piece, len(vocab))
    k = 0
    while len(vocab) < n_model:
        vocab.setdefault(f"x{k}", len(vocab))
        k += 1
    data["model"]["vocab"] = vocab
    data["added_tokens"] = [
        {"id": n_model + j, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for j, s in enumerate(HARMONY_SPECIALS)
    ]
    out = Tokenizer.from_str(json.dumps(data))
    assert out.token_to_id(HARMONY_SPECIALS[-1]) == n_model + len(HARMONY_SPECIALS) - 1
    return out
