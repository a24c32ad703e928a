// The logits kernel's special values and the exactness of its tempered rows:
// a NaN or +inf logit makes that row's statistics and gradient NaN (as torch's
// log_softmax does) and leaves the other rows alone; at τ ≠ 1 the row maximum's
// term is exactly exp(0), so a constant row has H = log V and log π = −log V to
// the rounding of those values; a NaN beside −inf only is NaN too, and a
// quantized row at |z| ~ 1e4 keeps float accuracy on every ISA.
#include "reference/credit.hpp"
#include "support.hpp"

#include <normkit/credit/logits_statistics.hpp>

#include <limits>

using namespace normkit;
using namespace normkit::testing;

namespace {

template <class T>
struct logits_run {
    std::vector<float> log_probability, entropy, sum_squared, lse;
    std::vector<T> gradient;
};

// All four statistics and the backward (from the saved lse and recomputed) of rows × V logits.
template <class T>
logits_run<T> run(const std::vector<T>& logits, index_type rows, index_type vocabulary,
                  const std::vector<index_type>& tokens, double temperature, bool recompute = false) {
    using S = statistic_t<T>;
    credit::logits_options options;
    options.temperature = temperature;
    std::vector<S> log_probability(rows), entropy(rows), sum_squared(rows), lse(rows), g(rows, S(1));
    const auto z = view(logits.data(), rows, vocabulary);
    credit::logits_statistics(z, tokens,
                              credit::logits_outputs<S>()
                                  .token_log_probability(log_probability)
                                  .entropy(entropy)
                                  .sum_probability_squared(sum_squared)
                                  .logsumexp(lse),
                              options);
    logits_run<T> out;
    out.gradient.resize(logits.size());
    credit::logits_backward(g, z, tokens, view(out.gradient.data(), rows, vocabulary),
                            recompute ? vector_view<const S>{} : vector_view<const S>(lse), options);
    for (index_type r = 0; r < rows; ++r) {
        out.log_probability.push_back(static_cast<float>(log_probability[r]));
        out.entropy.push_back(static_cast<float>(entropy[r]));
        out.sum_squared.push_back(static_cast<float>(sum_squared[r]));
        out.lse.push_back(static_cast<float>(lse[r]));
    }
    return out;
}

template <class T>
bool is_nan(T value) {
    return std::isnan(static_cast<double>(core::to_compute(value)));
}

}  // namespace

TEMPLATE_TEST_CASE("a NaN or +inf logit gives that row NaN statistics and gradient, and no other row",
                   "[credit][logits][special]", float, double, Eigen::bfloat16) {
    using T = TestType;
    for (index_type vocabulary : {index_type(7), index_type(100), index_type(5000)}) {
        for (bool positive_infinity : {false, true}) {
            for (double temperature : {1.0, 0.7}) {
                INFO("V " << vocabulary << " +inf " << positive_infinity << " tau " << temperature);
                const index_type rows = 3;
                const auto values = random_values(static_cast<std::size_t>(rows * vocabulary), 77, 0.0, 3.0);
                auto logits = to_storage<T>(values);
                const std::vector<index_type> tokens = {1, 2, 3};
                // Row 1: a special value late in the row (a later chunk when V is long); in the
                // +inf case the rest of the row is 0, as in the report.
                const index_type at = vocabulary - 2;
                if (positive_infinity)
                    for (index_type v = 0; v < vocabulary; ++v) logits[vocabulary + v] = core::from_compute<T>(0);
                logits[vocabulary + at] =
                    core::from_compute<T>(positive_infinity ? std::numeric_limits<core::compute_t<T>>::infinity()
                                                            : std::numeric_limits<core::compute_t<T>>::quiet_NaN());
                for (bool recompute : {false, true}) {
                    const auto clean = run(to_storage<T>(values), rows, vocabulary, tokens, temperature, recompute);
                    const auto special = run(logits, rows, vocabulary, tokens, temperature, recompute);
                    CHECK(std::isnan(special.log_probability[1]));
                    CHECK(std::isnan(special.entropy[1]));
                    CHECK(std::isnan(special.sum_squared[1]));
                    CHECK(std::isnan(special.lse[1]));
                    long finite = 0;
                    for (index_type v = 0; v < vocabulary; ++v) finite += !is_nan(special.gradient[vocabulary + v]);
                    CHECK(finite == 0);
                    for (index_type r : {index_type(0), index_type(2)}) {
                        CHECK(special.log_probability[r] == clean.log_probability[r]);
                        CHECK(special.entropy[r] == clean.entropy[r]);
                        CHECK(special.lse[r] == clean.lse[r]);
                        CHECK(std::memcmp(special.gradient.data() + r * vocabulary,
                                          clean.gradient.data() + r * vocabulary, vocabulary * sizeof(T)) == 0);
                    }
                }
            }
        }
    }
}

