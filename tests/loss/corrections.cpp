// value_loss, rollout_correction_weights and rollout_rejection_mask against tests/reference/loss.hpp (double),
// value_loss's gradient against central finite differences, in float and double storage.
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
    const matrix<double> zero_returns = matrix<double>::Zero(2, 2);
    const auto result = loss::value_loss(v, v, zero_returns, mask, gradient);
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
    const matrix<double> xm = from<double>(x, rows, cols), rm = from<double>(rollout, rows, cols),
                         mm = from<double>(mask, rows, cols);
    using level = loss::correction_level;
    using bound = loss::correction_bound;
    for (const auto l : {level::token, level::sequence, level::sequence_mean_filter})
        for (const auto b : {bound::truncate, bound::mask})
            for (const double clamp : {20.0, 1.0}) {
                INFO(static_cast<int>(l) << " " << static_cast<int>(b) << " " << clamp);
                loss::rollout_correction_options options;
                options.level = l;
                options.bound = b;
                options.lower = 0.7;
                options.upper = 1.6;
                options.log_ratio_clamp = clamp;
                matrix<double> w(rows, cols);
                loss::rollout_correction_weights(xm, rm, mm, w, options);
                const auto expected = reference::rollout_weights(x, rollout, mask, {rows, cols}, options);
                CHECK(relative_error(to_vector(w), expected) < 1e-13);
                // batch normalization divides by the token mean (token) or the mean of row means (sequence).
                options.batch_normalize = true;
                matrix<double> normalized(rows, cols);
                const double mean = loss::rollout_correction_weights(xm, rm, mm, normalized, options);
                CHECK(relative_error(to_vector(normalized), to_vector(matrix<double>(w / mean))) < 1e-13);
            }
}

namespace {

// Every verl rollout_rs option, with a bound that keeps some rows or tokens and rejects others for log-ratios of
// spread 0.7 over `cols` tokens, and three chains (one with a tighter clamp).
std::vector<loss::rollout_rejection_options> rejection_cases(index_type cols) {
    using L = loss::rejection_level;
    using S = loss::rejection_statistic;
    const double n = static_cast<double>(cols);
    std::vector<loss::rollout_rejection_options> out;
    for (const auto l : {L::token, L::sequence_sum, L::sequence_mean, L::sequence_max})
        for (const auto s : {S::k1, S::k2, S::k3}) {
            if (l == L::sequence_max && s == S::k1) continue;
            double upper = 0.25;
            std::optional<double> lower;
            if (s == S::k1) {
                upper = l == L::sequence_sum ? std::exp(0.5 * std::sqrt(n)) : 1.5;
                if (l != L::token) lower = 1.0 / (l == L::sequence_sum ? upper : 1.2);
            } else if (l == L::sequence_sum) {
                upper = 0.15 * n;
            } else if (l == L::sequence_max) {
                upper = 1.0;
            }
            out.push_back(loss::presets::verl_rollout_rs(l, s, upper, lower));
        }
    out.push_back(loss::presets::verl_rollout_rs({{L::token, S::k1, 1.6, 0.7}, {L::sequence_max, S::k3, 1.0, {}}}));
    out.push_back(loss::presets::verl_rollout_rs(
        {{L::sequence_mean, S::k1, 1.3, {}}, {L::token, S::k2, 0.3, {}}, {L::sequence_sum, S::k3, 0.2 * n, {}}}));
    auto clamped = loss::presets::verl_rollout_rs(L::token, S::k3, 0.5);
    clamped.log_ratio_clamp = 0.4;  // every token passes: k3(±0.4) < 0.5
    out.push_back(clamped);
    return out;
}

std::string describe(const loss::rollout_rejection_options& o) {
    std::string out = "clamp " + std::to_string(o.log_ratio_clamp);
    for (const auto& c : o.criteria)
        out += " [" + std::to_string(static_cast<int>(c.level)) + " k" +
               std::to_string(static_cast<int>(c.statistic) + 1) + " " + std::to_string(c.upper) + " " +
               (c.lower ? std::to_string(*c.lower) : "-") + "]";
    return out;
}

template <class T>
void check_rejection(index_type rows, index_type cols, index_type padding, std::uint32_t seed) {
    const auto n = static_cast<std::size_t>(rows * cols);
    const auto x = stored<T>(random_values(n, seed, -1.0, 0.5)),
               rollout = stored<T>(random_values(n, seed + 1, -1.0, 0.5));
    const auto mask = padded_mask(rows, cols, seed + 2);
    const test_matrix<T> X(rows, cols, x, padding), R(rows, cols, rollout, padding + 1), M(rows, cols, mask, padding);
    double kept = 0, dropped = 0;
    for (const auto& o : rejection_cases(cols)) {
        INFO(type_name<T>() << " " << rows << "x" << cols << " padding " << padding << " " << describe(o));
        test_matrix<T> keep(rows, cols, padding);
        double expected_rejected = 0;
        const auto expected = reference::rollout_rejection_keep(x, rollout, mask, {rows, cols}, o, &expected_rejected);
        const double rejected = loss::rollout_rejection_mask(matrix_view<const T>(X.view), matrix_view<const T>(R.view),
                                                             matrix_view<const T>(M.view), keep.view, o);
        CHECK(keep.values() == expected);
        CHECK(rejected == Approx(expected_rejected).margin(1e-12));
        CHECK(keep.padding_untouched());
        for (const double k : expected) kept += k;
        dropped += expected_rejected;
        // mask {}: every token marked.
        test_matrix<T> all(rows, cols, padding);
        const double rejected_all =
            loss::rollout_rejection_mask(matrix_view<const T>(X.view), matrix_view<const T>(R.view), {}, all.view, o);
        double expected_all_rejected = 0;
        CHECK(all.values() ==
              reference::rollout_rejection_keep(x, rollout, {}, {rows, cols}, o, &expected_all_rejected));
        CHECK(rejected_all == Approx(expected_all_rejected).margin(1e-12));
        // In place over the mask (verl updates response_mask) and over log_probs: the same values.
        test_matrix<T> in_mask(rows, cols, mask, padding), in_x(rows, cols, x, padding);
        loss::rollout_rejection_mask(matrix_view<const T>(X.view), matrix_view<const T>(R.view),
                                     matrix_view<const T>(in_mask.view), in_mask.view, o);
        CHECK(in_mask.values() == expected);
        loss::rollout_rejection_mask(matrix_view<const T>(in_x.view), matrix_view<const T>(R.view),
                                     matrix_view<const T>(M.view), in_x.view, o);
        CHECK(in_x.values() == expected);
    }
    INFO(type_name<T>() << " " << rows << "x" << cols);
    if (cols > 1) CHECK((kept > 0 && dropped > 0));  // the cases do decide both ways
}

}  // namespace

