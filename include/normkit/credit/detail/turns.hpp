// The implementation of credit/turns.hpp. A per-turn table is read once into a flat [B × N]
// buffer of doubles (padding never read), or straight into the discounted sums where nothing else
// reads it (GTPO); the discounted sums run eight rows at a time, so the eight independent
// recursions overlap; the statistics of the (group, turn index) cells are taken a batch of turn
// indices at a time, lane k the cell of index t + k, summed over the group's members in row order
// in registers (two_pass_moments' order, cell by cell); a group's statistics over all its turns
// take each row in eight partial sums (batches of lanes), and its z-scores are made as the output
// row is written (MAPO's group term, GTPO all_turns). A few flat buffers per call, nothing
// allocated per row, per cell or per turn.
#pragma once

#include "../returns.hpp"
#include "../../core/convert.hpp"
#include "../../core/math.hpp"
#include "../../core/parallel.hpp"
#include "../token_data.hpp"

#include <algorithm>
#include <array>
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

// body(i) for every row, in contiguous blocks of rows on the threads.
template <class Body>
void each_row(index_type rows, int threads, Body&& body) {
    core::parallel_for(rows, threads, [&](index_type begin, index_type end) {
        for (index_type i = begin; i < end; ++i) body(i);
    });
}

// body(members) for every group, in contiguous blocks of groups on the threads: a group reads and
// writes only its members' rows.
template <class Body>
void each_group(const group_lists& groups, int threads, Body&& body) {
    core::parallel_for(static_cast<index_type>(groups.size()), threads, [&](index_type begin, index_type end) {
        for (index_type g = begin; g < end; ++g) body(groups[static_cast<std::size_t>(g)]);
    });
}

template <int Slot, class T>
turn_table read_turns(const matrix_view<const T>& table, const vector_view<const index_type>& turn_count, int threads) {
    turn_table out = make_turn_table<Slot>(table.rows, table.cols, turn_count.data);
    each_row(table.rows, threads, [&](index_type i) {
        double* o = out.row(i);
        const T* p = table.row(i);
        const index_type n = turn_count[i];
        for (index_type t = 0; t < n; ++t) o[t] = to_double(p[t]);
    });
    return out;
}

// Σ_{k≥t} γ^{k−t}·x_k of each row, G_t = x_t + γ·G_{t+1} with x_t = value(i, t): the recursion of
// core/returns.hpp with every turn valid, to its bits. Eight rows at a time, so that their chains
// overlap (a row's chain is its own: its bits do not depend on the rows beside it); the blocks of
// eight on the threads.
template <int Slot, class Value>
turn_table discounted_sums(index_type rows, index_type cols, const index_type* n, double gamma, int threads,
                           Value&& value) {
    turn_table out = make_turn_table<Slot>(rows, cols, n);
    constexpr index_type block = 8;
    each_row((rows + block - 1) / block, threads, [&](index_type b) {
        const index_type first = b * block;
        const index_type last = std::min(rows, first + block);
        index_type longest = 0;
        for (index_type i = first; i < last; ++i) longest = std::max(longest, n[i]);
        double running[block] = {};
        for (index_type t = longest - 1; t >= 0; --t)
            for (index_type i = first; i < last; ++i) {
                if (t >= n[i]) continue;
                double& g = running[i - first];
                g = value(i, t) + gamma * g;
                out.row(i)[t] = g;
            }
    });
    return out;
}

template <int Slot>
turn_table discounted_sums(const turn_table& in, double gamma, int threads) {
    return discounted_sums<Slot>(in.rows, in.cols, in.n, gamma, threads,
                                 [&](index_type i, index_type t) { return in.row(i)[t]; });
}

// z = NaN for a non-finite set, 0 for a degenerate one, else (x − mean)/scale (standardized()):
// lane by lane, bad and spread being masks of the lanes' sets.
using double_batch = core::batch<double>;
using double_mask = core::batch_mask<double>;
constexpr index_type double_lanes = core::width<double>;

inline double_batch z_scores(const double_batch& x, const double_batch& mean, const double_batch& scale,
                             const double_mask& bad, const double_mask& spread) {
    const double_batch z = xsimd::select(spread, (x - mean) / scale, double_batch(0.0));
    return xsimd::select(bad, double_batch(std::numeric_limits<double>::quiet_NaN()), z);
}

