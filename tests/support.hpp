// Test support: random data, storage-type buffers laid out with a row stride
// and an unaligned base, tolerances per storage type, and a finite-difference
// helper. Reference formulas live in tests/reference/.
#pragma once

#include <normkit/core/types.hpp>
#include <normkit/core/view.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace normkit::testing {

// The dims that hit every SIMD tail for 4-, 8- and 16-lane batches.
inline const std::vector<index_type> tail_dims = {1, 2, 3, 15, 16, 17, 31, 33, 127, 128, 1000, 4097};

inline std::vector<double> random_values(std::size_t count, std::uint32_t seed, double mean = 0.0,
                                         double stddev = 1.0) {
    std::mt19937 generator(seed);
    std::normal_distribution<double> normal(mean, stddev);
    std::vector<double> values(count);
    for (auto& value : values) value = normal(generator);
    return values;
}

template <class T>
inline const char* type_name() {
    if constexpr (std::is_same_v<T, float>)
        return "float";
    else if constexpr (std::is_same_v<T, double>)
        return "double";
    else if constexpr (std::is_same_v<T, Eigen::bfloat16>)
        return "bfloat16";
    else
        return "half";
}

// Relative tolerance of one rounding to storage type T, with headroom for a
// few float operations (float) or a handful of roundings (bf16, half).
template <class T>
inline double tolerance() {
    if constexpr (std::is_same_v<T, double>)
        return 1e-12;
    else if constexpr (std::is_same_v<T, float>)
        return 2e-5;
    else if constexpr (std::is_same_v<T, Eigen::bfloat16>)
        return 1.6e-2;
    else
        return 2e-3;
}

// A rows × cols matrix of storage type T, row_stride apart, starting one
// element past an aligned allocation (so the base pointer is unaligned).
template <class T>
struct test_matrix {
    std::vector<T> storage;
    matrix_view<T> view;

    test_matrix(index_type rows, index_type cols, index_type padding = 0, bool unaligned = true) {
        const index_type stride = cols + padding;
        const index_type offset = unaligned ? 1 : 0;
        storage.assign(static_cast<std::size_t>(offset + rows * stride + 1),
                       core::from_compute<T>(core::compute_t<T>(-7)));
        view = {storage.data() + offset, rows, cols, stride};
    }
    test_matrix(index_type rows, index_type cols, const std::vector<double>& values, index_type padding = 0,
                bool unaligned = true)
        : test_matrix(rows, cols, padding, unaligned) {
        set(values);
    }
    void set(const std::vector<double>& values) {
        for (index_type i = 0; i < view.rows; ++i)
            for (index_type j = 0; j < view.cols; ++j)
                view(i, j) = core::from_compute<T>(static_cast<core::compute_t<T>>(values[i * view.cols + j]));
    }
    // The values as stored (rounded to T), in double, dense.
    std::vector<double> values() const {
        std::vector<double> out(static_cast<std::size_t>(view.rows * view.cols));
        for (index_type i = 0; i < view.rows; ++i)
            for (index_type j = 0; j < view.cols; ++j)
                out[i * view.cols + j] = static_cast<double>(core::to_compute(view(i, j)));
        return out;
    }
    // Every element outside the view still holds the fill value.
    bool padding_untouched() const {
        const T fill = core::from_compute<T>(core::compute_t<T>(-7));
        std::vector<bool> inside(storage.size(), false);
        const auto base = static_cast<std::size_t>(view.data - storage.data());
        for (index_type i = 0; i < view.rows; ++i)
            for (index_type j = 0; j < view.cols; ++j)
                inside[base + static_cast<std::size_t>(i * view.row_stride + j)] = true;
        for (std::size_t k = 0; k < storage.size(); ++k)
            if (!inside[k] && std::memcmp(&storage[k], &fill, sizeof(T)) != 0) return false;
        return true;
    }
};

template <class T>
inline std::vector<T> to_storage(const std::vector<double>& values) {
    std::vector<T> out(values.size());
    for (std::size_t i = 0; i < values.size(); ++i)
        out[i] = core::from_compute<T>(static_cast<core::compute_t<T>>(values[i]));
    return out;
}

template <class T>
inline std::vector<double> stored(const std::vector<double>& values) {
    std::vector<double> out(values.size());
    for (std::size_t i = 0; i < values.size(); ++i)
        out[i] = static_cast<double>(core::round_to<T>(static_cast<core::compute_t<T>>(values[i])));
    return out;
}

template <class V>
inline std::vector<double> to_double(const V& values) {
    std::vector<double> out;
    for (const auto& value : values) out.push_back(static_cast<double>(core::to_compute(value)));
    return out;
}

// max_i |a_i − b_i| / scale, with scale = max(floor, max_i |b_i|): an error
// relative to the size of the reference, robust to entries near zero. Where
// the result cancels (a gradient of a nearly invariant function), `floor`
// gives the size of the terms that cancelled.
inline double relative_error(const std::vector<double>& actual, const std::vector<double>& expected,
                             double floor = 1e-30) {
    REQUIRE(actual.size() == expected.size());
    double scale = floor, worst = 0;
    for (double value : expected) scale = std::max(scale, std::abs(value));
    for (std::size_t i = 0; i < actual.size(); ++i) {
        if (std::isnan(actual[i]) != std::isnan(expected[i])) return INFINITY;
        worst = std::max(worst, std::abs(actual[i] - expected[i]));
    }
    return worst / scale;
}

// Central finite difference of a scalar function of x, in double.
inline std::vector<double> finite_difference(std::vector<double> x,
                                             const std::function<double(const std::vector<double>&)>& f,
                                             double step = 1e-6) {
    std::vector<double> gradient(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double saved = x[i];
        x[i] = saved + step;
        const double up = f(x);
        x[i] = saved - step;
        const double down = f(x);
        x[i] = saved;
        gradient[i] = (up - down) / (2 * step);
    }
    return gradient;
}

inline double max_abs(const std::vector<double>& values) {
    double largest = 0;
    for (double value : values) largest = std::max(largest, std::abs(value));
    return largest;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
    double sum = 0;
    for (std::size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
    return sum;
}

// Checks that `call` throws normkit::error whose message contains `word`.
template <class Call>
void require_error_naming(Call&& call, const std::string& word) {
    try {
        call();
    } catch (const normkit::error& e) {
        INFO("message: " << e.what());
        CHECK(std::string(e.what()).find(word) != std::string::npos);
        return;
    }
    FAIL("expected normkit::error naming '" << word << "'");
}

}  // namespace normkit::testing