TEMPLATE_TEST_CASE("a constant row at any temperature has H = log V and log pi = -log V, rounded once",
                   "[credit][logits][special]", float, Eigen::bfloat16) {
    using T = TestType;
    for (double temperature : {1.0, 0.7, 1.3}) {
        for (index_type vocabulary : {index_type(1000), index_type(152064)}) {
            INFO("tau " << temperature << " V " << vocabulary);
            const std::vector<T> logits(static_cast<std::size_t>(vocabulary), core::from_compute<T>(9984.0f));
            const auto out = run(logits, 1, vocabulary, {5}, temperature);
            const double log_v = std::log(static_cast<double>(vocabulary));
            CHECK(out.entropy[0] == static_cast<float>(log_v));
            CHECK(out.log_probability[0] == static_cast<float>(-log_v));
            CHECK(out.sum_squared[0] == static_cast<float>(1.0 / static_cast<double>(vocabulary)));
            const double scaled_max = 9984.0 * static_cast<double>(static_cast<float>(1.0 / temperature));
            CHECK(std::abs(out.lse[0] - (scaled_max + log_v)) <=
                  0.5 * (std::nextafter(out.lse[0], INFINITY) - out.lse[0]));
        }
    }
}

TEST_CASE("logits_backward recomputing the row at tau != 1 gives the maximum's pi exactly",
          "[credit][logits][special]") {
    // One logit of 20000.1 at tau = 0.7: pi = 1, so the gradient of log pi is exactly 0 (it was 1e-3:
    // z/tau − max/tau left the rounding of z/tau in the exponent).
    const std::vector<float> logits = {20000.1f};
    const std::vector<index_type> tokens = {0};
    const std::vector<float> g = {1.0f};
    std::vector<float> gradient(1, 7.0f);
    credit::logits_options options;
    options.temperature = 0.7;
    credit::logits_backward(g, view(logits.data(), 1, 1), tokens, view(gradient.data(), 1, 1), {}, options);
    CHECK(gradient[0] == 0.0f);
}

TEMPLATE_TEST_CASE("a NaN logit gives NaN statistics wherever it is, beside finite logits or -inf only",
                   "[credit][logits][special]", float, double, Eigen::half) {
    // The running maximum took a NaN and the next logit of its lane replaced it: a row of one finite
    // logit, a NaN after it in the same lane and −inf elsewhere had M = −inf and was rejected as a
    // row of −inf (SSE2, tests/fuzz/FINDINGS.md F10). A row of −inf and NaN only gets NaN too.
    using T = TestType;
    using C = core::compute_t<T>;
    const C nan = std::numeric_limits<C>::quiet_NaN(), minus_infinity = -std::numeric_limits<C>::infinity();
    for (index_type vocabulary : {index_type(17), index_type(100), index_type(5000)}) {
        for (index_type step : {index_type(4), index_type(16), index_type(1)}) {
            for (bool with_finite : {true, false}) {
                for (double temperature : {1.0, 0.7}) {
                    INFO("V " << vocabulary << " NaN at " << step << " finite " << with_finite << " tau "
                              << temperature);
                    std::vector<T> logits(static_cast<std::size_t>(vocabulary), core::from_compute<T>(minus_infinity));
                    if (with_finite) logits[0] = core::from_compute<T>(C(9997.21));
                    logits[static_cast<std::size_t>(step)] = core::from_compute<T>(nan);
                    for (bool recompute : {false, true}) {
                        const auto out = run(logits, 1, vocabulary, {0}, temperature, recompute);
                        CHECK(std::isnan(out.lse[0]));
                        CHECK(std::isnan(out.log_probability[0]));
                        CHECK(std::isnan(out.entropy[0]));
                        CHECK(std::isnan(out.sum_squared[0]));
                        long finite = 0;
                        for (const auto& value : out.gradient) finite += !is_nan(value);
                        CHECK(finite == 0);
                    }
                }
            }
        }
    }
    // A row of −inf alone is still bad input.
    const std::vector<float> masked(9, -std::numeric_limits<float>::infinity());
    std::vector<float> lse(1);
    CHECK_THROWS_WITH(
        credit::logits_statistics(view(masked.data(), 1, 9), {}, credit::logits_outputs<float>().logsumexp(lse)),
        Catch::Contains("logits row 0 has no finite entry (all 9 logits are -inf)"));
}

