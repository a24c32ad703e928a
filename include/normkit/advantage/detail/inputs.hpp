// Argument helpers of the advantage estimators: const and writable views of
// whatever vector a caller passes, and reward_inputs from rewards and groups.
#pragma once

#include "../group_normalize.hpp"

#include <type_traits>
#include <utility>

namespace normkit::advantage::detail {

template <class X>
auto const_vector(const X& x) {
    const auto data = as_vector(x);
    return vector_view<const std::remove_const_t<typename decltype(data)::value_type>>(data);
}

template <class X>
auto mutable_vector(X&& x) {
    auto data = as_vector(std::forward<X>(x));
    using O = typename decltype(data)::value_type;
    static_assert(!std::is_const_v<O>, "an output must be writable");
    static_assert(std::is_same_v<O, float> || std::is_same_v<O, double>, "outputs hold float or double");
    return data;
}

template <class Rewards>
auto inputs_of(const Rewards& rewards, const groups& grouping) {
    const auto data = const_vector(rewards);
    using T = std::remove_const_t<typename decltype(data)::value_type>;
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "rewards must be float or double");
    reward_inputs<T> inputs;
    inputs.rewards = data;
    inputs.grouping = grouping;
    return inputs;
}

template <class X>
auto const_matrix(const X& x) {
    const auto data = view(x);
    return matrix_view<const std::remove_const_t<typename decltype(data)::value_type>>(data);
}

}  // namespace normkit::advantage::detail
