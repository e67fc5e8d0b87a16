// Depthwise convolution over channels-last images (inp[nimg, H, W, C], out[nimg, OH, OW, C]: the
// GPU path's NHWC layout, src/backend/cuda/layout.rs), the twins of depthwise.cu's NCHW kernels:
// the same weights [C, 1, K, K], bias and geometry, and the same sums in the same order (the
// output: the bias, then the taps in (ky, kx) order; the input gradient: the taps in (ky, kx)
// order), so outputs and input gradients are the NCHW kernels' bit for bit. Each thread takes V
// neighbouring channels of a pixel, loaded and stored as one vector (elem.cuh's Row): the
// `wide3` kernels a 16-byte vector (4 floats or 8 bf16; C a multiple of it, every tensor 16-byte
// aligned, a 3x3 window, the host checks) with the window's weights held in registers; the
// others one channel and any window. A block is blockDim.x lanes x blockDim.y rows of threads
// (at most DWN_THREADS; lanes over the groups of channels, as bn_nhwc.cu's blocks): lane x
// takes channels ch = V * (blockIdx.x * blockDim.x + x) .. ch + V - 1, row y the pixels
// blockIdx.y * blockDim.y + y, then on by gridDim.y * blockDim.y. Pixel counts fit an int, and
// element offsets are taken in 64 bits.
//
// The weight gradient: `weight_parts` writes partial[parts, C, K*K], one part (blockIdx.y of
// gridDim.y) of a channel's nimg * OH * OW outputs per block, each thread its pixels in order
// with all taps' sums at once (3x3: each output's dout and window read once; other windows one
// tap a pass), then a lane's blockDim.y threads in row order (a thread per column); depthwise.cu's
// `dwconv_weight_sum_f32` adds the parts in order into dw. The same bits at every launch.

#include "window.cuh"

// The most threads a block has (the weight gradient's shared sums hold one float per thread).
#define DWN_THREADS 256

// This thread's first channel (none where ch >= C: the last block's spare lanes).
template <int V>
__device__ __forceinline__ int dwn_channel() {
    return V * (blockIdx.x * blockDim.x + threadIdx.x);
}

// The weights of channels ch .. ch + V - 1 for each tap of a K x K window (K > 0), as wr[tap][j].
template <int K, int V>
__device__ __forceinline__ void dwn_taps(float (&wr)[K * K][V], const float* w, int ch) {
#pragma unroll
    for (int t = 0; t < K * K; ++t) {
#pragma unroll
        for (int j = 0; j < V; ++j) {
            wr[t][j] = w[(ch + j) * (K * K) + t];
        }
    }
}

// out = inp (*) w per channel, plus bias where has_bias (bias must still be a valid buffer). K:
// the window (3, its weights in registers), or 0 for any window `kr` (weights read as used).
template <int K, int V, typename T>
__device__ void dwn_forward(T* out, const T* inp, const float* w, const float* bias, int has_bias,
                            int nimg, int c, int h, int wd, int kr, int stride, int pad, int oh,
                            int ow) {
    const int k = K > 0 ? K : kr;
    int ch = dwn_channel<V>();
    if (ch >= c) {
        return;
    }
    constexpr int KW = K > 0 ? K : 1;  // the window held in registers (K = 0: none)
    float wr[KW * KW][V];
    if (K > 0) {
        dwn_taps<KW, V>(wr, w, ch);
    }
    float b0[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
        b0[j] = has_bias ? bias[ch + j] : 0.0f;
    }
    int ohw = oh * ow;
    int pixels = nimg * ohw;
    for (int r = blockIdx.y * blockDim.y + threadIdx.y; r < pixels;
         r += gridDim.y * blockDim.y) {
        int n = r / ohw;
        int q = r - n * ohw;
        int oy = q / ow;
        int ox = q - oy * ow;
        int y0 = oy * stride - pad;
        int x0 = ox * stride - pad;
        float s[V];
#pragma unroll
        for (int j = 0; j < V; ++j) {
            s[j] = b0[j];
        }
#pragma unroll
        for (int ky = 0; ky < k; ++ky) {
            int iy = y0 + ky;
            if (iy < 0 || iy >= h) {
                continue;
            }
#pragma unroll
            for (int kx = 0; kx < k; ++kx) {
                int ix = x0 + kx;
                if (ix < 0 || ix >= wd) {
                    continue;
                }
                float v[V];
                long long at = ((long long)(n * h + iy) * wd + ix) * c + ch;
                Row<V, T>::get(Row<V, T>::load(inp + at), v);
                int t = ky * k + kx;
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    s[j] += (K > 0 ? wr[K > 0 ? t : 0][j] : w[(ch + j) * k * k + t]) * v[j];
                }
            }
        }
        Row<V, T>::st(out + ((long long)r * c + ch), s);
    }
}

