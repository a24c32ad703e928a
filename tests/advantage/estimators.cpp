// The named estimators and the framework presets against the frameworks'
// arithmetic in tests/reference/advantage.hpp.
#include "reference/advantage.hpp"
#include "support.hpp"

#include <normkit/advantage/estimators.hpp>
#include <normkit/advantage/presets.hpp>
#include <normkit/advantage/returns.hpp>
#include <normkit/credit/broadcast.hpp>

#include <random>

using namespace normkit;
using namespace normkit::advantage;
using namespace normkit::testing;

namespace {

std::vector<double> binary_values(std::size_t n, std::uint32_t seed) {
    std::mt19937 generator(seed);
    std::vector<double> values(n);
    for (auto& value : values) value = static_cast<double>(generator() % 2);
    return values;
}

// Ragged ids, shuffled, with one singleton group.
std::vector<std::int64_t> ragged_ids(std::uint32_t seed, std::size_t* count = nullptr) {
    std::mt19937 generator(seed);
    std::vector<std::int64_t> ids;
    for (std::int64_t g = 0; g < 12; ++g) {
        const std::size_t size = g == 3 ? 1 : 2 + generator() % 17;
        for (std::size_t j = 0; j < size; ++j) ids.push_back(1000 + 3 * g);
    }
    std::shuffle(ids.begin(), ids.end(), generator);
    if (count) *count = ids.size();
    return ids;
}

template <class T>
double tolerance_for() {
    return std::is_same_v<T, double> ? 1e-10 : 2e-5;
}

template <class T, class Call>
std::vector<double> compute(const std::vector<double>& rewards, Call&& call) {
    const auto stored_rewards = to_storage<T>(rewards);
    std::vector<T> out(rewards.size(), T(-99));
    call(stored_rewards, out);
    return to_double(out);
}

}  // namespace

TEMPLATE_TEST_CASE("grpo, dr_grpo, rloo, opo, gpg, gapo match verl's code, contiguous and ragged",
                   "[advantage][estimators]", float, double) {
    using T = TestType;
    std::uint32_t seed = 1;
    for (index_type size : {1, 2, 3, 15, 16, 17, 33}) {
        for (bool binary : {false, true}) {
            const std::size_t n = static_cast<std::size_t>(size * 5);
            const auto values = stored<T>(binary ? binary_values(n, seed) : random_values(n, seed, 0.3, 1.5));
            ++seed;
            const auto ids = reference::contiguous_ids(n, static_cast<std::size_t>(size));
            const auto groups = contiguous_groups(size);
            INFO(type_name<T>() << " G " << size << " binary " << binary);
            const double tolerance = tolerance_for<T>();
            CHECK(relative_error(compute<T>(values, [&](auto& r, auto& o) { grpo(r, groups, o); }),
                                 reference::verl_grpo(values, ids), 1.0) < tolerance);
            CHECK(relative_error(compute<T>(values, [&](auto& r, auto& o) { dr_grpo(r, groups, o); }),
                                 reference::verl_grpo(values, ids, false), 1.0) < tolerance);
            CHECK(relative_error(compute<T>(values, [&](auto& r, auto& o) { rloo(r, groups, o); }),
                                 reference::verl_rloo(values, ids), 1.0) < tolerance);
            CHECK(relative_error(compute<T>(values,
                                            [&](auto& r, auto& o) {
                                                rloo(r, groups, o, {{}, singleton_policy::zero});
                                            }),
                                 reference::verl_rloo_vectorized(values, ids), 1.0) < tolerance);
            std::vector<std::int64_t> lengths(n);
            std::vector<double> length_values(n);
            for (std::size_t i = 0; i < n; ++i)
                length_values[i] = static_cast<double>(lengths[i] = 1 + static_cast<std::int64_t>((i * 7) % 23));
            CHECK(relative_error(compute<T>(values, [&](auto& r, auto& o) { opo(r, groups, lengths, o); }),
                                 reference::verl_opo(values, length_values, ids), 1.0) < tolerance);
            CHECK(relative_error(compute<T>(values, [&](auto& r, auto& o) { gpg(r, groups, o); }),
                                 reference::verl_gpg(values, ids), 1.0) < tolerance);
            CHECK(relative_error(compute<T>(values, [&](auto& r, auto& o) { gapo(r, groups, o); }),
                                 reference::gapo(values, ids), 1.0) < tolerance);
            CHECK(relative_error(compute<T>(values,
                                            [&](auto& r, auto& o) {
                                                gapo(r, groups, o, {{}, 0.3, false});
                                            }),
                                 reference::gapo(values, ids, 0.3, false), 1.0) < tolerance);
        }
    }
    std::size_t n = 0;
    const auto ids = ragged_ids(7, &n);
    const auto values = stored<T>(random_values(n, 8));
    const auto groups = group_ids(ids);
    CHECK(relative_error(compute<T>(values, [&](auto& r, auto& o) { grpo(r, groups, o); }),
                         reference::verl_grpo(values, ids), 1.0) < tolerance_for<T>());
    CHECK(relative_error(compute<T>(values, [&](auto& r, auto& o) { rloo(r, groups, o); }),
                         reference::verl_rloo(values, ids), 1.0) < tolerance_for<T>());
    CHECK(relative_error(compute<T>(values, [&](auto& r, auto& o) { gapo(r, groups, o); }),
                         reference::gapo(values, ids), 1.0) < tolerance_for<T>());
    CHECK(relative_error(compute<T>(values, [&](auto& r, auto& o) { gpg(r, groups, o); }),
                         reference::verl_gpg(values, ids), 1.0) < tolerance_for<T>());
}

