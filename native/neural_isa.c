/*
 * ISA kernels of the expert GEMV: portable scalar (the definition of the arithmetic), AVX2+FMA
 * and AVX-512. Every path performs the same fp32 operations in the same order per output (see
 * neural_experts.h), so they agree bit for bit; only the instruction mix differs.
 */
#include <math.h>
#include <string.h>

#include "neural_experts.h" /* NEURAL_MAX_HEAD_DIM */
#include "neural_internal.h"

#if NEURAL_X86
#include <immintrin.h>
#endif

/* Full unrolling of the small constant loops of the register tiles (their arrays of vectors
   must become registers); other compilers run the same operations in the same order. */
#if defined(__GNUC__) || defined(__clang__)
#define NEURAL_UNROLL _Pragma("GCC unroll 16")
#define NEURAL_INLINE __attribute__((always_inline)) inline
#else
#define NEURAL_UNROLL
#define NEURAL_INLINE __forceinline
#endif

/* 2 * E2M1: q for code c. Code 8 (-0) gives -0 here and +0 in the int8 table; a signed zero
   product never changes a sum that starts at +0, so both tables give identical results. */
const float neural_lut2[16] = {0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 6.0f, 8.0f, 12.0f,
                               -0.0f, -1.0f, -2.0f, -3.0f, -4.0f, -6.0f, -8.0f, -12.0f};
const int8_t neural_lut2_i8[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
float neural_scale2[256];
/* Software prefetch distance. The rows of a group are contiguous, so a group's codes form one
   linear stream (64 B per block step for 4 rows); the kernels fetch one line per step this far
   ahead, and the scale rows likewise. 0 turns it off; until set, ensure_init picks the
   measured default of the CPU vendor (neural_experts.c). */
int neural_prefetch_bytes = -1;

void neural_tables_init(void) {
    for (int s = 0; s < 256; s++) neural_scale2[s] = ldexpf(1.0f, s - 128);
}

/* ------------------------------------------------------------------------------------------ */
/* scalar                                                                                      */

/* Correctly rounded fp32 fma without relying on the C runtime's fmaf (MinGW's is not always
   correctly rounded): the product is exact in double, the sum is rounded to odd, then to float. */
static float fma_exact(float a, float b, float c) {
    double p = (double)a * (double)b, s = p + (double)c;
    double bb = s - p, err = (p - (s - bb)) + ((double)c - bb); /* p + c == s + err exactly */
    if (err != 0.0 && s - s == 0.0) {
        uint64_t bits;
        memcpy(&bits, &s, 8);
        if ((bits & 1) == 0) { /* even: step one ulp towards the exact value, which makes it odd */
            bits += ((err > 0) == (s > 0)) ? 1 : (uint64_t)-1;
            memcpy(&s, &bits, 8);
        }
    }
    return (float)s;
}

static float reduce16(float *a) {
    for (int i = 8; i >= 1; i >>= 1)
        for (int l = 0; l < i; l++) a[l] = a[l] + a[l + i];
    return a[0];
}

static float dot_row_scalar(const uint8_t *codes, const uint8_t *sc, const float *z, int G) {
    float acc[16];
    for (int l = 0; l < 16; l++) acc[l] = 0.0f;
    for (int g = 0; g < G; g++) {
        const uint8_t *b = codes + 16 * g;
        const float *zg = z + 32 * g;
        const float S = neural_scale2[sc[g]];
        for (int l = 0; l < 16; l++) {
            float d = neural_lut2[b[l] & 15] * zg[l];
            d = fma_exact(neural_lut2[b[l] >> 4], zg[16 + l], d);
            acc[l] = fma_exact(d, S, acc[l]);
        }
    }
    return reduce16(acc);
}

static void dot4_scalar(const uint8_t *const codes[4], const uint8_t *const sc[4], const float *z,
                        const uint16_t *zb, int G, float out[4]) {
    (void)zb;
    for (int i = 0; i < 4; i++) out[i] = dot_row_scalar(codes[i], sc[i], z, G);
}

/* Multi-token calls: 4 rows decoded once per block (neural_internal.h), then every token. */
static void decode4_scalar(const uint8_t *const codes[4], const uint8_t *const sc[4], int g0, int nb, void *qv,
                           float *S) {
    float *q = (float *)qv;
    for (int i = 0; i < 4; i++)
        for (int g = 0; g < nb; g++) {
            const uint8_t *b = codes[i] + 16 * (size_t)(g0 + g);
            float *d = q + 32 * ((size_t)i * nb + g);
            for (int l = 0; l < 16; l++) {
                d[l] = neural_lut2[b[l] & 15];
                d[16 + l] = neural_lut2[b[l] >> 4];
            }
            S[i * nb + g] = neural_scale2[sc[i][g0 + g]];
        }
}

static void tile4_scalar(const void *qv, const float *S, int nb, const void *const zv[4], int nt, float *acc) {
    const float *q = (const float *)qv;
    for (int r = 0; r < 4; r++)
        for (int t = 0; t < nt; t++) {
            float *a = acc + r * NEURAL_TOK_ACC_ROW + 16 * t;
            const float *z = (const float *)zv[t];
            for (int g = 0; g < nb; g++) {
                const float *d32 = q + 32 * ((size_t)r * nb + g), *zg = z + 32 * g;
                for (int l = 0; l < 16; l++) {
                    float d = d32[l] * zg[l];
                    d = fma_exact(d32[16 + l], zg[16 + l], d);
                    a[l] = fma_exact(d, S[r * nb + g], a[l]);
                }
            }
        }
}

static uint64_t read_scalar(const uint8_t *p, size_t n) {
    uint64_t s = 0, v;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        memcpy(&v, p + i, 8);
        s ^= v;
    }
    return s;
}

/* bf16 rows x fp32 input: 16 lanes, lane l takes columns 16c + l, one fma each, then the tree */
static void gemv4_scalar(const uint16_t *const w[4], const float *x, int n, float out[4]) {
    for (int r = 0; r < 4; r++) {
        float acc[16];
        for (int l = 0; l < 16; l++) acc[l] = 0.0f;
        for (int c = 0; c < n; c += 16)
            for (int l = 0; l < 16; l++) {
                uint32_t u = (uint32_t)w[r][c + l] << 16;
                float v;
                memcpy(&v, &u, sizeof v);
                acc[l] = fma_exact(v, x[c + l], acc[l]);
            }
        out[r] = reduce16(acc);
    }
}

/* neural_linear_bf16's order: 4 accumulators of 16 lanes, column c in accumulator (c / 16) % 4, lane c % 16, one fma
   each from +0; then (a0 + a1) + (a2 + a3) per lane, then the tree. Four chains a row where one chain's fma latency
   bounded a core (one row's stream, 31-33 GB/s a core on Zen 4, session 29). */
static void gemv4w_scalar(const uint16_t *const w[4], const float *x, int n, float out[4]) {
    for (int r = 0; r < 4; r++) {
        float acc[4][16], s[16];
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 16; l++) acc[k][l] = 0.0f;
        for (int c = 0; c < n; c += 16)
            for (int l = 0; l < 16; l++) {
                uint32_t u = (uint32_t)w[r][c + l] << 16;
                float v;
                memcpy(&v, &u, sizeof v);
                float *a = &acc[(c >> 4) & 3][l];
                *a = fma_exact(v, x[c + l], *a);
            }
        for (int l = 0; l < 16; l++) s[l] = (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l]);
        out[r] = reduce16(s);
    }
}

const neural_kernels neural_kernels_scalar = {1, dot4_scalar, decode4_scalar, tile4_scalar, 0, NULL, read_scalar, NULL,
                                              gemv4_scalar, NULL, NULL, NULL, NULL, NULL, gemv4w_scalar, 0};

#if NEURAL_X86
/* ------------------------------------------------------------------------------------------ */
/* AVX2 + FMA: codes -> q via pshufb (one token: bf16 bytes; several: int8, converted)         */

NEURAL_TARGET_AVX2 static inline float hsum8_avx2(__m256 lo8, __m256 hi8) {
    __m256 s8 = _mm256_add_ps(lo8, hi8);                                               /* l + (l+8) */
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));  /* l + (l+4) */
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));                                /* l + (l+2) */
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));                            /* 0 + 1 */
    return _mm_cvtss_f32(s1);
}

/* One-token loop: codes -> fp32 q without converts or lane-crossing shuffles (the int8 decode,
   still in rowtok_avx2 below, spends 2 pshufb + 2 unpack + 4 vpmovsxbd + 4 cvtdq2ps per
   block-row, and vpmovsxbd has one port on Intel). Per block-row, 16 code bytes at P: a broadcast
   load; one vpshufb putting bytes l and 8+l side by side (bytes 0-3|8-11 in the low 128 bits,
   4-7|12-15 in the high, each twice); a per-qword shift + mask leaving the low nibbles in qword 0
   of each half and the high nibbles in qword 1; two vpshufb giving bytes 3 and 2 of the fp32 q
   (q is bf16-exact: q3/q2 are those bytes of neural_lut2, code 8 is -0 as there); one unpack to
   bf16 words (dword j of a half = [q of byte l, q of byte 8+l]); a shift by 16 or a mask puts
   the q of bytes 0-7 or 8-15 in the canonical lanes. 11 vector operations instead of 15, the
   same fp32 values, the same arithmetic after them. MEASURED on an AMD Zen 5 VM (2 vCPUs,
   shared, AVX2 path forced, old and new builds alternated): bench/kernel/dot_rate.c one token in
   L1 8.3-8.9 -> 9.9-10.3 GB/s per CPU-second; `neural bench kernel --isa avx2 --threads 2`
   9.3-14.0 (median 12.7) -> 14.0-17.6 (median 15.2) GB/s, ratio median 0.33 -> 0.40; at 1 thread
   no clear change (7.2-8.0 both). CALCULATED by llvm-mca 14, cycles per block step of 2 rows:
   Skylake-family model 16.1 -> 13.0, znver3 21.1 -> 14.6, znver2 17.2 -> 15.3. Not measured on
   Intel. The multi-token loop keeps the int8 decode: its FMAs dominate and the new decode
   measured no faster there (dot_rate, 2-16 tokens). */
