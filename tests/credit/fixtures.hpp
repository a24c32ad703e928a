// Inputs the token-credit tests share: random response masks and the turn tables of the
// reference (tests/reference/credit.hpp) in and out of the kernels' dense [rows × cols] form.
#pragma once

#include "reference/credit.hpp"

#include <normkit/core/types.hpp>
#include <normkit/credit/entropy.hpp>
#include <normkit/credit/returns.hpp>
#include <normkit/credit/spans.hpp>
#include <normkit/credit/turns.hpp>

#include <cstdint>
#include <random>
#include <vector>

namespace normkit::testing {

// A response mask: row i valid for a random length, with a few interior holes
// (tool observations) when `holes`, and row `empty_row` all masked.
inline std::vector<double> random_mask(index_type rows, index_type cols, std::uint32_t seed, bool holes,
                                       index_type empty_row = -1) {
    std::mt19937 generator(seed);
    std::vector<double> mask(rows * cols, 0.0);
    for (index_type i = 0; i < rows; ++i) {
        if (i == empty_row) continue;
        const index_type length = 1 + static_cast<index_type>(generator() % static_cast<std::uint32_t>(cols));
        for (index_type t = 0; t < length; ++t) mask[i * cols + t] = (holes && generator() % 5 == 0) ? 0.0 : 1.0;
    }
    return mask;
}

// The first count[i] values of each row of a dense table, as the reference's rows.
inline reference::turn_rows turn_rows_of(const std::vector<double>& table, index_type cols,
                                         const std::vector<index_type>& count) {
    reference::turn_rows rows(count.size());
    for (std::size_t i = 0; i < count.size(); ++i)
        for (index_type t = 0; t < count[i]; ++t) rows[i].push_back(table[i * cols + t]);
    return rows;
}

// The reference's rows as a dense table, `padding` past each row's end.
inline std::vector<double> table_of(const reference::turn_rows& rows, index_type cols, double padding = 0.0) {
    std::vector<double> table(rows.size() * cols, padding);
    for (std::size_t i = 0; i < rows.size(); ++i)
        for (std::size_t t = 0; t < rows[i].size() && static_cast<index_type>(t) < cols; ++t)
            table[i * cols + t] = rows[i][t];
    return table;
}

// Options set by name: a positional brace list of an options struct does not compile
// (core/execution.hpp).
inline credit::discounted_returns_options returns_options(double gamma,
                                                          return_mask_rule rule = return_mask_rule::carry) {
    credit::discounted_returns_options options;
    options.gamma = gamma;
    options.mask_rule = rule;
    return options;
}

inline credit::gae_options gae_settings(double gamma, double lambda, return_mask_rule rule = return_mask_rule::carry) {
    credit::gae_options options;
    options.gamma = gamma;
    options.lambda = lambda;
    options.mask_rule = rule;
    return options;
}

inline credit::span_options span_settings(credit::outside_span outside) {
    credit::span_options options;
    options.outside = outside;
    return options;
}

inline credit::turns_to_tokens_options turns_to_tokens_settings(double outside) {
    credit::turns_to_tokens_options options;
    options.outside = outside;
    return options;
}

inline credit::top_entropy_options top_entropy(double rho) {
    credit::top_entropy_options options;
    options.rho = rho;
    return options;
}

inline credit::hapo_entropy_options hapo_entropy(double pivot,
                                                 credit::hapo_sign sign = credit::hapo_sign::paper_range) {
    credit::hapo_entropy_options options;
    options.pivot = pivot;
    options.sign = sign;
    return options;
}

inline credit::hapo_clip_options hapo_clip(double low, double high) {
    credit::hapo_clip_options options;
    options.clip_low = low;
    options.clip_high = high;
    return options;
}

}  // namespace normkit::testing
