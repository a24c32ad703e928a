// The bad-input matrix of the loss module (docs/errors.md): for each public
// function and each kind of bad input, the normkit::error and the words of its
// message, or the documented value. Double storage only.
#include "support.hpp"

#include <normkit/loss/aggregate.hpp>
#include <normkit/loss/covariance_selection.hpp>
#include <normkit/loss/kl.hpp>
#include <normkit/loss/policy_loss.hpp>
#include <normkit/loss/rollout_correction.hpp>
#include <normkit/loss/value_loss.hpp>

#include <limits>

using namespace normkit;
using namespace normkit::testing;

namespace {

const double nan_value = std::numeric_limits<double>::quiet_NaN();
const double infinity = std::numeric_limits<double>::infinity();

// 2 × 3 token data and a 2 × 4 mismatch.
struct tokens {
    std::vector<double> x = {-1.0, -0.5, -2.0, -0.3, -1.2, -0.7}, old = {-1.1, -0.5, -1.5, -0.3, -0.9, -0.8},
                        ref = {-1.0, -0.6, -2.0, -0.2, -1.2, -0.6}, mask = {1, 1, 1, 1, 1, 0}, a = {1.0, -2.0},
                        out = std::vector<double>(6), wide = std::vector<double>(8), g = std::vector<double>(6);
    matrix_view<double> X = view(x.data(), 2, 3), OLD = view(old.data(), 2, 3), REF = view(ref.data(), 2, 3),
                        M = view(mask.data(), 2, 3), A = view(a.data(), 2, 1), OUT = view(out.data(), 2, 3),
                        WIDE = view(wide.data(), 2, 4), G = view(g.data(), 2, 3);

    loss::policy_inputs<double> inputs() const {
        loss::policy_inputs<double> in;
        in.log_probs = X;
        in.old_log_probs = OLD;
        in.advantages = A;
        in.mask = M;
        in.ref_log_probs = REF;
        return in;
    }
};

}  // namespace

TEST_CASE("errors: aggregate_loss and kl_penalty name shapes, nulls and options", "[loss][errors]") {
    tokens t;
    require_error_naming([&] { loss::aggregate_loss(t.X, t.WIDE); }, "mask has shape 2x4 but loss has shape 2x3");
    require_error_naming([&] { loss::aggregate_loss(t.X, t.M, t.WIDE); }, "weights has shape 2x4");
    require_error_naming([&] { loss::aggregate_loss(matrix_view<const double>{nullptr, 2, 3, 3}); }, "loss is null");
    loss::aggregate_loss_options options;
    options.normalizer_length = 0.0;
    require_error_naming([&] { loss::aggregate_loss(t.X, t.M, {}, options); },
                         "normalizer_length (L) must be positive");
    options = {};
    options.alpha = -1;
    require_error_naming([&] { loss::aggregate_loss(t.X, t.M, {}, options); }, "alpha must be finite and >= 0");
    options = {};
    options.data_parallel_size = 0.5;
    require_error_naming([&] { loss::aggregate_loss(t.X, t.M, {}, options); }, "data_parallel_size must be >= 1");
    options = {};
    options.data_parallel_size = 2;
    require_error_naming([&] { loss::aggregate_loss(t.X, t.M, {}, options); },
                         "data_parallel_size > 1 with token_mean needs global_token_count");
    options = {};
    options.global_token_count = nan_value;
    require_error_naming([&] { loss::aggregate_loss(t.X, t.M, {}, options); }, "global_token_count must be finite");
    std::vector<double> fractional = {1, 0.5, 1, 1, 1, 0};
    require_error_naming([&] { loss::aggregate_loss(t.X, view(fractional.data(), 2, 3)); },
                         "values the mask rule rejects");
    require_error_naming([&] { loss::kl_penalty(t.X, t.WIDE, t.OUT); }, "ref_log_probs has shape 2x4");
    require_error_naming([&] { loss::kl_penalty(t.X, t.REF, matrix_view<double>{}); }, "value is missing");
    loss::kl_penalty_options limit;
    limit.value_limit = -1.0;
    require_error_naming([&] { loss::kl_penalty(t.X, t.REF, t.OUT, {}, limit); }, "value_limit");
}

