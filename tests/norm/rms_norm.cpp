// RMSNorm forward and backward against tests/reference/norm.hpp.
#include "methods.hpp"
#include "reference/norm.hpp"
#include "support.hpp"

#include <normkit/norm/rms_norm.hpp>

using namespace normkit;
using namespace normkit::testing;

namespace {

template <class T>
void check_forward_backward(index_type rows, index_type n, index_type padding, bool offset, bool has_weight,
                            std::uint32_t seed) {
    INFO(type_name<T>() << " rows " << rows << " n " << n << " padding " << padding << " offset " << offset
                        << " weight " << has_weight);
    const double eps = 1e-6;
    test_matrix<T> x(rows, n, random_values(rows * n, seed, 0.3, 2.0), padding);
    test_matrix<T> y(rows, n, padding + 2), dy(rows, n, random_values(rows * n, seed + 1), padding),
        dx(rows, n, padding);
    const auto weight_values =
        has_weight ? stored<T>(random_values(n, seed + 2, offset ? 0.0 : 1.0, 0.5)) : std::vector<double>{};
    const auto weight = to_storage<T>(weight_values);
    std::vector<core::statistic_t<T>> rstd(rows), dweight(n);
    norm::rms_norm_options options;
    options.eps = eps;
    options.offset = offset;

    norm::rms_norm_forward(x.view, weight, y.view, rstd, options);
    std::vector<double> y_ref, rstd_ref;
    reference::rms_norm_forward(x.values(), {rows, n}, weight_values, offset, eps, y_ref, rstd_ref);
    CHECK(relative_error(y.values(), y_ref) < tolerance<T>() * 4);
    CHECK(relative_error(to_double(rstd), rstd_ref) < std::max(tolerance<T>(), 2e-6));
    CHECK(y.padding_untouched());

    norm::rms_norm_backward(dy.view, x.view, weight, dx.view, dweight, rstd, options);
    std::vector<double> dx_ref, dweight_ref;
    reference::rms_norm_backward(dy.values(), x.values(), {rows, n}, weight_values, offset, eps, dx_ref, dweight_ref);
    const double gradient_tolerance =
        std::is_same_v<T, double> ? 1e-10 : (std::is_same_v<T, float> ? 1e-4 : tolerance<T>() * 4);
    const double terms = max_abs(rstd_ref) * max_abs(dy.values()) * (has_weight ? 1.0 + max_abs(weight_values) : 1.0);
    CHECK(relative_error(dx.values(), dx_ref, terms) < gradient_tolerance);
    CHECK(relative_error(to_double(dweight), dweight_ref) < (std::is_same_v<T, double> ? 1e-11 : 1e-4));
    CHECK(dx.padding_untouched());
}

// RMSNorm in the generic norm tests (tests/norm/methods.hpp).
const register_row_method rms_norm_entry{
    {"rms_norm",
     [](matrix_view<const float> x, matrix_view<float> y, const row_run& run) {
         const std::vector<float> weight(static_cast<std::size_t>(x.cols), 1.0f);
         norm::rms_norm_forward(x, weight, y, {}, with_run(norm::rms_norm_options{}, run));
     },
     [](const test_matrix<float>& x, const test_matrix<float>& dy, const streaming_options& execution) {
         const index_type rows = x.view.rows, n = x.view.cols;
         const auto weight = to_storage<float>(random_values(n, 25, 1.0, 0.2));
         norm::rms_norm_options options;
         set_execution(options, execution);
         test_matrix<float> y(rows, n), dx(rows, n);
         std::vector<float> rstd(rows), dweight(n);
         norm::rms_norm_forward(x.view, weight, y.view, rstd, options);
         norm::rms_norm_backward(dy.view, x.view, weight, dx.view, dweight, rstd, options);
         return std::vector<std::vector<float>>{storage_of(y), rstd, storage_of(dx), dweight};
     }}};

}  // namespace

TEMPLATE_TEST_CASE("rms_norm matches the reference over SIMD tails, strides and unaligned rows", "[rms_norm]", float,
                   double, Eigen::bfloat16, Eigen::half) {
    std::uint32_t seed = 100;
    for (index_type n : tail_dims) {
        for (index_type rows : {index_type(1), index_type(3), index_type(40)}) {
            if (rows * n > 200000) continue;
            check_forward_backward<TestType>(rows, n, (n + 1) % 4, false, true, seed++);
        }
        check_forward_backward<TestType>(5, n, 1, true, true, seed++);
        check_forward_backward<TestType>(2, n, 0, false, false, seed++);
    }
}

TEST_CASE("rms_norm gradients agree with central finite differences", "[rms_norm]") {
    const index_type rows = 3, n = 21;
    const double eps = 1e-6;
    const auto x = random_values(rows * n, 31), dy = random_values(rows * n, 32),
               weight = random_values(n, 33, 0.2, 0.5);
    for (bool offset : {false, true}) {
        norm::rms_norm_options options;
        options.eps = eps;
        options.offset = offset;
        std::vector<double> y(rows * n), rstd(rows), dx(rows * n), dweight(n);
        norm::rms_norm_forward(view(x.data(), rows, n), weight, view(y.data(), rows, n), rstd, options);
        norm::rms_norm_backward(view(dy.data(), rows, n), view(x.data(), rows, n), weight, view(dx.data(), rows, n),
                                dweight, rstd, options);
        const auto loss = [&](const std::vector<double>& xs, const std::vector<double>& w) {
            std::vector<double> out, r;
            reference::rms_norm_forward(xs, {rows, n}, w, offset, eps, out, r);
            return dot(out, dy);
        };
        CHECK(relative_error(dx, finite_difference(x, [&](const auto& v) { return loss(v, weight); })) < 1e-7);
        CHECK(relative_error(dweight, finite_difference(weight, [&](const auto& v) { return loss(x, v); })) < 1e-7);
    }
}

