// The CUDA a kernel of ../../kernels uses, on the CPU: a launch runs one std::thread per thread of
// a block, which walk the grid's blocks together in order, meeting at a barrier after each (so
// `__shared__` is a static, one block's at a time) and at every __syncthreads. No warps, no
// memory model beyond that: enough for kernels that only share through shared memory between
// barriers, as ours do. Compiled with g++/clang++ -std=c++17 by ./run.
#pragma once
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

struct Barrier {
    std::mutex m;
    std::condition_variable cv;
    unsigned n = 0, waiting = 0, gen = 0;
    void wait() {
        std::unique_lock<std::mutex> l(m);
        unsigned g = gen;
        if (++waiting == n) {
            waiting = 0;
            ++gen;
            cv.notify_all();
        } else {
            cv.wait(l, [&] { return gen != g; });
        }
    }
};
inline Barrier g_barrier;
inline void __syncthreads() { g_barrier.wait(); }

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static

struct float2 {
    float x, y;
};
struct float4 {
    float x, y, z, w;
};
struct uint4 {
    unsigned int x, y, z, w;
};
inline float2 make_float2(float a, float b) { return {a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }

inline unsigned int __float_as_uint(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}
inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline float __int_as_float(int i) {
    float f;
    memcpy(&f, &i, 4);
    return f;
}
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
using std::fma;
using std::isnan;
template <typename T>
inline T min(T a, T b) {
    return a < b ? a : b;
}
template <typename T>
inline T max(T a, T b) {
    return a > b ? a : b;
}

// Runs `f` (a kernel call) over grid x block.
inline void launch(dim3 grid, dim3 block, const std::function<void()>& f) {
    gridDim = grid;
    blockDim = block;
    unsigned nt = block.x * block.y * block.z;
    g_barrier.n = nt;
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < nt; ++t) {
        ts.emplace_back([=, &f] {
            threadIdx = {t % block.x, t / block.x % block.y, t / block.x / block.y};
            for (unsigned bz = 0; bz < grid.z; ++bz)
                for (unsigned by = 0; by < grid.y; ++by)
                    for (unsigned bx = 0; bx < grid.x; ++bx) {
                        blockIdx = {bx, by, bz};
                        f();
                        __syncthreads();  // the block's shared memory is the next one's
                    }
        });
    }
    for (auto& t : ts) t.join();
}

// Failures so far, and a line per check.
inline int g_failed = 0;
inline void verdict(bool ok, const char* what) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    g_failed += !ok;
}
template <typename T>
bool same(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// A value of T (float, or bf16 as unsigned short) as f32, and f32 stored as T (bf16: rounded to
// nearest even, as the kernels' st).
template <typename T>
float val(T v) {
    if constexpr (sizeof(T) == 2) return __uint_as_float((unsigned)v << 16); else return v;
}
template <typename T>
T put(float f) {
    if constexpr (sizeof(T) == 2) {
        unsigned b = __float_as_uint(f);
        if ((b & 0x7fffffffu) > 0x7f800000u) return (T)((b >> 16) | 0x40u);
        return (T)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
    } else {
        return f;
    }
}
