// DyT and Derf forward and backward against tests/reference/norm_elementwise.hpp.
#include "reference/norm_elementwise.hpp"
#include "support.hpp"

#include <normkit/norm/derf.hpp>
#include <normkit/norm/dyt.hpp>

#include <cstring>

using namespace normkit;
using namespace normkit::testing;

namespace {

// Options of type O that differ from the defaults in their thread count only.
template <class O>
O on_threads(int threads) {
    O options;
    options.threads = threads;
    return options;
}

enum class method { dyt, derf };

const char* method_name(method m) { return m == method::dyt ? "dyt" : "derf"; }

// One call of either kernel, forward and backward, on views; returns {dα, ds}.
template <class T>
struct pointwise {
    method kind;
    double alpha, shift;

    void forward(matrix_view<const T> x, matrix_view<T> y, const std::vector<T>& weight, const std::vector<T>& bias,
                 int threads = 1) const {
        const vector_view<const T> w = weight.empty() ? vector_view<const T>{} : vector_view<const T>(weight);
        const vector_view<const T> b = bias.empty() ? vector_view<const T>{} : vector_view<const T>(bias);
        if (kind == method::dyt)
            norm::dyt_forward(x, alpha, w, b, y, on_threads<norm::dyt_options>(threads));
        else
            norm::derf_forward(x, alpha, shift, w, b, y, on_threads<norm::derf_options>(threads));
    }
    std::pair<double, double> backward(matrix_view<const T> dy, matrix_view<const T> x, const std::vector<T>& weight,
                                       matrix_view<T> dx, statistics_t<matrix_view<T>> dweight,
                                       statistics_t<matrix_view<T>> dbias, int threads = 1) const {
        const vector_view<const T> w = weight.empty() ? vector_view<const T>{} : vector_view<const T>(weight);
        if (kind == method::dyt)
            return {norm::dyt_backward(dy, x, alpha, w, dx, dweight, dbias, on_threads<norm::dyt_options>(threads)),
                    0.0};
        const auto scalars =
            norm::derf_backward(dy, x, alpha, shift, w, dx, dweight, dbias, on_threads<norm::derf_options>(threads));
        return {scalars.alpha, scalars.shift};
    }
};

template <class T>
void check_against_reference(method kind, index_type rows, index_type n, index_type padding, bool has_weight,
                             bool has_bias, bool parameter_gradients, std::uint32_t seed) {
    INFO(method_name(kind) << " " << type_name<T>() << " rows " << rows << " n " << n << " padding " << padding
                           << " weight " << has_weight << " bias " << has_bias);
    using S = core::statistic_t<T>;
    const pointwise<T> op{kind, kind == method::dyt ? 0.8 : 0.6, kind == method::dyt ? 0.0 : 0.3};
    test_matrix<T> x(rows, n, random_values(rows * n, seed, 0.0, 2.0), padding);
    test_matrix<T> y(rows, n, padding + 1), dy(rows, n, random_values(rows * n, seed + 1), padding),
        dx(rows, n, padding);
    const auto weight_values = has_weight ? stored<T>(random_values(n, seed + 2, 1.0, 0.5)) : std::vector<double>{};
    const auto bias_values = has_bias ? stored<T>(random_values(n, seed + 3)) : std::vector<double>{};
    const auto weight = to_storage<T>(weight_values), bias = to_storage<T>(bias_values);

    op.forward(x.view, y.view, weight, bias);
    const auto y_ref = kind == method::dyt
                           ? reference::dyt_forward(x.values(), n, op.alpha, weight_values, bias_values)
                           : reference::derf_forward(x.values(), n, op.alpha, op.shift, weight_values, bias_values);
    // y is O(|γ| + |β|): one rounding to T, plus a few float ulps of tanh / erf.
    CHECK(relative_error(y.values(), y_ref) < tolerance<T>() * 2);
    CHECK(y.padding_untouched());

    std::vector<S> dweight(parameter_gradients ? n : 0), dbias(parameter_gradients ? n : 0);
    const auto scalars =
        op.backward(dy.view, x.view, weight, dx.view,
                    parameter_gradients ? statistics_t<matrix_view<T>>(dweight) : statistics_t<matrix_view<T>>{},
                    parameter_gradients ? statistics_t<matrix_view<T>>(dbias) : statistics_t<matrix_view<T>>{});
    const auto ref = kind == method::dyt
                         ? reference::dyt_backward(dy.values(), x.values(), n, op.alpha, weight_values)
                         : reference::derf_backward(dy.values(), x.values(), n, op.alpha, op.shift, weight_values);
    const double dx_tolerance =
        std::is_same_v<T, double> ? 1e-12 : (std::is_same_v<T, float> ? 1e-5 : tolerance<T>() * 2);
    CHECK(relative_error(dx.values(), ref.dx) < dx_tolerance);
    CHECK(dx.padding_untouched());
    // Parameter gradients are accumulated in float from exactly stored inputs: float accuracy even for bf16.
    // dα and ds cancel: measure them against the sum of the magnitudes of their terms.
    const double parameter_tolerance = std::is_same_v<T, double> ? 1e-12 : 1e-5;
    CHECK(std::abs(scalars.first - ref.dalpha) <= parameter_tolerance * ref.alpha_terms);
    if (kind == method::derf) CHECK(std::abs(scalars.second - ref.dshift) <= parameter_tolerance * ref.shift_terms);
    if (parameter_gradients) {
        CHECK(relative_error(to_double(dweight), ref.dweight, 1.0) < parameter_tolerance * 10);
        CHECK(relative_error(to_double(dbias), ref.dbias, 1.0) < parameter_tolerance * 10);
    }
}

}  // namespace

