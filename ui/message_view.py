"""One chat message: role, branch switcher, actions, collapsible reasoning, tool calls, body.

While an answer streams, ``set_stream`` stores the text and re-renders this widget only,
at most every ``min_interval_ms`` (longer if rendering itself gets slow), so a long answer
never makes typing or scrolling stutter.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from engine.types import ToolCall
from ui.markdown_render import MarkdownRenderer, plain_to_html
from ui.qt import QApplication, QFrame, QHBoxLayout, QLabel, Qt, QTimer, QToolButton, QVBoxLayout, QWidget, Signal
from ui.rich_text_view import RichTextView
from ui.stream_body import StreamingBody

ROLE_NAMES = {"user": "You", "assistant": "Assistant", "tool": "Tool result", "system": "System",
              "developer": "Developer"}


@dataclass
class MessageViewModel:
    id: str
    role: str
    content: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    branch_index: int = 0
    branch_count: int = 1
    footer: str = ""  # tokens, speed
    note: str = ""  # e.g. "Resumed from saved state"
    error: str = ""
    streaming: bool = False


def _word_count(text: str) -> int:
    return len(text.split())


def format_tool_call(call: ToolCall) -> str:
    try:
        args = json.dumps(json.loads(call.arguments), indent=2, ensure_ascii=False)
    except (ValueError, TypeError):
        args = call.arguments
    return f"**Tool call** `{call.name}`\n\n```json\n{args}\n```"


class MessageWidget(QFrame):
    editRequested = Signal(str)
    regenerateRequested = Signal(str)
    branchRequested = Signal(str, int)  # message id, -1 / +1

    def __init__(self, vm: MessageViewModel, renderer: MarkdownRenderer, parent: QWidget | None = None,
                 min_interval_ms: int = 60) -> None:
        super().__init__(parent)
        self.vm = vm
        self.renderer = renderer
        self.min_interval_ms = min_interval_ms
        self.render_count = 0  # full body renders (tests check throttling with it)
        self._last_render_s = 0.0
        self._render_timer = QTimer(self)
        self._render_timer.setSingleShot(True)
        self._render_timer.timeout.connect(self._render_stream)
        self.setObjectName("userBubble" if vm.role == "user" else "assistantBubble")
        outer = QVBoxLayout(self)
        outer.setContentsMargins(12, 8, 12, 8)
        outer.setSpacing(4)

        head = QHBoxLayout()
        head.setSpacing(6)
        self.role_label = QLabel(ROLE_NAMES.get(vm.role, vm.role.title()))
        self.role_label.setObjectName("roleLabel")
        head.addWidget(self.role_label)
        self.prev_btn = self._tool("‹", "Previous branch", lambda: self.branchRequested.emit(self.vm.id, -1))
        self.branch_label = QLabel()
        self.branch_label.setObjectName("muted")
        self.next_btn = self._tool("›", "Next branch", lambda: self.branchRequested.emit(self.vm.id, +1))
        for w in (self.prev_btn, self.branch_label, self.next_btn):
            head.addWidget(w)
        head.addStretch(1)
        self.copy_btn = self._tool("Copy", "Copy this message as Markdown", self._copy_all)
        head.addWidget(self.copy_btn)
        self.edit_btn = self._tool("Edit", "Edit and resend (keeps the original as a branch)",
                                   lambda: self.editRequested.emit(self.vm.id))
        self.regen_btn = self._tool("Regenerate", "Answer again (keeps this answer as a branch)",
                                    lambda: self.regenerateRequested.emit(self.vm.id))
        head.addWidget(self.edit_btn)
        head.addWidget(self.regen_btn)
        outer.addLayout(head)

        # Reasoning (analysis channel): collapsed by default, one click away.
        self.reasoning_toggle = QToolButton()
        self.reasoning_toggle.setObjectName("link")
        self.reasoning_toggle.setCheckable(True)
        self.reasoning_toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.reasoning_toggle.toggled.connect(self._toggle_reasoning)
        self.reasoning_view = StreamingBody(renderer)
        self.reasoning_view.setObjectName("reasoning")  # styled apart from the answer (theme.py)
        self.reasoning_view.setVisible(False)
        outer.addWidget(self.reasoning_toggle, 0, Qt.AlignmentFlag.AlignLeft)
        outer.addWidget(self.reasoning_view)

        self.tools_view = RichTextView(renderer)
        outer.addWidget(self.tools_view)

        self.body = StreamingBody(renderer)  # re-renders only the growing end of an answer
        outer.addWidget(self.body)

        self.note_label = QLabel()
        self.note_label.setObjectName("warning")
        self.note_label.setWordWrap(True)
        outer.addWidget(self.note_label)
        self.footer_label = QLabel()
        self.footer_label.setObjectName("muted")
        self.footer_label.setWordWrap(True)  # on one line it widened the message past a narrow chat column
        outer.addWidget(self.footer_label)
        self.set_model(vm)

    def _tool(self, text: str, tip: str, slot: object) -> QToolButton:
        b = QToolButton()
        b.setObjectName("link")
        b.setText(text)
        b.setToolTip(tip)
        b.setAutoRaise(True)
        b.clicked.connect(slot)
        return b

    # ---- content ------------------------------------------------------------------------
    def set_model(self, vm: MessageViewModel) -> None:
        self.vm = vm
        self._render_timer.stop()
        self._update_chrome()
        self._render_body()

    def _update_chrome(self) -> None:
        vm = self.vm
        multi = vm.branch_count > 1
        for w in (self.prev_btn, self.branch_label, self.next_btn):
            w.setVisible(multi)
        self.branch_label.setText(f"{vm.branch_index + 1} / {vm.branch_count}")
        self.prev_btn.setEnabled(vm.branch_index > 0 and not vm.streaming)
        self.next_btn.setEnabled(vm.branch_index < vm.branch_count - 1 and not vm.streaming)
        self.edit_btn.setVisible(vm.role == "user")
        self.regen_btn.setVisible(vm.role == "assistant")
        self.edit_btn.setEnabled(not vm.streaming)
        self.regen_btn.setEnabled(not vm.streaming)
        self.copy_btn.setEnabled(not vm.streaming)
        has_reasoning = bool(vm.reasoning)
        self.reasoning_toggle.setVisible(has_reasoning)
        if has_reasoning:
            arrow = "▾" if self.reasoning_toggle.isChecked() else "▸"
            thinking = vm.streaming and not vm.content
            what = "Thinking…" if thinking else "Reasoning"
            self.reasoning_toggle.setText(f"{arrow} {what} ({_word_count(vm.reasoning)} words)")
        self.note_label.setText(vm.error or vm.note)
        self.note_label.setObjectName("error" if vm.error else "warning")
        self.note_label.style().polish(self.note_label)
        self.note_label.setVisible(bool(vm.error or vm.note))
        self.footer_label.setText(vm.footer)
        self.footer_label.setVisible(bool(vm.footer))

    def _render_body(self) -> None:
        t0 = time.perf_counter()
        vm = self.vm
        if vm.streaming and not vm.content and not vm.reasoning and not vm.tool_calls:
            self.body.setHtml(f"<i>{plain_to_html('…')}</i>")
        else:
            self.body.set_markdown(vm.content)
        self.body.setVisible(bool(vm.content) or vm.streaming or not (vm.reasoning or vm.tool_calls))
        if vm.tool_calls:
            self.tools_view.set_markdown("\n\n".join(format_tool_call(c) for c in vm.tool_calls))
        self.tools_view.setVisible(bool(vm.tool_calls))
        if self.reasoning_view.isVisible():
            self.reasoning_view.set_markdown(vm.reasoning)
        self.render_count += 1
        self._last_render_s = time.perf_counter() - t0

    # ---- streaming ----------------------------------------------------------------------
    def set_stream(self, content: str, reasoning: str, tool_calls: tuple[ToolCall, ...] = ()) -> None:
        """Called for every delta; renders at most every few dozen milliseconds."""
        self.vm.content, self.vm.reasoning, self.vm.tool_calls = content, reasoning, tool_calls
        self.vm.streaming = True
        if not self._render_timer.isActive():
            # The throttle adapts to the measured cost: rendering stays under ~25 % of the GUI time.
            interval = max(self.min_interval_ms, int(self._last_render_s * 4000))
            self._render_timer.start(interval)

    def _render_stream(self) -> None:
        self._update_chrome()
        self._render_body()

    def finish(self, vm: MessageViewModel) -> None:
        self.set_model(vm)

    # ---- actions ------------------------------------------------------------------------
    def _toggle_reasoning(self, shown: bool) -> None:
        self.reasoning_view.setVisible(shown)
        if shown:
            self.reasoning_view.set_markdown(self.vm.reasoning)
        self._update_chrome()

    def _copy_all(self) -> None:
        QApplication.clipboard().setText(self.vm.content)
