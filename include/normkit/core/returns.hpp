// The one masked backward recursion of the library, with one rule for its
// discount: the discounted sums over the tokens of a response
// (credit::discounted_returns, advantage::reinforce_pp and remax) run through
// masked_discounted_sum. Two kernels run its carry and discount_through rules on
// several rows at once, a row per lane, for the speed of overlapping chains:
// GAE (credit/detail/returns.hpp, gae_lanes) and the turn returns
// (credit/detail/turns.hpp, discounted_sums); each lane follows this loop's
// rule on its row, and both are tested against the double references.
#pragma once

#include "error.hpp"
#include "types.hpp"

#include <cmath>

namespace normkit {

// What a masked position (m = 0) does to a running return: carry passes it
// unchanged (verl-new), reset stores the return there and cuts it to 0 (verl-old),
// discount_through adds what the caller gives there (0 for a masked reward) and
// discounts as at any position (OpenRLHF, which multiplies rewards and values by the mask).
enum class return_mask_rule { carry, reset, discount_through };

namespace core {

inline void require_discount(const char* name, double value) {
    core::require(std::isfinite(value) && value >= 0 && value <= 1, name, " must lie in [0, 1], got ", value);
}

// Over positions t = length − 1 … 0:
//   carry: at valid t, G ← x(t) + discount·G;                    store(t, valid, G)
//   reset: at every t, G ← x(t) + discount·G; store(t, valid, G); G ← 0 after a masked t
//   discount_through: at every t, G ← x(t) + discount·G; store(t, valid, G)
// x is read only where the rule adds it (valid positions under carry, every position otherwise).
template <class Valid, class Term, class Store>
void masked_discounted_sum(index_type length, double discount, return_mask_rule rule, Valid&& valid, Term&& term,
                           Store&& store) {
    double running = 0;
    for (index_type t = length - 1; t >= 0; --t) {
        const bool inside = valid(t);
        if (rule == return_mask_rule::carry) {
            if (inside) running = term(t) + discount * running;
            store(t, inside, running);
        } else {
            running = term(t) + discount * running;
            store(t, inside, running);
            if (!inside && rule == return_mask_rule::reset) running = 0;
        }
    }
}

// The return stored at t under a rule: 0 at a masked position under carry.
inline double stored_return(return_mask_rule rule, bool inside, double running) {
    return rule == return_mask_rule::carry && !inside ? 0.0 : running;
}

}  // namespace core
}  // namespace normkit
