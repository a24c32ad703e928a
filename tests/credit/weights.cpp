// Token weights and advantages (broadcast, CoRT, optimal token baseline,
// top-entropy mask, HAPO) against tests/reference/credit.hpp, with properties.
#include "credit/fixtures.hpp"
#include "reference/credit.hpp"
#include "support.hpp"

#include <normkit/credit/broadcast.hpp>
#include <normkit/credit/cort.hpp>
#include <normkit/credit/entropy.hpp>
#include <normkit/credit/optimal_token_baseline.hpp>
#include <normkit/credit/presets.hpp>

#include <limits>

using namespace normkit;
using namespace normkit::testing;

namespace {

template <class T>
double token_tolerance() {
    return std::is_same_v<T, double> ? 1e-12 : 2e-6;
}

}  // namespace

TEMPLATE_TEST_CASE("broadcast_advantages is A_i * m_it", "[credit][broadcast]", float, double) {
    const index_type rows = 4, cols = 17;
    const auto mask_values = random_mask(rows, cols, 1, true, 2);
    test_matrix<TestType> mask(rows, cols, mask_values, 3), out(rows, cols, 1);
    const std::vector<TestType> advantages = {TestType(1.5), TestType(-2), TestType(7), TestType(0.25)};
    credit::broadcast_advantages(advantages, mask.view, out.view);
    const auto values = out.values();
    for (index_type i = 0; i < rows; ++i)
        for (index_type t = 0; t < cols; ++t)
            CHECK(values[i * cols + t] == static_cast<double>(advantages[i]) * mask_values[i * cols + t]);
    CHECK(out.padding_untouched());
    require_error_naming([&] { credit::broadcast_advantages(std::vector<TestType>(3), mask.view, out.view); },
                         "advantages");
}

// ---- CoRT -------------------------------------------------------------------

namespace {

template <class T>
void check_cort(index_type rows, index_type cols, credit::cort_options options, std::uint32_t seed) {
    INFO(type_name<T>() << " " << rows << "x" << cols << " mapping " << static_cast<int>(options.mapping)
                        << " normalize " << options.normalize << " step " << options.step);
    const auto mask_values = random_mask(rows, cols, seed, true, rows > 2 ? 1 : -1);
    auto rubric_values = random_values(rows * cols, seed + 1, -2.0, 1.0),
         free_values = random_values(rows * cols, seed + 2, -2.0, 1.0);
    // Masked positions are never read: put NaN there.
    for (std::size_t k = 0; k < mask_values.size(); ++k)
        if (mask_values[k] == 0) rubric_values[k] = std::numeric_limits<double>::quiet_NaN();
    test_matrix<T> rubric(rows, cols, rubric_values, 2), free(rows, cols, free_values, 1),
        mask(rows, cols, mask_values);
    test_matrix<T> weights(rows, cols, 1), token_advantages(rows, cols);
    const auto advantage_values = random_values(rows, seed + 3);
    const auto advantages = to_storage<T>(advantage_values);
    const index_type rounds = credit::cort_weights(rubric.view, free.view, mask.view, advantages, weights.view,
                                                   token_advantages.view, options);
    const double ramp = reference::smoothstep(options.step, options.ramp_start, options.ramp_end);
    const auto expected = reference::cort_weights(rubric.values(), free.values(), mask_values, rows, cols,
                                                  static_cast<reference::mapping>(options.mapping), options.temperature,
                                                  options.min_weight, options.max_weight, options.normalize, ramp);
    CHECK(relative_error(weights.values(), expected) < token_tolerance<T>() * 4);
    const auto stored_advantages = stored<T>(advantage_values);
    std::vector<double> expected_advantages(expected.size());
    for (index_type i = 0; i < rows; ++i)
        for (index_type t = 0; t < cols; ++t)
            expected_advantages[i * cols + t] = expected[i * cols + t] * stored_advantages[i];
    CHECK(relative_error(token_advantages.values(), expected_advantages) < token_tolerance<T>() * 4);
    CHECK(weights.padding_untouched());
    CHECK(token_advantages.padding_untouched());
    index_type longest = 0;
    for (index_type i = 0; i < rows; ++i) {
        index_type valid = 0;
        double total = 0;
        for (index_type t = 0; t < cols; ++t) {
            const double w = weights.values()[i * cols + t];
            if (mask_values[i * cols + t] == 0) {
                CHECK(w == 0.0);
                CHECK(token_advantages.values()[i * cols + t] == 0.0);
                continue;
            }
            ++valid;
            total += w;
            CHECK(w >= options.min_weight * (1 - token_tolerance<T>()));
            CHECK(w <= options.max_weight * (1 + token_tolerance<T>()));
            const double a = token_advantages.values()[i * cols + t];
            CHECK((a == 0 || std::signbit(a) == std::signbit(stored_advantages[i])));  // sign preserved
        }
        longest = std::max(longest, valid);
        if (options.normalize && valid > 0) CHECK(total / valid == Approx(1.0).epsilon(token_tolerance<T>() * 4));
    }
    CHECK(rounds <= longest + 1);
}

}  // namespace