#define AVX2_Q(P, QLL, QLH, QHL, QHH)                                                            \
    do {                                                                                         \
        __m256i r_ = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(P)));        \
        r_ = _mm256_and_si256(_mm256_srlv_epi64(_mm256_shuffle_epi8(r_, spread), nsh), m0f);     \
        const __m256i b3_ = _mm256_shuffle_epi8(q3, r_), b2_ = _mm256_shuffle_epi8(q2, r_);     \
        const __m256i wl_ = _mm256_unpacklo_epi8(b2_, b3_), wh_ = _mm256_unpackhi_epi8(b2_, b3_); \
        QLL = _mm256_castsi256_ps(_mm256_slli_epi32(wl_, 16));                                   \
        QLH = _mm256_castsi256_ps(_mm256_and_si256(wl_, mhi));                                   \
        QHL = _mm256_castsi256_ps(_mm256_slli_epi32(wh_, 16));                                   \
        QHH = _mm256_castsi256_ps(_mm256_and_si256(wh_, mhi));                                   \
    } while (0)

#define AVX2_ROW(C, SC, AL, AH)                                                                  \
    do {                                                                                         \
        __m256 qlL_, qlH_, qhL_, qhH_;                                                           \
        AVX2_Q((C) + 16 * g, qlL_, qlH_, qhL_, qhH_);                                            \
        __m256 S_ = _mm256_broadcast_ss(&neural_scale2[(SC)[g]]);                                \
        __m256 dl_ = _mm256_mul_ps(qlL_, zeL);                                                   \
        dl_ = _mm256_fmadd_ps(qhL_, zoL, dl_);                                                   \
        AL = _mm256_fmadd_ps(dl_, S_, AL);                                                       \
        __m256 dh_ = _mm256_mul_ps(qlH_, zeH);                                                   \
        dh_ = _mm256_fmadd_ps(qhH_, zoH, dh_);                                                   \
        AH = _mm256_fmadd_ps(dh_, S_, AH);                                                       \
    } while (0)

NEURAL_TARGET_AVX2 static void dot2_avx2(const uint8_t *c0, const uint8_t *c1, const uint8_t *s0,
                                         const uint8_t *s1, const float *z, int G, float *o0, float *o1) {
    const __m256i spread = _mm256_setr_epi8(0, 8, 1, 9, 2, 10, 3, 11, 0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14,
                                            7, 15, 4, 12, 5, 13, 6, 14, 7, 15);
    const __m256i nsh = _mm256_setr_epi64x(0, 4, 0, 4), m0f = _mm256_set1_epi8(0x0f);
    const __m256i mhi = _mm256_set1_epi32((int)0xffff0000u);
    const __m256i q3 = _mm256_broadcastsi128_si256(_mm_setr_epi8(0x00, 0x3f, 0x40, 0x40, 0x40, 0x40, 0x41, 0x41,
        (char)0x80, (char)0xbf, (char)0xc0, (char)0xc0, (char)0xc0, (char)0xc0, (char)0xc1, (char)0xc1));
    const __m256i q2 = _mm256_broadcastsi128_si256(_mm_setr_epi8(0x00, (char)0x80, 0x00, 0x40, (char)0x80, (char)0xc0,
        0x00, 0x40, 0x00, (char)0x80, 0x00, 0x40, (char)0x80, (char)0xc0, 0x00, 0x40));
    __m256 a0l = _mm256_setzero_ps(), a0h = _mm256_setzero_ps();
    __m256 a1l = _mm256_setzero_ps(), a1h = _mm256_setzero_ps();
    const int pfd = neural_prefetch_bytes;
    const uint8_t *pf = c0 + pfd, *pfs = s0 + pfd / 16;
    for (int g = 0; g < G; g++) {
        if (pfd && (g & 1) == 0) {
            _mm_prefetch((const char *)(pf + 32 * (size_t)g), _MM_HINT_T0);
            if ((g & 31) == 0) _mm_prefetch((const char *)(pfs + 2 * (size_t)g), _MM_HINT_T0);
        }
        const float *zg = z + 32 * g;
        const __m256 zeL = _mm256_loadu_ps(zg), zeH = _mm256_loadu_ps(zg + 8);
        const __m256 zoL = _mm256_loadu_ps(zg + 16), zoH = _mm256_loadu_ps(zg + 24);
        AVX2_ROW(c0, s0, a0l, a0h);
        AVX2_ROW(c1, s1, a1l, a1h);
    }
    *o0 = hsum8_avx2(a0l, a0h);
    *o1 = hsum8_avx2(a1l, a1h);
}

NEURAL_TARGET_AVX2 static void dot4_avx2(const uint8_t *const codes[4], const uint8_t *const sc[4],
                                         const float *z, const uint16_t *zb, int G, float out[4]) {
    (void)zb;
    dot2_avx2(codes[0], codes[1], sc[0], sc[1], z, G, &out[0], &out[1]);
    dot2_avx2(codes[2], codes[3], sc[2], sc[3], z, G, &out[2], &out[3]);
}

/* Multi-token: groups of 2-4 tokens; each row's blocks are decoded in registers (as dot2_avx2)
   and used at once by every token of the group (2 accumulators per token); whole dot products
   out[r][t] (the tree of hsum8). Against decoding 4 rows once into L1 and 4-row x 2-token tiles
   (the AVX-512 scheme) on Zen 2, MEASURED by bench/kernel/dot_rate.c with the data in L1, ns per
   block-row and token: 2 tokens 2.7-3.0 against 4.9, 4 tokens 1.9-2.0 against 2.7, 8 tokens
   2.1-2.4 against 2.5-2.6, 16 tokens 2.2-2.4 against 2.1-2.3; so the AVX2 path has no tiles. */
NEURAL_TARGET_AVX2 static NEURAL_INLINE void rowtok_avx2(const uint8_t *c, const uint8_t *sc, int G,
                                                         const float *const *z, float *out, const int NT) {
    const __m128i lut = _mm_loadu_si128((const __m128i *)neural_lut2_i8);
    const __m128i m0f = _mm_set1_epi8(0x0f);
    __m256 al[4], ah[4];
    NEURAL_UNROLL for (int t = 0; t < NT; t++) al[t] = ah[t] = _mm256_setzero_ps();
    const int pfd = neural_prefetch_bytes;
    for (int g = 0; g < G; g++) {
        if (pfd && (g & 3) == 0) _mm_prefetch((const char *)(c + 16 * (size_t)g + pfd), _MM_HINT_T0);
        __m128i b = _mm_loadu_si128((const __m128i *)(c + 16 * g));
        __m128i lo = _mm_shuffle_epi8(lut, _mm_and_si128(b, m0f));
        __m128i hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(b, 4), m0f));
        const __m256 S = _mm256_broadcast_ss(&neural_scale2[sc[g]]);
        const __m256 qlL = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
        const __m256 qlH = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(lo, lo)));
        const __m256 qhL = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
        const __m256 qhH = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(hi, hi)));
        NEURAL_UNROLL for (int t = 0; t < NT; t++) {
            const float *zg = z[t] + 32 * g;
            __m256 e = _mm256_fmadd_ps(qhL, _mm256_loadu_ps(zg + 16), _mm256_mul_ps(qlL, _mm256_loadu_ps(zg)));
            al[t] = _mm256_fmadd_ps(e, S, al[t]);
            e = _mm256_fmadd_ps(qhH, _mm256_loadu_ps(zg + 24), _mm256_mul_ps(qlH, _mm256_loadu_ps(zg + 8)));
            ah[t] = _mm256_fmadd_ps(e, S, ah[t]);
        }
    }
    NEURAL_UNROLL for (int t = 0; t < NT; t++) out[t] = hsum8_avx2(al[t], ah[t]);
}

NEURAL_TARGET_AVX2 static void rows4tok_avx2(const uint8_t *const codes[4], const uint8_t *const sc[4], int G,
                                             const void *const zv[4], int nt, float out[16]) {
    const float *z[4] = {(const float *)zv[0], (const float *)zv[nt > 1], (const float *)zv[nt > 2 ? 2 : 0],
                         (const float *)zv[nt > 3 ? 3 : 0]};
    for (int r = 0; r < 4; r++) {
        switch (nt) {
        case 4: rowtok_avx2(codes[r], sc[r], G, z, out + 4 * r, 4); break;
        case 3: rowtok_avx2(codes[r], sc[r], G, z, out + 4 * r, 3); break;
        default: rowtok_avx2(codes[r], sc[r], G, z, out + 4 * r, 2); break;
        }
    }
}

