// NCHW batch norm (kernels/bn.cu): the kernels that load a 16-byte vector of a plane at once
// (`bn_wide_*`) against those that load one value (checked on GPUs against the CPU), each
// launched as src/backend/cuda/bn/grid.rs launches it: the outputs, inference and the input
// gradient bit for bit (the same formula per element), the statistics' and gradient sums (other
// threads' shares, another order) within double's rounding; f32 and bf16, planes of one part and
// of several, each activation.
#include "shim.h"
#include "k_bn.h"
#include <algorithm>
#include <cstdio>
#include <random>

typedef unsigned short b16;

struct Cfg {
    dim3 grid, block;
    int parts;
};
// grid.rs: NCHW's parts, one block per (channel, part) of 256 threads
Cfg cfg(int c, long per_channel) {
    long parts = std::max(1L, std::min((per_channel + 4095) / 4096, 64L));
    return {dim3{(unsigned)c, (unsigned)parts, 1}, dim3{256, 1, 1}, (int)parts};
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

#define ONE(op) [&](auto... a) { if constexpr (sizeof(T) == 4) k::bn_##op##_f32(a...); else k::bn_##op##_bf16(a...); }
#define WIDE(op) [&](auto... a) { if constexpr (sizeof(T) == 4) k::bn_wide_##op##_f32(a...); else k::bn_wide_##op##_bf16(a...); }

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
    Cfg ps = cfg(c, rows), ws = ps, pe = ps, we = ps;
    std::string bad;
    {
        std::vector<double> pp((size_t)ps.parts * 2 * c), pw((size_t)ws.parts * 2 * c);
        run(ps, [&] { ONE(moments)(pp.data(), x.data(), nimg, c, hw); });
        run(ws, [&] { WIDE(moments)(pw.data(), x.data(), nimg, c, hw); });
        if (!close(fold(pp, ps.parts, 2 * c), fold(pw, ws.parts, 2 * c), 1e-12)) bad += " moments";
    }
    for (int centred = 0; centred < 2; ++centred) {
        std::vector<double> centre(c);
        for (int i = 0; i < c; ++i) centre[i] = 0.3 * rows + i;
        std::vector<double> pp((size_t)ps.parts * c), pw((size_t)ws.parts * c);
        double nn = (double)rows;
        run(ps, [&] { ONE(sums)(pp.data(), x.data(), centre.data(), centred, nn, nimg, c, hw); });
        run(ws, [&] { WIDE(sums)(pw.data(), x.data(), centre.data(), centred, nn, nimg, c, hw); });
        if (!close(fold(pp, ps.parts, c), fold(pw, ws.parts, c), 1e-12)) bad += " sums";
    }
    for (int act = 0; act < 3; ++act) {
        std::vector<T> op(n), ow(n);
        run(pe, [&] { ONE(apply)(op.data(), x.data(), saved.data(), weight.data(), bias.data(), nimg, c, hw, act); });
        run(we, [&] { WIDE(apply)(ow.data(), x.data(), saved.data(), weight.data(), bias.data(), nimg, c, hw, act); });
        if (!same(op, ow)) bad += " apply";
        float eps = 1e-5f;
        run(pe, [&] { ONE(eval)(op.data(), x.data(), running.data(), weight.data(), bias.data(), nimg, c, hw, eps, act); });
        run(we, [&] { WIDE(eval)(ow.data(), x.data(), running.data(), weight.data(), bias.data(), nimg, c, hw, eps, act); });
        if (!same(op, ow)) bad += " eval";
        std::vector<double> gp((size_t)ps.parts * 2 * c), gw((size_t)ws.parts * 2 * c);
        run(ps, [&] { ONE(grad_sums)(gp.data(), dout.data(), x.data(), saved.data(), weight.data(), bias.data(), nimg, c, hw, act); });
        run(ws, [&] { WIDE(grad_sums)(gw.data(), dout.data(), x.data(), saved.data(), weight.data(), bias.data(), nimg, c, hw, act); });
        if (!close(fold(gp, ps.parts, 2 * c), fold(gw, ws.parts, 2 * c), 1e-11)) bad += " grad_sums";
        float nf = (float)rows;
        run(pe, [&] { ONE(backward_dx)(op.data(), dout.data(), x.data(), saved.data(), weight.data(), bias.data(), total.data(), nf, nimg, c, hw, act); });
        run(we, [&] { WIDE(backward_dx)(ow.data(), dout.data(), x.data(), saved.data(), weight.data(), bias.data(), total.data(), nf, nimg, c, hw, act); });
        if (!same(op, ow)) bad += " backward_dx";
    }
    char what[200];
    snprintf(what, sizeof what, "NCHW batch norm %s %dx%dx%d, %d-value vectors = one by one%s%s", sizeof(T) == 4 ? "f32" : "bf16", nimg, c, hw, VW, bad.empty() ? "" : ": differ in", bad.c_str());
    verdict(bad.empty(), what);
}

int main() {
    std::mt19937 g(5);
    one<float>(3, 5, 64, g);
    one<float>(2, 3, 8800, g);  // 5 parts
    one<float>(4, 16, 196, g);
    one<b16>(3, 5, 64, g);
    one<b16>(2, 3, 8800, g);
    one<b16>(4, 7, 1024, g);    // 2 parts
    return g_failed != 0;
}
