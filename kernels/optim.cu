// Optimizer updates on flat parameter buffers. Mirrors optim::step: `scale` turns the summed
// gradient into the mean (1 / global samples, read from the step's metric slot on the device, so
// the host need not wait for the step to launch its update); `wd` is L2 (added to the gradient) except for
// AdamW, where it is decoupled.
//
// Each update walks a table of chunks, one block per chunk (grid-stride over the table): an
// int4 of (first parameter, length, first moment, decayed), built once on the host from the
// optimizer's pieces (`nn::optim::Optimizer::pieces`). Frozen parameters have no chunk, the
// moments are laid out over the trained parameters only, and a chunk that is not decayed
// (`--no-decay-bn-bias`) takes wd = 0.

// 1 / the step's samples (at least 1), computed as the CPU does (in double, then rounded)
__device__ __forceinline__ float mean_scale(const float* samples) {
    return (float)(1.0 / fmax((double)samples[0], 1.0));
}

// What the gradient sums are multiplied by: 1 / samples, and with `clip` > 0
// (--clip-grad-norm) the mean gradient's norm, gnorm[0] (the sums' norm) / samples, scaled down
// to `clip` where it is longer (clip / (norm + 1e-6), at most 1:
// nn::optim::Optimizer::clip_factor; a NaN norm clips nothing, as there). Every thread computes
// the same bits: every replica clips alike.
__device__ __forceinline__ float update_scale(const float* samples, const float* gnorm,
                                              float clip) {
    const float scale = mean_scale(samples);
    if (clip > 0.0f) {
        const float norm = (float)((double)gnorm[0] * (double)scale);
        const float f = clip / (norm + 1e-6f);
        if (f < 1.0f) {
            return scale * f;
        }
    }
    return scale;
}

// partial[k] = the sum of squares of chunk k's gradients (one block of 256 threads per chunk,
// grid-stride over the table; each block's tree sums in a fixed order)
extern "C" __global__ void grad_sumsq_f32(const float* g, const int4* chunks, int nchunks,
                                          double* partial) {
    __shared__ double part[256];
    for (int k = blockIdx.x; k < nchunks; k += gridDim.x) {
        int4 c = chunks[k];
        double s = 0.0;
        for (int j = threadIdx.x; j < c.y; j += blockDim.x) {
            const float v = g[c.x + j];
            s += (double)v * (double)v;
        }
        s = block_sum<256, double>(s, part);
        if (threadIdx.x == 0) {
            partial[k] = s;
        }
    }
}

// A step's end side by side, for one copy to the host: out[0..aux) = its metric slots, and
// out[aux] = the root of partial[0..n) summed by one block of 256 threads in a fixed order: the
// trained gradients' L2 norm (the same bits on every replica that holds the same gradients; the
// sum of squares itself would pass float's range for gradients past 1.8e19, where the norm of
// an exploding gradient must still be said and clipped by)
extern "C" __global__ void step_end_f32(const double* partial, int n, const float* slots, int aux,
                                        float* out) {
    __shared__ double part[256];
    if (blockIdx.x != 0) {
        return;
    }
    if (threadIdx.x < aux) {
        out[threadIdx.x] = slots[threadIdx.x];
    }
    double s = 0.0;
    for (int k = threadIdx.x; k < n; k += blockDim.x) {
        s += partial[k];
    }
    s = block_sum<256, double>(s, part);
    if (threadIdx.x == 0) {
        out[aux] = (float)sqrt(s);
    }
}

extern "C" __global__ void sgd_f32(float* p, const float* g, const int4* chunks, int nchunks,
                                   float lr, float wd, const float* samples, const float* gnorm,
                                   float clip) {
    const float scale = update_scale(samples, gnorm, clip);
    for (int k = blockIdx.x; k < nchunks; k += gridDim.x) {
        int4 c = chunks[k];
        float w = c.w ? wd : 0.0f;
        for (int j = threadIdx.x; j < c.y; j += blockDim.x) {
            int i = c.x + j;
            float gi = g[i] * scale + w * p[i];
            p[i] -= lr * gi;
        }
    }
}

// heavy-ball momentum `mu` (PyTorch's formulation), or Nesterov's where `nesterov` is 1;
// `first` is 1 on the first step (m = g)
extern "C" __global__ void momentum_f32(float* p, const float* g, float* m, const int4* chunks,
                                        int nchunks, float lr, float mu, float wd,
                                        const float* samples, const float* gnorm, float clip,
                                        int first, int nesterov) {
    const float scale = update_scale(samples, gnorm, clip);
    for (int k = blockIdx.x; k < nchunks; k += gridDim.x) {
        int4 c = chunks[k];
        float w = c.w ? wd : 0.0f;
        for (int j = threadIdx.x; j < c.y; j += blockDim.x) {
            int i = c.x + j;
            int mi = c.z + j;
            float gi = g[i] * scale + w * p[i];
            float buf = first ? gi : mu * m[mi] + gi;
            m[mi] = buf;
            p[i] -= lr * (nesterov ? gi + mu * buf : buf);
        }
    }
}

// one Adam step; step_size = lr / (1 - b1^t), inv_sqrt_bc2 = 1 / sqrt(1 - b2^t)
__device__ __forceinline__ void adam_one(float* p, float g, float* m, float* v, float b1,
                                         float b2, float eps, float step_size,
                                         float inv_sqrt_bc2) {
    float mi = b1 * *m + (1.0f - b1) * g;
    float vi = b2 * *v + (1.0f - b2) * g * g;
    *m = mi;
    *v = vi;
    *p -= step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
}

// Adam with L2 weight decay, or AdamW's decoupled decay where `decoupled` is 1; at step `t`
// of the run, whose corrections step_size and inv_sqrt_bc2 are; a chunk that began training
// after step began[k] > 0 (unfrozen at a resume) corrects for its own t - began[k] steps
extern "C" __global__ void adam_f32(float* p, const float* g, float* m, float* v,
                                    const int4* chunks, int nchunks, float lr, float b1,
                                    float b2, float eps, float wd, const float* samples,
                                    const float* gnorm, float clip, float step_size,
                                    float inv_sqrt_bc2, int decoupled, const long long* began,
                                    long long t) {
    const float scale = update_scale(samples, gnorm, clip);
    for (int k = blockIdx.x; k < nchunks; k += gridDim.x) {
        int4 c = chunks[k];
        float w = c.w ? wd : 0.0f;
        float ss = step_size, ib = inv_sqrt_bc2;
        if (began[k] > 0) {
            long long own = t - began[k];
            float tl = (float)(own < 1 ? 1 : own);
            ss = lr / (1.0f - powf(b1, tl));
            ib = 1.0f / sqrtf(1.0f - powf(b2, tl));
        }
        for (int j = threadIdx.x; j < c.y; j += blockDim.x) {
            int i = c.x + j;
            int mi = c.z + j;
            float gi = g[i] * scale;
            if (decoupled) {
                p[i] -= lr * w * p[i];
            } else {
                gi += w * p[i];
            }
            adam_one(&p[i], gi, &m[mi], &v[mi], b1, b2, eps, ss, ib);
        }
    }
}
