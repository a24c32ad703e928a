// SeeDNorm forward and backward against tests/reference/norm_elementwise.hpp.
#include "methods.hpp"
#include "reference/norm_elementwise.hpp"
#include "reference/norm.hpp"
#include "support.hpp"

#include <normkit/norm/rms_norm.hpp>
#include <normkit/norm/seed_norm.hpp>

#include <cstring>

using namespace normkit;
using namespace normkit::testing;

namespace {

// A head count that divides n, so every tail dim is also tried with several heads.
index_type heads_for(index_type n) {
    for (index_type heads : {8, 5, 4, 3, 17, 2})
        if (n % heads == 0 && n / heads >= 1) return heads;
    return 1;
}

struct seed_parameters {
    std::vector<double> alpha, beta, gamma;
};

// Seeds ⟨x_h, β_h⟩ of order 1 (β ~ 1/√d), so tanh is neither linear nor saturated.
seed_parameters random_parameters(index_type n, index_type heads, std::uint32_t seed) {
    const double d = static_cast<double>(n / heads);
    return {random_values(n, seed, 1.0, 0.5), random_values(n, seed + 1, 0.0, 0.8 / std::sqrt(d)),
            random_values(n, seed + 2, 1.0, 0.3)};
}

template <class T>
void check_against_reference(index_type rows, index_type n, index_type heads, index_type padding, std::uint32_t seed) {
    INFO(type_name<T>() << " rows " << rows << " n " << n << " heads " << heads << " padding " << padding);
    using S = core::statistic_t<T>;
    const double eps = 1e-5;
    norm::seed_norm_options options;
    options.heads = heads;
    options.eps = eps;
    test_matrix<T> x(rows, n, random_values(rows * n, seed, 0.0, 1.0), padding);
    test_matrix<T> y(rows, n, padding + 1), dy(rows, n, random_values(rows * n, seed + 1), padding),
        dx(rows, n, padding);
    const auto random = random_parameters(n, heads, seed + 2);
    const auto alpha_values = stored<T>(random.alpha), beta_values = stored<T>(random.beta),
               gamma_values = stored<T>(random.gamma);
    const auto alpha = to_storage<T>(alpha_values), beta = to_storage<T>(beta_values),
               gamma = to_storage<T>(gamma_values);
    std::vector<S> rstd(rows), dalpha(n), dbeta(n), dgamma(n);

    norm::seed_norm_forward(x.view, alpha, beta, gamma, y.view, rstd, options);
    std::vector<double> rstd_ref;
    const auto y_ref = reference::seed_norm_forward(x.values(), rows, n, alpha_values, beta_values, gamma_values, heads,
                                                    eps, &rstd_ref);
    CHECK(relative_error(y.values(), y_ref) < tolerance<T>() * 4);
    CHECK(relative_error(to_double(rstd), rstd_ref) < std::max(tolerance<T>(), 2e-6));
    CHECK(y.padding_untouched());

    norm::seed_norm_backward(dy.view, x.view, alpha, beta, gamma, dx.view, dalpha, dbeta, dgamma, rstd, options);
    const auto ref = reference::seed_norm_backward(dy.values(), x.values(), rows, n, alpha_values, beta_values,
                                                   gamma_values, heads, eps);
    // dx cancels (to 0 for n = 1): measure it against the size of its terms r·g⊙dy.
    const double terms = max_abs(rstd_ref) * max_abs(dy.values()) * (max_abs(alpha_values) + max_abs(gamma_values));
    const double dx_tolerance =
        std::is_same_v<T, double> ? 1e-10 : (std::is_same_v<T, float> ? 1e-4 : tolerance<T>() * 4);
    CHECK(relative_error(dx.values(), ref.dx, terms) < dx_tolerance);
    CHECK(dx.padding_untouched());
    const double parameter_tolerance = std::is_same_v<T, double> ? 1e-11 : 1e-4;
    CHECK(relative_error(to_double(dalpha), ref.dalpha, 1e-3) < parameter_tolerance);
    CHECK(relative_error(to_double(dbeta), ref.dbeta, 1e-3) < parameter_tolerance);
    CHECK(relative_error(to_double(dgamma), ref.dgamma, 1e-3) < parameter_tolerance);
}

// SeeDNorm in the generic norm tests (tests/norm/methods.hpp), with 3 heads.
const register_row_method seed_norm_entry{
    {"seed_norm",
     [](matrix_view<const float> x, matrix_view<float> y, const row_run& run) {
         const std::vector<float> p(static_cast<std::size_t>(x.cols), 0.5f);
         norm::seed_norm_forward(x, p, p, p, y, {}, with_run(norm::seed_norm_options{}, run));
     },
     [](const test_matrix<float>& x, const test_matrix<float>& dy, const streaming_options& execution) {
         const index_type rows = x.view.rows, n = x.view.cols;
         const auto alpha = to_storage<float>(random_values(n, 23, 0.5, 0.3));
         const auto beta = to_storage<float>(random_values(n, 24, 0.0, 0.1));
         const auto gamma = to_storage<float>(random_values(n, 25, 1.0, 0.2));
         norm::seed_norm_options options;
         set_execution(options, execution);
         options.heads = 3;
         test_matrix<float> y(rows, n), dx(rows, n);
         std::vector<float> rstd(rows), dalpha(n), dbeta(n), dgamma(n);
         norm::seed_norm_forward(x.view, alpha, beta, gamma, y.view, rstd, options);
         norm::seed_norm_backward(dy.view, x.view, alpha, beta, gamma, dx.view, dalpha, dbeta, dgamma, rstd, options);
         return std::vector<std::vector<float>>{storage_of(y), storage_of(dx), rstd, dalpha, dbeta, dgamma};
     }}};

}  // namespace

