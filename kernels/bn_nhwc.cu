// Batch norm over channels-last tensors (x[nimg * hw, C]: the GPU path's NHWC layout,
// src/backend/cuda/layout.rs), the twins of bn.cu's NCHW kernels: the same arguments, the same
// statistics, outputs and gradients (bn.cu's comments define them), for the same host code
// (src/backend/cuda/bn picks the kernel and the launch by layout). Each thread takes V
// neighbouring channels, loaded and stored as one vector: `{op}_{type}` V = 2 (C even: one
// 8-byte float pair or 4-byte bf16 pair), `wide_{op}_{type}` 16 bytes (V = 4 floats or 8 bf16;
// C a multiple of V and every tensor 16-byte aligned, the host checks), which reads the same
// bytes with a quarter of the loads. A block is blockDim.x lanes x blockDim.y rows of threads
// (at most NHWC_THREADS; the host spreads the channel groups evenly over blocks of at most 32
// lanes, and where C < 32 V a block's lanes are all its groups and a warp reads whole rows):
// lane x takes channels ch = V * (blockIdx.x * blockDim.x + x) .. ch + V - 1, row y the rows
// lo + y, lo + y + blockDim.y, ... of the block's part [lo, hi) of the nimg * hw rows
// (gridDim.y parts, fixed by the sizes alone). Per-channel sums in double without atomics:
// each thread its rows in order, then a channel's blockDim.y threads in order (`column_sum`),
// then the parts in a fixed tree (`bn_reduce_parts_f32`): the same bits at every launch.

#include "bn.cuh"

// The most threads a block has (its shared sums hold one double per thread).
#define NHWC_THREADS 256

// Rows a wide kernel's thread loads before it uses them (BN_UNROLL for the pairs): its
// vectors hold four times the bytes, so as many bytes are in flight with fewer registers.
#define WIDE_UNROLL 4

// This thread's first channel (it has none where ch >= C: the last block's spare lanes).
template <int V>
__device__ __forceinline__ int first_channel() {
    return V * (blockIdx.x * blockDim.x + threadIdx.x);
}

// Walks this thread's rows of the block's part of the nimg * hw rows: load(u, at) for up to U
// rows at element offsets `at` (of channel ch) first, then use(u, at) for each, so that the
// loads are in flight together. (Offsets fit an int: the host checks B*C*HW.)
template <int U, typename Load, typename Use>
__device__ __forceinline__ void walk_rows(int nimg, int c, int hw, int ch, Load load, Use use) {
    long long lo, hi;
    part_range((long long)nimg * hw, &lo, &hi);
    for (long long r = lo + threadIdx.y; r < hi; r += blockDim.y * U) {
        int at[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            long long ru = r + u * blockDim.y;
            at[u] = (int)(ru * c + ch);
            if (ru < hi) {
                load(u, at[u]);
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (r + u * blockDim.y < hi) {
                use(u, at[u]);
            }
        }
    }
}

// The sum of v over the block's blockDim.y threads of this lane, in row order: in row 0's
// threads (0 in the others). Every thread of the block calls it.
__device__ double column_sum(double v, double* sh) {
    sh[threadIdx.y * blockDim.x + threadIdx.x] = v;
    __syncthreads();
    double s = 0.0;
    if (threadIdx.y == 0) {
        for (int y = 0; y < blockDim.y; ++y) {
            s += sh[y * blockDim.x + threadIdx.x];
        }
    }
    __syncthreads();  // sh[] is refilled next
    return s;
}

// partial[parts, stride] at [blockIdx.y * stride + at + j] = the block's column sums of v[j]
// (j < V: channels ch + j).
template <int V>
__device__ void put(double* partial, long long stride, int at, const double* v, bool mine,
                    double* sh) {
    for (int j = 0; j < V; ++j) {
        double s = column_sum(v[j], sh);
        if (mine && threadIdx.y == 0) {
            partial[(long long)blockIdx.y * stride + at + j] = s;
        }
    }
}

// Each kernel below is one template body over (V channels per thread, U rows in flight, T)
// with four entry points: `bn_nhwc_{op}_{f32,bf16}` (pairs: V = 2, U = BN_UNROLL) and
// `bn_nhwc_wide_{op}_{f32,bf16}` (16-byte vectors: V = Wide<T>::V, U = WIDE_UNROLL).

// As bn_sums (bn.cu): partial[parts, C] = per-channel sums of x, or of (x - m)^2.
template <int V, int U, typename T>
__device__ void bn_nhwc_sums(double* partial, const T* x, const double* centre, int centred,
                             double n, int nimg, int c, int hw) {
    __shared__ double sh[NHWC_THREADS];
    int ch = first_channel<V>();
    bool mine = ch < c;
    double s[V];
    for (int j = 0; j < V; ++j) {
        s[j] = 0.0;
    }
    if (mine) {
        float m[V];
        for (int j = 0; j < V; ++j) {
            m[j] = (centred && n > 0.0) ? (float)(centre[ch + j] / n) : 0.0f;
        }
        typename Row<V, T>::Raw r[U];
        walk_rows<U>(
            nimg, c, hw, ch, [&](int u, int at) { r[u] = Row<V, T>::load(x + at); },
            [&](int u, int) {
                float v[V];
                Row<V, T>::get(r[u], v);
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    float d = v[j] - m[j];
                    s[j] += centred ? (double)__fmul_rn(d, d) : (double)v[j];
                }
            });
    }
    put<V>(partial, c, ch, s, mine, sh);
}

