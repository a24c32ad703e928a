// The bad-input matrix of the credit module (docs/errors.md): the logits
// kernels, the broadcast and the discounted returns, for each kind of bad input
// the normkit::error and the words of its message, or the documented value; the
// options and required inputs of the token kernels (their NaN / ±inf values are
// tests/credit/special_values.cpp).
// Float logits and double token data only.
#include "credit/fixtures.hpp"
#include "support.hpp"

#include <normkit/credit/broadcast.hpp>
#include <normkit/credit/cort.hpp>
#include <normkit/credit/entropy.hpp>
#include <normkit/credit/logits_statistics.hpp>
#include <normkit/credit/optimal_token_baseline.hpp>
#include <normkit/credit/returns.hpp>
#include <normkit/credit/spans.hpp>
#include <normkit/credit/turns.hpp>

#include <limits>

using namespace normkit;
using namespace normkit::testing;

namespace {

const double nan_value = std::numeric_limits<double>::quiet_NaN();
const float minus_infinity = -std::numeric_limits<float>::infinity();

credit::logits_options at_temperature(double temperature) {
    credit::logits_options options;
    options.temperature = temperature;
    return options;
}

}  // namespace

TEST_CASE("errors: logits_statistics and logits_backward name tokens, rows, temperature and lengths",
          "[credit][errors]") {
    std::vector<float> z = {0.5f, 1.0f, -2.0f, 0.0f, 3.0f, 1.0f}, lse(2), short_stat(1), g = {1.0f, 0.5f}, gradient(6),
                       wide(8);
    const auto logits = view(z.data(), 2, 3);
    const std::vector<index_type> tokens = {0, 2}, outside = {0, 3}, negative = {-1, 0}, short_tokens = {1};
    require_error_naming(
        [&] { credit::logits_statistics(logits, outside, credit::logits_outputs<float>().token_log_probability(lse)); },
        "tokens[1] = 3");
    require_error_naming(
        [&] {
            credit::logits_statistics(logits, negative, credit::logits_outputs<float>().token_log_probability(lse));
        },
        "tokens[0] = -1");
    require_error_naming(
        [&] {
            credit::logits_statistics(logits, short_tokens, credit::logits_outputs<float>().token_log_probability(lse));
        },
        "tokens has length 1 but logits has 2");
    require_error_naming(
        [&] {
            credit::logits_statistics(logits, tokens,
                                      credit::logits_outputs<float>().token_log_probability(short_stat));
        },
        "token_log_probability has length 1");
    require_error_naming(
        [&] { credit::logits_statistics(logits, tokens, credit::logits_outputs<float>().logsumexp(short_stat)); },
        "logsumexp has length 1");
    for (double temperature : {0.0, -1.0, nan_value, static_cast<double>(INFINITY)}) {
        INFO("temperature " << temperature);
        require_error_naming(
            [&] {
                credit::logits_statistics(logits, tokens, credit::logits_outputs<float>().token_log_probability(lse),
                                          at_temperature(temperature));
            },
            "temperature must be positive and finite");
    }
    std::vector<float> masked = z;
    for (int v = 3; v < 6; ++v) masked[static_cast<std::size_t>(v)] = minus_infinity;
    require_error_naming(
        [&] {
            credit::logits_statistics(view(masked.data(), 2, 3), tokens,
                                      credit::logits_outputs<float>().token_log_probability(lse));
        },
        "logits row 1 has no finite entry (all 3 logits are -inf)");
    require_error_naming(
        [&] {
            credit::logits_statistics(matrix_view<const float>{nullptr, 2, 3, 3}, tokens,
                                      credit::logits_outputs<float>().token_log_probability(lse));
        },
        "logits is null");
    std::vector<float> none;
    require_error_naming(
        [&] {
            credit::logits_statistics(view(none.data(), 2, 0), tokens,
                                      credit::logits_outputs<float>().token_log_probability(lse));
        },
        "is outside the vocabulary [0, 0)");
    require_error_naming([&] { credit::logits_backward(g, logits, tokens, view(wide.data(), 2, 4)); },
                         "logits_gradient has shape 2x4 but logits has shape 2x3");
    require_error_naming([&] { credit::logits_backward(short_stat, logits, tokens, view(gradient.data(), 2, 3)); },
                         "output_gradient has length 1");
    require_error_naming([&] { credit::logits_backward({}, logits, tokens, view(gradient.data(), 2, 3)); },
                         "output_gradient (one g_t per row) is required");
}

