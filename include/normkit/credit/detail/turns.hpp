// The implementation of credit/turns.hpp: per-turn tables read into rows of
// doubles, standardized per (group, turn index) or per group, and written back.
#pragma once

#include "../returns.hpp"
#include "../token_data.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace normkit::credit::detail {

using turn_rows = std::vector<std::vector<double>>;
using group_lists = std::vector<std::vector<index_type>>;

// The checks every per-turn estimator shares (the table, its turn counts, the
// advantages shaped like it, the settings); returns the members of each group.
template <class T>
group_lists checked_turn_groups(const char* name, matrix_view<const T> table, vector_view<const index_type> turn_count,
                                const groups& grouping, matrix_view<T> advantages, double gamma, double eps, int ddof) {
    require_turn_table(name, table, turn_count);
    group_lists members = group_members(grouping, table.rows);
    core::require_like("advantages", advantages, name, table);
    core::require_disjoint("advantages", advantages, name, table, "turn_count", turn_count, "group ids", grouping);
    core::require_discount("gamma", gamma);
    core::require(std::isfinite(eps) && eps >= 0, "eps must be non-negative and finite, got ", eps);
    core::require(ddof == 0 || ddof == 1, "ddof must be 0 or 1, got ", ddof);
    return members;
}

// Standardizes the values of each (group, turn index t) cell.
inline turn_rows standardize_per_turn(const turn_rows& values, const group_lists& groups, int ddof, double eps,
                                      bool divide_by_std) {
    turn_rows out(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) out[i].assign(values[i].size(), 0.0);
    const auto row = [&](index_type i) -> const std::vector<double>& { return values[static_cast<std::size_t>(i)]; };
    for (const auto& members : groups) {
        std::size_t depth = 0;
        for (index_type i : members) depth = std::max(depth, row(i).size());
        for (std::size_t t = 0; t < depth; ++t) {
            std::vector<double> set;
            for (index_type i : members)
                if (t < row(i).size()) set.push_back(row(i)[t]);
            const location_scale stats = standardize(set, ddof, eps, divide_by_std);
            for (index_type i : members)
                if (t < row(i).size()) out[static_cast<std::size_t>(i)][t] = standardized(row(i)[t], stats);
        }
    }
    return out;
}

// Standardizes the values of each group over all its turns.
inline turn_rows standardize_per_group(const turn_rows& values, const group_lists& groups, int ddof, double eps,
                                       bool divide_by_std) {
    turn_rows out(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) out[i].assign(values[i].size(), 0.0);
    for (const auto& members : groups) {
        std::vector<double> set;
        for (index_type i : members)
            set.insert(set.end(), values[static_cast<std::size_t>(i)].begin(),
                       values[static_cast<std::size_t>(i)].end());
        const location_scale stats = standardize(set, ddof, eps, divide_by_std);
        for (index_type i : members)
            for (std::size_t t = 0; t < values[static_cast<std::size_t>(i)].size(); ++t)
                out[static_cast<std::size_t>(i)][t] = standardized(values[static_cast<std::size_t>(i)][t], stats);
    }
    return out;
}

template <class T>
turn_rows read_turns(const matrix_view<const T>& table, const vector_view<const index_type>& turn_count) {
    turn_rows rows(static_cast<std::size_t>(table.rows));
    for (index_type i = 0; i < table.rows; ++i)
        for (index_type t = 0; t < turn_count[i]; ++t)
            rows[static_cast<std::size_t>(i)].push_back(value_of(table, i, t));
    return rows;
}

// Σ_{k≥t} γ^{k−t}·x_k of each row: the library's one recursion with every turn valid.
inline turn_rows discounted_sums(const turn_rows& rows, double gamma) {
    turn_rows out(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const auto& x = rows[i];
        out[i].resize(x.size());
        core::masked_discounted_sum(
            static_cast<index_type>(x.size()), gamma, return_mask_rule::carry, [](index_type) { return true; },
            [&](index_type k) { return x[static_cast<std::size_t>(k)]; },
            [&](index_type k, bool, double running) { out[i][static_cast<std::size_t>(k)] = running; });
    }
    return out;
}

template <class T>
void write_turns(const matrix_view<T>& out, const turn_rows& values, double padding) {
    for (index_type i = 0; i < out.rows; ++i)
        for (index_type t = 0; t < out.cols; ++t) {
            const auto& row = values[static_cast<std::size_t>(i)];
            out(i, t) =
                to_storage<T>(t < static_cast<index_type>(row.size()) ? row[static_cast<std::size_t>(t)] : padding);
        }
}

