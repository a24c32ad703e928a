// The kernels the test binaries call most, compiled once per build instead of once in every test
// file that calls them: declared here as explicit instantiations (extern template), which every
// test file sees first (tests/CMakeLists.txt passes -include kernels.hpp), and defined for one
// storage type in each of tests/kernels/<type>.cpp (NORMKIT_TEST_KERNELS_OF).
//
// Why: each of these is a tree of compile-time variants (weight, bias, streaming, the surrogate
// modes) that -march=native code generation takes seconds to emit, and a test file that covers the
// four storage types emitted all of it again; the norm tests alone were most of CI's build time.
// The code is the same (the same headers and flags build tests/kernels/); only where it is emitted
// changes. A name or signature changed in a header fails to compile here, not silently.
#pragma once

#include <normkit/loss/policy_loss.hpp>
#include <normkit/norm/derf.hpp>
#include <normkit/norm/dyt.hpp>
#include <normkit/norm/fused_add_rms_norm.hpp>
#include <normkit/norm/l2_norm.hpp>
#include <normkit/norm/layer_norm.hpp>
#include <normkit/norm/logit_norm.hpp>
#include <normkit/norm/qk_norm.hpp>
#include <normkit/norm/rms_norm.hpp>
#include <normkit/norm/seed_norm.hpp>

// X(kernel, T) for every kernel above at storage type T.
#define NORMKIT_TEST_KERNELS_OF(X, T)                        \
    X(normkit::norm::detail::rms_norm_forward, T)            \
    X(normkit::norm::detail::rms_norm_backward, T)           \
    X(normkit::norm::detail::layer_norm_forward, T)          \
    X(normkit::norm::detail::layer_norm_backward, T)         \
    X(normkit::norm::detail::fused_add_rms_norm_forward, T)  \
    X(normkit::norm::detail::fused_add_rms_norm_backward, T) \
    X(normkit::norm::detail::dyt_forward, T)                 \
    X(normkit::norm::detail::dyt_backward, T)                \
    X(normkit::norm::detail::derf_forward, T)                \
    X(normkit::norm::detail::derf_backward, T)               \
    X(normkit::norm::detail::seed_norm_forward, T)           \
    X(normkit::norm::detail::seed_norm_backward, T)          \
    X(normkit::norm::detail::l2_norm_forward, T)             \
    X(normkit::norm::detail::l2_norm_backward, T)            \
    X(normkit::norm::detail::qk_rms_norm_forward, T)         \
    X(normkit::norm::detail::qk_rms_norm_backward, T)        \
    X(normkit::norm::detail::qk_l2_norm_forward, T)          \
    X(normkit::norm::detail::qk_l2_norm_backward, T)         \
    X(normkit::norm::detail::logit_norm_loss, T)             \
    X(normkit::loss::detail::policy_loss, T)

#define NORMKIT_TEST_KERNELS(X)                 \
    NORMKIT_TEST_KERNELS_OF(X, float)           \
    NORMKIT_TEST_KERNELS_OF(X, double)          \
    NORMKIT_TEST_KERNELS_OF(X, Eigen::bfloat16) \
    NORMKIT_TEST_KERNELS_OF(X, Eigen::half)

#define NORMKIT_EXTERN_KERNEL(kernel, T) extern template decltype(kernel<T>) kernel<T>;
#define NORMKIT_INSTANTIATE_KERNEL(kernel, T) template decltype(kernel<T>) kernel<T>;

NORMKIT_TEST_KERNELS(NORMKIT_EXTERN_KERNEL)
