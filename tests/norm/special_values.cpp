// Values the row kernels define at the edge of their range: a constant row
// normalizes to exactly ±1, a huge element is computed (not dropped), a
// one-element LayerNorm row has dx = 0 exactly, and an ε too small for the
// compute type is raised to its smallest normal value (never rounded to 0 or
// left to overflow 1/√ε, which made 0·∞ = NaN of an all-zero row).
#include "methods.hpp"
#include "reference/norm.hpp"
#include "support.hpp"

#include <normkit/norm/derf.hpp>
#include <normkit/norm/dyt.hpp>
#include <normkit/norm/fused_add_rms_norm.hpp>
#include <normkit/norm/l2_norm.hpp>
#include <normkit/norm/layer_norm.hpp>
#include <normkit/norm/qk_norm.hpp>
#include <normkit/norm/rms_norm.hpp>

#include <cstring>
#include <limits>

using namespace normkit;
using namespace normkit::testing;

TEST_CASE("a constant row of 1e6 with w = 1 normalizes to exactly 1 at every length", "[norm][special]") {
    for (index_type n : {index_type(1), index_type(1024), index_type(4096), index_type(16384), index_type(65536)}) {
        INFO("n " << n);
        const index_type rows = 2;
        std::vector<float> x(rows * n, 1e6f), y(rows * n), weight(n, 1.0f), rstd(rows);
        x[n] = -1e6f;  // the second row starts with −1e6: y = −1 there
        norm::rms_norm_forward(view(x.data(), rows, n), weight, view(y.data(), rows, n), rstd);
        CHECK(y[0] == 1.0f);
        CHECK(y[n] == -1.0f);
        CHECK(std::count(y.begin(), y.end(), 1.0f) + std::count(y.begin(), y.end(), -1.0f) ==
              static_cast<long>(y.size()));
        CHECK(rstd[0] == 1e-6f);
        // Fused add: h = x + 0 is the same row.
        std::vector<float> residual(rows * n, 0.0f), fused(rows * n);
        norm::fused_add_rms_norm_forward(view(x.data(), rows, n), weight, view(residual.data(), rows, n),
                                         view(fused.data(), rows, n));
        CHECK(fused == y);
        // Full-width QK-norm over 4 heads of n/4 (OLMo2) is RMSNorm over the row.
        if (n % 4 == 0) {
            std::vector<float> q_out(rows * n), k_out(rows * n);
            const auto heads = view(x.data(), rows * 4, n / 4);
            norm::qk_rms_norm_forward(heads, heads, weight, weight, view(q_out.data(), rows * 4, n / 4),
                                      view(k_out.data(), rows * 4, n / 4), {}, {}, norm::presets::olmo2());
            CHECK(q_out == y);
        }
    }
}

TEST_CASE("layer_norm computes a row with a 3e38 element, as float64 does", "[norm][layer_norm][special]") {
    for (index_type n : {index_type(8), index_type(1000)}) {
        INFO("n " << n);
        std::vector<double> values = random_values(n, 3, 0.0, 1.0);
        values[n / 2] = 3e38;
        const auto x = to_storage<float>(values);
        const auto exact = stored<float>(values);
        std::vector<float> y(n), mean(1), rstd(1);
        norm::layer_norm_forward(view(x.data(), 1, n), {}, {}, view(y.data(), 1, n), mean, rstd);
        std::vector<double> y_ref, mean_ref, rstd_ref;
        reference::layer_norm_forward(exact, {1, n}, {}, {}, 1e-5, y_ref, mean_ref, rstd_ref);
        CHECK(rstd[0] > 0);
        CHECK(std::abs(rstd[0] - rstd_ref[0]) <= 4 * std::abs(rstd_ref[0]) * 0x1p-24);
        CHECK(std::abs(mean[0] - mean_ref[0]) <= 4 * std::abs(mean_ref[0]) * 0x1p-24);
        // x̂ on the scale 1 + |x̂| (the LayerNorm measure of docs/accuracy.md).
        for (index_type j = 0; j < n; ++j) CHECK(std::abs(y[j] - y_ref[j]) <= 4 * (1 + std::abs(y_ref[j])) * 0x1p-24);
    }
}

TEST_CASE("layer_norm of one-element rows has dx exactly 0", "[norm][layer_norm][special]") {
    const index_type rows = 64;
    const auto x = to_storage<float>(random_values(rows, 4, 3.0, 100.0)),
               dy = to_storage<float>(random_values(rows, 5, 0.0, 100.0));
    const auto weight = to_storage<float>(random_values(1, 6, 1.0, 0.5));
    std::vector<float> y(rows), mean(rows), rstd(rows), dx(rows, 1.0f), dweight(1), dbias(1);
    norm::layer_norm_forward(view(x.data(), rows, 1), weight, {}, view(y.data(), rows, 1), mean, rstd);
    norm::layer_norm_backward(view(dy.data(), rows, 1), view(x.data(), rows, 1), weight, view(dx.data(), rows, 1),
                              dweight, dbias, mean, rstd);
    CHECK(std::count(dx.begin(), dx.end(), 0.0f) == rows);
    CHECK(std::count(y.begin(), y.end(), 0.0f) == rows);
}

