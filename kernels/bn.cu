// Batch norm over NCHW tensors (a flat [B, C] input is C channels of one position), PyTorch's
// definition: biased variance to normalise, unbiased for the running variance. Mirrors nn::bn
// (channel_sums, bn_forward_train, bn_forward_eval, bn_grad_sums, bn_backward). Every kernel
// runs one block per (channel, part): a channel's B*HW values are cut into gridDim.y parts
// (fixed by the sizes alone, on the host; blockDim.x must be BN_BLOCK), and a block's threads
// walk its part (`walk_part`), each having worked out the channel's constants once.
// Per-channel sums are taken in double without atomics: each thread its fixed strided share in
// order, then a tree in shared memory, and bn_reduce_f32 adds the parts in order: the same bits
// at every launch. The sums stay raw (not divided) so that sync batch norm can add them across
// replicas on the host between the launches. Each kernel is one template body over V, the values
// a thread loads at once: `bn_{op}_{f32,bf16}` one, `bn_wide_{op}_{f32,bf16}` a 16-byte vector
// of a plane's neighbours (`Wide`: HW a multiple of it and the tensors aligned, the host checks),
// the same results with a quarter (fp32) or an eighth (bf16) of the loads.

#include "bn.cuh"

// Where channel ch's k-th value lies in x[nimg, C, hw] (`at`), moved BN_BLOCK values on with
// additions only (no 64-bit multiplications or divisions per value).
struct Walk {
    long long at, jump, wrap;
    int p, hw, sp;
    __device__ Walk(long long k, int hw_, int c, long long ch) : hw(hw_), sp(BN_BLOCK % hw_) {
        long long i = k / hw_;
        p = (int)(k % hw_);
        at = (i * c + ch) * hw_ + p;
        jump = (long long)(BN_BLOCK / hw_) * c * hw_ + sp;
        wrap = (long long)(c - 1) * hw_;
    }
    __device__ void next() {
        at += jump;
        p += sp;
        if (p >= hw) {
            p -= hw;
            at += wrap;
        }
    }
};

// Every kernel here runs one block per (channel, part) (`parts_cfg` on the host): the block's
// threads walk their part of channel ch's nimg*hw values in runs of V (V divides hw), thread t
// the runs t, t + BN_BLOCK, ... of it, in order. load(u, at) is called for up to BN_UNROLL runs
// at element offsets `at` of x[nimg, C, hw] first, then use(u, at) for each, so that the loads
// are in flight together. (Offsets fit an int: the host checks that B*C*HW does.) What depends
// on the channel alone, a kernel works out once per thread before it walks.
template <int V, typename Load, typename Use>
__device__ __forceinline__ void walk_part(int nimg, int c, int hw, long long ch, Load load,
                                          Use use) {
    int runs = hw / V;
    long long lo, hi;
    part_range((long long)nimg * runs, &lo, &hi);
    long long k = lo + threadIdx.x;
    Walk w(k, runs, c, ch);
    for (; k < hi; k += BN_UNROLL * BN_BLOCK) {
        int at[BN_UNROLL];
#pragma unroll
        for (int u = 0; u < BN_UNROLL; ++u, w.next()) {
            at[u] = (int)(w.at * V);
            if (k + u * BN_BLOCK < hi) {
                load(u, at[u]);
            }
        }
#pragma unroll
        for (int u = 0; u < BN_UNROLL; ++u) {
            if (k + u * BN_BLOCK < hi) {
                use(u, at[u]);
            }
        }
    }
}

// The channels of a (channel, part) launch this block takes: blockIdx.x, then on by gridDim.x.
#define CHANNELS(ch, c) for (long long ch = blockIdx.x; ch < (c); ch += gridDim.x)

