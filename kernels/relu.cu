// ReLU in place. Mirrors ops::relu_forward / relu_backward.

// x[n] = max(x, 0)
extern "C" __global__ void relu_forward_f32(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] = fmaxf(x[i], 0.0f);
    }
}

// dx[n] *= (out > 0), where out is the ReLU's output
extern "C" __global__ void relu_backward_f32(float* dx, const float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && out[i] <= 0.0f) {
        dx[i] = 0.0f;
    }
}
