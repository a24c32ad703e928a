// value_loss and rollout_correction_weights against tests/reference/loss.hpp (double), value_loss's
// gradient against central finite differences, in float and double storage.
#include "reference/loss.hpp"
#include "support.hpp"

#include <normkit/loss/covariance_selection.hpp>
#include <normkit/loss/presets.hpp>
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

TEST_CASE("kl_cov and clip_cov: policy_loss's gradient against central differences of the reference",
          "[loss][correction]") {
    const index_type rows = 4, cols = 33;
    const auto x = random_values(rows * cols, 51, -1.5, 0.5), shift = random_values(rows * cols, 52, 0.0, 0.3);
    std::vector<double> old(x.size());
    for (std::size_t k = 0; k < x.size(); ++k) old[k] = x[k] + shift[k];
    const auto advantages = random_values(rows * cols, 53);
    const auto mask = padded_mask(rows, cols, 54);
    for (const bool kl : {true, false}) {
        INFO("kl_cov " << kl);
        loss::covariance_selection_options selection_options;
        selection_options.rule = kl ? loss::covariance_rule::kl_cov : loss::covariance_rule::clip_cov;
        selection_options.ratio = 0.1;
        selection_options.lower = -0.5;
        selection_options.upper = 2.0;
        const auto xm = from<double>(x, rows, cols), om = from<double>(old, rows, cols),
                   am = from<double>(advantages, rows, cols), mm = from<double>(mask, rows, cols);
        matrix<double> selected(rows, cols), gradient(rows, cols);
        CHECK(loss::covariance_selection(xm, om, am, mm, selected, selection_options) > 0);
        if (kl)
            CHECK(to_vector(selected) == reference::covariance_selection(x, old, advantages, mask, selection_options));
        auto inputs = loss::make_policy_inputs(xm, om, am, mm);
        inputs.selection = view(selected);
        const auto options = kl ? loss::presets::verl_kl_cov(0.3) : loss::presets::verl_clip_cov();
        const auto result = loss::policy_loss(inputs, gradient, {}, options);
        const auto s = to_vector(selected);
        const auto reference_loss = [&](const std::vector<double>& probe) {
            const auto ell = reference::surrogate(probe, x, old, advantages, mask, {rows, cols}, options.surrogate, &s);
            return reference::aggregate(ell, mask, {rows, cols}, options.aggregation);
        };
        CHECK(result.loss == Approx(reference_loss(x)).epsilon(1e-12));
        const auto g = to_vector(gradient);
        std::vector<double> fd, kernel;
        for (index_type k = 0; k < rows * cols; ++k) {
            auto probe = x;
            probe[k] = x[k] + 1e-6;
            const double up = reference_loss(probe);
            probe[k] = x[k] - 1e-6;
            fd.push_back((up - reference_loss(probe)) / 2e-6);
            kernel.push_back(g[k]);
        }
        CHECK(relative_error(kernel, fd, 1e-3) < 1e-6);
    }
}

TEST_CASE("covariance_selection: clip_cov takes every candidate when they fit, a seeded subset when not",
          "[loss][correction]") {
    const index_type rows = 3, cols = 20;
    const auto x = random_values(rows * cols, 61, -1.0, 0.5), advantages = random_values(rows * cols, 62);
    const auto old = random_values(rows * cols, 63, -1.0, 0.5);
    const auto mask = padded_mask(rows, cols, 64);
    loss::covariance_selection_options o;
    o.rule = loss::covariance_rule::clip_cov;
    o.lower = -10;
    o.upper = 10;
    o.ratio = 1.0;
    const auto expected = reference::covariance_selection(x, old, advantages, mask, o);
    matrix<double> selected(rows, cols);
    const auto all =
        loss::covariance_selection(from<double>(x, rows, cols), from<double>(old, rows, cols),
                                   from<double>(advantages, rows, cols), from<double>(mask, rows, cols), selected, o);
    CHECK(to_vector(selected) == expected);
    o.ratio = 0.1;  // fewer slots than candidates: a subset of them, the same for the same seed
    matrix<double> first(rows, cols), second(rows, cols);
    const auto some =
        loss::covariance_selection(from<double>(x, rows, cols), from<double>(old, rows, cols),
                                   from<double>(advantages, rows, cols), from<double>(mask, rows, cols), first, o);
    loss::covariance_selection(from<double>(x, rows, cols), from<double>(old, rows, cols),
                               from<double>(advantages, rows, cols), from<double>(mask, rows, cols), second, o);
    CHECK(some < all);
    CHECK(to_vector(first) == to_vector(second));
    for (index_type k = 0; k < rows * cols; ++k)
        if (first.data()[k] != 0) CHECK(expected[static_cast<std::size_t>(k)] == 1.0);
}
