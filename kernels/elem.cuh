// The prelude: prepended to every kernels/*.cu file before NVRTC compiles it
// (src/backend/cuda/kernels.rs, PRELUDE; a `#line` directive after it keeps error line
// numbers pointing into the .cu file). Not a kernel file of its own.
//
// bf16 mixed precision keeps activations (and their gradients) as bf16: the top 16 bits of an
// fp32, held as an unsigned short. A kernel that touches activations is one template body over
// the element type T (float or bf16) with an `{op}_f32` and an `{op}_bf16` entry point; the
// body reads and writes T through ld/st, and all its math is fp32 either way: ld widens (exact),
// st rounds to nearest even. For T = float, ld/st are plain loads and stores, so the fp32
// kernels compute exactly what they did before the twins.

typedef unsigned short bf16;

#define GRID_STRIDE(i, n)                                                                    \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n);            \
         i += (long long)blockDim.x * gridDim.x)

// Where a launch's element indices may be ints: below SMALL elements (the largest grid's
// stride, 2^16 blocks x 1024 threads, added to the last index still fits); GRID_STRIDE_I is
// GRID_STRIDE in index type I (32-bit division costs a fraction of 64-bit's).
#define SMALL 2000000000LL
#define GRID_STRIDE_I(I, i, n)                                                               \
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (I)blockDim.x * gridDim.x)

// fp32 -> bf16 bits, round to nearest, ties to even; a NaN stays a quiet NaN of its sign.
// bf16 bits -> fp32 (exact). Mirror nn::bf16 (to_bf16, from_bf16) bit for bit, in integer
// arithmetic, so no header and no fast-math mode can change a result.
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

// Element access by type: the fp32 value of *p, and *p = v (rounded to nearest even for bf16).
__device__ __forceinline__ float ld(const float* p) { return *p; }
__device__ __forceinline__ float ld(const bf16* p) { return bf16_value(*p); }
__device__ __forceinline__ void st(float* p, float v) { *p = v; }
__device__ __forceinline__ void st(bf16* p, float v) { *p = bf16_bits(v); }

// The activation an op applies to its own output (model::Act; the host's `act_code`): 0 none,
// 1 ReLU (relu_forward), 2 ReLU6, a NaN staying NaN (relu6_forward). Rounding to bf16 is
// monotonic and keeps 0 and 6, so activating before the store equals activating the stored
// value.
__device__ __forceinline__ float activate(float v, int act) {
    if (act == 1) {
        return fmaxf(v, 0.0f);
    }
    if (act == 2) {
        return isnan(v) ? v : fminf(fmaxf(v, 0.0f), 6.0f);
    }
    return v;
}

// What a store of v into a T leaves there, read back: v for float, v rounded for bf16 (the
// pointer only picks the type).
__device__ __forceinline__ float stored(float v, const float*) { return v; }
__device__ __forceinline__ float stored(float v, const bf16*) { return bf16_value(bf16_bits(v)); }

// Whether a gradient passes back through activation `act` whose stored output is o, as
// relu_backward (zeroed where o <= 0) and relu6_backward (kept where 0 < o < 6) decide.
__device__ __forceinline__ bool passes(float o, int act) {
    if (act == 1) {
        return !(o <= 0.0f);
    }
    if (act == 2) {
        return o > 0.0f && o < 6.0f;
    }
    return true;
}

// V consecutive elements of T as one vector access (a row's neighbouring channels, a run of an
// elementwise op): `Raw` the vector, `load` it from p (V-element aligned: the caller sees to
// it), `get` its fp32 values (so a thread keeps its loads in flight packed, and widens each as
// it uses it), `st` V values rounded as `st` does. V = 1 (ld / st), 2, and 16 bytes (`Wide`).
template <int V, typename T>
struct Row;

template <>
struct Row<1, float> {
    typedef float Raw;
    static __device__ __forceinline__ Raw load(const float* p) { return *p; }
    static __device__ __forceinline__ void get(Raw t, float* v) { v[0] = t; }
    static __device__ __forceinline__ void st(float* p, const float* v) { *p = v[0]; }
};

template <>
struct Row<1, bf16> {
    typedef bf16 Raw;
    static __device__ __forceinline__ Raw load(const bf16* p) { return *p; }
    static __device__ __forceinline__ void get(Raw t, float* v) { v[0] = bf16_value(t); }
    static __device__ __forceinline__ void st(bf16* p, const float* v) { *p = bf16_bits(v[0]); }
};

