// The fused logits statistics and their backward against tests/reference/credit.hpp.
#include "reference/credit.hpp"
#include "support.hpp"

#include <normkit/credit/logits_statistics.hpp>

#include <functional>
#include <limits>

using namespace normkit;
using namespace normkit::testing;

namespace {

credit::logits_options logits_with(double temperature, int threads = 1) {
    credit::logits_options options;
    options.temperature = temperature;
    options.threads = threads;
    return options;
}

struct logits_case {
    index_type rows, vocabulary, padding;
    double temperature, scale, offset;
};

// Reshapes the random logits (rows × V, row-major) before they are stored; it must leave each
// row's token finite.
using logits_shape =
    std::function<void(std::vector<double>& values, index_type vocabulary, const std::vector<index_type>& tokens)>;

template <class T>
void check_statistics(const logits_case& c, std::uint32_t seed, double masked_fraction = 0.0,
                      const logits_shape& shape = {}) {
    INFO(type_name<T>() << " rows " << c.rows << " V " << c.vocabulary << " padding " << c.padding << " tau "
                        << c.temperature << " scale " << c.scale << " offset " << c.offset << " masked "
                        << masked_fraction);
    auto values = random_values(c.rows * c.vocabulary, seed, c.offset, c.scale);
    std::mt19937 generator(seed + 1);
    std::vector<index_type> tokens(c.rows);
    for (auto& token : tokens) token = static_cast<index_type>(generator() % static_cast<std::uint32_t>(c.vocabulary));
    if (masked_fraction > 0) {
        std::uniform_real_distribution<double> uniform(0, 1);
        for (index_type i = 0; i < c.rows; ++i)
            for (index_type v = 0; v < c.vocabulary; ++v)
                if (v != tokens[i] && uniform(generator) < masked_fraction) values[i * c.vocabulary + v] = -INFINITY;
    }
    if (shape) shape(values, c.vocabulary, tokens);
    test_matrix<T> logits(c.rows, c.vocabulary, values, c.padding);
    const auto stored_values = logits.values();
    using S = core::statistic_t<T>;
    std::vector<S> lse(c.rows), log_p(c.rows), entropy(c.rows), squares(c.rows);
    credit::logits_statistics(logits.view, tokens,
                              credit::logits_outputs<S>()
                                  .token_log_probability(log_p)
                                  .entropy(entropy)
                                  .sum_probability_squared(squares)
                                  .logsumexp(lse),
                              logits_with(c.temperature));
    std::vector<double> lse_ref, log_p_ref, entropy_ref, squares_ref;
    for (index_type i = 0; i < c.rows; ++i) {
        const auto r =
            reference::logits_statistics(&stored_values[i * c.vocabulary], c.vocabulary, tokens[i], c.temperature);
        lse_ref.push_back(r.logsumexp);
        log_p_ref.push_back(r.token_log_probability);
        entropy_ref.push_back(r.entropy);
        squares_ref.push_back(r.sum_probability_squared);
    }
    // The statistics are computed from the stored values in float (double), whatever the storage:
    // absolute errors of a few float ulps of the quantities the sums run over.
    const double unit = std::is_same_v<T, double> ? 1e-13 : 3e-6;
    const double log_v = std::log(static_cast<double>(c.vocabulary)) + 1;
    double magnitude = 1;
    for (double value : stored_values)
        if (std::isfinite(value)) magnitude = std::max(magnitude, std::abs(value) / c.temperature);
    for (index_type i = 0; i < c.rows; ++i) {
        CHECK(std::abs(lse[i] - lse_ref[i]) <= unit * (magnitude + log_v));
        CHECK(std::abs(log_p[i] - log_p_ref[i]) <= unit * (magnitude + log_v));
        CHECK(std::abs(entropy[i] - entropy_ref[i]) <= unit * log_v * 4);
        CHECK(std::abs(squares[i] - squares_ref[i]) <= unit * 4 * squares_ref[i] + 1e-30);
    }
}

}  // namespace

TEMPLATE_TEST_CASE("logits_statistics matches a double log-softmax over tails, strides and storage types",
                   "[credit][logits]", float, double, Eigen::bfloat16, Eigen::half) {
    std::uint32_t seed = 10;
    for (index_type vocabulary : tail_dims) {
        check_statistics<TestType>({3, vocabulary, vocabulary % 5, 1.0, 2.0, 0.0}, seed++);
        check_statistics<TestType>({2, vocabulary, 0, 0.7, 1.0, 3.0}, seed++);
    }
    // Longer than several 2048-element chunks, with the maximum in a late chunk.
    check_statistics<TestType>({2, 10007, 3, 1.0, 3.0, 0.0}, seed++);
}

