// The test kernels (tests/kernels.hpp) at storage type bfloat16, emitted once for every test binary.
#include "kernels.hpp"

NORMKIT_TEST_KERNELS_OF(NORMKIT_INSTANTIATE_KERNEL, Eigen::bfloat16)
