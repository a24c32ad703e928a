// GDPO, SA-MRPO, BNPO, GEPO, SCRL and SPO against their reference formulas and
// the special cases the papers name.
#include "reference/advantage.hpp"
#include "support.hpp"

#include <normkit/advantage/bnpo.hpp>
#include <normkit/advantage/gepo.hpp>
#include <normkit/advantage/multi_reward.hpp>
#include <normkit/advantage/scrl.hpp>
#include <normkit/advantage/spo.hpp>

#include <random>

using namespace normkit;
using namespace normkit::advantage;
using namespace normkit::testing;

namespace {

gdpo_options weighted(const std::vector<double>& weights, gdpo_flavour flavour = gdpo_flavour::trl) {
    gdpo_options options;
    options.weights = weights;
    options.flavour = flavour;
    return options;
}

sa_mrpo_options saturation(double gamma, const std::vector<double>& weights, const std::vector<double>& lower,
                           const std::vector<double>& upper) {
    sa_mrpo_options options;
    options.gamma = gamma;
    options.weights = weights;
    options.lower = lower;
    options.upper = upper;
    return options;
}

using row_matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

std::vector<std::vector<double>> columns_of(const row_matrix& matrix) {
    std::vector<std::vector<double>> columns(static_cast<std::size_t>(matrix.cols()));
    for (Eigen::Index k = 0; k < matrix.cols(); ++k)
        for (Eigen::Index i = 0; i < matrix.rows(); ++i) columns[k].push_back(matrix(i, k));
    return columns;
}

row_matrix binary_matrix(Eigen::Index rows, Eigen::Index cols, std::uint32_t seed, int denominator = 2) {
    std::mt19937 generator(seed);
    row_matrix matrix(rows, cols);
    for (Eigen::Index i = 0; i < rows; ++i)
        for (Eigen::Index k = 0; k < cols; ++k) matrix(i, k) = generator() % denominator == 0 ? 1.0 : 0.0;
    return matrix;
}

}  // namespace

TEST_CASE("gdpo matches TRL's normalize_then_sum and verl's gdpo", "[advantage][gdpo]") {
    const double nan = reference::nan_value;
    for (index_type size : {2, 4, 16}) {
        const Eigen::Index n = size * 6;
        row_matrix rewards(n, 3);
        const auto values = random_values(static_cast<std::size_t>(n * 3), 20 + static_cast<std::uint32_t>(size));
        for (Eigen::Index i = 0; i < n; ++i)
            for (int k = 0; k < 3; ++k) rewards(i, k) = values[i * 3 + k];
        rewards.col(1) = binary_matrix(n, 1, 3);
        rewards(1, 0) = nan;                                  // one NaN column in a row
        rewards(2, 0) = rewards(2, 1) = rewards(2, 2) = nan;  // an unscorable row
        const std::vector<double> weights = {1.0, 0.5, 2.0};
        std::vector<double> out(static_cast<std::size_t>(n));
        INFO("G " << size);
        gdpo(rewards, contiguous_groups(size), out, weighted(weights));
        CHECK(relative_error(out, reference::trl_gdpo(columns_of(rewards), weights, static_cast<std::size_t>(size))) <
              1e-12);
        CHECK(out[2] == 0.0);

        row_matrix clean = rewards;
        clean(1, 0) = 0.3;
        clean.row(2).setConstant(0.7);
        std::vector<std::int64_t> lengths(static_cast<std::size_t>(n));
        std::vector<double> length_values(static_cast<std::size_t>(n));
        for (Eigen::Index i = 0; i < n; ++i) length_values[i] = static_cast<double>(lengths[i] = 1 + (i * 11) % 29);
        gdpo(clean, contiguous_groups(size), lengths, {}, out, weighted(weights, gdpo_flavour::verl));
        CHECK(relative_error(out, reference::verl_gdpo(columns_of(clean), weights, length_values,
                                                       reference::contiguous_ids(n, size))) < 1e-9);
        require_error_naming(
            [&] { gdpo(rewards, contiguous_groups(size), lengths, {}, out, weighted(weights, gdpo_flavour::verl)); },
            "NaN");
    }
}

