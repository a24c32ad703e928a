// Shared pieces of the token-credit kernels: the shape checks for [B × T]
// token matrices, masks and turn tables, and the one standardizer every
// per-group z-score here goes through.
//
// Conventions used by every credit header:
// - A token (i, t) is valid when mask(i, t) ≠ 0 (docs/api.md: nonzero = valid;
//   only "nonzero" counts, the value is never a weight). The mask has the
//   storage type of the token data it masks. Masked positions of the inputs are
//   never read for their values, so they may hold anything (NaN, −inf, padding
//   garbage).
// - Groups of responses are a normkit::groups: contiguous_groups(G) or
//   group_ids(ids) (verl's uid: any non-negative integers, any order; groups are
//   numbered by first appearance, members in row order). Token-level data are
//   float or double; the arithmetic is double (these kernels are O(B·T), the
//   logits are O(T·V)).
// - standardize(): the centred two-pass moments of core::two_pass_moments; a
//   set of equal values, or of one value, is degenerate and standardizes to 0
//   exactly. A set holding a NaN or ±inf is not finite: every z-score of it is
//   NaN, a set of one and a set of equal infinities included (neither is
//   degenerate), so a non-finite value propagates as NaN to exactly the set
//   it belongs to.
#pragma once

#include "../core/error.hpp"
#include "../core/groups.hpp"
#include "../core/moments.hpp"
#include "../core/types.hpp"
#include "../core/view.hpp"

#include <cmath>
#include <limits>
#include <vector>

namespace normkit::credit::detail {

template <class T>
inline bool is_valid(T mask_value) {
    return core::to_compute(mask_value) != 0;
}

template <class T>
void require_per_sample(const char* name, const vector_view<T>& values, index_type rows) {
    core::require(values.size == rows && (values.data != nullptr || rows == 0), name, " has length ", values.size,
                  " but there are ", rows, " samples");
}

// The members of each group, in row order (group g's rows are members[g]).
inline std::vector<std::vector<index_type>> group_members(const groups& grouping, index_type rows) {
    core::require(grouping.contiguous() || grouping.id_count == rows, "group_ids has length ", grouping.id_count,
                  " but there are ", rows, " samples");
    const core::group_layout layout = core::resolve(grouping, rows, "the rows");
    std::vector<std::vector<index_type>> members(static_cast<std::size_t>(layout.count));
    for (index_type g = 0; g < layout.count; ++g)
        layout.for_members(g, [&](index_type i) { members[static_cast<std::size_t>(g)].push_back(i); });
    return members;
}

struct location_scale {
    double mean = 0;
    double scale = 1;        // what to divide by (std + eps, or 1)
    bool degenerate = true;  // fewer than two values or all equal: z = 0
    bool finite = true;      // no NaN or ±inf in the set; otherwise z = NaN
};

// Mean and (std + eps) of values with the given ddof; see the header comment.
inline location_scale standardize(const std::vector<double>& values, int ddof, double eps, bool divide_by_std) {
    location_scale result;
    const auto n = static_cast<index_type>(values.size());
    if (n == 0) return result;
    for (double v : values) result.finite = result.finite && std::isfinite(v);
    const moments stats = core::two_pass_moments([&](auto&& sink) {
        for (double v : values) sink(v, 1.0);
    });
    result.mean = stats.mean;
    bool spread = false;
    for (double v : values) spread = spread || v != values[0];
    result.degenerate = n < 2 || !spread;
    if (divide_by_std) {
        const double divisor = static_cast<double>(n - ddof);
        result.scale = (divisor > 0 ? std::sqrt(stats.m2 / divisor) : 0.0) + eps;
    }
    return result;
}

inline double standardized(double value, const location_scale& stats) {
    if (!stats.finite) return std::numeric_limits<double>::quiet_NaN();
    return stats.degenerate ? 0.0 : (value - stats.mean) / stats.scale;
}

// A per-turn table [B × N] with turn_count[i] ≤ N valid turns in row i.
template <class T>
void require_turn_table(const char* name, const matrix_view<T>& table,
                        const vector_view<const index_type>& turn_count) {
    core::require_data(name, table);
    require_per_sample("turn_count", turn_count, table.rows);
    for (index_type i = 0; i < table.rows; ++i)
        core::require(turn_count[i] >= 0 && turn_count[i] <= table.cols, "turn_count[", i, "] = ", turn_count[i],
                      " is outside [0, ", table.cols, "] for ", name, " (", table.rows, "x", table.cols, ")");
}

}  // namespace normkit::credit::detail
