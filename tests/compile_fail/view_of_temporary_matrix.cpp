// expect-error: deleted function.*view
// view() of a temporary Eigen matrix would point into memory freed at the end of the declaration.
#include <normkit/core/view.hpp>

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

Matrix make_logits() { return Matrix::Zero(3, 4); }

int main() {
#ifdef NORMKIT_COMPILE_FAIL_CONTROL
    const Matrix logits = make_logits();
    const auto viewed = normkit::view(logits);
#else
    const auto viewed = normkit::view(make_logits());
#endif
    return viewed.rows == 3 ? 0 : 1;
}
