// QK-norm (three forms) and L2 normalization (ScaleNorm, FixNorm, nGPT)
// against tests/reference/norm_qk.hpp.
#include "reference/norm_qk.hpp"
#include "support.hpp"

#include <normkit/norm/l2_norm.hpp>
#include <normkit/norm/qk_norm.hpp>

using namespace normkit;
using namespace normkit::testing;

namespace {

template <class T>
double gradient_tolerance() {
    return std::is_same_v<T, double> ? 1e-10 : (std::is_same_v<T, float> ? 1e-4 : tolerance<T>() * 4);
}

template <class T>
void check_l2(index_type rows, index_type n, index_type padding, double gain, std::uint32_t seed) {
    INFO(type_name<T>() << " rows " << rows << " n " << n << " padding " << padding << " gain " << gain);
    const double eps = 1e-12;
    test_matrix<T> x(rows, n, random_values(rows * n, seed, 0.2, 1.5), padding);
    test_matrix<T> y(rows, n, padding + 1), dy(rows, n, random_values(rows * n, seed + 1), padding),
        dx(rows, n, padding + 2);
    norm::l2_norm_forward(x.view, gain, y.view);
    CHECK(relative_error(y.values(), reference::l2_norm_forward(x.values(), {rows, n}, gain, eps)) <
          tolerance<T>() * 4);
    CHECK(y.padding_untouched());

    const auto dg = norm::l2_norm_backward(dy.view, x.view, gain, dx.view);
    static_assert(std::is_same_v<decltype(dg), const core::statistic_t<T>>);
    std::vector<double> dx_ref;
    const double dg_ref = reference::l2_norm_backward(dy.values(), x.values(), {rows, n}, gain, eps, dx_ref);
    // dx cancels (to 0 for n = 1): measured against its terms g·dy/‖x‖.
    double smallest_norm = INFINITY;
    const auto xs = x.values();
    for (index_type i = 0; i < rows; ++i) {
        double s = 0;
        for (index_type j = 0; j < n; ++j) s += xs[i * n + j] * xs[i * n + j];
        smallest_norm = std::min(smallest_norm, std::sqrt(s));
    }
    CHECK(relative_error(dx.values(), dx_ref, std::abs(gain) * max_abs(dy.values()) / smallest_norm) <
          gradient_tolerance<T>());
    // dg accumulates in float from exactly stored inputs: float accuracy for bf16 too, against the sum of |terms|.
    const double dg_terms = static_cast<double>(rows) * std::sqrt(static_cast<double>(n)) * max_abs(dy.values());
    CHECK(std::abs(static_cast<double>(dg) - dg_ref) / dg_terms < (std::is_same_v<T, double> ? 1e-12 : 1e-5));
    CHECK(dx.padding_untouched());
}

// q, k: tokens × heads × d (dense, as double); the forward outputs and gradients of the original form.
template <class T>
void check_qk_l2(index_type tokens, index_type query_heads, index_type key_heads, index_type d, index_type padding,
                 std::uint32_t seed) {
    INFO(type_name<T>() << " tokens " << tokens << " heads " << query_heads << "/" << key_heads << " d " << d
                        << " padding " << padding);
    const double gain = norm::qk_norm_initial_gain(tokens + 1), eps = 1e-12;
    const index_type q_rows = tokens * query_heads, k_rows = tokens * key_heads;
    test_matrix<T> q(q_rows, d, random_values(q_rows * d, seed), padding),
        k(k_rows, d, random_values(k_rows * d, seed + 1, 0.5), padding);
    test_matrix<T> q_out(q_rows, d, padding), k_out(k_rows, d, padding + 1);
    norm::qk_l2_norm_forward(q.view, k.view, gain, q_out.view, k_out.view);
    CHECK(relative_error(q_out.values(), reference::l2_norm_forward(q.values(), {q_rows, d}, gain, eps)) <
          tolerance<T>() * 4);
    CHECK(relative_error(k_out.values(), reference::l2_norm_forward(k.values(), {k_rows, d}, 1.0, eps)) <
          tolerance<T>() * 4);
    CHECK(q_out.padding_untouched());
    CHECK(k_out.padding_untouched());

    test_matrix<T> dq_out(q_rows, d, random_values(q_rows * d, seed + 2), padding),
        dk_out(k_rows, d, random_values(k_rows * d, seed + 3), padding);
    test_matrix<T> dq(q_rows, d, padding), dk(k_rows, d, padding);
    const auto dg = norm::qk_l2_norm_backward(dq_out.view, dk_out.view, q.view, k.view, gain, dq.view, dk.view);
    std::vector<double> dq_ref, dk_ref;
    const double dg_ref = reference::l2_norm_backward(dq_out.values(), q.values(), {q_rows, d}, gain, eps, dq_ref);
    reference::l2_norm_backward(dk_out.values(), k.values(), {k_rows, d}, 1.0, eps, dk_ref);
    CHECK(relative_error(dq.values(), dq_ref, gain * max_abs(dq_out.values())) < gradient_tolerance<T>() * 10);
    CHECK(relative_error(dk.values(), dk_ref, max_abs(dk_out.values())) < gradient_tolerance<T>() * 10);
    CHECK(std::abs(static_cast<double>(dg) - dg_ref) /
              (static_cast<double>(q_rows) * std::sqrt(double(d)) * max_abs(dq_out.values())) <
          (std::is_same_v<T, double> ? 1e-12 : 1e-5));
}

template <class T>
void check_qk_rms(index_type tokens, index_type query_heads, index_type key_heads, index_type d, index_type padding,
                  const norm::rms_norm_options& options, std::uint32_t seed) {
    INFO(type_name<T>() << " tokens " << tokens << " heads " << query_heads << "/" << key_heads << " d " << d
                        << " offset " << options.offset << " llama "
                        << (options.casting == norm::rms_norm_casting::llama));
    const index_type q_rows = tokens * query_heads, k_rows = tokens * key_heads;
    test_matrix<T> q(q_rows, d, random_values(q_rows * d, seed, 0.1, 2.0), padding),
        k(k_rows, d, random_values(k_rows * d, seed + 1), padding);
    test_matrix<T> q_out(q_rows, d, padding + 1), k_out(k_rows, d, padding);
    const double weight_mean = options.offset ? 0.0 : 1.0;
    const auto q_weight_values = stored<T>(random_values(d, seed + 2, weight_mean, 0.3)),
               k_weight_values = stored<T>(random_values(d, seed + 3, weight_mean, 0.3));
    const auto q_weight = to_storage<T>(q_weight_values), k_weight = to_storage<T>(k_weight_values);
    std::vector<core::statistic_t<T>> q_rstd(q_rows), k_rstd(k_rows), dq_weight(d), dk_weight(d);
    norm::qk_rms_norm_forward(q.view, k.view, q_weight, k_weight, q_out.view, k_out.view, q_rstd, k_rstd, options);
    std::vector<double> q_ref, k_ref, q_rstd_ref, k_rstd_ref;
    reference::rms_norm_forward(q.values(), {q_rows, d}, q_weight_values, options.offset, options.eps, q_ref,
                                q_rstd_ref);
    reference::rms_norm_forward(k.values(), {k_rows, d}, k_weight_values, options.offset, options.eps, k_ref,
                                k_rstd_ref);
    CHECK(relative_error(q_out.values(), q_ref) < tolerance<T>() * 4);
    CHECK(relative_error(k_out.values(), k_ref) < tolerance<T>() * 4);
    CHECK(q_out.padding_untouched());

    test_matrix<T> dq_out(q_rows, d, random_values(q_rows * d, seed + 4), padding),
        dk_out(k_rows, d, random_values(k_rows * d, seed + 5), padding);
    test_matrix<T> dq(q_rows, d, padding), dk(k_rows, d, padding);
    norm::qk_rms_norm_backward(dq_out.view, dk_out.view, q.view, k.view, q_weight, k_weight, dq.view, dk.view,
                               dq_weight, dk_weight, q_rstd, k_rstd, options);
    std::vector<double> dq_ref, dk_ref, dq_weight_ref, dk_weight_ref;
    reference::rms_norm_backward(dq_out.values(), q.values(), {q_rows, d}, q_weight_values, options.offset, options.eps,
                                 dq_ref, dq_weight_ref);
    reference::rms_norm_backward(dk_out.values(), k.values(), {k_rows, d}, k_weight_values, options.offset, options.eps,
                                 dk_ref, dk_weight_ref);
    const double w = 1.0 + max_abs(q_weight_values) + max_abs(k_weight_values);
    CHECK(relative_error(dq.values(), dq_ref, max_abs(q_rstd_ref) * max_abs(dq_out.values()) * w) <
          gradient_tolerance<T>());
    CHECK(relative_error(dk.values(), dk_ref, max_abs(k_rstd_ref) * max_abs(dk_out.values()) * w) <
          gradient_tolerance<T>());
    CHECK(relative_error(to_double(dq_weight), dq_weight_ref) < (std::is_same_v<T, double> ? 1e-11 : 1e-4));
    CHECK(relative_error(to_double(dk_weight), dk_weight_ref) < (std::is_same_v<T, double> ? 1e-11 : 1e-4));
    CHECK(dq.padding_untouched());
}

template <class T>
void check_full_width(index_type tokens, index_type query_heads, index_type key_heads, index_type d,
                      std::uint32_t seed) {
    INFO(type_name<T>() << " tokens " << tokens << " heads " << query_heads << "/" << key_heads << " d " << d);
    const auto options = norm::presets::olmo2();
    const index_type q_width = query_heads * d, k_width = key_heads * d;
    // Rows of head_dim, dense (the [tokens, heads, head_dim] layout): read a token at a time.
    test_matrix<T> q(tokens * query_heads, d, random_values(tokens * q_width, seed, 0.0, 3.0), 0),
        k(tokens * key_heads, d, random_values(tokens * k_width, seed + 1), 0);
    test_matrix<T> q_out(tokens * query_heads, d, 0), k_out(tokens * key_heads, d, 0);
    const auto q_weight_values = stored<T>(random_values(q_width, seed + 2, 1.0, 0.3)),
               k_weight_values = stored<T>(random_values(k_width, seed + 3, 1.0, 0.3));
    const auto q_weight = to_storage<T>(q_weight_values), k_weight = to_storage<T>(k_weight_values);
    std::vector<core::statistic_t<T>> q_rstd(tokens), k_rstd(tokens), dq_weight(q_width), dk_weight(k_width);
    norm::qk_rms_norm_forward(q.view, k.view, q_weight, k_weight, q_out.view, k_out.view, q_rstd, k_rstd, options);
    std::vector<double> q_ref, k_ref, q_rstd_ref, k_rstd_ref;
    reference::rms_norm_forward(q.values(), {tokens, q_width}, q_weight_values, false, options.eps, q_ref, q_rstd_ref);
    reference::rms_norm_forward(k.values(), {tokens, k_width}, k_weight_values, false, options.eps, k_ref, k_rstd_ref);
    CHECK(relative_error(q_out.values(), q_ref) < tolerance<T>() * 4);
    CHECK(relative_error(k_out.values(), k_ref) < tolerance<T>() * 4);
    CHECK(relative_error(to_double(q_rstd), q_rstd_ref) < std::max(tolerance<T>(), 2e-6));

    test_matrix<T> dq_out(tokens * query_heads, d, random_values(tokens * q_width, seed + 4), 0),
        dk_out(tokens * key_heads, d, random_values(tokens * k_width, seed + 5), 0);
    test_matrix<T> dq(tokens * query_heads, d, 0), dk(tokens * key_heads, d, 0);
    norm::qk_rms_norm_backward(dq_out.view, dk_out.view, q.view, k.view, q_weight, k_weight, dq.view, dk.view,
                               dq_weight, dk_weight, q_rstd, k_rstd, options);
    std::vector<double> dq_ref, dk_ref, dq_weight_ref, dk_weight_ref;
    reference::rms_norm_backward(dq_out.values(), q.values(), {tokens, q_width}, q_weight_values, false, options.eps,
                                 dq_ref, dq_weight_ref);
    reference::rms_norm_backward(dk_out.values(), k.values(), {tokens, k_width}, k_weight_values, false, options.eps,
                                 dk_ref, dk_weight_ref);
    CHECK(relative_error(dq.values(), dq_ref, max_abs(q_rstd_ref) * max_abs(dq_out.values()) * 2) <
          gradient_tolerance<T>());
    CHECK(relative_error(dk.values(), dk_ref, max_abs(k_rstd_ref) * max_abs(dk_out.values()) * 2) <
          gradient_tolerance<T>());
    CHECK(relative_error(to_double(dq_weight), dq_weight_ref) < (std::is_same_v<T, double> ? 1e-11 : 1e-4));
    CHECK(relative_error(to_double(dk_weight), dk_weight_ref) < (std::is_same_v<T, double> ? 1e-11 : 1e-4));
}

}  // namespace