TEST_CASE("errors: policy_loss and the surrogates name missing inputs, shapes and constants", "[loss][errors]") {
    tokens t;
    auto in = t.inputs();
    loss::policy_loss_options options;
    options.use_kl_loss = true;
    auto no_ref = in;
    no_ref.ref_log_probs = {};
    require_error_naming([&] { loss::policy_loss(no_ref, t.G, {}, options); },
                         "ref_log_probs are needed when use_kl_loss");
    options = {};
    options.entropy_coefficient = 0.01;
    require_error_naming([&] { loss::policy_loss(in, t.G, {}, options); },
                         "entropies are needed when entropy_coefficient");
    options = {};
    options.kl_coefficient = infinity;
    require_error_naming([&] { loss::policy_loss(in, t.G, {}, options); }, "kl_coefficient must be finite");
    auto no_old = in;
    no_old.old_log_probs = {};
    require_error_naming([&] { loss::policy_loss(no_old, t.G); }, "old_log_probs are needed by this surrogate mode");
    auto no_advantages = in;
    no_advantages.advantages = {};
    require_error_naming([&] { loss::policy_loss(no_advantages, t.G); }, "advantages are missing");
    auto bad_advantages = in;
    bad_advantages.advantages = t.WIDE;
    require_error_naming([&] { loss::policy_loss(bad_advantages, t.G); },
                         "advantages has shape 2x4 but log_probs has shape 2x3 (expected 2x3 or 2x1)");
    auto bad_mask = in;
    bad_mask.mask = t.WIDE;
    require_error_naming([&] { loss::policy_loss(bad_mask, t.G); }, "mask has shape 2x4");
    require_error_naming([&] { loss::policy_loss(in, t.WIDE); }, "log_probs_gradient has shape 2x4");
    {
        // With the token count given, the pass itself (no mask pass before it) finds the values the
        // binary rule rejects; the message counts them all, in every row.
        auto fractional = t.mask;
        fractional[1] = 0.5;
        fractional[3] = 2.0;
        fractional[4] = -1.0;
        auto rejected = in;
        rejected.mask = view(fractional.data(), 2, 3);
        loss::policy_loss_options o;
        o.aggregation.global_token_count = 5;
        require_error_naming([&] { loss::policy_loss(rejected, t.G, {}, o); },
                             "mask has 3 values the mask rule rejects");
    }
    auto null_x = in;
    null_x.log_probs = matrix_view<const double>{nullptr, 2, 3, 3};
    require_error_naming([&] { loss::policy_loss(null_x, t.G); }, "log_probs is null");
    const auto surrogate_error = [&](auto change, const char* words) {
        loss::policy_loss_options o;
        change(o.surrogate);
        require_error_naming([&] { loss::policy_loss(in, t.G, {}, o); }, words);
    };
    surrogate_error([](auto& s) { s.epsilon_low = -0.1; }, "epsilon_low must be finite and >= 0");
    surrogate_error([](auto& s) { s.epsilon_high = nan_value; }, "epsilon_high must be finite and >= 0");
    surrogate_error([](auto& s) { s.dual_clip = 1.0; }, "dual_clip c must be > 1");
    surrogate_error([](auto& s) { s.log_ratio_clamp = 0; }, "log_ratio_clamp must be > 0");
    surrogate_error(
        [](auto& s) {
            s.mode = loss::surrogate_mode::sapo;
            s.tau_negative = 0;
        },
        "tau_positive and tau_negative must be > 0");
    surrogate_error(
        [](auto& s) {
            s.mode = loss::surrogate_mode::cispo_cap;
            s.epsilon_high = 0;
        },
        "epsilon_high (the cispo_cap cap) must be > 0");
    require_error_naming([&] { loss::policy_surrogate_forward(in, matrix_view<double>{}); },
                         "loss is missing (2x3 expected)");
}