// partial[parts, C] = per-channel sums of each part of x[nimg, C, hw] (centred 0), or of
// (x - m)^2 with m = (float)(centre[ch] / n) the channel's mean (centred 1; m = 0 where n is 0),
// each square rounded to float as the CPU does (nn::bn::channel_sums).
template <int V, typename T>
__device__ void bn_sums(double* partial, const T* x, const double* centre, int centred,
                        double n, int nimg, int c, int hw) {
    __shared__ double part[BN_BLOCK];
    CHANNELS(ch, c) {
        float m = (centred && n > 0.0) ? (float)(centre[ch] / n) : 0.0f;
        double s = 0.0;
        typename Row<V, T>::Raw r[BN_UNROLL];
        walk_part<V>(
            nimg, c, hw, ch, [&](int u, int at) { r[u] = Row<V, T>::load(x + at); },
            [&](int u, int) {
                float v[V];
                Row<V, T>::get(r[u], v);
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    s += centred ? (double)__fmul_rn(v[j] - m, v[j] - m) : (double)v[j];
                }
            });
        s = block_sum<BN_BLOCK>(s, part);
        if (threadIdx.x == 0) {
            partial[(long long)blockIdx.y * c + ch] = s;
        }
    }
}

extern "C" __global__ void bn_sums_f32(double* partial, const float* x, const double* centre,
                                       int centred, double n, int nimg, int c, int hw) {
    bn_sums<1>(partial, x, centre, centred, n, nimg, c, hw);
}

extern "C" __global__ void bn_wide_sums_f32(double* partial, const float* x, const double* centre,
                                            int centred, double n, int nimg, int c, int hw) {
    bn_sums<Wide<float>::V>(partial, x, centre, centred, n, nimg, c, hw);
}

extern "C" __global__ void bn_sums_bf16(double* partial, const bf16* x, const double* centre,
                                        int centred, double n, int nimg, int c, int hw) {
    bn_sums<1>(partial, x, centre, centred, n, nimg, c, hw);
}

extern "C" __global__ void bn_wide_sums_bf16(double* partial, const bf16* x, const double* centre,
                                             int centred, double n, int nimg, int c, int hw) {
    bn_sums<Wide<bf16>::V>(partial, x, centre, centred, n, nimg, c, hw);
}

// partial[parts, 2C] = per-channel sums of each part of x[nimg, C, hw], then of x^2, in double
// (x^2 is exact in double): the statistics in one pass, where no replica shares them (sync
// batch norm takes them in two, `bn_sums`, as the CPU does, since its exchange is in f32).
template <int V, typename T>
__device__ void bn_moments(double* partial, const T* x, int nimg, int c, int hw) {
    __shared__ double part[BN_BLOCK];
    CHANNELS(ch, c) {
        double s1 = 0.0;
        double s2 = 0.0;
        typename Row<V, T>::Raw r[BN_UNROLL];
        walk_part<V>(
            nimg, c, hw, ch, [&](int u, int at) { r[u] = Row<V, T>::load(x + at); },
            [&](int u, int) {
                float v[V];
                Row<V, T>::get(r[u], v);
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    double d = (double)v[j];
                    s1 += d;
                    s2 = fma(d, d, s2);
                }
            });
        s1 = block_sum<BN_BLOCK>(s1, part);
        s2 = block_sum<BN_BLOCK>(s2, part);
        if (threadIdx.x == 0) {
            partial[(long long)blockIdx.y * 2 * c + ch] = s1;
            partial[(long long)blockIdx.y * 2 * c + c + ch] = s2;
        }
    }
}

extern "C" __global__ void bn_moments_f32(double* partial, const float* x, int nimg, int c,
                                          int hw) {
    bn_moments<1>(partial, x, nimg, c, hw);
}

extern "C" __global__ void bn_wide_moments_f32(double* partial, const float* x, int nimg, int c,
                                               int hw) {
    bn_moments<Wide<float>::V>(partial, x, nimg, c, hw);
}

extern "C" __global__ void bn_moments_bf16(double* partial, const bf16* x, int nimg, int c,
                                           int hw) {
    bn_moments<1>(partial, x, nimg, c, hw);
}

extern "C" __global__ void bn_wide_moments_bf16(double* partial, const bf16* x, int nimg, int c,
                                                int hw) {
    bn_moments<Wide<bf16>::V>(partial, x, nimg, c, hw);
}

// out[len] = the sum over parts of partial[parts, len], in part order.
extern "C" __global__ void bn_reduce_f32(double* out, const double* partial, int parts, int len) {
    GRID_STRIDE(j, len) {
        double s = 0.0;
        for (int q = 0; q < parts; ++q) {
            s += partial[(long long)q * len + j];
        }
        out[j] = s;
    }
}

