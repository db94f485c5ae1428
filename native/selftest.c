/*
 * Standalone self-test of the native expert kernel, for builds without Python (the MinGW-w64
 * cross build run under Wine, an MSVC build on Windows). Build it with the three kernel sources:
 *
 *   cc -O2 -ffp-contract=off -std=gnu11 -pthread native/selftest.c native/neural_experts.c \
 *      native/neural_isa.c native/neural_team.c -lm -o neural-selftest
 *
 * It checks, for random experts in the raw and the packed format (with fallback scale rows),
 * that every ISA path and thread counts 1..4 give bit-identical results, that the multi-token
 * call equals repeated one-token calls, and that copy-on-compute captures the record bytes.
 * It prints one hash of the result bits: builds for different platforms must print the same.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "neural_experts.h"

#define H 320
#define I 192
#define K 4
#define NTOK 5

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}
static float rnd_normalish(void) { return ((float)(rnd() % 20001) - 10000.0f) / 5000.0f; }

static int64_t align64(int64_t v) { return (v + 63) & ~(int64_t)63; }

typedef struct {
    uint8_t gu_codes[2 * I * (H / 32) * 16], gu_scales[2 * I * (H / 32)];
    uint8_t dn_codes[H * (I / 32) * 16], dn_scales[H * (I / 32)];
    uint16_t gu_bias[2 * I], dn_bias[H];
} parts_t;

/* record layout + bytes (packed: base + nibbles, 0xFF rows to the exception area) */
static size_t make_record(const parts_t *p, int packed, uint8_t *rec, neural_shape *s, uint32_t *n_exc) {
    const int G1 = H / 32, G2 = I / 32;
    const int64_t sizes[6] = {
        2 * I * G1 * 16, 2 * I * (packed ? 1 + (G1 + 1) / 2 : G1), H * G2 * 16, H * (packed ? 1 + (G2 + 1) / 2 : G2),
        2 * I * 2, H * 2};
    int64_t off = 0;
    for (int i = 0; i < 6; i++) {
        off = align64(off);
        s->record_offset[i] = off;
        off += sizes[i];
    }
    s->record_offset[6] = align64(off);
    s->hidden = H, s->intermediate = I, s->format = packed ? NEURAL_FORMAT_PACKED : NEURAL_FORMAT_RAW;
    s->swiglu_limit = 7.0f, s->swiglu_alpha = 1.702f;
    memset(rec, 0, (size_t)s->record_offset[6]);
    memcpy(rec + s->record_offset[0], p->gu_codes, sizeof p->gu_codes);
    memcpy(rec + s->record_offset[2], p->dn_codes, sizeof p->dn_codes);
    memcpy(rec + s->record_offset[4], p->gu_bias, sizeof p->gu_bias);
    memcpy(rec + s->record_offset[5], p->dn_bias, sizeof p->dn_bias);
    *n_exc = 0;
    if (!packed) {
        memcpy(rec + s->record_offset[1], p->gu_scales, sizeof p->gu_scales);
        memcpy(rec + s->record_offset[3], p->dn_scales, sizeof p->dn_scales);
        return (size_t)s->record_offset[6];
    }
    uint32_t ids[2 * I + H];
    const uint8_t *raws[2 * I + H];
    int gs[2 * I + H];
    for (int m = 0; m < 2; m++) {
        int rows = m ? H : 2 * I, G = m ? G2 : G1, P = 1 + (G + 1) / 2;
        const uint8_t *sc = m ? p->dn_scales : p->gu_scales;
        uint8_t *dst = rec + s->record_offset[m ? 3 : 1];
        for (int r = 0; r < rows; r++) {
            const uint8_t *row = sc + r * G;
            int lo = 255, hi = 0;
            for (int g = 0; g < G; g++) lo = row[g] < lo ? row[g] : lo, hi = row[g] > hi ? row[g] : hi;
            uint8_t *d = dst + r * P;
            memset(d, 0, (size_t)P);
            if (hi - lo > 15 || lo == 255) {
                d[0] = 0xFF;
                ids[*n_exc] = (uint32_t)(m ? 2 * I + r : r);
                raws[*n_exc] = row;
                gs[(*n_exc)++] = G;
                continue;
            }
            d[0] = (uint8_t)lo;
            for (int g = 0; g < G; g++) d[1 + g / 2] |= (uint8_t)((row[g] - lo) << ((g & 1) * 4));
        }
    }
    uint8_t *e = rec + s->record_offset[6];
    for (uint32_t i = 0; i < *n_exc; i++) {
        uint32_t v = ids[i];
        for (int b = 0; b < 4; b++) e[4 * i + b] = (uint8_t)(v >> (8 * b));
    }
    size_t pos = 4 * (size_t)*n_exc;
    for (uint32_t i = 0; i < *n_exc; i++) memcpy(e + pos, raws[i], (size_t)gs[i]), pos += (size_t)gs[i];
    return (size_t)s->record_offset[6] + pos;
}

static void set_parts(neural_expert *ex, const uint8_t *rec, const neural_shape *s, uint32_t n_exc, uint8_t *cap) {
    for (int i = 0; i < 6; i++) ex->part[i] = rec + s->record_offset[i];
    ex->exc = n_exc ? rec + s->record_offset[6] : NULL;
    ex->n_exc = n_exc;
    ex->capture = cap;
    ex->units = 0;
}

static uint64_t fnv(const void *p, size_t n, uint64_t h) {
    const uint8_t *b = (const uint8_t *)p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001B3ull;
    return h;
}

static int fail(const char *what, int isa, int threads) {
    printf("selftest FAILED: %s (isa %s, %d threads)\n", what, neural_isa_name(isa), threads);
    return 1;
}