TEST_CASE("errors: the logits kernels' documented special values", "[credit][errors]") {
    std::vector<float> z = {0.5f, minus_infinity, -2.0f, std::numeric_limits<float>::quiet_NaN(), 3.0f, 1.0f};
    const std::vector<index_type> tokens = {1, 2};
    std::vector<float> log_p(2), entropy(2), squares(2), lse(2), gradient(6);
    credit::logits_statistics(view(z.data(), 2, 3), tokens,
                              credit::logits_outputs<float>()
                                  .token_log_probability(log_p)
                                  .entropy(entropy)
                                  .sum_probability_squared(squares)
                                  .logsumexp(lse));
    // A sampled token of logit -inf: log pi = -inf, and its gradient is finite.
    CHECK(log_p[0] == minus_infinity);
    CHECK(std::isfinite(entropy[0]));
    const std::vector<index_type> token{1};
    const std::vector<float> weight{1.0f};
    credit::logits_backward(weight, view(z.data(), 1, 3), token, view(gradient.data(), 1, 3));
    for (int v = 0; v < 3; ++v) CHECK(std::isfinite(gradient[static_cast<std::size_t>(v)]));
    // A NaN logit is not a supported input: NaN statistics (not a silent finite value).
    CHECK(std::isnan(lse[1]));
    CHECK(std::isnan(entropy[1]));
}

TEST_CASE("errors: broadcast_advantages and the discounted returns name shapes and discounts", "[credit][errors]") {
    const std::vector<double> advantages = {1.0, -1.0}, short_advantages = {1.0}, mask = {1, 1, 0, 1, 0, 0},
                              rewards = {0, 0, 1, 0, 1, 0}, values = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6};
    std::vector<double> out(6), wide(8);
    require_error_naming(
        [&] {
            credit::broadcast_advantages(vector_view<const double>(short_advantages), view(mask.data(), 2, 3),
                                         view(out.data(), 2, 3));
        },
        "advantages has length 1");
    require_error_naming(
        [&] {
            credit::broadcast_advantages(vector_view<const double>(advantages), view(mask.data(), 2, 3),
                                         view(wide.data(), 2, 4));
        },
        "output has shape 2x4 but mask has shape 2x3");
    credit::discounted_returns_options far;
    far.gamma = 1.5;
    require_error_naming(
        [&] {
            credit::discounted_returns(view(rewards.data(), 2, 3), view(mask.data(), 2, 3), view(out.data(), 2, 3),
                                       far);
        },
        "gamma must lie in [0, 1], got 1.5");
    require_error_naming(
        [&] {
            credit::discounted_returns(view(rewards.data(), 2, 3), view(mask.data(), 2, 3), view(wide.data(), 2, 4));
        },
        "returns has shape 2x4");
    credit::gae_options bad_lambda;
    bad_lambda.lambda = nan_value;
    require_error_naming(
        [&] {
            credit::generalized_advantage_estimation(view(rewards.data(), 2, 3), view(values.data(), 2, 3),
                                                     view(mask.data(), 2, 3), view(out.data(), 2, 3), {}, bad_lambda);
        },
        "lambda must lie in [0, 1]");
    // Documented: masked tokens get 0 advantage, +0 in the broadcast.
    credit::broadcast_advantages(vector_view<const double>(advantages), view(mask.data(), 2, 3),
                                 view(out.data(), 2, 3));
    CHECK(out == std::vector<double>{1.0, 1.0, 0.0, -1.0, 0.0, 0.0});
}

