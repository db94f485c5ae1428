"""The message input: Enter sends, Shift+Enter inserts a newline, grows with its text."""

from __future__ import annotations

from ui.qt import QKeyEvent, QPlainTextEdit, QSizePolicy, Qt, QWidget, Signal


class Composer(QPlainTextEdit):
    submitted = Signal()
    escapePressed = Signal()  # also a window shortcut; this covers focus in the composer without one

    def __init__(self, parent: QWidget | None = None, max_lines: int = 10) -> None:
        super().__init__(parent)
        self.setObjectName("composer")
        self.setPlaceholderText("Message the model — Enter to send, Shift+Enter for a new line")
        self.setTabChangesFocus(True)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.max_lines = max_lines
        self.document().contentsChanged.connect(self._fit)
        self._fit()

    def keyPressEvent(self, e: QKeyEvent) -> None:
        if e.key() == Qt.Key.Key_Escape:
            self.escapePressed.emit()
            return
        if e.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            mods = e.modifiers()
            if mods & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")
                return
            if not (mods & (Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.AltModifier)):
                self.submitted.emit()
                return
        super().keyPressEvent(e)

    def _fit(self) -> None:
        lines = max(1, min(self.max_lines, self.document().blockCount()))
        line_h = self.fontMetrics().lineSpacing()
        m = self.contentsMargins()
        self.setFixedHeight(lines * line_h + m.top() + m.bottom() + 2 * int(self.document().documentMargin()) + 12)