TEST_CASE("errors: rollout_rejection_mask names its criteria, shapes and nulls", "[loss][errors]") {
    tokens t;
    using L = loss::rejection_level;
    using S = loss::rejection_statistic;
    const auto run = [&](const loss::rollout_rejection_options& o) {
        return [&t, o] { loss::rollout_rejection_mask(t.X, t.OLD, t.M, t.OUT, o); };
    };
    loss::rollout_rejection_options none;
    none.criteria.clear();
    require_error_naming(run(none), "criteria is empty: rejection sampling needs at least one criterion");
    require_error_naming(run(loss::presets::verl_rollout_rs(L::token, S::k2, 0.0)),
                         "criteria[0].upper must be > 0, got 0");
    require_error_naming(run(loss::presets::verl_rollout_rs(L::token, S::k1, nan_value)),
                         "criteria[0].upper must be > 0");
    require_error_naming(run(loss::presets::verl_rollout_rs(L::sequence_sum, S::k1, 2.0, 3.0)),
                         "criteria[0].lower 3 must be > 0 and <= upper 2");
    require_error_naming(run(loss::presets::verl_rollout_rs(L::token, S::k1, 2.0, 0.0)),
                         "criteria[0].lower 0 must be > 0 and <= upper 2");
    require_error_naming(run(loss::presets::verl_rollout_rs({{L::token, S::k1, 2.0, {}}, {L::token, S::k3, 2.0, 0.5}})),
                         "criteria[1].lower is for k1 only (k2 and k3 take an upper bound)");
    require_error_naming(run(loss::presets::verl_rollout_rs(L::sequence_max, S::k1, 2.0)),
                         "criteria[0]: sequence_max takes k2 or k3 (verl has no seq_max_k1)");
    auto clamp = loss::presets::verl_rollout_rs();
    clamp.log_ratio_clamp = 0.0;
    require_error_naming(run(clamp), "log_ratio_clamp must be > 0 (infinity for none), got 0");
    clamp.log_ratio_clamp = infinity;  // no clamp: accepted
    loss::rollout_rejection_mask(t.X, t.OLD, t.M, t.OUT, clamp);
    require_error_naming([&] { loss::rollout_rejection_mask(t.X, t.WIDE, t.M, t.OUT); },
                         "rollout_log_probs has shape 2x4 but log_probs has shape 2x3");
    require_error_naming([&] { loss::rollout_rejection_mask(t.X, t.OLD, t.WIDE, t.OUT); },
                         "mask has shape 2x4 but log_probs has shape 2x3");
    require_error_naming([&] { loss::rollout_rejection_mask(t.X, t.OLD, t.M, t.WIDE); },
                         "keep has shape 2x4 but log_probs has shape 2x3");
    require_error_naming([&] { loss::rollout_rejection_mask(t.X, t.OLD, t.M, matrix_view<double>{}); }, "keep");
    require_error_naming(
        [&] {
            loss::rollout_rejection_mask(matrix_view<const double>{nullptr, 2, 3, 3}, t.OLD, t.M, t.OUT);
        },
        "log_probs is null");
    require_error_naming(
        [&] {
            loss::rollout_rejection_mask(t.X, t.OLD, t.M, matrix_view<double>{nullptr, 2, 3, 3});
        },
        "keep is null");
}

TEST_CASE("errors: the loss module's documented values for masked NaN, all-masked and empty batches",
          "[loss][errors]") {
    tokens t;
    SECTION("NaN under the mask never reaches the loss; its gradient is exactly 0") {
        auto poisoned = t;
        poisoned.x[5] = poisoned.old[5] = poisoned.ref[5] = nan_value;  // mask[5] = 0
        loss::policy_loss_options options;
        options.use_kl_loss = true;
        const auto clean = loss::policy_loss(t.inputs(), t.G, {}, options);
        std::vector<double> g(6, 7.0);
        const auto result = loss::policy_loss(poisoned.inputs(), view(g.data(), 2, 3), {}, options);
        CHECK(result.loss == clean.loss);
        CHECK(g[5] == 0.0);
        for (std::size_t k = 0; k < 5; ++k) CHECK(g[k] == t.g[k]);
        std::vector<double> ell = t.x;
        ell[5] = nan_value;
        std::vector<double> weights(6, 7.0);
        const auto aggregated = loss::aggregate_loss(view(ell.data(), 2, 3), t.M, view(weights.data(), 2, 3));
        CHECK(std::isfinite(aggregated.loss));
        CHECK(weights[5] == 0.0);
    }
    SECTION("an all-masked batch gives loss 0 and a zero gradient") {
        std::vector<double> zeros(6, 0.0), g(6, 7.0);
        auto in = t.inputs();
        in.mask = view(zeros.data(), 2, 3);
        const auto result = loss::policy_loss(in, view(g.data(), 2, 3));
        CHECK(result.loss == 0.0);
        for (double value : g) CHECK(value == 0.0);
        CHECK(loss::aggregate_loss(t.X, view(zeros.data(), 2, 3)).loss == 0.0);
    }
    SECTION("an empty batch gives 0") {
        std::vector<double> none;
        const auto empty = view(none.data(), 0, 3);
        loss::policy_inputs<double> in;
        in.log_probs = empty;
        in.old_log_probs = empty;
        in.advantages = view(none.data(), 0, 1);
        CHECK(loss::policy_loss(in).loss == 0.0);
        CHECK(loss::aggregate_loss(empty).loss == 0.0);
    }
}

