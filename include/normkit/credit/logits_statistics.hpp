// Fused logits statistics: logsumexp, log π of the sampled tokens, entropy and
// Σπ² from one read of the logits, and the gradient of Σ_t g_t·log π(y_t).
//
// Over each row z ∈ R^V (one position t of a [T × V] logits matrix) with
// temperature τ and z' = z/τ:
//   lse     = log Σ_v exp(z'_v)
//   log π_y = z'_y − lse                       (y = the row's token id)
//   H       = −Σ_v π_v log π_v = lse − Σ_v π_v z'_v
//   Σπ²     = Σ_v π_v² = exp(lse(2z') − 2·lse(z'))
// Backward, for L = Σ_t g_t·log π(y_t) and the raw (untempered) logits:
//   ∂L/∂z_v = (g_t/τ)·(δ_{v y_t} − π_v)        (= g_t·(e_y − π) at τ = 1)
//
// How: each row is read once, in chunks of 128 batches (2048 float elements
// with AVX-512, 512 with SSE2), as two halves side by side. Per lane, with M the running maximum of z, d = (z − M)/τ and e = exp(d),
// a half accumulates
//   s0 = Σe,   s1 = Σe·d,   s2 = Σe²
// so lse = M/τ + log s0, H = log s0 − s1/s0, Σπ² = s2/s0². Moving from M to M'
// multiplies s0 by r = exp((M − M')/τ), s2 by r², and s1 becomes
// r·(s1 + (M − M')/τ·s0) (online softmax, Milakov & Gimelshein 2018). The two
// halves' sums merge the same way at the end of the row.
// - d is formed as (z − M)·(1/τ), so the maximum's d is exactly 0 at any τ
//   (z·(1/τ) − M/τ would leave the rounding of z/τ there: a constant bf16 row
//   of 9984 at τ = 0.7 then summed exp of that residual 152064 times).
// - Sums: the lanes of C hold one chunk (128 terms per lane on every ISA), and
//   each chunk's sums are added to the half's sums in double, so a row of
//   152064 has the accuracy of one chunk; lse, log π, H and Σπ² are formed in
//   double from them and rounded once. A lane's sum is within 128·2⁻²⁴ of
//   exact, relative: the bound is reached where the maximum's term dominates a
//   lane and quantized logits round every smaller term the same way.
// - One pass: a chunk is summed against the M of the chunks before it while
//   its own maximum is taken, and the sums move to the new maximum after it.
//   Only a chunk whose maximum exceeds M by more than 20 (where e could reach
//   e²⁰ per term and s1's rescale would cancel away digits) is summed again,
//   from L1, against its own maximum. The first chunk of each half, which has
//   no M yet, is swept for its maximum first. At the end M is the row's maximum.
// - Two halves: one thread's read of memory is bound by the cache misses it
//   keeps in flight; two streams, each prefetched 2 KiB ahead, keep about
//   twice as many.
// - bf16 rows are read 32 elements at a time as 16 pairs of 16-bit halves: the
//   even elements are the low halves shifted up, the odd ones the high halves
//   masked. The order of the terms of a sum does not matter here.
// - exp is core::exp_of_difference (9 instructions, relative error
//   (2 + |d|)·2⁻²³; d ≤ 20 here, and the far terms it is least exact for are the
//   smallest). The kernel runs at the speed of its memory read or of this
//   arithmetic, whichever is slower (bench/credit.cpp).
//
// Conventions:
// - Statistics are float (double for double logits) whatever the storage
//   (float, double, bf16, half); 1/τ is one reciprocal, multiplied in.
// - log π_y is formed as (z_y − M)/τ − log s0, never as z'_y − lse: at |z| ~ 1e4
//   the float lse has an ulp of 1e-3, which the difference would inherit.
// - −inf logits (a masked vocabulary) are ordinary: they contribute exp = 0
//   and nothing to H (d is floored so that 0·(−inf) never forms). If the
//   sampled token itself has logit −inf, log π_y = −inf (it could not have been
//   sampled); its gradient is still finite: (g/τ)·e_y.
// - Bad input: a token id outside [0, V), a row whose logits are all −inf,
//   τ ≤ 0 or not finite, mismatched lengths → normkit::error naming them.
// - A row with a NaN or a +inf logit gets NaN statistics (lse, log π, H, Σπ²),
//   as torch's log_softmax gives, and a NaN gradient row, wherever the NaN is
//   and whatever else the row holds (a row of −inf and NaN only too); the
//   other rows are unaffected.
// - Backward: `logsumexp` is the one saved by the forward. If it is absent, the
//   backward recomputes it per row (one extra sweep over the row, which is then
//   in cache): slower, but exact to float rounding even for |z| ~ 1e4 (the
//   float sums' 128·2⁻²⁴ ≈ 7.6e-6 relative at most, about 2e-6 on quantized
//   rows, whatever |z|), where a saved float lse carries a relative error of
//   |lse|·2⁻²⁴ into every π.
// - The gradient buffer is overwritten (float, double or bf16; it may differ
//   from the logits' storage type). Rows with g_t = 0 get zeros.
// - Threads split rows; every row is computed the same way, so any thread
//   count gives the same bits.
// - Arguments (docs/api.md): the forward's four outputs, the saved logsumexp among them, are
//   named fields of one logits_outputs, each optional; the backward takes the output gradient
//   first and reads the saved logsumexp last.
//
// Memory (checked; an overlap is a normkit::error naming both arguments): every output is
// disjoint from every input (the group ids included) and from the other outputs; none is
// written in place.
#pragma once