// From sums[2C] over n values per channel, the sums of x and then of the squared deviations
// (moments 0), or of x and then of x^2 (moments 1): saved[2C] = mean, 1/sqrt(var + eps);
// running[2C] (mean, unbiased variance) moved toward the batch's by `momentum`, in float as
// nn::bn::bn_forward_train. One thread per channel.
extern "C" __global__ void bn_finish_f32(float* saved, float* running, const double* sums,
                                         int moments, double n, int c, float eps,
                                         float momentum) {
    GRID_STRIDE(ch, c) {
        double mean = n > 0.0 ? sums[ch] / n : 0.0;
        double var = n > 0.0 ? sums[c + ch] / n : 0.0;
        if (moments) {
            var = fmax(var - mean * mean, 0.0);
        }
        double invstd = 1.0 / sqrt(var + (double)eps);
        saved[ch] = (float)mean;
        saved[c + ch] = (float)invstd;
        double unbiased = n > 1.0 ? var * n / (n - 1.0) : var;
        float keep = 1.0f - momentum;
        running[ch] = __fadd_rn(__fmul_rn(keep, running[ch]), __fmul_rn(momentum, (float)mean));
        running[c + ch] =
            __fadd_rn(__fmul_rn(keep, running[c + ch]), __fmul_rn(momentum, (float)unbiased));
    }
}

// Training on the running statistics (--bn-stats): saved[2C] = running mean,
// 1/sqrt(running var + eps), as nn::bn::bn_forward_fixed; running is left as it is. One thread
// per channel.
extern "C" __global__ void bn_fixed_saved_f32(float* saved, const float* running, int c,
                                              float eps) {
    GRID_STRIDE(ch, c) {
        saved[ch] = running[ch];
        saved[c + ch] = (float)(1.0 / sqrt((double)running[c + ch] + (double)eps));
    }
}

// out[nimg, C, hw] = activate(x * scale + shift) per channel, scale = invstd * weight,
// shift = bias - mean * scale, from saved[2C] = mean, invstd (training). Per (channel, part).
// out = activate(x * scale + shift) over this thread's runs of channel ch: what training
// (bn_apply) and inference (bn_eval) apply, each from its own statistics.
template <int V, typename T>
__device__ __forceinline__ void affine_part(T* out, const T* x, float scale, float shift,
                                            int nimg, int c, int hw, long long ch, int act) {
    typename Row<V, T>::Raw r[BN_UNROLL];
    walk_part<V>(
        nimg, c, hw, ch, [&](int u, int at) { r[u] = Row<V, T>::load(x + at); },
        [&](int u, int at) {
            float v[V];
            Row<V, T>::get(r[u], v);
#pragma unroll
            for (int j = 0; j < V; ++j) {
                v[j] = activate(__fadd_rn(__fmul_rn(v[j], scale), shift), act);
            }
            Row<V, T>::st(out + at, v);
        });
}

template <int V, typename T>
__device__ void bn_apply(T* out, const T* x, const float* saved, const float* weight,
                         const float* bias, int nimg, int c, int hw, int act) {
    CHANNELS(ch, c) {
        float scale, shift;
        scale_shift(saved, weight, bias, c, (int)ch, &scale, &shift);
        affine_part<V>(out, x, scale, shift, nimg, c, hw, ch, act);
    }
}

extern "C" __global__ void bn_apply_f32(float* out, const float* x, const float* saved,
                                        const float* weight, const float* bias, int nimg, int c,
                                        int hw, int act) {
    bn_apply<1>(out, x, saved, weight, bias, nimg, c, hw, act);
}

extern "C" __global__ void bn_wide_apply_f32(float* out, const float* x, const float* saved,
                                             const float* weight, const float* bias, int nimg,
                                             int c, int hw, int act) {
    bn_apply<Wide<float>::V>(out, x, saved, weight, bias, nimg, c, hw, act);
}

extern "C" __global__ void bn_apply_bf16(bf16* out, const bf16* x, const float* saved,
                                         const float* weight, const float* bias, int nimg, int c,
                                         int hw, int act) {
    bn_apply<1>(out, x, saved, weight, bias, nimg, c, hw, act);
}

