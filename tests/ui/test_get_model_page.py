"""The "Get a model" page driven like a user would, downloading from a local hub (tests/hub_server.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hub_server import HubRepo, HubServer

from app.core import model_download as md
from engine.plan import GIB, Machine
from engine.settings import EngineSettings

REPO = "openai/gpt-oss-tiny"


@pytest.fixture
def hub(synth_dir, monkeypatch: pytest.MonkeyPatch):
    import huggingface_hub.constants as hf_constants

    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)  # a local hub, never the internet
    monkeypatch.setattr(md, "HTTP_CHUNK", 16 << 10)
    server = HubServer([HubRepo.from_folder(REPO, synth_dir("tiny", 0, max_shard_bytes=200_000))]).start()
    yield server
    server.stop()


@pytest.fixture
def page_ctl(qtbot, hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from app.core.paths import AppPaths
    from app.gui.model_page_controller import ModelPageController

    monkeypatch.setenv("NEURAL_HOME", str(tmp_path / "home"))  # nothing of the app's data outside the test
    ctl = ModelPageController(AppPaths.under(tmp_path / "home"), lambda: EngineSettings(backend="cpu"),
                              endpoint=hub.url, machine=lambda: (False, Machine(2, 8 * GIB, None), 6 * GIB),
                              confirm=lambda _q: True)
    qtbot.addWidget(ctl.page)
    ctl.page.show()
    progress: list[tuple[str, float | None]] = []
    shown = ctl.page.set_progress

    def record(text: str, fraction: float | None) -> None:
        progress.append((text, fraction))
        shown(text, fraction)

    ctl.page.set_progress = record  # type: ignore[method-assign]
    ctl.progress_seen = progress
    yield ctl
    if ctl.task is not None:
        ctl._cancel.set()
        ctl.task.wait(30)
        qtbot.wait(50)


def test_the_menu_offers_the_page(qtbot) -> None:
    from ui.main_window import MainWindow

    w = MainWindow()
    qtbot.addWidget(w)
    with qtbot.waitSignal(w.getModelRequested, timeout=1000):
        w.get_model_action.trigger()
    assert w.get_model_action.text() == "Get a model…"


def test_gpt_oss_is_offered_with_its_size(page_ctl) -> None:
    buttons = page_ctl.page.choice_buttons
    assert list(buttons) == ["openai/gpt-oss-20b", "openai/gpt-oss-120b"]
    assert "GiB" in buttons["openai/gpt-oss-120b"].text()


def test_download_shows_progress_then_lists_the_model_with_its_store(qtbot, page_ctl, hub: HubServer) -> None:
    page = page_ctl.page
    hub.faults.rate = 1_000_000  # bytes/s, so the progress has a rate to show
    page.choose(REPO)
    qtbot.waitUntil(page.download_btn.isEnabled, timeout=30000)
    fit = page.fit_label.text()
    assert "to download (10 files)" in fit and "Disk" in fit and "RAM" in fit and "CPU engine" in fit
    qtbot.mouseClick(page.download_btn, qtbot_button())
    assert page.cancel_btn.isEnabled() and not page.download_btn.isEnabled()
    qtbot.waitUntil(lambda: "is downloaded, verified" in page.message.text(), timeout=60000)
    texts = [t for t, _f in page_ctl.progress_seen]
    assert any(t.startswith("Downloading model-") and "MiB/s" in t and "left" in t for t in texts), texts
    assert any(t.startswith("Building the expert store") for t in texts)
    row = page.selected_row()
    assert row is not None and row.name == REPO and row.usable and row.store_present
    assert "Expert store: " in row.detail and "experts-packed.nstore" in row.detail
    assert page.models.count() == 1 and not page.store_btn.isEnabled()
    with qtbot.waitSignal(page_ctl.modelChosen, timeout=1000) as chosen:
        qtbot.mouseClick(page.use_btn, qtbot_button())
    assert chosen.args == [row.path]


def test_a_click_right_after_the_outcome_is_not_ignored(qtbot, page_ctl) -> None:
    """The outcome reaches the GUI before the worker thread has finished its bookkeeping (on a busy machine that
    gap can be long): "Resume download", enabled by then, must start a download, not be dropped as busy."""
    import threading

    from app.gui.tasks import BackgroundTask

    hold = threading.Event()
    old = BackgroundTask(lambda _r: hold.wait(10), "still-finishing").start()  # work returned; thread lingers
    page_ctl.task = old
    page_ctl._failed(REPO, "DownloadCancelled: Download cancelled")
    try:
        task = page_ctl.start_download(REPO)
        assert task is not None and page_ctl.task is task
    finally:
        hold.set()
        old.wait(10)
    qtbot.waitUntil(lambda: page_ctl.task is None, timeout=30000)  # the new download's outcome


def test_an_outcome_that_arrives_after_the_page_is_gone_is_dropped(qtbot, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The page can be closed and deleted while a hub check or a download still runs (the user left it; in CI a
    test's teardown): their outcomes arrive later and must not reach the deleted widgets. Before, a late check's
    failure raised "Internal C++ object already deleted" in the Qt event loop, in whatever ran next."""
    import threading

    from app.core.model_hub import DownloadError
    from app.core.paths import AppPaths
    from app.gui import model_page_controller as mpc
    from ui.qt import is_alive

    hold = threading.Event()

    def slow_listing(repo_id: str, endpoint: str | None = None) -> None:
        hold.wait(10)
        raise DownloadError(f"{repo_id}: no such repo")

    monkeypatch.setattr(mpc, "list_repo", slow_listing)
    monkeypatch.setenv("NEURAL_HOME", str(tmp_path / "home"))
    ctl = mpc.ModelPageController(AppPaths.under(tmp_path / "home"), lambda: EngineSettings(backend="cpu"),
                                  machine=lambda: (False, Machine(2, 8 * GIB, None), 6 * GIB), confirm=lambda _q: True)
    check = ctl.check("someone/slow")
    download = ctl.start_download("someone/slow")
    assert download is not None
    import shiboken6

    shiboken6.delete(ctl.page)
    assert not is_alive(ctl.page)
    hold.set()
    assert check.wait(10) and download.wait(10)
    qtbot.waitUntil(lambda: ctl.task is None, timeout=10000)  # the download's failure was delivered, and dropped
    qtbot.wait(50)


