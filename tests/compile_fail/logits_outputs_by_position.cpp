// expect-error: no matching function for call to.*logits_statistics
// An earlier order of logits_statistics' outputs (logsumexp first) wrote log π into the logsumexp
// buffer; the outputs are now set by name, so any positional order fails to compile.
#include <normkit/credit/logits_statistics.hpp>

#include <vector>

int main() {
    using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const Matrix logits = Matrix::Zero(2, 5);
    const std::vector<normkit::index_type> tokens = {1, 4};
    std::vector<float> logsumexp(2), log_probs(2), entropy(2);
#ifdef NORMKIT_COMPILE_FAIL_CONTROL
    normkit::credit::logits_statistics(
        logits, tokens,
        normkit::credit::logits_outputs<float>().logsumexp(logsumexp).token_log_probability(log_probs).entropy(
            entropy));
#else
    normkit::credit::logits_statistics(logits, tokens, logsumexp, log_probs, entropy);
#endif
    return 0;
}
