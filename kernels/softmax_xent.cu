// Fused softmax + cross-entropy on logits, forward and backward. Mirrors
// ops::softmax_xent_smoothed: per row, against labels smoothed by `eps` (PyTorch's
// label_smoothing; 0: plain), ce = log(sum exp(l - max)) - (l[y] - max),
// loss = (1 - eps) ce + eps (log(sum exp(l - max)) - mean(l - max)),
// dlogits = softmax - ((1 - eps) onehot(y) + eps / c) (not divided by the batch: the update
// divides by the global sample count), and whether the argmax (first maximum) is the label.
// One thread per row: the class count is small.

// logits[n, c], labels[n] -> loss[n], correct[n] (0/1), dlogits[n, c] (may be null: eval).
// The label's dlogit is finished in a register before its one store (softmax - spread, then
// - (1 - eps)): the same fp32 arithmetic as storing and then subtracting, and for bf16 a single
// rounding of the small difference instead of rounding the probability first.
template <typename T>
__device__ void softmax_xent(const T* logits, const unsigned int* labels, float* loss,
                             int* correct, T* dlogits, int n, int c, float eps) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    const T* row = logits + (size_t)i * c;
    unsigned int y = labels[i];
    float mx = ld(row);
    int arg = 0;
    for (int j = 1; j < c; ++j) {
        float v = ld(row + j);
        if (v > mx) {
            mx = v;
            arg = j;
        }
    }
    float sum = 0.0f;
    float shifted = 0.0f;
    for (int j = 0; j < c; ++j) {
        float v = ld(row + j);
        sum += expf(v - mx);
        shifted += v - mx;
    }
    float log_sum = logf(sum);
    float ce = log_sum - (ld(row + y) - mx);
    loss[i] = eps == 0.0f ? ce : (1.0f - eps) * ce + eps * (log_sum - shifted / (float)c);
    correct[i] = (arg == (int)y) ? 1 : 0;
    if (dlogits != 0) {
        float inv = 1.0f / sum;
        float spread = eps / (float)c;
        T* d = dlogits + (size_t)i * c;
        for (int j = 0; j < c; ++j) {
            float g = expf(ld(row + j) - mx) * inv - spread;
            if ((unsigned int)j == y) {
                g -= 1.0f - eps;
            }
            st(d + j, g);
        }
    }
}

extern "C" __global__ void softmax_xent_f32(const float* logits, const unsigned int* labels,
                                            float* loss, int* correct, float* dlogits, int n,
                                            int c, float eps) {
    softmax_xent(logits, labels, loss, correct, dlogits, n, c, eps);
}

extern "C" __global__ void softmax_xent_bf16(const bf16* logits, const unsigned int* labels,
                                             float* loss, int* correct, bf16* dlogits, int n,
                                             int c, float eps) {
    softmax_xent(logits, labels, loss, correct, dlogits, n, c, eps);
}