TEMPLATE_TEST_CASE("dyt and derf match the reference over SIMD tails, strides and unaligned rows", "[dyt][derf]", float,
                   double, Eigen::bfloat16, Eigen::half) {
    std::uint32_t seed = 1;
    for (method kind : {method::dyt, method::derf}) {
        for (index_type n : tail_dims) {
            for (index_type rows : {index_type(1), index_type(3), index_type(40)}) {
                if (rows * n > 200000) continue;
                check_against_reference<TestType>(kind, rows, n, n % 3, true, kind == method::derf, true, seed++);
            }
            check_against_reference<TestType>(kind, 5, n, 0, false, false, false, seed++);
            check_against_reference<TestType>(kind, 4, n, 1, true, true, true, seed++);
        }
    }
}

TEST_CASE("dyt and derf gradients agree with central finite differences", "[dyt][derf]") {
    const index_type rows = 3, n = 19;
    const auto x = random_values(rows * n, 5, 0.0, 1.5), dy = random_values(rows * n, 6);
    const auto weight = random_values(n, 7, 1.0, 0.3), bias = random_values(n, 8);
    std::vector<double> dx(rows * n), dweight(n), dbias(n);
    const auto in = view(x.data(), rows, n);
    const auto upstream = view(dy.data(), rows, n);
    const auto out = view(dx.data(), rows, n);
    const double alpha = 0.7, shift = -0.4;

    SECTION("DyT: dx, dα, dγ, dβ") {
        const double dalpha = norm::dyt_backward(upstream, in, alpha, weight, out, dweight, dbias);
        const auto loss = [&](const std::vector<double>& xs, double a, const std::vector<double>& w,
                              const std::vector<double>& b) { return dot(reference::dyt_forward(xs, n, a, w, b), dy); };
        CHECK(relative_error(dx, finite_difference(x, [&](const auto& v) { return loss(v, alpha, weight, bias); })) <
              1e-7);
        CHECK(relative_error({dalpha}, finite_difference({alpha}, [&](const auto& v) {
                                 return loss(x, v[0], weight, bias);
                             })) < 1e-7);
        CHECK(relative_error(dweight,
                             finite_difference(weight, [&](const auto& v) { return loss(x, alpha, v, bias); })) < 1e-7);
        CHECK(relative_error(dbias, finite_difference(bias, [&](const auto& v) { return loss(x, alpha, weight, v); })) <
              1e-7);
    }
    SECTION("Derf: dx, dα, ds, dγ, dβ") {
        const auto scalars = norm::derf_backward(upstream, in, alpha, shift, weight, out, dweight, dbias);
        const auto loss = [&](const std::vector<double>& xs, double a, double s, const std::vector<double>& w,
                              const std::vector<double>& b) {
            return dot(reference::derf_forward(xs, n, a, s, w, b), dy);
        };
        CHECK(relative_error(
                  dx, finite_difference(x, [&](const auto& v) { return loss(v, alpha, shift, weight, bias); })) < 1e-7);
        CHECK(relative_error({scalars.alpha}, finite_difference({alpha}, [&](const auto& v) {
                                 return loss(x, v[0], shift, weight, bias);
                             })) < 1e-7);
        CHECK(relative_error({scalars.shift}, finite_difference({shift}, [&](const auto& v) {
                                 return loss(x, alpha, v[0], weight, bias);
                             })) < 1e-7);
        CHECK(relative_error(dweight, finite_difference(weight, [&](const auto& v) {
                                 return loss(x, alpha, shift, v, bias);
                             })) < 1e-7);
        CHECK(relative_error(dbias, finite_difference(
                                        bias, [&](const auto& v) { return loss(x, alpha, shift, weight, v); })) < 1e-7);
    }
}