def test_cancel_keeps_the_partial_download_which_resumes_or_is_removed(qtbot, page_ctl, hub: HubServer,
                                                                       tmp_path: Path) -> None:
    page = page_ctl.page
    hub.faults.rate = 150_000
    page.choose(REPO)
    qtbot.waitUntil(page.download_btn.isEnabled, timeout=30000)
    qtbot.mouseClick(page.download_btn, qtbot_button())
    qtbot.waitUntil(lambda: any(t.startswith("Downloading model-") for t, _f in page_ctl.progress_seen),
                    timeout=30000)
    qtbot.mouseClick(page.cancel_btn, qtbot_button())
    qtbot.waitUntil(lambda: "cancelled" in page.message.text(), timeout=30000)
    assert page.progress_label.text().startswith("Cancelled: downloading again resumes")
    row = page.selected_row()
    assert row is not None and not row.usable and "Download not finished" in row.detail
    assert page.use_btn.text() == "Resume download" and page.use_btn.isEnabled()
    hub.faults.rate = 0
    already = len(hub.log)
    qtbot.mouseClick(page.use_btn, qtbot_button())  # resumes: the partial shard continues with a Range request
    qtbot.waitUntil(lambda: "is downloaded, verified" in page.message.text(), timeout=60000)
    assert any(m == "GET" and rng for m, _p, rng in hub.log[already:]), hub.log[already:]
    row = page.selected_row()
    assert row is not None and row.usable and page.use_btn.text() == "Use this model"
    assert page.remove_btn.text() == "Delete…"
    from app.core.expert_store import find_expert_store

    store = find_expert_store(row.path)
    assert store is not None and store.is_relative_to(tmp_path / "home")
    qtbot.mouseClick(page.remove_btn, qtbot_button())
    assert page.models.count() == 0 and not Path(row.path).exists() and not store.exists()
    assert "and its expert store" in page.message.text()