TEMPLATE_TEST_CASE("cort_weights matches the reference for every mapping, with and without normalization and ramp",
                   "[credit][cort]", float, double) {
    std::uint32_t seed = 100;
    for (auto mapping :
         {credit::cort_mapping::clipped_exp, credit::cort_mapping::scaled_sigmoid, credit::cort_mapping::tanh})
        for (index_type cols : {index_type(1), index_type(3), index_type(17), index_type(130)}) {
            credit::cort_options options;
            options.mapping = mapping;
            check_cort<TestType>(5, cols, options, seed++);
            options.normalize = false;
            options.temperature = 0.5;
            check_cort<TestType>(3, cols, options, seed++);
            options.normalize = true;
            options.min_weight = 0.2;
            options.max_weight = 5.0;
            options.ramp_start = 10;
            options.ramp_end = 110;
            options.step = 35;
            check_cort<TestType>(4, cols, options, seed++);
        }
}

TEST_CASE("cort normalization converges to mean 1 inside the bounds when the bounds bind", "[credit][cort]") {
    // Contrasts spread over many e-folds: most weights start at a bound, so the
    // clip-and-renormalize needs several rounds in both directions.
    for (double sign : {1.0, -1.0}) {
        for (index_type n : {index_type(2), index_type(9), index_type(64), index_type(1000)}) {
            std::vector<double> rubric(n), free(n, 0.0), mask(n, 1.0), w(n), a(n);
            for (index_type t = 0; t < n; ++t)
                rubric[t] = sign * (0.3 * static_cast<double>(t % 17) - 1.0) + (t == 0 ? 8 * sign : 0.0);
            credit::cort_options options;
            options.min_weight = 0.5;
            options.max_weight = 1.5;
            const std::vector<double> advantage{1.0};
            const index_type rounds =
                credit::cort_weights(view(rubric.data(), 1, n), view(free.data(), 1, n), view(mask.data(), 1, n),
                                     advantage, view(w.data(), 1, n), view(a.data(), 1, n), options);
            INFO("n " << n << " sign " << sign << " rounds " << rounds);
            CHECK(rounds >= 1);
            CHECK(rounds <= n + 1);
            double total = 0;
            for (double v : w) {
                total += v;
                CHECK(v >= 0.5);
                CHECK(v <= 1.5);
            }
            CHECK(total / n == Approx(1.0).epsilon(1e-13));
            std::vector<double> u;
            for (index_type t = 0; t < n; ++t)
                u.push_back(reference::cort_map(rubric[t], reference::mapping::clipped_exp, 1.0, 0.5, 1.5));
            CHECK(relative_error(w, reference::cort_normalize(u, 0.5, 1.5)) < 1e-12);
        }
    }
}