extern "C" __global__ void dwconv_nhwc_forward_f32(float* out, const float* inp, const float* w,
                                                   const float* bias, int has_bias, int nimg,
                                                   int c, int h, int wd, int k, int stride,
                                                   int pad, int oh, int ow) {
    dwn_forward<0, 1>(out, inp, w, bias, has_bias, nimg, c, h, wd, k, stride, pad, oh, ow);
}

extern "C" __global__ void dwconv_nhwc_forward_bf16(bf16* out, const bf16* inp, const float* w,
                                                    const float* bias, int has_bias, int nimg,
                                                    int c, int h, int wd, int k, int stride,
                                                    int pad, int oh, int ow) {
    dwn_forward<0, 1>(out, inp, w, bias, has_bias, nimg, c, h, wd, k, stride, pad, oh, ow);
}

extern "C" __global__ void dwconv_nhwc_wide3_forward_f32(float* out, const float* inp,
                                                         const float* w, const float* bias,
                                                         int has_bias, int nimg, int c, int h,
                                                         int wd, int k, int stride, int pad,
                                                         int oh, int ow) {
    dwn_forward<3, 4>(out, inp, w, bias, has_bias, nimg, c, h, wd, k, stride, pad, oh, ow);
}

extern "C" __global__ void dwconv_nhwc_wide3_forward_bf16(bf16* out, const bf16* inp,
                                                          const float* w, const float* bias,
                                                          int has_bias, int nimg, int c, int h,
                                                          int wd, int k, int stride, int pad,
                                                          int oh, int ow) {
    dwn_forward<3, 8>(out, inp, w, bias, has_bias, nimg, c, h, wd, k, stride, pad, oh, ow);
}

// dinp (overwritten) = for each pixel, the sum over the outputs whose window holds it of
// w * dout, in (ky, kx) order.
template <int K, int V, typename T>
__device__ void dwn_backward_input(T* dinp, const T* dout, const float* w, int nimg, int c,
                                   int h, int wd, int kr, int stride, int pad, int oh, int ow) {
    const int k = K > 0 ? K : kr;
    int ch = dwn_channel<V>();
    if (ch >= c) {
        return;
    }
    constexpr int KW = K > 0 ? K : 1;  // the window held in registers (K = 0: none)
    float wr[KW * KW][V];
    if (K > 0) {
        dwn_taps<KW, V>(wr, w, ch);
    }
    int hw = h * wd;
    int pixels = nimg * hw;
    for (int r = blockIdx.y * blockDim.y + threadIdx.y; r < pixels;
         r += gridDim.y * blockDim.y) {
        int n = r / hw;
        int p = r - n * hw;
        int y = p / wd;
        int x = p - y * wd;
        float s[V];
#pragma unroll
        for (int j = 0; j < V; ++j) {
            s[j] = 0.0f;
        }
#pragma unroll
        for (int ky = 0; ky < k; ++ky) {
            int oy = reached<int>(y + pad - ky, stride, oh);
            if (oy < 0) {
                continue;
            }
#pragma unroll
            for (int kx = 0; kx < k; ++kx) {
                int ox = reached<int>(x + pad - kx, stride, ow);
                if (ox < 0) {
                    continue;
                }
                float d[V];
                long long at = ((long long)(n * oh + oy) * ow + ox) * c + ch;
                Row<V, T>::get(Row<V, T>::load(dout + at), d);
                int t = ky * k + kx;
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    s[j] += (K > 0 ? wr[K > 0 ? t : 0][j] : w[(ch + j) * k * k + t]) * d[j];
                }
            }
        }
        Row<V, T>::st(dinp + ((long long)r * c + ch), s);
    }
}

extern "C" __global__ void dwconv_nhwc_backward_input_f32(float* dinp, const float* dout,
                                                          const float* w, int nimg, int c, int h,
                                                          int wd, int k, int stride, int pad,
                                                          int oh, int ow) {
    dwn_backward_input<0, 1>(dinp, dout, w, nimg, c, h, wd, k, stride, pad, oh, ow);
}

extern "C" __global__ void dwconv_nhwc_backward_input_bf16(bf16* dinp, const bf16* dout,
                                                           const float* w, int nimg, int c,
                                                           int h, int wd, int k, int stride,
                                                           int pad, int oh, int ow) {
    dwn_backward_input<0, 1>(dinp, dout, w, nimg, c, h, wd, k, stride, pad, oh, ow);
}

extern "C" __global__ void dwconv_nhwc_wide3_backward_input_f32(float* dinp, const float* dout,
                                                                const float* w, int nimg, int c,
                                                                int h, int wd, int k, int stride,
                                                                int pad, int oh, int ow) {
    dwn_backward_input<3, 4>(dinp, dout, w, nimg, c, h, wd, k, stride, pad, oh, ow);
}

extern "C" __global__ void dwconv_nhwc_wide3_backward_input_bf16(bf16* dinp, const bf16* dout,
                                                                 const float* w, int nimg, int c,
                                                                 int h, int wd, int k,
                                                                 int stride, int pad, int oh,
                                                                 int ow) {
    dwn_backward_input<3, 8>(dinp, dout, w, nimg, c, h, wd, k, stride, pad, oh, ow);
}