TEMPLATE_TEST_CASE("l2_norm matches the reference over SIMD tails, strides and unaligned rows", "[l2_norm]", float,
                   double, Eigen::bfloat16, Eigen::half) {
    std::uint32_t seed = 300;
    for (index_type n : tail_dims) {
        for (index_type rows : {index_type(1), index_type(3), index_type(40)}) {
            if (rows * n > 200000) continue;
            check_l2<TestType>(rows, n, n % 3, 1.0, seed++);
        }
        check_l2<TestType>(5, n, 1, norm::scale_norm_initial_gain(n), seed++);
        check_l2<TestType>(2, n, 0, -0.75, seed++);
    }
}

TEMPLATE_TEST_CASE("qk_l2_norm (Henry et al.) matches the reference for q and k in one call", "[qk_norm]", float,
                   double, Eigen::bfloat16, Eigen::half) {
    std::uint32_t seed = 400;
    for (index_type d : {index_type(1), index_type(15), index_type(17), index_type(64), index_type(128),
                         index_type(129), index_type(256)}) {
        check_qk_l2<TestType>(5, 4, 2, d, d % 2, seed++);
        check_qk_l2<TestType>(1, 1, 1, d, 0, seed++);
    }
}

TEMPLATE_TEST_CASE("qk_rms_norm (per head) matches RMSNorm over rows of head_dim", "[qk_norm]", float, double,
                   Eigen::bfloat16, Eigen::half) {
    std::uint32_t seed = 500;
    for (index_type d : {index_type(1), index_type(3), index_type(16), index_type(33), index_type(64), index_type(128),
                         index_type(256)}) {
        check_qk_rms<TestType>(6, 4, 2, d, (d + 1) % 3, norm::presets::qwen3(), seed++);
        check_qk_rms<TestType>(3, 2, 2, d, 0, norm::presets::gemma3(), seed++);
    }
}