extern "C" __global__ void bn_wide_apply_bf16(bf16* out, const bf16* x, const float* saved,
                                              const float* weight, const float* bias, int nimg,
                                              int c, int hw, int act) {
    bn_apply<Wide<bf16>::V>(out, x, saved, weight, bias, nimg, c, hw, act);
}

// Inference (nn::bn::bn_forward_eval): out = activate(x * scale + shift) per channel with
// scale = weight / sqrt(running var + eps), shift = bias - running mean * scale. Per
// (channel, part).
template <int V, typename T>
__device__ void bn_eval(T* out, const T* x, const float* running, const float* weight,
                        const float* bias, int nimg, int c, int hw, float eps, int act) {
    CHANNELS(ch, c) {
        float scale = weight[ch] / sqrtf(running[c + ch] + eps);
        float shift = __fadd_rn(bias[ch], -__fmul_rn(running[ch], scale));
        affine_part<V>(out, x, scale, shift, nimg, c, hw, ch, act);
    }
}

extern "C" __global__ void bn_eval_f32(float* out, const float* x, const float* running,
                                       const float* weight, const float* bias, int nimg, int c,
                                       int hw, float eps, int act) {
    bn_eval<1>(out, x, running, weight, bias, nimg, c, hw, eps, act);
}

extern "C" __global__ void bn_wide_eval_f32(float* out, const float* x, const float* running,
                                            const float* weight, const float* bias, int nimg,
                                            int c, int hw, float eps, int act) {
    bn_eval<Wide<float>::V>(out, x, running, weight, bias, nimg, c, hw, eps, act);
}

extern "C" __global__ void bn_eval_bf16(bf16* out, const bf16* x, const float* running,
                                        const float* weight, const float* bias, int nimg, int c,
                                        int hw, float eps, int act) {
    bn_eval<1>(out, x, running, weight, bias, nimg, c, hw, eps, act);
}

extern "C" __global__ void bn_wide_eval_bf16(bf16* out, const bf16* x, const float* running,
                                             const float* weight, const float* bias, int nimg,
                                             int c, int hw, float eps, int act) {
    bn_eval<Wide<bf16>::V>(out, x, running, weight, bias, nimg, c, hw, eps, act);
}

// partial[parts, 2C] = per-channel sums of each part of the gradient at the normalised output
// (`masked` by the activation), then of it times (x - mean) (each product rounded to float),
// in double (nn::bn::bn_grad_sums); mean from saved[2C].
template <int V, typename T>
__device__ void bn_grad_sums(double* partial, const T* dout, const T* x, const float* saved,
                             const float* weight, const float* bias, int nimg, int c, int hw,
                             int act) {
    __shared__ double part[BN_BLOCK];
    CHANNELS(ch, c) {
        float mean = saved[ch];
        float scale, shift;
        scale_shift(saved, weight, bias, c, (int)ch, &scale, &shift);
        double sdy = 0.0;
        double sdyx = 0.0;
        typename Row<V, T>::Raw rd[BN_UNROLL], rx[BN_UNROLL];
        walk_part<V>(
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
                    float dy = masked(d[j], xv[j], scale, shift, act, x);
                    sdy += (double)dy;
                    sdyx += (double)__fmul_rn(dy, xv[j] - mean);
                }
            });
        sdy = block_sum<BN_BLOCK>(sdy, part);
        sdyx = block_sum<BN_BLOCK>(sdyx, part);
        if (threadIdx.x == 0) {
            partial[(long long)blockIdx.y * 2 * c + ch] = sdy;
            partial[(long long)blockIdx.y * 2 * c + c + ch] = sdyx;
        }
    }
}

extern "C" __global__ void bn_grad_sums_f32(double* partial, const float* dout, const float* x,
                                            const float* saved, const float* weight,
                                            const float* bias, int nimg, int c, int hw, int act) {
    bn_grad_sums<1>(partial, dout, x, saved, weight, bias, nimg, c, hw, act);
}

extern "C" __global__ void bn_wide_grad_sums_f32(double* partial, const float* dout,
                                                 const float* x, const float* saved,
                                                 const float* weight, const float* bias, int nimg,
                                                 int c, int hw, int act) {
    bn_grad_sums<Wide<float>::V>(partial, dout, x, saved, weight, bias, nimg, c, hw, act);
}