TEMPLATE_TEST_CASE("cort with zero contrast gives uniform weights and reproduces broadcast exactly", "[credit][cort]",
                   float, double) {
    const index_type rows = 5, cols = 33;
    const auto mask_values = random_mask(rows, cols, 7, true, 3);
    const auto log_p = random_values(rows * cols, 8, -1.0, 2.0);
    test_matrix<TestType> rubric(rows, cols, log_p), free(rows, cols, log_p, 2), mask(rows, cols, mask_values);
    test_matrix<TestType> weights(rows, cols), token_advantages(rows, cols), broadcast(rows, cols);
    const auto advantages = to_storage<TestType>(random_values(rows, 9));
    credit::broadcast_advantages(advantages, mask.view, broadcast.view);
    for (auto mapping :
         {credit::cort_mapping::clipped_exp, credit::cort_mapping::scaled_sigmoid, credit::cort_mapping::tanh}) {
        credit::cort_options options;
        options.mapping = mapping;
        options.step = 3;
        options.ramp_end = 10;
        credit::cort_weights(rubric.view, free.view, mask.view, advantages, weights.view, token_advantages.view,
                             options);
        CHECK(token_advantages.values() == broadcast.values());
        CHECK(weights.values() == mask_values);
    }
}

TEST_CASE("cort degenerate and bad input", "[credit][cort]") {
    std::vector<double> lp(6, -1.0), mask(6, 0.0), w(6, 9.0), a(6, 9.0);
    const auto v = [](std::vector<double>& x) { return view(x.data(), 2, 3); };
    SECTION("all-masked responses get zero weights and advantages") {
        const std::vector<double> advantages{1.0, -1.0};
        credit::cort_weights(v(lp), v(lp), v(mask), advantages, v(w), v(a));
        for (double value : w) CHECK(value == 0.0);
        for (double value : a) CHECK(value == 0.0);
    }
    SECTION("infinite contrasts map to the bounds") {
        std::vector<double> rubric = {0, -INFINITY, INFINITY, 0, 0, 0}, ones(6, 1.0);
        credit::cort_options options;
        options.normalize = false;
        const std::vector<double> advantages{1.0, 1.0};
        credit::cort_weights(v(rubric), v(lp), v(ones), advantages, v(w), v(a), options);
        CHECK(w[1] == 0.5);
        CHECK(w[2] == 2.0);
    }
    SECTION("errors name the argument") {
        std::vector<double> ones(6, 1.0), nan_values(6, std::numeric_limits<double>::quiet_NaN());
        const std::vector<double> adv = {1.0, 1.0};
        credit::cort_options options;
        options.min_weight = 3;
        options.max_weight = 2;
        require_error_naming([&] { credit::cort_weights(v(lp), v(lp), v(ones), adv, v(w), v(a), options); },
                             "max_weight");
        options = {};
        options.temperature = 0;
        require_error_naming([&] { credit::cort_weights(v(lp), v(lp), v(ones), adv, v(w), v(a), options); },
                             "temperature");
        options = {};
        options.min_weight = 1.2;
        require_error_naming([&] { credit::cort_weights(v(lp), v(lp), v(ones), adv, v(w), v(a), options); },
                             "min_weight");
        options = {};
        options.ramp_start = 5;
        options.ramp_end = 1;
        require_error_naming([&] { credit::cort_weights(v(lp), v(lp), v(ones), adv, v(w), v(a), options); },
                             "ramp_end");
        require_error_naming([&] { credit::cort_weights(v(nan_values), v(lp), v(ones), adv, v(w), v(a)); }, "contrast");
        require_error_naming([&] { credit::cort_weights(view(lp.data(), 3, 2), v(lp), v(ones), adv, v(w), v(a)); },
                             "log_prob_rubric");
        const std::vector<double> one_advantage{1.0};
        require_error_naming([&] { credit::cort_weights(v(lp), v(lp), v(ones), one_advantage, v(w), v(a)); },
                             "advantages");
    }
    SECTION("the SmoothStep ramp") {
        CHECK(credit::smoothstep_ramp(-1, 0, 10) == 0.0);
        CHECK(credit::smoothstep_ramp(5, 0, 10) == Approx(0.5));
        CHECK(credit::smoothstep_ramp(2.5, 0, 10) == Approx(3 * 0.0625 - 2 * 0.015625));
        CHECK(credit::smoothstep_ramp(10, 0, 10) == 1.0);
        CHECK(credit::smoothstep_ramp(0, 0, 0) == 1.0);
    }
}

// ---- optimal token baseline --------------------------------------------------

