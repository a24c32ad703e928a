// The one-call policy loss against tests/reference/loss.hpp and finite
// differences, the presets on a hand-computed example, micro-batches, and errors.
#include "reference/loss.hpp"
#include "support.hpp"

#include <normkit/loss/policy_loss.hpp>
#include <normkit/loss/presets.hpp>

#include <limits>

using namespace normkit;
using namespace normkit::testing;

namespace {

using loss::aggregation_mode;
using loss::surrogate_mode;

struct data_set {
    index_type rows, cols;
    std::vector<double> x, old, advantages, per_sample, mask, ref, entropies;
};

data_set make_data(index_type rows, index_type cols, std::uint32_t seed, bool per_sample) {
    data_set data{rows, cols, {}, {}, {}, std::vector<double>(static_cast<std::size_t>(rows)), {}, {}, {}};
    std::mt19937 generator(seed);
    std::uniform_real_distribution<double> log_prob(-3.0, -0.01), shift(-0.5, 0.5), advantage(-2.0, 2.0),
        entropy(0.0, 2.0);
    std::uniform_int_distribution<index_type> length(1, cols);
    for (auto& a : data.per_sample) a = advantage(generator);
    for (index_type i = 0; i < rows; ++i) {
        const index_type n = rows > 2 && i == 1 ? 0 : length(generator);
        for (index_type t = 0; t < cols; ++t) {
            const double x = log_prob(generator);
            data.x.push_back(x);
            data.old.push_back(x + shift(generator));
            data.ref.push_back(x + shift(generator));
            data.entropies.push_back(entropy(generator));
            data.advantages.push_back(per_sample ? data.per_sample[i] : advantage(generator));
            data.mask.push_back(t < n ? 1.0 : 0.0);
        }
    }
    return data;
}

loss::policy_loss_options options_for(surrogate_mode surrogate, aggregation_mode aggregation,
                                      loss::kl_estimator estimator, bool straight) {
    loss::policy_loss_options options;
    options.surrogate.mode = surrogate;
    options.surrogate.epsilon_high = surrogate == surrogate_mode::cispo_cap ? 1.3 : 0.28;
    if (surrogate == surrogate_mode::ppo_clip) options.surrogate.dual_clip = 3.0;
    options.surrogate.gft_threshold = 0.3;
    options.use_kl_loss = true;
    options.kl.estimator = estimator;
    options.kl.straight_through = straight;
    options.kl_coefficient = 0.05;
    options.entropy_coefficient = 0.01;
    options.aggregation.mode = aggregation;
    return options;
}

double reference_loss(const data_set& d, const std::vector<double>& x, const loss::policy_loss_options& options) {
    return reference::policy_loss(x, d.x, d.old, d.advantages, d.mask, d.ref, d.entropies, {d.rows, d.cols}, options);
}

template <class T>
void check_policy_loss(const loss::policy_loss_options& options, index_type rows, index_type cols, index_type padding,
                       bool per_sample, std::uint32_t seed) {
    INFO(type_name<T>() << " surrogate " << static_cast<int>(options.surrogate.mode) << " aggregation "
                        << static_cast<int>(options.aggregation.mode) << " kl "
                        << static_cast<int>(options.kl.estimator) << " rows " << rows << " cols " << cols);
    auto data = make_data(rows, cols, seed, per_sample);
    test_matrix<T> x(rows, cols, data.x, padding), old(rows, cols, data.old, padding + 1),
        mask(rows, cols, data.mask, padding), ref(rows, cols, data.ref, padding),
        entropies(rows, cols, data.entropies, padding + 2);
    test_matrix<T> advantages =
        per_sample ? test_matrix<T>(rows, 1, data.per_sample, 0) : test_matrix<T>(rows, cols, data.advantages, padding);
    data.x = x.values();
    data.old = old.values();
    data.ref = ref.values();
    data.entropies = entropies.values();
    const auto stored_advantages = advantages.values();
    for (index_type i = 0; i < rows; ++i)
        for (index_type t = 0; t < cols; ++t)
            data.advantages[i * cols + t] = per_sample ? stored_advantages[i] : stored_advantages[i * cols + t];
    loss::policy_inputs<T> inputs{x.view, old.view, advantages.view, mask.view, ref.view, entropies.view};
    test_matrix<T> gradient(rows, cols, padding), entropy_gradient(rows, cols, padding);
    const auto result = loss::policy_loss(inputs, gradient.view, entropy_gradient.view, options);

    const double expected = reference_loss(data, data.x, options);
    // The loss may cancel: measure it against the same loss of |ℓ| terms.
    const auto ell =
        reference::surrogate(data.x, data.x, data.old, data.advantages, data.mask, {rows, cols}, options.surrogate);
    std::vector<double> absolute(ell.size());
    for (std::size_t k = 0; k < ell.size(); ++k)
        absolute[k] =
            std::abs(ell[k]) +
            std::abs(options.kl_coefficient * reference::kl_value(data.x[k], data.x[k], data.ref[k], options.kl)) +
            std::abs(options.entropy_coefficient * data.entropies[k]);
    const double scale = std::max(reference::aggregate(absolute, data.mask, {rows, cols}, options.aggregation), 1e-30);
    CHECK(std::abs(result.loss - expected) / scale < (std::is_same_v<T, double> ? 1e-12 : 3e-5));

    // ∂loss/∂H = −c·a_i·m.
    std::vector<double> weights;
    reference::aggregate(data.entropies, data.mask, {rows, cols}, options.aggregation, &weights);
    for (auto& w : weights) w *= -options.entropy_coefficient;
    // fp16 keeps weights below 6e-5 as subnormals (spacing 6e-8): judged against that floor.
    CHECK(relative_error(entropy_gradient.values(), weights, std::is_same_v<T, Eigen::half> ? 1e-4 : 1e-30) <
          tolerance<T>());

    // ∂loss/∂logπ against central differences of the reference at sampled tokens.
    const auto g = gradient.values();
    std::vector<double> fd, kernel;
    const index_type total = rows * cols, stride = std::max<index_type>(1, total / 40);
    for (index_type k = 0; k < total; k += stride) {
        auto probe = data.x;
        const double h = 1e-6;
        probe[k] = data.x[k] + h;
        const double up = reference_loss(data, probe, options);
        probe[k] = data.x[k] - h;
        const double down = reference_loss(data, probe, options);
        fd.push_back((up - down) / (2 * h));
        kernel.push_back(g[k]);
    }
    const double gradient_scale = std::max(max_abs(fd), 1e-3);
    CHECK(relative_error(kernel, fd, gradient_scale) < (std::is_same_v<T, double> ? 1e-6 : tolerance<T>() * 8 + 1e-5));
    CHECK(gradient.padding_untouched());
    CHECK(entropy_gradient.padding_untouched());
}

const std::vector<surrogate_mode> all_surrogates = {
    surrogate_mode::ppo_clip,      surrogate_mode::cispo_clip,    surrogate_mode::cispo_cap, surrogate_mode::gspo_token,
    surrogate_mode::gspo_sequence, surrogate_mode::sapo,          surrogate_mode::reinforce, surrogate_mode::gmpo,
    surrogate_mode::gft,           surrogate_mode::sapo_sequence, surrogate_mode::dppo_tv,   surrogate_mode::dppo_kl,
    surrogate_mode::vespo};
const std::vector<aggregation_mode> all_aggregations = {aggregation_mode::token_mean,
                                                        aggregation_mode::token_sum,
                                                        aggregation_mode::seq_mean_token_sum,
                                                        aggregation_mode::seq_mean_token_mean,
                                                        aggregation_mode::seq_mean_token_sum_norm,
                                                        aggregation_mode::delta_l};
const std::vector<loss::kl_estimator> all_estimators = {loss::kl_estimator::k1, loss::kl_estimator::abs,
                                                        loss::kl_estimator::k2, loss::kl_estimator::k3};

}  // namespace

