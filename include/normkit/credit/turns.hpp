// Turn-level credit for multi-turn rollouts: A²TGPO, MAPO and GTPO advantages
// per turn, and their broadcast to tokens.
//
// Data: a per-turn table [B × N] (row i has turn_count[i] ≤ N valid turns,
// columns beyond are padding and are not read), group ids per row, and for the
// token broadcast a turn index per token [B × T] (−1 = in no turn).
//
// A²TGPO (arXiv 2605.06200; seed-formulas §6d, from third-party readings of
// the official code, mode turn-group-v1d). Row i has n = turn_count[i]
// information-gain turns IG_0..IG_{n−1}; its outcome turn is turn n.
//   ĨG_t = (IG_t − mean_c)/(std_c + ε)  over the cell c = (group, turn index t)
//          (mean-only if !normalize_by_std)
//   D_t  = Σ_{j=t}^{n−1} γ^{j−t}·ĨG_j / √(n − t)      (variance-rescaled accumulation)
//   A_t  = outcome_i + α·D_t  (t < n);  A_n = outcome_i;  padding beyond → 0
//   c_t  = 1 + κ·(2σ(ĨG_t) − 1) ∈ (1 − κ, 1 + κ) (t < n); 1 for the outcome turn and padding
//          (the per-turn clip scale: ε_low,eff = ε_low·c_t, ε_high,eff = ε_high·c_t)
// Defaults: α = 0.3, κ = 0.3 (adv_rescale_alpha and the clip spread, from the
// code readings). Not found, so parameters: γ = 1 (the demo note's value,
// unconfirmed); ddof = 0, because the statistics are scatter-add sums of x and
// x² over the cell (the population variance); ε = 1e-6 (verl's GRPO epsilon).
// With γ = 1 and i.i.d. unit-variance ĨG, Var D_t = 1 at every depth (tested).
// A cell of one, or of equal values, gives ĨG = 0. IG itself (probability or
// log-probability gain: the readings disagree) is the caller's.
//
// MAPO / MICA v3 (arXiv 2603.06194; seed-formulas §6h, third-party code):
//   G_t = Σ_{k=t}^{n−1} γ^{k−t} r_k
//   A_turn  = population z-score of G_t over the rows of the group at turn index t
//   A_group = population z-score of r_t over all valid turns of the group
//             (scope = batch: over all valid turns of the batch, v1's "batch-level")
//   A_t = α·A_turn + (1 − α)·A_group,   z = (x − μ)/(σ + ε), ε = 1e-8, α = 0.5
//   γ is NOT FOUND: default 1, as the potential-based rewards r_t = φ(s_{t−1}) − φ(s_t)
//   telescope to the total progress only undiscounted.
//
// GTPO (arXiv 2511.14846; seed-formulas §6g, abstract + third-party integrations):
//   G_t = Σ_{k=t}^{n−1} γ^{k−t} r_k,  A_t = (G_t − μ)/(σ + ε)
//   The normalization set is NOT FOUND, so it is options.scope:
//     all_turns (default): μ, σ over every valid turn of the group, the GRPO reading
//       (one baseline for the group's returns; a turn depth reached by a single
//       rollout would otherwise always get 0);
//     turn_index: over the group's rows at the same turn index t.
//   γ = 0.9 (third-party "paper optimal"); std unbiased + ε = 1e-6 (verl GRPO).
//
// Degenerate input: rows with no turns get 0; a set of one value or of equal
// values standardizes to 0. Bad input (turn_count outside [0, N], mismatched
// lengths, ε < 0, a turn index ≥ N or not non-decreasing within a row) →
// normkit::error naming the argument.
#pragma once

#include "token_data.hpp"

#include <cmath>
#include <map>
#include <vector>

