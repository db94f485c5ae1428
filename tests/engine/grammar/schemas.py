"""A hypothesis strategy for JSON Schemas inside what the grammar compiler implements."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)


def _leaf() -> st.SearchStrategy[dict[str, Any]]:
    def int_schema(bounds: tuple[int, int]) -> dict[str, Any]:
        lo, hi = sorted(bounds)
        return {"type": "integer", "minimum": lo, "maximum": hi}

    return st.one_of(
        st.just({"type": "boolean"}),
        st.just({"type": "null"}),
        st.just({"type": "number"}),
        st.tuples(st.integers(-1000, 1000), st.integers(-1000, 1000)).map(int_schema),
        st.integers(0, 12).map(lambda n: {"type": "string", "maxLength": n}),
        st.integers(0, 3).map(lambda n: {"type": "string", "minLength": n, "maxLength": n + 6}),
        st.lists(st.text(alphabet="abcxyz ", min_size=1, max_size=5), min_size=1, max_size=4, unique=True)
        .map(lambda xs: {"enum": xs}),
        st.sampled_from(["A", 3, True, None]).map(lambda v: {"const": v}),
        st.just({"type": "string", "pattern": "^[a-z]{1,4}[0-9]?$"}),
    )


def _extend(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    def obj(props: dict[str, Any], closed: bool, req_mask: list[bool]) -> dict[str, Any]:
        names = list(props)
        required = [n for n, r in zip(names, req_mask, strict=False) if r]
        out: dict[str, Any] = {"type": "object", "properties": props, "required": required}
        if closed:
            out["additionalProperties"] = False
        return out

    def arr(item: dict[str, Any], lo: int, extra: int) -> dict[str, Any]:
        return {"type": "array", "items": item, "minItems": lo, "maxItems": lo + extra}

    return st.one_of(
        st.builds(obj, st.dictionaries(_names, children, min_size=1, max_size=4), st.booleans(),
                  st.lists(st.booleans(), min_size=4, max_size=4)),
        st.builds(arr, children, st.integers(0, 2), st.integers(0, 3)),
        st.lists(children, min_size=2, max_size=3).map(lambda xs: {"anyOf": xs}),
    )


def json_schemas() -> st.SearchStrategy[dict[str, Any]]:
    """Object-rooted schemas (what response_format and tool arguments use) up to depth ~3."""
    inner = st.recursive(_leaf(), _extend, max_leaves=6)
    return st.builds(
        lambda props, mask: {"type": "object", "properties": props,
                             "required": [n for n, r in zip(props, mask, strict=False) if r],
                             "additionalProperties": False},
        st.dictionaries(_names, inner, min_size=1, max_size=4), st.lists(st.booleans(), min_size=4, max_size=4))
