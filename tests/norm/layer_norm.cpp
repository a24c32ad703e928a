// LayerNorm forward and backward against tests/reference/norm.hpp.
#include "methods.hpp"
#include "reference/norm.hpp"
#include "support.hpp"

#include <normkit/norm/layer_norm.hpp>
#include <normkit/norm/rms_norm.hpp>

using namespace normkit;
using namespace normkit::testing;

namespace {

norm::layer_norm_options layer_norm_eps(double eps) {
    norm::layer_norm_options options;
    options.eps = eps;
    return options;
}

norm::rms_norm_options rms_norm_eps(double eps) {
    norm::rms_norm_options options;
    options.eps = eps;
    return options;
}

template <class T>
void check_forward_backward(index_type rows, index_type n, index_type padding, double offset, bool affine,
                            std::uint32_t seed) {
    INFO(type_name<T>() << " rows " << rows << " n " << n << " padding " << padding << " offset " << offset
                        << " affine " << affine);
    const double eps = 1e-5;
    test_matrix<T> x(rows, n, random_values(rows * n, seed, offset, 1.0), padding);
    test_matrix<T> y(rows, n, padding + 1), dy(rows, n, random_values(rows * n, seed + 1), padding),
        dx(rows, n, padding);
    const auto weight_values = affine ? stored<T>(random_values(n, seed + 2, 1.0, 0.5)) : std::vector<double>{};
    const auto bias_values = affine ? stored<T>(random_values(n, seed + 3)) : std::vector<double>{};
    const auto weight = to_storage<T>(weight_values), bias = to_storage<T>(bias_values);
    std::vector<core::statistic_t<T>> mean(rows), rstd(rows), dweight(n), dbias(n);

    norm::layer_norm_forward(x.view, weight, bias, y.view, mean, rstd, layer_norm_eps(eps));

    std::vector<double> y_ref, mean_ref, rstd_ref;
    reference::layer_norm_forward(x.values(), {rows, n}, weight_values, bias_values, eps, y_ref, mean_ref, rstd_ref);
    // y is O(1) however large the offset: the tolerance is that of one rounding to T.
    CHECK(relative_error(y.values(), y_ref) < tolerance<T>() * 4);
    CHECK(relative_error(to_double(rstd), rstd_ref) < std::max(tolerance<T>(), 2e-6));
    CHECK(y.padding_untouched());

    norm::layer_norm_backward(dy.view, x.view, weight, dx.view, dweight, dbias, mean, rstd, layer_norm_eps(eps));
    std::vector<double> dx_ref, dweight_ref, dbias_ref;
    reference::layer_norm_backward(dy.values(), x.values(), {rows, n}, weight_values, eps, dx_ref, dweight_ref,
                                   dbias_ref);
    const double gradient_tolerance =
        std::is_same_v<T, double> ? 1e-10 : (std::is_same_v<T, float> ? 1e-4 : tolerance<T>() * 4);
    // dx cancels (to 0 for n = 1, 2): measure it against the size of its terms r·γ⊙dy.
    const double terms = max_abs(rstd_ref) * max_abs(dy.values()) * (affine ? max_abs(weight_values) : 1.0);
    CHECK(relative_error(dx.values(), dx_ref, terms) < gradient_tolerance);
    // Parameter gradients are accumulated in float from exactly stored inputs: float accuracy even for bf16.
    const double parameter_tolerance = std::is_same_v<T, double> ? 1e-11 : 1e-4;
    CHECK(relative_error(to_double(dweight), dweight_ref) < parameter_tolerance);
    CHECK(relative_error(to_double(dbias), dbias_ref) < parameter_tolerance);
    CHECK(dx.padding_untouched());
}

// LayerNorm in the generic norm tests (tests/norm/methods.hpp).
const register_row_method layer_norm_entry{
    {"layer_norm",
     [](matrix_view<const float> x, matrix_view<float> y, const row_run& run) {
         const std::vector<float> weight(static_cast<std::size_t>(x.cols), 1.0f);
         norm::layer_norm_forward(x, weight, weight, y, {}, {}, with_run(norm::layer_norm_options{}, run));
     },
     [](const test_matrix<float>& x, const test_matrix<float>& dy, const streaming_options& execution) {
         const index_type rows = x.view.rows, n = x.view.cols;
         const auto weight = to_storage<float>(random_values(n, 25, 1.0, 0.2));
         const auto bias = to_storage<float>(random_values(n, 24, 0.0, 0.1));
         norm::layer_norm_options options;
         set_execution(options, execution);
         test_matrix<float> y(rows, n), dx(rows, n);
         std::vector<float> mean(rows), rstd(rows), dweight(n), dbias(n);
         norm::layer_norm_forward(x.view, weight, bias, y.view, mean, rstd, options);
         norm::layer_norm_backward(dy.view, x.view, weight, dx.view, dweight, dbias, mean, rstd, options);
         return std::vector<std::vector<float>>{storage_of(y), mean, rstd, storage_of(dx), dweight, dbias};
     }}};

}  // namespace

