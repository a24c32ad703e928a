// The bad-input matrix of the advantage module (docs/errors.md): for each
// public function and each kind of bad input, the normkit::error and the words
// of its message, or the documented value. Double rewards only.
#include "support.hpp"

#include <normkit/advantage/bnpo.hpp>
#include <normkit/advantage/estimators.hpp>
#include <normkit/advantage/gepo.hpp>
#include <normkit/advantage/group_normalize.hpp>
#include <normkit/advantage/multi_reward.hpp>
#include <normkit/advantage/returns.hpp>
#include <normkit/advantage/scrl.hpp>
#include <normkit/advantage/spo.hpp>
#include <normkit/advantage/whiten.hpp>

#include <limits>

using namespace normkit;
using namespace normkit::advantage;
using namespace normkit::testing;

namespace {

const double nan_value = std::numeric_limits<double>::quiet_NaN();
const double infinity = std::numeric_limits<double>::infinity();

group_normalize_options eps_of(double eps, eps_mode placement = eps_mode::add_to_std) {
    group_normalize_options options;
    options.eps = eps;
    options.placement = placement;
    return options;
}

}  // namespace

TEST_CASE("errors: group_normalize names lengths, ids, options and rewards", "[advantage][errors]") {
    std::vector<double> rewards = {1, 2, 3, 4, 5, 6}, out(6), short_out(5);
    const std::vector<std::int64_t> ids = {0, 0, 1, 1, 2, 2}, short_ids = {0, 0, 1}, far_ids = {0, 0, 1, 1, 2, 9},
                                    negative_ids = {0, 0, -1, 1, 2, 2};
    // lengths and shapes
    require_error_naming([&] { group_normalize(rewards, contiguous_groups(2), short_out); },
                         "output has length 5 but rewards has length 6");
    require_error_naming([&] { group_normalize(rewards, contiguous_groups(4), out); }, "not a multiple of group_size");
    require_error_naming([&] { group_normalize(rewards, contiguous_groups(0), out); }, "group_size must be positive");
    require_error_naming([&] { group_normalize(rewards, group_ids(short_ids), out); }, "group ids has length 3 but");
    require_error_naming([&] { group_normalize(rewards, group_ids(far_ids, 3), out); }, "group ids[5] = 9 is unknown");
    require_error_naming([&] { group_normalize(rewards, group_ids(negative_ids, 3), out); },
                         "group ids[2] is negative");
    std::vector<std::uint8_t> short_valid(4, 1);
    std::vector<std::int64_t> short_lengths(4, 1), negative_lengths = {1, 2, -3, 1, 1, 1};
    reward_inputs<double> inputs;
    inputs.rewards = rewards;
    inputs.grouping = contiguous_groups(2);
    auto with = [&](auto change) {
        auto copy = inputs;
        change(copy);
        return copy;
    };
    require_error_naming([&] { group_normalize(with([&](auto& c) { c.valid = short_valid; }), out); },
                         "valid has length 4");
    require_error_naming([&] { group_normalize(with([&](auto& c) { c.lengths = short_lengths; }), out); },
                         "lengths has length 4 but rewards has length 6");
    require_error_naming([&] { group_normalize(with([&](auto& c) { c.lengths = negative_lengths; }), out); },
                         "lengths[2] is negative");
    group_normalize_options baseline_center;
    baseline_center.center = center_mode::baseline;
    require_error_naming([&] { group_normalize(inputs, out, baseline_center); }, "baseline has length 0");
    group_normalize_options token_whitening;
    token_whitening.whiten.mode = whiten_mode::token_weighted;
    require_error_naming([&] { group_normalize(inputs, out, token_whitening); }, "token");
    // null data
    require_error_naming(
        [&] { group_normalize(with([&](auto& c) { c.rewards = vector_view<const double>(nullptr, 6); }), out); },
        "rewards is null");
    // options
    for (double eps : {0.0, -1e-6, nan_value, infinity}) {
        INFO("eps " << eps);
        require_error_naming([&] { group_normalize(rewards, contiguous_groups(2), out, eps_of(eps)); },
                             "eps must be positive and finite");
    }
    group_normalize_options options;
    options.ddof = 2;
    require_error_naming([&] { group_normalize(rewards, contiguous_groups(2), out, options); }, "ddof must be 0 or 1");
    options = {};
    options.window_fraction = 0;
    require_error_naming([&] { group_normalize(rewards, contiguous_groups(2), out, options); }, "window_fraction");
    options = {};
    options.clip_min = 1;
    options.clip_max = -1;
    require_error_naming([&] { group_normalize(rewards, contiguous_groups(2), out, options); }, "clip range [1, -1]");
    // rewards: +-inf always, NaN under nan_policy::error; a group of one under singleton_policy::error
    for (double bad : {infinity, -infinity}) {
        auto poisoned = rewards;
        poisoned[3] = bad;
        require_error_naming([&] { group_normalize(poisoned, contiguous_groups(2), out); }, "rewards[3] is");
    }
    auto with_nan = rewards;
    with_nan[4] = nan_value;
    options = {};
    options.nan = nan_policy::error;
    require_error_naming([&] { group_normalize(with_nan, contiguous_groups(2), out, options); },
                         "rewards[4] is nan (NaN under nan_policy::error)");
    options = {};
    options.singleton = singleton_policy::error;
    require_error_naming([&] { group_normalize(with_nan, contiguous_groups(2), out, options); },
                         "has one valid sample, and singleton_policy::error forbids groups of one");
}