TEST_CASE("rollout_rejection_mask: every verl option and chains against the reference, strided and unaligned",
          "[loss][correction][rejection]") {
    std::uint32_t seed = 300;
    for (const index_type cols : {index_type(1), index_type(2), index_type(17), index_type(37), index_type(300)})
        for (const index_type padding : {index_type(0), index_type(3)}) {
            check_rejection<double>(7, cols, padding, seed);
            check_rejection<float>(7, cols, padding, seed);
            seed += 3;
        }
}

TEST_CASE("rollout_rejection_mask: all-masked rows and batches, an empty batch, NaN and inf",
          "[loss][correction][rejection]") {
    using L = loss::rejection_level;
    using S = loss::rejection_statistic;
    // An all-masked batch: keep = 0, nothing rejected, whatever the log-probs hold (NaN, ±inf).
    const std::vector<double> x = {NAN, INFINITY, -INFINITY, 0.5, -3.0, NAN}, zero(6, 0.0), none(6, 0.0);
    for (const auto level : {L::token, L::sequence_sum, L::sequence_mean, L::sequence_max}) {
        INFO(static_cast<int>(level));
        std::vector<double> keep(6, -1.0);
        const auto o = loss::presets::verl_rollout_rs(level, level == L::sequence_max ? S::k2 : S::k1, 2.0);
        CHECK(loss::rollout_rejection_mask(view(x.data(), 2, 3), view(zero.data(), 2, 3), view(none.data(), 2, 3),
                                           view(keep.data(), 2, 3), o) == 0.0);
        CHECK(keep == std::vector<double>(6, 0.0));
    }
    // An empty batch writes nothing and rejects nothing.
    matrix<double> empty(0, 4), keep_empty(0, 4);
    CHECK(loss::rollout_rejection_mask(empty, empty, empty, keep_empty) == 0.0);
    // A row with a marked NaN: its token (token level) or the whole row (sequence level) rejected; the other
    // row, whose NaN and inf sit under m = 0, is decided on its marked tokens only. ±inf marked clamps to ±20.
    const std::vector<double> y = {0.1, NAN, 0.2, 0.1, NAN, -INFINITY}, m = {1, 1, 1, 1, 0, 0};
    std::vector<double> keep(6);
    const auto run = [&](L level, S statistic, double upper) {
        return loss::rollout_rejection_mask(view(y.data(), 2, 3), view(zero.data(), 2, 3), view(m.data(), 2, 3),
                                            view(keep.data(), 2, 3),
                                            loss::presets::verl_rollout_rs(level, statistic, upper));
    };
    CHECK(run(L::token, S::k2, 0.5) == 1.0);
    CHECK(keep == std::vector<double>{1, 0, 1, 1, 0, 0});
    for (const auto level : {L::sequence_sum, L::sequence_mean, L::sequence_max}) {
        CHECK(run(level, S::k3, 0.5) == 3.0);
        CHECK(keep == std::vector<double>{0, 0, 0, 1, 0, 0});
    }
    const std::vector<double> big = {INFINITY, 0.0, -INFINITY, 30.0};
    std::vector<double> big_keep(4);
    // -d = ∓20 against log bounds ±19.99 and ±20.01.
    for (const auto& [upper, expected] : {std::pair<double, double>{std::exp(19.99), 0.0}, {std::exp(20.01), 1.0}}) {
        loss::rollout_rejection_mask(view(big.data(), 4, 1), view(zero.data(), 4, 1), {}, view(big_keep.data(), 4, 1),
                                     loss::presets::verl_rollout_rs(L::token, S::k1, upper));
        CHECK(big_keep == std::vector<double>{expected, 1.0, expected, expected});
    }
    // A weighted mask: keep carries the weight, sums weigh by it (verl's masked_sum).
    const std::vector<double> d = {0.5, 0.5, 0.5}, w = {0.5, 2.0, 0.0};
    std::vector<double> wk(3);
    CHECK(loss::rollout_rejection_mask(view(d.data(), 1, 3), view(zero.data(), 1, 3), view(w.data(), 1, 3),
                                       view(wk.data(), 1, 3),
                                       loss::presets::verl_rollout_rs(L::sequence_sum, S::k2, 0.3125)) == 0.0);
    CHECK(wk == std::vector<double>{0.5, 2.0, 0.0});  // Σ m·k2 = 2.5·0.125 = 0.3125, on the bound
}

