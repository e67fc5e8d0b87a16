// Elementwise ops of the model graph: ReLU6 and its mask, the residual add and its backward,
// gradient accumulation, dropout's mask (drawn on the device) and its product. Mirrors nn::ops
// (relu6_forward, relu6_backward, add_forward, accumulate, mul). 64-bit indexing, grid-stride
// loops; the sizes are ints (the host checks).

// x[n] = min(max(x, 0), 6), in place; a NaN stays NaN (ops::relu6_forward, f32::clamp)
template <typename T>
__device__ void relu6_forward(T* x, int n) {
    GRID_STRIDE(i, n) {
        float v = ld(x + i);
        st(x + i, isnan(v) ? v : fminf(fmaxf(v, 0.0f), 6.0f));
    }
}

extern "C" __global__ void relu6_forward_f32(float* x, int n) { relu6_forward(x, n); }

extern "C" __global__ void relu6_forward_bf16(bf16* x, int n) { relu6_forward(x, n); }

// dx[n] *= (0 < out < 6), where out is the ReLU6's output (ops::relu6_backward)
template <typename T>
__device__ void relu6_backward(T* dx, const T* out, int n) {
    GRID_STRIDE(i, n) {
        float o = ld(out + i);
        if (!(o > 0.0f && o < 6.0f)) {
            st(dx + i, 0.0f);
        }
    }
}

extern "C" __global__ void relu6_backward_f32(float* dx, const float* out, int n) {
    relu6_backward(dx, out, n);
}

extern "C" __global__ void relu6_backward_bf16(bf16* dx, const bf16* out, int n) {
    relu6_backward(dx, out, n);
}

// The residual add and gradient accumulation run in 16-byte vectors (`Wide`) where every
// pointer is 16-byte aligned (the same for all threads), then element by element over the
// rest (the tail, or all of it where a pointer is not): the same values either way. The host
// launches a thread per vector.

// out[n] = activate(a + b) (ops::add_forward, then the add's activation)
template <typename T>
__device__ void add(T* out, const T* a, const T* b, int n, int act) {
    const int V = Wide<T>::V;
    typedef Row<V, T> R;
    long long nv = aligned16(out) && aligned16(a) && aligned16(b) ? n / V : 0;
    GRID_STRIDE(i, nv) {
        float x[V], y[V];
        R::get(R::load(a + i * V), x);
        R::get(R::load(b + i * V), y);
#pragma unroll
        for (int j = 0; j < V; ++j) {
            x[j] = activate(x[j] + y[j], act);
        }
        R::st(out + i * V, x);
    }
    GRID_STRIDE(i, n - nv * V) {
        long long k = nv * V + i;
        st(out + k, activate(ld(a + k) + ld(b + k), act));
    }
}

extern "C" __global__ void add_f32(float* out, const float* a, const float* b, int n, int act) {
    add(out, a, b, n, act);
}

extern "C" __global__ void add_bf16(bf16* out, const bf16* a, const bf16* b, int n, int act) {
    add(out, a, b, n, act);
}

// The residual add's backward in one pass (ops::add_backward): d = dout where the add's
// activation `act` passed it (`passes`, from its stored output `out`; relu_backward's and
// relu6_backward's mask), else 0, then for each input k, dk[n] = d (add_k 0) or dk[n] += d
// (add_k 1: the input's gradient reached a second time; as accumulate). dout is not written.
template <typename T>
__device__ void add_backward(T* d0, T* d1, const T* dout, const T* out, int n, int act,
                             int add0, int add1) {
    const int V = Wide<T>::V;
    typedef Row<V, T> R;
    bool vec = aligned16(d0) && aligned16(d1) && aligned16(dout) && aligned16(out);
    long long nv = vec ? n / V : 0;
    GRID_STRIDE(i, nv) {
        long long k = i * V;
        float d[V], o[V], a[V], b[V];
        R::get(R::load(dout + k), d);
        if (act != 0) {
            R::get(R::load(out + k), o);
#pragma unroll
            for (int j = 0; j < V; ++j) {
                if (!passes(o[j], act)) {
                    d[j] = 0.0f;
                }
            }
        }
        if (add0) {
            R::get(R::load(d0 + k), a);
        }
        if (add1) {
            R::get(R::load(d1 + k), b);
        }
#pragma unroll
        for (int j = 0; j < V; ++j) {
            a[j] = add0 ? a[j] + d[j] : d[j];
            b[j] = add1 ? b[j] + d[j] : d[j];
        }
        R::st(d0 + k, a);
        R::st(d1 + k, b);
    }
    GRID_STRIDE(i, n - nv * V) {
        long long k = nv * V + i;
        float d = ld(dout + k);
        if (act != 0 && !passes(ld(out + k), act)) {
            d = 0.0f;
        }
        st(d0 + k, add0 ? ld(d0 + k) + d : d);
        st(d1 + k, add1 ? ld(d1 + k) + d : d);
    }
}