NEURAL_TARGET_AVX2 static uint64_t read_avx2(const uint8_t *p, size_t n) {
    __m256i x0 = _mm256_setzero_si256(), x1 = x0, x2 = x0, x3 = x0;
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        x0 = _mm256_xor_si256(x0, _mm256_loadu_si256((const __m256i *)(p + i)));
        x1 = _mm256_xor_si256(x1, _mm256_loadu_si256((const __m256i *)(p + i + 32)));
        x2 = _mm256_xor_si256(x2, _mm256_loadu_si256((const __m256i *)(p + i + 64)));
        x3 = _mm256_xor_si256(x3, _mm256_loadu_si256((const __m256i *)(p + i + 96)));
    }
    x0 = _mm256_xor_si256(_mm256_xor_si256(x0, x1), _mm256_xor_si256(x2, x3));
    uint64_t lanes[4];
    _mm256_storeu_si256((__m256i *)lanes, x0);
    return lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3] ^ read_scalar(p + i, n - i);
}

/* 8 bf16 -> 8 fp32 (exact: the bits shifted into the high half) */
#define BF16X8_AVX2(p) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))

/* gemv4w_scalar's order: accumulator k's 16 lanes in two ymm (a[k][0] lanes 0-7, a[k][1] lanes 8-15), 8 chains; one
   row after another, so one sequential stream */
NEURAL_TARGET_AVX2 static void gemv4w_avx2(const uint16_t *const w[4], const float *x, int n, float out[4]) {
    const int pfb = neural_prefetch_bytes > 0 ? neural_prefetch_bytes : 0;
    for (int r = 0; r < 4; r++) {
        const uint16_t *p = w[r];
        __m256 a[4][2];
        NEURAL_UNROLL for (int k = 0; k < 4; k++) a[k][0] = a[k][1] = _mm256_setzero_ps();
        int c = 0;
        for (; c + 64 <= n; c += 64) {
            if (pfb) {
                _mm_prefetch((const char *)(p + c) + pfb, _MM_HINT_T0);
                _mm_prefetch((const char *)(p + c) + pfb + 64, _MM_HINT_T0);
            }
            NEURAL_UNROLL for (int k = 0; k < 4; k++) {
                const int o = c + 16 * k;
                a[k][0] = _mm256_fmadd_ps(BF16X8_AVX2(p + o), _mm256_loadu_ps(x + o), a[k][0]);
                a[k][1] = _mm256_fmadd_ps(BF16X8_AVX2(p + o + 8), _mm256_loadu_ps(x + o + 8), a[k][1]);
            }
        }
        NEURAL_UNROLL for (int k = 0; k < 3; k++) /* the last 16-48 columns: accumulators 0.. in turn */
            if (c + 16 * k < n) {
                const int o = c + 16 * k;
                a[k][0] = _mm256_fmadd_ps(BF16X8_AVX2(p + o), _mm256_loadu_ps(x + o), a[k][0]);
                a[k][1] = _mm256_fmadd_ps(BF16X8_AVX2(p + o + 8), _mm256_loadu_ps(x + o + 8), a[k][1]);
            }
        const __m256 lo = _mm256_add_ps(_mm256_add_ps(a[0][0], a[1][0]), _mm256_add_ps(a[2][0], a[3][0]));
        const __m256 hi = _mm256_add_ps(_mm256_add_ps(a[0][1], a[1][1]), _mm256_add_ps(a[2][1], a[3][1]));
        out[r] = hsum8_avx2(lo, hi);
    }
}

NEURAL_TARGET_AVX2 static void pv8_avx2(const uint16_t *v, int t, int d, const float *p, size_t ps, float *acc) {
    for (int c0 = 0; c0 < d; c0 += 8) {
        __m256 a[8];
        NEURAL_UNROLL for (int j = 0; j < 8; j++) a[j] = _mm256_loadu_ps(acc + (size_t)j * (size_t)d + c0);
        for (int i = 0; i < t; i++) {
            const __m256 x = BF16X8_AVX2(v + (size_t)i * (size_t)d + c0);
            NEURAL_UNROLL for (int j = 0; j < 8; j++)
                a[j] = _mm256_add_ps(a[j], _mm256_mul_ps(_mm256_set1_ps(p[(size_t)j * ps + (size_t)i]), x));
        }
        NEURAL_UNROLL for (int j = 0; j < 8; j++) _mm256_storeu_ps(acc + (size_t)j * (size_t)d + c0, a[j]);
    }
}

/* lanes l < n set (n in 0..8): the tail of an 8-lane loop, for maskload/maskstore */
NEURAL_TARGET_AVX2 static inline __m256i mask8_avx2(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* 8 sums at once, each with hsum8_avx2's tree after its first add (v[r] = lo + hi): l + (l+4), then + 2, + 1; lane r
   of the result is the sum of v[r] */
NEURAL_TARGET_AVX2 static NEURAL_INLINE __m256 hsum8x8_avx2(const __m256 *v) {
    __m256 p[4], r[2];
    NEURAL_UNROLL for (int m = 0; m < 4; m++)
        p[m] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * m], v[2 * m + 1], 0x20),
                             _mm256_permute2f128_ps(v[2 * m], v[2 * m + 1], 0x31));
    NEURAL_UNROLL for (int n = 0; n < 2; n++)
        r[n] = _mm256_add_ps(_mm256_shuffle_ps(p[2 * n], p[2 * n + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(p[2 * n], p[2 * n + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m256 u = _mm256_add_ps(_mm256_shuffle_ps(r[0], r[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm256_shuffle_ps(r[0], r[1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm256_permutevar8x32_ps(u, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* Decode attention's scores on AVX2 (scores_bf16 in neural_internal.h), as scores_nc_avx512 in 8 keys: their rows
   converted to fp32 once for all g heads, two 8-lane accumulators per key (the 16-lane order), one batched tree per
   head and block. Through a 4-row GEMV per head (before session 24), each K row was converted g times and each sum
   had its own tree. */
NEURAL_TARGET_AVX2 static NEURAL_INLINE void scores_nc_avx2(const uint16_t *k, int t, int d, const float *q, int g,
                                                             float *s, size_t ss, const int nc) {
    float kf[8 * NEURAL_MAX_HEAD_DIM];
    for (int i0 = 0; i0 < t; i0 += 8) {
        const int nk = t - i0 < 8 ? t - i0 : 8;
        for (int r = 0; r < nk; r++) {
            const uint16_t *kr = k + (size_t)(i0 + r) * (size_t)d;
            NEURAL_UNROLL for (int c = 0; c < 2 * nc; c++) _mm256_storeu_ps(kf + r * d + 8 * c, BF16X8_AVX2(kr + 8 * c));
        }
        const __m256i keep = mask8_avx2(nk);
        for (int j = 0; j < g; j++) {
            const float *qj = q + (size_t)j * (size_t)d;
            __m256 v[8];
            NEURAL_UNROLL for (int r = 0; r < 8; r++) {
                __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
                if (r < nk)
                    NEURAL_UNROLL for (int c = 0; c < nc; c++) {
                        lo = _mm256_fmadd_ps(_mm256_loadu_ps(kf + r * d + 16 * c), _mm256_loadu_ps(qj + 16 * c), lo);
                        hi = _mm256_fmadd_ps(_mm256_loadu_ps(kf + r * d + 16 * c + 8), _mm256_loadu_ps(qj + 16 * c + 8),
                                             hi);
                    }
                v[r] = _mm256_add_ps(lo, hi);
            }
            const __m256 sum = hsum8x8_avx2(v);
            if (nk == 8)
                _mm256_storeu_ps(s + (size_t)j * ss + (size_t)i0, sum);
            else
                _mm256_maskstore_ps(s + (size_t)j * ss + (size_t)i0, keep, sum);
        }
    }
}

NEURAL_TARGET_AVX2 static void scores_avx2(const uint16_t *k, int t, int d, const float *q, int g, float *s,
                                           size_t ss) {
    switch (d) {
    case 64: scores_nc_avx2(k, t, d, q, g, s, ss, 4); break;
    case 128: scores_nc_avx2(k, t, d, q, g, s, ss, 8); break;
    default: scores_nc_avx2(k, t, d, q, g, s, ss, d / 16); break;
    }
}

/* neural_expf of 8 lanes: expf16_avx512's operations (the same constants and order, no contraction) with blends
   for its masks */
NEURAL_TARGET_AVX2 static inline __m256 expf8_avx2(const __m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    const __m256 over = _mm256_cmp_ps(x, _mm256_set1_ps(NEURAL_EXPF_MAX), _CMP_GT_OQ);
    const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(NEURAL_EXPF_MIN), _CMP_LT_OQ);
    const __m256 t = _mm256_mul_ps(x, _mm256_set1_ps(NEURAL_EXPF_LOG2E));
    const __m256 big = _mm256_set1_ps(NEURAL_EXPF_ROUND);
    const __m256 n = _mm256_sub_ps(_mm256_add_ps(t, big), big);
    __m256 r = _mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(NEURAL_EXPF_LN2_HI)));
    r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(NEURAL_EXPF_LN2_LO)));
    __m256 p = _mm256_set1_ps(NEURAL_EXPF_P7);
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(NEURAL_EXPF_P6));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(NEURAL_EXPF_P5));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(NEURAL_EXPF_P4));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(NEURAL_EXPF_P3));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(0.5f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), one);
    p = _mm256_add_ps(_mm256_mul_ps(p, r), one);
    const __m256i ni = _mm256_cvttps_epi32(n);                                         /* (int)n */
    const __m256i n1 = _mm256_srai_epi32(_mm256_add_epi32(ni, _mm256_srli_epi32(ni, 31)), 1); /* ni / 2 */
    const __m256i n2 = _mm256_sub_epi32(ni, n1), b127 = _mm256_set1_epi32(127);
    const __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, b127), 23));
    const __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, b127), 23));
    __m256 e = _mm256_mul_ps(_mm256_mul_ps(p, p1), p2);
    e = _mm256_blendv_ps(e, _mm256_setzero_ps(), under);
    e = _mm256_blendv_ps(e, _mm256_set1_ps(HUGE_VALF), over);
    return _mm256_blendv_ps(e, _mm256_add_ps(x, x), nan);
}

