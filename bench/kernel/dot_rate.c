/*
 * Compute rate of the expert kernel's inner loops with their data in L1 (no memory in the way):
 * the one-token dot4 (4 rows x 1 input) and the multi-token loops (decode4 + tile4, or AVX2's
 * rows4tok in groups of up to 4 tokens) for T inputs,
 * per ISA path this CPU has, on one thread, in GB/s of MXFP4 bytes (16 code bytes + 1 scale
 * byte per block-row) per CPU-second. If the kernel reads memory no faster than this, it is
 * compute-bound; the ratio to a DRAM probe cannot exceed this rate / the probe's.
 *
 *   cc -O2 -ffp-contract=off -std=gnu11 -Inative bench/kernel/dot_rate.c native/neural_isa.c -lm -o dot-rate
 *   ./dot-rate [SECONDS]
 *
 * It also prints the CPU's peak rate of independent FMAs (the floor of the multi-token loops:
 * 6 ymm or 3 zmm operations per block-row and token).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "neural_experts.h"
#include "neural_internal.h"

#if NEURAL_X86
#include <immintrin.h>
#endif

#if defined(__x86_64__) || defined(_M_X64)
#if defined(_MSC_VER)
#include <intrin.h>
#else
#include <cpuid.h>
#endif
#endif

#define G 90 /* blocks per row at the 120b shape */

static double cpu_now(void) {
#if defined(CLOCK_THREAD_CPUTIME_ID)
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
#else
    return (double)clock() / CLOCKS_PER_SEC;
#endif
}

static int has(const char *isa) { /* the same test as neural_cpu_features, via the compiler's builtins */
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (!strcmp(isa, "avx2")) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (!strcmp(isa, "avx512")) return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                       __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    if (!strcmp(isa, "avx512bf16")) {
        unsigned a, b, c, d;
        if (!has("avx512") || !__get_cpuid_count(7, 1, &a, &b, &c, &d)) return 0;
        return (a >> 5) & 1;
    }
#endif
    return !strcmp(isa, "scalar");
}

static uint8_t codes[4][G * 16], scales[4][G];
static float z[16][G * 32];
static uint16_t zb[16][G * 32];
static float qbuf[4 * NEURAL_TOK_SEG * 32], sbuf[4 * NEURAL_TOK_SEG], acc[4 * NEURAL_TOK_ACC_ROW];
static volatile float sink;

static void run(const char *name, const neural_kernels *k, double secs) {
    const uint8_t *cp[4] = {codes[0], codes[1], codes[2], codes[3]}, *sp[4] = {scales[0], scales[1], scales[2], scales[3]};
    const double bytes = 4.0 * G * 17;
    float out[16];
    long n = 0;
    double t0 = cpu_now(), t;
    do {
        for (int i = 0; i < 64; i++, n++) k->dot4(cp, sp, z[0], zb[0], G, out);
        sink = out[0];
    } while ((t = cpu_now() - t0) < secs);
    printf("%-10s one token (dot4)      : %6.2f GB/s per CPU-second (%.2f ns per block-row)\n", name, n * bytes / t / 1e9,
           t / (n * 4.0 * G) * 1e9);
    for (int T = 2; T <= 16; T *= 2) {
        n = 0, t0 = cpu_now();
        do {
            for (int i = 0; i < 16; i++, n++) {
                if (k->rows4tok) { /* as neural_experts.c: groups of 2-4 tokens */
                    for (int t0k = 0; t0k < T; t0k += 4) {
                        const void *zp[4];
                        for (int j = 0; j < 4; j++)
                            zp[j] = k->tok_bf16 ? (const void *)zb[t0k + j] : (const void *)z[t0k + j];
                        k->rows4tok(cp, sp, G, zp, T - t0k < 4 ? T - t0k : 4, out);
                    }
                    continue;
                }
                memset(acc, 0, sizeof acc);
                for (int g0 = 0; g0 < G; g0 += NEURAL_TOK_SEG) {
                    int nb = G - g0 < NEURAL_TOK_SEG ? G - g0 : NEURAL_TOK_SEG;
                    k->decode4(cp, sp, g0, nb, qbuf, sbuf);
                    for (int t0k = 0; t0k < T; t0k += 4) {
                        const void *zp[4];
                        for (int j = 0; j < 4; j++)
                            zp[j] = k->tok_bf16 ? (const void *)(zb[t0k + j] + 32 * g0) : (const void *)(z[t0k + j] + 32 * g0);
                        k->tile4(qbuf, sbuf, nb, zp, T - t0k < 4 ? T - t0k : 4, acc + 16 * t0k);
                    }
                }
            }
            sink = acc[0] + out[0];
        } while ((t = cpu_now() - t0) < secs);
        printf("%-10s %2d tokens (%s) : %6.2f GB/s per CPU-second (%.2f ns per block-row and token)\n", name, T,
               k->rows4tok ? "rows4tok" : "tiles   ",
               n * bytes / t / 1e9, t / (n * 4.0 * G * T) * 1e9);
    }
}