// Batches of at least 16 contiguous float groups take the 16-groups-at-a-time path on AVX-512 (tiles of
// 16 columns transposed in registers, the scales of 16 groups per instruction); every other batch and
// instruction set the per-group one. Both must give the reference, including a constant group (exactly
// 0), rewards offset by 10⁶, a group holding NaN (sent back to the general path), every eps placement.
TEST_CASE("grpo over many contiguous float groups: the 16-group blocks agree with the reference and the per-group path",
          "[advantage][estimators]") {
    for (index_type size : {2, 3, 8, 15, 16, 17, 33, 40}) {
        const index_type groups_count = 37;  // two full blocks of 16 and a partial one
        const std::size_t n = static_cast<std::size_t>(size * groups_count);
        auto values = stored<float>(random_values(n, 500 + static_cast<std::uint32_t>(size), 0.5, 0.3));
        for (index_type j = 0; j < size; ++j) {
            values[static_cast<std::size_t>(5 * size + j)] = static_cast<double>(0.95f);
            values[static_cast<std::size_t>(20 * size + j)] =
                static_cast<double>(1e6f + static_cast<float>(j % 4) * 0.25f);
        }
        const auto ids = reference::contiguous_ids(n, static_cast<std::size_t>(size));
        INFO("G " << size);
        const auto batched = compute<float>(values, [&](auto& r, auto& o) { grpo(r, contiguous_groups(size), o); });
        const auto expected = reference::verl_grpo(values, ids);
        CHECK(relative_error(batched, expected, 1.0) < tolerance_for<float>());
        // The float write path's stated bound: a few float roundings of the exact quotient.
        int beyond_bound = 0;
        for (std::size_t i = 0; i < n; ++i)
            beyond_bound += std::fabs(batched[i] - expected[i]) > 4 * 0x1p-24 * std::fabs(expected[i]) + 1e-12;
        CHECK(beyond_bound == 0);
        for (index_type j = 0; j < size; ++j) CHECK(batched[static_cast<std::size_t>(5 * size + j)] == 0.0);

        for (eps_mode placement :
             {eps_mode::add_to_std, eps_mode::inside_sqrt, eps_mode::clamp_variance, eps_mode::std_floor_skip}) {
            for (int ddof : {0, 1}) {
                group_normalize_options options;
                options.placement = placement;
                options.ddof = ddof;
                options.eps =
                    placement == eps_mode::std_floor_skip ? 0.25 : 1e-3;  // large enough to matter in some groups
                const auto whole = compute<float>(
                    values, [&](auto& r, auto& o) { group_normalize(r, contiguous_groups(size), o, options); });
                std::vector<double> one_by_one;
                for (index_type g = 0; g < groups_count; ++g) {
                    const std::vector<double> part(values.begin() + g * size, values.begin() + (g + 1) * size);
                    const auto single = compute<float>(
                        part, [&](auto& r, auto& o) { group_normalize(r, contiguous_groups(size), o, options); });
                    one_by_one.insert(one_by_one.end(), single.begin(), single.end());
                }
                INFO("eps placement " << static_cast<int>(placement) << " ddof " << ddof);
                CHECK(relative_error(whole, one_by_one, 1.0) < 1e-6);
            }
        }

        auto with_nan = values;
        with_nan[static_cast<std::size_t>(18 * size + 1)] = std::nan("");
        const auto masked = compute<float>(with_nan, [&](auto& r, auto& o) { grpo(r, contiguous_groups(size), o); });
        const std::vector<double> nan_group(with_nan.begin() + 18 * size, with_nan.begin() + 19 * size);
        const auto alone = compute<float>(nan_group, [&](auto& r, auto& o) { grpo(r, contiguous_groups(size), o); });
        for (index_type j = 0; j < size; ++j)
            CHECK(masked[static_cast<std::size_t>(18 * size + j)] == alone[static_cast<std::size_t>(j)]);
        CHECK(masked[static_cast<std::size_t>(18 * size + 1)] == 0.0);
        for (std::size_t i = 0; i < n; ++i)
            if (i / static_cast<std::size_t>(size) != 18) CHECK(masked[i] == batched[i]);
    }
}

