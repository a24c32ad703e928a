// Accuracy against libtorch's own, both measured against float64 on the same
// inputs: normkit is to be no less accurate than torch fp32 where torch is the
// yardstick users know.
//   - dγ, dβ (LayerNorm) and dw (RMSNorm) over 65 536 short rows;
//   - the logits statistics (lse, log π, H) of rows N(0, 3), peaked, offset 10⁴
//     and 30 % −inf, at τ = 1 and 0.7, for fp32 and bf16 logits.
// libtorch first: it brings glog, whose CHECK would otherwise replace Catch's.
#include <torch/torch.h>
#undef CHECK
#define CHECK(...) INTERNAL_CATCH_TEST("CHECK", Catch::ResultDisposition::ContinueOnFailure, __VA_ARGS__)

#include "reference/credit.hpp"
#include "reference/norm.hpp"
#include "support.hpp"

#include <normkit/credit/logits_statistics.hpp>
#include <normkit/norm/layer_norm.hpp>
#include <normkit/norm/rms_norm.hpp>

#include <limits>

using namespace normkit;
using namespace normkit::testing;

namespace {

torch::Tensor doubles(const std::vector<double>& values, std::vector<int64_t> shape) {
    return torch::tensor(values, torch::kFloat64).reshape(shape);
}

std::vector<double> values_of(const torch::Tensor& t) {
    const auto c = t.to(torch::kFloat64).contiguous();
    return {c.data_ptr<double>(), c.data_ptr<double>() + c.numel()};
}

// One fp32 ulp (relative): where torch's error is below it, both are at the rounding of their
// fp32 inputs and results (1/τ, too, is an fp32 reciprocal in both), and normkit's is to be
// within it.
constexpr double one_rounding = 0x1p-23;

// max |a − b| over max |b|, skipping entries where the reference is not finite.
double error_against(const std::vector<double>& actual, const std::vector<double>& expected) {
    double worst = 0, scale = 1e-30;
    for (std::size_t i = 0; i < actual.size(); ++i) {
        if (!std::isfinite(expected[i])) continue;
        scale = std::max(scale, std::abs(expected[i]));
        worst = std::max(worst, std::abs(actual[i] - expected[i]));
    }
    return worst / scale;
}

}  // namespace

TEST_CASE("parameter gradients over 65536 rows are as accurate as torch fp32's", "[peers][torch][accuracy]") {
    const index_type rows = 65536;
    for (index_type n : {index_type(16), index_type(64)}) {
        INFO("n " << n);
        const auto xs = stored<float>(random_values(rows * n, 5, 1.0, 1.0)),
                   dys = stored<float>(random_values(rows * n, 6, 0.5, 1.0));
        const auto ws = stored<float>(random_values(n, 7, 1.0, 0.5));
        const auto x = to_storage<float>(xs), dy = to_storage<float>(dys), weight = to_storage<float>(ws);
        const auto tx = doubles(xs, {rows, n}).to(torch::kFloat32), tdy = doubles(dys, {rows, n}).to(torch::kFloat32),
                   tw = doubles(ws, {n}).to(torch::kFloat32);
        std::vector<float> y(x.size()), dx(x.size()), mean(rows), rstd(rows), dweight(n), dbias(n);

        // LayerNorm: torch's native backward from its own saved statistics.
        norm::layer_norm_forward(view(x.data(), rows, n), weight, {}, view(y.data(), rows, n), mean, rstd);
        norm::layer_norm_backward(view(dy.data(), rows, n), view(x.data(), rows, n), weight, view(dx.data(), rows, n),
                                  dweight, dbias, mean, rstd);
        const auto tb = torch::zeros({n}, torch::kFloat32);
        const auto [ty, tmean, trstd] = at::native_layer_norm(tx, {n}, tw, tb, 1e-5);
        const auto [tdx, tdw, tdb] =
            at::native_layer_norm_backward(tdy, tx, {n}, tmean, trstd, tw, tb, {true, true, true});
        std::vector<double> dx_ref, dw_ref, db_ref;
        reference::layer_norm_backward(dys, xs, {rows, n}, ws, 1e-5, dx_ref, dw_ref, db_ref);
        CHECK(error_against(to_double(dweight), dw_ref) <=
              std::max(one_rounding, error_against(values_of(tdw), dw_ref)));
        CHECK(error_against(to_double(dbias), db_ref) <= std::max(one_rounding, error_against(values_of(tdb), db_ref)));

        // RMSNorm: autograd through the modeling code's composition.
        std::vector<float> rms_rstd(rows), rms_dweight(n);
        norm::rms_norm_forward(view(x.data(), rows, n), weight, view(y.data(), rows, n), rms_rstd);
        norm::rms_norm_backward(view(dy.data(), rows, n), view(x.data(), rows, n), weight, view(dx.data(), rows, n),
                                rms_dweight, rms_rstd);
        auto tw_leaf = tw.clone().requires_grad_(true);
        const auto normalized = tx * torch::rsqrt(tx.pow(2).mean(-1, true) + 1e-6);
        (tw_leaf * normalized * tdy).sum().backward();
        std::vector<double> rms_dx_ref, rms_dw_ref;
        reference::rms_norm_backward(dys, xs, {rows, n}, ws, false, 1e-6, rms_dx_ref, rms_dw_ref);
        CHECK(error_against(to_double(rms_dweight), rms_dw_ref) <=
              std::max(one_rounding, error_against(values_of(tw_leaf.grad()), rms_dw_ref)));
    }
}