#if NEURAL_X86
/* Peak fused multiply-adds: 10 independent chains, the ceiling the canonical arithmetic's FLOPs
   are measured against (AVX2: 8 lanes; AVX-512: 16). */
NEURAL_TARGET_AVX2 static void fma_peak_avx2(double secs) {
    __m256 a[10], m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-4f);
    for (int i = 0; i < 10; i++) a[i] = _mm256_set1_ps(0.001f * (float)i);
    long n = 0;
    double t0 = cpu_now(), t;
    do {
        for (int r = 0; r < 100000; r++, n++) {
            a[0] = _mm256_fmadd_ps(a[0], m, c), a[1] = _mm256_fmadd_ps(a[1], m, c);
            a[2] = _mm256_fmadd_ps(a[2], m, c), a[3] = _mm256_fmadd_ps(a[3], m, c);
            a[4] = _mm256_fmadd_ps(a[4], m, c), a[5] = _mm256_fmadd_ps(a[5], m, c);
            a[6] = _mm256_fmadd_ps(a[6], m, c), a[7] = _mm256_fmadd_ps(a[7], m, c);
            a[8] = _mm256_fmadd_ps(a[8], m, c), a[9] = _mm256_fmadd_ps(a[9], m, c);
        }
    } while ((t = cpu_now() - t0) < secs);
    float v[8];
    _mm256_storeu_ps(v, _mm256_add_ps(a[0], a[9]));
    sink = v[0];
    printf("peak ymm fma: %.2f G per CPU-second\n", n * 10.0 / t / 1e9);
}

NEURAL_TARGET_AVX512 static void fma_peak_avx512(double secs) {
    __m512 a[10], m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-4f);
    for (int i = 0; i < 10; i++) a[i] = _mm512_set1_ps(0.001f * (float)i);
    long n = 0;
    double t0 = cpu_now(), t;
    do {
        for (int r = 0; r < 100000; r++, n++) {
            a[0] = _mm512_fmadd_ps(a[0], m, c), a[1] = _mm512_fmadd_ps(a[1], m, c);
            a[2] = _mm512_fmadd_ps(a[2], m, c), a[3] = _mm512_fmadd_ps(a[3], m, c);
            a[4] = _mm512_fmadd_ps(a[4], m, c), a[5] = _mm512_fmadd_ps(a[5], m, c);
            a[6] = _mm512_fmadd_ps(a[6], m, c), a[7] = _mm512_fmadd_ps(a[7], m, c);
            a[8] = _mm512_fmadd_ps(a[8], m, c), a[9] = _mm512_fmadd_ps(a[9], m, c);
        }
    } while ((t = cpu_now() - t0) < secs);
    sink = _mm512_reduce_add_ps(_mm512_add_ps(a[0], a[9]));
    printf("peak zmm fma: %.2f G per CPU-second\n", n * 10.0 / t / 1e9);
}
#endif

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 1.0;
    neural_tables_init();
    neural_prefetch_bytes = 0;
    srand(7);
    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < G * 16; j++) codes[i][j] = (uint8_t)rand();
        for (int j = 0; j < G; j++) scales[i][j] = (uint8_t)(120 + rand() % 7);
    }
    for (int t = 0; t < 16; t++)
        for (int j = 0; j < G * 32; j++) { /* bf16-exact inputs, so every path runs its real loop */
            zb[t][j] = (uint16_t)(0x3E00 + rand() % 0x200) | (uint16_t)((rand() & 1) << 15);
            uint32_t u = (uint32_t)zb[t][j] << 16;
            memcpy(&z[t][neural_perm_index(j)], &u, 4);
        }
    run("scalar", &neural_kernels_scalar, secs / 4);
#if NEURAL_X86
    if (has("avx2")) {
        fma_peak_avx2(secs / 2);
        run("avx2", &neural_kernels_avx2, secs);
    }
    if (has("avx512")) {
        fma_peak_avx512(secs / 2);
        run("avx512", &neural_kernels_avx512, secs);
    }
    if (has("avx512bf16")) run("avx512bf16", &neural_kernels_avx512bf16, secs);
#endif
    return 0;
}
