// 2-D max pooling over NCHW planes, KxK windows moved by `stride`, unpadded or padded (the
// padding never wins), a partial window at the bottom or right edge dropped (floor mode).
// Mirrors nn::pool (maxpool2d_* and maxpool2d_padded_*: one body each way, the unpadded
// entry points with pad 0). Batched over every plane of every image, grid-stride loops; the
// sizes are ints each (the host checks). With `nhwc` 1
// the tensors are channels last: the same windows, values and argmax. Index arithmetic is
// 32-bit where every offset of the launch fits (`SMALL`, elem.cuh: integer division is several
// times cheaper than 64-bit, and it is most of these kernels' instructions), 64-bit beyond.

// Where element (image n, channel ch, position p of an hw-position plane) of a [nimg, C, hw]
// activation lies, NCHW or channels last; and the inverse, the (n, ch, p) of offset i: elem_at /
// elem_of (elem.cuh) in index type I.
template <typename I>
__device__ __forceinline__ I at_of(I n, I ch, I p, I c, I hw, int nhwc) {
    return nhwc ? (n * hw + p) * c + ch : (n * c + ch) * hw + p;
}
template <typename I>
__device__ __forceinline__ void split(I i, I c, I hw, int nhwc, I* n, I* ch, I* p) {
    if (nhwc) {
        I r = i / c;
        *ch = i - r * c;
        *n = r / hw;
        *p = r - *n * hw;
    } else {
        I r = i / hw;
        *p = i - r * hw;
        *n = r / c;
        *ch = r - *n * c;
    }
}

// out[nimg, C, OH, OW] = the max of inp[nimg, C, H, W] over each window, clipped to the image
// (the window of output (oy, ox) starts at (oy*stride - pad, ox*stride - pad); pad 0: the
// unpadded pooling); argmax = the winner's index iy*W + ix inside its HxW plane (the first
// maximum in row-major order on ties; a NaN wins, so it propagates; padding never wins). A
// window wholly in the padding gives -inf and 0xffffffff, as the CPU.
template <typename I, typename T>
__device__ void maxpool_fwd(T* out, unsigned int* argmax, const T* inp, int nimg, int c, int h,
                            int w, int k, int stride, int pad, int oh, int ow, int nhwc) {
    I hw = (I)h * w;
    I ohw = (I)oh * ow;
    I total = (I)nimg * c * ohw;
    GRID_STRIDE_I(I, idx, total) {
        I n, ch, q;
        split<I>(idx, c, ohw, nhwc, &n, &ch, &q);
        I qy = q / ow;
        I y0 = qy * stride - pad;
        I x0 = (q - qy * ow) * stride - pad;
        I ylo = max(y0, (I)0), yhi = min(y0 + k, (I)h);
        I xlo = max(x0, (I)0), xhi = min(x0 + k, (I)w);
        float best = __int_as_float(0xff800000);  // -inf
        I at = -1;
        for (I iy = ylo; iy < yhi; ++iy) {
            for (I ix = xlo; ix < xhi; ++ix) {
                float v = ld(inp + at_of<I>(n, ch, iy * w + ix, c, hw, nhwc));
                if (at < 0 || v > best || (isnan(v) && !isnan(best))) {
                    best = v;
                    at = iy * w + ix;
                }
            }
        }
        st(out + idx, best);
        argmax[idx] = (unsigned int)at;
    }
}

// dinp[nimg, C, H, W] = (overwritten) for each pixel, the sum of dout[nimg, C, OH, OW] over the
// windows whose argmax (from maxpool_fwd) it is, added in output row-major order as
// nn::pool::maxpool2d_backward (and _padded_backward) scatter them into a zeroed plane. A
// gather, one thread per pixel over the windows that hold it: overlapping windows (stride < K)
// need no atomics, and the result is the same at every launch.
template <typename I, typename T>
__device__ void maxpool_bwd(T* dinp, const T* dout, const unsigned int* argmax, int nimg, int c,
                            int h, int w, int k, int stride, int pad, int oh, int ow, int nhwc) {
    I hw = (I)h * w;
    I ohw = (I)oh * ow;
    I total = (I)nimg * c * hw;
    GRID_STRIDE_I(I, idx, total) {
        I n, ch, at;
        split<I>(idx, c, hw, nhwc, &n, &ch, &at);
        I y = at / w;
        I x = at - y * w;
        // the windows oy with oy*stride <= y + pad < oy*stride + k, likewise ox
        I py = y + pad, px = x + pad;
        I oy_lo = py >= k ? (py - k) / stride + 1 : 0;
        I ox_lo = px >= k ? (px - k) / stride + 1 : 0;
        I oy_hi = min(py / stride, (I)oh - 1);
        I ox_hi = min(px / stride, (I)ow - 1);
        float s = 0.0f;
        for (I oy = oy_lo; oy <= oy_hi; ++oy) {
            for (I ox = ox_lo; ox <= ox_hi; ++ox) {
                I o = at_of<I>(n, ch, oy * ow + ox, c, ohw, nhwc);
                if ((I)argmax[o] == at) {
                    s += ld(dout + o);
                }
            }
        }
        st(dinp + idx, s);
    }
}