TEMPLATE_TEST_CASE("qk_full_width_rms_norm (OLMo2) matches RMSNorm over heads x head_dim", "[qk_norm]", float, double,
                   Eigen::bfloat16, Eigen::half) {
    std::uint32_t seed = 600;
    for (index_type d : {index_type(1), index_type(7), index_type(16), index_type(64), index_type(128)}) {
        check_full_width<TestType>(5, 4, 2, d, seed++);
        check_full_width<TestType>(1, 3, 3, d, seed++);
    }
}

TEST_CASE("qk_l2_norm gradients (dq, dk, dg) agree with finite differences through the scores", "[qk_norm]") {
    // loss = Σ_h Σ W_h⊙(g·q̂_h k̂_hᵀ) over two heads, as a function of q, k and g.
    const index_type tokens = 4, heads = 2, d = 6;
    const auto q = random_values(tokens * heads * d, 71), k = random_values(tokens * heads * d, 72, 0.3);
    const auto weights = random_values(heads * tokens * tokens, 73);
    const double gain = 1.7, eps = 1e-12;
    const auto head_of = [&](const std::vector<double>& x, index_type h) {
        std::vector<double> out(tokens * d);
        for (index_type t = 0; t < tokens; ++t)
            for (index_type c = 0; c < d; ++c) out[t * d + c] = x[(t * heads + h) * d + c];
        return out;
    };
    const auto loss = [&](const std::vector<double>& qs, const std::vector<double>& ks, double g) {
        const auto q_hat = reference::l2_norm_forward(qs, {tokens * heads, d}, g, eps);
        const auto k_hat = reference::l2_norm_forward(ks, {tokens * heads, d}, 1.0, eps);
        double total = 0;
        for (index_type h = 0; h < heads; ++h) {
            const auto scores = reference::qk_scores(head_of(q_hat, h), head_of(k_hat, h), tokens, tokens, d);
            for (index_type s = 0; s < tokens * tokens; ++s) total += weights[h * tokens * tokens + s] * scores[s];
        }
        return total;
    };

    using tensor = Eigen::Tensor<double, 3, Eigen::RowMajor>;
    tensor q_t(tokens, heads, d), k_t(tokens, heads, d), q_out(tokens, heads, d), k_out(tokens, heads, d),
        dq_out(tokens, heads, d), dk_out(tokens, heads, d), dq(tokens, heads, d), dk(tokens, heads, d);
    std::copy(q.begin(), q.end(), q_t.data());
    std::copy(k.begin(), k.end(), k_t.data());
    norm::qk_l2_norm_forward(q_t, k_t, gain, q_out, k_out);
    for (index_type h = 0; h < heads; ++h) {
        Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> scores(tokens, tokens),
            scores_gradient(tokens, tokens);
        reference::qk_norm_scores(reference::head_view(q_out, h), reference::head_view(k_out, h), scores);
        const auto expected = reference::qk_scores(
            head_of(std::vector<double>(q_out.data(), q_out.data() + q_out.size()), h),
            head_of(std::vector<double>(k_out.data(), k_out.data() + k_out.size()), h), tokens, tokens, d);
        CHECK(relative_error(std::vector<double>(scores.data(), scores.data() + scores.size()), expected) < 1e-14);
        std::copy(weights.begin() + h * tokens * tokens, weights.begin() + (h + 1) * tokens * tokens,
                  scores_gradient.data());
        reference::qk_norm_scores_backward(scores_gradient, reference::head_view(q_out, h),
                                           reference::head_view(k_out, h), reference::head_view(dq_out, h),
                                           reference::head_view(dk_out, h));
    }
    const double dg = norm::qk_l2_norm_backward(dq_out, dk_out, q_t, k_t, gain, dq, dk);
    const std::vector<double> dq_v(dq.data(), dq.data() + dq.size()), dk_v(dk.data(), dk.data() + dk.size());
    CHECK(relative_error(dq_v, finite_difference(q, [&](const auto& v) { return loss(v, k, gain); })) < 1e-7);
    CHECK(relative_error(dk_v, finite_difference(k, [&](const auto& v) { return loss(q, v, gain); })) < 1e-7);
    const double dg_fd = finite_difference({gain}, [&](const auto& v) { return loss(q, k, v[0]); })[0];
    CHECK(dg == Approx(dg_fd).epsilon(1e-7));
}

