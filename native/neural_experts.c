/*
 * The expert calls: one token through k experts (decode), up to 16 tokens through one expert
 * (prompt processing), copy-on-compute capture, and the DRAM read probe. Numerics and record
 * layout are documented in neural_experts.h; the ISA kernels live in neural_isa.c and the
 * worker team in neural_team.c.
 */
#include "neural_experts.h"

#include <math.h>
#include <string.h>

#include "neural_internal.h"
#include "neural_platform.h"
#include "neural_team.h"

/* Rows per chunk handed to a thread. The one-token call reads each row once, so its chunks are
   long contiguous streams: 128-512 rows (184-737 KB at the 120b shape) read 1.1-1.3x faster
   from DRAM than 32-row chunks on Zen 4 and on the Xeon host (MEASURED, sweep of
   bench/kernel/kernel_variants.c). At least 4 chunks per thread keep the dynamic hand-out
   balanced; a multiple of 4 (whole dot4 groups, whole gate/up pairs). The multi-token call
   decodes each row once for all tokens and keeps its smaller chunks. */
#define CH_MIN 32
#define CH_MAX 512
#define CH_TOK_GATE_UP 32
#define CH_TOK_DOWN 16

static long chunk_rows(long total, int threads) {
    long c = total / (4L * (threads > 0 ? threads : 1));
    c = c < CH_MIN ? CH_MIN : (c > CH_MAX ? CH_MAX : c);
    return c & ~3L;
}
#define CH_PROBE (1u << 20)

static nmutex api_lock = NMUTEX_INIT;
static int initialized = 0;
static const neural_kernels *kern = &neural_kernels_scalar;
static float *ws = NULL; /* call workspace, grown on demand (under api_lock) */
static size_t ws_cap = 0;

static void ensure_init(void) {
    if (initialized) return;
    neural_tables_init();
    int isa = neural_best_isa();
#if NEURAL_X86
    if (isa == NEURAL_ISA_AVX512BF16) kern = &neural_kernels_avx512bf16;
    else if (isa == NEURAL_ISA_AVX512) kern = &neural_kernels_avx512;
    else if (isa == NEURAL_ISA_AVX2) kern = &neural_kernels_avx2;
#endif
    (void)isa;
    /* 8192 B ahead: 1.1x faster than 4096 on the Xeon host with long chunks (session 3); on Zen 4 (2 vCPUs, the
       vdpbf16ps loop) 1.13-1.19x the kernel's rate of 4096 and 1.05x its CPU decode, A B B A (session 27; 4096 had
       been as fast there with session 3's kernel); the AVX2 loop, compute-bound, the same either way. */
    if (neural_prefetch_bytes < 0) neural_prefetch_bytes = 8192;
    neural_team_resize(0);
    initialized = 1;
}

static float *workspace(size_t floats) {
    if (floats > ws_cap) {
        aligned_free64(ws);
        ws = (float *)aligned_alloc64(floats * sizeof(float));
        ws_cap = ws ? floats : 0;
    }
    return ws;
}

/* ---- ISA and threads ---- */
const char *neural_isa_name(int isa) {
    switch (isa) {
    case NEURAL_ISA_SCALAR: return "scalar";
    case NEURAL_ISA_AVX2: return "avx2";
    case NEURAL_ISA_AVX512: return "avx512";
    case NEURAL_ISA_AVX512BF16: return "avx512bf16";
    default: return "auto";
    }
}

int neural_best_isa(void) {
    int f = neural_cpu_features();
    /* Same results either way; vdpbf16ps is the faster loop on Zen 4 and the slower one on the
       Xeon (Emerald Rapids) host, MEASURED in docs/perf-kernel.md. */
    if ((f & NEURAL_CPU_AVX512) && (f & NEURAL_CPU_BF16) && (f & NEURAL_CPU_AMD)) return NEURAL_ISA_AVX512BF16;
    if (f & NEURAL_CPU_AVX512) return NEURAL_ISA_AVX512;
    if (f & NEURAL_CPU_AVX2) return NEURAL_ISA_AVX2;
    return NEURAL_ISA_SCALAR;
}

int neural_set_isa(int isa) {
    int rc = NEURAL_OK;
    nm_lock(&api_lock);
    ensure_init();
    int want = isa == NEURAL_ISA_AUTO ? neural_best_isa() : isa;
    int f = neural_cpu_features();
    if (want == NEURAL_ISA_SCALAR) {
        kern = &neural_kernels_scalar;
#if NEURAL_X86
    } else if (want == NEURAL_ISA_AVX2 && (f & NEURAL_CPU_AVX2)) {
        kern = &neural_kernels_avx2;
    } else if (want == NEURAL_ISA_AVX512 && (f & NEURAL_CPU_AVX512)) {
        kern = &neural_kernels_avx512;
    } else if (want == NEURAL_ISA_AVX512BF16 && (f & NEURAL_CPU_AVX512) && (f & NEURAL_CPU_BF16)) {
        kern = &neural_kernels_avx512bf16;
#endif
    } else {
        rc = NEURAL_EISA;
    }
    (void)f;
    nm_unlock(&api_lock);
    return rc;
}

int neural_get_isa(void) {
    nm_lock(&api_lock);
    ensure_init();
    int isa = kern->isa;
    nm_unlock(&api_lock);
    return isa;
}

int neural_set_threads(int n) {
    nm_lock(&api_lock);
    ensure_init();
    int got = neural_team_resize(n);
    nm_unlock(&api_lock);
    return got;
}

int neural_get_threads(void) {
    nm_lock(&api_lock);
    ensure_init();
    int n = neural_team_size();
    nm_unlock(&api_lock);
    return n;
}

void neural_set_spin_us(int us) { neural_team_set_spin(us); }

void neural_set_prefetch(int bytes) {
    nm_lock(&api_lock);
    ensure_init();
    neural_prefetch_bytes = bytes < 0 ? 0 : bytes;
    nm_unlock(&api_lock);
}

int neural_get_prefetch(void) {
    nm_lock(&api_lock);
    ensure_init();
    int b = neural_prefetch_bytes;
    nm_unlock(&api_lock);
    return b;
}