/* att_exp_avx512 in 8 lanes (vmaxps has the same NaN and zero rule), a last partial vector masked. On an AVX2
   table the scalar loops were most of a decode token's attention at depth. */
NEURAL_TARGET_AVX2 static float att_exp_avx2(float *s, int t, float scale, float sink) {
    const __m256 sc = _mm256_set1_ps(scale);
    __m256 mv = _mm256_set1_ps(sink);
    int i = 0;
    for (; i + 8 <= t; i += 8) {
        const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(s + i), sc);
        _mm256_storeu_ps(s + i, x);
        mv = _mm256_max_ps(x, mv);
    }
    const __m256i tail = mask8_avx2(t - i);
    if (i < t) {
        const __m256 x = _mm256_mul_ps(_mm256_maskload_ps(s + i, tail), sc);
        _mm256_maskstore_ps(s + i, tail, x);
        mv = _mm256_blendv_ps(mv, _mm256_max_ps(x, mv), _mm256_castsi256_ps(tail));
    }
    float lanes[8], m = sink;
    _mm256_storeu_ps(lanes, mv);
    for (int l = 0; l < 8; l++) m = lanes[l] > m ? lanes[l] : m;
    const __m256 mm = _mm256_set1_ps(m);
    for (i = 0; i + 8 <= t; i += 8) _mm256_storeu_ps(s + i, expf8_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + i), mm)));
    if (i < t) _mm256_maskstore_ps(s + i, tail, expf8_avx2(_mm256_sub_ps(_mm256_maskload_ps(s + i, tail), mm)));
    return m;
}

/* round_bf16_avx512 in 8 lanes, a last partial vector masked (mag has no sign bit, so the signed compares order it as
   unsigned) */
NEURAL_TARGET_AVX2 static void round_bf16_avx2(float *p, int n) {
    const __m256i absm = _mm256_set1_epi32(0x7FFFFFFF), one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7FFF);
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u), sign = _mm256_set1_epi32((int)0x80000000u);
    const __m256i quiet = _mm256_set1_epi32(0x00400000), inf = _mm256_set1_epi32(0x7F800000);
    const __m256i small = _mm256_set1_epi32(0x04800000);
    for (int i = 0; i < n; i += 8) {
        const __m256i k = mask8_avx2(n - i);
        const __m256i u = _mm256_castps_si256(_mm256_maskload_ps(p + i, k));
        const __m256i mag = _mm256_and_si256(u, absm);
        const __m256i nan = _mm256_cmpgt_epi32(mag, inf), tiny = _mm256_cmpgt_epi32(small, mag);
        const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
        __m256i r = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(half, odd)), hi);
        r = _mm256_blendv_epi8(r, _mm256_and_si256(u, sign), tiny);
        r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_and_si256(u, hi), quiet), nan);
        _mm256_maskstore_ps(p + i, k, _mm256_castsi256_ps(r));
    }
}

const neural_kernels neural_kernels_avx2 = {2, dot4_avx2, NULL, NULL, 0, rows4tok_avx2, read_avx2, NULL, NULL,
                                            pv8_avx2, NULL, scores_avx2, att_exp_avx2, round_bf16_avx2, gemv4w_avx2, 0};

/* ------------------------------------------------------------------------------------------ */
/* AVX-512: one block = one zmm of 16 lanes; codes -> q with vpermps on the nibble (low 4 bits) */

NEURAL_TARGET_AVX512 static inline float hsum16_avx512(__m512 v) {
    __m256 lo = _mm512_castps512_ps256(v);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    return hsum8_avx2(lo, hi);
}

/* The register paths' prefetch: two rows' codes pfd bytes ahead of block g. A macro: the same code as a static
   inline function (inlined, no call left) ran 1.7x slower at 2 tokens in rowpair_avx512bf16 on the Zen 4 VM
   (0.53 -> 0.90 ms a group, session 32). */
#define PREFETCH_ROWPAIR(c0, c1, g, pfd)                                                   \
    (_mm_prefetch((const char *)((c0) + 16 * (size_t)(g) + (pfd)), _MM_HINT_T0),          \
     _mm_prefetch((const char *)((c1) + 16 * (size_t)(g) + (pfd)), _MM_HINT_T0))

/* One line of a 4-row group's code stream per block step, and every 16th step one line of its
   scale rows, pfd bytes ahead. */
static inline void prefetch_step(const uint8_t *pf, const uint8_t *pfs, int g) {
    _mm_prefetch((const char *)(pf + 64 * (size_t)g), _MM_HINT_T0);
    if ((g & 15) == 0) _mm_prefetch((const char *)(pfs + 4 * (size_t)g), _MM_HINT_T0);
}

NEURAL_TARGET_AVX512 static inline void hsum4_avx512(__m512 a0, __m512 a1, __m512 a2, __m512 a3, float out[4]) {
    out[0] = hsum16_avx512(a0);
    out[1] = hsum16_avx512(a1);
    out[2] = hsum16_avx512(a2);
    out[3] = hsum16_avx512(a3);
}

#define AVX512_ROW(C, SC, A)                                                                      \
    do {                                                                                          \
        __m512i v_ = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)((C) + 16 * g)));     \
        __m512 d_ = _mm512_mul_ps(_mm512_permutexvar_ps(v_, lut), ze);                            \
        d_ = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v_, 4), lut), zo, d_);      \
        A = _mm512_fmadd_ps(d_, _mm512_set1_ps(neural_scale2[(SC)[g]]), A);                       \
    } while (0)

NEURAL_TARGET_AVX512 static void dot4_avx512(const uint8_t *const codes[4], const uint8_t *const sc[4],
                                             const float *z, const uint16_t *zb, int G, float out[4]) {
    (void)zb;
    const __m512 lut = _mm512_loadu_ps(neural_lut2);
    const uint8_t *c0 = codes[0], *c1 = codes[1], *c2 = codes[2], *c3 = codes[3];
    const uint8_t *s0 = sc[0], *s1 = sc[1], *s2 = sc[2], *s3 = sc[3];
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const int pfd = neural_prefetch_bytes;
    const uint8_t *pf = c0 + pfd, *pfs = s0 + pfd / 16;
    for (int g = 0; g < G; g++) {
        if (pfd) prefetch_step(pf, pfs, g);
        const __m512 ze = _mm512_loadu_ps(z + 32 * g), zo = _mm512_loadu_ps(z + 32 * g + 16);
        AVX512_ROW(c0, s0, a0);
        AVX512_ROW(c1, s1, a1);
        AVX512_ROW(c2, s2, a2);
        AVX512_ROW(c3, s3, a3);
    }
    hsum4_avx512(a0, a1, a2, a3, out);
}

/* Multi-token: q of 4 rows decoded once per block (vpermps from the nibbles, as dot4), then
   4 rows x up to 4 tokens of register accumulators (16 zmm) per pass. */
NEURAL_TARGET_AVX512 static void decode4_avx512(const uint8_t *const codes[4], const uint8_t *const sc[4], int g0,
                                                int nb, void *qv, float *S) {
    const __m512 lut = _mm512_loadu_ps(neural_lut2);
    const int pfd = neural_prefetch_bytes;
    float *q = (float *)qv;
    for (int i = 0; i < 4; i++) {
        const uint8_t *c = codes[i] + 16 * (size_t)g0;
        for (int g = 0; g < nb; g++) {
            if (pfd && (g & 3) == 0) _mm_prefetch((const char *)(c + 16 * (size_t)g + pfd), _MM_HINT_T0);
            __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(c + 16 * g)));
            float *d = q + 32 * ((size_t)i * nb + g);
            _mm512_storeu_ps(d, _mm512_permutexvar_ps(v, lut));
            _mm512_storeu_ps(d + 16, _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut));
            S[i * nb + g] = neural_scale2[sc[i][g0 + g]];
        }
    }
}

NEURAL_TARGET_AVX512 static NEURAL_INLINE void tile_avx512(const float *q, const float *S, int nb,
                                                           const void *const *zv, float *acc, const int NT) {
    __m512 a[4][4];
    NEURAL_UNROLL for (int r = 0; r < 4; r++) NEURAL_UNROLL for (int t = 0; t < NT; t++)
        a[r][t] = _mm512_loadu_ps(acc + r * NEURAL_TOK_ACC_ROW + 16 * t);
    for (int g = 0; g < nb; g++) {
        __m512 ze[4], zo[4];
        NEURAL_UNROLL for (int t = 0; t < NT; t++) {
            const float *zg = (const float *)zv[t] + 32 * g;
            ze[t] = _mm512_loadu_ps(zg);
            zo[t] = _mm512_loadu_ps(zg + 16);
        }
        NEURAL_UNROLL for (int r = 0; r < 4; r++) {
            const float *d = q + 32 * ((size_t)r * nb + g);
            const __m512 ql = _mm512_loadu_ps(d), qh = _mm512_loadu_ps(d + 16);
            const __m512 sv = _mm512_set1_ps(S[r * nb + g]);
            NEURAL_UNROLL for (int t = 0; t < NT; t++) {
                __m512 e = _mm512_fmadd_ps(qh, zo[t], _mm512_mul_ps(ql, ze[t]));
                a[r][t] = _mm512_fmadd_ps(e, sv, a[r][t]);
            }
        }
    }
    NEURAL_UNROLL for (int r = 0; r < 4; r++) NEURAL_UNROLL for (int t = 0; t < NT; t++)
        _mm512_storeu_ps(acc + r * NEURAL_TOK_ACC_ROW + 16 * t, a[r][t]);
}