TEMPLATE_TEST_CASE("seed_norm matches the reference over SIMD tails, heads, strides and unaligned rows", "[seed_norm]",
                   float, double, Eigen::bfloat16, Eigen::half) {
    std::uint32_t seed = 1;
    for (index_type n : tail_dims) {
        for (index_type rows : {index_type(1), index_type(3), index_type(40)}) {
            if (rows * n > 200000) continue;
            check_against_reference<TestType>(rows, n, heads_for(n), n % 3, seed++);
        }
        check_against_reference<TestType>(5, n, 1, 0, seed++);
    }
}

TEST_CASE("seed_norm gradients agree with central finite differences", "[seed_norm]") {
    const index_type rows = 3, n = 18;
    const double eps = 1e-5;
    for (index_type heads : {index_type(1), index_type(3)}) {
        INFO("heads " << heads);
        norm::seed_norm_options options;
        options.heads = heads;
        const auto x = random_values(rows * n, 5), dy = random_values(rows * n, 6);
        const auto p = random_parameters(n, heads, 7);
        std::vector<double> y(rows * n), rstd(rows), dx(rows * n), dalpha(n), dbeta(n), dgamma(n);
        norm::seed_norm_forward(view(x.data(), rows, n), p.alpha, p.beta, p.gamma, view(y.data(), rows, n), rstd,
                                options);
        norm::seed_norm_backward(view(dy.data(), rows, n), view(x.data(), rows, n), p.alpha, p.beta, p.gamma,
                                 view(dx.data(), rows, n), dalpha, dbeta, dgamma, rstd, options);
        const auto loss = [&](const std::vector<double>& xs, const std::vector<double>& a, const std::vector<double>& b,
                              const std::vector<double>& g) {
            return dot(reference::seed_norm_forward(xs, rows, n, a, b, g, heads, eps), dy);
        };
        CHECK(relative_error(
                  dx, finite_difference(x, [&](const auto& v) { return loss(v, p.alpha, p.beta, p.gamma); })) < 1e-7);
        CHECK(relative_error(dalpha, finite_difference(
                                         p.alpha, [&](const auto& v) { return loss(x, v, p.beta, p.gamma); })) < 1e-7);
        CHECK(relative_error(dbeta, finite_difference(
                                        p.beta, [&](const auto& v) { return loss(x, p.alpha, v, p.gamma); })) < 1e-7);
        CHECK(relative_error(dgamma, finite_difference(
                                         p.gamma, [&](const auto& v) { return loss(x, p.alpha, p.beta, v); })) < 1e-7);
        // The reference backward is the chain rule written independently of the kernel.
        const auto ref = reference::seed_norm_backward(dy, x, rows, n, p.alpha, p.beta, p.gamma, heads, eps);
        CHECK(relative_error(dx, ref.dx) < 1e-12);
    }
}

