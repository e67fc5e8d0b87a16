// Average pooling over NCHW planes, KxK windows moved by `stride` with zero padding `pad`
// counted in the mean (PyTorch's count_include_pad), and global average pooling. Mirrors
// nn::pool (avgpool2d_forward, avgpool2d_backward, gap_forward, gap_backward). 64-bit
// indexing, grid-stride loops; the sizes are ints (the host checks). `inv` is 1/(K*K) or 1/HW
// as the host computes it in float.

// out[nimg, C, OH, OW] = (the sum of the window's taps inside the image, in row-major order)
// * inv.
template <typename T>
__device__ void avgpool_forward(T* out, const T* inp, int nimg, int c, int h, int w, int k,
                                int stride, int pad, int oh, int ow, float inv) {
    long long ohw = (long long)oh * ow;
    long long total = (long long)nimg * c * ohw;
    GRID_STRIDE(idx, total) {
        const T* src = inp + (idx / ohw) * h * w;
        long long y0 = (idx % ohw) / ow * stride - pad;
        long long x0 = (idx % ohw) % ow * stride - pad;
        long long ylo = max(y0, 0LL), yhi = min(y0 + k, (long long)h);
        long long xlo = max(x0, 0LL), xhi = min(x0 + k, (long long)w);
        float s = 0.0f;
        for (long long iy = ylo; iy < yhi; ++iy) {
            for (long long ix = xlo; ix < xhi; ++ix) {
                s += ld(src + (iy * w + ix));
            }
        }
        st(out + idx, s * inv);
    }
}

extern "C" __global__ void avgpool_forward_f32(float* out, const float* inp, int nimg, int c,
                                               int h, int w, int k, int stride, int pad, int oh,
                                               int ow, float inv) {
    avgpool_forward(out, inp, nimg, c, h, w, k, stride, pad, oh, ow, inv);
}

extern "C" __global__ void avgpool_forward_bf16(bf16* out, const bf16* inp, int nimg, int c,
                                                int h, int w, int k, int stride, int pad, int oh,
                                                int ow, float inv) {
    avgpool_forward(out, inp, nimg, c, h, w, k, stride, pad, oh, ow, inv);
}

// dinp[nimg, C, H, W] (overwritten) = for each pixel, the sum of dout * inv over the windows
// holding it, in output row-major order as the CPU spreads them into a zeroed plane. A gather.
template <typename T>
__device__ void avgpool_backward(T* dinp, const T* dout, int nimg, int c, int h, int w, int k,
                                 int stride, int pad, int oh, int ow, float inv) {
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
        const T* g = dout + plane * ohw;
        float s = 0.0f;
        for (long long oy = oy_lo; oy <= oy_hi; ++oy) {
            for (long long ox = ox_lo; ox <= ox_hi; ++ox) {
                s += __fmul_rn(ld(g + (oy * ow + ox)), inv);
            }
        }
        st(dinp + idx, s);
    }
}

extern "C" __global__ void avgpool_backward_f32(float* dinp, const float* dout, int nimg, int c,
                                                int h, int w, int k, int stride, int pad,
                                                int oh, int ow, float inv) {
    avgpool_backward(dinp, dout, nimg, c, h, w, k, stride, pad, oh, ow, inv);
}

extern "C" __global__ void avgpool_backward_bf16(bf16* dinp, const bf16* dout, int nimg, int c,
                                                 int h, int w, int k, int stride, int pad,
                                                 int oh, int ow, float inv) {
    avgpool_backward(dinp, dout, nimg, c, h, w, k, stride, pad, oh, ow, inv);
}

// out[planes] = (the sum of each of inp[planes, hw]'s planes, in order) * inv. One thread per
// plane: the planes a global pooling sees are small (the last feature map).
template <typename T>
__device__ void gap_forward(T* out, const T* inp, int planes, int hw, float inv) {
    GRID_STRIDE(p, planes) {
        const T* src = inp + p * hw;
        float s = 0.0f;
        for (int i = 0; i < hw; ++i) {
            s += ld(src + i);
        }
        st(out + p, s * inv);
    }
}

extern "C" __global__ void gap_forward_f32(float* out, const float* inp, int planes, int hw,
                                           float inv) {
    gap_forward(out, inp, planes, hw, inv);
}

extern "C" __global__ void gap_forward_bf16(bf16* out, const bf16* inp, int planes, int hw,
                                            float inv) {
    gap_forward(out, inp, planes, hw, inv);
}

// dinp[planes, hw] (overwritten) = dout[plane] * inv over each plane.
template <typename T>
__device__ void gap_backward(T* dinp, const T* dout, int planes, int hw, float inv) {
    long long total = (long long)planes * hw;
    GRID_STRIDE(i, total) {
        st(dinp + i, ld(dout + i / hw) * inv);
    }
}

extern "C" __global__ void gap_backward_f32(float* dinp, const float* dout, int planes, int hw,
                                            float inv) {
    gap_backward(dinp, dout, planes, hw, inv);
}

extern "C" __global__ void gap_backward_bf16(bf16* dinp, const bf16* dout, int planes, int hw,
                                             float inv) {
    gap_backward(dinp, dout, planes, hw, inv);
}
