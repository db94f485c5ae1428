/* One CPU decode token's layer as two calls: the attention half and the experts' half, each composed of the entries
   of neural_experts.h with the roundings to bf16 that the engine's PyTorch glue applied between them.

   Between the native projections, attention and experts, a CPU decode token spent ~0.45 ms a layer on the 2-core VM
   in Python and one-row PyTorch operations (views, dtype copies, the K/V append, residual adds, the entry points'
   argument checks): 1.9 ms of a 24 ms token at 4 layers, 1.9 of 9 ms on the H200 host at 8 threads (session 24,
   bench.kernel.cpu_decode_split). Here each half is one call; the router's top-k and softmax stay with PyTorch
   between them. Every step is the same entry or the same rounding as before, so the bits are the unfused path's
   (tests/engine/test_native_decode.py compares them bit for bit). */
#include <stdlib.h>
#include <string.h>

#include "neural_experts.h"
#include "neural_internal.h"

static inline float f32(uint16_t b) { return neural_bf16_float(b); }
static inline uint16_t b16(float f) { return neural_round_bf16(f); }

int neural_decode_attn(const neural_decode_layer *L, uint16_t *x, const uint16_t *cos_h, const uint16_t *sin_h,
                       uint16_t *kc, uint16_t *vc, int64_t head_stride, int pos, int base, uint16_t *t_out,
                       uint16_t *router_out) {
    if (!L || !x || !cos_h || !sin_h || !kc || !vc || !t_out || !router_out || L->hidden <= 0 || L->heads <= 0 ||
        L->kv_heads <= 0 || L->heads % L->kv_heads || L->head_dim <= 0 || L->experts <= 0 || pos < 0 || base < 0 ||
        base > pos || head_stride < (int64_t)(pos + 1) * L->head_dim)
        return NEURAL_EINVAL;
    const int H = L->hidden, d = L->head_dim, nq = L->heads * d, nkv = L->kv_heads * d;
    /* bf16: h, q, k, v, attention out, o; fp32: q widened, attention out */
    size_t n16 = (size_t)H * 2 + (size_t)nq * 2 + (size_t)nkv * 2, n32 = (size_t)nq * 2;
    float *f = malloc(n32 * sizeof(float) + n16 * sizeof(uint16_t));
    if (!f) return NEURAL_ENOMEM;
    float *qf = f, *att = f + nq;
    uint16_t *h = (uint16_t *)(f + n32), *q = h + H, *k = q + nq, *v = k + nkv, *ao = v + nkv, *o = ao + nq;
    int rc = neural_rms_norm_bf16(x, L->ln1, H, L->eps, h);
    if (rc == NEURAL_OK) {
        int rows[3] = {nq, nkv, nkv};
        uint16_t *outs[3] = {q, k, v};
        rc = neural_linear_bf16_nb(3, L->w, L->b, rows, H, h, outs);
    }
    if (rc == NEURAL_OK) rc = neural_rope_bf16(q, L->heads, d, cos_h, sin_h);
    if (rc == NEURAL_OK) rc = neural_rope_bf16(k, L->kv_heads, d, cos_h, sin_h);
    if (rc == NEURAL_OK) {
        for (int j = 0; j < L->kv_heads; j++) { /* the cache's new row: [kv_heads][.. pos ..][d] */
            memcpy(kc + j * head_stride + (int64_t)pos * d, k + (size_t)j * d, (size_t)d * sizeof(uint16_t));
            memcpy(vc + j * head_stride + (int64_t)pos * d, v + (size_t)j * d, (size_t)d * sizeof(uint16_t));
        }
        for (int i = 0; i < nq; i++) qf[i] = f32(q[i]);
        rc = neural_attn_decode_bf16(kc + (int64_t)base * d, vc + (int64_t)base * d, head_stride, L->kv_heads,
                                     pos - base + 1, d, L->heads / L->kv_heads, qf, L->sinks, L->scale, 1, att);
    }
    if (rc == NEURAL_OK) {
        for (int i = 0; i < nq; i++) ao[i] = b16(att[i]);
        const uint16_t *wo[1] = {L->wo}, *bo[1] = {L->bo};
        int rows[1] = {H};
        uint16_t *outs[1] = {o};
        rc = neural_linear_bf16_nb(1, wo, bo, rows, nq, ao, outs);
    }
    if (rc == NEURAL_OK) {
        for (int i = 0; i < H; i++) x[i] = b16(f32(x[i]) + f32(o[i])); /* the residual, as a bf16 add rounds */
        rc = neural_rms_norm_bf16(x, L->ln2, H, L->eps, t_out);
    }
    if (rc == NEURAL_OK) {
        const uint16_t *wr[1] = {L->wr}, *br[1] = {L->br};
        int rows[1] = {L->experts};
        uint16_t *outs[1] = {router_out};
        rc = neural_linear_bf16_nb(1, wr, br, rows, H, t_out, outs);
    }
    free(f);
    return rc;
}

int neural_decode_moe(const neural_shape *s, const neural_expert *const *table, int n_experts, const int64_t *idx,
                      const uint16_t *w, int k, const uint16_t *t, uint16_t *x) {
    if (!s || !table || !idx || !w || !t || !x || s->hidden <= 0 || k < 1 || k > NEURAL_MAX_K) return NEURAL_EINVAL;
    const neural_expert *experts[NEURAL_MAX_K];
    float weights[NEURAL_MAX_K];
    for (int j = 0; j < k; j++) { /* the router's picks: ids into this layer's table, weights widened exactly */
        if (idx[j] < 0 || idx[j] >= n_experts || !table[idx[j]]) return NEURAL_EINVAL;
        experts[j] = table[idx[j]];
        weights[j] = f32(w[j]);
    }
    const int H = s->hidden;
    float *f = malloc((size_t)H * 2 * sizeof(float));
    if (!f) return NEURAL_ENOMEM;
    float *tf = f, *out = f + H;
    for (int i = 0; i < H; i++) tf[i] = f32(t[i]);
    int rc = neural_moe_token(s, experts, weights, k, tf, out);
    if (rc == NEURAL_OK) /* the experts' fp32 sum rounded to bf16, then the residual's bf16 add */
        for (int i = 0; i < H; i++) x[i] = b16(f32(x[i]) + f32(b16(out[i])));
    free(f);
    return rc;
}
