// Any thread count gives the same bits (docs/api.md §5): the multi-reward
// estimators (gdpo in both flavours, sa_mrpo), every estimator of estimators.hpp
// (grpo, dr_grpo, rloo, opo, gpg, gapo, pass_at_k, dapo_filter, w_reinforce, dna_train) and group_normalize under the framework
// presets; the token-level estimators of returns.hpp (reinforce_pp, reinforce_pp_baseline, remax) and
// masked_whiten on [n × 23] token matrices; bnpo, bnpo_decomposed, gepo and scrl; at 1, 2, 3, 4 and 7
// threads. Contiguous batches of 37 groups of 7 (two blocks of 16 groups and a partial one on the
// contiguous fast path; 259 rows, more than one reduction chunk) and ragged ids (odd sizes,
// shuffled), float and double rewards.
#include "support.hpp"

#include <normkit/advantage/bnpo.hpp>
#include <normkit/advantage/estimators.hpp>
#include <normkit/advantage/gepo.hpp>
#include <normkit/advantage/group_normalize.hpp>
#include <normkit/advantage/multi_reward.hpp>
#include <normkit/advantage/presets.hpp>
#include <normkit/advantage/returns.hpp>
#include <normkit/advantage/scrl.hpp>
#include <normkit/advantage/whiten.hpp>

#include <cstring>
#include <random>

using namespace normkit;
using namespace normkit::advantage;
using namespace normkit::testing;

namespace {

const int thread_counts[] = {2, 3, 4, 7};

struct batch {
    index_type n = 0;
    std::vector<std::int64_t> ids;  // empty: contiguous groups of group_size
    index_type group_size = 0;
    std::vector<std::int64_t> lengths;

