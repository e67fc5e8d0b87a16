// Bias of a linear layer, row-major activations. Mirrors ops::linear_forward / linear_backward.

// y[n, d] += b[d]
template <typename T>
__device__ void bias_add(T* y, const float* b, int n, int d) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n * d) {
        st(y + i, ld(y + i) + b[i % d]);
    }
}

extern "C" __global__ void bias_add_f32(float* y, const float* b, int n, int d) {
    bias_add(y, b, n, d);
}

extern "C" __global__ void bias_add_bf16(bf16* y, const float* b, int n, int d) {
    bias_add(y, b, n, d);
}

// db[d] += sum over rows of dy[n, d]; one thread per column, rows summed in order so the
// result does not depend on the launch shape.
template <typename T>
__device__ void bias_grad(float* db, const T* dy, int n, int d) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < d) {
        float s = 0.0f;
        for (int r = 0; r < n; ++r) {
            s += ld(dy + ((size_t)r * d + j));
        }
        db[j] += s;
    }
}

extern "C" __global__ void bias_grad_f32(float* db, const float* dy, int n, int d) {
    bias_grad(db, dy, n, d);
}

extern "C" __global__ void bias_grad_bf16(float* db, const bf16* dy, int n, int d) {
    bias_grad(db, dy, n, d);
}
