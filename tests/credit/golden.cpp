// The credit module against numbers from OpenRLHF's own functions (tests/credit/golden_openrlhf.hpp,
// written by scripts/golden/openrlhf.py; each table names its file, function and commit).
#include "golden_openrlhf.hpp"
#include "support.hpp"

#include <normkit/credit/returns.hpp>

#include <Eigen/Core>

using namespace normkit;
using golden::golden_case;

namespace {

using matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

matrix as_matrix(const golden_case& c, const char* key) {
    const auto rows = static_cast<index_type>(c.scalar("rows")), cols = static_cast<index_type>(c.scalar("cols"));
    REQUIRE(static_cast<index_type>(c[key].size()) == rows * cols);
    return Eigen::Map<const matrix>(c[key].data(), rows, cols);
}

void check_close(const matrix& actual, const std::vector<double>& expected) {
    REQUIRE(static_cast<std::size_t>(actual.size()) == expected.size());
    for (std::size_t k = 0; k < expected.size(); ++k) {
        INFO("element " << k);
        CHECK(actual.data()[k] == Approx(expected[k]).margin(1e-12).epsilon(1e-12));
    }
}

}  // namespace

TEST_CASE("golden: OpenRLHF get_cumulative_returns discounts through masked tokens (discount_through)",
          "[credit][golden]") {
    const auto& cases = golden::openrlhf::cumulative_returns();
    REQUIRE(cases.size() >= 5);
    for (const auto& c : cases) {
        INFO(c.name);
        const matrix rewards = as_matrix(c, "rewards"), mask = as_matrix(c, "mask");
        matrix returns(rewards.rows(), rewards.cols());
        credit::discounted_returns(rewards, mask, returns, {c.scalar("gamma"), return_mask_rule::discount_through});
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
        credit::gae_options options;
        options.gamma = c.scalar("gamma");
        options.lambda = c.scalar("lambd");
        options.mask_rule = return_mask_rule::discount_through;
        credit::generalized_advantage_estimation(rewards, values, mask, advantages, returns, options);
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
