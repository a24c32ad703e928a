// Uses normkit as a user would after add_subdirectory or find_package.
#include <normkit/normkit.hpp>

#include <cmath>
#include <cstdio>

int main() {
    Eigen::Tensor<float, 2, Eigen::RowMajor> x(3, 8), y(3, 8);
    for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = static_cast<float>(i % 5) - 2.0f;
    normkit::norm::rms_norm_forward(x, {}, y);  // no weight
    double mean_square = 0;
    for (Eigen::Index j = 0; j < 8; ++j) mean_square += y(0, j) * y(0, j) / 8.0;
    std::printf("mean square of a normalized row: %.6f\n", mean_square);
    return std::abs(mean_square - 1.0) < 1e-4 ? 0 : 1;
}