int main(void) {
    static parts_t parts[K];
    static uint8_t rec[2][K][sizeof(parts_t) + 8192], cap[K][sizeof(parts_t) + 8192];
    static float x[NTOK][H], out[H], ref[H], multi[NTOK][H], one[H];
    neural_shape shape[2];
    neural_expert ex[2][K], cex[K];
    const neural_expert *exp[2][K], *cexp[K];
    uint32_t n_exc[2][K];
    size_t rbytes[2][K];
    float w[K] = {0.4f, 0.3f, 0.2f, 0.1f}, wt[NTOK] = {1.0f, 0.5f, 0.25f, 2.0f, 0.75f};

    for (int e = 0; e < K; e++) {
        parts_t *p = &parts[e];
        for (size_t i = 0; i < sizeof p->gu_codes; i++) p->gu_codes[i] = (uint8_t)rnd();
        for (size_t i = 0; i < sizeof p->dn_codes; i++) p->dn_codes[i] = (uint8_t)rnd();
        for (size_t i = 0; i < sizeof p->gu_scales; i++) p->gu_scales[i] = (uint8_t)(118 + rnd() % 9);
        for (size_t i = 0; i < sizeof p->dn_scales; i++) p->dn_scales[i] = (uint8_t)(118 + rnd() % 9);
        for (int i = 0; i < 2 * I; i++) p->gu_bias[i] = (uint16_t)(0x3C00 + rnd() % 512); /* small bf16 */
        for (int i = 0; i < H; i++) p->dn_bias[i] = (uint16_t)(0xBC00 + rnd() % 512);
    }
    parts[1].gu_scales[5 * (H / 32)] = 90; /* fallback rows for the packed format */
    parts[3].dn_scales[7 * (I / 32) + 1] = 200;
    for (int t = 0; t < NTOK; t++)
        for (int i = 0; i < H; i++) x[t][i] = rnd_normalish();
    for (int f = 0; f < 2; f++)
        for (int e = 0; e < K; e++) {
            rbytes[f][e] = make_record(&parts[e], f, rec[f][e], &shape[f], &n_exc[f][e]);
            set_parts(&ex[f][e], rec[f][e], &shape[f], n_exc[f][e], NULL);
            exp[f][e] = &ex[f][e];
        }
    if (n_exc[1][1] != 1 || n_exc[1][3] != 1) return fail("packed fallback rows not produced", 0, 0);
    if (neural_record_bytes(&shape[0]) != shape[0].record_offset[6]) return fail("record layout", 0, 0);

    int isas[4], nisa = 0;
    for (int isa = NEURAL_ISA_SCALAR; isa <= NEURAL_ISA_AVX512BF16; isa++)
        if (neural_set_isa(isa) == NEURAL_OK) isas[nisa++] = isa;
    uint64_t h = 0xCBF29CE484222325ull;
    for (int mode = 0; mode < 2; mode++) { /* fp32 inputs, then bf16 inputs */
        shape[0].bf16_inputs = shape[1].bf16_inputs = mode;
        neural_set_isa(NEURAL_ISA_SCALAR);
        neural_set_threads(1);
        if (neural_moe_token(&shape[0], exp[0], w, K, x[0], ref) != NEURAL_OK) return fail("moe_token", 1, 1);
        h = fnv(ref, sizeof ref, h);
        for (int a = 0; a < nisa; a++) {
            neural_set_isa(isas[a]);
            for (int th = 1; th <= 4; th++) {
                neural_set_threads(th);
                for (int f = 0; f < 2; f++)
                    for (int rep = 0; rep < 2; rep++) {
                        for (int i = 0; i < H; i++) out[i] = 0.0f / 0.0f; /* poison */
                        if (neural_moe_token(&shape[f], exp[f], w, K, x[0], out) != NEURAL_OK)
                            return fail("moe_token rc", isas[a], th);
                        if (memcmp(out, ref, sizeof out)) return fail(f ? "packed != reference" : "raw != reference", isas[a], th);
                    }
                if (neural_expert_tokens(&shape[1], exp[1][3], NTOK, &x[0][0], wt, &multi[0][0]) != NEURAL_OK)
                    return fail("expert_tokens rc", isas[a], th);
                for (int t = 0; t < NTOK; t++) {
                    if (neural_moe_token(&shape[1], &exp[1][3], &wt[t], 1, x[t], one) != NEURAL_OK)
                        return fail("moe_token k=1", isas[a], th);
                    if (memcmp(one, multi[t], sizeof one)) return fail("multi-token != one-token", isas[a], th);
                }
                for (int e = 0; e < K; e++) {
                    memset(cap[e], 0xAA, rbytes[1][e]);
                    set_parts(&cex[e], rec[1][e], &shape[1], n_exc[1][e], cap[e]);
                    cexp[e] = &cex[e];
                }
                if (neural_moe_token(&shape[1], cexp, w, K, x[0], out) != NEURAL_OK || memcmp(out, ref, sizeof out))
                    return fail("capture changed the result", isas[a], th);
                for (int e = 0; e < K; e++)
                    if (memcmp(cap[e], rec[1][e], rbytes[1][e])) return fail("capture != record bytes", isas[a], th);
            }
        }
        h = fnv(multi, sizeof multi, h);
    }
    printf("selftest OK: isas");
    for (int a = 0; a < nisa; a++) printf(" %s", neural_isa_name(isas[a]));
    printf(", threads 1-4, raw+packed, fp32+bf16 inputs, hash %016llx\n", (unsigned long long)h);
    return 0;
}