TEMPLATE_TEST_CASE("an eps below the compute type's range is raised to its smallest normal value",
                   "[norm][special][eps]", float, Eigen::bfloat16, Eigen::half, double) {
    using T = TestType;
    const T zero = core::from_compute<T>(0), three = core::from_compute<T>(3);
    for (double eps : {1e-50, 1e-300}) {
        INFO("eps " << eps);
        std::vector<T> zeros(8, zero), threes(8, three), y(8), residual(8, zero);
        std::vector<T> bias(8, core::from_compute<T>(0.25));
        norm::rms_norm_options rms;
        rms.eps = eps;
        norm::rms_norm_forward(view(zeros.data(), 1, 8), {}, view(y.data(), 1, 8), {}, rms);
        CHECK(to_double(y) == std::vector<double>(8, 0.0));
        norm::fused_add_rms_norm_forward(view(zeros.data(), 1, 8), {}, view(residual.data(), 1, 8),
                                         view(y.data(), 1, 8), {}, rms);
        CHECK(to_double(y) == std::vector<double>(8, 0.0));
        norm::qk_rms_norm_forward(view(zeros.data(), 2, 4), view(zeros.data(), 2, 4), {}, {}, view(y.data(), 2, 4),
                                  view(residual.data(), 2, 4), {}, {}, rms);
        CHECK(to_double(y) == std::vector<double>(8, 0.0));
        norm::layer_norm_options layer;
        layer.eps = eps;
        norm::layer_norm_forward(view(threes.data(), 1, 8), {}, bias, view(y.data(), 1, 8), {}, {}, layer);
        CHECK(to_double(y) == std::vector<double>(8, 0.25));
        norm::l2_norm_options l2;
        l2.eps = eps;
        norm::l2_norm_forward(view(zeros.data(), 1, 8), 1.0, view(y.data(), 1, 8), l2);
        CHECK(to_double(y) == std::vector<double>(8, 0.0));
        // With a gain above 4, g/ε is beyond the compute type: still 0, not 0·inf (the fuzzer's case), and a
        // row whose norm is below ε gives g·x/ε (the norm clamped), finite.
        norm::l2_norm_forward(view(zeros.data(), 1, 8), 30.0, view(y.data(), 1, 8), l2);
        CHECK(to_double(y) == std::vector<double>(8, 0.0));
        norm::qk_l2_norm_forward(view(zeros.data(), 2, 4), view(zeros.data(), 2, 4), 30.0, view(y.data(), 2, 4),
                                 view(residual.data(), 2, 4), l2);
        CHECK(to_double(y) == std::vector<double>(8, 0.0));
        using C = core::compute_t<T>;
        const double smallest = static_cast<double>(std::numeric_limits<C>::min());
        std::vector<T> tiny(8, core::from_compute<T>(static_cast<C>(smallest / 16)));  // ‖x‖ = smallest/16·√8 < ε
        norm::l2_norm_forward(view(tiny.data(), 1, 8), 30.0, view(y.data(), 1, 8), l2);
        const double clamped = std::max(eps, smallest);  // the ε the kernel uses
        for (double value : to_double(y))
            CHECK(value == Approx(30.0 * static_cast<double>(core::to_compute(tiny[0])) / clamped).epsilon(1e-2));
    }
}

TEST_CASE("double DyT and Derf of NaN, infinities and huge inputs are defined", "[norm][special]") {
    // xsimd's double tanh and erf reach an undefined double → int64 conversion for these inputs;
    // core::tanh / erf clamp them (tests/fuzz/FINDINGS.md F9). The sanitize build checks it.
    const std::vector<double> x = {std::numeric_limits<double>::quiet_NaN(), INFINITY, -INFINITY, 3e9, -3e9, 0.5};
    std::vector<double> y(x.size());
    norm::dyt_forward(view(x.data(), 1, 6), 1.0, {}, {}, view(y.data(), 1, 6));
    CHECK(std::isnan(y[0]));
    CHECK(y[1] == 1.0);
    CHECK(y[2] == -1.0);
    CHECK(y[3] == 1.0);
    CHECK(y[4] == -1.0);
    CHECK(std::abs(y[5] - std::tanh(0.5)) < 1e-14);
    norm::derf_forward(view(x.data(), 1, 6), 1.0, 0.0, {}, {}, view(y.data(), 1, 6));
    CHECK(std::isnan(y[0]));
    CHECK(y[1] == 1.0);
    CHECK(y[2] == -1.0);
    CHECK(y[3] == 1.0);
    CHECK(y[4] == -1.0);
    CHECK(std::abs(y[5] - std::erf(0.5)) < 1e-14);
}

