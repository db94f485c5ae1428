"""The streaming harmony parser: channels, tool calls, stops, UTF-8 safety, malformed input."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from engine.harmony import HarmonyStreamParser, OrdinaryEncoder, parse_completion, render_conversation
from engine.harmony.parser import MAX_HEADER_TOKENS, ParserEvent
from engine.tokenizer import SpecialTokens
from engine.types import Conversation, Message, TextDelta, ToolCall, ToolCallEvent

_ids = itertools.count()


def fixed_id() -> str:
    return f"call_{next(_ids)}"


def harmony_ids(tok: Tokenizer, text: str) -> list[int]:
    """Token ids of a harmony string whose special-token strings ARE specials (model output)."""
    return list(tok.encode(text, add_special_tokens=False).ids)


def feed_all(tok: Tokenizer, sp: SpecialTokens, ids: list[int]) -> tuple[HarmonyStreamParser, list[ParserEvent]]:
    parser = HarmonyStreamParser(tok, sp, make_call_id=fixed_id)
    events: list[ParserEvent] = []
    for i in ids:
        events += parser.feed(i)
    events += parser.finish()
    return parser, events


def texts(events: list[ParserEvent]) -> dict[str, str]:
    out = {"analysis": "", "commentary": "", "final": ""}
    for ev in events:
        if isinstance(ev, TextDelta):
            out[ev.channel] += ev.text
    return out


def test_analysis_then_final(tok: Tokenizer, sp: SpecialTokens) -> None:
    ids = harmony_ids(tok, "<|channel|>analysis<|message|>User greets. Reply.<|end|>"
                           "<|start|>assistant<|channel|>final<|message|>Hello, world!<|return|>")
    parser, events = feed_all(tok, sp, ids)
    assert texts(events) == {"analysis": "User greets. Reply.", "commentary": "", "final": "Hello, world!"}
    assert parser.stop_reason == "stop"
    assert all(isinstance(e, TextDelta) and e.text for e in events)


def test_text_streams_incrementally(tok: Tokenizer, sp: SpecialTokens) -> None:
    ids = harmony_ids(tok, "<|channel|>final<|message|>The quick brown fox jumps<|return|>")
    parser = HarmonyStreamParser(tok, sp)
    nonempty_steps = sum(bool(parser.feed(i)) for i in ids)
    assert nonempty_steps >= 5  # not buffered until the end


def test_tool_call_recipient_after_channel(tok: Tokenizer, sp: SpecialTokens) -> None:
    ids = harmony_ids(tok, "<|channel|>analysis<|message|>Need weather.<|end|>"
                           "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
                           '<|message|>{"city": "Paris"}<|call|>')
    parser, events = feed_all(tok, sp, ids)
    calls = [e.call for e in events if isinstance(e, ToolCallEvent)]
    assert len(calls) == 1
    assert calls[0].name == "get_weather" and calls[0].arguments == '{"city": "Paris"}'
    assert calls[0].id.startswith("call_")
    assert parser.stop_reason == "tool_calls"
    assert texts(events)["analysis"] == "Need weather."
    assert texts(events)["commentary"] == ""  # arguments are not streamed as text


def test_tool_call_recipient_in_role_and_variants(tok: Tokenizer, sp: SpecialTokens) -> None:
    for header in ("assistant to=functions.lookup<|channel|>commentary <|constrain|>json",
                   "assistant<|channel|>commentary to=functions.lookup<|constrain|>json",
                   "assistant<|channel|>commentary to=functions.lookup json",
                   "assistant to=functions.lookup"):
        ids = harmony_ids(tok, f"<|channel|>analysis<|message|>x<|end|><|start|>{header}<|message|>{{}}<|call|>")
        reply = parse_completion(tok, sp, ids)
        assert [c.name for c in reply.tool_calls] == ["lookup"], header
        assert reply.tool_calls[0].arguments == "{}"


def test_tool_call_ending_in_end_and_preamble(tok: Tokenizer, sp: SpecialTokens) -> None:
    call = "<|start|>assistant<|channel|>commentary to=functions.{} <|constrain|>json<|message|>{}{}"
    ids = harmony_ids(tok, "<|channel|>commentary<|message|>Let me check.<|end|>"
                      + call.format("a", "{}", "<|end|>") + call.format("b", "[]", "<|call|>"))
    reply = parse_completion(tok, sp, ids)
    assert reply.commentary == "Let me check."
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("a", "{}"), ("b", "[]")]
    assert reply.stop_reason == "tool_calls"
    msg = reply.to_message()
    assert msg.content == "Let me check." and len(msg.tool_calls) == 2


def test_tokens_after_stop_are_ignored(tok: Tokenizer, sp: SpecialTokens) -> None:
    ids = harmony_ids(tok, "<|channel|>final<|message|>done<|return|><|start|>assistant<|channel|>final<|message|>more")
    parser, events = feed_all(tok, sp, ids)
    assert texts(events)["final"] == "done"
    assert parser.stop_reason == "stop"


def test_cut_off_stream_has_no_stop_reason(tok: Tokenizer, sp: SpecialTokens) -> None:
    ids = harmony_ids(tok, "<|channel|>analysis<|message|>thinking hard")
    parser, events = feed_all(tok, sp, ids)
    assert texts(events)["analysis"] == "thinking hard"
    assert parser.stop_reason is None
    assert parser.finish() == []  # idempotent


def test_incomplete_header_at_cutoff_emits_nothing(tok: Tokenizer, sp: SpecialTokens) -> None:
    ids = harmony_ids(tok, "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>fin")
    _, events = feed_all(tok, sp, ids)
    assert texts(events) == {"analysis": "a", "commentary": "", "final": ""}


# ---- malformed output degrades to final text ----------------------------------------------


def test_plain_text_without_header_is_final(tok: Tokenizer, sp: SpecialTokens) -> None:
    reply = parse_completion(tok, sp, OrdinaryEncoder(tok).encode("Just an answer."))
    assert reply.final == "Just an answer."
    assert reply.stop_reason is None


def test_multiline_plain_text_streams_after_the_first_newline(tok: Tokenizer, sp: SpecialTokens) -> None:
    ids = OrdinaryEncoder(tok).encode("Line one\nline two and more")
    parser = HarmonyStreamParser(tok, sp)
    streamed = "".join(e.text for i in ids for e in parser.feed(i) if isinstance(e, TextDelta))
    assert streamed.startswith("Line one\n")
    rest = "".join(e.text for e in parser.finish() if isinstance(e, TextDelta))
    assert streamed + rest == "Line one\nline two and more"


def test_overlong_header_degrades(tok: Tokenizer, sp: SpecialTokens) -> None:
    word_ids = OrdinaryEncoder(tok).encode("blah ")
    ids = [sp.channel] + word_ids * (MAX_HEADER_TOKENS // len(word_ids) + 2)
    parser = HarmonyStreamParser(tok, sp)
    streamed = [e for i in ids for e in parser.feed(i)]
    assert streamed and all(isinstance(e, TextDelta) and e.channel == "final" for e in streamed)


def test_text_between_messages_and_unknown_channel(tok: Tokenizer, sp: SpecialTokens) -> None:
    ids = harmony_ids(tok, "<|channel|>analysis<|message|>a<|end|>stray text<|start|>assistant<|channel|>weird"
                           "<|message|>w<|end|><|start|>assistant<|channel|>final<|message|>f<|return|>")
    reply = parse_completion(tok, sp, ids)
    assert reply.analysis == "a"
    assert reply.final == "stray textwf"


def test_reserved_specials_and_out_of_range_ids_are_dropped(tok: Tokenizer, sp: SpecialTokens) -> None:
    reserved = tok.token_to_id("<|reserved_200009|>")
    assert reserved is not None
    ids = harmony_ids(tok, "<|channel|>final<|message|>ab")
    ids = [*ids[:-1], reserved, 10**9, -5, *ids[-1:], sp.return_]
    reply = parse_completion(tok, sp, ids)
    assert reply.final == "ab"


# ---- round trips and streaming ------------------------------------------------------------


def reply_ids(tok: Tokenizer, sp: SpecialTokens, history: tuple[Message, ...], reply: Message) -> list[int]:
    """The completion tokens for ``reply``: render with and without it and take the difference."""
    prompt = render_conversation(Conversation(messages=history, current_date="2025-01-01"), tok, sp)
    full = render_conversation(Conversation(messages=(*history, reply), current_date="2025-01-01"), tok, sp,
                               add_generation_prompt=False, auto_drop_analysis=False)
    assert full[: len(prompt)] == prompt
    out = full[len(prompt):]
    if out[-1] == sp.end:  # stored replies end in <|end|>; the model ends them with <|return|>
        out[-1] = sp.return_
    return out


def test_round_trip_analysis_and_final(tok: Tokenizer, sp: SpecialTokens) -> None:
    history = (Message("user", "hi"),)
    reply = Message("assistant", "Héllo ✓ — 你好 🎉", reasoning="User says hi; answer kindly.")
    parsed = parse_completion(tok, sp, reply_ids(tok, sp, history, reply))
    assert parsed.to_message() == reply
    assert parsed.stop_reason == "stop"


def test_round_trip_tool_calls(tok: Tokenizer, sp: SpecialTokens) -> None:
    history = (Message("user", "weather?"),)
    call = ToolCall("call_x", "get_weather", '{"city": "Zürich", "days": [1, 2]}')
    reply = Message("assistant", "Looking it up.", reasoning="Use the tool.", tool_calls=(call,))
    parsed = parse_completion(tok, sp, reply_ids(tok, sp, history, reply))
    assert parsed.analysis == "Use the tool." and parsed.commentary == "Looking it up."
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [(call.name, call.arguments)]
    assert parsed.stop_reason == "tool_calls"


def test_multibyte_text_never_splits_characters(tok: Tokenizer, sp: SpecialTokens) -> None:
    text = "naïve café 日本語 🎉🎉 ok"
    ids = [sp.channel, *OrdinaryEncoder(tok).encode("final"), sp.message, *OrdinaryEncoder(tok).encode(text),
           sp.return_]
    assert len(OrdinaryEncoder(tok).encode("🎉")) > 1  # the synthetic BPE splits it into bytes
    _, events = feed_all(tok, sp, ids)
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert "".join(deltas) == text
    assert not any("\ufffd" in d for d in deltas)


def test_truncated_multibyte_flushes_replacement_char(tok: Tokenizer, sp: SpecialTokens) -> None:
    emoji_ids = OrdinaryEncoder(tok).encode("🎉")
    ids = [sp.channel, *OrdinaryEncoder(tok).encode("final"), sp.message, *emoji_ids[:-1]]
    _, events = feed_all(tok, sp, ids)
    assert texts(events)["final"].endswith("\ufffd")


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(analysis=TEXT, final=TEXT)
def test_streaming_equals_one_shot(tok: Tokenizer, sp: SpecialTokens, analysis: str, final: str) -> None:
    reply = Message("assistant", final, reasoning=analysis or None)
    ids = reply_ids(tok, sp, (Message("user", "q"),), reply)
    one_shot = parse_completion(tok, sp, ids)
    # streaming: one token at a time, text assembled from deltas
    _, events = feed_all(tok, sp, ids)
    assert texts(events)["final"] == one_shot.final == final
    assert texts(events)["analysis"] == one_shot.analysis == analysis
    assert all(isinstance(e, TextDelta) and e.text and "\ufffd" not in e.text for e in events)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_token_streams_never_crash(tok: Tokenizer, sp: SpecialTokens, data: st.DataObject) -> None:
    vocab = tok.get_vocab_size(with_added_tokens=True)
    structural = [sp.start, sp.end, sp.message, sp.channel, sp.constrain, sp.return_, sp.call, sp.endoftext]
    token = st.one_of(st.integers(0, vocab - 1), st.sampled_from(structural), st.integers(-3, vocab + 3))
    ids = data.draw(st.lists(token, max_size=200))
    parser = HarmonyStreamParser(tok, sp)
    events: list[ParserEvent] = []
    for i in ids:
        events += parser.feed(i)
    events += parser.finish()
    assert parser.done
    assert parser.stop_reason in (None, "stop", "tool_calls")
    for e in events:
        assert isinstance(e, TextDelta | ToolCallEvent)
        if isinstance(e, TextDelta):
            assert e.text and e.channel in ("analysis", "commentary", "final")
    assert parser.finish() == []


def test_stream_cut_inside_next_header_shows_no_role_text(tok: Tokenizer, sp: SpecialTokens) -> None:
    for tail in ("<|start|>", "<|start|>assis", "<|start|>assistant", "<|start|>assistant to=functions.f"):
        ids = harmony_ids(tok, "<|channel|>analysis<|message|>a<|end|>" + tail)
        reply = parse_completion(tok, sp, ids)
        assert (reply.analysis, reply.final, reply.tool_calls) == ("a", "", ()), tail


def test_endoftext_stops(tok: Tokenizer, sp: SpecialTokens) -> None:
    ids = harmony_ids(tok, "<|channel|>final<|message|>bye<|endoftext|>more")
    reply = parse_completion(tok, sp, ids)
    assert (reply.final, reply.stop_reason) == ("bye", "stop")


def test_short_plain_completion_is_not_mistaken_for_a_header(tok: Tokenizer, sp: SpecialTokens) -> None:
    for text in ("a", "as", "assistant", "ok"):
        assert parse_completion(tok, sp, OrdinaryEncoder(tok).encode(text)).final == text


def test_degraded_header_keeps_multibyte_characters_whole(tok: Tokenizer, sp: SpecialTokens) -> None:
    text = "é" * MAX_HEADER_TOKENS + " done"  # the header limit falls inside a character
    reply = parse_completion(tok, sp, OrdinaryEncoder(tok).encode(text))
    assert reply.final == text


# ---- issue 18: text is never lost, only the assistant speaks -------------------------------------


def test_text_before_any_header_is_kept(tok: Tokenizer, sp: SpecialTokens) -> None:
    """openai-harmony's non-strict parser keeps it (its test_streamable_parser_missing_message_token)."""
    reply = parse_completion(tok, sp, harmony_ids(tok, "Sure, here is the answer.<|return|>"))
    assert (reply.final, reply.stop_reason) == ("Sure, here is the answer.", "stop")
    reply = parse_completion(tok, sp, harmony_ids(
        tok, "I must refuse<|end|><|start|>assistant<|channel|>analysis<|message|>We must refuse<|end|>"
             "<|start|>assistant<|channel|>final<|message|> Sorry.<|return|>"))
    assert (reply.analysis, reply.final) == ("We must refuse", "I must refuse Sorry.")
    reply = parse_completion(tok, sp, harmony_ids(tok, "<|channel|>analysis I must refuse<|end|>"))
    assert (reply.analysis, reply.final) == ("I must refuse", "")
    for tail in ("<|call|>", "<|start|>assistant<|channel|>final<|message|>!<|return|>", "<|endoftext|>"):
        reply = parse_completion(tok, sp, harmony_ids(tok, "Hello" + tail))
        assert reply.final.startswith("Hello"), tail
    # a header cut off by a stop token is still no text
    for text in ("<|channel|>final<|return|>", "<|channel|>commentary to=functions.f <|constrain|>json<|call|>",
                 " to=functions.f<|channel|>commentary json<|call|>"):
        reply = parse_completion(tok, sp, harmony_ids(tok, text))
        assert (reply.analysis, reply.commentary, reply.final, reply.tool_calls) == ("", "", "", ()), text


