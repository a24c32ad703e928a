// How a kernel runs, apart from what it computes: the fields every options
// struct that has them inherits, so they are spelled and defaulted one way.
//
//   execution_options   threads      OpenMP threads over rows or groups; any count gives
//                                    bitwise-identical results (core/parallel.hpp)
//   streaming_options   + stream_above_bytes
//                                    an output larger than this is written with
//                                    non-temporal stores (core/stream.hpp)
//
// Only a top-level options struct inherits them: a struct nested in another
// (policy_loss_options' surrogate, kl and aggregation) says what to compute,
// and its parent says how (docs/api.md §3 states the rule).
//
// execution_options is not an aggregate: its one-value constructor is explicit, so a positional
// brace list of a derived struct (gae_options{0.99, 0.95}, or {true} for a struct whose first field
// is a bool) does not compile, where it would otherwise bind its first value to the base's threads.
// Options are set by name.
#pragma once

#include "tuning.hpp"

#include <cstddef>

namespace normkit {

struct execution_options {
    int threads = 1;  // ≥ 1 used; any count gives the same bits

    execution_options() = default;
    explicit execution_options(int thread_count) : threads(thread_count) {}
};

// Beyond the share of the last-level cache one core can count on, an output is
// evicted before anyone reads it, and writing it around the cache saves the
// read of every line that an ordinary store makes (write-allocate). The
// threshold is the host's (core/tuning.hpp).
inline constexpr std::size_t default_stream_above_bytes = core::tuning::chosen.stream_above_bytes;

struct streaming_options : execution_options {
    std::size_t stream_above_bytes = default_stream_above_bytes;
};

}  // namespace normkit
