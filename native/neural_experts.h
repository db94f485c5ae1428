/*
 * Neural native CPU expert kernel: gpt-oss MXFP4 experts straight from RAM.
 *
 * One binary, runtime CPU dispatch (AVX-512, AVX2+FMA, portable scalar), a persistent worker
 * team, and results that are bit-identical for every thread count and every ISA path.
 *
 * NUMERICS (the canonical arithmetic; every ISA path performs exactly these fp32 operations)
 * ------------------------------------------------------------------------------------------
 * Weights. A row of an expert matrix has G blocks of 32 inputs; block g has 16 code bytes and
 *   one E8M0 scale byte s. Byte b (0..15) holds element 2b in its LOW nibble and element 2b+1
 *   in its HIGH nibble. E2M1 code c maps through the LUT
 *     c:    0   1   2   3   4   5   6   7    8   9  10  11  12  13  14  15
 *     v:    0  .5   1 1.5   2   3   4   6   -0 -.5  -1 -1.5 -2  -3  -4  -6
 *   and the weight is v * 2^(s-127). The kernel works with the integer-valued codes
 *   q = 2v (0,1,2,3,4,6,8,12, negatives) and the scale S(s) = 2^(s-128) (fp32; s = 0 gives the
 *   denormal 2^-128, s = 255 gives 2^127), so q*S(s) == v*2^(s-127) exactly.
 * Inputs. With shape.bf16_inputs = 1 (the engine's bf16 mode, and the GPU pipeline's) every
 *   input vector (x, and the SwiGLU activation before down) is first rounded to bf16, the
 *   model's activation precision: nearest even, NaN stays NaN, magnitudes below 2^-118 become
 *   signed zero. Then each product q*z below is exact and each d a normal number or zero, so
 *   the vdpbf16ps path (one rounding of q_lo*z_even + q_hi*z_odd, DAZ/FTZ) gives exactly the
 *   bits of mul + fma. With 0 (fp32 mode) the inputs are used as given and the AVX-512 BF16 ISA
 *   runs its fp32 loop instead.
 * Dot product of a row with an input vector z (fp32, bf16-exact), 16 lanes l = 0..15, acc[l] = +0:
 *     for g in 0..G-1:  d    = q(lo nibble of byte l) * z[32g+2l]                 (fp32 mul)
 *                       d    = fma(q(hi nibble of byte l), z[32g+2l+1], d)        (fused)
 *                       acc[l] = fma(d, S(s_g), acc[l])                           (fused)
 *   then a fixed tree: for i in 8,4,2,1: acc[l] = acc[l] + acc[l+i] (l < i); dot = acc[0].
 *   Because S is a power of two this equals the block-scaled reference sum up to the usual
 *   fp32 rounding; it can differ from a dequantize-first reference only where a product
 *   over- or underflows (scale bytes near 0 or 255): there the reference's ldexp gives
 *   inf/NaN/denormals, the kernel gives its own inf/denormal results (documented in tests).
 * Biases are bf16 bits, converted exactly to fp32 and added once: h = dot + b.
 * gate_up rows are interleaved: row 2j is gate unit j, row 2j+1 is up unit j. SwiGLU:
 *     g = (g > limit) ? limit : g                     (upper clamp only; NaN propagates)
 *     u = (u > limit) ? limit : (u < -limit ? -limit : u)
 *     a = (g * sig) * (u + 1),  sig = 1 / (1 + exp(-(alpha*g)))
 *   exp is the kernel's own fp32 routine (Cody-Waite reduction, degree-7 Horner polynomial,
 *   two power-of-two multiplies; no FMA), so it is the same on every platform and ISA.
 * down: y_e = dot(down row, a) + b_down.
 * Routing: out[h] = w_0*y_0[h]; out[h] = out[h] + w_e*y_e[h] for e = 1..k-1 in the given order
 *   (separate multiply and add). The multi-token call writes out[t][h] = w_t * y_t[h].
 * Parallelism never changes a result: rows are handed out dynamically, but every output
 *   element is computed start to finish by one thread in the fixed order above.
 * The workers run with the caller's MXCSR (rounding/FTZ/DAZ), sampled at each call; the
 *   vdpbf16ps path always rounds to nearest even, so only the default MXCSR gives every path
 *   the same bits.
 *
 * Build: no global ISA flags; SIMD functions carry function-level target attributes (GCC,
 * Clang, MinGW) or rely on MSVC's per-intrinsic code generation. Compile with FP contraction
 * off (-ffp-contract=off; MSVC /fp:precise), which the canonical arithmetic above assumes.
 */
