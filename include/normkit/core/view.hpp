// The one view type: rows of contiguous elements, a row stride apart.
//
// Every kernel normalizes along the last, contiguous axis, so every input is
// seen as a matrix_view: `rows` rows of `cols` elements, row i starting at
// data + i * row_stride. view() builds it from
//   - a RowMajor Eigen::Tensor / TensorMap of any rank (leading axes are rows),
//   - a row-major Eigen::Matrix / Map / Ref / Block (or a column vector, n rows of 1),
//   - a raw pointer with rows, cols and row stride (torch and numpy buffers),
// so one implementation serves all three. vector_view is the contiguous
// one-dimensional case (weights, biases, statistics, per-sample data); a
// default-constructed vector_view means "absent" for optional arguments.
#pragma once

#include "error.hpp"
#include "types.hpp"

#include <Eigen/Core>
#include <unsupported/Eigen/CXX11/Tensor>

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <type_traits>
#include <utility>
#include <vector>

namespace normkit {

namespace core {

template <class E, class = void>
struct is_eigen_dense : std::false_type {};

// Any Eigen dense object: a Matrix, Map, Ref, Block or VectorBlock. Detected by
// DenseBase's public IsRowMajor and innerStride(), which tensors lack (a
// VectorBlock's DenseBase is its Block's, so is_base_of would miss it).
template <class E>
struct is_eigen_dense<E, std::void_t<decltype(E::IsRowMajor), decltype(std::declval<E&>().innerStride())>>
    : std::true_type {};

template <class E>
inline constexpr bool is_eigen_dense_v = is_eigen_dense<E>::value;

template <class E>
inline constexpr bool is_eigen_tensor_v = std::is_base_of_v<Eigen::TensorBase<E, Eigen::ReadOnlyAccessors>, E>;

template <class E>
using data_pointer_t = decltype(std::declval<E&>().data());

template <class E>
index_type tensor_size(const E& tensor) {
    index_type size = 1;
    for (int axis = 0; axis < E::NumIndices; ++axis) size *= static_cast<index_type>(tensor.dimension(axis));
    return size;
}

// Eigen data that view() turns into a matrix_view.
template <class E>
inline constexpr bool is_viewable_v = is_eigen_dense_v<E> || is_eigen_tensor_v<E>;

template <class E, bool = is_eigen_dense_v<E>>
struct is_column_major_matrix : std::false_type {};
template <class E>
struct is_column_major_matrix<E, true>
    : std::bool_constant<!static_cast<bool>(E::IsRowMajor) && static_cast<int>(E::ColsAtCompileTime) != 1> {};

// A column-major Eigen type that may have more than one column: view() rejects it at compile time
// (rows must be contiguous); one with a single column at compile time is a vector, n rows of 1.
template <class E>
inline constexpr bool is_column_major_matrix_v = is_column_major_matrix<E>::value;

// Containers that own their elements: a std::vector, an Eigen Matrix, Array or Tensor (not a Map,
// Ref, Block or TensorMap, which borrow).
template <class E>
struct owns_elements : std::false_type {};
template <class U, class Allocator>
struct owns_elements<std::vector<U, Allocator>> : std::true_type {};
template <class S, int R, int C, int O, int MR, int MC>
struct owns_elements<Eigen::Matrix<S, R, C, O, MR, MC>> : std::true_type {};
template <class S, int R, int C, int O, int MR, int MC>
struct owns_elements<Eigen::Array<S, R, C, O, MR, MC>> : std::true_type {};
template <class S, int N, int O, class I>
struct owns_elements<Eigen::Tensor<S, N, O, I>> : std::true_type {};
template <class S, class D, int O, class I>
struct owns_elements<Eigen::TensorFixedSize<S, D, O, I>> : std::true_type {};

// E&& binds a temporary that owns its elements. Views and groups do not own what they see, so
// one made from such a temporary would dangle as soon as the full expression ends: those
// conversions are deleted, and the caller names the container instead (docs/api.md, Ownership).
template <class E>
inline constexpr bool is_owning_temporary_v =
    !std::is_lvalue_reference_v<E> && owns_elements<std::remove_cv_t<std::remove_reference_t<E>>>::value;

}  // namespace core

template <class T>
struct matrix_view {
    using value_type = T;

