// Uses normkit as a user would after add_subdirectory or find_package, through normkit::normkit
// or normkit::native; CMakeLists.txt says which ISA macros the target's flags must give.
#include <normkit/normkit.hpp>
#include <xsimd/xsimd.hpp>

#include <cmath>
#include <cstdio>

#ifdef NORMKIT_CONSUMER_ISA_CHECK
#define NORMKIT_CONSUMER_HAS(macro) NORMKIT_CONSUMER_HAS_##macro
#ifdef __SSE4_2__
#define NORMKIT_CONSUMER_HAS_SSE4_2 1
#else
#define NORMKIT_CONSUMER_HAS_SSE4_2 0
#endif
#ifdef __AVX__
#define NORMKIT_CONSUMER_HAS_AVX 1
#else
#define NORMKIT_CONSUMER_HAS_AVX 0
#endif
#ifdef __AVX2__
#define NORMKIT_CONSUMER_HAS_AVX2 1
#else
#define NORMKIT_CONSUMER_HAS_AVX2 0
#endif
#ifdef __FMA__
#define NORMKIT_CONSUMER_HAS_FMA 1
#else
#define NORMKIT_CONSUMER_HAS_FMA 0
#endif
#ifdef __AVX512F__
#define NORMKIT_CONSUMER_HAS_AVX512F 1
#else
#define NORMKIT_CONSUMER_HAS_AVX512F 0
#endif
#ifdef __ARM_NEON
#define NORMKIT_CONSUMER_HAS_ARM_NEON 1
#else
#define NORMKIT_CONSUMER_HAS_ARM_NEON 0
#endif
static_assert(NORMKIT_CONSUMER_HAS(SSE4_2) == NORMKIT_CONSUMER_EXPECT_SSE4_2, "the target's flags changed SSE4.2");
static_assert(NORMKIT_CONSUMER_HAS(AVX) == NORMKIT_CONSUMER_EXPECT_AVX, "the target's flags changed AVX");
static_assert(NORMKIT_CONSUMER_HAS(AVX2) == NORMKIT_CONSUMER_EXPECT_AVX2, "the target's flags changed AVX2");
static_assert(NORMKIT_CONSUMER_HAS(FMA) == NORMKIT_CONSUMER_EXPECT_FMA, "the target's flags changed FMA");
static_assert(NORMKIT_CONSUMER_HAS(AVX512F) == NORMKIT_CONSUMER_EXPECT_AVX512F, "the target's flags changed AVX-512F");
static_assert(NORMKIT_CONSUMER_HAS(ARM_NEON) == NORMKIT_CONSUMER_EXPECT_ARM_NEON, "the target's flags changed NEON");
#endif

int main() {
    Eigen::Tensor<float, 2, Eigen::RowMajor> x(3, 8), y(3, 8);
    for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = static_cast<float>(i % 5) - 2.0f;
    normkit::norm::rms_norm_forward(x, {}, y);  // no weight
    double mean_square = 0;
    for (Eigen::Index j = 0; j < 8; ++j) mean_square += y(0, j) * y(0, j) / 8.0;
    std::printf("mean square of a normalized row: %.6f (xsimd arch %s)\n", mean_square, xsimd::default_arch::name());
    return std::abs(mean_square - 1.0) < 1e-4 ? 0 : 1;
}
