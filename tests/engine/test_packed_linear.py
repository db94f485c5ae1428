"""Prepacked bf16 projections (engine/packed_linear.py) against F.linear and an fp64 product."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.packed_linear import PackedLinear
from engine.reference import cpu_has_bf16_gemm

pytestmark = pytest.mark.skipif(not cpu_has_bf16_gemm(), reason="oneDNN's bf16 path is not native on this CPU")


@pytest.mark.parametrize("rows", [1, 7, 64])
def test_packed_projection_matches_f_linear_to_a_bf16_rounding(rows: int) -> None:
    g = torch.Generator().manual_seed(rows)
    w = torch.randn(320, 288, generator=g).to(torch.bfloat16)
    b = torch.randn(320, generator=g).to(torch.bfloat16)
    x = torch.randn(rows, 288, generator=g).to(torch.bfloat16)
    pk = PackedLinear()
    got = pk(x, w, b)
    assert got is not None and pk.enabled and got.dtype == torch.bfloat16 and got.shape == (rows, 320)
    want = F.linear(x, w, b)
    exact = F.linear(x.double(), w.double(), b.double())
    # both accumulate in fp32 and round once to bf16, in other orders: at most a bf16 ulp apart
    ulp = exact.abs().clamp_min(1e-30) * 2.0**-7
    assert ((got.double() - want.double()).abs() <= ulp).all()
    assert (got.double() - exact).norm() / exact.norm() < 4e-3
    assert pk(x, w, b) is not None and len(pk._packed) == 1  # packed once, reused


def test_leading_dimensions_and_no_bias() -> None:
    w = torch.randn(64, 32).to(torch.bfloat16)
    x = torch.randn(2, 3, 32).to(torch.bfloat16)
    got = PackedLinear()(x, w)
    assert got is not None and got.shape == (2, 3, 64)
    assert torch.allclose(got.float(), F.linear(x, w).float(), rtol=2e-2, atol=1e-2)


def test_other_dtypes_are_left_to_f_linear() -> None:
    pk = PackedLinear()
    assert pk(torch.randn(1, 8), torch.randn(4, 8)) is None
    assert pk(torch.randn(1, 8).bfloat16(), torch.randn(4, 8).bfloat16(), torch.randn(4)) is None
    assert pk.enabled