namespace {

template <class T>
void check_otb(index_type cols, const std::vector<long>& ids, bool holes, bool importance,
               credit::optimal_token_baseline_options options, std::uint32_t seed) {
    const auto rows = static_cast<index_type>(ids.size());
    INFO(type_name<T>() << " " << rows << "x" << cols << " holes " << holes << " IS " << importance << " zero_tail "
                        << options.handle_zero_tail << " compact " << options.compact);
    const auto mask_values = random_mask(rows, cols, seed, holes, rows > 3 ? 2 : -1);
    auto rewards = random_values(rows * cols, seed + 1);
    for (auto& r : rewards) r = std::abs(r) < 1.2 ? 0.0 : r;  // sparse rewards
    std::vector<double> log_p = random_values(rows * cols, seed + 2, -1.0, 0.8), sum_p2(rows * cols), rho;
    std::mt19937 generator(seed + 3);
    std::uniform_real_distribution<double> uniform(0.05, 1.0), ratio(0.5, 1.5);
    for (auto& x : log_p) x = std::min(x, 0.0);
    for (std::size_t k = 0; k < sum_p2.size(); ++k) sum_p2[k] = std::max(std::exp(2 * log_p[k]), uniform(generator));
    if (importance)
        for (index_type k = 0; k < rows * cols; ++k) rho.push_back(ratio(generator));
    test_matrix<T> r(rows, cols, rewards, 1), m(rows, cols, mask_values), lp(rows, cols, log_p, 2),
        s(rows, cols, sum_p2), advantages(rows, cols, 1), returns(rows, cols);
    test_matrix<T> weights(rows, cols, importance ? rho : std::vector<double>(rows * cols, 1.0));
    std::vector<index_type> group_ids(ids.begin(), ids.end());
    credit::optimal_token_baseline(r.view, m.view, normkit::group_ids(group_ids), lp.view, s.view,
                                   importance ? matrix_view<const T>(weights.view) : matrix_view<const T>{},
                                   advantages.view, returns.view, options);
    const auto expected = reference::optimal_token_baseline(
        r.values(), mask_values, lp.values(), s.values(), importance ? weights.values() : std::vector<double>{}, ids,
        rows, cols, options.handle_zero_tail, options.compact, options.eps);
    // The baseline divides sums of products: float keeps ~1e-6 of the scale of G.
    CHECK(relative_error(advantages.values(), expected, 1.0) < (std::is_same_v<T, double> ? 1e-11 : 1e-5));
    CHECK(advantages.padding_untouched());
    for (std::size_t k = 0; k < mask_values.size(); ++k)
        if (mask_values[k] == 0) CHECK(advantages.values()[k] == 0.0);
}

}  // namespace

TEMPLATE_TEST_CASE("optimal_token_baseline matches verl's formula (OTB and TIR, zero tail, IS weights)",
                   "[credit][otb]", float, double) {
    std::uint32_t seed = 200;
    const std::vector<std::vector<long>> groupings = {{7}, {1, 1}, {3, 9, 3, 9, 3, 5}, {0, 0, 0, 0, 1, 1, 1, 2}};
    for (const auto& ids : groupings)
        for (index_type cols : {index_type(1), index_type(5), index_type(33)})
            for (bool compact : {false, true})
                for (bool zero_tail : {false, true}) {
                    credit::optimal_token_baseline_options options;
                    options.compact = compact;
                    options.handle_zero_tail = zero_tail;
                    check_otb<TestType>(cols, ids, compact, seed % 2 == 0, options, seed);
                    ++seed;
                }
}