TEST_CASE("dyt and derf properties", "[dyt][derf]") {
    const index_type rows = 4, n = 37;
    const auto x = random_values(rows * n, 31);
    const auto weight = random_values(n, 32, 1.0, 0.5);

    SECTION("DyT is α·γ⊙x for small αx (tanh u = u − u³/3 + …)") {
        const double alpha = 1e-3;
        std::vector<double> y(rows * n), linear(rows * n);
        norm::dyt_forward(view(x.data(), rows, n), alpha, weight, {}, view(y.data(), rows, n));
        for (index_type k = 0; k < rows * n; ++k) linear[k] = alpha * weight[k % n] * x[k];
        // |tanh u − u| ≤ |u|³/3 with |u| ≤ 5e-3: relative 1e-5.
        CHECK(relative_error(y, linear) < 1e-5);
        CHECK(relative_error(y, linear) > 0);  // and not exactly linear: tanh was applied
        std::vector<float> yf(rows * n), xf(x.begin(), x.end()), wf(weight.begin(), weight.end());
        norm::dyt_forward(view(xf.data(), rows, n), alpha, wf, {}, view(yf.data(), rows, n));
        CHECK(relative_error(to_double(yf), linear) < 1e-5);
    }
    SECTION("Derf with s = β = 0 is odd, its input gradient even") {
        for (double alpha : {0.5, 1.0, 3.0}) {
            std::vector<float> xf(x.begin(), x.end()), negated(rows * n), wf(weight.begin(), weight.end()),
                dy(rows * n, 1.0f);
            for (index_type k = 0; k < rows * n; ++k) negated[k] = -xf[k];
            std::vector<float> y(rows * n), y_negated(rows * n), dx(rows * n), dx_negated(rows * n);
            norm::derf_forward(view(xf.data(), rows, n), alpha, 0.0, wf, {}, view(y.data(), rows, n));
            norm::derf_forward(view(negated.data(), rows, n), alpha, 0.0, wf, {}, view(y_negated.data(), rows, n));
            for (index_type k = 0; k < rows * n; ++k) CHECK(y_negated[k] == -y[k]);
            norm::derf_backward(view(dy.data(), rows, n), view(xf.data(), rows, n), alpha, 0.0, wf,
                                view(dx.data(), rows, n));
            norm::derf_backward(view(dy.data(), rows, n), view(negated.data(), rows, n), alpha, 0.0, wf,
                                view(dx_negated.data(), rows, n));
            CHECK(dx == dx_negated);
        }
    }
    SECTION("α = 0 gives y = β and dx = 0") {
        std::vector<double> y(rows * n), dx(rows * n), dy = random_values(rows * n, 33);
        const auto bias = random_values(n, 34);
        norm::dyt_forward(view(x.data(), rows, n), 0.0, weight, bias, view(y.data(), rows, n));
        for (index_type k = 0; k < rows * n; ++k) CHECK(y[k] == bias[k % n]);
        const double dalpha = norm::dyt_backward(view(dy.data(), rows, n), view(x.data(), rows, n), 0.0, weight,
                                                 view(dx.data(), rows, n));
        for (double value : dx) CHECK(value == 0.0);
        double expected = 0;
        for (index_type k = 0; k < rows * n; ++k) expected += dy[k] * weight[k % n] * x[k];
        CHECK(dalpha == Approx(expected).epsilon(1e-12));
    }
    SECTION("output may alias the input, input_gradient the output_gradient") {
        std::vector<float> xf(x.begin(), x.end()), in_place = xf, y(rows * n), dy(rows * n, 0.5f), dx(rows * n),
                                                   dy_in_place = dy;
        norm::derf_forward(view(xf.data(), rows, n), 0.5, 0.1, {}, {}, view(y.data(), rows, n));
        norm::derf_forward(view(in_place.data(), rows, n), 0.5, 0.1, {}, {}, view(in_place.data(), rows, n));
        CHECK(in_place == y);
        const float da =
            norm::dyt_backward(view(dy.data(), rows, n), view(xf.data(), rows, n), 0.5, {}, view(dx.data(), rows, n));
        const float da_in_place = norm::dyt_backward(view(dy_in_place.data(), rows, n), view(xf.data(), rows, n), 0.5,
                                                     {}, view(dy_in_place.data(), rows, n));
        CHECK(dy_in_place == dx);
        CHECK(da == da_in_place);
    }
    SECTION("documented α inits") {
        CHECK(norm::dyt_default_alpha == 0.5);
        CHECK(norm::derf_default_alpha == 0.5);
        CHECK(norm::dyt_llama_alpha(norm::llama_size::b7).attention == 0.8);
        CHECK(norm::dyt_llama_alpha(norm::llama_size::b7).feed_forward == 0.2);
        CHECK(norm::dyt_llama_alpha(norm::llama_size::b13).attention == 0.6);
        CHECK(norm::dyt_llama_alpha(norm::llama_size::b13).final_norm == 0.15);
        CHECK(norm::dyt_llama_alpha(norm::llama_size::b34).attention == 0.2);
        CHECK(norm::dyt_llama_alpha(norm::llama_size::b70).feed_forward == 0.05);
    }
}