TEST_CASE("l2_norm gradients agree with finite differences, clamped rows included", "[l2_norm]") {
    const index_type rows = 4, n = 9;
    auto x = random_values(rows * n, 81);
    for (index_type j = 0; j < n; ++j) x[n + j] *= 0.05;  // row 1: ‖x‖ < eps = 0.5, on the clamp
    const auto dy = random_values(rows * n, 82);
    const double eps = 0.5, gain = 2.3;
    std::vector<double> y(rows * n), dx(rows * n);
    norm::l2_norm_options options;
    options.eps = eps;
    const double dg = norm::l2_norm_backward(view(dy.data(), rows, n), view(x.data(), rows, n), gain,
                                             view(dx.data(), rows, n), options);
    const auto loss = [&](const std::vector<double>& xs, double g) {
        return dot(reference::l2_norm_forward(xs, {rows, n}, g, eps), dy);
    };
    CHECK(relative_error(dx, finite_difference(x, [&](const auto& v) { return loss(v, gain); })) < 1e-7);
    CHECK(dg == Approx(finite_difference({gain}, [&](const auto& v) { return loss(x, v[0]); })[0]).epsilon(1e-8));
    // The clamped row is linear: dx = g·dy/eps exactly.
    for (index_type j = 0; j < n; ++j) CHECK(dx[n + j] == Approx(gain * dy[n + j] / eps).epsilon(1e-14));
}