TEMPLATE_TEST_CASE("seed_norm at its init (γ, β = 0, α = 1) is RMSNorm with weight γ", "[seed_norm]", float,
                   Eigen::bfloat16) {
    const index_type rows = 7, n = 96;
    norm::seed_norm_options options;
    options.heads = 4;
    options.eps = 1e-6;
    norm::rms_norm_options rms;
    rms.eps = 1e-6;
    test_matrix<TestType> x(rows, n, random_values(rows * n, 61)), dy(rows, n, random_values(rows * n, 62));
    const auto gamma = to_storage<TestType>(random_values(n, 63, 1.0, 0.3));
    const auto alpha = to_storage<TestType>(std::vector<double>(n, 1.0)),
               beta = to_storage<TestType>(std::vector<double>(n, 0.0));
    test_matrix<TestType> y(rows, n), y_rms(rows, n), dx(rows, n), dx_rms(rows, n);
    std::vector<float> rstd(rows), rstd_rms(rows), dalpha(n), dbeta(n), dgamma(n), dweight(n);
    norm::seed_norm_forward(x.view, alpha, beta, gamma, y.view, rstd, options);
    norm::rms_norm_forward(x.view, gamma, y_rms.view, rstd_rms, rms);
    CHECK(std::memcmp(y.storage.data(), y_rms.storage.data(), y.storage.size() * sizeof(TestType)) == 0);
    CHECK(rstd == rstd_rms);
    norm::seed_norm_backward(dy.view, x.view, alpha, beta, gamma, dx.view, dalpha, dbeta, dgamma, rstd, options);
    norm::rms_norm_backward(dy.view, x.view, gamma, dx_rms.view, dweight, rstd_rms, rms);
    CHECK(relative_error(dx.values(), dx_rms.values()) <
          (std::is_same_v<TestType, float> ? 1e-6 : tolerance<TestType>()));
    CHECK(relative_error(to_double(dgamma), to_double(dweight)) < 1e-6);
    for (float value : dalpha) CHECK(value == 0.0f);  // σ = 0 at β = 0
}

TEST_CASE("seed_norm degenerate rows and aliasing", "[seed_norm]") {
    const index_type n = 12;
    norm::seed_norm_options options;
    options.heads = 3;
    const auto alpha = random_values(n, 71, 1.0, 0.2), beta = random_values(n, 72),
               gamma = random_values(n, 73, 1.0, 0.2);
    SECTION("an all-zero row gives y = 0 and dx = r·γ⊙dy") {
        std::vector<double> x(2 * n, 0.0), y(2 * n, 9.0), rstd(2), dy = random_values(2 * n, 74), dx(2 * n), da(n),
                                                                   db(n), dg(n);
        norm::seed_norm_forward(view(x.data(), 2, n), alpha, beta, gamma, view(y.data(), 2, n), rstd, options);
        for (double value : y) CHECK(value == 0.0);
        CHECK(rstd[0] == Approx(1 / std::sqrt(options.eps)).epsilon(1e-14));
        norm::seed_norm_backward(view(dy.data(), 2, n), view(x.data(), 2, n), alpha, beta, gamma, view(dx.data(), 2, n),
                                 da, db, dg, rstd, options);
        for (index_type k = 0; k < 2 * n; ++k) CHECK(dx[k] == Approx(rstd[0] * gamma[k % n] * dy[k]).epsilon(1e-14));
        for (index_type j = 0; j < n; ++j) CHECK((da[j] == 0.0 && db[j] == 0.0 && dg[j] == 0.0));
    }
    SECTION("output may alias the input, input_gradient the output_gradient") {
        const auto x = random_values(3 * n, 75);
        std::vector<double> y(3 * n), in_place = x, rstd(3), rstd_in_place(3), dy = random_values(3 * n, 76), dx(3 * n),
                                      dy_in_place = dy;
        norm::seed_norm_forward(view(x.data(), 3, n), alpha, beta, gamma, view(y.data(), 3, n), rstd, options);
        norm::seed_norm_forward(view(in_place.data(), 3, n), alpha, beta, gamma, view(in_place.data(), 3, n),
                                rstd_in_place, options);
        CHECK(in_place == y);
        norm::seed_norm_backward(view(dy.data(), 3, n), view(x.data(), 3, n), alpha, beta, gamma, view(dx.data(), 3, n),
                                 {}, {}, {}, rstd, options);
        norm::seed_norm_backward(view(dy_in_place.data(), 3, n), view(x.data(), 3, n), alpha, beta, gamma,
                                 view(dy_in_place.data(), 3, n), {}, {}, {}, rstd, options);
        CHECK(dy_in_place == dx);
    }
}