TEST_CASE("the GDPO collapse example: summed GRPO cannot tell (1,0) from (1,1), GDPO doubles it", "[advantage][gdpo]") {
    row_matrix x(4, 2), y(4, 2);
    x << 1, 0, 0, 0, 0, 0, 0, 0;
    y << 1, 1, 0, 0, 0, 0, 0, 0;
    std::vector<double> summed_x = {1, 0, 0, 0}, summed_y = {2, 0, 0, 0};
    std::vector<double> grpo_x(4), grpo_y(4);
    group_normalize(summed_x, contiguous_groups(4), grpo_x);
    group_normalize(summed_y, contiguous_groups(4), grpo_y);
    for (int i = 0; i < 4; ++i) CHECK(grpo_x[i] == Approx(grpo_y[i]).epsilon(1e-4));  // σ + ε: identical up to ε
    // Before GDPO's batch whitening: per-reward group z-scores, summed.
    const std::vector<double> ones = {1, 1};
    std::vector<double> z(4), pre_x(4, 0), pre_y(4, 0);
    group_normalize_options trl_column;
    trl_column.eps = 1e-4;
    for (int k = 0; k < 2; ++k) {
        std::vector<double> column_x = {x(0, k), x(1, k), x(2, k), x(3, k)},
                            column_y = {y(0, k), y(1, k), y(2, k), y(3, k)};
        group_normalize(column_x, contiguous_groups(4), z, trl_column);
        for (int i = 0; i < 4; ++i) pre_x[i] += z[i];
        group_normalize(column_y, contiguous_groups(4), z, trl_column);
        for (int i = 0; i < 4; ++i) pre_y[i] += z[i];
    }
    for (int i = 0; i < 4; ++i) CHECK(pre_y[i] == Approx(2 * pre_x[i]));
    // And through gdpo itself on the two groups in one batch: the (1,1) sample outranks the (1,0) one.
    row_matrix both(8, 2);
    both << x, y;
    std::vector<double> out(8);
    gdpo(both, contiguous_groups(4), out, weighted(ones));
    CHECK(out[4] > out[0]);
    CHECK(out[5] < out[1]);
    // One reward: GDPO = GRPO followed by a batch z-score.
    row_matrix single(8, 1);
    single << 1, 0, 0, 1, 1, 1, 0, 1;
    const std::vector<double> one_weight = {1.0};
    gdpo(single, contiguous_groups(4), out, weighted(one_weight));
    std::vector<double> flat = {1, 0, 0, 1, 1, 1, 0, 1}, grpo(8);
    group_normalize(flat, contiguous_groups(4), grpo, trl_column);
    const double mean = reference::mean_of(grpo), std = std::sqrt(reference::variance_of(grpo, 1));
    for (int i = 0; i < 8; ++i) CHECK(out[i] == Approx((grpo[i] - mean) / (std + 1e-4)).epsilon(1e-12));
}

TEST_CASE("sa_mrpo: γ = 0 is GDPO; saturation discounts an objective by (1 − s)^γ", "[advantage][sa_mrpo]") {
    const Eigen::Index n = 32;
    row_matrix rewards(n, 2);
    rewards.col(0) = binary_matrix(n, 1, 5, 4);  // rarely solved: low saturation
    rewards.col(1) = binary_matrix(n, 1, 6, 1);  // always 1
    rewards(0, 1) = 0;
    const std::vector<double> weights = {1.0, 1.0}, lower = {0, 0}, upper = {1, 1};
    std::vector<double> sa(n), plain(n);
    sa_mrpo(rewards, contiguous_groups(8), sa, {}, saturation(0.0, weights, lower, upper));
    gdpo(rewards, contiguous_groups(8), plain, weighted(weights));
    CHECK(relative_error(sa, plain) < 1e-15);
    std::vector<double> effective(2);
    sa_mrpo(rewards, contiguous_groups(8), sa, effective, saturation(0.5, weights, lower, upper));
    double s0 = 0, s1 = 0;
    for (Eigen::Index i = 0; i < n; ++i) {
        s0 += rewards(i, 0) / n;
        s1 += rewards(i, 1) / n;
    }
    CHECK(effective[0] == Approx(std::pow(1 - s0, 0.5)));
    CHECK(effective[1] == Approx(std::pow(1 - s1, 0.5)));
    gdpo(rewards, contiguous_groups(8), plain, weighted(effective));
    CHECK(relative_error(sa, plain) < 1e-15);
    require_error_naming(
        [&] { sa_mrpo(rewards, contiguous_groups(8), sa, {}, saturation(0.5, weights, upper, lower)); },
        "must exceed lower");
    const std::vector<double> short_bounds = {0};
    require_error_naming(
        [&] { sa_mrpo(rewards, contiguous_groups(8), sa, {}, saturation(0.5, weights, short_bounds, upper)); },
        "bounds have lengths 1 and 2");
}