TEST_CASE("errors: group_normalize's documented values: NaN excluded, empty batch, eps = 0 under std_floor_skip",
          "[advantage][errors]") {
    std::vector<double> rewards = {1, 2, nan_value, 4, 3, 3}, out(6, -99.0);
    group_normalize(rewards, contiguous_groups(2), out);
    CHECK(out[2] == 0.0);                 // a NaN reward (nan_policy::exclude) gets 0
    CHECK(out[3] == 4.0 / (1.0 + 1e-6));  // its group of one keeps the raw value (keep_raw, verl)
    CHECK(out[4] == 0.0);
    CHECK(out[5] == 0.0);  // a zero-variance group gives 0
    std::vector<double> none, no_out;
    group_normalize(none, contiguous_groups(2), no_out);  // an empty batch does nothing
    // eps = 0 is accepted where it means "no floor".
    const std::vector<double> spread = {1, 3, 2, 6};
    std::vector<double> skipped(4);
    group_normalize(spread, contiguous_groups(2), skipped, eps_of(0.0, eps_mode::std_floor_skip));
    CHECK(skipped[0] == Approx(-1.0 / std::sqrt(2.0)));
}

// Finding 2 of issue 19: σ = 0 passed the floor σ ≥ ε = 0, and the group divided 0 by 0. A
// zero-variance group is now left unscaled (r − c = 0) on every path: two-pass double, the blocked
// float path (≥ 16 contiguous groups), ragged ids, window statistics, and whitening.
TEST_CASE("errors: std_floor_skip with eps = 0 leaves a zero-variance group unscaled, on every path",
          "[advantage][errors]") {
    const index_type groups = 20, size = 4;
    std::vector<double> rewards;
    std::vector<std::int64_t> ids;
    for (index_type g = 0; g < groups; ++g)
        for (index_type k = 0; k < size; ++k) {
            rewards.push_back(g % 2 ? 3.0 : static_cast<double>(k));  // odd groups constant
            ids.push_back((g * 7) % groups);
        }
    const std::vector<float> float_rewards(rewards.begin(), rewards.end());
    const auto check = [&](const auto& out, const char* path) {
        INFO(path);
        for (index_type g = 0; g < groups; ++g)
            for (index_type k = 0; k < size; ++k) {
                const double value = static_cast<double>(out[static_cast<std::size_t>(g * size + k)]);
                CHECK(std::isfinite(value));
                if (g % 2) CHECK(value == 0.0);
            }
    };
    group_normalize_options options = eps_of(0.0, eps_mode::std_floor_skip);
    std::vector<double> out(rewards.size());
    std::vector<float> float_out(rewards.size());
    group_normalize(rewards, contiguous_groups(size), out, options);
    check(out, "double, contiguous");
    CHECK(out[0] == Approx(-1.5 / std::sqrt(5.0 / 3.0)));  // a spread group is still divided by σ
    group_normalize(float_rewards, contiguous_groups(size), float_out, options);
    check(float_out, "float, contiguous (blocked)");
    group_normalize(rewards, group_ids(ids), out, options);
    check(out, "double, ragged ids");
    group_normalize(float_rewards, group_ids(ids), float_out, options);
    check(float_out, "float, ragged ids");
    options.center = center_mode::window_mean;
    options.scale = scale_mode::window_spread;
    options.window_fraction = 0.5;
    group_normalize(rewards, contiguous_groups(size), out, options);
    check(out, "window_mean / window_spread");
    // Whitening over an all-constant batch: its variance is 0 and it, too, is skipped.
    const std::vector<double> constant(rewards.size(), 2.0);
    group_normalize_options whitened = eps_of(1e-6);
    whitened.center = center_mode::none;
    whitened.scale = scale_mode::none;
    whitened.whiten = {whiten_mode::sample_weighted, 1, 0.0, eps_mode::std_floor_skip};
    group_normalize(constant, contiguous_groups(size), out, whitened);
    for (double value : out) CHECK(value == 0.0);
}

