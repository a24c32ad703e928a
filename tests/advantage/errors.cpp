// The bad-input matrix of the advantage module (docs/errors.md): for each
// public function and each kind of bad input, the normkit::error and the words
// of its message, or the documented value. Double rewards only.
#include "support.hpp"

#include <normkit/advantage/estimators.hpp>
#include <normkit/advantage/group_normalize.hpp>
#include <normkit/advantage/multi_reward.hpp>
#include <normkit/advantage/returns.hpp>

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
    require_error_naming([&] { w_reinforce(rewards, out, {-1.0}); }, "positive_weight");
    require_error_naming([&] { dna_train(rewards, out, {4}); }, "advantages has 6");
    require_error_naming([&] { dna_train(rewards, out, {0}); }, "group_size must be positive");
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
