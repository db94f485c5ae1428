"""Conversations, sending, streaming, stop, regenerate, edit-and-resend and branches.

The store is the source of truth: every user message and every answer is a node in the
conversation's message tree; the view shows the path to the remembered leaf. A generation
streams into one message widget (only that widget re-renders); the growing text is saved
with one row update at most every SAVE_EVERY_S (so a crash keeps what was on screen), and the
whole answer once more when it ends (also when stopped). Each conversation keeps its own chat
controls (a GenerationDefaults: instructions, sampling, effort, length) and its unsent draft.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from app.core.attachments import attach
from app.core.conversation_store import ConversationRecord, ConversationStore
from app.core.export import conversation_markdown
from app.core.message_tree import MessageTree, StoredMessage
from app.core.settings import GenerationDefaults
from app.gui.engine_host import StateNote, how_to_fix
from engine.types import (
    Conversation,
    Done,
    GenerationParams,
    Message,
    Progress,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    Usage,
)
from ui.chat_view import ChatView
from ui.conversation_list import ConversationItem, ConversationList
from ui.message_view import MessageViewModel
from ui.qt import QObject, QTimer, Signal

log = logging.getLogger(__name__)

TITLE_CHARS = 48
SAVE_EVERY_S = 0.5  # the streaming answer reaches the disk at least this often (issue 21: >= 1/s)
DRAFT_SAVE_MS = 800


class Run(Protocol):
    """A running generation (local BackgroundTask or RemoteRun): signals plus cancel()."""

    progress: Any
    succeeded: Any
    failed: Any

    def start(self) -> object: ...

    def cancel(self) -> None: ...


# (conversation id, conversation, params) -> a run, not started yet
StartFn = Callable[[str, Conversation, GenerationParams], Run]


@dataclass
class _Stream:
    conversation_id: str
    message_id: str
    run: Run
    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    note: str = ""
    state_note: str = ""  # how the K/V state was obtained; progress lines must not erase it
    stopped: bool = False
    deltas: int = 0  # text pieces received (about one per token for the local engine)
    saved_at: float = 0.0  # monotonic time of the last streaming save


def make_title(text: str) -> str:
    """A short sidebar title from the first message: prose before any code, no markdown marks."""
    prose = text.split("```", 1)[0]
    for ch in "`*_#>[]":
        prose = prose.replace(ch, "")
    words = " ".join(prose.split())
    if not words:
        words = " ".join(text.split())
    if len(words) <= TITLE_CHARS:
        return words or "New chat"
    cut = words[:TITLE_CHARS].rsplit(" ", 1)[0]
    return (cut if len(cut) > TITLE_CHARS // 2 else words[:TITLE_CHARS]).rstrip(" ,.;:") + "…"


def footer_for(meta: dict[str, Any]) -> str:
    u = meta.get("usage")
    if not u:
        return ""
    completion, dec_s = int(u.get("completion_tokens", 0)), float(u.get("decode_seconds", 0.0))
    tps = max(completion - 1, 0) / dec_s if dec_s > 0 else 0.0
    parts = [f"{completion} tokens", f"{tps:.1f} tok/s"]
    prompt, cached = int(u.get("prompt_tokens", 0)), int(u.get("cached_tokens", 0))
    if prompt:
        parts.append(f"prompt {prompt} ({cached} reused)")
    finish = meta.get("finish_reason")
    if finish == "cancelled":
        parts.append("stopped")
    elif finish == "length":
        parts.append("hit the token limit")
    if meta.get("backend"):
        parts.append(str(meta["backend"]))
    return " · ".join(parts)


class ChatController(QObject):
    generationStarted = Signal(str)  # conversation id
    generationFinished = Signal(object)  # Done
    conversationChanged = Signal(str)

    def __init__(self, store: ConversationStore, chat: ChatView, sidebar: ConversationList,
                 start_run: StartFn, defaults: Callable[[], GenerationDefaults],
                 forget_state: Callable[[str], None] = lambda _cid: None,
                 parent: QObject | None = None, context_size: Callable[[], int] = lambda: 0) -> None:
        super().__init__(parent)
        self.store, self.chat, self.sidebar = store, chat, sidebar
        self._start_run = start_run
        self._defaults = defaults  # the app's GenerationDefaults (Preferences) for new chats
        self._context_size = context_size
        self._forget_state = forget_state
        self.gen = defaults()  # the current conversation's chat controls
        self.new_chat_draft = ""
        self._draft_timer = QTimer(self)
        self._draft_timer.setSingleShot(True)
        self._draft_timer.timeout.connect(self.save_draft)
        chat.composer.textChanged.connect(lambda: self._draft_timer.start(DRAFT_SAVE_MS))
        chat.controls.changed.connect(self.set_generation)
        chat.controls.attachRequested.connect(self.attach)
        self.current_id: str | None = None
        self.stream: _Stream | None = None
        self.last_done: Done | None = None
        self.search_text = ""
        self.backend_name = ""  # recorded in each answer's metadata
        self.model_name = ""  # the loaded model's name (exports name it)
        self.can_generate: Callable[[], tuple[bool, str]] = lambda: (True, "")

        chat.sendRequested.connect(self.send)
        chat.stopRequested.connect(self.stop)
        chat.regenerateRequested.connect(self.regenerate)
        chat.editRequested.connect(self.begin_edit)
        chat.branchRequested.connect(self.switch_branch)
        chat.effortChanged.connect(self.set_effort)
        sidebar.newRequested.connect(self.new_conversation)
        sidebar.selected.connect(self.open_conversation)
        sidebar.renameRequested.connect(self.rename)
        sidebar.deleteRequested.connect(self.delete)
        sidebar.searchChanged.connect(self.search)

    # ---- conversation list --------------------------------------------------------------
    def refresh_list(self) -> None:
        items = [ConversationItem(c.id, c.title) for c in self.store.list_conversations(self.search_text)]
        self.sidebar.set_items(items, self.current_id)

    def search(self, text: str) -> None:
        self.search_text = text
        self.refresh_list()

    def new_conversation(self) -> None:
        """An empty chat; it is stored when the first message is sent."""
        self.chat.cancel_edit()
        self.save_draft()
        self.current_id = None
        self.chat.set_title("New chat")
        self._show_generation(self._defaults())
        self._set_composer(self.new_chat_draft)
        self.chat.set_messages([])
        self.refresh_list()
        self.chat.composer.setFocus()

    def generation_for(self, rec: ConversationRecord) -> GenerationDefaults:
        """A conversation's chat controls: stored ones over the app's defaults (older rows kept only
        the effort and the system prompt)."""
        base = replace(self._defaults(), reasoning_effort=rec.reasoning_effort, system_prompt=rec.system_prompt)
        return GenerationDefaults.from_dict(rec.generation, base) if rec.generation else base

    def _show_generation(self, g: GenerationDefaults) -> None:
        self.gen = g
        self.chat.set_effort(g.reasoning_effort)
        self.chat.controls.set_values(g)
        self.update_context_meter()

    def set_generation(self, g: GenerationDefaults) -> None:
        """The chat controls changed: keep them with this conversation (or for the new chat)."""
        g = replace(g, reasoning_effort=self.gen.reasoning_effort)
        bad = g.errors()
        if bad:
            self.chat.set_can_send(self.chat._can_send, " ".join(bad))
            return
        self.gen = g
        if self.current_id is not None:
            self.store.set_generation(self.current_id, g.to_dict())

    def _set_composer(self, text: str) -> None:
        self.chat.composer.blockSignals(True)
        self.chat.composer.setPlainText(text)
        self.chat.composer.blockSignals(False)

    def save_draft(self) -> None:
        """The unsent text of the shown conversation, kept across restarts."""
        self._draft_timer.stop()
        if self.chat.editing_id is not None:
            return  # an edit of an old message is not a draft
        text = self.chat.composer.toPlainText()
        if self.current_id is None:
            self.new_chat_draft = text
            return
        try:
            if self.store.conversation(self.current_id).draft != text:
                self.store.set_draft(self.current_id, text)
        except KeyError:  # the conversation was just deleted
            pass

    def attach(self, paths: list[str]) -> None:
        """Files (or a folder's files) into the composer as fenced blocks, ahead of the question."""
        res = attach(paths)
        if res.text:
            cur = self.chat.composer.toPlainText().rstrip()
            self.chat.composer.setPlainText((cur + "\n\n" if cur else "") + res.text + "\n\n")
            self.chat.composer.moveCursor(self.chat.composer.textCursor().MoveOperation.End)
        self.chat.set_can_send(self.chat._can_send, res.summary())

    def update_context_meter(self) -> None:
        """Tokens this conversation holds (its last answer's prompt + answer) of the engine's context."""
        used = 0
        if self.current_id is not None:
            for m in reversed(self.store.thread(self.current_id)):
                u = m.meta.get("usage") if m.role == "assistant" else None
                if u:
                    used = int(u.get("prompt_tokens", 0)) + int(u.get("completion_tokens", 0))
                    break
        self.chat.controls.set_context(used, self._context_size())

    def open_conversation(self, cid: str) -> None:
        if cid == self.current_id:
            return
        self.chat.cancel_edit()
        self.save_draft()
        self.current_id = cid
        rec = self.store.conversation(cid)
        self.chat.set_title(rec.title)
        self._show_generation(self.generation_for(rec))
        self._set_composer(rec.draft)
        self.render_thread()
        self.refresh_list()
        self.conversationChanged.emit(cid)

    def rename(self, cid: str, title: str) -> None:
        self.store.rename(cid, title)
        if cid == self.current_id:
            self.chat.set_title(self.store.conversation(cid).title)
        self.refresh_list()

    def delete(self, cid: str) -> None:
        if self.stream is not None and self.stream.conversation_id == cid:
            self.stop()
        self.store.delete(cid)
        self._forget_state(cid)
        if cid == self.current_id:
            self.new_conversation()
        else:
            self.refresh_list()

    def export_markdown(self, cid: str | None = None) -> str:
        cid = cid or self.current_id
        if cid is None:
            return ""
        tree = self.store.tree(cid)
        thread = tree.path_to(self.store.conversation(cid).leaf_id)
        return conversation_markdown(self.store.conversation(cid).title, thread, self.model_name, self.backend_name,
                                     len(tree.by_id) - len(thread))

    def set_effort(self, effort: str) -> None:
        self.gen = replace(self.gen, reasoning_effort=effort)
        self.chat.controls.set_effort(effort)
        if self.current_id is not None:
            self.store.set_generation(self.current_id, self.gen.to_dict())

    # ---- view -----------------------------------------------------------------------------
    def _vm(self, m: StoredMessage, tree: MessageTree) -> MessageViewModel:
        b = tree.branch_info(m.id)
        streaming = self.stream is not None and self.stream.message_id == m.id
        note = str(m.meta.get("note", ""))
        if m.meta.get("pending") and not streaming:  # the app ended while this answer was being written
            note = "This answer was interrupted before it finished."
        vm = MessageViewModel(id=m.id, role=m.role, content=m.content, reasoning=m.reasoning or "",
                              tool_calls=m.tool_calls, branch_index=b.index, branch_count=b.count,
                              footer=footer_for(m.meta), note=note,
                              error=str(m.meta.get("error", "")), streaming=streaming)
        if streaming and self.stream is not None:
            vm.content, vm.reasoning = self.stream.content, self.stream.reasoning
            vm.tool_calls, vm.note = tuple(self.stream.tool_calls), self.stream.note
        return vm

    def render_thread(self) -> None:
        if self.current_id is None:
            self.chat.set_messages([])
            return
        tree = self.store.tree(self.current_id)
        path = tree.path_to(self.store.conversation(self.current_id).leaf_id)
        self.chat.set_messages([self._vm(m, tree) for m in path])

    # ---- sending --------------------------------------------------------------------------
    @property
    def generating(self) -> bool:
        return self.stream is not None

    def send(self, text: str) -> bool:
        text = text.strip()
        if not text or self.generating:
            return False
        ok, why = self.can_generate()
        if not ok:
            self.chat.set_can_send(False, why)
            return False
        if self.current_id is None:
            title = make_title(text)
            g = self.gen
            self.current_id = self.store.create_conversation(title, reasoning_effort=g.reasoning_effort,
                                                             system_prompt=g.system_prompt, generation=g.to_dict())
            self.chat.set_title(title)
            self.new_chat_draft = ""
        cid = self.current_id
        if self.chat.editing_id is not None:
            parent = self.store.tree(cid).by_id[self.chat.editing_id].parent_id
            self.chat.end_edit()
        else:
            thread = self.store.thread(cid)
            parent = thread[-1].id if thread else None
        user = self.store.add_message(cid, parent, "user", text)
        self._set_composer("")
        self.store.set_draft(cid, "")
        self.refresh_list()
        return self._answer(cid, user.id)

    def regenerate(self, assistant_id: str) -> bool:
        if self.generating or self.current_id is None:
            return False
        m = self.store.tree(self.current_id).by_id.get(assistant_id)
        if m is None or m.parent_id is None:
            return False
        return self._answer(self.current_id, m.parent_id)

    def begin_edit(self, user_id: str) -> None:
        if self.generating or self.current_id is None:
            return
        m = self.store.tree(self.current_id).by_id.get(user_id)
        if m is not None:
            self.chat.begin_edit(user_id, m.content)

    def switch_branch(self, msg_id: str, delta: int) -> None:
        if self.generating or self.current_id is None:
            return
        tree = self.store.tree(self.current_id)
        if msg_id not in tree.by_id:
            return
        self.store.set_leaf(self.current_id, tree.switched_leaf(msg_id, delta))
        self.render_thread()

    def _answer(self, cid: str, parent_id: str) -> bool:
        """Start an assistant answer as a new child of ``parent_id`` (a new branch if it has one)."""
        tree = self.store.tree(cid)
        history = tree.path_to(parent_id)
        g = self.generation_for(self.store.conversation(cid))
        lead = (Message("system", g.system_prompt),) if g.system_prompt.strip() else ()
        conv = Conversation(messages=lead + tuple(m.to_engine() for m in history),
                            reasoning_effort=g.reasoning_effort)  # type: ignore[arg-type]
        answer = None
        try:
            params: GenerationParams = g.params()
            answer = self.store.add_message(cid, parent_id, "assistant", "", meta={"pending": True})
            run = self._start_run(cid, conv, params)
        except Exception as exc:
            log.exception("could not start a generation")
            if answer is not None:  # no answer will come: do not leave an empty one behind
                self.store.delete_message(answer.id)
            if cid == self.current_id:
                self.render_thread()
            self.chat.set_can_send(True, f"Could not start: {exc}. {how_to_fix(str(exc), exc)}")
            return False
        self.stream = _Stream(cid, answer.id, run)
        run.progress.connect(self._on_event)
        run.succeeded.connect(self._on_done)
        run.failed.connect(self._on_failed)
        run.start()  # only now: a queued signal emitted before connect() would be dropped
        self.chat.set_generating(True)
        if cid == self.current_id:
            self.render_thread()
        self.generationStarted.emit(cid)
        return True

    def save_interrupted(self) -> None:
        """The app is closing mid-answer: keep what was streamed so far, marked as interrupted."""
        self.save_draft()
        s = self.stream
        if s is None:
            return
        self.stream = None
        s.run.cancel()
        self.store.update_message(s.message_id, content=s.content, reasoning=s.reasoning or None,
                                  tool_calls=tuple(s.tool_calls),
                                  meta={"finish_reason": "cancelled", "backend": self.backend_name,
                                        "note": "Interrupted: the app was closed while answering."})

    def stop(self) -> None:
        if self.stream is not None:
            self.stream.stopped = True
            self.stream.run.cancel()

    # ---- streaming ------------------------------------------------------------------------
    def _on_event(self, ev: object) -> None:
        s = self.stream
        if s is None:
            return
        if isinstance(ev, TextDelta):
            s.deltas += 1
            if ev.channel == "analysis":
                s.reasoning += ev.text
            else:  # final, and commentary preambles meant for the user
                s.content += ev.text
        elif isinstance(ev, ToolCallEvent):
            s.tool_calls.append(ev.call)
        elif isinstance(ev, StateNote):
            s.state_note = s.note = ev.text()
        elif isinstance(ev, Progress):
            if ev.total > 0 and ev.done < ev.total:
                s.note = f"{s.state_note} Processing the prompt: {ev.done}/{ev.total} tokens…".lstrip()
            else:
                s.note = s.state_note
        now = time.monotonic()
        if isinstance(ev, TextDelta) and now - s.saved_at >= SAVE_EVERY_S:
            s.saved_at = now
            self.store.update_streaming(s.message_id, s.content, s.reasoning or None)
        w = self.chat.widget_for(s.message_id)
        if w is not None:
            if isinstance(ev, StateNote | Progress):
                w.vm.note = s.note
            w.vm.footer = f"Generating… {s.deltas} tokens so far · Esc stops" if s.deltas else "Processing the prompt…"
            w.set_stream(s.content, s.reasoning, tuple(s.tool_calls))

    def show_prompt_progress(self, done: int, total: int) -> None:
        """Live prompt progress from engine telemetry (its Progress events arrive only afterwards)."""
        s = self.stream
        if s is None or s.deltas or total <= 0 or done >= total:
            return
        w = self.chat.widget_for(s.message_id)
        if w is not None:
            w.vm.footer = f"Processing the prompt: {done:,}/{total:,} tokens…"
            w.set_stream(s.content, s.reasoning, tuple(s.tool_calls))

    def _on_done(self, done: Done) -> None:
        s = self.stream
        if s is None:
            return
        self.stream = None
        u = done.usage
        meta: dict[str, Any] = {
            "finish_reason": done.finish_reason,
            "usage": {"prompt_tokens": u.prompt_tokens, "cached_tokens": u.cached_tokens,
                      "completion_tokens": u.completion_tokens, "prompt_seconds": u.prompt_seconds,
                      "decode_seconds": u.decode_seconds},
            "backend": self.backend_name,
        }
        note = s.note
        if s.state_note.startswith("Resumed from saved state") and u.prompt_tokens:
            # what was really reused, from the engine's count (the saved state can hold more tokens
            # than the new prompt shares with it)
            resumed = (f"Resumed from saved state: {u.cached_tokens:,} tokens of history reused, "
                       f"{u.prompt_tokens - u.cached_tokens:,} processed.")
            note = note.replace(s.state_note, resumed, 1) if s.state_note in note else resumed
        if done.finish_reason == "cancelled" and not (s.content or s.reasoning):
            note = (note + " " if note else "") + "Stopped before any text was generated."
        elif s.reasoning and not s.content and not s.tool_calls and not done.error:
            note = (note + " " if note else "") + ("The model only reasoned and gave no answer"
                                                   + (" before the token limit." if done.finish_reason == "length"
                                                      else ".") + " Regenerate, or raise Max tokens.")
        if note:
            meta["note"] = note
        if done.error:
            meta["error"] = f"Generation failed: {done.error}. {how_to_fix(done.error)}"
        self.store.update_message(s.message_id, content=s.content, reasoning=s.reasoning or None,
                                  tool_calls=tuple(s.tool_calls), meta=meta)
        self.last_done = done
        self.chat.set_generating(False)
        if s.conversation_id == self.current_id:
            self.render_thread()
        self.refresh_list()
        self.update_context_meter()
        self.generationFinished.emit(done)

    def _on_failed(self, message: str, _tb: str) -> None:
        s = self.stream
        if s is None:
            return
        self._on_done(Done("error", Usage(), error=message))
