/* One activation row's elementwise steps of a CPU decode token: RMSNorm and RoPE on bf16 rows.

   Each replaces a handful of PyTorch operations on a one-row tensor (dtype copies, pow, mean, rsqrt, chunk, cat),
   ~20-50 us a call of dispatch on the 2-core VM for a few microseconds of arithmetic. Plain C in a fixed order,
   no ISA variants: the same bits on every machine.
   RoPE rounds as PyTorch's bf16 arithmetic does (each product and each sum rounded to bf16): bit for bit the
   reference's apply_rope. RMSNorm sums the squares in a fixed order of its own, so its mean can differ from
   PyTorch's in the last fp32 bit, and its output by one bf16 unit on the rare element next to a rounding
   boundary (tests/native/test_kernel_rows.py bounds it). */
#include <math.h>

#include "neural_experts.h"
#include "neural_internal.h"

static inline float f32(uint16_t b) { return neural_bf16_float(b); }
static inline uint16_t b16(float f) { return neural_round_bf16(f); }

int neural_rms_norm_bf16(const uint16_t *x, const uint16_t *gain, int n, float eps, uint16_t *out) {
    if (!x || !gain || !out || n <= 0 || n % 16) return NEURAL_EINVAL;
    float lane[16] = {0};
    for (int i = 0; i < n; i += 16)
        for (int l = 0; l < 16; l++) {
            float t = f32(x[i + l]);
            lane[l] = lane[l] + t * t; /* a bf16 value's square is exact in fp32 */
        }
    for (int w = 8; w >= 1; w /= 2) /* pairwise: lanes l and l + w */
        for (int l = 0; l < w; l++) lane[l] = lane[l] + lane[l + w];
    float r = 1.0f / sqrtf(lane[0] / (float)n + eps); /* torch.rsqrt: a correctly rounded root, then 1 / it */
    for (int i = 0; i < n; i++) out[i] = b16(f32(gain[i]) * (f32(x[i]) * r));
    return NEURAL_OK;
}

int neural_rope_bf16(uint16_t *x, int rows, int d, const uint16_t *cos_h, const uint16_t *sin_h) {
    if (!x || !cos_h || !sin_h || rows <= 0 || d <= 0 || d % 2) return NEURAL_EINVAL;
    const int h = d / 2;
    for (int r = 0; r < rows; r++) {
        uint16_t *a = x + (size_t)r * (size_t)d, *b = a + h;
        for (int i = 0; i < h; i++) {
            float x1 = f32(a[i]), x2 = f32(b[i]), c = f32(cos_h[i]), s = f32(sin_h[i]);
            float p = f32(b16(x1 * c)), q = f32(b16(x2 * s));
            float u = f32(b16(x2 * c)), v = f32(b16(x1 * s));
            a[i] = b16(p - q); /* x1 * c - x2 * s */
            b[i] = b16(u + v); /* x2 * c + x1 * s */
        }
    }
    return NEURAL_OK;
}