TEST_CASE("optimal_token_baseline properties", "[credit][otb]") {
    const index_type rows = 4, cols = 9;
    auto rewards = random_values(rows * cols, 300);
    std::vector<double> mask(rows * cols, 1.0), log_p(rows * cols, -0.7), sum_p2(rows * cols, 0.4),
        advantages(rows * cols), returns(rows * cols);
    const auto v = [&](std::vector<double>& x) { return view(x.data(), rows, cols); };
    SECTION("equal W across samples: the baseline is the group mean of G_t") {
        const std::vector<index_type> ids = {5, 5, 5, 5};
        credit::optimal_token_baseline(v(rewards), v(mask), normkit::group_ids(ids), v(log_p), v(sum_p2), {},
                                       v(advantages), v(returns));
        for (index_type t = 0; t < cols; ++t) {
            double mean = 0;
            for (index_type i = 0; i < rows; ++i) mean += returns[i * cols + t] / rows;
            for (index_type i = 0; i < rows; ++i)
                CHECK(advantages[i * cols + t] == Approx(returns[i * cols + t] - mean).margin(1e-7));
        }
    }
    SECTION("singleton groups keep the return: A = G") {
        const std::vector<index_type> ids = {1, 2, 3, 4};
        credit::optimal_token_baseline(v(rewards), v(mask), normkit::group_ids(ids), v(log_p), v(sum_p2), {},
                                       v(advantages), v(returns));
        CHECK(advantages == returns);
    }
    SECTION("handle_zero_tail: the unique longest response keeps its return past the second-longest length") {
        for (index_type i = 1; i < rows; ++i)
            for (index_type t = 5; t < cols; ++t) mask[i * cols + t] = 0;
        const std::vector<index_type> ids = {5, 5, 5, 5};
        credit::optimal_token_baseline(v(rewards), v(mask), normkit::group_ids(ids), v(log_p), v(sum_p2), {},
                                       v(advantages), v(returns));
        for (index_type t = 5; t < cols; ++t) CHECK(advantages[t] == returns[t]);
        credit::optimal_token_baseline_options off;
        off.handle_zero_tail = false;
        credit::optimal_token_baseline(v(rewards), v(mask), normkit::group_ids(ids), v(log_p), v(sum_p2), {},
                                       v(advantages), v(returns), off);
        for (index_type t = 5; t < cols; ++t) CHECK(std::abs(advantages[t]) < 1e-6 * (1 + std::abs(returns[t])));
    }
    SECTION("bad input names the argument") {
        require_error_naming(
            [&] {
                const std::vector<index_type> ids{1};
                credit::optimal_token_baseline(v(rewards), v(mask), normkit::group_ids(ids), v(log_p), v(sum_p2), {},
                                               v(advantages));
            },
            "group_ids");
        require_error_naming(
            [&] {
                const std::vector<index_type> ids(rows);
                credit::optimal_token_baseline(v(rewards), v(mask), normkit::group_ids(ids),
                                               view(log_p.data(), cols, rows), v(sum_p2), {}, v(advantages));
            },
            "old_log_prob");
    }
}

// ---- entropy ----------------------------------------------------------------

TEMPLATE_TEST_CASE("top_entropy_mask keeps the tokens at or above the (1 - rho) quantile", "[credit][entropy]", float,
                   double) {
    const index_type rows = 6, cols = 41;
    const auto mask_values = random_mask(rows, cols, 400, true, 4);
    auto entropy_values = random_values(rows * cols, 401, 1.0, 0.7);
    for (auto& h : entropy_values) h = std::abs(h);
    test_matrix<TestType> entropy(rows, cols, entropy_values, 1), mask(rows, cols, mask_values), keep(rows, cols, 2);
    const double valid = std::count(mask_values.begin(), mask_values.end(), 1.0);
    for (double rho : {0.0, 0.2, 0.5, 0.8, 1.0}) {
        credit::top_entropy_mask(entropy.view, mask.view, keep.view, top_entropy(rho));
        const auto kept = keep.values();
        CHECK(kept == reference::top_entropy_mask(entropy.values(), mask_values, rho));
        const double count = std::count(kept.begin(), kept.end(), 1.0);
        CHECK(count >= std::floor(rho * (valid - 1)));
        CHECK(count <= std::ceil(rho * (valid - 1)) + 1);
        if (rho == 1.0) CHECK(kept == mask_values);
        CHECK(keep.padding_untouched());
    }
    std::vector<double> none(rows * cols, 0.0);
    test_matrix<TestType> no_mask(rows, cols, none);
    credit::top_entropy_mask(entropy.view, no_mask.view, keep.view, top_entropy(0.5));
    CHECK(keep.values() == none);
    require_error_naming([&] { credit::top_entropy_mask(entropy.view, mask.view, keep.view, top_entropy(1.5)); },
                         "rho");
}

