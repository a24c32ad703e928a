// expect-error: could not convert .*float_mask|no known conversion from .*for 4th argument
// A mask has the storage type of the data it masks (docs/api.md §4): a float mask beside bf16
// log-probs is no conversion, and the error points at that argument, not into normkit.
#include <normkit/loss/surrogate.hpp>

int main() {
    using Bf16 = Eigen::Matrix<Eigen::bfloat16, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const Bf16 log_probs = Bf16::Zero(2, 3), old_log_probs = Bf16::Zero(2, 3), advantages = Bf16::Zero(2, 3);
#ifdef NORMKIT_COMPILE_FAIL_CONTROL
    const Bf16 float_mask = Bf16::Ones(2, 3);
#else
    using Float = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const Float float_mask = Float::Ones(2, 3);
#endif
    const auto inputs = normkit::loss::make_policy_inputs(log_probs, old_log_probs, advantages, float_mask);
    return inputs.log_probs.rows == 2 ? 0 : 1;
}