TEST_CASE("errors: the estimators name their arguments", "[advantage][errors]") {
    const std::vector<double> rewards = {1, 2, 3, 4, 5, 6};
    std::vector<double> out(6), short_out(4);
    std::vector<std::uint8_t> keep(6), short_keep(3);
    require_error_naming([&] { grpo(rewards, contiguous_groups(2), short_out); }, "output has length 4");
    require_error_naming([&] { pass_at_k(rewards, contiguous_groups(1), out); }, "pass_at_k: group 0 has 1");
    auto infinite = rewards;
    infinite[1] = infinity;
    require_error_naming([&] { pass_at_k(infinite, contiguous_groups(2), out); }, "pass_at_k needs finite rewards");
    require_error_naming([&] { dapo_filter(rewards, contiguous_groups(2), short_keep); }, "keep has length 3");
    auto with_nan = rewards;
    with_nan[0] = nan_value;
    require_error_naming([&] { dapo_filter(with_nan, contiguous_groups(2), keep); }, "dapo_filter needs every reward");
    require_error_naming([&] { w_reinforce(rewards, out, {{}, -1.0}); }, "positive_weight");
    require_error_naming([&] { dna_train(rewards, out, {{}, 4}); }, "advantages has 6");
    require_error_naming([&] { dna_train(rewards, out, {{}, 0}); }, "group_size must be positive");
    const std::vector<double> table = {1, 0, 2, 1, 0, 1, 1, 1};  // 4 × 2
    const auto columns = view(table.data(), 4, 2);
    std::vector<double> four(4);
    gdpo_options three_weights;
    three_weights.weights = {1, 1, 1};
    require_error_naming([&] { gdpo(columns, contiguous_groups(2), four, three_weights); }, "weights has length 3");
    gdpo_options verl;
    verl.flavour = gdpo_flavour::verl;
    require_error_naming([&] { gdpo(columns, contiguous_groups(2), four, verl); }, "give lengths or a token_mask");
    require_error_naming([&] { gdpo(columns, contiguous_groups(2), out); },
                         "output has length 6 but reward_columns has 4 rows");
    sa_mrpo_options saturation;
    saturation.lower = {0, 0};
    saturation.upper = {1, 0};
    require_error_naming([&] { sa_mrpo(columns, contiguous_groups(2), four, {}, saturation); },
                         "upper[1] = 0 must exceed");
    saturation.upper = {1};
    require_error_naming([&] { sa_mrpo(columns, contiguous_groups(2), four, {}, saturation); }, "lower");
    // REINFORCE++ and ReMax: token matrices of one shape, gamma in [0, 1]
    const std::vector<double> token_rewards(8, 1.0), mask(8, 1.0), short_mask(6, 1.0);
    std::vector<double> advantages(8), baselines(2);
    reinforce_pp_options far;
    far.gamma = 1.5;
    require_error_naming(
        [&] {
            reinforce_pp(view(token_rewards.data(), 2, 4), view(mask.data(), 2, 4), view(advantages.data(), 2, 4), {},
                         far);
        },
        "gamma");
    require_error_naming(
        [&] {
            reinforce_pp(view(token_rewards.data(), 2, 4), view(short_mask.data(), 2, 3),
                         view(advantages.data(), 2, 4));
        },
        "mask has shape 2x3");
    require_error_naming(
        [&] {
            remax(view(token_rewards.data(), 2, 4), view(mask.data(), 2, 4), std::vector<double>(3),
                  view(advantages.data(), 2, 4));
        },
        "baselines");
}