TEST_CASE("off_policy_sequence_mask against the reference; advantages must be B x 1", "[loss][correction]") {
    const index_type rows = 40, cols = 13;
    const auto x = random_values(rows * cols, 21, -1.0, 0.5), sampling = random_values(rows * cols, 22, -1.0, 0.5);
    const auto advantages = random_values(rows, 23);
    const auto mask = padded_mask(rows, cols, 24);
    const matrix<double> xm = from<double>(x, rows, cols), sm = from<double>(sampling, rows, cols),
                         am = from<double>(advantages, rows, 1), mm = from<double>(mask, rows, cols);
    for (const double threshold : {-0.2, 0.0, 0.3}) {
        matrix<double> keep(rows, 1);
        loss::off_policy_sequence_mask(xm, sm, am, mm, keep, threshold);
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
    const matrix<double> xm = from<double>(x, rows, cols), om = from<double>(old, rows, cols),
                         am = from<double>(advantages, rows, cols), mm = from<double>(mask, rows, cols);
    matrix<double> selected(rows, cols);
    const auto all = loss::covariance_selection(xm, om, am, mm, selected, o);
    CHECK(to_vector(selected) == expected);
    o.ratio = 0.1;  // fewer slots than candidates: a subset of them, the same for the same seed
    matrix<double> first(rows, cols), second(rows, cols);
    const auto some = loss::covariance_selection(xm, om, am, mm, first, o);
    loss::covariance_selection(xm, om, am, mm, second, o);
    CHECK(some < all);
    CHECK(to_vector(first) == to_vector(second));
    for (index_type k = 0; k < rows * cols; ++k)
        if (first.data()[k] != 0) CHECK(expected[static_cast<std::size_t>(k)] == 1.0);
}
