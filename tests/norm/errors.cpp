// The bad-input matrix of the norm module (docs/errors.md): for each public
// function and each kind of bad input, the normkit::error and the words of its
// message, or the documented value. Float storage only (the checks run before
// any arithmetic, once per call, whatever the type).
#include "support.hpp"

#include <normkit/norm/derf.hpp>
#include <normkit/norm/dyt.hpp>
#include <normkit/norm/fused_add_rms_norm.hpp>
#include <normkit/norm/l2_norm.hpp>
#include <normkit/norm/layer_norm.hpp>
#include <normkit/norm/logit_norm.hpp>
#include <normkit/norm/qk_norm.hpp>
#include <normkit/norm/rms_norm.hpp>
#include <normkit/norm/seed_norm.hpp>

#include <cstring>
#include <limits>

using namespace normkit;
using namespace normkit::testing;

namespace {

const double nan_value = std::numeric_limits<double>::quiet_NaN();
const double infinity = std::numeric_limits<double>::infinity();

// 3 × 4 data, a 3 × 5 mismatch, a null 3 × 4 view, a weight of 4 and of 3.
struct data {
    std::vector<float> x = std::vector<float>(12, 0.5f), y = std::vector<float>(12), dy = std::vector<float>(12, 1.0f),
                       dx = std::vector<float>(12), wide = std::vector<float>(15), w = std::vector<float>(4, 1.0f),
                       short_w = std::vector<float>(3, 1.0f), rstd = std::vector<float>(3),
                       mean = std::vector<float>(3), short_rstd = std::vector<float>(2), dw = std::vector<float>(4);
    matrix_view<float> X = view(x.data(), 3, 4), Y = view(y.data(), 3, 4), DY = view(dy.data(), 3, 4),
                       DX = view(dx.data(), 3, 4), WIDE = view(wide.data(), 3, 5);
    matrix_view<float> null = {nullptr, 3, 4, 4};
    data() {
        for (std::size_t k = 0; k < x.size(); ++k) x[k] = 0.25f * static_cast<float>(k % 5) - 0.3f;
    }
};

template <class Options>
Options with_eps(double eps) {
    Options options;
    options.eps = eps;
    return options;
}

}  // namespace

