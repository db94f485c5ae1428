"""RoPE's cos/sin follow the positions' device (the cached inverse frequencies live on the CPU)."""

import torch

from engine.config import ModelConfig
from engine.reference import rope_cos_sin
from engine.synth import PRESETS

CFG = ModelConfig.from_dict(PRESETS["120b-shape"].config_dict())


def test_cos_sin_on_the_positions_device_after_the_cache_is_filled_on_the_cpu():
    # bench/gpu/device_reference.py runs the reference under torch.device("cuda") with the cache filled on the
    # CPU: the device check failed with "found at least two devices" from 1ca1f80 to session 32;
    # meta stands in for cuda.
    cpu_cos, _ = rope_cos_sin(CFG, torch.arange(4), torch.float32)
    cos, sin = rope_cos_sin(CFG, torch.arange(4, device="meta"), torch.float32)
    assert cpu_cos.device.type == "cpu"
    assert cos.device.type == sin.device.type == "meta"
    assert cos.shape == sin.shape == (4, CFG.head_dim // 2)


def test_cos_sin_values_unchanged_on_the_cpu():
    pos = torch.tensor([0, 1, 4095])
    cos, sin = rope_cos_sin(CFG, pos, torch.float32)
    assert torch.equal(cos[0], cos[0].new_full(cos[0].shape, cos[0, 0].item()))  # angle 0: every pair the same
    assert torch.allclose(cos.square() + sin.square(), torch.full_like(cos, cos[0, 0].item() ** 2), rtol=1e-5)