    T* data = nullptr;
    index_type rows = 0;
    index_type cols = 0;
    index_type row_stride = 0;

    matrix_view() = default;
    matrix_view(std::nullptr_t) {}
    matrix_view(T* data_, index_type rows_, index_type cols_, index_type row_stride_)
        : data(data_), rows(rows_), cols(cols_), row_stride(row_stride_) {}

    // Anything view() accepts (an Eigen matrix, map, block or RowMajor tensor) whose elements are
    // T's, so that an optional matrix argument of type matrix_view<T> takes Eigen data or {} (absent)
    // alike. Data of another storage type, or const data where T is written, is no conversion at
    // all: the compiler's error points at that argument ("could not convert 'mask' from …").
    template <class E, class Plain = std::decay_t<E>,
              class = std::enable_if_t<core::is_viewable_v<Plain> && !core::is_owning_temporary_v<E> &&
                                       std::is_convertible_v<core::data_pointer_t<E>, T*>>>
    matrix_view(E&& x);

    // A view of a temporary matrix or tensor would dangle: name it first (docs/api.md, Ownership).
    template <class E, std::enable_if_t<core::is_owning_temporary_v<E>, int> = 0>
    matrix_view(E&& temporary) = delete;

    T* row(index_type i) const { return data + i * row_stride; }
    T& operator()(index_type i, index_type j) const { return data[i * row_stride + j]; }
    index_type size() const { return rows * cols; }
    bool empty() const { return data == nullptr; }
    bool contiguous() const { return row_stride == cols || rows <= 1; }

    operator matrix_view<const T>() const { return {data, rows, cols, row_stride}; }
};

template <class T>
struct vector_view {
    using value_type = T;

    T* data = nullptr;
    index_type size = 0;

    vector_view() = default;
    vector_view(std::nullptr_t) {}
    vector_view(T* data_, index_type size_) : data(data_), size(size_) {}

    template <class U, class = std::enable_if_t<std::is_convertible_v<U*, T*>>>
    vector_view(const vector_view<U>& other) : data(other.data), size(other.size) {}

    template <class U, class Allocator, class = std::enable_if_t<std::is_convertible_v<U*, T*>>>
    vector_view(std::vector<U, Allocator>& values)
        : data(values.data()), size(static_cast<index_type>(values.size())) {}

    template <class U, class Allocator, class = std::enable_if_t<std::is_convertible_v<const U*, T*>>>
    vector_view(const std::vector<U, Allocator>& values)
        : data(values.data()), size(static_cast<index_type>(values.size())) {}

    // Eigen vectors (contiguous) and tensors of any rank (flattened, contiguous).
    // A view of a temporary vector, matrix or tensor would dangle: name it first (docs/api.md,
    // Ownership).
    template <class E, std::enable_if_t<core::is_owning_temporary_v<E>, int> = 0>
    vector_view(E&& temporary) = delete;

    template <class E, class Plain = std::decay_t<E>,
              class = std::enable_if_t<core::is_viewable_v<Plain> && !core::is_owning_temporary_v<E> &&
                                       std::is_convertible_v<core::data_pointer_t<E>, T*>>>
    vector_view(E&& values) {
        if constexpr (core::is_eigen_dense_v<Plain>) {
            core::require(values.rows() == 1 || values.cols() == 1,
                          "a vector argument must have one row or one column, got ", values.rows(), "x", values.cols());
            auto& dense = values.derived();
            // Distance between consecutive elements along the vector's long axis.
            const bool column_shaped = values.cols() == 1;
            const index_type step =
                column_shaped == static_cast<bool>(Plain::IsRowMajor) ? dense.outerStride() : dense.innerStride();
            core::require(values.size() <= 1 || step == 1, "a vector argument must be contiguous, got element stride ",
                          step);
            size = static_cast<index_type>(values.size());
        } else {
            size = core::tensor_size(values);
        }
        data = values.data();
    }

