// DyT, Derf, SeeDNorm and logit normalization against libtorch compositions
// with autograd: the modeling code's ops (tanh(αx)·γ + β, erf(αx + s)·γ + β,
// the multi-head SeeDNorm gain, LogitNorm's F.cross_entropy(f / (τ(‖f‖ + 1e-7)))
// and the centred p-norm score), differentiated by autograd, on the same
// inputs. Double precision, so agreement is to rounding; one float case each
// for DyT and Derf.
// libtorch first: it brings glog, whose CHECK macro would otherwise replace
// Catch's (glog's aborts on failure and counts nothing), so it is undefined
// before Catch defines its own.
#include <torch/torch.h>
#undef CHECK

#include "support.hpp"

#include <normkit/norm/derf.hpp>
#include <normkit/norm/dyt.hpp>
#include <normkit/norm/logit_norm.hpp>
#include <normkit/norm/seed_norm.hpp>

using namespace normkit;
using namespace normkit::testing;

namespace {

template <class T>
torch::Tensor wrap(std::vector<T>& values, std::vector<int64_t> shape) {
    return torch::from_blob(values.data(), shape, std::is_same_v<T, double> ? torch::kFloat64 : torch::kFloat32);
}

template <class T>
double largest_difference(const std::vector<T>& ours, const torch::Tensor& theirs) {
    const auto contiguous = theirs.to(torch::kFloat64).contiguous();
    const double* data = contiguous.data_ptr<double>();
    double worst = 0, scale = 1e-30;
    for (std::size_t i = 0; i < ours.size(); ++i) {
        worst = std::max(worst, std::abs(static_cast<double>(ours[i]) - data[i]));
        scale = std::max(scale, std::abs(data[i]));
    }
    return worst / scale;
}

template <class T>
std::vector<T> values_of(const std::vector<double>& values) {
    return {values.begin(), values.end()};
}

template <class T>
void check_dyt_derf(bool derf, index_type rows, index_type n, double tolerance_value) {
    INFO((derf ? "derf" : "dyt") << " n " << n << " " << type_name<T>());
    auto x = values_of<T>(random_values(rows * n, 1, 0.0, 2.0)), dy = values_of<T>(random_values(rows * n, 2));
    auto weight = values_of<T>(random_values(n, 3, 1.0, 0.5)), bias = values_of<T>(random_values(n, 4));
    std::vector<T> y(rows * n), dx(rows * n);
    std::vector<T> dweight(n), dbias(n);
    const double alpha = 0.7, shift = -0.2;
    double dalpha = 0, dshift = 0;
    if (derf) {
        norm::derf_forward(view(x.data(), rows, n), alpha, shift, weight, bias, view(y.data(), rows, n));
        const auto scalars = norm::derf_backward(view(dy.data(), rows, n), view(x.data(), rows, n), alpha, shift,
                                                 weight, view(dx.data(), rows, n), dweight, dbias);
        dalpha = scalars.alpha;
        dshift = scalars.shift;
    } else {
        norm::dyt_forward(view(x.data(), rows, n), alpha, weight, bias, view(y.data(), rows, n));
        dalpha = norm::dyt_backward(view(dy.data(), rows, n), view(x.data(), rows, n), alpha, weight,
                                    view(dx.data(), rows, n), dweight, dbias);
    }
    const auto options = torch::TensorOptions().dtype(std::is_same_v<T, double> ? torch::kFloat64 : torch::kFloat32);
    auto tx = wrap(x, {rows, n}).clone().requires_grad_(true);
    auto ta = torch::full({1}, alpha, options).requires_grad_(true),
         ts = torch::full({1}, shift, options).requires_grad_(true);
    auto tw = wrap(weight, {n}).clone().requires_grad_(true), tb = wrap(bias, {n}).clone().requires_grad_(true);
    const auto ty = derf ? torch::erf(tx * ta + ts) * tw + tb : torch::tanh(tx * ta) * tw + tb;
    ty.backward(wrap(dy, {rows, n}));
    CHECK(largest_difference(y, ty.detach()) < tolerance_value);
    CHECK(largest_difference(dx, tx.grad()) < tolerance_value);
    CHECK(largest_difference(dweight, tw.grad()) < tolerance_value);
    CHECK(largest_difference(dbias, tb.grad()) < tolerance_value);
    // dα and ds are sums over every element: compare against their own size.
    CHECK(largest_difference(std::vector<double>{dalpha}, ta.grad()) < tolerance_value * 10);
    if (derf) CHECK(largest_difference(std::vector<double>{dshift}, ts.grad()) < tolerance_value * 10);
}

}  // namespace

TEST_CASE("dyt and derf agree with libtorch compositions and autograd", "[peers][torch][dyt][derf]") {
    for (bool derf : {false, true}) {
        for (index_type n : {index_type(1), index_type(17), index_type(128), index_type(1000)}) {
            check_dyt_derf<double>(derf, 7, n, 1e-12);
            check_dyt_derf<float>(derf, 7, n, 2e-5);
        }
    }
}