#ifndef NEURAL_EXPERTS_H
#define NEURAL_EXPERTS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NEURAL_ISA_AUTO 0
#define NEURAL_ISA_SCALAR 1
#define NEURAL_ISA_AVX2 2
#define NEURAL_ISA_AVX512 3
#define NEURAL_ISA_AVX512BF16 4 /* AVX-512 with vdpbf16ps; same results as every other path */

/* bits of neural_cpu_features() */
#define NEURAL_CPU_AVX2 1     /* AVX2 + FMA + OS support */
#define NEURAL_CPU_AVX512 2   /* AVX-512 F/BW/DQ/VL + OS support */
#define NEURAL_CPU_VBMI 4
#define NEURAL_CPU_BF16 8
#define NEURAL_CPU_AMD 16     /* vendor AuthenticAMD (picks the vdpbf16ps path, see neural_best_isa) */

#define NEURAL_FORMAT_RAW 0
#define NEURAL_FORMAT_PACKED 1

/* the parts of one expert record, in record order */
#define NEURAL_PART_GU_CODES 0
#define NEURAL_PART_GU_SCALES 1
#define NEURAL_PART_DN_CODES 2
#define NEURAL_PART_DN_SCALES 3
#define NEURAL_PART_GU_BIAS 4
#define NEURAL_PART_DN_BIAS 5
#define NEURAL_PART_EXC 6
#define NEURAL_NPARTS 7

#define NEURAL_MAX_TOKENS 256
#define NEURAL_MAX_K 32
#define NEURAL_MAX_THREADS 256
#define NEURAL_MAX_DIM 16384

#define NEURAL_OK 0
#define NEURAL_EINVAL -1
#define NEURAL_ECORRUPT -2
#define NEURAL_EISA -3
#define NEURAL_ENOMEM -4
#define NEURAL_EUNSUPPORTED -5 /* neural_advise: this OS or kernel has no such advice */
#define NEURAL_ETIMEOUT -6     /* neural_lane_layer: the routing flag was not raised in time */

/* neural_advise */
#define NEURAL_ADVISE_HUGE 1     /* Linux MADV_HUGEPAGE (transparent huge pages where the mapping allows) */
#define NEURAL_ADVISE_POPULATE 2 /* Linux MADV_POPULATE_READ (5.14+); Windows PrefetchVirtualMemory */
#define NEURAL_ADVISE_WILLNEED 3 /* Linux MADV_WILLNEED; Windows PrefetchVirtualMemory */

typedef struct neural_shape {
    int32_t hidden;        /* H: model width (multiple of 32) */
    int32_t intermediate;  /* I: expert width (multiple of 32) */
    int32_t format;        /* NEURAL_FORMAT_RAW or NEURAL_FORMAT_PACKED */
    float swiglu_limit;
    float swiglu_alpha;
    int32_t bf16_inputs;   /* 1: inputs rounded to bf16 (see NUMERICS), 0: fp32 inputs as given */
    /* Where each part lies inside a record (capture buffers use the same layout); the
       exception area (packed only) starts at record_offset[NEURAL_PART_EXC]. */
    int64_t record_offset[NEURAL_NPARTS];
} neural_shape;

/*
 * One expert. raw scales: [rows][G] bytes. packed scales: [rows][1 + ceil(G/2)] bytes: a base
 * byte, then G 4-bit offsets (low nibble first); s_g = base + offset_g. A base byte of 0xFF
 * marks a fallback row whose G raw bytes live in the exception area:
 *   uint32 row_id[n_exc] (sorted; gate_up rows are 0..2I-1, down row h is 2I+h),
 *   then the raw scale rows in the same order (G_gate_up bytes, then G_down bytes each).
 */
typedef struct neural_expert {
    const uint8_t *part[6];  /* indexed by NEURAL_PART_* (0..5) */
    const uint8_t *exc;      /* exception area or NULL */
    uint32_t n_exc;
    uint8_t *capture;        /* NULL, or receives the record bytes while they are read */
    int32_t units;           /* 0: the whole expert. Else (one-token call only, no capture): only gate_up units
                                [0, units) (a multiple of 32), the down dot over their blocks, the down bias
                                added in full; the copy lane computes the other units on the GPU. Each output is
                                then the full expert's arithmetic with the units past `units` left out. */
} neural_expert;

