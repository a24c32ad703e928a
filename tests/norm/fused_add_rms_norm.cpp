// Fused residual add + RMSNorm against tests/reference/norm_qk.hpp.
#include "reference/norm_qk.hpp"
#include "support.hpp"

#include <normkit/norm/fused_add_rms_norm.hpp>

using namespace normkit;
using namespace normkit::testing;

namespace {

template <class T>
void check_fused(index_type rows, index_type n, index_type padding, bool offset, bool has_weight, std::uint32_t seed) {
    INFO(type_name<T>() << " rows " << rows << " n " << n << " padding " << padding << " offset " << offset
                        << " weight " << has_weight);
    norm::rms_norm_options options;
    options.eps = 1e-6;
    options.offset = offset;
    test_matrix<T> x(rows, n, random_values(rows * n, seed, 0.1, 1.0), padding),
        residual(rows, n, random_values(rows * n, seed + 1, 0.0, 3.0), padding + 1);
    test_matrix<T> y(rows, n, padding + 2);
    const auto weight_values =
        has_weight ? stored<T>(random_values(n, seed + 2, offset ? 0.0 : 1.0, 0.4)) : std::vector<double>{};
    const auto weight = to_storage<T>(weight_values);
    std::vector<core::statistic_t<T>> rstd(rows), dweight(n);
    const auto x_values = x.values(), residual_values = residual.values();

    norm::fused_add_rms_norm_forward(x.view, weight, residual.view, y.view, rstd, options);
    std::vector<double> h_ref, y_ref;
    reference::fused_add_rms_norm_forward(x_values, residual_values, {rows, n}, weight_values, offset, options.eps,
                                          h_ref, y_ref);
    // The stream holds x + s rounded once to T.
    CHECK(relative_error(residual.values(), h_ref) < tolerance<T>());
    // y is RMSNorm of the stored h: compare with the reference on that h.
    std::vector<double> y_stored_ref, rstd_ref;
    reference::rms_norm_forward(residual.values(), {rows, n}, weight_values, offset, options.eps, y_stored_ref,
                                rstd_ref);
    CHECK(relative_error(y.values(), y_stored_ref) < tolerance<T>() * 4);
    CHECK(relative_error(to_double(rstd), rstd_ref) < std::max(tolerance<T>(), 2e-6));
    CHECK(y.padding_untouched());
    CHECK(residual.padding_untouched());

    test_matrix<T> dy(rows, n, random_values(rows * n, seed + 3), padding),
        stream_gradient(rows, n, random_values(rows * n, seed + 4), padding + 1);
    const auto stream_gradient_values = stream_gradient.values();
    norm::fused_add_rms_norm_backward(dy.view, residual.view, weight, stream_gradient.view, dweight, rstd, options);
    std::vector<double> dh_ref, dweight_ref;
    reference::fused_add_rms_norm_backward(dy.values(), stream_gradient_values, residual.values(), {rows, n},
                                           weight_values, offset, options.eps, dh_ref, dweight_ref);
    const double gradient_tolerance =
        std::is_same_v<T, double> ? 1e-10 : (std::is_same_v<T, float> ? 1e-4 : tolerance<T>() * 4);
    const double terms = max_abs(rstd_ref) * max_abs(dy.values()) * (has_weight ? 1.0 + max_abs(weight_values) : 1.0) +
                         max_abs(stream_gradient_values);
    CHECK(relative_error(stream_gradient.values(), dh_ref, terms) < gradient_tolerance);
    CHECK(relative_error(to_double(dweight), dweight_ref) < (std::is_same_v<T, double> ? 1e-11 : 1e-4));
    CHECK(stream_gradient.padding_untouched());
}

}  // namespace

TEMPLATE_TEST_CASE("fused_add_rms_norm matches the reference over SIMD tails, strides and unaligned rows",
                   "[fused_add_rms_norm]", float, double, Eigen::bfloat16, Eigen::half) {
    std::uint32_t seed = 700;
    for (index_type n : tail_dims) {
        for (index_type rows : {index_type(1), index_type(3), index_type(40)}) {
            if (rows * n > 200000) continue;
            check_fused<TestType>(rows, n, n % 4, false, true, seed++);
        }
        check_fused<TestType>(4, n, 1, true, true, seed++);
        check_fused<TestType>(2, n, 0, false, false, seed++);
    }
}

