// normkit::error — the one exception type for bad input.
//
// Bad input (mismatched shapes, eps <= 0, unknown ids, null pointers) throws
// normkit::error, derived from std::invalid_argument, whose message names the
// argument and the shapes involved. Legal but degenerate input (zero variance,
// an all-masked row, a group of one) never throws: each kernel documents the
// value it returns instead.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace normkit {

class error : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

namespace core {

// Builds a message from its parts with operator<< and throws it as normkit::error.
template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
    std::ostringstream message;
    message << "normkit: ";
    (message << ... << parts);
    throw error(message.str());
}

// Throws when `condition` is false; the parts are only formatted on failure.
template <class... Parts>
void require(bool condition, const Parts&... parts) {
    if (!condition) fail(parts...);
}

}  // namespace core
}  // namespace normkit
