"""Run the real desktop app on the demo model and save screenshots (see screenshots.sh).

Uses a throw-away NEURAL_HOME so the user's conversations and settings are untouched, then
starts ``neural gui --screenshot-dir OUT``, which drives the window through a scripted tour.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def gpu_panel(out: Path) -> None:
    """The slot map with real data: the GPU backend's telemetry (Triton interpreter without a GPU)."""
    helper = str(ROOT / "bench" / "residency" / "replay.py")
    with tempfile.TemporaryDirectory(prefix="neural-telemetry-") as d:
        samples = Path(d) / "telemetry.json"
        rec = subprocess.run([sys.executable, helper, "record", str(samples)], check=False)
        if rec.returncode != 0:
            print("GPU backend telemetry not recorded (see above); residency-gpu-backend.png skipped")
            return
        subprocess.run([sys.executable, helper, "render", str(samples), str(out / "residency-gpu-backend.png")],
                       check=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=str(ROOT / "screenshots"), help="folder for the PNGs (git-ignored)")
    p.add_argument("--model", default=None, help="model folder (default: the bundled demo model)")
    p.add_argument("--no-gpu-panel", action="store_true",
                   help="skip the residency panel fed by the hybrid GPU backend (about a minute without a GPU)")
    args = p.parse_args()
    from app.gui_main import run_app

    with tempfile.TemporaryDirectory(prefix="neural-shots-") as home:
        code = run_app(model=args.model, screenshot_dir=args.out, home=home)
    recorded = ROOT / "tests" / "ui" / "data" / "h200_gpu_telemetry.json"
    if recorded.is_file():  # telemetry recorded on an H200 (36 layers x 128 experts): the map at full scale
        subprocess.run([sys.executable, str(ROOT / "bench" / "residency" / "replay.py"), "render", str(recorded),
                        str(Path(args.out) / "residency-h200-recorded.png")], check=True)
    if not args.no_gpu_panel:
        gpu_panel(Path(args.out))
    pngs = sorted(Path(args.out).glob("*.png"))
    print(f"{len(pngs)} screenshots in {args.out}")
    return code if pngs else 1


if __name__ == "__main__":
    sys.exit(main())