TEMPLATE_TEST_CASE("logits statistics are as accurate as torch fp32's log_softmax on the same rows",
                   "[peers][torch][accuracy][credit]", float, Eigen::bfloat16) {
    using T = TestType;
    struct rows_kind {
        const char* name;
        double offset, scale, masked, peak;
    };
    const index_type rows = 6, vocabulary = 32768;
    for (const rows_kind& kind : {rows_kind{"N(0, 3)", 0, 3, 0, 0}, rows_kind{"peaked", 0, 1, 0, 30},
                                  rows_kind{"offset 1e4", 1e4, 3, 0, 0}, rows_kind{"30 % -inf", 0, 3, 0.3, 0}}) {
        for (double temperature : {1.0, 0.7}) {
            INFO(kind.name << " tau " << temperature);
            auto values = random_values(rows * vocabulary, 31, kind.offset, kind.scale);
            std::mt19937 generator(32);
            std::vector<index_type> tokens(rows);
            for (index_type r = 0; r < rows; ++r) {
                tokens[r] = static_cast<index_type>(generator() % vocabulary);
                if (kind.peak != 0) values[r * vocabulary + (tokens[r] + 1) % vocabulary] += kind.peak;
                for (index_type v = 0; v < vocabulary; ++v)
                    if (v != tokens[r] && std::uniform_real_distribution<double>(0, 1)(generator) < kind.masked)
                        values[r * vocabulary + v] = -std::numeric_limits<double>::infinity();
            }
            const auto logits = to_storage<T>(values);
            const auto exact = stored<T>(values);  // the logits as stored, in double

            credit::logits_options options;
            options.temperature = temperature;
            std::vector<float> log_probability(rows), entropy(rows), lse(rows);
            credit::logits_statistics(
                view(logits.data(), rows, vocabulary), tokens,
                credit::logits_outputs<float>().token_log_probability(log_probability).entropy(entropy).logsumexp(lse),
                options);

            // float64 and torch fp32 (the logits as stored, upcast as training code does).
            const auto reference = [&](torch::ScalarType type) {
                const auto z = doubles(exact, {rows, vocabulary}).to(type) / temperature;
                const auto lp = torch::log_softmax(z, -1);
                const auto token_index = torch::tensor(std::vector<int64_t>(tokens.begin(), tokens.end()));
                const auto p = lp.exp();
                const auto h = -(p * lp.masked_fill(p == 0, 0)).sum(-1);
                return std::array<std::vector<double>, 3>{values_of(lp.gather(1, token_index.unsqueeze(1)).squeeze(1)),
                                                          values_of(h), values_of(torch::logsumexp(z, -1))};
            };
            const auto exact_stats = reference(torch::kFloat64), torch_stats = reference(torch::kFloat32);
            const std::array<std::vector<double>, 3> ours = {to_double(log_probability), to_double(entropy),
                                                             to_double(lse)};
            for (int k = 0; k < 3; ++k) {
                INFO((k == 0 ? "log pi" : k == 1 ? "entropy" : "lse"));
                CHECK(error_against(ours[k], exact_stats[k]) <=
                      std::max(one_rounding, error_against(torch_stats[k], exact_stats[k])));
            }
        }
    }
}
