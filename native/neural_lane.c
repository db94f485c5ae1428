/* The decode copy lane's queueing of one layer in one call: its routing rows, its copies, its graph launch.

   The lane (engine/gpu/copy_lane.py) sends up to two of a layer's misses to the GPU: it writes their ids, weights
   and scratch slots where its kernels read them, queues one 2-D copy per slot part (two experts bound for adjacent
   slots in one copy of two rows) and launches its captured graph. From Python that was 1.1-2.1 ms of host time a
   token at 18 layers on the H200 host, on the critical path before the CPU's misses start (session 24, lane_start),
   of which the six runtime calls take ~26 us a layer (bench/gpu/zero_copy_probe.py, warm): the rest was Python
   running on caches the CPU experts had just flushed. This does the same work in C.

   Nothing here knows CUDA: the runtime's cudaMemcpy2DAsync and cudaGraphLaunch come in as function pointers with
   their C signatures (the caller takes them from the runtime library the process already loaded).

   copy_abi picks what the copy pointer is: 0 cudaMemcpy2DAsync (one call per part, adjacent experts paired); 12 or
   13 cudaMemcpyBatchAsync as CUDA 12.8-12.9 or 13 declare it (13 dropped the failIdx argument): every part of every
   expert in one runtime call, 1-D copies in stream order, so a layer's queueing is one call instead of six or
   twelve (decode_lane_batch; the runtime's per-call cost is what is left of lane_start once Python is gone). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "neural_experts.h"
#include "neural_platform.h"

typedef int (*copy2d_fn)(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                         int kind, void *stream);
typedef int (*launch_fn)(void *exec, void *stream);
/* cudaMemcpyAttributes (driver_types.h, CUDA 12.8+): the source access order, two location hints, flags */
typedef struct {
    int src_access_order;
    int src_loc_type, src_loc_id;
    int dst_loc_type, dst_loc_id;
    unsigned flags;
} memcpy_attributes;
typedef char memcpy_attributes_is_24_bytes[sizeof(memcpy_attributes) == 24 ? 1 : -1]; /* any C compiler */
typedef int (*batch12_fn)(void *const *dsts, const void *const *srcs, const size_t *sizes, size_t count,
                          memcpy_attributes *attrs, size_t *attrs_idxs, size_t num_attrs, size_t *fail_idx,
                          void *stream);
typedef int (*batch13_fn)(void *const *dsts, const void *const *srcs, const size_t *sizes, size_t count,
                          memcpy_attributes *attrs, size_t *attrs_idxs, size_t num_attrs, void *stream);

#define HOST_TO_DEVICE 1
#define LANE_MAX 8
#define LANE_PARTS_MAX 8
#define SRC_ACCESS_ORDER_STREAM 1 /* cudaMemcpySrcAccessOrderStream: the source read in stream order */
#define FAILED_BATCH (-7)

/* every part of the m experts (ascending ids) into their slots in one batch call */
static int issue_batch(void *fn, int abi, void *stream, uint64_t pool, int64_t slot_bytes, const int64_t *parts,
                       int nparts, const int32_t *slots, const int32_t *ids, int m, int32_t *failed) {
    void *dsts[LANE_MAX * LANE_PARTS_MAX];
    const void *srcs[LANE_MAX * LANE_PARTS_MAX];
    size_t sizes[LANE_MAX * LANE_PARTS_MAX], n = 0;
    for (int i = 0; i < m; i++) {
        uint8_t *dst = (uint8_t *)(uintptr_t)pool + (int64_t)slots[i] * slot_bytes;
        for (int p = 0; p < nparts; p++, n++) {
            const int64_t src = parts[3 * p], size = parts[3 * p + 1], off = parts[3 * p + 2];
            dsts[n] = dst + off;
            srcs[n] = (const void *)(uintptr_t)(src + (int64_t)ids[i] * size);
            sizes[n] = (size_t)size;
        }
    }
    memcpy_attributes attr = {SRC_ACCESS_ORDER_STREAM, 0, 0, 0, 0, 0u};
    size_t first = 0, fail = (size_t)-1;
    int rc = abi == 12 ? ((batch12_fn)fn)(dsts, srcs, sizes, n, &attr, &first, 1, &fail, stream)
                       : ((batch13_fn)fn)(dsts, srcs, sizes, n, &attr, &first, 1, stream);
    if (rc) *failed = FAILED_BATCH;
    return rc;
}

