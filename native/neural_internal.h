/* Internal interface between the dispatcher (neural_experts.c) and the ISA kernels (neural_isa.c). */
#ifndef NEURAL_INTERNAL_H
#define NEURAL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
#define NEURAL_X86 1
#else
#define NEURAL_X86 0
#endif

/* Function-level ISA targets: GCC/Clang/MinGW use attributes; MSVC emits any intrinsic as-is. */
#if NEURAL_X86 && (defined(__GNUC__) || defined(__clang__))
#define NEURAL_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define NEURAL_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")))
#define NEURAL_TARGET_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx2,fma")))
#else
#define NEURAL_TARGET_AVX2
#define NEURAL_TARGET_AVX512
#define NEURAL_TARGET_AVX512BF16
#endif

/* bf16 bits <-> float as PyTorch's tensors convert them: the bits widened; rounding to nearest, ties to even, with no
   flush to zero (a NaN becomes the quiet NaN 0x7FC0). The experts' input rounding (to_bf16 in neural_experts.c)
   differs on purpose: it flushes magnitudes below 2^-118. */
static inline float neural_bf16_float(uint16_t b) {
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)b << 16;
    return v.f;
}
static inline uint16_t neural_round_bf16(float f) {
    union { uint32_t u; float f; } v;
    v.f = f;
    if ((v.u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0u;
    v.u += 0x7FFFu + ((v.u >> 16) & 1u);
    return (uint16_t)(v.u >> 16);
}

#define NEURAL_MAX_G (16384 / 32)
#define NEURAL_TOK_SEG 128                /* most blocks per decode4 call: 4 rows x 128 blocks = 64 KB of fp32 q */
#define NEURAL_TOK_ACC_ROW (4 * 16)       /* floats per row in an accumulator tile (4 tokens x 16 lanes) */
/* Most tokens per expert call that the AVX-512 tables run through rows4tok rather than decode4/tile4 (a build
   may override them to measure): see the measurements at rows4tok_avx512 and rows4tok_avx512bf16 */
#ifndef NEURAL_ROWS_TOK_MAX
#define NEURAL_ROWS_TOK_MAX 20
#endif
#ifndef NEURAL_ROWS_TOK_MAX_BF16
#define NEURAL_ROWS_TOK_MAX_BF16 16
#endif

/* neural_expf's constants (neural_experts.c), one truth for the scalar definition and its vector copies in
   neural_isa.c: the range limits, log2(e), the rounding constant 1.5 * 2^23, ln 2 in two parts, the Taylor terms */
#define NEURAL_EXPF_MAX 88.72283935546875f
#define NEURAL_EXPF_MIN -103.972084045410156f
#define NEURAL_EXPF_LOG2E 1.44269502162933349609375f
#define NEURAL_EXPF_ROUND 12582912.0f
#define NEURAL_EXPF_LN2_HI 0.693145751953125f
#define NEURAL_EXPF_LN2_LO 1.428606765330187045e-06f
#define NEURAL_EXPF_P7 1.98412698e-4f
#define NEURAL_EXPF_P6 1.38888889e-3f
#define NEURAL_EXPF_P5 8.33333333e-3f
#define NEURAL_EXPF_P4 4.16666667e-2f
#define NEURAL_EXPF_P3 1.66666667e-1f

/* 2 * E2M1 value per 4-bit code, and S(s) = 2^(s-128) per scale byte. */
extern const float neural_lut2[16];
extern const int8_t neural_lut2_i8[16];
extern float neural_scale2[256];
extern int neural_prefetch_bytes;

typedef struct neural_kernels {
    int isa;
    /* 4 rows x 1 input: out[i] = dot(row i, z); z in permuted block layout (see below), zb the
       same bf16-exact input as bf16 bits in natural order (for the vdpbf16ps path). */
    void (*dot4)(const uint8_t *const codes[4], const uint8_t *const scales[4], const float *z, const uint16_t *zb,
                 int G, float out[4]);
    /* Multi-token calls (see NEURAL_TOK_* below). decode4: blocks g0..g0+nb-1 of 4 rows, decoded
       once into q = [4][nb][32] (tok_bf16 = 0: fp32 q values, 16 low-nibble lanes then 16 high;
       1: bf16 q bits in natural element order) and S = [4][nb] scales. tile4: for nt (1..4)
       tokens, acc[r * NEURAL_TOK_ACC_ROW + t * 16 + l] (lane l of the canonical accumulator of
       row r, token t) continues the dot product over those nb blocks; z[t] points at block g0 of
       token t's input (fp32 permuted layout, or bf16 bits in natural order when tok_bf16). */
    void (*decode4)(const uint8_t *const codes[4], const uint8_t *const scales[4], int g0, int nb, void *q,
                    float *S);
    void (*tile4)(const void *q, const float *S, int nb, const void *const z[4], int nt, float *acc);
    int tok_bf16;
    /* 2..4 tokens x 4 rows, whole rows decoded in registers: out[4 * r + t] = dot(row r, z[t]), z as
       for tile4 with g0 = 0. AVX2 has only this (decode4/tile4 NULL): every token count, in groups
       of 2-4. AVX-512 has both: this up to rows_tok_max tokens (NEURAL_ROWS_TOK_MAX, _BF16), the tiles above. */
    void (*rows4tok)(const uint8_t *const codes[4], const uint8_t *const scales[4], int G, const void *const z[4],
                     int nt, float out[16]);
    /* checksum of a read of n bytes (n multiple of 256, p 64-byte aligned) */
    uint64_t (*read)(const uint8_t *p, size_t n);
    /* a[q] = SwiGLU(h[2q], h[2q+1]) for q < 16, the exact operations of the scalar SwiGLU and
       neural_expf (NULL: the caller uses the scalar code) */
    void (*swiglu16)(const float *h, float limit, float alpha, float *a);
    /* out[i] = dot(w[i][0..n), x) for 4 bf16 rows (n a multiple of 16) in the 16-lane order (lane l takes
       columns 16c + l, one fma each, then the tree): decode attention's scores where scores_bf16 is NULL (the
       scalar table; NULL where scores_bf16 is set) */
    void (*gemv4_bf16)(const uint16_t *const w[4], const float *x, int n, float out[4]);
    /* decode attention's P.V for a group of 8 query heads: acc[j * d + c] = acc[j * d + c] + p[j * ps + i] *
       v[i * d + c] for the keys i = 0..t-1 in order, c < d (a multiple of 16), v bf16 rows: a product then a
       sum, no contraction, so the bits of the scalar loop (NULL: the caller runs that loop) */
    void (*pv8_bf16)(const uint16_t *v, int t, int d, const float *p, size_t ps, float *acc);
    /* out[l] = neural_expf(x[l]) for l < 16, its exact operations (NULL: the scalar code) */
    void (*exp16)(const float *x, float *out);
    /* decode attention's scores for g query heads: s[j * ss + i] = dot(k[i * d ..], q[j * d ..]) for the keys
       i < t and heads j < g, each in the 16-lane order of gemv4_bf16; K is
       converted once per block of 16 rows for all g heads, and a head's 16 keys share one tree (NULL: gemv4_bf16
       per head) */
    void (*scores_bf16)(const uint16_t *k, int t, int d, const float *q, int g, float *s, size_t ss);
    /* decode attention's softmax numerators of one head: m = the max of sink and every s[i] * scale (a NaN score
       never wins, as in the scalar loop), then s[i] = neural_expf(s[i] * scale - m) for i < t; returns m. Products,
       differences and exponentials as the scalar loops (NULL: those loops) */
    float (*att_exp)(float *s, int t, float scale, float sink);
    /* p[i] = the bf16 rounding of p[i] (to_bf16 of neural_experts.c: nearest even, NaN quiet, magnitudes below
       2^-118 to signed zero) for i < n, as fp32 (NULL: the scalar loop) */
    void (*round_bf16)(float *p, int n);
    /* out[i] = dot(w[i][0..n), x) for 4 bf16 rows (n a multiple of 16) in neural_linear_bf16's 64-lane order
       (gemv4w_scalar): the one-token projections */
    void (*gemv4w_bf16)(const uint16_t *const w[4], const float *x, int n, float out[4]);
    /* most tokens per expert call that go through rows4tok where decode4/tile4 exist too (the tiles above) */
    int rows_tok_max;
} neural_kernels;

/*
 * Permuted input layout: for block g the 32 floats are [z[32g+0], z[32g+2], ..., z[32g+30],
 * z[32g+1], z[32g+3], ..., z[32g+31]]: lane l of the low half meets the low nibble of byte l.
 */
static inline int neural_perm_index(int j) {
    int p = j & 31;
    return (j & ~31) + ((p & 1) ? 16 + (p >> 1) : (p >> 1));
}

extern const neural_kernels neural_kernels_scalar;
#if NEURAL_X86
extern const neural_kernels neural_kernels_avx2;
extern const neural_kernels neural_kernels_avx512;
extern const neural_kernels neural_kernels_avx512bf16;
#endif

void neural_tables_init(void);

#endif