TEST_CASE("pass_at_k: the arg-max gets r_max − r_2nd over σ + ε, ties give 0, a group of one is an error",
          "[advantage][estimators]") {
    for (index_type size : {2, 3, 16, 17}) {
        const std::size_t n = static_cast<std::size_t>(size * 6);
        const auto values = random_values(n, 30 + static_cast<std::uint32_t>(size));
        const auto ids = reference::contiguous_ids(n, static_cast<std::size_t>(size));
        std::vector<double> out(n);
        pass_at_k(values, contiguous_groups(size), out);
        CHECK(relative_error(out, reference::verl_passk(values, ids)) < 1e-12);
        pass_at_k(values, contiguous_groups(size), out, {{}, false});
        CHECK(relative_error(out, reference::verl_passk(values, ids, false)) < 1e-12);
    }
    const std::vector<double> tied = {1, 1, 0, 0, 0.5, 1, 0.2, 0.1};
    std::vector<double> out(8);
    pass_at_k(tied, contiguous_groups(4), out);
    for (int i = 0; i < 4; ++i) CHECK(out[i] == 0.0);
    CHECK(out[5] > 0);
    CHECK(out[4] == 0.0);
    std::size_t n = 0;
    const auto ids = ragged_ids(3, &n);
    const auto values = random_values(n, 4);
    std::vector<double> ragged_out(n);
    require_error_naming([&] { pass_at_k(values, group_ids(ids), ragged_out); }, "needs at least 2");
}

TEST_CASE("dapo_filter keeps exactly the groups with min < mean < max", "[advantage][estimators]") {
    const std::vector<double> rewards = {1, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0.5, 0.5, 0.5, 0.7};
    std::vector<std::uint8_t> keep(16, 9);
    CHECK(dapo_filter(rewards, contiguous_groups(4), keep) == 2);
    const std::vector<std::uint8_t> expected = {0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1};
    CHECK(keep == expected);
    const std::vector<std::int32_t> ids = {4, 4, 9};
    const std::vector<double> three = {0, 1, 1};
    std::vector<std::uint8_t> small(3);
    CHECK(dapo_filter(three, group_ids(ids), vector_view<std::uint8_t>(small)) == 1);
    CHECK(small == std::vector<std::uint8_t>{1, 1, 0});  // a group of one has no spread
    require_error_naming([&] { dapo_filter(three, contiguous_groups(3), vector_view<std::uint8_t>(keep)); },
                         "keep has length 16");
}

