// The batched and interleaved paths of the token-credit kernels over SIMD tails and row blocks:
// lengths around every batch width (1, 7, 8, 9, 15, 16, 17, 33, 130) and row counts that leave a
// partial block (the four-row GAE and OTB chains, the eight-row turn recursions), with masks,
// empty rows and degenerate cells, against tests/reference/credit.hpp.
#include "credit/fixtures.hpp"
#include "reference/credit.hpp"
#include "support.hpp"

#include <normkit/credit/cort.hpp>
#include <normkit/credit/optimal_token_baseline.hpp>
#include <normkit/credit/returns.hpp>
#include <normkit/credit/turns.hpp>

#include <cstring>
#include <random>

using namespace normkit;
using namespace normkit::testing;

namespace {

const std::vector<index_type> tail_lengths = {1, 7, 8, 9, 15, 16, 17, 33, 130};

template <class T>
double tolerance_of() {
    return std::is_same_v<T, double> ? 1e-12 : 3e-6;
}

}  // namespace

TEMPLATE_TEST_CASE("turn kernels over tails and partial row blocks match the reference", "[credit][turns][tails]",
                   float, double) {
    using T = TestType;
    std::uint32_t seed = 900;
    for (index_type rows : {index_type(3), index_type(19)})
        for (index_type cols : tail_lengths) {
            INFO(type_name<T>() << " " << rows << "x" << cols);
            std::mt19937 generator(seed++);
            std::vector<long> ids(static_cast<std::size_t>(rows));
            std::vector<index_type> count(static_cast<std::size_t>(rows));
            for (index_type i = 0; i < rows; ++i) {
                ids[i] = static_cast<long>(generator() % 4);
                count[i] = static_cast<index_type>(generator() % static_cast<std::uint32_t>(cols + 1));
            }
            count[0] = cols;
            if (rows > 2) count[2] = 0;
            auto values = stored<T>(random_values(rows * cols, seed++));
            // A cell of equal values: rows 0 and 1 join one group with the same value at turn 0.
            ids[1] = ids[0];
            const std::vector<index_type> joined(ids.begin(), ids.end());
            if (count[1] > 0) values[cols] = values[0];
            // Padding holds NaN: never read.
            for (index_type i = 0; i < rows; ++i)
                for (index_type t = count[i]; t < cols; ++t) values[i * cols + t] = std::nan("");
            test_matrix<T> table(rows, cols, values, 1), out(rows, cols, 2), clip(rows, cols, 1);
            const auto turns = turn_rows_of(values, cols, count);
            for (auto scope : {credit::normalization_scope::group, credit::normalization_scope::batch}) {
                credit::mapo_options options;
                options.immediate_scope = scope;
                options.gamma = 0.8;
                credit::mapo_advantages(table.view, count, normkit::group_ids(joined), out.view, options);
                CHECK(
                    relative_error(out.values(), table_of(reference::mapo(turns, ids, 0.5, 0.8, 1e-8,
                                                                          scope == credit::normalization_scope::batch),
                                                          cols)) < tolerance_of<T>() * 4);
                CHECK(out.padding_untouched());
            }
            for (auto scope : {credit::gtpo_scope::all_turns, credit::gtpo_scope::turn_index}) {
                credit::gtpo_options options;
                options.scope = scope;
                credit::gtpo_advantages(table.view, count, normkit::group_ids(joined), out.view, options);
                CHECK(relative_error(
                          out.values(),
                          table_of(reference::gtpo(turns, ids, 0.9, scope == credit::gtpo_scope::turn_index, 1, 1e-6),
                                   cols)) < tolerance_of<T>() * 4);
            }
            const auto outcome = stored<T>(random_values(rows, seed++));
            const auto outcome_stored = to_storage<T>(outcome);
            credit::a2tgpo_advantages(table.view, count, normkit::group_ids(joined), outcome_stored, out.view,
                                      clip.view);
            reference::turn_rows expected, expected_clip;
            reference::a2tgpo(turns, ids, outcome, 1.0, 0.3, 0.3, 0, 1e-6, expected, expected_clip);
            CHECK(relative_error(out.values(), table_of(expected, cols)) < tolerance_of<T>() * 4);
            CHECK(relative_error(clip.values(), table_of(expected_clip, cols, 1.0)) < tolerance_of<T>() * 4);
            CHECK(clip.padding_untouched());
        }
}

