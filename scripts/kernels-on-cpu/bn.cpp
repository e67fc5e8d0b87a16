// Batch norm's 16-byte vector kernels against the kernels they stand in for (checked on GPUs
// against the CPU), each launched as src/backend/cuda/bn/grid.rs launches it: channels last
// (kernels/bn_nhwc.cu) `bn_nhwc_wide_*` against the pair kernels, NCHW (kernels/bn.cu) `bn_wide_*`
// against one value a thread. The outputs, inference and the input gradient bit for bit (the
// same formula per element), the statistics' and gradient sums (other parts, another order)
// within double's rounding; f32 and bf16, several shapes, each activation.
#include "shim.h"
#include "k_bn.h"
#include "k_bn_nhwc.h"
#include <algorithm>
#include <cstdio>
#include <random>
#include <functional>
#include <string>

typedef unsigned short b16;

struct Cfg {
    dim3 grid, block;
    int parts;
};
// grid.rs: NCHW's parts, one block per (channel, part) of 256 threads
Cfg nchw_cfg(int c, long per_channel) {
    long parts = std::max(1L, std::min((per_channel + 4095) / 4096, 64L));
    return {dim3{(unsigned)c, (unsigned)parts, 1}, dim3{256, 1, 1}, (int)parts};
}
// grid.rs: channels last's nhwc_block, then parts (the sums) or spread (the kernels that only
// read sums), for v channels a thread and `unroll` rows in flight
Cfg nhwc_cfg(int v, int unroll, int c, long rows, bool sums) {
    int groups = std::max(1, (c + v - 1) / v);
    int blocks = (groups + 31) / 32;
    int lanes = (groups + blocks - 1) / blocks;
    int trows = 256 / lanes;
    long parts;
    if (sums) {
        long steps = (rows + trows * unroll - 1) / (trows * unroll);
        parts = std::min(steps, (long)((1024 + blocks - 1) / blocks));
        parts = std::max(1L, std::min(parts, 1024L));
    } else {
        long step = (long)trows * unroll * 4;
        parts = std::max(1L, std::min((rows + step - 1) / step, 65535L));
    }
    return {dim3{(unsigned)blocks, (unsigned)parts, 1}, dim3{(unsigned)lanes, (unsigned)trows, 1},
            (int)parts};
}

std::vector<double> fold(const std::vector<double>& partial, int parts, int len) {
    std::vector<double> s(len, 0.0);
    for (int p = 0; p < parts; ++p)
        for (int j = 0; j < len; ++j) s[j] += partial[(size_t)p * len + j];
    return s;
}
bool close(const std::vector<double>& a, const std::vector<double>& b, double tol) {
    for (size_t i = 0; i < a.size(); ++i)
        if (std::fabs(a[i] - b[i]) > tol * (1.0 + std::fabs(b[i]))) return false;
    return true;
}

// One set of batch-norm kernels (a layout and width) with its launches.
template <typename T>
struct Set {
    std::function<void(double*, const T*, const double*, int, double, int, int, int)> sums;
    std::function<void(double*, const T*, int, int, int)> moments;
    std::function<void(T*, const T*, const float*, const float*, const float*, int, int, int, int)> apply;
    std::function<void(T*, const T*, const float*, const float*, const float*, int, int, int, float, int)> eval;
    std::function<void(double*, const T*, const T*, const float*, const float*, const float*, int, int, int, int)> grad_sums;
    std::function<void(T*, const T*, const T*, const float*, const float*, const float*, const double*, float, int, int, int, int)> backward_dx;
    Cfg summing, reading;
};