TEST_CASE("w_reinforce scales positive rewards by λ; dna_train equalizes Σ|A| across a pair",
          "[advantage][estimators]") {
    const std::vector<double> rewards = {1, -1, 1, -1, 0};
    std::vector<double> out(5);
    w_reinforce(rewards, out);
    CHECK(out == std::vector<double>{0.1, -1, 0.1, -1, 0});
    w_reinforce(rewards, out, {{}, 1.0});  // λ = 1: plain REINFORCE
    CHECK(out == rewards);
    w_reinforce(rewards, out, {{}, 0.0});  // λ = 0: negative samples only
    CHECK(out == std::vector<double>{0, -1, 0, -1, 0});
    require_error_naming([&] { w_reinforce(rewards, out, {{}, -1.0}); }, "positive_weight");

    // Real group with Σ|A| = 4, counterfactual with 1: both rescaled to 2.5, signs kept.
    const std::vector<double> advantages = {1, -1, 1, -1, 0.5, -0.5, 0, 0, 0, 0, 0, 0};
    std::vector<double> balanced(12);
    dna_train(vector_view<const double>(advantages.data(), 8), vector_view<double>(balanced.data(), 8), {{}, 4});
    double real = 0, counterfactual = 0;
    for (int j = 0; j < 4; ++j) {
        real += std::abs(balanced[j]);
        counterfactual += std::abs(balanced[4 + j]);
        CHECK(balanced[j] * advantages[j] >= 0);
    }
    CHECK(real == Approx(2.5));
    CHECK(counterfactual == Approx(2.5));
    CHECK(balanced[0] == Approx(2.5 / 4));
    CHECK(balanced[4] == Approx(1.25));
    dna_train(vector_view<const double>(advantages.data() + 8, 4), vector_view<double>(balanced.data(), 4),
              {{}, 2});  // all zero: stays 0
    for (int j = 0; j < 4; ++j) CHECK(balanced[j] == 0.0);
    require_error_naming([&] { dna_train(advantages, balanced, {{}, 4}); }, "not a multiple of 2 × group_size = 8");
}

TEST_CASE("presets reproduce verl, TRL and OpenRLHF", "[advantage][presets]") {
    const double nan = reference::nan_value;
    for (std::size_t size : {2, 3, 8, 16}) {
        const std::size_t n = size * 7;
        auto rewards = random_values(n, 50 + static_cast<std::uint32_t>(size), 0.2, 1.0);
        const auto ids = reference::contiguous_ids(n, size);
        const auto groups = contiguous_groups(static_cast<index_type>(size));
        std::vector<double> out(n);
        INFO("G " << size);
        group_normalize(rewards, groups, out, presets::verl_grpo());
        CHECK(relative_error(out, reference::verl_grpo(rewards, ids)) < 1e-12);
        group_normalize(rewards, groups, out, presets::verl_grpo(false));
        CHECK(relative_error(out, reference::verl_grpo(rewards, ids, false)) < 1e-12);
        group_normalize(rewards, groups, out, presets::verl_grpo_vectorized());
        CHECK(relative_error(out, reference::verl_grpo(rewards, ids)) < 1e-12);
        group_normalize(rewards, groups, out, presets::verl_rloo());
        CHECK(relative_error(out, reference::verl_rloo(rewards, ids)) < 1e-12);
        group_normalize(rewards, groups, out, presets::verl_rloo_vectorized());
        CHECK(relative_error(out, reference::verl_rloo_vectorized(rewards, ids)) < 1e-12);
        std::vector<std::int64_t> lengths(n);
        std::vector<double> length_values(n);
        for (std::size_t i = 0; i < n; ++i)
            length_values[i] = static_cast<double>(lengths[i] = 1 + static_cast<std::int64_t>((i * 5) % 17));
        reward_inputs<double> inputs;
        inputs.rewards = rewards;
        inputs.grouping = groups;
        inputs.lengths = lengths;
        group_normalize(inputs, out, presets::verl_reinforce_pp_baseline());
        CHECK(relative_error(out, reference::verl_reinforce_pp_baseline(rewards, length_values, ids)) <
              1e-9);  // verl's +1e-8 on the count
        // OpenRLHF: big rewards make the ±10 clip bite.
        auto big = rewards;
        for (auto& value : big) value *= 30;
        for (auto [estimator, mode] :
             {std::pair{presets::openrlhf_estimator::group_norm, reference::openrlhf_mode::group_norm},
              std::pair{presets::openrlhf_estimator::dr_grpo, reference::openrlhf_mode::dr_grpo},
              std::pair{presets::openrlhf_estimator::rloo, reference::openrlhf_mode::rloo},
              std::pair{presets::openrlhf_estimator::reinforce_baseline,
                        reference::openrlhf_mode::reinforce_baseline}}) {
            reward_inputs<double> open;
            open.rewards = big;
            open.grouping = groups;
            open.lengths = lengths;
            group_normalize(open, out, presets::openrlhf(estimator));
            CHECK(relative_error(out, reference::openrlhf(big, size, mode, length_values)) < 1e-11);
        }
        // TRL with unscorable (NaN) rewards, including a group with one scorable sample and an all-NaN group.
        for (std::size_t i = 3; i < n; i += 5) rewards[i] = nan;
        for (std::size_t j = 1; j < size; ++j) rewards[j] = nan;
        for (std::size_t j = 0; j < size; ++j) rewards[size + j] = nan;
        for (auto [scale, mode] : {std::pair{presets::trl_scale_rewards::group, reference::trl_scale::group},
                                   std::pair{presets::trl_scale_rewards::batch, reference::trl_scale::batch},
                                   std::pair{presets::trl_scale_rewards::none, reference::trl_scale::none}}) {
            group_normalize(rewards, groups, out, presets::trl(scale));
            CHECK(relative_error(out, reference::trl_grpo(rewards, size, mode)) < 1e-12);
        }
        group_normalize(rewards, groups, out, presets::trl_async());
        CHECK(relative_error(out, reference::trl_async(rewards, size)) < 1e-12);
    }
    // OpenRLHF asserts n > 1.
    const std::vector<double> single = {1.0, 2.0};
    std::vector<double> out(2);
    require_error_naming([&] { group_normalize(single, contiguous_groups(1), out, presets::openrlhf()); },
                         "singleton_policy::error");
}