TEST_CASE("policy_loss: every surrogate x aggregation x KL estimator against the reference and finite differences",
          "[loss][policy_loss]") {
    std::uint32_t seed = 500;
    for (const auto surrogate : all_surrogates)
        for (const auto aggregation : all_aggregations)
            for (const auto estimator : all_estimators) {
                const bool straight = (seed & 1) != 0;
                check_policy_loss<double>(options_for(surrogate, aggregation, estimator, straight), 5, 13, 1,
                                          (seed & 2) != 0, seed);
                ++seed;
            }
}

TEMPLATE_TEST_CASE("policy_loss over SIMD tails, strides and storage types", "[loss][policy_loss]", float, double,
                   Eigen::bfloat16, Eigen::half) {
    std::uint32_t seed = 900;
    for (index_type cols : tail_dims) {
        if (cols == 1000) continue;
        for (const auto surrogate :
             {surrogate_mode::ppo_clip, surrogate_mode::gspo_sequence, surrogate_mode::gmpo, surrogate_mode::sapo}) {
            const auto aggregation = all_aggregations[seed % all_aggregations.size()];
            check_policy_loss<TestType>(options_for(surrogate, aggregation, loss::kl_estimator::k3, false),
                                        cols > 200 ? 3 : 6, cols, cols % 2, (seed & 1) != 0, seed);
            ++seed;
        }
    }
}

