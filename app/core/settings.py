"""The desktop app's settings, persisted as JSON in the platform config dir.

Engine settings are stored as the field dict of :class:`engine.settings.EngineSettings` and
validated by it; a damaged or outdated file never stops the app from starting: unknown keys
are dropped and invalid values fall back to defaults (and the problem is logged).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from engine.settings import EngineSettings, SettingsError
from engine.types import GenerationParams

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


EFFORTS = ("low", "medium", "high")


@dataclass
class GenerationDefaults:
    """How an answer is generated: the app's defaults (Preferences) and, per conversation, the chat
    controls; one type from the settings file through the dialog to the engine's request."""

    reasoning_effort: str = "medium"
    max_tokens: int = 2048
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = -1  # -1 = a new random seed each answer
    system_prompt: str = ""  # instructions for the model (rendered as the harmony developer message)

    def errors(self) -> list[str]:
        """What is out of range, each naming the control."""
        out = []
        if self.reasoning_effort not in EFFORTS:
            out.append(f"Reasoning effort must be low, medium or high (got {self.reasoning_effort!r}).")
        if not 1 <= self.max_tokens <= 131072:
            out.append(f"Max answer tokens must be between 1 and 131072 (got {self.max_tokens}).")
        if not 0.0 <= self.temperature <= 2.0:
            out.append(f"Temperature must be between 0 and 2 (got {self.temperature:g}).")
        if not 0.0 < self.top_p <= 1.0:
            out.append(f"Top-p must be above 0 and at most 1 (got {self.top_p:g}).")
        if not -1 <= self.seed <= 999_999_999:
            out.append(f"Seed must be -1 (random) or 0 … 999,999,999 (got {self.seed}).")
        return out

    def params(self) -> GenerationParams:
        """The engine request (the reasoning effort and system prompt travel in the Conversation)."""
        return GenerationParams(max_tokens=self.max_tokens, temperature=self.temperature, top_p=self.top_p,
                                seed=None if self.seed < 0 else self.seed)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any, base: GenerationDefaults | None = None) -> GenerationDefaults:
        """Known keys of the right type over ``base`` (default: the defaults); bad values dropped."""
        g = _filled(cls, data, base)
        return g if not g.errors() else (base or cls())


@dataclass
class GuiSettings:
    model_dir: str = ""
    engine: dict[str, Any] = field(default_factory=dict)  # EngineSettings fields that differ from defaults
    preset: str = "default"
    theme: str = "system"  # system | light | dark
    generation: GenerationDefaults = field(default_factory=GenerationDefaults)
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


def _filled(cls: Any, data: Any, base: Any = None) -> Any:
    """Build a dataclass from a dict, keeping only known keys whose type matches the default's."""
    obj = replace(base) if base is not None else cls()
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
    if isinstance(data, dict) and "generation" not in data:  # files before GenerationDefaults
        data["generation"] = {k: data[k] for k in ("reasoning_effort", "max_tokens", "temperature") if k in data}
    s: GuiSettings = _filled(GuiSettings, data)
    if s.generation.errors():
        log.warning("stored generation defaults rejected (%s); using defaults", " ".join(s.generation.errors()))
        s.generation = GenerationDefaults()
    return s


def save_settings(path: Path, s: GuiSettings) -> None:
    """Write atomically: a crash mid-write leaves the previous file intact."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(asdict(s), indent=2, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)