extern "C" __global__ void bn_nhwc_sums_f32(double* partial, const float* x,
                                            const double* centre, int centred, double n,
                                            int nimg, int c, int hw) {
    bn_nhwc_sums<2, BN_UNROLL>(partial, x, centre, centred, n, nimg, c, hw);
}

extern "C" __global__ void bn_nhwc_sums_bf16(double* partial, const bf16* x,
                                             const double* centre, int centred, double n,
                                             int nimg, int c, int hw) {
    bn_nhwc_sums<2, BN_UNROLL>(partial, x, centre, centred, n, nimg, c, hw);
}

extern "C" __global__ void bn_nhwc_wide_sums_f32(double* partial, const float* x,
                                                 const double* centre, int centred, double n,
                                                 int nimg, int c, int hw) {
    bn_nhwc_sums<Wide<float>::V, WIDE_UNROLL>(partial, x, centre, centred, n, nimg, c, hw);
}

extern "C" __global__ void bn_nhwc_wide_sums_bf16(double* partial, const bf16* x,
                                                  const double* centre, int centred, double n,
                                                  int nimg, int c, int hw) {
    bn_nhwc_sums<Wide<bf16>::V, WIDE_UNROLL>(partial, x, centre, centred, n, nimg, c, hw);
}

// As bn_moments: partial[parts, 2C] = per-channel sums of x, then of x^2, in double.
template <int V, int U, typename T>
__device__ void bn_nhwc_moments(double* partial, const T* x, int nimg, int c, int hw) {
    __shared__ double sh[NHWC_THREADS];
    int ch = first_channel<V>();
    bool mine = ch < c;
    double s1[V], s2[V];
    for (int j = 0; j < V; ++j) {
        s1[j] = 0.0;
        s2[j] = 0.0;
    }
    if (mine) {
        typename Row<V, T>::Raw r[U];
        walk_rows<U>(
            nimg, c, hw, ch, [&](int u, int at) { r[u] = Row<V, T>::load(x + at); },
            [&](int u, int) {
                float v[V];
                Row<V, T>::get(r[u], v);
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    double d = (double)v[j];
                    s1[j] += d;
                    s2[j] = fma(d, d, s2[j]);
                }
            });
    }
    put<V>(partial, 2LL * c, ch, s1, mine, sh);
    put<V>(partial, 2LL * c, c + ch, s2, mine, sh);
}

extern "C" __global__ void bn_nhwc_moments_f32(double* partial, const float* x, int nimg, int c,
                                               int hw) {
    bn_nhwc_moments<2, BN_UNROLL>(partial, x, nimg, c, hw);
}

extern "C" __global__ void bn_nhwc_moments_bf16(double* partial, const bf16* x, int nimg, int c,
                                                int hw) {
    bn_nhwc_moments<2, BN_UNROLL>(partial, x, nimg, c, hw);
}

extern "C" __global__ void bn_nhwc_wide_moments_f32(double* partial, const float* x, int nimg,
                                                    int c, int hw) {
    bn_nhwc_moments<Wide<float>::V, WIDE_UNROLL>(partial, x, nimg, c, hw);
}

