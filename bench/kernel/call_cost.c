/*
 * What one decode-layer call of the one-token kernel costs beyond its bytes: neural_moe_token
 * over k = 1..4 random experts (the 1-4 CPU experts of a layer), with a busy gap between calls
 * like the GPU's attention and router between two layers. Each (k, gap) runs for SECONDS; the
 * per-call medians are fitted as a + b * k: a is the fixed cost of a call, b an expert's bytes
 * at the rate the calls reach. kernel_bench.c's store and shape.
 *
 *   cc -O2 -ffp-contract=off -std=gnu11 -pthread -Inative bench/kernel/call_cost.c native/neural_experts.c \
 *      native/neural_isa.c native/neural_team.c -lm -o neural-callcost
 *   ./neural-callcost THREADS [GIB] [SECONDS] [GAP_US,...] [SPIN_US]
 * One JSON line per gap: {"gap_us", "us": [k=1..4 medians], "fixed_us", "us_per_expert", "expert_gbps", ...}.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "neural_experts.h"

#define HID 2880
#define INT 2880
#define MAXCALLS 200000

static double now(void) {
    struct timespec t;
    timespec_get(&t, TIME_UTC);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) { return rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17; }

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    double gib = argc > 2 ? atof(argv[2]) : 2.0, secs = argc > 3 ? atof(argv[3]) : 1.0;
    const char *gaps = argc > 4 ? argv[4] : "0,100";
    neural_shape s;
    memset(&s, 0, sizeof s);
    s.hidden = HID, s.intermediate = INT, s.format = NEURAL_FORMAT_RAW, s.swiglu_limit = 7.0f, s.swiglu_alpha = 1.702f;
    s.bf16_inputs = 1;
    const int64_t G = HID / 32, sizes[6] = {2 * INT * G * 16, 2 * INT * G, HID * G * 16, HID * G, 2 * INT * 2, HID * 2};
    int64_t off = 0;
    for (int i = 0; i < 6; i++) s.record_offset[i] = off, off += (sizes[i] + 63) & ~63;
    s.record_offset[6] = off;
    size_t rec = (size_t)off, n = (size_t)(gib * 1073741824.0 / (double)rec) + 1;
    uint8_t *buf = (uint8_t *)malloc(rec * n);
    neural_expert *ex = (neural_expert *)calloc(n, sizeof *ex);
    double *t = (double *)malloc(MAXCALLS * sizeof *t);
    if (!buf || !ex || !t) return 1;
    for (size_t e = 0; e < n; e++) {
        uint8_t *p = buf + e * rec;
        for (size_t i = 0; i < rec; i += 8) {
            uint64_t r = next();
            memcpy(p + i, &r, rec - i < 8 ? rec - i : 8);
        }
        for (int m = 1; m <= 3; m += 2)
            for (int64_t i = 0; i < sizes[m]; i++) p[s.record_offset[m] + i] = (uint8_t)(118 + p[s.record_offset[m] + i] % 9);
        memset(p + s.record_offset[4], 0, (size_t)(sizes[4] + sizes[5]));
        for (int i = 0; i < 6; i++) ex[e].part[i] = p + s.record_offset[i];
    }
    neural_set_threads(threads);
    if (argc > 5) neural_set_spin_us(atoi(argv[5]));
    static float x[HID], out[HID];
    float w[4] = {0.25f, 0.25f, 0.25f, 0.25f};
    for (int i = 0; i < HID; i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    neural_probe_read(buf, rec * n); /* first touch */
    double t0 = now();
    int reps = 0;
    while (reps < 3 || now() - t0 < secs / 2) neural_probe_read(buf, rec * n), reps++;
    double probe = (double)reps * (double)(rec * n) / (now() - t0);
    for (const char *g = gaps; g && *g;) {
        double gap = atof(g) * 1e-6, med[4];
        for (int k = 1; k <= 4; k++) {
            long calls = 0;
            double start = now();
            while ((calls < 16 || now() - start < secs) && calls < MAXCALLS) {
                const neural_expert *kk[4];
                for (int i = 0; i < k; i++) kk[i] = &ex[next() % n];
                double g0 = now();
                while (now() - g0 < gap) {} /* the host spinning on the GPU's routing flag */
                double c0 = now();
                if (neural_moe_token(&s, kk, w, k, x, out) != NEURAL_OK) return 2;
                t[calls++] = now() - c0;
            }
            qsort(t, (size_t)calls, sizeof *t, cmp);
            med[k - 1] = t[calls / 2];
        }
        /* least squares of med = a + b k over k = 1..4 (mean k 2.5, sum of (k - 2.5)^2 = 5) */
        double mean = (med[0] + med[1] + med[2] + med[3]) / 4, b = 0;
        for (int k = 1; k <= 4; k++) b += (k - 2.5) * med[k - 1] / 5.0;
        double a = mean - 2.5 * b;
        printf("{\"gap_us\": %.0f, \"us\": [%.1f, %.1f, %.1f, %.1f], \"fixed_us\": %.1f, \"us_per_expert\": %.1f, "
               "\"expert_gbps\": %.2f, \"probe_gbps\": %.2f, \"threads\": %d, \"isa\": \"%s\", "
               "\"tool\": \"bench/kernel/call_cost.c\"}\n",
               gap * 1e6, med[0] * 1e6, med[1] * 1e6, med[2] * 1e6, med[3] * 1e6, a * 1e6, b * 1e6,
               (double)rec / b / 1e9, probe / 1e9, neural_get_threads(), neural_isa_name(neural_get_isa()));
        fflush(stdout);
        g = strchr(g, ',');
        if (g) g++;
    }
    return 0;
}