TEST_CASE("qk_rms_norm gradients agree with finite differences (per head and full width)", "[qk_norm]") {
    const index_type tokens = 3, heads = 2, d = 5;
    const auto q = random_values(tokens * heads * d, 91), k = random_values(tokens * heads * d, 92, 0.5);
    const auto dq_out = random_values(q.size(), 93), dk_out = random_values(k.size(), 94);
    for (bool full_width : {false, true}) {
        INFO("full width " << full_width);
        const index_type width = full_width ? heads * d : d, rows = tokens * heads * d / width;
        const auto qw = random_values(width, 95, 0.1, 0.5), kw = random_values(width, 96, 0.1, 0.5);
        auto options = full_width ? norm::presets::olmo2() : norm::presets::gemma3();
        std::vector<double> q_out(q.size()), k_out(k.size()), q_rstd(rows), k_rstd(rows), dq(q.size()), dk(k.size()),
            dqw(width), dkw(width);
        const auto qv = view(q.data(), tokens * heads, d), kv = view(k.data(), tokens * heads, d);
        if (full_width) {
            norm::qk_rms_norm_forward(qv, kv, qw, kw, view(q_out.data(), tokens * heads, d),
                                      view(k_out.data(), tokens * heads, d), q_rstd, k_rstd, options);
            norm::qk_rms_norm_backward(view(dq_out.data(), tokens * heads, d), view(dk_out.data(), tokens * heads, d),
                                       qv, kv, qw, kw, view(dq.data(), tokens * heads, d),
                                       view(dk.data(), tokens * heads, d), dqw, dkw, q_rstd, k_rstd, options);
        } else {
            norm::qk_rms_norm_forward(qv, kv, qw, kw, view(q_out.data(), tokens * heads, d),
                                      view(k_out.data(), tokens * heads, d), q_rstd, k_rstd, options);
            norm::qk_rms_norm_backward(view(dq_out.data(), tokens * heads, d), view(dk_out.data(), tokens * heads, d),
                                       qv, kv, qw, kw, view(dq.data(), tokens * heads, d),
                                       view(dk.data(), tokens * heads, d), dqw, dkw, q_rstd, k_rstd, options);
        }
        const auto loss = [&](const std::vector<double>& x, const std::vector<double>& w,
                              const std::vector<double>& upstream) {
            std::vector<double> out, r;
            reference::rms_norm_forward(x, {rows, width}, w, options.offset, options.eps, out, r);
            return dot(out, upstream);
        };
        CHECK(relative_error(dq, finite_difference(q, [&](const auto& v) { return loss(v, qw, dq_out); })) < 1e-7);
        CHECK(relative_error(dk, finite_difference(k, [&](const auto& v) { return loss(v, kw, dk_out); })) < 1e-7);
        CHECK(relative_error(dqw, finite_difference(qw, [&](const auto& v) { return loss(q, v, dq_out); })) < 1e-7);
        CHECK(relative_error(dkw, finite_difference(kw, [&](const auto& v) { return loss(k, v, dk_out); })) < 1e-7);
    }
}

