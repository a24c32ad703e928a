// Any thread count gives the same bits (docs/api.md §5): the rollout corrections and the
// covariance selection at 1, 2, 3, 4 and 7 threads (tests/thread_counts.hpp), float and double, on
// 203 rows of 37 tokens (seven reduction chunks of rows, a count no thread count divides) with a
// ragged mask and an all-masked row. policy_loss, aggregate_loss, kl_penalty and value_loss are
// tested in policy_loss.cpp and aggregate.cpp.
#include "support.hpp"
#include "thread_counts.hpp"

#include <normkit/loss/covariance_selection.hpp>
#include <normkit/loss/rollout_correction.hpp>

#include <random>

using namespace normkit;
using namespace normkit::testing;

namespace {

const index_type rows = 203, cols = 37;

// Row i valid on a random prefix with holes; row 4 all masked.
std::vector<double> ragged_mask() {
    std::mt19937 generator(31);
    std::vector<double> mask(static_cast<std::size_t>(rows * cols), 0.0);
    for (index_type i = 0; i < rows; ++i) {
        if (i == 4) continue;
        const auto length = static_cast<index_type>(1 + generator() % cols);
        for (index_type t = 0; t < length; ++t) mask[i * cols + t] = generator() % 6 == 0 ? 0.0 : 1.0;
    }
    return mask;
}

template <class T>
struct loss_batch {
    test_matrix<T> log_probs{rows, cols, random_values(rows* cols, 32, -1.0, 0.5), 1};
    test_matrix<T> rollout{rows, cols, random_values(rows* cols, 33, -1.0, 0.5)};
    test_matrix<T> mask{rows, cols, ragged_mask(), 2};
    test_matrix<T> sequence_advantages{rows, 1, random_values(rows, 34)};
    test_matrix<T> token_advantages{rows, cols, random_values(rows* cols, 35)};
};

template <class T>
matrix_view<const T> in(const test_matrix<T>& x) {
    return x.view;
}

template <class T>
void check_corrections(const loss_batch<T>& b) {
    using level = loss::correction_level;
    for (const auto l : {level::token, level::sequence, level::sequence_mean_filter})
        for (const bool normalize : {false, true}) {
            INFO("level " << static_cast<int>(l) << " batch_normalize " << normalize);
            check_thread_counts([&](int threads) {
                written out;
                test_matrix<T> weights(rows, cols, 1);
                loss::rollout_correction_options options;
                options.level = l;
                options.bound = l == level::sequence ? loss::correction_bound::truncate : loss::correction_bound::mask;
                options.lower = 0.6;
                options.upper = 1.8;
                options.batch_normalize = normalize;
                options.threads = threads;
                const double mean =
                    loss::rollout_correction_weights(in(b.log_probs), in(b.rollout), in(b.mask), weights.view, options);
                out.add("weights", weights);
                out.value("batch mean", mean);
                return out;
            });
        }
    check_thread_counts([&](int threads) {
        written out;
        test_matrix<T> keep(rows, 1);
        loss::off_policy_sequence_mask_options options;
        options.threads = threads;
        loss::off_policy_sequence_mask(in(b.log_probs), in(b.rollout), in(b.sequence_advantages), in(b.mask), keep.view,
                                       0.05, options);
        out.add("off-policy keep", keep);
        return out;
    });
}

template <class T>
void check_rejection(const loss_batch<T>& b) {
    using L = loss::rejection_level;
    using S = loss::rejection_statistic;
    const std::vector<loss::rollout_rejection_options> cases = {
        loss::presets::verl_rollout_rs(L::token, S::k1, 1.5),
        loss::presets::verl_rollout_rs(L::sequence_mean, S::k3, 0.1),
        loss::presets::verl_rollout_rs({{L::token, S::k2, 0.4, {}},
                                        {L::sequence_max, S::k3, 1.0, {}},
                                        {L::sequence_sum, S::k1, 40.0, 1.0 / 40.0}}),
    };
    for (std::size_t c = 0; c < cases.size(); ++c) {
        INFO("case " << c);
        check_thread_counts([&](int threads) {
            written out;
            test_matrix<T> keep(rows, cols, 1);
            auto options = cases[c];
            options.threads = threads;
            const double rejected =
                loss::rollout_rejection_mask(in(b.log_probs), in(b.rollout), in(b.mask), keep.view, options);
            out.add("keep", keep);
            out.value("rejected mass", rejected);
            return out;
        });
    }
}

template <class T>
void check_covariance(const loss_batch<T>& b) {
    for (const auto rule : {loss::covariance_rule::kl_cov, loss::covariance_rule::clip_cov}) {
        INFO("rule " << static_cast<int>(rule));
        check_thread_counts([&](int threads) {
            written out;
            test_matrix<T> selected(rows, cols, 1);
            loss::covariance_selection_options options;
            options.rule = rule;
            options.ratio = 0.01;  // kl_cov: the top 1 %; clip_cov: a seeded subset of the candidates
            options.lower = -0.3;
            options.upper = 1.0;
            options.seed = 5;
            options.threads = threads;
            const index_type count = loss::covariance_selection(in(b.log_probs), in(b.rollout), in(b.token_advantages),
                                                                in(b.mask), selected.view, options);
            out.add("selected", selected);
            out.value("count", count);
            return out;
        });
    }
}

}  // namespace

TEMPLATE_TEST_CASE("the rollout corrections and the covariance selection are bitwise at 1, 2, 3, 4 and 7 threads",
                   "[loss][threads]", float, double) {
    const loss_batch<TestType> b;
    SECTION("rollout_correction_weights and off_policy_sequence_mask") { check_corrections(b); }
    SECTION("rollout_rejection_mask") { check_rejection(b); }
    SECTION("covariance_selection") { check_covariance(b); }
}
