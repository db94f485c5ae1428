"""First run without a model: offer the demo model, or a folder with gpt-oss-120b / 20b."""

from __future__ import annotations

from collections.abc import Callable

from ui.qt import QDialog, QFileDialog, QHBoxLayout, QLabel, QPushButton, QSizePolicy, QVBoxLayout, QWidget

DEMO, FOLDER, LATER = "demo", "folder", "later"  # LATER: closed without choosing


class FirstRunDialog(QDialog):
    def __init__(self, parent: QWidget | None = None, validate: Callable[[str], str] | None = None) -> None:
        """``validate(folder)``: why the folder is not a usable model ("" when it is)."""
        super().__init__(parent)
        self._validate = validate
        self.setWindowTitle("Welcome to Neural")
        self.setMinimumSize(560, 260)
        self.choice = LATER
        self.folder = ""
        lay = QVBoxLayout(self)
        text = QLabel(
            "<h3>Welcome to Neural</h3>"
            "<p>Neural runs OpenAI's <b>gpt-oss-120b</b> (or gpt-oss-20b) on this PC: the GPU holds the hottest "
            "experts, the CPU computes the rest from RAM.</p>"
            "<p><b>No model is configured yet, so Neural starts with the bundled demo model.</b> You can:</p><ul>"
            "<li><b>Continue with the demo model</b> — a tiny model with the gpt-oss architecture, bundled "
            "with the app. "
            "It is <i>not</i> gpt-oss: its answers are short and often wrong, but every part of the app works "
            "with it. The app always shows which model is answering.</li>"
            "<li><b>Choose the folder</b> of a downloaded gpt-oss checkpoint (e.g. "
            "<code>huggingface-cli download openai/gpt-oss-120b --local-dir gpt-oss-120b</code>, about 61 GB). "
            "The first load prepares its expert store, with a progress bar.</li></ul>")
        text.setWordWrap(True)
        lay.addWidget(text)
        row = QHBoxLayout()
        demo = QPushButton("Continue with the demo model")
        demo.setObjectName("primary")
        demo.clicked.connect(self._demo)
        folder = QPushButton("Choose model folder…")
        folder.clicked.connect(self._folder)
        row.addWidget(demo)
        row.addWidget(folder)
        row.addStretch(1)
        lay.addLayout(row)
        self.error = QLabel()
        self.error.setObjectName("error")
        self.error.setWordWrap(True)
        # a long path must wrap inside the dialog, never widen it
        self.error.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.error.setVisible(False)
        lay.addWidget(self.error)

    def _demo(self) -> None:
        self.choice = DEMO
        self.accept()

    def _folder(self) -> None:
        d = QFileDialog.getExistingDirectory(self, "Choose a gpt-oss model folder")
        if d:
            self.choose_folder(d)

    def choose_folder(self, d: str) -> bool:
        """Accept ``d`` if it is a usable model folder; else say why and stay open."""
        why = self._validate(d) if self._validate is not None else ""
        if why:
            self.error.setText(f"That folder cannot be used: {why} The demo model stays loaded; choose another "
                               "folder, or continue with the demo.")
            self.error.setVisible(True)
            return False
        self.choice, self.folder = FOLDER, d
        self.accept()
        return True