TEST_CASE("dyt and derf bf16 parameter gradients over 65536 rows keep float accuracy", "[dyt][derf][accuracy]") {
    const index_type rows = 65536, n = 16;
    test_matrix<Eigen::bfloat16> x(rows, n, random_values(rows * n, 41, 0.0, 1.5), 0, false),
        dy(rows, n, random_values(rows * n, 42), 0, false), dx(rows, n, 0, false);
    const auto weight_values = stored<Eigen::bfloat16>(random_values(n, 43, 1.0, 0.3));
    const auto weight = to_storage<Eigen::bfloat16>(weight_values);
    std::vector<float> dweight(n), dbias(n);
    const auto xs = x.values(), dys = dy.values();
    {
        const float dalpha = norm::dyt_backward(dy.view, x.view, 0.5, weight, dx.view, dweight, dbias);
        const auto ref = reference::dyt_backward(dys, xs, n, 0.5, weight_values);
        CHECK(relative_error(to_double(dweight), ref.dweight) < 1e-5);
        CHECK(relative_error(to_double(dbias), ref.dbias) < 1e-5);
        CHECK(std::abs(dalpha - ref.dalpha) < 1e-5 * ref.alpha_terms);
    }
    {
        const auto scalars = norm::derf_backward(dy.view, x.view, 0.5, 0.2, weight, dx.view, dweight, dbias);
        const auto ref = reference::derf_backward(dys, xs, n, 0.5, 0.2, weight_values);
        CHECK(relative_error(to_double(dweight), ref.dweight) < 1e-5);
        CHECK(std::abs(scalars.alpha - ref.dalpha) < 1e-5 * ref.alpha_terms);
        CHECK(std::abs(scalars.shift - ref.dshift) < 1e-5 * ref.shift_terms);
    }
}

