"""Mirrored session order for comparing servers: A B B A ..., A B C C B A ...

Running the endpoints in one fixed order lets slow drift of the host (heat, page cache,
background load) favour whichever runs first; reversing the order on every other round
spreads that drift evenly over all endpoints.
"""

from __future__ import annotations

from collections.abc import Sequence


def mirrored_order(names: Sequence[str], rounds: int) -> list[str]:
    """The endpoints in forward order on even rounds and reversed on odd ones."""
    if rounds < 1:
        raise ValueError("rounds must be >= 1")
    if not names:
        raise ValueError("no endpoints")
    if len(set(names)) != len(names):
        raise ValueError("endpoint names must be unique")
    out: list[str] = []
    for r in range(rounds):
        out.extend(names if r % 2 == 0 else list(reversed(names)))
    return out