int neural_cpu_features(void);
const char *neural_isa_name(int isa);
int neural_best_isa(void);
/* Force a path (NEURAL_ISA_*; AUTO = best). Returns NEURAL_EISA if the CPU lacks it. */
int neural_set_isa(int isa);
int neural_get_isa(void);
/* Threads including the caller; 0 = all online CPUs. Restarts the persistent team. */
int neural_set_threads(int n);
int neural_get_threads(void);
/* How long idle workers spin before they sleep (microseconds). */
void neural_set_spin_us(int us);
/* Software prefetch distance in bytes for the SIMD kernels (0 = off; a tuning knob). Default 8192, as measured on
   the Xeon host and on Zen 4. */
void neural_set_prefetch(int bytes);
int neural_get_prefetch(void);
/* Bytes of one record's fixed part for a shape/format (no exception area). */
int64_t neural_record_bytes(const neural_shape *s);

/* k experts of one layer for one token: out[H] = sum_e w[e] * expert_e(x). */
int neural_moe_token(const neural_shape *s, const neural_expert *const *experts, const float *weights, int k,
                     const float *x, float *out);
/* neural_moe_token in two halves, the same bits: begin checks the arguments, starts the worker threads on the token
   and returns at once (holding the API lock); end, from the same thread, joins them, writes out and releases the
   lock. Between the two the caller may do work of its own (queue GPU copies) but must call nothing else here, and
   experts, weights and out must stay valid. end without a begin: NEURAL_EINVAL. span_us (or NULL): microseconds
   from the token's first unit taken to its last unit's end, however late the caller joined. */
int neural_moe_token_begin(const neural_shape *s, const neural_expert *const *experts, const float *weights, int k,
                           const float *x, float *out);
int neural_moe_token_end(double *span_us);
/* ntok (<= NEURAL_MAX_TOKENS) tokens through one expert: out[t][H] = w[t] * expert(x[t]). */
int neural_expert_tokens(const neural_shape *s, const neural_expert *expert, int ntok, const float *x,
                         const float *weights, float *out);
/* ngroups experts' token groups in one call: group g is the next counts[g] rows of x / weights / out
   (consecutive, in group order), computed as neural_expert_tokens would (in pieces of at most
   NEURAL_MAX_TOKENS), with the same bits; stops at the first error. */
int neural_expert_groups(const neural_shape *s, const neural_expert *const *experts, const int32_t *counts,
                         int ngroups, const float *x, const float *weights, float *out);
/* Read `bytes` of memory with the whole team (DRAM bandwidth probe); returns a checksum. */
uint64_t neural_probe_read(const void *buf, size_t bytes);
/* memcpy with non-temporal stores on the calling thread (thread-safe, no team); fenced. */
void neural_copy_stream(void *dst, const void *src, size_t n);
/* Advice for a memory range (rounded out to whole pages): NEURAL_OK, NEURAL_EUNSUPPORTED where the OS
   or kernel lacks it (a hint: callers carry on without it), NEURAL_EINVAL for bad arguments. */
int neural_advise(const void *p, size_t n, int advice);
/* The canonical fp32 exp used by SwiGLU (exported for the reference tests). */
float neural_expf(float x);
/* out[r] = dot(w[r], x) (+ bias[r]) for a bf16 matrix w [rows][cols] (cols a multiple of 16),
 * bias bf16 or NULL, x fp32: 4 accumulators of 16 lanes, column j in accumulator (j / 16) % 4, lane
 * j % 16, acc = fma(w[r][j], x[j], acc) in increasing j from +0; then per lane (a0 + a1) + (a2 + a3), then
 * the NUMERICS tree, then + bias in fp32 (four fma chains a row: one chain's latency bounded a core). Rows are
 * split over the thread team; every ISA path gives the same bits. The CPU engine's one-token projections (dense layers, head). */
int neural_linear_bf16(const uint16_t *w, const uint16_t *bias, int rows, int cols, const float *x, float *out);
/* neural_linear_bf16 for n (1..8) matrices w[m] [rows[m]][cols] over the same x, in one pass of the team:
 * out[m] gets exactly the bits neural_linear_bf16(w[m], bias[m], rows[m], cols, x, out[m]) gives (bias NULL or
 * bias[m] NULL: no bias). One call instead of n saves the team's start and end per matrix, which is most of a small
 * matrix's time (a decode token's k, v: 2.9 MB each). */
int neural_linear_bf16_n(int n, const uint16_t *const *w, const uint16_t *const *bias, const int *rows, int cols,
                         const float *x, float *const *out);