// NaN and ±inf: x − x is not 0. Written as ~(… == 0) since xsimd's != is the ordered compare,
// false where a lane is NaN.
inline double_mask not_finite(const double_batch& x) { return ~((x - x) == double_batch(0.0)); }

// The scale of a set from its count and M2: √(M2/(count − ddof)) + ε (0 + ε when count ≤ ddof), or
// 1 when the set is only centred.
inline double_batch set_scale(const double_batch& count, const double_batch& m2, int ddof, double eps,
                              bool divide_by_std) {
    if (!divide_by_std) return double_batch(1.0);
    const double_batch divisor = count - double_batch(static_cast<double>(ddof));
    const double_batch zero(0.0);
    return xsimd::select(divisor > zero, core::square_root(m2 / divisor), zero) + double_batch(eps);
}

// A set's location and scale from its count, pass-one mean, and centred sums Σ(x − mean) and
// Σ(x − mean)² (two_pass_moments' correction): location = mean + Σ/count, M2 = max(Σ² − Σ²/count, 0).
struct set_location_scale {
    double_batch location, scale;
};

inline set_location_scale finish_set(const double_batch& count, const double_batch& mean, const double_batch& centred,
                                     const double_batch& squares, int ddof, double eps, bool divide_by_std) {
    const double_batch m2 = core::maximum(double_batch(0.0), squares - centred * centred / count);  // NaN stays NaN
    return {mean + centred / count, set_scale(count, m2, ddof, eps, divide_by_std)};
}

// The lanes a batch of a row adds into: every lane (a whole batch, added without a select) or
// those of a mask (a row's last batch).
struct every_lane {};

inline void add_in(double_batch& sum, every_lane, const double_batch& x) { sum += x; }
inline void add_in(double_batch& sum, const double_mask& in, const double_batch& x) { core::add_where(sum, in, x); }
inline const double_mask& within(every_lane, const double_mask& m) { return m; }
inline double_mask within(const double_mask& in, const double_mask& m) { return in & m; }

// f(lanes, x) for the first c ≥ 1 values at p: every_lane when c is a whole batch.
template <class F>
[[gnu::always_inline]] inline void with_lanes(const double* p, index_type c, F&& f) {
    if (c == double_lanes)
        f(every_lane{}, double_batch::load_unaligned(p));
    else
        f(core::lanes_below<double>(c), core::load(p, c));
}

// The z-scores of every (group, turn index t) cell: for each batch of turn indices, lane k the
// cell t + k, the cell's sums run over the group's members in row order in registers (the order
// two_pass_moments takes them), then its members' z-scores are written. A member reaches the
// lanes below its turn count. Every read of a batch's columns precedes its writes, so `out` may be
// `values`.
inline void standardize_per_turn(const turn_table& values, const group_lists& groups, int ddof, double eps,
                                 bool divide_by_std, turn_table& out, int threads) {
    using D = double_batch;
    constexpr index_type W = double_lanes;
    const D zero(0.0), one(1.0);
    each_group(groups, threads, [&](const std::vector<index_type>& members) {
        index_type depth = 0;
        for (index_type i : members) depth = std::max(depth, values.n[i]);
        for (index_type t = 0; t < depth; t += W) {
            // f(i, c) for each member i reaching turn t, c = the lanes it reaches, in member order.
            const auto each_reaching = [&](auto&& f) {
                for (index_type i : members)
                    if (const index_type c = std::min(W, values.n[i] - t); c > 0) f(i, c);
            };
            D count = zero, sum = zero, first = zero;
            double_mask have(false);  // lanes whose first value is known: the first member to reach them
            double_mask bad(false);   // lanes with a NaN or ±inf
            each_reaching([&](index_type i, index_type c) {
                with_lanes(values.row(i) + t, c, [&](const auto& in, const D& x) {
                    const double_mask fresh = within(in, !have);
                    first = xsimd::select(fresh, x, first);
                    have = have | fresh;
                    add_in(count, in, one);
                    add_in(sum, in, x);
                    bad = bad | within(in, not_finite(x));
                });
            });
            const D mean = sum / count;  // the pass-one mean
            D centred = zero, squares = zero;
            double_mask unlike(false);  // lanes with a value unlike the cell's first
            each_reaching([&](index_type i, index_type c) {
                with_lanes(values.row(i) + t, c, [&](const auto& in, const D& x) {
                    const D deviation = x - mean;
                    add_in(centred, in, deviation);
                    add_in(squares, in, deviation * deviation);
                    unlike = unlike | within(in, x != first);
                });
            });
            const set_location_scale set = finish_set(count, mean, centred, squares, ddof, eps, divide_by_std);
            const double_mask spread = (count >= D(2.0)) & unlike;
            each_reaching([&](index_type i, index_type c) {
                const D x = core::load(values.row(i) + t, c);
                core::store(out.row(i) + t, z_scores(x, set.location, set.scale, bad, spread), c);
            });
        }
    });
}