extern "C" __global__ void add_backward_f32(float* d0, float* d1, const float* dout,
                                            const float* out, int n, int act, int add0,
                                            int add1) {
    add_backward(d0, d1, dout, out, n, act, add0, add1);
}

extern "C" __global__ void add_backward_bf16(bf16* d0, bf16* d1, const bf16* dout,
                                             const bf16* out, int n, int act, int add0,
                                             int add1) {
    add_backward(d0, d1, dout, out, n, act, add0, add1);
}

// acc[n] += x (ops::accumulate): a gradient reaching a value a second time
template <typename T>
__device__ void accumulate(T* acc, const T* x, int n) {
    const int V = Wide<T>::V;
    typedef Row<V, T> R;
    long long nv = aligned16(acc) && aligned16(x) ? n / V : 0;
    GRID_STRIDE(i, nv) {
        float a[V], y[V];
        R::get(R::load(acc + i * V), a);
        R::get(R::load(x + i * V), y);
#pragma unroll
        for (int j = 0; j < V; ++j) {
            a[j] += y[j];
        }
        R::st(acc + i * V, a);
    }
    GRID_STRIDE(i, n - nv * V) {
        long long k = nv * V + i;
        st(acc + k, ld(acc + k) + ld(x + k));
    }
}

extern "C" __global__ void accumulate_f32(float* acc, const float* x, int n) {
    accumulate(acc, x, n);
}

extern "C" __global__ void accumulate_bf16(bf16* acc, const bf16* x, int n) {
    accumulate(acc, x, n);
}

// out[n] = x * mask (ops::mul: dropout's forward with its mask, and its backward); the mask
// stays fp32
template <typename T>
__device__ void mul(T* out, const T* x, const float* mask, int n) {
    GRID_STRIDE(i, n) {
        st(out + i, ld(x + i) * mask[i]);
    }
}

extern "C" __global__ void mul_f32(float* out, const float* x, const float* mask, int n) {
    mul(out, x, mask, n);
}

extern "C" __global__ void mul_bf16(bf16* out, const bf16* x, const float* mask, int n) {
    mul(out, x, mask, n);
}

// SplitMix64's finaliser: a bijection of 64-bit words that scrambles every bit.
__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

// mask[n] = 0 with probability p, else keep (= 1/(1-p)): dropout's mask for one node and
// pass, from a counter-based hash of (key, i), so element i's draw does not depend on the
// launch shape. The key mixes the replica's seed (seed_mix = mix64(seed), from the host), the
// training passes so far (*passes, counted on the device by count_pass_u64, so a pass replayed
// from a CUDA graph draws a new mask) and the node: nn::ops::dropout_key. The uniform is the
// hash's top 24 bits over 2^24, in [0, 1): nn::rng::counter_f32, so the CPU
// (nn::ops::dropout_mask) draws the very same masks.
extern "C" __global__ void dropout_mask_f32(float* mask, int n, unsigned long long seed_mix,
                                            const unsigned long long* passes, int node, float p,
                                            float keep) {
    unsigned long long key = mix64(seed_mix ^ (*passes * 4096ULL + (unsigned long long)node));
    GRID_STRIDE(i, n) {
        unsigned long long h = mix64(key + (unsigned long long)(i + 1) * 0x9e3779b97f4a7c15ULL);
        float u = (float)(h >> 40) * (1.0f / 16777216.0f);
        mask[i] = u < p ? 0.0f : keep;
    }
}

// *passes += 1: one more training pass (dropout's key), on the stream in order with the pass.
extern "C" __global__ void count_pass_u64(unsigned long long* passes) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        *passes += 1;
    }
}
