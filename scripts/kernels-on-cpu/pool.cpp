// Max pooling (kernels/pool.cu) against a plain reference (nn::pool's rules: the first maximum in
// row-major order, a NaN wins, the padding never does; the backward scatters each output's
// gradient to its argmax in output order), both layouts, padded and not, f32 and bf16, with
// ties; and the 64-bit index path (SMALL 0) against the 32-bit one, bit for bit.
#include "shim.h"
#include "k_pool.h"
#include "k_pool64.h"
#include <cstdio>
#include <random>

template <typename T>
void one(int nimg, int c, int h, int w, int k, int s, int p, int nhwc, std::mt19937& g) {
    int oh = (h + 2 * p - k) / s + 1, ow = (w + 2 * p - k) / s + 1;
    size_t nin = (size_t)nimg * c * h * w, nout = (size_t)nimg * c * oh * ow;
    std::uniform_int_distribution<int> d(-5, 5);
    std::vector<T> x(nin), dy(nout);
    for (auto& v : x) v = put<T>((float)d(g));
    for (auto& v : dy) v = put<T>((float)d(g) * 0.37f);
    if (nin > 3) x[3] = put<T>(NAN);
    auto at = [&](long n, long ch, long q, long hw) {
        return nhwc ? (n * hw + q) * c + ch : (n * c + ch) * hw + q;
    };
    // the reference
    std::vector<float> ro(nout), rd(nin, 0.0f);
    std::vector<unsigned> ra(nout);
    for (long n = 0; n < nimg; ++n)
        for (long ch = 0; ch < c; ++ch)
            for (long oy = 0; oy < oh; ++oy)
                for (long ox = 0; ox < ow; ++ox) {
                    float best = -INFINITY;
                    long arg = -1;
                    for (long iy = oy * s - p; iy < oy * s - p + k; ++iy)
                        for (long ix = ox * s - p; ix < ox * s - p + k; ++ix) {
                            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                            float v = val(x[at(n, ch, iy * w + ix, (long)h * w)]);
                            if (arg < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
                                best = v;
                                arg = iy * w + ix;
                            }
                        }
                    long o = at(n, ch, oy * ow + ox, (long)oh * ow);
                    ro[o] = val(put<T>(best));
                    ra[o] = (unsigned)arg;
                }
    for (long n = 0; n < nimg; ++n)
        for (long ch = 0; ch < c; ++ch)
            for (long q = 0; q < (long)oh * ow; ++q) {
                long o = at(n, ch, q, (long)oh * ow);
                if (ra[o] != 0xffffffffu) rd[at(n, ch, ra[o], (long)h * w)] += val(dy[o]);
            }
    std::vector<float> rdt(nin);
    for (size_t i = 0; i < nin; ++i) rdt[i] = val(put<T>(rd[i]));
    // the kernels, 32-bit and 64-bit indices
    dim3 grid{3, 1, 1}, blk{64, 1, 1};
    std::vector<T> o32(nout), o64(nout), d32(nin), d64(nin);
    std::vector<unsigned> a32(nout), a64(nout);
    launch(grid, blk, [&] { if constexpr (sizeof(T) == 4) k32::maxpool_padded_forward_f32(o32.data(), a32.data(), x.data(), nimg, c, h, w, k, s, p, oh, ow, nhwc); else k32::maxpool_padded_forward_bf16(o32.data(), a32.data(), x.data(), nimg, c, h, w, k, s, p, oh, ow, nhwc); });
    launch(grid, blk, [&] { if constexpr (sizeof(T) == 4) k64::maxpool_padded_forward_f32(o64.data(), a64.data(), x.data(), nimg, c, h, w, k, s, p, oh, ow, nhwc); else k64::maxpool_padded_forward_bf16(o64.data(), a64.data(), x.data(), nimg, c, h, w, k, s, p, oh, ow, nhwc); });
    launch(grid, blk, [&] { if constexpr (sizeof(T) == 4) k32::maxpool_padded_backward_f32(d32.data(), dy.data(), a32.data(), nimg, c, h, w, k, s, p, oh, ow, nhwc); else k32::maxpool_padded_backward_bf16(d32.data(), dy.data(), a32.data(), nimg, c, h, w, k, s, p, oh, ow, nhwc); });
    launch(grid, blk, [&] { if constexpr (sizeof(T) == 4) k64::maxpool_padded_backward_f32(d64.data(), dy.data(), a64.data(), nimg, c, h, w, k, s, p, oh, ow, nhwc); else k64::maxpool_padded_backward_bf16(d64.data(), dy.data(), a64.data(), nimg, c, h, w, k, s, p, oh, ow, nhwc); });
    bool ok = same(o32, o64) && same(a32, a64) && same(d32, d64) && a32 == ra;
    for (size_t i = 0; ok && i < nout; ++i) ok = same(std::vector<float>{val(o32[i])}, std::vector<float>{ro[i]});
    for (size_t i = 0; ok && i < nin; ++i) ok = val(d32[i]) == rdt[i];
    if (ok && p == 0) {  // the unpadded entry points: the same
        std::vector<T> ou(nout), du(nin);
        std::vector<unsigned> au(nout);
        launch(grid, blk, [&] { if constexpr (sizeof(T) == 4) k32::maxpool_forward_f32(ou.data(), au.data(), x.data(), nimg, c, h, w, k, s, oh, ow, nhwc); else k32::maxpool_forward_bf16(ou.data(), au.data(), x.data(), nimg, c, h, w, k, s, oh, ow, nhwc); });
        launch(grid, blk, [&] { if constexpr (sizeof(T) == 4) k32::maxpool_backward_f32(du.data(), dy.data(), au.data(), nimg, c, h, w, k, s, oh, ow, nhwc); else k32::maxpool_backward_bf16(du.data(), dy.data(), au.data(), nimg, c, h, w, k, s, oh, ow, nhwc); });
        ok = same(ou, o32) && same(au, a32) && same(du, d32);
    }
    char what[160];
    snprintf(what, sizeof what, "max pool %s %dx%dx%dx%d k%d s%d p%d %s", sizeof(T) == 4 ? "f32" : "bf16", nimg, c, h, w, k, s, p, nhwc ? "nhwc" : "nchw");
    verdict(ok, what);
}

int main() {
    std::mt19937 g(1);
    for (int nhwc = 0; nhwc < 2; ++nhwc) {
        one<float>(2, 3, 7, 6, 3, 2, 1, nhwc, g);
        one<float>(2, 2, 5, 5, 3, 1, 1, nhwc, g);
        one<float>(1, 2, 8, 8, 2, 2, 1, nhwc, g);
        one<unsigned short>(2, 4, 9, 11, 3, 2, 1, nhwc, g);
        one<float>(2, 3, 8, 9, 2, 2, 0, nhwc, g);
        one<unsigned short>(3, 5, 10, 7, 3, 1, 0, nhwc, g);
    }
    return g_failed != 0;
}
