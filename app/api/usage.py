"""Usage blocks in the two OpenAI shapes (chat/completions and responses)."""

from __future__ import annotations

from typing import Any

from engine.types import Usage


def chat_usage(u: Usage, reasoning_tokens: int = 0) -> dict[str, Any]:
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
    }


def responses_usage(u: Usage, reasoning_tokens: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_tokens},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    }
