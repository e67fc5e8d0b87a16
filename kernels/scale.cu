// x[n] *= a (gradient scaling)
extern "C" __global__ void scale_f32(float* x, int n, float a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] *= a;
    }
}
