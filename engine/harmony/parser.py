"""Streaming parser for harmony completions: token ids in, per-channel text and tool calls out.

Generation starts right after the prompt's ``<|start|>assistant``, so the parser begins
inside an assistant header. Grammar per message::

    [<|start|>]{role}[ to=R][<|channel|>{channel}[ to=R]][ [<|constrain|>]{type}]<|message|>{text}END

where END is ``<|end|>`` (another message follows), ``<|call|>`` or ``<|return|>``.

``analysis``/``final`` text and recipient-less ``commentary`` (a user-visible preamble) are
streamed as :class:`TextDelta`; an assistant message addressed ``to=functions.NAME`` is
collected and emitted as one :class:`ToolCallEvent` when it ends. ``<|return|>`` and
``<|call|>`` stop the stream; later tokens are ignored. The stop reason is "tool_calls" only
when the stream made a tool call (``Hello<|call|>`` is a plain "stop").

Only the assistant speaks here: a message whose header names another author (``user``,
``system``, ``developer``, a tool such as ``functions.x``) is the model writing someone else's
turn, so the assistant's turn ends there ("stop") and that message is never shown or called.

Malformed output never raises, and text is never lost: text the model writes before any
header (``Sure.<|return|>``, ``I must refuse<|end|>…``) is a message of its own, as in
openai-harmony's non-strict StreamableParser (``<|channel|>analysis I must refuse<|end|>``
keeps the channel); text outside any message, headers that never reach ``<|message|>`` on
the first line and unknown channels all degrade to plain text on the ``final`` channel;
unexpected special tokens inside text are dropped. A header cut off by the end of the stream
(or one after ``<|start|>`` that a stop token cuts) shows nothing.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from tokenizers import Tokenizer

from engine.harmony.codec import IncrementalDecoder
from engine.tokenizer import SpecialTokens
from engine.types import Channel, Message, TextDelta, ToolCall, ToolCallEvent

ParserEvent = TextDelta | ToolCallEvent
StopReason = Literal["stop", "tool_calls"]

# A header longer than this (in tokens) is not a header: the model is writing plain text.
MAX_HEADER_TOKENS = 96
_CHANNEL_MARK = "\x00channel\x00"
_CONSTRAIN_MARK = "\x00constrain\x00"
_CHANNELS: frozenset[str] = frozenset(("analysis", "commentary", "final"))
# What the first header may hold before its first <|channel|>/<|constrain|>: the role repeated,
# a recipient, a content type after it. Plain text that cannot grow into this is shown at once
# instead of after MAX_HEADER_TOKENS: a model writing without harmony (the demo model, a
# synthetic checkpoint) would otherwise show nothing for its first 96 tokens.
_OPENING = re.compile(r"(?:assistant(?:\s+|$))?(?:to=[\w.\-:/@]+(?:\s+[\w.\-/+]*)?\s*)?")


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


@dataclass(frozen=True)
class Header:
    role: str
    channel: Channel
    recipient: str | None


def parse_header(text: str) -> Header:
    """Header text with the channel/constrain tokens as marks → role, channel, recipient."""
    role_part, _, channel_part = text.partition(_CHANNEL_MARK)
    channel_part = channel_part.partition(_CONSTRAIN_MARK)[0]
    role_words = role_part.replace(_CONSTRAIN_MARK, " ").split()
    channel_words = channel_part.split()
    recipient = None
    for word in role_words + channel_words:
        if word.startswith("to=") and len(word) > 3:
            recipient = word[3:]
    # The author is the header's first word; a header that starts with its recipient or its
    # channel (the role left out) is the assistant's.
    role = role_words[0] if role_words and not role_words[0].startswith("to=") else "assistant"
    channel_name = next((w for w in channel_words if not w.startswith("to=")), "")
    channel: Channel
    if channel_name in _CHANNELS:
        channel = channel_name  # type: ignore[assignment]
    else:
        channel = "commentary" if recipient else "final"
    return Header(role=role, channel=channel, recipient=recipient)


class HarmonyStreamParser:
    """Feed completion token ids one at a time; collect the returned events."""

    def __init__(self, tok: Tokenizer, sp: SpecialTokens, *, make_call_id: Callable[[], str] = new_call_id) -> None:
        self._tok = tok
        self._sp = sp
        self._make_call_id = make_call_id
        self._stop_reason: StopReason | None = None
        self._finished = False
        # state: "header" (collecting header ids), "content" (inside a message), "between" (after <|end|>)
        self._state = "header"
        self._header_after_start = False  # the first header follows the prompt's <|start|>assistant
        self._header_ids: list[int] = []  # text ids of the header segment being collected
        self._header_text_ids: list[int] = []  # all text ids of the header (to replay it as text)
        self._header_text = ""  # decoded header so far, with marks for channel/constrain
        self._header_len = 0
        self._header: Header | None = None
        self._content = IncrementalDecoder(tok)
        self.tool_calls: list[ToolCall] = []
        self._added_ids = frozenset(tok.get_added_tokens_decoder())
        self._vocab_size = tok.get_vocab_size(with_added_tokens=True)

    @property
    def stop_reason(self) -> StopReason | None:
        return self._stop_reason

    @property
    def done(self) -> bool:
        return self._stop_reason is not None or self._finished

    # ---- public API -----------------------------------------------------------------------

    def feed(self, token_id: int) -> list[ParserEvent]:
        if self.done or not 0 <= token_id < self._vocab_size:
            return []
        sp = self._sp
        if token_id in (sp.return_, sp.call, sp.endoftext, sp.end, sp.start):
            events = self._close_header() if self._state == "header" else []
            events += self._end_message()
            if token_id in (sp.return_, sp.call, sp.endoftext):
                # <|call|> after a message that called nothing is a plain end of the turn
                self._stop_reason = "tool_calls" if token_id == sp.call and self.tool_calls else "stop"
            elif token_id == sp.start:
                self._begin_header()
            return events
        if self._state == "header":
            return self._feed_header(token_id)
        if self._state == "between":
            return self._feed_between(token_id)
        return self._feed_content(token_id)

    def finish(self) -> list[ParserEvent]:
        """End of the token stream (stop token, length limit or cancel): flush what is held."""
        if self._finished:
            return []
        events: list[ParserEvent] = []
        if self._stop_reason is None:
            if self._state == "header" and not self._looks_like_cut_header():
                # plain text that never became a header (the model ignored the format)
                events += self._degrade_header()
            events += self._end_message()
        self._finished = True
        return events

    # ---- states ---------------------------------------------------------------------------

    def _begin_header(self) -> None:
        self._state = "header"
        self._header_after_start = True
        self._header_ids, self._header_text, self._header_len, self._header = [], "", 0, None
        self._header_text_ids = []

    def _flush_header_segment(self) -> None:
        if self._header_ids:
            self._header_text += self._tok.decode(self._header_ids, skip_special_tokens=False)
            self._header_ids = []

    def _feed_header(self, token_id: int) -> list[ParserEvent]:
        sp = self._sp
        self._header_len += 1
        if token_id == sp.message:
            self._flush_header_segment()
            header = parse_header(self._header_text)
            if self._header_after_start and header.role != "assistant":
                return self._foreign_author()
            self._open_message(header)
            return []
        if token_id == sp.channel:
            self._flush_header_segment()
            self._header_text += _CHANNEL_MARK
        elif token_id == sp.constrain:
            self._flush_header_segment()
            self._header_text += _CONSTRAIN_MARK
        elif not self._is_other_special(token_id):
            self._header_ids.append(token_id)
            self._header_text_ids.append(token_id)
            if self._opening_is_plain_text():
                return self._degrade_header(lstrip=True)
        if self._header_len > MAX_HEADER_TOKENS or self._header_has_newline():
            if self._header_author_is_foreign():
                return self._foreign_author()
            return self._degrade_header()
        return []

    def _opening_is_plain_text(self) -> bool:
        """Whether the first header's text, with no channel or constrain mark yet, can no longer
        become one (``Sure``, ``to be``; not ``to=functions.f``, ``assistant`` or ``t``)."""
        if self._header_after_start or self._header_text:
            return False
        s = self._tok.decode(self._header_ids, skip_special_tokens=False).lstrip()
        if "assistant".startswith(s) or "to=".startswith(s):
            return False
        rest = s[len("assistant"):].lstrip() if s.startswith("assistant") else s
        if "to=".startswith(rest):
            return False
        return _OPENING.fullmatch(s) is None

    def _looks_like_cut_header(self) -> bool:
        """Whether the pending header is a real one cut off by the end of the stream (drop it)
        rather than text written without any harmony structure (show it). After ``<|start|>``
        it always is: the assistant's header cut short, or another author's (never shown)."""
        self._flush_header_segment()
        if self._header_after_start:
            return True
        if _CHANNEL_MARK in self._header_text or _CONSTRAIN_MARK in self._header_text:
            return True
        words = self._header_text.split()
        return not words or words[0].startswith("to=")

    def _foreign_author(self) -> list[ParserEvent]:
        """The model began a message by another author (a user turn, a tool result): the
        assistant's turn is over. Nothing of that message is shown."""
        self._state = "between"
        self._header = None
        self._stop_reason = "stop"
        return []

    def _header_author_is_foreign(self) -> bool:
        if not self._header_after_start:  # the prompt's <|start|>assistant gave the first role
            return False
        self._flush_header_segment()
        return parse_header(self._header_text).role != "assistant"

    def _close_header(self) -> list[ParserEvent]:
        """A stop, ``<|end|>`` or ``<|start|>`` token arrived before the header's ``<|message|>``.

        The first header (right after the prompt) was text the model wrote without a header:
        it becomes a message of its own, as in openai-harmony's non-strict parser — a channel
        named after ``<|channel|>`` is kept, the rest is the text. Headers with a
        ``<|constrain|>`` or starting with a recipient were cut-off tool calls, and a header
        after ``<|start|>`` never reached its text: those show nothing."""
        self._flush_header_segment()
        text = self._header_text
        self._header_text, self._header_ids = "", []
        if self._header_after_start or _CONSTRAIN_MARK in text:
            return []
        role_part, mark, channel_part = text.partition(_CHANNEL_MARK)
        channel_name = ""
        if mark:
            stripped = channel_part.lstrip()
            channel_name = stripped.split(maxsplit=1)[0] if stripped.split() else ""
            channel_part = stripped[len(channel_name):]
        body = (role_part + channel_part).strip()
        words = body.split(maxsplit=1)
        if words and words[0] == "assistant":
            body = words[1] if len(words) > 1 else ""
        if not body or body.startswith("to="):
            return []
        channel: Channel = channel_name if channel_name in _CHANNELS else "final"  # type: ignore[assignment]
        return [TextDelta(channel, body)]

    def _header_has_newline(self) -> bool:
        if not self._header_ids:
            return False
        return "\n" in self._tok.decode(self._header_ids[-1:], skip_special_tokens=False)

    def _degrade_header(self, lstrip: bool = False) -> list[ParserEvent]:
        """The 'header' was really text: reopen it as a final-channel message and replay its
        ids through the content decoder (UTF-8 safe, unlike the header's own decoding).
        ``lstrip``: drop its leading blanks, as a message of its own does (_close_header)."""
        replay = self._header_text_ids
        self._open_message(Header(role="assistant", channel="final", recipient=None))
        text = "".join(self._content.push(i) for i in replay)
        if lstrip:
            text = text.lstrip()
        return [TextDelta("final", text)] if text else []

    def _feed_between(self, token_id: int) -> list[ParserEvent]:
        sp = self._sp
        if token_id == sp.channel:  # "<|start|>assistant" left out: a header without a role
            self._begin_header()
            self._header_text = _CHANNEL_MARK
            return []
        if token_id == sp.message:
            self._open_message(Header(role="assistant", channel="final", recipient=None))
            return []
        if self._is_other_special(token_id) or token_id == sp.constrain:
            return []
        self._open_message(Header(role="assistant", channel="final", recipient=None))
        return self._feed_content(token_id)

    def _open_message(self, header: Header) -> None:
        self._state = "content"
        self._header = header
        self._content = IncrementalDecoder(self._tok)

    def _feed_content(self, token_id: int) -> list[ParserEvent]:
        sp = self._sp
        if token_id in (sp.message, sp.channel, sp.constrain) or self._is_other_special(token_id):
            return []
        header = self._header
        assert header is not None
        delta = self._content.push(token_id)
        if header.recipient is None and delta:
            return [TextDelta(header.channel, delta)]
        return []

    def _end_message(self) -> list[ParserEvent]:
        events: list[ParserEvent] = []
        if self._state == "content" and self._header is not None:
            header = self._header
            rest = self._content.flush()
            if header.recipient is None:
                if rest:
                    events.append(TextDelta(header.channel, rest))
            else:
                arguments = self._tok.decode(self._content.ids, skip_special_tokens=False)
                name = header.recipient.removeprefix("functions.")
                call = ToolCall(id=self._make_call_id(), name=name, arguments=arguments)
                self.tool_calls.append(call)
                events.append(ToolCallEvent(call))
        self._state = "between"
        self._header = None
        return events

    def _is_other_special(self, token_id: int) -> bool:
        """A special/added token that is not part of harmony's grammar (reserved ids etc.)."""
        return token_id in self._added_ids


