// The GPU path's channels-last layout (NHWC, src/backend/cuda/layout.rs): the input batch moved
// out of NCHW, and dense convolution weights into cuDNN's NHWC filter layout (KRSC: [OC, K, K,
// C]) from PyTorch's (KCRS: [OC, C, K, K]) and their gradients back. Grid-stride loops over the
// destination, 64-bit indexing; the sizes are ints (the host checks).

// out[nimg, hw, C] = x[nimg, C, hw] (a plain move: the same type)
template <typename T>
__device__ void nchw_to_nhwc(T* out, const T* x, int nimg, int c, int hw) {
    long long total = (long long)nimg * c * hw;
    GRID_STRIDE(i, total) {
        long long n, ch, p;
        elem_of(i, c, hw, 1, &n, &ch, &p);
        out[i] = x[elem_at(n, ch, p, c, hw, 0)];
    }
}

extern "C" __global__ void nchw_to_nhwc_f32(float* out, const float* x, int nimg, int c,
                                            int hw) {
    nchw_to_nhwc(out, x, nimg, c, hw);
}

extern "C" __global__ void nchw_to_nhwc_bf16(bf16* out, const bf16* x, int nimg, int c, int hw) {
    nchw_to_nhwc(out, x, nimg, c, hw);
}

// out[OC, kk, C] = w[OC, C, kk] (kk = K*K window taps), as T (`st`: a bf16 run's weights are
// rounded as f32_to_bf16 rounds): the weights a channels-last convolution reads, from the fp32
// parameters.
template <typename T>
__device__ void krsc_from_kcrs(T* out, const float* w, int oc, int c, int kk) {
    long long total = (long long)oc * c * kk;
    GRID_STRIDE(i, total) {
        long long ci = i % c;
        long long rs = (i / c) % kk;
        long long k = i / c / kk;
        st(out + i, w[(k * c + ci) * kk + rs]);
    }
}

extern "C" __global__ void krsc_from_kcrs_f32(float* out, const float* w, int oc, int c, int kk) {
    krsc_from_kcrs(out, w, oc, c, kk);
}

extern "C" __global__ void krsc_from_kcrs_bf16(bf16* out, const float* w, int oc, int c,
                                               int kk) {
    krsc_from_kcrs(out, w, oc, c, kk);
}

// acc[OC, C, kk] += g[OC, kk, C]: a channels-last convolution's weight gradient (of the
// activations' type) added into the fp32 gradients in PyTorch's layout.
template <typename T>
__device__ void kcrs_add_krsc(float* acc, const T* g, int oc, int c, int kk) {
    long long total = (long long)oc * c * kk;
    GRID_STRIDE(i, total) {
        long long rs = i % kk;
        long long ci = (i / kk) % c;
        long long k = i / kk / c;
        acc[i] += ld(g + (k * kk + rs) * c + ci);
    }
}

extern "C" __global__ void kcrs_add_krsc_f32(float* acc, const float* g, int oc, int c, int kk) {
    kcrs_add_krsc(acc, g, oc, c, kk);
}

extern "C" __global__ void kcrs_add_krsc_bf16(float* acc, const bf16* g, int oc, int c, int kk) {
    kcrs_add_krsc(acc, g, oc, c, kk);
}
