"""A message body that renders a growing answer in time proportional to what changed.

The markdown is cut at block boundaries (a blank line outside a code fence) into frozen segments
and one growing tail. A frozen segment is rendered once, into its own :class:`RichTextView`, and
never touched again; each update re-renders only the tail (the last paragraph or the code block
being written). A tail is frozen once its finished blocks exceed ``FREEZE_CHARS``, so a render
never costs more than about that many characters plus the growing block — the total render work
of an answer stays about linear in its length (issue 21 point 9).

A text that does not extend the shown one (an edit, a branch switch) is laid out again from
scratch. ``copy:N`` links count code blocks across all segments.
"""

from __future__ import annotations

import re

from ui.markdown_render import MarkdownRenderer
from ui.qt import QUrl, QVBoxLayout, QWidget, Signal
from ui.rich_text_view import RichTextView

FREEZE_CHARS = 500  # finished text the tail may hold before it becomes a frozen segment
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def split_finished(text: str) -> int:
    """Length of the longest prefix of ``text`` made of finished blocks: it ends after a blank
    line outside any code fence (0 when there is none). Linear in ``len(text)``."""
    fence: str | None = None
    cut = 0
    pos = 0
    for line in text.splitlines(keepends=True):
        end = pos + len(line)
        m = _FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(1)
            elif not line.strip() and line.endswith("\n") and pos > 0:
                cut = end
        elif m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line[m.end():].strip():
            fence = None
        pos = end
    return cut


class StreamingBody(QWidget):
    codeCopied = Signal(int)

    def __init__(self, renderer: MarkdownRenderer, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.renderer = renderer
        self.markdown = ""
        self._frozen_len = 0  # characters of markdown held by frozen segments
        self.segments: list[RichTextView] = []
        self.rendered_chars = 0  # characters passed to the markdown renderer (the render work)
        self.max_render_chars = 0  # the most characters one update rendered
        self._lay = QVBoxLayout(self)
        self._lay.setContentsMargins(0, 0, 0, 0)
        self._lay.setSpacing(0)
        self.tail = self._new_view()

    def _new_view(self) -> RichTextView:
        v = RichTextView(self.renderer)
        v.codeCopied.connect(lambda i, v=v: self.codeCopied.emit(self._global_index(v, i)))
        self._lay.addWidget(v)
        return v

    def _global_index(self, view: RichTextView, i: int) -> int:
        n = 0
        for s in self.segments:
            if s is view:
                return n + i
            n += len(s.code_blocks)
        return n + i

    @property
    def code_blocks(self) -> list[str]:
        return [c for v in (*self.segments, self.tail) for c in v.code_blocks]

    def reset(self) -> None:
        for s in self.segments:
            self._lay.removeWidget(s)
            s.deleteLater()
        self.segments = []
        self._frozen_len = 0
        self.markdown = ""

    def set_markdown(self, text: str) -> None:
        if not text.startswith(self.markdown[: self._frozen_len]) or not text.startswith(self.markdown):
            self.reset()  # not a continuation: lay out again
        self.markdown = text
        rest = text[self._frozen_len :]
        cut = split_finished(rest)
        if cut >= FREEZE_CHARS:  # the tail's finished blocks become a segment, rendered this once
            self.tail.set_markdown(rest[:cut])
            self.rendered_chars += cut
            self.segments.append(self.tail)
            self._frozen_len += cut
            self.tail = self._new_view()
            rest = rest[cut:]
        self.tail.set_markdown(rest)
        self.rendered_chars += len(rest)
        self.max_render_chars = max(self.max_render_chars, len(rest) + (cut if cut >= FREEZE_CHARS else 0))

    def setHtml(self, html: str) -> None:
        """A placeholder (the "…" before the first token)."""
        self.reset()
        self.tail.setHtml(html)

    def toPlainText(self) -> str:
        return "\n".join(v.toPlainText() for v in (*self.segments, self.tail))

    def toHtml(self) -> str:
        return "".join(v.toHtml() for v in (*self.segments, self.tail))

    def _on_anchor(self, url: QUrl) -> None:
        """``copy:N`` with N counted over the whole body."""
        try:
            index = int(url.path()) if url.scheme() == "copy" else -1
        except ValueError:
            return
        for v in (*self.segments, self.tail):
            if 0 <= index < len(v.code_blocks):
                v._on_anchor(QUrl(f"copy:{index}"))
                return
            index -= len(v.code_blocks)
