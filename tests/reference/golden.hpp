// The shape of the golden tables scripts/golden/*.py write (tests/<module>/golden_<framework>.hpp): each
// case is named, and holds named arrays of doubles (a scalar is an array of one); and the two helpers
// every golden test uses: a case's array as a row-major matrix, and an element-wise comparison.
#pragma once

#include <normkit/core/types.hpp>

#include <Eigen/Core>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace normkit::golden {

struct golden_case {
    const char* name;
    std::vector<std::pair<const char*, std::vector<double>>> fields;

    bool has(const std::string& key) const {
        for (const auto& field : fields)
            if (key == field.first) return true;
        return false;
    }
    const std::vector<double>& operator[](const std::string& key) const {
        for (const auto& field : fields)
            if (key == field.first) return field.second;
        throw std::out_of_range("golden case " + std::string(name) + " has no field " + key);
    }
    double scalar(const std::string& key) const { return (*this)[key].at(0); }
};

using matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

inline matrix as_matrix(const std::vector<double>& values, index_type rows, index_type cols) {
    REQUIRE(static_cast<index_type>(values.size()) == rows * cols);
    return Eigen::Map<const matrix>(values.data(), rows, cols);
}

// The array `key` of a case with the case's own "rows" × "cols".
inline matrix as_matrix(const golden_case& c, const char* key) {
    return as_matrix(c[key], static_cast<index_type>(c.scalar("rows")), static_cast<index_type>(c.scalar("cols")));
}

// max |x| and a row's sum as plain loops (Eigen's AVX-512 reductions trip GCC 12's maybe-uninitialized).
inline double max_abs(const matrix& x) {
    double result = 0;
    for (index_type k = 0; k < x.size(); ++k) result = std::max(result, std::abs(x.data()[k]));
    return result;
}

inline double row_sum(const matrix& x, index_type row) {
    double sum = 0;
    for (index_type t = 0; t < x.cols(); ++t) sum += x(row, t);
    return sum;
}

// Every element within `tolerance`, relative or absolute.
inline void check_close(const double* actual, const std::vector<double>& expected, double tolerance = 1e-12) {
    for (std::size_t k = 0; k < expected.size(); ++k) {
        INFO("element " << k);
        CHECK(actual[k] == Approx(expected[k]).margin(tolerance).epsilon(tolerance));
    }
}

inline void check_close(const matrix& actual, const std::vector<double>& expected, double tolerance = 1e-12) {
    REQUIRE(static_cast<std::size_t>(actual.size()) == expected.size());
    check_close(actual.data(), expected, tolerance);
}

}  // namespace normkit::golden
