// Depthwise 2-D convolution over NCHW images (groups = channels), weights [C, 1, K, K], zero
// padding. Mirrors nn::depthwise (dwconv_forward, dwconv_backward). Direct, one thread per
// output (forward) or input pixel (the input gradient, a gather: no atomics), index arithmetic
// in 32 bits where the launch fits (SMALL). The weight gradient: for 3x3 windows, one block per
// (channel, part of its outputs) whose threads each keep all nine taps' sums over their
// outputs, reading dout and the input once (`dwconv_weight_parts3`), then the parts added in
// order (`dwconv_weight_sum_f32`); other windows one block per (channel, tap). Every sum is
// taken in a fixed order (each thread its strided share in order, then a tree in shared
// memory, then the parts in order): the same bits at every launch. The bias gradient is
// conv.cu's conv_bias_grad.

#define DW_BLOCK 256

#include "window.cuh"

// out[nimg, C, OH, OW] = inp[nimg, C, H, W] (*) w[C, 1, K, K] per channel, plus bias[C] when
// has_bias (bias must still be a valid buffer); taps added in (ky, kx) order as on the CPU.
template <typename I, typename T>
__device__ void dw_forward(T* out, const T* inp, const float* w, const float* bias, int has_bias,
                           int nimg, int c, int h, int wd, int k, int stride, int pad, int oh,
                           int ow) {
    I ohw = (I)oh * ow;
    I hw = (I)h * wd;
    I total = (I)nimg * c * ohw;
    GRID_STRIDE_I(I, idx, total) {
        I plane = idx / ohw;
        I q = idx - plane * ohw;
        int ch = (int)(plane % c);
        I oy = q / ow;
        I ox = q - oy * ow;
        const T* src = inp + plane * hw;
        const float* wk = w + ch * k * k;
        I y0 = oy * stride - pad;
        I x0 = ox * stride - pad;
        float s = has_bias ? bias[ch] : 0.0f;
        for (int ky = 0; ky < k; ++ky) {
            I iy = y0 + ky;
            if (iy < 0 || iy >= h) {
                continue;
            }
            for (int kx = 0; kx < k; ++kx) {
                I ix = x0 + kx;
                if (ix < 0 || ix >= wd) {
                    continue;
                }
                s += wk[ky * k + kx] * ld(src + (iy * wd + ix));
            }
        }
        st(out + idx, s);
    }
}

// Whether every index of a launch over nimg * C planes of the larger of the two planes fits an
// int.
__device__ __forceinline__ bool dw_small(int nimg, int c, int h, int wd, int oh, int ow) {
    long long plane = max((long long)h * wd, (long long)oh * ow);
    return (long long)nimg * c * plane < SMALL;
}

template <typename T>
__device__ void dwconv_forward(T* out, const T* inp, const float* w, const float* bias,
                               int has_bias, int nimg, int c, int h, int wd, int k, int stride,
                               int pad, int oh, int ow) {
    if (dw_small(nimg, c, h, wd, oh, ow)) {
        dw_forward<int>(out, inp, w, bias, has_bias, nimg, c, h, wd, k, stride, pad, oh, ow);
    } else {
        dw_forward<long long>(out, inp, w, bias, has_bias, nimg, c, h, wd, k, stride, pad, oh,
                              ow);
    }
}

extern "C" __global__ void dwconv_forward_f32(float* out, const float* inp, const float* w,
                                              const float* bias, int has_bias, int nimg, int c,
                                              int h, int wd, int k, int stride, int pad, int oh,
                                              int ow) {
    dwconv_forward(out, inp, w, bias, has_bias, nimg, c, h, wd, k, stride, pad, oh, ow);
}

extern "C" __global__ void dwconv_forward_bf16(bf16* out, const bf16* inp, const float* w,
                                               const float* bias, int has_bias, int nimg, int c,
                                               int h, int wd, int k, int stride, int pad, int oh,
                                               int ow) {
    dwconv_forward(out, inp, w, bias, has_bias, nimg, c, h, wd, k, stride, pad, oh, ow);
}