TEST_CASE("QK-norm and L2 properties", "[qk_norm][l2_norm]") {
    SECTION("the paper's initial gain is log2(L^2 - L)") {
        CHECK(norm::qk_norm_initial_gain(2) == 1.0);
        CHECK(norm::qk_norm_initial_gain(1024) == Approx(std::log2(1024.0 * 1023.0)).epsilon(1e-15));
        require_error_naming([] { norm::qk_norm_initial_gain(1); }, "sequence_length");
    }
    SECTION("per-head QK RMSNorm is RMSNorm over the reshaped rows, bit for bit") {
        const index_type tokens = 7, heads = 3, d = 40;
        Eigen::Tensor<Eigen::bfloat16, 3, Eigen::RowMajor> q(tokens, heads, d), k(tokens, heads, d),
            q_out(tokens, heads, d), k_out(tokens, heads, d);
        const auto values = to_storage<Eigen::bfloat16>(random_values(2 * q.size(), 101));
        std::copy(values.begin(), values.begin() + q.size(), q.data());
        std::copy(values.begin() + q.size(), values.end(), k.data());
        const auto weight = to_storage<Eigen::bfloat16>(random_values(d, 102, 0.0, 0.2));
        for (const auto& options : {norm::presets::qwen3(), norm::presets::gemma3()}) {
            norm::qk_rms_norm_forward(q, k, weight, weight, q_out, k_out, {}, {}, options);
            std::vector<Eigen::bfloat16> expected(q.size());
            norm::rms_norm_forward(view(q.data(), tokens * heads, d), weight, view(expected.data(), tokens * heads, d),
                                   {}, options);
            CHECK(std::memcmp(expected.data(), q_out.data(), expected.size() * sizeof(Eigen::bfloat16)) == 0);
            norm::rms_norm_forward(view(k.data(), tokens * heads, d), weight, view(expected.data(), tokens * heads, d),
                                   {}, options);
            CHECK(std::memcmp(expected.data(), k_out.data(), expected.size() * sizeof(Eigen::bfloat16)) == 0);
        }
    }
    SECTION("ScaleNorm with g = sqrt(n) is unit-weight RMSNorm as eps -> 0") {
        const index_type rows = 5, n = 77;
        const auto x = random_values(rows * n, 111, 0.5, 3.0);
        std::vector<double> y(rows * n), z(rows * n);
        norm::l2_norm_options l2;
        l2.eps = 1e-300;
        norm::rms_norm_options rms;
        rms.eps = 1e-300;
        norm::l2_norm_forward(view(x.data(), rows, n), norm::scale_norm_initial_gain(n), view(y.data(), rows, n), l2);
        norm::rms_norm_forward(view(x.data(), rows, n), {}, view(z.data(), rows, n), {}, rms);
        CHECK(relative_error(y, z) < 1e-14);
    }
    SECTION("an all-zero row gives y = 0 and dx = g*dy/eps, finite") {
        std::vector<float> zeros(2 * 19, 0.0f), y(2 * 19, 1.0f), dy(2 * 19, 0.5f), dx(2 * 19);
        norm::l2_norm_options options;
        options.eps = 1e-6;
        norm::l2_norm_forward(view(zeros.data(), 2, 19), 3.0, view(y.data(), 2, 19), options);
        for (float value : y) CHECK(value == 0.0f);
        const float dg = norm::l2_norm_backward(view(dy.data(), 2, 19), view(zeros.data(), 2, 19), 3.0,
                                                view(dx.data(), 2, 19), options);
        CHECK(dg == 0.0f);
        for (float value : dx) CHECK(value == Approx(3.0 * 0.5 / 1e-6).epsilon(1e-6));
    }
    SECTION("nGPT: l2_normalize_rows puts every row on the unit sphere, in place") {
        Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> weight = Eigen::MatrixXf::Random(33, 70);
        weight.row(4).setZero();
        const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> before = weight;
        norm::l2_normalize_rows(weight);
        for (index_type i = 0; i < weight.rows(); ++i) {
            if (i == 4)
                CHECK(weight.row(i).isZero(0));
            else {
                CHECK(weight.row(i).norm() == Approx(1.0).epsilon(1e-6));
                CHECK((weight.row(i) * before.row(i).norm()).isApprox(before.row(i), 1e-6f));
            }
        }
        // A block of a wider matrix (strided rows) is normalized without touching its neighbours.
        Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> wide =
            Eigen::MatrixXf::Constant(6, 20, 2.0f);
        norm::l2_normalize_rows(wide.leftCols(9));
        CHECK(wide.leftCols(9).isApproxToConstant(1.0f / 3.0f, 1e-6f));
        CHECK(wide.rightCols(11).isApproxToConstant(2.0f, 0.0f));
    }
    SECTION("zero tokens is a no-op with dg = 0") {
        std::vector<float> none;
        const auto empty = view(none.data(), 0, 64);
        norm::qk_l2_norm_forward(empty, empty, 2.0, empty, empty);
        CHECK(norm::qk_l2_norm_backward(empty, empty, empty, empty, 2.0, empty, empty) == 0.0f);
    }
}