TEST_CASE("policy_loss equals its parts: surrogate, KL and entropy aggregated separately", "[loss][policy_loss]") {
    const index_type rows = 7, cols = 45;
    const auto d = make_data(rows, cols, 41, true);
    for (const auto surrogate : all_surrogates) {
        INFO("surrogate " << static_cast<int>(surrogate));
        auto options = options_for(surrogate, aggregation_mode::seq_mean_token_mean, loss::kl_estimator::k3, false);
        loss::policy_inputs<double> inputs{view(d.x.data(), rows, cols),       view(d.old.data(), rows, cols),
                                           view(d.per_sample.data(), rows, 1), view(d.mask.data(), rows, cols),
                                           view(d.ref.data(), rows, cols),     view(d.entropies.data(), rows, cols)};
        std::vector<double> gradient(rows * cols);
        const auto result = loss::policy_loss(inputs, view(gradient.data(), rows, cols), {}, options);
        // The parts.
        std::vector<double> ell(rows * cols), weights(rows * cols), surrogate_gradient(rows * cols), kl(rows * cols),
            kl_gradient(rows * cols);
        const auto metrics = loss::policy_surrogate_forward(inputs, view(ell.data(), rows, cols), options.surrogate);
        const double policy = loss::aggregate_loss(view(ell.data(), rows, cols), view(d.mask.data(), rows, cols),
                                                   view(weights.data(), rows, cols), options.aggregation)
                                  .loss;
        loss::policy_surrogate_backward(view(weights.data(), rows, cols), inputs,
                                        view(surrogate_gradient.data(), rows, cols), options.surrogate);
        loss::kl_penalty(view(d.x.data(), rows, cols), view(d.ref.data(), rows, cols), view(kl.data(), rows, cols),
                         view(kl_gradient.data(), rows, cols), loss::kl_penalty_options(options.kl));
        const double kl_loss =
            loss::aggregate_loss(view(kl.data(), rows, cols), view(d.mask.data(), rows, cols), {}, options.aggregation)
                .loss;
        const double entropy = loss::aggregate_loss(view(d.entropies.data(), rows, cols),
                                                    view(d.mask.data(), rows, cols), {}, options.aggregation)
                                   .loss;
        CHECK(result.policy_loss == Approx(policy).epsilon(1e-13));
        CHECK(result.kl_loss == Approx(kl_loss).epsilon(1e-13));
        CHECK(result.entropy_loss == Approx(entropy).epsilon(1e-13));
        CHECK(result.loss == Approx(policy + 0.05 * kl_loss - 0.01 * entropy).epsilon(1e-13));
        CHECK(result.metrics.clip_fraction == metrics.clip_fraction);
        CHECK(result.metrics.approx_kl == Approx(metrics.approx_kl).epsilon(1e-13));
        std::vector<double> expected(rows * cols);
        for (std::size_t k = 0; k < expected.size(); ++k)
            expected[k] = surrogate_gradient[k] + 0.05 * weights[k] * kl_gradient[k];
        CHECK(relative_error(gradient, expected) < 1e-13);
    }
}