// The six kernels `pre{op}_{ty}` of namespace ns (knchw: bn.cu, knhwc: bn_nhwc.cu), launched
// with `summing` and `reading`.
#define SET(ns, pre, ty, summing, reading)                                                   \
    {[](auto... a) { ns::pre##sums_##ty(a...); },                                             \
     [](auto... a) { ns::pre##moments_##ty(a...); },                                          \
     [](auto... a) { ns::pre##apply_##ty(a...); },                                            \
     [](auto... a) { ns::pre##eval_##ty(a...); },                                             \
     [](auto... a) { ns::pre##grad_sums_##ty(a...); },                                        \
     [](auto... a) { ns::pre##backward_dx_##ty(a...); },                                      \
     summing,                                                                                 \
     reading}

template <typename T>
void compare(const char* label, int nimg, int c, int hw, Set<T> one, Set<T> wide, std::mt19937& g) {
    long rows = (long)nimg * hw;
    size_t n = rows * c;
    std::normal_distribution<float> nd(0.3f, 1.5f);
    std::vector<T> x(n), dout(n);
    for (auto& v : x) v = put<T>(nd(g));
    for (auto& v : dout) v = put<T>(nd(g) - 0.3f);
    std::vector<float> weight(c), bias(c), saved(2 * c), running(2 * c);
    for (int i = 0; i < c; ++i) {
        weight[i] = 1.0f + 0.01f * i;
        bias[i] = 0.1f - 0.002f * i;
        saved[i] = 0.2f + 0.01f * i;
        saved[c + i] = 0.8f + 0.003f * i;
        running[i] = 0.1f * i;
        running[c + i] = 1.0f + 0.05f * i;
    }
    std::vector<double> total(2 * c);
    for (int i = 0; i < 2 * c; ++i) total[i] = 3.0 * i - 7.5;
    auto run = [&](Cfg k, auto f) { launch(k.grid, k.block, f); };
    std::string bad;
    {
        std::vector<double> po((size_t)one.summing.parts * 2 * c), pw((size_t)wide.summing.parts * 2 * c);
        run(one.summing, [&] { one.moments(po.data(), x.data(), nimg, c, hw); });
        run(wide.summing, [&] { wide.moments(pw.data(), x.data(), nimg, c, hw); });
        if (!close(fold(po, one.summing.parts, 2 * c), fold(pw, wide.summing.parts, 2 * c), 1e-12)) bad += " moments";
    }
    for (int centred = 0; centred < 2; ++centred) {
        std::vector<double> centre(c);
        for (int i = 0; i < c; ++i) centre[i] = 0.3 * rows + i;
        std::vector<double> po((size_t)one.summing.parts * c), pw((size_t)wide.summing.parts * c);
        double nn = (double)rows;
        run(one.summing, [&] { one.sums(po.data(), x.data(), centre.data(), centred, nn, nimg, c, hw); });
        run(wide.summing, [&] { wide.sums(pw.data(), x.data(), centre.data(), centred, nn, nimg, c, hw); });
        if (!close(fold(po, one.summing.parts, c), fold(pw, wide.summing.parts, c), 1e-12)) bad += " sums";
    }
    for (int act = 0; act < 3; ++act) {
        std::vector<T> oo(n), ow(n);
        run(one.reading, [&] { one.apply(oo.data(), x.data(), saved.data(), weight.data(), bias.data(), nimg, c, hw, act); });
        run(wide.reading, [&] { wide.apply(ow.data(), x.data(), saved.data(), weight.data(), bias.data(), nimg, c, hw, act); });
        if (!same(oo, ow)) bad += " apply";
        float eps = 1e-5f;
        run(one.reading, [&] { one.eval(oo.data(), x.data(), running.data(), weight.data(), bias.data(), nimg, c, hw, eps, act); });
        run(wide.reading, [&] { wide.eval(ow.data(), x.data(), running.data(), weight.data(), bias.data(), nimg, c, hw, eps, act); });
        if (!same(oo, ow)) bad += " eval";
        std::vector<double> go((size_t)one.summing.parts * 2 * c), gw((size_t)wide.summing.parts * 2 * c);
        run(one.summing, [&] { one.grad_sums(go.data(), dout.data(), x.data(), saved.data(), weight.data(), bias.data(), nimg, c, hw, act); });
        run(wide.summing, [&] { wide.grad_sums(gw.data(), dout.data(), x.data(), saved.data(), weight.data(), bias.data(), nimg, c, hw, act); });
        if (!close(fold(go, one.summing.parts, 2 * c), fold(gw, wide.summing.parts, 2 * c), 1e-11)) bad += " grad_sums";
        float nf = (float)rows;
        run(one.reading, [&] { one.backward_dx(oo.data(), dout.data(), x.data(), saved.data(), weight.data(), bias.data(), total.data(), nf, nimg, c, hw, act); });
        run(wide.reading, [&] { wide.backward_dx(ow.data(), dout.data(), x.data(), saved.data(), weight.data(), bias.data(), total.data(), nf, nimg, c, hw, act); });
        if (!same(oo, ow)) bad += " backward_dx";
    }
    char what[240];
    snprintf(what, sizeof what, "%s batch norm %s %dx%dx%d: 16-byte vectors = %s%s%s", label, sizeof(T) == 4 ? "f32" : "bf16", nimg, c, hw, label[0] == 'N' ? "a value a thread" : "pairs", bad.empty() ? "" : "; differ in", bad.c_str());
    verdict(bad.empty(), what);
}

template <typename T>
void nchw(int nimg, int c, int hw, std::mt19937& g) {
    Cfg cf = nchw_cfg(c, (long)nimg * hw);
    if constexpr (sizeof(T) == 4) {
        compare<T>("NCHW", nimg, c, hw, SET(knchw, bn_, f32, cf, cf), SET(knchw, bn_wide_, f32, cf, cf), g);
    } else {
        compare<T>("NCHW", nimg, c, hw, SET(knchw, bn_, bf16, cf, cf), SET(knchw, bn_wide_, bf16, cf, cf), g);
    }
}

template <typename T>
void nhwc(int nimg, int c, int hw, std::mt19937& g) {
    long rows = (long)nimg * hw;
    const int V = 16 / sizeof(T);
    Cfg ps = nhwc_cfg(2, 8, c, rows, true), pr = nhwc_cfg(2, 8, c, rows, false);
    Cfg ws = nhwc_cfg(V, 4, c, rows, true), wr = nhwc_cfg(V, 4, c, rows, false);
    if constexpr (sizeof(T) == 4) {
        compare<T>("channels-last", nimg, c, hw, SET(knhwc, bn_nhwc_, f32, ps, pr), SET(knhwc, bn_nhwc_wide_, f32, ws, wr), g);
    } else {
        compare<T>("channels-last", nimg, c, hw, SET(knhwc, bn_nhwc_, bf16, ps, pr), SET(knhwc, bn_nhwc_wide_, bf16, ws, wr), g);
    }
}

int main() {
    std::mt19937 g(4);
    nhwc<float>(3, 8, 37, g);
    nhwc<float>(2, 24, 300, g);   // several parts
    nhwc<float>(4, 64, 50, g);
    nhwc<float>(2, 1032, 5, g);   // 258 vectors over 9 blocks of 29 lanes
    nhwc<b16>(3, 16, 37, g);
    nhwc<b16>(2, 24, 300, g);
    nhwc<b16>(4, 64, 50, g);
    nhwc<b16>(2, 136, 9, g);
    nchw<float>(3, 5, 64, g);
    nchw<float>(2, 3, 8800, g);   // 5 parts
    nchw<float>(4, 16, 196, g);
    nchw<b16>(3, 5, 64, g);
    nchw<b16>(2, 3, 8800, g);
    nchw<b16>(4, 7, 1024, g);     // 2 parts
    return g_failed != 0;
}