// Sums over a set of rows' turns, each row taken in eight partial sums (turn t into partial t mod 8),
// as batches: partial k is lane k mod W of batch k / W. A row's last block reaches the lanes below
// its remainder.
constexpr index_type row_partials = 8, partial_batches = row_partials / double_lanes;
using partial_sums = std::array<double_batch, partial_batches>;

template <class Step>
[[gnu::always_inline]] inline void for_each_partial(const double* x, index_type n, Step&& step) {
    index_type t = 0;
    for (; t + row_partials <= n; t += row_partials)
        for (index_type j = 0; j < partial_batches; ++j)
            step(j, every_lane{}, double_batch::load_unaligned(x + t + j * double_lanes));
    for (index_type j = 0; j < partial_batches; ++j) {
        const index_type c = std::min(double_lanes, n - t - j * double_lanes);
        if (c > 0)
            with_lanes(x + t + j * double_lanes, c, [&](const auto& in, const double_batch& v) { step(j, in, v); });
    }
}

// Σ over the partials in order 0 … 7.
inline double partial_total(const partial_sums& partials) {
    alignas(64) double lanes[row_partials];
    for (index_type j = 0; j < partial_batches; ++j) partials[j].store_aligned(lanes + j * double_lanes);
    double total = 0;
    for (double v : lanes) total += v;
    return total;
}

// The location and scale of the values of a set of rows over all their turns (two_pass_moments'
// formulas, each row summed in eight partial sums).
inline location_scale rows_location_scale(const turn_table& values, const std::vector<index_type>& members, int ddof,
                                          double eps, bool divide_by_std) {
    using D = double_batch;
    const D zero(0.0);
    location_scale result;
    double count = 0;
    partial_sums sum;
    sum.fill(zero);
    double_mask bad(false);  // a NaN or ±inf in some lane
    for (index_type i : members) {
        count += static_cast<double>(values.n[i]);
        for_each_partial(values.row(i), values.n[i], [&](index_type j, const auto& in, const D& x) {
            add_in(sum[j], in, x);
            bad = bad | within(in, not_finite(x));
        });
    }
    if (count == 0) return result;
    const double mean = partial_total(sum) / count;
    partial_sums centred, squares;
    centred.fill(zero);
    squares.fill(zero);
    double_mask unlike(false);  // a value unlike the first in some lane
    double first = 0;
    bool have_first = false;
    for (index_type i : members) {
        if (values.n[i] == 0) continue;
        if (!have_first) {
            first = values.row(i)[0];
            have_first = true;
        }
        for_each_partial(values.row(i), values.n[i], [&](index_type j, const auto& in, const D& x) {
            const D deviation = x - D(mean);
            add_in(centred[j], in, deviation);
            add_in(squares[j], in, deviation * deviation);
            unlike = unlike | within(in, x != D(first));
        });
    }
    const set_location_scale set =
        finish_set(D(count), D(mean), D(partial_total(centred)), D(partial_total(squares)), ddof, eps, divide_by_std);
    result.finite = !xsimd::any(bad);
    result.mean = set.location.get(0);
    result.degenerate = count < 2 || !xsimd::any(unlike);
    result.scale = set.scale.get(0);
    return result;
}

// The z-scores of row i of `values` against one set's stats, batch by batch, given to
// emit(i, t, count, z) for turns [t, t + count) of the row; then done(i), while the row is in cache.
template <class Emit, class Done>
void row_z_scores(const turn_table& values, index_type i, const location_scale& stats, Emit&& emit, Done&& done) {
    const double_batch mean(stats.mean), scale(stats.scale);
    const double_mask bad(!stats.finite), spread(!stats.degenerate);
    const double* x = values.row(i);
    core::for_each_batch<double>(values.n[i], [&](index_type t, index_type c) {
        emit(i, t, c, z_scores(core::load(x + t, c), mean, scale, bad, spread));
    });
    done(i);
}