namespace {

// A 2 × 3 view k elements into a copy of `values` with room to spare: at(0) is the values'
// own place, at(1) a partial overlap of it by one element.
struct arena {
    std::vector<double> storage;
    explicit arena(std::vector<double> values) : storage(std::move(values)) { storage.resize(storage.size() + 3); }
    matrix_view<double> at(index_type offset = 0) { return view(storage.data() + offset, 2, 3); }
    std::vector<double> values() const { return {storage.begin(), storage.begin() + 6}; }
};

}  // namespace

TEST_CASE("errors: aliasing of aggregate_loss, kl_penalty, value_loss and the corrections",
          "[loss][errors][aliasing]") {
    tokens t;
    SECTION("aggregate_loss: weights may be loss or mask itself") {
        const auto separate = loss::aggregate_loss(t.X, t.M, t.OUT);
        arena over_loss(t.x), over_mask(t.mask);
        const auto in_place = loss::aggregate_loss(over_loss.at(), t.M, over_loss.at());
        CHECK((in_place.loss == separate.loss && over_loss.values() == t.out));
        CHECK(loss::aggregate_loss(t.X, over_mask.at(), over_mask.at()).loss == separate.loss);
        CHECK(over_mask.values() == t.out);
        arena a(t.x);
        require_error_naming([&] { loss::aggregate_loss(a.at(), t.M, a.at(1)); },
                             "weights (2x3) overlaps loss (2x3); weights may be loss itself or disjoint from it");
    }
    SECTION("kl_penalty: value and gradient may each be log_probs or ref_log_probs itself, not each other") {
        loss::kl_penalty(t.X, t.REF, t.OUT, t.G);
        arena x(t.x), ref(t.ref);
        loss::kl_penalty(x.at(), ref.at(), x.at(), ref.at());
        CHECK((x.values() == t.out && ref.values() == t.g));
        arena a(t.x);
        require_error_naming([&] { loss::kl_penalty(a.at(), t.REF, a.at(1)); }, "value (2x3) overlaps log_probs (2x3)");
        require_error_naming([&] { loss::kl_penalty(t.X, t.REF, t.OUT, t.OUT); },
                             "gradient (2x3) overlaps value (2x3); gradient must be disjoint from value");
    }
    SECTION("value_loss: values_gradient may be values, old_values or returns itself") {
        const std::vector<double> returns = {-0.8, -0.4, -1.0, 0.1, -1.0, -0.9};
        const auto R = view(returns.data(), 2, 3);
        loss::value_loss_options clipped;
        clipped.clip = 0.2;
        const auto separate = loss::value_loss(t.X, t.OLD, R, t.M, t.G, clipped);
        arena x(t.x);
        const auto in_place = loss::value_loss(x.at(), t.OLD, R, t.M, x.at(), clipped);
        CHECK((in_place.loss == separate.loss && x.values() == t.g));
        require_error_naming([&] { loss::value_loss(t.X, t.OLD, R, t.M, t.M, clipped); },
                             "values_gradient (2x3) overlaps mask (2x3)");
        require_error_naming([&] { loss::value_loss(x.at(), t.OLD, R, t.M, x.at(1), clipped); },
                             "values_gradient (2x3) overlaps values (2x3)");
    }
    SECTION("rollout_correction_weights: weights may be log_probs itself; the selections overlap nothing") {
        for (const auto level : {loss::correction_level::token, loss::correction_level::sequence}) {
            loss::rollout_correction_options options;
            options.level = level;
            loss::rollout_correction_weights(t.X, t.OLD, t.M, t.OUT, options);
            arena x(t.x);
            loss::rollout_correction_weights(x.at(), t.OLD, t.M, x.at(), options);
            CHECK(x.values() == t.out);
        }
        arena a(t.old);
        require_error_naming([&] { loss::rollout_correction_weights(t.X, a.at(), t.M, a.at()); },
                             "weights (2x3) overlaps rollout_log_probs (2x3)");
        require_error_naming([&] { loss::covariance_selection(t.X, t.OLD, t.A, t.M, t.X); },
                             "selected (2x3) overlaps log_probs (2x3)");
        require_error_naming([&] { loss::off_policy_sequence_mask(t.X, t.OLD, t.A, t.M, t.A, 0.5); },
                             "keep (2x1) overlaps advantages (2x1)");
    }
    SECTION("rollout_rejection_mask: keep may be the mask or log_probs itself, overlaps rollout_log_probs not at all") {
        for (const auto level : {loss::rejection_level::token, loss::rejection_level::sequence_mean}) {
            const auto options = loss::presets::verl_rollout_rs(level, loss::rejection_statistic::k1, 1.2);
            loss::rollout_rejection_mask(t.X, t.OLD, t.M, t.OUT, options);
            arena x(t.x), m(t.mask);
            loss::rollout_rejection_mask(x.at(), t.OLD, t.M, x.at(), options);
            loss::rollout_rejection_mask(t.X, t.OLD, m.at(), m.at(), options);
            CHECK((x.values() == t.out && m.values() == t.out));
        }
        arena x(t.x), m(t.mask), old(t.old);
        require_error_naming([&] { loss::rollout_rejection_mask(x.at(), t.OLD, t.M, x.at(1)); },
                             "keep (2x3) overlaps log_probs (2x3); keep may be log_probs itself or disjoint from it");
        require_error_naming([&] { loss::rollout_rejection_mask(t.X, t.OLD, m.at(), m.at(1)); },
                             "keep (2x3) overlaps mask (2x3); keep may be mask itself");
        require_error_naming(
            [&] { loss::rollout_rejection_mask(t.X, old.at(), t.M, old.at()); },
            "keep (2x3) overlaps rollout_log_probs (2x3); keep must be disjoint from rollout_log_probs");
    }
}