TEMPLATE_TEST_CASE("logits_backward recomputing a quantized row at |z| ~ 1e4 keeps float accuracy on every ISA",
                   "[credit][logits][special]", float, Eigen::half) {
    // Logits 9992..10016 in steps of 8 (half's spacing there): the maximum's term dominates its float
    // lane, and every smaller term added to that lane rounds the same way. 512 terms per SSE2 lane
    // (a chunk of 2048) gave s0, and every π, a relative error of 1.5e-5 (tests/fuzz/FINDINGS.md
    // F11); a chunk of 128 batches per lane on every ISA bounds it by 128·2⁻²⁴ ≈ 7.6e-6.
    using T = TestType;
    const index_type vocabulary = 4097;
    std::vector<double> values(static_cast<std::size_t>(vocabulary), 10000.0);
    for (index_type v = 3; v < vocabulary; v += 50) values[static_cast<std::size_t>(v)] = 10008.0;
    for (index_type v = 7; v < vocabulary; v += 10) values[static_cast<std::size_t>(v)] = 9992.0;
    values[2050] = 10016.0;
    const auto logits = to_storage<T>(values);
    const std::vector<index_type> tokens = {0};
    const std::vector<float> g = {1.0f};
    std::vector<float> gradient(values.size());
    credit::logits_backward(g, view(logits.data(), 1, vocabulary), tokens, view(gradient.data(), 1, vocabulary));
    const auto expected = reference::logits_gradient(values.data(), vocabulary, 0, 1.0, 1.0);
    const double error = relative_error(to_double(gradient), expected, 1.0);
    INFO("relative error " << error);
    CHECK(error < 128 * std::ldexp(1.0, -24));
}

TEMPLATE_TEST_CASE("logits_backward from a saved lse stays finite at |z/tau| near the type's range",
                   "[credit][logits][special]", float, double) {
    // z·(1/τ) − lse is 0 but for rounding; fused into one FMA (the token's term, -march=native) it
    // was the product's rounding error, 4.7e22 for a double 3e38 at τ = 0.7: π = inf, gradient −inf.
    using T = TestType;
    const std::vector<T> logits = {std::is_same_v<T, double> ? T(3e38) : T(2e37)};
    const std::vector<index_type> tokens = {0};
    credit::logits_options options;
    options.temperature = 0.7;
    std::vector<T> lse(1);
    credit::logits_statistics(view(logits.data(), 1, 1), tokens, credit::logits_outputs<T>().logsumexp(lse), options);
    for (const T g : {T(1), T(0)}) {
        std::vector<T> gradient(1, T(7));
        const std::vector<T> weight{g};
        credit::logits_backward(weight, view(logits.data(), 1, 1), tokens, view(gradient.data(), 1, 1), lse, options);
        INFO("g " << g << " lse " << lse[0] << " gradient " << gradient[0]);
        // π ∈ [0, 1]: the gradient (g/τ)(1 − π) is within [0, g/τ]; g = 0 gives 0.
        CHECK(std::isfinite(gradient[0]));
        CHECK(std::abs(gradient[0]) <= std::abs(g) / T(0.7) * T(1.0001));
    }
}
