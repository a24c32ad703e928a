// What the differential fuzz targets share: reading a case from libFuzzer's
// bytes, values that reach every special case (NaN, ±inf, huge, subnormal,
// signed zero, constants), matrices with a row stride and an unaligned base,
// and the checks.
//
// A target asserts only what the headers document: agreement with the double
// reference of tests/reference/ within the documented tolerance for ordinary
// input, a documented value for degenerate input, the documented special-value
// behaviour for NaN / ±inf, bitwise equality where the headers promise it
// (threads, streaming, in place), and no crash or undefined behaviour ever.
// A failed check prints what failed and aborts, so libFuzzer keeps the input.
//
// A check that a known, not yet fixed library bug fails is guarded by
// known(id): it is skipped unless NORMKIT_FUZZ_STRICT=1, and
// tests/fuzz/FINDINGS.md says what it is and who fixes it.
#pragma once

#include <normkit/core/parallel.hpp>
#include <normkit/core/types.hpp>
#include <normkit/core/view.hpp>

#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace normkit::fuzz {

// A case's choices, read from the fuzzer's bytes; the values come from a generator seeded by them.
struct source {
    FuzzedDataProvider bytes;
    std::mt19937 generator;

    source(const std::uint8_t* data, std::size_t size)
        : bytes(data, size), generator(bytes.ConsumeIntegral<std::uint32_t>()) {}

    template <class I>
    I integer(I low, I high) {
        return bytes.ConsumeIntegralInRange<I>(low, high);
    }
    bool flag() { return bytes.ConsumeBool(); }
    template <class E, std::size_t N>
    E pick(const E (&choices)[N]) {
        return choices[integer<std::size_t>(0, N - 1)];
    }
    double uniform(double low, double high) { return std::uniform_real_distribution<double>(low, high)(generator); }
    double normal() { return std::normal_distribution<double>(0.0, 1.0)(generator); }
};

enum class special { none, nan, plus_infinity, minus_infinity, huge, subnormal };

inline double special_value(special kind, bool negative) {
    const double sign = negative ? -1.0 : 1.0;
    switch (kind) {
        case special::nan:
            return std::numeric_limits<double>::quiet_NaN();
        case special::plus_infinity:
            return std::numeric_limits<double>::infinity();
        case special::minus_infinity:
            return -std::numeric_limits<double>::infinity();
        case special::huge:
            return sign * 3e38;
        case special::subnormal:
            return sign * 1e-41;
        case special::none:
            break;
    }
    return 0.0;
}

// The kinds of rows a matrix's values take: most are ordinary, the rest reach a degenerate case.
enum class profile { normal, offset, constant, zero, tiny, wide, integers };

// count values of one profile, at a scale 10^exponent.
inline std::vector<double> values(source& in, std::size_t count, profile kind, int exponent) {
    const double scale = std::pow(10.0, exponent);
    const double offset = in.uniform(-1, 1) * scale * 1e3;
    const double constant = in.uniform(-2, 2) * scale;
    std::vector<double> out(count);
    for (auto& value : out) {
        switch (kind) {
            case profile::normal:
                value = in.normal() * scale;
                break;
            case profile::offset:
                value = offset + in.normal() * scale;
                break;
            case profile::constant:
                value = constant;
                break;
            case profile::zero:
                value = 0.0;
                break;
            case profile::tiny:
                value = in.normal() * 1e-39;
                break;
            case profile::wide:
                value = in.normal() * std::pow(10.0, in.uniform(-6, 6)) * scale;
                break;
            case profile::integers:
                value = std::floor(in.uniform(-4, 5));
                break;
        }
    }
    return out;
}

// Puts up to `count` special values of the fuzzer's choice at positions of its choice.
inline void sprinkle(source& in, std::vector<double>& out, int count) {
    if (out.empty()) return;
    for (int k = 0; k < count; ++k) {
        const auto kind = static_cast<special>(in.integer<int>(1, 5));
        const auto at = in.integer<std::size_t>(0, out.size() - 1);
        out[at] = special_value(kind, in.flag());
    }
}