TEST_CASE("bnpo matches its reference and reduces to REINFORCE and to GRPO × π/8", "[advantage][bnpo]") {
    for (index_type size : {2, 5, 16}) {
        const std::size_t n = static_cast<std::size_t>(size * 9);
        std::mt19937 generator(static_cast<std::uint32_t>(size));
        std::vector<double> rewards(n);
        // Groups with different success rates, so the Beta fit is non-trivial.
        for (std::size_t i = 0; i < n; ++i) rewards[i] = generator() % 10 < (i / size) % 10 ? 1.0 : 0.0;
        const auto ids = reference::contiguous_ids(n, static_cast<std::size_t>(size));
        std::vector<double> out(n);
        const auto fit = bnpo(rewards, contiguous_groups(size), out);
        double alpha = 0, beta = 0;
        const auto expected = reference::bnpo(rewards, ids, &alpha, &beta);
        INFO("G " << size << " alpha " << alpha << " beta " << beta);
        CHECK(fit.alpha == Approx(alpha).epsilon(1e-12));
        CHECK(fit.beta == Approx(beta).epsilon(1e-12));
        CHECK(relative_error(out, expected) < 1e-10);
        // α = β = 1: REINFORCE with the group-mean baseline.
        bnpo_options uniform;
        uniform.alpha = 1.0;
        uniform.beta = 1.0;
        bnpo(rewards, contiguous_groups(size), out, uniform);
        std::vector<double> baseline(n);
        group_normalize_options mean_only;
        mean_only.scale = scale_mode::none;
        group_normalize(rewards, contiguous_groups(size), baseline, mean_only);
        CHECK(relative_error(out, baseline, 1.0) < 1e-14);
        // α = β = 3/2: population-std GRPO times π/8 (unanimous groups give 0 in both).
        bnpo_options arcsine;
        arcsine.alpha = 1.5;
        arcsine.beta = 1.5;
        bnpo(rewards, contiguous_groups(size), out, arcsine);
        group_normalize_options population;
        population.ddof = 0;
        population.placement = eps_mode::std_floor_skip;
        population.eps = 1e-300;
        std::vector<double> grpo(n);
        group_normalize(rewards, contiguous_groups(size), grpo, population);
        for (auto& value : grpo) value *= std::acos(-1.0) / 8;
        CHECK(relative_error(out, grpo, 1.0) < 1e-12);
    }
    // Non-binary rewards are rescaled to [0, 1] first; constant rewards give 0.
    const auto real = random_values(40, 3, 5.0, 2.0);
    std::vector<double> out(40);
    bnpo(real, contiguous_groups(8), out);
    CHECK(relative_error(out, reference::bnpo(real, reference::contiguous_ids(40, 8))) < 1e-10);
    const std::vector<double> constant(8, 3.0);
    std::vector<double> zeros(8, 1.0);
    const auto fit = bnpo(constant, contiguous_groups(4), zeros);
    for (double value : zeros) CHECK(value == 0.0);
    CHECK(fit.alpha == 1.0);
    // Decomposition: the mean of the per-column advantages.
    row_matrix columns(40, 2);
    for (int i = 0; i < 40; ++i) {
        columns(i, 0) = real[i];
        columns(i, 1) = (i % 3 == 0) ? 1.0 : 0.0;
    }
    std::vector<double> decomposed(40);
    bnpo_decomposed(columns, contiguous_groups(8), decomposed);
    const auto first = reference::bnpo(columns_of(columns)[0], reference::contiguous_ids(40, 8));
    const auto second = reference::bnpo(columns_of(columns)[1], reference::contiguous_ids(40, 8));
    for (int i = 0; i < 40; ++i) CHECK(decomposed[i] == Approx((first[i] + second[i]) / 2).margin(1e-10));
    bnpo_options alpha_only;
    alpha_only.alpha = 1.0;
    require_error_naming([&] { bnpo(real, contiguous_groups(8), out, alpha_only); }, "both alpha and beta");
    const std::vector<double> with_nan = {1.0, reference::nan_value};
    std::vector<double> two(2);
    require_error_naming([&] { bnpo(with_nan, contiguous_groups(2), two); }, "rewards[1]");
}

