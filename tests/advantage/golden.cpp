// The advantage module against numbers from the frameworks' own functions (tests/advantage/golden_*.hpp
// and tests/credit/golden_openrlhf.hpp, written by scripts/golden/*.py; each table names its file,
// function and commit).
#include "../credit/golden_openrlhf.hpp"
#include "golden_trl.hpp"
#include "golden_verl.hpp"
#include "reference/advantage.hpp"
#include "support.hpp"

#include <normkit/advantage/all.hpp>

#include <Eigen/Core>

using namespace normkit;
using golden::as_matrix;
using golden::check_close;
using golden::golden_case;
using golden::matrix;

TEST_CASE("golden: TRL RLOOTrainer advantages (presets::trl_rloo)", "[advantage][golden]") {
    const auto& cases = golden::trl::rloo();
    REQUIRE(cases.size() >= 5);
    for (const auto& c : cases) {
        INFO(c.name);
        // TRL's reward: nansum over the reward functions, NaN when every function returned None.
        const auto functions = static_cast<std::size_t>(c.scalar("functions"));
        const auto& per_function = c["rewards_per_func"];
        std::vector<double> rewards(per_function.size() / functions);
        for (std::size_t i = 0; i < rewards.size(); ++i) {
            double sum = 0;
            bool scored = false;
            for (std::size_t k = 0; k < functions; ++k)
                if (!std::isnan(per_function[i * functions + k])) {
                    sum += per_function[i * functions + k];
                    scored = true;
                }
            rewards[i] = scored ? sum : NAN;
        }
        advantage::reward_inputs<double> inputs;
        inputs.rewards = rewards;
        inputs.grouping = contiguous_groups(static_cast<index_type>(c.scalar("group_size")));
        if (c.scalar("beta") != 0) inputs.sequence_kl = c["sequence_kl"];
        std::vector<double> advantages(rewards.size());
        advantage::group_normalize(inputs, advantages,
                                   advantage::presets::trl_rloo(c.scalar("normalize") != 0, c.scalar("beta"),
                                                                c.scalar("clip_low"), c.scalar("clip_high")));
        // TRL's nanstd forms the Bessel factor count/(count − 1) from integer tensors, which torch divides in
        // float32: the whitened cases agree to that float rounding (~3e-8 relative), the others exactly.
        check_close(advantages.data(), c["advantages"], c.scalar("normalize") != 0 ? 1e-7 : 1e-12);
    }
}

TEST_CASE("golden: verl masked_whiten", "[advantage][golden]") {
    const auto& cases = golden::verl::masked_whiten();
    REQUIRE(cases.size() >= 5);
    for (const auto& c : cases) {
        INFO(c.name);
        const matrix values = as_matrix(c, "values"), mask = as_matrix(c, "mask");
        matrix out(values.rows(), values.cols());
        advantage::masked_whiten_options options;
        options.shift_mean = c.scalar("shift_mean") != 0;
        const auto stats = advantage::masked_whiten(values, mask, out, options);
        // verl's masked_mean divides by Σm + 1e-8: its mean is low by μ·1e-8/N, which an offset batch shows
        // (μ = 1e4: a shift of μ·1e-8/(N·D) ≈ 2.4e-5 in the output; a constant batch: 6e-6 where normkit
        // gives 0); normkit takes the exact mean.
        const double shift = std::abs(stats.mean) * 1e-8 / stats.count / std::sqrt(stats.variance(1) + 1e-8);
        check_close(out.data(), c["whitened"], 1e-9 + 2 * shift);
    }
}

TEST_CASE("golden: OpenRLHF global whitening and no_std_norm (presets::openrlhf_whiten)", "[advantage][golden]") {
    const auto& cases = golden::openrlhf::whiten();
    REQUIRE(cases.size() >= 5);
    for (const auto& c : cases) {
        INFO(c.name);
        const matrix values = as_matrix(c, "advantages"), mask = as_matrix(c, "mask");
        matrix out(values.rows(), values.cols());
        advantage::masked_whiten(values, mask, out, advantage::presets::openrlhf_whiten(c.scalar("no_std_norm") != 0));
        if (std::string(c.name) == "std_constant") {
            // OpenRLHF's float32 mean of a constant 0.7 leaves a residue of 1.2e-8, which rsqrt(1e-8) turns
            // into 1.2e-4; the double two-pass mean gives 0 exactly.
            CHECK(golden::max_abs(out) == 0.0);
            CHECK(std::abs(c["whitened"][0]) < 2e-4);
            continue;
        }
        // OpenRLHF whitens .float() advantages: float32 arithmetic, agreement to float rounding.
        check_close(out.data(), c["whitened"], 1e-6);
    }
}