template <class T>
void a2tgpo_advantages(matrix_view<const T> information_gain, vector_view<const index_type> turn_count,
                       const groups& grouping, vector_view<const T> outcome_advantages, matrix_view<T> advantages,
                       matrix_view<T> clip_scale, const a2tgpo_options& options) {
    const group_lists groups = checked_turn_groups("information_gain", information_gain, turn_count, grouping,
                                                   advantages, options.gamma, options.eps, options.ddof);
    require_per_sample("outcome_advantages", outcome_advantages, information_gain.rows);
    core::require_optional_like("clip_scale", clip_scale, "information_gain", information_gain);
    core::require_disjoint("advantages", advantages, "outcome_advantages", outcome_advantages, "clip_scale",
                           clip_scale);
    core::require_disjoint("clip_scale", clip_scale, "information_gain", information_gain, "turn_count", turn_count,
                           "group ids", grouping, "outcome_advantages", outcome_advantages);
    core::require(std::isfinite(options.alpha) && std::isfinite(options.clip_spread), "alpha ", options.alpha,
                  " and clip_spread ", options.clip_spread, " must be finite");
    const turn_rows normalized = standardize_per_turn(read_turns(information_gain, turn_count), groups, options.ddof,
                                                      options.eps, options.normalize_by_std);
    const turn_rows accumulated = discounted_sums(normalized, options.gamma);
    for (index_type i = 0; i < advantages.rows; ++i) {
        const auto& g = normalized[static_cast<std::size_t>(i)];
        const auto n = static_cast<index_type>(g.size());
        const double outcome = static_cast<double>(core::to_compute(outcome_advantages[i]));
        for (index_type t = 0; t < advantages.cols; ++t) {
            double a = 0, c = 1;
            if (t < n) {
                a = outcome + options.alpha * accumulated[static_cast<std::size_t>(i)][static_cast<std::size_t>(t)] /
                                  std::sqrt(static_cast<double>(n - t));
                const double sigmoid = 1.0 / (1.0 + std::exp(-g[static_cast<std::size_t>(t)]));
                c = 1.0 + options.clip_spread * (2.0 * sigmoid - 1.0);
            } else if (t == n) {
                a = outcome;
            }
            advantages(i, t) = to_storage<T>(a);
            if (!clip_scale.empty()) clip_scale(i, t) = to_storage<T>(c);
        }
    }
}

template <class T>
void mapo_advantages(matrix_view<const T> rewards, vector_view<const index_type> turn_count, const groups& grouping,
                     matrix_view<T> advantages, const mapo_options& options) {
    const group_lists groups =
        checked_turn_groups("rewards", rewards, turn_count, grouping, advantages, options.gamma, options.eps, 0);
    core::require(std::isfinite(options.alpha), "alpha must be finite, got ", options.alpha);
    const turn_rows immediate = read_turns(rewards, turn_count);
    const turn_rows turn_term =
        standardize_per_turn(discounted_sums(immediate, options.gamma), groups, 0, options.eps, true);
    group_lists batch(1, std::vector<index_type>(static_cast<std::size_t>(rewards.rows)));
    std::iota(batch[0].begin(), batch[0].end(), index_type(0));
    const turn_rows group_term = standardize_per_group(
        immediate, options.immediate_scope == normalization_scope::group ? groups : batch, 0, options.eps, true);
    turn_rows combined(immediate.size());
    for (std::size_t i = 0; i < immediate.size(); ++i)
        for (std::size_t t = 0; t < immediate[i].size(); ++t)
            combined[i].push_back(options.alpha * turn_term[i][t] + (1.0 - options.alpha) * group_term[i][t]);
    write_turns(advantages, combined, 0.0);
}

template <class T>
void gtpo_advantages(matrix_view<const T> rewards, vector_view<const index_type> turn_count, const groups& grouping,
                     matrix_view<T> advantages, const gtpo_options& options) {
    const group_lists groups = checked_turn_groups("rewards", rewards, turn_count, grouping, advantages, options.gamma,
                                                   options.eps, options.ddof);
    const turn_rows returns = discounted_sums(read_turns(rewards, turn_count), options.gamma);
    write_turns(advantages,
                options.scope == gtpo_scope::turn_index
                    ? standardize_per_turn(returns, groups, options.ddof, options.eps, true)
                    : standardize_per_group(returns, groups, options.ddof, options.eps, true),
                0.0);
}

template <class T>
void turns_to_tokens(matrix_view<const T> per_turn, matrix_view<const index_type> turn_index, matrix_view<T> output,
                     double outside) {
    core::require_data("per_turn", per_turn);
    core::require_data("turn_index", turn_index);
    core::require_like("output", output, "turn_index", turn_index);
    core::require(per_turn.rows == turn_index.rows, "per_turn has ", per_turn.rows, " rows (", per_turn.rows, "x",
                  per_turn.cols, ") but turn_index has ", turn_index.rows);
    core::require_disjoint("output", output, "per_turn", per_turn, "turn_index", turn_index);
    for (index_type i = 0; i < turn_index.rows; ++i) {
        index_type previous = -1;
        for (index_type t = 0; t < turn_index.cols; ++t) {
            const index_type turn = turn_index(i, t);
            core::require(turn >= -1 && turn < per_turn.cols, "turn_index(", i, ", ", t, ") = ", turn,
                          " is outside [-1, ", per_turn.cols, ")");
            if (turn < 0) {
                output(i, t) = to_storage<T>(outside);
                continue;
            }
            core::require(turn >= previous, "turn_index is not monotone in row ", i, ": turn ", turn, " at token ", t,
                          " follows turn ", previous);
            previous = turn;
            output(i, t) = per_turn(i, turn);
        }
    }
}

}  // namespace normkit::credit::detail