template <>
struct Row<2, float> {
    typedef float2 Raw;
    static __device__ __forceinline__ Raw load(const float* p) { return *(const float2*)p; }
    static __device__ __forceinline__ void get(Raw t, float* v) {
        v[0] = t.x;
        v[1] = t.y;
    }
    static __device__ __forceinline__ void st(float* p, const float* v) {
        *(float2*)p = make_float2(v[0], v[1]);
    }
};

template <>
struct Row<4, float> {
    typedef float4 Raw;
    static __device__ __forceinline__ Raw load(const float* p) { return *(const float4*)p; }
    static __device__ __forceinline__ void get(Raw t, float* v) {
        v[0] = t.x;
        v[1] = t.y;
        v[2] = t.z;
        v[3] = t.w;
    }
    static __device__ __forceinline__ void st(float* p, const float* v) {
        *(float4*)p = make_float4(v[0], v[1], v[2], v[3]);
    }
};

// bf16 pairs in 32-bit words, the lower channel in the low half.
__device__ __forceinline__ void unpack(unsigned int t, float* v) {
    v[0] = bf16_value((bf16)(t & 0xffffu));
    v[1] = bf16_value((bf16)(t >> 16));
}
__device__ __forceinline__ unsigned int pack(const float* v) {
    return (unsigned int)bf16_bits(v[0]) | ((unsigned int)bf16_bits(v[1]) << 16);
}

template <>
struct Row<2, bf16> {
    typedef unsigned int Raw;
    static __device__ __forceinline__ Raw load(const bf16* p) {
        return *(const unsigned int*)p;
    }
    static __device__ __forceinline__ void get(Raw t, float* v) { unpack(t, v); }
    static __device__ __forceinline__ void st(bf16* p, const float* v) {
        *(unsigned int*)p = pack(v);
    }
};

template <>
struct Row<8, bf16> {
    typedef uint4 Raw;
    static __device__ __forceinline__ Raw load(const bf16* p) { return *(const uint4*)p; }
    static __device__ __forceinline__ void get(Raw t, float* v) {
        unpack(t.x, v);
        unpack(t.y, v + 2);
        unpack(t.z, v + 4);
        unpack(t.w, v + 6);
    }
    static __device__ __forceinline__ void st(bf16* p, const float* v) {
        *(uint4*)p = make_uint4(pack(v), pack(v + 2), pack(v + 4), pack(v + 6));
    }
};

// The elements of T in 16 bytes: a wide vector.
template <typename T>
struct Wide {
    static const int V = 16 / sizeof(T);
};

// The sum of v over a block of N threads (blockDim.x = N, a power of two), by a tree in shared
// memory part[N] in a fixed order: every thread gets the same bits at every launch. Every thread
// of the block calls it; part[] may be refilled right after.
template <int N, typename T>
__device__ T block_sum(T v, T* part) {
    part[threadIdx.x] = v;
    __syncthreads();
    for (unsigned int half = N / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            part[threadIdx.x] += part[threadIdx.x + half];
        }
        __syncthreads();
    }
    T s = part[0];
    __syncthreads();
    return s;
}

// Whether p starts on a 16-byte boundary (a wide vector's).
__device__ __forceinline__ bool aligned16(const void* p) {
    return ((unsigned long long)p & 15ull) == 0;
}

// Where element (image n, channel ch, position p of an hw-position plane) of a [nimg, C, hw]
// activation lies: NCHW, or channels last (`nhwc` 1: [nimg, hw, C], the GPU path's NHWC
// layout, src/backend/cuda/layout.rs). And the inverse: the (n, ch, p) of offset i.
__device__ __forceinline__ long long elem_at(long long n, long long ch, long long p, int c,
                                             long long hw, int nhwc) {
    return nhwc ? (n * hw + p) * c + ch : (n * c + ch) * hw + p;
}
__device__ __forceinline__ void elem_of(long long i, int c, long long hw, int nhwc, long long* n,
                                        long long* ch, long long* p) {
    if (nhwc) {
        *ch = i % c;
        *p = (i / c) % hw;
        *n = i / c / hw;
    } else {
        *p = i % hw;
        *ch = (i / hw) % c;
        *n = i / hw / c;
    }
}
