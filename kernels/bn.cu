// Batch norm over NCHW tensors (a flat [B, C] input is C channels of one position), PyTorch's
// definition: biased variance to normalise, unbiased for the running variance. Mirrors nn::bn
// (channel_sums, bn_forward_train, bn_forward_eval, bn_grad_sums, bn_backward). Per-channel
// sums are taken in double without atomics: a channel's B*HW values are cut into gridDim.y
// parts (fixed by the sizes alone, on the host), one block per (channel, part) (blockDim.x must
// be BN_BLOCK) sums its part, each thread a fixed strided share in order and then a tree in
// shared memory, and bn_reduce_f32 adds the parts in order: the same bits at every launch. The
// sums stay raw (not divided) so that sync batch norm can add them across replicas on the
// host between the launches.

#define BN_BLOCK 256

// Where channel ch's k-th value lies in x[nimg, C, hw] (`at`), moved BN_BLOCK values on with
// additions only (no 64-bit multiplications or divisions per value).
struct Walk {
    long long at, p, hw, jump, wrap, sp;
    __device__ Walk(long long k, long long hw_, long long c, long long ch)
        : hw(hw_), sp(BN_BLOCK % hw_) {
        long long i = k / hw_;
        p = k % hw_;
        at = (i * c + ch) * hw_ + p;
        jump = (BN_BLOCK / hw_) * c * hw_ + sp;
        wrap = (c - 1) * hw_;
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

// Values a thread loads before it adds them (in order: the sums' bits do not change), so that
// several loads are in flight at once.
#define BN_UNROLL 4

// This block's part [lo, hi) of a channel's values.
__device__ void part_range(long long per_channel, long long* lo, long long* hi) {
    long long chunk = (per_channel + gridDim.y - 1) / gridDim.y;
    *lo = min((long long)blockIdx.y * chunk, per_channel);
    *hi = min(*lo + chunk, per_channel);
}

// The sum of v over the block, in a fixed order (every thread gets it).
__device__ double block_sum(double v, double* part) {
    part[threadIdx.x] = v;
    __syncthreads();
    for (unsigned int half = BN_BLOCK / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            part[threadIdx.x] += part[threadIdx.x + half];
        }
        __syncthreads();
    }
    double s = part[0];
    __syncthreads();  // part[] is refilled next
    return s;
}

// partial[parts, C] = per-channel sums of each part of x[nimg, C, hw] (centred 0), or of
// (x - m)^2 with m = (float)(centre[ch] / n) the channel's mean (centred 1; m = 0 where n is 0),
// each square rounded to float as the CPU does (nn::bn::channel_sums).
template <typename T>
__device__ void bn_sums(double* partial, const T* x, const double* centre, int centred,
                        double n, int nimg, int c, int hw) {
    __shared__ double part[BN_BLOCK];
    long long lo, hi;
    part_range((long long)nimg * hw, &lo, &hi);
    for (long long ch = blockIdx.x; ch < c; ch += gridDim.x) {
        float m = (centred && n > 0.0) ? (float)(centre[ch] / n) : 0.0f;
        double s = 0.0;
        Walk w(lo + threadIdx.x, hw, c, ch);
        long long k = lo + threadIdx.x;
        for (; k + (BN_UNROLL - 1) * BN_BLOCK < hi; k += BN_UNROLL * BN_BLOCK) {
            float v[BN_UNROLL];
#pragma unroll
            for (int u = 0; u < BN_UNROLL; ++u, w.next()) {
                v[u] = ld(x + w.at);
            }
#pragma unroll
            for (int u = 0; u < BN_UNROLL; ++u) {
                s += centred ? (double)__fmul_rn(v[u] - m, v[u] - m) : (double)v[u];
            }
        }
        for (; k < hi; k += BN_BLOCK, w.next()) {
            float v = ld(x + w.at);
            s += centred ? (double)__fmul_rn(v - m, v - m) : (double)v;
        }
        s = block_sum(s, part);
        if (threadIdx.x == 0) {
            partial[(long long)blockIdx.y * c + ch] = s;
        }
    }
}

extern "C" __global__ void bn_sums_f32(double* partial, const float* x, const double* centre,
                                       int centred, double n, int nimg, int c, int hw) {
    bn_sums(partial, x, centre, centred, n, nimg, c, hw);
}

extern "C" __global__ void bn_sums_bf16(double* partial, const bf16* x, const double* centre,
                                        int centred, double n, int nimg, int c, int hw) {
    bn_sums(partial, x, centre, centred, n, nimg, c, hw);
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

// From sums[2C] (the sums of x, then of the squared deviations) over n values per channel:
// saved[2C] = mean, 1/sqrt(var + eps); running[2C] (mean, unbiased variance) moved toward the
// batch's by `momentum`, in float as nn::bn::bn_forward_train. One thread per channel.
extern "C" __global__ void bn_finish_f32(float* saved, float* running, const double* sums,
                                         double n, int c, float eps, float momentum) {
    GRID_STRIDE(ch, c) {
        double mean = n > 0.0 ? sums[ch] / n : 0.0;
        double var = n > 0.0 ? sums[c + ch] / n : 0.0;
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

// Channel ch's scale = invstd * weight and shift = bias - mean * scale, from saved[2C] =
// mean, invstd: what training's forward applies (and backward recomputes the output with).
__device__ __forceinline__ void scale_shift(const float* saved, const float* weight,
                                            const float* bias, int c, int ch, float* scale,
                                            float* shift) {
    *scale = __fmul_rn(saved[c + ch], weight[ch]);
    *shift = __fadd_rn(bias[ch], -__fmul_rn(saved[ch], *scale));
}

// out[nimg, C, hw] = activate(x * scale + shift) per channel, scale = invstd * weight,
// shift = bias - mean * scale, from saved[2C] = mean, invstd (training). Launched over planes
// (PLANES, IN_PLANE).
template <typename T>
__device__ void bn_apply(T* out, const T* x, const float* saved, const float* weight,
                         const float* bias, int nimg, int c, int hw, int act) {
    PLANES(plane, (long long)nimg * c) {
        int ch = (int)(plane % c);
        float scale, shift;
        scale_shift(saved, weight, bias, c, ch, &scale, &shift);
        const T* xp = x + plane * hw;
        T* op = out + plane * hw;
        IN_PLANE(j, hw) {
            st(op + j, activate(__fadd_rn(__fmul_rn(ld(xp + j), scale), shift), act));
        }
    }
}

extern "C" __global__ void bn_apply_f32(float* out, const float* x, const float* saved,
                                        const float* weight, const float* bias, int nimg, int c,
                                        int hw, int act) {
    bn_apply(out, x, saved, weight, bias, nimg, c, hw, act);
}

extern "C" __global__ void bn_apply_bf16(bf16* out, const bf16* x, const float* saved,
                                         const float* weight, const float* bias, int nimg, int c,
                                         int hw, int act) {
    bn_apply(out, x, saved, weight, bias, nimg, c, hw, act);
}

// Inference (nn::bn::bn_forward_eval): out = activate(x * scale + shift) per channel with
// scale = weight / sqrt(running var + eps), shift = bias - running mean * scale. Over planes.
template <typename T>
__device__ void bn_eval(T* out, const T* x, const float* running, const float* weight,
                        const float* bias, int nimg, int c, int hw, float eps, int act) {
    PLANES(plane, (long long)nimg * c) {
        int ch = (int)(plane % c);
        float scale = weight[ch] / sqrtf(running[c + ch] + eps);
        float shift = __fadd_rn(bias[ch], -__fmul_rn(running[ch], scale));
        const T* xp = x + plane * hw;
        T* op = out + plane * hw;
        IN_PLANE(j, hw) {
            st(op + j, activate(__fadd_rn(__fmul_rn(ld(xp + j), scale), shift), act));
        }
    }
}

extern "C" __global__ void bn_eval_f32(float* out, const float* x, const float* running,
                                       const float* weight, const float* bias, int nimg, int c,
                                       int hw, float eps, int act) {
    bn_eval(out, x, running, weight, bias, nimg, c, hw, eps, act);
}

extern "C" __global__ void bn_eval_bf16(bf16* out, const bf16* x, const float* running,
                                        const float* weight, const float* bias, int nimg, int c,
                                        int hw, float eps, int act) {
    bn_eval(out, x, running, weight, bias, nimg, c, hw, eps, act);
}

// The gradient at batch norm's own output, before its activation `act`: dout where the
// activation passed it (`passes`), 0 where not, the output recomputed from x with the
// channel's scale and shift exactly as bn_apply computed and stored it (so the mask is the
// one relu_backward / relu6_backward would take from the stored output, without reading it).
template <typename T>
__device__ __forceinline__ float masked(const T* dout, const T* x, long long at, float scale,
                                        float shift, int act) {
    float d = ld(dout + at);
    if (act != 0) {
        float v = __fadd_rn(__fmul_rn(ld(x + at), scale), shift);
        if (!passes(stored(activate(v, act), dout), act)) {
            d = 0.0f;
        }
    }
    return d;
}

// partial[parts, 2C] = per-channel sums of each part of the gradient at the normalised output
// (`masked` by the activation), then of it times (x - mean) (each product rounded to float),
// in double (nn::bn::bn_grad_sums); mean from saved[2C].
template <typename T>
__device__ void bn_grad_sums(double* partial, const T* dout, const T* x, const float* saved,
                             const float* weight, const float* bias, int nimg, int c, int hw,
                             int act) {
    __shared__ double part[BN_BLOCK];
    long long lo, hi;
    part_range((long long)nimg * hw, &lo, &hi);
    for (long long ch = blockIdx.x; ch < c; ch += gridDim.x) {
        float mean = saved[ch];
        float scale, shift;
        scale_shift(saved, weight, bias, c, (int)ch, &scale, &shift);
        double sdy = 0.0;
        double sdyx = 0.0;
        Walk w(lo + threadIdx.x, hw, c, ch);
        long long k = lo + threadIdx.x;
        for (; k + (BN_UNROLL - 1) * BN_BLOCK < hi; k += BN_UNROLL * BN_BLOCK) {
            float d[BN_UNROLL], xv[BN_UNROLL];
#pragma unroll
            for (int u = 0; u < BN_UNROLL; ++u, w.next()) {
                d[u] = masked(dout, x, w.at, scale, shift, act);
                xv[u] = ld(x + w.at);
            }
#pragma unroll
            for (int u = 0; u < BN_UNROLL; ++u) {
                sdy += (double)d[u];
                sdyx += (double)__fmul_rn(d[u], xv[u] - mean);
            }
        }
        for (; k < hi; k += BN_BLOCK, w.next()) {
            float d = masked(dout, x, w.at, scale, shift, act);
            sdy += (double)d;
            sdyx += (double)__fmul_rn(d, ld(x + w.at) - mean);
        }
        sdy = block_sum(sdy, part);
        sdyx = block_sum(sdyx, part);
        if (threadIdx.x == 0) {
            partial[(long long)blockIdx.y * 2 * c + ch] = sdy;
            partial[(long long)blockIdx.y * 2 * c + c + ch] = sdyx;
        }
    }
}

extern "C" __global__ void bn_grad_sums_f32(double* partial, const float* dout, const float* x,
                                            const float* saved, const float* weight,
                                            const float* bias, int nimg, int c, int hw, int act) {
    bn_grad_sums(partial, dout, x, saved, weight, bias, nimg, c, hw, act);
}

extern "C" __global__ void bn_grad_sums_bf16(double* partial, const bf16* dout, const bf16* x,
                                             const float* saved, const float* weight,
                                             const float* bias, int nimg, int c, int hw,
                                             int act) {
    bn_grad_sums(partial, dout, x, saved, weight, bias, nimg, c, hw, act);
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
// or every replica's under sync batch norm) (nn::bn::bn_backward). Over planes: the channel's
// constants once per plane.
template <typename T>
__device__ void bn_backward_dx(T* dx, const T* dout, const T* x, const float* saved,
                               const float* weight, const float* bias, const double* total,
                               float n, int nimg, int c, int hw, int act) {
    PLANES(plane, (long long)nimg * c) {
        int ch = (int)(plane % c);
        float mean = saved[ch];
        float invstd = saved[c + ch];
        float sdy = (float)total[ch];
        float sdyxhat = (float)(total[c + ch] * (double)invstd);
        float k = weight[ch] * invstd / n;
        float scale, shift;
        scale_shift(saved, weight, bias, c, ch, &scale, &shift);
        long long at = plane * hw;
        IN_PLANE(j, hw) {
            float xhat = (ld(x + at + j) - mean) * invstd;
            float dy = masked(dout, x, at + j, scale, shift, act);
            st(dx + at + j, k * (n * dy - sdy - xhat * sdyxhat));
        }
    }
}

extern "C" __global__ void bn_backward_dx_f32(float* dx, const float* dout, const float* x,
                                              const float* saved, const float* weight,
                                              const float* bias, const double* total, float n,
                                              int nimg, int c, int hw, int act) {
    bn_backward_dx(dx, dout, x, saved, weight, bias, total, n, nimg, c, hw, act);
}

extern "C" __global__ void bn_backward_dx_bf16(bf16* dx, const bf16* dout, const bf16* x,
                                               const float* saved, const float* weight,
                                               const float* bias, const double* total, float n,
                                               int nimg, int c, int hw, int act) {
    bn_backward_dx(dx, dout, x, saved, weight, bias, total, n, nimg, c, hw, act);
}