    groups grouping() const { return ids.empty() ? contiguous_groups(group_size) : group_ids(ids); }
};

batch contiguous_batch() {
    batch b;
    b.group_size = 7;
    b.n = 7 * 37;
    for (index_type i = 0; i < b.n; ++i) b.lengths.push_back(1 + (i * 5) % 29);
    return b;
}

batch ragged_batch() {
    batch b;
    std::mt19937 generator(3);
    for (std::int64_t g = 0; g < 23; ++g) {
        const std::int64_t size = g == 4 ? 1 : 1 + static_cast<std::int64_t>(generator() % 19);
        for (std::int64_t j = 0; j < size; ++j) b.ids.push_back(11 + 7 * g);
    }
    std::shuffle(b.ids.begin(), b.ids.end(), generator);
    b.n = static_cast<index_type>(b.ids.size());
    for (index_type i = 0; i < b.n; ++i) b.lengths.push_back((i * 5) % 29);  // some empty responses
    return b;
}

// run(threads) writes one vector of T per output; at every thread count the same bits as at 1.
template <class T, class Run>
void check_thread_counts(Run&& run) {
    const std::vector<std::vector<T>> one = run(1);
    for (int threads : thread_counts) {
        INFO("threads " << threads);
        const auto many = run(threads);
        REQUIRE(many.size() == one.size());
        for (std::size_t k = 0; k < one.size(); ++k) {
            INFO("output " << k);
            REQUIRE(many[k].size() == one[k].size());
            CHECK(std::memcmp(many[k].data(), one[k].data(), one[k].size() * sizeof(T)) == 0);
        }
    }
}

template <class T>
void check_batch(const batch& b) {
    const index_type columns = 3;
    const auto reward_values = random_values(static_cast<std::size_t>(b.n * columns), 41, 0.4, 1.0);
    std::vector<T> table = to_storage<T>(reward_values), rewards(static_cast<std::size_t>(b.n));
    for (index_type i = 0; i < b.n; ++i) rewards[i] = table[i * columns];
    const auto reward_columns = view(static_cast<const T*>(table.data()), b.n, columns);
    const std::vector<double> weights = {1.0, 0.5, 2.0}, lower = {-2.0, -1.0, -3.0}, upper = {3.0, 2.5, 4.0};
    check_thread_counts<T>([&](int threads) {
        std::vector<std::vector<T>> out;
        const auto next = [&]() -> std::vector<T>& { return out.emplace_back(static_cast<std::size_t>(b.n), T(-99)); };
        gdpo_options trl_flavour;
        trl_flavour.weights = weights;
        trl_flavour.threads = threads;
        gdpo(reward_columns, b.grouping(), next(), trl_flavour);
        auto verl_flavour = trl_flavour;
        verl_flavour.flavour = gdpo_flavour::verl;
        gdpo(reward_columns, b.grouping(), b.lengths, {}, next(), verl_flavour);
        sa_mrpo_options saturation;
        saturation.weights = weights;
        saturation.lower = lower;
        saturation.upper = upper;
        saturation.threads = threads;
        std::vector<double> effective(3);
        sa_mrpo(reward_columns, b.grouping(), next(), effective, saturation);
        out.push_back(to_storage<T>(effective));

        grpo_options grpo_settings;
        grpo_settings.threads = threads;
        grpo(rewards, b.grouping(), next(), grpo_settings);
        grpo_settings.scale_by_std = false;
        grpo_settings.singleton = singleton_policy::zero;
        grpo(rewards, b.grouping(), next(), grpo_settings);
        dr_grpo_options dr;
        dr.threads = threads;
        dr_grpo(rewards, b.grouping(), next(), dr);
        rloo_options leave_one_out;
        leave_one_out.threads = threads;
        rloo(rewards, b.grouping(), next(), leave_one_out);
        opo_options weighted;
        weighted.threads = threads;
        opo(rewards, b.grouping(), b.lengths, next(), weighted);
        gpg_options rescaled;
        rescaled.threads = threads;
        gpg(rewards, b.grouping(), next(), rescaled);
        gapo_options window;
        window.threads = threads;
        gapo(rewards, b.grouping(), next(), window);
        if (b.ids.empty()) {  // pass@k: the ragged batch has a group of one, an error
            pass_at_k_options best;
            best.threads = threads;
            pass_at_k(rewards, b.grouping(), next(), best);
        }
        dapo_filter_options filter;
        filter.threads = threads;
        std::vector<std::uint8_t> keep(static_cast<std::size_t>(b.n));
        const index_type kept = dapo_filter(rewards, b.grouping(), keep, filter);
        out.emplace_back(keep.begin(), keep.end());
        out.push_back({static_cast<T>(kept)});
        w_reinforce_options weighted_positive;
        weighted_positive.threads = threads;
        w_reinforce(rewards, next(), weighted_positive);
        dna_train_options pairs;
        pairs.group_size = 3;
        pairs.threads = threads;
        const index_type paired = b.n - b.n % 6;
        dna_train(vector_view<const T>(rewards.data(), paired), vector_view<T>(next().data(), paired), pairs);

        for (auto options : {presets::verl_grpo(), presets::verl_rloo(), presets::trl(), presets::trl_async(),
                             presets::openrlhf(), presets::trl_rloo()}) {
            options.threads = threads;
            // OpenRLHF asserts on a group of one (singleton_policy::error); the ragged batch has one.
            if (options.singleton == singleton_policy::error) options.singleton = singleton_policy::zero;
            group_normalize(rewards, b.grouping(), next(), options);
        }
        return out;
    });
}

// The token-level estimators and masked_whiten: token matrices [n × 23] whose row i is valid on its
// first lengths[i] tokens but for every fifth (tool observations); bnpo, gepo, scrl on the groups.
template <class T>
void check_token_batch(const batch& b) {
    const index_type cols = 23, K = 5;
    const auto n = static_cast<std::size_t>(b.n);
    std::vector<double> mask_values(n * cols, 0.0);
    for (index_type i = 0; i < b.n; ++i)
        for (index_type t = 0; t < std::min<index_type>(b.lengths[i], cols); ++t)
            mask_values[i * cols + t] = (i + t) % 5 == 4 ? 0.0 : 1.0;
    const std::vector<T> token_rewards = to_storage<T>(random_values(n * cols, 43, 0.1, 1.0)),
                         mask = to_storage<T>(mask_values),
                         log_probs = to_storage<T>(random_values(n * cols, 44, -1, 0.4)),
                         baselines = to_storage<T>(random_values(n, 45)), rewards = to_storage<T>(random_values(n, 46));
    std::vector<std::uint8_t> token_mask(mask_values.begin(), mask_values.end());
    std::vector<T> subproblems(n * K), columns(n * 3);
    std::mt19937 generator(47);
    for (auto& r : subproblems) r = T(generator() % 3 != 0 ? 1 : 0);
    for (std::size_t k = 0; k < columns.size(); ++k) columns[k] = T(k % 3 == 2 ? generator() % 2 : generator() % 7);
    const auto tokens = [&](const std::vector<T>& x) { return view(x.data(), b.n, cols); };
    check_thread_counts<T>([&](int threads) {
        std::vector<std::vector<T>> out;
        out.reserve(64);  // the references next() hands out stay valid
        const auto next = [&](std::size_t size) -> std::vector<T>& { return out.emplace_back(size, T(-99)); };
        reinforce_pp_options returns;
        returns.gamma = 0.95;
        returns.threads = threads;
        for (auto rule : {return_mask_rule::carry, return_mask_rule::reset}) {
            returns.mask_rule = rule;
            auto& advantages = next(n * cols);
            auto& stored = next(n * cols);
            reinforce_pp(tokens(token_rewards), tokens(mask), view(advantages.data(), b.n, cols),
                         view(stored.data(), b.n, cols), returns);
        }
        remax_options greedy;
        greedy.threads = threads;
        auto& remax_advantages = next(n * cols);
        auto& remax_returns = next(n * cols);
        remax(tokens(token_rewards), tokens(mask), baselines, view(remax_advantages.data(), b.n, cols),
              view(remax_returns.data(), b.n, cols), greedy);
        reinforce_pp_baseline_options baseline;
        baseline.threads = threads;
        reinforce_pp_baseline(rewards, b.grouping(),
                              view(static_cast<const std::uint8_t*>(token_mask.data()), b.n, cols), next(n), baseline);
        for (auto whiten : {masked_whiten_options{}, presets::openrlhf_whiten()}) {
            whiten.threads = threads;
            auto& whitened = next(n * cols);
            const moments stats =
                masked_whiten(tokens(token_rewards), tokens(mask), view(whitened.data(), b.n, cols), whiten);
            out.push_back({static_cast<T>(stats.count), static_cast<T>(stats.mean), static_cast<T>(stats.m2)});
        }
        bnpo_options beta;
        beta.threads = threads;
        const beta_parameters fit = bnpo(rewards, b.grouping(), next(n), beta);
        out.push_back({static_cast<T>(fit.alpha), static_cast<T>(fit.beta)});
        const auto fits =
            bnpo_decomposed(view(static_cast<const T*>(columns.data()), b.n, 3), b.grouping(), next(n), beta);
        for (const auto& f : fits) out.push_back({static_cast<T>(f.alpha), static_cast<T>(f.beta)});
        gepo_options entropy;
        entropy.threads = threads;
        gepo_state state;
        std::vector<double> group_entropy(static_cast<std::size_t>(core::resolve(b.grouping(), b.n).count));
        for (int step = 0; step < 2; ++step)  // the first call sets the thresholds, the second blends them
            gepo(rewards, b.grouping(), tokens(log_probs), tokens(mask), state, next(n), group_entropy, entropy);
        out.push_back({static_cast<T>(state.low), static_cast<T>(state.high)});
        out.push_back(to_storage<T>(group_entropy));
        scrl_options progress;
        progress.threads = threads;
        auto& scrl_out = next(n * K);
        scrl(view(static_cast<const T*>(subproblems.data()), b.n, K), b.grouping(), view(scrl_out.data(), b.n, K),
             progress);
        return out;
    });
}

}  // namespace

TEMPLATE_TEST_CASE(
    "reinforce_pp, reinforce_pp_baseline, remax, masked_whiten, bnpo, gepo and scrl are bitwise at 1, 2, 3, 4 and 7 "
    "threads",
    "[advantage][threads]", float, double) {
    SECTION("contiguous groups") { check_token_batch<TestType>(contiguous_batch()); }
    SECTION("ragged ids") { check_token_batch<TestType>(ragged_batch()); }
}

TEMPLATE_TEST_CASE(
    "gdpo, sa_mrpo, every estimator and the group_normalize presets are bitwise at 1, 2, 3, 4 and 7 threads",
    "[advantage][threads]", float, double) {
    SECTION("contiguous groups") { check_batch<TestType>(contiguous_batch()); }
    SECTION("ragged ids") { check_batch<TestType>(ragged_batch()); }
}