TEST_CASE("errors: aliasing: every credit output is disjoint from every input and from the other outputs",
          "[credit][errors][aliasing]") {
    // One buffer of 2 × 3 + 1: at(0) is the token data's own place, at(1) a partial overlap by one element.
    std::vector<double> buffer = {0.5, 1.0, 0.25, 2.0, 0.75, 1.5, 0.0}, mask = {1, 1, 0, 1, 1, 1}, out(6), other(6),
                        advantages = {1.0, -1.0};
    const auto at = [&](index_type offset) { return view(buffer.data() + offset, 2, 3); };
    const matrix_view<const double> data = at(0), M = view(mask.data(), 2, 3);
    const auto OUT = view(out.data(), 2, 3);
    const auto groups = contiguous_groups(2);
    SECTION("the logits kernels") {
        std::vector<float> logits = {0.5f, -1.0f, 2.0f, 0.0f, 1.0f, -0.5f}, statistics(4), gradient(6);
        const std::vector<index_type> tokens = {2, 0};
        const auto Z = view(logits.data(), 2, 3);
        require_error_naming(
            [&] {
                credit::logits_statistics(Z, tokens,
                                          credit::logits_outputs<float>()
                                              .token_log_probability(vector_view<float>(statistics.data(), 2))
                                              .entropy(vector_view<float>(statistics.data() + 1, 2)));
            },
            "token_log_probability (2) overlaps entropy (2)");
        require_error_naming(
            [&] {
                credit::logits_statistics(
                    Z, tokens,
                    credit::logits_outputs<float>().token_log_probability(vector_view<float>(logits.data() + 4, 2)));
            },
            "token_log_probability (2) overlaps logits (2x3)");
        const std::vector<float> g = {1.0f, 0.5f};
        require_error_naming(
            [&] { credit::logits_backward(g, Z, tokens, view(logits.data(), 2, 3)); },
            "logits_gradient (2x3) overlaps logits (2x3); logits_gradient must be disjoint from logits");
        std::vector<float> lse(2);
        credit::logits_statistics(Z, tokens, credit::logits_outputs<float>().logsumexp(lse));
        std::vector<float> shared = {1.0f, 0.5f, 0, 0, 0, 0, 0};
        require_error_naming(
            [&] {
                credit::logits_backward(vector_view<const float>(shared.data(), 2), Z, tokens,
                                        view(shared.data() + 1, 2, 3), lse);
            },
            "logits_gradient (2x3) overlaps output_gradient (2)");
    }
    SECTION("broadcast, returns, GAE, OTB") {
        require_error_naming(
            [&] { credit::broadcast_advantages(vector_view<const double>(buffer.data() + 5, 2), M, at(0)); },
            "output (2x3) overlaps advantages (2)");
        require_error_naming([&] { credit::discounted_returns(data, M, at(1)); },
                             "returns (2x3) overlaps rewards (2x3)");
        require_error_naming([&] { credit::discounted_returns(data, M, view(mask.data(), 2, 3)); },
                             "returns (2x3) overlaps mask (2x3)");
        require_error_naming([&] { credit::generalized_advantage_estimation(data, M, M, OUT, OUT); },
                             "advantages (2x3) overlaps returns (2x3)");
        require_error_naming([&] { credit::generalized_advantage_estimation(M, data, M, at(0)); },
                             "advantages (2x3) overlaps values (2x3)");
        require_error_naming([&] { credit::optimal_token_baseline(data, M, groups, M, M, {}, at(1)); },
                             "advantages (2x3) overlaps rewards (2x3)");
    }
    SECTION("CoRT, entropy, HAPO, spans") {
        require_error_naming([&] { credit::cort_weights(data, M, M, advantages, at(0), {}); },
                             "weights (2x3) overlaps log_prob_rubric (2x3)");
        require_error_naming([&] { credit::cort_weights(M, M, M, advantages, OUT, OUT); },
                             "weights (2x3) overlaps token_advantages (2x3)");
        require_error_naming([&] { credit::top_entropy_mask(data, M, at(1)); }, "keep (2x3) overlaps entropy (2x3)");
        require_error_naming([&] { credit::hapo_entropy_signal(data, M, at(0)); }, "signal (2x3) overlaps entropy");
        require_error_naming(
            [&] { credit::hapo_token_advantages(vector_view<const double>(buffer.data(), 2), groups, M, at(0)); },
            "output (2x3) overlaps scores (2)");
        require_error_naming([&] { credit::hapo_clip_ranges(data, OUT, OUT); },
                             "clip_low_out (2x3) overlaps clip_high_out (2x3)");
        require_error_naming([&] { credit::hapo_redistribute(M, data, M, M, M, M, at(0)); },
                             "output (2x3) overlaps signal (2x3)");
        const std::vector<credit::span> spans = {{0, 0, 2, 0}};
        require_error_naming([&] { credit::span_advantages(spans, data, M, {}, at(1)); },
                             "output (2x3) overlaps position_advantages (2x3)");
    }
    SECTION("the per-turn estimators") {
        const std::vector<index_type> turns = {3, 2};
        require_error_naming([&] { credit::mapo_advantages(data, turns, groups, at(0)); },
                             "advantages (2x3) overlaps rewards (2x3)");
        require_error_naming([&] { credit::gtpo_advantages(data, turns, groups, at(1)); },
                             "advantages (2x3) overlaps rewards (2x3)");
        require_error_naming([&] { credit::a2tgpo_advantages(data, turns, groups, advantages, OUT, OUT); },
                             "advantages (2x3) overlaps clip_scale (2x3)");
        require_error_naming(
            [&] { credit::a2tgpo_advantages(M, turns, groups, vector_view<const double>(buffer.data(), 2), at(1)); },
            "advantages (2x3) overlaps outcome_advantages (2)");
        const std::vector<index_type> turn_index = {0, 1, 1, 0, 0, -1};
        require_error_naming([&] { credit::turns_to_tokens(data, view(turn_index.data(), 2, 3), at(0)); },
                             "output (2x3) overlaps per_turn (2x3)");
    }
    // Disjoint outputs still run: the broadcast of the documented values.
    credit::broadcast_advantages(vector_view<const double>(advantages), M, OUT);
    CHECK(out == std::vector<double>{1.0, 1.0, 0.0, -1.0, -1.0, -1.0});
}

