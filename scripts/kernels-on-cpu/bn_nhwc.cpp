// Channels-last batch norm (kernels/bn_nhwc.cu): the 16-byte vector kernels (`bn_nhwc_wide_*`)
// against the pair kernels (checked on GPUs against the CPU), each launched as
// src/backend/cuda/bn/grid.rs launches it: the outputs, inference and the input gradient bit for
// bit (the same formula per element), the statistics' and gradient sums (other parts, another
// order) within double's rounding; f32 and bf16, several channel counts, each activation.
#include "shim.h"
#include "k_bn_nhwc.h"
#include <algorithm>
#include <cstdio>
#include <random>

typedef unsigned short b16;

struct Cfg {
    dim3 grid, block;
    int parts;
};
// grid.rs: nhwc_block, then parts (the sums) or spread (the kernels that only read sums)
Cfg cfg(int v, int unroll, int c, long rows, bool sums) {
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

#define PAIRS(op) [&](auto... a) { if constexpr (sizeof(T) == 4) k::bn_nhwc_##op##_f32(a...); else k::bn_nhwc_##op##_bf16(a...); }
#define WIDE(op) [&](auto... a) { if constexpr (sizeof(T) == 4) k::bn_nhwc_wide_##op##_f32(a...); else k::bn_nhwc_wide_##op##_bf16(a...); }

template <typename T>
void one(int nimg, int c, int hw, std::mt19937& g) {
    const int VW = 16 / sizeof(T);
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
    Cfg ps = cfg(2, 8, c, rows, true), ws = cfg(VW, 4, c, rows, true);
    Cfg pe = cfg(2, 8, c, rows, false), we = cfg(VW, 4, c, rows, false);
    std::string bad;
    {
        std::vector<double> pp((size_t)ps.parts * 2 * c), pw((size_t)ws.parts * 2 * c);
        run(ps, [&] { PAIRS(moments)(pp.data(), x.data(), nimg, c, hw); });
        run(ws, [&] { WIDE(moments)(pw.data(), x.data(), nimg, c, hw); });
        if (!close(fold(pp, ps.parts, 2 * c), fold(pw, ws.parts, 2 * c), 1e-12)) bad += " moments";
    }
    for (int centred = 0; centred < 2; ++centred) {
        std::vector<double> centre(c);
        for (int i = 0; i < c; ++i) centre[i] = 0.3 * rows + i;
        std::vector<double> pp((size_t)ps.parts * c), pw((size_t)ws.parts * c);
        double nn = (double)rows;
        run(ps, [&] { PAIRS(sums)(pp.data(), x.data(), centre.data(), centred, nn, nimg, c, hw); });
        run(ws, [&] { WIDE(sums)(pw.data(), x.data(), centre.data(), centred, nn, nimg, c, hw); });
        if (!close(fold(pp, ps.parts, c), fold(pw, ws.parts, c), 1e-12)) bad += " sums";
    }
    for (int act = 0; act < 3; ++act) {
        std::vector<T> op(n), ow(n);
        run(pe, [&] { PAIRS(apply)(op.data(), x.data(), saved.data(), weight.data(), bias.data(), nimg, c, hw, act); });
        run(we, [&] { WIDE(apply)(ow.data(), x.data(), saved.data(), weight.data(), bias.data(), nimg, c, hw, act); });
        if (!same(op, ow)) bad += " apply";
        float eps = 1e-5f;
        run(pe, [&] { PAIRS(eval)(op.data(), x.data(), running.data(), weight.data(), bias.data(), nimg, c, hw, eps, act); });
        run(we, [&] { WIDE(eval)(ow.data(), x.data(), running.data(), weight.data(), bias.data(), nimg, c, hw, eps, act); });
        if (!same(op, ow)) bad += " eval";
        std::vector<double> gp((size_t)ps.parts * 2 * c), gw((size_t)ws.parts * 2 * c);
        run(ps, [&] { PAIRS(grad_sums)(gp.data(), dout.data(), x.data(), saved.data(), weight.data(), bias.data(), nimg, c, hw, act); });
        run(ws, [&] { WIDE(grad_sums)(gw.data(), dout.data(), x.data(), saved.data(), weight.data(), bias.data(), nimg, c, hw, act); });
        if (!close(fold(gp, ps.parts, 2 * c), fold(gw, ws.parts, 2 * c), 1e-11)) bad += " grad_sums";
        float nf = (float)rows;
        run(pe, [&] { PAIRS(backward_dx)(op.data(), dout.data(), x.data(), saved.data(), weight.data(), bias.data(), total.data(), nf, nimg, c, hw, act); });
        run(we, [&] { WIDE(backward_dx)(ow.data(), dout.data(), x.data(), saved.data(), weight.data(), bias.data(), total.data(), nf, nimg, c, hw, act); });
        if (!same(op, ow)) bad += " backward_dx";
    }
    char what[200];
    snprintf(what, sizeof what, "channels-last batch norm %s %dx%dx%d, %d-channel vectors = pairs%s%s", sizeof(T) == 4 ? "f32" : "bf16", nimg, c, hw, VW, bad.empty() ? "" : ": differ in", bad.c_str());
    verdict(bad.empty(), what);
}

int main() {
    std::mt19937 g(4);
    one<float>(3, 8, 37, g);
    one<float>(2, 24, 300, g);   // several parts
    one<float>(4, 64, 50, g);
    one<float>(2, 1032, 5, g);   // 258 vectors over 9 blocks of 29 lanes
    one<b16>(3, 16, 37, g);
    one<b16>(2, 24, 300, g);
    one<b16>(4, 64, 50, g);
    one<b16>(2, 136, 9, g);
    return g_failed != 0;
}
