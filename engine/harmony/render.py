"""Render a :class:`Conversation` into harmony prompt tokens (gpt-oss-facts §6).

The rendering follows the harmony library, not the HF jinja template: one system
message (identity, knowledge cutoff, date, reasoning effort, valid channels), a developer
message with the instructions and the ``functions`` namespace, then the turns, with the
analysis of every turn that ended in a ``final`` message dropped (the harmony format docs'
rule, see :func:`drop_earlier_analysis`).

A rendering is first built as a list of pieces — ordinary text or a :class:`Special`
formatting token — so the token and the string renderings cannot drift apart. Each text
piece is encoded on its own with ordinary encoding (like harmony's ``render_text_into``).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

from tokenizers import Tokenizer

from engine.harmony.codec import OrdinaryEncoder
from engine.harmony.schema_ts import render_functions_namespace
from engine.tokenizer import SpecialTokens
from engine.types import Conversation, Message, Tool

DEFAULT_IDENTITY = "You are ChatGPT, a large language model trained by OpenAI."
KNOWLEDGE_CUTOFF = "2024-06"
CHANNELS_LINE = "# Valid channels: analysis, commentary, final. Channel must be included for every message."
FUNCTIONS_LINE = "Calls to these tools must go to the commentary channel: 'functions'."


@dataclass(frozen=True)
class Special:
    """A harmony formatting token, inserted as a single id. ``name`` is its field in SpecialTokens."""

    name: str

    @property
    def text(self) -> str:
        return {"return_": "<|return|>"}.get(self.name, f"<|{self.name}|>")


START, END, MESSAGE, CHANNEL = Special("start"), Special("end"), Special("message"), Special("channel")
CONSTRAIN, CALL = Special("constrain"), Special("call")

Piece = str | Special


@dataclass(frozen=True)
class HarmonyMessage:
    """One rendered harmony message (an assistant turn can be several of these)."""

    author: str  # "system", "developer", "user", "assistant" or a tool name like "functions.f"
    content: str
    channel: str | None = None
    recipient: str | None = None
    constrain_json: bool = False

    def pieces(self) -> list[Piece]:
        out: list[Piece] = [START, self.author]
        # The model emits a tool call's recipient after the channel, so render it there too:
        # the stored reply then re-renders to the tokens it was generated as.
        to_after_channel = self.author == "assistant" and self.recipient is not None
        if self.recipient is not None and not to_after_channel:
            out.append(f" to={self.recipient}")
        if self.channel is not None:
            out += [CHANNEL, self.channel]
        if to_after_channel:
            out.append(f" to={self.recipient}")
        if self.constrain_json:
            out += [" ", CONSTRAIN, "json"]
        out += [MESSAGE, self.content]
        out.append(CALL if to_after_channel else END)
        return out


def system_text(conv: Conversation) -> str:
    date = conv.current_date or _dt.date.today().isoformat()
    top = "\n".join([conv.model_identity or DEFAULT_IDENTITY, f"Knowledge cutoff: {KNOWLEDGE_CUTOFF}",
                     f"Current date: {date}"])
    channels = CHANNELS_LINE + ("\n" + FUNCTIONS_LINE if conv.tools else "")
    return "\n\n".join([top, f"Reasoning: {conv.reasoning_effort}", channels])


def developer_text(instructions: str | None, tools: tuple[Tool, ...]) -> str | None:
    sections: list[str] = []
    if instructions is not None:
        sections += ["# Instructions", instructions]
    if tools:
        namespace = render_functions_namespace([(t.name, t.description, t.parameters) for t in tools])
        sections.append("# Tools\n\n" + namespace)
    return "\n\n".join(sections) if sections else None


def _tool_author(msg: Message, call_names: dict[str, str], last_call: str | None) -> str:
    name = msg.name or (call_names.get(msg.tool_call_id) if msg.tool_call_id else None) or last_call
    if not name:
        return "functions.unknown"
    return name if name.startswith("functions.") else f"functions.{name}"


def conversation_messages(conv: Conversation) -> list[HarmonyMessage]:
    """The harmony messages of a conversation, before dropping analysis."""
    out = [HarmonyMessage("system", system_text(conv))]
    msgs = list(conv.messages)
    lead = 0
    while lead < len(msgs) and msgs[lead].role in ("system", "developer"):
        lead += 1
    instructions = "\n\n".join(m.content for m in msgs[:lead]) if lead else None
    dev = developer_text(instructions, conv.tools)
    if dev is not None:
        out.append(HarmonyMessage("developer", dev))
    call_names: dict[str, str] = {}
    last_call: str | None = None
    for msg in msgs[lead:]:
        if msg.role in ("system", "developer"):
            # Harmony has no rule for instructions mid-conversation; keep them as plain developer text.
            out.append(HarmonyMessage("developer", msg.content))
        elif msg.role == "user":
            out.append(HarmonyMessage("user", msg.content))
        elif msg.role == "tool":
            author = _tool_author(msg, call_names, last_call)
            out.append(HarmonyMessage(author, msg.content, channel="commentary", recipient="assistant"))
        else:
            out += _assistant_messages(msg)
            for call in msg.tool_calls:
                call_names[call.id] = call.name
                last_call = call.name
    return out


def _assistant_messages(msg: Message) -> list[HarmonyMessage]:
    out: list[HarmonyMessage] = []
    if msg.reasoning:
        out.append(HarmonyMessage("assistant", msg.reasoning, channel="analysis"))
    if msg.tool_calls:
        if msg.content:  # text next to tool calls is a user-visible preamble
            out.append(HarmonyMessage("assistant", msg.content, channel="commentary"))
        for call in msg.tool_calls:
            out.append(HarmonyMessage("assistant", call.arguments, channel="commentary",
                                      recipient=f"functions.{call.name}", constrain_json=True))
    elif msg.content or not msg.reasoning:
        out.append(HarmonyMessage("assistant", msg.content, channel="final"))
    return out


def drop_earlier_analysis(messages: list[HarmonyMessage]) -> list[HarmonyMessage]:
    """Drop the chain of thought of every assistant turn that ended in a ``final`` message.

    The harmony docs (format.md, "Handling reasoning output in subsequent sampling"): "drop any
    previous CoT content on subsequent sampling if the responses by the assistant ended in a
    message to the final channel"; the exception is tool calling, whose chain of thought goes
    back in until the final message. So every analysis message before the last assistant
    ``final`` message goes; analysis after it (a turn still working through tool calls) stays.

    openai-harmony's ``auto_drop_analysis`` differs: it drops only when the very last assistant
    message is ``final`` and only before the *first* ``final`` — a finished turn's analysis
    comes back as soon as a later turn calls a tool, and from the third turn on the second's
    stays. Here a finished turn renders the same in every later prompt, so the K/V cache keeps
    everything up to the previous answer's header and a follow-up processes only that answer
    (its analysis gone) and the new messages."""
    last_final = max((i for i, m in enumerate(messages) if m.author == "assistant" and m.channel == "final"),
                     default=-1)
    return [m for i, m in enumerate(messages) if not (i < last_final and m.channel == "analysis")]


def conversation_pieces(conv: Conversation, *, add_generation_prompt: bool = True,
                        auto_drop_analysis: bool = True) -> list[Piece]:
    messages = conversation_messages(conv)
    if auto_drop_analysis:
        messages = drop_earlier_analysis(messages)
    pieces: list[Piece] = []
    for m in messages:
        pieces += m.pieces()
    if add_generation_prompt:
        pieces += [START, "assistant"]
    return pieces


def encode_pieces(pieces: list[Piece], tok: Tokenizer, sp: SpecialTokens) -> list[int]:
    encoder = OrdinaryEncoder.for_tokenizer(tok)
    ids: list[int] = []
    for p in pieces:
        if isinstance(p, Special):
            ids.append(getattr(sp, p.name))
        else:
            ids += encoder.encode(p)
    return ids


def render_conversation(conv: Conversation, tok: Tokenizer, sp: SpecialTokens, *,
                        add_generation_prompt: bool = True, auto_drop_analysis: bool = True) -> list[int]:
    """Prompt token ids for ``conv``, ending in ``<|start|>assistant`` by default.
    ``auto_drop_analysis=False`` keeps every analysis message (e.g. to re-render a reply
    exactly as it was generated)."""
    pieces = conversation_pieces(conv, add_generation_prompt=add_generation_prompt,
                                 auto_drop_analysis=auto_drop_analysis)
    return encode_pieces(pieces, tok, sp)


def render_text(conv: Conversation, *, add_generation_prompt: bool = True, auto_drop_analysis: bool = True) -> str:
    """The same rendering as a string with the special tokens spelled out (debugging, goldens)."""
    pieces = conversation_pieces(conv, add_generation_prompt=add_generation_prompt,
                                 auto_drop_analysis=auto_drop_analysis)
    return "".join(p.text if isinstance(p, Special) else p for p in pieces)


def encode_completion_prompt(prompt: str, tok: Tokenizer, *, allow_special: bool = False) -> list[int]:
    """Token ids for a raw completion prompt. With ``allow_special`` special-token strings
    written in the prompt (e.g. a hand-written harmony prompt) become their ids; otherwise
    the whole prompt is ordinary text."""
    if allow_special:
        return list(tok.encode(prompt, add_special_tokens=False).ids)
    return OrdinaryEncoder.for_tokenizer(tok).encode(prompt)
