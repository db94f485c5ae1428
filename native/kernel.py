"""Python face of the native CPU expert kernel (``native._neural_native``, built by cffi).

:func:`load_kernel` raises :class:`NativeUnavailable` (never crashes) when the extension is
missing or cannot load, so callers can fall back to the PyTorch reference with a message.
Buffers handed to the kernel are pinned by the :class:`ExpertRef` that points at them.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

ISAS = {"auto": 0, "scalar": 1, "avx2": 2, "avx512": 3, "avx512bf16": 4}
ISA_NAMES = {v: k for k, v in ISAS.items()}
FORMATS = {"raw": 0, "packed": 1}
ADVICE = {"huge": 1, "populate": 2, "willneed": 3}
PART_NAMES = ("gu_codes", "gu_scales", "dn_codes", "dn_scales", "gu_bias", "dn_bias")
MAX_TOKENS = 256  # NEURAL_MAX_TOKENS in neural_experts.h (tests/native/test_kernel_groups.py checks)
MAX_K = 32
_ERRORS = {-1: "invalid arguments", -2: "corrupt packed scale row (exception missing)", -3: "ISA not available",
           -4: "out of memory",
           -5: "not supported here", -6: "timed out waiting for the GPU's flag"}


class NativeUnavailable(RuntimeError):
    """The compiled kernel cannot be imported on this machine."""


class KernelError(RuntimeError):
    """The kernel rejected a call (bad shapes, corrupt data)."""


class KernelTimeout(KernelError):
    """A native wait gave up (neural_lane_layer: the GPU did not raise the routing flag in time)."""


class ExpertRef:
    """A ``neural_expert`` descriptor plus the Python objects that own its memory."""

    __slots__ = ("cdata", "keep")

    def __init__(self, cdata: Any, keep: list[Any]) -> None:
        self.cdata = cdata
        self.keep = keep


Pointerish = Any  # numpy array, bytes-like, or a cffi pointer


class Span:
    """How long a token's expert work took on the thread team (:meth:`NativeKernel.moe_token_beside`), in seconds:
    set when its with-block ends."""

    seconds: float = 0.0


class LinearPlan:
    """:meth:`NativeKernel.linear_bf16_nb_plan`: the pointer arrays of up to 8 bf16 matrices over one row width, and
    the Python objects behind them."""

    __slots__ = ("bps", "cols", "keep", "n", "rows", "wps")

    def __init__(self, n: int, cols: int, wps: Any, bps: Any, rows: Any, keep: Any) -> None:
        self.n, self.cols, self.wps, self.bps, self.rows, self.keep = n, cols, wps, bps, rows, keep


class NativeKernel:
    def __init__(self, ffi: Any, lib: Any) -> None:
        self.ffi = ffi
        self.lib = lib

    # ---- configuration ----------------------------------------------------------------------
    def features(self) -> set[str]:
        f = int(self.lib.neural_cpu_features())
        bits = ((1, "avx2"), (2, "avx512"), (4, "avx512vbmi"), (8, "avx512bf16"), (16, "amd"))
        return {name for bit, name in bits if f & bit}

    def available_isas(self) -> list[str]:
        f = self.features()
        isas = ["scalar"] + [isa for isa in ("avx2", "avx512") if isa in f]
        return isas + (["avx512bf16"] if {"avx512", "avx512bf16"} <= f else [])

    def best_isa(self) -> str:
        return ISA_NAMES[int(self.lib.neural_best_isa())]

    def set_isa(self, name: str) -> None:
        if name not in ISAS:
            raise ValueError(f"unknown ISA {name!r} (choose from {', '.join(ISAS)})")
        if self.lib.neural_set_isa(ISAS[name]) != 0:
            raise KernelError(f"this CPU cannot run the {name} path (has: {', '.join(self.available_isas())})")

    @property
    def isa(self) -> str:
        return ISA_NAMES[int(self.lib.neural_get_isa())]

    def set_threads(self, n: int) -> int:
        return int(self.lib.neural_set_threads(int(n)))

    @property
    def threads(self) -> int:
        return int(self.lib.neural_get_threads())

    def set_spin_us(self, us: int) -> None:
        self.lib.neural_set_spin_us(int(us))

    def set_prefetch(self, nbytes: int) -> None:
        self.lib.neural_set_prefetch(int(nbytes))

    @property
    def prefetch(self) -> int:
        return int(self.lib.neural_get_prefetch())

    # ---- descriptors ------------------------------------------------------------------------
    def shape(self, hidden: int, intermediate: int, fmt: str, limit: float, alpha: float,
              offsets: Sequence[int], bf16_inputs: bool = False) -> Any:
        """A shape descriptor. ``bf16_inputs``: round x and the SwiGLU activation to bf16 (the
        model's activation precision, and the fast vdpbf16ps loop); False keeps fp32 inputs."""
        if len(offsets) != 7:
            raise ValueError("record layout needs 7 offsets (six parts + exception area)")
        s = self.ffi.new("neural_shape *")
        s.hidden, s.intermediate, s.format = hidden, intermediate, FORMATS[fmt]
        s.swiglu_limit, s.swiglu_alpha = limit, alpha
        s.bf16_inputs = 1 if bf16_inputs else 0
        for i, off in enumerate(offsets):
            s.record_offset[i] = int(off)
        return s

    def record_bytes(self, shape: Any) -> int:
        return int(self.lib.neural_record_bytes(shape))

    def pointer(self, buf: Pointerish, ctype: str = "uint8_t *") -> tuple[Any, Any]:
        """(cffi pointer, owner to keep alive) for a contiguous buffer or an existing pointer."""
        if isinstance(buf, self.ffi.CData):
            return self.ffi.cast(ctype, buf), buf
        if isinstance(buf, np.ndarray) and not buf.flags.c_contiguous:
            raise ValueError("kernel buffers must be C-contiguous")
        owner = self.ffi.from_buffer(buf)
        return self.ffi.cast(ctype, owner), owner

    def expert(self, parts: Sequence[Pointerish], exc: Pointerish | None = None, n_exc: int = 0,
               capture: Pointerish | None = None) -> ExpertRef:
        if len(parts) != 6:
            raise ValueError(f"an expert has 6 parts ({', '.join(PART_NAMES)})")
        d = self.ffi.new("neural_expert *")
        keep: list[Any] = [d]
        for i, p in enumerate(parts):
            ptr, owner = self.pointer(p)
            d.part[i] = ptr
            keep.append(owner)
        if exc is not None and n_exc:
            ptr, owner = self.pointer(exc)
            d.exc, d.n_exc = ptr, n_exc
            keep.append(owner)
        if capture is not None:
            if isinstance(capture, np.ndarray) and not capture.flags.writeable:
                raise ValueError("capture buffer must be writable")
            ptr, owner = self.pointer(capture)
            d.capture = ptr
            keep.append(owner)
        return ExpertRef(d, keep)

    def head(self, ref: ExpertRef, units: int) -> ExpertRef:
        """A descriptor of ``ref``'s expert limited to gate_up units [0, units) (a multiple of 32; the down bias in
        full), for the one-token call: the copy lane computes the other units on the GPU. Copies the descriptor."""
        if units <= 0 or units % 32:
            raise ValueError(f"units must be a positive multiple of 32, got {units}")
        if ref.cdata.capture != self.ffi.NULL:
            raise ValueError("a descriptor with a capture buffer cannot be limited to some units")
        d = self.ffi.new("neural_expert *")
        d[0] = ref.cdata[0]
        d.units = units
        return ExpertRef(d, [d, ref])

    # ---- calls ------------------------------------------------------------------------------
    def _f32(self, a: np.ndarray, shape: tuple[int, ...], what: str, writable: bool = False) -> Any:
        if a.dtype != np.float32 or a.shape != shape or not a.flags.c_contiguous:
            raise ValueError(f"{what} must be a C-contiguous float32 array of shape {shape}, got {a.dtype}{a.shape}")
        if writable and not a.flags.writeable:
            raise ValueError(f"{what} must be writable")
        return self.ffi.cast("float *", self.ffi.from_buffer(a))

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise KernelError(f"{what}: {_ERRORS.get(rc, f'error {rc}')}")

    def moe_token(self, shape: Any, experts: Sequence[ExpertRef], weights: np.ndarray, x: np.ndarray,
                  out: np.ndarray) -> None:
        """out[H] = sum_e weights[e] * expert_e(x), experts accumulated in the given order."""
        rc = self.lib.neural_moe_token(*self._moe_args(shape, experts, weights, x, out))
        self._check(int(rc), "moe_token")

    def _moe_args(self, shape: Any, experts: Sequence[ExpertRef], weights: np.ndarray, x: np.ndarray,
                  out: np.ndarray) -> tuple[Any, ...]:
        k = len(experts)
        if not 1 <= k <= MAX_K:
            raise ValueError(f"1..{MAX_K} experts per call, got {k}")
        h = int(shape.hidden)
        arr = self.ffi.new("neural_expert *[]", [e.cdata for e in experts])
        return (shape, arr, self._f32(weights, (k,), "weights"), k, self._f32(x, (h,), "x"),
                self._f32(out, (h,), "out", True))

    @contextlib.contextmanager
    def moe_token_beside(self, shape: Any, experts: Sequence[ExpertRef], weights: np.ndarray, x: np.ndarray,
                         out: np.ndarray) -> Iterator[Span]:
        """:meth:`moe_token` with the caller's own work beside it: the worker threads start on the token, the
        with-block runs, and leaving it joins the caller to them, so ``out`` then holds moe_token's bits. The block
        must not call this kernel (its lock is held until the block ends, an exception included) and must leave
        ``weights`` and ``out`` alone. The :class:`Span` it gives holds, once the block is over, the seconds from the
        start of the work to its end, however long the block ran."""
        args = self._moe_args(shape, experts, weights, x, out)  # the cdata in args live until the join
        span = Span()
        self._check(int(self.lib.neural_moe_token_begin(*args)), "moe_token")
        us = self.ffi.new("double *")
        try:
            yield span
        finally:
            rc = int(self.lib.neural_moe_token_end(us))
        self._check(rc, "moe_token")
        span.seconds = float(us[0]) * 1e-6

    def expert_tokens(self, shape: Any, expert: ExpertRef, x: np.ndarray, weights: np.ndarray,
                      out: np.ndarray) -> None:
        """out[t] = weights[t] * expert(x[t]) for up to MAX_TOKENS tokens (one pass over the expert)."""
        t = int(x.shape[0]) if x.ndim == 2 else -1
        if not 1 <= t <= MAX_TOKENS:
            raise ValueError(f"x must be [tokens<= {MAX_TOKENS}, hidden], got {x.shape}")
        h = int(shape.hidden)
        rc = self.lib.neural_expert_tokens(shape, expert.cdata, t, self._f32(x, (t, h), "x"),
                                           self._f32(weights, (t,), "weights"), self._f32(out, (t, h), "out", True))
        self._check(int(rc), "expert_tokens")

    def expert_groups(self, shape: Any, experts: Sequence[ExpertRef], counts: np.ndarray, x: np.ndarray,
                      weights: np.ndarray, out: np.ndarray) -> None:
        """Several experts' token groups in one call (no Python round trip per expert): group g is
        the next counts[g] rows of x / weights / out, computed with the bits of expert_tokens calls
        of up to MAX_TOKENS rows each. Releases the GIL for the whole call."""
        g = len(experts)
        if not isinstance(counts, np.ndarray) or counts.dtype != np.int32 or counts.ndim != 1:
            raise ValueError(f"counts must be a 1-D int32 array, got {getattr(counts, 'dtype', type(counts))}"
                             f"{getattr(counts, 'shape', '')}")
        if counts.shape[0] != g:
            raise ValueError(f"{g} experts but {counts.shape[0]} counts")
        if g and int(counts.min()) < 0:
            raise ValueError(f"counts must be >= 0, got {int(counts.min())}")
        n = int(counts.sum(dtype=np.int64))
        h = int(shape.hidden)
        if x.ndim != 2 or x.shape[0] != n:
            raise ValueError(f"x must be [{n} (sum of counts), {h}], got {x.shape}")
        xp = self._f32(x, (n, h), "x")
        wp = self._f32(weights, (n,), "weights")
        op = self._f32(out, (n, h), "out", True)
        if n == 0:
            return
        cnt = np.ascontiguousarray(counts)
        arr = self.ffi.new("neural_expert *[]", [e.cdata for e in experts])
        rc = self.lib.neural_expert_groups(shape, arr, self.ffi.cast("int32_t *", self.ffi.from_buffer(cnt)), g,
                                           xp, wp, op)
        self._check(int(rc), "expert_groups")

    def probe_read(self, buf: Pointerish, nbytes: int | None = None) -> int:
        ptr, _owner = self.pointer(buf, "void *")
        n = nbytes if nbytes is not None else memoryview(buf).nbytes
        return int(self.lib.neural_probe_read(ptr, n))

    def copy_stream(self, dst: np.ndarray, src: np.ndarray) -> None:
        """dst[:] = src (same byte size, C-contiguous) with non-temporal stores; releases the GIL."""
        if dst.nbytes != src.nbytes:
            raise ValueError(f"copy of {src.nbytes} bytes into {dst.nbytes}")
        if not dst.flags.writeable:
            raise ValueError("destination is read-only")
        d, _do = self.pointer(dst, "void *")
        s, _so = self.pointer(src, "void *")
        self.lib.neural_copy_stream(d, s, dst.nbytes)

    def advise(self, buf: Pointerish, nbytes: int, advice: str) -> bool:
        """Page hint for a memory range: "huge" (Linux transparent huge pages), "populate" (fill the
        page tables now: Linux MADV_POPULATE_READ, Windows PrefetchVirtualMemory) or "willneed".
        True if applied, False where this OS or kernel has no such hint (carry on without it)."""
        if advice not in ADVICE:
            raise ValueError(f"unknown advice {advice!r} (choose from {', '.join(ADVICE)})")
        ptr, _owner = self.pointer(buf, "void *")
        rc = int(self.lib.neural_advise(ptr, int(nbytes), ADVICE[advice]))
        if rc == -5:
            return False
        self._check(rc, f"advise {advice}")
        return True

    def expf(self, x: float) -> float:
        return float(self.lib.neural_expf(x))

    def swiglu(self, h: np.ndarray, limit: float, alpha: float) -> np.ndarray:
        """SwiGLU of interleaved gate/up pairs on the current ISA path (the kernel's own code)."""
        hh = np.ascontiguousarray(h, dtype=np.float32)
        if hh.ndim != 1 or hh.size % 2:
            raise ValueError("h must be a flat array of gate/up pairs")
        out = np.empty(hh.size // 2, np.float32)
        self._check(self.lib.neural_swiglu(self.ffi.cast("const float *", self.ffi.from_buffer(hh)), out.size,
                                           limit, alpha, self.ffi.cast("float *", self.ffi.from_buffer(out))), "swiglu")
        return out

    def linear_bf16(self, w: Pointerish, rows: int, cols: int, x: np.ndarray, bias: Pointerish | None = None,
                    out: np.ndarray | None = None) -> np.ndarray:
        """``w @ x + bias`` for a bf16 matrix ``w`` [rows, cols] (bits: a uint16/int16 array or a
        pointer kept alive by the caller), ``bias`` bf16 [rows] or None, ``x`` fp32 [cols]; fp32
        [rows] in the order of neural_experts.h, on the thread team. ``cols`` a multiple of 16."""
        xp = self._x_f32(x, cols)
        wp, bp = self._bf16_matrix(w, bias, rows, cols)
        if out is None:
            out = np.empty(rows, np.float32)
        rc = self.lib.neural_linear_bf16(wp, bp, rows, cols, xp, self._f32(out, (rows,), "out", writable=True))
        self._check(rc, "linear_bf16")
        return out

    def _x_f32(self, x: np.ndarray, cols: int) -> Any:
        """``x`` as a contiguous fp32 [cols] cdata array, which keeps a converted copy alive while it lives."""
        xx = np.ascontiguousarray(x, dtype=np.float32)
        if xx.shape != (cols,):
            raise ValueError(f"x has shape {xx.shape}, expected ({cols},)")
        return self.ffi.from_buffer("float[]", xx)

    def _bf16_matrix(self, w: Pointerish, bias: Pointerish | None, rows: int, cols: int,
                     tag: str = "") -> tuple[Any, Any]:
        """Pointers to a bf16 matrix [rows, cols] and its bias [rows] (or NULL), the sizes of arrays checked."""
        for a, n, what in ((w, rows * cols, "w"), (bias, rows, "bias")):
            if isinstance(a, np.ndarray) and (a.itemsize != 2 or a.size != n):
                raise ValueError(f"{what}{tag} must hold {n} bf16 values (2-byte items), got {a.dtype}{a.shape}")
        return (self.pointer(w, "const uint16_t *")[0],
                self.ffi.NULL if bias is None else self.pointer(bias, "const uint16_t *")[0])

    def linear_bf16_n(self, ws: Sequence[Pointerish], biases: Sequence[Pointerish | None], rows: Sequence[int],
                      cols: int, x: np.ndarray, outs: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        """:meth:`linear_bf16` for up to 8 matrices over the same ``x`` in one pass of the thread team (same bits
        as one call each): ``ws[m]`` bf16 [rows[m], cols], ``biases[m]`` bf16 [rows[m]] or None; fp32 outputs."""
        n = len(ws)
        if not 1 <= n <= 8 or len(biases) != n or len(rows) != n or (outs is not None and len(outs) != n):
            raise ValueError(f"1 to 8 matrices, each with a bias (or None) and a row count: got {n}, "
                             f"{len(biases)}, {len(rows)}")
        xp = self._x_f32(x, cols)
        res = [np.empty(r, np.float32) for r in rows] if outs is None else list(outs)
        wps, bps, ops = self.ffi.new("const uint16_t *[]", n), self.ffi.new("const uint16_t *[]", n), \
            self.ffi.new("float *[]", n)
        for m in range(n):
            wps[m], bps[m] = self._bf16_matrix(ws[m], biases[m], rows[m], cols, f"[{m}]")
            ops[m] = self._f32(res[m], (rows[m],), f"out[{m}]", writable=True)
        rc = self.lib.neural_linear_bf16_n(n, wps, bps, self.ffi.new("int[]", [int(r) for r in rows]), cols, xp, ops)
        self._check(rc, "linear_bf16_n")
        return res

    def rms_norm_bf16(self, x: int, gain: int, n: int, eps: float, out: int) -> None:
        """RMSNorm of one bf16 row of ``n`` values at address ``x`` with the bf16 gain at ``gain``, into the bf16 row
        at ``out`` (the addresses kept alive by the caller; ``n`` a multiple of 16): neural_rows.c's order."""
        cast = self.ffi.cast
        rc = self.lib.neural_rms_norm_bf16(cast("const uint16_t *", x), cast("const uint16_t *", gain), n, eps,
                                           cast("uint16_t *", out))
        self._check(rc, "rms_norm_bf16")

    def decode_layer(self, dims: Sequence[int], eps: float, scale: float, ln: Sequence[int], qkv: Sequence[int],
                     qkv_bias: Sequence[int | None], o: tuple[int, int | None], router: tuple[int, int | None],
                     sinks: np.ndarray) -> Any:
        """A ``neural_decode_layer`` for :meth:`decode_attn`: ``dims`` (hidden, heads, kv_heads, head_dim, experts);
        the addresses of the bf16 norm gains ``ln`` (input, post-attention), the q/k/v matrices and their biases (or
        None), o_proj's and the router's (matrix, bias); ``sinks`` fp32 [heads], kept alive with the descriptor. The
        caller keeps the bf16 tensors alive while the descriptor is used."""
        if len(dims) != 5 or min(dims) <= 0 or len(ln) != 2 or len(qkv) != 3 or len(qkv_bias) != 3:
            raise ValueError("decode_layer needs 5 positive dims, 2 norm gains and q, k, v with their biases")
        sk = np.ascontiguousarray(sinks, np.float32)
        if sk.shape != (dims[1],):
            raise ValueError(f"sinks must hold {dims[1]} fp32 values, got {sk.shape}")
        d = self.ffi.new("neural_decode_layer *")
        d.hidden, d.heads, d.kv_heads, d.head_dim, d.experts = (int(v) for v in dims)
        d.eps, d.scale = eps, scale
        u16 = "const uint16_t *"
        ptr = self.ffi.cast
        d.ln1, d.ln2 = ptr(u16, ln[0]), ptr(u16, ln[1])
        for i in range(3):
            d.w[i] = ptr(u16, qkv[i])
            d.b[i] = self.ffi.NULL if qkv_bias[i] is None else ptr(u16, qkv_bias[i])
        d.wo, d.bo = ptr(u16, o[0]), self.ffi.NULL if o[1] is None else ptr(u16, o[1])
        d.wr, d.br = ptr(u16, router[0]), self.ffi.NULL if router[1] is None else ptr(u16, router[1])
        owner = self.ffi.from_buffer(sk)
        d.sinks = ptr("const float *", owner)
        return ExpertRef(d, [sk, owner])

    def decode_attn(self, layer: Any, x: int, cos: int, sin: int, kc: int, vc: int, head_stride: int, pos: int,
                    base: int, t_out: int, router_out: int) -> None:
        """neural_decode_attn (neural_decode.c) on the bf16 row at ``x`` in place with a :meth:`decode_layer`: the
        K/V row written at ``pos`` of the caches at ``kc`` / ``vc``, attention over rows ``base``..``pos``, the
        post-attention norm into ``t_out`` and the router's bf16 logits into ``router_out`` (addresses kept alive by
        the caller)."""
        u16 = "uint16_t *"
        ptr = self.ffi.cast
        rc = self.lib.neural_decode_attn(layer.cdata, ptr(u16, x), ptr("const uint16_t *", cos),
                                         ptr("const uint16_t *", sin), ptr(u16, kc), ptr(u16, vc), head_stride, pos,
                                         base, ptr(u16, t_out), ptr(u16, router_out))
        self._check(rc, "decode_attn")

    def decode_table(self, experts: Sequence[ExpertRef]) -> ExpertRef:
        """A layer's expert descriptors as the array :meth:`decode_moe` indexes (kept alive with it)."""
        arr = self.ffi.new("neural_expert *[]", [e.cdata for e in experts])
        return ExpertRef(arr, [list(experts)])  # keep[0]: the descriptors, in id order

    def decode_moe(self, shape: Any, table: ExpertRef, idx: int, w: int, k: int, t: int, x: int) -> None:
        """neural_decode_moe: the bf16 row at ``x`` += bf16(:meth:`moe_token` of the bf16 row at ``t``) over the experts
        ``table`` (:meth:`decode_table`) picked by the ``k`` int64 ids at ``idx`` with the bf16 weights at ``w``,
        rounded as a bf16 add rounds (addresses kept alive by the caller)."""
        if not 1 <= k <= MAX_K:
            raise ValueError(f"1..{MAX_K} experts per call, got {k}")
        cast = self.ffi.cast
        rc = self.lib.neural_decode_moe(shape, table.cdata, len(table.keep[0]), cast("const int64_t *", idx),
                                        cast("const uint16_t *", w), k, cast("const uint16_t *", t),
                                        cast("uint16_t *", x))
        self._check(rc, "decode_moe")

    def lane_issue(self, copy2d: int, launch: int, stream: int, graph_exec: int, pool: int, slot_bytes: int,
                   max_pitch: int, parts: np.ndarray, slots: np.ndarray, route: np.ndarray, experts: Sequence[int],
                   weights: Sequence[float], copy_abi: int = 0) -> None:
        """neural_lane_issue: one copy-lane layer's routing rows written into ``route`` (int32 [3 * bt]), its copies
        queued through the runtime function at address ``copy2d`` (cudaMemcpy2DAsync; with ``copy_abi`` 12 or 13,
        cudaMemcpyBatchAsync as CUDA 12.8-12.9 or 13 declare it, every copy in one call) on ``stream``, and the graph
        ``graph_exec`` launched through ``launch`` (cudaGraphLaunch) unless it is 0. ``parts``: int64 [n, 3] (address
        of expert 0's bytes, bytes per expert, offset in a slot); ``slots``: int32, at least one per expert. A runtime
        error raises KernelError naming the call."""
        if copy_abi not in (0, 12, 13):
            raise ValueError(f"copy_abi must be 0 (cudaMemcpy2DAsync), 12 or 13 (cudaMemcpyBatchAsync), got {copy_abi}")
        m = len(experts)
        if not 1 <= m <= 8 or len(weights) != m or slots.shape[0] < m:
            raise ValueError(f"1..8 experts with as many weights and slots, got {m}, {len(weights)}, {slots.shape[0]}")
        if parts.dtype != np.int64 or parts.ndim != 2 or parts.shape[1] != 3 or not parts.flags.c_contiguous:
            raise ValueError("parts must be a C-contiguous int64 [n, 3] array")
        if route.dtype != np.int32 or slots.dtype != np.int32 or route.shape[0] % 3 or route.shape[0] < 3 * m:
            raise ValueError("route must be int32 [3 * bt] with bt >= the experts, slots int32")
        cast, new = self.ffi.cast, self.ffi.new
        failed = new("int32_t *")
        rc = self.lib.neural_lane_issue(
            cast("void *", copy2d), copy_abi, cast("void *", launch), cast("void *", stream),
            cast("void *", graph_exec), pool, slot_bytes, max_pitch, cast("const int64_t *", parts.ctypes.data),
            parts.shape[0],
            cast("const int32_t *", slots.ctypes.data), cast("int32_t *", route.ctypes.data), route.shape[0] // 3,
            new("int32_t[]", list(experts)), new("float[]", list(weights)), m, failed)
        if rc < 0:  # the kernel's own codes
            self._check(rc, "lane_issue")
        if rc > 0:  # the runtime's
            what = {-2: "cudaGraphLaunch", -7: "cudaMemcpyBatchAsync"}.get(int(failed[0]),
                                                                          f"cudaMemcpy2DAsync (copy {failed[0]})")
            raise KernelError(f"lane_issue: {what} failed with CUDA error {rc}")

    def lane_layer_job(self) -> Any:
        """A zeroed neural_lane_layer_job (cffi struct) for :meth:`lane_layer`; the caller fills it once and sets the
        per-layer fields before each call, keeping alive everything its pointers point to."""
        return self.ffi.new("neural_lane_layer_job *")

    def lane_layer(self, job: Any) -> None:
        """neural_lane_layer: a decode layer's miss path, from its routing flag to the next launch (native/
        neural_lane.c). Results are in the job's fields. Raises KernelError naming a failed runtime call, or the
        timeout."""
        rc = int(self.lib.neural_lane_layer(job))
        if rc == -6:
            raise KernelTimeout(f"lane_layer: {_ERRORS[-6]} (step {job.step}, {job.wait_us / 1e6:.0f} s)")
        if rc < 0:
            self._check(rc, "lane_layer")
        if rc > 0:
            what = {-2: "a lane launch or event record", -3: "cudaStreamQuery of the lane", -4: "the next launch",
                    -5: "the lane's first event record", -6: "cuStreamWaitValue32 (the next graph's wait)",
                    -7: "cudaMemcpyBatchAsync (the lane's copies)"
                    }.get(int(job.failed), f"cudaMemcpy2DAsync (copy {job.failed})")
            raise KernelError(f"lane_layer: {what} failed with CUDA error {rc}")

    def rope_bf16(self, x: int, rows: int, d: int, cos: int, sin: int) -> None:
        """RoPE in place on ``rows`` bf16 rows of ``d`` values at address ``x``, cos/sin bf16 [d/2] at ``cos`` and
        ``sin`` (half-split pairs, rounded as PyTorch's bf16 operations round)."""
        rc = self.lib.neural_rope_bf16(self.ffi.cast("uint16_t *", x), rows, d, self.ffi.cast("const uint16_t *", cos),
                                       self.ffi.cast("const uint16_t *", sin))
        self._check(rc, "rope_bf16")

    def linear_bf16_nb(self, ws: Sequence[Pointerish], biases: Sequence[Pointerish | None], rows: Sequence[int],
                       cols: int, x: int, outs: Sequence[int]) -> None:
        """:meth:`linear_bf16_n` on a bf16 ``x`` [cols] at address ``x``, into bf16 outputs [rows[m]] at the addresses
        ``outs`` (kept alive by the caller), each value rounded once to nearest even: the bits of linear_bf16_n's
        fp32 outputs as PyTorch converts them."""
        if len(outs) != len(ws):
            raise ValueError(f"each matrix needs an output: got {len(outs)} outputs for {len(ws)} matrices")
        self.linear_bf16_nb_run(self.linear_bf16_nb_plan(ws, biases, rows, cols), x, outs)

    def linear_bf16_nb_plan(self, ws: Sequence[Pointerish], biases: Sequence[Pointerish | None],
                            rows: Sequence[int], cols: int) -> LinearPlan:
        """:meth:`linear_bf16_nb`'s matrices checked and their pointer arrays built once (the arrays must outlive the
        plan): a decode token runs the same projections every layer, and building these was ~2/3 of a small
        call's time in Python (10 of 14 us)."""
        n = len(ws)
        if not 1 <= n <= 8 or len(biases) != n or len(rows) != n:
            raise ValueError(f"1 to 8 matrices, each with a bias (or None) and a row count: got {n}, "
                             f"{len(biases)}, {len(rows)}")
        wps, bps = self.ffi.new("const uint16_t *[]", n), self.ffi.new("const uint16_t *[]", n)
        for m in range(n):
            wps[m], bps[m] = self._bf16_matrix(ws[m], biases[m], rows[m], cols, f"[{m}]")
        return LinearPlan(n, cols, wps, bps, self.ffi.new("int[]", [int(r) for r in rows]), (tuple(ws), tuple(biases)))

    def linear_bf16_nb_run(self, plan: LinearPlan, x: int, outs: Sequence[int]) -> None:
        """A :meth:`linear_bf16_nb_plan` on the bf16 row at address ``x`` into the bf16 outputs at ``outs``."""
        if len(outs) != plan.n:
            raise ValueError(f"each matrix needs an output: got {len(outs)} outputs for {plan.n} matrices")
        ops = self.ffi.new("uint16_t *[]", [self.ffi.cast("uint16_t *", o) for o in outs])
        rc = self.lib.neural_linear_bf16_nb(plan.n, plan.wps, plan.bps, plan.rows, plan.cols,
                                            self.ffi.cast("const uint16_t *", x), ops)
        self._check(rc, "linear_bf16_nb")

    def attn_decode_bf16(self, k: int, v: int, head_stride: int, kv_heads: int, t: int, q: np.ndarray,
                         sinks: np.ndarray, scale: float, round_p: bool, out: np.ndarray | None = None) -> np.ndarray:
        """One query token's attention over bf16 K/V at the addresses ``k`` and ``v`` (kept alive by the
        caller): ``kv_heads`` blocks of ``t`` rows of ``d`` bf16 values, ``head_stride`` elements apart;
        ``q`` fp32 [kv_heads * group, d], ``sinks`` fp32 [kv_heads * group]; fp32 [kv_heads * group, d] in
        the order of neural_experts.h (scores, softmax with the sink, probabilities rounded to bf16 when
        ``round_p``, then P.V), on the thread team."""
        if q.ndim != 2 or q.shape[0] % kv_heads:
            raise ValueError(f"q must be [kv_heads * group, head_dim], got {q.shape} for {kv_heads} kv heads")
        rows, d = q.shape
        if out is None:
            out = np.empty((rows, d), np.float32)
        rc = self.lib.neural_attn_decode_bf16(
            self.ffi.cast("const uint16_t *", k), self.ffi.cast("const uint16_t *", v), head_stride, kv_heads, t, d,
            rows // kv_heads, self._f32(q, (rows, d), "q"), self._f32(sinks, (rows,), "sinks"), scale,
            1 if round_p else 0, self._f32(out, (rows, d), "out", writable=True))
        self._check(rc, "attn_decode_bf16")
        return out

_lock = threading.Lock()
_kernel: NativeKernel | None = None
_error: str | None = None


def load_kernel() -> NativeKernel:
    """The process-wide kernel; raises NativeUnavailable with the reason if it cannot load."""
    global _kernel, _error
    with _lock:
        if _kernel is not None:
            return _kernel
        if _error is not None:
            raise NativeUnavailable(_error)
        try:
            mod = importlib.import_module(f"{__package__}._neural_native")
        except Exception as exc:  # ImportError, or an OSError from a broken shared library
            _error = (f"native expert kernel not built or not loadable ({type(exc).__name__}: {exc}); "
                      "reinstall with a C compiler present: pip install -e .")
            raise NativeUnavailable(_error) from exc
        _kernel = NativeKernel(mod.ffi, mod.lib)
        return _kernel
