// Any thread count gives the same bits (docs/api.md §5): every token-credit operation at 1, 2, 3,
// 4 and 7 threads (tests/thread_counts.hpp), float and double, on a batch of 203 responses of 37
// tokens (more rows than one reduction chunk, a count no thread count divides), masks with holes
// and an all-masked row, ragged shuffled groups (one of a single response), and per-turn tables
// of 9 turns with ragged turn counts (some 0). logits_statistics is tested in logits.cpp.
#include "credit/fixtures.hpp"
#include "support.hpp"
#include "thread_counts.hpp"

#include <normkit/credit/broadcast.hpp>
#include <normkit/credit/cort.hpp>
#include <normkit/credit/entropy.hpp>
#include <normkit/credit/optimal_token_baseline.hpp>
#include <normkit/credit/returns.hpp>
#include <normkit/credit/spans.hpp>
#include <normkit/credit/turns.hpp>

#include <algorithm>
#include <cmath>
#include <random>

using namespace normkit;
using namespace normkit::testing;

namespace {

const index_type rows = 203, cols = 37, turns = 9, positions = 4;

// Group ids of odd, ragged sizes (the group of id 11 has one member), shuffled.
std::vector<std::int64_t> ragged_ids() {
    std::mt19937 generator(17);
    std::vector<std::int64_t> ids;
    for (std::int64_t g = 0; static_cast<index_type>(ids.size()) < rows; ++g) {
        const std::int64_t size = g == 11 ? 1 : 1 + static_cast<std::int64_t>(generator() % 13);
        for (std::int64_t j = 0; j < size && static_cast<index_type>(ids.size()) < rows; ++j) ids.push_back(g);
    }
    std::shuffle(ids.begin(), ids.end(), generator);
    return ids;
}

template <class T>
matrix_view<const T> in(const test_matrix<T>& x) {
    return x.view;
}

template <class T>
struct token_batch {
    std::vector<double> mask_values = random_mask(rows, cols, 3, true, 5);
    test_matrix<T> mask{rows, cols, mask_values, 1};
    test_matrix<T> rewards{rows, cols, random_values(rows* cols, 4), 2};
    test_matrix<T> values{rows, cols, random_values(rows* cols, 5)};
    std::vector<std::int64_t> ids = ragged_ids();
    std::vector<T> response_advantages = to_storage<T>(random_values(rows, 6));
};

template <class T>
void check_returns(const token_batch<T>& b) {
    for (auto rule : {return_mask_rule::carry, return_mask_rule::reset, return_mask_rule::discount_through}) {
        INFO("mask rule " << static_cast<int>(rule));
        check_thread_counts([&](int threads) {
            written out;
            test_matrix<T> returns(rows, cols, 1);
            auto options = returns_options(0.97, rule);
            options.threads = threads;
            credit::discounted_returns(in(b.rewards), in(b.mask), returns.view, options);
            out.add("returns", returns);
            if (rule != return_mask_rule::reset) {
                test_matrix<T> advantages(rows, cols), gae_returns(rows, cols, 3);
                auto gae = gae_settings(0.99, 0.95, rule);
                gae.threads = threads;
                credit::generalized_advantage_estimation(in(b.rewards), in(b.values), in(b.mask), advantages.view,
                                                         gae_returns.view, gae);
                out.add("gae advantages", advantages);
                out.add("gae returns", gae_returns);
            }
            return out;
        });
    }
}

template <class T>
void check_optimal_token_baseline(const token_batch<T>& b) {
    auto log_prob = random_values(rows * cols, 7, -1.5, 0.6);
    for (auto& value : log_prob) value = std::min(value, 0.0);
    auto squares = random_values(rows * cols, 8, 0.3, 0.1);
    for (auto& value : squares) value = std::clamp(value, 0.01, 1.0);
    auto weights = random_values(rows * cols, 9, 1.0, 0.2);
    const test_matrix<T> old_log_prob(rows, cols, log_prob), sum_squares(rows, cols, squares),
        importance(rows, cols, weights);
    for (bool compact : {false, true})
        for (bool zero_tail : {false, true}) {
            INFO("compact " << compact << " zero tail " << zero_tail);
            check_thread_counts([&](int threads) {
                written out;
                test_matrix<T> advantages(rows, cols, 1), returns(rows, cols, 2);
                credit::optimal_token_baseline_options options;
                options.compact = compact;
                options.handle_zero_tail = zero_tail;
                options.threads = threads;
                credit::optimal_token_baseline(in(b.rewards), in(b.mask), group_ids(b.ids), in(old_log_prob),
                                               in(sum_squares), in(importance), advantages.view, returns.view, options);
                out.add("advantages", advantages);
                out.add("returns", returns);
                return out;
            });
        }
}

template <class T>
void check_cort(const token_batch<T>& b) {
    const test_matrix<T> rubric(rows, cols, random_values(rows * cols, 10, -1.0, 1.0)),
        free(rows, cols, random_values(rows * cols, 11, -1.0, 1.0));
    for (auto mapping : {credit::cort_mapping::clipped_exp, credit::cort_mapping::tanh}) {
        INFO("mapping " << static_cast<int>(mapping));
        check_thread_counts([&](int threads) {
            written out;
            test_matrix<T> weights(rows, cols, 1), token_advantages(rows, cols, 2);
            credit::cort_options options;
            options.mapping = mapping;
            options.step = 3;
            options.ramp_end = 10;
            options.threads = threads;
            const index_type rounds =
                credit::cort_weights(in(rubric), in(free), in(b.mask), vector_view<const T>(b.response_advantages),
                                     weights.view, token_advantages.view, options);
            out.add("weights", weights);
            out.add("token advantages", token_advantages);
            out.value("rounds", rounds);
            return out;
        });
    }
}

template <class T>
void check_spans_and_broadcast(const token_batch<T>& b) {
    std::vector<credit::span> spans;
    std::mt19937 generator(12);
    for (index_type i = 0; i < rows; ++i)  // up to three disjoint spans a row, in no order
        for (index_type j = 2; j >= 0; --j) {
            if (generator() % 3 == 0) continue;
            const index_type start = j * 12 + static_cast<index_type>(generator() % 4);
            spans.push_back({i, start, start + static_cast<index_type>(generator() % 8), j});
        }
    std::shuffle(spans.begin(), spans.end(), generator);
    const test_matrix<T> table(rows, positions, random_values(rows * positions, 13));
    for (auto outside : {credit::outside_span::zero, credit::outside_span::response_advantage}) {
        INFO("outside " << static_cast<int>(outside));
        check_thread_counts([&](int threads) {
            written out;
            test_matrix<T> output(rows, cols, 1), broadcast(rows, cols, 2);
            auto options = span_settings(outside);
            options.threads = threads;
            credit::span_advantages(vector_view<const credit::span>(spans), in(table), in(b.mask),
                                    vector_view<const T>(b.response_advantages), output.view, options);
            out.add("span advantages", output);
            credit::broadcast_options spread;
            spread.threads = threads;
            credit::broadcast_advantages(b.response_advantages, in(b.mask), broadcast.view, spread);
            out.add("broadcast", broadcast);
            return out;
        });
    }
}

template <class T>
void check_turns(const token_batch<T>& b) {
    std::mt19937 generator(14);
    std::vector<index_type> count(static_cast<std::size_t>(rows));
    for (auto& n : count) n = static_cast<index_type>(generator() % (turns + 1));
    const test_matrix<T> table(rows, turns, random_values(rows * turns, 15), 1);
    // Tokens of row i: turn k on tokens [4k, 4k + 3) for k < count[i], −1 elsewhere.
    std::vector<index_type> turn_index(static_cast<std::size_t>(rows * cols), -1);
    for (index_type i = 0; i < rows; ++i)
        for (index_type t = 0; t < cols; ++t)
            if (t / 4 < count[i] && t % 4 != 3) turn_index[i * cols + t] = t / 4;
    const vector_view<const index_type> turn_count(count);
    check_thread_counts([&](int threads) {
        written out;
        test_matrix<T> a2tgpo(rows, turns, 1), clip(rows, turns, 2), tokens(rows, cols, 1);
        credit::a2tgpo_options a2;
        a2.gamma = 0.9;
        a2.threads = threads;
        credit::a2tgpo_advantages(in(table), turn_count, group_ids(b.ids), vector_view<const T>(b.response_advantages),
                                  a2tgpo.view, clip.view, a2);
        out.add("a2tgpo advantages", a2tgpo);
        out.add("a2tgpo clip scale", clip);
        for (auto scope : {credit::normalization_scope::group, credit::normalization_scope::batch}) {
            test_matrix<T> mapo(rows, turns, 1);
            credit::mapo_options options;
            options.immediate_scope = scope;
            options.gamma = 0.8;
            options.threads = threads;
            credit::mapo_advantages(in(table), turn_count, group_ids(b.ids), mapo.view, options);
            out.add("mapo advantages", mapo);
        }
        for (auto scope : {credit::gtpo_scope::all_turns, credit::gtpo_scope::turn_index}) {
            test_matrix<T> gtpo(rows, turns, 1);
            credit::gtpo_options options;
            options.scope = scope;
            options.threads = threads;
            credit::gtpo_advantages(in(table), turn_count, group_ids(b.ids), gtpo.view, options);
            out.add("gtpo advantages", gtpo);
        }
        auto broadcast = turns_to_tokens_settings(-0.5);
        broadcast.threads = threads;
        credit::turns_to_tokens(in(table), view(static_cast<const index_type*>(turn_index.data()), rows, cols),
                                tokens.view, broadcast);
        out.add("turns to tokens", tokens);
        return out;
    });
}

template <class T>
void check_entropy(const token_batch<T>& b) {
    auto entropy_values = random_values(rows * cols, 16, 0.0, 1.0);
    for (auto& h : entropy_values) h = std::exp(h);
    const test_matrix<T> entropy(rows, cols, entropy_values), ratio(rows, cols, random_values(rows * cols, 17, 1, 0.2)),
        token_advantages(rows, cols, random_values(rows * cols, 18));
    for (auto sign : {credit::hapo_sign::paper_range, credit::hapo_sign::released_code}) {
        INFO("sign " << static_cast<int>(sign));
        check_thread_counts([&](int threads) {
            written out;
            test_matrix<T> keep(rows, cols, 1), signal(rows, cols, 2), advantages(rows, cols), low(rows, cols),
                high(rows, cols, 1), redistributed(rows, cols, 2);
            auto top = top_entropy(0.3);
            top.threads = threads;
            credit::top_entropy_mask(in(entropy), in(b.mask), keep.view, top);
            out.add("top entropy keep", keep);
            auto hapo = hapo_entropy(0.8, sign);
            hapo.threads = threads;
            credit::hapo_entropy_signal(in(entropy), in(b.mask), signal.view, hapo);
            out.add("hapo signal", signal);
            credit::hapo_advantage_options group_average;
            group_average.fallback_threshold = 1.5;  // some groups fall back to GRPO
            group_average.threads = threads;
            credit::hapo_token_advantages(vector_view<const T>(b.response_advantages), group_ids(b.ids), in(b.mask),
                                          advantages.view, group_average);
            out.add("hapo token advantages", advantages);
            auto clip = hapo_clip(0.2, 0.28);
            clip.threads = threads;
            credit::hapo_clip_ranges(in(signal), low.view, high.view, clip);
            out.add("hapo clip low", low);
            out.add("hapo clip high", high);
            credit::hapo_redistribute_options redistribute;
            redistribute.threads = threads;
            credit::hapo_redistribute(in(token_advantages), in(signal), in(ratio), in(low), in(high), in(b.mask),
                                      redistributed.view, redistribute);
            out.add("hapo redistributed", redistributed);
            return out;
        });
    }
}

}  // namespace

TEMPLATE_TEST_CASE("every token-credit operation is bitwise at 1, 2, 3, 4 and 7 threads", "[credit][threads]", float,
                   double) {
    const token_batch<TestType> b;
    SECTION("discounted returns and GAE") { check_returns(b); }
    SECTION("optimal token baseline") { check_optimal_token_baseline(b); }
    SECTION("CoRT weights") { check_cort(b); }
    SECTION("span advantages and broadcast") { check_spans_and_broadcast(b); }
    SECTION("A2TGPO, MAPO, GTPO and turns_to_tokens") { check_turns(b); }
    SECTION("top entropy mask and HAPO") { check_entropy(b); }
}
