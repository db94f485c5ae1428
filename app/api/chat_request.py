"""``POST /v1/chat/completions`` request body -> engine Conversation + GenerationParams."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from engine.types import Conversation, GenerationParams, Message, Tool, ToolCall

from .errors import invalid
from .fields import describe, get_bool, get_choice, get_dict, get_float, get_int, get_list, get_stop, get_str, type_name
from .tools_schema import apply_tool_choice, check_unique, parse_tool

ROLES = ("system", "developer", "user", "assistant", "tool")
EFFORTS = ("low", "medium", "high")
SEED_RANGE = (-(2**63), 2**64 - 1)


@dataclass(frozen=True)
class ChatRequest:
    model: str | None
    conversation: Conversation
    params: GenerationParams
    stream: bool
    include_usage: bool


def parse_effort(value: Any, param: str) -> str:
    if value == "minimal":  # OpenAI's newer lowest level; gpt-oss knows low/medium/high
        return "low"
    return str(get_choice({"v": value}, "v", param, EFFORTS, default="medium"))


def sampling_params(body: dict[str, Any], max_tokens: int, *, temperature_default: float = 1.0) -> GenerationParams:
    """temperature, top_p, seed and stop, shared by all three generation endpoints."""
    temperature = get_float(body, "temperature", "temperature", lo=0.0, hi=2.0, default=temperature_default)
    top_p = get_float(body, "top_p", "top_p", lo=0.0, hi=1.0, lo_open=True, default=1.0)
    seed = get_int(body, "seed", "seed", lo=SEED_RANGE[0], hi=SEED_RANGE[1])
    for key in ("frequency_penalty", "presence_penalty"):  # accepted for compatibility, not applied
        get_float(body, key, key, lo=-2.0, hi=2.0)
    n = get_int(body, "n", "n", lo=1, hi=128, default=1)
    if n != 1:
        raise invalid("'n' must be 1: the local engine produces one choice per request.", param="n",
                      code="unsupported_value")
    return GenerationParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                            seed=None if seed is None else seed % (2**63), stop=get_stop(body))


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


def parse_chat_tools(body: dict[str, Any]) -> list[Tool]:
    raw = get_list(body, "tools", "tools") or []
    tools: list[Tool] = []
    for i, t in enumerate(raw):
        p = f"tools[{i}]"
        if not isinstance(t, dict):
            raise invalid(f"'{p}' must be an object, got {type_name(t)}.", param=p, code="invalid_type")
        if t.get("type") != "function":
            raise invalid(f"'{p}.type' must be \"function\" (the only tool type this server runs), got "
                          f"{describe(t.get('type'))}.", param=f"{p}.type", code="invalid_value")
        fn = get_dict(t, "function", f"{p}.function", required=True)
        tools.append(parse_tool(fn.get("name"), fn.get("description"), fn.get("parameters"), f"{p}.function"))
    check_unique(tools, "tools")
    return apply_tool_choice(tools, body.get("tool_choice"))


def parse_chat_request(body: dict[str, Any], *, context_limit: int) -> ChatRequest:
    model = get_str(body, "model", "model")
    messages = parse_messages(body.get("messages"))
    tools = parse_chat_tools(body)
    effort = parse_effort(body.get("reasoning_effort"), "reasoning_effort")
    max_tokens = max_tokens_param(body, ("max_tokens", "max_completion_tokens"), context_limit, context_limit)
    params = sampling_params(body, max_tokens)
    stream = get_bool(body, "stream", "stream")
    opts = get_dict(body, "stream_options", "stream_options") or {}
    include_usage = get_bool(opts, "include_usage", "stream_options.include_usage")
    if get_bool(body, "logprobs", "logprobs"):
        raise invalid("'logprobs' is not supported by this server.", param="logprobs", code="unsupported_parameter")
    fmt = get_dict(body, "response_format", "response_format")
    if fmt is not None and fmt.get("type", "text") != "text":
        raise invalid(f"'response_format' type {describe(fmt.get('type'))} is not supported; only \"text\" is "
                      f"(ask for JSON in the prompt instead).", param="response_format.type",
                      code="unsupported_value")
    conv = Conversation(messages=messages, tools=tuple(tools), reasoning_effort=effort)  # type: ignore[arg-type]
    return ChatRequest(model=model, conversation=conv, params=params, stream=stream, include_usage=include_usage)
