"""installer/neural.spec, executed with recording stand-ins for PyInstaller's build steps: what
the bundle would contain (demo model, native kernel, harmony and every subcommand) and which
executables it would make. The real build runs in CI (installer/build_linux.sh).

collect_submodules imports every package of the project in a subprocess (about a minute each
time on the 2-core CI machine); the spec is executed several times here, so one real walk per
package is shared by all of them (the spec's name filters are applied to its result)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("PyInstaller")

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "installer" / "neural.spec"


class Recorder:
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]]

    def __init__(self) -> None:
        self.calls = []
        self.namespace: dict[str, Any] = {}

    def step(self, name: str) -> Any:
        rec = self

        class Step:
            def __init__(self, *args: Any, **kw: Any) -> None:
                rec.calls.append((name, args, kw))
                self.args, self.kw = args, kw
                self.scripts = ["scripts"]
                self.pure = ["pure"]
                self.binaries = list(kw.get("binaries", []))
                self.datas = list(kw.get("datas", []))

        return Step

    def of(self, name: str) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        return [(a, k) for n, a, k in self.calls if n == name]


from PyInstaller.utils.hooks import collect_submodules as _collect_submodules  # noqa: E402


@functools.cache
def _all_submodules(package: str) -> tuple[str, ...]:
    return tuple(_collect_submodules(package))


def shared_collect_submodules(package: str, filter: Callable[[str], bool] | None = None) -> list[str]:
    # PyInstaller stops descending where the filter says no; for the spec's prefix filters that
    # equals filtering the full list afterwards.
    return [n for n in _all_submodules(package) if filter is None or filter(n)]


def run_spec(monkeypatch: pytest.MonkeyPatch, platform: str | None = None, **env: str) -> Recorder:
    import PyInstaller.utils.hooks as hooks

    monkeypatch.setattr(hooks, "collect_submodules", shared_collect_submodules)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    if platform:
        monkeypatch.setattr(sys, "platform", platform)
    rec = Recorder()
    ns: dict[str, Any] = {name: rec.step(name) for name in ("Analysis", "PYZ", "EXE", "COLLECT")}
    ns.update(SPECPATH=str(SPEC.parent), __file__=str(SPEC))
    exec(compile(SPEC.read_text(), str(SPEC), "exec"), ns)
    rec.namespace = ns
    return rec


@pytest.fixture(scope="module")
def linux_build() -> Recorder:
    with pytest.MonkeyPatch.context() as mp:
        return run_spec(mp)


def analysis(rec: Recorder) -> dict[str, Any]:
    [(args, kw)] = rec.of("Analysis")
    return {"scripts": args[0], **kw}


def test_entry_point_is_the_cli_that_starts_the_gui_by_default(linux_build):
    a = analysis(linux_build)
    assert a["scripts"] == [str(ROOT / "installer" / "entry.py")]
    assert a["pathex"] == [str(ROOT)]
    [(_, exe)] = linux_build.of("EXE")
    assert exe["name"] == "neural" and exe["console"] is True
    [(_, coll)] = linux_build.of("COLLECT")
    assert coll["name"] == "neural"


def test_bundle_carries_the_demo_model(linux_build):
    datas = analysis(linux_build)["datas"]
    assert (str(ROOT / "resources" / "demo-model"), "resources/demo-model") in datas
    assert (ROOT / "resources" / "demo-model" / "config.json").is_file()


def test_bundle_carries_package_metadata_read_at_import(linux_build):
    # llguidance calls importlib.metadata.version("llguidance") when imported (engine/grammar)
    dests = [dest for _, dest in analysis(linux_build)["datas"]]
    assert any(d.startswith("llguidance-") and d.endswith(".dist-info") for d in dests), dests


def test_bundle_carries_the_native_kernel(linux_build):
    bins = analysis(linux_build)["binaries"]
    assert bins and all(dest == "native" for _, dest in bins)
    assert any(Path(src).name.startswith("_neural_native") for src, _ in bins)
    hidden = analysis(linux_build)["hiddenimports"]
    assert {"native._neural_native", "native.kernel", "_cffi_backend"} <= set(hidden)


def test_every_own_module_is_collected_including_harmony_and_all_subcommands(linux_build):
    hidden = set(analysis(linux_build)["hiddenimports"])
    from app.cli.commands import MODULES

    assert set(MODULES) <= hidden  # loaded by name: invisible to PyInstaller's import scan
    for mod in ("engine.harmony", "engine.harmony.parser", "engine.harmony.render", "engine.session",
                "app.selftest", "app.doctor", "app.api.server", "app.gui_main", "ui.main_window"):
        assert mod in hidden, mod
    assert not any(m.startswith("tests") for m in hidden)


def test_triton_kernels_ship_as_source_when_triton_is_bundled(linux_build):
    a = analysis(linux_build)
    if "triton" in a["excludes"]:
        pytest.skip("triton not installed here")
    # triton's JIT reads the source: decode and prompt kernels alike
    assert a["module_collection_mode"] == {"engine.gpu.kernels": "pyz+py", "engine.gpu.prefill.kernels": "pyz+py"}
    assert any(dest.startswith("include/python") for _, dest in a["datas"])  # headers for its launcher
    hidden = set(a["hiddenimports"])
    assert {"engine.gpu.prefill.kernels.moe_gemm", "engine.gpu.prefill.kernels.attention",
            "engine.gpu.kernels.dense"} <= hidden


def test_every_triton_kernel_module_is_in_a_collected_source_package(linux_build):
    """A new kernel package outside KERNEL_PACKAGES would ship without its source."""
    pkgs = linux_build.namespace["KERNEL_PACKAGES"]
    with_kernels = [".".join(path.relative_to(ROOT).with_suffix("").parts) for path in (ROOT / "engine").rglob("*.py")
                    if "@triton.jit" in path.read_text(encoding="utf-8")]
    assert "engine.gpu.prefill.kernels.moe_gemm" in with_kernels
    for name in with_kernels:
        assert name.startswith(pkgs), f"{name} has Triton kernels outside {pkgs}"


def test_unused_qt_and_test_tools_are_excluded(linux_build):
    ex = set(analysis(linux_build)["excludes"])
    assert {"pytest", "hypothesis", "transformers", "PySide6.QtQml", "PySide6.QtNetwork"} <= ex
    # the lab never ships: neural bench imports it lazily, which PyInstaller would otherwise follow
    assert "bench" in ex
    assert not [m for m in analysis(linux_build)["hiddenimports"] if m == "bench" or m.startswith("bench.")]
    for needed in ("PySide6.QtWidgets", "PySide6.QtGui", "PySide6.QtCore", "torch", "aiohttp", "qasync"):
        assert needed not in ex


def test_without_triton_the_gpu_kernels_and_triton_stay_out(monkeypatch):
    rec = run_spec(monkeypatch, NEURAL_BUNDLE_TRITON="0")
    a = analysis(rec)
    assert "triton" in a["excludes"]
    assert not any(m.startswith(("engine.gpu.kernels", "engine.gpu.prefill.kernels")) for m in a["hiddenimports"])
    assert a["module_collection_mode"] == {}


def test_drop_list_keeps_what_runs_and_drops_what_never_does(linux_build):
    keep = linux_build.namespace["keep"]  # applied to what the hooks collected
    for dest in ("torch/lib/libtorch_cpu.so", "torch/lib/torch_cuda.dll", "triton/backends/nvidia/bin/ptxas",
                 "triton/backends/nvidia/lib/libdevice.10.bc", "triton/_C/libtriton.so",
                 "PySide6/Qt/plugins/platforms/libqoffscreen.so", "resources/demo-model/model.safetensors"):
        assert keep((dest, "src", "BINARY")), dest
    for dest in ("torch/include/ATen/ATen.h", "torch/test/c10_test", "torch/bin/test_api",
                 "triton/backends/amd/lib/ocml.bc", "triton/backends/nvidia/lib/cupti/libcupti.so",
                 "triton/_C/libproton.so"):
        assert not keep((dest, "src", "DATA")), dest


def test_windows_build_adds_a_windowed_app_and_ships_triton_windows(monkeypatch):
    pytest.importorskip("triton")  # stands in for triton-windows here
    rec = run_spec(monkeypatch, platform="win32")
    exes = {kw["name"]: kw for _, kw in rec.of("EXE")}
    assert exes["neural"]["console"] is True
    assert exes["NeuralApp"]["console"] is False  # the shortcuts' target: no console window
    a = analysis(rec)
    assert "triton" not in a["excludes"]  # the GPU engine by default
    assert set(a["module_collection_mode"]) == {"engine.gpu.kernels", "engine.gpu.prefill.kernels"}
    dests = {dest for _, dest in a["datas"]}
    # triton-windows builds its launcher with TinyCC against Python's headers and import library
    assert {"Include", "triton/runtime/tcc"} <= dests
    assert not any(d.startswith("include/python") for d in dests)  # the Linux layout stays Linux-only
    # ptxas/cuda.h/cuda.lib: the contrib hook misses them for the triton-windows distribution name
    assert any(d.startswith("triton/backends/nvidia") for d in dests)
    assert not any(d.startswith("triton/backends/amd") for d in dests)
    assert "triton.backends.nvidia.compiler" in a["hiddenimports"]