TEMPLATE_TEST_CASE("QK-norm and L2 norm are bitwise identical for 1 and 2 threads", "[qk_norm][l2_norm][threads]",
                   float, Eigen::bfloat16) {
    using T = TestType;
    for (index_type tokens : {index_type(1), index_type(9), index_type(700)}) {
        const index_type heads = 4, d = 64, rows = tokens * heads;
        test_matrix<T> q(rows, d, random_values(rows * d, 121)), k(rows / 2, d, random_values(rows * d / 2, 122)),
            dq_out(rows, d, random_values(rows * d, 123)), dk_out(rows / 2, d, random_values(rows * d / 2, 124));
        const auto weight = to_storage<T>(random_values(d, 125, 1.0, 0.2)),
                   wide_weight = to_storage<T>(random_values(heads * d, 126, 1.0, 0.2)),
                   wide_key_weight = to_storage<T>(random_values(heads * d / 2, 127, 1.0, 0.2));
        std::vector<std::vector<T>> outputs[2];
        std::vector<std::vector<float>> statistics[2];
        for (int t = 0; t < 2; ++t) {
            const int threads = t + 1;
            const auto keep = [&](const test_matrix<T>& m) { outputs[t].push_back(m.storage); };
            test_matrix<T> q_out(rows, d), k_out(rows / 2, d), dq(rows, d), dk(rows / 2, d);
            norm::l2_norm_options l2;
            l2.threads = threads;
            norm::qk_l2_norm_forward(q.view, k.view, 2.5, q_out.view, k_out.view, l2);
            const float dg =
                norm::qk_l2_norm_backward(dq_out.view, dk_out.view, q.view, k.view, 2.5, dq.view, dk.view, l2);
            keep(q_out), keep(k_out), keep(dq), keep(dk);
            statistics[t].push_back({dg});

            auto options = norm::presets::qwen3();
            options.threads = threads;
            std::vector<float> q_rstd(rows), k_rstd(rows / 2), dqw(d), dkw(d);
            norm::qk_rms_norm_forward(q.view, k.view, weight, weight, q_out.view, k_out.view, q_rstd, k_rstd, options);
            norm::qk_rms_norm_backward(dq_out.view, dk_out.view, q.view, k.view, weight, weight, dq.view, dk.view, dqw,
                                       dkw, q_rstd, k_rstd, options);
            keep(q_out), keep(k_out), keep(dq), keep(dk);
            statistics[t].insert(statistics[t].end(), {q_rstd, k_rstd, dqw, dkw});

            auto olmo = norm::presets::olmo2();
            olmo.threads = threads;
            std::vector<float> tq(tokens), tk(tokens), wq(heads * d), wk(heads * d / 2);
            test_matrix<T> qc(rows, d, q.values(), 0, false), kc(rows / 2, d, k.values(), 0, false),
                qo(rows, d, 0, false), ko(rows / 2, d, 0, false);
            norm::qk_rms_norm_forward(qc.view, kc.view, wide_weight, wide_key_weight, qo.view, ko.view, tq, tk, olmo);
            test_matrix<T> dqc(rows, d, dq_out.values(), 0, false), dkc(rows / 2, d, dk_out.values(), 0, false),
                gq(rows, d, 0, false), gk(rows / 2, d, 0, false);
            norm::qk_rms_norm_backward(dqc.view, dkc.view, qc.view, kc.view, wide_weight, wide_key_weight, gq.view,
                                       gk.view, wq, wk, tq, tk, olmo);
            keep(qo), keep(ko), keep(gq), keep(gk);
            statistics[t].insert(statistics[t].end(), {tq, tk, wq, wk});
            test_matrix<T> y(rows, d);
            norm::l2_norm_forward(q.view, 0.5, y.view, l2);
            keep(y);
        }
        REQUIRE(outputs[0].size() == outputs[1].size());
        for (std::size_t i = 0; i < outputs[0].size(); ++i)
            CHECK(std::memcmp(outputs[0][i].data(), outputs[1][i].data(), outputs[0][i].size() * sizeof(T)) == 0);
        CHECK(statistics[0] == statistics[1]);
    }
}

TEST_CASE("QK-norm accepts [tokens, heads, head_dim] tensors and GQA head counts", "[qk_norm][view]") {
    const index_type tokens = 5, heads = 4, key_heads = 2, d = 32;
    Eigen::Tensor<float, 3, Eigen::RowMajor> q(tokens, heads, d), k(tokens, key_heads, d), q_out(tokens, heads, d),
        k_out(tokens, key_heads, d);
    q.setRandom();
    k.setRandom();
    Eigen::VectorXf q_weight = Eigen::VectorXf::Random(d), k_weight = Eigen::VectorXf::Random(d);
    norm::qk_rms_norm_forward(q, k, q_weight, k_weight, q_out, k_out, {}, {}, norm::presets::qwen3());
    // The same data as a matrix whose rows are heads.
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> q_rows(tokens * heads, d),
        q_rows_out(tokens * heads, d);
    std::copy(q.data(), q.data() + q.size(), q_rows.data());
    Eigen::TensorMap<Eigen::Tensor<float, 3, Eigen::RowMajor>> k_map(k.data(), tokens, key_heads, d);
    Eigen::Tensor<float, 3, Eigen::RowMajor> k_out2(tokens, key_heads, d);
    norm::qk_rms_norm_forward(q_rows, k_map, q_weight, k_weight, q_rows_out, k_out2, {}, {}, norm::presets::qwen3());
    CHECK(std::equal(q_rows_out.data(), q_rows_out.data() + q_rows_out.size(), q_out.data()));
    CHECK(std::equal(k_out2.data(), k_out2.data() + k_out2.size(), k_out.data()));
    // Full width from the rank-3 tensor and from one row per token agree.
    Eigen::VectorXf wide_q = Eigen::VectorXf::Random(heads * d), wide_k = Eigen::VectorXf::Random(key_heads * d);
    norm::qk_rms_norm_forward(q, k, wide_q, wide_k, q_out, k_out, {}, {}, norm::presets::olmo2());
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> per_token(tokens, heads * d),
        per_token_out(tokens, heads * d);
    std::copy(q.data(), q.data() + q.size(), per_token.data());
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> k_token(tokens, key_heads * d),
        k_token_out(tokens, key_heads * d);
    std::copy(k.data(), k.data() + k.size(), k_token.data());
    norm::qk_rms_norm_forward(per_token, k_token, wide_q, wide_k, per_token_out, k_token_out, {}, {},
                              norm::presets::olmo2());
    CHECK(std::equal(per_token_out.data(), per_token_out.data() + per_token_out.size(), q_out.data()));
    CHECK(std::equal(k_token_out.data(), k_token_out.data() + k_token_out.size(), k_out.data()));
}