    T& operator[](index_type i) const { return data[i]; }
    bool empty() const { return data == nullptr; }
    T* begin() const { return data; }
    T* end() const { return data + size; }
};

// view(x): the matrix_view of an Eigen matrix or tensor, or of a raw buffer.
template <class T>
matrix_view<T> view(T* data, index_type rows, index_type cols, index_type row_stride) {
    core::require(data != nullptr || rows * cols == 0, "view: null data pointer for a ", rows, "x", cols, " matrix");
    core::require(rows >= 0 && cols >= 0, "view: negative shape ", rows, "x", cols);
    core::require(row_stride >= cols || rows <= 1, "view: row_stride ", row_stride, " is smaller than cols ", cols);
    return {data, rows, cols, row_stride};
}

template <class T>
matrix_view<T> view(T* data, index_type rows, index_type cols) {
    return view(data, rows, cols, cols);
}

template <class T>
matrix_view<T> view(matrix_view<T> x) {
    return x;
}

// A view of a temporary matrix or tensor would dangle: name it first (docs/api.md, Ownership).
template <class E, std::enable_if_t<core::is_owning_temporary_v<E>, int> = 0>
void view(E&& temporary) = delete;

template <class E, class Plain = std::decay_t<E>,
          class = std::enable_if_t<core::is_viewable_v<Plain> && !core::is_owning_temporary_v<E>>>
auto view(E&& x) {
    using element = std::remove_pointer_t<core::data_pointer_t<E>>;
    if constexpr (core::is_eigen_tensor_v<Plain>) {
        constexpr int rank = Plain::NumIndices;
        static_assert(rank >= 1, "normkit::view: a rank-0 tensor has no axis to normalize");
        static_assert(rank == 1 || static_cast<int>(Plain::Layout) == static_cast<int>(Eigen::RowMajor),
                      "normkit::view: tensors must be RowMajor (the last axis is the normalized, contiguous one)");
        const index_type cols = static_cast<index_type>(x.dimension(rank - 1));
        const index_type total = core::tensor_size(x);
        return matrix_view<element>{x.data(), cols == 0 ? 0 : total / cols, cols, cols};
    } else {
        auto& dense = x.derived();
        if constexpr (Plain::IsRowMajor) {
            core::require(dense.innerStride() == 1 || dense.cols() <= 1,
                          "view: a row-major matrix must have unit inner stride, got ", dense.innerStride());
            return matrix_view<element>{dense.data(), static_cast<index_type>(dense.rows()),
                                        static_cast<index_type>(dense.cols()),
                                        static_cast<index_type>(dense.outerStride())};
        } else {
            static_assert(!core::is_column_major_matrix_v<Plain>,
                          "normkit::view: matrices must be row-major (Eigen::RowMajor); a column-major type is "
                          "accepted only as a vector, with one column at compile time");
            // A column-major vector: n rows of one element.
            return matrix_view<element>{dense.data(), static_cast<index_type>(dense.rows()), 1,
                                        static_cast<index_type>(dense.innerStride())};
        }
    }
}

template <class T>
template <class E, class Plain, class>
matrix_view<T>::matrix_view(E&& x) {
    const auto viewed = view(std::forward<E>(x));
    *this = matrix_view<T>(viewed.data, viewed.rows, viewed.cols, viewed.row_stride);
}

// as_vector(x): the vector_view of an Eigen vector, a tensor (flattened), a
// std::vector or a vector_view, with the element type (and constness) of x.
template <class T>
vector_view<T> as_vector(vector_view<T> x) {
    return x;
}

template <class X, class = std::enable_if_t<!std::is_pointer_v<std::decay_t<X>>>>
auto as_vector(X&& x) {
    return vector_view<std::remove_pointer_t<decltype(x.data())>>(std::forward<X>(x));
}

template <class X>
using view_t = decltype(view(std::declval<X&>()));

// The storage type of anything view() accepts, without const.
template <class X>
using element_t = std::remove_const_t<typename view_t<X>::value_type>;

// Argument types of the public kernels, named from the data they go with. As
// aliases of the data's type they are not deduced, so an Eigen vector, a
// tensor, a std::vector or {} (absent) converts to them implicitly.
template <class X>
using parameter_t = vector_view<const element_t<X>>;  // weight, bias: the data's storage type

template <class X>
using statistics_t = vector_view<core::statistic_t<element_t<X>>>;  // mean, rstd, parameter gradients

template <class X>
using const_statistics_t = vector_view<const core::statistic_t<element_t<X>>>;

template <class X>
using scalar_t = statistic_t<element_t<X>>;  // a returned parameter gradient (dα, dg): float, double for double

template <class X>
using matrix_t = matrix_view<element_t<X>>;  // an optional matrix output of the data's storage type ({} = absent)

template <class X>
using const_matrix_t = matrix_view<const element_t<X>>;  // an optional matrix input of the data's storage type

// The one storage check of a public kernel: T is a storage type and every X has it.
template <class T, class... X>
inline constexpr bool same_storage_v = core::is_storage_v<T> && (std::is_same_v<element_t<X>, T> && ...);

namespace core {

inline void require_same_shape(const char* name, index_type rows, index_type cols, const char* other,
                               index_type other_rows, index_type other_cols) {
    require(rows == other_rows && cols == other_cols, name, " has shape ", rows, "x", cols, " but ", other,
            " has shape ", other_rows, "x", other_cols);
}

template <class A, class B>
void require_same_shape(const char* name, const matrix_view<A>& a, const char* other, const matrix_view<B>& b) {
    require_same_shape(name, a.rows, a.cols, other, b.rows, b.cols);
}

// An optional per-column parameter (weight, bias) must be absent or have one entry per column.
template <class T>
void require_parameter(const char* name, const vector_view<T>& parameter, index_type cols) {
    require(parameter.empty() || parameter.size == cols, name, " has length ", parameter.size,
            " but the normalized dimension is ", cols);
}

// An optional per-row output (mean, rstd) must be absent or have one entry per row.
template <class T>
void require_per_row(const char* name, const vector_view<T>& values, index_type rows) {
    require(values.empty() || values.size == rows, name, " has length ", values.size, " but there are ", rows, " rows");
}

template <class T>
void require_data(const char* name, const matrix_view<T>& x) {
    require(x.data != nullptr || x.size() == 0, name, " is null (", x.rows, "x", x.cols, ")");
}

// A required matrix shaped like a reference: given, and of the reference's shape.
template <class A, class B>
void require_like(const char* name, const matrix_view<A>& a, const char* reference_name,
                  const matrix_view<B>& reference) {
    require_data(name, a);
    require_same_shape(name, a, reference_name, reference);
}

// The same for each (name, matrix) pair that follows the reference, in order.
template <class B, class A, class... Rest>
void require_all_like(const char* reference_name, const matrix_view<B>& reference, const char* name,
                      const matrix_view<A>& a, const Rest&... rest) {
    require_like(name, a, reference_name, reference);
    if constexpr (sizeof...(Rest) > 0) require_all_like(reference_name, reference, rest...);
}

// An optional matrix ({} = absent) shaped like a reference when given.
template <class A, class B>
void require_optional_like(const char* name, const matrix_view<A>& a, const char* reference_name,
                           const matrix_view<B>& reference) {
    if (!a.empty()) require_same_shape(name, a, reference_name, reference);
}

// The memory a view spans, for the aliasing checks: its rows, each from its first element to
// one past its last, in bytes; an empty view spans nothing and overlaps nothing. Two strided
// views overlap when a row of one meets a row of the other (column blocks of one wider buffer,
// q and k of a fused qkv, do not). Two views are the same when they place the same elements of
// the same size at the same addresses: a kernel that reads each element before it writes it
// may take an output over its input exactly so (in place), and no other way.
struct memory_span {
    std::uintptr_t begin = 0, end = 0;  // first byte, one past the last byte of the last row
    std::size_t element_size = 0;
    index_type rows = 0, cols = 0, row_stride = 0;
    bool matrix = false;

