// Optimizer updates on flat parameter buffers. Mirrors optim::step: `scale` turns the summed
// gradient into the mean (1 / global samples); `wd` is L2 (added to the gradient) except for
// AdamW, where it is decoupled.

extern "C" __global__ void sgd_f32(float* p, const float* g, int n, float lr, float wd,
                                   float scale) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float gi = g[i] * scale + wd * p[i];
        p[i] -= lr * gi;
    }
}

// heavy-ball momentum (PyTorch's formulation), or Nesterov's where `nesterov` is 1; `first` is
// 1 on the first step (m = g)
extern "C" __global__ void momentum_f32(float* p, const float* g, float* m, int n, float lr,
                                        float mu, float wd, float scale, int first,
                                        int nesterov) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float gi = g[i] * scale + wd * p[i];
        float mi = first ? gi : mu * m[i] + gi;
        m[i] = mi;
        p[i] -= lr * (nesterov ? gi + mu * mi : mi);
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

extern "C" __global__ void adam_f32(float* p, const float* g, float* m, float* v, int n,
                                    float lr, float b1, float b2, float eps, float wd,
                                    float scale, float step_size, float inv_sqrt_bc2) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float gi = g[i] * scale + wd * p[i];
        adam_one(&p[i], gi, &m[i], &v[i], b1, b2, eps, step_size, inv_sqrt_bc2);
    }
}

extern "C" __global__ void adamw_f32(float* p, const float* g, float* m, float* v, int n,
                                     float lr, float b1, float b2, float eps, float wd,
                                     float scale, float step_size, float inv_sqrt_bc2) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        p[i] -= lr * wd * p[i];
        adam_one(&p[i], g[i] * scale, &m[i], &v[i], b1, b2, eps, step_size, inv_sqrt_bc2);
    }
}
