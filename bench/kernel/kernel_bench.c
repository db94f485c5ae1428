/*
 * The kernel-vs-DRAM benchmark without Python (same method as `neural bench kernel`, whose
 * numbers are the reference): 120b-shape raw records in >= GIB GiB of anonymous memory, a plain
 * read probe by the team, then the one-token kernel over 4 random experts per call.
 *
 *   cc -O2 -ffp-contract=off -std=gnu11 -pthread -Inative bench/kernel/kernel_bench.c native/neural_experts.c \
 *      native/neural_isa.c native/neural_team.c -lm -o neural-kbench
 *   ./neural-kbench THREADS [GIB] [SECONDS] [PREFETCH_BYTES]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "neural_experts.h"

#define HID 2880
#define INT 2880

static double now(void) {
    struct timespec t;
    timespec_get(&t, TIME_UTC);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    double gib = argc > 2 ? atof(argv[2]) : 2.0, secs = argc > 3 ? atof(argv[3]) : 3.0;
    neural_shape s;
    memset(&s, 0, sizeof s);
    s.hidden = HID, s.intermediate = INT, s.format = NEURAL_FORMAT_RAW, s.swiglu_limit = 7.0f, s.swiglu_alpha = 1.702f;
    s.bf16_inputs = 1; /* the engine's default (bf16) mode */
    const int64_t G = HID / 32, sizes[6] = {2 * INT * G * 16, 2 * INT * G, HID * G * 16, HID * G, 2 * INT * 2, HID * 2};
    int64_t off = 0;
    for (int i = 0; i < 6; i++) s.record_offset[i] = off, off += (sizes[i] + 63) & ~63;
    s.record_offset[6] = off;
    size_t rec = (size_t)off, n = (size_t)(gib * 1073741824.0 / (double)rec) + 1;
    uint8_t *buf = (uint8_t *)malloc(rec * n);
    neural_expert *ex = (neural_expert *)calloc(n, sizeof *ex);
    if (!buf || !ex) return 1;
    uint64_t r = 88172645463325252ull;
    for (size_t e = 0; e < n; e++) {
        uint8_t *p = buf + e * rec;
        for (size_t i = 0; i < rec; i += 8) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            memcpy(p + i, &r, rec - i < 8 ? rec - i : 8);
        }
        for (int m = 1; m <= 3; m += 2)
            for (int64_t i = 0; i < sizes[m]; i++) p[s.record_offset[m] + i] = (uint8_t)(118 + p[s.record_offset[m] + i] % 9);
        memset(p + s.record_offset[4], 0, (size_t)(sizes[4] + sizes[5]));
        for (int i = 0; i < 6; i++) ex[e].part[i] = p + s.record_offset[i];
    }
    neural_set_threads(threads);
    if (argc > 4) neural_set_prefetch(atoi(argv[4]));
    static float x[HID], out[HID];
    float w[4] = {0.25f, 0.25f, 0.25f, 0.25f};
    for (int i = 0; i < HID; i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    neural_probe_read(buf, rec * n); /* first touch */
    double t0 = now();
    int reps = 0;
    while (reps < 3 || now() - t0 < secs / 2) neural_probe_read(buf, rec * n), reps++;
    double probe = (double)reps * (double)(rec * n) / (now() - t0);
    long calls = 0;
    t0 = now();
    while (calls < 8 || now() - t0 < secs) {
        const neural_expert *k4[4];
        for (int i = 0; i < 4; i++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            k4[i] = &ex[r % n];
        }
        if (neural_moe_token(&s, k4, w, 4, x, out) != NEURAL_OK) return 2;
        calls++;
    }
    double dt = now() - t0, kern = (double)calls * 4.0 * (double)rec / dt;
    printf("{\"probe_gbps\": %.3f, \"kernel_gbps\": %.3f, \"ratio\": %.4f, \"ms_per_token_88\": %.3f, "
           "\"threads\": %d, \"isa\": \"%s\", \"store_gib\": %.3f, \"calls\": %ld, \"tool\": \"bench/kernel/kernel_bench.c\"}\n",
           probe / 1e9, kern / 1e9, kern / probe, dt / (double)calls * 22.0 * 1e3, neural_get_threads(),
           neural_isa_name(neural_get_isa()), (double)(rec * n) / 1073741824.0, calls);
    return 0;
}