TEST_CASE("errors: the row norms name a mismatched shape, a null input, a short parameter or statistic",
          "[norm][errors]") {
    data d;
    // shape
    require_error_naming([&] { norm::rms_norm_forward(d.X, d.w, d.WIDE); },
                         "output has shape 3x5 but input has shape 3x4");
    require_error_naming([&] { norm::layer_norm_forward(d.X, d.w, d.w, d.WIDE); }, "output has shape 3x5");
    require_error_naming([&] { norm::fused_add_rms_norm_forward(d.X, d.w, d.WIDE, d.Y); }, "residual has shape 3x5");
    require_error_naming([&] { norm::dyt_forward(d.X, 0.5, d.w, d.w, d.WIDE); }, "output has shape 3x5");
    require_error_naming([&] { norm::derf_forward(d.X, 0.5, 0.0, d.w, d.w, d.WIDE); }, "output has shape 3x5");
    require_error_naming([&] { norm::l2_norm_forward(d.X, 1.0, d.WIDE); }, "output has shape 3x5");
    require_error_naming([&] { norm::rms_norm_backward(d.WIDE, d.X, d.w, d.DX, d.dw, d.rstd); },
                         "output_gradient has shape 3x5");
    require_error_naming([&] { norm::rms_norm_backward(d.DY, d.X, d.w, d.WIDE, d.dw, d.rstd); },
                         "input_gradient has shape 3x5");
    require_error_naming([&] { norm::layer_norm_backward(d.DY, d.X, d.w, d.WIDE, d.dw, d.dw, d.mean, d.rstd); },
                         "input_gradient has shape 3x5");
    require_error_naming([&] { norm::l2_norm_backward(d.WIDE, d.X, 1.0, d.DX); }, "output_gradient has shape 3x5");
    require_error_naming([&] { norm::qk_rms_norm_forward(d.X, d.WIDE, d.w, d.w, d.Y, d.WIDE); }, "head_dim");
    // null data
    require_error_naming([&] { norm::rms_norm_forward(d.null, d.w, d.Y); }, "input is null (3x4)");
    require_error_naming([&] { norm::layer_norm_forward(d.null, d.w, d.w, d.Y); }, "input is null");
    require_error_naming([&] { norm::rms_norm_forward(d.X, d.w, d.null); }, "output is null");
    require_error_naming([&] { norm::fused_add_rms_norm_forward(d.X, d.w, d.null, d.Y); }, "residual is null");
    require_error_naming([&] { norm::dyt_forward(d.null, 0.5, {}, {}, d.Y); }, "input is null");
    require_error_naming([&] { norm::l2_norm_forward(d.null, 1.0, d.Y); }, "input is null");
    require_error_naming([&] { norm::qk_l2_norm_forward(d.null, d.X, 1.0, d.Y, d.DX); }, "query is null");
    require_error_naming([&] { view(static_cast<float*>(nullptr), 2, 2); }, "view: null data pointer for a 2x2 matrix");
    // parameters and statistics of the wrong length
    require_error_naming([&] { norm::rms_norm_forward(d.X, d.short_w, d.Y); },
                         "weight has length 3 but the normalized dimension is 4");
    require_error_naming([&] { norm::layer_norm_forward(d.X, d.w, d.short_w, d.Y); }, "bias has length 3");
    require_error_naming([&] { norm::dyt_forward(d.X, 0.5, d.short_w, {}, d.Y); }, "weight has length 3");
    require_error_naming([&] { norm::rms_norm_forward(d.X, d.w, d.Y, d.short_rstd); },
                         "rstd has length 2 but there are 3 rows");
    require_error_naming([&] { norm::layer_norm_forward(d.X, d.w, d.w, d.Y, d.short_rstd, d.rstd); },
                         "mean has length 2");
    require_error_naming([&] { norm::rms_norm_backward(d.DY, d.X, d.w, d.DX, d.short_w, d.rstd); },
                         "weight_gradient has length 3");
    // a backward without the statistics its forward saves
    require_error_naming([&] { norm::rms_norm_backward(d.DY, d.X, d.w, d.DX, d.dw, {}); },
                         "rms_norm_backward needs the rstd saved by the forward");
    require_error_naming([&] { norm::layer_norm_backward(d.DY, d.X, d.w, d.DX, d.dw, d.dw, {}, d.rstd); },
                         "layer_norm_backward needs the mean saved by the forward");
    require_error_naming([&] { norm::fused_add_rms_norm_backward(d.DY, d.X, d.w, d.DX, d.dw, {}); },
                         "fused_add_rms_norm_backward needs the rstd");
    require_error_naming([&] { norm::rms_norm_backward(d.DY, d.X, d.w, d.DX, d.dw, d.short_rstd); },
                         "rstd has length 2 but there are 3 rows");
}

TEST_CASE("errors: eps, alpha, shift, gain, heads, temperature and p are checked by name", "[norm][errors]") {
    data d;
    for (double eps : {0.0, -1e-6, nan_value, infinity}) {
        INFO("eps " << eps);
        require_error_naming([&] { norm::rms_norm_forward(d.X, d.w, d.Y, {}, with_eps<norm::rms_norm_options>(eps)); },
                             "eps must be positive and finite");
        require_error_naming(
            [&] { norm::layer_norm_forward(d.X, d.w, d.w, d.Y, {}, {}, with_eps<norm::layer_norm_options>(eps)); },
            "eps must be positive and finite");
        require_error_naming(
            [&] { norm::fused_add_rms_norm_forward(d.X, d.w, d.DX, d.Y, {}, with_eps<norm::rms_norm_options>(eps)); },
            "eps must be positive and finite");
        require_error_naming([&] { norm::l2_norm_forward(d.X, 1.0, d.Y, with_eps<norm::l2_norm_options>(eps)); },
                             "eps must be positive and finite");
        require_error_naming(
            [&] { norm::seed_norm_forward(d.X, d.w, d.w, d.w, d.Y, {}, with_eps<norm::seed_norm_options>(eps)); },
            "eps must be positive and finite");
    }
    for (double bad : {nan_value, infinity, -infinity}) {
        INFO("value " << bad);
        require_error_naming([&] { norm::dyt_forward(d.X, bad, {}, {}, d.Y); }, "alpha must be finite");
        require_error_naming([&] { norm::derf_forward(d.X, 0.5, bad, {}, {}, d.Y); }, "shift must be finite");
        require_error_naming([&] { norm::l2_norm_forward(d.X, bad, d.Y); }, "gain must be finite");
        require_error_naming([&] { norm::qk_l2_norm_forward(d.X, d.X, bad, d.Y, d.DX); }, "gain must be finite");
    }
    norm::seed_norm_options three_heads;
    three_heads.heads = 3;  // does not divide 4
    require_error_naming([&] { norm::seed_norm_forward(d.X, d.w, d.w, d.w, d.Y, {}, three_heads); }, "heads (3");
    require_error_naming([&] { norm::seed_norm_forward(d.X, d.short_w, d.w, d.w, d.Y); }, "alpha has length 3");
    require_error_naming([&] { norm::seed_norm_forward(d.X, d.w, {}, d.w, d.Y); }, "beta has length 0");
    require_error_naming([&] { norm::scale_norm_initial_gain(0); },
                         "scale_norm_initial_gain: the row length n must be positive");
    require_error_naming([&] { norm::qk_norm_initial_gain(1); },
                         "qk_norm_initial_gain: sequence_length must be at least 2");
    const std::vector<long> labels = {0, 1, 3}, bad_labels = {0, 4, 1};
    norm::logit_norm_options cold;
    cold.temperature = 0;
    require_error_naming([&] { norm::logit_norm_loss(d.X, bad_labels); }, "labels[1] = 4");
    require_error_naming([&] { norm::logit_norm_loss(d.X, labels, {}, cold); },
                         "temperature must be positive and finite");
    norm::selective_score_options p;
    p.p = 0;
    require_error_naming([&] { norm::selective_classification_score(d.X, d.rstd, p); }, "p must be positive");
    norm::select_norm_order_options none;
    none.candidates.clear();
    require_error_naming([&] { norm::select_norm_order(d.X, labels, none); }, "candidates is empty");
    require_error_naming(
        [&] {
            norm::area_under_risk_coverage(std::vector<double>{0.1, nan_value}, std::vector<double>{1, 0});
        },
        "scores[1] is NaN");
}