extern "C" __global__ void bn_nhwc_wide_moments_bf16(double* partial, const bf16* x, int nimg,
                                                     int c, int hw) {
    bn_nhwc_moments<Wide<bf16>::V, WIDE_UNROLL>(partial, x, nimg, c, hw);
}

// out[len] = the sum over parts of partial[parts, len]: one block per output (grid-stride),
// each thread its parts t, t + BN_BLOCK, ... in order, then the block's tree (`block_sum`).
// For the channels-last kernels' parts, which are many (hundreds) where channels are few.
extern "C" __global__ void bn_reduce_parts_f32(double* out, const double* partial, int parts,
                                               int len) {
    __shared__ double sh[BN_BLOCK];
    for (int j = blockIdx.x; j < len; j += gridDim.x) {
        double s = 0.0;
        for (int q = threadIdx.x; q < parts; q += BN_BLOCK) {
            s += partial[(long long)q * len + j];
        }
        s = block_sum<BN_BLOCK>(s, sh);
        if (threadIdx.x == 0) {
            out[j] = s;
        }
    }
}

// out = activate(x * scale[j] + shift[j]) over this thread's rows of channels ch + j: what
// training (bn_nhwc_apply) and inference (bn_nhwc_eval) apply, each from its own statistics.
template <int V, int U, typename T>
__device__ __forceinline__ void affine_rows(T* out, const T* x, const float* scale,
                                            const float* shift, int nimg, int c, int hw, int ch,
                                            int act) {
    typename Row<V, T>::Raw r[U];
    walk_rows<U>(
        nimg, c, hw, ch, [&](int u, int at) { r[u] = Row<V, T>::load(x + at); },
        [&](int u, int at) {
            float v[V], o[V];
            Row<V, T>::get(r[u], v);
#pragma unroll
            for (int j = 0; j < V; ++j) {
                o[j] = activate(__fadd_rn(__fmul_rn(v[j], scale[j]), shift[j]), act);
            }
            Row<V, T>::st(out + at, o);
        });
}

// As bn_apply: out = activate(x * scale + shift) per channel, from saved[2C] = mean, invstd.
template <int V, int U, typename T>
__device__ void bn_nhwc_apply(T* out, const T* x, const float* saved, const float* weight,
                              const float* bias, int nimg, int c, int hw, int act) {
    int ch = first_channel<V>();
    if (ch >= c) {
        return;
    }
    float scale[V], shift[V];
    for (int j = 0; j < V; ++j) {
        scale_shift(saved, weight, bias, c, ch + j, &scale[j], &shift[j]);
    }
    affine_rows<V, U>(out, x, scale, shift, nimg, c, hw, ch, act);
}

extern "C" __global__ void bn_nhwc_apply_f32(float* out, const float* x, const float* saved,
                                             const float* weight, const float* bias, int nimg,
                                             int c, int hw, int act) {
    bn_nhwc_apply<2, BN_UNROLL>(out, x, saved, weight, bias, nimg, c, hw, act);
}

extern "C" __global__ void bn_nhwc_apply_bf16(bf16* out, const bf16* x, const float* saved,
                                              const float* weight, const float* bias, int nimg,
                                              int c, int hw, int act) {
    bn_nhwc_apply<2, BN_UNROLL>(out, x, saved, weight, bias, nimg, c, hw, act);
}

extern "C" __global__ void bn_nhwc_wide_apply_f32(float* out, const float* x, const float* saved,
                                                  const float* weight, const float* bias,
                                                  int nimg, int c, int hw, int act) {
    bn_nhwc_apply<Wide<float>::V, WIDE_UNROLL>(out, x, saved, weight, bias, nimg, c, hw, act);
}

extern "C" __global__ void bn_nhwc_wide_apply_bf16(bf16* out, const bf16* x, const float* saved,
                                                   const float* weight, const float* bias,
                                                   int nimg, int c, int hw, int act) {
    bn_nhwc_apply<Wide<bf16>::V, WIDE_UNROLL>(out, x, saved, weight, bias, nimg, c, hw, act);
}

// As bn_eval: inference from the running statistics.
template <int V, int U, typename T>
__device__ void bn_nhwc_eval(T* out, const T* x, const float* running, const float* weight,
                             const float* bias, int nimg, int c, int hw, float eps, int act) {
    int ch = first_channel<V>();
    if (ch >= c) {
        return;
    }
    float scale[V], shift[V];
    for (int j = 0; j < V; ++j) {
        scale[j] = weight[ch + j] / sqrtf(running[c + ch + j] + eps);
        shift[j] = __fadd_rn(bias[ch + j], -__fmul_rn(running[ch + j], scale[j]));
    }
    affine_rows<V, U>(out, x, scale, shift, nimg, c, hw, ch, act);
}

