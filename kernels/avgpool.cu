// Average pooling over NCHW planes, KxK windows moved by `stride` with zero padding `pad`
// counted in the mean (PyTorch's count_include_pad), and global average pooling. Mirrors
// nn::pool (avgpool2d_forward, avgpool2d_backward, gap_forward, gap_backward). 64-bit
// indexing, grid-stride loops; the sizes are ints (the host checks). `inv` is 1/(K*K) or 1/HW
// as the host computes it in float.

#define GRID_STRIDE(i, n)                                                                    \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n);            \
         i += (long long)blockDim.x * gridDim.x)

// out[nimg, C, OH, OW] = (the sum of the window's taps inside the image, in row-major order)
// * inv.
extern "C" __global__ void avgpool_forward_f32(float* out, const float* inp, int nimg, int c,
                                               int h, int w, int k, int stride, int pad, int oh,
                                               int ow, float inv) {
    long long ohw = (long long)oh * ow;
    long long total = (long long)nimg * c * ohw;
    GRID_STRIDE(idx, total) {
        const float* src = inp + (idx / ohw) * h * w;
        long long y0 = (idx % ohw) / ow * stride - pad;
        long long x0 = (idx % ohw) % ow * stride - pad;
        long long ylo = max(y0, 0LL), yhi = min(y0 + k, (long long)h);
        long long xlo = max(x0, 0LL), xhi = min(x0 + k, (long long)w);
        float s = 0.0f;
        for (long long iy = ylo; iy < yhi; ++iy) {
            for (long long ix = xlo; ix < xhi; ++ix) {
                s += src[iy * w + ix];
            }
        }
        out[idx] = s * inv;
    }
}

// dinp[nimg, C, H, W] (overwritten) = for each pixel, the sum of dout * inv over the windows
// holding it, in output row-major order as the CPU spreads them into a zeroed plane. A gather.
extern "C" __global__ void avgpool_backward_f32(float* dinp, const float* dout, int nimg, int c,
                                                int h, int w, int k, int stride, int pad,
                                                int oh, int ow, float inv) {
    long long ohw = (long long)oh * ow;
    long long total = (long long)nimg * c * h * w;
    GRID_STRIDE(idx, total) {
        long long x = idx % w;
        long long y = (idx / w) % h;
        long long plane = idx / ((long long)h * w);
        long long py = y + pad, px = x + pad;
        long long oy_lo = py >= k ? (py - k) / stride + 1 : 0;
        long long ox_lo = px >= k ? (px - k) / stride + 1 : 0;
        long long oy_hi = min(py / stride, (long long)oh - 1);
        long long ox_hi = min(px / stride, (long long)ow - 1);
        const float* g = dout + plane * ohw;
        float s = 0.0f;
        for (long long oy = oy_lo; oy <= oy_hi; ++oy) {
            for (long long ox = ox_lo; ox <= ox_hi; ++ox) {
                s += __fmul_rn(g[oy * ow + ox], inv);
            }
        }
        dinp[idx] = s;
    }
}

// out[planes] = (the sum of each of inp[planes, hw]'s planes, in order) * inv. One thread per
// plane: the planes a global pooling sees are small (the last feature map).
extern "C" __global__ void gap_forward_f32(float* out, const float* inp, int planes, int hw,
                                           float inv) {
    GRID_STRIDE(p, planes) {
        const float* src = inp + p * hw;
        float s = 0.0f;
        for (int i = 0; i < hw; ++i) {
            s += src[i];
        }
        out[p] = s * inv;
    }
}

// dinp[planes, hw] (overwritten) = dout[plane] * inv over each plane.
extern "C" __global__ void gap_backward_f32(float* dinp, const float* dout, int planes, int hw,
                                            float inv) {
    long long total = (long long)planes * hw;
    GRID_STRIDE(i, total) {
        dinp[i] = dout[i / hw] * inv;
    }
}
