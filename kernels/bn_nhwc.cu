// Batch norm over channels-last tensors (x[nimg * hw, C]: the GPU path's NHWC layout,
// src/backend/cuda/layout.rs), the twins of bn.cu's NCHW kernels: the same arguments, the same
// statistics, outputs and gradients (bn.cu's comments define them), for the same host code
// (src/backend/cuda/bn.rs picks the kernel and the launch by layout). C is even (the host
// checks): each thread takes two neighbouring channels, one 8-byte float pair or 4-byte bf16
// pair per load. A block is blockDim.x lanes x blockDim.y rows of threads (at most
// NHWC_THREADS; the host spreads the channel pairs evenly over blocks of at most 32 lanes, and
// where C < 64 a block's lanes are all its pairs and a warp reads whole rows): lane x takes
// channels ch = 2 * (blockIdx.x * blockDim.x + x) and ch + 1, row y the rows lo + y,
// lo + y + blockDim.y, ... of the block's part [lo, hi) of the nimg * hw rows (gridDim.y parts,
// fixed by the sizes alone). Per-channel sums in double without atomics: each thread its rows
// in order, then a channel's blockDim.y threads in order (`column_sum`), then the parts in a
// fixed tree (`bn_reduce_parts_f32`): the same bits at every launch.

#include "bn.cuh"

// The most threads a block has (its shared sums hold one double per thread).
#define NHWC_THREADS 256

// Two neighbouring values (ch, ch + 1) of a row: loaded as their fp32 values, stored rounded
// as `st` does. p is even: the pair is 8-byte (float) or 4-byte (bf16) aligned.
__device__ __forceinline__ void ld2(const float* p, float* v) {
    float2 t = *(const float2*)p;
    v[0] = t.x;
    v[1] = t.y;
}
__device__ __forceinline__ void ld2(const bf16* p, float* v) {
    unsigned int t = *(const unsigned int*)p;
    v[0] = bf16_value((bf16)(t & 0xffffu));
    v[1] = bf16_value((bf16)(t >> 16));
}
__device__ __forceinline__ void st2(float* p, float a, float b) { *(float2*)p = make_float2(a, b); }
__device__ __forceinline__ void st2(bf16* p, float a, float b) {
    *(unsigned int*)p = (unsigned int)bf16_bits(a) | ((unsigned int)bf16_bits(b) << 16);
}

// This thread's first channel (it has none where ch >= C: the last block's spare lanes).
__device__ __forceinline__ int pair_channel() {
    return 2 * (blockIdx.x * blockDim.x + threadIdx.x);
}

