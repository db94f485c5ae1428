"""neural_rms_norm_bf16 and neural_rope_bf16 (native/neural_rows.c) against the reference's rms_norm and apply_rope:
RoPE bit for bit; RMSNorm bit for bit against the same arithmetic in NumPy (its summation order) and within one bf16
unit of PyTorch's, on rare elements only; the same bits whatever ISA is set (plain C)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.reference import apply_rope, rms_norm
from native.kernel import KernelError, NativeKernel


def bits(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy().copy()


def native_norm(kernel: NativeKernel, x: torch.Tensor, g: torch.Tensor, eps: float) -> torch.Tensor:
    out = torch.empty_like(x)
    kernel.rms_norm_bf16(x.data_ptr(), g.data_ptr(), x.numel(), eps, out.data_ptr())
    return out


def numpy_norm(x: torch.Tensor, g: torch.Tensor, eps: float) -> torch.Tensor:
    """neural_rows.c's order in NumPy fp32: 16 lanes over the row, then pairwise halving."""
    t = x.float().numpy().reshape(-1)
    lanes = np.zeros(16, np.float32)
    for i in range(0, t.size, 16):
        lanes = lanes + t[i : i + 16] * t[i : i + 16]
    w = 8
    while w >= 1:
        lanes[:w] = lanes[:w] + lanes[w : 2 * w]
        w //= 2
    r = np.float32(1) / np.sqrt(lanes[0] / np.float32(t.size) + np.float32(eps))
    y = g.float().numpy() * (t * r)
    return torch.from_numpy(y.astype(np.float32)).to(torch.bfloat16).reshape(x.shape)


@pytest.mark.parametrize("n", [16, 64, 2880])
def test_rms_norm_is_its_order_bit_for_bit_and_pytorchs_within_a_unit(kernel: NativeKernel, n: int) -> None:
    gen = torch.Generator().manual_seed(n)
    eps = 1e-5
    unequal = total = 0
    for scale in (1e-3, 1.0, 30.0):
        x = (torch.randn(1, n, generator=gen) * scale).to(torch.bfloat16)
        g = (torch.rand(n, generator=gen) * 2).to(torch.bfloat16)
        got = native_norm(kernel, x, g, eps)
        assert np.array_equal(bits(got), bits(numpy_norm(x, g, eps)))
        want = rms_norm(x, g, eps)
        diff = (got.float() - want.float()).abs()
        ulp = want.float().abs() * 2.0 ** -7
        assert bool((diff <= ulp + 1e-30).all()), float((diff / ulp.clamp_min(1e-30)).max())
        unequal += int((diff > 0).sum())
        total += n
    assert unequal <= max(2, total // 50)  # a different last fp32 bit of the mean moves few elements


def test_rope_is_apply_ropes_bits(kernel: NativeKernel) -> None:
    gen = torch.Generator().manual_seed(7)
    for heads, d in ((64, 64), (8, 64), (3, 16)):
        x = (torch.randn(1, heads, d, generator=gen) * 3).to(torch.bfloat16)
        ang = torch.rand(1, d // 2, generator=gen) * 1000
        cos, sin = (ang.cos() * 1.35).to(torch.bfloat16), (ang.sin() * 1.35).to(torch.bfloat16)
        want = apply_rope(x, cos, sin)
        got = x.clone()
        kernel.rope_bf16(got.data_ptr(), heads, d, cos.data_ptr(), sin.data_ptr())
        assert np.array_equal(bits(got), bits(want)), (heads, d)


def test_every_isa_setting_gives_the_same_bits(kernel: NativeKernel) -> None:
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(1, 2880, generator=gen).to(torch.bfloat16)
    g = torch.rand(2880, generator=gen).to(torch.bfloat16)
    q = torch.randn(1, 64, 64, generator=gen).to(torch.bfloat16)
    c, s = torch.rand(1, 32, generator=gen).to(torch.bfloat16), torch.rand(1, 32, generator=gen).to(torch.bfloat16)
    outs = []
    for isa in kernel.available_isas():
        kernel.set_isa(isa)
        r = q.clone()
        kernel.rope_bf16(r.data_ptr(), 64, 64, c.data_ptr(), s.data_ptr())
        outs.append((bits(native_norm(kernel, x, g, 1e-5)), bits(r)))
    for a, b in outs[1:]:
        assert np.array_equal(a, outs[0][0]) and np.array_equal(b, outs[0][1])


def test_bad_arguments_are_refused(kernel: NativeKernel) -> None:
    x = torch.zeros(1, 20, dtype=torch.bfloat16)
    with pytest.raises(KernelError, match="rms_norm_bf16"):
        kernel.rms_norm_bf16(x.data_ptr(), x.data_ptr(), 20, 1e-5, x.data_ptr())  # not a multiple of 16
    with pytest.raises(KernelError, match="rope_bf16"):
        kernel.rope_bf16(x.data_ptr(), 1, 15, x.data_ptr(), x.data_ptr())  # odd width
    with pytest.raises(KernelError, match="rope_bf16"):
        kernel.rope_bf16(0, 1, 16, x.data_ptr(), x.data_ptr())  # no row
