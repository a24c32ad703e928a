// expect-error: no matching (function|constructor).*logits_outputs
// logits_outputs has no positional (aggregate) initialization: its four fields share one type.
#include <normkit/credit/logits_statistics.hpp>

#include <vector>

int main() {
    std::vector<float> logsumexp(2), log_probs(2);
#ifdef NORMKIT_COMPILE_FAIL_CONTROL
    normkit::credit::logits_outputs<float> outputs;
    outputs.logsumexp(logsumexp).token_log_probability(log_probs);
#else
    const normkit::credit::logits_outputs<float> outputs{log_probs, logsumexp};
#endif
    return outputs.logsumexp().size == 2 ? 0 : 1;
}
