from __future__ import annotations

import pytest
from tokenizers import Tokenizer

from engine.tokenizer import SpecialTokens, build_synthetic_tokenizer


@pytest.fixture(scope="session")
def tok() -> Tokenizer:
    return build_synthetic_tokenizer(512)


@pytest.fixture(scope="session")
def sp(tok: Tokenizer) -> SpecialTokens:
    return SpecialTokens.from_tokenizer(tok)
