"""JSON shape of ``bench decode`` / ``bench prompt`` on the tiny synthetic model (no timing asserts)."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

from app.cli.main import main
from bench.harness.context_tokens import context_tokens
from bench.harness.engine_bench import RunWindow, hash_ids
from bench.harness.environment import checkpoint_routing, pick_model_dir
from engine.session import Engine
from engine.settings import EngineSettings
from engine.types import Telemetry

SHA = re.compile(r"^[0-9a-f]{64}$")
FAST = ["--backend", "reference", "--dtype", "float32", "--repeats", "2", "--warmup", "1", "--json"]


@pytest.fixture(autouse=True)
def one_torch_thread():
    # a tiny model on a 2-core CI box: more intra-op threads only spin against each other
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def run_json(capsys, argv: list[str]) -> dict:
    assert main(argv) == 0
    captured = capsys.readouterr()
    rep = json.loads(captured.out)  # exactly one JSON object on stdout
    rep["_stderr"] = captured.err
    return rep


def check_header(rep: dict, bench: str) -> None:
    assert rep["bench"] == bench and rep["schema"] == 1
    assert rep["backend"] == "cpu-reference"
    assert rep["model"]["layers"] == 4 and rep["model"]["experts"] == 8
    assert rep["routing"]["checkpoint"] == "uniform" and rep["routing"]["skew"] == 0.0
    assert rep["settings"]["engine"]["backend"] == "reference"
    assert set(rep["engine_version"]) == {"package", "git"}
    assert {"cpu", "logical_cores", "gpu"} <= set(rep["device"])
    assert SHA.match(rep["token_ids_sha256"])


def test_decode_json_shape(tiny_model, capsys):
    rep = run_json(capsys, ["bench", "decode", str(tiny_model), "--tokens", "4", "--depth", "0,20", "--ids", *FAST])
    check_header(rep, "decode")
    assert rep["settings"]["bench"] == {"repeats": 2, "warmup": 1, "tokens": 4, "depths": [0, 20],
                                        "temperatures": [0.0, 1.0], "top_ps": [0.9]}
    assert [r["depth"] for r in rep["results"]] == [0, 20]
    for r in rep["results"]:
        assert r["tokens"] == 4 and r["temperature"] == 0.0
        # through Engine.complete with the shipping sampler: greedy, then T=1 top-p 0.9 (seeded)
        greedy, sampled = r["sampling"]
        assert (greedy["temperature"], sampled["temperature"], sampled["top_p"]) == (0.0, 1.0, 0.9)
        for s in (greedy, sampled):
            assert s["sample_ms_per_token"]["median"] > 0 and s["repeats_identical"] is True
            assert s["sampled_tokens"] == 2 * 5 and 0 <= s["sampler_full_sorts"] <= s["sampled_tokens"]
        assert sampled["sample_over_greedy_ms"] == pytest.approx(
            sampled["sample_ms_per_token"]["median"] - greedy["sample_ms_per_token"]["median"])
        assert greedy["token_ids_sha256"] == r["token_ids_sha256"]
        s = r["tokens_per_s"]
        assert s["n"] == 2 and len(s["runs"]) == 2 and s["min"] <= s["median"] <= s["max"]
        assert r["ttft_s"] > 0 and r["ms_per_token"]["median"] > 0
        assert r["vram_hit_rate"] is None and r["phases_ms"] == {}  # CPU engine: no VRAM slots
        assert "telemetry" in r["phases_source"]
        assert len(r["token_ids"]) == 5 and r["token_ids_sha256"] == hash_ids(r["token_ids"])
        assert r["repeats_identical"] is True  # greedy, same context: same tokens every repeat
        res = r["residency"]  # page faults over the timed run, and the store's RAM residency
        assert res["faults_major_per_token"] >= 0 and res["faults_minor_per_token"] >= 0
        assert "store_resident_fraction" not in res  # the pure reference keeps no store in RAM
    assert rep["notes"] == []


def test_decode_depth_is_capped_at_the_context(tiny_model, capsys):
    rep = run_json(capsys, ["bench", "decode", str(tiny_model), "--tokens", "4", "--depth", "100",
                            "--context", "64", *FAST])
    (r,) = rep["results"]
    assert r["depth_requested"] == 100 and r["depth"] == 64 - 4 - 2
    assert any("capped" in n for n in rep["notes"])


def test_prompt_json_shape_and_routing_warning(tiny_model, capsys):
    rep = run_json(capsys, ["bench", "prompt", str(tiny_model), "--tokens", "8,24", "--check-tokens", "2",
                            "--routing", "skewed", *FAST])
    check_header(rep, "prompt")
    assert rep["routing"]["requested"] == "skewed" and rep["routing"]["matches"] is False
    assert "--routing skewed asked" in rep["notes"][0]
    assert "warning: --routing skewed asked" in rep["_stderr"]
    assert [r["prompt_tokens"] for r in rep["results"]] == [8, 24]
    for r in rep["results"]:
        assert r["ttft_s"]["n"] == 2 and r["tokens_per_s"]["median"] > 0
        assert SHA.match(r["token_ids_sha256"]) and "token_ids" not in r  # ids only with --ids
        assert r["repeats_identical"] is True and r["check_tokens"] == 2


def test_prompt_table_output(tiny_model, capsys):
    assert main(["bench", "prompt", str(tiny_model), "--tokens", "8", "--check-tokens", "1",
                 "--backend", "reference", "--repeats", "1", "--warmup", "0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("neural bench prompt") and "routing   uniform" in out


def test_bad_model_dir_fails_cleanly(tmp_path, capsys):
    assert main(["bench", "decode", str(tmp_path / "nope"), "--tokens", "1", "--depth", "0"]) == 2
    assert "neural: error" in capsys.readouterr().err


def test_routing_picks_a_subfolder(tiny_model, tmp_path):
    shutil.copytree(tiny_model, tmp_path / "uniform")
    assert pick_model_dir(tmp_path, "uniform") == tmp_path / "uniform"
    assert pick_model_dir(tmp_path, "skewed") == tmp_path  # absent: left as given (and then fails to load)
    assert pick_model_dir(tiny_model, "skewed") == tiny_model  # a checkpoint itself is never redirected
    assert checkpoint_routing(tmp_path / "uniform").kind == "uniform"
    assert checkpoint_routing(tmp_path).kind == "natural"


def test_context_tokens_are_deterministic(tiny_model, tmp_path):
    eng = Engine.load(tiny_model, EngineSettings(backend="reference", dtype="float32"))
    try:
        a, src = context_tokens(eng, 5000)
        b, _ = context_tokens(eng, 5000)
        assert a == b and len(a) == 5000 and "coding-13k.jsonl" in src
        assert a[:100] == context_tokens(eng, 100)[0]
        c, src2 = context_tokens(eng, 300, path=tmp_path / "missing.jsonl")
        assert len(c) == 300 and "seeded" in src2 and c == context_tokens(eng, 300, path=tmp_path / "x")[0]
        specials = set(eng.tokenizer.get_added_tokens_decoder())
        assert not specials & set(c)
    finally:
        eng.close()


@dataclass
class FakeStats:
    tokens: int = 10
    hits: int = 30
    routed: int = 40
    wall: float = 1.0
    cpu: float = 0.5
    lane_experts: int = 100
    last_hit_rate: float = 0.3


def fake_engine(stats: FakeStats | None) -> SimpleNamespace:
    tel = Telemetry(slots=[(1, 1, 0)], vram_hit_rate=0.9, phases_ms={"token": 7.0})
    backend = SimpleNamespace(decoder=SimpleNamespace(stats=stats)) if stats else SimpleNamespace()
    return SimpleNamespace(backend=backend, telemetry=lambda: tel)


def test_run_window_uses_counter_differences_not_running_averages():
    st = FakeStats()
    w = RunWindow(fake_engine(st))  # type: ignore[arg-type]
    st.tokens, st.hits, st.routed, st.wall, st.cpu, st.lane_experts = 14, 32, 56, 1.2, 0.6, 244
    hit, phases, source = w.result()
    assert hit == pytest.approx(2 / 16)  # not the running 32/56
    # 0.2 s and 0.1 s over 4 tokens; the lane's expert count per token, not in "ms" (session 18 printed 33,643)
    assert phases == pytest.approx({"wall": 50.0, "cpu": 25.0, "lane_experts": 36.0})
    assert "counters" in source


def test_run_window_without_progress_or_counters():
    st = FakeStats()
    w = RunWindow(fake_engine(st))  # type: ignore[arg-type]
    assert w.result() == (None, {}, "backend counters did not move during the run")
    hit, phases, source = RunWindow(fake_engine(None)).result()  # type: ignore[arg-type]
    assert (hit, phases) == (0.9, {"token": 7.0}) and "telemetry" in source


def test_prompt_bench_reports_the_gpu_prompt_paths_split(tmp_path):
    """On the GPU backend (here under the Triton interpreter) a prompt result carries the prompt
    path's own split instead of ms per token."""
    from bench.harness.engine_bench import SPLIT_SOURCE, run_prompt
    from engine.checkpoint import Checkpoint
    from engine.gpu.backend import GpuBackend
    from engine.gpu.layout import ExpertLayout
    from engine.session import Engine
    from engine.settings import EngineSettings
    from engine.synth import PRESETS, write_synthetic_checkpoint

    ck = Checkpoint.open(write_synthetic_checkpoint(tmp_path / "m", PRESETS["tiny"], seed=3))
    sb = ExpertLayout.for_config(ck.config).slot_bytes
    s = EngineSettings(context=64, kv_ring=8, pool_gib=10 * sb / 2**30, scratch_slots=2, refresh_every=0,
                       cpu_threads=2)
    be = GpuBackend.create(ck, s, interpret=True, hot_set_file=None)
    eng = Engine(ck, s, be, "")
    try:
        rep = run_prompt(eng, lengths=[24], repeats=1, warmup=0, check_tokens=1, log=lambda _m: None)
    finally:
        eng.close()
    (r,) = rep["results"]
    split = r["prompt_split"]
    assert "phases_ms" not in r and r["phases_source"] == SPLIT_SOURCE
    assert split["tokens"] == 24 and split["wall"] > 0 and "gpu_gemm" in split
    assert 0 < split["wall"] <= r["ttft_s"]["median"]


