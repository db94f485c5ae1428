"""Entry point of the bundled app (PyInstaller builds ``neural`` and, on Windows, ``NeuralApp`` from it).

No arguments start the desktop app on the configured model (the bundled demo on a fresh
machine); ``--self-test`` runs the headless end-to-end check; ``--check-kernels`` imports every
Triton kernel module of the bundle and checks that Triton can read each kernel's source (CI's
bundle smoke test); anything else is the ``neural`` command line (``neural doctor`` ...).
"""

from __future__ import annotations

import multiprocessing
import os
import sys


def _give_windowed_exe_streams() -> None:
    # A windowed Windows executable starts with sys.stdout/stderr set to None; any print (or a
    # library's warning) would then raise. Send them to a log file beside the app's other logs.
    if sys.stdout is not None and sys.stderr is not None:
        return
    base = os.environ.get("LOCALAPPDATA") or os.path.expanduser("~")
    log_dir = os.path.join(base, "Neural", "Logs")
    try:
        os.makedirs(log_dir, exist_ok=True)
        stream = open(os.path.join(log_dir, "console.log"), "a", encoding="utf-8", buffering=1)  # noqa: SIM115
    except OSError:
        stream = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
    if sys.stdout is None:
        sys.stdout = stream
    if sys.stderr is None:
        sys.stderr = stream


def _point_triton_at_the_bundle() -> None:
    # triton-windows finds its TinyCC and its CUDA headers/cuda.lib through sysconfig's
    # site-packages, which a frozen app does not have; point it at the copies in _internal.
    if sys.platform != "win32" or not getattr(sys, "frozen", False):
        return
    tri = os.path.join(getattr(sys, "_MEIPASS", os.path.dirname(sys.executable)), "triton")
    tcc = os.path.join(tri, "runtime", "tcc", "tcc.exe")
    if os.path.isfile(tcc):
        os.environ.setdefault("CC", tcc)
    cuda = os.path.join(tri, "backends", "nvidia")
    if os.path.isfile(os.path.join(cuda, "include", "cuda.h")):
        os.environ["CUDA_PATH"] = cuda  # the ptxas/headers this Triton was built with, not a system CUDA


KERNEL_PACKAGES = ("engine.gpu.kernels", "engine.gpu.prefill.kernels")


def check_kernels() -> int:
    """Import every module of the kernel packages; each @triton.jit function's source must be
    readable with inspect (Triton's JIT needs it). One line per kernel; exit 1 on any failure."""
    import importlib
    import inspect
    import pkgutil

    import triton  # noqa: F401  (fails clearly when the bundle has no Triton)

    def is_kernel(obj: object, module: str) -> bool:  # JITFunction, or InterpretedFunction under TRITON_INTERPRET
        fn = getattr(obj, "fn", None)
        return type(obj).__module__.startswith("triton.") and inspect.isfunction(fn) and fn.__module__ == module

    found, bad = 0, 0
    for name in KERNEL_PACKAGES:
        pkg = importlib.import_module(name)
        for info in pkgutil.iter_modules(pkg.__path__, name + "."):
            mod = importlib.import_module(info.name)
            for attr, obj in sorted(vars(mod).items()):
                if not is_kernel(obj, mod.__name__):
                    continue
                try:
                    src = inspect.getsource(obj.fn)  # type: ignore[attr-defined]
                    ok = f"def {obj.fn.__name__}(" in src  # type: ignore[attr-defined]
                except (OSError, TypeError) as e:
                    src, ok = str(e), False
                found += 1
                bad += not ok
                print(f"{'ok ' if ok else 'BAD'} {info.name}.{attr}: {len(src.splitlines())} source lines", flush=True)
    print(f"{found} Triton kernels, {bad} without source", flush=True)
    return 1 if bad or not found else 0


def translate_argv(argv: list[str]) -> list[str]:
    """``--self-test [opts]`` is the bundle's spelling of ``selftest [opts]``."""
    if argv and argv[0] in ("--self-test", "--selftest"):
        return ["selftest", *argv[1:]]
    return argv


def main() -> int:
    multiprocessing.freeze_support()
    _give_windowed_exe_streams()
    _point_triton_at_the_bundle()
    if sys.argv[1:2] == ["--check-kernels"]:
        return check_kernels()
    from app.cli.main import main as cli_main

    return cli_main(translate_argv(sys.argv[1:]))


if __name__ == "__main__":
    sys.exit(main())
