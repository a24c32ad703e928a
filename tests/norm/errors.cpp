// The bad-input matrix of the norm module (docs/errors.md): for each public
// function and each kind of bad input, the normkit::error and the words of its
// message, or the documented value. Float storage only (the checks run before
// any arithmetic, once per call, whatever the type).
#include "methods.hpp"
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

TEST_CASE("errors: every registered row method names a mismatched output, a null input or output, a bad eps",
          "[norm][errors]") {
    // The checks every row normalization shares (tests/norm/methods.hpp); each method's own
    // parameters and statistics are checked in its own test file.
    REQUIRE(row_methods().size() >= 3);
    data d;
    for (const auto& method : row_methods()) {
        INFO(method.name);
        const row_run run;
        require_error_naming([&] { method.forward(d.X, d.WIDE, run); }, "output has shape 3x5 but input has shape 3x4");
        require_error_naming([&] { method.forward(d.null, d.Y, run); }, "input is null (3x4)");
        require_error_naming([&] { method.forward(d.X, d.null, run); }, "output is null");
        for (double eps : {0.0, -1e-6, nan_value, infinity}) {
            INFO("eps " << eps);
            row_run bad;
            bad.eps = eps;
            require_error_naming([&] { method.forward(d.X, d.Y, bad); }, "eps must be positive and finite");
        }
    }
}

