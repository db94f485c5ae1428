"""The harmony chat format of gpt-oss: prompt rendering and completion parsing."""

from engine.harmony.codec import IncrementalDecoder, OrdinaryEncoder
from engine.harmony.parser import (
    HarmonyStreamParser,
    ParsedReply,
    ParserEvent,
    StopReason,
    parse_completion,
)
from engine.harmony.render import (
    encode_completion_prompt,
    render_conversation,
    render_text,
)
from engine.harmony.schema_ts import schema_to_ts

__all__ = [
    "HarmonyStreamParser",
    "IncrementalDecoder",
    "OrdinaryEncoder",
    "ParsedReply",
    "ParserEvent",
    "StopReason",
    "encode_completion_prompt",
    "parse_completion",
    "render_conversation",
    "render_text",
    "schema_to_ts",
]
