// Differential fuzz target of the fused logits kernel (credit::logits_statistics
// and credit::logits_backward) against tests/reference/credit.hpp.
//
// Per case: T × V logits in any storage type (V across the SIMD tails and the
// 2048-element chunks of the two halves), rows of the fuzzer's scale and
// offset, rising maxima, a masked vocabulary (−inf), the sampled token's logit
// −inf, NaN / +inf / huge logits, a temperature. It checks
//   - finite rows (z/τ inside float range): lse, log π_y, entropy and Σπ²
//     within the few float ulps of the quantities summed that the tests allow,
//     and the gradient (g/τ)(e_y − π) from the saved or the recomputed lse;
//   - documented values: a row holding NaN or +inf gives NaN statistics; a
//     sampled token of logit −inf gives log π_y = −inf and a finite gradient;
//     g = 0 rows get a zero gradient;
//   - bad input names itself: a token outside [0, V), an all −inf row, τ ≤ 0
//     or not finite → normkit::error;
//   - any thread count gives the same bits; no crash or UB on any input.
#include "fuzz_support.hpp"
#include "reference/credit.hpp"

#include <normkit/credit/logits_statistics.hpp>

using namespace normkit;
using fuzz::check;

namespace {

struct logits_case {
    index_type rows, vocabulary;
    double temperature;
    std::vector<double> values;  // as stored
    std::vector<index_type> tokens;
};

template <class T>
logits_case read_case(fuzz::source& in) {
    const index_type dims[] = {1, 2, 3, 15, 16, 17, 31, 33, 127, 128, 1000, 2048, 2049, 4097, 6221};
    logits_case c{
        in.integer<index_type>(1, 4), in.flag() ? in.pick(dims) : in.integer<index_type>(1, 300), 1.0, {}, {}};
    c.temperature = in.pick({1.0, 0.7, 0.05, 3.0, 1e-3});
    const double scale = in.pick({1.0, 3.0, 30.0, 1e3, 1e4}), offset = in.pick({0.0, 5.0, -1e3, 1e4});
    const double masked = in.pick({0.0, 0.0, 0.3, 0.95});
    const double rise = in.pick({0.0, 0.0, 25.0});  // per 2048-element chunk: a maximum that rises late
    for (index_type i = 0; i < c.rows; ++i) {
        c.tokens.push_back(in.integer<index_type>(0, c.vocabulary - 1));
        for (index_type v = 0; v < c.vocabulary; ++v) {
            double z = offset + in.normal() * scale + rise * static_cast<double>(v / 2048);
            if (v != c.tokens[i] && in.uniform(0, 1) < masked) z = -INFINITY;
            c.values.push_back(z);
        }
    }
    if (in.flag()) c.values[c.tokens[0]] = -INFINITY;  // the sampled token itself masked
    fuzz::sprinkle(in, c.values, in.integer<int>(0, 2));
    c.values = fuzz::stored<T>(c.values);
    return c;
}

bool row_has(const logits_case& c, index_type i, bool (*predicate)(double)) {
    for (index_type v = 0; v < c.vocabulary; ++v)
        if (predicate(c.values[i * c.vocabulary + v])) return true;
    return false;
}

std::string describe_specials(const logits_case& c, index_type i) {
    std::ostringstream out;
    for (index_type v = 0; v < c.vocabulary; ++v) {
        const double z = c.values[i * c.vocabulary + v];
        if (std::isnan(z) || z == INFINITY) out << "z[" << v << "] = " << z << " ";
    }
    out << "token " << c.tokens[i];
    return out.str();
}

template <class T>
void check_logits(fuzz::source& in) {
    auto c = read_case<T>(in);
    const index_type padding = in.integer<index_type>(0, 3);
    fuzz::matrix<T> logits(c.rows, c.vocabulary, padding, in.flag());
    logits.set(c.values);
    using S = core::statistic_t<T>;
    const auto n = static_cast<std::size_t>(c.rows);
    std::vector<S> lse(n), log_p(n), entropy(n), squares(n);
    credit::logits_options options;
    options.temperature = c.temperature;
    const char* type = fuzz::type_name<T>();

    // Bad input first: an all −inf row, a token outside [0, V), τ not > 0 and finite.
    // A row of -inf is rejected; a row of -inf and NaN only gets NaN statistics (checked below).
    // A row whose z/τ overflows the compute type (a finite −3e38 at τ < 1 is −inf in float) may be
    // rejected: it has no documented value.
    const double float_range = std::is_same_v<T, double> ? 1e300 : 1e37;
    bool all_minus_infinity = false, overflows = false;
    for (index_type i = 0; i < c.rows; ++i) {
        all_minus_infinity |= !row_has(c, i, [](double z) { return z != -INFINITY; });
        for (index_type v = 0; v < c.vocabulary; ++v)
            overflows |= std::abs(c.values[i * c.vocabulary + v]) / c.temperature > float_range &&
                         std::isfinite(c.values[i * c.vocabulary + v]);
    }
    const bool threw = fuzz::throws_error([&] {
        credit::logits_statistics(logits.view, c.tokens,
                                  credit::logits_outputs<S>()
                                      .token_log_probability(log_p)
                                      .entropy(entropy)
                                      .sum_probability_squared(squares)
                                      .logsumexp(lse),
                                  options);
    });
    if (all_minus_infinity) {
        check(threw, "logits_statistics ", type, ": a row of -inf logits does not throw");
        return;
    }
    if (threw && overflows) return;
    if (threw && std::getenv("NORMKIT_FUZZ_VERBOSE"))
        for (index_type i = 0; i < c.rows; ++i) {
            std::fprintf(stderr, "row %ld tau %g:", static_cast<long>(i), c.temperature);
            for (index_type v = 0; v < std::min<index_type>(c.vocabulary, 20); ++v)
                std::fprintf(stderr, " %g", c.values[i * c.vocabulary + v]);
            std::fprintf(stderr, "\n");
        }
    check(!threw, "logits_statistics ", type, ": threw on valid input: ", fuzz::last_error());
    auto bad_tokens = c.tokens;
    bad_tokens[in.integer<std::size_t>(0, n - 1)] = in.flag() ? c.vocabulary : -1;
    check(fuzz::throws_error([&] {
              credit::logits_statistics(logits.view, bad_tokens,
                                        credit::logits_outputs<S>().token_log_probability(log_p), options);
          }),
          "logits_statistics: a token outside [0, V) does not throw");
    auto bad_temperature = options;
    bad_temperature.temperature = in.pick({0.0, -1.0, double(INFINITY), std::nan("")});
    check(fuzz::throws_error([&] {
              credit::logits_statistics(logits.view, c.tokens, credit::logits_outputs<S>().entropy(entropy),
                                        bad_temperature);
          }),
          "logits_statistics: temperature ", bad_temperature.temperature, " does not throw");

    // Threads: the same bits.
    std::vector<S> lse2(n), log_p2(n), entropy2(n), squares2(n);
    auto threaded = options;
    threaded.threads = in.integer<int>(2, 4);
    credit::logits_statistics(logits.view, c.tokens,
                              credit::logits_outputs<S>()
                                  .token_log_probability(log_p2)
                                  .entropy(entropy2)
                                  .sum_probability_squared(squares2)
                                  .logsumexp(lse2),
                              threaded);
    check(fuzz::same_bits(lse, lse2) && fuzz::same_bits(log_p, log_p2) && fuzz::same_bits(entropy, entropy2) &&
              fuzz::same_bits(squares, squares2),
          "logits_statistics ", type, ": threads ", threaded.threads, " differ from 1");

    const double unit = std::is_same_v<T, double> ? 1e-13 : 3e-6;
    const double log_v = std::log(static_cast<double>(c.vocabulary)) + 1;
    for (index_type i = 0; i < c.rows; ++i) {
        const bool poisoned = row_has(c, i, [](double z) { return std::isnan(z) || z == INFINITY; });
        if (poisoned) {
            // Documented: +inf or NaN logits give NaN statistics.
            check(std::isnan(lse[i]) && std::isnan(entropy[i]) && std::isnan(squares[i]), "logits_statistics ", type,
                  ": a row with NaN/+inf gives lse ", lse[i], " entropy ", entropy[i], " sum pi^2 ", squares[i],
                  ", documented NaN (row ", i, " of ", c.rows, ", V ", c.vocabulary, ", tau ", c.temperature, ", ",
                  describe_specials(c, i), ")");
            continue;
        }
        double magnitude = 1;
        for (index_type v = 0; v < c.vocabulary; ++v) {
            const double z = c.values[i * c.vocabulary + v];
            if (std::isfinite(z)) magnitude = std::max(magnitude, std::abs(z) / c.temperature);
        }
        if (magnitude > float_range) continue;  // z/τ overflows the compute type: no documented value
        const auto r =
            reference::logits_statistics(&c.values[i * c.vocabulary], c.vocabulary, c.tokens[i], c.temperature);
        const double token_logit = c.values[i * c.vocabulary + c.tokens[i]];
        check(std::abs(lse[i] - r.logsumexp) <= unit * (magnitude + log_v), "logits_statistics ", type, ": lse ",
              lse[i], " reference ", r.logsumexp, " (V ", c.vocabulary, " tau ", c.temperature, ")");
        if (token_logit == -INFINITY)
            check(log_p[i] == -INFINITY, "logits_statistics ", type, ": a -inf token gives log pi ", log_p[i]);
        else
            check(std::abs(log_p[i] - r.token_log_probability) <= unit * (magnitude + log_v), "logits_statistics ",
                  type, ": log pi ", log_p[i], " reference ", r.token_log_probability);
        // z' = z·(1/τ) is rounded to the compute type (logits_statistics.hpp): each d carries |z'|·ulp, so
        // the entropy and Σπ² take the row's magnitude into their tolerance as lse does.
        check(std::abs(entropy[i] - r.entropy) <= unit * (magnitude + log_v) * 4, "logits_statistics ", type,
              ": entropy ", entropy[i], " reference ", r.entropy, " (V ", c.vocabulary, " tau ", c.temperature, ")");
        check(std::abs(squares[i] - r.sum_probability_squared) <=
                  unit * 4 * (magnitude + 1) * r.sum_probability_squared + 1e-30,
              "logits_statistics ", type, ": sum pi^2 ", squares[i], " reference ", r.sum_probability_squared);
    }

    // The backward, float gradient, from the saved and from the recomputed lse.
    std::vector<S> g(n);
    for (auto& value : g) value = static_cast<S>(in.pick({1.0, -0.5, 0.0, 3.0}));
    const bool saved = in.flag();
    fuzz::matrix<S> gradient(c.rows, c.vocabulary, 1, true);  // the logits' compute type
    credit::logits_backward(g, logits.view, c.tokens, gradient.view,
                            saved ? vector_view<const S>(lse) : vector_view<const S>{}, threaded);
    check(gradient.padding_untouched(), "logits_backward: wrote outside the gradient view");
    const auto actual = gradient.values();
    for (index_type i = 0; i < c.rows; ++i) {
        const auto row =
            std::vector<double>(actual.begin() + i * c.vocabulary, actual.begin() + (i + 1) * c.vocabulary);
        // NaN or +inf logits are not a supported input (logits_statistics.hpp): no documented gradient.
        if (row_has(c, i, [](double z) { return std::isnan(z) || z == INFINITY; })) continue;
        double magnitude = 1;
        for (index_type v = 0; v < c.vocabulary; ++v) {
            const double z = c.values[i * c.vocabulary + v];
            if (std::isfinite(z)) magnitude = std::max(magnitude, std::abs(z) / c.temperature);
        }
        if (magnitude > float_range) continue;  // z/τ beyond the compute type: no documented gradient
        if (g[i] == 0) {
            for (index_type v = 0; v < c.vocabulary; ++v)
                check(row[v] == 0, "logits_backward ", type, ": a g = 0 row gets ", row[v], " at ", v, " (logit ",
                      c.values[i * c.vocabulary + v], ", token ", c.tokens[i], " logit ",
                      c.values[i * c.vocabulary + c.tokens[i]], ", V ", c.vocabulary, ", tau ", c.temperature,
                      ", saved lse ", saved, " = ", lse[i], ")");
            continue;
        }
        for (index_type v = 0; v < c.vocabulary; ++v)
            check(std::isfinite(row[v]), "logits_backward ", type, ": non-finite gradient ", row[v], " at ", v,
                  " (logit ", c.values[i * c.vocabulary + v], ", token ", c.tokens[i], " logit ",
                  c.values[i * c.vocabulary + c.tokens[i]], ", V ", c.vocabulary, ", tau ", c.temperature,
                  ", saved lse ", saved, " = ", lse[i], ", g ", g[i], ")");
        const auto expected =
            reference::logits_gradient(&c.values[i * c.vocabulary], c.vocabulary, c.tokens[i], g[i], c.temperature);
        // A saved float lse carries |lse|·2⁻²⁴ into every π (logits_statistics.hpp); recomputed, the
        // rounding of the float lane sums, at most 128 terms per lane on every ISA.
        const double tolerance =
            (std::is_same_v<T, double> ? 1e-6 : 2e-6) * (saved ? std::max(1.0, magnitude) : 1.0) * 4;
        const double error = fuzz::relative_error(row, expected, std::abs(g[i]) / c.temperature);
        check(error < tolerance, "logits_backward ", type, ": relative error ", error, " > ", tolerance, " (saved lse ",
              saved, ", V ", c.vocabulary, ", tau ", c.temperature, ", magnitude ", magnitude, ")");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::source in(data, size);
    switch (in.integer<int>(0, 3)) {
        case 0:
            check_logits<float>(in);
            break;
        case 1:
            check_logits<double>(in);
            break;
        case 2:
            check_logits<Eigen::bfloat16>(in);
            break;
        default:
            check_logits<Eigen::half>(in);
            break;
    }
    return 0;
}
