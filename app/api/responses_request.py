"""``POST /v1/responses`` request body -> engine Conversation + GenerationParams.

Input items map onto harmony messages: ``message`` items by role, ``reasoning`` items onto
the next assistant message's analysis, consecutive ``function_call`` items onto one
assistant message's tool calls, ``function_call_output`` onto tool messages. The server
keeps no history, so ``previous_response_id`` is refused: send the full input instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from engine.grammar import Constraint
from engine.types import Conversation, GenerationParams, Message, Tool, ToolCall

from .chat_request import max_tokens_param, parse_effort, text_content
from .errors import invalid
from .fields import describe, get_bool, get_dict, get_int, get_list, get_str, type_name
from .params import RESPONSES_KEYS, sampling_params, unknown_fields
from .structured import add_format_note, parse_format, tool_constraint
from .tools_schema import BUILTIN_NOTE, apply_tool_choice, check_unique, is_function_tool, parse_tool

INPUT_ROLES = ("user", "system", "developer", "assistant")
TEXT_PARTS = ("input_text", "output_text", "text", "refusal")


@dataclass(frozen=True)
class ResponsesRequest:
    model: str | None
    conversation: Conversation
    params: GenerationParams
    stream: bool
    echo: dict[str, Any] = field(default_factory=dict)  # request fields repeated in the response object
    constraint: Constraint | None = None
    warnings: list[str] = field(default_factory=list)  # ignored input, sent as X-Neural-Warning


@dataclass
class _Assistant:
    reasoning: list[str] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.reasoning or self.content or self.calls)

    def message(self) -> Message:
        return Message("assistant", "".join(self.content), reasoning="".join(self.reasoning) or None,
                       tool_calls=tuple(self.calls))


def parse_input(raw: Any) -> list[Message]:
    if isinstance(raw, str):
        if not raw:
            raise invalid("'input' must not be empty.", param="input", code="invalid_value")
        return [Message("user", raw)]
    if not isinstance(raw, list):
        raise invalid(f"'input' must be a string or an array of input items, got "
                      f"{type_name(raw) if raw is not None else 'nothing'}.", param="input",
                      code="invalid_type" if raw is not None else "missing_required_parameter")
    if not raw:
        raise invalid("'input' must contain at least one item.", param="input", code="invalid_value")
    out: list[Message] = []
    pending = _Assistant()
    call_names: dict[str, str] = {}

    def flush() -> None:
        nonlocal pending
        if not pending.empty():
            out.append(pending.message())
        pending = _Assistant()

    for i, item in enumerate(raw):
        p = f"input[{i}]"
        if not isinstance(item, dict):
            raise invalid(f"'{p}' must be an object, got {type_name(item)}.", param=p, code="invalid_type")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in INPUT_ROLES:
                raise invalid(f"'{p}.role' must be one of {', '.join(INPUT_ROLES)}; got {describe(role)}.",
                              param=f"{p}.role", code="invalid_value")
            text = text_content(item.get("content"), f"{p}.content", allowed_parts=TEXT_PARTS)
            if role == "assistant":
                if pending.calls:
                    flush()
                pending.content.append(text)
            else:
                flush()
                out.append(Message(role, text))
        elif kind == "reasoning":
            if pending.content or pending.calls:
                flush()
            parts = get_list(item, "content", f"{p}.content") or get_list(item, "summary", f"{p}.summary") or []
            for j, part in enumerate(parts):
                if not isinstance(part, dict) or not isinstance(part.get("text"), str):
                    raise invalid(f"'{p}' part {j} must be an object with a 'text' string.", param=p,
                                  code="invalid_type")
                pending.reasoning.append(part["text"])
        elif kind == "function_call":
            call_id = get_str(item, "call_id", f"{p}.call_id", required=True, allow_empty=False)
            name = get_str(item, "name", f"{p}.name", required=True, allow_empty=False)
            args = item.get("arguments", "")
            if isinstance(args, dict):
                args = json.dumps(args, ensure_ascii=False)
            if not isinstance(args, str):
                raise invalid(f"'{p}.arguments' must be a JSON string, got {type_name(args)}.",
                              param=f"{p}.arguments", code="invalid_type")
            call_names[call_id] = name
            pending.calls.append(ToolCall(id=call_id, name=name, arguments=args))
        elif kind == "function_call_output":
            flush()
            call_id = get_str(item, "call_id", f"{p}.call_id", required=True, allow_empty=False)
            if call_id not in call_names:
                raise invalid(f"'{p}.call_id' {call_id!r} does not match any earlier function_call item; send "
                              f"the function_call item before its output.", param=f"{p}.call_id",
                              code="invalid_value")
            output = item.get("output")
            text = output if isinstance(output, str) else text_content(output, f"{p}.output",
                                                                      allowed_parts=TEXT_PARTS)
            out.append(Message("tool", text, tool_call_id=call_id, name=call_names[call_id]))
        elif kind == "item_reference":
            raise invalid(f"'{p}': item references need stored responses, which this server does not keep; send "
                          f"the full item instead.", param=p, code="unsupported_value")
        else:
            raise invalid(f"'{p}.type' {describe(kind)} is not supported; use message, reasoning, function_call "
                          f"or function_call_output.", param=f"{p}.type", code="invalid_value")
    flush()
    return out


def _function_tool(t: dict[str, Any], p: str, tools: list[Tool], strict: set[str]) -> None:
    nested = t.get("function")
    fn: dict[str, Any] = nested if isinstance(nested, dict) else t  # flat, or chat-style nesting
    tools.append(parse_tool(fn.get("name"), fn.get("description"), fn.get("parameters"), p))
    if get_bool(fn, "strict", f"{p}.strict"):
        strict.add(tools[-1].name)


def parse_response_tools(body: dict[str, Any], warnings: list[str]) -> tuple[list[Tool], Constraint | None]:
    """Function tools, plus those inside ``namespace`` tools (they join the functions namespace under
    their own names); built-in tools are dropped with a warning instead of failing the request."""
    raw = get_list(body, "tools", "tools") or []
    tools: list[Tool] = []
    strict: set[str] = set()
    for i, t in enumerate(raw):
        p = f"tools[{i}]"
        if not isinstance(t, dict):
            raise invalid(f"'{p}' must be an object, got {type_name(t)}.", param=p, code="invalid_type")
        if t.get("type") == "namespace":
            for j, sub in enumerate(get_list(t, "tools", f"{p}.tools") or []):
                sp = f"{p}.tools[{j}]"
                if not isinstance(sub, dict):
                    raise invalid(f"'{sp}' must be an object, got {type_name(sub)}.", param=sp, code="invalid_type")
                if is_function_tool(sub, sp):
                    _function_tool(sub, sp, tools, strict)
                else:
                    warnings.append(f"{sp} of type {describe(sub.get('type'))} dropped ({BUILTIN_NOTE})")
        elif is_function_tool(t, p):
            _function_tool(t, p, tools, strict)
        else:
            warnings.append(f"{p} of type {describe(t.get('type'))} dropped ({BUILTIN_NOTE})")
    check_unique(tools, "tools")
    choice = body.get("tool_choice")
    offered = apply_tool_choice(tools, choice, flat=True)
    return offered, tool_constraint(offered, choice, strict)


def parse_responses_request(body: dict[str, Any], *, context_limit: int, vocab_size: int) -> ResponsesRequest:
    warnings = [f"unknown field '{k}' ignored" for k in unknown_fields(body, RESPONSES_KEYS)]
    model = get_str(body, "model", "model")
    if body.get("previous_response_id") is not None:
        raise invalid("'previous_response_id' is not supported: this local server stores no responses. Send the "
                      "whole conversation in 'input'.", param="previous_response_id", code="unsupported_parameter")
    instructions = get_str(body, "instructions", "instructions")
    messages = parse_input(body.get("input"))
    if instructions:
        messages.insert(0, Message("developer", instructions))
    tools, forced = parse_response_tools(body, warnings)
    reasoning = get_dict(body, "reasoning", "reasoning") or {}
    effort = parse_effort(reasoning.get("effort"), "reasoning.effort")
    text_cfg = get_dict(body, "text", "text") or {}
    fmt_raw = text_cfg.get("format")
    fmt_constraint, note = parse_format(fmt_raw, "text.format", nested=False)
    max_tokens = max_tokens_param(body, ("max_output_tokens",), context_limit, context_limit)
    params = sampling_params(body, max_tokens, vocab_size)
    stream = get_bool(body, "stream", "stream")
    parallel = get_bool(body, "parallel_tool_calls", "parallel_tool_calls", default=True)
    if body.get("background"):
        raise invalid("'background' responses need stored responses, which this server does not keep.",
                      param="background", code="unsupported_parameter")
    if get_int(body, "top_logprobs", "top_logprobs", lo=0, hi=20):
        raise invalid("'top_logprobs' is not supported by this server.", param="top_logprobs",
                      code="unsupported_parameter")
    if body.get("conversation") is not None or body.get("prompt") is not None:
        key = "conversation" if body.get("conversation") is not None else "prompt"
        raise invalid(f"'{key}' needs objects stored on OpenAI's servers; send the full 'input' instead.",
                      param=key, code="unsupported_parameter")
    messages = list(add_format_note(tuple(messages), note))
    conv = Conversation(messages=tuple(messages), tools=tuple(tools), reasoning_effort=effort)  # type: ignore[arg-type]
    echo = {
        "instructions": instructions,
        "max_output_tokens": body.get("max_output_tokens"),
        "temperature": params.temperature,
        "top_p": params.top_p,
        "tool_choice": body.get("tool_choice") or "auto",
        "tools": raw_tools if isinstance(raw_tools := body.get("tools"), list) else [],
        "reasoning": {"effort": effort, "summary": None},
        "parallel_tool_calls": parallel,
        "text": {"format": fmt_raw if isinstance(fmt_raw, dict) else {"type": "text"}},
        "store": False,
        "metadata": body.get("metadata") if isinstance(body.get("metadata"), dict) else {},
        "previous_response_id": None,
        "truncation": "disabled",
    }
    return ResponsesRequest(model=model, conversation=conv, params=params, stream=stream, echo=echo,
                            constraint=forced or fmt_constraint, warnings=warnings)
