// The whitening of group_normalize (plan.hpp): after every path, the group-normalized values of the
// valid samples (not those singleton_policy::exclude marked) are whitened over the whole batch, each
// weighted 1 or by its token count, with D from divisor (divisor.hpp) over x/s when the values are huge
// (core::two_pass_moments_scaled).
#pragma once

#include "plan.hpp"

namespace normkit::advantage::detail {

template <class T, class O>
inline void normalizer<T, O>::whiten() {
    const whiten_options& whiten = options_.whiten;
    if (whiten.mode == whiten_mode::none) return;
    const bool by_tokens = whiten.mode == whiten_mode::token_weighted;
    const auto whitens = [&](index_type i) {
        return is_valid(i) && (excluded_.empty() || !excluded_[static_cast<std::size_t>(i)]);
    };
    const auto whitened = core::two_pass_moments_scaled([&](auto&& sink) {
        for (index_type i = 0; i < n_; ++i)
            if (whitens(i)) sink(static_cast<double>(out_[i]), by_tokens ? tokens_[i] : 1.0);
    });
    const double denominator =
        divisor(whitened.scaled.variance(whiten.ddof), whiten.eps, whiten.placement, whitened.scale);
    for (index_type i = 0; i < n_; ++i)
        out_[i] = whitens(i) && whitened.scaled.count > 0
                      ? static_cast<O>(whitened_value(static_cast<double>(out_[i]), whitened, denominator))
                      : O(0);
}

}  // namespace normkit::advantage::detail
