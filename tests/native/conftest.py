"""Fixtures for the native kernel tests: the loaded kernel, restored to defaults after each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from native.kernel import NativeKernel, load_kernel


@pytest.fixture
def kernel() -> Iterator[NativeKernel]:
    k = load_kernel()  # a missing extension is a failure here, not a skip: CI builds it
    prefetch = k.prefetch
    yield k
    k.set_isa("auto")
    k.set_threads(2)
    k.set_prefetch(prefetch)