NEURAL_TARGET_AVX512 static void tile4_avx512(const void *qv, const float *S, int nb, const void *const zv[4], int nt,
                                              float *acc) {
    const float *q = (const float *)qv;
    switch (nt) {
    case 4: tile_avx512(q, S, nb, zv, acc, 4); break;
    case 3: tile_avx512(q, S, nb, zv, acc, 3); break;
    case 2: tile_avx512(q, S, nb, zv, acc, 2); break;
    default: tile_avx512(q, S, nb, zv, acc, 1); break;
    }
}

/* Multi-token, few tokens: two rows at a time decoded in registers (vpermps, as dot4) and used at
   once by every token of the group, as rows4tok_avx2; the same operations as tile_avx512, so the
   same bits. Up to ~20 tokens this beats decoding 4 rows into L1 for the tiles (the q round trip
   and the scratch cost more than decoding each row again per group of 4 tokens): `neural bench
   kernel --threads 2 --tokens ...` on the 2-core AVX-512 VM, old and new A B B A, ms per expert
   call: 2 tokens 2.02 -> 1.12, 4 tokens 2.45 -> 1.50, 8 tokens 3.62 -> 2.74, 16 tokens
   5.85 -> 5.20, 24 tokens 7.8 both, 32 tokens 10.2 -> 10.7 (MEASURED): NEURAL_ROWS_TOK_MAX 20. */
NEURAL_TARGET_AVX512 static NEURAL_INLINE void rowpair_avx512(const uint8_t *c0, const uint8_t *c1, const uint8_t *s0,
                                                              const uint8_t *s1, int G, const float *const *z,
                                                              float *o0, float *o1, const int NT) {
    const __m512 lut = _mm512_loadu_ps(neural_lut2);
    __m512 a0[4], a1[4];
    NEURAL_UNROLL for (int t = 0; t < NT; t++) a0[t] = a1[t] = _mm512_setzero_ps();
    const int pfd = neural_prefetch_bytes;
    for (int g = 0; g < G; g++) {
        if (pfd) PREFETCH_ROWPAIR(c0, c1, g, pfd);
        const __m512i v0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(c0 + 16 * g)));
        const __m512i v1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(c1 + 16 * g)));
        const __m512 ql0 = _mm512_permutexvar_ps(v0, lut), qh0 = _mm512_permutexvar_ps(_mm512_srli_epi32(v0, 4), lut);
        const __m512 ql1 = _mm512_permutexvar_ps(v1, lut), qh1 = _mm512_permutexvar_ps(_mm512_srli_epi32(v1, 4), lut);
        const __m512 S0 = _mm512_set1_ps(neural_scale2[s0[g]]), S1 = _mm512_set1_ps(neural_scale2[s1[g]]);
        NEURAL_UNROLL for (int t = 0; t < NT; t++) {
            const float *zg = z[t] + 32 * g;
            const __m512 ze = _mm512_loadu_ps(zg), zo = _mm512_loadu_ps(zg + 16);
            a0[t] = _mm512_fmadd_ps(_mm512_fmadd_ps(qh0, zo, _mm512_mul_ps(ql0, ze)), S0, a0[t]);
            a1[t] = _mm512_fmadd_ps(_mm512_fmadd_ps(qh1, zo, _mm512_mul_ps(ql1, ze)), S1, a1[t]);
        }
    }
    NEURAL_UNROLL for (int t = 0; t < NT; t++) {
        o0[t] = hsum16_avx512(a0[t]);
        o1[t] = hsum16_avx512(a1[t]);
    }
}

/* Groups of 2-3 tokens: all four rows in one pass, so 8-12 accumulator chains instead of a row pair's 4-6 (a chain
   gets one fma a block: with fewer than ~8 the fma latency, not the ports, sets the pace). Each (row, token) sees
   rowpair_avx512's operations in its order: the same bits. `bench/kernel/tokens_ab.py --isa avx512 --threads 2` on
   the Zen 4 VM, row pairs -> row quads, ms a group, two pairs: 2 tokens 0.565 / 0.571 -> 0.482 / 0.486, 3 tokens
   0.681 / 0.688 -> 0.592 / 0.591, 5 tokens 0.961 / 0.970 -> 0.862 / 0.865, 6 tokens 1.086 / 1.074 -> 0.976 / 0.976,
   8 tokens (groups of 4: row pairs both) 1.427 / 1.428 -> 1.410 / 1.408 (MEASURED, session 32; Intel unmeasured). */
NEURAL_TARGET_AVX512 static NEURAL_INLINE void rowquad_avx512(const uint8_t *const c[4], const uint8_t *const s[4],
                                                              int G, const float *const *z, float out[16],
                                                              const int NT) {
    const __m512 lut = _mm512_loadu_ps(neural_lut2);
    __m512 a[4][3];
    NEURAL_UNROLL for (int r = 0; r < 4; r++) NEURAL_UNROLL for (int t = 0; t < NT; t++) a[r][t] = _mm512_setzero_ps();
    const int pfd = neural_prefetch_bytes;
    for (int g = 0; g < G; g++) {
        if (pfd) PREFETCH_ROWPAIR(c[0], c[1], g, pfd), PREFETCH_ROWPAIR(c[2], c[3], g, pfd);
        __m512 ze[3], zo[3];
        NEURAL_UNROLL for (int t = 0; t < NT; t++) {
            ze[t] = _mm512_loadu_ps(z[t] + 32 * (size_t)g);
            zo[t] = _mm512_loadu_ps(z[t] + 32 * (size_t)g + 16);
        }
        NEURAL_UNROLL for (int r = 0; r < 4; r++) {
            const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(c[r] + 16 * g)));
            const __m512 ql = _mm512_permutexvar_ps(v, lut), qh = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut);
            const __m512 S = _mm512_set1_ps(neural_scale2[s[r][g]]);
            NEURAL_UNROLL for (int t = 0; t < NT; t++)
                a[r][t] = _mm512_fmadd_ps(_mm512_fmadd_ps(qh, zo[t], _mm512_mul_ps(ql, ze[t])), S, a[r][t]);
        }
    }
    NEURAL_UNROLL for (int r = 0; r < 4; r++) NEURAL_UNROLL for (int t = 0; t < NT; t++)
        out[4 * r + t] = hsum16_avx512(a[r][t]);
}

/* rows4tok on AVX-512: groups of 2-3 tokens through the row quad (NT a constant for the unrolled loops), 4 through
   two row pairs */
#define ROWS4TOK_AVX512(quad, pair)                                                                             \
    do {                                                                                                        \
        if (nt == 3)                                                                                            \
            quad(codes, sc, G, z, out, 3);                                                                      \
        else if (nt < 3)                                                                                        \
            quad(codes, sc, G, z, out, 2);                                                                      \
        else                                                                                                    \
            for (int r = 0; r < 4; r += 2)                                                                      \
                pair(codes[r], codes[r + 1], sc[r], sc[r + 1], G, z, out + 4 * r, out + 4 * r + 4, 4);          \
    } while (0)

NEURAL_TARGET_AVX512 static void rows4tok_avx512(const uint8_t *const codes[4], const uint8_t *const sc[4], int G,
                                               const void *const zv[4], int nt, float out[16]) {
    const float *z[4] = {(const float *)zv[0], (const float *)zv[nt > 1], (const float *)zv[nt > 2 ? 2 : 0],
                         (const float *)zv[nt > 3 ? 3 : 0]};
    ROWS4TOK_AVX512(rowquad_avx512, rowpair_avx512);
}

NEURAL_TARGET_AVX512 static uint64_t read_avx512(const uint8_t *p, size_t n) {
    __m512i x0 = _mm512_setzero_si512(), x1 = x0, x2 = x0, x3 = x0;
    size_t i = 0;
    for (; i + 256 <= n; i += 256) {
        x0 = _mm512_xor_si512(x0, _mm512_loadu_si512((const void *)(p + i)));
        x1 = _mm512_xor_si512(x1, _mm512_loadu_si512((const void *)(p + i + 64)));
        x2 = _mm512_xor_si512(x2, _mm512_loadu_si512((const void *)(p + i + 128)));
        x3 = _mm512_xor_si512(x3, _mm512_loadu_si512((const void *)(p + i + 192)));
    }
    x0 = _mm512_xor_si512(_mm512_xor_si512(x0, x1), _mm512_xor_si512(x2, x3));
    uint64_t lanes[8];
    _mm512_storeu_si512((void *)lanes, x0);
    uint64_t s = 0;
    for (int l = 0; l < 8; l++) s ^= lanes[l];
    return s ^ read_scalar(p + i, n - i);
}

/* neural_expf of 16 lanes, operation for operation (same constants, same order, no contraction; the
   special cases as masks) */
