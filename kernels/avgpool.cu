// Average pooling over NCHW planes, KxK windows moved by `stride` with zero padding `pad`
// counted in the mean (PyTorch's count_include_pad), and global average pooling. Mirrors
// nn::pool (avgpool2d_forward, avgpool2d_backward, gap_forward, gap_backward). 64-bit
// indexing, grid-stride loops; the sizes are ints (the host checks). `inv` is 1/(K*K) or 1/HW
// as the host computes it in float. With `nhwc` 1 the tensors are channels last (elem_at).

// out[nimg, C, OH, OW] = (the sum of the window's taps inside the image, in row-major order)
// * inv.
template <typename T>
__device__ void avgpool_forward(T* out, const T* inp, int nimg, int c, int h, int w, int k,
                                int stride, int pad, int oh, int ow, float inv, int nhwc) {
    long long hw = (long long)h * w;
    long long ohw = (long long)oh * ow;
    long long total = (long long)nimg * c * ohw;
    GRID_STRIDE(idx, total) {
        long long n, ch, q;
        elem_of(idx, c, ohw, nhwc, &n, &ch, &q);
        long long y0 = q / ow * stride - pad;
        long long x0 = q % ow * stride - pad;
        long long ylo = max(y0, 0LL), yhi = min(y0 + k, (long long)h);
        long long xlo = max(x0, 0LL), xhi = min(x0 + k, (long long)w);
        float s = 0.0f;
        for (long long iy = ylo; iy < yhi; ++iy) {
            for (long long ix = xlo; ix < xhi; ++ix) {
                s += ld(inp + elem_at(n, ch, iy * w + ix, c, hw, nhwc));
            }
        }
        st(out + idx, s * inv);
    }
}

extern "C" __global__ void avgpool_forward_f32(float* out, const float* inp, int nimg, int c,
                                               int h, int w, int k, int stride, int pad, int oh,
                                               int ow, float inv, int nhwc) {
    avgpool_forward(out, inp, nimg, c, h, w, k, stride, pad, oh, ow, inv, nhwc);
}

extern "C" __global__ void avgpool_forward_bf16(bf16* out, const bf16* inp, int nimg, int c,
                                                int h, int w, int k, int stride, int pad, int oh,
                                                int ow, float inv, int nhwc) {
    avgpool_forward(out, inp, nimg, c, h, w, k, stride, pad, oh, ow, inv, nhwc);
}

// dinp[nimg, C, H, W] (overwritten) = for each pixel, the sum of dout * inv over the windows
// holding it, in output row-major order as the CPU spreads them into a zeroed plane. A gather.
template <typename T>
__device__ void avgpool_backward(T* dinp, const T* dout, int nimg, int c, int h, int w, int k,
                                 int stride, int pad, int oh, int ow, float inv, int nhwc) {
    long long hw = (long long)h * w;
    long long ohw = (long long)oh * ow;
    long long total = (long long)nimg * c * hw;
    GRID_STRIDE(idx, total) {
        long long n, ch, p;
        elem_of(idx, c, hw, nhwc, &n, &ch, &p);
        long long x = p % w;
        long long y = p / w;
        long long py = y + pad, px = x + pad;
        long long oy_lo = py >= k ? (py - k) / stride + 1 : 0;
        long long ox_lo = px >= k ? (px - k) / stride + 1 : 0;
        long long oy_hi = min(py / stride, (long long)oh - 1);
        long long ox_hi = min(px / stride, (long long)ow - 1);
        float s = 0.0f;
        for (long long oy = oy_lo; oy <= oy_hi; ++oy) {
            for (long long ox = ox_lo; ox <= ox_hi; ++ox) {
                s += __fmul_rn(ld(dout + elem_at(n, ch, oy * ow + ox, c, ohw, nhwc)), inv);
            }
        }
        st(dinp + idx, s);
    }
}

extern "C" __global__ void avgpool_backward_f32(float* dinp, const float* dout, int nimg, int c,
                                                int h, int w, int k, int stride, int pad,
                                                int oh, int ow, float inv, int nhwc) {
    avgpool_backward(dinp, dout, nimg, c, h, w, k, stride, pad, oh, ow, inv, nhwc);
}

extern "C" __global__ void avgpool_backward_bf16(bf16* dinp, const bf16* dout, int nimg, int c,
                                                 int h, int w, int k, int stride, int pad,
                                                 int oh, int ow, float inv, int nhwc) {
    avgpool_backward(dinp, dout, nimg, c, h, w, k, stride, pad, oh, ow, inv, nhwc);
}

// out[planes] = (the sum of each of inp[planes, hw]'s planes, in order) * inv, planes = nimg * C
// (plane p: image p / C, channel p % C). One thread per plane: the planes a global pooling sees
// are small (the last feature map).
template <typename T>
__device__ void gap_forward(T* out, const T* inp, int planes, int hw, float inv, int c,
                            int nhwc) {
    GRID_STRIDE(p, planes) {
        float s = 0.0f;
        for (int i = 0; i < hw; ++i) {
            s += ld(inp + elem_at(p / c, p % c, i, c, hw, nhwc));
        }
        st(out + p, s * inv);
    }
}

extern "C" __global__ void gap_forward_f32(float* out, const float* inp, int planes, int hw,
                                           float inv, int c, int nhwc) {
    gap_forward(out, inp, planes, hw, inv, c, nhwc);
}

extern "C" __global__ void gap_forward_bf16(bf16* out, const bf16* inp, int planes, int hw,
                                            float inv, int c, int nhwc) {
    gap_forward(out, inp, planes, hw, inv, c, nhwc);
}

// dinp[planes, hw] (overwritten) = dout[plane] * inv over each plane.
template <typename T>
__device__ void gap_backward(T* dinp, const T* dout, int planes, int hw, float inv, int c,
                             int nhwc) {
    long long total = (long long)planes * hw;
    GRID_STRIDE(i, total) {
        long long n, ch, p;
        elem_of(i, c, hw, nhwc, &n, &ch, &p);
        st(dinp + i, ld(dout + (n * c + ch)) * inv);
    }
}

extern "C" __global__ void gap_backward_f32(float* dinp, const float* dout, int planes, int hw,
                                            float inv, int c, int nhwc) {
    gap_backward(dinp, dout, planes, hw, inv, c, nhwc);
}

extern "C" __global__ void gap_backward_bf16(bf16* dinp, const bf16* dout, int planes, int hw,
                                             float inv, int c, int nhwc) {
    gap_backward(dinp, dout, planes, hw, inv, c, nhwc);
}
