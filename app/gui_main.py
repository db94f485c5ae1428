"""Start the desktop app: ``main(argv) -> exit code`` (``neural`` and ``neural gui`` call it).

Qt and asyncio share one loop (qasync), so the API server and the remote backend's aiohttp
streams run on the GUI thread's loop while the engine runs on worker threads.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path

log = logging.getLogger("neural.gui")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", metavar="DIR", help="gpt-oss model folder to load (saved as the configured model)")
    p.add_argument("--screenshot-dir", metavar="DIR",
                   help="run a scripted tour, save PNG screenshots of the main window, the residency panel "
                        "while generating and the preferences dialog into DIR, then quit")
    p.add_argument("--home", metavar="DIR", help="keep settings, conversations and logs under DIR (like NEURAL_HOME)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="neural gui", description="The Neural desktop app.")
    add_arguments(p)
    args = p.parse_args(argv if argv is not None else [])
    return run_app(args.model, args.screenshot_dir, args.home, end_process=True)


def run_app(model: str | None = None, screenshot_dir: str | None = None, home: str | None = None,
            end_process: bool = False) -> int:
    """``end_process``: the process ends (os._exit) as soon as the window closed and everything
    the user owns is saved, instead of returning; for the app's own entry points, not in-process
    callers (the screenshot script)."""
    if home:
        os.environ["NEURAL_HOME"] = str(Path(home).resolve())
    from app.core.paths import AppPaths

    paths = AppPaths.default().ensure()
    from app.gui.crash import CrashHandler, enable_faulthandler, setup_logging

    setup_logging(paths.log_file)
    enable_faulthandler(paths.fault_file)
    log.info("starting (data %s, config %s)", paths.data_dir, paths.config_dir)

    import qasync

    from app.core.settings import load_settings
    from app.gui.app_controller import AppController
    from ui import theme as themes
    from ui.crash_dialog import CrashDialog
    from ui.qt import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(app, QApplication)
    app.setApplicationName("Neural")
    app.setOrganizationName("Neural")
    app.setQuitOnLastWindowClosed(False)  # the asyncio main below ends the loop after cleanup
    settings = load_settings(paths.settings_file)
    themes.apply(app, themes.resolve(settings.theme))
    from app.gui.single_instance import confirm_second_instance, take_lock

    _instance_lock, other = take_lock(paths.data_dir)  # a local: held until run_app returns
    if other is not None and screenshot_dir is None and not confirm_second_instance(other, paths.data_dir):
        return 0

    holder: dict[str, AppController] = {}

    def show_crash(message: str, details: str, log_file: Path) -> None:
        parent = holder["c"].window if "c" in holder else None
        CrashDialog(message, details, log_file, parent).exec()

    crash = CrashHandler(paths.log_file, show_crash).install()
    from app.gui.gc_guard import GuiThreadGarbageCollector

    collector = GuiThreadGarbageCollector()
    controller = AppController(paths, settings)
    controller.ending_process = end_process
    holder["c"] = controller
    controller.window.show()
    controller.start(model_dir=model, first_run_dialog=screenshot_dir is None)

    async def run() -> int:
        closed = asyncio.Event()
        controller.window.closing.connect(closed.set)
        if screenshot_dir:
            from app.gui.screenshot_tour import run_tour

            tour = asyncio.ensure_future(run_tour(controller, Path(screenshot_dir)))
            await tour
            controller.window.close()
        await closed.wait()
        await controller.aclose()
        return 0

    try:
        code = qasync.run(run())
    finally:
        if not end_process:  # a last collection only matters to a process that goes on
            collector.stop()
        crash.uninstall()
    log.info("exit %s", code)
    if end_process:
        from app.gui.quick_exit import end_now

        end_now(int(code or 0), _instance_lock)
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