TEST_CASE("presets on a hand-computed example", "[loss][policy_loss][presets]") {
    // Two responses, T = 3; the second is padded (NaN under the mask). A = (1, −2) per sample.
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const std::vector<double> x = {-1.0, -0.5, -2.0, -0.3, -1.2, nan}, old = {-1.1, -0.5, -1.5, -0.3, -0.9, nan},
                              ref = {-1.0, -0.6, -2.0, -0.2, -1.2, nan}, mask = {1, 1, 1, 1, 1, 0},
                              advantages = {1.0, -2.0};
    loss::policy_inputs<double> inputs{view(x.data(), 2, 3),    view(old.data(), 2, 3), view(advantages.data(), 2, 1),
                                       view(mask.data(), 2, 3), view(ref.data(), 2, 3), {}};
    std::vector<double> g(6, 7.0);
    const auto run = [&](const loss::policy_loss_options& options) {
        return loss::policy_loss(inputs, view(g.data(), 2, 3), {}, options);
    };
    // r = e^{x − old}: (e^0.1, 1, e^−0.5 | 1, e^−0.3). PPO ε = 0.2:
    //   A = 1:  ℓ = −r on all three (e^−0.5 ≈ 0.607 < 0.8, but −r > −0.8: the unclipped side is larger)
    //   A = −2: ℓ = 2·1 = 2, and max(2·0.741, 2·0.8) = 1.6 on the clipped side (gradient 0)
    const double r0 = std::exp(0.1), r2 = std::exp(-0.5), r4 = std::exp(-0.3);
    const double ppo_sum = -r0 - 1.0 - r2 + 2.0 + 1.6;
    SECTION("verl default actor: token-mean over 5 tokens, dual clip inactive here") {
        const auto result = run(loss::presets::verl_actor());
        CHECK(result.loss == Approx(ppo_sum / 5).epsilon(1e-14));
        const std::vector<double> expected = {-r0 / 5, -1.0 / 5, -r2 / 5, 2.0 / 5, 0.0, 0.0};
        CHECK(relative_error(g, expected) < 1e-14);
        CHECK(result.metrics.clip_fraction == Approx(1.0 / 5));
        CHECK(result.metrics.clip_fraction_lower == 0.0);
        CHECK(result.metrics.approx_kl == Approx((-0.1 + 0.0 + 0.5 + 0.0 + 0.3) / 5));
        CHECK(result.metrics.token_count == 5.0);
    }
    SECTION("verl with use_kl_loss: + 0.001 * low_var_kl, token-mean") {
        const auto result = run(loss::presets::verl_actor(true));
        // d = x − ref = (0, 0.1, 0 | −0.1, 0); k3 = e^−d + d − 1, ∂k3/∂x = 1 − e^−d.
        const double k1 = std::exp(-0.1) + 0.1 - 1, k3 = std::exp(0.1) - 0.1 - 1;
        CHECK(result.kl_loss == Approx((k1 + k3) / 5).epsilon(1e-13));
        CHECK(result.loss == Approx(ppo_sum / 5 + 0.001 * (k1 + k3) / 5).epsilon(1e-13));
        CHECK(g[1] == Approx(-1.0 / 5 + 0.001 * (1 - std::exp(-0.1)) / 5).epsilon(1e-13));
        CHECK(g[3] == Approx(2.0 / 5 + 0.001 * (1 - std::exp(0.1)) / 5).epsilon(1e-13));
    }
    SECTION("verl's dual clip engages at r > 3 for negative advantages") {
        std::vector<double> far_old = old;
        far_old[3] = x[3] - std::log(4.0);  // r = 4 > c = 3 at A = −2
        auto far = inputs;
        far.old_log_probs = view(far_old.data(), 2, 3);
        const auto result = loss::policy_loss(far, view(g.data(), 2, 3), {}, loss::presets::verl_actor());
        CHECK(result.loss == Approx((-r0 - 1.0 - r2 + 6.0 + 1.6) / 5).epsilon(1e-14));
        CHECK(g[3] == 0.0);
        CHECK(result.metrics.clip_fraction_lower == Approx(1.0 / 5));
        const auto openrlhf = loss::policy_loss(far, view(g.data(), 2, 3), {}, loss::presets::openrlhf_ppo());
        CHECK(openrlhf.loss == Approx((-r0 - 1.0 - r2 + 8.0 + 1.6) / 5).epsilon(1e-14));  // no dual clip: 2·4
        CHECK(g[3] == Approx(8.0 / 5));
    }
    SECTION("OpenRLHF ppo: as verl here (no dual clip needed)") {
        CHECK(run(loss::presets::openrlhf_ppo()).loss == Approx(ppo_sum / 5).epsilon(1e-14));
    }
    SECTION("TRL grpo: per-sequence token mean, then the mean over both rows") {
        using loss::presets::trl_loss_type;
        const auto result = run(loss::presets::trl(trl_loss_type::grpo));
        CHECK(result.loss == Approx(((-r0 - 1.0 - r2) / 3 + (2.0 + 1.6) / 2) / 2).epsilon(1e-14));
        CHECK(g[0] == Approx(-r0 / 6));
        CHECK(g[3] == Approx(2.0 / 4));
    }
    SECTION("TRL bnpo, dr_grpo, dapo") {
        using loss::presets::trl_loss_type;
        CHECK(run(loss::presets::trl(trl_loss_type::bnpo)).loss == Approx(ppo_sum / 5).epsilon(1e-14));
        CHECK(run(loss::presets::trl(trl_loss_type::dr_grpo, 4.0)).loss == Approx(ppo_sum / (2 * 4)).epsilon(1e-14));
        CHECK(g[0] == Approx(-r0 / 8));
        auto dapo = loss::presets::trl(trl_loss_type::dapo);
        dapo.aggregation.global_token_count = 10.0;  // num_items_in_batch over 2 processes
        dapo.aggregation.data_parallel_size = 2.0;
        CHECK(run(dapo).loss == Approx(ppo_sum / 5).epsilon(1e-14));
    }
    SECTION("TRL cispo: -min(r, 5)·A·logπ, token-mean") {
        const auto result = run(loss::presets::trl(loss::presets::trl_loss_type::cispo));
        // row 1: −r·x; row 2: 2·r·x.
        const double sum = r0 * 1.0 + 1.0 * 0.5 + r2 * 2.0 + 2.0 * 1.0 * -0.3 + 2.0 * r4 * -1.2;
        CHECK(result.loss == Approx(sum / 5).epsilon(1e-14));
        const std::vector<double> expected = {-r0 / 5, -1.0 / 5, -r2 / 5, 2.0 / 5, 2.0 * r4 / 5, 0.0};
        CHECK(relative_error(g, expected) < 1e-14);
    }
    SECTION("TRL sapo: -A·σ(τ(r−1))·4/τ, τ = 1 (A > 0), 1.05 (A < 0), seq-mean-token-mean") {
        const auto sigma = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
        const double row1 = -(sigma(r0 - 1) + sigma(0.0) + sigma(r2 - 1)) * 4.0 / 3;
        const double row2 = 2.0 * (sigma(0.0) + sigma(1.05 * (r4 - 1))) * 4.0 / 1.05 / 2;
        const auto result = run(loss::presets::trl(loss::presets::trl_loss_type::sapo));
        CHECK(result.loss == Approx((row1 + row2) / 2).epsilon(1e-14));
        // ∂ℓ/∂x = −A·4σ(1−σ)·r, weight 1/(2·n_i).
        CHECK(g[0] == Approx(-4 * sigma(r0 - 1) * (1 - sigma(r0 - 1)) * r0 / 6).epsilon(1e-13));
    }
}

