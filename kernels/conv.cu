// 2-D convolution over NCHW images by im2col and cuBLAS products, weights [OC, C, KH, KW].
// Mirrors nn::im2col (im2col / col2im) and nn::conv (the bias and its gradient). Every kernel is
// batched over images, indexes with 64-bit integers and loops grid-stride, so one launch of any
// shape covers any size; the sizes are ints each (the host checks they fit).

// col[nimg, C*KH*KW, OH*OW] = the zero-padded patches of inp[nimg, C, H, W]: row
// r = (ci*KH + i)*KW + j, column p = oy*OW + ox of image n holds
// inp[n, ci, oy*stride + i - pad, ox*stride + j - pad], or 0 in the padding.
extern "C" __global__ void im2col_f32(float* col, const float* inp, int nimg, int c, int h,
                                      int w, int kh, int kw, int stride, int pad, int oh,
                                      int ow) {
    long long ohw = (long long)oh * ow;
    long long total = (long long)nimg * c * kh * kw * ohw;
    GRID_STRIDE(idx, total) {
        long long p = idx % ohw;
        long long t = idx / ohw;  // (n*C + ci)*KH*KW + i*KW + j
        long long j = t % kw;
        t /= kw;
        long long i = t % kh;
        long long plane = t / kh;  // n*C + ci
        long long iy = (p / ow) * stride + i - pad;
        long long ix = (p % ow) * stride + j - pad;
        float v = 0.0f;
        if (iy >= 0 && iy < h && ix >= 0 && ix < w) {
            v = inp[(plane * h + iy) * w + ix];
        }
        col[idx] = v;
    }
}

// dinp[nimg, C, H, W] = the adjoint of im2col (overwritten): each pixel the sum of the column
// entries copied from it, added in (i, j) order as nn::im2col::col2im adds them into a zeroed
// plane. A gather, one thread per pixel: no atomics, the same result at every launch.
extern "C" __global__ void col2im_f32(float* dinp, const float* col, int nimg, int c, int h,
                                      int w, int kh, int kw, int stride, int pad, int oh,
                                      int ow) {
    long long ohw = (long long)oh * ow;
    long long total = (long long)nimg * c * h * w;
    GRID_STRIDE(idx, total) {
        long long x = idx % w;
        long long t = idx / w;
        long long y = t % h;
        long long plane = t / h;  // n*C + ci: its rows start at plane*KH*KW
        float s = 0.0f;
        for (int i = 0; i < kh; ++i) {
            long long ty = y + pad - i;  // oy*stride
            if (ty < 0 || ty % stride != 0 || ty / stride >= oh) {
                continue;
            }
            long long oy = ty / stride;
            for (int j = 0; j < kw; ++j) {
                long long tx = x + pad - j;
                if (tx < 0 || tx % stride != 0 || tx / stride >= ow) {
                    continue;
                }
                long long r = (plane * kh + i) * kw + j;
                s += col[r * ohw + oy * ow + tx / stride];
            }
        }
        dinp[idx] = s;
    }
}

// y[nimg, OC, OHW] += b[OC] (channels last with `nhwc` 1: y[nimg, OHW, OC])
template <typename T>
__device__ void conv_bias_add(T* y, const float* b, int nimg, int oc, int ohw, int nhwc) {
    long long total = (long long)nimg * oc * ohw;
    GRID_STRIDE(idx, total) {
        long long o = nhwc ? idx % oc : (idx / ohw) % oc;
        st(y + idx, ld(y + idx) + b[o]);
    }
}

extern "C" __global__ void conv_bias_add_f32(float* y, const float* b, int nimg, int oc,
                                             int ohw, int nhwc) {
    conv_bias_add(y, b, nimg, oc, ohw, nhwc);
}

extern "C" __global__ void conv_bias_add_bf16(bf16* y, const float* b, int nimg, int oc,
                                              int ohw, int nhwc) {
    conv_bias_add(y, b, nimg, oc, ohw, nhwc);
}

// db[OC] += the sum of dy[nimg, OC, OHW] (or channels last) over images and positions. One
// block per channel (blockDim.x must be CONV_BLOCK): each thread sums a fixed strided share in
// order, then a tree in shared memory, so the result does not depend on the grid.
#define CONV_BLOCK 256
template <typename T>
__device__ void conv_bias_grad(float* db, const T* dy, int nimg, int oc, int ohw, int nhwc) {
    __shared__ float part[CONV_BLOCK];
    long long per_channel = (long long)nimg * ohw;
    for (long long o = blockIdx.x; o < oc; o += gridDim.x) {
        float s = 0.0f;
        for (long long k = threadIdx.x; k < per_channel; k += CONV_BLOCK) {
            s += ld(dy + elem_at(k / ohw, o, k % ohw, oc, ohw, nhwc));
        }
        s = block_sum<CONV_BLOCK>(s, part);
        if (threadIdx.x == 0) {
            db[o] += s;
        }
    }
}

extern "C" __global__ void conv_bias_grad_f32(float* db, const float* dy, int nimg, int oc,
                                              int ohw, int nhwc) {
    conv_bias_grad(db, dy, nimg, oc, ohw, nhwc);
}

extern "C" __global__ void conv_bias_grad_bf16(float* db, const bf16* dy, int nimg, int oc,
                                               int ohw, int nhwc) {
    conv_bias_grad(db, dy, nimg, oc, ohw, nhwc);
}

// dw[OC*CKK] += the sum over parts of part[parts, OC*CKK] (per-image weight gradients), in order.
extern "C" __global__ void conv_dw_sum_f32(float* dw, const float* part, int parts, int oc,
                                           int ckk) {
    long long len = (long long)oc * ckk;
    GRID_STRIDE(idx, len) {
        float s = 0.0f;
        for (int n = 0; n < parts; ++n) {
            s += part[n * len + idx];
        }
        dw[idx] += s;
    }
}