// partial[part, ch, tap] for the block's channels = the sums of each thread's v[V] (its
// channels' sums for tap `tap`) over its lane's blockDim.y threads, in row order: the block's
// values go through shared memory sh[DWN_THREADS * V] at once, then one thread per (lane,
// channel of its vector) adds that column. Every thread of the block calls it.
template <int V>
__device__ void dwn_put_column_sums(float* partial, const float* v, float* sh, int c, int taps,
                                    int tap) {
    int tid = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
    for (int j = 0; j < V; ++j) {
        sh[tid * V + j] = v[j];
    }
    __syncthreads();
    if (tid < blockDim.x * V) {
        int lane = tid / V;
        int j = tid - lane * V;
        float s = 0.0f;
        for (int y = 0; y < blockDim.y; ++y) {
            s += sh[(y * blockDim.x + lane) * V + j];
        }
        int ch = V * (blockIdx.x * blockDim.x + lane) + j;
        if (ch < c) {
            partial[((long long)blockIdx.y * c + ch) * taps + tap] = s;
        }
    }
    __syncthreads();  // sh[] is refilled next
}

// partial[parts, C, K*K] (see the top): TAPS taps a pass over the block's pixels (all K*K
// for K > 0; one for K = 0, any window `kr`).
template <int K, int V, typename T>
__device__ void dwn_weight_parts(float* partial, const T* dout, const T* inp, int nimg, int c,
                                 int h, int wd, int kr, int stride, int pad, int oh, int ow) {
    const int TAPS = K > 0 ? K * K : 1;
    __shared__ float sh[DWN_THREADS * V];
    const int k = K > 0 ? K : kr;
    int ch = dwn_channel<V>();
    bool mine = ch < c;
    int ohw = oh * ow;
    int pixels = nimg * ohw;
    int chunk = (pixels + gridDim.y - 1) / gridDim.y;
    int lo = min((int)blockIdx.y * chunk, pixels);
    int hi = min(lo + chunk, pixels);
    for (int t0 = 0; t0 < k * k; t0 += TAPS) {
        float s[TAPS][V];
#pragma unroll
        for (int tt = 0; tt < TAPS; ++tt) {
#pragma unroll
            for (int j = 0; j < V; ++j) {
                s[tt][j] = 0.0f;
            }
        }
        for (int r = lo + threadIdx.y; mine && r < hi; r += blockDim.y) {
            int n = r / ohw;
            int q = r - n * ohw;
            int oy = q / ow;
            int ox = q - oy * ow;
            int y0 = oy * stride - pad;
            int x0 = ox * stride - pad;
            float d[V];
            Row<V, T>::get(Row<V, T>::load(dout + ((long long)r * c + ch)), d);
#pragma unroll
            for (int tt = 0; tt < TAPS; ++tt) {
                int t = t0 + tt;
                int iy = y0 + t / k;
                int ix = x0 + t % k;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) {
                    continue;
                }
                float v[V];
                long long at = ((long long)(n * h + iy) * wd + ix) * c + ch;
                Row<V, T>::get(Row<V, T>::load(inp + at), v);
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    s[tt][j] += d[j] * v[j];
                }
            }
        }
        // (unrolled: s[][] stays in registers)
#pragma unroll
        for (int tt = 0; tt < TAPS; ++tt) {
            dwn_put_column_sums<V>(partial, s[tt], sh, c, k * k, t0 + tt);
        }
    }
}

extern "C" __global__ void dwconv_nhwc_weight_parts_f32(float* partial, const float* dout,
                                                        const float* inp, int nimg, int c, int h,
                                                        int wd, int k, int stride, int pad,
                                                        int oh, int ow) {
    dwn_weight_parts<0, 1>(partial, dout, inp, nimg, c, h, wd, k, stride, pad, oh, ow);
}

extern "C" __global__ void dwconv_nhwc_weight_parts_bf16(float* partial, const bf16* dout,
                                                         const bf16* inp, int nimg, int c, int h,
                                                         int wd, int k, int stride, int pad,
                                                         int oh, int ow) {
    dwn_weight_parts<0, 1>(partial, dout, inp, nimg, c, h, wd, k, stride, pad, oh, ow);
}

extern "C" __global__ void dwconv_nhwc_wide3_weight_parts_f32(float* partial, const float* dout,
                                                              const float* inp, int nimg, int c,
                                                              int h, int wd, int k, int stride,
                                                              int pad, int oh, int ow) {
    dwn_weight_parts<3, 4>(partial, dout, inp, nimg, c, h, wd, k, stride, pad, oh, ow);
}

extern "C" __global__ void dwconv_nhwc_wide3_weight_parts_bf16(float* partial, const bf16* dout,
                                                               const bf16* inp, int nimg, int c,
                                                               int h, int wd, int k, int stride,
                                                               int pad, int oh, int ow) {
    dwn_weight_parts<3, 8>(partial, dout, inp, nimg, c, h, wd, k, stride, pad, oh, ow);
}
