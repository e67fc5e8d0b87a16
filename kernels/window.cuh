// What the depthwise kernels of both layouts (depthwise.cu, depthwise_nhwc.cu) share: where a
// tap of a window lands.

// The output row (or column) o = t / stride that tap offset t = y + pad - ky reaches, or -1
// where none does (t negative, not a multiple of the stride, or past the last output).
template <typename I>
__device__ __forceinline__ I reached(I t, int stride, int last) {
    if (t < 0) {
        return -1;
    }
    I o = t;
    if (stride != 1) {
        o = t / stride;
        if (o * stride != t) {
            return -1;
        }
    }
    return o < last ? o : -1;
}