extern "C" __global__ void bn_nhwc_eval_f32(float* out, const float* x, const float* running,
                                            const float* weight, const float* bias, int nimg,
                                            int c, int hw, float eps, int act) {
    bn_nhwc_eval<2, BN_UNROLL>(out, x, running, weight, bias, nimg, c, hw, eps, act);
}

extern "C" __global__ void bn_nhwc_eval_bf16(bf16* out, const bf16* x, const float* running,
                                             const float* weight, const float* bias, int nimg,
                                             int c, int hw, float eps, int act) {
    bn_nhwc_eval<2, BN_UNROLL>(out, x, running, weight, bias, nimg, c, hw, eps, act);
}

extern "C" __global__ void bn_nhwc_wide_eval_f32(float* out, const float* x,
                                                 const float* running, const float* weight,
                                                 const float* bias, int nimg, int c, int hw,
                                                 float eps, int act) {
    bn_nhwc_eval<Wide<float>::V, WIDE_UNROLL>(out, x, running, weight, bias, nimg, c, hw, eps,
                                              act);
}

extern "C" __global__ void bn_nhwc_wide_eval_bf16(bf16* out, const bf16* x,
                                                  const float* running, const float* weight,
                                                  const float* bias, int nimg, int c, int hw,
                                                  float eps, int act) {
    bn_nhwc_eval<Wide<bf16>::V, WIDE_UNROLL>(out, x, running, weight, bias, nimg, c, hw, eps,
                                             act);
}

// As bn_grad_sums: partial[parts, 2C] = per-channel sums of the gradient at the normalised
// output (`masked`), then of it times (x - mean).
template <int V, int U, typename T>
__device__ void bn_nhwc_grad_sums(double* partial, const T* dout, const T* x, const float* saved,
                                  const float* weight, const float* bias, int nimg, int c,
                                  int hw, int act) {
    __shared__ double sh[NHWC_THREADS];
    int ch = first_channel<V>();
    bool mine = ch < c;
    double sdy[V], sdyx[V];
    for (int j = 0; j < V; ++j) {
        sdy[j] = 0.0;
        sdyx[j] = 0.0;
    }
    if (mine) {
        float mean[V], scale[V], shift[V];
        for (int j = 0; j < V; ++j) {
            mean[j] = saved[ch + j];
            scale_shift(saved, weight, bias, c, ch + j, &scale[j], &shift[j]);
        }
        typename Row<V, T>::Raw rd[U], rx[U];
        walk_rows<U>(
            nimg, c, hw, ch,
            [&](int u, int at) {
                rd[u] = Row<V, T>::load(dout + at);
                rx[u] = Row<V, T>::load(x + at);
            },
            [&](int u, int) {
                float d[V], xv[V];
                Row<V, T>::get(rd[u], d);
                Row<V, T>::get(rx[u], xv);
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    float dy = masked(d[j], xv[j], scale[j], shift[j], act, x);
                    sdy[j] += (double)dy;
                    sdyx[j] += (double)__fmul_rn(dy, xv[j] - mean[j]);
                }
            });
    }
    put<V>(partial, 2LL * c, ch, sdy, mine, sh);
    put<V>(partial, 2LL * c, c + ch, sdyx, mine, sh);
}

extern "C" __global__ void bn_nhwc_grad_sums_f32(double* partial, const float* dout,
                                                 const float* x, const float* saved,
                                                 const float* weight, const float* bias,
                                                 int nimg, int c, int hw, int act) {
    bn_nhwc_grad_sums<2, BN_UNROLL>(partial, dout, x, saved, weight, bias, nimg, c, hw, act);
}

extern "C" __global__ void bn_nhwc_grad_sums_bf16(double* partial, const bf16* dout,
                                                  const bf16* x, const float* saved,
                                                  const float* weight, const float* bias,
                                                  int nimg, int c, int hw, int act) {
    bn_nhwc_grad_sums<2, BN_UNROLL>(partial, dout, x, saved, weight, bias, nimg, c, hw, act);
}