int neural_lane_issue(void *copy2d, int copy_abi, void *launch, void *stream, void *graph_exec, uint64_t pool,
                      int64_t slot_bytes, int64_t max_pitch, const int64_t *parts, int nparts, const int32_t *slots,
                      int32_t *route, int bt, const int32_t *experts, const float *weights, int m, int32_t *failed) {
    if (!copy2d || !parts || nparts <= 0 || !slots || !route || !experts || !weights || !failed || m < 1 ||
        m > LANE_MAX || bt < m || slot_bytes <= 0 || max_pitch <= 0 || (graph_exec && !launch) ||
        (copy_abi != 0 && copy_abi != 12 && copy_abi != 13) || (copy_abi && nparts > LANE_PARTS_MAX))
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
    if (copy_abi) {
        int rc = issue_batch(copy2d, copy_abi, stream, pool, slot_bytes, parts, nparts, slots, ids, m, failed);
        if (rc) return rc;
    }
    for (int i = 0; !copy_abi && i < m;) {
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

/* ---- a decode layer's whole miss path in one call ---------------------------------------------------------------
   After the copy lane's queueing moved into C (above), a token still spent ~1.3 ms at 18 layers between a layer's
   routing and its CPU experts, and more between their end and the next launch (session 25, H200 host: lane_start,
   the Python around it): Python run on caches the CPU experts had just streamed 300 MB through took 13-20x its warm
   time (bench/kernel/cold_python.py). Here the host's part of a layer, from the routing flag to the next graph's
   launch, is C: the split's choice (engine/gpu/lane_split.py best_split, the same arithmetic in doubles, the same
   tie rule), the lane's queueing, the CPU's misses, the wait for the lane and its sum, the launch. The caller keeps
   what the GPU does not wait for: the split's rates and probes, admission, statistics. */

#define CUDA_NOT_READY 600 /* cudaErrorNotReady */

typedef int (*query_fn)(void *handle);
typedef int (*wait_value_fn)(void *stream, uint64_t addr, uint32_t value, unsigned flags);
#define WAIT_VALUE_EQ 1 /* CU_STREAM_WAIT_VALUE_EQ */
typedef int (*record_fn)(void *event, void *stream);

static int32_t load_acquire32(const int32_t *p) {
#if defined(_MSC_VER)
    return *(const volatile int32_t *)p; /* x86: a volatile load is an acquire load under /volatile:ms */
#else
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}

static void store_release32(int32_t *p, int32_t v) {
#if defined(_MSC_VER)
    *(volatile int32_t *)p = v; /* x86: a volatile store is a release store under /volatile:ms */
#else
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
#endif
}

/* the lane's share of k misses: lane_split.best_split */
static int best_split(int k, int most, double fixed, double cpu, double lane) {
    int best = 0;
    double best_t = k ? fixed + k * cpu : 0.0;
    for (int m = 1; m <= (most < k ? most : k); m++) {
        double c = k > m ? fixed + (k - m) * cpu : 0.0, g = m * lane;
        double t = c >= g ? c : g;
        if (t < best_t) {
            best = m;
            best_t = t;
        }
    }
    return best;
}

int neural_lane_layer(neural_lane_layer_job *j) {
    if (!j || !j->flag || !j->route || !j->shape || !j->table || !j->x || !j->out || j->k < 1 ||
        j->k > NEURAL_MAX_K || j->bt < j->k || j->n_experts < 1 || j->lane_most < 0 || j->lane_most > LANE_MAX ||
        (j->next_exec && !j->launch))
        return NEURAL_EINVAL;
    if (j->lane_most && (!j->copy2d || !j->launch || !j->query || !j->lane_exec || !j->lane_route ||
                         !j->lane_out || !j->lane_slots || !j->parts || j->bt < j->lane_most))
        return NEURAL_EINVAL;
    if (j->wait_value && j->next_exec && !j->done_flag) return NEURAL_EINVAL;
    j->failed = -1;
    j->hits = j->static_hits = j->misses = j->lane_n = j->probed = j->timed_use = j->yielded = j->queued = 0;
    j->decide_us = j->issue_us = j->cpu_us = j->lane_wait_us = j->launch_us = 0.0;
    double t0 = now_us(), t;
    int queued = 0;
    if (j->wait_value && j->next_exec) { /* the next graph now, behind the front-end's wait for this layer's flag */
        int rc = ((wait_value_fn)j->wait_value)(j->next_stream, j->wait_addr, (uint32_t)j->step, WAIT_VALUE_EQ);
        if (rc) {
            j->failed = -6;
            return rc;
        }
        if ((rc = ((launch_fn)j->launch)(j->next_exec, j->next_stream)) != 0) {
            j->failed = -4;
            return rc;
        }
        queued = j->queued = 1;
        t = now_us();
        j->launch_us = t - t0;
        t0 = t;
    }
    unsigned spins = 0;
    while (load_acquire32(j->flag) != j->step) {
        cpu_relax();
        if ((++spins & 4095) == 0 && now_us() - t0 > j->timeout_us) {
            j->wait_us = now_us() - t0;
            return NEURAL_ETIMEOUT;
        }
    }
    t = now_us();
    j->wait_us = t - t0;
    t0 = t;
    /* the routing: hits counted, misses in routing order */
    int32_t ids[NEURAL_MAX_K];
    float ws[NEURAL_MAX_K];
    int n = 0, k = j->k, bt = j->bt;
    for (int i = 0; i < k; i++) {
        int32_t e = j->route[i], s = j->route[2 * bt + i];
        if (e < 0 || e >= j->n_experts) return NEURAL_EINVAL; /* a routing id past the table */
        if (s < 0) {
            ids[n] = e;
            memcpy(&ws[n], &j->route[bt + i], sizeof(float));
            n++;
        } else {
            j->hits++;
            j->static_hits += s < j->n_static;
        }
    }
    j->misses = n;
    if (j->capture) /* an admission candidate missed (no mask: any miss may be one): the caller's path captures it */
        for (int i = 0; i < n; i++)
            if (!j->wanted || j->wanted[ids[i]]) {
                j->yielded = 1;
                j->decide_us = now_us() - t0;
                return NEURAL_OK;
            }
    int m = 0;
    if (j->lane_most && n) {
        m = best_split(n, j->lane_most, j->fixed_ms, j->cpu_ms, j->lane_ms);
        if (!m && j->probe) { /* the lane's rate may be stale: one miss measures it again */
            m = 1;
            j->probed = 1;
        }
    }
    int c = n - m; /* the CPU's: the first c misses; the lane's: the last m, as CopyLane.split leaves them */
    j->lane_n = m;
    for (int i = 0; i < m; i++) j->lane_ids[i] = ids[c + i];
    t = now_us();
    j->decide_us = t - t0;
    t0 = t;
    const neural_expert *ex[NEURAL_MAX_K];
    for (int i = 0; i < c; i++) ex[i] = j->table[ids[i]];
    int beside = j->beside && c && m;
    if (beside) { /* the CPU's misses start first; this thread queues the lane, then joins them */
        int rc = neural_moe_token_begin(j->shape, ex, ws, c, j->x, j->out);
        if (rc) return rc;
    }
    if (m) {
        void **ev = (j->timed || j->probed) && j->record && j->events[0] ? j->events : NULL;
        record_fn record = (record_fn)j->record;
        int rc = ev ? record(ev[0], j->lane_stream) : 0;
        if (!rc)
            rc = neural_lane_issue(j->copy2d, j->copy_abi, j->launch, j->lane_stream, ev ? NULL : j->lane_exec,
                                   j->pool, j->slot_bytes, j->max_pitch, j->parts, j->nparts, j->lane_slots,
                                   j->lane_route, bt, ids + c, ws + c, m, &j->failed);
        else
            j->failed = -5;
        if (!rc && ev) {
            j->timed_use = 1;
            if ((rc = record(ev[1], j->lane_stream)) == 0 &&
                (rc = ((launch_fn)j->launch)(j->lane_exec, j->lane_stream)) == 0)
                rc = record(ev[2], j->lane_stream);
            if (rc) j->failed = -2;
        }
        if (rc) {
            if (beside) neural_moe_token_end(NULL); /* the workers joined, the lock released */
            return rc;
        }
    }
    t = now_us();
    j->issue_us = t - t0;
    t0 = t;
    if (beside) {
        double span = 0.0;
        int rc = neural_moe_token_end(&span);
        if (rc) return rc;
        t = now_us();
        j->cpu_us = span; /* the experts' own span: the split learns the CPU's rate from it, not the queueing */
    } else if (c) {
        int rc = neural_moe_token(j->shape, ex, ws, c, j->x, j->out);
        if (rc) return rc;
    } else {
        memset(j->out, 0, (size_t)j->shape->hidden * sizeof(float));
    }
    if (!beside) {
        t = now_us();
        j->cpu_us = t - t0;
    }
    t0 = t;
    if (m) {
        int rc; /* the stream holds only this layer's lane work (and the end event, when timed) */
        while ((rc = ((query_fn)j->query)(j->lane_stream)) == CUDA_NOT_READY) cpu_relax();
        if (rc) {
            j->failed = -3;
            return rc;
        }
        for (int i = 0; i < j->shape->hidden; i++) j->out[i] += j->lane_out[i];
        t = now_us();
        j->lane_wait_us = t - t0;
        t0 = t;
    }
    if (j->done_flag) store_release32(j->done_flag, j->step); /* the early-launched next layer goes on */
    if (j->next_exec && !queued) {
        int rc = ((launch_fn)j->launch)(j->next_exec, j->next_stream);
        if (rc) {
            j->failed = -4;
            return rc;
        }
        j->launch_us = now_us() - t0;
    }
    return NEURAL_OK;
}