TEMPLATE_TEST_CASE("layer_norm matches the reference over SIMD tails, strides and unaligned rows", "[layer_norm]",
                   float, double, Eigen::bfloat16, Eigen::half) {
    std::uint32_t seed = 1;
    for (index_type n : tail_dims) {
        for (index_type rows : {index_type(1), index_type(3), index_type(40)}) {
            if (rows * n > 200000) continue;
            check_forward_backward<TestType>(rows, n, n % 3, 0.0, true, seed++);
        }
        check_forward_backward<TestType>(5, n, 0, 0.5, false, seed++);
    }
}

TEMPLATE_TEST_CASE("layer_norm keeps its accuracy for rows far from zero", "[layer_norm]", float, double) {
    for (double offset : {1e4, 1e6}) {
        for (index_type n : {index_type(17), index_type(1000), index_type(4097)})
            check_forward_backward<TestType>(7, n, 0, offset, true, 99);
    }
}

TEST_CASE("layer_norm gradients agree with central finite differences", "[layer_norm]") {
    const index_type rows = 3, n = 19;
    const double eps = 1e-5;
    const auto x = random_values(rows * n, 5), dy = random_values(rows * n, 6);
    const auto weight = random_values(n, 7, 1.0, 0.3), bias = random_values(n, 8);
    std::vector<double> y(rows * n), mean(rows), rstd(rows), dx(rows * n), dweight(n), dbias(n);
    norm::layer_norm_forward(view(x.data(), rows, n), weight, bias, view(y.data(), rows, n), mean, rstd,
                             layer_norm_eps(eps));
    norm::layer_norm_backward(view(dy.data(), rows, n), view(x.data(), rows, n), weight, view(dx.data(), rows, n),
                              dweight, dbias, mean, rstd, layer_norm_eps(eps));
    // loss = Σ dy⊙y as a function of x, γ and β in turn.
    const auto loss = [&](const std::vector<double>& xs, const std::vector<double>& w, const std::vector<double>& b) {
        std::vector<double> out, m, r;
        reference::layer_norm_forward(xs, {rows, n}, w, b, eps, out, m, r);
        return dot(out, dy);
    };
    CHECK(relative_error(dx, finite_difference(x, [&](const auto& v) { return loss(v, weight, bias); })) < 1e-7);
    CHECK(relative_error(dweight, finite_difference(weight, [&](const auto& v) { return loss(x, v, bias); })) < 1e-7);
    CHECK(relative_error(dbias, finite_difference(bias, [&](const auto& v) { return loss(x, weight, v); })) < 1e-7);
}