// row_z_scores of rows `members`, in order.
template <class Emit, class Done>
void group_z_scores(const turn_table& values, const std::vector<index_type>& members, const location_scale& stats,
                    Emit&& emit, Done&& done) {
    for (index_type i : members) row_z_scores(values, i, stats, emit, done);
}

// Row o of a [B × N] output: x[0 .. count), then `padding` to the end.
template <class T>
void write_row(T* o, const double* x, index_type count, index_type cols, double padding) {
    for (index_type t = 0; t < count; ++t) o[t] = to_storage<T>(x[t]);
    for (index_type t = count; t < cols; ++t) o[t] = to_storage<T>(padding);
}

template <class T>
void write_turns(const matrix_view<T>& out, const turn_table& values, double padding, int threads) {
    each_row(out.rows, threads,
             [&](index_type i) { write_row(out.row(i), values.row(i), values.n[i], out.cols, padding); });
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
    const int threads = options.threads;
    const turn_table gains = read_turns<0>(information_gain, turn_count, threads);
    turn_table normalized = make_turn_table<1>(gains.rows, gains.cols, gains.n);
    standardize_per_turn(gains, groups, options.ddof, options.eps, options.normalize_by_std, normalized, threads);
    turn_table accumulated = discounted_sums<2>(normalized, options.gamma, threads);
    // root[j] = 1/√(N − j), once per call, so that a row of n turns reads 1/√(n − t) forwards at
    // root[N − n + t].
    const index_type N = advantages.cols;
    std::vector<double> root(static_cast<std::size_t>(N));
    for (index_type j = 0; j < N; ++j) root[static_cast<std::size_t>(j)] = 1.0 / std::sqrt(static_cast<double>(N - j));
    using D = double_batch;
    const D alpha(options.alpha), spread(options.clip_spread), one(1.0), two(2.0);
    each_row(advantages.rows, threads, [&](index_type i) {
        const index_type n = turn_count[i];
        const double outcome = to_double(outcome_advantages[i]);
        // A_t = outcome + α·D_t/√(n − t) and c_t = 1 + κ·(2σ(ĨG_t) − 1), in place in the rows of D and ĨG.
        double* a = accumulated.row(i);
        double* c = normalized.row(i);
        const double* r = root.data() + (N - n);
        core::for_each_batch<double>(n, [&](index_type t, index_type count) {
            core::store(a + t, D(outcome) + alpha * core::load(a + t, count) * core::load(r + t, count), count);
            const D sigmoid = one / (one + core::exp(-core::load(c + t, count)));
            core::store(c + t, one + spread * (two * sigmoid - one), count);
        });
        if (n < N) a[n] = outcome;  // the outcome turn (a row's stride leaves room for it)
        write_row(advantages.row(i), a, std::min(n + 1, N), N, 0.0);
        if (!clip_scale.empty()) write_row(clip_scale.row(i), c, n, N, 1.0);
    });
}

template <class T>
void mapo_advantages(matrix_view<const T> rewards, vector_view<const index_type> turn_count, const groups& grouping,
                     matrix_view<T> advantages, const mapo_options& options) {
    const group_lists groups =
        checked_turn_groups("rewards", rewards, turn_count, grouping, advantages, options.gamma, options.eps, 0);
    core::require(std::isfinite(options.alpha), "alpha must be finite, got ", options.alpha);
    const int threads = options.threads;
    const turn_table immediate = read_turns<0>(rewards, turn_count, threads);
    turn_table turn_term = discounted_sums<1>(immediate, options.gamma, threads);
    standardize_per_turn(turn_term, groups, 0, options.eps, true, turn_term, threads);
    // A_t = α·A_turn + (1 − α)·A_group, the group term taken as it is combined (no table of it), a row
    // written out while it is in cache.
    const double_batch alpha(options.alpha), rest(1.0 - options.alpha);
    const auto combine = [&](index_type i, index_type t, index_type c, const double_batch& z) {
        double* a = turn_term.row(i) + t;
        core::store(a, alpha * core::load(a, c) + rest * z, c);
    };
    const auto write = [&](index_type i) {
        write_row(advantages.row(i), turn_term.row(i), turn_term.n[i], advantages.cols, 0.0);
    };
    if (options.immediate_scope == normalization_scope::group) {
        each_group(groups, threads, [&](const std::vector<index_type>& members) {
            group_z_scores(immediate, members, rows_location_scale(immediate, members, 0, options.eps, true), combine,
                           write);
        });
    } else {
        // The batch's statistics are one set: summed on the calling thread in row order (a few turns
        // a row), then the rows on the threads.
        std::vector<index_type> batch(static_cast<std::size_t>(rewards.rows));
        std::iota(batch.begin(), batch.end(), index_type(0));
        const location_scale stats = rows_location_scale(immediate, batch, 0, options.eps, true);
        each_row(rewards.rows, threads, [&](index_type i) { row_z_scores(immediate, i, stats, combine, write); });
    }
}