TEST_CASE("fused_add_rms_norm gradients agree with central finite differences", "[fused_add_rms_norm]") {
    const index_type rows = 3, n = 13;
    const double eps = 1e-6;
    const auto x = random_values(rows * n, 131), residual = random_values(rows * n, 132, 0.5),
               dy = random_values(rows * n, 133), stream_gradient = random_values(rows * n, 134),
               weight = random_values(n, 135, 0.1, 0.5);
    for (bool offset : {false, true}) {
        norm::rms_norm_options options;
        options.eps = eps;
        options.offset = offset;
        std::vector<double> stream = residual, y(rows * n), rstd(rows), dh = stream_gradient, dweight(n);
        norm::fused_add_rms_norm_forward(view(x.data(), rows, n), weight, view(stream.data(), rows, n),
                                         view(y.data(), rows, n), rstd, options);
        norm::fused_add_rms_norm_backward(view(dy.data(), rows, n), view(stream.data(), rows, n), weight,
                                          view(dh.data(), rows, n), dweight, rstd, options);
        // loss = Σ dy⊙y + Σ d⊙h, with h = x + s flowing on to later layers.
        const auto loss = [&](const std::vector<double>& xs, const std::vector<double>& s,
                              const std::vector<double>& w) {
            std::vector<double> h, out;
            reference::fused_add_rms_norm_forward(xs, s, {rows, n}, w, offset, eps, h, out);
            return dot(out, dy) + dot(h, stream_gradient);
        };
        CHECK(relative_error(dh, finite_difference(x, [&](const auto& v) { return loss(v, residual, weight); })) <
              1e-7);
        CHECK(relative_error(dh, finite_difference(residual, [&](const auto& v) { return loss(x, v, weight); })) <
              1e-7);
        CHECK(relative_error(dweight, finite_difference(weight, [&](const auto& v) { return loss(x, residual, v); })) <
              1e-7);
    }
}

TEMPLATE_TEST_CASE("fused_add_rms_norm is add (in the storage type) then rms_norm, bit for bit", "[fused_add_rms_norm]",
                   float, Eigen::bfloat16, Eigen::half) {
    using T = TestType;
    const index_type rows = 37, n = 200;
    test_matrix<T> x(rows, n, random_values(rows * n, 141), 0, false),
        residual(rows, n, random_values(rows * n, 142, 0.0, 4.0), 0, false);
    const auto weight = to_storage<T>(random_values(n, 143, 0.0, 0.3));
    for (auto casting : {norm::rms_norm_casting::llama, norm::rms_norm_casting::gemma}) {
        norm::rms_norm_options options;
        options.casting = casting;
        options.offset = true;
        // Separately: h = T(x + s), then rms_norm_forward(h).
        std::vector<T> h(rows * n), y_separate(rows * n);
        for (index_type i = 0; i < rows * n; ++i)
            h[i] = core::from_compute<T>(core::to_compute(x.storage[i]) + core::to_compute(residual.storage[i]));
        std::vector<float> rstd_separate(rows), rstd_fused(rows);
        norm::rms_norm_forward(view(h.data(), rows, n), weight, view(y_separate.data(), rows, n), rstd_separate,
                               options);
        test_matrix<T> stream = residual, y(rows, n, 0, false);
        stream.view.data = stream.storage.data();
        norm::fused_add_rms_norm_forward(x.view, weight, stream.view, y.view, rstd_fused, options);
        CHECK(std::memcmp(stream.storage.data(), h.data(), h.size() * sizeof(T)) == 0);
        CHECK(std::memcmp(y.storage.data(), y_separate.data(), y_separate.size() * sizeof(T)) == 0);
        CHECK(rstd_fused == rstd_separate);
    }
}