TEMPLATE_TEST_CASE("dyt and derf are bitwise identical for 1 and 2 threads, and with dx absent", "[dyt][derf][threads]",
                   float, Eigen::bfloat16) {
    for (method kind : {method::dyt, method::derf}) {
        for (index_type rows : {index_type(1), index_type(33), index_type(1000), index_type(5000)}) {
            const index_type n = 65;
            const pointwise<TestType> op{kind, 0.6, 0.2};
            test_matrix<TestType> x(rows, n, random_values(rows * n, 51)), dy(rows, n, random_values(rows * n, 52));
            const auto weight = to_storage<TestType>(random_values(n, 53)),
                       bias = to_storage<TestType>(random_values(n, 54));
            std::vector<std::vector<TestType>> outputs;
            std::vector<std::vector<float>> gradients;
            std::vector<std::pair<double, double>> scalars;
            for (int threads : {1, 2}) {
                test_matrix<TestType> y(rows, n), dx(rows, n);
                std::vector<float> dweight(n), dbias(n);
                op.forward(x.view, y.view, weight, bias, threads);
                scalars.push_back(op.backward(dy.view, x.view, weight, dx.view, dweight, dbias, threads));
                outputs.push_back(y.storage);
                outputs.push_back(dx.storage);
                gradients.push_back(dweight);
                gradients.push_back(dbias);
            }
            CHECK(std::memcmp(outputs[0].data(), outputs[2].data(), outputs[0].size() * sizeof(TestType)) == 0);
            CHECK(std::memcmp(outputs[1].data(), outputs[3].data(), outputs[1].size() * sizeof(TestType)) == 0);
            CHECK(gradients[0] == gradients[2]);
            CHECK(gradients[1] == gradients[3]);
            CHECK(scalars[0] == scalars[1]);
            // dx is optional ({}): leaving it out changes no bit of the parameter gradients.
            std::vector<float> dweight(n), dbias(n);
            CHECK(op.backward(dy.view, x.view, weight, {}, dweight, dbias, 1) == scalars[0]);
            CHECK(dweight == gradients[0]);
            CHECK(dbias == gradients[1]);
        }
    }
}

TEST_CASE("dyt and derf accept Eigen tensors and matrices", "[dyt][derf][view]") {
    Eigen::Tensor<float, 3, Eigen::RowMajor> x(2, 3, 17), y(2, 3, 17), dy(2, 3, 17), dx(2, 3, 17);
    x.setRandom();
    dy.setRandom();
    Eigen::VectorXf weight = Eigen::VectorXf::Random(17), dweight(17);
    norm::dyt_forward(x, 0.5, weight, {}, y);
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> as_matrix(6, 17), out(6, 17);
    std::copy(x.data(), x.data() + x.size(), as_matrix.data());
    norm::dyt_forward(as_matrix, 0.5, weight, {}, out);
    CHECK(std::equal(out.data(), out.data() + out.size(), y.data()));
    const float dalpha = norm::dyt_backward(dy, x, 0.5, weight, dx, dweight);
    CHECK(std::isfinite(dalpha));
    norm::derf_forward(x, 0.5, 0.0, weight, {}, y);
    norm::derf_forward(as_matrix, 0.5, 0.0, weight, {}, out);
    CHECK(std::equal(out.data(), out.data() + out.size(), y.data()));
}