    bool empty() const { return begin == end; }
    bool contiguous() const { return rows <= 1 || row_stride == cols; }
    bool overlaps(const memory_span& other) const {
        if (empty() || other.empty() || !(begin < other.end && other.begin < end)) return false;
        if (contiguous() && other.contiguous()) return true;
        // Row by row over the view with fewer rows, against the other's rows in O(1) each.
        const memory_span& few = rows <= other.rows || other.contiguous() ? *this : other;
        const memory_span& many = &few == this ? other : *this;
        const auto [many_rows, many_stride, many_width] = many.row_layout();
        const auto [few_rows, few_stride, few_width] = few.row_layout();
        const std::intptr_t base = static_cast<std::intptr_t>(many.begin);
        for (index_type i = 0; i < few_rows; ++i) {
            const std::intptr_t first = static_cast<std::intptr_t>(few.begin) + i * few_stride - base;
            const std::intptr_t last = first + few_width;  // this row is [first, last) from many's start
            // The lowest row j of `many` that ends past `first`: j·stride + width > first.
            const std::intptr_t below = first - many_width;
            const std::intptr_t j = below < 0 ? 0 : below / many_stride + 1;
            if (j < many_rows && j * many_stride < last) return true;
        }
        return false;
    }
    bool same(const memory_span& other) const {
        if (begin != other.begin || end != other.end || element_size != other.element_size) return false;
        if (contiguous() && other.contiguous()) return true;
        return rows == other.rows && cols == other.cols && row_stride == other.row_stride;
    }

private:
    struct layout {
        std::intptr_t rows, stride, width;  // the row count; the row stride and width in bytes
    };
    // Rows, their stride and their width in bytes; a contiguous view is one row of all its bytes.
    layout row_layout() const {
        const auto bytes = static_cast<std::intptr_t>(element_size);
        if (contiguous()) return {1, static_cast<std::intptr_t>(end - begin), static_cast<std::intptr_t>(end - begin)};
        return {static_cast<std::intptr_t>(rows), row_stride * bytes, cols * bytes};
    }
};

inline std::ostream& operator<<(std::ostream& out, const memory_span& span) {
    if (span.matrix) return out << span.rows << "x" << span.cols;
    return out << span.cols;
}

template <class T>
memory_span span_of(const matrix_view<T>& x) {
    memory_span span{0, 0, sizeof(T), x.rows, x.cols, x.row_stride, true};
    if (x.data == nullptr || x.rows <= 0 || x.cols <= 0) return span;
    span.begin = reinterpret_cast<std::uintptr_t>(x.data);
    span.end = reinterpret_cast<std::uintptr_t>(x.data + (x.rows - 1) * x.row_stride + x.cols);
    return span;
}

template <class T>
memory_span span_of(const vector_view<T>& x) {
    memory_span span{0, 0, sizeof(T), 1, x.size, x.size, false};
    if (x.data == nullptr || x.size <= 0) return span;
    span.begin = reinterpret_cast<std::uintptr_t>(x.data);
    span.end = reinterpret_cast<std::uintptr_t>(x.data + x.size);
    return span;
}

// An output that must share no memory with the arguments named after it (inputs it reads
// after writing, other outputs), each pair checked in order:
//   require_disjoint("rstd", rstd, "input", x, "output", y)
//   → "rstd (3) overlaps input (3x4); rstd must be disjoint from input"
template <class A, class B, class... Rest>
void require_disjoint(const char* name, const A& a, const char* other, const B& b, const Rest&... rest) {
    const memory_span mine = span_of(a), theirs = span_of(b);
    require(!mine.overlaps(theirs), name, " (", mine, ") overlaps ", other, " (", theirs, "); ", name,
            " must be disjoint from ", other);
    if constexpr (sizeof...(Rest) > 0) require_disjoint(name, a, rest...);
}

// An output that may be exactly the input named after it (in place: the kernel reads each
// element before it writes it) or disjoint from it; any other overlap, a partial one or the
// same bytes viewed with another shape or stride, is an error:
//   "output (6) overlaps rewards (6); output may be rewards itself or disjoint from it"
template <class A, class B, class... Rest>
void require_same_or_disjoint(const char* name, const A& a, const char* other, const B& b, const Rest&... rest) {
    const memory_span mine = span_of(a), theirs = span_of(b);
    require(!mine.overlaps(theirs) || mine.same(theirs), name, " (", mine, ") overlaps ", other, " (", theirs, "); ",
            name, " may be ", other, " itself or disjoint from it");
    if constexpr (sizeof...(Rest) > 0) require_same_or_disjoint(name, a, rest...);
}

}  // namespace core
}  // namespace normkit