// dinp[nimg, C, H, W] (overwritten) = for each pixel, the sum over the outputs whose window
// holds it of w * dout, in (ky, kx) order as the CPU adds them into a zeroed plane.
template <typename I, typename T>
__device__ void dw_backward_input(T* dinp, const T* dout, const float* w, int nimg, int c, int h,
                                  int wd, int k, int stride, int pad, int oh, int ow) {
    I ohw = (I)oh * ow;
    I hw = (I)h * wd;
    I total = (I)nimg * c * hw;
    GRID_STRIDE_I(I, idx, total) {
        I plane = idx / hw;
        I p = idx - plane * hw;
        int ch = (int)(plane % c);
        I y = p / wd;
        I x = p - y * wd;
        const T* d = dout + plane * ohw;
        const float* wk = w + ch * k * k;
        float s = 0.0f;
        for (int ky = 0; ky < k; ++ky) {
            I oy = reached<I>(y + pad - ky, stride, oh);
            if (oy < 0) {
                continue;
            }
            for (int kx = 0; kx < k; ++kx) {
                I ox = reached<I>(x + pad - kx, stride, ow);
                if (ox < 0) {
                    continue;
                }
                s += wk[ky * k + kx] * ld(d + (oy * ow + ox));
            }
        }
        st(dinp + idx, s);
    }
}

template <typename T>
__device__ void dwconv_backward_input(T* dinp, const T* dout, const float* w, int nimg, int c,
                                      int h, int wd, int k, int stride, int pad, int oh,
                                      int ow) {
    if (dw_small(nimg, c, h, wd, oh, ow)) {
        dw_backward_input<int>(dinp, dout, w, nimg, c, h, wd, k, stride, pad, oh, ow);
    } else {
        dw_backward_input<long long>(dinp, dout, w, nimg, c, h, wd, k, stride, pad, oh, ow);
    }
}

extern "C" __global__ void dwconv_backward_input_f32(float* dinp, const float* dout,
                                                     const float* w, int nimg, int c, int h,
                                                     int wd, int k, int stride, int pad, int oh,
                                                     int ow) {
    dwconv_backward_input(dinp, dout, w, nimg, c, h, wd, k, stride, pad, oh, ow);
}

extern "C" __global__ void dwconv_backward_input_bf16(bf16* dinp, const bf16* dout,
                                                      const float* w, int nimg, int c, int h,
                                                      int wd, int k, int stride, int pad, int oh,
                                                      int ow) {
    dwconv_backward_input(dinp, dout, w, nimg, c, h, wd, k, stride, pad, oh, ow);
}

// dw[C, 1, K, K] += for each (channel, tap), the sum over images and outputs of
// dout * the input under that tap. One block per (channel, tap): any K.
template <typename T>
__device__ void dwconv_backward_weight(float* dw, const T* dout, const T* inp, int nimg, int c,
                                       int h, int wd, int k, int stride, int pad, int oh,
                                       int ow) {
    __shared__ float part[DW_BLOCK];
    long long ohw = (long long)oh * ow;
    long long hw = (long long)h * wd;
    long long kk = (long long)k * k;
    long long per_tap = (long long)nimg * ohw;
    for (long long item = blockIdx.x; item < c * kk; item += gridDim.x) {
        long long ch = item / kk;
        int ky = (int)((item % kk) / k);
        int kx = (int)((item % kk) % k);
        float s = 0.0f;
        for (long long e = threadIdx.x; e < per_tap; e += DW_BLOCK) {
            long long plane = (e / ohw) * c + ch;
            long long p = e % ohw;
            long long iy = (p / ow) * stride + ky - pad;
            long long ix = (p % ow) * stride + kx - pad;
            if (iy >= 0 && iy < h && ix >= 0 && ix < wd) {
                s += ld(dout + (plane * ohw + p)) * ld(inp + (plane * hw + iy * wd + ix));
            }
        }
        s = block_sum<DW_BLOCK>(s, part);
        if (threadIdx.x == 0) {
            dw[item] += s;
        }
    }
}

