// Batch metrics of one micro-batch added into three slots: [loss sum, correct count, samples].
// On the training path the slots ride at the end of the gradient buffer, so the gradient
// all-reduce also sums them. One thread, rows in order: deterministic, and n is a micro-batch.
extern "C" __global__ void metrics_f32(float* out, const float* loss, const int* correct, int n) {
    if (blockIdx.x * blockDim.x + threadIdx.x != 0) {
        return;
    }
    float l = 0.0f;
    float c = 0.0f;
    for (int i = 0; i < n; ++i) {
        l += loss[i];
        c += (float)correct[i];
    }
    out[0] += l;
    out[1] += c;
    out[2] += (float)n;
}
