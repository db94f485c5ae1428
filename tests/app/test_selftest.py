"""The installation self-test: every step for real on small models, and each failure path."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from app import selftest
from app.selftest import SelfTestFailure, check_chat_completion, generate_tokens, run_self_test
from engine.settings import EngineSettings
from engine.types import Done, GenerationParams, TextDelta, Usage

torch.set_num_threads(1)  # two intra-op threads on a 2-core CI box spin against each other


def test_all_steps_pass_on_a_synthetic_model(tiny_model):
    out = io.StringIO()
    report = run_self_test(tiny_model, EngineSettings(backend="reference", context=512, dtype="float32"), out=out)
    assert report.ok
    assert [s.name for s in report.steps] == ["locate the demo model", "load the model", "generate 16 tokens",
                                              "answer one API request over HTTP"]
    gen = report.steps[2].detail
    assert gen.startswith("16 tokens in ")
    http = report.steps[3].detail
    assert "/v1/chat/completions" in http and "http://127.0.0.1:" in http and "16 completion tokens" in http
    text = out.getvalue()
    assert text.count("[self-test] ok") == 4


def test_cli_on_the_bundled_demo_model_exits_zero_with_a_json_report(capsys):
    from app.cli.main import main

    assert main(["selftest", "--backend", "reference", "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)  # progress went to stderr, the report alone to stdout
    assert report["ok"] is True and len(report["steps"]) == 4
    assert "resources" in report["steps"][0]["detail"] and "demo-model" in report["steps"][0]["detail"]
    assert "[self-test] generate 16 tokens" in captured.err


def test_missing_model_fails_naming_the_step(tmp_path, capsys):
    rc = selftest.main(str(tmp_path / "no-model"), backend="reference")
    err = capsys.readouterr().err
    assert rc == 1
    assert "self-test FAILED: locate the demo model" in err and "no config.json" in err


def test_a_load_error_fails_the_load_step_and_keeps_the_partial_report(tiny_model):
    def broken_load(path: Path, settings: EngineSettings) -> Any:
        raise OSError("disk on fire")

    with pytest.raises(SelfTestFailure, match="load the model: OSError: disk on fire") as info:
        run_self_test(tiny_model, out=io.StringIO(), load=broken_load)
    report = info.value.report  # type: ignore[attr-defined]
    assert [s.ok for s in report.steps] == [True, False]


class EarlyStopEngine:
    """Engine double whose raw completion stops on an end token after a few tokens."""

    def __init__(self, per_call: list[int], error: str | None = None) -> None:
        self.per_call = list(per_call)
        self.prompts: list[str] = []
        self.error = error

    def complete(self, prompt: str, params: GenerationParams, cancel: Any = None) -> Iterator[Any]:
        self.prompts.append(prompt)
        n = min(self.per_call.pop(0), params.max_tokens)
        yield TextDelta("final", "x" * n)
        yield Done("stop" if n < params.max_tokens else "length", Usage(1, 0, n), tuple(range(n)), self.error)


def test_generation_continues_after_an_early_stop_until_16_tokens():
    eng = EarlyStopEngine([5, 100])
    n, finish, text = generate_tokens(eng, 16)  # type: ignore[arg-type]
    assert (n, finish, text) == (16, "length", "x" * 16)
    assert len(eng.prompts) == 2 and eng.prompts[1] != eng.prompts[0]


def test_generation_that_never_reaches_16_tokens_fails():
    with pytest.raises(SelfTestFailure, match="produced 4 tokens, expected 16"):
        generate_tokens(EarlyStopEngine([1, 1, 1, 1]), 16)  # type: ignore[arg-type]
    with pytest.raises(SelfTestFailure, match="generation failed: boom"):
        generate_tokens(EarlyStopEngine([16], error="boom"), 16)  # type: ignore[arg-type]


GOOD = {"object": "chat.completion", "model": "m",
        "choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2}}


@pytest.mark.parametrize(("patch", "match"), [
    ({"object": "text_completion"}, "expected 'chat.completion'"),
    ({"choices": []}, "no choices"),
    ({"choices": [{"message": {"role": "user"}}]}, "role is 'user'"),
    ({"usage": {"completion_tokens": 0}}, "positive count"),
])
def test_chat_completion_shape_is_checked(patch, match):
    assert "2 completion tokens" in check_chat_completion(GOOD)
    with pytest.raises(SelfTestFailure, match=match):
        check_chat_completion({**GOOD, **patch})


def test_http_errors_become_clear_failures():
    with pytest.raises(SelfTestFailure, match=re.escape("no answer from http://127.0.0.1:9/")):
        selftest.post_json("http://127.0.0.1:9/v1/chat/completions", {}, timeout=5)
