// The credit module against numbers from OpenRLHF's own functions (tests/credit/golden_openrlhf.hpp,
// written by scripts/golden/openrlhf.py; each table names its file, function and commit).
#include "golden_openrlhf.hpp"
#include "credit/fixtures.hpp"
#include "support.hpp"

#include <normkit/credit/presets.hpp>
#include <normkit/credit/returns.hpp>

#include <Eigen/Core>

using namespace normkit;
using golden::as_matrix;
using golden::check_close;
using golden::golden_case;
using golden::matrix;

TEST_CASE("golden: OpenRLHF get_cumulative_returns discounts through masked tokens (discount_through)",
          "[credit][golden]") {
    const auto& cases = golden::openrlhf::cumulative_returns();
    REQUIRE(cases.size() >= 5);
    for (const auto& c : cases) {
        INFO(c.name);
        const matrix rewards = as_matrix(c, "rewards"), mask = as_matrix(c, "mask");
        matrix returns(rewards.rows(), rewards.cols());
        credit::discounted_returns(rewards, mask, returns, credit::presets::openrlhf_returns(c.scalar("gamma")));
        check_close(returns, c["returns"]);
    }
}

TEST_CASE("golden: OpenRLHF get_advantages_and_returns (GAE with masked r and V, discount_through)",
          "[credit][golden]") {
    const auto& cases = golden::openrlhf::gae();
    REQUIRE(cases.size() >= 5);
    for (const auto& c : cases) {
        INFO(c.name);
        const matrix rewards = as_matrix(c, "rewards"), values = as_matrix(c, "values"), mask = as_matrix(c, "mask");
        matrix advantages(rewards.rows(), rewards.cols()), returns(rewards.rows(), rewards.cols());
        credit::generalized_advantage_estimation(rewards, values, mask, advantages, returns,
                                                 credit::presets::openrlhf_gae(c.scalar("gamma"), c.scalar("lambd")));
        check_close(advantages, c["advantages"]);
        check_close(returns, c["returns"]);
    }
}

TEST_CASE("GAE rejects the reset rule, naming it", "[credit][golden]") {
    const matrix r = matrix::Zero(1, 3), mask = matrix::Ones(1, 3);
    matrix a(1, 3);
    credit::gae_options options;
    options.mask_rule = return_mask_rule::reset;
    CHECK_THROWS_WITH(credit::generalized_advantage_estimation(r, r, mask, a, {}, options),
                      Catch::Contains("mask_rule"));
}

#include "reference/credit.hpp"

TEST_CASE("discount_through against the reference sums, float and double, random holes", "[credit][golden]") {
    const index_type rows = 5, cols = 37;
    const auto r = testing::random_values(rows * cols, 31), V = testing::random_values(rows * cols, 32);
    std::mt19937 generator(33);
    std::vector<double> m(rows * cols);
    for (auto& value : m) value = generator() % 3 == 0 ? 0.0 : 1.0;
    for (const double gamma : {1.0, 0.97, 0.0}) {
        INFO("gamma " << gamma);
        const auto expected = reference::openrlhf_returns(r, m, rows, cols, gamma);
        // Named copies, not a structured binding: clang 14 cannot capture one in the lambda below.
        const auto gae = reference::openrlhf_gae(r, V, m, rows, cols, gamma, 0.9);
        const auto expected_a = gae.first, expected_r = gae.second;
        const auto run = [&](auto zero) {
            using T = decltype(zero);
            using M = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
            const M rm = Eigen::Map<const matrix>(r.data(), rows, cols).cast<T>(),
                    vm = Eigen::Map<const matrix>(V.data(), rows, cols).cast<T>(),
                    mm = Eigen::Map<const matrix>(m.data(), rows, cols).cast<T>();
            M returns(rows, cols), advantages(rows, cols), gae_returns(rows, cols);
            credit::discounted_returns(rm, mm, returns,
                                       testing::returns_options(gamma, return_mask_rule::discount_through));
            const auto options = testing::gae_settings(gamma, 0.9, return_mask_rule::discount_through);
            credit::generalized_advantage_estimation(rm, vm, mm, advantages, gae_returns, options);
            const double tolerance = std::is_same_v<T, double> ? 1e-12 : 2e-5;
            const auto as_vector = [](const M& x) { return std::vector<double>(x.data(), x.data() + x.size()); };
            // float storage rounds its inputs: compared against the reference on the rounded inputs' scale.
            CHECK(testing::relative_error(as_vector(returns), expected) < tolerance * 8);
            CHECK(testing::relative_error(as_vector(advantages), expected_a) < tolerance * 8);
            CHECK(testing::relative_error(as_vector(gae_returns), expected_r) < tolerance * 8);
        };
        run(double{});
        run(float{});
    }
}