NEURAL_TARGET_AVX512 static inline __m512 expf16_avx512(const __m512 x) {
    const __m512 one = _mm512_set1_ps(1.0f);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    const __mmask16 over = _mm512_cmp_ps_mask(x, _mm512_set1_ps(NEURAL_EXPF_MAX), _CMP_GT_OQ);
    const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(NEURAL_EXPF_MIN), _CMP_LT_OQ);
    const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(NEURAL_EXPF_LOG2E));
    const __m512 big = _mm512_set1_ps(NEURAL_EXPF_ROUND);
    const __m512 n = _mm512_sub_ps(_mm512_add_ps(t, big), big);
    __m512 r = _mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(NEURAL_EXPF_LN2_HI)));
    r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(NEURAL_EXPF_LN2_LO)));
    __m512 p = _mm512_set1_ps(NEURAL_EXPF_P7);
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(NEURAL_EXPF_P6));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(NEURAL_EXPF_P5));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(NEURAL_EXPF_P4));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(NEURAL_EXPF_P3));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(0.5f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), one);
    p = _mm512_add_ps(_mm512_mul_ps(p, r), one);
    const __m512i ni = _mm512_cvttps_epi32(n);                                         /* (int)n */
    const __m512i n1 = _mm512_srai_epi32(_mm512_add_epi32(ni, _mm512_srli_epi32(ni, 31)), 1); /* ni / 2 */
    const __m512i n2 = _mm512_sub_epi32(ni, n1), b127 = _mm512_set1_epi32(127);
    const __m512 p1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, b127), 23));
    const __m512 p2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, b127), 23));
    __m512 e = _mm512_mul_ps(_mm512_mul_ps(p, p1), p2);
    e = _mm512_mask_blend_ps(under, e, _mm512_setzero_ps());
    e = _mm512_mask_blend_ps(over, e, _mm512_set1_ps(HUGE_VALF));
    return _mm512_mask_blend_ps(nan, e, _mm512_add_ps(x, x));
}

NEURAL_TARGET_AVX512 static void exp16_avx512(const float *x, float *out) {
    _mm512_storeu_ps(out, expf16_avx512(_mm512_loadu_ps(x)));
}

/* SwiGLU of 16 gate/up pairs: the scalar swiglu() and neural_expf() of neural_experts.c operation
   for operation (same constants, same order, no contraction; the special cases as masks), so the
   bits are the same; a few per cent of a token on the Xeon host went to the scalar loop. */
NEURAL_TARGET_AVX512 static void swiglu16_avx512(const float *h, float limit, float alpha, float *a) {
    const __m512i ie = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i io = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    const __m512 v0 = _mm512_loadu_ps(h), v1 = _mm512_loadu_ps(h + 16);
    __m512 g = _mm512_permutex2var_ps(v0, ie, v1), u = _mm512_permutex2var_ps(v0, io, v1);
    const __m512 lim = _mm512_set1_ps(limit), nlim = _mm512_set1_ps(-limit), one = _mm512_set1_ps(1.0f);
    g = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(g, lim, _CMP_GT_OQ), g, lim);
    const __mmask16 hi = _mm512_cmp_ps_mask(u, lim, _CMP_GT_OQ), lo = _mm512_cmp_ps_mask(u, nlim, _CMP_LT_OQ);
    u = _mm512_mask_blend_ps(hi, _mm512_mask_blend_ps(lo, u, nlim), lim);
    /* x = -(alpha * g); exp(x) as neural_expf */
    const __m512 x = _mm512_castsi512_ps(_mm512_xor_si512(
        _mm512_castps_si512(_mm512_mul_ps(_mm512_set1_ps(alpha), g)), _mm512_set1_epi32((int)0x80000000u)));
    const __m512 e = expf16_avx512(x);
    const __m512 sig = _mm512_div_ps(one, _mm512_add_ps(one, e));
    _mm512_storeu_ps(a, _mm512_mul_ps(_mm512_mul_ps(g, sig), _mm512_add_ps(u, one)));
}

#define BF16X16_AVX512(p) \
    _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p))), 16))

/* gemv4w_scalar's order, one row after another (one sequential stream), four chains a row. Against one chain a row
   (the Zen 4 table's loop before): 36-39 against 31-36 GB/s at 1 thread, 47-48 against 44-47 at 2, the software
   prefetch a further 1.06x (2880 x 4096 matrices from DRAM, the 2-core Zen 4 VM, session 29, bench.kernel.gemv_isa;
   MEASURED). The Intel table's 4 interleaved rows (4 streams restarting every group) read 48 against the one-chain
   loop's 60 there in a faster window; Intel hosts had not run this loop by session 29. */
NEURAL_TARGET_AVX512 static void gemv4w_avx512(const uint16_t *const w[4], const float *x, int n, float out[4]) {
    __m512 v[4];
    const int pfb = neural_prefetch_bytes > 0 ? neural_prefetch_bytes : 0;
    for (int r = 0; r < 4; r++) {
        const uint16_t *p = w[r];
        __m512 a[4];
        NEURAL_UNROLL for (int k = 0; k < 4; k++) a[k] = _mm512_setzero_ps();
        int c = 0;
        for (; c + 64 <= n; c += 64) {
            if (pfb) {
                _mm_prefetch((const char *)(p + c) + pfb, _MM_HINT_T0);
                _mm_prefetch((const char *)(p + c) + pfb + 64, _MM_HINT_T0);
            }
            NEURAL_UNROLL for (int k = 0; k < 4; k++)
                a[k] = _mm512_fmadd_ps(BF16X16_AVX512(p + c + 16 * k), _mm512_loadu_ps(x + c + 16 * k), a[k]);
        }
        NEURAL_UNROLL for (int k = 0; k < 3; k++) /* the last 16-48 columns: accumulators 0.. in turn */
            if (c + 16 * k < n)
                a[k] = _mm512_fmadd_ps(BF16X16_AVX512(p + c + 16 * k), _mm512_loadu_ps(x + c + 16 * k), a[k]);
        v[r] = _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]));
    }
    hsum4_avx512(v[0], v[1], v[2], v[3], out);
}

NEURAL_TARGET_AVX512 static void pv8_avx512(const uint16_t *v, int t, int d, const float *p, size_t ps, float *acc) {
    int c0 = 0;
    for (; c0 + 32 <= d; c0 += 32) { /* 16 accumulators + 2 rows in registers */
        __m512 a[8], b[8];
        NEURAL_UNROLL for (int j = 0; j < 8; j++) {
            a[j] = _mm512_loadu_ps(acc + (size_t)j * (size_t)d + c0);
            b[j] = _mm512_loadu_ps(acc + (size_t)j * (size_t)d + c0 + 16);
        }
        for (int i = 0; i < t; i++) {
            const uint16_t *vr = v + (size_t)i * (size_t)d + c0;
            const __m512 x0 = BF16X16_AVX512(vr), x1 = BF16X16_AVX512(vr + 16);
            NEURAL_UNROLL for (int j = 0; j < 8; j++) {
                const __m512 pj = _mm512_set1_ps(p[(size_t)j * ps + (size_t)i]);
                a[j] = _mm512_add_ps(a[j], _mm512_mul_ps(pj, x0));
                b[j] = _mm512_add_ps(b[j], _mm512_mul_ps(pj, x1));
            }
        }
        NEURAL_UNROLL for (int j = 0; j < 8; j++) {
            _mm512_storeu_ps(acc + (size_t)j * (size_t)d + c0, a[j]);
            _mm512_storeu_ps(acc + (size_t)j * (size_t)d + c0 + 16, b[j]);
        }
    }
    for (; c0 < d; c0 += 16) {
        __m512 a[8];
        NEURAL_UNROLL for (int j = 0; j < 8; j++) a[j] = _mm512_loadu_ps(acc + (size_t)j * (size_t)d + c0);
        for (int i = 0; i < t; i++) {
            const __m512 x0 = BF16X16_AVX512(v + (size_t)i * (size_t)d + c0);
            NEURAL_UNROLL for (int j = 0; j < 8; j++)
                a[j] = _mm512_add_ps(a[j], _mm512_mul_ps(_mm512_set1_ps(p[(size_t)j * ps + (size_t)i]), x0));
        }
        NEURAL_UNROLL for (int j = 0; j < 8; j++) _mm512_storeu_ps(acc + (size_t)j * (size_t)d + c0, a[j]);
    }
}

/* 16 sums at once, each with hsum16's tree (l + (l+8), then + 4, + 2, + 1): lane v of the result is hsum16(v[v]).
   Pairs are combined by 128-bit block shuffles, then 64-bit and 32-bit ones; lane 4b + i of the last sum
   holds v[b + 4i], put back in order by one permute. */