TEST_CASE("policy_loss of an all-masked batch is 0 with a zero gradient, whatever the padding holds",
          "[loss][policy_loss][degenerate]") {
    const index_type rows = 3, cols = 21;
    auto d = make_data(rows, cols, 61, false);
    for (auto* values : {&d.x, &d.old, &d.ref, &d.advantages})
        std::fill(values->begin(), values->end(), std::numeric_limits<double>::quiet_NaN());
    std::fill(d.mask.begin(), d.mask.end(), 0.0);
    for (const auto surrogate : all_surrogates)
        for (const auto aggregation : all_aggregations) {
            auto options = options_for(surrogate, aggregation, loss::kl_estimator::k3, false);
            loss::policy_inputs<double> inputs{
                view(d.x.data(), rows, cols),    view(d.old.data(), rows, cols), view(d.advantages.data(), rows, cols),
                view(d.mask.data(), rows, cols), view(d.ref.data(), rows, cols), view(d.entropies.data(), rows, cols)};
            std::vector<double> gradient(rows * cols, 9.0);
            const auto result = loss::policy_loss(inputs, view(gradient.data(), rows, cols), {}, options);
            CHECK(result.loss == 0.0);
            CHECK(max_abs(gradient) == 0.0);
            CHECK(result.metrics.clip_fraction == 0.0);
            CHECK(result.metrics.approx_kl == 0.0);
        }
}