TEST_CASE("seed_norm bf16 parameter gradients over 65536 rows keep float accuracy", "[seed_norm][accuracy]") {
    const index_type rows = 65536, n = 16, heads = 2;
    norm::seed_norm_options options;
    options.heads = heads;
    test_matrix<Eigen::bfloat16> x(rows, n, random_values(rows * n, 81), 0, false),
        dy(rows, n, random_values(rows * n, 82), 0, false), dx(rows, n, 0, false), y(rows, n, 0, false);
    const auto p = random_parameters(n, heads, 83);
    const auto alpha_values = stored<Eigen::bfloat16>(p.alpha), beta_values = stored<Eigen::bfloat16>(p.beta),
               gamma_values = stored<Eigen::bfloat16>(p.gamma);
    const auto alpha = to_storage<Eigen::bfloat16>(alpha_values), beta = to_storage<Eigen::bfloat16>(beta_values),
               gamma = to_storage<Eigen::bfloat16>(gamma_values);
    std::vector<float> rstd(rows), dalpha(n), dbeta(n), dgamma(n);
    norm::seed_norm_forward(x.view, alpha, beta, gamma, y.view, rstd, options);
    norm::seed_norm_backward(dy.view, x.view, alpha, beta, gamma, dx.view, dalpha, dbeta, dgamma, rstd, options);
    const auto ref = reference::seed_norm_backward(dy.values(), x.values(), rows, n, alpha_values, beta_values,
                                                   gamma_values, heads, options.eps);
    CHECK(relative_error(to_double(dgamma), ref.dgamma) < 1e-5);
    CHECK(relative_error(to_double(dalpha), ref.dalpha) < 1e-5);
    CHECK(relative_error(to_double(dbeta), ref.dbeta) < 1e-5);
}

TEMPLATE_TEST_CASE("seed_norm is bitwise identical for 1 and 2 threads, and with dx absent", "[seed_norm][threads]",
                   float, Eigen::bfloat16) {
    for (index_type rows : {index_type(1), index_type(33), index_type(1000), index_type(5000)}) {
        const index_type n = 66;
        test_matrix<TestType> x(rows, n, random_values(rows * n, 91)), dy(rows, n, random_values(rows * n, 92));
        const auto p = random_parameters(n, 3, 93);
        const auto alpha = to_storage<TestType>(p.alpha), beta = to_storage<TestType>(p.beta),
                   gamma = to_storage<TestType>(p.gamma);
        std::vector<std::vector<TestType>> outputs;
        std::vector<std::vector<float>> gradients;
        for (int threads : {1, 2}) {
            norm::seed_norm_options options;
            options.heads = 3;
            options.threads = threads;
            test_matrix<TestType> y(rows, n), dx(rows, n);
            std::vector<float> rstd(rows), dalpha(n), dbeta(n), dgamma(n);
            norm::seed_norm_forward(x.view, alpha, beta, gamma, y.view, rstd, options);
            norm::seed_norm_backward(dy.view, x.view, alpha, beta, gamma, dx.view, dalpha, dbeta, dgamma, rstd,
                                     options);
            outputs.push_back(y.storage);
            outputs.push_back(dx.storage);
            gradients.insert(gradients.end(), {rstd, dalpha, dbeta, dgamma});
        }
        CHECK(std::memcmp(outputs[0].data(), outputs[2].data(), outputs[0].size() * sizeof(TestType)) == 0);
        CHECK(std::memcmp(outputs[1].data(), outputs[3].data(), outputs[1].size() * sizeof(TestType)) == 0);
        for (std::size_t k = 0; k < 4; ++k) CHECK(gradients[k] == gradients[k + 4]);
        // dx is optional ({}): leaving it out changes no bit of the parameter gradients.
        norm::seed_norm_options options;
        options.heads = 3;
        std::vector<float> dalpha(n), dbeta(n), dgamma(n);
        norm::seed_norm_backward(dy.view, x.view, alpha, beta, gamma, {}, dalpha, dbeta, dgamma, gradients[0], options);
        CHECK(dalpha == gradients[1]);
        CHECK(dbeta == gradients[2]);
        CHECK(dgamma == gradients[3]);
    }
}