NEURAL_TARGET_AVX512 static NEURAL_INLINE __m512 hsum16x16_avx512(const __m512 *v) {
    __m512 p[8], r[4], t[2];
    NEURAL_UNROLL for (int m = 0; m < 8; m++)
        p[m] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * m], v[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(v[2 * m], v[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    NEURAL_UNROLL for (int n = 0; n < 4; n++)
        r[n] = _mm512_add_ps(_mm512_shuffle_f32x4(p[2 * n], p[2 * n + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(p[2 * n], p[2 * n + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    NEURAL_UNROLL for (int n = 0; n < 2; n++) {
        const __m512d a = _mm512_castps_pd(r[2 * n]), b = _mm512_castps_pd(r[2 * n + 1]);
        t[n] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    const __m512 u = _mm512_add_ps(_mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), u);
}

/* Blocks of 16 keys: their rows converted to fp32 once (kf, in L1) for all g heads; per head the 16 keys' lane
   sums stay in registers, one tree gives their 16 scores, one store (masked for a last short block). */
NEURAL_TARGET_AVX512 static NEURAL_INLINE void scores_nc_avx512(const uint16_t *k, int t, int d, const float *q, int g,
                                                                 float *s, size_t ss, const int nc) {
    float kf[16 * NEURAL_MAX_HEAD_DIM];
    for (int i0 = 0; i0 < t; i0 += 16) {
        const int nk = t - i0 < 16 ? t - i0 : 16;
        for (int r = 0; r < nk; r++) {
            const uint16_t *kr = k + (size_t)(i0 + r) * (size_t)d;
            NEURAL_UNROLL for (int c = 0; c < nc; c++)
                _mm512_storeu_ps(kf + 16 * (r * nc + c), BF16X16_AVX512(kr + 16 * c));
        }
        for (int j = 0; j < g; j++) {
            const float *qj = q + (size_t)j * (size_t)d;
            __m512 a[16];
            NEURAL_UNROLL for (int r = 0; r < 16; r++) {
                a[r] = _mm512_setzero_ps();
                if (r < nk)
                    NEURAL_UNROLL for (int c = 0; c < nc; c++)
                        a[r] = _mm512_fmadd_ps(_mm512_loadu_ps(kf + 16 * (r * nc + c)), _mm512_loadu_ps(qj + 16 * c), a[r]);
            }
            const __m512 sum = hsum16x16_avx512(a);
            if (nk == 16)
                _mm512_storeu_ps(s + (size_t)j * ss + (size_t)i0, sum);
            else
                _mm512_mask_storeu_ps(s + (size_t)j * ss + (size_t)i0, (__mmask16)((1u << nk) - 1u), sum);
        }
    }
}

NEURAL_TARGET_AVX512 static void scores_avx512(const uint16_t *k, int t, int d, const float *q, int g, float *s,
                                               size_t ss) {
    switch (d / 16) { /* a row's vectors known at compile time, the loops unrolled: gpt-oss has d = 64 */
    case 4: scores_nc_avx512(k, t, d, q, g, s, ss, 4); break;
    case 8: scores_nc_avx512(k, t, d, q, g, s, ss, 8); break;
    default: scores_nc_avx512(k, t, d, q, g, s, ss, d / 16); break;
    }
}

/* Decode attention's softmax of one head (att_exp in neural_internal.h), which ran as scalar loops: 37% of a 4,096-key
   layer at 1 thread (perf, Sapphire Rapids VM, session 23). vmaxps(s, m) returns m when s is NaN or when both are
   zeros, which is the scalar loop's s > m ? s : m lane by lane; the lanes then meet in another order, which can
   only change the sign of a zero maximum, and x - (+0) and x - (-0) have the same exponential. */
NEURAL_TARGET_AVX512 static float att_exp_avx512(float *s, int t, float scale, float sink) {
    const __m512 sc = _mm512_set1_ps(scale);
    __m512 mv = _mm512_set1_ps(sink);
    int i = 0;
    for (; i + 16 <= t; i += 16) {
        const __m512 x = _mm512_mul_ps(_mm512_loadu_ps(s + i), sc);
        _mm512_storeu_ps(s + i, x);
        mv = _mm512_max_ps(x, mv);
    }
    const __mmask16 tail = (__mmask16)((1u << (t - i)) - 1u);
    if (tail) {
        const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, s + i), sc);
        _mm512_mask_storeu_ps(s + i, tail, x);
        mv = _mm512_mask_max_ps(mv, tail, x, mv);
    }
    float lanes[16], m = sink;
    _mm512_storeu_ps(lanes, mv);
    for (int l = 0; l < 16; l++) m = lanes[l] > m ? lanes[l] : m;
    const __m512 mm = _mm512_set1_ps(m);
    for (i = 0; i + 16 <= t; i += 16) _mm512_storeu_ps(s + i, expf16_avx512(_mm512_sub_ps(_mm512_loadu_ps(s + i), mm)));
    if (tail) _mm512_mask_storeu_ps(s + i, tail, expf16_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, s + i), mm)));
    return m;
}

/* to_bf16 then back to fp32, 16 at a time, with its three cases as masks */
NEURAL_TARGET_AVX512 static void round_bf16_avx512(float *p, int n) {
    const __m512i absm = _mm512_set1_epi32(0x7FFFFFFF), one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7FFF);
    const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u), sign = _mm512_set1_epi32((int)0x80000000u);
    const __m512i quiet = _mm512_set1_epi32(0x00400000);
    for (int i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
        const __m512i u = _mm512_castps_si512(_mm512_maskz_loadu_ps(k, p + i));
        const __m512i mag = _mm512_and_si512(u, absm);
        const __mmask16 nan = _mm512_cmpgt_epu32_mask(mag, _mm512_set1_epi32(0x7F800000));
        const __mmask16 tiny = _mm512_cmplt_epu32_mask(mag, _mm512_set1_epi32(0x04800000));
        const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
        __m512i r = _mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(half, odd)), hi);
        r = _mm512_mask_blend_epi32(tiny, r, _mm512_and_si512(u, sign));
        r = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(_mm512_and_si512(u, hi), quiet));
        _mm512_mask_storeu_ps(p + i, k, _mm512_castsi512_ps(r));
    }
}

const neural_kernels neural_kernels_avx512 = {3, dot4_avx512, decode4_avx512, tile4_avx512, 0, rows4tok_avx512,
                                              read_avx512, swiglu16_avx512, NULL, pv8_avx512, exp16_avx512,
                                              scores_avx512, att_exp_avx512, round_bf16_avx512, gemv4w_avx512,
                                              NEURAL_ROWS_TOK_MAX};

/* ------------------------------------------------------------------------------------------ */
/* AVX-512 BF16: the same arithmetic with vdpbf16ps. The inputs are bf16-exact and never below
   2^-118 in magnitude (neural_experts.c rounds them so), so q_lo*z_even and q_hi*z_odd are exact
   fp32 products whose sum is a normal number or zero: vdpbf16ps from a zero accumulator rounds
   that sum once, exactly like mul + fma above, and its DAZ/FTZ never triggers. vpmaddwd by
   0x1001 puts byte b's low nibble in the low word and b >> 4 in the high word of its dword;
   vpermw reads the low 5 bits of each word from a 32-entry table (entry i = q(i & 15)). 5
   vector operations per block and row instead of 7; faster on Zen 4, slower on the Xeon host
   (docs/perf-kernel.md), so neural_best_isa picks it on AMD only. */

#if defined(_MSC_VER) && !defined(__clang__)
#define NEURAL_AS_BH(v) (*(const __m512bh *)&(v))
#else
#define NEURAL_AS_BH(v) ((__m512bh)(v))
#endif

static const uint16_t lut2_bf16[32] = {0x0000, 0x3F80, 0x4000, 0x4040, 0x4080, 0x40C0, 0x4100, 0x4140,
                                       0x8000, 0xBF80, 0xC000, 0xC040, 0xC080, 0xC0C0, 0xC100, 0xC140,
                                       0x0000, 0x3F80, 0x4000, 0x4040, 0x4080, 0x40C0, 0x4100, 0x4140,
                                       0x8000, 0xBF80, 0xC000, 0xC040, 0xC080, 0xC0C0, 0xC100, 0xC140};

#define BF16_ROW(C, SC, A)                                                                        \
    do {                                                                                          \
        __m512i v_ = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)((C) + 16 * g)));     \
        v_ = _mm512_permutexvar_epi16(_mm512_madd_epi16(v_, nib), lut);                           \
        __m512 d_ = _mm512_dpbf16_ps(_mm512_setzero_ps(), NEURAL_AS_BH(v_), zz);                  \
        A = _mm512_fmadd_ps(d_, _mm512_set1_ps(neural_scale2[(SC)[g]]), A);                       \
    } while (0)

NEURAL_TARGET_AVX512BF16 static void dot4_avx512bf16(const uint8_t *const codes[4], const uint8_t *const sc[4],
                                                     const float *z, const uint16_t *zb, int G, float out[4]) {
    const __m512i lut = _mm512_loadu_si512((const void *)lut2_bf16), nib = _mm512_set1_epi32(0x1001);
    const uint8_t *c0 = codes[0], *c1 = codes[1], *c2 = codes[2], *c3 = codes[3];
    const uint8_t *s0 = sc[0], *s1 = sc[1], *s2 = sc[2], *s3 = sc[3];
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const int pfd = neural_prefetch_bytes;
    const uint8_t *pf = c0 + pfd, *pfs = s0 + pfd / 16;
    (void)z;
    for (int g = 0; g < G; g++) {
        if (pfd) prefetch_step(pf, pfs, g);
        const __m512i zz_ = _mm512_loadu_si512((const void *)(zb + 32 * (size_t)g));
        const __m512bh zz = NEURAL_AS_BH(zz_);
        BF16_ROW(c0, s0, a0);
        BF16_ROW(c1, s1, a1);
        BF16_ROW(c2, s2, a2);
        BF16_ROW(c3, s3, a3);
    }
    hsum4_avx512(a0, a1, a2, a3, out);
}

/* Multi-token in bf16 mode: q decoded once as bf16 pairs in natural order (as BF16_ROW), then
   per token one vdpbf16ps from zero and one fma with the scale. */
NEURAL_TARGET_AVX512BF16 static void decode4_avx512bf16(const uint8_t *const codes[4], const uint8_t *const sc[4],
                                                        int g0, int nb, void *qv, float *S) {
    const __m512i lut = _mm512_loadu_si512((const void *)lut2_bf16), nib = _mm512_set1_epi32(0x1001);
    const int pfd = neural_prefetch_bytes;
    uint16_t *q = (uint16_t *)qv;
    for (int i = 0; i < 4; i++) {
        const uint8_t *c = codes[i] + 16 * (size_t)g0;
        for (int g = 0; g < nb; g++) {
            if (pfd && (g & 3) == 0) _mm_prefetch((const char *)(c + 16 * (size_t)g + pfd), _MM_HINT_T0);
            __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(c + 16 * g)));
            v = _mm512_permutexvar_epi16(_mm512_madd_epi16(v, nib), lut);
            _mm512_storeu_si512((void *)(q + 32 * ((size_t)i * nb + g)), v);
            S[i * nb + g] = neural_scale2[sc[i][g0 + g]];
        }
    }
}