// Whether a launch over nimg * C * (the larger of the planes) stays in 32-bit indices.
__device__ __forceinline__ bool small(int nimg, int c, int h, int w, int oh, int ow) {
    long long plane = max((long long)h * w, (long long)oh * ow);
    return (long long)nimg * c * plane < SMALL;
}

template <typename T>
__device__ void maxpool_forward_any(T* out, unsigned int* argmax, const T* inp, int nimg, int c,
                                    int h, int w, int k, int stride, int pad, int oh, int ow,
                                    int nhwc) {
    if (small(nimg, c, h, w, oh, ow)) {
        maxpool_fwd<int>(out, argmax, inp, nimg, c, h, w, k, stride, pad, oh, ow, nhwc);
    } else {
        maxpool_fwd<long long>(out, argmax, inp, nimg, c, h, w, k, stride, pad, oh, ow, nhwc);
    }
}

template <typename T>
__device__ void maxpool_backward_any(T* dinp, const T* dout, const unsigned int* argmax,
                                     int nimg, int c, int h, int w, int k, int stride, int pad,
                                     int oh, int ow, int nhwc) {
    if (small(nimg, c, h, w, oh, ow)) {
        maxpool_bwd<int>(dinp, dout, argmax, nimg, c, h, w, k, stride, pad, oh, ow, nhwc);
    } else {
        maxpool_bwd<long long>(dinp, dout, argmax, nimg, c, h, w, k, stride, pad, oh, ow, nhwc);
    }
}

// Unpadded (nn::pool::maxpool2d_forward / _backward): every window inside the image, so the
// first value of a window is its first candidate, as the padded kernels take it.
extern "C" __global__ void maxpool_forward_f32(float* out, unsigned int* argmax,
                                               const float* inp, int nimg, int c, int h, int w,
                                               int k, int stride, int oh, int ow, int nhwc) {
    maxpool_forward_any(out, argmax, inp, nimg, c, h, w, k, stride, 0, oh, ow, nhwc);
}

extern "C" __global__ void maxpool_forward_bf16(bf16* out, unsigned int* argmax,
                                                const bf16* inp, int nimg, int c, int h, int w,
                                                int k, int stride, int oh, int ow, int nhwc) {
    maxpool_forward_any(out, argmax, inp, nimg, c, h, w, k, stride, 0, oh, ow, nhwc);
}

extern "C" __global__ void maxpool_backward_f32(float* dinp, const float* dout,
                                                const unsigned int* argmax, int nimg, int c,
                                                int h, int w, int k, int stride, int oh,
                                                int ow, int nhwc) {
    maxpool_backward_any(dinp, dout, argmax, nimg, c, h, w, k, stride, 0, oh, ow, nhwc);
}

extern "C" __global__ void maxpool_backward_bf16(bf16* dinp, const bf16* dout,
                                                 const unsigned int* argmax, int nimg, int c,
                                                 int h, int w, int k, int stride, int oh,
                                                 int ow, int nhwc) {
    maxpool_backward_any(dinp, dout, argmax, nimg, c, h, w, k, stride, 0, oh, ow, nhwc);
}

// Padded (nn::pool::maxpool2d_padded_forward / _backward).
extern "C" __global__ void maxpool_padded_forward_f32(float* out, unsigned int* argmax,
                                                      const float* inp, int nimg, int c, int h,
                                                      int w, int k, int stride, int pad, int oh,
                                                      int ow, int nhwc) {
    maxpool_forward_any(out, argmax, inp, nimg, c, h, w, k, stride, pad, oh, ow, nhwc);
}

extern "C" __global__ void maxpool_padded_forward_bf16(bf16* out, unsigned int* argmax,
                                                       const bf16* inp, int nimg, int c, int h,
                                                       int w, int k, int stride, int pad, int oh,
                                                       int ow, int nhwc) {
    maxpool_forward_any(out, argmax, inp, nimg, c, h, w, k, stride, pad, oh, ow, nhwc);
}

extern "C" __global__ void maxpool_padded_backward_f32(float* dinp, const float* dout,
                                                       const unsigned int* argmax, int nimg,
                                                       int c, int h, int w, int k, int stride,
                                                       int pad, int oh, int ow, int nhwc) {
    maxpool_backward_any(dinp, dout, argmax, nimg, c, h, w, k, stride, pad, oh, ow, nhwc);
}

extern "C" __global__ void maxpool_padded_backward_bf16(bf16* dinp, const bf16* dout,
                                                        const unsigned int* argmax, int nimg,
                                                        int c, int h, int w, int k, int stride,
                                                        int pad, int oh, int ow, int nhwc) {
    maxpool_backward_any(dinp, dout, argmax, nimg, c, h, w, k, stride, pad, oh, ow, nhwc);
}