// The row is summed as two halves (the first a whole number of 2048-element chunks), each chunk
// against the maximum of the chunks before it: these rows reach every way that can go.
TEMPLATE_TEST_CASE("logits_statistics over rising maxima, late starts and masked halves", "[credit][logits]", float,
                   double, Eigen::bfloat16, Eigen::half) {
    constexpr index_type chunk = 2048, vocabulary = 3 * chunk + 77;  // halves [0, 4096) and [4096, 6221)
    constexpr double minus_infinity = -std::numeric_limits<double>::infinity();
    const auto rising = [](double step) {
        return [step](std::vector<double>& values, index_type v_count, const std::vector<index_type>&) {
            for (std::size_t k = 0; k < values.size(); ++k)
                values[k] += step * static_cast<double>((static_cast<index_type>(k) % v_count) / chunk);
        };
    };
    const auto masked = [](index_type begin, index_type end) {
        return [begin, end](std::vector<double>& values, index_type v_count, const std::vector<index_type>& tokens) {
            for (std::size_t row = 0; row < tokens.size(); ++row)
                for (index_type v = begin; v < std::min(end, v_count); ++v)
                    if (v != tokens[row])
                        values[row * static_cast<std::size_t>(v_count) + static_cast<std::size_t>(v)] = minus_infinity;
        };
    };
    std::uint32_t seed = 60;
    for (const double step :
         {5.0, 19.0, 21.0, 60.0, -30.0}) {  // moved to the new maximum (≤ 20), summed again (> 20), falling
        INFO("rising by " << step << " per chunk");
        check_statistics<TestType>({3, vocabulary, 1, 1.0, 2.0, 0.0}, seed++, 0.0, rising(step));
        check_statistics<TestType>({2, vocabulary, 0, 0.5, 2.0, 0.0}, seed++, 0.0, rising(step));
    }
    // One logit 150 above the rest, at each chunk's ends and in the tails: wherever it is, the sums
    // must move to it (exp(150) overflows float).
    for (const index_type position :
         {index_type(0), chunk - 1, chunk, 2 * chunk - 1, 2 * chunk, 3 * chunk - 1, 3 * chunk, vocabulary - 1}) {
        INFO("spike at " << position);
        check_statistics<TestType>(
            {2, vocabulary, 0, 1.0, 2.0, 0.0}, seed++, 0.0,
            [position](std::vector<double>& values, index_type v_count, const std::vector<index_type>& tokens) {
                for (std::size_t row = 0; row < tokens.size(); ++row)
                    values[row * static_cast<std::size_t>(v_count) + static_cast<std::size_t>(position)] += 150;
            });
    }
    // A half whose first chunk (or every chunk) is -inf starts late (or never).
    for (const auto& [begin, end] :
         {std::pair{index_type(0), chunk}, std::pair{2 * chunk, 3 * chunk}, std::pair{index_type(0), 2 * chunk},
          std::pair{2 * chunk, vocabulary}, std::pair{index_type(0), 3 * chunk}}) {
        INFO("masked [" << begin << ", " << end << ")");
        check_statistics<TestType>({3, vocabulary, 2, 1.0, 2.0, 0.0}, seed++, 0.0, masked(begin, end));
    }
}

TEMPLATE_TEST_CASE("logits_statistics is stable for logits of +-1e4 and -inf entries", "[credit][logits]", float,
                   double, Eigen::bfloat16) {
    check_statistics<TestType>({4, 5000, 1, 1.0, 1e4, 0.0}, 40);
    check_statistics<TestType>({4, 3000, 0, 1.0, 5.0, 1e4}, 41);
    check_statistics<TestType>({4, 3000, 0, 1.0, 5.0, -1e4}, 42);
    check_statistics<TestType>({4, 4097, 2, 1.3, 4.0, 0.0}, 43, 0.9);
    check_statistics<TestType>({3, 33, 0, 1.0, 1e4, 0.0}, 44, 0.5);
}