TEST_CASE("policy_loss over micro-batches with global denominators adds up to the whole batch",
          "[loss][policy_loss][micro_batch]") {
    const index_type rows = 8, cols = 23, micro = 2;
    const auto d = make_data(rows, cols, 71, true);
    double tokens = 0, sequences = 0;
    for (index_type i = 0; i < rows; ++i) {
        double n = 0;
        for (index_type t = 0; t < cols; ++t) n += d.mask[i * cols + t];
        tokens += n;
        sequences += n > 0 ? 1 : 0;
    }
    for (const auto aggregation : {aggregation_mode::token_mean, aggregation_mode::seq_mean_token_mean,
                                   aggregation_mode::seq_mean_token_sum_norm}) {
        auto options = options_for(surrogate_mode::ppo_clip, aggregation, loss::kl_estimator::k3, true);
        const auto inputs_of = [&](index_type begin, index_type count) {
            return loss::policy_inputs<double>{
                view(d.x.data() + begin * cols, count, cols),   view(d.old.data() + begin * cols, count, cols),
                view(d.per_sample.data() + begin, count, 1),    view(d.mask.data() + begin * cols, count, cols),
                view(d.ref.data() + begin * cols, count, cols), view(d.entropies.data() + begin * cols, count, cols)};
        };
        std::vector<double> whole_gradient(rows * cols), gradient(rows * cols);
        const double whole =
            loss::policy_loss(inputs_of(0, rows), view(whole_gradient.data(), rows, cols), {}, options).loss;
        options.aggregation.global_token_count = tokens;
        options.aggregation.global_sequence_count = sequences;
        double sum = 0;
        for (index_type begin = 0; begin < rows; begin += micro)
            sum += loss::policy_loss(inputs_of(begin, micro), view(gradient.data() + begin * cols, micro, cols), {},
                                     options)
                       .loss;
        CHECK(sum == Approx(whole).epsilon(1e-13));
        CHECK(relative_error(gradient, whole_gradient) < 1e-14);
    }
}

TEMPLATE_TEST_CASE("policy_loss is bitwise identical for 1 and 2 threads", "[loss][policy_loss][threads]", float,
                   Eigen::bfloat16) {
    const index_type rows = 200, cols = 77;
    const auto d = make_data(rows, cols, 81, false);
    test_matrix<TestType> x(rows, cols, d.x), old(rows, cols, d.old), advantages(rows, cols, d.advantages),
        mask(rows, cols, d.mask), ref(rows, cols, d.ref), entropies(rows, cols, d.entropies);
    loss::policy_inputs<TestType> inputs{x.view, old.view, advantages.view, mask.view, ref.view, entropies.view};
    for (const auto surrogate : {surrogate_mode::ppo_clip, surrogate_mode::gmpo}) {
        std::vector<double> losses;
        std::vector<std::vector<TestType>> gradients;
        for (int threads : {1, 2}) {
            auto options = options_for(surrogate, aggregation_mode::token_mean, loss::kl_estimator::k3, false);
            options.threads = threads;
            test_matrix<TestType> gradient(rows, cols);
            losses.push_back(loss::policy_loss(inputs, gradient.view, {}, options).loss);
            gradients.push_back(gradient.storage);
        }
        CHECK(std::memcmp(&losses[0], &losses[1], sizeof(double)) == 0);
        CHECK(std::memcmp(gradients[0].data(), gradients[1].data(), gradients[0].size() * sizeof(TestType)) == 0);
    }
}

