"""Preferences: the model folder, every engine setting with a one-line explanation and a live
estimate of what it gives, presets, the remote backend, appearance and generation defaults.

The dialog validates as the user types (the model folder through ``ModelConfig.load``, the
engine fields through ``EngineSettings``, the combination through the injected estimator)
and only enables OK/Apply when everything is valid. It never loads the engine itself: the
controller decides whether the changes need an engine restart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from app.core.settings import GenerationDefaults
from engine.config import ConfigError, ModelConfig
from engine.settings import OPTIMIZED, EngineSettings, SettingsError
from ui.qt import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSize,
    QSizePolicy,
    QSpinBox,
    QTabWidget,
    QValidator,
    QVBoxLayout,
    QWidget,
    Signal,
)

PRESETS: dict[str, EngineSettings] = {"default": EngineSettings(), "optimized": OPTIMIZED}
PRESET_TITLES = {"default": "Default",
                 "optimized": "Optimized (design doc profile: K/V ring 256, 6 scratch slots, 6.05 GiB pool)",
                 "custom": "Custom"}
# what a spin box may hold while typing: wide, so an out-of-range value is refused with a reason
# (naming the field and this machine's figure) instead of being clipped or reverted silently
TYPING_MAX = 10**7


@dataclass
class PreferencesValues:
    model_dir: str
    engine: EngineSettings
    preset: str
    theme: str
    generation: GenerationDefaults  # the defaults of a new chat (each chat can change them)
    remote_enabled: bool
    remote_url: str
    remote_key: str
    remote_model: str


# what the minimum of a field means, shown instead of the number
SPECIAL_MIN = {"pool_gib": "auto", "static_slots": "auto (half)", "kv_ring": "off", "refresh_every": "frozen",
               "cpu_threads": "auto", "ram_budget_gib": "auto", "mlock_gib": "off"}
# The fields a preset sets; the rest (threads, context, RAM) stay as the user chose them.
PROFILE_FIELDS = ("vram_budget_gib", "pool_gib", "static_slots", "scratch_slots", "lookahead_slots", "kv_ring",
                  "refresh_every", "refresh_m", "prefill_weight")

# (field, label, explanation, kind, min, max, step/decimals)
ENGINE_FIELDS: list[tuple[str, str, str, str, float, float, float]] = [
    ("vram_budget_gib", "VRAM budget (GiB)", "Total GPU memory the engine may use: core, K/V cache and expert pool.",
     "float", 0.5, 1024, 2),
    ("pool_gib", "Expert pool (GiB)", "VRAM for expert slots; 0 = whatever the budget leaves after core and K/V.",
     "float", 0, 1024, 2),
    ("static_slots", "Static slots", "Slots pinned to the hottest experts, never evicted; -1 = half of the pool.",
     "int", -1, 100000, 1),
    ("scratch_slots", "Scratch slots", "Slots that stage non-resident experts for long prompts on the GPU.",
     "int", 0, 64, 1),
    ("lookahead_slots", "Lookahead slots", "More scratch slots: a prompt copies the next layer's experts while a layer "
     "finishes (faster first token; taken from the pool, Linux only).", "int", 0, 64, 1),
    ("kv_ring", "K/V ring (tokens)", "Sliding-window layers keep only this many tokens of K/V; 0 = full context.",
     "int", 0, 131072, 1),
    ("refresh_every", "Refresh every (tokens)", "How often adaptive slots are re-chosen in decode; 0 freezes them.",
     "int", 0, 4096, 1),
    ("refresh_m", "Admissions per refresh (M)", "Experts admitted per refresh; higher adapts faster (answers can "
     "differ).", "int", 0, 1024, 1),
    ("prefill_weight", "Prefill weight", "Prompt routing counts as this many generated tokens when choosing slots.",
     "float", 0, 1024, 1),
    ("cpu_threads", "CPU threads", "Threads for experts computed on the CPU; 0 = all physical cores up to 8.",
     "int", 0, 256, 1),
    ("ram_budget_gib", "RAM budget (GiB)", "RAM the expert store may keep resident; 0 = what is free minus headroom.",
     "float", 0, 65536, 1),
    ("mlock_gib", "Lock in RAM (GiB)", "Pin this much of the hottest experts in RAM so the OS never pages them out.",
     "float", 0, 65536, 1),
    ("context", "Context length (tokens)", "Longest conversation the engine holds; the K/V cache grows with it.",
     "int", 16, 131072, 1),
]


def validate_model_dir(text: str) -> tuple[ModelConfig | None, str]:
    """The model folder's config, or None and why it is not a usable gpt-oss checkpoint."""
    if not text:
        return None, "Choose the folder of gpt-oss-120b or gpt-oss-20b (or the demo model)."
    p = Path(text).expanduser()
    try:
        cfg = ModelConfig.load(p)  # also says what a file or a missing path is (a GGUF, a cache's snapshot)
    except ConfigError as exc:
        why = str(exc)
        return None, why if why.endswith((".", "?")) else why + "."  # a sentence: dialogs append their advice
    if not (p / "tokenizer.json").is_file():
        return None, f"{p}: tokenizer.json is missing."
    if not any(p.glob("*.safetensors")):
        return None, f"{p}: no .safetensors weights found."
    return cfg, ""


