// Conversions between fp32 and bf16 (kept as its 16 bits, an unsigned short: the top half of an
// fp32), for bf16 mixed precision. Round to nearest, ties to even; a NaN stays a quiet NaN of
// its sign. Mirrors nn::bf16 (to_bf16, from_bf16) bit for bit, in integer arithmetic, so no
// header and no fast-math mode can change a result.

#define GRID_STRIDE(i, n)                                                                    \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n);            \
         i += (long long)blockDim.x * gridDim.x)

__device__ __forceinline__ unsigned short bf16_bits(float x) {
    unsigned int b = __float_as_uint(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return (unsigned short)((b >> 16) | 0x0040u);
    }
    b += 0x7fffu + ((b >> 16) & 1u);
    return (unsigned short)(b >> 16);
}

__device__ __forceinline__ float bf16_value(unsigned short h) {
    return __uint_as_float(((unsigned int)h) << 16);
}

// out[n] = x rounded to bf16
extern "C" __global__ void f32_to_bf16(unsigned short* out, const float* x, int n) {
    GRID_STRIDE(i, n) { out[i] = bf16_bits(x[i]); }
}

// out[n] = the fp32 value of x (exact)
extern "C" __global__ void bf16_to_f32(float* out, const unsigned short* x, int n) {
    GRID_STRIDE(i, n) { out[i] = bf16_value(x[i]); }
}
