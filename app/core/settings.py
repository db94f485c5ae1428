"""The desktop app's settings, persisted as JSON in the platform config dir.

Engine settings are stored as the field dict of :class:`engine.settings.EngineSettings` and
validated by it; a damaged or outdated file never stops the app from starting: unknown keys
are dropped and invalid values fall back to defaults (and the problem is logged).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from engine.settings import EngineSettings, SettingsError

log = logging.getLogger(__name__)


@dataclass
class ApiSwitchSettings:
    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = 8080
    api_key: str = ""
    cors_origins: str = ""  # comma-separated browser origins

    def origins(self) -> tuple[str, ...]:
        return tuple(o.strip() for o in self.cors_origins.split(",") if o.strip())


@dataclass
class RemoteSettings:
    enabled: bool = False
    base_url: str = "http://127.0.0.1:8000/v1"
    api_key: str = ""
    model: str = ""


@dataclass
class GuiSettings:
    model_dir: str = ""
    engine: dict[str, Any] = field(default_factory=dict)  # EngineSettings fields that differ from defaults
    preset: str = "default"
    theme: str = "system"  # system | light | dark
    reasoning_effort: str = "medium"
    max_tokens: int = 2048
    temperature: float = 1.0
    show_residency: bool = True
    first_run_done: bool = False
    api: ApiSwitchSettings = field(default_factory=ApiSwitchSettings)
    remote: RemoteSettings = field(default_factory=RemoteSettings)

    def engine_settings(self) -> EngineSettings:
        try:
            return EngineSettings.from_dict(self.engine)
        except (SettingsError, TypeError) as exc:
            log.warning("stored engine settings rejected (%s); using defaults", exc)
            return EngineSettings()

    def set_engine_settings(self, s: EngineSettings) -> None:
        default = EngineSettings().to_dict()
        self.engine = {k: v for k, v in s.to_dict().items() if default.get(k) != v}


def _filled(cls: Any, data: Any) -> Any:
    """Build a dataclass from a dict, keeping only known keys whose type matches the default's."""
    obj = cls()
    if not isinstance(data, dict):
        return obj
    for f in fields(cls):
        if f.name not in data:
            continue
        cur, new = getattr(obj, f.name), data[f.name]
        if hasattr(cur, "__dataclass_fields__"):
            setattr(obj, f.name, _filled(type(cur), new))
        elif isinstance(cur, bool) or isinstance(new, bool):
            if isinstance(cur, bool) and isinstance(new, bool):
                setattr(obj, f.name, new)
        elif (isinstance(cur, float) and isinstance(new, int | float)) or isinstance(new, type(cur)):
            setattr(obj, f.name, type(cur)(new))
        else:
            log.warning("settings: ignoring %s=%r (expected %s)", f.name, new, type(cur).__name__)
    return obj


def load_settings(path: Path) -> GuiSettings:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return GuiSettings()
    except (OSError, ValueError) as exc:
        log.warning("%s unreadable (%s); starting with defaults", path, exc)
        return GuiSettings()
    return _filled(GuiSettings, data)  # type: ignore[no-any-return]


def save_settings(path: Path, s: GuiSettings) -> None:
    """Write atomically: a crash mid-write leaves the previous file intact."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(asdict(s), indent=2, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)