TEST_CASE("QK-norm and L2 norm reject bad input, naming the argument", "[qk_norm][l2_norm][errors]") {
    std::vector<float> a(48, 1.0f), b(48), c(48), e(48);
    const std::vector<float> weight(8, 1.0f), short_weight(5, 1.0f), wide(24, 1.0f), bad_wide(20, 1.0f);
    const auto q = view(a.data(), 6, 8), out = view(b.data(), 6, 8);
    norm::l2_norm_options zero_eps;
    zero_eps.eps = 0;
    require_error_naming([&] { norm::l2_norm_forward(q, 1.0, view(b.data(), 5, 8)); }, "output");
    require_error_naming([&] { norm::l2_norm_forward(q, 1.0, out, zero_eps); }, "eps");
    require_error_naming([&] { norm::l2_norm_forward(q, std::nan(""), out); }, "gain");
    require_error_naming([&] { norm::l2_norm_backward(q, view(c.data(), 6, 7), 1.0, out); }, "output_gradient");
    require_error_naming([&] { norm::l2_norm_backward(q, q, 1.0, view(b.data(), 3, 8)); }, "input_gradient");
    require_error_naming([&] { norm::qk_l2_norm_forward(q, view(c.data(), 6, 7), 1.0, out, view(e.data(), 6, 7)); },
                         "head_dim");
    require_error_naming([&] { norm::qk_l2_norm_forward(q, q, 1.0, out, view(e.data(), 5, 8)); }, "key_output");
    require_error_naming(
        [&] { norm::qk_l2_norm_backward(q, view(c.data(), 5, 8), q, q, 1.0, out, view(e.data(), 6, 8)); },
        "key_output_gradient");
    require_error_naming(
        [&] {
            norm::qk_rms_norm_forward(q, q, short_weight, weight, out, view(e.data(), 6, 8), {}, {},
                                      norm::presets::qwen3());
        },
        "query_weight");
    require_error_naming(
        [&] {
            norm::qk_rms_norm_forward(q, q, weight, short_weight, out, view(e.data(), 6, 8), {}, {},
                                      norm::presets::qwen3());
        },
        "key_weight");
    require_error_naming(
        [&] {
            norm::qk_rms_norm_forward(q, q, weight, weight, out, view(e.data(), 6, 8), vector_view<float>(c.data(), 2));
        },
        "query_rstd");
    require_error_naming(
        [&] {
            norm::qk_rms_norm_backward(q, q, q, q, weight, weight, out, view(e.data(), 6, 8), {}, {}, {}, {},
                                       norm::presets::qwen3());
        },
        "query_rstd");
    require_error_naming(
        [&] {
            norm::qk_rms_norm_forward(q, q, bad_wide, bad_wide, out, view(e.data(), 6, 8), {}, {},
                                      norm::presets::olmo2());
        },
        "tile");
    require_error_naming(
        [&] {
            norm::qk_rms_norm_forward(view(a.data(), 5, 8), view(a.data(), 5, 8), wide, wide, view(b.data(), 5, 8),
                                      view(e.data(), 5, 8), {}, {}, norm::presets::olmo2());
        },
        "whole number of tokens");
    require_error_naming(
        [&] {
            norm::qk_rms_norm_forward(view(a.data(), 3, 8, 16), q, wide, wide, view(b.data(), 3, 8, 16), out, {}, {},
                                      norm::presets::olmo2());
        },
        "contiguous");
    Eigen::Tensor<float, 3, Eigen::RowMajor> t(2, 3, 4);
    require_error_naming([&] { reference::head_view(t, 3); }, "head");
}