TEST_CASE("layer_norm properties", "[layer_norm]") {
    const index_type rows = 4, n = 67;
    const auto x = random_values(rows * n, 11, 3.0, 2.0);
    const auto weight = random_values(n, 12), bias = random_values(n, 13);

    SECTION("LayerNorm(x) = RMSNorm(x - mean(x)) with the same weight and eps") {
        std::vector<double> centered = x, y(rows * n), z(rows * n), mean(rows), rstd(rows);
        for (index_type i = 0; i < rows; ++i) {
            double mu = 0;
            for (index_type j = 0; j < n; ++j) mu += x[i * n + j] / n;
            for (index_type j = 0; j < n; ++j) centered[i * n + j] -= mu;
        }
        norm::layer_norm_forward(view(x.data(), rows, n), weight, {}, view(y.data(), rows, n), mean, rstd,
                                 layer_norm_eps(1e-5));
        norm::rms_norm_forward(view(centered.data(), rows, n), weight, view(z.data(), rows, n), {}, rms_norm_eps(1e-5));
        CHECK(relative_error(y, z) < 1e-12);
    }
    SECTION("scale invariance as eps -> 0") {
        std::vector<double> scaled = x, y(rows * n), z(rows * n);
        for (auto& value : scaled) value *= 1e3;
        norm::layer_norm_forward(view(x.data(), rows, n), weight, bias, view(y.data(), rows, n), {}, {},
                                 layer_norm_eps(1e-300));
        norm::layer_norm_forward(view(scaled.data(), rows, n), weight, bias, view(z.data(), rows, n), {}, {},
                                 layer_norm_eps(1e-300));
        CHECK(relative_error(z, y) < 1e-12);
    }
    SECTION("a constant row gives y = beta exactly, dx = 0 and no weight gradient") {
        for (float constant : {0.0f, 0.1f, 1e6f, -3.7e4f}) {
            for (index_type width : {index_type(1), index_type(3), index_type(33)}) {
                std::vector<float> c(2 * width, constant), out(2 * width), fmean(2), frstd(2), dy(2 * width, 1.0f),
                    dx(2 * width), dw(width), db(width);
                const std::vector<float> w(width, 2.0f), b(width, 0.25f);
                norm::layer_norm_forward(view(c.data(), 2, width), w, b, view(out.data(), 2, width), fmean, frstd);
                for (float value : out) CHECK(value == 0.25f);
                CHECK(fmean[0] == constant);
                norm::layer_norm_backward(view(dy.data(), 2, width), view(c.data(), 2, width), w,
                                          view(dx.data(), 2, width), dw, db, fmean, frstd);
                for (float value : dx) CHECK(value == 0.0f);
                for (float value : dw) CHECK(value == 0.0f);
                for (float value : db) CHECK(value == 2.0f);
            }
        }
    }
    SECTION("output may alias the input") {
        std::vector<double> y(rows * n), in_place = x;
        norm::layer_norm_forward(view(x.data(), rows, n), weight, bias, view(y.data(), rows, n));
        norm::layer_norm_forward(view(in_place.data(), rows, n), weight, bias, view(in_place.data(), rows, n));
        CHECK(in_place == y);
    }
}

TEMPLATE_TEST_CASE("layer_norm is bitwise identical for 1 and 2 threads", "[layer_norm][threads]", float,
                   Eigen::bfloat16) {
    for (index_type rows : {index_type(1), index_type(33), index_type(1000), index_type(5000)}) {
        const index_type n = 65;
        test_matrix<TestType> x(rows, n, random_values(rows * n, 21, 2.0)), dy(rows, n, random_values(rows * n, 22));
        const auto weight = to_storage<TestType>(random_values(n, 23)),
                   bias = to_storage<TestType>(random_values(n, 24));
        std::vector<std::vector<TestType>> outputs;
        std::vector<std::vector<float>> gradients;
        for (int threads : {1, 2}) {
            test_matrix<TestType> y(rows, n), dx(rows, n);
            std::vector<float> mean(rows), rstd(rows), dweight(n), dbias(n);
            norm::layer_norm_options options;
            options.threads = threads;
            norm::layer_norm_forward(x.view, weight, bias, y.view, mean, rstd, options);
            norm::layer_norm_backward(dy.view, x.view, weight, dx.view, dweight, dbias, mean, rstd, options);
            outputs.push_back(y.storage);
            outputs.push_back(dx.storage);
            gradients.push_back(dweight);
            gradients.push_back(dbias);
        }
        CHECK(std::memcmp(outputs[0].data(), outputs[2].data(), outputs[0].size() * sizeof(TestType)) == 0);
        CHECK(std::memcmp(outputs[1].data(), outputs[3].data(), outputs[1].size() * sizeof(TestType)) == 0);
        CHECK(gradients[0] == gradients[2]);
        CHECK(gradients[1] == gradients[3]);
    }
}

TEST_CASE("layer_norm accepts Eigen tensors, maps and matrices", "[layer_norm][view]") {
    Eigen::Tensor<float, 3, Eigen::RowMajor> x(2, 3, 17), y(2, 3, 17);
    x.setRandom();
    Eigen::VectorXf weight = Eigen::VectorXf::Random(17), mean(6), rstd(6);
    norm::layer_norm_forward(x, weight, {}, y, mean, rstd);
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> as_matrix(6, 17), out(6, 17);
    std::copy(x.data(), x.data() + x.size(), as_matrix.data());
    norm::layer_norm_forward(as_matrix, weight, {}, out);
    CHECK(std::equal(out.data(), out.data() + out.size(), y.data()));
    Eigen::TensorMap<Eigen::Tensor<float, 2, Eigen::RowMajor>> mapped(out.data(), 6, 17);
    norm::layer_norm_forward(
        Eigen::TensorMap<const Eigen::Tensor<const float, 2, Eigen::RowMajor>>(as_matrix.data(), 6, 17), weight, {},
        mapped);
    CHECK(std::equal(out.data(), out.data() + out.size(), y.data()));
    // A block of a wider row-major matrix is a strided view.
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> wide = Eigen::MatrixXf::Zero(6, 40);
    wide.leftCols(17) = as_matrix;
    norm::layer_norm_forward(wide.leftCols(17), weight, {}, wide.rightCols(17));
    CHECK(wide.rightCols(17).isApprox(out, 0));
}

