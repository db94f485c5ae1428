"""Every decode kernel under TRITON_INTERPRET=1 against the reference math, at tiny shapes."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")

from engine.config import ModelConfig
from engine.gpu.launch import Kernels, Tiles
from engine.gpu.layout import ExpertLayout
from engine.mxfp4 import dequantize
from engine.reference import apply_rope, expert_forward, rms_norm, rope_cos_sin, yarn_inv_freq
from engine.synth import PRESETS

CFG = ModelConfig.from_dict(PRESETS["tiny"].config_dict())
BF = torch.bfloat16


def make_kernels(cfg: ModelConfig = CFG) -> Kernels:
    tiles = replace(Tiles.for_config(cfg, interpret=True), attn_split_full=4, attn_split_sliding=2)
    return Kernels(cfg, tiles, ExpertLayout.for_config(cfg))


def bf(*shape: int, scale: float = 1.0, gen: torch.Generator) -> torch.Tensor:
    return (torch.randn(*shape, generator=gen) * scale).to(BF)


def ctrl_block(pos: int, step: int = 1, token: int = 0, seed: int = 0, temp: float = 0.0) -> torch.Tensor:
    c = torch.zeros(8, dtype=torch.int32)
    c[0], c[1], c[2], c[3] = pos, step, token, seed
    c[4] = int(np.array([temp], dtype=np.float32).view(np.int32)[0])
    return c


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


@pytest.mark.parametrize("pos,ring", [(5, 32), (37, 16)])
def test_qkv_rope_matches_reference(pos: int, ring: int) -> None:
    g = torch.Generator().manual_seed(pos)
    c = CFG
    k = make_kernels()
    rows = c.q_width + 2 * c.kv_width
    x, gain = bf(c.hidden_size, gen=g), bf(c.hidden_size, scale=0.1, gen=g) + 1
    w, b = bf(rows, c.hidden_size, scale=c.hidden_size ** -0.5, gen=g), bf(rows, scale=0.1, gen=g)
    cos, sin = rope_cos_sin(c, torch.arange(64), BF)
    q = torch.full((c.q_width,), float("nan"), dtype=BF)
    kc = torch.full((ring, c.num_key_value_heads, c.head_dim), float("nan"), dtype=BF)
    vc = kc.clone()
    k.qkv_rope(x, gain, w, b, cos.float().contiguous(), sin.float().contiguous(), ctrl_block(pos), q, kc, vc)

    t = rms_norm(x[None], gain, c.rms_norm_eps)
    h = F.linear(t, w, b)[0]
    qe, ke, ve = h.split([c.q_width, c.kv_width, c.kv_width])
    cs, sn = cos[pos : pos + 1], sin[pos : pos + 1]
    qe = apply_rope(qe.view(1, -1, c.head_dim), cs, sn).reshape(-1)
    ke = apply_rope(ke.view(1, -1, c.head_dim), cs, sn).reshape(-1)
    slot = pos % ring
    assert rel_err(q.float(), qe.float()) < 1e-2
    assert rel_err(kc[slot].reshape(-1).float(), ke.float()) < 1e-2
    assert rel_err(vc[slot].reshape(-1).float(), ve.float()) < 1e-2
    others = [r for r in range(ring) if r != slot]
    assert torch.isnan(kc[others].float()).all() and torch.isnan(vc[others].float()).all()


def attention_expected(q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, sinks: torch.Tensor, pos: int,
                       window: int, group: int) -> torch.Tensor:
    ring = kc.shape[0]
    lo = max(0, pos - window + 1) if window else 0
    ps = torch.arange(lo, pos + 1)
    keys = kc[ps % ring].double()  # [S, NKV, D]
    vals = vc[ps % ring].double()
    nh, d = sinks.shape[0], q.shape[0] // sinks.shape[0]
    out = torch.empty(nh, d, dtype=torch.float64)
    for h in range(nh):
        s = keys[:, h // group] @ q.view(nh, d)[h].double() * d ** -0.5
        z = torch.cat([s, sinks[h : h + 1].double()])
        p = torch.softmax(z, 0)[:-1]
        out[h] = p @ vals[:, h // group]
    return out.reshape(-1)


@pytest.mark.parametrize("pos,window,ring", [(0, 0, 64), (45, 0, 64), (50, 8, 16), (9, 8, 8), (3, 8, 8)])
def test_attention_split_matches_reference(pos: int, window: int, ring: int) -> None:
    g = torch.Generator().manual_seed(1000 + pos)
    c = CFG
    k = make_kernels()
    q = bf(c.q_width, gen=g)
    kc, vc = bf(ring, c.num_key_value_heads, c.head_dim, gen=g), bf(ring, c.num_key_value_heads, c.head_dim, gen=g)
    sinks = bf(c.num_attention_heads, gen=g)
    out = torch.full((c.q_width,), float("nan"), dtype=BF)
    k.attention(q, kc, vc, ctrl_block(pos), sinks, window, k.attn_scratch(torch.device("cpu")), out)
    exp = attention_expected(q, kc, vc, sinks.float(), pos, window, c.gqa_group)
    assert rel_err(out.float(), exp) < 1e-2


def test_oproj_adds_residual() -> None:
    g = torch.Generator().manual_seed(3)
    c = CFG
    k = make_kernels()
    o = bf(c.q_width, gen=g)
    w, b = bf(c.hidden_size, c.q_width, scale=c.q_width ** -0.5, gen=g), bf(c.hidden_size, scale=0.1, gen=g)
    x = bf(c.hidden_size, gen=g)
    exp = x + F.linear(o[None], w, b)[0]
    k.oproj(o, w, b, x)
    assert rel_err(x.float(), exp.float()) < 1e-2


def test_router_topk_publishes_routing() -> None:
    g = torch.Generator().manual_seed(4)
    c = CFG
    kn = make_kernels()
    e, topk, h = c.num_local_experts, c.num_experts_per_tok, c.hidden_size
    x, gain = bf(h, gen=g), bf(h, scale=0.1, gen=g) + 1
    w, b = bf(e, h, scale=2 * h ** -0.5, gen=g), bf(e, scale=0.5, gen=g)
    logits = torch.zeros(e)
    te, to = torch.zeros(h // 2), torch.zeros(h // 2)
    t_host = torch.zeros(h)
    table = torch.full((3, e), -1, dtype=torch.int32)
    table[1, ::2] = torch.arange(0, e, 2, dtype=torch.int32) + 100  # even experts resident in layer 1
    bt = kn.block_t
    route_dev = torch.zeros(3 * bt, dtype=torch.int32)
    route_host = torch.zeros(4 * bt, dtype=torch.int32)
    flags = torch.zeros(3, dtype=torch.int32)
    kn.router(x, gain, w, b, logits, te, to, t_host, table[1], ctrl_block(0, step=77), route_dev, route_host,
              flags, 1)

    t = rms_norm(x[None], gain, c.rms_norm_eps)[0]
    assert torch.equal(t_host, t.float())
    assert torch.equal(te, t.float()[0::2]) and torch.equal(to, t.float()[1::2])
    ref = F.linear(t[None], w, b)[0]
    assert rel_err(logits, ref.float()) < 1e-2
    _, idx = torch.topk(logits, topk)
    ids = route_host[:topk]
    assert sorted(ids.tolist()) == sorted(idx.tolist())
    wts = route_host[bt : bt + topk].view(torch.float32)
    exp_w = torch.softmax(logits[ids.long()], 0)
    assert torch.allclose(wts, exp_w, rtol=1e-2, atol=1e-3)
    exp_slot = torch.where(ids % 2 == 0, ids + 100, -1)
    assert torch.equal(route_host[2 * bt : 2 * bt + topk], exp_slot.int())
    assert torch.equal(route_host[3 * bt : 3 * bt + topk], (exp_slot >= 0).int())
    assert torch.equal(route_dev[: 3 * bt], route_host[: 3 * bt])
    assert flags.tolist() == [0, 77, 0]


def random_expert(cfg: ModelConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
    h, i = cfg.hidden_size, cfg.intermediate_size

    def scales(rows: int, groups: int, fan_in: int) -> np.ndarray:
        s0 = 127 + round(math.log2(1.0 / (2.93 * math.sqrt(fan_in))))
        return (s0 + rng.integers(-1, 2, (rows, groups))).astype(np.uint8)

    bias = lambda n: (torch.randn(n, generator=torch.Generator().manual_seed(int(rng.integers(1 << 30)))) * 0.1
                      ).to(BF).view(torch.uint16).numpy()
    return {
        "gate_up_proj_blocks": rng.integers(0, 256, (2 * i, h // 32, 16), dtype=np.uint8),
        "gate_up_proj_scales": scales(2 * i, h // 32, h),
        "gate_up_proj_bias": bias(2 * i),
        "down_proj_blocks": rng.integers(0, 256, (h, i // 32, 16), dtype=np.uint8),
        "down_proj_scales": scales(h, i // 32, i),
        "down_proj_bias": bias(h),
    }


def expert_ref(parts: dict[str, np.ndarray], t: torch.Tensor, cfg: ModelConfig) -> torch.Tensor:
    w1 = dequantize(parts["gate_up_proj_blocks"], parts["gate_up_proj_scales"])
    w2 = dequantize(parts["down_proj_blocks"], parts["down_proj_scales"])
    b1 = torch.from_numpy(parts["gate_up_proj_bias"].copy()).view(BF).float()
    b2 = torch.from_numpy(parts["down_proj_bias"].copy()).view(BF).float()
    return expert_forward(t[None].float(), w1, b1, w2, b2, cfg.swiglu_limit, cfg.swiglu_alpha)[0]


@pytest.mark.parametrize("slots", [[2, -1, 0, 1], [-1, -1, -1, -1], [3, 2, 1, 0]])
def test_resident_experts_from_slots(slots: list[int]) -> None:
    c = CFG
    kn = make_kernels()
    lay = kn.layout
    rng = np.random.default_rng(sum(s + 2 for s in slots))
    n_slots = 4
    pool = np.zeros(n_slots * lay.slot_bytes, dtype=np.uint8)
    experts = [random_expert(c, rng) for _ in range(n_slots)]
    for s, parts in enumerate(experts):
        lay.pack_into(pool[s * lay.slot_bytes : (s + 1) * lay.slot_bytes], parts)
    g = torch.Generator().manual_seed(7)
    t = bf(c.hidden_size, gen=g).float()
    weights = torch.softmax(torch.randn(4, generator=g), 0).to(BF).float()
    bt = kn.block_t
    route = torch.zeros(3 * bt, dtype=torch.int32)
    route[:4] = torch.arange(4)
    route[bt : bt + 4] = weights.view(torch.int32)
    route[2 * bt : 2 * bt + 4] = torch.tensor(slots, dtype=torch.int32)
    act_e = torch.zeros(4, c.intermediate_size // 2)
    act_o = torch.zeros_like(act_e)
    out = torch.full((c.hidden_size,), float("nan"))
    kn.experts(torch.from_numpy(pool), route, t[0::2].contiguous(), t[1::2].contiguous(), act_e, act_o, out)
    exp = torch.zeros(c.hidden_size, dtype=torch.float64)
    for k, s in enumerate(slots):
        if s >= 0:
            exp += weights[k].double() * expert_ref(experts[s], t, c).double()
    if all(s < 0 for s in slots):
        assert torch.equal(out, torch.zeros_like(out))
    else:
        assert rel_err(out, exp) < 2e-2


def test_mxfp4_decode_is_exact() -> None:
    """One resident expert, identity-like input: the GEMV must reproduce dequantized rows exactly."""
    c = CFG
    kn = make_kernels()
    lay = kn.layout
    rng = np.random.default_rng(11)
    parts = random_expert(c, rng)
    parts["gate_up_proj_scales"][:] = rng.integers(100, 150, parts["gate_up_proj_scales"].shape)
    pool = np.zeros(lay.slot_bytes, dtype=np.uint8)
    lay.pack_into(pool, parts)
    w1 = dequantize(parts["gate_up_proj_blocks"], parts["gate_up_proj_scales"])  # [2I, H]
    # With a one-hot input the gate_up GEMV returns one weight column (then bias + swiglu).
    col = 5
    t = torch.zeros(c.hidden_size)
    t[col] = 1.0
    bt = kn.block_t
    route = torch.zeros(3 * bt, dtype=torch.int32)
    route[2 * bt : 2 * bt + 4] = torch.tensor([0, -1, -1, -1], dtype=torch.int32)
    act_e = torch.zeros(4, c.intermediate_size // 2)
    act_o = torch.zeros_like(act_e)
    out = torch.zeros(c.hidden_size)
    kn.experts(torch.from_numpy(pool), route, t[0::2].contiguous(), t[1::2].contiguous(), act_e, act_o, out)
    b1 = torch.from_numpy(parts["gate_up_proj_bias"].copy()).view(BF).float()
    h = (w1[:, col] + b1).to(BF).float()
    from engine.reference import swiglu

    exp = swiglu(h, c.swiglu_limit, c.swiglu_alpha).to(BF).float()
    got = torch.stack([act_e[0], act_o[0]], 1).reshape(-1)
    assert torch.allclose(got, exp, rtol=1e-2, atol=1e-6)


def test_start_and_combine() -> None:
    g = torch.Generator().manual_seed(5)
    c = CFG
    kn = make_kernels()
    h = c.hidden_size
    ctrl_h = ctrl_block(9, step=3)
    ctrl_d = torch.zeros(8, dtype=torch.int32)
    emb = bf(h, gen=g)
    x = torch.zeros(h, dtype=BF)
    kn.start(ctrl_h, ctrl_d, emb, x)
    assert torch.equal(ctrl_d, ctrl_h) and torch.equal(x, emb)
    gm, cm = torch.randn(h, generator=g), torch.randn(h, generator=g)
    exp = (emb.float() + (gm + cm).to(BF).float()).to(BF)
    kn.combine(x, gm, cm)
    assert torch.equal(x, exp)


def test_the_waiting_combine_waits_for_the_hosts_flag_then_gives_the_same_bits() -> None:
    """combine_wait_kernel (early launch): spins until the host's flag holds the step, here raised
    by another thread while the interpreter polls; then the same bits as combine_kernel."""
    import threading
    import time

    g = torch.Generator().manual_seed(7)
    kn = make_kernels()
    h = CFG.hidden_size
    ctrl_d = ctrl_block(0, step=41)
    x0 = bf(h, gen=g)
    gm, cm = torch.randn(h, generator=g), torch.randn(h, generator=g)
    want = x0.clone()
    kn.combine(want, gm, cm)
    done = torch.full((1,), 40, dtype=torch.int32)  # the previous step's flag
    raised: list[float] = []

    def host() -> None:
        time.sleep(0.3)
        raised.append(time.monotonic())
        done[0] = 41

    late = torch.zeros(1, dtype=torch.int32)
    t = threading.Thread(target=host)
    x = x0.clone()
    t.start()
    kn.combine(x, gm, cm, done, ctrl_d, late)
    finished = time.monotonic()
    t.join()
    assert raised and finished >= raised[0]  # it did not go on before the flag
    assert torch.equal(x, want) and late[0] == 0
    # a flag that never comes: the wait gives up after its polls and says so
    kn.wait_polls = 16
    done[0] = 40
    kn.combine(x0.clone(), gm, cm, done, ctrl_d, late)
    assert late[0] == 41


def test_the_gentle_wait_is_one_program_over_every_block_with_the_same_bits() -> None:
    """early_poll_ns > 0: one program polls (sleeping between polls on a GPU; the interpreter runs no PTX, so
    no nap here) and combines all of H block by block: the same bits as combine_kernel over several programs."""
    g = torch.Generator().manual_seed(8)
    h = CFG.hidden_size
    kn = Kernels(CFG, replace(make_kernels().t, combine_block=h // 4), ExpertLayout.for_config(CFG))
    kn.set_poll(500, cuda=False)
    assert kn.poll_one and kn.poll_nap_ns == 0 and kn.wait_polls == 1 << 19
    x0 = bf(h, gen=g)
    gm, cm = torch.randn(h, generator=g), torch.randn(h, generator=g)
    want = x0.clone()
    kn.combine(want, gm, cm)  # 4 programs of h / 4
    x = x0.clone()
    late = torch.zeros(1, dtype=torch.int32)
    kn.combine(x, gm, cm, torch.full((1,), 5, dtype=torch.int32), ctrl_block(0, step=5), late)
    assert torch.equal(x, want) and late[0] == 0 and not torch.equal(x, x0)
    # on a GPU the nap lengthens each poll: the bound shrinks so a wait still gives up in about the same time
    kn.set_poll(1000, cuda=True)
    assert (kn.poll_one, kn.poll_nap_ns, kn.wait_polls) == (True, 1000, 1 << 18)
    kn.set_poll(0, cuda=True)
    assert (kn.poll_one, kn.poll_nap_ns, kn.wait_polls) == (False, 0, 1 << 19)


def test_lm_head_greedy_and_gumbel() -> None:
    g = torch.Generator().manual_seed(6)
    c = CFG
    kn = make_kernels()
    h, v = c.hidden_size, c.vocab_size
    x, gain = bf(h, gen=g), bf(h, scale=0.1, gen=g) + 1
    w = bf(v, h, scale=h ** -0.5, gen=g)
    logits = torch.zeros(v)
    pv, pi = torch.zeros(kn.lm_parts), torch.zeros(kn.lm_parts, dtype=torch.int32)
    tok_d, tok_h = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    flag = torch.zeros(1, dtype=torch.int32)
    kn.lm_head(x, gain, w, ctrl_block(0, step=12), logits, pv, pi, tok_d, tok_h, flag)
    ref = F.linear(rms_norm(x[None], gain, c.rms_norm_eps), w)[0].float()
    assert rel_err(logits, ref) < 1e-2
    assert int(tok_h[0]) == int(torch.argmax(logits)) == int(tok_d[0])
    assert int(flag[0]) == 12
    # Gumbel-max: reproducible per (seed, position); varies with the position; follows the logits
    picks = []
    for pos in range(40):
        kn.lm_head(x, gain, w, ctrl_block(pos, step=pos + 1, seed=1, temp=1.0), logits, pv, pi, tok_d, tok_h, flag)
        picks.append(int(tok_h[0]))
    kn.lm_head(x, gain, w, ctrl_block(3, step=99, seed=1, temp=1.0), logits, pv, pi, tok_d, tok_h, flag)
    assert int(tok_h[0]) == picks[3]
    assert len(set(picks)) > 5
    p = torch.softmax(logits.double(), 0)
    assert float(p[picks].mean()) > float(p.mean())  # sampled tokens are likelier than average


def test_greedy_ties_pick_lowest_index() -> None:
    c = CFG
    kn = make_kernels()
    h, v = c.hidden_size, c.vocab_size
    x = torch.ones(h, dtype=BF)
    gain = torch.ones(h, dtype=BF)
    w = torch.zeros(v, h, dtype=BF)
    w[[300, 17, 450]] = 1.0  # three equal maxima in different programs/positions
    logits = torch.zeros(v)
    pv, pi = torch.zeros(kn.lm_parts), torch.zeros(kn.lm_parts, dtype=torch.int32)
    tok_d, tok_h = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    kn.lm_head(x, gain, w, ctrl_block(0), logits, pv, pi, tok_d, tok_h, torch.zeros(1, dtype=torch.int32))
    assert int(tok_h[0]) == 17


@pytest.mark.parametrize("preset", ["tiny", "120b-shape"])
def test_rope_table_matches_transformers(preset: str) -> None:
    """The cos/sin table the decode kernels read (GpuCore: rope_cos_sin in bf16, widened to fp32)
    against transformers' GptOssRotaryEmbedding rounded to bf16, out to the full context."""
    pytest.importorskip("transformers")
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssRotaryEmbedding

    d = PRESETS[preset].config_dict()
    cfg = ModelConfig.from_dict(d)
    pos = torch.tensor([0, 1, 2, 3, 127, 128, 4095, 4096, 4097, 65_536, 131_071])
    cos, sin = rope_cos_sin(cfg, pos, BF)
    hc = GptOssConfig(**{k: v for k, v in d.items() if k != "quantization_config"})
    hcos, hsin = GptOssRotaryEmbedding(hc)(torch.zeros(1, len(pos), 8, dtype=BF), pos[None])
    half = cfg.head_dim // 2
    assert torch.equal(cos.float(), hcos[0, :, :half].float()) and torch.equal(sin.float(), hsin[0, :, :half].float())
    inv, _ = yarn_inv_freq(cfg)
    assert len(inv) == half and hcos.shape[-1] >= half
