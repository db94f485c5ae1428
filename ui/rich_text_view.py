"""A read-only rich-text view that is exactly as tall as its content (no inner scrollbar).

Chat messages are stacked in one scroll area; each message body is one of these. Links named
``copy:N`` copy the N-th code block of the last render; http(s) links open in the browser.
"""

from __future__ import annotations

import math

from ui.markdown_render import COPY_SCHEME, MarkdownRenderer
from ui.qt import (
    QApplication,
    QDesktopServices,
    QFrame,
    QResizeEvent,
    QSizePolicy,
    Qt,
    QTextBrowser,
    QTimer,
    QUrl,
    QWidget,
    Signal,
)


class RichTextView(QTextBrowser):
    codeCopied = Signal(int)

    def __init__(self, renderer: MarkdownRenderer, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.renderer = renderer
        self.markdown = ""
        self.code_blocks: list[str] = []
        self._copied: int | None = None
        self.setOpenLinks(False)
        self.setOpenExternalLinks(False)
        self.anchorClicked.connect(self._on_anchor)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # code lines do not wrap (a coding app shows code as written): a long line scrolls sideways
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        self.document().setDocumentMargin(2)
        self.document().documentLayout().documentSizeChanged.connect(lambda _s: self._fit())
        self.setFixedHeight(24)
        self._copied_timer = QTimer(self)
        self._copied_timer.setSingleShot(True)
        self._copied_timer.timeout.connect(self._reset_copied)

    def set_markdown(self, text: str) -> None:
        self.markdown = text
        rendered = self.renderer.render(text, copied=self._copied)
        self.code_blocks = rendered.code_blocks
        self.setHtml(rendered.html)
        self._fit()

    def set_plain(self, text: str) -> None:
        self.markdown = text
        self.code_blocks = []
        self.setPlainText(text)
        self._fit()

    def _fit(self) -> None:
        doc = self.document()
        width = self.viewport().width()
        if width > 0 and abs(doc.textWidth() - width) > 0.5:
            doc.setTextWidth(width)
        h = math.ceil(doc.size().height()) + 2 * self.frameWidth() + 2
        if width > 0 and doc.size().width() > width + 1:  # a long code line: room for the scrollbar
            h += self.horizontalScrollBar().sizeHint().height()
        if h != self.height():
            self.setFixedHeight(h)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit()

    def _on_anchor(self, url: QUrl) -> None:
        if url.scheme() == COPY_SCHEME:
            try:
                index = int(url.path())
            except ValueError:
                return
            if 0 <= index < len(self.code_blocks):
                QApplication.clipboard().setText(self.code_blocks[index])
                self.codeCopied.emit(index)
                self._flash_copied(index)
        elif url.scheme() in ("http", "https"):
            QDesktopServices.openUrl(url)

    def _flash_copied(self, index: int) -> None:
        """Show "Copied ✓" on the block's button for a moment."""
        self._copied = index
        self.set_markdown(self.markdown)
        self._copied_timer.start(1500)  # a child timer: it dies with the view, never fires into it

    def _reset_copied(self) -> None:
        self._copied = None
        self.set_markdown(self.markdown)
