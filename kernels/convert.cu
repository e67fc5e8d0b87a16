// Conversions between fp32 and bf16 (kept as its 16 bits, an unsigned short: the top half of an
// fp32), for bf16 mixed precision. Round to nearest, ties to even; a NaN stays a quiet NaN of
// its sign. Mirrors nn::bf16 (to_bf16, from_bf16) bit for bit: the prelude's (elem.cuh)
// bf16_bits and bf16_value, in integer arithmetic, so no header and no fast-math mode can
// change a result.

// out[n] = x rounded to bf16
extern "C" __global__ void f32_to_bf16(bf16* out, const float* x, int n) {
    GRID_STRIDE(i, n) { out[i] = bf16_bits(x[i]); }
}

// out[n] = the fp32 value of x (exact)
extern "C" __global__ void bf16_to_f32(float* out, const bf16* x, int n) {
    GRID_STRIDE(i, n) { out[i] = bf16_value(x[i]); }
}

// acc[n] += the fp32 value of x: a weight gradient computed in bf16 added into the fp32
// gradient buffer
extern "C" __global__ void bf16_add_to_f32(float* acc, const bf16* x, int n) {
    GRID_STRIDE(i, n) { acc[i] += bf16_value(x[i]); }
}

// A copy of some of x's ranges rounded to bf16, each chunk c = (first source element, length,
// first destination element, unused) of at most a block's worth of work: a bf16 run's weights
// for its products, each tensor placed on a 16-byte boundary of `out`
extern "C" __global__ void f32_to_bf16_chunks(bf16* out, const float* x, const int4* chunks,
                                              int nchunks) {
    for (int k = blockIdx.x; k < nchunks; k += gridDim.x) {
        int4 c = chunks[k];
        for (int j = threadIdx.x; j < c.y; j += blockDim.x) {
            out[c.z + j] = bf16_bits(x[c.x + j]);
        }
    }
}