TEST_CASE("fused_add_rms_norm degenerate rows, aliasing and threads", "[fused_add_rms_norm][threads]") {
    SECTION("x = -s gives h = 0, y = 0 and dh = r*g + d") {
        std::vector<float> x(2 * 9, 1.5f), stream(2 * 9, -1.5f), y(2 * 9, 7.0f), rstd(2), dy(2 * 9, 0.25f),
            d(2 * 9, 1.0f), dw(9);
        norm::fused_add_rms_norm_forward(view(x.data(), 2, 9), {}, view(stream.data(), 2, 9), view(y.data(), 2, 9),
                                         rstd);
        for (float value : stream) CHECK(value == 0.0f);
        for (float value : y) CHECK(value == 0.0f);
        norm::fused_add_rms_norm_backward(view(dy.data(), 2, 9), view(stream.data(), 2, 9), {}, view(d.data(), 2, 9),
                                          dw, rstd);
        for (float value : d) CHECK(value == Approx(0.25 * rstd[0] + 1.0).epsilon(1e-6));
        for (float value : dw) CHECK(value == 0.0f);
    }
    SECTION("the output may be the input's memory") {
        const auto values = random_values(4 * 33, 151), residual_values = random_values(4 * 33, 152);
        std::vector<float> x(values.begin(), values.end()), stream(residual_values.begin(), residual_values.end()),
            y(4 * 33);
        std::vector<float> in_place = x, stream2 = stream;
        norm::fused_add_rms_norm_forward(view(x.data(), 4, 33), {}, view(stream.data(), 4, 33), view(y.data(), 4, 33));
        norm::fused_add_rms_norm_forward(view(in_place.data(), 4, 33), {}, view(stream2.data(), 4, 33),
                                         view(in_place.data(), 4, 33));
        CHECK(in_place == y);
        CHECK(stream2 == stream);
    }
    SECTION("1 and 2 threads give the same bits") {
        for (index_type rows : {index_type(3), index_type(100), index_type(3000)}) {
            const index_type n = 96;
            const auto x = to_storage<Eigen::bfloat16>(random_values(rows * n, 161)),
                       s = to_storage<Eigen::bfloat16>(random_values(rows * n, 162)),
                       dy = to_storage<Eigen::bfloat16>(random_values(rows * n, 163)),
                       d = to_storage<Eigen::bfloat16>(random_values(rows * n, 164)),
                       w = to_storage<Eigen::bfloat16>(random_values(n, 165, 1.0, 0.2));
            std::vector<std::vector<Eigen::bfloat16>> results[2];
            std::vector<std::vector<float>> statistics[2];
            for (int t = 0; t < 2; ++t) {
                norm::rms_norm_options options;
                options.threads = t + 1;
                auto stream = s, gradient = d;
                std::vector<Eigen::bfloat16> y(rows * n);
                std::vector<float> rstd(rows), dw(n);
                norm::fused_add_rms_norm_forward(view(x.data(), rows, n), w, view(stream.data(), rows, n),
                                                 view(y.data(), rows, n), rstd, options);
                norm::fused_add_rms_norm_backward(view(dy.data(), rows, n), view(stream.data(), rows, n), w,
                                                  view(gradient.data(), rows, n), dw, rstd, options);
                results[t] = {stream, y, gradient};
                statistics[t] = {rstd, dw};
            }
            for (int k = 0; k < 3; ++k)
                CHECK(std::memcmp(results[0][k].data(), results[1][k].data(),
                                  results[0][k].size() * sizeof(Eigen::bfloat16)) == 0);
            CHECK(statistics[0] == statistics[1]);
        }
    }
}

TEST_CASE("fused_add_rms_norm rejects bad input, naming the argument", "[fused_add_rms_norm][errors]") {
    std::vector<float> x(12, 1.0f), s(12), y(12), rstd(3), dw(4);
    const std::vector<float> weight(3, 1.0f);
    norm::rms_norm_options bad_eps;
    bad_eps.eps = -1;
    require_error_naming(
        [&] { norm::fused_add_rms_norm_forward(view(x.data(), 3, 4), {}, view(s.data(), 4, 3), view(y.data(), 3, 4)); },
        "residual");
    require_error_naming(
        [&] { norm::fused_add_rms_norm_forward(view(x.data(), 3, 4), {}, view(s.data(), 3, 4), view(y.data(), 2, 4)); },
        "output");
    require_error_naming(
        [&] {
            norm::fused_add_rms_norm_forward(view(x.data(), 3, 4), weight, view(s.data(), 3, 4), view(y.data(), 3, 4));
        },
        "weight");
    require_error_naming(
        [&] {
            norm::fused_add_rms_norm_forward(view(x.data(), 3, 4), {}, view(s.data(), 3, 4), view(y.data(), 3, 4), {},
                                             bad_eps);
        },
        "eps");
    require_error_naming(
        [&] {
            norm::fused_add_rms_norm_backward(view(x.data(), 3, 4), view(y.data(), 3, 4), {}, view(s.data(), 3, 4), {},
                                              {});
        },
        "rstd");
    require_error_naming(
        [&] {
            norm::fused_add_rms_norm_backward(view(x.data(), 3, 4), view(y.data(), 3, 4), {}, view(s.data(), 2, 4), {},
                                              rstd);
        },
        "residual_gradient");
    require_error_naming(
        [&] {
            norm::fused_add_rms_norm_backward(view(x.data(), 3, 4), view(y.data(), 3, 4), {}, view(s.data(), 3, 4),
                                              vector_view<float>(dw.data(), 3), rstd);
        },
        "weight_gradient");
}