TEST_CASE("gepo: group entropy, EMA thresholds kept between steps, asymmetric attenuation", "[advantage][gepo]") {
    const index_type groups_count = 16, size = 4, T = 13;
    const index_type n = groups_count * size;
    gepo_state state;
    reference::gepo_thresholds reference_state;
    std::mt19937 generator(9);
    for (int step = 0; step < 4; ++step) {
        const auto advantages = random_values(static_cast<std::size_t>(n), 40 + step);
        row_matrix log_probs(n, T);
        row_matrix mask(n, T);  // the mask of the log-probs has their storage type
        std::vector<double> mask_values(static_cast<std::size_t>(n * T)), log_values(static_cast<std::size_t>(n * T));
        for (index_type i = 0; i < n; ++i) {
            const index_type length =
                (i / size == 5) ? 0 : 1 + static_cast<index_type>(generator() % T);  // group 5: no tokens
            const double sharpness = 0.2 + 0.3 * static_cast<double>((i / size) % 7);
            for (index_type t = 0; t < T; ++t) {
                log_probs(i, t) = -sharpness * (1.0 + static_cast<double>(generator() % 100) / 100.0);
                mask(i, t) = t < length ? 1 : 0;
                mask_values[i * T + t] = mask(i, t);
                log_values[i * T + t] = log_probs(i, t);
            }
        }
        std::vector<double> out(static_cast<std::size_t>(n)), entropy(static_cast<std::size_t>(groups_count));
        gepo(advantages, contiguous_groups(size), log_probs, mask, state, out, entropy);
        const auto expected = reference::gepo(advantages, log_values, mask_values, static_cast<std::size_t>(T),
                                              reference::contiguous_ids(n, size), reference_state);
        INFO("step " << step);
        CHECK(state.low == Approx(reference_state.low).epsilon(1e-12));
        CHECK(state.high == Approx(reference_state.high).epsilon(1e-12));
        CHECK(relative_error(out, expected) < 1e-14);
        CHECK(entropy[5] == 0.0);
        int shaped = 0;
        for (index_type i = 0; i < n; ++i) {
            if (out[i] != advantages[i]) {
                ++shaped;
                const double ratio = out[i] / advantages[i];
                CHECK((ratio == Approx(0.5) || ratio == Approx(0.2)));
                CHECK((ratio == Approx(0.5)) == (advantages[i] > 0));
            }
            if (i / size == 5) CHECK(out[i] == advantages[i]);
        }
        CHECK(shaped > 0);
    }
    // In place, and bad parameters.
    const std::vector<double> advantages = {1, -1};
    row_matrix log_probs = row_matrix::Constant(2, 3, -1.0);
    row_matrix mask = row_matrix::Ones(2, 3);
    std::vector<double> out(2);
    gepo_options bad;
    bad.gamma = 0;
    require_error_naming([&] { gepo(advantages, contiguous_groups(1), log_probs, mask, state, out, {}, bad); },
                         "gamma");
    row_matrix short_log = row_matrix::Constant(1, 3, -1.0);
    require_error_naming([&] { gepo(advantages, contiguous_groups(1), short_log, mask, state, out); },
                         "log_probs has 1 rows");
}