NEURAL_TARGET_AVX512BF16 static NEURAL_INLINE void tile_avx512bf16(const uint16_t *q, const float *S, int nb,
                                                                   const void *const *zv, float *acc, const int NT) {
    __m512 a[4][4];
    NEURAL_UNROLL for (int r = 0; r < 4; r++) NEURAL_UNROLL for (int t = 0; t < NT; t++)
        a[r][t] = _mm512_loadu_ps(acc + r * NEURAL_TOK_ACC_ROW + 16 * t);
    for (int g = 0; g < nb; g++) {
        __m512i zz[4];
        NEURAL_UNROLL for (int t = 0; t < NT; t++)
            zz[t] = _mm512_loadu_si512((const void *)((const uint16_t *)zv[t] + 32 * (size_t)g));
        NEURAL_UNROLL for (int r = 0; r < 4; r++) {
            const __m512i qq = _mm512_loadu_si512((const void *)(q + 32 * ((size_t)r * nb + g)));
            const __m512 sv = _mm512_set1_ps(S[r * nb + g]);
            NEURAL_UNROLL for (int t = 0; t < NT; t++) {
                __m512 e = _mm512_dpbf16_ps(_mm512_setzero_ps(), NEURAL_AS_BH(qq), NEURAL_AS_BH(zz[t]));
                a[r][t] = _mm512_fmadd_ps(e, sv, a[r][t]);
            }
        }
    }
    NEURAL_UNROLL for (int r = 0; r < 4; r++) NEURAL_UNROLL for (int t = 0; t < NT; t++)
        _mm512_storeu_ps(acc + r * NEURAL_TOK_ACC_ROW + 16 * t, a[r][t]);
}

NEURAL_TARGET_AVX512BF16 static void tile4_avx512bf16(const void *qv, const float *S, int nb, const void *const zv[4],
                                                      int nt, float *acc) {
    const uint16_t *q = (const uint16_t *)qv;
    switch (nt) {
    case 4: tile_avx512bf16(q, S, nb, zv, acc, 4); break;
    case 3: tile_avx512bf16(q, S, nb, zv, acc, 3); break;
    case 2: tile_avx512bf16(q, S, nb, zv, acc, 2); break;
    default: tile_avx512bf16(q, S, nb, zv, acc, 1); break;
    }
}

/* The register path in bf16 mode: two rows decoded in registers as BF16_ROW does and used at once by every
   token of the group, per token one vdpbf16ps from zero and one fma with the scale: tile_avx512bf16's
   operations in its order, and hsum16 is reduce16's tree, so the same bits. This table had the tiles only;
   `bench/kernel/tokens_ab.py --isa avx512bf16 --threads 2` on the Zen 4 VM (AMD's default table), tiles at every
   size against registers at every size, both built alike, ms a group, two pairs: 2 tokens 0.896 / 0.878 ->
   0.581 / 0.582, 4 tokens 1.249 / 1.168 -> 0.816 / 0.817, 8 tokens 1.591 / 1.566 -> 1.413 / 1.411, 12 tokens
   2.121 / 2.125 -> 1.978 / 1.979, 16 tokens 2.609 / 2.612 -> 2.550 / 2.590, 20 tokens 3.076 / 3.089 -> 3.136 /
   3.145, 24 and 32 slower (3.568 -> 3.756, 4.594 -> 4.921) (MEASURED, session 32): NEURAL_ROWS_TOK_MAX_BF16 16.
   It also beats the fp32 table's register path (2 / 4 tokens 0.68 / 0.94 ms): half the input bytes, two
   floating-point operations a token where that one has three. */
NEURAL_TARGET_AVX512BF16 static NEURAL_INLINE void rowpair_avx512bf16(const uint8_t *c0, const uint8_t *c1,
                                                                      const uint8_t *s0, const uint8_t *s1, int G,
                                                                      const uint16_t *const *z, float *o0, float *o1,
                                                                      const int NT) {
    const __m512i lut = _mm512_loadu_si512((const void *)lut2_bf16), nib = _mm512_set1_epi32(0x1001);
    __m512 a0[4], a1[4];
    NEURAL_UNROLL for (int t = 0; t < NT; t++) a0[t] = a1[t] = _mm512_setzero_ps();
    const int pfd = neural_prefetch_bytes;
    for (int g = 0; g < G; g++) {
        if (pfd) PREFETCH_ROWPAIR(c0, c1, g, pfd);
        __m512i v0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(c0 + 16 * g)));
        __m512i v1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(c1 + 16 * g)));
        v0 = _mm512_permutexvar_epi16(_mm512_madd_epi16(v0, nib), lut);
        v1 = _mm512_permutexvar_epi16(_mm512_madd_epi16(v1, nib), lut);
        const __m512 S0 = _mm512_set1_ps(neural_scale2[s0[g]]), S1 = _mm512_set1_ps(neural_scale2[s1[g]]);
        NEURAL_UNROLL for (int t = 0; t < NT; t++) {
            const __m512i zz = _mm512_loadu_si512((const void *)(z[t] + 32 * (size_t)g));
            const __m512 e0 = _mm512_dpbf16_ps(_mm512_setzero_ps(), NEURAL_AS_BH(v0), NEURAL_AS_BH(zz));
            const __m512 e1 = _mm512_dpbf16_ps(_mm512_setzero_ps(), NEURAL_AS_BH(v1), NEURAL_AS_BH(zz));
            a0[t] = _mm512_fmadd_ps(e0, S0, a0[t]);
            a1[t] = _mm512_fmadd_ps(e1, S1, a1[t]);
        }
    }
    NEURAL_UNROLL for (int t = 0; t < NT; t++) {
        o0[t] = hsum16_avx512(a0[t]);
        o1[t] = hsum16_avx512(a1[t]);
    }
}

/* Groups of 2-3 tokens: all four rows in one pass, as rowquad_avx512 (8-12 chains); rowpair_avx512bf16's operations
   for each (row, token): the same bits. Smaller gains here (two operations a token, not three), same measurement:
   2 tokens 0.467 / 0.470 -> 0.441 / 0.456, 3 tokens 0.560 / 0.564 -> 0.532 / 0.546, 5 tokens 0.762 / 0.760 -> 0.761 /
   0.765, 6 tokens 0.844 / 0.844 -> 0.861 / 0.868 (MEASURED, session 32). */
NEURAL_TARGET_AVX512BF16 static NEURAL_INLINE void rowquad_avx512bf16(const uint8_t *const c[4],
                                                                      const uint8_t *const s[4], int G,
                                                                      const uint16_t *const *z, float out[16],
                                                                      const int NT) {
    const __m512i lut = _mm512_loadu_si512((const void *)lut2_bf16), nib = _mm512_set1_epi32(0x1001);
    __m512 a[4][3];
    NEURAL_UNROLL for (int r = 0; r < 4; r++) NEURAL_UNROLL for (int t = 0; t < NT; t++) a[r][t] = _mm512_setzero_ps();
    const int pfd = neural_prefetch_bytes;
    for (int g = 0; g < G; g++) {
        if (pfd) PREFETCH_ROWPAIR(c[0], c[1], g, pfd), PREFETCH_ROWPAIR(c[2], c[3], g, pfd);
        __m512i zz[3];
        NEURAL_UNROLL for (int t = 0; t < NT; t++) zz[t] = _mm512_loadu_si512((const void *)(z[t] + 32 * (size_t)g));
        NEURAL_UNROLL for (int r = 0; r < 4; r++) {
            __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(c[r] + 16 * g)));
            v = _mm512_permutexvar_epi16(_mm512_madd_epi16(v, nib), lut);
            const __m512 S = _mm512_set1_ps(neural_scale2[s[r][g]]);
            NEURAL_UNROLL for (int t = 0; t < NT; t++) {
                const __m512 e = _mm512_dpbf16_ps(_mm512_setzero_ps(), NEURAL_AS_BH(v), NEURAL_AS_BH(zz[t]));
                a[r][t] = _mm512_fmadd_ps(e, S, a[r][t]);
            }
        }
    }
    NEURAL_UNROLL for (int r = 0; r < 4; r++) NEURAL_UNROLL for (int t = 0; t < NT; t++)
        out[4 * r + t] = hsum16_avx512(a[r][t]);
}

NEURAL_TARGET_AVX512BF16 static void rows4tok_avx512bf16(const uint8_t *const codes[4], const uint8_t *const sc[4],
                                                         int G, const void *const zv[4], int nt, float out[16]) {
    const uint16_t *z[4] = {(const uint16_t *)zv[0], (const uint16_t *)zv[nt > 1],
                            (const uint16_t *)zv[nt > 2 ? 2 : 0], (const uint16_t *)zv[nt > 3 ? 3 : 0]};
    ROWS4TOK_AVX512(rowquad_avx512bf16, rowpair_avx512bf16);
}

const neural_kernels neural_kernels_avx512bf16 = {4, dot4_avx512bf16, decode4_avx512bf16, tile4_avx512bf16, 1,
                                                  rows4tok_avx512bf16, read_avx512, swiglu16_avx512, NULL, pv8_avx512,
                                                  exp16_avx512, scores_avx512, att_exp_avx512, round_bf16_avx512,
                                                  gemv4w_avx512, NEURAL_ROWS_TOK_MAX_BF16};
#endif
