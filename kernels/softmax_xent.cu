// Fused softmax + cross-entropy on logits, forward and backward. Mirrors
// ops::softmax_xent_smoothed: per row, against labels smoothed by `eps` (PyTorch's
// label_smoothing; 0: plain), ce = log(sum exp(l - max)) - (l[y] - max),
// loss = (1 - eps) ce + eps (log(sum exp(l - max)) - mean(l - max)),
// dlogits = softmax - ((1 - eps) onehot(y) + eps / c) (not divided by the batch: the update
// divides by the global sample count), and whether the argmax (first maximum) is the label.
// One thread per row: the class count is small.

// logits[n, c], labels[n] -> loss[n], correct[n] (0/1), dlogits[n, c] (may be null: eval)
extern "C" __global__ void softmax_xent_f32(const float* logits, const unsigned int* labels,
                                            float* loss, int* correct, float* dlogits,
                                            int n, int c, float eps) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    const float* row = logits + (size_t)i * c;
    unsigned int y = labels[i];
    float mx = row[0];
    int arg = 0;
    for (int j = 1; j < c; ++j) {
        if (row[j] > mx) {
            mx = row[j];
            arg = j;
        }
    }
    float sum = 0.0f;
    float shifted = 0.0f;
    for (int j = 0; j < c; ++j) {
        sum += expf(row[j] - mx);
        shifted += row[j] - mx;
    }
    float log_sum = logf(sum);
    float ce = log_sum - (row[y] - mx);
    loss[i] = eps == 0.0f ? ce : (1.0f - eps) * ce + eps * (log_sum - shifted / (float)c);
    correct[i] = (arg == (int)y) ? 1 : 0;
    if (dlogits != 0) {
        float inv = 1.0f / sum;
        float spread = eps / (float)c;
        float* d = dlogits + (size_t)i * c;
        for (int j = 0; j < c; ++j) {
            d[j] = expf(row[j] - mx) * inv - spread;
        }
        d[y] -= 1.0f - eps;
    }
}
