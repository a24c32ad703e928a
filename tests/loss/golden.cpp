// The loss module against numbers from the frameworks' own functions (tests/loss/golden_*.hpp, written
// by scripts/golden/*.py: each table names the framework's file, function and commit). Every table
// holds at least five cases; the issue-18 mismatches are among them.
#include "golden_openrlhf.hpp"
#include "golden_trl.hpp"
#include "support.hpp"

#include <normkit/loss/kl.hpp>
#include <normkit/loss/policy_loss.hpp>
#include <normkit/loss/presets.hpp>

#include <Eigen/Core>

using namespace normkit;
using golden::golden_case;

namespace {

using matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

matrix as_matrix(const std::vector<double>& values, index_type rows, index_type cols) {
    REQUIRE(static_cast<index_type>(values.size()) == rows * cols);
    return Eigen::Map<const matrix>(values.data(), rows, cols);
}

index_type rows_of(const golden_case& c) { return static_cast<index_type>(c.scalar("rows")); }
index_type cols_of(const golden_case& c) { return static_cast<index_type>(c.scalar("cols")); }

void check_close(const matrix& actual, const std::vector<double>& expected, double tolerance = 1e-10) {
    REQUIRE(static_cast<std::size_t>(actual.size()) == expected.size());
    for (std::size_t k = 0; k < expected.size(); ++k) {
        INFO("element " << k);
        CHECK(actual.data()[k] == Approx(expected[k]).margin(tolerance).epsilon(tolerance));
    }
}

// policy_loss on a golden case's log-probs, old log-probs, advantages (B × T, or B × 1 when `per_sample`)
// and mask; checks the loss and the gradient, returns the result for the metrics.
loss::policy_loss_result check_policy_case(const golden_case& c, const loss::policy_loss_options& options,
                                           bool per_sample) {
    INFO(c.name);
    const index_type rows = rows_of(c), cols = cols_of(c);
    const matrix x = as_matrix(c["log_probs"], rows, cols), old = as_matrix(c["old_log_probs"], rows, cols),
                 mask = as_matrix(c["mask"], rows, cols),
                 advantages = as_matrix(c["advantages"], rows, per_sample ? 1 : cols);
    matrix gradient(rows, cols);
    const auto result = loss::policy_loss(loss::make_policy_inputs(x, old, advantages, mask), gradient, {}, options);
    CHECK(result.loss == Approx(c.scalar("loss")).margin(1e-12).epsilon(1e-10));
    check_close(gradient, c["gradient"]);
    return result;
}

}  // namespace

TEST_CASE("golden: OpenRLHF compute_approx_kl clamps every estimator to ±10 (kl_options::value_limit)",
          "[loss][golden]") {
    const loss::kl_estimator estimators[] = {loss::kl_estimator::k1, loss::kl_estimator::k2, loss::kl_estimator::k3};
    const auto& cases = golden::openrlhf::approx_kl();
    REQUIRE(cases.size() == 3);
    for (std::size_t e = 0; e < cases.size(); ++e) {
        const auto& c = cases[e];
        INFO(c.name);
        const index_type rows = rows_of(c), cols = cols_of(c);
        // compute_approx_kl casts to float32 first (log_probs.float()): compared in float storage.
        using float_matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
        const float_matrix x = as_matrix(c["log_probs"], rows, cols).cast<float>(),
                           base = as_matrix(c["log_probs_base"], rows, cols).cast<float>();
        float_matrix value(rows, cols), gradient(rows, cols);
        loss::kl_options options = loss::presets::openrlhf_kl();
        options.estimator = estimators[e];
        loss::kl_penalty(x, base, value, gradient, options);
        check_close(value.cast<double>(), c["value"], 2e-6);
        check_close(gradient.cast<double>(), c["gradient"], 2e-6);
    }
}

TEST_CASE("golden: OpenRLHF PolicyLoss (loss, gradient, clip_ratio, ppo_kl of the raw log-ratio)", "[loss][golden]") {
    const auto& cases = golden::openrlhf::policy_loss();
    REQUIRE(cases.size() >= 5);
    for (const auto& c : cases) {
        auto options = loss::presets::openrlhf_ppo();
        options.surrogate.epsilon_low = c.scalar("epsilon_low");
        options.surrogate.epsilon_high = c.scalar("epsilon_high");
        if (c.scalar("dual_clip") > 0) options.surrogate.dual_clip = c.scalar("dual_clip");
        const auto result = check_policy_case(c, options, false);
        CHECK(result.metrics.clip_fraction == Approx(c.scalar("clip_ratio")).margin(1e-12));
        CHECK(result.metrics.approx_kl == Approx(c.scalar("ppo_kl")).margin(1e-12));
    }
}

TEST_CASE("golden: TRL delta at importance_sampling_level=sequence clamps the sequence ratio", "[loss][golden]") {
    const auto& cases = golden::trl::delta_sequence();
    REQUIRE(cases.size() >= 5);
    for (const auto& c : cases) {
        auto options = loss::presets::trl(loss::presets::trl_loss_type::grpo);
        options.surrogate.mode =
            c.has("token_level") ? loss::surrogate_mode::ppo_clip : loss::surrogate_mode::gspo_sequence;
        options.surrogate.dual_clip = c.scalar("delta");
        check_policy_case(c, options, true);
    }
}

TEST_CASE("golden: TRL sapo at importance_sampling_level=sequence (surrogate_mode::sapo_sequence)", "[loss][golden]") {
    const auto& cases = golden::trl::sapo_sequence();
    REQUIRE(cases.size() >= 5);
    for (const auto& c : cases) {
        auto options = loss::presets::trl(loss::presets::trl_loss_type::sapo);
        options.surrogate.mode = loss::surrogate_mode::sapo_sequence;
        // TRL's torch.where(advantages > 0, τ+, τ−) of two Python floats is a float32 tensor: τ− = float(1.05).
        options.surrogate.tau_negative = static_cast<double>(1.05f);
        check_policy_case(c, options, true);
    }
}
