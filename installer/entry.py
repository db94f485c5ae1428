"""Entry point of the bundled app (PyInstaller builds ``neural`` and, on Windows, ``NeuralApp`` from it).

No arguments start the desktop app on the configured model (the bundled demo on a fresh
machine); ``--self-test`` runs the headless end-to-end check; anything else is the ``neural``
command line (``neural doctor``, ``neural serve`` ...).
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


def translate_argv(argv: list[str]) -> list[str]:
    """``--self-test [opts]`` is the bundle's spelling of ``selftest [opts]``."""
    if argv and argv[0] in ("--self-test", "--selftest"):
        return ["selftest", *argv[1:]]
    return argv


def main() -> int:
    multiprocessing.freeze_support()
    _give_windowed_exe_streams()
    from app.cli.main import main as cli_main

    return cli_main(translate_argv(sys.argv[1:]))


if __name__ == "__main__":
    sys.exit(main())