inline bool all_finite(const std::vector<double>& values) {
    for (double value : values)
        if (!std::isfinite(value)) return false;
    return true;
}

// Bitwise equality of two buffers of one type, except that any NaN equals any NaN: the headers
// promise the same bits (threads, streaming, in place), and no NaN's sign or payload is documented.
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t k = 0; k < a.size(); ++k) {
        if (std::memcmp(&a[k], &b[k], sizeof(T)) == 0) continue;
        const double x = static_cast<double>(core::to_compute(a[k])), y = static_cast<double>(core::to_compute(b[k]));
        if (!(std::isnan(x) && std::isnan(y))) return false;
    }
    return true;
}

// A check of a documented property: prints the case and aborts when it fails.
template <class... Parts>
void check(bool condition, const Parts&... parts) {
    if (condition) return;
    std::ostringstream message;
    (message << ... << parts);
    std::fprintf(stderr, "normkit fuzz: check failed: %s\n", message.str().c_str());
    std::fflush(stderr);
    std::abort();
}

// Whether a check that a known library bug (tests/fuzz/FINDINGS.md, entry `id`) fails is skipped.
inline bool known(const char* id) {
    static const bool strict = [] {
        const char* value = std::getenv("NORMKIT_FUZZ_STRICT");
        return value != nullptr && std::string(value) == "1";
    }();
    (void)id;
    return !strict;
}

// A rows × cols matrix of storage T, `padding` elements between rows, one element past the start
// of its buffer when unaligned; the elements outside the view hold a fill value.
template <class T>
struct matrix {
    std::vector<T> storage;
    matrix_view<T> view;

    matrix(index_type rows, index_type cols, index_type padding, bool unaligned) {
        const index_type stride = cols + padding, offset = unaligned ? 1 : 0;
        storage.assign(static_cast<std::size_t>(offset + rows * stride + 1), fill());
        view = {storage.data() + offset, rows, cols, stride};
    }
    static T fill() { return core::from_compute<T>(core::compute_t<T>(-7)); }
    void set(const std::vector<double>& values) {
        for (index_type i = 0; i < view.rows; ++i)
            for (index_type j = 0; j < view.cols; ++j)
                view(i, j) = core::from_compute<T>(static_cast<core::compute_t<T>>(values[i * view.cols + j]));
    }
    // The values as stored, in double, dense.
    std::vector<double> values() const {
        std::vector<double> out(static_cast<std::size_t>(view.rows * view.cols));
        for (index_type i = 0; i < view.rows; ++i)
            for (index_type j = 0; j < view.cols; ++j)
                out[i * view.cols + j] = static_cast<double>(core::to_compute(view(i, j)));
        return out;
    }
    // The view's elements, dense, as stored (for bitwise comparisons).
    std::vector<T> elements() const {
        std::vector<T> out;
        for (index_type i = 0; i < view.rows; ++i) out.insert(out.end(), view.row(i), view.row(i) + view.cols);
        return out;
    }
    bool padding_untouched() const {
        const T value = fill();
        std::vector<bool> inside(storage.size(), false);
        const auto base = static_cast<std::size_t>(view.data - storage.data());
        for (index_type i = 0; i < view.rows; ++i)
            for (index_type j = 0; j < view.cols; ++j)
                inside[base + static_cast<std::size_t>(i * view.row_stride + j)] = true;
        for (std::size_t k = 0; k < storage.size(); ++k)
            if (!inside[k] && std::memcmp(&storage[k], &value, sizeof(T)) != 0) return false;
        return true;
    }
};

// values rounded to storage T, in double.
template <class T>
std::vector<double> stored(std::vector<double> values) {
    for (auto& value : values) value = static_cast<double>(core::round_to<T>(static_cast<core::compute_t<T>>(value)));
    return values;
}