TEST_CASE("errors: the documented values of empty and degenerate input", "[norm][errors]") {
    data d;
    SECTION("zero rows: nothing is read or written") {
        std::vector<float> none;
        const auto empty = view(none.data(), 0, 4);
        norm::rms_norm_forward(empty, d.w, empty);
        norm::layer_norm_forward(empty, d.w, d.w, empty);
        norm::l2_norm_forward(empty, 1.0, empty);
        CHECK(norm::dyt_backward(empty, empty, 0.5, d.w, empty, d.dw) == 0.0f);
        for (float value : d.dw) CHECK(value == 0.0f);  // overwritten with the empty sum
    }
    SECTION("an all-zero row: RMSNorm y = 0, LayerNorm y = beta, L2 y = 0") {
        std::vector<float> zeros(12, 0.0f), bias = {1.0f, -2.0f, 0.5f, 3.0f};
        norm::rms_norm_forward(view(zeros.data(), 3, 4), d.w, d.Y);
        for (float value : d.y) CHECK(value == 0.0f);
        norm::layer_norm_forward(view(zeros.data(), 3, 4), d.w, bias, d.Y);
        for (std::size_t k = 0; k < 12; ++k) CHECK(d.y[k] == bias[k % 4]);
        norm::l2_norm_forward(view(zeros.data(), 3, 4), 2.0, d.Y);
        for (float value : d.y) CHECK(value == 0.0f);
    }
    SECTION("NaN or inf in one row has no documented value but leaves the other rows alone") {
        const std::vector<float> clean = d.x;
        std::vector<float> expected(12), poisoned = clean;
        norm::rms_norm_forward(view(clean.data(), 3, 4), d.w, view(expected.data(), 3, 4));
        for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
            poisoned[5] = bad;  // row 1
            norm::rms_norm_forward(view(poisoned.data(), 3, 4), d.w, d.Y);
            CHECK(std::memcmp(d.y.data(), expected.data(), 4 * sizeof(float)) == 0);
            CHECK(std::memcmp(d.y.data() + 8, expected.data() + 8, 4 * sizeof(float)) == 0);
            norm::layer_norm_forward(view(poisoned.data(), 3, 4), d.w, {}, d.Y);
            std::vector<float> layer(12);
            norm::layer_norm_forward(view(clean.data(), 3, 4), d.w, {}, view(layer.data(), 3, 4));
            CHECK(std::memcmp(d.y.data(), layer.data(), 4 * sizeof(float)) == 0);
            CHECK(std::memcmp(d.y.data() + 8, layer.data() + 8, 4 * sizeof(float)) == 0);
        }
    }
    SECTION("output may be the input (in place): the same values") {
        std::vector<float> in_place = d.x;
        norm::rms_norm_forward(d.X, d.w, d.Y);
        norm::rms_norm_forward(view(in_place.data(), 3, 4), d.w, view(in_place.data(), 3, 4));
        CHECK(in_place == d.y);
    }
}