TEST_CASE("layer_norm rejects bad input, naming the argument", "[layer_norm][errors]") {
    std::vector<float> x(12, 1.0f), y(12), mean(3), rstd(3), dw(4), db(4);
    const std::vector<float> weight(5, 1.0f), good_weight(4, 1.0f);
    require_error_naming([&] { norm::layer_norm_forward(view(x.data(), 3, 4), {}, {}, view(y.data(), 4, 3)); },
                         "output");
    require_error_naming([&] { norm::layer_norm_forward(view(x.data(), 3, 4), weight, {}, view(y.data(), 3, 4)); },
                         "weight");
    require_error_naming([&] { norm::layer_norm_forward(view(x.data(), 3, 4), {}, weight, view(y.data(), 3, 4)); },
                         "bias");
    require_error_naming(
        [&] {
            norm::layer_norm_forward(view(x.data(), 3, 4), {}, {}, view(y.data(), 3, 4), {}, {}, layer_norm_eps(0.0));
        },
        "eps");
    require_error_naming(
        [&] {
            norm::layer_norm_forward(view(x.data(), 3, 4), {}, {}, view(y.data(), 3, 4), {}, {}, layer_norm_eps(-1e-5));
        },
        "eps");
    require_error_naming(
        [&] {
            norm::layer_norm_forward(view(x.data(), 3, 4), {}, {}, view(y.data(), 3, 4),
                                     vector_view<float>(mean.data(), 2));
        },
        "mean");
    require_error_naming(
        [&] {
            norm::layer_norm_forward(matrix_view<const float>{nullptr, 3, 4, 4}, {}, {}, view(y.data(), 3, 4));
        },
        "input");
    require_error_naming([&] { view(static_cast<float*>(nullptr), 3, 4); }, "null");
    require_error_naming(
        [&] {
            norm::layer_norm_backward(view(x.data(), 3, 4), view(x.data(), 3, 4), {}, view(y.data(), 3, 4), {}, {}, {},
                                      {});
        },
        "rstd");
    require_error_naming(
        [&] {
            norm::layer_norm_backward(view(x.data(), 3, 4), view(x.data(), 3, 4), good_weight, view(y.data(), 3, 4), dw,
                                      vector_view<float>(db.data(), 3), mean, rstd);
        },
        "bias_gradient");
    require_error_naming(
        [&] {
            norm::layer_norm_backward(view(x.data(), 2, 4), view(x.data(), 3, 4), {}, view(y.data(), 3, 4), {}, {},
                                      mean, rstd);
        },
        "output_gradient");
}

TEST_CASE("as_vector keeps the element type and constness of its argument", "[view]") {
    Eigen::VectorXf values = Eigen::VectorXf::Random(9);
    const Eigen::VectorXf& constant = values;
    std::vector<double> doubles(4, 1.0);
    Eigen::Tensor<float, 2, Eigen::RowMajor> tensor(3, 4);
    static_assert(std::is_same_v<decltype(as_vector(values)), vector_view<float>>);
    static_assert(std::is_same_v<decltype(as_vector(constant)), vector_view<const float>>);
    static_assert(std::is_same_v<decltype(as_vector(doubles)), vector_view<double>>);
    CHECK(as_vector(values).size == 9);
    CHECK(as_vector(tensor).size == 12);
    CHECK(as_vector(values.segment(2, 3)).data == values.data() + 2);
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> matrix(4, 5);
    require_error_naming([&] { as_vector(matrix.col(1)); }, "contiguous");
    require_error_naming([&] { as_vector(matrix); }, "one row or one column");
    CHECK(as_vector(matrix.row(2)).data == matrix.data() + 10);
}