/* neural_linear_bf16_n with a bf16 x (widened exactly) and bf16 outputs, each rounded once to nearest even (no flush
   to zero), as PyTorch rounds the fp32 result: the bits of neural_linear_bf16_n's outputs converted by PyTorch. */
int neural_linear_bf16_nb(int n, const uint16_t *const *w, const uint16_t *const *bias, const int *rows, int cols,
                          const uint16_t *x, uint16_t *const *out);
/* One query token's attention over bf16 K/V (the CPU engine's decode), per query head r = kv * group + j:
 * s_i = fp32(dot(q[r], K[kv][i])) * scale over the t keys (dot in 16 lanes: lane l = fma(K[16c + l], q[16c + l],
 * lane l) over c from +0, then the NUMERICS tree),
 * m = max(sinks[r], s_0 .. s_{t-1}), e_i = neural_expf(s_i - m), denom = ((e_0 + e_1) + ...) + neural_expf(sinks[r] - m)
 * in key order, p_i = e_i rounded to bf16 when round_p, out[r][c] = (sum over i in key order of p_i * V[kv][i][c]) / denom.
 * K and V are [kv_heads] blocks of [t][d] bf16 rows, head_stride elements apart; d a multiple of 16, at most
 * NEURAL_MAX_HEAD_DIM; group at most NEURAL_MAX_GROUP; q, out [kv_heads * group][d] fp32. Heads are split over the team;
 * every ISA gives the same bits. */
#define NEURAL_MAX_HEAD_DIM 256
#define NEURAL_MAX_GROUP 16
int neural_attn_decode_bf16(const uint16_t *k, const uint16_t *v, int64_t head_stride, int kv_heads, int t, int d,
                            int group, const float *q, const float *sinks, float scale, int round_p, float *out);
/* One bf16 activation row's RMSNorm (neural_rows.c): out = bf16(gain * (x * 1 / sqrt(mean(x^2) + eps))), the
   squares summed in 16 lanes then pairwise; n a multiple of 16. Not on the thread team (a few microseconds). */
int neural_rms_norm_bf16(const uint16_t *x, const uint16_t *gain, int n, float eps, uint16_t *out);
/* RoPE in place on rows x [rows][d] of bf16 (half-split pairing: element i with i + d/2), cos/sin bf16 [d/2],
   rounded as PyTorch's bf16 operations round: x1*c, x2*s, x2*c, x1*s each to bf16, then their difference and sum. */
int neural_rope_bf16(uint16_t *x, int rows, int d, const uint16_t *cos_h, const uint16_t *sin_h);
/* One decode token's layer weights for neural_decode_attn (neural_decode.c): RMSNorm gains ln1 (input) and ln2
   (post-attention) [hidden]; q, k, v projections w[0..2] [heads*d | kv_heads*d][hidden] with biases b[0..2] (or NULL);
   o_proj wo [hidden][heads*d], bias bo; router wr [experts][hidden], bias br; sinks fp32 [heads]; all bf16 but sinks.
   scale: the scores' factor (head_dim^-0.5). */
typedef struct neural_decode_layer {
    int32_t hidden, heads, kv_heads, head_dim, experts;
    float eps, scale;
    const uint16_t *ln1, *ln2;
    const uint16_t *w[3], *b[3];
    const uint16_t *wo, *bo, *wr, *br;
    const float *sinks;
} neural_decode_layer;
/* The attention half of a decode layer on the bf16 row x [hidden], in place: h = rms_norm(x, ln1); q, k, v =
   neural_linear_bf16_nb(h); RoPE on q and k (cos/sin bf16 [d/2] of the position); k and v written as row pos of the
   cache kc / vc ([kv_heads] blocks head_stride elements apart, [.. pos ..][d] each); neural_attn_decode_bf16 of the
   widened q over rows base..pos (probabilities rounded); its output rounded to bf16; o = o_proj of it;
   x = bf16(x + o); t_out = rms_norm(x, ln2); router_out = the router's bf16 logits [experts] of t_out. */
int neural_decode_attn(const neural_decode_layer *L, uint16_t *x, const uint16_t *cos_h, const uint16_t *sin_h,
                       uint16_t *kc, uint16_t *vc, int64_t head_stride, int pos, int base, uint16_t *t_out,
                       uint16_t *router_out);
/* The experts' half, in place on the bf16 row x [hidden]: x = bf16(x + bf16(neural_moe_token(widened t))) over the
   experts table[idx[j]] (the layer's n_experts descriptors) with the widened bf16 weights w[j], j < k: the router's
   top-k ids (int64) and softmax as PyTorch gives them. */