// Walks this thread's rows of the block's part of the nimg * hw rows: load(u, at) for up to
// BN_UNROLL rows at element offsets `at` (of channel ch) first, then use(u, at) for each, so
// that the loads are in flight together. (Offsets fit an int: the host checks B*C*HW.)
template <typename Load, typename Use>
__device__ __forceinline__ void walk_rows(int nimg, int c, int hw, int ch, Load load, Use use) {
    long long lo, hi;
    part_range((long long)nimg * hw, &lo, &hi);
    for (long long r = lo + threadIdx.y; r < hi; r += blockDim.y * BN_UNROLL) {
        int at[BN_UNROLL];
#pragma unroll
        for (int u = 0; u < BN_UNROLL; ++u) {
            long long ru = r + u * blockDim.y;
            at[u] = (int)(ru * c + ch);
            if (ru < hi) {
                load(u, at[u]);
            }
        }
#pragma unroll
        for (int u = 0; u < BN_UNROLL; ++u) {
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
// (j = 0, 1: channels ch, ch + 1).
__device__ void put_pair(double* partial, long long stride, int at, const double* v, bool mine,
                         double* sh) {
    for (int j = 0; j < 2; ++j) {
        double s = column_sum(v[j], sh);
        if (mine && threadIdx.y == 0) {
            partial[(long long)blockIdx.y * stride + at + j] = s;
        }
    }
}

// As bn_sums (bn.cu): partial[parts, C] = per-channel sums of x, or of (x - m)^2.
template <typename T>
__device__ void bn_nhwc_sums(double* partial, const T* x, const double* centre, int centred,
                             double n, int nimg, int c, int hw) {
    __shared__ double sh[NHWC_THREADS];
    int ch = pair_channel();
    bool mine = ch < c;
    double s[2] = {0.0, 0.0};
    if (mine) {
        float m[2];
        for (int j = 0; j < 2; ++j) {
            m[j] = (centred && n > 0.0) ? (float)(centre[ch + j] / n) : 0.0f;
        }
        float v[BN_UNROLL][2];
        walk_rows(
            nimg, c, hw, ch, [&](int u, int at) { ld2(x + at, v[u]); },
            [&](int u, int) {
                for (int j = 0; j < 2; ++j) {
                    float d = v[u][j] - m[j];
                    s[j] += centred ? (double)__fmul_rn(d, d) : (double)v[u][j];
                }
            });
    }
    put_pair(partial, c, ch, s, mine, sh);
}

extern "C" __global__ void bn_nhwc_sums_f32(double* partial, const float* x,
                                            const double* centre, int centred, double n,
                                            int nimg, int c, int hw) {
    bn_nhwc_sums(partial, x, centre, centred, n, nimg, c, hw);
}

extern "C" __global__ void bn_nhwc_sums_bf16(double* partial, const bf16* x,
                                             const double* centre, int centred, double n,
                                             int nimg, int c, int hw) {
    bn_nhwc_sums(partial, x, centre, centred, n, nimg, c, hw);
}

// As bn_moments: partial[parts, 2C] = per-channel sums of x, then of x^2, in double.
template <typename T>
__device__ void bn_nhwc_moments(double* partial, const T* x, int nimg, int c, int hw) {
    __shared__ double sh[NHWC_THREADS];
    int ch = pair_channel();
    bool mine = ch < c;
    double s1[2] = {0.0, 0.0};
    double s2[2] = {0.0, 0.0};
    if (mine) {
        float v[BN_UNROLL][2];
        walk_rows(
            nimg, c, hw, ch, [&](int u, int at) { ld2(x + at, v[u]); },
            [&](int u, int) {
                for (int j = 0; j < 2; ++j) {
                    double d = (double)v[u][j];
                    s1[j] += d;
                    s2[j] = fma(d, d, s2[j]);
                }
            });
    }
    put_pair(partial, 2LL * c, ch, s1, mine, sh);
    put_pair(partial, 2LL * c, c + ch, s2, mine, sh);
}

extern "C" __global__ void bn_nhwc_moments_f32(double* partial, const float* x, int nimg, int c,
                                               int hw) {
    bn_nhwc_moments(partial, x, nimg, c, hw);
}

extern "C" __global__ void bn_nhwc_moments_bf16(double* partial, const bf16* x, int nimg, int c,
                                                int hw) {
    bn_nhwc_moments(partial, x, nimg, c, hw);
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
        s = block_sum(s, sh);
        if (threadIdx.x == 0) {
            out[j] = s;
        }
    }
}

// out = activate(x * scale[j] + shift[j]) over this thread's rows of channels ch + j: what
// training (bn_nhwc_apply) and inference (bn_nhwc_eval) apply, each from its own statistics.
template <typename T>
__device__ __forceinline__ void affine_rows(T* out, const T* x, const float* scale,
                                            const float* shift, int nimg, int c, int hw, int ch,
                                            int act) {
    float v[BN_UNROLL][2];
    walk_rows(
        nimg, c, hw, ch, [&](int u, int at) { ld2(x + at, v[u]); },
        [&](int u, int at) {
            float a = activate(__fadd_rn(__fmul_rn(v[u][0], scale[0]), shift[0]), act);
            float b = activate(__fadd_rn(__fmul_rn(v[u][1], scale[1]), shift[1]), act);
            st2(out + at, a, b);
        });
}

// As bn_apply: out = activate(x * scale + shift) per channel, from saved[2C] = mean, invstd.
template <typename T>
__device__ void bn_nhwc_apply(T* out, const T* x, const float* saved, const float* weight,
                              const float* bias, int nimg, int c, int hw, int act) {
    int ch = pair_channel();
    if (ch >= c) {
        return;
    }
    float scale[2], shift[2];
    for (int j = 0; j < 2; ++j) {
        scale_shift(saved, weight, bias, c, ch + j, &scale[j], &shift[j]);
    }
    affine_rows(out, x, scale, shift, nimg, c, hw, ch, act);
}

extern "C" __global__ void bn_nhwc_apply_f32(float* out, const float* x, const float* saved,
                                             const float* weight, const float* bias, int nimg,
                                             int c, int hw, int act) {
    bn_nhwc_apply(out, x, saved, weight, bias, nimg, c, hw, act);
}

extern "C" __global__ void bn_nhwc_apply_bf16(bf16* out, const bf16* x, const float* saved,
                                              const float* weight, const float* bias, int nimg,
                                              int c, int hw, int act) {
    bn_nhwc_apply(out, x, saved, weight, bias, nimg, c, hw, act);
}

// As bn_eval: inference from the running statistics.
template <typename T>
__device__ void bn_nhwc_eval(T* out, const T* x, const float* running, const float* weight,
                             const float* bias, int nimg, int c, int hw, float eps, int act) {
    int ch = pair_channel();
    if (ch >= c) {
        return;
    }
    float scale[2], shift[2];
    for (int j = 0; j < 2; ++j) {
        scale[j] = weight[ch + j] / sqrtf(running[c + ch + j] + eps);
        shift[j] = __fadd_rn(bias[ch + j], -__fmul_rn(running[ch + j], scale[j]));
    }
    affine_rows(out, x, scale, shift, nimg, c, hw, ch, act);
}

extern "C" __global__ void bn_nhwc_eval_f32(float* out, const float* x, const float* running,
                                            const float* weight, const float* bias, int nimg,
                                            int c, int hw, float eps, int act) {
    bn_nhwc_eval(out, x, running, weight, bias, nimg, c, hw, eps, act);
}

extern "C" __global__ void bn_nhwc_eval_bf16(bf16* out, const bf16* x, const float* running,
                                             const float* weight, const float* bias, int nimg,
                                             int c, int hw, float eps, int act) {
    bn_nhwc_eval(out, x, running, weight, bias, nimg, c, hw, eps, act);
}

// As bn_grad_sums: partial[parts, 2C] = per-channel sums of the gradient at the normalised
// output (`masked`), then of it times (x - mean).
template <typename T>
__device__ void bn_nhwc_grad_sums(double* partial, const T* dout, const T* x, const float* saved,
                                  const float* weight, const float* bias, int nimg, int c,
                                  int hw, int act) {
    __shared__ double sh[NHWC_THREADS];
    int ch = pair_channel();
    bool mine = ch < c;
    double sdy[2] = {0.0, 0.0};
    double sdyx[2] = {0.0, 0.0};
    if (mine) {
        float mean[2], scale[2], shift[2];
        for (int j = 0; j < 2; ++j) {
            mean[j] = saved[ch + j];
            scale_shift(saved, weight, bias, c, ch + j, &scale[j], &shift[j]);
        }
        float d[BN_UNROLL][2], xv[BN_UNROLL][2];
        walk_rows(
            nimg, c, hw, ch,
            [&](int u, int at) {
                ld2(dout + at, d[u]);
                ld2(x + at, xv[u]);
            },
            [&](int u, int) {
                for (int j = 0; j < 2; ++j) {
                    float dy = masked(d[u][j], xv[u][j], scale[j], shift[j], act, x);
                    sdy[j] += (double)dy;
                    sdyx[j] += (double)__fmul_rn(dy, xv[u][j] - mean[j]);
                }
            });
    }
    put_pair(partial, 2LL * c, ch, sdy, mine, sh);
    put_pair(partial, 2LL * c, c + ch, sdyx, mine, sh);
}

extern "C" __global__ void bn_nhwc_grad_sums_f32(double* partial, const float* dout,
                                                 const float* x, const float* saved,
                                                 const float* weight, const float* bias,
                                                 int nimg, int c, int hw, int act) {
    bn_nhwc_grad_sums(partial, dout, x, saved, weight, bias, nimg, c, hw, act);
}

extern "C" __global__ void bn_nhwc_grad_sums_bf16(double* partial, const bf16* dout,
                                                  const bf16* x, const float* saved,
                                                  const float* weight, const float* bias,
                                                  int nimg, int c, int hw, int act) {
    bn_nhwc_grad_sums(partial, dout, x, saved, weight, bias, nimg, c, hw, act);
}

// As bn_backward_dx: dx (overwritten) = k * (n * dy - sdy - xhat * sdyxhat) per channel.
template <typename T>
__device__ void bn_nhwc_backward_dx(T* dx, const T* dout, const T* x, const float* saved,
                                    const float* weight, const float* bias, const double* total,
                                    float n, int nimg, int c, int hw, int act) {
    int ch = pair_channel();
    if (ch >= c) {
        return;
    }
    float mean[2], invstd[2], sdy[2], sdyxhat[2], k[2], scale[2], shift[2];
    for (int j = 0; j < 2; ++j) {
        mean[j] = saved[ch + j];
        invstd[j] = saved[c + ch + j];
        sdy[j] = (float)total[ch + j];
        sdyxhat[j] = (float)(total[c + ch + j] * (double)invstd[j]);
        k[j] = weight[ch + j] * invstd[j] / n;
        scale_shift(saved, weight, bias, c, ch + j, &scale[j], &shift[j]);
    }
    float d[BN_UNROLL][2], xv[BN_UNROLL][2];
    walk_rows(
        nimg, c, hw, ch,
        [&](int u, int at) {
            ld2(dout + at, d[u]);
            ld2(x + at, xv[u]);
        },
        [&](int u, int at) {
            float g[2];
            for (int j = 0; j < 2; ++j) {
                float xhat = (xv[u][j] - mean[j]) * invstd[j];
                float dy = masked(d[u][j], xv[u][j], scale[j], shift[j], act, x);
                g[j] = k[j] * (n * dy - sdy[j] - xhat * sdyxhat[j]);
            }
            st2(dx + at, g[0], g[1]);
        });
}

extern "C" __global__ void bn_nhwc_backward_dx_f32(float* dx, const float* dout, const float* x,
                                                   const float* saved, const float* weight,
                                                   const float* bias, const double* total,
                                                   float n, int nimg, int c, int hw, int act) {
    bn_nhwc_backward_dx(dx, dout, x, saved, weight, bias, total, n, nimg, c, hw, act);
}

extern "C" __global__ void bn_nhwc_backward_dx_bf16(bf16* dx, const bf16* dout, const bf16* x,
                                                    const float* saved, const float* weight,
                                                    const float* bias, const double* total,
                                                    float n, int nimg, int c, int hw, int act) {
    bn_nhwc_backward_dx(dx, dout, x, saved, weight, bias, total, n, nimg, c, hw, act);
}
