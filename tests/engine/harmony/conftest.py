from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from engine.tokenizer import SpecialTokens, build_synthetic_tokenizer


@pytest.fixture(scope="session")
def tok() -> Tokenizer:
    return build_synthetic_tokenizer(512)


@pytest.fixture(scope="session")
def sp(tok: Tokenizer) -> SpecialTokens:
    return SpecialTokens.from_tokenizer(tok)


@pytest.fixture(scope="session")
def o200k_dir() -> Path:
    """The folder with o200k_base.tiktoken (hash checked) and the real o200k_harmony
    tokenizer.json, built once per cache folder from the quicktok-v1 package (test extra)."""
    from engine.synth.o200k import O200kError, ensure_o200k

    try:
        return ensure_o200k()
    except O200kError as exc:  # quicktok-v1 or transformers not installed (both are in the test extra)
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def o200k(o200k_dir: Path) -> tuple[Tokenizer, SpecialTokens]:
    from engine.synth.o200k import load_o200k

    real = load_o200k(o200k_dir)
    return real, SpecialTokens.from_tokenizer(real)


@pytest.fixture(scope="session")
def harmony_enc(o200k_dir: Path) -> Any:
    """openai-harmony's HARMONY_GPT_OSS encoding, reading the vocabulary from ``o200k_dir``
    (TIKTOKEN_ENCODINGS_BASE: it never downloads)."""
    oh = pytest.importorskip("openai_harmony")
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(o200k_dir)
    return oh.load_harmony_encoding(oh.HarmonyEncodingName.HARMONY_GPT_OSS)