TEST_CASE("scrl: progress-aware correction and per-position population z-scores", "[advantage][scrl]") {
    // The paper's example: (1,1,0,1) is corrected to (1,1,0,0).
    row_matrix example(2, 4), out(2, 4);
    example << 1, 1, 0, 1, 1, 0, 0, 0;
    scrl(example, contiguous_groups(2), out);
    // Corrected rows (1,1,0,0) and (1,0,0,0): only position 2 (index 1) differs, ±1; others degenerate → 0.
    CHECK(out(0, 1) == 1.0);
    CHECK(out(1, 1) == -1.0);
    CHECK(out(0, 3) == 0.0);
    CHECK(out(0, 0) == 0.0);
    for (index_type size : {1, 3, 8, 16}) {
        const index_type n = size * 5, K = 4;
        row_matrix rewards = binary_matrix(n, K, 70 + static_cast<std::uint32_t>(size), 3);
        for (index_type i = 0; i < n; i += 2) rewards(i, 0) = 1;  // enough progress to be interesting
        row_matrix result(n, K);
        scrl(rewards, contiguous_groups(size), result);
        std::vector<double> flat(rewards.data(), rewards.data() + n * K), got(result.data(), result.data() + n * K);
        CHECK(relative_error(got,
                             reference::scrl(flat, static_cast<std::size_t>(n), K, reference::contiguous_ids(n, size)),
                             1.0) < 1e-14);
    }
    row_matrix half(2, 1);
    half << 0.5, 1;
    row_matrix small(2, 1);
    require_error_naming([&] { scrl(half, contiguous_groups(2), small); },
                         "subproblem_rewards[0][0] = 0.5 is not binary");
}

TEST_CASE("spo tracker: offline init, advantage r − p̂ then batch z-score, KL-adaptive forgetting, priorities",
          "[advantage][spo]") {
    spo_tracker tracker;
    const std::vector<double> offline = {1, 0, 1, 1, 0, 1, 1, 1};  // Σr = 6, n₀ = 8
    tracker.initialize(7, offline);
    const double strength = 1 / (1 - 0.875);
    CHECK(tracker.state(7).alpha == Approx(strength * 6.5 / 9));
    CHECK(tracker.state(7).beta == Approx(strength * 2.5 / 9));
    CHECK(tracker.value(7) == Approx(6.5 / 9));
    CHECK(tracker.value(99) == 0.5);  // never seen: Beta(0.5, 0.5)
    const std::vector<std::int64_t> prompts = {7, 99, 7, 99};
    const std::vector<double> rewards = {1, 0, 0, 1};
    std::vector<double> out(4);
    tracker.advantages(prompts, rewards, out);
    std::vector<double> raw = {1 - 6.5 / 9, -0.5, -6.5 / 9, 0.5};
    const double mean = reference::mean_of(raw), std = std::sqrt(reference::variance_of(raw, 1));
    for (int i = 0; i < 4; ++i) CHECK(out[i] == Approx((raw[i] - mean) / (std + 1e-8)).epsilon(1e-12));
    // ρ = 2^(−D/0.06) clamped to [0.875, 0.96].
    CHECK(tracker.forgetting(0.0) == 0.96);
    CHECK(tracker.forgetting(1.0) == 0.875);
    CHECK(tracker.forgetting(0.01) == Approx(std::exp2(-0.01 / 0.06)));
    const auto before = tracker.state(7);
    tracker.update(7, 1.0, 0.01);
    const double rho = std::exp2(-0.01 / 0.06);
    CHECK(tracker.state(7).alpha == Approx(rho * before.alpha + 1));
    CHECK(tracker.state(7).beta == Approx(rho * before.beta));
    std::vector<double> weights(2);
    const std::vector<std::int64_t> two = {7, 99};
    tracker.sampling_weights(two, weights);
    const double p = tracker.value(7);
    CHECK(weights[0] == Approx(std::sqrt(p * (1 - p)) + 0.05));
    CHECK(weights[1] == Approx(0.5 + 0.05));
    spo_options constant;
    constant.constant_rho = true;
    CHECK(spo_tracker(constant).forgetting(0.0) == 0.875);
    // One sample: its centred value, 0.
    const std::vector<std::int64_t> one_prompt = {7};
    const std::vector<double> one_reward = {1.0};
    std::vector<double> one(1, 5.0);
    tracker.advantages(one_prompt, one_reward, one);
    CHECK(one[0] == 0.0);
    require_error_naming([&] { tracker.update(7, 1.5, 0.0); }, "reward[0] = 1.5 is outside [0, 1]");
    spo_options bad;
    bad.rho_min = 0.99;
    require_error_naming([&] { spo_tracker{bad}; }, "rho_min");
    require_error_naming([&] { tracker.advantages(two, rewards, out); }, "prompt_ids has length 2");
}