TEST_CASE("errors: the options and required inputs of the token kernels name themselves", "[credit][errors]") {
    std::vector<double> m(6, 1.0), d = {0.1, 0.4, 0.2, 0.3, 0.5, 0.6}, o1(6), o2(6);
    const auto M = view(m.data(), 2, 3), D = view(d.data(), 2, 3);
    const auto O1 = view(o1.data(), 2, 3), O2 = view(o2.data(), 2, 3);
    const auto groups = normkit::contiguous_groups(2);
    const std::vector<double> two = {1.0, -1.0};
    SECTION("CoRT") {
        credit::cort_options options;
        options.min_weight = 3;
        options.max_weight = 2;
        require_error_naming([&] { credit::cort_weights(D, D, M, two, O1, O2, options); },
                             "min_weight 3 must not exceed max_weight 2");
        options = {};
        options.min_weight = 1.2;
        require_error_naming([&] { credit::cort_weights(D, D, M, two, O1, O2, options); }, "must bracket 1");
        options = {};
        options.ramp_start = 5;
        options.ramp_end = 1;
        require_error_naming([&] { credit::cort_weights(D, D, M, two, O1, O2, options); },
                             "ramp_end 1 must not precede ramp_start 5");
    }
    SECTION("OTB, entropy, HAPO") {
        require_error_naming(
            [&] {
                credit::optimal_token_baseline_options negative;
                negative.eps = -1.0;
                credit::optimal_token_baseline(D, M, groups, D, D, {}, O1, {}, negative);
            },
            "eps must be non-negative and finite, got -1");
        require_error_naming([&] { credit::top_entropy_mask(D, M, O1, top_entropy(1.5)); },
                             "rho (top_entropy_quantile) must be in [0, 1], got 1.5");
        credit::hapo_entropy_options entropy_options;
        entropy_options.pivot = -0.5;
        require_error_naming([&] { credit::hapo_entropy_signal(D, M, O1, entropy_options); },
                             "pivot must be in [0, 1], got -0.5");
        credit::hapo_advantage_options advantage_options;
        advantage_options.eps = INFINITY;
        require_error_naming([&] { credit::hapo_token_advantages(two, groups, M, O1, advantage_options); },
                             "eps must be non-negative and finite, got inf");
        credit::hapo_clip_options clip_options;
        clip_options.clip_high = -1;
        require_error_naming([&] { credit::hapo_clip_ranges(D, O1, O2, clip_options); },
                             "clip_low 0.2 and clip_high -1 must be non-negative and finite");
        clip_options = {};
        clip_options.alpha = nan_value;
        require_error_naming([&] { credit::hapo_clip_ranges(D, O1, O2, clip_options); }, "alpha must be finite");
        require_error_naming(
            [&] {
                credit::hapo_clip_ranges(matrix_view<const double>{nullptr, 2, 3, 3}, O1, O2);
            },
            "signal is null");
        credit::hapo_redistribute_options redistribute_options;
        redistribute_options.beta = INFINITY;
        require_error_naming([&] { credit::hapo_redistribute(D, D, D, D, D, M, O1, redistribute_options); },
                             "beta must be finite");
    }
    SECTION("spans") {
        std::vector<double> mask(30, 1.0), table(6, 0.5), out(30);
        const auto positions = view(table.data(), 2, 3);
        const auto run = [&](const std::vector<credit::span>& spans) {
            credit::span_advantages(spans, positions, view(mask.data(), 2, 10), {}, view(out.data(), 2, 10));
        };
        require_error_naming([&] { run({{3, 0, 1, 0}}); }, "spans[0].sample = 3 is outside [0, 2)");
        require_error_naming(
            [&] {
                run({{0, 0, 1, 0}, {0, 4, 2, 0}});
            },
            "spans[1] = [4, 2) leaves the tokens [0, 10) or ends before it starts");
        require_error_naming([&] { run({{0, 0, 1, 5}}); }, "spans[0].position = 5 is outside [0, 3)");
        require_error_naming(
            [&] { credit::span_advantages({}, positions, view(mask.data(), 3, 10), {}, view(out.data(), 3, 10)); },
            "position_advantages has 2 rows (2x3) but mask has 3 samples");
        require_error_naming(
            [&] {
                credit::span_advantages(vector_view<const credit::span>(nullptr, 1), positions,
                                        view(mask.data(), 2, 10), {}, view(out.data(), 2, 10));
            },
            "spans is null");
    }
    SECTION("the per-turn estimators") {
        const std::vector<index_type> turns = {3, 2}, too_many = {3, 4};
        credit::a2tgpo_options options;
        options.gamma = 1.5;
        require_error_naming([&] { credit::a2tgpo_advantages(D, turns, groups, two, O1, {}, options); },
                             "gamma must lie in [0, 1], got 1.5");
        options = {};
        options.eps = -1;
        require_error_naming([&] { credit::a2tgpo_advantages(D, turns, groups, two, O1, {}, options); },
                             "eps must be non-negative and finite, got -1");
        options = {};
        options.ddof = 2;
        require_error_naming([&] { credit::a2tgpo_advantages(D, turns, groups, two, O1, {}, options); },
                             "ddof must be 0 or 1, got 2");
        options = {};
        options.clip_spread = INFINITY;
        require_error_naming([&] { credit::a2tgpo_advantages(D, turns, groups, two, O1, {}, options); },
                             "alpha 0.3 and clip_spread inf must be finite");
        require_error_naming([&] { credit::a2tgpo_advantages(D, too_many, groups, two, O1); },
                             "turn_count[1] = 4 is outside [0, 3]");
        credit::mapo_options mapo;
        mapo.alpha = nan_value;
        require_error_naming([&] { credit::mapo_advantages(D, turns, groups, O1, mapo); }, "alpha must be finite");
        std::vector<index_type> turn_index = {0, 1, 1, 0, 0, -1, 0, 0, 0};
        std::vector<double> tokens(9);
        require_error_naming(
            [&] { credit::turns_to_tokens(D, view(turn_index.data(), 3, 3), view(tokens.data(), 3, 3)); },
            "per_turn has 2 rows (2x3) but turn_index has 3");
        require_error_naming(
            [&] {
                credit::turns_to_tokens(matrix_view<const double>{nullptr, 2, 3, 3}, view(turn_index.data(), 2, 3),
                                        view(tokens.data(), 2, 3));
            },
            "per_turn is null");
        require_error_naming(
            [&] {
                credit::turns_to_tokens(D, matrix_view<const index_type>{nullptr, 2, 3, 3}, view(tokens.data(), 2, 3));
            },
            "turn_index is null");
    }
}
