// The implementation of credit/turns.hpp. A per-turn table is read once into a flat [B × N]
// buffer of doubles (padding never read); the discounted sums run eight rows at a time, so the
// eight independent recursions overlap; the statistics of the (group, turn index) cells are taken
// as per-column sums over the group's rows, in member order (two_pass_moments' order, cell by
// cell); a group's statistics over all its turns take each row in eight partial sums. A few flat
// buffers per call, nothing allocated per row, per cell or per turn.
#pragma once

#include "../returns.hpp"
#include "../../core/parallel.hpp"
#include "../token_data.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace normkit::credit::detail {

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

// A flat [rows × cols] table of doubles; row i holds n[i] values (the rest is never read). Its
// storage is a per-thread workspace (core/parallel.hpp), one per Slot, kept across calls: a
// fresh table of a few MB a call costs more in page faults than the kernel's arithmetic.
template <int Slot>
struct turn_table_slot;

struct turn_table {
    index_type rows = 0, cols = 0, stride = 0;
    const index_type* n = nullptr;
    double* x = nullptr;

    double* row(index_type i) { return x + i * stride; }
    const double* row(index_type i) const { return x + i * stride; }
};

// Rows a whole number of cache lines and one more apart: rows 2^k doubles apart map to the same
// L1 sets, and the eight rows a recursion sweeps together would evict each other.
inline index_type turn_table_stride(index_type cols) { return (cols + 7) / 8 * 8 + 8; }

template <int Slot>
turn_table make_turn_table(index_type rows, index_type cols, const index_type* n) {
    const index_type stride = turn_table_stride(cols);
    return {rows, cols, stride, n,
            core::workspace<double, turn_table_slot<Slot>>(static_cast<std::size_t>(rows * stride))};
}

template <int Slot, class T>
turn_table read_turns(const matrix_view<const T>& table, const vector_view<const index_type>& turn_count) {
    turn_table out = make_turn_table<Slot>(table.rows, table.cols, turn_count.data);
    for (index_type i = 0; i < table.rows; ++i) {
        double* o = out.row(i);
        const T* p = table.row(i);
        const index_type n = turn_count[i];
        for (index_type t = 0; t < n; ++t) o[t] = static_cast<double>(core::to_compute(p[t]));
    }
    return out;
}

// Σ_{k≥t} γ^{k−t}·x_k of each row, G_t = x_t + γ·G_{t+1}: the recursion of core/returns.hpp with
// every turn valid, to its bits. Eight rows at a time, so that their chains overlap.
template <int Slot>
turn_table discounted_sums(const turn_table& in, double gamma) {
    turn_table out = make_turn_table<Slot>(in.rows, in.cols, in.n);
    constexpr index_type block = 8;
    for (index_type first = 0; first < in.rows; first += block) {
        const index_type last = std::min(in.rows, first + block);
        index_type longest = 0;
        for (index_type i = first; i < last; ++i) longest = std::max(longest, in.n[i]);
        double running[block] = {};
        for (index_type t = longest - 1; t >= 0; --t)
            for (index_type i = first; i < last; ++i) {
                if (t >= in.n[i]) continue;
                double& g = running[i - first];
                g = in.row(i)[t] + gamma * g;
                out.row(i)[t] = g;
            }
    }
    return out;
}

// The location and scale of every (group, turn index t) cell, then the z-scores of its values;
// the sums of a cell run over the group's members in row order, as two_pass_moments takes them.
struct cell_columns_slot;

// Flags are doubles (counts of non-finite values, of values unlike the cell's first), so that
// every sweep over t is a loop of batches; x − x ≠ 0 is the test for NaN and ±inf.
struct cell_columns {
    double *count, *mean, *centred, *squares, *first, *bad, *spread, *scale;

    explicit cell_columns(index_type cols) {
        const auto size = static_cast<std::size_t>(cols);
        double* block = core::workspace<double, cell_columns_slot>(8 * size);
        double** arrays[] = {&count, &mean, &centred, &squares, &first, &bad, &spread, &scale};
        for (std::size_t k = 0; k < 8; ++k) *arrays[k] = block + k * size;
    }
};

inline double not_finite(double x) { return x - x != 0 ? 1.0 : 0.0; }

// z = NaN for a non-finite set, 0 for a degenerate one, else (x − mean)/scale (standardized()).
inline double z_score(double x, double mean, double scale, double bad, double spread) {
    const double z = (x - mean) / scale;
    return bad != 0 ? std::numeric_limits<double>::quiet_NaN() : spread != 0 ? z : 0.0;
}