TEMPLATE_TEST_CASE("reinforce_pp (both mask rules), reinforce_pp_baseline and remax match verl", "[advantage][returns]",
                   float, double) {
    using T = TestType;
    const double tolerance = std::is_same_v<T, double> ? 1e-9 : 5e-5;
    for (index_type cols : {1, 3, 16, 17, 33}) {
        const index_type rows = 9;
        test_matrix<T> rewards(rows, cols, random_values(rows * cols, static_cast<std::uint32_t>(cols)), 3);
        std::vector<std::uint8_t> mask_storage(rows * (cols + 2), 7);
        matrix_view<std::uint8_t> mask{mask_storage.data(), rows, cols, cols + 2};
        std::vector<double> mask_values(rows * cols);
        std::mt19937 generator(static_cast<std::uint32_t>(cols));
        for (index_type i = 0; i < rows; ++i) {
            const index_type length = i == 0 ? 0 : 1 + static_cast<index_type>(generator() % cols);
            for (index_type t = 0; t < cols; ++t) {
                // A prefix of valid tokens with observation holes inside it.
                const bool inside = t < length && (t % 4 != 2 || t + 1 == length);
                mask(i, t) = inside ? 1 : 0;
                mask_values[i * cols + t] = inside ? 1.0 : 0.0;
            }
        }
        test_matrix<T> advantages(rows, cols, 2), returns(rows, cols, 1);
        test_matrix<T> token_mask(rows, cols, mask_values, 3);  // the mask of the token rewards has their storage type
        for (double gamma : {1.0, 0.9}) {
            for (auto rule : {return_mask_rule::carry, return_mask_rule::reset}) {
                INFO(type_name<T>() << " T " << cols << " gamma " << gamma << " rule " << int(rule));
                reinforce_pp_options settings;
                settings.gamma = gamma;
                settings.mask_rule = rule;
                reinforce_pp(rewards.view, token_mask.view, advantages.view, {}, settings);
                const auto expected = reference::verl_reinforce_pp(rewards.values(), mask_values, rows, cols, gamma,
                                                                   rule == return_mask_rule::carry);
                CHECK(relative_error(advantages.values(), expected, 1.0) < tolerance);
                CHECK(advantages.padding_untouched());
            }
        }
        std::vector<T> baselines = to_storage<T>(random_values(rows, 99));
        remax(rewards.view, token_mask.view, baselines, advantages.view, returns.view);
        CHECK(relative_error(advantages.values(),
                             reference::verl_remax(rewards.values(), mask_values, to_double(baselines), rows, cols),
                             1.0) < tolerance);
        const auto zero_baselines = std::vector<double>(rows, 0.0);
        CHECK(relative_error(returns.values(),
                             reference::verl_remax(rewards.values(), mask_values, zero_baselines, rows, cols),
                             1.0) < tolerance);
        // The group-baseline variant, per sample, broadcast to tokens.
        const auto scores = stored<T>(random_values(rows, 5 + static_cast<std::uint32_t>(cols)));
        const auto stored_scores = to_storage<T>(scores);
        std::vector<T> per_sample(rows);
        const std::vector<std::int64_t> ids = {0, 0, 0, 1, 1, 1, 2, 2, 3};
        reinforce_pp_baseline_options keep_empty;
        keep_empty.singleton = singleton_policy::keep_raw;
        keep_empty.whiten = {whiten_mode::token_weighted, 1, 1e-8, eps_mode::inside_sqrt};
        keep_empty.exclude_empty_responses = false;
        reinforce_pp_baseline(stored_scores, group_ids(ids), mask, per_sample, keep_empty);
        std::vector<double> lengths(rows, 0);
        for (index_type i = 0; i < rows; ++i)
            for (index_type t = 0; t < cols; ++t) lengths[i] += mask_values[i * cols + t];
        const auto expected = reference::verl_reinforce_pp_baseline(scores, lengths, ids);
        INFO("reinforce_pp_baseline T " << cols);
        if (std::count_if(lengths.begin(), lengths.end(), [](double l) { return l > 0; }) > 1 && cols > 1)
            CHECK(relative_error(to_double(per_sample), expected, 1.0) < tolerance);
        credit::broadcast_advantages(per_sample, mask, advantages.view);
        for (index_type i = 0; i < rows; ++i)
            for (index_type t = 0; t < cols; ++t)
                CHECK(static_cast<double>(advantages.view(i, t)) ==
                      (mask(i, t) ? static_cast<double>(per_sample[i]) : 0.0));
    }
}

