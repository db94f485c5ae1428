"""The chat pane: title bar with the reasoning-effort selector and the chat controls (instructions,
sampling, context meter, attachments), the message column, the composer."""

from __future__ import annotations

from engine.types import ToolCall
from ui.chat_controls import ChatControls
from ui.composer import Composer
from ui.elided_label import ElidedLabel
from ui.markdown_render import MarkdownRenderer
from ui.message_view import MessageViewModel, MessageWidget
from ui.qt import (
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    Qt,
    QTimer,
    QToolButton,
    QVBoxLayout,
    QWidget,
    Signal,
)

EFFORTS = ("low", "medium", "high")


class ChatView(QWidget):
    sendRequested = Signal(str)
    stopRequested = Signal()
    editRequested = Signal(str)
    regenerateRequested = Signal(str)
    branchRequested = Signal(str, int)
    effortChanged = Signal(str)
    editCancelled = Signal()

    def __init__(self, renderer: MarkdownRenderer, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.renderer = renderer
        self.widgets: list[MessageWidget] = []
        self._stick_to_bottom = True
        self.generating = False
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(6)

        top = QHBoxLayout()
        top.setContentsMargins(12, 8, 12, 0)
        self.title = ElidedLabel("New chat")  # a long title ends in "…" (whole on hover)
        self.title.setObjectName("heading")
        self.title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.title.setMinimumWidth(90)  # never squeezed away on a narrow window (issue 21 point 4)
        top.addWidget(self.title, 1)
        self.backend_label = ElidedLabel()
        self.backend_label.setObjectName("warning")
        # Long model names must not widen the chat pane (and squeeze the side panels).
        self.backend_label.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Preferred)
        self.backend_label.setMinimumWidth(1)  # may be cut on a narrow window; the status bar says it whole
        top.addWidget(self.backend_label)
        top.addSpacing(12)
        self.effort_label = QLabel("Reasoning:")
        top.addWidget(self.effort_label)
        self.effort = QComboBox()
        for e in EFFORTS:
            self.effort.addItem(e.title(), e)
        self.effort.setCurrentIndex(1)
        self.effort.setToolTip("How long the model thinks before answering (harmony 'Reasoning: low|medium|high').")
        self.effort.currentIndexChanged.connect(lambda _i: self.effortChanged.emit(self.effort.currentData()))
        top.addWidget(self.effort)
        self.controls_btn = QToolButton()
        self.controls_btn.setText("Chat settings")
        self.controls_btn.setCheckable(True)
        self.controls_btn.setToolTip("Instructions, temperature, top-p, seed, answer length, context use, "
                                     "attachments — kept with this conversation")
        top.addWidget(self.controls_btn)
        lay.addLayout(top)
        self.controls = ChatControls()
        self.controls.setVisible(False)
        self.controls_btn.toggled.connect(self.controls.setVisible)
        lay.addWidget(self.controls)

        self.scroll_area = QScrollArea()
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.column = QWidget()
        self.column_layout = QVBoxLayout(self.column)
        self.column_layout.setContentsMargins(16, 8, 16, 8)
        self.column_layout.setSpacing(10)
        self.empty_label = QLabel(
            "<h3>Start a conversation</h3><p>Type below and press Enter. Code in answers is highlighted and "
            "every block has a Copy button. Regenerate or edit a message to branch; ‹ › switches branches.</p>")
        self.empty_label.setObjectName("muted")
        self.empty_label.setWordWrap(True)
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.column_layout.addWidget(self.empty_label)
        self.column_layout.addStretch(1)
        self.scroll_area.setWidget(self.column)
        bar = self.scroll_area.verticalScrollBar()
        bar.rangeChanged.connect(self._on_range_changed)
        bar.valueChanged.connect(self._on_scrolled)
        lay.addWidget(self.scroll_area, 1)

        # Editing banner (edit-and-resend).
        self.banner = QFrame()
        self.banner.setObjectName("banner")
        bl = QHBoxLayout(self.banner)
        bl.setContentsMargins(10, 4, 10, 4)
        self.banner_label = QLabel()
        self.banner_label.setWordWrap(True)
        bl.addWidget(self.banner_label, 1)
        cancel = QToolButton()
        cancel.setObjectName("link")
        cancel.setText("Cancel edit")
        cancel.clicked.connect(self.cancel_edit)
        bl.addWidget(cancel)
        self.banner.setVisible(False)
        self.editing_id: str | None = None
        wrap = QVBoxLayout()
        wrap.setContentsMargins(12, 0, 12, 10)
        wrap.addWidget(self.banner)

        row = QHBoxLayout()
        self.composer = Composer()
        self.composer.submitted.connect(self._submit)
        row.addWidget(self.composer, 1)
        self.send_btn = QPushButton("Send")
        self.send_btn.setObjectName("primary")
        self.send_btn.setToolTip("Send (Enter)")
        self.send_btn.clicked.connect(self._submit)
        self.stop_btn = QPushButton("Stop")
        self.stop_btn.setObjectName("danger")
        self.stop_btn.setToolTip("Stop generating (Esc)")
        self.stop_btn.clicked.connect(self.stopRequested.emit)
        self.stop_btn.setVisible(False)
        row.addWidget(self.send_btn, 0, Qt.AlignmentFlag.AlignBottom)
        row.addWidget(self.stop_btn, 0, Qt.AlignmentFlag.AlignBottom)
        wrap.addLayout(row)
        self.hint = QLabel()
        self.hint.setObjectName("hint")
        wrap.addWidget(self.hint)
        lay.addLayout(wrap)
        self._can_send = True
        self._scroll_timer = QTimer(self)
        self._scroll_timer.setSingleShot(True)
        self._scroll_timer.timeout.connect(self._do_scroll)

    # ---- composer -----------------------------------------------------------------------
    def _submit(self) -> None:
        text = self.composer.toPlainText().strip()
        if not text or self.generating or not self._can_send:
            return
        self.sendRequested.emit(text)

    def clear_composer(self) -> None:
        self.composer.clear()

    def set_can_send(self, ok: bool, why: str = "") -> None:
        self._can_send = ok
        self.send_btn.setEnabled(ok and not self.generating)
        self.hint.setText(why)
        self.hint.setVisible(bool(why))

    def set_generating(self, on: bool) -> None:
        self.generating = on
        self.stop_btn.setVisible(on)
        self.send_btn.setVisible(not on)
        self.send_btn.setEnabled(self._can_send and not on)
        self.effort.setEnabled(True)

    def begin_edit(self, msg_id: str, text: str) -> None:
        self.editing_id = msg_id
        self.banner_label.setText("Editing a message — Send creates a new branch; the original stays "
                                  "reachable with ‹ ›.")
        self.banner.setVisible(True)
        self.composer.setPlainText(text)
        self.composer.setFocus()
        cur = self.composer.textCursor()
        cur.movePosition(cur.MoveOperation.End)
        self.composer.setTextCursor(cur)

    def cancel_edit(self) -> None:
        if self.editing_id is None:
            return
        self.editing_id = None
        self.banner.setVisible(False)
        self.composer.clear()
        self.editCancelled.emit()

    def end_edit(self) -> None:
        self.editing_id = None
        self.banner.setVisible(False)

    def set_title(self, title: str) -> None:
        self.title.setText(title)

    def set_effort(self, effort: str) -> None:
        i = self.effort.findData(effort)
        if i >= 0:
            self.effort.blockSignals(True)
            self.effort.setCurrentIndex(i)
            self.effort.blockSignals(False)

    # ---- messages -----------------------------------------------------------------------
    def set_messages(self, vms: list[MessageViewModel]) -> None:
        """Show this thread, rebuilding only from the first message that differs from what is shown
        (a new turn or a finished answer touches the last one or two widgets, not the whole chat)."""
        keep = 0
        while keep < min(len(self.widgets), len(vms)):
            w, vm = self.widgets[keep], vms[keep]
            if w.vm == vm:
                keep += 1
            elif w.vm.id == vm.id and w.vm.role == vm.role:
                w.set_model(vm)  # same message (a finished stream, a new footer): update in place; the
                keep += 1  # body re-renders only what changed, not the whole answer
            else:
                break
        for w in self.widgets[keep:]:
            self.column_layout.removeWidget(w)
            w.deleteLater()
        self.widgets = self.widgets[:keep]
        for vm in vms[keep:]:
            self._add(vm)
        self.empty_label.setVisible(not vms)
        self._stick_to_bottom = True
        self._scroll_to_bottom()

    def set_renderer(self, renderer: MarkdownRenderer) -> None:
        """A new theme: every message is rendered again with its colours (code blocks included)."""
        self.renderer = renderer
        vms = [w.vm for w in self.widgets]
        for w in self.widgets:
            self.column_layout.removeWidget(w)
            w.deleteLater()
        self.widgets = []
        for vm in vms:
            self._add(vm)

    def append_message(self, vm: MessageViewModel) -> MessageWidget:
        self.empty_label.setVisible(False)
        self._stick_to_bottom = True
        w = self._add(vm)
        self._scroll_to_bottom()
        return w

    def _add(self, vm: MessageViewModel) -> MessageWidget:
        w = MessageWidget(vm, self.renderer)
        w.editRequested.connect(self.editRequested)
        w.regenerateRequested.connect(self.regenerateRequested)
        w.branchRequested.connect(self.branchRequested)
        self.column_layout.insertWidget(self.column_layout.count() - 1, w)
        self.widgets.append(w)
        return w

    def widget_for(self, msg_id: str) -> MessageWidget | None:
        return next((w for w in self.widgets if w.vm.id == msg_id), None)

    def update_stream(self, msg_id: str, content: str, reasoning: str, tool_calls: tuple[ToolCall, ...]) -> None:
        w = self.widget_for(msg_id)
        if w is not None:
            w.set_stream(content, reasoning, tool_calls)

    # ---- scrolling: follow the stream unless the user scrolled up --------------------------
    def _on_scrolled(self, value: int) -> None:
        bar = self.scroll_area.verticalScrollBar()
        self._stick_to_bottom = value >= bar.maximum() - 24

    def _on_range_changed(self, _lo: int, hi: int) -> None:
        if self._stick_to_bottom:
            self.scroll_area.verticalScrollBar().setValue(hi)

    def _scroll_to_bottom(self) -> None:
        # After layout has run (next event-loop turn). A child timer dies with this view, so it can
        # never fire into deleted widgets (a context-bound singleShot with a lambda once did).
        self._scroll_timer.start(0)

    def _do_scroll(self) -> None:
        bar = self.scroll_area.verticalScrollBar()
        bar.setValue(bar.maximum())