TEST_CASE("policy_loss writes a large aligned gradient with streaming stores, bit for bit the same",
          "[loss][policy_loss]") {
    // 64 × 16384 floats (4 MiB): past the streaming threshold when the rows are 64-byte aligned.
    const index_type rows = 64, cols = 16384;
    const auto d = make_data(rows, cols, 91, true);
    using aligned = std::vector<float, Eigen::aligned_allocator<float>>;
    const auto to_float = [](const std::vector<double>& values) { return aligned(values.begin(), values.end()); };
    const aligned x = to_float(d.x), old = to_float(d.old), ref = to_float(d.ref), mask = to_float(d.mask),
                  advantages = to_float(d.per_sample);
    loss::policy_inputs<float> inputs{view(x.data(), rows, cols),       view(old.data(), rows, cols),
                                      view(advantages.data(), rows, 1), view(mask.data(), rows, cols),
                                      view(ref.data(), rows, cols),     {}};
    auto options = loss::presets::verl_actor(true);
    // 64-byte aligned by hand (Eigen's allocator aligns to 16 bytes only in the SSE2 baseline build).
    std::vector<float> streamed_storage(static_cast<std::size_t>(rows * cols) + 32, 5.0f),
        plain(static_cast<std::size_t>(rows * cols) + 16, 5.0f);
    const auto misalignment = reinterpret_cast<std::uintptr_t>(streamed_storage.data()) % 64;
    float* streamed = streamed_storage.data() + (misalignment == 0 ? 0 : (64 - misalignment) / sizeof(float));
    REQUIRE(reinterpret_cast<std::uintptr_t>(streamed) % 64 == 0);
    const auto a = loss::policy_loss(inputs, view(streamed, rows, cols), {}, options);
    const auto b =
        loss::policy_loss(inputs, view(plain.data() + 1, rows, cols), {}, options);  // unaligned: ordinary stores
    CHECK(a.loss == b.loss);
    CHECK(std::memcmp(streamed, plain.data() + 1, static_cast<std::size_t>(rows * cols) * sizeof(float)) == 0);
    CHECK(streamed[rows * cols] == 5.0f);
    CHECK(max_abs(std::vector<double>(streamed, streamed + 1000)) > 0);
}