class _PageScroll(QScrollArea):
    """Asks for its page's whole size: the dialog opens as tall as its rows where the screen allows (a scroll area's
    own hint is a few lines)."""

    def sizeHint(self) -> QSize:
        page = self.widget()
        if page is None:
            return super().sizeHint()
        return page.sizeHint() + QSize(self.verticalScrollBar().sizeHint().width(), 0)


def _scrolling(page: QWidget) -> QScrollArea:
    """``page`` in a frameless scroll area: where the dialog is shorter than its rows (the minimum size, or a screen
    that caps the first size at two thirds of its height), it scrolls instead of squeezing the wrapped labels, which
    lost their first and last lines."""
    area = _PageScroll()
    area.setWidgetResizable(True)
    area.setFrameShape(QScrollArea.Shape.NoFrame)
    area.setWidget(page)
    return area


class PreferencesDialog(QDialog):
    applied = Signal(object)  # PreferencesValues
    buildStoreRequested = Signal(str)  # model folder

    def __init__(self, values: PreferencesValues, estimator: Callable[[ModelConfig, EngineSettings], Any],
                 demo_dir: Path | None = None, parent: QWidget | None = None,
                 store_status: Callable[[str], tuple[bool, str]] | None = None) -> None:
        super().__init__(parent)
        self._store_status = store_status
        self.setWindowTitle("Preferences")
        self.setMinimumSize(900, 600)
        self._estimator = estimator
        self._cfg: ModelConfig | None = None
        self._initial = values
        self._setting_preset = False
        self.errors: list[str] = []
        lay = QVBoxLayout(self)
        tabs = QTabWidget()
        lay.addWidget(tabs, 1)

        # ---- model & engine ----
        eng = QWidget()
        form = QFormLayout(eng)
        form.setVerticalSpacing(2)
        row = QHBoxLayout()
        self.model_edit = QLineEdit(values.model_dir)
        self.model_edit.setPlaceholderText("Folder with config.json, tokenizer.json and *.safetensors")
        self.model_edit.textChanged.connect(self._revalidate)
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        row.addWidget(self.model_edit, 1)
        row.addWidget(browse)
        if demo_dir is not None:
            demo = QPushButton("Demo model")
            demo.setToolTip("The bundled tiny model with random weights (for trying the app)")
            demo.clicked.connect(lambda: self.model_edit.setText(str(demo_dir)))
            row.addWidget(demo)
        form.addRow("Model folder", row)
        self.model_status = QLabel()
        self.model_status.setWordWrap(True)
        # QLabel(), not "": a row without a label widget got its wrapped field's height for a narrower width
        form.addRow(QLabel(), self.model_status)
        self.store_label = QLabel()
        self.store_label.setObjectName("hint")
        self.store_label.setWordWrap(True)
        form.addRow(QLabel(), self.store_label)
        store_row = QHBoxLayout()
        self.store_btn = QPushButton("Build expert store")
        self.store_btn.clicked.connect(lambda: self.buildStoreRequested.emit(self.model_edit.text().strip()))
        self.store_progress = QProgressBar()
        self.store_progress.setRange(0, 1000)
        self.store_progress.setFixedWidth(220)
        self.store_progress.setVisible(False)
        store_row.addWidget(self.store_btn)
        store_row.addWidget(self.store_progress)
        store_row.addStretch(1)
        form.addRow(QLabel(), store_row)

        self.preset = QComboBox()
        for key in ("default", "optimized", "custom"):
            self.preset.addItem(PRESET_TITLES[key], key)
        self.preset.currentIndexChanged.connect(self._preset_chosen)
        preset_row = QHBoxLayout()
        preset_row.addWidget(self.preset, 1)
        reset = QPushButton("Restore defaults")
        reset.setToolTip("Every engine setting back to its default (backend, threads, context, RAM and GPU)")
        reset.clicked.connect(self.restore_defaults)
        preset_row.addWidget(reset)
        form.addRow("Preset", preset_row)
        self.backend = QComboBox()
        for key, title in (("auto", "Auto (GPU if available)"), ("gpu", "GPU hybrid"), ("cpu", "CPU only"),
                           ("reference", "PyTorch reference (slow, exact)")):
            self.backend.addItem(title, key)
        self.backend.currentIndexChanged.connect(self._field_changed)
        form.addRow("Backend", self.backend)
        self.fields: dict[str, QSpinBox | QDoubleSpinBox] = {}
        for name, label, help_text, kind, lo, _hi, step in ENGINE_FIELDS:
            w: QSpinBox | QDoubleSpinBox
            if kind == "int":
                w = QSpinBox()
                w.setRange(int(lo), TYPING_MAX)
            else:
                w = QDoubleSpinBox()
                w.setDecimals(int(step))
                w.setRange(lo, TYPING_MAX)
                w.setSingleStep(0.05 if step >= 2 else 1.0)
            w.setKeyboardTracking(True)
            w.lineEdit().textChanged.connect(self._field_changed)  # also for text below the minimum
            w.setObjectName(name)
            w.setMinimumWidth(130)
            if name in SPECIAL_MIN:
                w.setSpecialValueText(SPECIAL_MIN[name])
            w.valueChanged.connect(self._field_changed)
            self.fields[name] = w
            hint = QLabel(help_text)
            hint.setObjectName("hint")
            hint.setWordWrap(True)
            cell = QHBoxLayout()
            cell.setSpacing(10)
            cell.addWidget(w)
            cell.addWidget(hint, 1)
            form.addRow(label, cell)
        self.warmup = QCheckBox("Read the expert store into RAM in the background after loading (warm-up)")
        self.warmup.toggled.connect(self._field_changed)
        form.addRow("Warm-up", self.warmup)
        self.estimate_label = QLabel()
        self.estimate_label.setWordWrap(True)
        self.estimate_label.setObjectName("ok")
        form.addRow("Estimate", self.estimate_label)
        # below the tabs, beside the buttons it disables: a refusal stays in view however the page is scrolled
        self.error_label = QLabel()
        self.error_label.setObjectName("error")
        self.error_label.setWordWrap(True)
        tabs.addTab(_scrolling(eng), "Model && engine")

        # ---- generation & appearance ----
        gen = QWidget()
        gform = QFormLayout(gen)
        g = values.generation
        note = QLabel("Defaults for new chats; each chat can change them under “Chat settings”.")
        note.setObjectName("hint")
        note.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)  # not stretched to fill the tab
        gform.addRow(note)
        self.effort = QComboBox()
        for key in ("low", "medium", "high"):
            self.effort.addItem(key.title(), key)
        self.effort.setCurrentIndex(max(0, self.effort.findData(g.reasoning_effort)))
        gform.addRow("Reasoning effort", self.effort)
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(1, 131072)
        self.max_tokens.setValue(g.max_tokens)
        gform.addRow("Max answer tokens", self.max_tokens)
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(0.0, 2.0)
        self.temperature.setSingleStep(0.1)
        self.temperature.setValue(g.temperature)
        gform.addRow("Temperature", self.temperature)
        self.top_p = QDoubleSpinBox()
        self.top_p.setRange(0.01, 1.0)
        self.top_p.setSingleStep(0.05)
        self.top_p.setValue(g.top_p)
        gform.addRow("Top-p", self.top_p)
        self.seed = QSpinBox()
        self.seed.setRange(-1, 999_999_999)  # as the chat controls
        self.seed.setSpecialValueText("random")
        self.seed.setValue(max(-1, min(g.seed, 999_999_999)))
        gform.addRow("Seed", self.seed)
        self.system_prompt = QPlainTextEdit(g.system_prompt)
        self.system_prompt.setPlaceholderText("Instructions every new chat starts with (empty = none)")
        self.system_prompt.setFixedHeight(90)
        gform.addRow("Instructions", self.system_prompt)
        self.theme = QComboBox()
        for key, title in (("system", "Follow the system"), ("light", "Light"), ("dark", "Dark")):
            self.theme.addItem(title, key)
        self.theme.setCurrentIndex(max(0, self.theme.findData(values.theme)))
        gform.addRow("Theme", self.theme)
        tabs.addTab(_scrolling(gen), "Generation && appearance")

        # ---- remote backend ----
        rem = QWidget()
        rform = QFormLayout(rem)
        self.remote_enabled = QCheckBox("Send chats to a remote OpenAI-compatible server instead of the local engine")
        self.remote_enabled.setChecked(values.remote_enabled)
        self.remote_enabled.toggled.connect(self._revalidate)
        rform.addRow(self.remote_enabled)
        self.remote_url = QLineEdit(values.remote_url)
        self.remote_url.setPlaceholderText("http://host:8000/v1")
        self.remote_url.textChanged.connect(self._revalidate)
        rform.addRow("Base URL", self.remote_url)
        self.remote_key = QLineEdit(values.remote_key)
        self.remote_key.setEchoMode(QLineEdit.EchoMode.Password)
        rform.addRow("API key", self.remote_key)
        self.remote_model = QLineEdit(values.remote_model)
        self.remote_model.setPlaceholderText("empty = the server's first model")
        rform.addRow("Model", self.remote_model)
        hint = QLabel("For a vLLM or llama-server host, or another Neural, e.g. on a bigger machine.")
        hint.setObjectName("hint")
        rform.addRow(QLabel(), hint)
        tabs.addTab(rem, "Remote backend")

        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
                                        | QDialogButtonBox.StandardButton.Apply)
        self.buttons.accepted.connect(self._ok)
        self.buttons.rejected.connect(self.reject)
        self.buttons.button(QDialogButtonBox.StandardButton.Apply).clicked.connect(self._apply)
        lay.addWidget(self.error_label)
        lay.addWidget(self.buttons)

        self._load_engine(values.engine)
        self.preset.setCurrentIndex(max(0, self.preset.findData(values.preset)))
        self._sync_preset()
        self._revalidate()

    # ---- values -----------------------------------------------------------------------
    def _load_engine(self, s: EngineSettings) -> None:
        self._setting_preset = True
        try:
            self.backend.setCurrentIndex(max(0, self.backend.findData(s.backend)))
            for name, w in self.fields.items():
                w.setValue(getattr(s, name))
            self.warmup.setChecked(s.warmup)
        finally:
            self._setting_preset = False
        self._base = s  # settings the dialog shows no field for are kept as they were

    def engine_settings(self) -> EngineSettings:
        """Raises SettingsError when a value is out of range."""
        kw: dict[str, Any] = {name: (int(w.value()) if isinstance(w, QSpinBox) else float(w.value()))
                              for name, w in self.fields.items()}
        return replace(self._base, backend=self.backend.currentData(), warmup=self.warmup.isChecked(), **kw)

    def values(self) -> PreferencesValues:
        return PreferencesValues(
            model_dir=self.model_edit.text().strip(), engine=self.engine_settings(),
            preset=str(self.preset.currentData()), theme=str(self.theme.currentData()),
            generation=self.generation(),
            remote_enabled=self.remote_enabled.isChecked(), remote_url=self.remote_url.text().strip(),
            remote_key=self.remote_key.text(), remote_model=self.remote_model.text().strip())

    def generation(self) -> GenerationDefaults:
        return GenerationDefaults(reasoning_effort=str(self.effort.currentData()), max_tokens=self.max_tokens.value(),
                                  temperature=round(self.temperature.value(), 2), top_p=round(self.top_p.value(), 2),
                                  seed=self.seed.value(), system_prompt=self.system_prompt.toPlainText())

    def restore_defaults(self) -> None:
        self._load_engine(EngineSettings())
        self._select_preset("default")
        self._revalidate()

    def field_errors(self) -> list[str]:
        """Values typed outside a field's range, named by the field's label."""
        out = []
        for name, label, _h, _k, lo, hi, _s in ENGINE_FIELDS:
            w = self.fields[name]
            text = w.text().strip()
            if text and text == w.specialValueText():
                v: float | None = w.minimum()
            elif w.validate(w.text(), 0)[0] == QValidator.State.Acceptable:
                v = w.valueFromText(text)  # in the locale's number format
            else:
                v = None
            if v is None or not lo <= v <= hi:
                shown = f"{lo:g}" if name not in SPECIAL_MIN else f"{lo:g} ({SPECIAL_MIN[name]})"
                out.append(f"{label}: {text!r} is outside {shown} … {hi:g}." if text else f"{label}: empty.")
        return out

    # ---- presets ----------------------------------------------------------------------
    def _preset_chosen(self, _i: int) -> None:
        key = self.preset.currentData()
        if key in PRESETS and not self._setting_preset:
            profile = {f: getattr(PRESETS[key], f) for f in PROFILE_FIELDS}
            try:
                cur = self.engine_settings()
            except SettingsError:
                cur = self._base
            self._load_engine(replace(cur, **profile))
            self._revalidate()

    def _sync_preset(self) -> None:
        """Show "Custom" once a field differs from the chosen preset."""
        try:
            cur = self.engine_settings()
        except SettingsError:
            return
        for key, p in PRESETS.items():
            if all(getattr(p, f) == getattr(cur, f) for f in PROFILE_FIELDS):
                if self.preset.currentData() != key and self.preset.currentData() in PRESETS:
                    return  # two presets can coincide on these fields; keep the user's choice
                self._select_preset(key)
                return
        self._select_preset("custom")

    def _select_preset(self, key: str) -> None:
        self._setting_preset = True
        self.preset.setCurrentIndex(self.preset.findData(key))
        self._setting_preset = False

    def _field_changed(self, *_a: object) -> None:
        if self._setting_preset:
            return
        self._sync_preset()
        self._revalidate()

    # ---- validation -------------------------------------------------------------------
    def _browse(self) -> None:
        d = QFileDialog.getExistingDirectory(self, "Choose a gpt-oss model folder", self.model_edit.text())
        if d:
            self.model_edit.setText(d)

    def validate_model_dir(self, text: str) -> tuple[ModelConfig | None, str]:
        return validate_model_dir(text)

    def _revalidate(self, *_a: object) -> None:
        errors: list[str] = []
        cfg, why = self.validate_model_dir(self.model_edit.text().strip())
        self._cfg = cfg
        if cfg is None:
            self.model_status.setObjectName("error")
            self.model_status.setText("✗ " + why)
            errors.append(why)
        else:
            self.model_status.setObjectName("ok")
            self.model_status.setText(
                f"✓ gpt-oss checkpoint: {cfg.num_hidden_layers} layers × {cfg.num_local_experts} experts "
                f"(top-{cfg.num_experts_per_tok}), {cfg.expert_bytes() / 1e6:.2f} MB per expert.")
        self.model_status.style().polish(self.model_status)
        self.refresh_store_status(cfg is not None)
        bad_fields = self.field_errors()
        errors += bad_fields
        try:
            s = None if bad_fields else self.engine_settings()
        except SettingsError as exc:
            errors.append(str(exc))
            s = None
        self.last_estimate = None
        if s is not None and cfg is not None:
            est = self._estimator(cfg, s)
            self.last_estimate = est
            self.estimate_label.setText(est.summary() + ("\n" + " ".join(est.warnings) if est.warnings else ""))
            errors.extend(est.errors)
        elif cfg is None:
            self.estimate_label.setText("Choose a valid model folder to see the slots and memory these settings give.")
        if self.remote_enabled.isChecked() and not self.remote_url.text().strip().startswith(("http://", "https://")):
            errors.append("The remote base URL must start with http:// or https://.")
        self.errors = errors
        # A remote backend does not need a local model; local engine errors still block Apply.
        self.error_label.setText("\n".join(e for e in errors if e != why))
        self.error_label.setVisible(bool(self.error_label.text()))
        ok = not errors or (self.remote_enabled.isChecked() and cfg is None and len(errors) == 1)
        for b in (QDialogButtonBox.StandardButton.Ok, QDialogButtonBox.StandardButton.Apply):
            self.buttons.button(b).setEnabled(ok)

    def refresh_store_status(self, model_ok: bool = True) -> None:
        present, text = (False, "")
        if model_ok and self._store_status is not None:
            present, text = self._store_status(self.model_edit.text().strip())
        self.store_label.setText(text)
        self.store_label.setVisible(bool(text))
        building = self.store_progress.isVisible()
        self.store_btn.setVisible(bool(text) and not present)
        self.store_btn.setEnabled(not building)

    def set_store_progress(self, fraction: float | None, message: str = "") -> None:
        """Progress of a store build started by the button; None when it ended (message says how)."""
        building = fraction is not None
        self.store_progress.setVisible(building)
        self.store_btn.setEnabled(not building)
        if building:
            self.store_progress.setValue(int(max(0.0, min(1.0, fraction or 0.0)) * 1000))
        else:
            self.refresh_store_status()
        if message:
            self.store_label.setText(message)

    @property
    def valid(self) -> bool:
        return self.buttons.button(QDialogButtonBox.StandardButton.Ok).isEnabled()

    def _apply(self) -> None:
        if self.valid:
            self.applied.emit(self.values())

    def _ok(self) -> None:
        if self.valid:
            self.applied.emit(self.values())
            self.accept()
