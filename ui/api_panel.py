"""The local API switch: on/off, port, API key, CORS origins, and a status line with the URL."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from ui.qt import (
    QApplication,
    QCheckBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
    Signal,
)


@dataclass(frozen=True)
class ApiPanelValues:
    enabled: bool
    port: int
    api_key: str
    cors_origins: str


class ApiPanel(QFrame):
    toggled = Signal(object)  # ApiPanelValues (enabled says which way)

    def __init__(self, values: ApiPanelValues, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("card")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 10, 12, 10)
        head = QLabel("Local API server")
        head.setObjectName("heading")
        lay.addWidget(head)
        expl = QLabel("OpenAI-compatible /v1 endpoints (chat, completions, models) served by this app, for editors, "
                      "scripts and agents on this machine.")
        expl.setObjectName("hint")
        expl.setWordWrap(True)
        lay.addWidget(expl)
        self.switch = QCheckBox("Serve the API")
        self.switch.setChecked(False)
        self.switch.toggled.connect(self._switched)
        lay.addWidget(self.switch)
        form = QFormLayout()
        self.port = QSpinBox()
        self.port.setRange(1, 65535)
        self.port.setValue(values.port)
        form.addRow("Port", self.port)
        key_box = QVBoxLayout()
        key_row = QHBoxLayout()  # the buttons under the key: the panel stays narrow (900 px windows)
        self.api_key = QLineEdit(values.api_key)
        self.api_key.setPlaceholderText("optional")
        self.api_key.setToolTip("Without a key any program on this machine may call the API.")
        self.api_key.setEchoMode(QLineEdit.EchoMode.PasswordEchoOnEdit)
        gen = QToolButton()
        gen.setObjectName("link")
        gen.setText("Generate")
        gen.setToolTip("Create a random key")
        gen.clicked.connect(self._generate)
        self.show_key = QToolButton()
        self.show_key.setObjectName("link")
        self.show_key.setText("Show")
        self.show_key.setCheckable(True)
        self.show_key.setToolTip("Show the key (to paste it into an editor plugin)")
        self.show_key.toggled.connect(self._show_key)
        self.copy_key = QToolButton()
        self.copy_key.setObjectName("link")
        self.copy_key.setText("Copy")
        self.copy_key.setToolTip("Copy the key to the clipboard")
        self.copy_key.clicked.connect(lambda: QApplication.clipboard().setText(self.api_key.text().strip()))
        key_box.addWidget(self.api_key)
        key_row.addWidget(self.show_key)
        key_row.addWidget(self.copy_key)
        key_row.addWidget(gen)
        key_row.addStretch(1)
        key_box.addLayout(key_row)
        form.addRow("API key", key_box)
        self.cors = QLineEdit(values.cors_origins)
        self.cors.setPlaceholderText("none")
        self.cors.setToolTip("Browser origins allowed to call the API, comma-separated, e.g. http://localhost:3000")
        form.addRow("CORS origins", self.cors)
        lay.addLayout(form)
        status_row = QHBoxLayout()
        self.status = QLabel("Off")
        self.status.setObjectName("muted")
        self.status.setWordWrap(True)
        self.copy_btn = QToolButton()
        self.copy_btn.setObjectName("link")
        self.copy_btn.setText("Copy URL")
        self.copy_btn.clicked.connect(self._copy)
        self.copy_btn.setVisible(False)
        status_row.addWidget(self.status, 1)
        status_row.addWidget(self.copy_btn)
        lay.addLayout(status_row)
        self.base_url = ""

    def _generate(self) -> None:
        self.api_key.setText("sk-local-" + secrets.token_urlsafe(18))
        self.show_key.setChecked(True)  # a new key is there to be seen and copied

    def _show_key(self, on: bool) -> None:
        self.api_key.setEchoMode(QLineEdit.EchoMode.Normal if on else QLineEdit.EchoMode.PasswordEchoOnEdit)
        self.show_key.setText("Hide" if on else "Show")

    def values(self) -> ApiPanelValues:
        return ApiPanelValues(self.switch.isChecked(), self.port.value(), self.api_key.text().strip(),
                              self.cors.text().strip())

    def _switched(self, on: bool) -> None:
        for w in (self.port, self.api_key, self.cors):
            w.setReadOnly(on) if isinstance(w, QLineEdit) else w.setEnabled(not on)
        self.toggled.emit(self.values())

    def set_switch(self, on: bool) -> None:
        """Reflect the server's real state without re-emitting (e.g. after a failed start)."""
        self.switch.blockSignals(True)
        self.switch.setChecked(on)
        self.switch.blockSignals(False)
        for w in (self.port, self.api_key, self.cors):  # read-only, not disabled: the key stays copyable
            w.setReadOnly(on) if isinstance(w, QLineEdit) else w.setEnabled(not on)

    def set_status(self, text: str, base_url: str = "", kind: str = "muted") -> None:
        self.base_url = base_url
        self.status.setText(text)
        self.status.setObjectName(kind)
        self.status.style().polish(self.status)
        self.copy_btn.setVisible(bool(base_url))

    def _copy(self) -> None:
        if self.base_url:
            QApplication.clipboard().setText(self.base_url)