TEMPLATE_TEST_CASE("streaming stores change no bit of layer_norm or rms_norm", "[layer_norm][rms_norm][stream]", float,
                   double, Eigen::bfloat16, Eigen::half) {
    for (index_type n : tail_dims) {
        const index_type rows = 5;  // two pairs, (0, 3) and (1, 4), and row 2 left over
        auto values = random_values(rows * n, 61, 1.0, 2.0);
        // Rows 0 and 4 begin far from their mean, so LayerNorm takes its second sweep for them in
        // double and 16-bit rows (float rows, summed in double, take it only some 1000σ out):
        // in the pair summed on its own and in a pair summed while the one before was written.
        values[0] = values[static_cast<std::size_t>(4 * n)] = 9.0;
        test_matrix<TestType> x(rows, n, values, n % 5);
        const auto weight = to_storage<TestType>(random_values(n, 62)),
                   bias = to_storage<TestType>(random_values(n, 63));
        std::vector<std::vector<TestType>> outputs;
        std::vector<std::vector<core::statistic_t<TestType>>> statistics;
        for (std::size_t threshold : {std::size_t(0), static_cast<std::size_t>(-1)}) {
            test_matrix<TestType> y(rows, n, n % 5), z(rows, n, n % 5);
            norm::layer_norm_options layer;
            layer.stream_above_bytes = threshold;
            std::vector<core::statistic_t<TestType>> mean(rows), rstd(rows);
            norm::layer_norm_forward(x.view, weight, bias, y.view, mean, rstd, layer);
            CHECK(y.padding_untouched());
            outputs.push_back(y.storage);
            statistics.push_back(mean);
            statistics.push_back(rstd);
            // Beyond the cache both take rows in pairs, and RMSNorm forms its weight once.
            for (const auto casting : {norm::rms_norm_casting::gemma, norm::rms_norm_casting::llama})
                for (const bool offset : {false, true}) {
                    norm::rms_norm_options rms;
                    rms.stream_above_bytes = threshold;
                    rms.casting = casting;
                    rms.offset = offset;
                    std::vector<core::statistic_t<TestType>> rms_rstd(rows);
                    norm::rms_norm_forward(x.view, weight, z.view, rms_rstd, rms);
                    CHECK(z.padding_untouched());
                    outputs.push_back(z.storage);
                    statistics.push_back(rms_rstd);
                }
        }
        INFO("n " << n);
        for (std::size_t k = 0; k < 5; ++k)
            CHECK(std::memcmp(outputs[k].data(), outputs[k + 5].data(), outputs[k].size() * sizeof(TestType)) == 0);
        // In place, streamed: each row is read (both sweeps) before it is written.
        norm::layer_norm_options layer;
        layer.stream_above_bytes = 0;
        test_matrix<TestType> in_place(rows, n, x.values(), n % 5);
        norm::layer_norm_forward(in_place.view, weight, bias, in_place.view, {}, {}, layer);
        CHECK(std::memcmp(in_place.storage.data(), outputs[5].data(), outputs[5].size() * sizeof(TestType)) == 0);
        norm::rms_norm_options rms;
        rms.stream_above_bytes = 0;
        in_place.set(x.values());
        norm::rms_norm_forward(in_place.view, weight, in_place.view, {}, rms);
        CHECK(std::memcmp(in_place.storage.data(), outputs[6].data(), outputs[6].size() * sizeof(TestType)) == 0);
        for (std::size_t k = 0; k < 6; ++k)
            CHECK(statistics[k] == statistics[k + 6]);  // LayerNorm's mean and rstd, RMSNorm's rstds
        // Two blocks of rows, [0, 2) and [2, 5) (core::parallel_for): each sums its own first pair.
        test_matrix<TestType> split(rows, n, n % 5);
        std::vector<core::statistic_t<TestType>> mean(rows), rstd(rows);
        layer.threads = 2;
        norm::layer_norm_forward(x.view, weight, bias, split.view, mean, rstd, layer);
        CHECK(std::memcmp(split.storage.data(), outputs[5].data(), outputs[5].size() * sizeof(TestType)) == 0);
        CHECK(mean == statistics[6]);
        CHECK(rstd == statistics[7]);
        rms.threads = 2;
        norm::rms_norm_forward(x.view, weight, split.view, rstd, rms);
        CHECK(std::memcmp(split.storage.data(), outputs[6].data(), outputs[6].size() * sizeof(TestType)) == 0);
        CHECK(rstd == statistics[8]);
    }
}
