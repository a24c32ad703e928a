// The one list of row normalizations the generic norm tests iterate over (tests/norm/errors.cpp,
// tests/norm/threads.cpp): each method registers its descriptor next to its own test
// (tests/norm/<name>.cpp, a static `register_row_method`), so that a new row normalization gets
// the shape, null, ε, thread-count and streaming checks by adding one descriptor, not an entry in
// every generic file.
//
// Why float only and std::function: the generic checks run before any arithmetic (errors) or
// compare a method with itself (threads, streaming), so one storage type covers them; the callers
// are compiled in the method's own test file, the one that instantiates its kernels already, and
// the generic files emit no kernel code of their own (compile time: tests/kernels.hpp).
#pragma once

#include "support.hpp"

#include <normkit/core/execution.hpp>

#include <functional>
#include <string>
#include <type_traits>
#include <vector>

namespace normkit::testing {

// The fields a generic test varies: ε (errors) and the execution fields (threads, streaming).
struct row_run {
    double eps = 1e-5;
    streaming_options execution;
};

// Sets a method's execution fields: threads, and stream_above_bytes for a method that streams its
// output (options : streaming_options; the others, options : execution_options, have none).
template <class Options>
void set_execution(Options& options, const streaming_options& execution) {
    if constexpr (std::is_base_of_v<streaming_options, Options>)
        static_cast<streaming_options&>(options) = execution;
    else
        static_cast<execution_options&>(options) = execution;
}

// A method's options with the shared fields of a row_run: ε and the execution fields.
template <class Options>
Options with_run(Options options, const row_run& run) {
    set_execution(options, run.execution);
    options.eps = run.eps;
    return options;
}

struct row_method {
    std::string name;
    // forward(x, y, run): y = method(x) with the method's own parameters (any values of length
    // x.cols; the generic errors test only needs the argument checks to run).
    std::function<void(matrix_view<const float>, matrix_view<float>, const row_run&)> forward;
    // outputs(x, dy, run): every array forward then backward write (y, the saved statistics, dx,
    // the parameter gradients), from parameters the descriptor forms from fixed seeds; the eps
    // of run is ignored (the method's default is used).
    std::function<std::vector<std::vector<float>>(const test_matrix<float>&, const test_matrix<float>&,
                                                  const streaming_options&)>
        outputs;
};

// The registered methods, in registration order (static initialization of the test files).
inline std::vector<row_method>& row_methods() {
    static std::vector<row_method> methods;
    return methods;
}

struct register_row_method {
    explicit register_row_method(row_method method) { row_methods().push_back(std::move(method)); }
};

// The storage of a test_matrix, for a descriptor's outputs.
inline std::vector<float> storage_of(const test_matrix<float>& m) { return m.storage; }

}  // namespace normkit::testing