TEST_CASE("errors: the row norms name a mismatched shape, a null input, a short parameter or statistic",
          "[norm][errors]") {
    data d;
    // shape
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
        require_error_naming(
            [&] { norm::fused_add_rms_norm_forward(d.X, d.w, d.DX, d.Y, {}, with_eps<norm::rms_norm_options>(eps)); },
            "eps must be positive and finite");
        require_error_naming([&] { norm::l2_norm_forward(d.X, 1.0, d.Y, with_eps<norm::l2_norm_options>(eps)); },
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
    SECTION("NaN or inf in one row leaves the other rows alone") {
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

namespace {

// One buffer that several arguments share: at(k) is the 3 × 4 view starting k elements in, so
// at(0) over at(0) is in place and at(1) over at(0) a partial overlap by one element.
struct arena {
    std::vector<float> storage;
    explicit arena(std::vector<float> values) : storage(std::move(values)) { storage.resize(storage.size() + 4); }
    matrix_view<float> at(index_type offset = 0) { return view(storage.data() + offset, 3, 4); }
    vector_view<float> vector(index_type offset, index_type size) { return {storage.data() + offset, size}; }
};

bool same_bits(const std::vector<float>& a, const float* b) {
    return std::memcmp(a.data(), b, a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("errors: aliasing of the row norms' forwards: output may be the input itself, nothing else",
          "[norm][errors][aliasing]") {
    data d;
    const std::vector<float> bias = {0.5f, -1.0f, 0.25f, 2.0f};
    SECTION("rms_norm_forward") {
        std::vector<float> rstd(3);
        norm::rms_norm_forward(d.X, d.w, d.Y, rstd);
        arena in_place(d.x);
        std::vector<float> rstd_in_place(3);
        norm::rms_norm_forward(in_place.at(), d.w, in_place.at(), rstd_in_place);
        CHECK(same_bits(d.y, in_place.storage.data()));
        CHECK(rstd == rstd_in_place);
        arena a(d.x);
        require_error_naming([&] { norm::rms_norm_forward(a.at(), d.w, a.at(1)); },
                             "output (3x4) overlaps input (3x4); output may be input itself or disjoint from it");
        require_error_naming([&] { norm::rms_norm_forward(a.at(), d.w, d.Y, a.vector(0, 3)); },
                             "rstd (3) overlaps input (3x4)");
        require_error_naming([&] { norm::rms_norm_forward(d.X, d.w, a.at(), a.vector(11, 3)); },
                             "rstd (3) overlaps output (3x4)");
        require_error_naming([&] { norm::rms_norm_forward(d.X, a.vector(0, 4), a.at(1)); },
                             "output (3x4) overlaps weight (4)");
    }
    SECTION("layer_norm_forward") {
        std::vector<float> mean(3), rstd(3);
        norm::layer_norm_forward(d.X, d.w, bias, d.Y, mean, rstd);
        arena in_place(d.x);
        std::vector<float> mean_in_place(3), rstd_in_place(3);
        norm::layer_norm_forward(in_place.at(), d.w, bias, in_place.at(), mean_in_place, rstd_in_place);
        CHECK(same_bits(d.y, in_place.storage.data()));
        CHECK((mean == mean_in_place && rstd == rstd_in_place));
        arena a(d.x);
        require_error_naming([&] { norm::layer_norm_forward(a.at(), d.w, bias, a.at(1)); },
                             "output (3x4) overlaps input (3x4)");
        std::vector<float> both(5);
        require_error_naming(
            [&] {
                norm::layer_norm_forward(d.X, d.w, bias, d.Y, vector_view<float>(both.data(), 3),
                                         vector_view<float>(both.data() + 2, 3));
            },
            "mean (3) overlaps rstd (3)");
    }
    SECTION("fused_add_rms_norm_forward: output may be the input; the residual is neither") {
        std::vector<float> stream(12, 0.125f), stream_in_place = stream;
        norm::fused_add_rms_norm_forward(d.X, d.w, view(stream.data(), 3, 4), d.Y);
        arena in_place(d.x);
        norm::fused_add_rms_norm_forward(in_place.at(), d.w, view(stream_in_place.data(), 3, 4), in_place.at());
        CHECK(same_bits(d.y, in_place.storage.data()));
        CHECK(stream == stream_in_place);
        arena a(d.x);
        require_error_naming([&] { norm::fused_add_rms_norm_forward(a.at(), d.w, a.at(), d.Y); },
                             "residual (3x4) overlaps input (3x4)");
        require_error_naming([&] { norm::fused_add_rms_norm_forward(d.X, d.w, a.at(), a.at()); },
                             "residual (3x4) overlaps output (3x4)");
        require_error_naming([&] { norm::fused_add_rms_norm_forward(a.at(), d.w, view(stream.data(), 3, 4), a.at(1)); },
                             "output (3x4) overlaps input (3x4)");
    }
    SECTION("dyt_forward, derf_forward, l2_norm_forward, l2_normalize_rows") {
        norm::dyt_forward(d.X, 0.7, d.w, bias, d.Y);
        arena in_place(d.x);
        norm::dyt_forward(in_place.at(), 0.7, d.w, bias, in_place.at());
        CHECK(same_bits(d.y, in_place.storage.data()));
        norm::derf_forward(d.X, 0.7, 0.1, d.w, bias, d.Y);
        in_place = arena(d.x);
        norm::derf_forward(in_place.at(), 0.7, 0.1, d.w, bias, in_place.at());
        CHECK(same_bits(d.y, in_place.storage.data()));
        norm::l2_norm_forward(d.X, 2.0, d.Y);
        in_place = arena(d.x);
        norm::l2_norm_forward(in_place.at(), 2.0, in_place.at());
        CHECK(same_bits(d.y, in_place.storage.data()));
        norm::l2_norm_forward(d.X, 1.0, d.Y);
        in_place = arena(d.x);
        norm::l2_normalize_rows(in_place.at());
        CHECK(same_bits(d.y, in_place.storage.data()));
        arena a(d.x);
        require_error_naming([&] { norm::dyt_forward(a.at(), 0.7, d.w, bias, a.at(1)); },
                             "output (3x4) overlaps input (3x4)");
        require_error_naming([&] { norm::derf_forward(a.at(1), 0.7, 0.1, d.w, bias, a.at()); },
                             "output (3x4) overlaps input (3x4)");
        require_error_naming([&] { norm::dyt_forward(d.X, 0.7, d.w, a.vector(0, 4), a.at(2)); },
                             "output (3x4) overlaps bias (4)");
        require_error_naming([&] { norm::l2_norm_forward(a.at(), 2.0, a.at(1)); }, "output (3x4) overlaps input");
    }
    SECTION("seed_norm_forward") {
        std::vector<float> alpha(4, 0.5f), beta(4, 0.25f), rstd(3), rstd_in_place(3);
        norm::seed_norm_forward(d.X, alpha, beta, d.w, d.Y, rstd);
        arena in_place(d.x);
        norm::seed_norm_forward(in_place.at(), alpha, beta, d.w, in_place.at(), rstd_in_place);
        CHECK(same_bits(d.y, in_place.storage.data()));
        CHECK(rstd == rstd_in_place);
        arena a(d.x);
        require_error_naming([&] { norm::seed_norm_forward(a.at(), alpha, beta, d.w, a.at(1)); },
                             "output (3x4) overlaps input (3x4)");
        require_error_naming([&] { norm::seed_norm_forward(a.at(), alpha, beta, d.w, d.Y, a.vector(1, 3)); },
                             "rstd (3) overlaps input (3x4)");
    }
    SECTION("qk_l2_norm_forward, qk_rms_norm_forward: each output its own input or disjoint") {
        std::vector<float> k(12), k_out(12), k_rstd(3), q_rstd(3);
        for (std::size_t i = 0; i < k.size(); ++i) k[i] = 0.1f * static_cast<float>(i) - 0.4f;
        const auto K = view(k.data(), 3, 4), K_OUT = view(k_out.data(), 3, 4);
        norm::qk_l2_norm_forward(d.X, K, 1.5, d.Y, K_OUT);
        arena q_in_place(d.x), k_in_place(k);
        norm::qk_l2_norm_forward(q_in_place.at(), k_in_place.at(), 1.5, q_in_place.at(), k_in_place.at());
        CHECK(same_bits(d.y, q_in_place.storage.data()));
        CHECK(same_bits(k_out, k_in_place.storage.data()));
        norm::qk_rms_norm_forward(d.X, K, d.w, d.w, d.Y, K_OUT, q_rstd, k_rstd);
        q_in_place = arena(d.x);
        k_in_place = arena(k);
        norm::qk_rms_norm_forward(q_in_place.at(), k_in_place.at(), d.w, d.w, q_in_place.at(), k_in_place.at());
        CHECK(same_bits(d.y, q_in_place.storage.data()));
        CHECK(same_bits(k_out, k_in_place.storage.data()));
        arena a(d.x);
        require_error_naming([&] { norm::qk_l2_norm_forward(a.at(), K, 1.5, a.at(1), K_OUT); },
                             "query_output (3x4) overlaps query (3x4)");
        require_error_naming([&] { norm::qk_l2_norm_forward(d.X, K, 1.5, a.at(), a.at(1)); },
                             "query_output (3x4) overlaps key_output (3x4)");
        require_error_naming([&] { norm::qk_rms_norm_forward(d.X, a.at(), d.w, d.w, a.at(), K_OUT); },
                             "query_output (3x4) overlaps key (3x4)");
        require_error_naming(
            [&] { norm::qk_rms_norm_forward(d.X, K, d.w, d.w, d.Y, K_OUT, a.vector(0, 3), a.vector(2, 3)); },
            "query_rstd (3) overlaps key_rstd (3)");
    }
}

TEST_CASE("errors: aliasing is decided row by row: column blocks of one buffer are disjoint",
          "[norm][errors][aliasing]") {
    data d;
    // A 3 × 12 qkv buffer: q, k, v its column blocks of 4, interleaved row by row.
    std::vector<float> qkv(36), separate(36);
    for (std::size_t i = 0; i < qkv.size(); ++i) qkv[i] = 0.05f * static_cast<float>(i % 17) - 0.4f;
    const auto block = [](std::vector<float>& buffer, index_type column) {
        return view(buffer.data() + column, 3, 4, 12);
    };
    separate = qkv;
    std::vector<float> q_out(12), k_out(12);
    norm::qk_rms_norm_forward(block(separate, 0), block(separate, 4), d.w, d.w, view(q_out.data(), 3, 4),
                              view(k_out.data(), 3, 4));
    norm::qk_rms_norm_forward(block(qkv, 0), block(qkv, 4), d.w, d.w, block(qkv, 0), block(qkv, 4));
    for (index_type i = 0; i < 3; ++i) {
        CHECK(std::memcmp(qkv.data() + 12 * i, q_out.data() + 4 * i, 4 * sizeof(float)) == 0);
        CHECK(std::memcmp(qkv.data() + 12 * i + 4, k_out.data() + 4 * i, 4 * sizeof(float)) == 0);
        CHECK(std::memcmp(qkv.data() + 12 * i + 8, separate.data() + 12 * i + 8, 4 * sizeof(float)) == 0);
    }
    // The output in the v block of the same rows is disjoint from q; two columns over, it overlaps.
    norm::rms_norm_forward(block(separate, 0), d.w, block(separate, 8));
    require_error_naming([&] { norm::rms_norm_forward(block(separate, 0), d.w, block(separate, 2)); },
                         "output (3x4) overlaps input (3x4)");
    // The last row of one meets the first of another only where their bytes do.
    require_error_naming(
        [&] { norm::rms_norm_forward(view(separate.data(), 2, 4, 12), d.w, view(separate.data() + 15, 2, 4, 12)); },
        "output (2x4) overlaps input (2x4)");
    norm::rms_norm_forward(view(separate.data(), 2, 4, 12), d.w, view(separate.data() + 16, 2, 4, 12));
}

TEST_CASE("errors: aliasing of the row norms' backwards: input_gradient may be output_gradient itself",
          "[norm][errors][aliasing]") {
    data d;
    const std::vector<float> rstd = {1.5f, 0.75f, 2.0f}, mean = {0.1f, -0.2f, 0.05f};
    for (std::size_t k = 0; k < d.dy.size(); ++k) d.dy[k] = 0.3f * static_cast<float>(k % 7) - 0.8f;
    SECTION("rms_norm_backward: dx over dy with dw (dw reads dy before dx is written)") {
        std::vector<float> dw(4), dw_in_place(4);
        norm::rms_norm_backward(d.DY, d.X, d.w, d.DX, dw, rstd);
        arena in_place(d.dy);
        norm::rms_norm_backward(in_place.at(), d.X, d.w, in_place.at(), dw_in_place, rstd);
        CHECK(same_bits(d.dx, in_place.storage.data()));
        CHECK(dw == dw_in_place);
        arena a(d.dy);
        require_error_naming([&] { norm::rms_norm_backward(a.at(), d.X, d.w, a.at(1), dw, rstd); },
                             "input_gradient (3x4) overlaps output_gradient (3x4); input_gradient may be "
                             "output_gradient itself");
        arena x(d.x);
        require_error_naming([&] { norm::rms_norm_backward(d.DY, x.at(), d.w, x.at(), dw, rstd); },
                             "input_gradient (3x4) overlaps input (3x4); input_gradient must be disjoint from input");
        require_error_naming([&] { norm::rms_norm_backward(a.at(), d.X, d.w, d.DX, a.vector(3, 4), rstd); },
                             "weight_gradient (4) overlaps output_gradient (3x4)");
    }
    SECTION("layer_norm_backward: dx over dy with dgamma and dbeta") {
        std::vector<float> dw(4), db(4), dw_in_place(4), db_in_place(4);
        norm::layer_norm_backward(d.DY, d.X, d.w, d.DX, dw, db, mean, rstd);
        arena in_place(d.dy);
        norm::layer_norm_backward(in_place.at(), d.X, d.w, in_place.at(), dw_in_place, db_in_place, mean, rstd);
        CHECK(same_bits(d.dx, in_place.storage.data()));
        CHECK((dw == dw_in_place && db == db_in_place));
        arena a(d.dy);
        require_error_naming([&] { norm::layer_norm_backward(a.at(1), d.X, d.w, a.at(), dw, db, mean, rstd); },
                             "input_gradient (3x4) overlaps output_gradient (3x4)");
        std::vector<float> both(6);
        require_error_naming(
            [&] {
                norm::layer_norm_backward(d.DY, d.X, d.w, d.DX, vector_view<float>(both.data(), 4),
                                          vector_view<float>(both.data() + 2, 4), mean, rstd);
            },
            "bias_gradient (4) overlaps weight_gradient (4)");
    }
    SECTION("fused_add_rms_norm_backward: the residual gradient is updated in place, over no input") {
        arena a(d.dy);
        std::vector<float> stream(12, 0.5f), dw(4);
        require_error_naming([&] { norm::fused_add_rms_norm_backward(a.at(), d.X, d.w, a.at(), dw, rstd); },
                             "residual_gradient (3x4) overlaps output_gradient (3x4)");
        arena h(d.x);
        require_error_naming([&] { norm::fused_add_rms_norm_backward(d.DY, h.at(), d.w, h.at(1), dw, rstd); },
                             "residual_gradient (3x4) overlaps residual (3x4)");
        require_error_naming(
            [&] {
                norm::fused_add_rms_norm_backward(a.at(), d.X, d.w, view(stream.data(), 3, 4), a.vector(0, 4), rstd);
            },
            "weight_gradient (4) overlaps output_gradient (3x4)");
    }
    SECTION("dyt_backward, derf_backward, l2_norm_backward, seed_norm_backward") {
        std::vector<float> dw(4), db(4), dw_in_place(4), db_in_place(4);
        const float da = norm::dyt_backward(d.DY, d.X, 0.7, d.w, d.DX, dw, db);
        arena in_place(d.dy);
        const float da_in_place =
            norm::dyt_backward(in_place.at(), d.X, 0.7, d.w, in_place.at(), dw_in_place, db_in_place);
        CHECK(same_bits(d.dx, in_place.storage.data()));
        CHECK((da == da_in_place && dw == dw_in_place && db == db_in_place));
        const auto scalars = norm::derf_backward(d.DY, d.X, 0.7, 0.1, d.w, d.DX, dw, db);
        in_place = arena(d.dy);
        const auto scalars_in_place =
            norm::derf_backward(in_place.at(), d.X, 0.7, 0.1, d.w, in_place.at(), dw_in_place, db_in_place);
        CHECK(same_bits(d.dx, in_place.storage.data()));
        CHECK((scalars.alpha == scalars_in_place.alpha && scalars.shift == scalars_in_place.shift));
        CHECK((dw == dw_in_place && db == db_in_place));
        const float dg = norm::l2_norm_backward(d.DY, d.X, 2.0, d.DX);
        in_place = arena(d.dy);
        CHECK(norm::l2_norm_backward(in_place.at(), d.X, 2.0, in_place.at()) == dg);
        CHECK(same_bits(d.dx, in_place.storage.data()));
        std::vector<float> alpha(4, 0.5f), beta(4, 0.25f), ga(4), gb(4), gg(4), ga2(4), gb2(4), gg2(4);
        norm::seed_norm_backward(d.DY, d.X, alpha, beta, d.w, d.DX, ga, gb, gg, rstd);
        in_place = arena(d.dy);
        norm::seed_norm_backward(in_place.at(), d.X, alpha, beta, d.w, in_place.at(), ga2, gb2, gg2, rstd);
        CHECK(same_bits(d.dx, in_place.storage.data()));
        CHECK((ga == ga2 && gb == gb2 && gg == gg2));

        arena a(d.dy), x(d.x);
        require_error_naming([&] { norm::dyt_backward(a.at(), d.X, 0.7, d.w, a.at(1)); },
                             "input_gradient (3x4) overlaps output_gradient (3x4)");
        require_error_naming([&] { norm::derf_backward(d.DY, x.at(), 0.7, 0.1, d.w, x.at()); },
                             "input_gradient (3x4) overlaps input (3x4)");
        require_error_naming([&] { norm::dyt_backward(d.DY, d.X, 0.7, d.w, d.DX, a.vector(0, 4), a.vector(3, 4)); },
                             "weight_gradient (4) overlaps bias_gradient (4)");
        require_error_naming([&] { norm::l2_norm_backward(a.at(1), d.X, 2.0, a.at()); },
                             "input_gradient (3x4) overlaps output_gradient (3x4)");
        require_error_naming(
            [&] {
                norm::seed_norm_backward(d.DY, d.X, alpha, beta, d.w, d.DX, a.vector(0, 4), a.vector(2, 4), gg, rstd);
            },
            "alpha_gradient (4) overlaps beta_gradient (4)");
        require_error_naming(
            [&] { norm::seed_norm_backward(d.DY, x.at(), alpha, beta, d.w, x.at(1), ga, gb, gg, rstd); },
            "input_gradient (3x4) overlaps input (3x4)");
    }
    SECTION("qk_l2_norm_backward, qk_rms_norm_backward") {
        std::vector<float> k(12), dk_out(12, 0.25f), dk(12), k_rstd = {1.0f, 2.0f, 0.5f};
        for (std::size_t i = 0; i < k.size(); ++i) k[i] = 0.1f * static_cast<float>(i) - 0.4f;
        const auto K = view(k.data(), 3, 4), DK_OUT = view(dk_out.data(), 3, 4), DK = view(dk.data(), 3, 4);
        const float dg = norm::qk_l2_norm_backward(d.DY, DK_OUT, d.X, K, 1.5, d.DX, DK);
        arena dq_in_place(d.dy), dk_in_place(dk_out);
        CHECK(norm::qk_l2_norm_backward(dq_in_place.at(), dk_in_place.at(), d.X, K, 1.5, dq_in_place.at(),
                                        dk_in_place.at()) == dg);
        CHECK(same_bits(d.dx, dq_in_place.storage.data()));
        CHECK(same_bits(dk, dk_in_place.storage.data()));
        std::vector<float> dqw(4), dkw(4), dqw2(4), dkw2(4);
        norm::qk_rms_norm_backward(d.DY, DK_OUT, d.X, K, d.w, d.w, d.DX, DK, dqw, dkw, rstd, k_rstd);
        dq_in_place = arena(d.dy);
        dk_in_place = arena(dk_out);
        norm::qk_rms_norm_backward(dq_in_place.at(), dk_in_place.at(), d.X, K, d.w, d.w, dq_in_place.at(),
                                   dk_in_place.at(), dqw2, dkw2, rstd, k_rstd);
        CHECK(same_bits(d.dx, dq_in_place.storage.data()));
        CHECK(same_bits(dk, dk_in_place.storage.data()));
        CHECK((dqw == dqw2 && dkw == dkw2));
        arena a(d.dy);
        require_error_naming([&] { norm::qk_l2_norm_backward(a.at(), DK_OUT, d.X, K, 1.5, a.at(1), DK); },
                             "query_gradient (3x4) overlaps query_output_gradient (3x4)");
        require_error_naming([&] { norm::qk_l2_norm_backward(d.DY, DK_OUT, d.X, K, 1.5, a.at(), a.at(2)); },
                             "query_gradient (3x4) overlaps key_gradient (3x4)");
        require_error_naming(
            [&] {
                norm::qk_rms_norm_backward(d.DY, DK_OUT, d.X, K, d.w, d.w, d.DX, DK, a.vector(0, 4), a.vector(1, 4),
                                           rstd, k_rstd);
            },
            "query_weight_gradient (4) overlaps key_weight_gradient (4)");
    }
}

TEST_CASE("errors: aliasing of the logit-norm outputs: disjoint from the logits", "[norm][errors][aliasing]") {
    data d;
    const std::vector<index_type> labels = {0, 3, 1};
    arena a(d.x);
    require_error_naming([&] { norm::logit_norm_loss_gradient(a.at(), labels, a.at()); },
                         "gradient (3x4) overlaps logits (3x4); gradient must be disjoint from logits");
    require_error_naming([&] { norm::logit_norm_loss_gradient(a.at(), labels, a.at(1)); }, "gradient (3x4) overlaps");
    require_error_naming([&] { norm::logit_norm_loss(a.at(), labels, a.vector(5, 3)); },
                         "losses (3) overlaps logits (3x4)");
    require_error_naming([&] { norm::selective_classification_score(a.at(), a.vector(11, 3)); },
                         "scores (3) overlaps logits (3x4)");
    // Disjoint buffers side by side in one allocation are not an overlap.
    std::vector<float> scores(3);
    norm::selective_classification_score(a.at(), scores);
    std::vector<float> side_by_side = d.x;
    side_by_side.resize(15);
    norm::selective_classification_score(view(side_by_side.data(), 3, 4),
                                         vector_view<float>(side_by_side.data() + 12, 3));
    CHECK(std::memcmp(scores.data(), side_by_side.data() + 12, 3 * sizeof(float)) == 0);
}

TEST_CASE("errors: NaN and ±inf in the row norms' data give the documented values, row by row",
          "[norm][errors][special]") {
    const float nan_f = std::numeric_limits<float>::quiet_NaN(), inf_f = std::numeric_limits<float>::infinity();
    for (const index_type n : {index_type(4), index_type(37)})
        for (const float bad : {nan_f, inf_f, -inf_f})
            for (const index_type at : {index_type(0), index_type(2)}) {
                INFO("n = " << n << ", x(1, " << at << ") = " << bad);
                const bool is_nan = std::isnan(bad);
                std::vector<float> clean(static_cast<std::size_t>(3 * n)), dy(clean.size()), w(n, 1.5f), b(n, 0.5f);
                for (std::size_t k = 0; k < clean.size(); ++k) {
                    clean[k] = 0.3f * static_cast<float>(k % 5) - 0.5f;
                    dy[k] = 0.2f * static_cast<float>(k % 3) - 0.1f;
                }
                std::vector<float> x = clean;
                x[static_cast<std::size_t>(n + at)] = bad;
                const auto X = view(x.data(), 3, n), CLEAN = view(clean.data(), 3, n), DY = view(dy.data(), 3, n);
                std::vector<float> y(clean.size()), ref(clean.size()), dx(clean.size()), ref_dx(clean.size());
                const auto Y = view(y.data(), 3, n), REF = view(ref.data(), 3, n), DX = view(dx.data(), 3, n),
                           REF_DX = view(ref_dx.data(), 3, n);
                const auto row = [&](const std::vector<float>& v, index_type i) { return v.data() + i * n; };
                // Rows 0 and 2 as from clean data; row 1 checked element by element.
                const auto others_clean = [&](const std::vector<float>& got, const std::vector<float>& expected) {
                    CHECK(std::memcmp(row(got, 0), row(expected, 0), n * sizeof(float)) == 0);
                    CHECK(std::memcmp(row(got, 2), row(expected, 2), n * sizeof(float)) == 0);
                };
                const auto all_nan = [&](const float* values, index_type count) {
                    for (index_type j = 0; j < count; ++j) CHECK(std::isnan(values[j]));
                };
                // The RMS forms and L2: NaN → the row NaN; ±inf → ±0 at finite elements, NaN at the infinite one.
                const auto rms_like_row = [&](const std::vector<float>& got) {
                    for (index_type j = 0; j < n; ++j) {
                        if (is_nan || j == at)
                            CHECK(std::isnan(row(got, 1)[j]));
                        else
                            CHECK(row(got, 1)[j] == 0.0f);
                    }
                };
                std::vector<float> rstd(3), ref_rstd(3), dw(n), mean(3), db(n), ref_db(n);
                norm::rms_norm_forward(X, w, Y, rstd);
                norm::rms_norm_forward(CLEAN, w, REF, ref_rstd);
                others_clean(y, ref);
                rms_like_row(y);
                CHECK((is_nan ? std::isnan(rstd[1]) : rstd[1] == 0.0f));
                norm::rms_norm_backward(DY, X, w, DX, dw, rstd);
                norm::rms_norm_backward(DY, CLEAN, w, REF_DX, {}, ref_rstd);
                others_clean(dx, ref_dx);
                all_nan(row(dx, 1), n);
                for (index_type j = 0; j < n; ++j) CHECK(std::isnan(dw[j]) == (is_nan || j == at));

                norm::layer_norm_forward(X, w, b, Y, mean, rstd);
                norm::layer_norm_forward(CLEAN, w, b, REF, {}, ref_rstd);
                others_clean(y, ref);
                all_nan(row(y, 1), n);
                CHECK(std::isnan(rstd[1]));
                CHECK(!std::isfinite(mean[1]));
                norm::layer_norm_backward(DY, X, w, DX, dw, db, mean, rstd);
                norm::layer_norm_backward(DY, X, w, REF_DX, {}, ref_db, mean, rstd);
                all_nan(row(dx, 1), n);
                all_nan(dw.data(), n);
                CHECK(db == ref_db);
                std::vector<float> clean_mean(3);
                norm::layer_norm_forward(CLEAN, w, b, REF, clean_mean, ref_rstd);
                norm::layer_norm_backward(DY, CLEAN, w, REF_DX, {}, {}, clean_mean, ref_rstd);
                others_clean(dx, ref_dx);

                // DyT and Derf, element by element: t = ±1 at ±inf, NaN at NaN.
                const auto pointwise = [&](auto forward, auto backward) {
                    forward(X, Y);
                    forward(CLEAN, REF);
                    for (index_type k = 0; k < 3 * n; ++k) {
                        const auto i = static_cast<std::size_t>(k);
                        if (k != n + at)
                            CHECK(std::memcmp(&y[i], &ref[i], sizeof(float)) == 0);
                        else if (is_nan)
                            CHECK(std::isnan(y[i]));
                        else
                            CHECK(y[i] == (bad > 0 ? 1.5f : -1.5f) + 0.5f);
                    }
                    const float d_alpha = backward(X, DX);
                    backward(CLEAN, REF_DX);
                    for (index_type k = 0; k < 3 * n; ++k) {
                        const auto i = static_cast<std::size_t>(k);
                        if (k != n + at)
                            CHECK(std::memcmp(&dx[i], &ref_dx[i], sizeof(float)) == 0);
                        else if (is_nan)
                            CHECK(std::isnan(dx[i]));
                        else
                            CHECK(dx[i] == 0.0f);
                    }
                    CHECK(std::isnan(d_alpha));
                };
                pointwise([&](auto in, auto out) { norm::dyt_forward(in, 0.7, w, b, out); },
                          [&](auto in, auto out) { return norm::dyt_backward(DY, in, 0.7, w, out); });
                pointwise([&](auto in, auto out) { norm::derf_forward(in, 0.7, 0.1, w, b, out); },
                          [&](auto in, auto out) { return norm::derf_backward(DY, in, 0.7, 0.1, w, out).alpha; });

                norm::l2_norm_forward(X, 2.0, Y);
                norm::l2_norm_forward(CLEAN, 2.0, REF);
                others_clean(y, ref);
                rms_like_row(y);
                CHECK(std::isnan(norm::l2_norm_backward(DY, X, 2.0, DX)));
                norm::l2_norm_backward(DY, CLEAN, 2.0, REF_DX);
                others_clean(dx, ref_dx);
                all_nan(row(dx, 1), n);

                std::vector<float> alpha(n, 0.5f), beta(n, 0.25f);
                norm::seed_norm_forward(X, alpha, beta, w, Y, rstd);
                norm::seed_norm_forward(CLEAN, alpha, beta, w, REF, ref_rstd);
                others_clean(y, ref);
                rms_like_row(y);
                norm::seed_norm_backward(DY, X, alpha, beta, w, DX, {}, {}, {}, rstd);
                norm::seed_norm_backward(DY, CLEAN, alpha, beta, w, REF_DX, {}, {}, {}, ref_rstd);
                others_clean(dx, ref_dx);
                all_nan(row(dx, 1), n);

                const std::vector<index_type> labels = {0, 1, 2};
                std::vector<float> losses(3), ref_losses(3), scores(3), ref_scores(3);
                CHECK(std::isnan(norm::logit_norm_loss_gradient(X, labels, DX, losses)));
                norm::logit_norm_loss_gradient(CLEAN, labels, REF_DX, ref_losses);
                others_clean(dx, ref_dx);
                all_nan(row(dx, 1), n);
                CHECK(std::isnan(losses[1]));
                CHECK((losses[0] == ref_losses[0] && losses[2] == ref_losses[2]));
                norm::selective_classification_score(X, scores);
                norm::selective_classification_score(CLEAN, ref_scores);
                CHECK(std::isnan(scores[1]));
                CHECK((scores[0] == ref_scores[0] && scores[2] == ref_scores[2]));
            }
}
