// value_loss and rollout_correction_weights against tests/reference/loss.hpp (double), value_loss's
// gradient against central finite differences, in float and double storage.
#include "reference/loss.hpp"
#include "support.hpp"

#include <normkit/loss/rollout_correction.hpp>
#include <normkit/loss/value_loss.hpp>

#include <Eigen/Core>

using namespace normkit;
using namespace normkit::testing;

namespace {

template <class T>
using matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class T>
matrix<T> from(const std::vector<double>& values, index_type rows, index_type cols) {
    return Eigen::Map<const matrix<double>>(values.data(), rows, cols).cast<T>();
}

template <class T>
std::vector<double> to_vector(const matrix<T>& m) {
    std::vector<double> out(static_cast<std::size_t>(m.size()));
    for (index_type k = 0; k < m.size(); ++k) out[k] = static_cast<double>(m.data()[k]);
    return out;
}

// Right-padded masks with one empty row.
std::vector<double> padded_mask(index_type rows, index_type cols, std::uint32_t seed) {
    std::mt19937 generator(seed);
    std::uniform_int_distribution<index_type> length(1, cols);
    std::vector<double> mask;
    for (index_type i = 0; i < rows; ++i) {
        const index_type n = i == 1 ? 0 : length(generator);
        for (index_type t = 0; t < cols; ++t) mask.push_back(t < n ? 1.0 : 0.0);
    }
    return mask;
}

template <class T>
void check_value_loss(index_type rows, index_type cols, std::optional<double> clip, loss::aggregation_mode mode) {
    INFO(type_name<T>() << " " << rows << "x" << cols << " clip " << (clip ? *clip : -1) << " mode "
                        << static_cast<int>(mode));
    const auto n = static_cast<std::size_t>(rows * cols);
    const auto v = stored<T>(random_values(n, 1)), old = stored<T>(random_values(n, 2, 0.0, 1.0)),
               target = stored<T>(random_values(n, 3, 0.0, 1.5));
    const auto mask = padded_mask(rows, cols, 4);
    loss::value_loss_options options;
    options.clip = clip;
    options.aggregation.mode = mode;
    const matrix<T> vm = from<T>(v, rows, cols), om = from<T>(old, rows, cols), rm = from<T>(target, rows, cols),
                    mm = from<T>(mask, rows, cols);
    matrix<T> gradient(rows, cols);
    const auto result = loss::value_loss(vm, om, rm, mm, gradient, options);
    const auto reference_loss = [&](const std::vector<double>& values) {
        return reference::value_loss(values, old, target, mask, {rows, cols}, clip ? *clip : -1.0, options.aggregation);
    };
    const double expected = reference_loss(v);
    CHECK(result.loss == Approx(expected).epsilon(std::is_same_v<T, double> ? 1e-12 : 1e-5).margin(1e-12));
    const auto g = to_vector(gradient);
    std::vector<double> fd, kernel;
    for (index_type k = 0; k < rows * cols; k += std::max<index_type>(1, rows * cols / 40)) {
        auto probe = v;
        const double h = 1e-6;
        probe[k] = v[k] + h;
        const double up = reference_loss(probe);
        probe[k] = v[k] - h;
        fd.push_back((up - reference_loss(probe)) / (2 * h));
        kernel.push_back(g[k]);
    }
    CHECK(relative_error(kernel, fd, 1e-3) < (std::is_same_v<T, double> ? 1e-6 : 1e-4));
}

}  // namespace

TEST_CASE("value_loss: against the reference and finite differences, clipped or not, every aggregation",
          "[loss][value]") {
    for (const auto mode : {loss::aggregation_mode::token_mean, loss::aggregation_mode::seq_mean_token_mean,
                            loss::aggregation_mode::seq_mean_token_sum, loss::aggregation_mode::token_sum})
        for (const auto clip : {std::optional<double>(0.2), std::optional<double>(), std::optional<double>(0.0)})
            for (const index_type cols : {index_type(1), index_type(17), index_type(300)}) {
                check_value_loss<double>(5, cols, clip, mode);
                check_value_loss<float>(5, cols, clip, mode);
            }
}