#include "../core/execution.hpp"
#include "../core/view.hpp"

namespace normkit::credit {

struct logits_options : execution_options {
    double temperature = 1.0;  // τ > 0: statistics of softmax(z/τ), as the sampler used
};

namespace detail {
template <class T>
void logits_statistics(matrix_view<const T> logits, vector_view<const index_type> tokens,
                       vector_view<statistic_t<T>> token_log_probability, vector_view<statistic_t<T>> entropy,
                       vector_view<statistic_t<T>> sum_probability_squared, vector_view<statistic_t<T>> logsumexp,
                       const logits_options& options);
template <class T, class G>
void logits_backward(vector_view<const statistic_t<T>> output_gradient, matrix_view<const T> logits,
                     vector_view<const index_type> tokens, matrix_view<G> logits_gradient,
                     vector_view<const statistic_t<T>> logsumexp, const logits_options& options);
}  // namespace detail

// The per-row outputs of logits_statistics, each optional (one not set is not computed). All four
// share one type, so they are set by name, never by position (docs/api.md §1, "Outputs of one
// type"): a swapped pair cannot compile, and there is no brace initialization by position.
//   credit::logits_statistics(logits, tokens, credit::logits_outputs<float>().token_log_probability(log_p).logsumexp(lse));
// S is statistic_t of the logits' storage: float, double for double logits.
template <class S>
class logits_outputs {
public:
    using value_type = S;

    logits_outputs() {}

    logits_outputs& token_log_probability(vector_view<S> values) { return set(token_log_probability_, values); }
    logits_outputs& entropy(vector_view<S> values) { return set(entropy_, values); }
    logits_outputs& sum_probability_squared(vector_view<S> values) { return set(sum_probability_squared_, values); }
    logits_outputs& logsumexp(vector_view<S> values) { return set(logsumexp_, values); }  // for logits_backward

    vector_view<S> token_log_probability() const { return token_log_probability_; }
    vector_view<S> entropy() const { return entropy_; }
    vector_view<S> sum_probability_squared() const { return sum_probability_squared_; }
    vector_view<S> logsumexp() const { return logsumexp_; }

private:
    logits_outputs& set(vector_view<S>& field, vector_view<S> values) {
        field = values;
        return *this;
    }

    vector_view<S> token_log_probability_, entropy_, sum_probability_squared_, logsumexp_;
};

// Per row of logits [T × V]: the outputs set in `outputs` (log π of tokens[t], entropy, Σπ², the
// saved logsumexp of z/τ). tokens is needed only for token_log_probability.
template <class Logits>
void logits_statistics(const Logits& logits, vector_view<const index_type> tokens,
                       const logits_outputs<statistic_t<element_t<Logits>>>& outputs,
                       const logits_options& options = {}) {
    using T = element_t<Logits>;
    static_assert(core::is_storage_v<T>, "logits_statistics: logits are float, double, bfloat16 or half");
    detail::logits_statistics<T>(view(logits), tokens, outputs.token_log_probability(), outputs.entropy(),
                                 outputs.sum_probability_squared(), outputs.logsumexp(), options);
}

// logits_gradient = ∂(Σ_t g_t·log π(y_t))/∂z, overwritten; output_gradient holds g_t.
// logsumexp: the forward's (fast), or {} to recompute it per row (exact at large |z|).
template <class Logits, class Gradient>
void logits_backward(const_statistics_t<Logits> output_gradient, const Logits& logits,
                     vector_view<const index_type> tokens, Gradient&& logits_gradient,
                     const_statistics_t<Logits> logsumexp = {}, const logits_options& options = {}) {
    using T = element_t<Logits>;
    using G = element_t<Gradient>;
    static_assert(core::is_storage_v<T> && core::is_storage_v<G>,
                  "logits_backward: logits and gradient are storage types");
    detail::logits_backward<T, G>(output_gradient, view(logits), tokens, view(logits_gradient), logsumexp, options);
}

}  // namespace normkit::credit

#include "detail/logits_statistics.hpp"
