// Storage and compute types.
//
// Four storage types are supported: float, double, Eigen::bfloat16 and
// Eigen::half. Arithmetic and statistics run in float, or in double for double
// storage (compute_t). Saved statistics and parameter gradients are never
// narrower than float (statistic_t). bf16 conversion is round-to-nearest-even
// with NaN kept quiet, bit for bit the rule Eigen and PyTorch use.
#pragma once

#include <Eigen/Core>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace normkit {

using index_type = std::ptrdiff_t;

// The type of the saved statistics (mean, rstd) and the parameter gradients of
// storage type T: float, or double for double storage.
template <class T>
using statistic_t = std::conditional_t<std::is_same_v<std::remove_const_t<T>, double>, double, float>;

namespace core {

template <class T>
inline constexpr bool is_storage_v = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                                     std::is_same_v<T, Eigen::bfloat16> || std::is_same_v<T, Eigen::half>;

// The arithmetic type of storage type T (float for the 16-bit types).
template <class T>
using compute_t = normkit::statistic_t<T>;

template <class T>
using statistic_t = normkit::statistic_t<T>;

// The type a row's sums (Σx², Σ(x − c), Σg·x, ...) are accumulated in: double for float and double
// rows, so that an fp32 statistic carries no accumulation error and is one rounding from the
// float64 one (a float's square is exact in double); float for 16-bit rows, whose elements
// and outputs carry 8 or 11 significant bits.
template <class T>
using sum_t = std::conditional_t<std::is_same_v<std::remove_const_t<T>, float>, double, compute_t<T>>;

inline float bfloat16_bits_to_float(std::uint16_t bits) {
    const std::uint32_t widened = static_cast<std::uint32_t>(bits) << 16;
    float value;
    std::memcpy(&value, &widened, sizeof value);
    return value;
}

inline std::uint16_t float_to_bfloat16_bits(float value) {
    std::uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;  // NaN stays a quiet NaN
    bits += 0x7fffu + ((bits >> 16) & 1u);                   // round to nearest, ties to even
    return static_cast<std::uint16_t>(bits >> 16);
}

template <class T>
inline compute_t<T> to_compute(T value) {
    if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
        return bfloat16_bits_to_float(Eigen::numext::bit_cast<std::uint16_t>(value));
    } else {
        return static_cast<compute_t<T>>(value);
    }
}

template <class T>
inline T from_compute(compute_t<T> value) {
    if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
        return Eigen::numext::bit_cast<Eigen::bfloat16>(float_to_bfloat16_bits(value));
    } else {
        return static_cast<T>(value);
    }
}

// Rounds a compute value through storage type T and back (identity for float, double).
template <class T>
inline compute_t<T> round_to(compute_t<T> value) {
    return to_compute(from_compute<T>(value));
}

}  // namespace core
}  // namespace normkit
