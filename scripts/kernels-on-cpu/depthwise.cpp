// Depthwise convolution (kernels/depthwise.cu) against plain loops (nn::depthwise's order: the
// bias, then the taps in (ky, kx) order; the input gradient gathered in the same order), bit for
// bit forward and input gradient, the weight gradient within float's rounding of its sums (the
// one-pass 3x3 kernel's parts, the per-tap kernel otherwise); and the 64-bit index path (SMALL 0)
// against the 32-bit one, bit for bit.
#include "shim.h"
#include "k_dw.h"
#include "k_dw64.h"
#include <cstdio>
#include <random>

template <typename T>
void one(int b, int c, int h, int w, int k, int s, int p, std::mt19937& g) {
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
    // the reference
    std::vector<T> ro(nout), rdx(nin);
    std::vector<double> rdw(dw0.begin(), dw0.end()), rabs(kk);
    for (long pl = 0; pl < (long)b * c; ++pl) {
        long ch = pl % c;
        for (long oy = 0; oy < oh; ++oy)
            for (long ox = 0; ox < ow; ++ox) {
                float acc = bias[ch];
                float d = val(dy[pl * oh * ow + oy * ow + ox]);
                for (int ky = 0; ky < k; ++ky)
                    for (int kx = 0; kx < k; ++kx) {
                        long iy = oy * s + ky - p, ix = ox * s + kx - p;
                        if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                        float xv = val(x[pl * h * w + iy * w + ix]);
                        acc += wt[ch * k * k + ky * k + kx] * xv;
                        rdw[ch * k * k + ky * k + kx] += (double)d * xv;
                        rabs[ch * k * k + ky * k + kx] += std::fabs((double)d * xv);
                    }
                ro[pl * oh * ow + oy * ow + ox] = put<T>(acc);
            }
        for (long y = 0; y < h; ++y)
            for (long xx = 0; xx < w; ++xx) {
                float acc = 0.0f;
                for (int ky = 0; ky < k; ++ky) {
                    long ty = y + p - ky;
                    if (ty < 0 || ty % s || ty / s >= oh) continue;
                    for (int kx = 0; kx < k; ++kx) {
                        long tx = xx + p - kx;
                        if (tx < 0 || tx % s || tx / s >= ow) continue;
                        acc += wt[ch * k * k + ky * k + kx] * val(dy[pl * oh * ow + ty / s * ow + tx / s]);
                    }
                }
                rdx[pl * h * w + y * w + xx] = put<T>(acc);
            }
    }
    dim3 grid{3, 1, 1}, blk{256, 1, 1};
    std::vector<T> o32(nout), o64(nout), d32(nin), d64(nin);
    launch(grid, blk, [&] { if constexpr (sizeof(T) == 4) k32::dwconv_forward_f32(o32.data(), x.data(), wt.data(), bias.data(), 1, b, c, h, w, k, s, p, oh, ow); else k32::dwconv_forward_bf16(o32.data(), x.data(), wt.data(), bias.data(), 1, b, c, h, w, k, s, p, oh, ow); });
    launch(grid, blk, [&] { if constexpr (sizeof(T) == 4) k64::dwconv_forward_f32(o64.data(), x.data(), wt.data(), bias.data(), 1, b, c, h, w, k, s, p, oh, ow); else k64::dwconv_forward_bf16(o64.data(), x.data(), wt.data(), bias.data(), 1, b, c, h, w, k, s, p, oh, ow); });
    launch(grid, blk, [&] { if constexpr (sizeof(T) == 4) k32::dwconv_backward_input_f32(d32.data(), dy.data(), wt.data(), b, c, h, w, k, s, p, oh, ow); else k32::dwconv_backward_input_bf16(d32.data(), dy.data(), wt.data(), b, c, h, w, k, s, p, oh, ow); });
    launch(grid, blk, [&] { if constexpr (sizeof(T) == 4) k64::dwconv_backward_input_f32(d64.data(), dy.data(), wt.data(), b, c, h, w, k, s, p, oh, ow); else k64::dwconv_backward_input_bf16(d64.data(), dy.data(), wt.data(), b, c, h, w, k, s, p, oh, ow); });
    bool ok = same(o32, o64) && same(d32, d64) && same(o32, ro) && same(d32, rdx);
    // the weight gradient as src/backend/cuda/dwconv.rs launches it
    std::vector<float> dw = dw0;
    if (k == 3) {
        int parts = std::max(1, std::min((1024 + c - 1) / c, (b * oh * ow + 1023) / 1024));
        std::vector<float> partial((size_t)parts * c * 9, NAN);
        launch(dim3{(unsigned)c, (unsigned)parts, 1}, blk, [&] { if constexpr (sizeof(T) == 4) k32::dwconv_weight_parts3_f32(partial.data(), dy.data(), x.data(), b, c, h, w, s, p, oh, ow); else k32::dwconv_weight_parts3_bf16(partial.data(), dy.data(), x.data(), b, c, h, w, s, p, oh, ow); });
        launch(dim3{2, 1, 1}, blk, [&] { k32::dwconv_weight_sum_f32(dw.data(), partial.data(), parts, (int)kk); });
    } else {
        launch(dim3{(unsigned)kk, 1, 1}, blk, [&] { if constexpr (sizeof(T) == 4) k32::dwconv_backward_weight_f32(dw.data(), dy.data(), x.data(), b, c, h, w, k, s, p, oh, ow); else k32::dwconv_backward_weight_bf16(dw.data(), dy.data(), x.data(), b, c, h, w, k, s, p, oh, ow); });
    }
    // float sums: an error relative to the sum of the terms' magnitudes
    double worst = 0.0;
    for (size_t i = 0; i < kk; ++i)
        worst = std::max(worst, std::fabs(dw[i] - rdw[i]) / (rabs[i] + std::fabs(dw0[i]) + 1e-30));
    ok &= worst < 1e-6;
    char what[200];
    snprintf(what, sizeof what, "depthwise %s %dx%dx%dx%d k%d s%d p%d (weight gradient %s, worst %.1e)", sizeof(T) == 4 ? "f32" : "bf16", b, c, h, w, k, s, p, k == 3 ? "one pass" : "per tap", worst);
    verdict(ok, what);
}

int main() {
    std::mt19937 g(3);
    one<float>(2, 3, 7, 6, 3, 1, 1, g);
    one<float>(2, 3, 7, 6, 3, 2, 1, g);
    one<float>(3, 2, 5, 6, 2, 2, 0, g);
    one<float>(1, 4, 9, 9, 5, 2, 2, g);
    one<float>(2, 3, 4, 5, 1, 1, 0, g);
    one<float>(8, 4, 40, 40, 3, 1, 1, g);  // 13 parts
    one<float>(6, 5, 33, 35, 3, 2, 1, g);  // 2 parts, the last shorter
    one<unsigned short>(8, 4, 40, 40, 3, 1, 1, g);
    one<unsigned short>(6, 5, 33, 35, 3, 2, 1, g);
    one<float>(3, 2, 12, 12, 3, 1, 0, g);
    return g_failed != 0;
}
