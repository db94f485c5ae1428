"""Screenshot the residency panel fed by the real hybrid GPU backend's telemetry.

``record``: runs engine/gpu's backend on the demo model with a small slot pool and samples
``fill_telemetry`` while it decodes. Without a CUDA GPU it runs the same Triton kernels under
TRITON_INTERPRET=1 on the CPU (slow: about a minute for the tokens below), which is what the
screenshot script does here. ``render``: replays the samples into the panel (as the app's
250 ms poll would) and saves a PNG. Two steps, two processes: the interpreter flag must be set
before Triton is imported, and the recording process needs no Qt.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def record(out: Path, model: Path, tokens: int, fraction: float = 0.4) -> None:
    try:
        import torch

        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    if not cuda:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    from engine.checkpoint import Checkpoint
    from engine.gpu.backend import GpuBackend
    from engine.gpu.layout import ExpertLayout
    from engine.settings import EngineSettings
    from engine.tokenizer import load_tokenizer
    from engine.types import Telemetry

    ck = Checkpoint.open(model)
    cfg = ck.config
    sb = ExpertLayout.for_config(cfg).slot_bytes
    slots = max(4, int(cfg.num_hidden_layers * cfg.num_local_experts * fraction))  # experts that fit in VRAM
    settings = EngineSettings(context=512, kv_ring=max(64, cfg.sliding_window), pool_gib=(slots + 2) * sb / 2**30,
                              scratch_slots=2, static_slots=slots // 2, refresh_every=2, refresh_m=4, cpu_threads=2)
    backend = GpuBackend.create(ck, settings, interpret=not cuda, prefer_native=False, hot_set_file=None)
    tok, _special = load_tokenizer(model)
    # A prompt past 64 tokens: the backend then ranks its hot set and fills the static slots.
    prompt = ("Write a Python function that returns the median of a list of numbers, with a docstring, "
              "type hints and a doctest.\n\ndef median(values: list[float]) -> float:\n    ")
    ids = tok.encode(prompt * 2).ids
    logits = backend.forward(ids)
    samples = []
    for i in range(tokens):
        nxt = int(torch.argmax(logits))
        logits = backend.forward([nxt])
        t = Telemetry(state="generating", model_name=model.name, layers=cfg.num_hidden_layers,
                      experts_per_layer=cfg.num_local_experts, tokens_generated=i + 1)
        backend.fill_telemetry(t)
        if not cuda:
            t.backend += " under the Triton interpreter (CPU)"
        samples.append(dataclasses.asdict(t))
    backend.close()
    out.write_text(json.dumps(samples))
    print(f"recorded {len(samples)} telemetry samples to {out}")


def render(inp: Path, png: Path) -> None:
    from engine.types import Telemetry
    from ui import theme as themes
    from ui.qt import QApplication
    from ui.residency_panel import ResidencyPanel

    app = QApplication.instance() or QApplication([])
    assert isinstance(app, QApplication)
    themes.apply(app, themes.LIGHT)
    panel = ResidencyPanel(themes.LIGHT)
    panel.resize(360, 760)
    for d in json.loads(inp.read_text()):
        d["slots"] = [tuple(s) for s in d["slots"]]
        panel.update_telemetry(Telemetry(**d), generating=True)
    panel.show()
    app.processEvents()
    panel.grab().save(str(png), "PNG")
    print(f"screenshot: {png}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("out")
    r.add_argument("--model", default=str(ROOT / "resources" / "demo-model"))
    r.add_argument("--tokens", type=int, default=24)
    r.add_argument("--fraction", type=float, default=0.4, help="share of all experts the VRAM pool holds")
    v = sub.add_parser("render")
    v.add_argument("inp")
    v.add_argument("png")
    a = p.parse_args()
    if a.cmd == "record":
        record(Path(a.out), Path(a.model), a.tokens, a.fraction)
    else:
        render(Path(a.inp), Path(a.png))
    return 0


if __name__ == "__main__":
    sys.exit(main())