template <class T>
void gtpo_advantages(matrix_view<const T> rewards, vector_view<const index_type> turn_count, const groups& grouping,
                     matrix_view<T> advantages, const gtpo_options& options) {
    const group_lists groups = checked_turn_groups("rewards", rewards, turn_count, grouping, advantages, options.gamma,
                                                   options.eps, options.ddof);
    const int threads = options.threads;
    turn_table returns = discounted_sums<1>(rewards.rows, rewards.cols, turn_count.data, options.gamma, threads,
                                            [&](index_type i, index_type t) { return to_double(rewards.row(i)[t]); });
    if (options.scope == gtpo_scope::turn_index) {
        standardize_per_turn(returns, groups, options.ddof, options.eps, true, returns, threads);
        return write_turns(advantages, returns, 0.0, threads);
    }
    each_group(groups, threads, [&](const std::vector<index_type>& members) {  // all turns: each row written
        const location_scale stats = rows_location_scale(returns, members, options.ddof, options.eps, true);
        group_z_scores(
            returns, members, stats,
            [&](index_type i, index_type t, index_type c, const double_batch& z) {
                core::store(returns.row(i) + t, z, c);
            },
            [&](index_type i) { write_row(advantages.row(i), returns.row(i), returns.n[i], advantages.cols, 0.0); });
    });
}

// Whether row i of turn_index is a valid row of turn indices: each in [−1, turns), the ones ≥ 0
// non-decreasing.
inline bool turn_row_valid(const index_type* row, index_type cols, index_type turns) {
    index_type previous = -1;
    for (index_type t = 0; t < cols; ++t) {
        const index_type turn = row[t];
        if (turn < -1 || turn >= turns) return false;
        if (turn < 0) continue;
        if (turn < previous) return false;
        previous = turn;
    }
    return true;
}

template <class T>
void turns_to_tokens(matrix_view<const T> per_turn, matrix_view<const index_type> turn_index, matrix_view<T> output,
                     const turns_to_tokens_options& options) {
    core::require_data("per_turn", per_turn);
    core::require_data("turn_index", turn_index);
    core::require_like("output", output, "turn_index", turn_index);
    core::require(per_turn.rows == turn_index.rows, "per_turn has ", per_turn.rows, " rows (", per_turn.rows, "x",
                  per_turn.cols, ") but turn_index has ", turn_index.rows);
    core::require_disjoint("output", output, "per_turn", per_turn, "turn_index", turn_index);
    // Every row is checked before anything is written (core::first_where: on the threads); the
    // first bad row's first bad token is named.
    const index_type cols = turn_index.cols, turns = per_turn.cols;
    const index_type bad = core::first_where(turn_index.rows, options.threads, [&](index_type i) {
        return !turn_row_valid(turn_index.row(i), cols, turns);
    });
    if (bad < turn_index.rows) {
        index_type previous = -1;
        for (index_type t = 0; t < cols; ++t) {
            const index_type turn = turn_index(bad, t);
            core::require(turn >= -1 && turn < turns, "turn_index(", bad, ", ", t, ") = ", turn, " is outside [-1, ",
                          turns, ")");
            if (turn < 0) continue;
            core::require(turn >= previous, "turn_index is not monotone in row ", bad, ": turn ", turn, " at token ", t,
                          " follows turn ", previous);
            previous = turn;
        }
    }
    const T outside = to_storage<T>(options.outside);
    each_row(turn_index.rows, options.threads, [&](index_type i) {
        const index_type* index = turn_index.row(i);
        const T* values = per_turn.row(i);
        T* out = output.row(i);
        for (index_type t = 0; t < cols; ++t) out[t] = index[t] < 0 ? outside : values[index[t]];
    });
}

}  // namespace normkit::credit::detail