TEMPLATE_TEST_CASE("hapo_entropy_signal matches the reference in both sign conventions", "[credit][hapo]", float,
                   double) {
    const index_type rows = 5, cols = 37;
    const auto mask_values = random_mask(rows, cols, 500, true, 1);
    auto entropy_values = random_values(rows * cols, 501, 0.0, 1.5);
    for (auto& h : entropy_values) h = std::exp(h);
    entropy_values[0] = 0.0;  // log floors at 1e-8
    test_matrix<TestType> entropy(rows, cols, entropy_values), mask(rows, cols, mask_values), signal(rows, cols, 1);
    for (auto sign : {credit::hapo_sign::paper_range, credit::hapo_sign::released_code})
        for (double pivot : {0.5, 0.8}) {
            credit::hapo_entropy_signal(entropy.view, mask.view, signal.view, hapo_entropy(pivot, sign));
            const auto values = signal.values();
            CHECK(relative_error(values, reference::hapo_entropy_signal(entropy.values(), mask_values, pivot,
                                                                        sign == credit::hapo_sign::paper_range)) <
                  token_tolerance<TestType>() * 10);
            const auto [low, high] = std::minmax_element(values.begin(), values.end());
            CHECK(*high == Approx(1.0));
            if (sign == credit::hapo_sign::paper_range)
                CHECK(*low == Approx(-1.0));
            else
                CHECK(*low == 0.0);
        }
    require_error_naming([&] { credit::hapo_entropy_signal(entropy.view, mask.view, signal.view, hapo_entropy(1.5)); },
                         "pivot");
}

TEMPLATE_TEST_CASE("hapo_token_advantages: token-weighted group z-scores with the GRPO fallback", "[credit][hapo]",
                   float, double) {
    const index_type rows = 9, cols = 23;
    const auto mask_values = random_mask(rows, cols, 600, false, 4);
    const std::vector<long> ids = {0, 0, 0, 1, 1, 1, 1, 2, 3};
    const std::vector<index_type> group_ids(ids.begin(), ids.end());
    const auto score_values = stored<TestType>(random_values(rows, 601));
    test_matrix<TestType> mask(rows, cols, mask_values), out(rows, cols, 1);
    const auto scores = to_storage<TestType>(score_values);
    credit::hapo_token_advantages(scores, normkit::group_ids(group_ids), mask.view, out.view);
    CHECK(relative_error(out.values(), reference::hapo_token_advantages(score_values, mask_values, ids, rows, cols,
                                                                        1e-6)) < token_tolerance<TestType>() * 4);
    SECTION("a short outlier among long responses triggers the fallback to GRPO") {
        std::vector<double> m(3 * 100, 0.0), s = {1.0, 0.0, 0.0};
        m[0] = 1;
        for (index_type t = 0; t < 100; ++t) m[100 + t] = m[200 + t] = 1;
        test_matrix<TestType> mk(3, 100, m), o(3, 100);
        const std::vector<index_type> ids{4, 4, 4};
        const auto scores = to_storage<TestType>(s);
        credit::hapo_token_advantages(scores, normkit::group_ids(ids), mk.view, o.view);
        const double mean = 1.0 / 3, sd = std::sqrt((4.0 / 9 + 2.0 / 9) / 2);
        CHECK(o.values()[0] == Approx((1 - mean) / (sd + 1e-6)).epsilon(1e-6));
        CHECK(o.values()[100] == Approx(-mean / (sd + 1e-6)).epsilon(1e-6));
        CHECK(relative_error(o.values(), reference::hapo_token_advantages(s, m, {4, 4, 4}, 3, 100, 1e-6)) <
              token_tolerance<TestType>() * 4);
    }
    require_error_naming(
        [&] {
            const std::vector<index_type> three_ids(3);
            const auto scores = to_storage<TestType>(score_values);
            credit::hapo_token_advantages(scores, normkit::group_ids(three_ids), mask.view, out.view);
        },
        "group_ids");
}