extern "C" __global__ void dwconv_backward_weight_f32(float* dw, const float* dout,
                                                      const float* inp, int nimg, int c, int h,
                                                      int wd, int k, int stride, int pad,
                                                      int oh, int ow) {
    dwconv_backward_weight(dw, dout, inp, nimg, c, h, wd, k, stride, pad, oh, ow);
}

extern "C" __global__ void dwconv_backward_weight_bf16(float* dw, const bf16* dout,
                                                       const bf16* inp, int nimg, int c, int h,
                                                       int wd, int k, int stride, int pad,
                                                       int oh, int ow) {
    dwconv_backward_weight(dw, dout, inp, nimg, c, h, wd, k, stride, pad, oh, ow);
}

// partial[parts, C, K*K] = for the block's channel (blockIdx.x, then on by gridDim.x) and part
// (blockIdx.y of gridDim.y, over the channel's nimg * OH * OW outputs), each tap's sum of dout *
// the input under it: every thread its outputs e = lo + t, lo + t + DW_BLOCK, ... in order,
// all K*K taps at once (each output's dout and window read once), then a tree per tap. K a
// compile-time window (3); offsets fit an int (the host checks B*C*H*W and B*C*OH*OW).
template <int K, typename T>
__device__ void dw_weight_parts(float* partial, const T* dout, const T* inp, int nimg, int c,
                                int h, int wd, int stride, int pad, int oh, int ow) {
    __shared__ float part[DW_BLOCK];
    int ohw = oh * ow;
    int hw = h * wd;
    int per_channel = nimg * ohw;
    int chunk = (per_channel + gridDim.y - 1) / gridDim.y;
    int lo = min((int)blockIdx.y * chunk, per_channel);
    int hi = min(lo + chunk, per_channel);
    for (int ch = blockIdx.x; ch < c; ch += gridDim.x) {
        float s[K * K];
#pragma unroll
        for (int t = 0; t < K * K; ++t) {
            s[t] = 0.0f;
        }
        for (int e = lo + threadIdx.x; e < hi; e += DW_BLOCK) {
            int n = e / ohw;
            int q = e - n * ohw;
            int oy = q / ow;
            int ox = q - oy * ow;
            int plane = n * c + ch;
            float d = ld(dout + (plane * ohw + q));
            const T* src = inp + plane * hw;
            int y0 = oy * stride - pad;
            int x0 = ox * stride - pad;
#pragma unroll
            for (int ky = 0; ky < K; ++ky) {
                int iy = y0 + ky;
                bool row = iy >= 0 && iy < h;
#pragma unroll
                for (int kx = 0; kx < K; ++kx) {
                    int ix = x0 + kx;
                    if (row && ix >= 0 && ix < wd) {
                        s[ky * K + kx] += d * ld(src + (iy * wd + ix));
                    }
                }
            }
        }
        for (int t = 0; t < K * K; ++t) {
            float v = block_sum<DW_BLOCK>(s[t], part);
            if (threadIdx.x == 0) {
                partial[((long long)blockIdx.y * c + ch) * (K * K) + t] = v;
            }
        }
    }
}

extern "C" __global__ void dwconv_weight_parts3_f32(float* partial, const float* dout,
                                                    const float* inp, int nimg, int c, int h,
                                                    int wd, int stride, int pad, int oh,
                                                    int ow) {
    dw_weight_parts<3>(partial, dout, inp, nimg, c, h, wd, stride, pad, oh, ow);
}

extern "C" __global__ void dwconv_weight_parts3_bf16(float* partial, const bf16* dout,
                                                     const bf16* inp, int nimg, int c, int h,
                                                     int wd, int stride, int pad, int oh,
                                                     int ow) {
    dw_weight_parts<3>(partial, dout, inp, nimg, c, h, wd, stride, pad, oh, ow);
}

// dw[len] += the sum over parts of partial[parts, len], in part order: one thread per weight.
extern "C" __global__ void dwconv_weight_sum_f32(float* dw, const float* partial, int parts,
                                                 int len) {
    GRID_STRIDE(j, len) {
        float s = 0.0f;
        for (int p = 0; p < parts; ++p) {
            s += partial[(long long)p * len + j];
        }
        dw[j] += s;
    }
}
