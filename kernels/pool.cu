// 2-D max pooling over NCHW planes, KxK windows moved by `stride`, no padding, a partial window
// at the bottom or right edge dropped (floor mode). Mirrors nn::pool. Batched over every plane
// of every image, 64-bit indexing, grid-stride loops; the sizes are ints each (the host checks).
// With `nhwc` 1 the tensors are channels last (elem_at): the same windows, values and argmax.

// out[nimg, C, OH, OW] = the max of inp[nimg, C, H, W] over each window; argmax = the winner's
// index iy*W + ix inside its HxW plane (the first maximum in row-major order on ties; a NaN
// wins, so it propagates).
template <typename T>
__device__ void maxpool_forward(T* out, unsigned int* argmax, const T* inp, int nimg, int c,
                                int h, int w, int k, int stride, int oh, int ow, int nhwc) {
    long long hw = (long long)h * w;
    long long ohw = (long long)oh * ow;
    long long total = (long long)nimg * c * ohw;
    GRID_STRIDE(idx, total) {
        long long n, ch, q;
        elem_of(idx, c, ohw, nhwc, &n, &ch, &q);
        long long y0 = q / ow * stride;
        long long x0 = q % ow * stride;
        long long at = y0 * w + x0;
        float best = ld(inp + elem_at(n, ch, at, c, hw, nhwc));
        for (long long iy = y0; iy < y0 + k; ++iy) {
            for (long long ix = x0; ix < x0 + k; ++ix) {
                float v = ld(inp + elem_at(n, ch, iy * w + ix, c, hw, nhwc));
                if (v > best || (isnan(v) && !isnan(best))) {
                    best = v;
                    at = iy * w + ix;
                }
            }
        }
        st(out + idx, best);
        argmax[idx] = (unsigned int)at;
    }
}

extern "C" __global__ void maxpool_forward_f32(float* out, unsigned int* argmax,
                                               const float* inp, int nimg, int c, int h, int w,
                                               int k, int stride, int oh, int ow, int nhwc) {
    maxpool_forward(out, argmax, inp, nimg, c, h, w, k, stride, oh, ow, nhwc);
}

extern "C" __global__ void maxpool_forward_bf16(bf16* out, unsigned int* argmax,
                                                const bf16* inp, int nimg, int c, int h, int w,
                                                int k, int stride, int oh, int ow, int nhwc) {
    maxpool_forward(out, argmax, inp, nimg, c, h, w, k, stride, oh, ow, nhwc);
}

// dinp[nimg, C, H, W] = (overwritten) for each pixel, the sum of dout[nimg, C, OH, OW] over the
// windows whose argmax (from maxpool_forward) it is, added in output row-major order as
// nn::pool::maxpool2d_backward scatters them into a zeroed plane. A gather, one thread per
// pixel over the windows that hold it: overlapping windows (stride < K) need no atomics, and
// the result is the same at every launch.
template <typename T>
__device__ void maxpool_backward(T* dinp, const T* dout, const unsigned int* argmax, int nimg,
                                 int c, int h, int w, int k, int stride, int oh, int ow,
                                 int nhwc) {
    long long hw = (long long)h * w;
    long long ohw = (long long)oh * ow;
    long long total = (long long)nimg * c * hw;
    GRID_STRIDE(idx, total) {
        long long n, ch, at;
        elem_of(idx, c, hw, nhwc, &n, &ch, &at);
        long long x = at % w;
        long long y = at / w;
        // the windows oy with oy*stride <= y < oy*stride + k, likewise ox
        long long oy_lo = y >= k ? (y - k) / stride + 1 : 0;
        long long ox_lo = x >= k ? (x - k) / stride + 1 : 0;
        long long oy_hi = min(y / stride, (long long)oh - 1);
        long long ox_hi = min(x / stride, (long long)ow - 1);
        float s = 0.0f;
        for (long long oy = oy_lo; oy <= oy_hi; ++oy) {
            for (long long ox = ox_lo; ox <= ox_hi; ++ox) {
                long long o = elem_at(n, ch, oy * ow + ox, c, ohw, nhwc);
                if ((long long)argmax[o] == at) {
                    s += ld(dout + o);
                }
            }
        }
        st(dinp + idx, s);
    }
}

extern "C" __global__ void maxpool_backward_f32(float* dinp, const float* dout,
                                                const unsigned int* argmax, int nimg, int c,
                                                int h, int w, int k, int stride, int oh,
                                                int ow, int nhwc) {
    maxpool_backward(dinp, dout, argmax, nimg, c, h, w, k, stride, oh, ow, nhwc);
}