TEMPLATE_TEST_CASE("cort_weights over tails matches the reference", "[credit][cort][tails]", float, double) {
    using T = TestType;
    std::uint32_t seed = 950;
    for (auto mapping :
         {credit::cort_mapping::clipped_exp, credit::cort_mapping::scaled_sigmoid, credit::cort_mapping::tanh})
        for (index_type cols : tail_lengths) {
            const index_type rows = 5;
            INFO(type_name<T>() << " " << rows << "x" << cols << " mapping " << static_cast<int>(mapping));
            const auto mask_values = random_mask(rows, cols, seed++, true, 3);
            auto rubric_values = random_values(rows * cols, seed++, -2.0, 1.5),
                 free_values = random_values(rows * cols, seed++, -2.0, 1.5);
            for (std::size_t k = 0; k < mask_values.size(); ++k)
                if (mask_values[k] == 0) rubric_values[k] = std::nan("");  // masked: never read
            // Row 4: zero contrast (weights exactly 1); row 0, token 0: +inf contrast (the upper bound).
            for (index_type t = 0; t < cols; ++t) rubric_values[4 * cols + t] = free_values[4 * cols + t];
            if (mask_values[0] != 0) rubric_values[0] = INFINITY;
            test_matrix<T> rubric(rows, cols, rubric_values, 2), free(rows, cols, free_values, 1),
                mask(rows, cols, mask_values), weights(rows, cols, 1), token_advantages(rows, cols);
            const auto advantage_values = random_values(rows, seed++);
            credit::cort_options options;
            options.mapping = mapping;
            options.min_weight = 0.4;
            options.max_weight = 2.5;
            const auto advantages = to_storage<T>(advantage_values);
            credit::cort_weights(rubric.view, free.view, mask.view, advantages, weights.view, token_advantages.view,
                                 options);
            const auto expected =
                reference::cort_weights(rubric.values(), free.values(), mask_values, rows, cols,
                                        static_cast<reference::mapping>(mapping), 1.0, 0.4, 2.5, true, 1.0);
            CHECK(relative_error(weights.values(), expected) < tolerance_of<T>() * 4);
            CHECK(weights.padding_untouched());
            CHECK(token_advantages.padding_untouched());
            const auto w = weights.values(), a = token_advantages.values();
            const auto stored_advantages = stored<T>(advantage_values);
            for (index_type t = 0; t < cols; ++t) {
                CHECK(w[4 * cols + t] == mask_values[4 * cols + t]);  // 1 exactly, or 0 where masked
                CHECK(w[3 * cols + t] == 0.0);                        // the all-masked row
                CHECK(a[3 * cols + t] == 0.0);
            }
            for (std::size_t k = 0; k < w.size(); ++k)
                CHECK(a[k] == Approx(w[k] * stored_advantages[k / static_cast<std::size_t>(cols)]).epsilon(1e-6));
        }
}