/* ---- the canonical exp (see header) ---- */
static float pow2i(int k) { /* 2^k for k in [-126, 127] */
    uint32_t bits = (uint32_t)(k + 127) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

float neural_expf(float x) {
    if (x != x) return x + x;
    if (x > NEURAL_EXPF_MAX) return HUGE_VALF;
    if (x < NEURAL_EXPF_MIN) return 0.0f;
    float t = x * NEURAL_EXPF_LOG2E;
    float n = (t + NEURAL_EXPF_ROUND) - NEURAL_EXPF_ROUND; /* round to nearest integer */
    float r = x - n * NEURAL_EXPF_LN2_HI; /* Cody-Waite: ln2 high part (exact product) */
    r = r - n * NEURAL_EXPF_LN2_LO;       /* ln2 low part */
    float p = NEURAL_EXPF_P7;
    p = p * r + NEURAL_EXPF_P6;
    p = p * r + NEURAL_EXPF_P5;
    p = p * r + NEURAL_EXPF_P4;
    p = p * r + NEURAL_EXPF_P3;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int ni = (int)n, n1 = ni / 2, n2 = ni - n1;
    return (p * pow2i(n1)) * pow2i(n2);
}

static float swiglu(float g, float u, float limit, float alpha) {
    g = (g > limit) ? limit : g;
    u = (u > limit) ? limit : ((u < -limit) ? -limit : u);
    float sig = 1.0f / (1.0f + neural_expf(-(alpha * g)));
    return (g * sig) * (u + 1.0f);
}

static float bf16_at(const uint8_t *p, long i) {
    uint32_t bits = ((uint32_t)p[2 * i] | ((uint32_t)p[2 * i + 1] << 8)) << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Kernel inputs (x, and the SwiGLU activation before down) are rounded to bf16, the model's
   activation precision (the GPU path and the reference do the same): nearest even, NaN stays a
   quiet NaN, and magnitudes below 2^-118 become signed zero, which keeps every product and pair
   sum of the dot product normal or zero (see neural_isa.c, vdpbf16ps). */
static uint16_t to_bf16(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    uint32_t mag = u & 0x7FFFFFFFu;
    if (mag > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u);
    if (mag < 0x04800000u) return (uint16_t)((u >> 16) & 0x8000u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float bf16_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* An input element as the kernel uses it; its bf16 bits go to *bits (bf16 mode only). */
static float input_value(int bf16_inputs, float v, uint16_t *bits) {
    if (!bf16_inputs) return v;
    *bits = to_bf16(v);
    return bf16_float(*bits);
}

/* The vdpbf16ps loop needs bf16 inputs; in fp32 mode the same ISA runs its fp32 loop. */
static const neural_kernels *kernels_for(const neural_shape *s) {
#if NEURAL_X86
    if (!s->bf16_inputs && kern == &neural_kernels_avx512bf16) return &neural_kernels_avx512;
#endif
    (void)s;
    return kern;
}

static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

/* a[q] = SwiGLU(h[2q], h[2q+1]): 16 pairs at a time where the ISA has a vector version */
static void swiglu_pairs(const neural_kernels *kf, const float *h, long npairs, float limit, float alpha, float *a) {
    long q = 0;
    if (kf->swiglu16)
        for (; q + 16 <= npairs; q += 16) kf->swiglu16(h + 2 * q, limit, alpha, a + q);
    for (; q < npairs; q++) a[q] = swiglu(h[2 * q], h[2 * q + 1], limit, alpha);
}

/* ---- bf16 projections (the CPU engine's one-token dense layers) ---- */
#define NEURAL_MAX_LINEAR_N 8 /* matrices one neural_linear_bf16_n call takes */

/* up to NEURAL_MAX_LINEAR_N matrices over one x; a chunk index runs through the first matrix's chunks,
   then the second's, ... (first[m]: the index of matrix m's first chunk; first[n]: the count) */
typedef struct {
    const uint16_t *w[NEURAL_MAX_LINEAR_N], *bias[NEURAL_MAX_LINEAR_N];
    long rows[NEURAL_MAX_LINEAR_N], first[NEURAL_MAX_LINEAR_N + 1];
    float *out[NEURAL_MAX_LINEAR_N];
    uint16_t *outb[NEURAL_MAX_LINEAR_N]; /* bf16 outputs instead (neural_linear_bf16_nb) */
    int n, cols;
    const float *x;
    const neural_kernels *kf;
    volatile long next;
} linear_job;

#define CH_LINEAR 64 /* rows per chunk: 368 KB of a 2880-wide bf16 matrix */

/* out[r - r0] = dot(w[r], x) for the bf16 rows r0..r1-1 of width cols, 4 rows per gemv4 call
   (a tail of 1-3 rows repeats its last row) */
typedef void (*gemv4_fn)(const uint16_t *const w[4], const float *x, int n, float out[4]);

static void gemv_rows(gemv4_fn gemv4, const uint16_t *w, int cols, const float *x, long r0, long r1, float *out) {
    for (long r = r0; r < r1; r += 4) {
        int n = (int)(r1 - r < 4 ? r1 - r : 4);
        const uint16_t *wp[4];
        float o[4];
        for (int i = 0; i < 4; i++) wp[i] = w + (size_t)(r + (i < n ? i : n - 1)) * (size_t)cols;
        /* four rows write their sums in place: copying them from o[] (a memcpy call, or one 16-byte load of four
           4-byte stores, which store forwarding cannot serve) was a fifth of a 64-wide row's cost (decode
           attention's scores on AVX2) */
        if (n == 4) {
            gemv4(wp, x, cols, out + (r - r0));
            continue;
        }
        gemv4(wp, x, cols, o);
        for (int i = 0; i < n; i++) out[r - r0 + i] = o[i];
    }
}

static void linear_work(void *ctx, int tid) {
    (void)tid;
    linear_job *j = (linear_job *)ctx;
    int m = 0;
    for (;;) {
        long c = neural_next_chunk(&j->next);
        if (c >= j->first[j->n]) break;
        while (c >= j->first[m + 1]) m++; /* chunks are handed out in increasing order: m only grows */
        const long rows = j->rows[m];
        long r0 = (c - j->first[m]) * CH_LINEAR, r1 = r0 + CH_LINEAR < rows ? r0 + CH_LINEAR : rows;
        float tmp[CH_LINEAR];
        float *dst = j->outb[m] ? tmp : j->out[m] + r0; /* dst[r - r0]: row r */
        gemv_rows(j->kf->gemv4w_bf16, j->w[m], j->cols, j->x, r0, r1, dst);
        if (j->bias[m])
            for (long r = r0; r < r1; r++) dst[r - r0] = dst[r - r0] + bf16_float(j->bias[m][r]);
        if (j->outb[m])
            for (long r = r0; r < r1; r++) j->outb[m][r] = neural_round_bf16(dst[r - r0]);
    }
}

/* the job's matrices from the arguments (fp32 or bf16 outputs: exactly one of out, outb), or 0 when one is bad */
static int linear_setup(linear_job *j, int n, const uint16_t *const *w, const uint16_t *const *bias, const int *rows,
                        int cols, float *const *out, uint16_t *const *outb) {
    if (n < 1 || n > NEURAL_MAX_LINEAR_N || !w || !rows || (!out == !outb) || cols < 16 || cols % 16) return 0;
    memset(j, 0, sizeof *j);
    for (int m = 0; m < n; m++) {
        if (!w[m] || (out ? !out[m] : !outb[m]) || rows[m] < 1) return 0;
        j->w[m] = w[m], j->bias[m] = bias ? bias[m] : NULL, j->rows[m] = rows[m];
        if (out) j->out[m] = out[m];
        else j->outb[m] = outb[m];
        j->first[m + 1] = j->first[m] + (rows[m] + CH_LINEAR - 1) / CH_LINEAR;
    }
    j->n = n, j->cols = cols;
    return 1;
}

int neural_linear_bf16_n(int n, const uint16_t *const *w, const uint16_t *const *bias, const int *rows, int cols,
                         const float *x, float *const *out) {
    linear_job j;
    if (!x || !out || !linear_setup(&j, n, w, bias, rows, cols, out, NULL)) return NEURAL_EINVAL;
    j.x = x;
    nm_lock(&api_lock);
    ensure_init();
    j.kf = kern;
    neural_team_run(linear_work, &j);
    nm_unlock(&api_lock);
    return NEURAL_OK;
}

int neural_linear_bf16_nb(int n, const uint16_t *const *w, const uint16_t *const *bias, const int *rows, int cols,
                          const uint16_t *x, uint16_t *const *out) {
    linear_job j;
    if (!x || !out || !linear_setup(&j, n, w, bias, rows, cols, NULL, out)) return NEURAL_EINVAL;
    nm_lock(&api_lock);
    ensure_init();
    float *xf = workspace((size_t)cols);
    if (!xf) {
        nm_unlock(&api_lock);
        return NEURAL_ENOMEM;
    }
    for (int i = 0; i < cols; i++) xf[i] = bf16_float(x[i]);
    j.x = xf;
    j.kf = kern;
    neural_team_run(linear_work, &j);
    nm_unlock(&api_lock);
    return NEURAL_OK;
}

int neural_linear_bf16(const uint16_t *w, const uint16_t *bias, int rows, int cols, const float *x, float *out) {
    if (!w || !x || !out || rows < 1 || cols < 16 || cols % 16) return NEURAL_EINVAL;
    return neural_linear_bf16_n(1, &w, &bias, &rows, cols, x, &out);
}

int neural_swiglu(const float *h, int npairs, float limit, float alpha, float *a) {
    if (!h || !a || npairs < 0) return NEURAL_EINVAL;
    nm_lock(&api_lock);
    ensure_init();
    swiglu_pairs(kern, h, npairs, limit, alpha, a);
    nm_unlock(&api_lock);
    return NEURAL_OK;
}

/* ---- one decode token's attention over bf16 K/V (the CPU engine) ---- */
typedef struct {
    const uint16_t *k, *v;
    int64_t hs; /* elements from one kv head to the next, in k and in v */
    int kvh, t, d, g, round_p;
    const float *q, *sinks;
    float scale;
    float *out, *scores; /* scores: [kvh * g][t] */
    const neural_kernels *kf;
    volatile long next;
} attn_job;

/* floats from one query head's scores to the next: t and 16 more, so that the rows are not a multiple of 4 KiB
   apart (P.V reads the group's 8 rows side by side; at 4,096 keys rows 16 KiB apart shared L1 sets: P.V took
   0.33 instead of ~0.2 ms of a 4,096-key layer, 2 threads, Zen 4) */
static size_t score_stride(int t) { return (size_t)t + 16; }

/* sum[qi] = s[qi][0] + s[qi][1] + ... in key order for the g rows ts apart. One head's sum is a chain of t dependent
   adds (4 cycles each); eight heads' chains side by side keep the adders busy. With the vector softmax (att_exp,
   round_bf16), one 4,096-key layer (8 kv heads x 8, d 64, K/V in cache) took 2.01 -> 1.30-1.62 ms at 1 thread and
   1.03 -> 0.66 at 2 (MEASURED, 2-core Sapphire Rapids VM, session 23, bench.kernel.attention_bench); the scalar
   loops had been 37% of it, and
   P.V and the scores now take two thirds, at their operation counts. */
static void attn_sums(const float *s, size_t ts, int t, int g, float *sum) {
    if (g == 8) {
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f, a4 = 0.0f, a5 = 0.0f, a6 = 0.0f, a7 = 0.0f;
        for (int i = 0; i < t; i++) {
            a0 = a0 + s[i], a1 = a1 + s[ts + i], a2 = a2 + s[2 * ts + i], a3 = a3 + s[3 * ts + i];
            a4 = a4 + s[4 * ts + i], a5 = a5 + s[5 * ts + i], a6 = a6 + s[6 * ts + i], a7 = a7 + s[7 * ts + i];
        }
        sum[0] = a0, sum[1] = a1, sum[2] = a2, sum[3] = a3, sum[4] = a4, sum[5] = a5, sum[6] = a6, sum[7] = a7;
        return;
    }
    for (int qi = 0; qi < g; qi++) {
        float a = 0.0f;
        for (int i = 0; i < t; i++) a = a + s[(size_t)qi * ts + (size_t)i];
        sum[qi] = a;
    }
}

static void attn_work(void *ctx, int tid) {
    attn_job *j = (attn_job *)ctx;
    const int t = j->t, d = j->d, g = j->g;
    const size_t ts = score_stride(t);
    float acc[NEURAL_MAX_GROUP * NEURAL_MAX_HEAD_DIM], vf[NEURAL_MAX_HEAD_DIM], denom[NEURAL_MAX_GROUP];
    (void)tid;
    for (;;) {
        long h = neural_next_chunk(&j->next);
        if (h >= j->kvh) break;
        const uint16_t *kh = j->k + (size_t)h * (size_t)j->hs, *vh = j->v + (size_t)h * (size_t)j->hs;
        float *sh = j->scores + (size_t)h * (size_t)g * ts;
        /* the scores: K's rows in the 16-lane order, each row converted once for the group where the ISA can */
        if (j->kf->scores_bf16)
            j->kf->scores_bf16(kh, t, d, j->q + (size_t)h * (size_t)g * (size_t)d, g, sh, ts);
        else
            for (int qi = 0; qi < g; qi++)
                gemv_rows(j->kf->gemv4_bf16, kh, d, j->q + (size_t)(h * g + qi) * (size_t)d, 0, t,
                          sh + (size_t)qi * ts);
        float mx[NEURAL_MAX_GROUP];
        for (int qi = 0; qi < g; qi++) {
            const long row = h * g + qi;
            float *s = sh + (size_t)qi * ts;
            if (j->kf->att_exp) {
                mx[qi] = j->kf->att_exp(s, t, j->scale, j->sinks[row]);
                continue;
            }
            float m = j->sinks[row];
            for (int i = 0; i < t; i++) {
                s[i] = s[i] * j->scale;
                m = s[i] > m ? s[i] : m;
            }
            for (int i = 0; i < t; i++) s[i] = s[i] - m;
            int i = 0;
            if (j->kf->exp16)
                for (; i + 16 <= t; i += 16) j->kf->exp16(s + i, s + i);
            for (; i < t; i++) s[i] = neural_expf(s[i]);
            mx[qi] = m;
        }
        /* each head's sum in key order, the group's heads side by side (independent chains) */
        attn_sums(sh, ts, t, g, denom);
        for (int qi = 0; qi < g; qi++) {
            const long row = h * g + qi;
            denom[qi] = denom[qi] + neural_expf(j->sinks[row] - mx[qi]);
            if (!j->round_p) continue;
            float *s = sh + (size_t)qi * ts;
            if (j->kf->round_bf16)
                j->kf->round_bf16(s, t);
            else
                for (int i = 0; i < t; i++) s[i] = bf16_float(to_bf16(s[i]));
        }
        /* P.V in key order: each V row converted once for the group's query heads; elementwise
           products and sums (no contraction), so vectorized or not the bits are the same */
        for (int c = 0; c < g * d; c++) acc[c] = 0.0f;
        if (g == 8 && j->kf->pv8_bf16)
            j->kf->pv8_bf16(vh, t, d, sh, ts, acc);
        else
            for (int i = 0; i < t; i++) {
                const uint16_t *vr = vh + (size_t)i * (size_t)d;
                for (int c = 0; c < d; c++) vf[c] = bf16_float(vr[c]);
                for (int qi = 0; qi < g; qi++) {
                    const float p = sh[(size_t)qi * ts + (size_t)i];
                    float *a = acc + (size_t)qi * (size_t)d;
                    for (int c0 = 0; c0 < d; c0 += 16)
                        for (int l = 0; l < 16; l++) a[c0 + l] = a[c0 + l] + p * vf[c0 + l];
                }
            }
        for (int qi = 0; qi < g; qi++) {
            float *o = j->out + (size_t)(h * g + qi) * (size_t)d;
            for (int c = 0; c < d; c++) o[c] = acc[(size_t)qi * (size_t)d + c] / denom[qi];
        }
    }
}

int neural_attn_decode_bf16(const uint16_t *k, const uint16_t *v, int64_t head_stride, int kv_heads, int t, int d,
                            int group, const float *q, const float *sinks, float scale, int round_p, float *out) {
    if (!k || !v || !q || !sinks || !out || kv_heads < 1 || t < 1 || group < 1 || d < 16 || d % 16
        || d > NEURAL_MAX_HEAD_DIM || group > NEURAL_MAX_GROUP || head_stride < (int64_t)t * d)
        return NEURAL_EINVAL;
    nm_lock(&api_lock);
    ensure_init();
    float *scores = workspace((size_t)kv_heads * (size_t)group * score_stride(t));
    if (!scores) {
        nm_unlock(&api_lock);
        return NEURAL_ENOMEM;
    }
    attn_job j;
    memset(&j, 0, sizeof j);
    j.k = k, j.v = v, j.hs = head_stride, j.kvh = kv_heads, j.t = t, j.d = d, j.g = group, j.round_p = round_p;
    j.q = q, j.sinks = sinks, j.scale = scale, j.out = out, j.scores = scores, j.kf = kern;
    neural_team_run(attn_work, &j);
    nm_unlock(&api_lock);
    return NEURAL_OK;
}

/* ---- record layout ---- */
static int64_t align64(int64_t v) { return (v + 63) & ~(int64_t)63; }

static int64_t scale_row_bytes(const neural_shape *s, int G) {
    return s->format == NEURAL_FORMAT_PACKED ? 1 + (G + 1) / 2 : G;
}

static int64_t part_bytes(const neural_shape *s, int part) {
    int64_t H = s->hidden, I = s->intermediate, G1 = H / 32, G2 = I / 32;
    switch (part) {
    case NEURAL_PART_GU_CODES: return 2 * I * G1 * 16;
    case NEURAL_PART_GU_SCALES: return 2 * I * scale_row_bytes(s, (int)G1);
    case NEURAL_PART_DN_CODES: return H * G2 * 16;
    case NEURAL_PART_DN_SCALES: return H * scale_row_bytes(s, (int)G2);
    case NEURAL_PART_GU_BIAS: return 2 * I * 2;
    case NEURAL_PART_DN_BIAS: return H * 2;
    default: return 0;
    }
}

int64_t neural_record_bytes(const neural_shape *s) {
    int64_t off = 0;
    for (int p = 0; p < NEURAL_PART_EXC; p++) off = align64(off) + part_bytes(s, p);
    return align64(off);
}

static int64_t exc_bytes(const neural_shape *s, const neural_expert *ex) {
    if (s->format != NEURAL_FORMAT_PACKED || ex->n_exc == 0 || !ex->exc) return 0;
    int64_t I2 = 2 * (int64_t)s->intermediate, G1 = s->hidden / 32, G2 = s->intermediate / 32, ngu = 0;
    for (uint32_t i = 0; i < ex->n_exc; i++) ngu += rd32(ex->exc + 4 * (size_t)i) < I2;
    return 4 * (int64_t)ex->n_exc + ngu * G1 + ((int64_t)ex->n_exc - ngu) * G2;
}

static int shape_ok(const neural_shape *s) {
    if (!s || s->hidden <= 0 || s->intermediate <= 0 || s->hidden % 32 || s->intermediate % 32) return 0;
    if (s->hidden > NEURAL_MAX_DIM || s->intermediate > NEURAL_MAX_DIM) return 0;
    if (s->format != NEURAL_FORMAT_RAW && s->format != NEURAL_FORMAT_PACKED) return 0;
    if (s->bf16_inputs != 0 && s->bf16_inputs != 1) return 0;
    int64_t end = 0;
    for (int p = 0; p < NEURAL_PART_EXC; p++) {
        if (s->record_offset[p] < end) return 0;
        end = s->record_offset[p] + part_bytes(s, p);
    }
    return s->record_offset[NEURAL_PART_EXC] >= end;
}

static int expert_ok(const neural_expert *ex) {
    if (!ex) return 0;
    for (int p = 0; p < 6; p++)
        if (!ex->part[p]) return 0;
    return 1;
}

/* gate_up units the one-token call computes for ex (neural_expert.units); 0 where the value is invalid */
static long expert_units(const neural_shape *s, const neural_expert *ex) {
    long u = ex->units;
    if (u == 0) return s->intermediate;
    if (u < 0 || u > s->intermediate || u % 32 || ex->capture) return 0;
    return u;
}

/* ---- scale rows (raw pointer, or packed row decoded into buf) ---- */
static const uint8_t *exception_row(const neural_shape *s, const neural_expert *ex, int mat, long row, int G,
                                    uint8_t *buf, volatile long *err) {
    uint32_t I2 = 2u * (uint32_t)s->intermediate, id = mat ? I2 + (uint32_t)row : (uint32_t)row;
    uint32_t n = ex->n_exc;
    const uint8_t *a = ex->exc;
    if (a && n) {
        size_t lo = 0, hi = n;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (rd32(a + 4 * mid) < id) lo = mid + 1;
            else hi = mid;
        }
        if (lo < n && rd32(a + 4 * lo) == id) {
            size_t ngu = 0, h2 = n;
            while (ngu < h2) {
                size_t mid = (ngu + h2) / 2;
                if (rd32(a + 4 * mid) < I2) ngu = mid + 1;
                else h2 = mid;
            }
            size_t G1 = (size_t)s->hidden / 32, G2 = (size_t)s->intermediate / 32;
            size_t off = 4 * (size_t)n + (lo < ngu ? lo * G1 : ngu * G1 + (lo - ngu) * G2);
            return a + off;
        }
    }
    a_store(err, NEURAL_ECORRUPT);
    memset(buf, 0xFF, (size_t)G);
    return buf;
}

static const uint8_t *row_scales(const neural_shape *s, const neural_expert *ex, int mat, long row, int G,
                                 uint8_t *buf, volatile long *err) {
    const uint8_t *base = ex->part[mat ? NEURAL_PART_DN_SCALES : NEURAL_PART_GU_SCALES];
    if (s->format == NEURAL_FORMAT_RAW) return base + (size_t)row * (size_t)G;
    const uint8_t *p = base + (size_t)row * (size_t)scale_row_bytes(s, G);
    if (p[0] == 0xFF) return exception_row(s, ex, mat, row, G, buf, err);
    unsigned b = p[0];
#if defined(__x86_64__) || defined(_M_X64)
    /* SSE2 (baseline on x86-64): 32 scales per step; a scalar loop here costs half the kernel */
    uint8_t tmp[NEURAL_MAX_G / 2 + 16];
    int nb = (G + 1) / 2;
    memcpy(tmp, p + 1, (size_t)nb);
    memset(tmp + nb, 0, 16);
    const __m128i m = _mm_set1_epi8(0x0F), vb = _mm_set1_epi8((char)b);
    for (int i = 0; i < nb; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(tmp + i));
        __m128i lo = _mm_and_si128(v, m), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
        _mm_storeu_si128((__m128i *)(buf + 2 * i), _mm_add_epi8(_mm_unpacklo_epi8(lo, hi), vb));
        _mm_storeu_si128((__m128i *)(buf + 2 * i + 16), _mm_add_epi8(_mm_unpackhi_epi8(lo, hi), vb));
    }
#else
    for (int g = 0; g < G; g++) buf[g] = (uint8_t)(b + ((p[1 + g / 2] >> ((g & 1) * 4)) & 15));
#endif
    return buf;
}

/* ---- copy-on-compute ---- */
#if NEURAL_X86
static inline void stream_line(uint8_t *dst, const uint8_t *src) {
    __m128i a = _mm_loadu_si128((const __m128i *)src), b = _mm_loadu_si128((const __m128i *)(src + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(src + 32)), d = _mm_loadu_si128((const __m128i *)(src + 48));
    _mm_stream_si128((__m128i *)dst, a);
    _mm_stream_si128((__m128i *)(dst + 16), b);
    _mm_stream_si128((__m128i *)(dst + 32), c);
    _mm_stream_si128((__m128i *)(dst + 48), d);
}
#endif

static void copy_stream(uint8_t *dst, const uint8_t *src, size_t n) {
#if NEURAL_X86
    /* Whole 64-byte lines of dst per group of four streaming stores (a destination 16 bytes off
       a line splits each group over two write-combining buffers). When dst sits just above src
       modulo 4 KiB, each load would follow a store to the same low 12 address bits (4K
       aliasing): the copy runs backwards there. MEASURED on the Zen 2 VM, 128 MiB from a
       memory-mapped file: 2.3 GB/s per CPU-second forwards at dst - src = 11 or 16 (mod 4096)
       against 7.2-8.0 backwards and 7-9 for other offsets. */
    size_t head = (64 - ((uintptr_t)dst & 63)) & 63;
    if (head > n) head = n;
    memcpy(dst, src, head);
    dst += head, src += head, n -= head;
    size_t body = n & ~(size_t)63;
    if ((((uintptr_t)dst - (uintptr_t)src) & 4095) - 1 < 1023) {
        for (size_t i = body; i >= 64;) {
            i -= 64;
            stream_line(dst + i, src + i);
        }
    } else {
        for (size_t i = 0; i < body; i += 64) stream_line(dst + i, src + i);
    }
    dst += body, src += body, n -= body;
#endif
    memcpy(dst, src, n);
}

static void stream_fence(void) {
#if NEURAL_X86
    _mm_sfence();
#endif
}

static void capture_rows(const neural_shape *s, const neural_expert *ex, int mat, long r0, long r1) {
    int G = mat ? s->intermediate / 32 : s->hidden / 32;
    int pc = mat ? NEURAL_PART_DN_CODES : NEURAL_PART_GU_CODES, ps = pc + 1;
    size_t cb = (size_t)G * 16, sb = (size_t)scale_row_bytes(s, G);
    copy_stream(ex->capture + s->record_offset[pc] + r0 * cb, ex->part[pc] + r0 * cb, (size_t)(r1 - r0) * cb);
    copy_stream(ex->capture + s->record_offset[ps] + r0 * sb, ex->part[ps] + r0 * sb, (size_t)(r1 - r0) * sb);
}

/* Biases, the exception area and the zero padding between parts: small, done by the caller. */
static void capture_rest(const neural_shape *s, const neural_expert *ex) {
    int64_t end = 0;
    for (int p = 0; p < NEURAL_PART_EXC; p++) {
        memset(ex->capture + end, 0, (size_t)(s->record_offset[p] - end));
        end = s->record_offset[p] + part_bytes(s, p);
    }
    memset(ex->capture + end, 0, (size_t)(s->record_offset[NEURAL_PART_EXC] - end));
    memcpy(ex->capture + s->record_offset[NEURAL_PART_GU_BIAS], ex->part[NEURAL_PART_GU_BIAS],
           (size_t)part_bytes(s, NEURAL_PART_GU_BIAS));
    memcpy(ex->capture + s->record_offset[NEURAL_PART_DN_BIAS], ex->part[NEURAL_PART_DN_BIAS],
           (size_t)part_bytes(s, NEURAL_PART_DN_BIAS));
    int64_t eb = exc_bytes(s, ex);
    if (eb) memcpy(ex->capture + s->record_offset[NEURAL_PART_EXC], ex->exc, (size_t)eb);
}

/* dst[r - r0] = dot(row r of matrix mat, z) + bias[r] for r in [r0, r1); the dot over the row's first gn blocks
   (all of them but for down with neural_expert.units, whose rows keep their full stride) */
static void matrix_rows(const neural_shape *s, const neural_expert *ex, const neural_kernels *kf, int mat, int gn,
                        const float *z, const uint16_t *zb, long r0, long r1, float *dst, volatile long *err) {
    int G = mat ? s->intermediate / 32 : s->hidden / 32;
    const uint8_t *codes = ex->part[mat ? NEURAL_PART_DN_CODES : NEURAL_PART_GU_CODES];
    const uint8_t *bias = ex->part[mat ? NEURAL_PART_DN_BIAS : NEURAL_PART_GU_BIAS];
    uint8_t sbuf[4][NEURAL_MAX_G + 32];
    for (long r = r0; r < r1; r += 4) {
        int n = (int)(r1 - r < 4 ? r1 - r : 4);
        const uint8_t *cp[4], *sp[4];
        float o[4];
        for (int i = 0; i < 4; i++) {
            long rr = r + (i < n ? i : n - 1);
            cp[i] = codes + (size_t)rr * (size_t)G * 16;
            sp[i] = i < n ? row_scales(s, ex, mat, rr, G, sbuf[i], err) : sp[n - 1];
        }
        kf->dot4(cp, sp, z, zb, gn, o);
        for (int i = 0; i < n; i++) dst[r - r0 + i] = o[i] + bf16_at(bias, r + i);
    }
    if (ex->capture) capture_rows(s, ex, mat, r0, r1);
}

/* ---- one token through k experts ---- */
/* One team run works through a list of row chunks: the gate_up chunks of every expert, then the
   down chunks. A down chunk of expert e waits (spinning) until e's gate_up rows are all done;
   those were handed out before any down chunk, so the wait is short and there is no barrier
   between the phases. The down chunks shrink towards the end of the list (at least CH_MIN rows)
   so that the threads finish together. */
typedef struct {
    int e, mat;
    long r0, r1;
} moe_unit;

static size_t units_bound(int k, long gu_rows, long dn_rows) {
    return (size_t)k * (size_t)((gu_rows + dn_rows) / CH_MIN + 2);
}

static long plan_units(moe_unit *u, int k, const long *gu_rows, long dn_rows, int threads) {
    long n = 0, all = 0;
    for (int e = 0; e < k; e++) all += gu_rows[e];
    long ch = chunk_rows(all, threads);
    for (int e = 0; e < k; e++)
        for (long r = 0; r < gu_rows[e]; r += ch) {
            moe_unit v = {e, 0, r, r + ch < gu_rows[e] ? r + ch : gu_rows[e]};
            u[n++] = v;
        }
    long chd = chunk_rows(dn_rows * k, threads), left = dn_rows * k;
    for (int e = 0; e < k; e++)
        for (long r = 0; r < dn_rows;) {
            long c = left / (2L * (threads > 0 ? threads : 1));
            c = (c < CH_MIN ? CH_MIN : (c > chd ? chd : c)) & ~3L;
            moe_unit v = {e, 1, r, r + c < dn_rows ? r + c : dn_rows};
            u[n++] = v;
            left -= v.r1 - v.r0;
            r = v.r1;
        }
    return n;
}

typedef struct {
    const neural_shape *s;
    const neural_expert *const *ex;
    int k;
    const float *zx;    /* permuted x (bf16-exact in bf16 mode) */
    float *act;         /* [k][I] permuted activations */
    const uint16_t *zb; /* x as bf16 bits, natural order (bf16 mode) */
    uint16_t *actb;     /* [k][I] activations as bf16 bits, natural order (bf16 mode) */
    float *y;           /* [k][H] down outputs (bias added), summed in routing order afterwards */
    const neural_kernels *kf;
    const moe_unit *units;
    long nunits;
    volatile long next;
    volatile long done[NEURAL_MAX_K]; /* gate_up rows finished per expert */
    volatile long units_done;         /* units finished; the thread finishing the last one sets end_us */
    double t0_us, end_us;             /* set by the threads taking the first unit and finishing the last */
    long gu_rows[NEURAL_MAX_K];       /* gate_up rows per expert: 2 x its units */
    volatile long err;
} moe_job;

static void wait_rows(volatile long *done, long rows) {
    for (long spins = 1; a_load(done) < rows; spins++) {
        cpu_relax();
        if ((spins & 1023) == 0) thread_yield();
    }
}

static void moe_work(void *ctx, int tid) {
    moe_job *j = (moe_job *)ctx;
    const neural_shape *s = j->s;
    const long I = s->intermediate, H = s->hidden;
    float h[CH_MAX], a[CH_MAX / 2];
    (void)tid;
    for (;;) {
        long c = neural_next_chunk(&j->next);
        if (c >= j->nunits) break;
        if (c == 0) j->t0_us = now_us(); /* the span starts with the work, not with the call (one thread: at the join) */
        const moe_unit *u = &j->units[c];
        float *act = j->act + (size_t)u->e * (size_t)I;
        uint16_t *actb = j->actb + (size_t)u->e * (size_t)I;
        if (u->mat == 0) {
            matrix_rows(s, j->ex[u->e], j->kf, 0, (int)(H / 32), j->zx, j->zb, u->r0, u->r1, h, &j->err);
            long np = (u->r1 - u->r0) / 2, q0 = u->r0 / 2;
            swiglu_pairs(j->kf, h, np, s->swiglu_limit, s->swiglu_alpha, a);
            for (long q = 0; q < np; q++)
                act[neural_perm_index((int)(q0 + q))] = input_value(s->bf16_inputs, a[q], &actb[q0 + q]);
            a_add(&j->done[u->e], u->r1 - u->r0); /* release: the activations above are visible */
        } else {
            wait_rows(&j->done[u->e], j->gu_rows[u->e]);
            matrix_rows(s, j->ex[u->e], j->kf, 1, (int)(j->gu_rows[u->e] / 64), act, actb, u->r0, u->r1,
                        j->y + (size_t)u->e * (size_t)H + u->r0, &j->err);
        }
        if (a_add(&j->units_done, 1) + 1 == j->nunits) j->end_us = now_us(); /* read after the join */
    }
    stream_fence();
}

/* The one-token call, under api_lock (also the multi-token call's path for one token), in two halves: begin plans the
   job and starts the team's workers on it, end joins the caller as thread 0, waits, and sums the experts in routing
   order. The units are handed out dynamically and each is computed the same way by whichever thread takes it, so
   the bits do not depend on when the caller joins. */
static moe_job job; /* one call at a time (api_lock) */
static const float *job_weights;
static float *job_out;

static int moe_token_begin_locked(const neural_shape *s, const neural_expert *const *experts, const float *weights,
                                  int k, const float *x, float *out) {
    int H = s->hidden, I = s->intermediate;
    size_t nf = (size_t)H + (size_t)k * (size_t)I; /* floats, then as many bf16 words (+ alignment) */
    size_t yo = ((nf + 15) & ~(size_t)15) + ((nf / 2 + 16 + 15) & ~(size_t)15);
    size_t uo = (yo + (size_t)k * (size_t)H + 15) & ~(size_t)15; /* the chunk list, after y */
    size_t ufloats = (units_bound(k, 2L * I, H) * sizeof(moe_unit) + sizeof(float) - 1) / sizeof(float);
    float *buf = workspace(uo + ufloats);
    if (!buf) return NEURAL_ENOMEM;
    uint16_t *bits = (uint16_t *)(buf + ((nf + 15) & ~(size_t)15));
    for (int i = 0; i < H; i++) buf[neural_perm_index(i)] = input_value(s->bf16_inputs, x[i], &bits[i]);
    for (int e = 0; e < k; e++)
        if (experts[e]->capture) capture_rest(s, experts[e]);
    moe_job *j = &job;
    memset(j, 0, sizeof *j);
    j->s = s, j->ex = experts, j->k = k, j->zx = buf, j->act = buf + H, j->kf = kernels_for(s);
    j->zb = bits, j->actb = bits + H, j->y = buf + yo;
    j->units = (moe_unit *)(buf + uo);
    for (int e = 0; e < k; e++) j->gu_rows[e] = 2 * expert_units(s, experts[e]);
    j->nunits = plan_units((moe_unit *)(buf + uo), k, j->gu_rows, H, neural_team_size());
    job_weights = weights, job_out = out;
    neural_team_start(moe_work, j);
    return NEURAL_OK;
}

static int moe_token_end_locked(double *span_us) {
    moe_job *j = &job;
    neural_team_join();
    if (span_us) *span_us = j->end_us - j->t0_us;
    const float *weights = job_weights;
    for (long r = 0; r < j->s->hidden; r++) {
        float acc = weights[0] * j->y[r];
        for (int e = 1; e < j->k; e++) acc = acc + weights[e] * j->y[(size_t)e * (size_t)j->s->hidden + r];
        job_out[r] = acc;
    }
    return (int)j->err;
}

static int moe_token_locked(const neural_shape *s, const neural_expert *const *experts, const float *weights, int k,
                            const float *x, float *out) {
    int rc = moe_token_begin_locked(s, experts, weights, k, x, out);
    return rc != NEURAL_OK ? rc : moe_token_end_locked(NULL);
}

static int moe_args_ok(const neural_shape *s, const neural_expert *const *experts, const float *weights, int k,
                       const float *x, const float *out) {
    if (!shape_ok(s) || !experts || !weights || !x || !out || k < 1 || k > NEURAL_MAX_K) return 0;
    for (int e = 0; e < k; e++)
        if (!expert_ok(experts[e]) || !expert_units(s, experts[e])) return 0;
    return 1;
}

int neural_moe_token(const neural_shape *s, const neural_expert *const *experts, const float *weights, int k,
                     const float *x, float *out) {
    if (!moe_args_ok(s, experts, weights, k, x, out)) return NEURAL_EINVAL;
    nm_lock(&api_lock);
    ensure_init();
    int rc = moe_token_locked(s, experts, weights, k, x, out);
    nm_unlock(&api_lock);
    return rc;
}

static volatile long begun = 0; /* a begin whose end has not come: that thread holds api_lock */

int neural_moe_token_begin(const neural_shape *s, const neural_expert *const *experts, const float *weights, int k,
                           const float *x, float *out) {
    if (!moe_args_ok(s, experts, weights, k, x, out)) return NEURAL_EINVAL;
    nm_lock(&api_lock);
    ensure_init();
    int rc = moe_token_begin_locked(s, experts, weights, k, x, out);
    if (rc != NEURAL_OK) {
        nm_unlock(&api_lock);
        return rc;
    }
    a_store(&begun, 1);
    return NEURAL_OK;
}

int neural_moe_token_end(double *span_us) {
    if (!a_load(&begun)) return NEURAL_EINVAL; /* no begin to end (the lock is not ours to release) */
    int rc = moe_token_end_locked(span_us);
    a_store(&begun, 0);
    nm_unlock(&api_lock);
    return rc;
}

/* ---- up to NEURAL_MAX_TOKENS tokens through one expert ---- */
/* Rows go in groups of 4: their blocks are decoded once (tok_seg() at a time) and every
   token then runs the canonical per-lane arithmetic on them from register tiles of 4 rows x 2-4
   tokens, so the decode and the code bytes are shared by all the tokens. One call takes every
   token routed to an expert (a 512-token prompt gives ~16 per expert, a 3,000-token one ~94), so
   the expert's bytes come from DRAM once per layer, not once per 16 tokens. */
typedef struct {
    const neural_shape *s;
    const neural_expert *ex;
    int ntok;
    const float *zx;     /* [ntok][H] permuted inputs (bf16-exact in bf16 mode) */
    const uint16_t *zb;  /* [ntok][H] the same as bf16 bits, natural order (bf16 mode) */
    float *act;          /* [ntok][I] permuted activations */
    uint16_t *actb;      /* [ntok][I] activations as bf16 bits, natural order (bf16 mode) */
    const float *w;
    float *out;
    float *scratch; /* per thread: accumulators, decoded q and scales, results (tok_layout) */
    size_t stride;
    const neural_kernels *kf;
    int mat;
    volatile long next;
    long nchunks;
    volatile long err;
} tok_job;

/* Near-equal token groups of at most 4 (a register tile's width): 17 tokens go 4,4,3,3,3 rather
   than 4,4,4,4,1, whose 1-token tile would load 4 rows of q for 4 products. */
static int tok_groups(int ntok) { return (ntok + 3) / 4; }
static int tok_group_size(int ntok, int gi) { int ng = tok_groups(ntok); return ntok / ng + (gi < ntok % ng); }

/* Blocks per decode4 call: whole rows up to NEURAL_TOK_SEG blocks (4 rows of q are 23 KB as bf16 at
   the 120b width). The token tiles then run the whole dot product in registers; their inputs
   stream from L2. MEASURED on the Zen 4 VM (1 thread, 120b expert, bf16): 16 / 32 / 64 tokens
   77 / 83 / 86 GFLOP/s with whole rows against 74 / 80 / 83 with 16-block segments. */
static int tok_seg(int G) { return G < NEURAL_TOK_SEG ? G : NEURAL_TOK_SEG; }

/* Per-thread scratch (floats): accumulators [groups][4 rows][4 tokens][16], q [4][seg][32],
   scales [4][seg], results [ntok][CH_TOK_GATE_UP], SwiGLU activations [CH_TOK_GATE_UP / 2]. */
typedef struct {
    size_t acc, q, S, res, a, stride;
} tok_layout;

static tok_layout tok_layout_for(int ntok) {
    tok_layout L;
    L.acc = 0;
    L.q = L.acc + (size_t)tok_groups(ntok) * 4 * NEURAL_TOK_ACC_ROW;
    L.S = L.q + 4 * NEURAL_TOK_SEG * 32;
    L.res = L.S + 4 * NEURAL_TOK_SEG;
    L.a = L.res + (size_t)ntok * CH_TOK_GATE_UP;
    L.stride = (L.a + CH_TOK_GATE_UP / 2 + 16 + 15) & ~(size_t)15;
    return L;
}

/* the fixed tree of NUMERICS over the 16 lanes of one accumulator */
static float reduce16(const float *a) {
#if defined(__x86_64__) || defined(_M_X64)
    __m128 b0 = _mm_add_ps(_mm_loadu_ps(a), _mm_loadu_ps(a + 8)), b1 = _mm_add_ps(_mm_loadu_ps(a + 4), _mm_loadu_ps(a + 12));
    __m128 c = _mm_add_ps(b0, b1);
    __m128 d = _mm_add_ps(c, _mm_movehl_ps(c, c));
    return _mm_cvtss_f32(_mm_add_ss(d, _mm_shuffle_ps(d, d, 1)));
#else
    float b[8];
    for (int l = 0; l < 8; l++) b[l] = a[l] + a[l + 8];
    for (int l = 0; l < 4; l++) b[l] = b[l] + b[l + 4];
    for (int l = 0; l < 2; l++) b[l] = b[l] + b[l + 2];
    return b[0] + b[1];
#endif
}

/* res[t][r - r0] = dot(row r, input t) + bias for every token t and r in [r0, r1) */
static void token_rows(tok_job *j, float *scr, long r0, long r1, const float *zf, const uint16_t *zb, long zstride,
                       float *res, long rstride) {
    const neural_shape *s = j->s;
    const neural_expert *ex = j->ex;
    const neural_kernels *kf = j->kf;
    int mat = j->mat, G = mat ? s->intermediate / 32 : s->hidden / 32, ntok = j->ntok;
    const uint8_t *codes = ex->part[mat ? NEURAL_PART_DN_CODES : NEURAL_PART_GU_CODES];
    const uint8_t *bias = ex->part[mat ? NEURAL_PART_DN_BIAS : NEURAL_PART_GU_BIAS];
    tok_layout L = tok_layout_for(ntok);
    float *acc = scr + L.acc, *S = scr + L.S;
    void *q = scr + L.q;
    int ng = tok_groups(ntok), seg = tok_seg(G);
    if (kf->rows4tok && (!kf->tile4 || ntok <= kf->rows_tok_max)) { /* r1 - r0 <= CH_TOK_GATE_UP: a chunk */
        /* tokens in near-equal groups of 2-4, each row decoded in registers per group. The group is the outer
           loop: one group's inputs (4 x 2,880 fp32 = 46 KB at the 120b width, half in bf16) are read for
           every row of the chunk while they are in L1/L2, where the row-quad outer loop read each group's
           once per quad, through all the other groups' (16 tokens: 184 KB a quad). Each (row, token) is
           the same call's result either way: the same bits. `bench/kernel/tokens_ab.py --isa avx512 --threads 2`
           on the Zen 4 VM, old and new alternated in fresh processes, ms a group: 8 tokens 1.627 / 1.614 ->
           1.431 / 1.432, 16 tokens 3.058 / 3.046 -> 2.778 / 2.785, 4 tokens (one group) unchanged; the
           vdpbf16ps table (bf16 inputs, 23 KB a group) unchanged at 8 and 16; AVX2 8 tokens 2.679 / 2.589 ->
           2.461 / 2.477, 16 tokens 5.212 / 5.096 -> 4.860 / 4.864 (MEASURED, session 31). */
        uint8_t sbuf[CH_TOK_GATE_UP][NEURAL_MAX_G + 32];
        const uint8_t *cq[CH_TOK_GATE_UP], *sq[CH_TOK_GATE_UP];
        long nr = r1 - r0;
        if (nr > CH_TOK_GATE_UP) { /* the callers' chunks are at most this; the arrays above are sized for it */
            j->err = NEURAL_EINVAL;
            return;
        }
        for (long i = 0; i < nr; i++) {
            cq[i] = codes + (size_t)(r0 + i) * (size_t)G * 16;
            sq[i] = row_scales(s, ex, mat, r0 + i, G, sbuf[i], &j->err);
        }
        int ng2 = (ntok + 3) / 4;
        for (int gi = 0, t0 = 0; gi < ng2; gi++) {
            int nt = ntok / ng2 + (gi < ntok % ng2);
            const void *zp[4];
            for (int t = 0; t < nt; t++)
                zp[t] = kf->tok_bf16 ? (const void *)(zb + (size_t)(t0 + t) * (size_t)zstride)
                                     : (const void *)(zf + (size_t)(t0 + t) * (size_t)zstride);
            for (long r = 0; r < nr; r += 4) {
                int n = (int)(nr - r < 4 ? nr - r : 4);
                const uint8_t *cp[4], *sp[4];
                for (int i = 0; i < 4; i++) cp[i] = cq[r + (i < n ? i : n - 1)], sp[i] = sq[r + (i < n ? i : n - 1)];
                float o[16];
                kf->rows4tok(cp, sp, G, zp, nt, o);
                for (int i = 0; i < n; i++) {
                    float b = bf16_at(bias, r0 + r + i);
                    for (int t = 0; t < nt; t++) res[(size_t)(t0 + t) * (size_t)rstride + (size_t)(r + i)] = o[4 * i + t] + b;
                }
            }
            t0 += nt;
        }
        if (ex->capture) capture_rows(s, ex, mat, r0, r1);
        return;
    }
    uint8_t sbuf[4][NEURAL_MAX_G + 32];
    for (long r = r0; r < r1; r += 4) {
        int n = (int)(r1 - r < 4 ? r1 - r : 4);
        const uint8_t *cp[4], *sp[4];
        for (int i = 0; i < 4; i++) {
            long rr = r + (i < n ? i : n - 1);
            cp[i] = codes + (size_t)rr * (size_t)G * 16;
            sp[i] = i < n ? row_scales(s, ex, mat, rr, G, sbuf[i], &j->err) : sp[n - 1];
        }
        memset(acc, 0, (size_t)ng * 4 * NEURAL_TOK_ACC_ROW * sizeof(float));
        for (int g0 = 0; g0 < G; g0 += seg) {
            int nb = G - g0 < seg ? G - g0 : seg;
            kf->decode4(cp, sp, g0, nb, q, S);
            for (int gi = 0, t0 = 0; gi < ng; gi++) {
                int nt = tok_group_size(ntok, gi);
                const void *zp[4];
                for (int i = 0; i < nt; i++) {
                    size_t o = (size_t)(t0 + i) * (size_t)zstride + 32 * (size_t)g0;
                    zp[i] = kf->tok_bf16 ? (const void *)(zb + o) : (const void *)(zf + o);
                }
                kf->tile4(q, S, nb, zp, nt, acc + (size_t)gi * 4 * NEURAL_TOK_ACC_ROW);
                t0 += nt;
            }
        }
        for (int gi = 0, t0 = 0; gi < ng; gi++) {
            int nt = tok_group_size(ntok, gi);
            const float *ag = acc + (size_t)gi * 4 * NEURAL_TOK_ACC_ROW;
            for (int i = 0; i < n; i++) {
                float b = bf16_at(bias, r + i);
                for (int t = 0; t < nt; t++)
                    res[(size_t)(t0 + t) * (size_t)rstride + (size_t)(r - r0 + i)] =
                        reduce16(ag + i * NEURAL_TOK_ACC_ROW + 16 * t) + b;
            }
            t0 += nt;
        }
    }
    if (ex->capture) capture_rows(s, ex, mat, r0, r1);
}

static void tok_gate_up(void *ctx, int tid) {
    tok_job *j = (tok_job *)ctx;
    const neural_shape *s = j->s;
    long rows = 2L * s->intermediate, I = s->intermediate;
    tok_layout L = tok_layout_for(j->ntok);
    float *scr = j->scratch + (size_t)tid * j->stride, *h = scr + L.res, *a = scr + L.a;
    for (;;) {
        long c = neural_next_chunk(&j->next);
        if (c >= j->nchunks) break;
        long r0 = c * CH_TOK_GATE_UP, r1 = r0 + CH_TOK_GATE_UP < rows ? r0 + CH_TOK_GATE_UP : rows;
        token_rows(j, scr, r0, r1, j->zx, j->zb, s->hidden, h, CH_TOK_GATE_UP);
        long np = (r1 - r0) / 2, q0 = r0 / 2;
        for (int t = 0; t < j->ntok; t++) {
            float *act = j->act + (size_t)t * (size_t)I;
            uint16_t *actb = j->actb + (size_t)t * (size_t)I;
            swiglu_pairs(j->kf, h + (size_t)t * CH_TOK_GATE_UP, np, s->swiglu_limit, s->swiglu_alpha, a);
            for (long q = 0; q < np; q++)
                act[neural_perm_index((int)(q0 + q))] = input_value(s->bf16_inputs, a[q], &actb[q0 + q]);
        }
    }
    stream_fence();
}

static void tok_down(void *ctx, int tid) {
    tok_job *j = (tok_job *)ctx;
    const neural_shape *s = j->s;
    float *scr = j->scratch + (size_t)tid * j->stride, *y = scr + tok_layout_for(j->ntok).res;
    for (;;) {
        long c = neural_next_chunk(&j->next);
        if (c >= j->nchunks) break;
        long r0 = c * CH_TOK_DOWN, r1 = r0 + CH_TOK_DOWN < s->hidden ? r0 + CH_TOK_DOWN : s->hidden;
        token_rows(j, scr, r0, r1, j->act, j->actb, s->intermediate, y, CH_TOK_DOWN);
        for (int t = 0; t < j->ntok; t++)
            for (long r = r0; r < r1; r++)
                j->out[(size_t)t * (size_t)s->hidden + (size_t)r] =
                    j->w[t] * y[(size_t)t * CH_TOK_DOWN + (size_t)(r - r0)];
    }
    stream_fence();
}

/* one expert over ntok (1..NEURAL_MAX_TOKENS) tokens, under api_lock */
static int expert_tokens_locked(const neural_shape *s, const neural_expert *expert, int ntok, const float *x,
                                const float *weights, float *out) {
    if (ntok == 1) /* out = w * expert(x): the one-token call's arithmetic, and its streaming loop */
        return moe_token_locked(s, &expert, weights, 1, x, out);
    int H = s->hidden, I = s->intermediate, nt = neural_team_size();
    size_t nio = (size_t)ntok * ((size_t)H + (size_t)I); /* floats, then as many bf16 words */
    size_t so = (nio + 15) & ~(size_t)15, xo = so + ((nio / 2 + 16 + 15) & ~(size_t)15);
    size_t stride = tok_layout_for(ntok).stride;
    float *buf = workspace(xo + stride * (size_t)nt);
    if (!buf) return NEURAL_ENOMEM;
    uint16_t *bits = (uint16_t *)(buf + so);
    for (int t = 0; t < ntok; t++)
        for (int i = 0; i < H; i++) {
            size_t o = (size_t)t * H;
            buf[o + neural_perm_index(i)] = input_value(s->bf16_inputs, x[o + i], &bits[o + i]);
        }
    if (expert->capture) capture_rest(s, expert);
    tok_job j;
    memset(&j, 0, sizeof j);
    j.s = s, j.ex = expert, j.ntok = ntok, j.zx = buf, j.zb = bits, j.w = weights, j.out = out;
    j.act = buf + (size_t)ntok * H, j.actb = bits + (size_t)ntok * H;
    j.scratch = buf + xo, j.stride = stride, j.kf = kernels_for(s);
    j.mat = 0;
    j.nchunks = (2L * I + CH_TOK_GATE_UP - 1) / CH_TOK_GATE_UP;
    neural_team_run(tok_gate_up, &j);
    j.mat = 1;
    j.next = 0;
    j.nchunks = (H + CH_TOK_DOWN - 1) / CH_TOK_DOWN;
    neural_team_run(tok_down, &j);
    return (int)j.err;
}

int neural_expert_tokens(const neural_shape *s, const neural_expert *expert, int ntok, const float *x,
                         const float *weights, float *out) {
    if (!shape_ok(s) || !expert_ok(expert) || expert->units || !x || !weights || !out || ntok < 1 ||
        ntok > NEURAL_MAX_TOKENS)
        return NEURAL_EINVAL;
    nm_lock(&api_lock);
    ensure_init();
    int rc = expert_tokens_locked(s, expert, ntok, x, weights, out);
    nm_unlock(&api_lock);
    return rc;
}

/* Several experts' token groups in one call (the prompt path's per-expert loop without a Python
   round trip per expert): group g is rows [sum(counts[<g]), +counts[g]) of x / weights / out, in
   calls of at most NEURAL_MAX_TOKENS; each group gives the bits of neural_expert_tokens on it. */
int neural_expert_groups(const neural_shape *s, const neural_expert *const *experts, const int32_t *counts,
                         int ngroups, const float *x, const float *weights, float *out) {
    if (!shape_ok(s) || !experts || !counts || !x || !weights || !out || ngroups < 0) return NEURAL_EINVAL;
    for (int g = 0; g < ngroups; g++)
        if (!expert_ok(experts[g]) || experts[g]->units || counts[g] < 0) return NEURAL_EINVAL;
    nm_lock(&api_lock);
    ensure_init();
    int rc = NEURAL_OK;
    size_t row = 0, H = (size_t)s->hidden;
    for (int g = 0; g < ngroups && rc == NEURAL_OK; g++)
        for (int32_t t = 0; t < counts[g] && rc == NEURAL_OK; t += NEURAL_MAX_TOKENS) {
            int n = counts[g] - t < NEURAL_MAX_TOKENS ? (int)(counts[g] - t) : NEURAL_MAX_TOKENS;
            rc = expert_tokens_locked(s, experts[g], n, x + row * H, weights + row, out + row * H);
            row += (size_t)n;
        }
    nm_unlock(&api_lock);
    return rc;
}

/* ---- DRAM read probe ---- */
typedef struct {
    const uint8_t *p;
    size_t n;
    volatile long next;
    long nchunks;
    const neural_kernels *kf;
    uint64_t sums[NEURAL_MAX_THREADS];
} probe_job;

static void probe_run(void *ctx, int tid) {
    probe_job *j = (probe_job *)ctx;
    uint64_t s = 0;
    for (;;) {
        long c = neural_next_chunk(&j->next);
        if (c >= j->nchunks) break;
        size_t off = (size_t)c * CH_PROBE, len = j->n - off < CH_PROBE ? j->n - off : CH_PROBE;
        s ^= j->kf->read(j->p + off, len);
    }
    j->sums[tid] = s;
}

/* A plain copy with non-temporal stores, on the calling thread (no team, no lock): the staging
   ring packs experts into pinned buffers the CPU never reads back, so skipping the
   read-for-ownership of the destination saves a third of the memory traffic. */
void neural_copy_stream(void *dst, const void *src, size_t n) {
    copy_stream((uint8_t *)dst, (const uint8_t *)src, n);
    stream_fence();
}

/* Page hints for memory-mapped stores: huge pages (fewer TLB misses and page walks over a 13 MB
   expert), or the page tables filled in one call instead of one fault per 4 KiB on first touch. */
#if defined(_WIN32)
typedef struct {
    void *VirtualAddress;
    SIZE_T NumberOfBytes;
} neural_range_entry; /* WIN32_MEMORY_RANGE_ENTRY (Windows 8+), looked up at run time */
typedef BOOL(WINAPI *neural_prefetch_fn)(HANDLE, ULONG_PTR, neural_range_entry *, ULONG);
#else
#include <errno.h>
#include <sys/mman.h>
#endif

int neural_advise(const void *p, size_t n, int advice) {
    if (!p || advice < NEURAL_ADVISE_HUGE || advice > NEURAL_ADVISE_WILLNEED) return NEURAL_EINVAL;
    if (n == 0) return NEURAL_OK;
#if defined(_WIN32)
    if (advice == NEURAL_ADVISE_HUGE) return NEURAL_EUNSUPPORTED; /* large pages need a pagefile-backed section */
    HMODULE k32 = GetModuleHandleA("kernel32.dll");
    neural_prefetch_fn fn = k32 ? (neural_prefetch_fn)(void (*)(void))GetProcAddress(k32, "PrefetchVirtualMemory") : NULL;
    if (!fn) return NEURAL_EUNSUPPORTED;
    neural_range_entry r = {(void *)p, n};
    return fn(GetCurrentProcess(), 1, &r, 0) ? NEURAL_OK : NEURAL_EUNSUPPORTED;
#else
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)(page - 1);
    size_t len = (size_t)((uintptr_t)p + n - a);
    int adv;
    switch (advice) {
#ifdef MADV_HUGEPAGE
    case NEURAL_ADVISE_HUGE: adv = MADV_HUGEPAGE; break;
#endif
    case NEURAL_ADVISE_POPULATE:
#ifdef MADV_POPULATE_READ
        adv = MADV_POPULATE_READ;
#else
        adv = 22; /* MADV_POPULATE_READ, Linux 5.14 (older headers lack the name) */
#endif
        break;
    case NEURAL_ADVISE_WILLNEED: adv = MADV_WILLNEED; break;
    default: return NEURAL_EUNSUPPORTED;
    }
    if (madvise((void *)a, len, adv) == 0) return NEURAL_OK;
    return errno == EINVAL || errno == ENOSYS ? NEURAL_EUNSUPPORTED : NEURAL_EINVAL;
#endif
}

uint64_t neural_probe_read(const void *buf, size_t bytes) {
    nm_lock(&api_lock);
    ensure_init();
    probe_job *j = (probe_job *)calloc(1, sizeof(probe_job));
    uint64_t s = 0;
    if (j) {
        j->p = (const uint8_t *)buf, j->n = bytes, j->kf = kern;
        j->nchunks = (long)((bytes + CH_PROBE - 1) / CH_PROBE);
        neural_team_run(probe_run, j);
        for (int t = 0; t < neural_team_size(); t++) s ^= j->sums[t];
        free(j);
    }
    nm_unlock(&api_lock);
    return s;
}