TEST_CASE("masked_whiten: degenerate input and bad input", "[advantage][golden]") {
    const matrix values = matrix::Constant(2, 3, 4.0), none = matrix::Zero(2, 3), all = matrix::Ones(2, 3);
    matrix out(2, 3);
    const auto stats = advantage::masked_whiten(values, none, out);
    CHECK(stats.count == 0);
    CHECK(out(0, 0) == Approx(4.0 / std::sqrt(1e-8)));  // μ = 0, v = 0: (x − 0)/√(0 + ε)
    advantage::masked_whiten(values, all, out);
    CHECK(golden::max_abs(out) == 0.0);  // a constant batch gives 0
    matrix wrong(2, 2);
    CHECK_THROWS_WITH(advantage::masked_whiten(values, none, wrong), Catch::Contains("output"));
    advantage::masked_whiten_options bad;
    bad.ddof = 2;
    CHECK_THROWS_WITH(advantage::masked_whiten(values, none, out, bad), Catch::Contains("ddof"));
}

TEST_CASE("golden: OpenRLHF dynamic filtering (dapo_filter mean_in_range) beside DAPO's spread rule",
          "[advantage][golden]") {
    const auto& cases = golden::openrlhf::dynamic_filtering();
    REQUIRE(cases.size() >= 5);
    for (const auto& c : cases) {
        INFO(c.name);
        const auto& scores = c["scores"];
        std::vector<std::uint8_t> keep(scores.size());
        const auto kept =
            advantage::dapo_filter(scores, contiguous_groups(static_cast<index_type>(scores.size())), keep,
                                   advantage::presets::openrlhf_dynamic_filtering(c.scalar("low"), c.scalar("high")));
        CHECK(kept == static_cast<index_type>(c.scalar("kept")));
    }
    // The two rules differ: [0.2, 0.4, 0.9] has spread, but its mean 0.5 lies outside (0.6, 1).
    const std::vector<double> rewards = {0.2, 0.4, 0.9};
    std::vector<std::uint8_t> keep(3);
    CHECK(advantage::dapo_filter(rewards, contiguous_groups(3), keep) == 1);
    CHECK(advantage::dapo_filter(rewards, contiguous_groups(3), keep,
                                 advantage::presets::openrlhf_dynamic_filtering(0.6, 1.0)) == 0);
    CHECK_THROWS_WITH(advantage::dapo_filter(rewards, contiguous_groups(3), keep,
                                             advantage::presets::openrlhf_dynamic_filtering(1.0, 0.0)),
                      Catch::Contains("range"));
}

TEST_CASE("golden: verl OPO; a group whose responses are all empty (verl NaN, normkit the unweighted mean)",
          "[advantage][golden]") {
    const auto& cases = golden::verl::opo();
    REQUIRE(cases.size() >= 5);
    for (const auto& c : cases) {
        INFO(c.name);
        const matrix rewards = as_matrix(c, "token_level_rewards"), mask = as_matrix(c, "response_mask");
        const auto n = static_cast<std::size_t>(rewards.rows());
        const auto G = static_cast<std::size_t>(c.scalar("group_size"));
        std::vector<double> scores(n), advantages(n);
        std::vector<std::int64_t> lengths(n), ids(n);
        for (std::size_t i = 0; i < n; ++i) {
            scores[i] = golden::row_sum(rewards, static_cast<index_type>(i));
            lengths[i] = static_cast<std::int64_t>(golden::row_sum(mask, static_cast<index_type>(i)));
            ids[i] = static_cast<std::int64_t>(i / G);
        }
        advantage::opo(scores, group_ids(ids), lengths, advantages);
        for (std::size_t g = 0; g < n / G; ++g) {
            std::int64_t total = 0;
            double sum = 0;
            for (std::size_t j = 0; j < G; ++j) {
                total += lengths[g * G + j];
                sum += scores[g * G + j];
            }
            for (std::size_t j = 0; j < G; ++j) {
                const std::size_t i = g * G + j;
                if (total == 0) {
                    // verl: 0/0 for the whole group; normkit: r − the group's unweighted mean.
                    CHECK(std::isnan(c["advantages"][i * rewards.cols()]));
                    CHECK(advantages[i] == Approx(scores[i] - sum / static_cast<double>(G)));
                    continue;
                }
                // verl's advantage stands on every valid token of the row (× mask).
                for (index_type t = 0; t < rewards.cols(); ++t)
                    if (mask(static_cast<index_type>(i), t) != 0)
                        CHECK(advantages[i] ==
                              Approx(c["advantages"][i * rewards.cols() + t]).epsilon(1e-12).margin(1e-12));
            }
        }
    }
}

