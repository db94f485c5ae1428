"""cffi (API mode) build of ``native._neural_native``, run by ``pip install`` through setup.py.

No global ISA flags: the AVX2/AVX-512 code paths carry function-level target attributes and
are chosen at run time, so one binary runs on any x86-64 CPU. FP contraction is switched off
because the kernel's arithmetic is specified operation by operation (see neural_experts.h).
"""

from __future__ import annotations

import sys
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
SOURCES = ["neural_experts.c", "neural_isa.c", "neural_team.c", "neural_rows.c", "neural_decode.c",
           "neural_lane.c"]

CDEF = """
typedef struct neural_shape {
    int32_t hidden;
    int32_t intermediate;
    int32_t format;
    float swiglu_limit;
    float swiglu_alpha;
    int32_t bf16_inputs;
    int64_t record_offset[7];
} neural_shape;

typedef struct neural_expert {
    const uint8_t *part[6];
    const uint8_t *exc;
    uint32_t n_exc;
    uint8_t *capture;
    int32_t units;
} neural_expert;

int neural_cpu_features(void);
const char *neural_isa_name(int isa);
int neural_best_isa(void);
int neural_set_isa(int isa);
int neural_get_isa(void);
int neural_set_threads(int n);
int neural_get_threads(void);
void neural_set_spin_us(int us);
void neural_set_prefetch(int bytes);
int neural_get_prefetch(void);
int64_t neural_record_bytes(const neural_shape *s);
int neural_moe_token(const neural_shape *s, const neural_expert *const *experts, const float *weights, int k,
                     const float *x, float *out);
int neural_moe_token_begin(const neural_shape *s, const neural_expert *const *experts, const float *weights, int k,
                           const float *x, float *out);
int neural_moe_token_end(double *span_us);
int neural_expert_tokens(const neural_shape *s, const neural_expert *expert, int ntok, const float *x,
                         const float *weights, float *out);
int neural_expert_groups(const neural_shape *s, const neural_expert *const *experts, const int32_t *counts,
                         int ngroups, const float *x, const float *weights, float *out);
uint64_t neural_probe_read(const void *buf, size_t bytes);
void neural_copy_stream(void *dst, const void *src, size_t n);
int neural_advise(const void *p, size_t n, int advice);
float neural_expf(float x);
int neural_swiglu(const float *h, int npairs, float limit, float alpha, float *a);
int neural_linear_bf16(const uint16_t *w, const uint16_t *bias, int rows, int cols, const float *x, float *out);
int neural_linear_bf16_n(int n, const uint16_t *const *w, const uint16_t *const *bias, const int *rows, int cols,
                         const float *x, float *const *out);
int neural_linear_bf16_nb(int n, const uint16_t *const *w, const uint16_t *const *bias, const int *rows, int cols,
                          const uint16_t *x, uint16_t *const *out);
int neural_attn_decode_bf16(const uint16_t *k, const uint16_t *v, int64_t head_stride, int kv_heads, int t, int d,
                            int group, const float *q, const float *sinks, float scale, int round_p, float *out);
int neural_rms_norm_bf16(const uint16_t *x, const uint16_t *gain, int n, float eps, uint16_t *out);
int neural_rope_bf16(uint16_t *x, int rows, int d, const uint16_t *cos_h, const uint16_t *sin_h);
typedef struct neural_decode_layer {
    int32_t hidden, heads, kv_heads, head_dim, experts;
    float eps, scale;
    const uint16_t *ln1, *ln2;
    const uint16_t *w[3], *b[3];
    const uint16_t *wo, *bo, *wr, *br;
    const float *sinks;
} neural_decode_layer;
int neural_decode_attn(const neural_decode_layer *L, uint16_t *x, const uint16_t *cos_h, const uint16_t *sin_h,
                       uint16_t *kc, uint16_t *vc, int64_t head_stride, int pos, int base, uint16_t *t_out,
                       uint16_t *router_out);
int neural_decode_moe(const neural_shape *s, const neural_expert *const *table, int n_experts, const int64_t *idx,
                      const uint16_t *w, int k, const uint16_t *t, uint16_t *x);
int neural_lane_issue(void *copy2d, int copy_abi, void *launch, void *stream, void *graph_exec, uint64_t pool,
                      int64_t slot_bytes, int64_t max_pitch, const int64_t *parts, int nparts, const int32_t *slots,
                      int32_t *route, int bt, const int32_t *experts, const float *weights, int m, int32_t *failed);
typedef struct neural_lane_layer_job {
    const int32_t *flag;
    int32_t step, k, bt, n_static, n_experts, lane_most, probe, timed, nparts, beside, copy_abi;
    const int32_t *route;
    double timeout_us, fixed_ms, cpu_ms, lane_ms;
    const neural_shape *shape;
    const neural_expert *const *table;
    const float *x;
    float *out;
    void *copy2d, *launch, *query, *record, *lane_stream, *lane_exec, *next_exec, *next_stream;
    void *events[3];
    uint64_t pool;
    int64_t slot_bytes, max_pitch;
    const int64_t *parts;
    const int32_t *lane_slots;
    int32_t *lane_route;
    const float *lane_out;
    int32_t *done_flag;
    void *wait_value;
    uint64_t wait_addr;
    const uint8_t *wanted;
    int32_t capture;
    int32_t hits, static_hits, misses, lane_n, probed, timed_use, failed, yielded, queued;
    int32_t lane_ids[8];
    double wait_us, decide_us, issue_us, cpu_us, lane_wait_us, launch_us;
} neural_lane_layer_job;
int neural_lane_layer(neural_lane_layer_job *j);
"""


def compile_args() -> tuple[list[str], list[str]]:
    if sys.platform == "win32" and "GCC" not in sys.version:  # MSVC: see installer/README-native-windows.md
        return ["/O2", "/fp:precise"], []
    flags = ["-O2", "-ffp-contract=off", "-fno-fast-math", "-std=gnu11", "-Wall", "-Wextra"]
    if sys.platform == "win32":  # MinGW: GCC cannot align spilled AVX values on the Win64 stack (bug 54412)
        return [*flags, "-Wa,-muse-unaligned-vector-move"], []
    return flags, ["-pthread"]


def _relative(path: Path) -> str:
    # setuptools wants source paths relative to the project root (where setup.py runs).
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


cflags, ldflags = compile_args()
ffibuilder = FFI()
ffibuilder.cdef(CDEF)
ffibuilder.set_source(
    "native._neural_native",
    '#include "neural_experts.h"',
    sources=[_relative(HERE / s) for s in SOURCES],
    include_dirs=[_relative(HERE)],
    extra_compile_args=cflags,
    extra_link_args=ldflags,
    libraries=[] if sys.platform == "win32" else ["m"],
)

if __name__ == "__main__":
    ffibuilder.compile(tmpdir=str(HERE.parent), verbose=True)
