// Channels-last depthwise convolution (kernels/depthwise_nhwc.cu) against the NCHW kernels
// (kernels/depthwise.cu, checked against plain loops by depthwise.cpp), each launched as
// src/backend/cuda/dwconv/ launches it: the output and the input gradient bit for bit once moved
// back to NCHW, for one channel a thread and for 16-byte vectors (3x3 windows, whole vectors of
// channels), and with another spread of the pixels over the grid; the weight gradient (other
// parts, another order) within float's rounding of the sums of its terms, for the launch's
// parts and for a few others.
#include "shim.h"
#include "k_dw.h"
#include "k_dwn.h"
#include <algorithm>
#include <cstdio>
#include <random>

// nhwc.rs's launches: launch::channel_blocks, then spread (no sums) or parts (the weight
// gradient).
struct Cfg {
    unsigned blocks, lanes, rows;
};
Cfg blocks_of(int c, int v) {
    int groups = std::max(1, (c + v - 1) / v);
    int blocks = (groups + 31) / 32;
    int lanes = (groups + blocks - 1) / blocks;
    return {(unsigned)blocks, (unsigned)lanes, (unsigned)(256 / lanes)};
}
unsigned spread(Cfg k, long pixels) {
    return (unsigned)std::max(1L, std::min((pixels + k.rows * 4 - 1) / (k.rows * 4), 65535L));
}
unsigned parts_of(Cfg k, long pixels) {
    long by_size = (pixels + k.rows * 4 - 1) / (k.rows * 4);
    long by_blocks = (1024 + k.blocks - 1) / k.blocks;
    return (unsigned)std::max(1L, std::min(std::min(by_size, by_blocks), 256L));
}

// [b, c, hw] NCHW -> [b, hw, c], and back.
template <typename T>
std::vector<T> to_nhwc(const std::vector<T>& x, int b, int c, int hw) {
    std::vector<T> y(x.size());
    for (long n = 0; n < b; ++n)
        for (long ch = 0; ch < c; ++ch)
            for (long p = 0; p < hw; ++p) y[(n * hw + p) * c + ch] = x[(n * c + ch) * hw + p];
    return y;
}
template <typename T>
std::vector<T> to_nchw(const std::vector<T>& y, int b, int c, int hw) {
    std::vector<T> x(y.size());
    for (long n = 0; n < b; ++n)
        for (long ch = 0; ch < c; ++ch)
            for (long p = 0; p < hw; ++p) x[(n * c + ch) * hw + p] = y[(n * hw + p) * c + ch];
    return x;
}