TEST_CASE("token-level estimators: degenerate and bad input", "[advantage][returns]") {
    Eigen::Matrix<double, 2, 3, Eigen::RowMajor> rewards;
    rewards << 1, 2, 3, 4, 5, 6;
    Eigen::Matrix<double, 2, 3, Eigen::RowMajor> nothing = Eigen::Matrix<double, 2, 3, Eigen::RowMajor>::Zero();
    Eigen::Matrix<double, 2, 3, Eigen::RowMajor> advantages;
    reinforce_pp(rewards, nothing, advantages);
    CHECK(advantages.isZero(0));
    Eigen::Matrix<double, 2, 3, Eigen::RowMajor> one = nothing;
    one(1, 1) = 1;
    reinforce_pp(rewards, one, advantages);
    CHECK(advantages.isZero(0));  // one valid token whitens to 0
    Eigen::Matrix<double, 3, 3, Eigen::RowMajor> wrong;
    require_error_naming([&] { reinforce_pp(rewards, one, wrong); }, "output has shape 3x3");
    reinforce_pp_options far;
    far.gamma = 1.5;
    require_error_naming([&] { reinforce_pp(rewards, one, advantages, {}, far); }, "gamma");
    const std::vector<double> baselines = {1.0};
    require_error_naming([&] { remax(rewards, one, baselines, advantages); }, "baselines has length 1");
}

TEST_CASE("every estimator's options default to one thread and the documented settings", "[advantage][options]") {
    CHECK(rloo_options{}.threads == 1);
    CHECK(rloo_options{}.singleton == singleton_policy::keep_raw);
    CHECK(opo_options{}.threads == 1);
    CHECK(gpg_options{}.threads == 1);
    const gapo_options gapo_defaults;
    CHECK(gapo_defaults.threads == 1);
    CHECK(gapo_defaults.target_fraction == 0.5);
    CHECK(gapo_defaults.median);
    CHECK(gapo_defaults.eps == 1e-6);
    CHECK(pass_at_k_options{}.threads == 1);
    CHECK(pass_at_k_options{}.scale_by_std);
    CHECK(dapo_filter_options{}.threads == 1);
    CHECK(dapo_filter_options{}.rule == dapo_filter_rule::spread);
    CHECK(w_reinforce_options{}.threads == 1);
    CHECK(w_reinforce_options{}.positive_weight == 0.1);
    CHECK(dna_train_options{}.threads == 1);
    // dna_train's {} default leaves G unset, which is an error naming it.
    std::vector<double> values(4, 1.0), out(4);
    require_error_naming([&] { dna_train(values, out); }, "group_size must be positive");
}