// Finding 3 of issue 19: whitening read float intermediates (a tiny eps divides a flat group by
// √eps ≈ 1e-150, which overflows float), and in double its Σ(A − μ)² overflowed beyond 1e154.
TEST_CASE("errors: whitening values a tiny eps made huge stays finite, float output as double", "[advantage][errors]") {
    const std::vector<double> rewards = {0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3};
    group_normalize_options options;
    options.center = center_mode::none;
    options.placement = eps_mode::clamp_variance;
    options.eps = 1e-300;
    options.singleton = singleton_policy::zero;
    options.whiten = {whiten_mode::sample_weighted, 1, 1e-8, eps_mode::inside_sqrt};
    std::vector<double> wide(12);
    std::vector<float> narrow(12);
    group_normalize(rewards, contiguous_groups(3), wide, options);
    group_normalize(std::vector<float>(rewards.begin(), rewards.end()), contiguous_groups(3), narrow, options);
    // A = r·1e150, whitened: (r − 1.5)/σ(r) with σ(0 0 0 1 1 1 …) = √(15/11).
    for (std::size_t i = 0; i < rewards.size(); ++i) {
        const double expected = (rewards[i] - 1.5) / std::sqrt(15.0 / 11.0);
        CHECK(wide[i] == Approx(expected).epsilon(1e-12));
        CHECK(narrow[i] == static_cast<float>(wide[i]));
    }
    CHECK(wide[0] == Approx(-1.2845).epsilon(1e-4));

    // The fuzzer's double case (FINDINGS.md F3): a batch center and a zero window spread make one group
    // (r − μ_B)/1e-300 ≈ 1e300; the whitened batch still has mean 0 and (ddof 1) variance 1.
    std::vector<double> spread(80);
    for (std::size_t i = 0; i < spread.size(); ++i) spread[i] = i < 8 ? 5.0 : static_cast<double>(i % 7);
    group_normalize_options window;
    window.center = center_mode::batch_mean;
    window.scale = scale_mode::window_spread;
    window.eps = 1e-300;
    window.whiten = {whiten_mode::sample_weighted, 1, 0.01, eps_mode::inside_sqrt};
    std::vector<double> out(80);
    group_normalize(spread, contiguous_groups(8), out, window);
    double sum = 0, squares = 0;
    for (double value : out) {
        CHECK(std::isfinite(value));
        sum += value;
    }
    for (double value : out) squares += (value - sum / 80) * (value - sum / 80);
    CHECK(std::fabs(sum / 80) < 1e-12);
    CHECK(squares / 79 == Approx(1.0).epsilon(1e-12));

    // masked_whiten over values near the top of double: finite, and equal to whitening the values / 2^960
    // (about 1e11, where eps = 1e-8 is as negligible as beside 1e300).
    const std::vector<double> huge = {1e300, -1e300, 3e299, 0.0}, mask(4, 1.0);
    std::vector<double> whitened(4), reference_values(4), small(4);
    for (std::size_t i = 0; i < 4; ++i) small[i] = std::ldexp(huge[i], -960);
    const moments stats = masked_whiten(view(huge.data(), 1, 4), view(mask.data(), 1, 4), view(whitened.data(), 1, 4));
    masked_whiten(view(small.data(), 1, 4), view(mask.data(), 1, 4), view(reference_values.data(), 1, 4));
    for (std::size_t i = 0; i < 4; ++i) CHECK(whitened[i] == Approx(reference_values[i]).epsilon(1e-14));
    CHECK(stats.mean == Approx(0.825e299 / 1.1).epsilon(1e-14));
    CHECK(std::isinf(stats.m2));  // M2 of x itself is beyond double; it is returned as +inf, not NaN
}