TEST_CASE("seed_norm accepts Eigen tensors", "[seed_norm][view]") {
    Eigen::Tensor<float, 3, Eigen::RowMajor> x(2, 3, 16), y(2, 3, 16);
    x.setRandom();
    Eigen::VectorXf alpha = Eigen::VectorXf::Ones(16), beta = Eigen::VectorXf::Random(16),
                    gamma = Eigen::VectorXf::Random(16), rstd(6);
    norm::seed_norm_options options;
    options.heads = 4;
    norm::seed_norm_forward(x, alpha, beta, gamma, y, rstd, options);
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> as_matrix(6, 16), out(6, 16);
    std::copy(x.data(), x.data() + x.size(), as_matrix.data());
    norm::seed_norm_forward(as_matrix, alpha, beta, gamma, out, {}, options);
    CHECK(std::equal(out.data(), out.data() + out.size(), y.data()));
}

TEST_CASE("seed_norm rejects bad input, naming the argument", "[seed_norm][errors]") {
    std::vector<float> x(24, 1.0f), y(24), rstd(3), g(8), short_g(7);
    const std::vector<float> p(8, 0.5f), short_p(7, 0.5f);
    const auto in = view(x.data(), 3, 8);
    const auto out = view(y.data(), 3, 8);
    norm::seed_norm_options three_heads;
    three_heads.heads = 3;
    norm::seed_norm_options no_eps;
    no_eps.eps = 0;
    require_error_naming([&] { norm::seed_norm_forward(in, short_p, p, p, out); }, "alpha");
    require_error_naming([&] { norm::seed_norm_forward(in, p, short_p, p, out); }, "beta");
    require_error_naming([&] { norm::seed_norm_forward(in, p, p, {}, out); }, "gamma");
    require_error_naming([&] { norm::seed_norm_forward(in, p, p, p, out, {}, three_heads); }, "heads");
    require_error_naming([&] { norm::seed_norm_forward(in, p, p, p, out, {}, no_eps); }, "eps");
    require_error_naming([&] { norm::seed_norm_forward(in, p, p, p, view(y.data(), 4, 6)); }, "output");
    require_error_naming([&] { norm::seed_norm_forward(in, p, p, p, out, vector_view<float>(rstd.data(), 2)); },
                         "rstd");
    require_error_naming([&] { norm::seed_norm_backward(in, in, p, p, p, out, {}, {}, {}, {}); }, "rstd");
    require_error_naming([&] { norm::seed_norm_backward(in, in, p, p, p, out, g, {}, g, rstd); }, "beta_gradient");
    require_error_naming([&] { norm::seed_norm_backward(in, in, p, p, p, out, g, short_g, g, rstd); }, "beta_gradient");
    require_error_naming([&] { norm::seed_norm_backward(view(x.data(), 2, 8), in, p, p, p, out, {}, {}, {}, rstd); },
                         "output_gradient");
}
