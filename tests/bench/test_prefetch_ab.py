"""bench.kernel.prefetch_ab: A B B A over two prefetch distances on the CPU engine's decode (the demo model, a few
tokens), the kernel's default restored after; bad arguments are named."""

from __future__ import annotations

import pytest

from app.core.models import demo_model_dir
from bench.kernel import prefetch_ab


def test_a_b_b_a_on_the_demo_model(capsys: pytest.CaptureFixture[str]) -> None:
    from native.kernel import load_kernel

    before = load_kernel().prefetch
    assert prefetch_ab.main([str(demo_model_dir()), "--tokens", "4", "--rounds", "1", "--distances", "0,8192"]) == 0
    out = capsys.readouterr().out
    runs = [ln.split(":")[0] for ln in out.splitlines() if ln.endswith("(decode of 4 tokens)")]
    assert runs == ["prefetch      0", "prefetch   8192", "prefetch   8192", "prefetch      0"]
    assert "8192 / 0:" in out and load_kernel().prefetch == before


def test_prompts_are_fresh_each_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert prefetch_ab.main([str(demo_model_dir()), "--prompt", "24", "--rounds", "1", "--distances", "4096,8192"]) == 0
    out = capsys.readouterr().out
    rates = [float(ln.split(": ")[1].split()[0]) for ln in out.splitlines() if ln.endswith("(24-token prompt)")]
    assert len(rates) == 4 and min(rates) < 5_000  # a cached prompt would read as thousands of tok/s times more


@pytest.mark.parametrize("args,msg", [(["--distances", "4096"], "two byte counts"),
                                      (["--distances", "4096,x"], "two byte counts"),
                                      (["--tokens", "1"], "--tokens must be >= 2")])
def test_bad_arguments_are_named(args: list[str], msg: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        prefetch_ab.main(["ckpt", *args])
    assert msg in capsys.readouterr().err
