// The residual add, its backward and accumulation (kernels/eltwise.cu): their 16-byte vector path
// (every pointer aligned) against their element-by-element path (the same values one element
// off the boundary), bit for bit, over lengths with and without a tail, each activation, each
// mix of written and added gradients, f32 and bf16.
#include "shim.h"
#include "k_eltwise.h"
#include <cstdio>
#include <random>

template <typename T>
std::vector<T> rnd(size_t n, std::mt19937& g) {
    std::vector<T> v(n);
    std::normal_distribution<float> nd(0.f, 4.f);
    for (auto& x : v) {
        float f = nd(g);
        if (g() % 7 == 0) f = 0.f;  // the activations' edges
        if (g() % 11 == 0) f = 6.f;
        x = put<T>(f);
    }
    return v;
}

// The same n values at element `off` of a fresh buffer (std::vector's storage is 16-byte
// aligned: off 0 takes the vectors, off 1 cannot).
template <typename T>
std::vector<T> at(const std::vector<T>& v, int off) {
    std::vector<T> out(v.size() + off);
    std::copy(v.begin(), v.end(), out.begin() + off);
    if ((uintptr_t)out.data() % 16 != 0) {
        printf("a buffer is not 16-byte aligned: the vector path would not be tested\n");
        exit(2);
    }
    return out;
}
template <typename T>
std::vector<T> from(const std::vector<T>& v, int off) {
    return std::vector<T>(v.begin() + off, v.end());
}

template <typename T>
void one(int n, std::mt19937& g) {
    auto a = rnd<T>(n, g), b = rnd<T>(n, g), dout = rnd<T>(n, g), out = rnd<T>(n, g);
    dim3 grid{2, 1, 1}, blk{64, 1, 1};
    const char* ty = sizeof(T) == 4 ? "f32" : "bf16";
    bool ok = true;
    for (int act = 0; act < 3; ++act) {
        std::vector<T> r[2];
        for (int off = 0; off < 2; ++off) {
            auto A = at(a, off), B = at(b, off), O = at(std::vector<T>(n), off);
            launch(grid, blk, [&] { if constexpr (sizeof(T) == 4) k::add_f32(O.data() + off, A.data() + off, B.data() + off, n, act); else k::add_bf16(O.data() + off, A.data() + off, B.data() + off, n, act); });
            r[off] = from(O, off);
        }
        ok &= same(r[0], r[1]);
        for (int m = 0; m < 4; ++m) {
            int add0 = m & 1, add1 = m >> 1;
            std::vector<T> q[2];
            for (int off = 0; off < 2; ++off) {
                auto D0 = at(a, off), D1 = at(b, off), DO = at(dout, off), OU = at(out, off);
                launch(grid, blk, [&] { if constexpr (sizeof(T) == 4) k::add_backward_f32(D0.data() + off, D1.data() + off, DO.data() + off, OU.data() + off, n, act, add0, add1); else k::add_backward_bf16(D0.data() + off, D1.data() + off, DO.data() + off, OU.data() + off, n, act, add0, add1); });
                q[off] = from(D0, off);
                auto d1 = from(D1, off);
                q[off].insert(q[off].end(), d1.begin(), d1.end());
            }
            ok &= same(q[0], q[1]);
        }
    }
    std::vector<T> s[2];
    for (int off = 0; off < 2; ++off) {
        auto A = at(a, off), B = at(b, off);
        launch(grid, blk, [&] { if constexpr (sizeof(T) == 4) k::accumulate_f32(A.data() + off, B.data() + off, n); else k::accumulate_bf16(A.data() + off, B.data() + off, n); });
        s[off] = from(A, off);
    }
    ok &= same(s[0], s[1]);
    char what[120];
    snprintf(what, sizeof what, "add, add backward, accumulate %s n=%d: vectors = elements", ty, n);
    verdict(ok, what);
}

int main() {
    std::mt19937 g(2);
    for (int n : {1, 7, 8, 64, 1003, 4096}) {
        one<float>(n, g);
        one<unsigned short>(n, g);
    }
    return g_failed != 0;
}