namespace normkit::credit {

struct a2tgpo_options {
    double gamma = 1.0;
    double alpha = 0.3;              // weight of the accumulated information gain
    double clip_spread = 0.3;        // κ of the clip scale
    bool normalize_by_std = true;
    int ddof = 0;
    double eps = 1e-6;
};

enum class normalization_scope { group, batch };

struct mapo_options {
    double alpha = 0.5;  // weight of the turn-index term
    double gamma = 1.0;
    double eps = 1e-8;
    normalization_scope immediate_scope = normalization_scope::group;
};

enum class gtpo_scope { all_turns, turn_index };

struct gtpo_options {
    double gamma = 0.9;
    gtpo_scope scope = gtpo_scope::all_turns;
    int ddof = 1;
    double eps = 1e-6;
};

namespace detail {

inline void require_discount(double gamma, double eps, int ddof) {
    core::require(std::isfinite(gamma) && gamma >= 0, "gamma must be non-negative and finite, got ", gamma);
    core::require(std::isfinite(eps) && eps >= 0, "eps must be non-negative and finite, got ", eps);
    core::require(ddof == 0 || ddof == 1, "ddof must be 0 or 1, got ", ddof);
}

template <class T>
double cell(const matrix_view<T>& x, index_type i, index_type t) {
    return static_cast<double>(core::to_compute(x(i, t)));
}

// Standardizes values[i][t] (t < count[i]) per (group, t), or per group over all t.
inline std::vector<std::vector<double>> standardize_turns(const std::vector<std::vector<double>>& values, const group_table& groups, bool per_turn,
                                                          int ddof, double eps, bool divide_by_std) {
    std::vector<std::vector<double>> out(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) out[i].assign(values[i].size(), 0.0);
    for (const auto& members : groups.members) {
        std::size_t depth = 0;
        for (index_type i : members) depth = std::max(depth, values[static_cast<std::size_t>(i)].size());
        if (per_turn) {
            for (std::size_t t = 0; t < depth; ++t) {
                std::vector<double> set;
                for (index_type i : members)
                    if (t < values[static_cast<std::size_t>(i)].size()) set.push_back(values[static_cast<std::size_t>(i)][t]);
                const location_scale stats = standardize(set, ddof, eps, divide_by_std);
                for (index_type i : members)
                    if (t < values[static_cast<std::size_t>(i)].size())
                        out[static_cast<std::size_t>(i)][t] = standardized(values[static_cast<std::size_t>(i)][t], stats);
            }
        } else {
            std::vector<double> set;
            for (index_type i : members) set.insert(set.end(), values[static_cast<std::size_t>(i)].begin(), values[static_cast<std::size_t>(i)].end());
            const location_scale stats = standardize(set, ddof, eps, divide_by_std);
            for (index_type i : members)
                for (std::size_t t = 0; t < values[static_cast<std::size_t>(i)].size(); ++t)
                    out[static_cast<std::size_t>(i)][t] = standardized(values[static_cast<std::size_t>(i)][t], stats);
        }
    }
    return out;
}

template <class T>
std::vector<std::vector<double>> read_turns(const matrix_view<const T>& table, const vector_view<const index_type>& turn_count) {
    std::vector<std::vector<double>> rows(static_cast<std::size_t>(table.rows));
    for (index_type i = 0; i < table.rows; ++i)
        for (index_type t = 0; t < turn_count[i]; ++t) rows[static_cast<std::size_t>(i)].push_back(cell(table, i, t));
    return rows;
}

inline std::vector<double> discounted_sums(const std::vector<double>& rewards, double gamma) {
    std::vector<double> out(rewards.size());
    double running = 0;
    for (std::size_t k = rewards.size(); k-- > 0;) out[k] = running = rewards[k] + gamma * running;
    return out;
}

template <class T>
void write_turns(const matrix_view<T>& out, const std::vector<std::vector<double>>& values, double padding) {
    for (index_type i = 0; i < out.rows; ++i)
        for (index_type t = 0; t < out.cols; ++t) {
            const auto& row = values[static_cast<std::size_t>(i)];
            out(i, t) = core::from_compute<T>(static_cast<core::compute_t<T>>(t < static_cast<index_type>(row.size()) ? row[static_cast<std::size_t>(t)] : padding));
        }
}

template <class T>
void a2tgpo_advantages(matrix_view<const T> information_gain, vector_view<const index_type> turn_count, vector_view<const index_type> group_ids,
                       vector_view<const T> outcome_advantages, matrix_view<T> advantages, matrix_view<T> clip_scale, const a2tgpo_options& options) {
    require_turn_table("information_gain", information_gain, turn_count);
    require_per_sample("group_ids", group_ids, information_gain.rows);
    require_per_sample("outcome_advantages", outcome_advantages, information_gain.rows);
    require_token_matrix("advantages", advantages, "information_gain", information_gain);
    if (!clip_scale.empty()) require_token_matrix("clip_scale", clip_scale, "information_gain", information_gain);
    require_discount(options.gamma, options.eps, options.ddof);
    core::require(std::isfinite(options.alpha) && std::isfinite(options.clip_spread), "alpha ", options.alpha, " and clip_spread ",
                  options.clip_spread, " must be finite");
    const auto normalized = standardize_turns(read_turns(information_gain, turn_count), make_groups(group_ids), true, options.ddof, options.eps,
                                              options.normalize_by_std);
    for (index_type i = 0; i < advantages.rows; ++i) {
        const auto& g = normalized[static_cast<std::size_t>(i)];
        const auto n = static_cast<index_type>(g.size());
        const std::vector<double> accumulated = discounted_sums(g, options.gamma);
        const double outcome = static_cast<double>(core::to_compute(outcome_advantages[i]));
        for (index_type t = 0; t < advantages.cols; ++t) {
            double a = 0, c = 1;
            if (t < n) {
                a = outcome + options.alpha * accumulated[static_cast<std::size_t>(t)] / std::sqrt(static_cast<double>(n - t));
                const double sigmoid = 1.0 / (1.0 + std::exp(-g[static_cast<std::size_t>(t)]));
                c = 1.0 + options.clip_spread * (2.0 * sigmoid - 1.0);
            } else if (t == n) {
                a = outcome;
            }
            advantages(i, t) = core::from_compute<T>(static_cast<core::compute_t<T>>(a));
            if (!clip_scale.empty()) clip_scale(i, t) = core::from_compute<T>(static_cast<core::compute_t<T>>(c));
        }
    }
}

template <class T>
void mapo_advantages(matrix_view<const T> rewards, vector_view<const index_type> turn_count, vector_view<const index_type> group_ids,
                     matrix_view<T> advantages, const mapo_options& options) {
    require_turn_table("rewards", rewards, turn_count);
    require_per_sample("group_ids", group_ids, rewards.rows);
    require_token_matrix("advantages", advantages, "rewards", rewards);
    require_discount(options.gamma, options.eps, 0);
    core::require(std::isfinite(options.alpha), "alpha must be finite, got ", options.alpha);
    const auto immediate = read_turns(rewards, turn_count);
    std::vector<std::vector<double>> returns;
    for (const auto& row : immediate) returns.push_back(discounted_sums(row, options.gamma));
    const group_table groups = make_groups(group_ids);
    const auto turn_term = standardize_turns(returns, groups, true, 0, options.eps, true);
    const std::vector<index_type> everyone_ids(static_cast<std::size_t>(rewards.rows), 0);
    const group_table batch = make_groups(vector_view<const index_type>(everyone_ids.data(), rewards.rows));
    const auto group_term =
        standardize_turns(immediate, options.immediate_scope == normalization_scope::group ? groups : batch, false, 0, options.eps, true);
    std::vector<std::vector<double>> combined(immediate.size());
    for (std::size_t i = 0; i < immediate.size(); ++i)
        for (std::size_t t = 0; t < immediate[i].size(); ++t)
            combined[i].push_back(options.alpha * turn_term[i][t] + (1.0 - options.alpha) * group_term[i][t]);
    write_turns(advantages, combined, 0.0);
}

template <class T>
void gtpo_advantages(matrix_view<const T> rewards, vector_view<const index_type> turn_count, vector_view<const index_type> group_ids,
                     matrix_view<T> advantages, const gtpo_options& options) {
    require_turn_table("rewards", rewards, turn_count);
    require_per_sample("group_ids", group_ids, rewards.rows);
    require_token_matrix("advantages", advantages, "rewards", rewards);
    require_discount(options.gamma, options.eps, options.ddof);
    std::vector<std::vector<double>> returns;
    for (const auto& row : read_turns(rewards, turn_count)) returns.push_back(discounted_sums(row, options.gamma));
    write_turns(advantages,
                standardize_turns(returns, make_groups(group_ids), options.scope == gtpo_scope::turn_index, options.ddof, options.eps, true), 0.0);
}

template <class T>
void turns_to_tokens(matrix_view<const T> per_turn, matrix_view<const index_type> turn_index, matrix_view<T> output, double outside) {
    core::require_data("per_turn", per_turn);
    core::require_data("turn_index", turn_index);
    require_token_matrix("output", output, "turn_index", turn_index);
    core::require(per_turn.rows == turn_index.rows, "per_turn has ", per_turn.rows, " rows (", per_turn.rows, "x", per_turn.cols,
                  ") but turn_index has ", turn_index.rows);
    for (index_type i = 0; i < turn_index.rows; ++i) {
        index_type previous = -1;
        for (index_type t = 0; t < turn_index.cols; ++t) {
            const index_type turn = turn_index(i, t);
            core::require(turn >= -1 && turn < per_turn.cols, "turn_index(", i, ", ", t, ") = ", turn, " is outside [-1, ", per_turn.cols, ")");
            if (turn < 0) {
                output(i, t) = core::from_compute<T>(static_cast<core::compute_t<T>>(outside));
                continue;
            }
            core::require(turn >= previous, "turn_index is not monotone in row ", i, ": turn ", turn, " at token ", t, " follows turn ", previous);
            previous = turn;
            output(i, t) = per_turn(i, turn);
        }
    }
}

}  // namespace detail

// A²TGPO per-turn advantages [B × N] and (optional) clip scales [B × N].
template <class Table, class Output>
void a2tgpo_advantages(const Table& information_gain, vector_view<const index_type> turn_count, vector_view<const index_type> group_ids,
                       vector_view<const element_t<Output>> outcome_advantages, Output&& advantages, matrix_view<element_t<Output>> clip_scale = {},
                       const a2tgpo_options& options = {}) {
    detail::a2tgpo_advantages<element_t<Output>>(view(information_gain), turn_count, group_ids, outcome_advantages, view(advantages), clip_scale,
                                                 options);
}

// MAPO per-turn advantages [B × N] from immediate turn rewards.
template <class Table, class Output>
void mapo_advantages(const Table& rewards, vector_view<const index_type> turn_count, vector_view<const index_type> group_ids, Output&& advantages,
                     const mapo_options& options = {}) {
    detail::mapo_advantages<element_t<Output>>(view(rewards), turn_count, group_ids, view(advantages), options);
}

// GTPO per-turn advantages [B × N] from turn rewards.
template <class Table, class Output>
void gtpo_advantages(const Table& rewards, vector_view<const index_type> turn_count, vector_view<const index_type> group_ids, Output&& advantages,
                     const gtpo_options& options = {}) {
    detail::gtpo_advantages<element_t<Output>>(view(rewards), turn_count, group_ids, view(advantages), options);
}

// Token values [B × T] from per-turn values [B × N]: output(i, t) =
// per_turn(i, turn_index(i, t)), or `outside` where turn_index = −1.
template <class Table, class TurnIndex, class Output>
void turns_to_tokens(const Table& per_turn, const TurnIndex& turn_index, Output&& output, double outside = 0.0) {
    detail::turns_to_tokens<element_t<Output>>(view(per_turn), view(turn_index), view(output), outside);
}

}  // namespace normkit::credit
