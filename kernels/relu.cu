// ReLU in place. Mirrors ops::relu_forward / relu_backward.

// x[n] = max(x, 0)
template <typename T>
__device__ void relu_forward(T* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        st(x + i, fmaxf(ld(x + i), 0.0f));
    }
}

extern "C" __global__ void relu_forward_f32(float* x, int n) { relu_forward(x, n); }

extern "C" __global__ void relu_forward_bf16(bf16* x, int n) { relu_forward(x, n); }

// dx[n] *= (out > 0), where out is the ReLU's output
template <typename T>
__device__ void relu_backward(T* dx, const T* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && ld(out + i) <= 0.0f) {
        st(dx + i, 0.0f);
    }
}

extern "C" __global__ void relu_backward_f32(float* dx, const float* out, int n) {
    relu_backward(dx, out, n);
}

extern "C" __global__ void relu_backward_bf16(bf16* dx, const bf16* out, int n) {
    relu_backward(dx, out, n);
}