// The fuzzer's F16: a bf16 row of x = 8.3e12 with w = −3.0e38 took Σg·x (g = dy·w) in float sums, which
// overflowed to −inf where Σg·x̂ is finite: dx was −inf, the float64 reference 0 (one column) or finite.
TEST_CASE("rms_norm_backward takes Σg·x over x̂ when it overflows the sums' type", "[norm][special]") {
    using bf16 = Eigen::bfloat16;
    for (index_type n : {1, 3, 37}) {
        INFO("n " << n);
        std::vector<bf16> x(n), dy(n), w(n), y(n), dx(n);
        for (index_type j = 0; j < n; ++j) {
            x[j] = bf16(8.34941642e12f * (1.0f + 0.25f * static_cast<float>(j % 3)));
            dy[j] = bf16(-0.00132751465f * (j % 2 ? -1.0f : 1.0f));
            w[j] = bf16(-3.00405527e38f / static_cast<float>(1 + j % 4));
        }
        std::vector<float> rstd(1), dw(n);
        norm::rms_norm_forward(view(x.data(), 1, n), w, view(y.data(), 1, n), rstd);
        norm::rms_norm_backward(view(dy.data(), 1, n), view(x.data(), 1, n), w, view(dx.data(), 1, n), dw, rstd);
        std::vector<double> dx_ref, dw_ref;
        reference::rms_norm_backward(to_double(dy), to_double(x), {1, n}, to_double(w), false, 1e-6, dx_ref, dw_ref);
        double scale = 0;  // r·|dy|·|w|, the size of each term of dx
        for (index_type j = 0; j < n; ++j)
            scale = std::max(scale, static_cast<double>(rstd[0]) * std::abs(static_cast<double>(dy[j])) *
                                        std::abs(static_cast<double>(w[j])));
        for (index_type j = 0; j < n; ++j) {
            CHECK(std::isfinite(static_cast<double>(dx[j])));
            CHECK(std::abs(static_cast<double>(dx[j]) - dx_ref[j]) <= 2e-2 * scale);
        }
        // fused_add_rms_norm's backward takes the same row: with h = x and no incoming residual
        // gradient, its dh is this dx, the fallback included.
        std::vector<bf16> dh(n, bf16(0.0f));
        std::vector<float> dw_fused(n);
        norm::fused_add_rms_norm_backward(view(dy.data(), 1, n), view(x.data(), 1, n), w, view(dh.data(), 1, n),
                                          dw_fused, rstd);
        for (index_type j = 0; j < n; ++j) CHECK(static_cast<float>(dh[j]) == static_cast<float>(dx[j]));
        CHECK(dw_fused == dw);
    }
}

// The rules every row normalization states (docs/api.md §5, docs/errors.md), checked over the one
// list of row methods (tests/norm/methods.hpp): output may be input itself, with the same bits; a
// NaN in one row changes no bit of the others; zero rows write nothing.
TEST_CASE("every registered row method: in place, a NaN row and zero rows", "[norm][special][aliasing]") {
    REQUIRE(row_methods().size() >= 4);
    const auto bits_equal = [](const float* a, const float* b, index_type count) {
        return std::memcmp(a, b, static_cast<std::size_t>(count) * sizeof(float)) == 0;
    };
    for (const auto& method : row_methods()) {
        for (index_type n : {index_type(1), index_type(7), index_type(69), index_type(1030)}) {
            INFO(method.name << " n " << n);
            const index_type rows = 3;
            const auto values = random_values(rows * n, 71, 0.5, 2.0);
            const std::vector<float> x(values.begin(), values.end());
            std::vector<float> y(rows * n);
            method.forward(view(x.data(), rows, n), view(y.data(), rows, n), row_run{});

            std::vector<float> in_place = x;
            method.forward(view(in_place.data(), rows, n), view(in_place.data(), rows, n), row_run{});
            CHECK(bits_equal(in_place.data(), y.data(), rows * n));

            std::vector<float> with_nan = x, y_nan(rows * n);
            with_nan[n + n / 2] = std::numeric_limits<float>::quiet_NaN();
            method.forward(view(with_nan.data(), rows, n), view(y_nan.data(), rows, n), row_run{});
            CHECK(bits_equal(y_nan.data(), y.data(), n));
            CHECK(bits_equal(y_nan.data() + 2 * n, y.data() + 2 * n, n));
            CHECK(std::isnan(y_nan[n + n / 2]));

            std::vector<float> untouched(n, -7.0f);
            method.forward(view(x.data(), 0, n), view(untouched.data(), 0, n), row_run{});
            CHECK(std::all_of(untouched.begin(), untouched.end(), [](float v) { return v == -7.0f; }));
        }
    }
}
