"""The app's settings and data folders on Windows (runs only under a Windows Python).

CI runs this file under Wine's Windows CPython (.ci/windows-smoke.sh): per-user folders under
%LOCALAPPDATA%, drive-letter paths with spaces and non-ASCII names, settings written and read
back, the conversation database (SQLite, WAL) opened there, and the windowed exe's log folder
(installer/entry.py, from %LOCALAPPDATA%) equal to the app's log folder (platformdirs, from the shell).
"""

from __future__ import annotations

import sys
from pathlib import Path, PureWindowsPath

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "win32", reason="Windows paths: runs under a Windows Python")

ODD = "Zoë Müller (Neural) データ"  # a user/folder name with spaces, accents and CJK


@pytest.fixture
def odd_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / ODD / "Neural"
    monkeypatch.setenv("NEURAL_HOME", str(home))
    return home


def test_default_folders_are_per_user_under_local_appdata(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from app.core.paths import AppPaths

    monkeypatch.delenv("NEURAL_HOME", raising=False)
    # platformdirs asks the shell (SHGetKnownFolderPath), not the environment; both must agree
    local = Path(os.environ["LOCALAPPDATA"])
    p = AppPaths.default()
    for d in (p.data_dir, p.config_dir, p.log_dir):
        w = PureWindowsPath(d)
        assert w.drive and w.is_absolute(), d  # "C:", never a POSIX path
        assert Path(d).is_relative_to(local / "Neural"), d
    assert p.settings_file.name == "settings.json" and p.database.name == "conversations.db"
    # installer/entry.py sends a windowed exe's stray output to %LOCALAPPDATA%\Neural\Logs
    assert p.log_dir == local / "Neural" / "Logs"


def test_settings_round_trip_in_an_odd_windows_folder(odd_home: Path) -> None:
    from app.core.paths import AppPaths
    from app.core.settings import GuiSettings, load_settings, save_settings

    p = AppPaths.default().ensure()
    assert p.config_dir.is_relative_to(odd_home)
    model = str(odd_home / ODD / "gpt-oss-120b")
    save_settings(p.settings_file, GuiSettings(model_dir=model, theme="dark"))
    back = load_settings(p.settings_file)
    assert back.model_dir == model and "\\" in back.model_dir
    assert back.theme == "dark"
    assert not p.settings_file.with_name("settings.json.tmp").exists()
    save_settings(p.settings_file, GuiSettings(theme="light"))  # os.replace over an existing file
    assert load_settings(p.settings_file).theme == "light"


def test_conversation_database_lives_in_the_data_folder(odd_home: Path) -> None:
    from app.core.conversation_store import ConversationStore
    from app.core.paths import AppPaths

    p = AppPaths.default().ensure()
    store = ConversationStore(p.database)
    try:
        cid = store.create_conversation(title=ODD)
        assert store.conversation(cid).title == ODD
        assert store.journal_mode() == "wal"
    finally:
        store.close()
    assert p.database.is_file()


def test_neural_home_takes_a_windows_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.core.paths import AppPaths

    home = tmp_path / ODD / "portable"
    monkeypatch.setenv("NEURAL_HOME", str(home).replace("/", "\\"))
    p = AppPaths.default().ensure()
    assert p.data_dir == home / "data" and p.data_dir.is_dir()