TEMPLATE_TEST_CASE("optimal_token_baseline over tails and partial row blocks matches the reference",
                   "[credit][otb][tails]", float, double) {
    using T = TestType;
    std::uint32_t seed = 1000;
    const std::vector<std::vector<long>> groupings = {{0, 0, 1, 1, 1, 2}, {4, 4, 4, 4, 4, 4, 4, 4, 5}};
    for (const auto& ids : groupings)
        for (index_type cols : tail_lengths)
            for (bool compact : {false, true}) {
                const auto rows = static_cast<index_type>(ids.size());
                INFO(type_name<T>() << " " << rows << "x" << cols << " compact " << compact);
                const auto mask_values = random_mask(rows, cols, seed++, true, 1);
                auto rewards = random_values(rows * cols, seed++);
                auto log_p = random_values(rows * cols, seed++, -1.0, 0.8);
                std::vector<double> sum_p2(rows * cols), rho = random_values(rows * cols, seed++, 1.0, 0.2);
                for (std::size_t k = 0; k < log_p.size(); ++k) {
                    log_p[k] = std::min(log_p[k], 0.0);
                    sum_p2[k] = std::max(std::exp(2 * log_p[k]), 0.3);
                }
                // The reference sees the inputs; the kernel sees NaN at masked tokens (never read).
                test_matrix<T> clean_r(rows, cols, rewards), clean_lp(rows, cols, log_p), clean_s(rows, cols, sum_p2),
                    clean_w(rows, cols, rho);
                for (std::size_t k = 0; k < log_p.size(); ++k)
                    if (mask_values[k] == 0) log_p[k] = rewards[k] = sum_p2[k] = rho[k] = std::nan("");
                test_matrix<T> r(rows, cols, rewards, 1), m(rows, cols, mask_values), lp(rows, cols, log_p, 2),
                    s(rows, cols, sum_p2), weights(rows, cols, rho), advantages(rows, cols, 1), returns(rows, cols);
                const std::vector<index_type> group_ids(ids.begin(), ids.end());
                credit::optimal_token_baseline_options options;
                options.compact = compact;
                credit::optimal_token_baseline(r.view, m.view, normkit::group_ids(group_ids), lp.view, s.view,
                                               weights.view, advantages.view, returns.view, options);
                const auto expected = reference::optimal_token_baseline(
                    clean_r.values(), mask_values, clean_lp.values(), clean_s.values(), clean_w.values(), ids, rows,
                    cols, true, compact, options.eps);
                CHECK(relative_error(advantages.values(), expected, 1.0) < (std::is_same_v<T, double> ? 1e-11 : 1e-5));
                CHECK(advantages.padding_untouched());
                CHECK(returns.padding_untouched());
                for (std::size_t k = 0; k < mask_values.size(); ++k)
                    if (mask_values[k] == 0) CHECK(advantages.values()[k] == 0.0);
            }
}

TEMPLATE_TEST_CASE("generalized_advantage_estimation: rows in blocks give each row's bits alone",
                   "[credit][gae][tails]", float, double) {
    using T = TestType;
    std::uint32_t seed = 1100;
    for (auto rule : {return_mask_rule::carry, return_mask_rule::discount_through})
        for (index_type cols : tail_lengths) {
            const index_type rows = 19;  // blocks of a double batch's rows (2, 4 or 8) and a partial one
            INFO(type_name<T>() << " " << rows << "x" << cols << " rule " << static_cast<int>(rule));
            const auto mask_values = random_mask(rows, cols, seed++, true, 2);
            const auto r = random_values(rows * cols, seed++), v = random_values(rows * cols, seed++);
            test_matrix<T> R(rows, cols, r), V(rows, cols, v), M(rows, cols, mask_values), A(rows, cols, 1),
                G(rows, cols, 1);
            const auto options = gae_settings(0.97, 0.9, rule);
            credit::generalized_advantage_estimation(R.view, V.view, M.view, A.view, G.view, options);
            CHECK(A.padding_untouched());
            for (index_type i = 0; i < rows; ++i) {
                const auto one = [&](const test_matrix<T>& x) {
                    return matrix_view<const T>(x.view.row(i), 1, cols, cols);
                };
                std::vector<T> a(static_cast<std::size_t>(cols)), g(static_cast<std::size_t>(cols));
                credit::generalized_advantage_estimation(one(R), one(V), one(M), view(a.data(), 1, cols),
                                                         view(g.data(), 1, cols), options);
                CHECK(std::memcmp(a.data(), A.view.row(i), sizeof(T) * static_cast<std::size_t>(cols)) == 0);
                CHECK(std::memcmp(g.data(), G.view.row(i), sizeof(T) * static_cast<std::size_t>(cols)) == 0);
            }
            if (rule == return_mask_rule::carry) {
                const auto expected = reference::gae(R.values(), V.values(), mask_values, rows, cols, 0.97, 0.9);
                CHECK(relative_error(A.values(), expected, 1.0) < tolerance_of<T>() * static_cast<double>(cols) * 2);
            }
        }
}
