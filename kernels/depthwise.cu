// Depthwise 2-D convolution over NCHW images (groups = channels), weights [C, 1, K, K], zero
// padding. Mirrors nn::depthwise (dwconv_forward, dwconv_backward). Direct, one thread per
// output (forward) or input pixel (the input gradient, a gather: no atomics); the weight
// gradient one block per (channel, tap) (blockDim.x must be DW_BLOCK), each thread summing a
// fixed strided share in order and then a tree in shared memory: the same bits at every launch.
// The bias gradient is conv.cu's conv_bias_grad. 64-bit indexing, grid-stride loops.

#define DW_BLOCK 256

// out[nimg, C, OH, OW] = inp[nimg, C, H, W] (*) w[C, 1, K, K] per channel, plus bias[C] when
// has_bias (bias must still be a valid buffer); taps added in (ky, kx) order as on the CPU.
template <typename T>
__device__ void dwconv_forward(T* out, const T* inp, const float* w, const float* bias,
                               int has_bias, int nimg, int c, int h, int wd, int k, int stride,
                               int pad, int oh, int ow) {
    long long ohw = (long long)oh * ow;
    long long total = (long long)nimg * c * ohw;
    GRID_STRIDE(idx, total) {
        long long plane = idx / ohw;
        int ch = (int)(plane % c);
        long long oy = (idx % ohw) / ow;
        long long ox = (idx % ohw) % ow;
        const T* src = inp + plane * h * wd;
        const float* wk = w + (long long)ch * k * k;
        float s = has_bias ? bias[ch] : 0.0f;
        for (int ky = 0; ky < k; ++ky) {
            long long iy = oy * stride + ky - pad;
            if (iy < 0 || iy >= h) {
                continue;
            }
            for (int kx = 0; kx < k; ++kx) {
                long long ix = ox * stride + kx - pad;
                if (ix < 0 || ix >= wd) {
                    continue;
                }
                s += wk[ky * k + kx] * ld(src + (iy * wd + ix));
            }
        }
        st(out + idx, s);
    }
}

extern "C" __global__ void dwconv_forward_f32(float* out, const float* inp, const float* w,
                                              const float* bias, int has_bias, int nimg, int c,
                                              int h, int wd, int k, int stride, int pad, int oh,
                                              int ow) {
    dwconv_forward(out, inp, w, bias, has_bias, nimg, c, h, wd, k, stride, pad, oh, ow);
}

extern "C" __global__ void dwconv_forward_bf16(bf16* out, const bf16* inp, const float* w,
                                               const float* bias, int has_bias, int nimg, int c,
                                               int h, int wd, int k, int stride, int pad, int oh,
                                               int ow) {
    dwconv_forward(out, inp, w, bias, has_bias, nimg, c, h, wd, k, stride, pad, oh, ow);
}

// dinp[nimg, C, H, W] (overwritten) = for each pixel, the sum over the outputs whose window
// holds it of w * dout, in (ky, kx) order as the CPU adds them into a zeroed plane.
template <typename T>
__device__ void dwconv_backward_input(T* dinp, const T* dout, const float* w, int nimg, int c,
                                      int h, int wd, int k, int stride, int pad, int oh,
                                      int ow) {
    long long ohw = (long long)oh * ow;
    long long total = (long long)nimg * c * h * wd;
    GRID_STRIDE(idx, total) {
        long long x = idx % wd;
        long long y = (idx / wd) % h;
        long long plane = idx / ((long long)h * wd);
        int ch = (int)(plane % c);
        const T* d = dout + plane * ohw;
        const float* wk = w + (long long)ch * k * k;
        float s = 0.0f;
        for (int ky = 0; ky < k; ++ky) {
            long long ty = y + pad - ky;  // oy * stride
            if (ty < 0 || ty % stride != 0 || ty / stride >= oh) {
                continue;
            }
            long long oy = ty / stride;
            for (int kx = 0; kx < k; ++kx) {
                long long tx = x + pad - kx;
                if (tx < 0 || tx % stride != 0 || tx / stride >= ow) {
                    continue;
                }
                s += wk[ky * k + kx] * ld(d + (oy * ow + tx / stride));
            }
        }
        st(dinp + idx, s);
    }
}

extern "C" __global__ void dwconv_backward_input_f32(float* dinp, const float* dout,
                                                     const float* w, int nimg, int c, int h,
                                                     int wd, int k, int stride, int pad, int oh,
                                                     int ow) {
    dwconv_backward_input(dinp, dout, w, nimg, c, h, wd, k, stride, pad, oh, ow);
}

extern "C" __global__ void dwconv_backward_input_bf16(bf16* dinp, const bf16* dout,
                                                      const float* w, int nimg, int c, int h,
                                                      int wd, int k, int stride, int pad, int oh,
                                                      int ow) {
    dwconv_backward_input(dinp, dout, w, nimg, c, h, wd, k, stride, pad, oh, ow);
}

// dw[C, 1, K, K] += for each (channel, tap), the sum over images and outputs of
// dout * the input under that tap. One block per (channel, tap).
template <typename T>
__device__ void dwconv_backward_weight(float* dw, const T* dout, const T* inp, int nimg, int c,
                                       int h, int wd, int k, int stride, int pad, int oh,
                                       int ow) {
    __shared__ float part[DW_BLOCK];
    long long ohw = (long long)oh * ow;
    long long hw = (long long)h * wd;
    long long kk = (long long)k * k;
    long long per_tap = (long long)nimg * ohw;
    for (long long item = blockIdx.x; item < c * kk; item += gridDim.x) {
        long long ch = item / kk;
        int ky = (int)((item % kk) / k);
        int kx = (int)((item % kk) % k);
        float s = 0.0f;
        for (long long e = threadIdx.x; e < per_tap; e += DW_BLOCK) {
            long long plane = (e / ohw) * c + ch;
            long long p = e % ohw;
            long long iy = (p / ow) * stride + ky - pad;
            long long ix = (p % ow) * stride + kx - pad;
            if (iy >= 0 && iy < h && ix >= 0 && ix < wd) {
                s += ld(dout + (plane * ohw + p)) * ld(inp + (plane * hw + iy * wd + ix));
            }
        }
        part[threadIdx.x] = s;
        __syncthreads();
        for (unsigned int half = DW_BLOCK / 2; half > 0; half /= 2) {
            if (threadIdx.x < half) {
                part[threadIdx.x] += part[threadIdx.x + half];
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            dw[item] += part[0];
        }
        __syncthreads();  // part[] is refilled for the next item
    }
}

extern "C" __global__ void dwconv_backward_weight_f32(float* dw, const float* dout,
                                                      const float* inp, int nimg, int c, int h,
                                                      int wd, int k, int stride, int pad,
                                                      int oh, int ow) {
    dwconv_backward_weight(dw, dout, inp, nimg, c, h, wd, k, stride, pad, oh, ow);
}

extern "C" __global__ void dwconv_backward_weight_bf16(float* dw, const bf16* dout,
                                                       const bf16* inp, int nimg, int c, int h,
                                                       int wd, int k, int stride, int pad,
                                                       int oh, int ow) {
    dwconv_backward_weight(dw, dout, inp, nimg, c, h, wd, k, stride, pad, oh, ow);
}