TEMPLATE_TEST_CASE("policy_loss without KL: the fused steps over tails, masks and empty rows", "[loss][policy_loss]",
                   float, double, Eigen::bfloat16) {
    // Without KL, ppo_clip, sapo_sequence, vespo, reinforce, dppo_tv, kl_cov and clip_cov compute the
    // surrogate inside the step: the reference and finite differences (for kl_cov and clip_cov, which
    // need a selection, tests/loss/corrections.cpp), then bit for bit the chunk-buffer path (use_kl_loss
    // with β = 0 and k1 adds 0·1 to each derivative, which changes no value) and any thread count.
    std::uint32_t seed = 1300;
    for (const index_type cols : {1, 15, 16, 17, 33, 255, 256, 257, 300}) {
        for (const auto surrogate :
             {surrogate_mode::ppo_clip, surrogate_mode::sapo_sequence, surrogate_mode::vespo, surrogate_mode::reinforce,
              surrogate_mode::dppo_tv, surrogate_mode::kl_cov, surrogate_mode::clip_cov}) {
            for (const bool entropy : {false, true}) {
                const auto aggregation = all_aggregations[seed % all_aggregations.size()];
                auto options = options_for(surrogate, aggregation, loss::kl_estimator::k1, false);
                options.use_kl_loss = false;
                options.entropy_coefficient = entropy ? 0.01 : 0.0;
                // vespo's defaults overflow φ on rows this long; a λ that keeps it finite.
                options.surrogate.vespo_lambda_positive = options.surrogate.vespo_lambda_negative = 1e-4;
                if (surrogate == surrogate_mode::dppo_tv) options.surrogate.dual_clip = 1.3;  // truncates some ratios
                const bool covariance = surrogate == surrogate_mode::kl_cov || surrogate == surrogate_mode::clip_cov;
                const index_type rows = 5;  // row 1 is empty (make_data)
                const bool per_sample = (seed & 1) != 0;
                if (!covariance) check_policy_loss<TestType>(options, rows, cols, cols % 2, per_sample, seed);

                INFO("surrogate " << static_cast<int>(surrogate) << " cols " << cols << " entropy " << entropy);
                const auto d = make_data(rows, cols, seed, per_sample);
                test_matrix<TestType> x(rows, cols, d.x, 1), old(rows, cols, d.old, 0), mask(rows, cols, d.mask, 0),
                    ref(rows, cols, d.ref, 0), entropies(rows, cols, d.entropies, 0);
                test_matrix<TestType> advantages = per_sample ? test_matrix<TestType>(rows, 1, d.per_sample, 0)
                                                              : test_matrix<TestType>(rows, cols, d.advantages, 0);
                loss::policy_inputs<TestType> inputs{x.view,    old.view, advantages.view,
                                                     mask.view, ref.view, entropies.view};
                std::vector<double> chosen(static_cast<std::size_t>(rows * cols));
                for (std::size_t k = 0; k < chosen.size(); ++k) chosen[k] = k % 5 == 2 ? 1.0 : 0.0;
                test_matrix<TestType> selection(rows, cols, chosen, 1);
                if (covariance) inputs.selection = selection.view;
                const auto run = [&](const loss::policy_loss_options& o, std::vector<double>& g) {
                    test_matrix<TestType> gradient(rows, cols, 0);
                    const auto result = loss::policy_loss(inputs, gradient.view, {}, o);
                    g = gradient.values();
                    return result;
                };
                std::vector<double> fused_gradient, buffered_gradient, threaded_gradient;
                const auto fused = run(options, fused_gradient);
                auto buffered_options = options;
                buffered_options.use_kl_loss = true;
                buffered_options.kl_coefficient = 0;
                const auto buffered = run(buffered_options, buffered_gradient);
                auto threaded_options = options;
                threaded_options.threads = 2;
                const auto threaded = run(threaded_options, threaded_gradient);
                CHECK(fused.policy_loss == buffered.policy_loss);
                CHECK(fused.entropy_loss == buffered.entropy_loss);
                CHECK(fused.metrics.clip_fraction == buffered.metrics.clip_fraction);
                CHECK(fused.metrics.clip_fraction_lower == buffered.metrics.clip_fraction_lower);
                CHECK(fused.metrics.approx_kl == buffered.metrics.approx_kl);
                CHECK(fused.metrics.token_count == buffered.metrics.token_count);
                CHECK(fused.sequence_count == buffered.sequence_count);
                CHECK(fused_gradient == buffered_gradient);
                CHECK(fused.loss == threaded.loss);
                CHECK(fused_gradient == threaded_gradient);
                CHECK(max_abs(fused_gradient) > 0);
                ++seed;
            }
        }
    }
}

TEST_CASE("policy_loss rejects bad input, naming the argument", "[loss][policy_loss][errors]") {
    std::vector<double> x(12, -1.0), mask(12, 1.0), advantages(3, 1.0), gradient(12);
    loss::policy_inputs<double> inputs{
        view(x.data(), 3, 4), view(x.data(), 3, 4), view(advantages.data(), 3, 1), view(mask.data(), 3, 4), {}, {}};
    loss::policy_loss_options options;
    options.use_kl_loss = true;
    require_error_naming([&] { loss::policy_loss(inputs, view(gradient.data(), 3, 4), {}, options); }, "ref_log_probs");
    options = {};
    options.entropy_coefficient = 0.01;
    require_error_naming([&] { loss::policy_loss(inputs, view(gradient.data(), 3, 4), {}, options); }, "entropies");
    require_error_naming([&] { loss::policy_loss(inputs, view(gradient.data(), 4, 3)); }, "log_probs_gradient");
    options = {};
    options.surrogate.dual_clip = 0.5;
    require_error_naming([&] { loss::policy_loss(inputs, view(gradient.data(), 3, 4), {}, options); }, "dual_clip");
    options = {};
    options.aggregation.mode = aggregation_mode::delta_l;
    options.aggregation.alpha = -1.0;
    require_error_naming([&] { loss::policy_loss(inputs, view(gradient.data(), 3, 4), {}, options); }, "alpha");
    mask[5] = 2.0;
    require_error_naming([&] { loss::policy_loss(inputs, view(gradient.data(), 3, 4)); }, "mask");
    options = {};
    options.aggregation.global_token_count = 12.0;  // no up-front pass: caught during the pass
    require_error_naming([&] { loss::policy_loss(inputs, view(gradient.data(), 3, 4), {}, options); }, "mask");
}