template <class T>
std::vector<T> to_storage(const std::vector<double>& values) {
    std::vector<T> out(values.size());
    for (std::size_t k = 0; k < values.size(); ++k)
        out[k] = core::from_compute<T>(static_cast<core::compute_t<T>>(values[k]));
    return out;
}

template <class V>
std::vector<double> to_double(const V& values) {
    std::vector<double> out;
    for (const auto& value : values) out.push_back(static_cast<double>(core::to_compute(value)));
    return out;
}

// max |v|, NaN if any v is NaN (std::max would drop it).
inline double max_abs(const std::vector<double>& values) {
    double largest = 0;
    for (double value : values) {
        if (std::isnan(value)) return value;
        largest = std::max(largest, std::abs(value));
    }
    return largest;
}

// max |a − b| / max(floor, max |b|) over the entries (infinite if one is NaN and the other not).
inline double relative_error(const std::vector<double>& actual, const std::vector<double>& expected,
                             double floor = 1e-300) {
    if (actual.size() != expected.size()) return INFINITY;
    double worst = 0, scale = std::max(floor, 1e-300);
    for (std::size_t k = 0; k < actual.size(); ++k) {
        if (std::isnan(actual[k]) != std::isnan(expected[k])) return INFINITY;
        if (std::isnan(actual[k])) continue;
        scale = std::max(scale, std::abs(expected[k]));
        if (actual[k] == expected[k]) continue;  // equal infinities
        worst = std::max(worst, std::abs(actual[k] - expected[k]));
    }
    return worst == 0 ? 0.0 : worst / scale;
}

// The per-type relative tolerance of one rounding with headroom (tests/support.hpp's).
template <class T>
double tolerance() {
    if constexpr (std::is_same_v<T, double>)
        return 1e-12;
    else if constexpr (std::is_same_v<T, float>)
        return 2e-5;
    else if constexpr (std::is_same_v<T, Eigen::bfloat16>)
        return 1.6e-2;
    else
        return 2e-3;
}

template <class T>
const char* type_name() {
    if constexpr (std::is_same_v<T, float>)
        return "float";
    else if constexpr (std::is_same_v<T, double>)
        return "double";
    else if constexpr (std::is_same_v<T, Eigen::bfloat16>)
        return "bfloat16";
    else
        return "half";
}

// The largest finite value of storage T, in double.
template <class T>
double largest() {
    if constexpr (std::is_same_v<T, Eigen::half>)
        return 65504.0;
    else if constexpr (std::is_same_v<T, Eigen::bfloat16>)
        return 3.38e38;
    else
        return static_cast<double>(std::numeric_limits<T>::max());
}

// Runs call; true if it threw normkit::error. Any other exception is a failure.
// The message of the last normkit::error throws_error caught.
inline std::string& last_error() {
    static std::string message;
    return message;
}

template <class Call>
bool throws_error(Call&& call) {
    try {
        call();
    } catch (const normkit::error& e) {
        last_error() = e.what();
        return true;
    }
    return false;
}

}  // namespace normkit::fuzz

// libFuzzer checks every input for leaks (-detect_leaks); LeakSanitizer's own check at exit would
// report libomp's thread pool, whose references LeakSanitizer does not see, so it is off.
extern "C" const char* __asan_default_options() { return "leak_check_at_exit=0"; }

// Before the first input: OpenMP's thread pool at every team size the targets use (up to 7), so
// that libomp's own allocations for it are not counted as a leak of the first input that asks for
// threads (LeakSanitizer does not see libomp's references to them).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
    for (int threads = 2; threads <= 8; ++threads) {
        std::vector<int> touched(static_cast<std::size_t>(threads), 0);
        normkit::core::parallel_for(threads, threads, [&](normkit::index_type begin, normkit::index_type end) {
            for (auto i = begin; i < end; ++i) touched[static_cast<std::size_t>(i)] = 1;
        });
    }
    return 0;
}
