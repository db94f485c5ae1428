"""``POST /v1/chat/completions`` request body -> engine Conversation + GenerationParams."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from engine.grammar import Constraint
from engine.types import Conversation, GenerationParams, Message, Tool, ToolCall

from .errors import invalid
from .fields import describe, get_bool, get_choice, get_dict, get_int, get_list, get_str, type_name
from .params import CHAT_KEYS, unknown_fields
from .params import sampling_params as sampling_params
from .structured import add_format_note, parse_format, tool_constraint
from .tools_schema import BUILTIN_NOTE, apply_tool_choice, check_unique, is_function_tool, parse_tool

ROLES = ("system", "developer", "user", "assistant", "tool")
EFFORTS = ("low", "medium", "high")


@dataclass(frozen=True)
class ChatRequest:
    model: str | None
    conversation: Conversation
    params: GenerationParams
    stream: bool
    include_usage: bool
    constraint: Constraint | None = None
    warnings: list[str] = field(default_factory=list)  # ignored input, sent as X-Neural-Warning


def parse_effort(value: Any, param: str) -> str:
    if value == "minimal":  # OpenAI's newer lowest level; gpt-oss knows low/medium/high
        return "low"
    return str(get_choice({"v": value}, "v", param, EFFORTS, default="medium"))


def max_tokens_param(body: dict[str, Any], keys: tuple[str, ...], limit: int, default: int) -> int:
    value = default
    for key in keys:  # later keys win (max_completion_tokens supersedes max_tokens)
        v = get_int(body, key, key, lo=1, hi=limit)
        if v is not None:
            value = v
    return value


def text_content(content: Any, param: str, *, allowed_parts: tuple[str, ...] = ("text",)) -> str:
    """Message content as text: a string, null, or an array of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(f"'{param}' must be a string or an array of content parts, got {type_name(content)}.",
                      param=param, code="invalid_type")
    texts: list[str] = []
    for j, part in enumerate(content):
        p = f"{param}[{j}]"
        if not isinstance(part, dict):
            raise invalid(f"'{p}' must be an object like {{\"type\": \"text\", \"text\": \"...\"}}, got "
                          f"{type_name(part)}.", param=p, code="invalid_type")
        kind = part.get("type")
        if kind not in allowed_parts:
            what = "images, audio and files" if kind in ("image_url", "input_image", "input_audio", "file",
                                                         "input_file") else f"type {describe(kind)}"
            raise invalid(f"'{p}': gpt-oss reads text only, so {what} cannot be sent; use parts of type "
                          f"{' or '.join(repr(a) for a in allowed_parts)}.", param=p, code="unsupported_content")
        key = "refusal" if kind == "refusal" else "text"
        texts.append(get_str(part, key, f"{p}.{key}", required=True))
    return "".join(texts)