TEST_CASE("logits_statistics special cases", "[credit][logits]") {
    SECTION("uniform logits: lse = log V + z, H = log V, sum pi^2 = 1/V, log pi = -log V") {
        for (index_type vocabulary : {index_type(1), index_type(17), index_type(152064)}) {
            std::vector<float> z(vocabulary, 2.5f);
            std::vector<float> lse(1), log_p(1), entropy(1), squares(1);
            const std::vector<index_type> last{vocabulary - 1};
            credit::logits_statistics(view(z.data(), 1, vocabulary), last,
                                      credit::logits_outputs<float>()
                                          .token_log_probability(log_p)
                                          .entropy(entropy)
                                          .sum_probability_squared(squares)
                                          .logsumexp(lse));
            const double log_v = std::log(static_cast<double>(vocabulary));
            CHECK(lse[0] == Approx(2.5 + log_v).epsilon(1e-6));
            CHECK(log_p[0] == Approx(-log_v).margin(1e-5));
            CHECK(entropy[0] == Approx(log_v).margin(1e-5));
            CHECK(squares[0] == Approx(1.0 / vocabulary).epsilon(1e-5));
        }
    }
    SECTION("one finite logit among -inf: pi = 1 there, H = 0, sum pi^2 = 1, other tokens -inf") {
        std::vector<float> z(300, -std::numeric_limits<float>::infinity());
        z[123] = 7.0f;
        std::vector<float> lse(1), log_p(1), entropy(1), squares(1);
        const std::vector<index_type> token{123};
        credit::logits_statistics(view(z.data(), 1, 300), token,
                                  credit::logits_outputs<float>()
                                      .token_log_probability(log_p)
                                      .entropy(entropy)
                                      .sum_probability_squared(squares)
                                      .logsumexp(lse));
        CHECK(lse[0] == 7.0f);
        CHECK(log_p[0] == 0.0f);
        CHECK(entropy[0] == 0.0f);
        CHECK(squares[0] == 1.0f);
        const std::vector<index_type> token_five{5};
        credit::logits_statistics(view(z.data(), 1, 300), token_five,
                                  credit::logits_outputs<float>().token_log_probability(log_p));
        CHECK(log_p[0] == -std::numeric_limits<float>::infinity());
    }
    SECTION("absent outputs are skipped and tokens are then optional") {
        std::vector<float> z = {1, 2, 3}, entropy(1);
        credit::logits_statistics(view(z.data(), 1, 3), {}, credit::logits_outputs<float>().entropy(entropy));
        CHECK(entropy[0] > 0);
    }
}

TEST_CASE("logits_statistics rejects bad input, naming it", "[credit][logits]") {
    std::vector<float> z(2 * 5, 0.0f), out(2);
    const auto logits = view(z.data(), 2, 5);
    require_error_naming(
        [&] {
            const std::vector<index_type> outside{0, 5};
            credit::logits_statistics(logits, outside, credit::logits_outputs<float>().token_log_probability(out));
        },
        "tokens[1]");
    require_error_naming(
        [&] {
            const std::vector<index_type> negative{-1, 0};
            credit::logits_statistics(logits, negative, credit::logits_outputs<float>().token_log_probability(out));
        },
        "vocabulary");
    require_error_naming(
        [&] {
            const std::vector<index_type> one_token{0};
            credit::logits_statistics(logits, one_token, credit::logits_outputs<float>().token_log_probability(out));
        },
        "tokens");
    require_error_naming(
        [&] {
            credit::logits_statistics(logits, {}, credit::logits_outputs<float>().logsumexp(out), logits_with(0.0));
        },
        "temperature");
    std::vector<float> three(3), one(1);
    require_error_naming(
        [&] { credit::logits_statistics(logits, {}, credit::logits_outputs<float>().logsumexp(three)); }, "logsumexp");
    std::vector<float> masked(5, -std::numeric_limits<float>::infinity());
    require_error_naming(
        [&] {
            credit::logits_statistics(view(masked.data(), 1, 5), {}, credit::logits_outputs<float>().logsumexp(one));
        },
        "row 0");
    std::vector<float> gradient(10), g(2, 1.0f);
    require_error_naming(
        [&] {
            const std::vector<index_type> tokens{0, 7};
            credit::logits_backward(g, logits, tokens, view(gradient.data(), 2, 5));
        },
        "tokens[1]");
    require_error_naming(
        [&] {
            const std::vector<index_type> tokens{0, 1};
            credit::logits_backward(g, logits, tokens, view(gradient.data(), 2, 4));
        },
        "logits_gradient");
}

TEMPLATE_TEST_CASE("logits_backward matches (g/tau)(e_y - pi) for each gradient type", "[credit][logits]", float,
                   Eigen::bfloat16) {
    for (index_type vocabulary : {index_type(1), index_type(15), index_type(33), index_type(4097)}) {
        const index_type rows = 3;
        const double tau = 0.8;
        test_matrix<float> logits(rows, vocabulary, random_values(rows * vocabulary, 60 + vocabulary, 0.0, 2.0), 1);
        const auto values = logits.values();
        std::vector<index_type> tokens = {0, vocabulary / 2, vocabulary - 1};
        std::vector<float> g = {1.0f, -0.5f, 0.0f}, lse(rows);
        credit::logits_statistics(logits.view, tokens, credit::logits_outputs<float>().logsumexp(lse),
                                  logits_with(tau));
        for (bool saved : {true, false}) {
            test_matrix<TestType> gradient(rows, vocabulary, 2);
            credit::logits_backward(g, logits.view, tokens, gradient.view,
                                    saved ? vector_view<const float>(lse) : vector_view<const float>{},
                                    logits_with(tau));
            std::vector<double> expected;
            for (index_type i = 0; i < rows; ++i) {
                const auto row = reference::logits_gradient(&values[i * vocabulary], vocabulary, tokens[i], g[i], tau);
                expected.insert(expected.end(), row.begin(), row.end());
            }
            INFO("V " << vocabulary << " saved lse " << saved);
            CHECK(relative_error(gradient.values(), expected, 1.0 / tau) <
                  (std::is_same_v<TestType, float> ? 2e-6 : 8e-3));
            CHECK(gradient.padding_untouched());
            for (index_type v = 0; v < vocabulary; ++v)
                CHECK(core::to_compute(gradient.view(2, v)) == 0.0f);  // g = 0 row
        }
    }
}