def test_an_unknown_repo_is_explained_on_the_page(qtbot, page_ctl) -> None:
    page = page_ctl.page
    page.choose("openai/nope")
    qtbot.waitUntil(lambda: "No model" in page.fit_label.text(), timeout=30000)
    assert not page.download_btn.isEnabled()


def test_a_checkpoint_the_engine_cannot_run_is_refused_in_the_check(qtbot, page_ctl, hub: HubServer,
                                                                    synth_dir) -> None:
    import json

    src = synth_dir("tiny", 0, max_shard_bytes=200_000)
    cfg = json.loads((src / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "fp8"}
    hub.repos["someone/gpt-oss-fp8"] = HubRepo.from_folder("someone/gpt-oss-fp8", src,
                                                           {"config.json": json.dumps(cfg).encode()})
    page = page_ctl.page
    page.choose("someone/gpt-oss-fp8")
    qtbot.waitUntil(lambda: "stores its experts as" in page.fit_label.text(), timeout=30000)
    assert "'fp8'" in page.fit_label.text() and not page.download_btn.isEnabled()
    assert page.message.text().startswith("No models here yet")


def qtbot_button():
    from ui.qt import Qt

    return Qt.MouseButton.LeftButton


@pytest.fixture
def gui_thread_gc(qapp):
    """As tests/app/gui/conftest.py does for the engine's threads: no automatic GC while they run
    (app/gui/gc_guard.py), a collection on the GUI thread afterwards."""
    import gc

    was = gc.isenabled()
    gc.disable()
    yield
    for _ in range(3):
        qapp.processEvents()
    gc.collect()
    if was:
        gc.enable()


def test_the_model_chosen_on_the_page_is_configured_and_loads(qtbot, tmp_path: Path, tiny_model: Path,
                                                              monkeypatch: pytest.MonkeyPatch, gui_thread_gc) -> None:
    from app.core.expert_store import find_expert_store
    from app.core.paths import AppPaths
    from app.core.settings import load_settings
    from app.gui.app_controller import AppController
    from app.gui.engine_host import READY

    monkeypatch.setenv("NEURAL_HOME", str(tmp_path / "home"))
    paths = AppPaths.under(tmp_path / "home")
    settings = load_settings(paths.settings_file)
    settings.set_engine_settings(EngineSettings(backend="cpu", dtype="float32", cpu_threads=1, context=2048))
    c = AppController(paths, settings)
    qtbot.addWidget(c.window)
    try:
        page = c.open_get_model()
        qtbot.addWidget(page.page)
        page.add_folder(str(tiny_model))
        assert page.page.selected_path() == str(tiny_model.resolve())
        qtbot.mouseClick(page.page.use_btn, qtbot_button())
        qtbot.waitUntil(lambda: c.host.state == READY, timeout=60000)
        assert load_settings(paths.settings_file).model_dir == str(tiny_model.resolve())
        assert find_expert_store(tiny_model, paths.stores_dir) is not None  # built first, in the app's folder
    finally:
        c.shutdown()


def test_the_app_opens_the_page_from_its_file_menu(qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.core.paths import AppPaths
    from app.core.settings import load_settings
    from app.gui.app_controller import AppController

    monkeypatch.setenv("NEURAL_HOME", str(tmp_path / "home"))
    paths = AppPaths.under(tmp_path / "home")
    c = AppController(paths, load_settings(paths.settings_file))
    qtbot.addWidget(c.window)
    try:
        c.window.get_model_action.trigger()
        assert c.models_page is not None and c.models_page.page.isVisible()
        assert c.models_page.data_dir == paths.data_dir
        qtbot.addWidget(c.models_page.page)
    finally:
        c.shutdown()