inline void standardize_per_turn(const turn_table& values, const group_lists& groups, int ddof, double eps,
                                 bool divide_by_std, turn_table& out) {
    cell_columns c(values.cols);
    for (const auto& members : groups) {
        index_type depth = 0;
        for (index_type i : members) depth = std::max(depth, values.n[i]);
        if (depth == 0) continue;
        const auto d = static_cast<std::size_t>(depth);
        for (double* a : {c.count, c.mean, c.centred, c.squares, c.bad, c.spread}) std::fill_n(a, d, 0.0);
        // The first member of a cell is the first to reach its turn: members reach t in order of
        // their turn counts, so the first value of cell t comes from the first member with n > t.
        index_type reached = 0;
        for (index_type i : members) {
            const double* x = values.row(i);
            const index_type n = values.n[i];
            for (index_type t = reached; t < n; ++t) c.first[t] = x[t];
            reached = std::max(reached, n);
            double *count = c.count, *sum = c.mean, *bad = c.bad;
            for (index_type t = 0; t < n; ++t) {
                count[t] += 1.0;
                sum[t] += x[t];
                bad[t] += not_finite(x[t]);
            }
        }
        for (std::size_t t = 0; t < d; ++t) c.mean[t] /= c.count[t];  // the pass-one mean
        for (index_type i : members) {
            const double* x = values.row(i);
            const index_type n = values.n[i];
            const double *mean = c.mean, *first = c.first;
            double *centred = c.centred, *squares = c.squares, *spread = c.spread;
            for (index_type t = 0; t < n; ++t) {
                const double deviation = x[t] - mean[t];
                centred[t] += deviation;
                squares[t] += deviation * deviation;
                spread[t] += x[t] != first[t] ? 1.0 : 0.0;
            }
        }
        for (std::size_t t = 0; t < d; ++t) {
            const double count = c.count[t];
            c.mean[t] += c.centred[t] / count;
            const double m2 = std::max(c.squares[t] - c.centred[t] * c.centred[t] / count, 0.0);
            c.spread[t] = count >= 2 && c.spread[t] != 0 ? 1.0 : 0.0;  // 0: degenerate
            const double divisor = count - ddof;
            c.scale[t] = divide_by_std ? (divisor > 0 ? std::sqrt(m2 / divisor) : 0.0) + eps : 1.0;
        }
        for (index_type i : members) {
            const double* x = values.row(i);
            double* z = out.row(i);
            const double *mean = c.mean, *scale = c.scale, *bad = c.bad, *spread = c.spread;
            for (index_type t = 0; t < values.n[i]; ++t) z[t] = z_score(x[t], mean[t], scale[t], bad[t], spread[t]);
        }
    }
}

// The location and scale of the values of a set of rows over all their turns (two_pass_moments'
// formulas, each row summed in eight partial sums).
inline location_scale rows_location_scale(const turn_table& values, const std::vector<index_type>& members, int ddof,
                                          double eps, bool divide_by_std) {
    constexpr index_type lanes = 8;
    location_scale result;
    double count = 0;
    double partial[lanes] = {}, bad[lanes] = {};
    for (index_type i : members) {
        const double* x = values.row(i);
        const index_type n = values.n[i];
        count += static_cast<double>(n);
        index_type t = 0;
        for (; t + lanes <= n; t += lanes)
            for (index_type k = 0; k < lanes; ++k) {
                partial[k] += x[t + k];
                bad[k] += not_finite(x[t + k]);
            }
        for (; t < n; ++t) {
            partial[t % lanes] += x[t];
            bad[t % lanes] += not_finite(x[t]);
        }
    }
    if (count == 0) return result;
    double sum = 0, bad_count = 0;
    for (index_type k = 0; k < lanes; ++k) {
        sum += partial[k];
        bad_count += bad[k];
    }
    const double mean = sum / count;
    double centred[lanes] = {}, squares[lanes] = {}, unlike[lanes] = {};
    double first = 0;
    bool have_first = false;
    for (index_type i : members) {
        const double* x = values.row(i);
        const index_type n = values.n[i];
        if (n == 0) continue;
        if (!have_first) {
            first = x[0];
            have_first = true;
        }
        index_type t = 0;
        for (; t + lanes <= n; t += lanes)
            for (index_type k = 0; k < lanes; ++k) {
                const double deviation = x[t + k] - mean;
                centred[k] += deviation;
                squares[k] += deviation * deviation;
                unlike[k] += x[t + k] != first ? 1.0 : 0.0;
            }
        for (; t < n; ++t) {
            const double deviation = x[t] - mean;
            centred[t % lanes] += deviation;
            squares[t % lanes] += deviation * deviation;
            unlike[t % lanes] += x[t] != first ? 1.0 : 0.0;
        }
    }
    double centred_sum = 0, squares_sum = 0, unlike_count = 0;
    for (index_type k = 0; k < lanes; ++k) {
        centred_sum += centred[k];
        squares_sum += squares[k];
        unlike_count += unlike[k];
    }
    result.finite = bad_count == 0;
    result.mean = mean + centred_sum / count;
    result.degenerate = count < 2 || unlike_count == 0;
    if (divide_by_std) {
        const double m2 = std::max(squares_sum - centred_sum * centred_sum / count, 0.0);
        const double divisor = count - ddof;
        result.scale = (divisor > 0 ? std::sqrt(m2 / divisor) : 0.0) + eps;
    }
    return result;
}