// REINFORCE++ whitens its returns from double: float returns near 1000 with a spread of 0.01 would
// otherwise lose |G|/σ·2^-24 ≈ 6e-3 of each whitened value.
TEST_CASE("errors: reinforce_pp whitens float returns from their double values", "[advantage][errors]") {
    const index_type rows = 4, cols = 8;
    std::vector<float> rewards(rows * cols, 0.0f), mask(rows * cols, 1.0f), advantages(rows * cols);
    std::vector<double> wide_rewards(rows * cols, 0.0), wide_mask(rows * cols, 1.0), expected(rows * cols);
    for (index_type i = 0; i < rows; ++i) {
        // The returns before the last token are 1000 + 0.0123·(i + 1) (γ = 1), which float rounds.
        rewards[i * cols + cols - 1] = 1000.0f;
        rewards[i * cols + cols - 2] = 0.0123f * static_cast<float>(i + 1);
        for (index_type t = cols - 2; t < cols; ++t)
            wide_rewards[i * cols + t] = static_cast<double>(rewards[i * cols + t]);
    }
    reinforce_pp(view(rewards.data(), rows, cols), view(mask.data(), rows, cols), view(advantages.data(), rows, cols));
    reinforce_pp(view(wide_rewards.data(), rows, cols), view(wide_mask.data(), rows, cols),
                 view(expected.data(), rows, cols));
    for (std::size_t k = 0; k < advantages.size(); ++k)
        CHECK(advantages[k] == static_cast<float>(expected[k]));  // one rounding, at the end
}

// Finding 4 of issue 19: the first thread to fail named its own group ("group 0" at 1 thread, "group 7"
// at 5); the lowest failing index is reported now, at any thread count.
TEST_CASE("errors: group_normalize names the lowest bad sample and group at every thread count",
          "[advantage][errors][threads]") {
    std::vector<double> singles(11, 1.0), rewards(64, 1.0), out(64);
    std::vector<double> single_out(11);
    for (std::size_t i = 13; i < rewards.size(); i += 9) rewards[i] = nan_value;
    for (int threads : {1, 2, 3, 4, 5, 7}) {
        INFO("threads " << threads);
        group_normalize_options lonely;
        lonely.singleton = singleton_policy::error;
        lonely.threads = threads;
        require_error_naming([&] { group_normalize(singles, contiguous_groups(1), single_out, lonely); },
                             "groups: group 0 has one valid sample");
        group_normalize_options strict;
        strict.nan = nan_policy::error;
        strict.threads = threads;
        require_error_naming([&] { group_normalize(rewards, contiguous_groups(4), out, strict); },
                             "rewards[13] is nan");
        std::vector<std::int64_t> ids(64);
        for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>((i * 5) % 16);
        require_error_naming([&] { group_normalize(rewards, group_ids(ids), out, strict); }, "rewards[13] is nan");
    }
}