def parse_tool_calls(raw: Any, param: str) -> tuple[ToolCall, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise invalid(f"'{param}' must be an array, got {type_name(raw)}.", param=param, code="invalid_type")
    calls: list[ToolCall] = []
    for j, tc in enumerate(raw):
        p = f"{param}[{j}]"
        if not isinstance(tc, dict):
            raise invalid(f"'{p}' must be an object, got {type_name(tc)}.", param=p, code="invalid_type")
        if tc.get("type", "function") != "function":
            raise invalid(f"'{p}.type' must be \"function\".", param=f"{p}.type", code="invalid_value")
        fn = get_dict(tc, "function", f"{p}.function", required=True)
        name = get_str(fn, "name", f"{p}.function.name", required=True, allow_empty=False)
        args = fn.get("arguments", "")
        if isinstance(args, dict):  # some clients send the parsed object; harmony wants JSON text
            args = json.dumps(args, ensure_ascii=False)
        elif not isinstance(args, str):
            raise invalid(f"'{p}.function.arguments' must be a JSON string, got {type_name(args)}.",
                          param=f"{p}.function.arguments", code="invalid_type")
        call_id = get_str(tc, "id", f"{p}.id", default=f"call_{j}")
        calls.append(ToolCall(id=call_id, name=name, arguments=args))
    return tuple(calls)


def parse_messages(raw: Any) -> tuple[Message, ...]:
    if not isinstance(raw, list):
        raise invalid(f"'messages' must be an array of message objects, got {type_name(raw)}.",
                      param="messages", code="invalid_type")
    if not raw:
        raise invalid("'messages' must contain at least one message.", param="messages", code="invalid_value")
    out: list[Message] = []
    call_names: dict[str, str] = {}
    for i, m in enumerate(raw):
        p = f"messages[{i}]"
        if not isinstance(m, dict):
            raise invalid(f"'{p}' must be an object with 'role' and 'content', got {type_name(m)}.", param=p,
                          code="invalid_type")
        role = m.get("role")
        if role == "function":
            raise invalid(f"'{p}.role' \"function\" is the deprecated function-calling format; send tool results "
                          f"as role \"tool\" with a 'tool_call_id'.", param=f"{p}.role", code="invalid_value")
        if role not in ROLES:
            raise invalid(f"'{p}.role' must be one of {', '.join(ROLES)}; got {describe(role)}.",
                          param=f"{p}.role", code="invalid_value")
        name = get_str(m, "name", f"{p}.name")
        if role == "assistant":
            calls = parse_tool_calls(m.get("tool_calls"), f"{p}.tool_calls")
            content = text_content(m.get("content"), f"{p}.content", allowed_parts=("text", "refusal"))
            reasoning = get_str(m, "reasoning_content", f"{p}.reasoning_content")
            if reasoning is None:
                reasoning = get_str(m, "reasoning", f"{p}.reasoning")
            for c in calls:
                call_names[c.id] = c.name
            out.append(Message("assistant", content, reasoning=reasoning or None, tool_calls=calls))
        elif role == "tool":
            call_id = get_str(m, "tool_call_id", f"{p}.tool_call_id", required=True)
            fn_name = call_names.get(call_id) or name
            if fn_name is None:
                raise invalid(f"'{p}.tool_call_id' {call_id!r} does not match the id of any earlier assistant "
                              f"tool call; a tool message must answer a call from a previous assistant message.",
                              param=f"{p}.tool_call_id", code="invalid_value")
            out.append(Message("tool", text_content(m.get("content"), f"{p}.content"), tool_call_id=call_id,
                               name=fn_name))
        else:
            if "content" not in m:
                raise invalid(f"Missing required parameter '{p}.content'.", param=f"{p}.content",
                              code="missing_required_parameter")
            out.append(Message(role, text_content(m.get("content"), f"{p}.content"), name=name))
    return tuple(out)


def parse_chat_tools(body: dict[str, Any], warnings: list[str]) -> tuple[list[Tool], Constraint | None]:
    raw = get_list(body, "tools", "tools") or []
    tools: list[Tool] = []
    strict: set[str] = set()
    for i, t in enumerate(raw):
        p = f"tools[{i}]"
        if not isinstance(t, dict):
            raise invalid(f"'{p}' must be an object, got {type_name(t)}.", param=p, code="invalid_type")
        if not is_function_tool(t, p):
            warnings.append(f"{p} of type {describe(t.get('type'))} dropped ({BUILTIN_NOTE})")
            continue
        fn = get_dict(t, "function", f"{p}.function", required=True)
        tools.append(parse_tool(fn.get("name"), fn.get("description"), fn.get("parameters"), f"{p}.function"))
        if get_bool(fn, "strict", f"{p}.function.strict"):
            strict.add(tools[-1].name)
    check_unique(tools, "tools")
    choice = body.get("tool_choice")
    offered = apply_tool_choice(tools, choice)
    return offered, tool_constraint(offered, choice, strict)


def parse_chat_request(body: dict[str, Any], *, context_limit: int, vocab_size: int) -> ChatRequest:
    warnings = [f"unknown field '{k}' ignored" for k in unknown_fields(body, CHAT_KEYS)]
    model = get_str(body, "model", "model")
    messages = parse_messages(body.get("messages"))
    tools, forced = parse_chat_tools(body, warnings)
    effort = parse_effort(body.get("reasoning_effort"), "reasoning_effort")
    max_tokens = max_tokens_param(body, ("max_tokens", "max_completion_tokens"), context_limit, context_limit)
    params = sampling_params(body, max_tokens, vocab_size)
    get_bool(body, "parallel_tool_calls", "parallel_tool_calls", default=True)  # one call per turn: always met
    for key in ("functions", "function_call"):
        if body.get(key) is not None:
            raise invalid(f"'{key}' is the deprecated function-calling format; send 'tools' and 'tool_choice'.",
                          param=key, code="unsupported_parameter")
    for key in ("audio", "prediction", "web_search_options"):
        if body.get(key) is not None:
            raise invalid(f"'{key}' is not supported by this local server.", param=key, code="unsupported_parameter")
    if body.get("modalities") not in (None, ["text"]):
        raise invalid("'modalities' must be [\"text\"]: gpt-oss writes text only.", param="modalities",
                      code="unsupported_value")
    if get_int(body, "top_logprobs", "top_logprobs", lo=0, hi=20):
        raise invalid("'top_logprobs' is not supported by this server.", param="top_logprobs",
                      code="unsupported_parameter")
    stream = get_bool(body, "stream", "stream")
    opts = get_dict(body, "stream_options", "stream_options") or {}
    include_usage = get_bool(opts, "include_usage", "stream_options.include_usage")
    if get_bool(body, "logprobs", "logprobs"):
        raise invalid("'logprobs' is not supported by this server.", param="logprobs", code="unsupported_parameter")
    fmt_constraint, note = parse_format(body.get("response_format"), "response_format", nested=True)
    messages = add_format_note(messages, note)
    conv = Conversation(messages=messages, tools=tuple(tools), reasoning_effort=effort)  # type: ignore[arg-type]
    return ChatRequest(model=model, conversation=conv, params=params, stream=stream, include_usage=include_usage,
                       constraint=forced or fmt_constraint, warnings=warnings)
