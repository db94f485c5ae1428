/* The decode copy lane's queueing of one layer in one call: its routing rows, its copies, its graph launch.

   The lane (engine/gpu/copy_lane.py) sends up to two of a layer's misses to the GPU: it writes their ids, weights
   and scratch slots where its kernels read them, queues one 2-D copy per slot part (two experts bound for adjacent
   slots in one copy of two rows) and launches its captured graph. From Python that was 1.1-2.1 ms of host time a
   token at 18 layers on the H200 host, on the critical path before the CPU's misses start (session 24, lane_start),
   of which the six runtime calls take ~26 us a layer (bench/gpu/zero_copy_probe.py, warm): the rest was Python
   running on caches the CPU experts had just flushed. This does the same work in C.

   Nothing here knows CUDA: the runtime's cudaMemcpy2DAsync and cudaGraphLaunch come in as function pointers with
   their C signatures (the caller takes them from the runtime library the process already loaded). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "neural_experts.h"

typedef int (*copy2d_fn)(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                         int kind, void *stream);
typedef int (*launch_fn)(void *exec, void *stream);

#define HOST_TO_DEVICE 1
#define LANE_MAX 8

int neural_lane_issue(void *copy2d, void *launch, void *stream, void *graph_exec, uint64_t pool, int64_t slot_bytes,
                      int64_t max_pitch, const int64_t *parts, int nparts, const int32_t *slots, int32_t *route,
                      int bt, const int32_t *experts, const float *weights, int m, int32_t *failed) {
    if (!copy2d || !parts || nparts <= 0 || !slots || !route || !experts || !weights || !failed || m < 1 ||
        m > LANE_MAX || bt < m || slot_bytes <= 0 || max_pitch <= 0 || (graph_exec && !launch))
        return NEURAL_EINVAL;
    *failed = -1;
    /* ascending ids, their weights with them (adjacent ids pair their copies); insertion sort of <= 8 */
    int32_t ids[LANE_MAX];
    float ws[LANE_MAX];
    for (int i = 0; i < m; i++) {
        int32_t e = experts[i];
        float w = weights[i];
        int j = i;
        for (; j > 0 && ids[j - 1] > e; j--) {
            ids[j] = ids[j - 1];
            ws[j] = ws[j - 1];
        }
        ids[j] = e;
        ws[j] = w;
    }
    for (int i = 0; i < bt; i++) route[2 * bt + i] = -1; /* slot -1: no expert in that row */
    for (int i = 0; i < m; i++) {
        route[i] = ids[i];
        memcpy(&route[bt + i], &ws[i], sizeof(float)); /* the weight's bits */
        route[2 * bt + i] = slots[i];
    }
    copy2d_fn copy = (copy2d_fn)copy2d;
    int call = 0;
    for (int i = 0; i < m;) {
        uint8_t *dst = (uint8_t *)(uintptr_t)pool + (int64_t)slots[i] * slot_bytes;
        int64_t d = (i + 1 < m && slots[i + 1] == slots[i] + 1) ? (int64_t)ids[i + 1] - ids[i] : 0;
        int pair = d > 0;
        for (int p = 0; pair && p < nparts; p++) pair = d * parts[3 * p + 1] <= max_pitch;
        for (int p = 0; p < nparts; p++, call++) {
            const int64_t src = parts[3 * p], size = parts[3 * p + 1], off = parts[3 * p + 2];
            int rc = copy(dst + off, (size_t)slot_bytes, (const void *)(uintptr_t)(src + (int64_t)ids[i] * size),
                          (size_t)(pair ? d * size : size), (size_t)size, (size_t)(pair ? 2 : 1), HOST_TO_DEVICE,
                          stream);
            if (rc) {
                *failed = call;
                return rc;
            }
        }
        i += pair ? 2 : 1;
    }
    if (graph_exec) {
        int rc = ((launch_fn)launch)(graph_exec, stream);
        if (rc) {
            *failed = -2; /* the launch */
            return rc;
        }
    }
    return NEURAL_OK;
}
