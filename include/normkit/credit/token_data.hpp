// Shared pieces of the token-credit kernels: the shape checks for [B × T]
// token matrices, masks, group ids and turn tables, and the one standardizer
// every per-group z-score here goes through.
//
// Conventions used by every credit header:
// - A token (i, t) is valid when mask(i, t) ≠ 0; masks hold 0/1 (any nonzero
//   counts as 1). Masked positions of the inputs are never read for their
//   values, so they may hold anything (NaN, −inf, padding garbage).
// - Group ids are arbitrary integers (verl's uid); rows with the same id form a
//   group, in order of first appearance. Token-level data are float or double;
//   the arithmetic is double (these kernels are O(B·T), the logits are O(T·V)).
// - standardize(): mean by a shifted sum, so a set of equal values has mean
//   equal to them exactly and z = 0 exactly; one value, or zero spread, gives 0.
#pragma once

#include "../core/error.hpp"
#include "../core/types.hpp"
#include "../core/view.hpp"

#include <cmath>
#include <unordered_map>
#include <vector>

namespace normkit::credit::detail {

template <class T>
inline bool is_valid(T mask_value) {
    return core::to_compute(mask_value) != 0;
}

template <class T, class U>
void require_token_matrix(const char* name, const matrix_view<T>& x, const char* reference_name, const matrix_view<U>& reference) {
    core::require_data(name, x);
    core::require_same_shape(name, x, reference_name, reference);
}

template <class T>
void require_per_sample(const char* name, const vector_view<T>& values, index_type rows) {
    core::require(values.size == rows && (values.data != nullptr || rows == 0), name, " has length ", values.size, " but there are ", rows,
                  " samples");
}

// Dense group numbers for arbitrary ids, in order of first appearance.
struct group_table {
    std::vector<index_type> group_of;                // per sample
    std::vector<std::vector<index_type>> members;   // per group, in sample order
};

inline group_table make_groups(vector_view<const index_type> ids) {
    group_table table;
    std::unordered_map<index_type, index_type> number;
    table.group_of.resize(static_cast<std::size_t>(ids.size));
    for (index_type i = 0; i < ids.size; ++i) {
        const auto [it, inserted] = number.emplace(ids[i], static_cast<index_type>(table.members.size()));
        if (inserted) table.members.emplace_back();
        table.group_of[static_cast<std::size_t>(i)] = it->second;
        table.members[static_cast<std::size_t>(it->second)].push_back(i);
    }
    return table;
}

struct location_scale {
    double mean = 0;
    double scale = 1;  // what to divide by (std + eps, or 1)
    bool degenerate = true;  // fewer than two values or zero spread: z = 0
};

// Mean and (std + eps) of values[0..n) with the given ddof; see the header comment.
inline location_scale standardize(const std::vector<double>& values, int ddof, double eps, bool divide_by_std) {
    location_scale result;
    const auto n = static_cast<index_type>(values.size());
    if (n == 0) return result;
    const double first = values[0];
    double shifted = 0;
    for (double v : values) shifted += v - first;
    result.mean = first + shifted / static_cast<double>(n);
    double squares = 0;
    for (double v : values) squares += (v - result.mean) * (v - result.mean);
    const bool spread = squares > 0;
    result.degenerate = n < 2 || !spread;
    if (divide_by_std) {
        const double divisor = static_cast<double>(n - ddof);
        result.scale = (divisor > 0 ? std::sqrt(squares / divisor) : 0.0) + eps;
    }
    return result;
}

inline double standardized(double value, const location_scale& stats) {
    return stats.degenerate ? 0.0 : (value - stats.mean) / stats.scale;
}

// A per-turn table [B × N] with turn_count[i] ≤ N valid turns in row i.
template <class T>
void require_turn_table(const char* name, const matrix_view<T>& table, const vector_view<const index_type>& turn_count) {
    core::require_data(name, table);
    require_per_sample("turn_count", turn_count, table.rows);
    for (index_type i = 0; i < table.rows; ++i)
        core::require(turn_count[i] >= 0 && turn_count[i] <= table.cols, "turn_count[", i, "] = ", turn_count[i], " is outside [0, ", table.cols,
                      "] for ", name, " (", table.rows, "x", table.cols, ")");
}

}  // namespace normkit::credit::detail