extern "C" __global__ void bn_nhwc_wide_grad_sums_f32(double* partial, const float* dout,
                                                      const float* x, const float* saved,
                                                      const float* weight, const float* bias,
                                                      int nimg, int c, int hw, int act) {
    bn_nhwc_grad_sums<Wide<float>::V, WIDE_UNROLL>(partial, dout, x, saved, weight, bias, nimg,
                                                   c, hw, act);
}

extern "C" __global__ void bn_nhwc_wide_grad_sums_bf16(double* partial, const bf16* dout,
                                                       const bf16* x, const float* saved,
                                                       const float* weight, const float* bias,
                                                       int nimg, int c, int hw, int act) {
    bn_nhwc_grad_sums<Wide<bf16>::V, WIDE_UNROLL>(partial, dout, x, saved, weight, bias, nimg,
                                                  c, hw, act);
}

// As bn_backward_dx: dx (overwritten) = k * (n * dy - sdy - xhat * sdyxhat) per channel.
template <int V, int U, typename T>
__device__ void bn_nhwc_backward_dx(T* dx, const T* dout, const T* x, const float* saved,
                                    const float* weight, const float* bias, const double* total,
                                    float n, int nimg, int c, int hw, int act) {
    int ch = first_channel<V>();
    if (ch >= c) {
        return;
    }
    float mean[V], invstd[V], sdy[V], sdyxhat[V], k[V], scale[V], shift[V];
    for (int j = 0; j < V; ++j) {
        mean[j] = saved[ch + j];
        invstd[j] = saved[c + ch + j];
        sdy[j] = (float)total[ch + j];
        sdyxhat[j] = (float)(total[c + ch + j] * (double)invstd[j]);
        k[j] = weight[ch + j] * invstd[j] / n;
        scale_shift(saved, weight, bias, c, ch + j, &scale[j], &shift[j]);
    }
    typename Row<V, T>::Raw rd[U], rx[U];
    walk_rows<U>(
        nimg, c, hw, ch,
        [&](int u, int at) {
            rd[u] = Row<V, T>::load(dout + at);
            rx[u] = Row<V, T>::load(x + at);
        },
        [&](int u, int at) {
            float d[V], xv[V], g[V];
            Row<V, T>::get(rd[u], d);
            Row<V, T>::get(rx[u], xv);
#pragma unroll
            for (int j = 0; j < V; ++j) {
                float xhat = (xv[j] - mean[j]) * invstd[j];
                float dy = masked(d[j], xv[j], scale[j], shift[j], act, x);
                g[j] = k[j] * (n * dy - sdy[j] - xhat * sdyxhat[j]);
            }
            Row<V, T>::st(dx + at, g);
        });
}

extern "C" __global__ void bn_nhwc_backward_dx_f32(float* dx, const float* dout, const float* x,
                                                   const float* saved, const float* weight,
                                                   const float* bias, const double* total,
                                                   float n, int nimg, int c, int hw, int act) {
    bn_nhwc_backward_dx<2, BN_UNROLL>(dx, dout, x, saved, weight, bias, total, n, nimg, c, hw,
                                      act);
}

extern "C" __global__ void bn_nhwc_backward_dx_bf16(bf16* dx, const bf16* dout, const bf16* x,
                                                    const float* saved, const float* weight,
                                                    const float* bias, const double* total,
                                                    float n, int nimg, int c, int hw, int act) {
    bn_nhwc_backward_dx<2, BN_UNROLL>(dx, dout, x, saved, weight, bias, total, n, nimg, c, hw,
                                      act);
}

extern "C" __global__ void bn_nhwc_wide_backward_dx_f32(float* dx, const float* dout,
                                                        const float* x, const float* saved,
                                                        const float* weight, const float* bias,
                                                        const double* total, float n, int nimg,
                                                        int c, int hw, int act) {
    bn_nhwc_backward_dx<Wide<float>::V, WIDE_UNROLL>(dx, dout, x, saved, weight, bias, total, n,
                                                     nimg, c, hw, act);
}

extern "C" __global__ void bn_nhwc_wide_backward_dx_bf16(bf16* dx, const bf16* dout,
                                                         const bf16* x, const float* saved,
                                                         const float* weight, const float* bias,
                                                         const double* total, float n, int nimg,
                                                         int c, int hw, int act) {
    bn_nhwc_backward_dx<Wide<bf16>::V, WIDE_UNROLL>(dx, dout, x, saved, weight, bias, total, n,
                                                    nimg, c, hw, act);
}