TEST_CASE("trl_rloo and masked_whiten against the references on random data", "[advantage][golden]") {
    std::mt19937 generator(44);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (const std::size_t G : {std::size_t(2), std::size_t(3), std::size_t(8)}) {
        std::vector<double> rewards(8 * G), kl(8 * G);
        for (std::size_t i = 0; i < rewards.size(); ++i) {
            rewards[i] = generator() % 4 == 0 ? NAN : normal(generator);
            kl[i] = normal(generator);
        }
        for (const bool normalize : {false, true}) {
            INFO("G " << G << " normalize " << normalize);
            const auto expected = reference::trl_rloo(rewards, G, normalize, -1.0, 1.5, 0.05, kl);
            advantage::reward_inputs<double> inputs;
            inputs.rewards = rewards;
            inputs.grouping = contiguous_groups(static_cast<index_type>(G));
            inputs.sequence_kl = kl;
            std::vector<double> advantages(rewards.size());
            advantage::group_normalize(inputs, advantages, advantage::presets::trl_rloo(normalize, 0.05, -1.0, 1.5));
            CHECK(testing::relative_error(advantages, expected) < 1e-12);
        }
    }
    const index_type rows = 4, cols = 9;
    const auto x = testing::random_values(rows * cols, 45, 3.0, 2.0);
    std::vector<double> m(rows * cols);
    for (auto& value : m) value = generator() % 3 == 0 ? 0.0 : 1.0;
    const matrix xm = Eigen::Map<const matrix>(x.data(), rows, cols),
                 mm = Eigen::Map<const matrix>(m.data(), rows, cols);
    for (const bool openrlhf : {false, true})
        for (const bool flag : {false, true}) {
            INFO("openrlhf " << openrlhf << " flag " << flag);
            auto options = openrlhf ? advantage::presets::openrlhf_whiten(flag) : advantage::masked_whiten_options{};
            if (!openrlhf) options.shift_mean = flag;
            matrix out(rows, cols);
            advantage::masked_whiten(xm, mm, out, options);
            const auto expected =
                reference::masked_whiten(x, m, options.ddof, options.eps, openrlhf, options.shift_mean, options.scale);
            CHECK(testing::relative_error(std::vector<double>(out.data(), out.data() + out.size()), expected) < 1e-12);
        }
}

TEST_CASE("dapo_filter's two rules against the reference on random groups", "[advantage][golden]") {
    std::mt19937 generator(46);
    std::uniform_int_distribution<int> score(0, 4);
    for (const std::size_t G : {std::size_t(1), std::size_t(2), std::size_t(5)}) {
        std::vector<double> rewards(30 * G);
        for (auto& r : rewards) r = score(generator) / 4.0;
        for (const bool in_range : {false, true}) {
            INFO("G " << G << " in_range " << in_range);
            std::vector<std::uint8_t> keep(rewards.size());
            const advantage::dapo_filter_options options{
                {},
                in_range ? advantage::dapo_filter_rule::mean_in_range : advantage::dapo_filter_rule::spread,
                0.2,
                0.9};
            advantage::dapo_filter(rewards, contiguous_groups(static_cast<index_type>(G)), keep, options);
            CHECK(keep == reference::dapo_keep(rewards, G, in_range, 0.2, 0.9));
        }
    }
}