# ---- non-streaming ------------------------------------------------------------------------


@dataclass(frozen=True)
class ParsedReply:
    analysis: str
    final: str
    commentary: str  # user-visible preambles
    tool_calls: tuple[ToolCall, ...]
    stop_reason: StopReason | None

    def to_message(self) -> Message:
        """The assistant message to store in history (content = final text, or the preamble
        when the turn ended in tool calls)."""
        content = self.final if self.final or not self.tool_calls else self.commentary
        return Message(role="assistant", content=content, reasoning=self.analysis or None,
                       tool_calls=self.tool_calls)


def collect(events: Iterable[ParserEvent], stop_reason: StopReason | None) -> ParsedReply:
    texts: dict[str, list[str]] = {"analysis": [], "commentary": [], "final": []}
    calls: list[ToolCall] = []
    for ev in events:
        if isinstance(ev, TextDelta):
            texts[ev.channel].append(ev.text)
        else:
            calls.append(ev.call)
    return ParsedReply(analysis="".join(texts["analysis"]), final="".join(texts["final"]),
                       commentary="".join(texts["commentary"]), tool_calls=tuple(calls), stop_reason=stop_reason)


def parse_completion(tok: Tokenizer, sp: SpecialTokens, ids: Iterable[int], *,
                     make_call_id: Callable[[], str] = new_call_id) -> ParsedReply:
    """Parse a whole completion (the ids generated after ``<|start|>assistant``)."""
    parser = HarmonyStreamParser(tok, sp, make_call_id=make_call_id)
    events: list[ParserEvent] = []
    for i in ids:
        events += parser.feed(int(i))
    events += parser.finish()
    return collect(events, parser.stop_reason)
