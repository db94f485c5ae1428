"""The app's settings and data folders on Windows (runs only under a Windows Python).

CI runs this file under Wine's Windows CPython (.ci/windows-smoke.sh): per-user folders under
%LOCALAPPDATA%, drive-letter paths with spaces and non-ASCII names, settings written and read
back, the conversation database (SQLite, WAL) opened there, and the windowed exe's log folder
(installer/entry.py) equal to the app's log folder.
"""

from __future__ import annotations

import sys
from pathlib import Path, PureWindowsPath

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "win32", reason="Windows paths: runs under a Windows Python")

ODD = "Zoë Müller (Neural) データ"  # a user/folder name with spaces, accents and CJK


@pytest.fixture
def local_appdata(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    base = tmp_path / ODD / "AppData" / "Local"
    base.mkdir(parents=True)
    monkeypatch.setenv("LOCALAPPDATA", str(base))
    monkeypatch.delenv("NEURAL_HOME", raising=False)
    return base


def test_default_folders_are_per_user_under_localappdata(local_appdata: Path) -> None:
    from app.core.paths import AppPaths

    p = AppPaths.default()
    for d in (p.data_dir, p.config_dir, p.log_dir):
        w = PureWindowsPath(d)
        assert w.drive and w.is_absolute(), d  # "C:" / "Z:", never a POSIX path
        assert Path(d).is_relative_to(local_appdata / "Neural"), d
    assert p.settings_file.name == "settings.json" and p.database.name == "conversations.db"


def test_windowed_exe_logs_where_the_app_logs(local_appdata: Path) -> None:
    from app.core.paths import AppPaths

    # installer/entry.py sends a windowed exe's stray output to %LOCALAPPDATA%\Neural\Logs
    assert AppPaths.default().log_dir == local_appdata / "Neural" / "Logs"


def test_settings_round_trip_in_an_odd_windows_folder(local_appdata: Path) -> None:
    from app.core.paths import AppPaths
    from app.core.settings import GuiSettings, load_settings, save_settings

    p = AppPaths.default().ensure()
    model = str(local_appdata / ODD / "gpt-oss-120b")
    s = GuiSettings(model_dir=model, theme="dark", max_tokens=777)
    save_settings(p.settings_file, s)
    back = load_settings(p.settings_file)
    assert back.model_dir == model and "\\" in back.model_dir
    assert (back.theme, back.max_tokens) == ("dark", 777)
    assert not p.settings_file.with_name("settings.json.tmp").exists()  # os.replace over an existing file
    save_settings(p.settings_file, GuiSettings(theme="light"))  # replace again (Windows refuses rename-over)
    assert load_settings(p.settings_file).theme == "light"


def test_conversation_database_lives_in_the_data_folder(local_appdata: Path) -> None:
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
