"""Typed field readers for JSON request bodies.

Every reader names the offending parameter in its error (``param`` and the message), so a
client author sees e.g. ``'max_tokens' must be an integer between 1 and 131072, got "ten"``
instead of a stack trace. JSON booleans are never accepted as numbers (Python's ``bool``
subclasses ``int``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from .errors import ApiError, invalid

_MISSING: Any = object()


def describe(value: Any) -> str:
    """A short rendering of a bad value for error messages (never the whole body)."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


BODY_HASH_KEY = web.RequestKey("neural_body_hash", str)  # identifies a request across client retries


async def read_json_object(request: web.Request, timeout: float = 60.0) -> dict[str, Any]:
    """The request body as a JSON object, or a 400/408/413/415 naming what is wrong."""
    ctype = request.content_type
    # Only JSON (or no type): a browser form or text/plain POST from another site never gets through.
    if ctype not in ("application/json", "") and not ctype.endswith("+json"):
        raise ApiError(415, f"Content-Type must be application/json, got {ctype!r} (with curl, add "
                       f"-H 'Content-Type: application/json').", code="unsupported_media_type")
    try:
        raw = await asyncio.wait_for(request.read(), timeout)  # aiohttp enforces client_max_size (-> 413)
    except TimeoutError:
        raise ApiError(408, f"The request body did not arrive within {timeout:g} s.", code="body_timeout") from None
    except RequestPayloadError as exc:  # e.g. Content-Encoding: gzip on a body that is not gzip
        enc = request.headers.get("Content-Encoding", "")
        raise invalid(f"Request body could not be read{f' as Content-Encoding {enc!r}' if enc else ''}: "
                      f"{str(exc).splitlines()[-1].strip() or exc}.", code="invalid_body") from None
    request[BODY_HASH_KEY] = await _retry_key(request, raw)
    if not raw.strip():
        raise invalid("Request body is empty; send a JSON object such as {\"model\": ..., \"messages\": [...]}.",
                      code="invalid_json")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid(f"Request body is not UTF-8 text (byte {exc.start}).", code="invalid_json") from None
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise invalid(f"Request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}.",
                      code="invalid_json") from None
    except ValueError as exc:  # NaN / Infinity
        raise invalid(f"Request body is not valid JSON: {exc}.", code="invalid_json") from None
    except RecursionError:
        raise invalid("Request body is nested too deeply.", code="invalid_json") from None
    if not isinstance(data, dict):
        raise invalid(f"Request body must be a JSON object, got {type_name(data)}.", code="invalid_json")
    # only a \uD8xx escape can put a lone surrogate in a str; the bytes search is a fast memchr scan
    if b"\\u" in raw and _ESCAPED_SURROGATE.search(text):
        try:
            where = find_lone_surrogate(data, "")
        except RecursionError:
            raise invalid("Request body is nested too deeply.", code="invalid_json") from None
        if where is not None:
            raise invalid(f"'{where or 'body'}' holds a lone UTF-16 surrogate escape (\\uD800-\\uDFFF without its "
                          f"pair), which is not text; send valid Unicode.", param=where or None,
                          code="invalid_unicode")
    return data


_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
_LONE = re.compile("[\ud800-\udfff]")


def find_lone_surrogate(value: Any, path: str) -> str | None:
    """The parameter path of the first string (or key) holding a lone surrogate, else None."""
    if isinstance(value, str):
        return path if _LONE.search(value) else None
    if isinstance(value, dict):
        for k, v in value.items():
            sub = f"{path}.{k}" if path else str(k)
            if _LONE.search(k):
                return path or "body"
            hit = find_lone_surrogate(v, sub)
            if hit is not None:
                return hit
    elif isinstance(value, list):
        for i, v in enumerate(value):
            hit = find_lone_surrogate(v, f"{path}[{i}]")
            if hit is not None:
                return hit
    return None