TEST_CASE("hapo clip ranges and differential advantage redistribution", "[credit][hapo]") {
    const index_type rows = 1, cols = 6;
    std::vector<double> signal = {0.5, -0.5, 0.0, 1.0, -1.0, 0.3}, low(cols), high(cols);
    credit::hapo_clip_ranges(view(signal.data(), rows, cols), view(low.data(), rows, cols),
                             view(high.data(), rows, cols), hapo_clip(0.2, 0.28));
    for (index_type t = 0; t < cols; ++t) {
        const double h = signal[t];
        CHECK(low[t] == Approx(h <= 0 ? 0.2 * (1 - h) : 0.2));
        CHECK(high[t] == Approx(h > 0 ? 0.28 * (1 + h) : 0.28));
    }
    // Ratios inside and outside the neutral band (1 − ε_L/2, 1 + ε_H/2).
    std::vector<double> advantages = {2, 2, 2, -1, -1, 3}, ratio = {1.0, 1.0, 1.5, 0.5, 1.05, 1.0},
                        mask = {1, 1, 1, 1, 1, 0}, out(cols);
    credit::hapo_redistribute(view(advantages.data(), rows, cols), view(signal.data(), rows, cols),
                              view(ratio.data(), rows, cols), view(low.data(), rows, cols),
                              view(high.data(), rows, cols), view(mask.data(), rows, cols),
                              view(out.data(), rows, cols));
    CHECK(out[0] == 2.0);                     // h > 0, inside: unchanged
    CHECK(out[1] == Approx(2 * (1 - 0.5)));   // h ≤ 0, inside: scaled
    CHECK(out[2] == 2.0);                     // h = 0, outside: unchanged
    CHECK(out[3] == Approx(-1 * (1 + 1.0)));  // h > 0, outside: scaled
    CHECK(out[4] == Approx(-1 * (1 - 1.0)));  // h ≤ 0, inside: scaled (to 0)
    CHECK(out[5] == 0.0);                     // masked
    require_error_naming(
        [&] {
            credit::hapo_clip_ranges(view(signal.data(), rows, cols), view(low.data(), rows, cols),
                                     view(high.data(), rows, cols), hapo_clip(-0.2, 0.28));
        },
        "clip_low");
}

TEST_CASE("broadcast_advantages takes uint8 masks too, and writes +0 at masked tokens", "[credit][broadcast]") {
    const std::vector<double> advantages = {-1.5, 2.0};
    Eigen::Matrix<std::uint8_t, 2, 3, Eigen::RowMajor> byte_mask;
    byte_mask << 1, 0, 1, 0, 1, 1;
    Eigen::Matrix<double, 2, 3, Eigen::RowMajor> from_bytes, from_values;
    credit::broadcast_advantages(advantages, byte_mask, from_bytes);
    const Eigen::Matrix<double, 2, 3, Eigen::RowMajor> value_mask = byte_mask.cast<double>();
    credit::broadcast_advantages(advantages, value_mask, from_values);
    CHECK(from_bytes == from_values);
    CHECK(from_bytes(0, 0) == -1.5);
    CHECK(from_bytes(1, 2) == 2.0);
    CHECK(!std::signbit(from_bytes(0, 1)));  // a masked token is +0, whatever the sign of its advantage
}

TEST_CASE("credit presets name the framework and paper variants", "[credit][presets]") {
    CHECK(credit::presets::verl_new_optimal_token_baseline().handle_zero_tail);
    CHECK(!credit::presets::verl_old_optimal_token_baseline().handle_zero_tail);
    CHECK(credit::presets::verl_tir_optimal_token_baseline().compact);
    CHECK(credit::presets::verl_new_returns(0.9).mask_rule == normkit::return_mask_rule::carry);
    CHECK(credit::presets::verl_old_returns(0.9).mask_rule == normkit::return_mask_rule::reset);
    CHECK(credit::presets::verl_old_returns(0.9).gamma == 0.9);
    CHECK(credit::presets::hapo_paper().sign == credit::hapo_sign::paper_range);
    CHECK(credit::presets::hapo_released_code().sign == credit::hapo_sign::released_code);
    CHECK(credit::presets::hapo_released_code().pivot == 0.8);
}