TEST_CASE("errors: aliasing of the surrogates and policy_loss: an output may be one input, not another output",
          "[loss][errors][aliasing]") {
    tokens t;
    for (const auto mode : {loss::surrogate_mode::ppo_clip, loss::surrogate_mode::gspo_sequence}) {
        INFO("mode " << static_cast<int>(mode));
        loss::policy_surrogate_options options;
        options.mode = mode;
        // forward: loss over log_probs, over old_log_probs
        loss::policy_surrogate_forward(t.inputs(), t.OUT, options);
        tokens u;
        arena x(u.x), old(u.old);
        auto in = u.inputs();
        in.log_probs = x.at();
        loss::policy_surrogate_forward(in, x.at(), options);
        CHECK(x.values() == t.out);
        in = u.inputs();
        in.old_log_probs = old.at();
        loss::policy_surrogate_forward(in, old.at(), options);
        CHECK(old.values() == t.out);
        // backward: the gradient over loss_gradient, over the mask
        const std::vector<double> upstream = {0.5, -1.0, 0.25, 2.0, 1.5, -0.75};
        loss::policy_surrogate_backward(view(upstream.data(), 2, 3), t.inputs(), t.G, options);
        arena up(upstream), mask(u.mask);
        loss::policy_surrogate_backward(up.at(), u.inputs(), up.at(), options);
        CHECK(up.values() == t.g);
        in = u.inputs();
        in.mask = mask.at();
        loss::policy_surrogate_backward(view(upstream.data(), 2, 3), in, mask.at(), options);
        CHECK(mask.values() == t.g);
        arena a(u.x);
        in = u.inputs();
        in.log_probs = a.at();
        require_error_naming([&] { loss::policy_surrogate_forward(in, a.at(1), options); },
                             "loss (2x3) overlaps log_probs (2x3); loss may be log_probs itself");
        require_error_naming([&] { loss::policy_surrogate_backward(up.at(), u.inputs(), up.at(1), options); },
                             "log_probs_gradient (2x3) overlaps loss_gradient (2x3)");
    }
    SECTION("policy_loss: each gradient may be one input itself, never the other gradient") {
        std::vector<double> entropies = {0.5, 1.0, 0.25, 2.0, 0.75, 1.5}, entropy_gradient(6);
        loss::policy_loss_options options;
        options.use_kl_loss = true;
        options.entropy_coefficient = 0.01;
        auto in = t.inputs();
        in.entropies = view(entropies.data(), 2, 3);
        const auto separate = loss::policy_loss(in, t.G, view(entropy_gradient.data(), 2, 3), options);
        tokens u;
        arena x(u.x), h(entropies);
        auto in_place = u.inputs();
        in_place.log_probs = x.at();
        in_place.entropies = h.at();
        const auto result = loss::policy_loss(in_place, x.at(), h.at(), options);
        CHECK(result.loss == separate.loss);
        CHECK((x.values() == t.g && h.values() == entropy_gradient));
        require_error_naming([&] { loss::policy_loss(in, t.OUT, t.OUT, options); },
                             "entropy_gradient (2x3) overlaps log_probs_gradient (2x3)");
        arena a(u.old);
        in_place = u.inputs();
        in_place.entropies = view(entropies.data(), 2, 3);
        in_place.old_log_probs = a.at();
        require_error_naming([&] { loss::policy_loss(in_place, a.at(1), {}, options); },
                             "log_probs_gradient (2x3) overlaps old_log_probs (2x3)");
    }
}
