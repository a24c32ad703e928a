// The fused logits statistics against libtorch on the same logits:
// log_softmax + gather (log π), −Σ exp(lp)·lp (entropy), logsumexp, Σ softmax²,
// and autograd's gradient of Σ_t g_t·log π(y_t).
#include "support.hpp"

#include <normkit/credit/logits_statistics.hpp>

#include <torch/torch.h>

#include <limits>

// libtorch's glog defines its own (aborting) CHECK over Catch's: restore Catch's.
#undef CHECK
#define CHECK(...) INTERNAL_CATCH_TEST("CHECK", Catch::ResultDisposition::ContinueOnFailure, __VA_ARGS__)

using namespace normkit;
using namespace normkit::testing;

namespace {

credit::logits_options logits_with(double temperature, int threads = 1) {
    credit::logits_options options;
    options.temperature = temperature;
    options.threads = threads;
    return options;
}

double largest_difference(const std::vector<float>& ours, const torch::Tensor& theirs, double scale) {
    const auto contiguous = theirs.to(torch::kFloat32).contiguous();
    const float* data = contiguous.data_ptr<float>();
    double worst = 0;
    for (std::size_t i = 0; i < ours.size(); ++i)
        worst = std::max(worst, std::abs(static_cast<double>(ours[i]) - data[i]));
    return worst / scale;
}

}  // namespace

TEST_CASE("logits_statistics and logits_backward agree with libtorch log_softmax, gather and entropy",
          "[peers][torch][credit]") {
    struct setting {
        index_type rows, vocabulary;
        double temperature, offset, scale, masked;
    };
    for (const setting& s : {setting{7, 1, 1.0, 0.0, 1.0, 0.0}, setting{9, 4097, 1.0, 0.0, 2.0, 0.0},
                             setting{5, 32000, 0.7, 3.0, 4.0, 0.3}, setting{4, 3000, 1.0, 1e4, 5.0, 0.0},
                             setting{3, 152064, 1.0, 0.0, 3.0, 0.5}}) {
        INFO("rows " << s.rows << " V " << s.vocabulary << " tau " << s.temperature << " offset " << s.offset
                     << " masked " << s.masked);
        const auto values = random_values(s.rows * s.vocabulary, 1 + s.vocabulary, s.offset, s.scale);
        std::vector<float> z(values.begin(), values.end());
        std::mt19937 generator(3);
        std::vector<index_type> tokens(s.rows);
        for (auto& token : tokens)
            token = static_cast<index_type>(generator() % static_cast<std::uint32_t>(s.vocabulary));
        std::uniform_real_distribution<double> uniform(0, 1);
        for (index_type i = 0; i < s.rows; ++i)
            for (index_type v = 0; v < s.vocabulary; ++v)
                if (v != tokens[i] && uniform(generator) < s.masked)
                    z[i * s.vocabulary + v] = -std::numeric_limits<float>::infinity();
        std::vector<float> lse(s.rows), log_p(s.rows), entropy(s.rows), squares(s.rows), g(s.rows), gradient(z.size());
        for (index_type i = 0; i < s.rows; ++i) g[i] = static_cast<float>(i % 3) - 0.5f;
        credit::logits_statistics(view(z.data(), s.rows, s.vocabulary), tokens,
                                  credit::logits_outputs<float>()
                                      .token_log_probability(log_p)
                                      .entropy(entropy)
                                      .sum_probability_squared(squares)
                                      .logsumexp(lse),
                                  logits_with(s.temperature));
        credit::logits_backward(g, view(z.data(), s.rows, s.vocabulary), tokens,
                                view(gradient.data(), s.rows, s.vocabulary), {}, logits_with(s.temperature));

        const auto logits =
            torch::from_blob(z.data(), {s.rows, s.vocabulary}, torch::kFloat32).clone().set_requires_grad(true);
        const auto y = torch::from_blob(tokens.data(), {s.rows, 1}, torch::kInt64);
        const auto scaled = logits / s.temperature;
        const auto lp = torch::log_softmax(scaled, -1);
        const auto token_lp = lp.gather(-1, y).reshape({s.rows});
        // −Σ p·lp with 0·(−inf) taken as 0 (a masked entry contributes nothing).
        const auto p = lp.exp();
        const auto torch_entropy = -torch::where(p > 0, p * lp, torch::zeros_like(p)).sum(-1);
        const auto torch_squares = (p * p).sum(-1);
        const auto torch_lse = torch::logsumexp(scaled, -1);
        const double magnitude = std::max(1.0, (std::abs(s.offset) + 6 * s.scale) / s.temperature);
        const double log_v = std::log(static_cast<double>(s.vocabulary)) + 1;
        CHECK(largest_difference(lse, torch_lse, magnitude + log_v) < 3e-6);
        CHECK(largest_difference(log_p, token_lp, magnitude + log_v) < 3e-6);
        CHECK(largest_difference(entropy, torch_entropy, log_v) < 2e-5);
        const double largest_square = torch_squares.max().item<float>();
        CHECK(largest_difference(squares, torch_squares, largest_square) < 1e-5);
        (token_lp * torch::from_blob(g.data(), {s.rows}, torch::kFloat32)).sum().backward();
        CHECK(largest_difference(gradient, logits.grad().reshape({-1}), 1.0 / s.temperature) < 2e-6);
    }
}

TEST_CASE("logits_statistics on bf16 logits agrees with libtorch on the same bf16 values", "[peers][torch][credit]") {
    const index_type rows = 6, vocabulary = 5000;
    const auto values = random_values(rows * vocabulary, 9, 0.0, 3.0);
    std::vector<Eigen::bfloat16> z = to_storage<Eigen::bfloat16>(values);
    std::vector<index_type> tokens = {0, 1, 4999, 17, 2500, 3};
    std::vector<float> log_p(rows), entropy(rows);
    credit::logits_statistics(view(z.data(), rows, vocabulary), tokens,
                              credit::logits_outputs<float>().token_log_probability(log_p).entropy(entropy));
    const auto logits = torch::from_blob(z.data(), {rows, vocabulary}, torch::kBFloat16).to(torch::kFloat32);
    const auto lp = torch::log_softmax(logits, -1);
    const auto y = torch::from_blob(tokens.data(), {rows, 1}, torch::kInt64);
    CHECK(largest_difference(log_p, lp.gather(-1, y).reshape({rows}), 20.0) < 3e-6);
    CHECK(largest_difference(entropy, -(lp.exp() * lp).sum(-1), 10.0) < 3e-6);
}
