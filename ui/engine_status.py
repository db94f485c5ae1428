"""Status-bar widget: the engine state (loading with progress, ready, generating, error + fix)."""

from __future__ import annotations

from ui.qt import QHBoxLayout, QLabel, QProgressBar, QToolButton, QWidget, Signal
from ui.theme import LIGHT, Theme

STATE_TITLES = {"no-model": "No model", "loading": "Loading", "ready": "Ready", "generating": "Generating",
                "error": "Error", "remote": "Remote"}


class EngineStatus(QWidget):
    fixRequested = Signal()  # "Open Preferences" on errors

    def __init__(self, theme: Theme = LIGHT, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.theme = theme
        lay = QHBoxLayout(self)
        lay.setContentsMargins(6, 0, 6, 0)
        self.dot = QLabel("●")
        self.label = QLabel("No model")
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setFixedWidth(160)
        self.progress.setTextVisible(False)
        self.progress.setVisible(False)
        self.fix = QLabel()
        self.fix.setObjectName("muted")
        self.fix_btn = QToolButton()
        self.fix_btn.setObjectName("link")
        self.fix_btn.setText("Open Preferences")
        self.fix_btn.clicked.connect(self.fixRequested.emit)
        self.fix_btn.setVisible(False)
        for w in (self.dot, self.label, self.progress, self.fix, self.fix_btn):
            lay.addWidget(w)
        lay.addStretch(1)
        self.state = "no-model"

    def set_state(self, state: str, detail: str, fix: str = "") -> None:
        self.state = state
        t = self.theme
        color = {"ready": t.ok, "generating": t.accent, "loading": t.warning, "error": t.error,
                 "remote": t.accent}.get(state, t.muted)
        self.dot.setStyleSheet(f"color: {color};")
        self.label.setText(f"<b>{STATE_TITLES.get(state, state)}</b> — {detail}" if detail else
                           STATE_TITLES.get(state, state))
        self.progress.setVisible(state == "loading")
        if state == "loading":
            self.progress.setValue(0)
        self.fix.setText(fix)
        self.fix.setVisible(bool(fix))
        self.fix_btn.setVisible(state in ("error", "no-model"))

    def set_progress(self, phase: str, fraction: float) -> None:
        self.progress.setVisible(True)
        self.progress.setValue(int(max(0.0, min(1.0, fraction)) * 1000))
        self.label.setText(f"<b>Loading</b> — {phase} ({fraction * 100:.0f} %)")
