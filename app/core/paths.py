"""Where the desktop app keeps its files.

platformdirs picks the per-user locations (``%LOCALAPPDATA%\\Neural`` on Windows,
``~/.local/share/neural`` on Linux). ``NEURAL_HOME`` puts everything under one folder instead,
which tests, portable installs and the screenshot script use.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

APP_NAME = "Neural"


@dataclass(frozen=True)
class AppPaths:
    data_dir: Path  # conversations.db, saved engine states, expert stores, generated demo model
    config_dir: Path  # settings.json
    log_dir: Path  # neural.log, crash dumps

    @property
    def database(self) -> Path:
        return self.data_dir / "conversations.db"

    @property
    def states_dir(self) -> Path:
        return self.data_dir / "states"

    @property
    def stores_dir(self) -> Path:
        """Expert stores the app builds, one folder per checkpoint fingerprint (app/core/expert_store.py)."""
        return self.data_dir / "expert-stores"

    @property
    def settings_file(self) -> Path:
        return self.config_dir / "settings.json"

    @property
    def log_file(self) -> Path:
        return self.log_dir / "neural.log"

    @property
    def fault_file(self) -> Path:
        return self.log_dir / "faulthandler.log"

    @classmethod
    def under(cls, root: str | Path) -> AppPaths:
        root = Path(root)
        return cls(data_dir=root / "data", config_dir=root / "config", log_dir=root / "logs")

    @classmethod
    def default(cls) -> AppPaths:
        home = os.environ.get("NEURAL_HOME")
        if home:
            return cls.under(home)
        return cls(
            data_dir=Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)),
            config_dir=Path(platformdirs.user_config_dir(APP_NAME, appauthor=False)),
            log_dir=Path(platformdirs.user_log_dir(APP_NAME, appauthor=False)),
        )

    def ensure(self) -> AppPaths:
        for d in (self.data_dir, self.config_dir, self.log_dir, self.states_dir):
            d.mkdir(parents=True, exist_ok=True)
        return self
