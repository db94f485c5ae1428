"""The per-conversation chat controls: instructions (system prompt), temperature, top-p, seed and
answer length, a context-usage meter, and attaching files or a folder's files as context.

The values are one :class:`GenerationDefaults` (the same type Preferences edits for new chats);
the controller stores them with the conversation and sends them with every answer.
"""

from __future__ import annotations

from app.core.settings import GenerationDefaults
from ui.qt import (
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
    Signal,
)


class ChatControls(QFrame):
    changed = Signal(object)  # GenerationDefaults
    attachRequested = Signal(list)  # paths (files, or one folder)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chatControls")
        self._effort = "medium"
        self._loading = False
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 4, 12, 4)
        form = QFormLayout()
        form.setVerticalSpacing(2)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)  # labels above fields when narrow
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setObjectName("systemPrompt")
        self.system_prompt.setPlaceholderText("Instructions for this conversation (e.g. \"Answer in Python 3.12; be "
                                              "brief.\"). Empty = none.")
        self.system_prompt.setFixedHeight(self.fontMetrics().lineSpacing() * 3 + 14)
        self.system_prompt.textChanged.connect(self._emit)
        form.addRow("Instructions", self.system_prompt)
        row = QGridLayout()  # two pairs a row: the chat stays narrow enough for a 900 px window
        row.setHorizontalSpacing(8)
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(0.0, 2.0)
        self.temperature.setSingleStep(0.1)
        self.temperature.setDecimals(2)
        self.temperature.setToolTip("0 = always the most likely token (deterministic); higher = more varied")
        self.top_p = QDoubleSpinBox()
        self.top_p.setRange(0.01, 1.0)
        self.top_p.setSingleStep(0.05)
        self.top_p.setDecimals(2)
        self.top_p.setToolTip("Sample only from the most likely tokens that together reach this probability")
        self.seed = QSpinBox()
        self.seed.setRange(-1, 999_999_999)
        self.seed.setSpecialValueText("random")
        self.seed.setToolTip("A fixed seed repeats the same answer for the same conversation and settings")
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(1, 131072)
        self.max_tokens.setToolTip("Longest answer (reasoning included), in tokens")
        pairs: tuple[tuple[str, QSpinBox | QDoubleSpinBox], ...] = (
            ("Temperature", self.temperature), ("Top-p", self.top_p), ("Seed", self.seed),
            ("Max tokens", self.max_tokens))
        for i, (label, w) in enumerate(pairs):
            row.addWidget(QLabel(label), i // 2, 2 * (i % 2))
            row.addWidget(w, i // 2, 2 * (i % 2) + 1)
            w.valueChanged.connect(self._emit)
        row.setColumnStretch(4, 1)
        form.addRow("Sampling", row)
        ctx = QHBoxLayout()
        self.context_bar = QProgressBar()
        self.context_bar.setObjectName("contextMeter")
        self.context_bar.setTextVisible(True)
        self.context_bar.setMaximumHeight(16)
        ctx.addWidget(self.context_bar, 1)
        form.addRow("Context", ctx)
        files = QHBoxLayout()
        self.attach_files = QPushButton("Attach files…")
        self.attach_files.setToolTip("Add text files to the message as fenced blocks")
        self.attach_files.clicked.connect(self._pick_files)
        self.attach_folder = QPushButton("Attach folder…")
        self.attach_folder.setToolTip("Add a folder's text files (hidden and build folders skipped)")
        self.attach_folder.clicked.connect(self._pick_folder)
        files.addWidget(self.attach_files)
        files.addWidget(self.attach_folder)
        files.addStretch(1)
        form.addRow("Attach", files)
        lay.addLayout(form)
        self.set_context(0, 0)

    # ---- values ---------------------------------------------------------------------------
    def set_values(self, g: GenerationDefaults) -> None:
        self._loading = True
        try:
            self._effort = g.reasoning_effort
            if self.system_prompt.toPlainText() != g.system_prompt:
                self.system_prompt.setPlainText(g.system_prompt)
            self.temperature.setValue(g.temperature)
            self.top_p.setValue(g.top_p)
            self.seed.setValue(max(-1, min(g.seed, self.seed.maximum())))  # a larger stored seed is capped
            self.max_tokens.setValue(g.max_tokens)
        finally:
            self._loading = False

    def values(self) -> GenerationDefaults:
        return GenerationDefaults(reasoning_effort=self._effort, max_tokens=self.max_tokens.value(),
                                  temperature=round(self.temperature.value(), 2), top_p=round(self.top_p.value(), 2),
                                  seed=self.seed.value(), system_prompt=self.system_prompt.toPlainText())

    def set_effort(self, effort: str) -> None:
        self._effort = effort

    def _emit(self, *_a: object) -> None:
        if not self._loading:
            self.changed.emit(self.values())

    def set_context(self, used: int, total: int) -> None:
        """Tokens the conversation holds of the engine's context (0 total = unknown)."""
        self.context_bar.setRange(0, max(total, 1))
        self.context_bar.setValue(min(used, max(total, 1)))
        self.context_bar.setFormat(f"{used:,} of {total:,} tokens" if total else f"{used:,} tokens")

    # ---- attachments ------------------------------------------------------------------------
    def _pick_files(self) -> None:
        paths, _f = QFileDialog.getOpenFileNames(self, "Attach files")
        if paths:
            self.attachRequested.emit(list(paths))

    def _pick_folder(self) -> None:
        d = QFileDialog.getExistingDirectory(self, "Attach a folder's files")
        if d:
            self.attachRequested.emit([d])
