// A batch gathered from a training set held on the GPU: the loader sends the samples' row
// numbers instead of their features. Mirrors the loader's gather (engine::loader: x rows and
// labels of `rows`, in order). 64-bit indexes and grid-stride loops: any set, any batch.

// x[n, d] = data[rows[i], :] for each i; y[n] = labels[rows[i]]. The set stays fp32; a bf16 x
// gets the features rounded.
template <typename T>
__device__ void gather_rows(T* x, unsigned* y, const float* data, const unsigned* labels,
                            const unsigned* rows, int n, int d) {
    long long total = (long long)n * d;
    GRID_STRIDE(idx, total) {
        long long i = idx / d;
        long long j = idx % d;
        long long r = rows[i];
        st(x + idx, data[r * d + j]);
        if (j == 0) {
            y[i] = labels[r];
        }
    }
}

extern "C" __global__ void gather_rows_f32(float* x, unsigned* y, const float* data,
                                           const unsigned* labels, const unsigned* rows, int n,
                                           int d) {
    gather_rows(x, y, data, labels, rows, n, d);
}

extern "C" __global__ void gather_rows_bf16(bf16* x, unsigned* y, const float* data,
                                            const unsigned* labels, const unsigned* rows, int n,
                                            int d) {
    gather_rows(x, y, data, labels, rows, n, d);
}