TEST_CASE("logits_backward agrees with central finite differences of sum_t g_t log pi(y_t)", "[credit][logits]") {
    const index_type rows = 3, vocabulary = 37;
    const double tau = 1.3;
    auto z = random_values(rows * vocabulary, 70, 0.0, 1.5);
    z[5] = -INFINITY;  // a masked vocabulary entry: zero probability, zero gradient
    const std::vector<index_type> tokens = {4, 0, 36};
    const std::vector<double> g = {0.7, -1.2, 2.0};
    std::vector<double> gradient(rows * vocabulary);
    credit::logits_backward(g, view(z.data(), rows, vocabulary), tokens, view(gradient.data(), rows, vocabulary), {},
                            logits_with(tau));
    const auto loss = [&](const std::vector<double>& x) {
        double total = 0;
        for (index_type i = 0; i < rows; ++i)
            total += g[i] *
                     reference::logits_statistics(&x[i * vocabulary], vocabulary, tokens[i], tau).token_log_probability;
        return total;
    };
    const auto numeric = finite_difference(z, loss);
    std::vector<double> finite_numeric = numeric, finite_gradient = gradient;
    finite_numeric[5] = finite_gradient[5] = 0;  // the step does not move −inf
    CHECK(gradient[5] == 0.0);
    CHECK(relative_error(finite_gradient, finite_numeric) < 1e-7);
}

TEST_CASE("logits_backward at |z| ~ 1e4 is exact when it recomputes the row statistics", "[credit][logits]") {
    const index_type rows = 2, vocabulary = 2049;
    auto z = random_values(rows * vocabulary, 80, 1e4, 3.0);
    std::vector<float> zf(z.begin(), z.end()), g = {1.0f, 1.0f}, lse(rows), gradient(rows * vocabulary);
    const std::vector<index_type> tokens = {3, 2048};
    credit::logits_statistics(view(zf.data(), rows, vocabulary), tokens,
                              credit::logits_outputs<float>().logsumexp(lse));
    credit::logits_backward(g, view(zf.data(), rows, vocabulary), tokens, view(gradient.data(), rows, vocabulary));
    std::vector<double> expected;
    const auto stored = to_double(zf);
    for (index_type i = 0; i < rows; ++i) {
        const auto row = reference::logits_gradient(&stored[i * vocabulary], vocabulary, tokens[i], 1.0, 1.0);
        expected.insert(expected.end(), row.begin(), row.end());
    }
    CHECK(relative_error(to_double(gradient), expected, 1.0) < 2e-6);
    // With the saved float lse the probabilities inherit its rounding, |lse|·2^-24 relative.
    credit::logits_backward(g, view(zf.data(), rows, vocabulary), tokens, view(gradient.data(), rows, vocabulary), lse);
    CHECK(relative_error(to_double(gradient), expected, 1.0) < 1e4 * 1.2e-7 * 4);
}

TEST_CASE("logits kernels give the same bits for 1 and 2 threads", "[credit][logits]") {
    const index_type rows = 9, vocabulary = 3001;
    const auto z = random_values(rows * vocabulary, 90, 0.0, 2.0);
    std::vector<float> zf(z.begin(), z.end());
    std::vector<index_type> tokens(rows, 7);
    std::vector<float> a(rows), b(rows), ga(rows * vocabulary), gb(rows * vocabulary), g(rows, 1.0f);
    credit::logits_statistics(view(zf.data(), rows, vocabulary), tokens, credit::logits_outputs<float>().entropy(a),
                              logits_with(1.0, 1));
    credit::logits_statistics(view(zf.data(), rows, vocabulary), tokens, credit::logits_outputs<float>().entropy(b),
                              logits_with(1.0, 2));
    CHECK(a == b);
    credit::logits_backward(g, view(zf.data(), rows, vocabulary), tokens, view(ga.data(), rows, vocabulary), {},
                            logits_with(1.0, 1));
    credit::logits_backward(g, view(zf.data(), rows, vocabulary), tokens, view(gb.data(), rows, vocabulary), {},
                            logits_with(1.0, 2));
    CHECK(ga == gb);
}
