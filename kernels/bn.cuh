// What the batch norm kernels of both layouts share (bn.cu: NCHW; bn_nhwc.cu: channels
// last), included by them (`#include "bn.cuh"`, expanded by src/backend/cuda/kernels.rs).

#define BN_BLOCK 256

// Values a thread loads before it uses them (in order: sums' bits do not change), so that
// several loads are in flight at once.
#define BN_UNROLL 8

// This block's part [lo, hi) of a channel's values.
__device__ void part_range(long long per_channel, long long* lo, long long* hi) {
    long long chunk = (per_channel + gridDim.y - 1) / gridDim.y;
    *lo = min((long long)blockIdx.y * chunk, per_channel);
    *hi = min(*lo + chunk, per_channel);
}

// Channel ch's scale = invstd * weight and shift = bias - mean * scale, from saved[2C] =
// mean, invstd: what training's forward applies (and backward recomputes the output with).
__device__ __forceinline__ void scale_shift(const float* saved, const float* weight,
                                            const float* bias, int c, int ch, float* scale,
                                            float* shift) {
    *scale = __fmul_rn(saved[c + ch], weight[ch]);
    *shift = __fadd_rn(bias[ch], -__fmul_rn(saved[ch], *scale));
}

// The gradient at batch norm's own output, before its activation `act`: d (the gradient at
// the activation's output) where the activation passed it (`passes`), 0 where not, the output
// recomputed from the value xv of x exactly as bn_apply computed and stored it (so the mask is
// the one relu_backward / relu6_backward would take from the stored output, without reading
// it); T only picks the stored type.
template <typename T>
__device__ __forceinline__ float masked(float d, float xv, float scale, float shift, int act,
                                        const T* type) {
    if (act != 0) {
        float v = __fadd_rn(__fmul_rn(xv, scale), shift);
        if (!passes(stored(activate(v, act), type), act)) {
            d = 0.0f;
        }
    }
    return d;
}
