// What every binding module shares: numpy arrays seen as normkit views without a copy, the
// storage type of a call read from its first array, and the checks that name the argument.
//
// The rules (docs/python.md):
// - An array argument is a numpy.ndarray (the torch layer passes tensor.numpy()); nothing is
//   converted or copied. Its dtype is the call's storage type: float32, float64, float16, and
//   bfloat16 as its 16-bit pattern in a uint16 array. Masks and ids have their own dtypes
//   (uint8, int64 or int32) where the C++ function has them.
// - A matrix is the last axis as columns and every leading axis as rows: the last axis must be
//   contiguous, the leading axes must collapse into one row stride (any stride, a multiple of the
//   element size), so a sliced or padded batch passes as it is. A vector must be contiguous.
// - A wrong type or dtype is a TypeError, a wrong shape or stride a ValueError, both naming the
//   function and the argument; normkit::error (a std::invalid_argument) arrives as ValueError
//   with its own message.
// - The kernel runs with the GIL released.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "normkit/normkit.hpp"

namespace normkit::python {

namespace py = pybind11;

template <class T>
struct type_tag {
    using type = T;
};

// The storage types of the norm kernels, the logits kernels and the losses.
enum class storage { f32, f64, bf16, f16 };

template <class... Parts>
[[noreturn]] void fail_type(const Parts&... parts) {
    std::ostringstream message;
    (message << ... << parts);
    throw py::type_error(message.str());
}

template <class... Parts>
[[noreturn]] void fail_value(const Parts&... parts) {
    std::ostringstream message;
    (message << ... << parts);
    throw py::value_error(message.str());
}

inline std::string dtype_name(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

inline std::string shape_string(const py::array& a) {
    std::string s = "(";
    for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
    return s + (a.ndim() == 1 ? ",)" : ")");
}

inline const py::array& require_array(const py::handle& object, const char* function, const char* name) {
    if (!py::isinstance<py::array>(object))
        fail_type(function, ": ", name, " must be a numpy.ndarray, got ",
                  py::str(py::type::of(object)).cast<std::string>());
    return reinterpret_cast<const py::array&>(object);
}

inline bool is_absent(const py::handle& object) { return object.is_none(); }

// The numpy dtype that carries T: bfloat16 travels as its bit pattern (uint16).
template <class T>
py::dtype dtype_of() {
    if constexpr (std::is_same_v<T, Eigen::bfloat16>)
        return py::dtype::of<std::uint16_t>();
    else if constexpr (std::is_same_v<T, Eigen::half>)
        return py::dtype("float16");
    else
        return py::dtype::of<T>();
}

template <class T>
const char* storage_name() {
    if constexpr (std::is_same_v<T, Eigen::bfloat16>)
        return "uint16 (bfloat16 bits)";
    else if constexpr (std::is_same_v<T, Eigen::half>)
        return "float16";
    else if constexpr (std::is_same_v<T, float>)
        return "float32";
    else if constexpr (std::is_same_v<T, double>)
        return "float64";
    else if constexpr (std::is_same_v<T, std::uint8_t>)
        return "uint8";
    else if constexpr (std::is_same_v<T, std::int64_t>)
        return "int64";
    else if constexpr (std::is_same_v<T, std::int32_t>)
        return "int32";
    else
        return "?";
}

template <class T>
bool has_dtype(const py::array& a) {
    return a.dtype().is(dtype_of<T>()) || a.dtype().equal(dtype_of<T>());
}

// The storage type of a call, from the array that fixes it.
inline storage storage_of(const py::handle& object, const char* function, const char* name, bool floats_only = false) {
    const py::array& a = require_array(object, function, name);
    if (has_dtype<float>(a)) return storage::f32;
    if (has_dtype<double>(a)) return storage::f64;
    if (!floats_only && has_dtype<Eigen::bfloat16>(a)) return storage::bf16;
    if (!floats_only && has_dtype<Eigen::half>(a)) return storage::f16;
    fail_type(function, ": ", name, " has dtype ", dtype_name(a), "; expected ",
              floats_only ? "float32 or float64" : "float32, float64, float16 or uint16 (bfloat16 bits)");
}

// Calls f(type_tag<T>{}) for the storage type s.
template <class F>
decltype(auto) dispatch(storage s, F&& f) {
    switch (s) {
        case storage::f32:
            return f(type_tag<float>{});
        case storage::f64:
            return f(type_tag<double>{});
        case storage::bf16:
            return f(type_tag<Eigen::bfloat16>{});
        default:
            return f(type_tag<Eigen::half>{});
    }
}

// Calls f(type_tag<T>{}) for float or double only (the advantage and credit modules).
template <class F>
decltype(auto) dispatch_floating(storage s, F&& f) {
    if (s == storage::f64) return f(type_tag<double>{});
    return f(type_tag<float>{});
}

template <class T>
void require_dtype(const py::array& a, const char* function, const char* name) {
    if (!has_dtype<T>(a))
        fail_type(function, ": ", name, " has dtype ", dtype_name(a), " but must be ", storage_name<T>(),
                  " (the call's storage type)");
}

inline void require_writeable(const py::array& a, const char* function, const char* name) {
    if (!a.writeable()) fail_value(function, ": ", name, " is not writeable");
}

// The matrix an array is: rows = the product of its leading axes, cols = its last axis.
template <class T>
matrix_view<T> matrix_of(const py::handle& object, const char* function, const char* name) {
    const py::array& a = require_array(object, function, name);
    using Plain = std::remove_const_t<T>;
    require_dtype<Plain>(a, function, name);
    if constexpr (!std::is_const_v<T>) require_writeable(a, function, name);
    const auto item = static_cast<py::ssize_t>(sizeof(Plain));
    const py::ssize_t ndim = a.ndim();
    if (ndim == 0) fail_value(function, ": ", name, " must have at least one axis, got a 0-d array");
    const py::ssize_t cols = a.shape(ndim - 1);
    py::ssize_t rows = 1;
    for (py::ssize_t i = 0; i + 1 < ndim; ++i) rows *= a.shape(i);
    if (cols > 1 && rows > 0 && a.strides(ndim - 1) != item)
        fail_value(function, ": ", name, " of shape ", shape_string(a), " has last-axis stride ", a.strides(ndim - 1),
                   " bytes; its rows must be contiguous (stride ", item, "): pass numpy.ascontiguousarray(", name, ")");
    py::ssize_t row_stride_bytes = cols * item;
    if (ndim >= 2) {
        // The leading axes collapse into one row stride when each steps over the next whole.
        py::ssize_t last = -1;
        for (py::ssize_t i = ndim - 2; i >= 0; --i) {
            if (a.shape(i) == 1) continue;
            if (last < 0) {
                row_stride_bytes = a.strides(i);
            } else if (a.strides(i) != a.strides(last) * a.shape(last)) {
                fail_value(function, ": ", name, " of shape ", shape_string(a),
                           " has leading axes that do not collapse into one row stride; pass a copy "
                           "(numpy.ascontiguousarray) or reshape it to 2-d");
            }
            last = i;
        }
    }
    if (rows > 1 && (row_stride_bytes < 0 || row_stride_bytes % item != 0))
        fail_value(function, ": ", name, " has row stride ", row_stride_bytes,
                   " bytes, not a non-negative multiple of ", item);
    auto* data = static_cast<T*>(const_cast<void*>(a.data()));
    return view(data, static_cast<index_type>(rows), static_cast<index_type>(cols),
                static_cast<index_type>(rows > 1 ? row_stride_bytes / item : cols));
}

// None is the absent matrix ({}).
template <class T>
matrix_view<T> optional_matrix_of(const py::handle& object, const char* function, const char* name) {
    if (is_absent(object)) return {};
    return matrix_of<T>(object, function, name);
}

// A vector: every element, contiguous.
template <class T>
vector_view<T> vector_of(const py::handle& object, const char* function, const char* name) {
    const py::array& a = require_array(object, function, name);
    using Plain = std::remove_const_t<T>;
    require_dtype<Plain>(a, function, name);
    if constexpr (!std::is_const_v<T>) require_writeable(a, function, name);
    if (!(a.flags() & py::array::c_style) && a.size() > 1)
        fail_value(function, ": ", name, " of shape ", shape_string(a), " must be contiguous");
    return {static_cast<T*>(const_cast<void*>(a.data())), static_cast<index_type>(a.size())};
}

template <class T>
vector_view<T> optional_vector_of(const py::handle& object, const char* function, const char* name) {
    if (is_absent(object)) return {};
    return vector_of<T>(object, function, name);
}

// A groups argument: an int G (contiguous blocks of G) or an int64 / int32 array of ids.
inline groups groups_of(const py::handle& object, const char* function, const char* name = "grouping") {
    if (py::isinstance<py::int_>(object)) return contiguous_groups(object.cast<index_type>());
    const py::array& a = require_array(object, function, name);
    if (has_dtype<std::int64_t>(a)) return group_ids(vector_of<const std::int64_t>(a, function, name));
    if (has_dtype<std::int32_t>(a)) return group_ids(vector_of<const std::int32_t>(a, function, name));
    fail_type(function, ": ", name,
              " must be an int (contiguous groups of that size) or an int64 / int32 array of ids, "
              "got dtype ",
              dtype_name(a));
}

// Binds an options struct: a default constructor, a copy constructor, and read-write fields.
// Python builds a call's options from keywords (normkit/_options.py), rejecting unknown ones.
template <class Options>
py::class_<Options> options_class(py::module_& m, const char* name, const char* doc) {
    py::class_<Options> c(m, name, doc);
    c.def(py::init<>());
    c.def(py::init<const Options&>(), py::arg("other"));
    if constexpr (std::is_base_of_v<execution_options, Options>)
        c.def_readwrite("threads", &Options::threads, "threads to run on (default 1); any count gives the same bits");
    if constexpr (std::is_base_of_v<streaming_options, Options>)
        c.def_readwrite("stream_above_bytes", &Options::stream_above_bytes,
                        "outputs larger than this are written with non-temporal stores (default 32 MiB)");
    c.def("__copy__", [](const Options& o) { return Options(o); });
    return c;
}

// A type two modules share (core moments, return_mask_rule): pybind11 registers a C++ type once
// per process, so the module imported second reuses the first one's class as its attribute.
template <class T, class Bind>
void bind_shared(py::module_& m, const char* name, Bind&& bind) {
    if (const auto* info = py::detail::get_type_info(typeid(T)))
        m.attr(name) = py::handle(reinterpret_cast<PyObject*>(info->type));
    else
        bind();
}

// normkit::moments (advantage's batch statistics), bound once whichever module imports first.
inline void bind_moments(py::module_& m) {
    using py::arg;
    bind_shared<moments>(m, "moments", [&] {
        py::class_<moments>(m, "moments", "mergeable (count, mean, M2) in double")
            .def(py::init([](double count, double mean, double m2) {
                     return moments{count, mean, m2};
                 }),
                 arg("count") = 0.0, arg("mean") = 0.0, arg("m2") = 0.0)
            .def_readwrite("count", &moments::count, "Σw")
            .def_readwrite("mean", &moments::mean, "Σw·x / Σw")
            .def_readwrite("m2", &moments::m2, "Σw·(x − mean)²")
            .def("add", &moments::add, arg("value"), arg("weight") = 1.0, "Welford's update")
            .def("variance", &moments::variance, arg("ddof") = 0, "M2/(count − ddof); 0 when count ≤ ddof")
            .def("standard_deviation", &moments::standard_deviation, arg("ddof") = 0)
            .def("__copy__", [](const moments& s) { return s; })
            .def("__repr__", [](const moments& s) {
                return py::str("moments(count={!r}, mean={!r}, m2={!r})").format(s.count, s.mean, s.m2);
            });
    });
}

// normkit::return_mask_rule (advantage's reinforce_pp, credit's returns and GAE), bound once.
inline void bind_return_mask_rule(py::module_& m) {
    bind_shared<return_mask_rule>(m, "return_mask_rule", [&] {
        py::enum_<return_mask_rule>(m, "return_mask_rule", "what a masked token does to a discounted return")
            .value("carry", return_mask_rule::carry)
            .value("reset", return_mask_rule::reset)
            .value("discount_through", return_mask_rule::discount_through);
    });
}

// Runs a kernel with the GIL released.
template <class F>
decltype(auto) without_gil(F&& f) {
    py::gil_scoped_release release;
    return f();
}

}  // namespace normkit::python
