"""The dialog shown when something went wrong that the app did not expect."""

from __future__ import annotations

from pathlib import Path

from ui.qt import (
    QApplication,
    QDesktopServices,
    QDialog,
    QDialogButtonBox,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QUrl,
    QVBoxLayout,
    QWidget,
)


class CrashDialog(QDialog):
    def __init__(self, message: str, details: str, log_file: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Neural — unexpected error")
        self.resize(640, 420)
        lay = QVBoxLayout(self)
        head = QLabel("<b>Something went wrong.</b> The app keeps running, but the last action may not have "
                      "completed.")
        head.setWordWrap(True)
        lay.addWidget(head)
        msg = QLabel(message)
        msg.setObjectName("error")
        msg.setWordWrap(True)
        msg.setTextInteractionFlags(msg.textInteractionFlags() | msg.textInteractionFlags().TextSelectableByMouse)
        lay.addWidget(msg)
        where = QLabel(f"Details were written to <code>{log_file}</code>.")
        where.setObjectName("muted")
        where.setWordWrap(True)
        lay.addWidget(where)
        self.details = QPlainTextEdit(details)
        self.details.setReadOnly(True)
        lay.addWidget(self.details, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        copy = QPushButton("Copy details")
        copy.clicked.connect(lambda: QApplication.clipboard().setText(f"{message}\n\n{details}"))
        open_logs = QPushButton("Open log folder")
        open_logs.clicked.connect(lambda: QDesktopServices.openUrl(QUrl.fromLocalFile(str(log_file.parent))))
        buttons.addButton(copy, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.addButton(open_logs, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