extern "C" __global__ void maxpool_backward_bf16(bf16* dinp, const bf16* dout,
                                                 const unsigned int* argmax, int nimg, int c,
                                                 int h, int w, int k, int stride, int oh,
                                                 int ow, int nhwc) {
    maxpool_backward(dinp, dout, argmax, nimg, c, h, w, k, stride, oh, ow, nhwc);
}

// Padded max pooling (nn::pool::maxpool2d_padded_forward): the window of output (oy, ox)
// starts at (oy*stride - pad, ox*stride - pad) and is clipped to the image (padding never
// wins); out = its max, argmax = the winner's index iy*W + ix in its plane (the first in
// row-major order on ties; a NaN wins); a window wholly in the padding gives -inf and
// 0xffffffff, as the CPU.
template <typename T>
__device__ void maxpool_padded_forward(T* out, unsigned int* argmax, const T* inp, int nimg,
                                       int c, int h, int w, int k, int stride, int pad, int oh,
                                       int ow, int nhwc) {
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
        float best = __int_as_float(0xff800000);  // -inf
        long long at = -1;
        for (long long iy = ylo; iy < yhi; ++iy) {
            for (long long ix = xlo; ix < xhi; ++ix) {
                float v = ld(inp + elem_at(n, ch, iy * w + ix, c, hw, nhwc));
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

extern "C" __global__ void maxpool_padded_forward_f32(float* out, unsigned int* argmax,
                                                      const float* inp, int nimg, int c, int h,
                                                      int w, int k, int stride, int pad, int oh,
                                                      int ow, int nhwc) {
    maxpool_padded_forward(out, argmax, inp, nimg, c, h, w, k, stride, pad, oh, ow, nhwc);
}

extern "C" __global__ void maxpool_padded_forward_bf16(bf16* out, unsigned int* argmax,
                                                       const bf16* inp, int nimg, int c, int h,
                                                       int w, int k, int stride, int pad, int oh,
                                                       int ow, int nhwc) {
    maxpool_padded_forward(out, argmax, inp, nimg, c, h, w, k, stride, pad, oh, ow, nhwc);
}

// dinp[nimg, C, H, W] = (overwritten) for each pixel, the sum of dout over the windows whose
// argmax (from maxpool_padded_forward) it is, in output row-major order as
// nn::pool::maxpool2d_padded_backward scatters them into a zeroed plane. A gather.
template <typename T>
__device__ void maxpool_padded_backward(T* dinp, const T* dout, const unsigned int* argmax,
                                        int nimg, int c, int h, int w, int k, int stride,
                                        int pad, int oh, int ow, int nhwc) {
    long long hw = (long long)h * w;
    long long ohw = (long long)oh * ow;
    long long total = (long long)nimg * c * hw;
    GRID_STRIDE(idx, total) {
        long long n, ch, at;
        elem_of(idx, c, hw, nhwc, &n, &ch, &at);
        long long x = at % w;
        long long y = at / w;
        // the windows oy with oy*stride <= y + pad < oy*stride + k, likewise ox
        long long py = y + pad, px = x + pad;
        long long oy_lo = py >= k ? (py - k) / stride + 1 : 0;
        long long ox_lo = px >= k ? (px - k) / stride + 1 : 0;
        long long oy_hi = min(py / stride, (long long)oh - 1);
        long long ox_hi = min(px / stride, (long long)ow - 1);
        float s = 0.0f;
        for (long long oy = oy_lo; oy <= oy_hi; ++oy) {
            for (long long ox = ox_lo; ox <= ox_hi; ++ox) {
                long long o = elem_at(n, ch, oy * ow + ox, c, ohw, nhwc);
                if ((long long)argmax[o] == at) {
                    s += ld(dout + o);
                }
            }
        }
        st(dinp + idx, s);
    }
}

extern "C" __global__ void maxpool_padded_backward_f32(float* dinp, const float* dout,
                                                       const unsigned int* argmax, int nimg,
                                                       int c, int h, int w, int k, int stride,
                                                       int pad, int oh, int ow, int nhwc) {
    maxpool_padded_backward(dinp, dout, argmax, nimg, c, h, w, k, stride, pad, oh, ow, nhwc);
}

extern "C" __global__ void maxpool_padded_backward_bf16(bf16* dinp, const bf16* dout,
                                                        const unsigned int* argmax, int nimg,
                                                        int c, int h, int w, int k, int stride,
                                                        int pad, int oh, int ow, int nhwc) {
    maxpool_padded_backward(dinp, dout, argmax, nimg, c, h, w, k, stride, pad, oh, ow, nhwc);
}
