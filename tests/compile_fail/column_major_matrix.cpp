// expect-error: matrices must be row-major
// Rows are the contiguous axis of every kernel: a column-major Eigen matrix is rejected at compile
// time (it used to be a run-time error), with the type of the offending argument in the
// instantiation note ("with Input = Eigen::Matrix<float, -1, -1>").
#include <normkit/norm/rms_norm.hpp>

int main() {
#ifdef NORMKIT_COMPILE_FAIL_CONTROL
    using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
#else
    using Matrix = Eigen::MatrixXf;
#endif
    const Matrix input = Matrix::Ones(3, 8);
    Matrix output(3, 8);
    normkit::norm::rms_norm_forward(input, {}, output);
    return output(0, 0) == 1.0f ? 0 : 1;
}