extern "C" __global__ void bn_grad_sums_bf16(double* partial, const bf16* dout, const bf16* x,
                                             const float* saved, const float* weight,
                                             const float* bias, int nimg, int c, int hw,
                                             int act) {
    bn_grad_sums<1>(partial, dout, x, saved, weight, bias, nimg, c, hw, act);
}

extern "C" __global__ void bn_wide_grad_sums_bf16(double* partial, const bf16* dout, const bf16* x,
                                                  const float* saved, const float* weight,
                                                  const float* bias, int nimg, int c, int hw,
                                                  int act) {
    bn_grad_sums<Wide<bf16>::V>(partial, dout, x, saved, weight, bias, nimg, c, hw, act);
}

// dweight[C] += sum(dout * xhat) = local[C + ch] * invstd, dbias[C] += sum(dout) = local[ch],
// from this replica's own sums (nn::bn::bn_backward). One thread per channel.
extern "C" __global__ void bn_param_grads_f32(float* dweight, float* dbias, const double* local,
                                              const float* saved, int c) {
    GRID_STRIDE(ch, c) {
        dweight[ch] += (float)(local[c + ch] * (double)saved[c + ch]);
        dbias[ch] += (float)local[ch];
    }
}

// dx[nimg, C, hw] (overwritten) = k * (n * dy - sdy - xhat * sdyxhat), k = weight * invstd / n,
// dy the gradient at the normalised output (`masked` by the activation), from the sums
// `total`[2C] over the n values per channel the statistics were taken over (this replica's,
// or every replica's under sync batch norm) (nn::bn::bn_backward). Per (channel, part).
template <int V, typename T>
__device__ void bn_backward_dx(T* dx, const T* dout, const T* x, const float* saved,
                               const float* weight, const float* bias, const double* total,
                               float n, int nimg, int c, int hw, int act) {
    CHANNELS(ch, c) {
        float mean = saved[ch];
        float invstd = saved[c + ch];
        float sdy = (float)total[ch];
        float sdyxhat = (float)(total[c + ch] * (double)invstd);
        float k = weight[ch] * invstd / n;
        float scale, shift;
        scale_shift(saved, weight, bias, c, (int)ch, &scale, &shift);
        typename Row<V, T>::Raw rd[BN_UNROLL], rx[BN_UNROLL];
        walk_part<V>(
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
                    float xhat = (xv[j] - mean) * invstd;
                    float dy = masked(d[j], xv[j], scale, shift, act, x);
                    g[j] = k * (n * dy - sdy - xhat * sdyxhat);
                }
                Row<V, T>::st(dx + at, g);
            });
    }
}

extern "C" __global__ void bn_backward_dx_f32(float* dx, const float* dout, const float* x,
                                              const float* saved, const float* weight,
                                              const float* bias, const double* total, float n,
                                              int nimg, int c, int hw, int act) {
    bn_backward_dx<1>(dx, dout, x, saved, weight, bias, total, n, nimg, c, hw, act);
}

extern "C" __global__ void bn_wide_backward_dx_f32(float* dx, const float* dout, const float* x,
                                                   const float* saved, const float* weight,
                                                   const float* bias, const double* total, float n,
                                                   int nimg, int c, int hw, int act) {
    bn_backward_dx<Wide<float>::V>(dx, dout, x, saved, weight, bias, total, n, nimg, c, hw, act);
}

extern "C" __global__ void bn_backward_dx_bf16(bf16* dx, const bf16* dout, const bf16* x,
                                               const float* saved, const float* weight,
                                               const float* bias, const double* total, float n,
                                               int nimg, int c, int hw, int act) {
    bn_backward_dx<1>(dx, dout, x, saved, weight, bias, total, n, nimg, c, hw, act);
}

extern "C" __global__ void bn_wide_backward_dx_bf16(bf16* dx, const bf16* dout, const bf16* x,
                                                    const float* saved, const float* weight,
                                                    const float* bias, const double* total,
                                                    float n, int nimg, int c, int hw, int act) {
    bn_backward_dx<Wide<bf16>::V>(dx, dout, x, saved, weight, bias, total, n, nimg, c, hw, act);
}
