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
// and its parent says how.
#pragma once

#include "tuning.hpp"

#include <cstddef>

namespace normkit {

struct execution_options {
    int threads = 1;
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
