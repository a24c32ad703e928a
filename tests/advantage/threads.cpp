// Any thread count gives the same bits (docs/api.md §5): the multi-reward
// estimators (gdpo in both flavours, sa_mrpo), every estimator of estimators.hpp
// (grpo, dr_grpo, rloo, opo, gpg, gapo, pass_at_k, dapo_filter, w_reinforce, dna_train) and group_normalize under the framework
// presets, at 1, 2, 3, 4 and 7 threads. Contiguous batches of 37 groups of 7
// (two blocks of 16 groups and a partial one on the contiguous fast path) and
// ragged ids (odd sizes, shuffled), float and double rewards.
#include "support.hpp"

#include <normkit/advantage/estimators.hpp>
#include <normkit/advantage/group_normalize.hpp>
#include <normkit/advantage/multi_reward.hpp>
#include <normkit/advantage/presets.hpp>

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

}  // namespace

TEMPLATE_TEST_CASE(
    "gdpo, sa_mrpo, every estimator and the group_normalize presets are bitwise at 1, 2, 3, 4 and 7 threads",
    "[advantage][threads]", float, double) {
    SECTION("contiguous groups") { check_batch<TestType>(contiguous_batch()); }
    SECTION("ragged ids") { check_batch<TestType>(ragged_batch()); }
}