def test_call_token_without_a_call_is_a_plain_stop(tok: Tokenizer, sp: SpecialTokens) -> None:
    reply = parse_completion(tok, sp, harmony_ids(tok, "Hello<|call|>"))
    assert (reply.final, reply.tool_calls, reply.stop_reason) == ("Hello", (), "stop")
    reply = parse_completion(tok, sp, harmony_ids(tok, "<|channel|>final<|message|>Hi<|call|>"))
    assert (reply.final, reply.stop_reason) == ("Hi", "stop")


def test_a_message_by_another_author_ends_the_turn(tok: Tokenizer, sp: SpecialTokens) -> None:
    # a tool result written by the model is not a call to a tool named "assistant"
    reply = parse_completion(tok, sp, harmony_ids(
        tok, "<|channel|>analysis<|message|>Call it.<|end|><|start|>functions.x to=assistant<|channel|>commentary"
             "<|message|>{}<|end|><|start|>assistant<|channel|>final<|message|>made up<|return|>"))
    assert (reply.analysis, reply.final, reply.tool_calls, reply.stop_reason) == ("Call it.", "", (), "stop")
    # a user turn the model writes is not part of its answer
    for user in ("<|start|>user<|message|>Thanks!<|end|>", "<|start|>user\nThanks!", "<|start|>system<|message|>x",
                 "<|start|>developer<|channel|>final<|message|>x"):
        parser, events = feed_all(tok, sp, harmony_ids(tok, "<|channel|>final<|message|>Hi.<|end|>" + user
                                                       + "<|start|>assistant<|channel|>final<|message|>Bye<|return|>"))
        assert texts(events)["final"] == "Hi.", user
        assert parser.stop_reason == "stop", user
    # the assistant's own headers, with or without the role, still open messages
    reply = parse_completion(tok, sp, harmony_ids(tok, "<|channel|>analysis<|message|>a<|end|><|channel|>final"
                                                       "<|message|>b<|return|>"))
    assert (reply.analysis, reply.final) == ("a", "b")