async def _retry_key(request: web.Request, raw: bytes) -> str:
    digest = hashlib.sha256(request.path.encode())
    digest.update(request.headers.get("Authorization", "").encode("utf-8", "surrogateescape"))
    if len(raw) < 1 << 20:
        digest.update(raw)
    else:  # hashlib releases the GIL on large buffers: off the loop, a big body costs it nothing
        await asyncio.get_running_loop().run_in_executor(None, digest.update, raw)
    return digest.hexdigest()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in JSON")


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def get_str(obj: dict[str, Any], key: str, param: str, *, required: bool = False, default: Any = None,
            allow_empty: bool = True) -> Any:
    value = obj.get(key, _MISSING)
    if value is _MISSING or value is None:
        if required:
            raise invalid(f"Missing required parameter '{param}'.", param=param, code="missing_required_parameter")
        return default
    if not isinstance(value, str):
        raise invalid(f"'{param}' must be a string, got {type_name(value)}.", param=param, code="invalid_type")
    if not allow_empty and not value:
        raise invalid(f"'{param}' must not be empty.", param=param, code="invalid_value")
    return value


def get_int(obj: dict[str, Any], key: str, param: str, *, lo: int, hi: int, default: Any = None) -> Any:
    value = obj.get(key, _MISSING)
    if value is _MISSING or value is None:
        return default
    if isinstance(value, float) and value.is_integer() and math.isfinite(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise invalid(f"'{param}' must be an integer between {lo} and {hi}, got {describe(value)}.",
                      param=param, code="invalid_value" if isinstance(value, int) else "invalid_type")
    return value


def get_float(obj: dict[str, Any], key: str, param: str, *, lo: float, hi: float, default: Any = None,
              lo_open: bool = False) -> Any:
    value = obj.get(key, _MISSING)
    if value is _MISSING or value is None:
        return default
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (lo < value if lo_open else lo <= value) and value <= hi
    if not ok:
        lo_txt = f"greater than {lo}" if lo_open else f"at least {lo}"
        raise invalid(f"'{param}' must be a number {lo_txt} and at most {hi}, got {describe(value)}.",
                      param=param, code="invalid_value")
    return float(value)


def get_bool(obj: dict[str, Any], key: str, param: str, *, default: bool = False) -> bool:
    value = obj.get(key, _MISSING)
    if value is _MISSING or value is None:
        return default
    if not isinstance(value, bool):
        raise invalid(f"'{param}' must be true or false, got {describe(value)}.", param=param, code="invalid_type")
    return value


def get_list(obj: dict[str, Any], key: str, param: str, *, required: bool = False) -> Any:
    value = obj.get(key, _MISSING)
    if value is _MISSING or value is None:
        if required:
            raise invalid(f"Missing required parameter '{param}'.", param=param, code="missing_required_parameter")
        return None
    if not isinstance(value, list):
        raise invalid(f"'{param}' must be an array, got {type_name(value)}.", param=param, code="invalid_type")
    return value


def get_dict(obj: dict[str, Any], key: str, param: str, *, required: bool = False) -> Any:
    value = obj.get(key, _MISSING)
    if value is _MISSING or value is None:
        if required:
            raise invalid(f"Missing required parameter '{param}'.", param=param, code="missing_required_parameter")
        return None
    if not isinstance(value, dict):
        raise invalid(f"'{param}' must be an object, got {type_name(value)}.", param=param, code="invalid_type")
    return value


def get_choice(obj: dict[str, Any], key: str, param: str, choices: tuple[str, ...], *, default: Any = None) -> Any:
    value = obj.get(key, _MISSING)
    if value is _MISSING or value is None:
        return default
    if not isinstance(value, str) or value not in choices:
        raise invalid(f"'{param}' must be one of {', '.join(repr(c) for c in choices)}; got {describe(value)}.",
                      param=param, code="invalid_value")
    return value


def get_stop(obj: dict[str, Any], key: str = "stop", param: str = "stop") -> tuple[str, ...]:
    """OpenAI ``stop``: a string or up to 4 strings (we allow 16), none empty."""
    value = obj.get(key)
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or len(items) > 16 or not all(isinstance(s, str) and s for s in items):
        raise invalid(f"'{param}' must be a non-empty string or an array of up to 16 non-empty strings, "
                      f"got {describe(value)}.", param=param, code="invalid_value")
    return tuple(items)
