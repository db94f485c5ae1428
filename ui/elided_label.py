"""A one-line label that ends with "…" where its text does not fit, and shows the whole text as its tooltip then.

QLabel clips a long text mid-letter without a sign that anything is missing (the chat's title bar on a narrow
window). The label keeps its whole text (``text()`` and the size hint are the full one, so layouts can still give
it its room back) and only paints an elided copy.
"""

from __future__ import annotations

from ui.qt import QLabel, QPainter, QPaintEvent, Qt, QWidget


class ElidedLabel(QLabel):
    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self._own_tip = ""  # a tooltip set by the caller wins over the automatic one

    def setToolTip(self, tip: str) -> None:
        self._own_tip = tip
        super().setToolTip(tip)

    def shown_text(self) -> str:
        """What is painted: the text, or its start and "…" where the label is narrower than the text."""
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, self.contentsRect().width())

    def is_elided(self) -> bool:
        return self.shown_text() != self.text()

    def paintEvent(self, event: QPaintEvent) -> None:
        shown = self.shown_text()
        # the whole text on hover while part of it is hidden, unless the caller gave a tooltip of its own
        QLabel.setToolTip(self, self._own_tip or (self.text() if shown != self.text() else ""))
        p = QPainter(self)
        self.style().drawItemText(p, self.contentsRect(), int(self.alignment()), self.palette(), self.isEnabled(),
                                  shown, self.foregroundRole())
        p.end()
