// Turns run-time flags (has weight, has bias, ...) into compile-time ones, so
// the inner loops carry no branches and the optional parts cost nothing.
#pragma once

#include <type_traits>
#include <utility>

namespace normkit::core {

template <class F>
decltype(auto) with_flags(F&& f, bool a) {
    return a ? f(std::true_type{}) : f(std::false_type{});
}

template <class F>
decltype(auto) with_flags(F&& f, bool a, bool b) {
    return with_flags([&](auto first) { return b ? f(first, std::true_type{}) : f(first, std::false_type{}); }, a);
}

template <class F>
decltype(auto) with_flags(F&& f, bool a, bool b, bool c) {
    return with_flags(
        [&](auto first, auto second) {
            return c ? f(first, second, std::true_type{}) : f(first, second, std::false_type{});
        },
        a, b);
}

template <class F>
decltype(auto) with_flags(F&& f, bool a, bool b, bool c, bool d) {
    return with_flags(
        [&](auto first, auto second, auto third) {
            return d ? f(first, second, third, std::true_type{}) : f(first, second, third, std::false_type{});
        },
        a, b, c);
}

}  // namespace normkit::core
