"""Wires the main window to storage, the engine host, the API switch, preferences and themes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.core.conversation_store import ConversationStore
from app.core.demo_model import bundled_demo_dir, ensure_demo_model, is_demo
from app.core.expert_store import build_expert_store, store_status
from app.core.paths import AppPaths
from app.core.settings import GuiSettings, save_settings
from app.doctor.probes import this_machine
from app.gui.api_switch import ApiSwitch
from app.gui.chat_controller import ChatController, Run
from app.gui.engine_host import ERROR, GENERATING, LOADING, NO_MODEL, READY, LocalEngineHost
from app.gui.remote_backend import RemoteBackend
from app.gui.remote_run import RemoteRun
from app.gui.tasks import BackgroundTask
from engine.plan import estimate
from engine.types import Conversation, GenerationParams
from ui import theme as themes
from ui.api_panel import ApiPanelValues
from ui.first_run_dialog import DEMO, FOLDER, FirstRunDialog
from ui.latency import freeze_long_lived
from ui.main_window import MainWindow
from ui.preferences_dialog import PreferencesDialog, PreferencesValues, validate_model_dir
from ui.qt import QApplication, QDesktopServices, QFileDialog, QGuiApplication, QObject, QTimer, QUrl

log = logging.getLogger(__name__)

TELEMETRY_MS = 250  # four snapshots a second: smooth enough, and each is a cheap copy
QUIT_WAIT_S = 5.0  # at quit, the longest wait for the engine to end a cancelled turn and save its state


class AppController(QObject):
    def __init__(self, paths: AppPaths, settings: GuiSettings, store: ConversationStore | None = None,
                 window: MainWindow | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.paths = paths.ensure()
        self.settings = settings
        self.store = store or ConversationStore(paths.database)
        self.theme = themes.resolve(settings.theme)
        api = settings.api
        self.window = window or MainWindow(self.theme, ApiPanelValues(api.enabled, api.port, api.api_key,
                                                                      api.cors_origins))
        # No Qt parent: worker callbacks keep the host alive as long as they need it.
        self.host = LocalEngineHost(paths.states_dir, paths.stores_dir)
        self.api = ApiSwitch(self)
        self.prefs_dialog: PreferencesDialog | None = None
        self.models_page: Any = None  # File ▸ Get a model… (app/gui/model_page_controller.py), made on first use
        w = self.window
        self.chat = ChatController(self.store, w.chat, w.sidebar, self._start_run, lambda: self.settings.generation,
                                   forget_state=self.host.forget_state, parent=self,
                                   context_size=self._context_size)
        self.chat.can_generate = self._can_generate
        self.chat.generationFinished.connect(self._generation_finished)
        self.chat.generationStarted.connect(self._generation_started)
        w.chat.effortChanged.connect(self._remember_effort)

        self.host.stateChanged.connect(self._host_state)
        self.host.loadProgress.connect(w.engine_status.set_progress)
        self.api.worker = self.host.worker
        self.host.engineLoaded.connect(self.api.set_engine)
        self.host.engineLoaded.connect(self._engine_loaded)

        w.newChatRequested.connect(self.chat.new_conversation)
        w.stopRequested.connect(self.chat.stop)
        w.preferencesRequested.connect(self.open_preferences)
        w.exportRequested.connect(self.export_current)
        w.openLogsRequested.connect(self.open_log_folder)
        w.getModelRequested.connect(self.open_get_model)
        w.sidebar.exportRequested.connect(self.export_dialog)
        w.api_panel.toggled.connect(self._api_toggled)
        self.api.statusChanged.connect(w.api_panel.set_status)
        self.api.runningChanged.connect(w.api_panel.set_switch)
        w.closing.connect(self.shutdown)

        self.timer = QTimer(self)
        self.timer.setInterval(TELEMETRY_MS)
        self.timer.timeout.connect(self._poll)
        self.timer.start()
        self._hints = QGuiApplication.styleHints()
        self._hints.colorSchemeChanged.connect(self._follow_system_theme)
        self._closed = False
        self.api_task: asyncio.Future[Any] | None = None
        # Set by gui_main when the process ends right after aclose(): shutdown then saves what the
        # user owns and leaves the engine's teardown to the process's end (issue 21: quit lingered).
        self.ending_process = False

    # ---- startup --------------------------------------------------------------------------
    def start(self, model_dir: str | None = None, first_run_dialog: bool = True) -> None:
        """Show the newest conversation and load the model (or run the first-run flow)."""
        self.chat.refresh_list()
        newest = self.store.list_conversations()
        if newest:
            self.chat.open_conversation(newest[0].id)
        else:
            self.chat.new_conversation()
        if model_dir:
            self.settings.model_dir = str(Path(model_dir).expanduser().resolve())
            self.save()
        self._update_backend_label()
        if self.settings.model_dir:
            self.load_model(self.settings.model_dir)
        elif not self.settings.remote.enabled:
            self._first_run(first_run_dialog)
        self._host_state(self.host.state, self.host.detail)
        if self.settings.api.enabled:
            a = self.settings.api
            self.window.api_panel.set_switch(True)
            self._api_toggled(ApiPanelValues(True, a.port, a.api_key, a.cors_origins))

    def _first_run(self, ask: bool) -> None:
        """No model configured: start on the demo model at once, and offer a real folder."""
        self.use_demo_model()
        if not ask or self.settings.first_run_done:
            return
        self.settings.first_run_done = True
        self.save()

        def show() -> None:
            dlg = FirstRunDialog(self.window, validate=lambda d: validate_model_dir(d)[1])
            self.first_run_dialog = dlg
            if dlg.exec() and dlg.choice == FOLDER and dlg.folder:
                self.settings.model_dir = dlg.folder
                self.save()
                self.prepare_and_load(dlg.folder)
            elif dlg.choice == DEMO:
                pass  # already loading

        self._first_run_timer = QTimer(self)
        self._first_run_timer.setSingleShot(True)
        self._first_run_timer.timeout.connect(show)
        self._first_run_timer.start(0)

    def use_demo_model(self) -> None:
        bundled = bundled_demo_dir()
        if bundled is not None:
            self.load_model(bundled)
            return
        self.window.engine_status.set_state(LOADING, "Preparing the demo model…")
        task = BackgroundTask(lambda report: ensure_demo_model(self.paths.data_dir,
                                                               lambda ph, f: report((ph, f))), "demo-model", self)
        task.progress.connect(lambda pf: self.window.engine_status.set_progress(*pf))
        task.succeeded.connect(lambda p: self.load_model(p))
        task.failed.connect(lambda m, _tb: self.window.engine_status.set_state(
            ERROR, f"Could not write the demo model: {m}", "Choose a model folder in Preferences."))
        task.start()

    def prepare_and_load(self, model_dir: str) -> None:
        """A newly chosen real model: build its expert store first (progress in the status bar), then load."""
        present, text = store_status(model_dir, self.paths.stores_dir)
        if present or not text:  # has a store, or not a model folder (the load reports why)
            self.load_model(model_dir)
        else:
            self.build_store(model_dir, load_after=True)

    def load_model(self, model_dir: str | Path) -> BackgroundTask:
        return self.host.load(model_dir, self.settings.engine_settings())

    # ---- generation -----------------------------------------------------------------------
    def _context_size(self) -> int:
        return 0 if self.settings.remote.enabled else self.settings.engine_settings().context

    def _start_run(self, cid: str, conv: Conversation, params: GenerationParams) -> Run:
        if self.settings.remote.enabled:
            r = self.settings.remote
            run = RemoteRun(RemoteBackend(r.base_url, r.api_key, r.model), conv, params, self)
            self.chat.backend_name = f"remote {r.base_url}"
            return run
        eng = self.host.engine
        self.chat.backend_name = eng.telemetry().backend if eng is not None else ""
        return self.host.generate(cid, conv, params)

    def _can_generate(self) -> tuple[bool, str]:
        if self.settings.remote.enabled:
            return True, ""
        st = self.host.state
        if st == READY:
            return True, ""
        if st == LOADING:
            return False, "The model is loading — you can send once it is ready."
        if st == ERROR:
            return False, f"{self.host.detail} {self.host.fix}"
        if st == GENERATING:
            return False, "Still answering (the API server may be using the engine)."
        return False, "No model loaded: open Preferences to choose one, or use the demo model."

    def _generation_started(self, _cid: str) -> None:
        self._poll()
        self._host_state(self.host.state, self.host.detail)

    def _generation_finished(self, done: object) -> None:
        from engine.types import Done

        if isinstance(done, Done):
            self.window.residency.set_last_usage(done.usage)
        self._poll()
        self._host_state(self.host.state, self.host.detail)

    def _remember_effort(self, effort: str) -> None:
        self.settings.generation = replace(self.settings.generation, reasoning_effort=effort)
        self.save()

    # ---- state display --------------------------------------------------------------------
    def _host_state(self, state: str, detail: str) -> None:
        if self.settings.remote.enabled:
            self.window.engine_status.set_state("remote", f"chats go to {self.settings.remote.base_url}")
        else:
            self.window.engine_status.set_state(state, detail, self.host.fix if state == ERROR else "")
        ok, why = self._can_generate()
        if self.chat.generating:  # our own answer: the Stop button says it all
            ok, why = True, ""
        self.window.chat.set_can_send(ok, "" if ok else why)

    def _engine_loaded(self, engine: Any) -> None:
        freeze_long_lived()  # the engine's objects live as long as it does: keep them out of full GC scans
        self.chat.model_name = engine.info.name
        self._update_backend_label()
        self.window.residency.set_backend_note(engine.info.backend_note)

    def _update_backend_label(self) -> None:
        """Header: which model answers, with a short tag when it is not a real gpt-oss (full note as tooltip)."""
        tip = ""
        if self.settings.remote.enabled:
            text = f"Remote: {self.settings.remote.base_url}"
        elif self.host.engine is not None:
            info = self.host.engine.info
            text, tip = info.name, info.note
            if info.note:
                tag = "random weights" if "random weights" in info.note else "demo model, not gpt-oss"
                text = f"{info.name} · {tag}"
        else:
            text = ""
        self.window.chat.backend_label.setText(text)
        self.window.chat.backend_label.setToolTip(tip)

    def _poll(self) -> None:
        if self._closed:
            return
        t = self.host.telemetry()
        self.window.residency.update_telemetry(t, generating=self.chat.generating)
        if t is not None and self.chat.generating and t.prompt_total:
            self.chat.show_prompt_progress(t.prompt_done, t.prompt_total)

    # ---- preferences ----------------------------------------------------------------------
    def preferences_values(self) -> PreferencesValues:
        s = self.settings
        return PreferencesValues(model_dir=s.model_dir or (str(self.host.engine.info.model_dir)
                                                           if self.host.engine is not None else ""),
                                 engine=s.engine_settings(), preset=s.preset, theme=s.theme,
                                 generation=s.generation, remote_enabled=s.remote.enabled,
                                 remote_url=s.remote.base_url, remote_key=s.remote.api_key,
                                 remote_model=s.remote.model)

    def open_preferences(self, modal: bool = True) -> PreferencesDialog:
        gpu, machine = this_machine()  # the limits `neural doctor` sees: cores, RAM, the card's VRAM
        dlg = PreferencesDialog(self.preferences_values(), lambda cfg, s: estimate(cfg, s, gpu, machine),
                                bundled_demo_dir(),
                                self.window, store_status=lambda d: store_status(d, self.paths.stores_dir))
        dlg.applied.connect(self.apply_preferences)
        dlg.buildStoreRequested.connect(lambda d: self.build_store(d, dlg))
        self.prefs_dialog = dlg
        if modal:
            dlg.exec()
        else:
            dlg.show()
        return dlg

    def open_get_model(self, endpoint: str | None = None) -> Any:
        """The "Get a model" page: download gpt-oss (or another hub repo), add a folder, choose the model."""
        from app.gui.model_page_controller import ModelPageController

        if self.models_page is None:
            self.models_page = ModelPageController(self.paths, self.settings.engine_settings, self.window, endpoint)
            self.models_page.modelChosen.connect(self.use_model)
            self.models_page.storeBuilt.connect(self._model_store_built)
        self.models_page.refresh()
        page = self.models_page.page
        if page.isVisible():  # already open behind the main window
            page.raise_()
            page.activateWindow()
        else:
            page.show()
        return self.models_page

    def use_model(self, model_dir: str) -> None:
        """A model picked on the "Get a model" page becomes the configured one and loads (its expert
        store built first when it has none, as for a folder chosen at first run)."""
        self.settings.model_dir = model_dir
        self.save()
        self.prepare_and_load(model_dir)
        self._update_backend_label()

    def _model_store_built(self, model_dir: str) -> None:
        loaded = self.host.engine
        if loaded is not None and Path(loaded.info.model_dir).resolve() == Path(model_dir).resolve():
            self.load_model(model_dir)  # the CPU kernel opens the store on load

    def apply_preferences(self, v: PreferencesValues) -> bool:
        """Save the values; restart the engine when the model or engine settings changed."""
        s = self.settings
        old_engine, old_dir = s.engine_settings(), s.model_dir
        loaded_dir = str(self.host.engine.info.model_dir) if self.host.engine is not None else ""
        s.model_dir = v.model_dir
        s.set_engine_settings(v.engine)
        s.preset, s.generation = v.preset, v.generation
        theme_changed = s.theme != v.theme
        s.theme = v.theme
        s.remote.enabled, s.remote.base_url, s.remote.api_key, s.remote.model = (
            v.remote_enabled, v.remote_url, v.remote_key, v.remote_model)
        self.save()
        if theme_changed:
            self.apply_theme()
        restart = bool(v.model_dir) and (v.engine != old_engine or v.model_dir != old_dir
                                         or Path(v.model_dir).resolve() != Path(loaded_dir or ".").resolve()
                                         or self.host.state in (ERROR, NO_MODEL))
        if restart:
            self.load_model(v.model_dir)
        self._update_backend_label()
        self._host_state(self.host.state, self.host.detail)
        return restart

    def build_store(self, model_dir: str, dlg: PreferencesDialog | None = None,
                    load_after: bool = False) -> BackgroundTask:
        """Repack the experts into the store with progress (dialog and status bar); reload if in use."""
        status = self.window.engine_status

        def progress(pair: tuple[int, int]) -> None:
            done, total = pair
            frac = done / total if total else 1.0
            if dlg is not None:
                dlg.set_store_progress(frac)
            status.set_progress(f"Building the expert store ({done}/{total} experts)", frac)

        def finished(path: object) -> None:
            if dlg is not None:
                dlg.set_store_progress(None)
            self.window.statusBar().showMessage(f"Expert store written: {path}", 8000)
            loaded = self.host.engine
            in_use = loaded is not None and Path(loaded.info.model_dir).resolve() == Path(model_dir).resolve()
            if load_after or in_use:
                self.load_model(model_dir)  # the CPU kernel opens the store on load
            else:
                self._host_state(self.host.state, self.host.detail)

        def failed(message: str, _tb: str) -> None:
            if dlg is not None:
                dlg.set_store_progress(None, f"Building the store failed: {message}")
            if load_after:  # the checkpoint alone still works
                self.load_model(model_dir)
            else:
                self._host_state(self.host.state, self.host.detail)

        task = BackgroundTask(lambda report: build_expert_store(model_dir, lambda d, t: report((d, t)),
                                                                stores_dir=self.paths.stores_dir),
                              "build-store", self)
        task.progress.connect(progress)
        task.succeeded.connect(finished)
        task.failed.connect(failed)
        if dlg is not None:
            dlg.set_store_progress(0.0)
        return task.start()

    def apply_theme(self) -> None:
        self.theme = themes.resolve(self.settings.theme)
        app = QApplication.instance()
        if isinstance(app, QApplication):
            themes.apply(app, self.theme)
        self.window.set_theme(self.theme)
        self.chat.render_thread()

    def _follow_system_theme(self, *_scheme: object) -> None:
        if self.settings.theme == "system" and not self._closed:
            self.apply_theme()

    def open_log_folder(self) -> bool:
        """Open the log folder in the file manager; where there is none, show (and copy) the path."""
        folder = str(self.paths.log_dir)
        opened = QDesktopServices.openUrl(QUrl.fromLocalFile(folder))
        if opened:
            self.window.statusBar().showMessage(f"Log folder: {folder}", 8000)
        else:
            QApplication.clipboard().setText(folder)
            self.window.statusBar().showMessage(f"No file manager could open the log folder; its path is copied: "
                                                f"{folder}", 15000)
        return bool(opened)

    # ---- export ---------------------------------------------------------------------------
    def export_current(self) -> None:
        if self.chat.current_id is not None:
            self.export_dialog(self.chat.current_id)

    def export_dialog(self, cid: str) -> None:
        title = self.store.conversation(cid).title
        safe = "".join(ch if ch.isalnum() or ch in " -_" else "_" for ch in title).strip() or "conversation"
        path, _ = QFileDialog.getSaveFileName(self.window, "Export conversation", str(Path.home() / f"{safe}.md"),
                                              "Markdown (*.md)")
        if path:
            Path(path).write_text(self.chat.export_markdown(cid), encoding="utf-8")
            self.window.statusBar().showMessage(f"Exported to {path}", 5000)

    # ---- API switch -----------------------------------------------------------------------
    def _api_toggled(self, v: ApiPanelValues, attempt: int = 0) -> None:
        a = self.settings.api
        a.enabled, a.port, a.api_key, a.cors_origins = v.enabled, v.port, v.api_key, v.cors_origins
        self.save()
        self.api.set_engine(self.host.engine)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            # At startup the asyncio loop (qasync) is not running yet: a future created now would
            # land on a loop that never runs ("Starting…" forever). Retry from the Qt loop, which
            # first turns inside the running qasync loop.
            if attempt >= 200:  # 10 s without an asyncio loop: say so rather than wait forever
                self.window.api_panel.set_status("Could not start: the app's event loop is not running.", "", "error")
                self.window.api_panel.set_switch(False)
                return
            if v.enabled:
                self.window.api_panel.set_status("Starting…")
            QTimer.singleShot(50 if attempt else 0, self,
                              lambda: None if self._closed else self._api_toggled(v, attempt + 1))
            return
        if v.enabled:
            self.window.api_panel.set_status("Starting…")
            self.api_task = loop.create_task(self.api.start(v.port, v.api_key, a.origins(), a.host))
        else:
            self.api_task = loop.create_task(self.api.stop())

    # ---- persistence & shutdown -----------------------------------------------------------
    def save(self) -> None:
        try:
            save_settings(self.paths.settings_file, self.settings)
        except OSError as exc:
            log.warning("could not save settings: %s", exc)

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.timer.stop()
        with contextlib.suppress(RuntimeError, TypeError):  # already gone with the application
            self._hints.colorSchemeChanged.disconnect(self._follow_system_theme)
        self.chat.save_interrupted()
        if self.ending_process:
            self.host.shutdown(QUIT_WAIT_S, release=False)
        else:
            self.host.shutdown()
        self.store.close()

    async def aclose(self) -> None:
        """Shutdown, then stop the API server (needs the event loop, so it is awaited)."""
        self.shutdown()
        if self.api_task is not None and not self.api_task.done():
            await asyncio.wait([self.api_task], timeout=10)
        await self.api.stop()

    def is_demo_model(self) -> bool:
        return bool(self.settings.model_dir) and is_demo(self.settings.model_dir)