int neural_decode_moe(const neural_shape *s, const neural_expert *const *table, int n_experts, const int64_t *idx,
                      const uint16_t *w, int k, const uint16_t *t, uint16_t *x);
/* The decode copy lane's queueing of one layer (neural_lane.c): route rows [ids | weight bits | slots] of bt entries
   each written for the m experts in ascending id order (slot -1 in the rest), then per expert (or pair of experts
   bound for adjacent slots, their source rows d * size apart, d * size <= max_pitch) one copy2d per part p of
   parts[3p..3p+2] = (address of expert 0's bytes, bytes per expert, offset in a slot) into pool + slot * slot_bytes,
   on stream, through copy2d (cudaMemcpy2DAsync's signature, host to device); then launch(graph_exec, stream) unless
   graph_exec is NULL. copy_abi 12 or 13: copy2d is instead cudaMemcpyBatchAsync as CUDA 12.8-12.9 or 13 declare
   it, and every part of every expert goes in one call (1-D copies, stream order; nparts <= 8). A failing runtime
   call's error code (> 0) is returned and *failed set to the copy's index, -7 for the batch, or -2 for the
   launch. */
int neural_lane_issue(void *copy2d, int copy_abi, void *launch, void *stream, void *graph_exec, uint64_t pool,
                      int64_t slot_bytes, int64_t max_pitch, const int64_t *parts, int nparts, const int32_t *slots,
                      int32_t *route, int bt, const int32_t *experts, const float *weights, int m, int32_t *failed);
/* A decode layer's miss path (neural_lane.c): wait until *flag == step (the GPU has published route), split the
   routing [ids | weight bits | slots, -1 = not resident] of k entries (blocks of bt) into hits and misses, give the
   last m misses to the copy lane (m from best_split on the rates, at most lane_most; 1 where it picks 0 and probe is
   set), queue them (neural_lane_issue with copy2d and copy_abi, between events[0..2] recorded through record when
   timed or probed), compute
   the rest with neural_moe_token into out (zeros if none), wait until query(lane_stream) (cudaStreamQuery) is no
   longer 600 (cudaErrorNotReady), add lane_out [hidden], store step in *done_flag unless it is NULL (the early
   launch: the next layer's graph waits for it), then launch(next_exec, next_stream) unless next_exec is NULL.
   With wait_value (cuStreamWaitValue32's signature) and next_exec set, the next graph is queued at the call's start
   behind wait_value(next_stream, wait_addr, step, EQ), wait_addr being done_flag's device address: the GPU's
   front-end starts it once the flag is stored, with no launch after the CPU's work (failed -6: that wait).
   With beside set the CPU's misses start on the worker threads (neural_moe_token_begin) before the lane is queued
   and this thread joins them after (neural_moe_token_end; cpu_us is then their span), the same bits.
   With capture set and a miss that is an admission candidate (wanted[id] is 1; any miss where wanted is NULL),
   which the caller's path copies into a capture buffer as the CPU reads it, the call returns NEURAL_OK right after
   the routing is read, with yielded set, hits and misses counted and nothing else done (queued: the next graph was
   already queued behind the front-end's wait, which then waits for done_flag).
   Returns NEURAL_ETIMEOUT after timeout_us without the flag; a runtime call's error (> 0) with failed set: the
   copy's index, -2 a lane launch or record, -3 the lane's query, -4 the next launch, -5 the first record, -7 the
   batch copy. */
typedef struct neural_lane_layer_job {
    const int32_t *flag;
    int32_t step, k, bt, n_static, n_experts, lane_most, probe, timed, nparts, beside, copy_abi;
    const int32_t *route;
    double timeout_us, fixed_ms, cpu_ms, lane_ms;
    const neural_shape *shape;
    const neural_expert *const *table; /* the layer's experts by id */
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
    const uint8_t *wanted; /* per expert id: 1 = an admission candidate (may be captured) */
    int32_t capture;       /* a capture buffer is free: a miss in wanted yields */
    /* results */
    int32_t hits, static_hits, misses, lane_n, probed, timed_use, failed, yielded, queued;
    int32_t lane_ids[8];
    double wait_us, decide_us, issue_us, cpu_us, lane_wait_us, launch_us;
} neural_lane_layer_job;
int neural_lane_layer(neural_lane_layer_job *j);
/* a[q] = SwiGLU(h[2q], h[2q+1]) for q < npairs on the current ISA path (for the tests). */
int neural_swiglu(const float *h, int npairs, float limit, float alpha, float *a);

#ifdef __cplusplus
}
#endif
#endif
