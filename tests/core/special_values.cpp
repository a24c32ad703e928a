// core::exp over the special values a kernel may meet under a mask or in a
// masked vocabulary (NaN, ±inf, ±1e300): the documented limits, and no
// undefined behaviour on the way (the fuzz targets' findings F5 and F7,
// tests/fuzz/FINDINGS.md). Finite arguments keep xsimd's bits.
#include "support.hpp"

#include <normkit/core/math.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace normkit;

namespace {

// xsimd's exp as it was called before the clamp, flattened for the reason core/math.hpp gives.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
[[gnu::flatten]] core::batch<double> xsimd_exp(const core::batch<double>& x) { return xsimd::exp(x); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace

TEST_CASE("core::exp of double NaN, +-inf and huge arguments: NaN, inf, 0, with xsimd's bits elsewhere",
          "[core][math]") {
    using B = core::batch<double>;
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    const double specials[] = {nan, inf, -inf, 1e300, -1e300, 710.0, -750.0, 709.0, -708.0};
    for (double special : specials) {
        alignas(64) double in[B::size], out[B::size];
        for (std::size_t k = 0; k < B::size; ++k) in[k] = k % 2 ? special : 0.5;
        core::exp(B::load_aligned(in)).store_aligned(out);
        INFO("x = " << special);
        for (std::size_t k = 0; k < B::size; ++k) {
            const double expected = in[k] != in[k] ? nan : std::exp(in[k]);
            if (std::isnan(expected))
                CHECK(std::isnan(out[k]));
            else
                CHECK(out[k] == Approx(expected).epsilon(1e-15));
        }
    }
    // Inside [−750, 710] the clamp changes nothing, nor does the 2^k made from k's bits (without AVX-512 DQ,
    // core/math.hpp): xsimd's own exp, bit for bit, over the range, near its ends, and at the halves of
    // ln 2 where k's rounding turns.
    std::mt19937 generator(5);
    std::uniform_real_distribution<double> uniform(-750.0, 710.0), ends(-12.0, 12.0), tie(-0.5, 0.5);
    for (int trial = 0; trial < 8000; ++trial) {
        alignas(64) double in[B::size], ours[B::size], theirs[B::size];
        for (auto& value : in) {
            switch (trial % 4) {
                case 0:
                    value = uniform(generator);
                    break;
                case 1:
                    value = uniform(generator) / 100;
                    break;
                case 2:
                    value = (trial % 8 == 2 ? 709.0 : -708.0) + ends(generator);
                    break;
                default:
                    value = (std::round(uniform(generator)) + 0.5) * 0.6931471805599453 + tie(generator) * 1e-12;
            }
            value = std::min(710.0, std::max(-750.0, value));
        }
        const auto x = B::load_aligned(in);
        core::exp(x).store_aligned(ours);
        xsimd_exp(x).store_aligned(theirs);
        REQUIRE(std::memcmp(ours, theirs, sizeof ours) == 0);
    }
}