def test_lane_line_says_whether_the_copy_lane_ran_and_why() -> None:
    from bench.harness.report import lane_line

    assert lane_line({"decode_lane": {"on": False, "check": {}, "split": None}}) is None  # the CPU engine: no check
    off = lane_line({"decode_lane": {"on": False, "check": {"gain": 1.05, "cpu_ms_alone": 0.45, "cpu_ms_beside": 0.7,
                                                            "copy_ms": 1.2}, "split": None}})
    assert off is not None and off.startswith("copy lane off: load check gain 1.05")
    split = {"cpu_ms": 0.35, "lane_ms": 0.33, "experts": 4608, "layers_sending_0_1_2": [10, 20, 2290], "probes": 1,
             "layers_not_registered": 0, "layers_all_captured": 3}
    on = lane_line({"decode_lane": {"on": True, "check": {"gain": 1.86}, "split": split}})
    assert on is not None and "copy lane on" in on and "4608 experts sent" in on and "[10, 20, 2290]" in on
    assert "all captured 3" in on
    assert "splitting" not in on
    split.update(layers_split=2000, split_share=1234.5)
    on = lane_line({"decode_lane": {"on": True, "check": {"gain": 1.86}, "split": split}})
    assert on is not None and "layers splitting an expert 2000 (1234.5 experts' worth)" in on