// Standardizes the values of each group over all its turns.
inline void standardize_per_group(const turn_table& values, const group_lists& groups, int ddof, double eps,
                                  bool divide_by_std, turn_table& out) {
    for (const auto& members : groups) {
        const location_scale stats = rows_location_scale(values, members, ddof, eps, divide_by_std);
        const double bad = stats.finite ? 0.0 : 1.0, spread = stats.degenerate ? 0.0 : 1.0;
        for (index_type i : members) {
            const double* x = values.row(i);
            double* z = out.row(i);
            for (index_type t = 0; t < values.n[i]; ++t) z[t] = z_score(x[t], stats.mean, stats.scale, bad, spread);
        }
    }
}

template <class T>
void write_turns(const matrix_view<T>& out, const turn_table& values, double padding) {
    for (index_type i = 0; i < out.rows; ++i) {
        const double* x = values.row(i);
        const index_type n = values.n[i];
        T* o = out.row(i);
        for (index_type t = 0; t < n; ++t) o[t] = to_storage<T>(x[t]);
        for (index_type t = n; t < out.cols; ++t) o[t] = to_storage<T>(padding);
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
    const turn_table gains = read_turns<0>(information_gain, turn_count);
    turn_table normalized = make_turn_table<1>(gains.rows, gains.cols, gains.n);
    standardize_per_turn(gains, groups, options.ddof, options.eps, options.normalize_by_std, normalized);
    const turn_table accumulated = discounted_sums<2>(normalized, options.gamma);
    // 1/√(n − t) for every depth n − t ∈ [1, N], once per call.
    std::vector<double> inverse_root(static_cast<std::size_t>(advantages.cols + 1), 0.0);
    for (std::size_t k = 1; k < inverse_root.size(); ++k) inverse_root[k] = 1.0 / std::sqrt(static_cast<double>(k));
    for (index_type i = 0; i < advantages.rows; ++i) {
        const double* g = normalized.row(i);
        const double* D = accumulated.row(i);
        const index_type n = turn_count[i];
        const double outcome = static_cast<double>(core::to_compute(outcome_advantages[i]));
        T* a = advantages.row(i);
        for (index_type t = 0; t < n; ++t)
            a[t] = to_storage<T>(outcome + options.alpha * D[t] * inverse_root[static_cast<std::size_t>(n - t)]);
        if (n < advantages.cols) a[n] = to_storage<T>(outcome);
        for (index_type t = n + 1; t < advantages.cols; ++t) a[t] = to_storage<T>(0.0);
        if (clip_scale.empty()) continue;
        T* c = clip_scale.row(i);
        for (index_type t = 0; t < n; ++t) {
            const double sigmoid = 1.0 / (1.0 + std::exp(-g[t]));
            c[t] = to_storage<T>(1.0 + options.clip_spread * (2.0 * sigmoid - 1.0));
        }
        for (index_type t = n; t < advantages.cols; ++t) c[t] = to_storage<T>(1.0);
    }
}

template <class T>
void mapo_advantages(matrix_view<const T> rewards, vector_view<const index_type> turn_count, const groups& grouping,
                     matrix_view<T> advantages, const mapo_options& options) {
    const group_lists groups =
        checked_turn_groups("rewards", rewards, turn_count, grouping, advantages, options.gamma, options.eps, 0);
    core::require(std::isfinite(options.alpha), "alpha must be finite, got ", options.alpha);
    const turn_table immediate = read_turns<0>(rewards, turn_count);
    turn_table turn_term = discounted_sums<1>(immediate, options.gamma);
    standardize_per_turn(turn_term, groups, 0, options.eps, true, turn_term);
    turn_table group_term = make_turn_table<2>(immediate.rows, immediate.cols, immediate.n);
    if (options.immediate_scope == normalization_scope::group) {
        standardize_per_group(immediate, groups, 0, options.eps, true, group_term);
    } else {
        group_lists batch(1, std::vector<index_type>(static_cast<std::size_t>(rewards.rows)));
        std::iota(batch[0].begin(), batch[0].end(), index_type(0));
        standardize_per_group(immediate, batch, 0, options.eps, true, group_term);
    }
    for (index_type i = 0; i < immediate.rows; ++i) {
        double* a = turn_term.row(i);
        const double* b = group_term.row(i);
        for (index_type t = 0; t < immediate.n[i]; ++t) a[t] = options.alpha * a[t] + (1.0 - options.alpha) * b[t];
    }
    write_turns(advantages, turn_term, 0.0);
}

template <class T>
void gtpo_advantages(matrix_view<const T> rewards, vector_view<const index_type> turn_count, const groups& grouping,
                     matrix_view<T> advantages, const gtpo_options& options) {
    const group_lists groups = checked_turn_groups("rewards", rewards, turn_count, grouping, advantages, options.gamma,
                                                   options.eps, options.ddof);
    turn_table returns = discounted_sums<1>(read_turns<0>(rewards, turn_count), options.gamma);
    if (options.scope == gtpo_scope::turn_index)
        standardize_per_turn(returns, groups, options.ddof, options.eps, true, returns);
    else
        standardize_per_group(returns, groups, options.ddof, options.eps, true, returns);
    write_turns(advantages, returns, 0.0);
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