TEST_CASE("rms_norm properties and degenerate rows", "[rms_norm]") {
    const index_type rows = 3, n = 50;
    const auto x = random_values(rows * n, 41, 1e6, 1.0);
    SECTION("scale invariance as eps -> 0, including rows far from zero") {
        std::vector<double> scaled = x, y(rows * n), z(rows * n);
        for (auto& value : scaled) value *= 1e-3;
        norm::rms_norm_options options;
        options.eps = 1e-300;
        norm::rms_norm_forward(view(x.data(), rows, n), {}, view(y.data(), rows, n), {}, options);
        norm::rms_norm_forward(view(scaled.data(), rows, n), {}, view(z.data(), rows, n), {}, options);
        CHECK(relative_error(z, y) < 1e-12);
    }
    SECTION("an all-zero row gives y = 0 and dx = r * g, finite") {
        std::vector<float> zeros(2 * 17, 0.0f), y(2 * 17), rstd(2), dy(2 * 17, 0.5f), dx(2 * 17), dweight(17);
        norm::rms_norm_forward(view(zeros.data(), 2, 17), {}, view(y.data(), 2, 17), rstd);
        for (float value : y) CHECK(value == 0.0f);
        CHECK(rstd[0] == Approx(1.0 / std::sqrt(1e-6)).epsilon(1e-6));
        norm::rms_norm_backward(view(dy.data(), 2, 17), view(zeros.data(), 2, 17), {}, view(dx.data(), 2, 17), dweight,
                                rstd);
        for (float value : dx) CHECK(value == Approx(0.5 * rstd[0]).epsilon(1e-6));
        for (float value : dweight) CHECK(value == 0.0f);
    }
    SECTION("the Gemma offset: w_eff = 1 + w, so w = 0 is the unit weight") {
        std::vector<double> zero_weight(n, 0.0), y(rows * n), z(rows * n);
        norm::rms_norm_options gemma;
        gemma.offset = true;
        norm::rms_norm_forward(view(x.data(), rows, n), zero_weight, view(y.data(), rows, n), {}, gemma);
        norm::rms_norm_forward(view(x.data(), rows, n), {}, view(z.data(), rows, n));
        CHECK(y == z);
    }
}

TEMPLATE_TEST_CASE("rms_norm is bitwise identical for 1 and 2 threads", "[rms_norm][threads]", float, Eigen::half) {
    for (index_type rows : {index_type(2), index_type(65), index_type(3000)}) {
        const index_type n = 129;
        test_matrix<TestType> x(rows, n, random_values(rows * n, 51)), dy(rows, n, random_values(rows * n, 52));
        const auto weight = to_storage<TestType>(random_values(n, 53));
        std::vector<std::vector<TestType>> outputs;
        std::vector<std::vector<float>> statistics;
        for (int threads : {1, 2}) {
            test_matrix<TestType> y(rows, n), dx(rows, n);
            std::vector<float> rstd(rows), dweight(n);
            norm::rms_norm_options options;
            options.threads = threads;
            norm::rms_norm_forward(x.view, weight, y.view, rstd, options);
            norm::rms_norm_backward(dy.view, x.view, weight, dx.view, dweight, rstd, options);
            outputs.push_back(y.storage);
            outputs.push_back(dx.storage);
            statistics.push_back(rstd);
            statistics.push_back(dweight);
        }
        for (int k = 0; k < 2; ++k) {
            CHECK(std::memcmp(outputs[k].data(), outputs[k + 2].data(), outputs[k].size() * sizeof(TestType)) == 0);
            CHECK(statistics[k] == statistics[k + 2]);
        }
    }
}

TEST_CASE("rms_norm rejects bad input, naming the argument", "[rms_norm][errors]") {
    std::vector<float> x(12, 1.0f), y(12), rstd(3), dw(4);
    const std::vector<float> weight(3, 1.0f);
    norm::rms_norm_options bad_eps;
    bad_eps.eps = 0;
    require_error_naming([&] { norm::rms_norm_forward(view(x.data(), 3, 4), {}, view(y.data(), 2, 4)); }, "output");
    require_error_naming([&] { norm::rms_norm_forward(view(x.data(), 3, 4), weight, view(y.data(), 3, 4)); }, "weight");
    require_error_naming([&] { norm::rms_norm_forward(view(x.data(), 3, 4), {}, view(y.data(), 3, 4), {}, bad_eps); },
                         "eps");
    require_error_naming(
        [&] {
            norm::rms_norm_forward(view(x.data(), 3, 4), {}, view(y.data(), 3, 4), vector_view<float>(rstd.data(), 1));
        },
        "rstd");
    require_error_naming(
        [&] { norm::rms_norm_backward(view(x.data(), 3, 4), view(x.data(), 3, 4), {}, view(y.data(), 3, 4), {}, {}); },
        "rstd");
    require_error_naming(
        [&] {
            norm::rms_norm_backward(view(x.data(), 3, 4), view(x.data(), 3, 4), {}, view(y.data(), 3, 4),
                                    vector_view<float>(dw.data(), 2), rstd);
        },
        "weight_gradient");
    require_error_naming(
        [&] {
            norm::rms_norm_backward(view(x.data(), 3, 4), view(x.data(), 3, 4), {}, view(y.data(), 4, 3), {}, rstd);
        },
        "input_gradient");
}