template <typename T>
void one(int b, int c, int h, int w, int k, int s, int p, std::mt19937& g) {
    constexpr bool F = sizeof(T) == 4;
    int oh = (h + 2 * p - k) / s + 1, ow = (w + 2 * p - k) / s + 1;
    size_t nin = (size_t)b * c * h * w, nout = (size_t)b * c * oh * ow, kk = (size_t)c * k * k;
    std::normal_distribution<float> nd;
    std::vector<T> x(nin), dy(nout);
    for (auto& v : x) v = put<T>(nd(g));
    for (auto& v : dy) v = put<T>(nd(g));
    std::vector<float> wt(kk), bias(c), dw0(kk);
    for (auto& v : wt) v = nd(g);
    for (auto& v : bias) v = nd(g);
    for (auto& v : dw0) v = nd(g);
    // the NCHW kernels' output and input gradient; the weight gradient's sums in double
    dim3 blk{256, 1, 1}, grid{4, 1, 1};
    std::vector<T> ro(nout), rdx(nin);
    launch(grid, blk, [&] { if constexpr (F) k32::dwconv_forward_f32(ro.data(), x.data(), wt.data(), bias.data(), 1, b, c, h, w, k, s, p, oh, ow); else k32::dwconv_forward_bf16(ro.data(), x.data(), wt.data(), bias.data(), 1, b, c, h, w, k, s, p, oh, ow); });
    launch(grid, blk, [&] { if constexpr (F) k32::dwconv_backward_input_f32(rdx.data(), dy.data(), wt.data(), b, c, h, w, k, s, p, oh, ow); else k32::dwconv_backward_input_bf16(rdx.data(), dy.data(), wt.data(), b, c, h, w, k, s, p, oh, ow); });
    std::vector<double> rdw(dw0.begin(), dw0.end()), rabs(kk);
    for (long pl = 0; pl < (long)b * c; ++pl)
        for (long oy = 0; oy < oh; ++oy)
            for (long ox = 0; ox < ow; ++ox)
                for (int t = 0; t < k * k; ++t) {
                    long iy = oy * s + t / k - p, ix = ox * s + t % k - p;
                    if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                    double term = (double)val(dy[pl * oh * ow + oy * ow + ox]) * val(x[pl * h * w + iy * w + ix]);
                    rdw[pl % c * k * k + t] += term;
                    rabs[pl % c * k * k + t] += std::fabs(term);
                }
    std::vector<T> xn = to_nhwc(x, b, c, h * w), dyn = to_nhwc(dy, b, c, oh * ow);
    int vec = F ? 4 : 8;
    bool wide_fits = k == 3 && c % vec == 0;
    for (int wide = 0; wide <= (wide_fits ? 1 : 0); ++wide) {
        Cfg kc = blocks_of(c, wide ? vec : 1);
        dim3 blkn{kc.lanes, kc.rows, 1};
        bool ok = true;
        for (unsigned gy : {spread(kc, (long)b * oh * ow), 1u, 3u}) {
            std::vector<T> o(nout, put<T>(NAN));
            dim3 gr{kc.blocks, gy, 1};
            launch(gr, blkn, [&] {
                if (wide) { if constexpr (F) kn::dwconv_nhwc_wide3_forward_f32(o.data(), xn.data(), wt.data(), bias.data(), 1, b, c, h, w, k, s, p, oh, ow); else kn::dwconv_nhwc_wide3_forward_bf16(o.data(), xn.data(), wt.data(), bias.data(), 1, b, c, h, w, k, s, p, oh, ow); }
                else { if constexpr (F) kn::dwconv_nhwc_forward_f32(o.data(), xn.data(), wt.data(), bias.data(), 1, b, c, h, w, k, s, p, oh, ow); else kn::dwconv_nhwc_forward_bf16(o.data(), xn.data(), wt.data(), bias.data(), 1, b, c, h, w, k, s, p, oh, ow); }
            });
            ok &= same(to_nchw(o, b, c, oh * ow), ro);
        }
        for (unsigned gy : {spread(kc, (long)b * h * w), 1u, 3u}) {
            std::vector<T> d(nin, put<T>(NAN));
            dim3 gr{kc.blocks, gy, 1};
            launch(gr, blkn, [&] {
                if (wide) { if constexpr (F) kn::dwconv_nhwc_wide3_backward_input_f32(d.data(), dyn.data(), wt.data(), b, c, h, w, k, s, p, oh, ow); else kn::dwconv_nhwc_wide3_backward_input_bf16(d.data(), dyn.data(), wt.data(), b, c, h, w, k, s, p, oh, ow); }
                else { if constexpr (F) kn::dwconv_nhwc_backward_input_f32(d.data(), dyn.data(), wt.data(), b, c, h, w, k, s, p, oh, ow); else kn::dwconv_nhwc_backward_input_bf16(d.data(), dyn.data(), wt.data(), b, c, h, w, k, s, p, oh, ow); }
            });
            ok &= same(to_nchw(d, b, c, h * w), rdx);
        }
        double worst = 0.0;
        unsigned launched = parts_of(kc, (long)b * oh * ow);
        for (unsigned parts : {launched, 1u, 5u}) {
            std::vector<float> partial((size_t)parts * kk, NAN), dw = dw0;
            dim3 gr{kc.blocks, parts, 1};
            launch(gr, blkn, [&] {
                if (wide) { if constexpr (F) kn::dwconv_nhwc_wide3_weight_parts_f32(partial.data(), dyn.data(), xn.data(), b, c, h, w, k, s, p, oh, ow); else kn::dwconv_nhwc_wide3_weight_parts_bf16(partial.data(), dyn.data(), xn.data(), b, c, h, w, k, s, p, oh, ow); }
                else { if constexpr (F) kn::dwconv_nhwc_weight_parts_f32(partial.data(), dyn.data(), xn.data(), b, c, h, w, k, s, p, oh, ow); else kn::dwconv_nhwc_weight_parts_bf16(partial.data(), dyn.data(), xn.data(), b, c, h, w, k, s, p, oh, ow); }
            });
            launch(dim3{2, 1, 1}, blk, [&] { k32::dwconv_weight_sum_f32(dw.data(), partial.data(), parts, (int)kk); });
            for (size_t i = 0; i < kk; ++i) {
                double e = std::fabs(dw[i] - rdw[i]) / (rabs[i] + std::fabs(dw0[i]) + 1e-30);
                if (!(e <= worst)) worst = e;  // a NaN (an unwritten part) stays
            }
        }
        ok &= worst < 1e-6;  // (false for NaN)
        char what[220];
        snprintf(what, sizeof what, "depthwise nhwc %s %s %dx%dx%dx%d k%d s%d p%d (%u lanes x %u rows, %u parts; weight gradient worst %.1e)", F ? "f32" : "bf16", wide ? "wide3" : "one", b, c, h, w, k, s, p, kc.lanes, kc.rows, launched, worst);
        verdict(ok, what);
    }
}

int main() {
    std::mt19937 g(5);
    one<float>(2, 3, 7, 6, 3, 1, 1, g);
    one<float>(2, 8, 7, 6, 3, 1, 1, g);
    one<float>(2, 16, 9, 9, 3, 2, 1, g);
    one<float>(3, 12, 5, 6, 3, 1, 0, g);
    one<float>(1, 4, 9, 9, 5, 2, 2, g);
    one<float>(2, 3, 4, 5, 1, 1, 0, g);
    one<float>(3, 2, 5, 6, 2, 2, 0, g);
    one<float>(4, 32, 16, 16, 3, 1, 1, g);
    one<float>(2, 264, 4, 4, 3, 1, 1, g);  // 66 vectors: 3 blocks of 22 lanes
    one<unsigned short>(2, 8, 7, 6, 3, 1, 1, g);
    one<unsigned short>(2, 16, 9, 9, 3, 2, 1, g);
    one<unsigned short>(2, 40, 13, 11, 3, 2, 1, g);
    one<unsigned short>(2, 12, 8, 8, 3, 1, 1, g);
    one<unsigned short>(1, 8, 9, 9, 5, 2, 2, g);
    one<unsigned short>(2, 264, 4, 4, 3, 1, 1, g);  // 33 vectors: 2 blocks, one lane idle
    return g_failed != 0;
}