TEST_CASE("errors: aliasing: an advantage output overlaps no input, but where it may be its own input",
          "[advantage][errors][aliasing]") {
    // One buffer of 7 for the rewards and the outputs placed over them: at(0) is the rewards
    // themselves, at(1) a partial overlap by one element.
    std::vector<double> buffer = {1, 2, 3, 4, 5, 6, 0}, out(6);
    const auto at = [&](index_type offset) { return vector_view<double>(buffer.data() + offset, 6); };
    const vector_view<const double> rewards(buffer.data(), 6);
    const auto groups = contiguous_groups(3);
    SECTION("group_normalize and the estimators built on it: disjoint from every input") {
        require_error_naming([&] { group_normalize(rewards, groups, at(0)); },
                             "output (6) overlaps rewards (6); output must be disjoint from rewards");
        require_error_naming([&] { group_normalize(rewards, groups, at(1)); }, "output (6) overlaps rewards (6)");
        std::vector<float> narrow = {1, 2, 3, 4, 5, 6};
        group_normalize_options whitened;
        whitened.whiten.mode = whiten_mode::sample_weighted;
        require_error_naming([&] { group_normalize(narrow, groups, narrow, whitened); }, "output (6) overlaps rewards");
        std::vector<std::int64_t> ids = {0, 0, 1, 1, 2, 2}, lengths = {1, 2, 3, 4, 5, 6};
        const vector_view<double> over_ids(reinterpret_cast<double*>(ids.data()), 6);
        require_error_naming([&] { group_normalize(rewards, group_ids(ids), over_ids); },
                             "output (6) overlaps group ids (6)");
        reward_inputs<double> inputs;
        inputs.rewards = vector_view<const double>(out.data(), 6);
        inputs.grouping = groups;
        inputs.lengths = lengths;
        require_error_naming(
            [&] { group_normalize(inputs, vector_view<double>(reinterpret_cast<double*>(lengths.data()), 6)); },
            "output (6) overlaps lengths (6)");
        require_error_naming([&] { grpo(rewards, groups, at(0)); }, "output (6) overlaps rewards");
        require_error_naming([&] { dr_grpo(rewards, groups, at(1)); }, "output (6) overlaps rewards");
        require_error_naming([&] { rloo(rewards, groups, at(0)); }, "output (6) overlaps rewards");
        require_error_naming([&] { gpg(rewards, groups, at(0)); }, "output (6) overlaps rewards");
        require_error_naming([&] { gapo(rewards, groups, at(1)); }, "output (6) overlaps rewards");
        require_error_naming([&] { opo(rewards, groups, lengths, at(0)); }, "output (6) overlaps rewards");
        require_error_naming([&] { pass_at_k(rewards, groups, at(0)); }, "output (6) overlaps rewards");
        require_error_naming([&] { pass_at_k(rewards, groups, at(1)); }, "output (6) overlaps rewards");
        const vector_view<std::uint8_t> keep(reinterpret_cast<std::uint8_t*>(buffer.data()), 6);
        require_error_naming([&] { dapo_filter(rewards, groups, keep); }, "keep (6) overlaps rewards (6)");
        std::vector<double> binary = {0, 1, 1, 0, 0, 1, 0};
        require_error_naming(
            [&] {
                bnpo(vector_view<const double>(binary.data(), 6), groups, vector_view<double>(binary.data() + 1, 6));
            },
            "output (6) overlaps rewards (6)");
        spo_tracker tracker;
        require_error_naming(
            [&] {
                tracker.advantages(ids, vector_view<const double>(binary.data(), 6),
                                   vector_view<double>(binary.data() + 1, 6));
            },
            "output (6) overlaps rewards (6)");
    }
    SECTION("w_reinforce and dna_train may write over their input: the same bits") {
        std::vector<double> signed_rewards = {1, -2, 3, -4, 0.5, -0.25}, in_place = signed_rewards;
        w_reinforce(signed_rewards, out);
        w_reinforce(in_place, in_place);
        CHECK(in_place == out);
        in_place = signed_rewards;
        dna_train(signed_rewards, out, {{}, 3});
        dna_train(in_place, in_place, {{}, 3});
        CHECK(in_place == out);
        require_error_naming([&] { w_reinforce(rewards, at(1)); },
                             "output (6) overlaps rewards (6); output may be rewards itself or disjoint from it");
        require_error_naming(
            [&] {
                dna_train(rewards, at(1), {{}, 3});
            },
            "output (6) overlaps advantages (6); output may be advantages itself");
    }
    SECTION("gepo may write over its advantages, over nothing else") {
        std::vector<double> advantages = {1, -2, 3, -4, 0.5, -0.25}, log_probs(12), mask(12, 1.0), shaped(6);
        for (std::size_t k = 0; k < log_probs.size(); ++k) log_probs[k] = -0.1 * static_cast<double>(k + 1);
        const auto L = view(log_probs.data(), 6, 2), M = view(mask.data(), 6, 2);
        gepo_state state, state_in_place;
        gepo(advantages, groups, L, M, state, shaped);
        std::vector<double> in_place = advantages;
        gepo(in_place, groups, L, M, state_in_place, in_place);
        CHECK(in_place == shaped);
        std::vector<double> wide = advantages;
        wide.push_back(0);
        require_error_naming(
            [&] {
                gepo(vector_view<const double>(wide.data(), 6), groups, L, M, state,
                     vector_view<double>(wide.data() + 1, 6));
            },
            "output (6) overlaps advantages (6)");
        require_error_naming(
            [&] { gepo(advantages, groups, L, M, state, vector_view<double>(log_probs.data() + 3, 6)); },
            "output (6) overlaps log_probs (6x2)");
    }
    SECTION("the matrix estimators: outputs disjoint from every input and each other") {
        std::vector<double> columns = {1, 0, 0, 1, 1, 1, 0, 0, 1, 0, 0, 1}, two(6);
        const auto C = view(columns.data(), 6, 2);
        require_error_naming([&] { gdpo(C, groups, vector_view<double>(columns.data() + 6, 6)); },
                             "output (6) overlaps reward_columns (6x2)");
        sa_mrpo_options saturation;
        saturation.lower = {0, 0};
        saturation.upper = {1, 1};
        require_error_naming([&] { sa_mrpo(C, groups, two, vector_view<double>(columns.data(), 2), saturation); },
                             "effective_weights (2) overlaps reward_columns (6x2)");
        require_error_naming([&] { bnpo_decomposed(C, groups, vector_view<double>(columns.data() + 1, 6)); },
                             "output (6) overlaps reward_columns (6x2)");
        require_error_naming([&] { scrl(C, groups, C); }, "output (6x2) overlaps subproblem_rewards (6x2)");
        std::vector<double> token_rewards(8, 0.5), token_mask(8, 1.0), advantages(8), returns(9);
        const auto R = view(token_rewards.data(), 2, 4), TM = view(token_mask.data(), 2, 4);
        std::vector<double> values = {1, 2, -3, 4, 0.5, 6, 7, -8}, whitened(8), in_place = values;
        masked_whiten(view(values.data(), 2, 4), TM, view(whitened.data(), 2, 4));
        masked_whiten(view(in_place.data(), 2, 4), TM, view(in_place.data(), 2, 4));
        CHECK(in_place == whitened);
        values.push_back(0);
        require_error_naming([&] { masked_whiten(view(values.data(), 2, 4), TM, view(values.data() + 1, 2, 4)); },
                             "output (2x4) overlaps values (2x4); output may be values itself");
        require_error_naming([&] { masked_whiten(R, TM, TM); }, "output (2x4) overlaps mask (2x4)");
        require_error_naming([&] { reinforce_pp(R, TM, R); }, "output (2x4) overlaps token_rewards (2x4)");
        require_error_naming([&] { reinforce_pp(R, TM, view(returns.data(), 2, 4), view(returns.data() + 1, 2, 4)); },
                             "returns (2x4) overlaps advantages (2x4)");
        require_error_naming([&] { remax(R, TM, std::vector<double>(2), view(token_mask.data(), 2, 4)); },
                             "output (2x4) overlaps token_mask (2x4)");
        require_error_naming(
            [&] {
                remax(R, TM, std::vector<double>(2), view(advantages.data(), 2, 4), view(token_rewards.data(), 2, 4));
            },
            "returns (2x4) overlaps token_rewards (2x4)");
    }
}
