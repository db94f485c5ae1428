"""The shipped replay request set: valid bodies, follow-ups extending the conversation, rebuildable."""

from __future__ import annotations

import hashlib
import itertools
import json
import sysconfig
from pathlib import Path

import pytest

from bench.harness import make_requests
from bench.harness.context_tokens import REQUESTS_FILE
from bench.harness.replay import load_requests


def test_request_set_shape():
    bodies = load_requests(REQUESTS_FILE)
    assert len(bodies) == 4
    for b in bodies:
        assert b["model"] == "gpt-oss-120b" and b["max_tokens"] == 512 and b["temperature"] == 0
        assert b["reasoning_effort"] == "low" and b["stream"] is True
        assert all(m["role"] in ("system", "user", "assistant") and m["content"] for m in b["messages"])
        assert b["messages"][-1]["role"] == "user"
    for prev, nxt in itertools.pairwise(bodies):  # each follow-up extends the previous request
        assert nxt["messages"][: len(prev["messages"])] == prev["messages"]
        assert [m["role"] for m in nxt["messages"][len(prev["messages"]):]] == ["assistant", "user"]
    # "~13k tokens" at 4 chars/token (o200k measured 13,538 and 15,141 on the GPU machine)
    assert 12_500 <= make_requests.estimated_tokens(bodies[0]) <= 14_000
    assert make_requests.estimated_tokens(bodies[-1]) < 15_400  # + framing + a 512-token answer fits 16k


def test_resources_stay_small():
    total = sum(p.stat().st_size for p in REQUESTS_FILE.parent.iterdir() if p.is_file())
    assert total < 300 * 1024


def test_requests_parse_as_chat_requests():
    from app.api.chat_request import parse_chat_request

    for b in load_requests(REQUESTS_FILE):
        req = parse_chat_request(b, context_limit=16384, vocab_size=201088)
        assert req.stream and req.params.temperature == 0 and req.conversation.reasoning_effort == "low"


def test_generator_rebuilds_the_file_byte_for_byte(tmp_path: Path):
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    pinned = all(hashlib.sha256((stdlib / n).read_bytes()).hexdigest() == h
                 for n, h in make_requests.MODULES.items() if (stdlib / n).is_file())
    if not pinned:
        pytest.skip("this Python's stdlib sources differ from the pinned 3.11.7 ones")
    out = tmp_path / "rebuilt.jsonl"
    assert make_requests.main(["--out", str(out)]) == 0
    assert out.read_bytes() == REQUESTS_FILE.read_bytes()


def test_generator_refuses_other_sources(tmp_path: Path):
    for name in make_requests.MODULES:
        (tmp_path / name).write_text("# not the pinned source\n")
    with pytest.raises(SystemExit):
        make_requests.stdlib_sources(tmp_path)
    variant = make_requests.build_requests(make_requests.stdlib_sources(tmp_path, check=False))
    assert len(variant) == 4 and "not the pinned source" in variant[0]["messages"][1]["content"]
    assert json.loads(json.dumps(variant))  # plain JSON