TEST_CASE("seed_norm agrees with a libtorch composition and autograd", "[peers][torch][seed_norm]") {
    for (auto [n, heads] : {std::pair<index_type, index_type>{16, 1}, {96, 4}, {1000, 8}, {51, 17}}) {
        INFO("n " << n << " heads " << heads);
        const index_type rows = 6, d = n / heads;
        const double eps = 1e-5;
        auto x = random_values(rows * n, 11), dy = random_values(rows * n, 12);
        auto alpha = random_values(n, 13, 1.0, 0.5), beta = random_values(n, 14, 0.0, 1.0 / std::sqrt(double(d))),
             gamma = random_values(n, 15, 1.0, 0.3);
        std::vector<double> y(rows * n), rstd(rows), dx(rows * n), dalpha(n), dbeta(n), dgamma(n);
        norm::seed_norm_options options;
        options.heads = heads;
        options.eps = eps;
        norm::seed_norm_forward(view(x.data(), rows, n), alpha, beta, gamma, view(y.data(), rows, n), rstd, options);
        norm::seed_norm_backward(view(dy.data(), rows, n), view(x.data(), rows, n), alpha, beta, gamma,
                                 view(dx.data(), rows, n), dalpha, dbeta, dgamma, rstd, options);
        auto tx = wrap(x, {rows, n}).clone().requires_grad_(true);
        auto ta = wrap(alpha, {n}).clone().requires_grad_(true), tb = wrap(beta, {n}).clone().requires_grad_(true),
             tg = wrap(gamma, {n}).clone().requires_grad_(true);
        // [tanh(x_h·β_hᵀ)·α_h + γ] ⊙ x / RMS(x), the heads as a reshape.
        const auto seeds = torch::tanh((tx.view({rows, heads, d}) * tb.view({heads, d})).sum(-1, true));
        const auto gain = (seeds * ta.view({heads, d})).view({rows, n}) + tg;
        const auto ty = gain * tx * torch::rsqrt(tx.pow(2).mean(-1, true) + eps);
        ty.backward(wrap(dy, {rows, n}));
        CHECK(largest_difference(y, ty.detach()) < 1e-12);
        CHECK(largest_difference(dx, tx.grad()) < 1e-12);
        CHECK(largest_difference(dalpha, ta.grad()) < 1e-12);
        CHECK(largest_difference(dbeta, tb.grad()) < 1e-12);
        CHECK(largest_difference(dgamma, tg.grad()) < 1e-12);
    }
}

TEST_CASE("logit normalization agrees with libtorch", "[peers][torch][logit_norm]") {
    for (index_type classes : {index_type(2), index_type(10), index_type(100), index_type(1000)}) {
        INFO("classes " << classes);
        const index_type rows = 16;
        auto logits = random_values(rows * classes, 21, 0.5, 3.0);
        std::vector<long> labels(rows);
        for (index_type i = 0; i < rows; ++i) labels[i] = (i * 7) % classes;
        for (double temperature : {1.0, 0.04}) {
            std::vector<double> gradient(rows * classes);
            norm::logit_norm_options options;
            options.temperature = temperature;
            const double loss = norm::logit_norm_loss_gradient(view(logits.data(), rows, classes), labels,
                                                               view(gradient.data(), rows, classes), {}, options);
            // hongxin001/logitnorm_ood: norms = torch.norm(x, p=2, dim=-1, keepdim=True) + 1e-7; F.cross_entropy(x / norms / t, target)
            auto tf = wrap(logits, {rows, classes}).clone().requires_grad_(true);
            const auto target = torch::from_blob(labels.data(), {rows}, torch::kInt64);
            const auto norms = torch::norm(tf, 2, -1, true) + 1e-7;
            const auto tloss = torch::nn::functional::cross_entropy(tf / norms / temperature, target);
            tloss.backward();
            CHECK(loss == Approx(tloss.item<double>()).epsilon(1e-12));
            CHECK(largest_difference(gradient, tf.grad()) < 1e-12);
        }
        // lfpc/FixSelectiveClassification MaxLogit_p: centralise, F.normalize(p), max.
        for (double p : {1.0, 2.0, 5.0, 10.0}) {
            std::vector<double> scores(rows);
            norm::selective_score_options order;
            order.p = p;
            norm::selective_classification_score(view(logits.data(), rows, classes), scores, order);
            const auto z = wrap(logits, {rows, classes});
            const auto centered = z - z.mean(-1, true);
            const auto expected = std::get<0>(
                torch::nn::functional::normalize(centered, torch::nn::functional::NormalizeFuncOptions().p(p).dim(-1))
                    .max(-1));
            CHECK(largest_difference(scores, expected) < 1e-12);
        }
    }
}