TEST_CASE("value_loss: masked NaN never reaches the loss; an all-masked batch gives 0", "[loss][value]") {
    matrix<double> v = matrix<double>::Ones(2, 2), mask = matrix<double>::Ones(2, 2), gradient(2, 2);
    v(1, 1) = NAN;
    mask(1, 1) = 0;
    const auto result = loss::value_loss(v, v, matrix<double>(matrix<double>::Zero(2, 2)), mask, gradient);
    CHECK(result.loss == Approx(0.5));
    CHECK(gradient(1, 1) == 0.0);
    const matrix<double> none = matrix<double>::Zero(2, 2);
    CHECK(loss::value_loss(v, v, v, none).loss == 0.0);
    const matrix<double> bad = matrix<double>::Constant(2, 2, 0.5);
    CHECK_THROWS_WITH(loss::value_loss(v, v, v, bad), Catch::Contains("mask"));
}

TEST_CASE("rollout_correction_weights: every level and bound against the reference", "[loss][correction]") {
    const index_type rows = 6, cols = 37;
    const auto x = random_values(rows * cols, 11, -1.0, 0.5), rollout = random_values(rows * cols, 12, -1.0, 0.5);
    const auto mask = padded_mask(rows, cols, 13);
    using level = loss::correction_level;
    using bound = loss::correction_bound;
    for (const auto l : {level::token, level::sequence, level::sequence_mean_filter})
        for (const auto b : {bound::truncate, bound::mask})
            for (const double clamp : {20.0, 1.0}) {
                INFO(static_cast<int>(l) << " " << static_cast<int>(b) << " " << clamp);
                loss::rollout_correction_options options{l, b, 0.7, 1.6, clamp, false};
                matrix<double> w(rows, cols);
                loss::rollout_correction_weights(from<double>(x, rows, cols), from<double>(rollout, rows, cols),
                                                 from<double>(mask, rows, cols), w, options);
                const auto expected = reference::rollout_weights(x, rollout, mask, {rows, cols}, options);
                CHECK(relative_error(to_vector(w), expected) < 1e-13);
                // batch normalization divides by the token mean (token) or the mean of row means (sequence).
                options.batch_normalize = true;
                matrix<double> normalized(rows, cols);
                const double mean =
                    loss::rollout_correction_weights(from<double>(x, rows, cols), from<double>(rollout, rows, cols),
                                                     from<double>(mask, rows, cols), normalized, options);
                CHECK(relative_error(to_vector(normalized), to_vector(matrix<double>(w / mean))) < 1e-13);
            }
}

TEST_CASE("off_policy_sequence_mask against the reference; advantages must be B x 1", "[loss][correction]") {
    const index_type rows = 40, cols = 13;
    const auto x = random_values(rows * cols, 21, -1.0, 0.5), sampling = random_values(rows * cols, 22, -1.0, 0.5);
    const auto advantages = random_values(rows, 23);
    const auto mask = padded_mask(rows, cols, 24);
    for (const double threshold : {-0.2, 0.0, 0.3}) {
        matrix<double> keep(rows, 1);
        loss::off_policy_sequence_mask(from<double>(x, rows, cols), from<double>(sampling, rows, cols),
                                       from<double>(advantages, rows, 1), from<double>(mask, rows, cols), keep,
                                       threshold);
        CHECK(to_vector(keep) == reference::off_policy_mask(x, sampling, advantages, mask, {rows, cols}, threshold));
    }
    matrix<double> keep(rows, 1);
    const auto wide = from<double>(random_values(rows * cols, 25), rows, cols);
    CHECK_THROWS_WITH(loss::off_policy_sequence_mask(wide, wide, wide, {}, keep, 0.0), Catch::Contains("advantages"));
}