# ---- plain text shows from its first token ----------------------------------------------------


def _streamed_before_finish(tok: Tokenizer, sp: SpecialTokens, text: str) -> tuple[list[str], str]:
    """The text each token of ``text`` released (no finish(): what a client has seen by then),
    and the text fed up to the first token that released any."""
    ids = OrdinaryEncoder(tok).encode(text)
    parser = HarmonyStreamParser(tok, sp)
    out = ["".join(e.text for e in parser.feed(i) if isinstance(e, TextDelta)) for i in ids]
    first = next((k for k, t in enumerate(out) if t), len(ids) - 1)
    return out, tok.decode(ids[: first + 1])


def test_plain_text_streams_from_its_first_word(tok: Tokenizer, sp: SpecialTokens) -> None:
    """A model writing without harmony headers (the demo model, random weights) is shown at once,
    not after MAX_HEADER_TOKENS tokens of 'header'."""
    text = " Sure, here is a long answer without any header at all"
    out, fed = _streamed_before_finish(tok, sp, text)
    assert " Sure".startswith(fed)  # released by the first word
    assert "".join(out) == text.lstrip()  # leading blanks dropped, as for a message of its own


def test_header_openings_are_still_held(tok: Tokenizer, sp: SpecialTokens) -> None:
    for opening in (" to=functions.get_weather", "to=functions.f json", "assistant", "assistant to=x.y", "t", "to"):
        assert "".join(_streamed_before_finish(tok, sp, opening)[0]) == "", opening
    reply = parse_completion(tok, sp, harmony_ids(
        tok, " to=functions.f<|channel|>commentary json<|message|>{\"a\": 1}<|call|>"), make_call_id=fixed_id)
    assert [c.name for c in reply.tool_calls] == ["f"]


def test_text_that_starts_like_a_recipient_is_shown_once_it_cannot_be_one(tok: Tokenizer, sp: SpecialTokens) -> None:
    out, fed = _streamed_before_finish(tok, sp, "to be honest, no")
    assert len(fed) > 2 and "to be".startswith(fed)  # "to" could still open "to=..."; "to b" cannot
    assert "".join(out) == "to be honest, no"