TEST_CASE("dyt and derf reject bad input, naming the argument", "[dyt][derf][errors]") {
    std::vector<float> x(12, 1.0f), y(12), dw(4), db(3);
    const std::vector<float> weight(5, 1.0f);
    const auto in = view(x.data(), 3, 4);
    require_error_naming([&] { norm::dyt_forward(in, 0.5, {}, {}, view(y.data(), 4, 3)); }, "output");
    require_error_naming([&] { norm::dyt_forward(in, 0.5, weight, {}, view(y.data(), 3, 4)); }, "weight");
    require_error_naming([&] { norm::dyt_forward(in, 0.5, {}, weight, view(y.data(), 3, 4)); }, "bias");
    require_error_naming([&] { norm::dyt_forward(in, NAN, {}, {}, view(y.data(), 3, 4)); }, "alpha");
    require_error_naming([&] { norm::derf_forward(in, 0.5, INFINITY, {}, {}, view(y.data(), 3, 4)); }, "shift");
    require_error_naming(
        [&] {
            norm::derf_forward(matrix_view<const float>{nullptr, 3, 4, 4}, 0.5, 0.0, {}, {}, view(y.data(), 3, 4));
        },
        "input");
    require_error_naming([&] { norm::dyt_backward(view(x.data(), 2, 4), in, 0.5, {}, view(y.data(), 3, 4)); },
                         "output_gradient");
    require_error_naming([&] { norm::dyt_backward(in, in, 0.5, {}, view(y.data(), 2, 4)); }, "input_gradient");
    require_error_naming([&] { norm::dyt_backward(in, in, 0.5, {}, view(y.data(), 3, 4), dw, db); }, "bias_gradient");
    require_error_naming([&] { norm::derf_backward(in, in, 0.5, 0.0, {}, view(y.data(), 3, 4), db); },
                         "weight_gradient");
    require_error_naming([&] { norm::derf_backward(in, in, 0.5, NAN, {}, view(y.data(), 3, 4)); }, "shift");
}

TEMPLATE_TEST_CASE("streaming stores change no bit of dyt_forward or derf_forward", "[dyt][derf][stream]", float,
                   double, Eigen::bfloat16, Eigen::half) {
    for (index_type n : tail_dims) {
        const index_type rows = 3;
        test_matrix<TestType> x(rows, n, random_values(rows * n, 71, 0.2, 1.5), n % 5);
        const auto weight = to_storage<TestType>(random_values(n, 72)),
                   bias = to_storage<TestType>(random_values(n, 73));
        std::vector<std::vector<TestType>> outputs;
        for (std::size_t threshold : {std::size_t(0), static_cast<std::size_t>(-1)}) {
            test_matrix<TestType> y(rows, n, n % 5), z(rows, n, n % 5);
            norm::dyt_options dyt;
            dyt.stream_above_bytes = threshold;
            norm::dyt_forward(x.view, 0.7, weight, bias, y.view, dyt);
            norm::derf_options derf;
            derf.stream_above_bytes = threshold;
            norm::derf_forward(x.view, 0.7, 0.1, weight, bias, z.view, derf);
            CHECK(y.padding_untouched());
            CHECK(z.padding_untouched());
            outputs.push_back(y.storage);
            outputs.push_back(z.storage);
        }
        INFO("n " << n);
        CHECK(std::memcmp(outputs[0].data(), outputs[2].data(), outputs[0].size() * sizeof(TestType)) == 0);
        CHECK(std::memcmp(outputs[1].data(), outputs[3].data(), outputs[1].size() * sizeof(TestType)) == 0);
    }
}
