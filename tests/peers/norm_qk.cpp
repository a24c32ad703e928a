// QK-norm (three forms), L2 normalization / ScaleNorm and fused add + RMSNorm
// against libtorch compositions with autograd: the modeling code's ops
// (F.normalize, x·rsqrt(mean(x²) + ε)·w, the residual add), differentiated by
// autograd, on the same inputs. Double precision unless stated, so agreement
// is to rounding; one bf16 case follows HF's Qwen3 casting.
#include <torch/torch.h>
// glog (through torch) defines CHECK as an aborting assertion; Catch's is wanted.
#undef CHECK

#include "reference/norm_qk.hpp"
#include "support.hpp"

#include <normkit/norm/fused_add_rms_norm.hpp>
#include <normkit/norm/l2_norm.hpp>
#include <normkit/norm/qk_norm.hpp>

using namespace normkit;
using namespace normkit::testing;

namespace {

torch::Tensor wrap(std::vector<double>& values, std::vector<int64_t> shape) {
    return torch::from_blob(values.data(), shape, torch::kFloat64);
}

torch::Tensor leaf(const std::vector<double>& values, std::vector<int64_t> shape) {
    return torch::tensor(values, torch::kFloat64).reshape(shape).requires_grad_(true);
}

std::vector<double> values_of(const torch::Tensor& tensor) {
    const auto contiguous = tensor.detach().to(torch::kFloat64).contiguous();
    return {contiguous.data_ptr<double>(), contiguous.data_ptr<double>() + contiguous.numel()};
}

double smallest_norm(const std::vector<double>& x, index_type n) {
    double smallest = INFINITY;
    for (std::size_t row = 0; row * n < x.size(); ++row) {
        double sum = 0;
        for (index_type j = 0; j < n; ++j) sum += x[row * n + j] * x[row * n + j];
        smallest = std::min(smallest, std::sqrt(sum));
    }
    return smallest;
}

torch::Tensor rms(const torch::Tensor& x, const torch::Tensor& w_eff, double eps, std::vector<int64_t> axes) {
    return x * torch::rsqrt(x.pow(2).mean(axes, true) + eps) * w_eff;
}

}  // namespace

TEST_CASE("qk_l2_norm (Henry et al.) agrees with F.normalize, a learnable g and autograd through the scores",
          "[peers][torch][qk_norm]") {
    const index_type tokens = 6, heads = 3;
    for (index_type d : {index_type(1), index_type(17), index_type(64), index_type(128)}) {
        INFO("d " << d);
        auto q = random_values(tokens * heads * d, 1), k = random_values(tokens * heads * d, 2, 0.4),
             weights = random_values(heads * tokens * tokens, 3);
        const double gain = norm::qk_norm_initial_gain(tokens);
        // libtorch: scores_h = g·normalize(q_h)·normalize(k_h)ᵀ, loss = Σ W⊙scores.
        auto tq = leaf(q, {tokens, heads, d}), tk = leaf(k, {tokens, heads, d}),
             tg = torch::tensor(gain, torch::kFloat64).requires_grad_(true);
        const auto options = torch::nn::functional::NormalizeFuncOptions().p(2).dim(-1);
        const auto scores = tg * torch::einsum("thd,shd->hts", {torch::nn::functional::normalize(tq, options),
                                                                torch::nn::functional::normalize(tk, options)});
        (scores * wrap(weights, {heads, tokens, tokens})).sum().backward();

        std::vector<double> q_out(q.size()), k_out(k.size()), dq_out(q.size()), dk_out(k.size()), dq(q.size()),
            dk(k.size()), all_scores;
        const auto rows = tokens * heads;
        norm::qk_l2_norm_forward(view(q.data(), rows, d), view(k.data(), rows, d), gain, view(q_out.data(), rows, d),
                                 view(k_out.data(), rows, d));
        for (index_type h = 0; h < heads; ++h) {
            const auto head = [&](std::vector<double>& x) { return view(x.data() + h * d, tokens, d, heads * d); };
            std::vector<double> s(tokens * tokens);
            reference::qk_norm_scores(head(q_out), head(k_out), view(s.data(), tokens, tokens));
            all_scores.insert(all_scores.end(), s.begin(), s.end());
            reference::qk_norm_scores_backward(view(weights.data() + h * tokens * tokens, tokens, tokens), head(q_out),
                                               head(k_out), head(dq_out), head(dk_out));
        }
        const double dg = norm::qk_l2_norm_backward(view(dq_out.data(), rows, d), view(dk_out.data(), rows, d),
                                                    view(q.data(), rows, d), view(k.data(), rows, d), gain,
                                                    view(dq.data(), rows, d), view(dk.data(), rows, d));
        CHECK(relative_error(all_scores, values_of(scores)) < 1e-13);
        // dq cancels (exactly, for d = 1): measured against its terms g·|dq′|/‖q‖.
        CHECK(relative_error(dq, values_of(tq.grad()), gain * max_abs(dq_out) / smallest_norm(q, d)) < 1e-12);
        CHECK(relative_error(dk, values_of(tk.grad()), max_abs(dk_out) / smallest_norm(k, d)) < 1e-12);
        CHECK(dg == Approx(tg.grad().item<double>()).epsilon(1e-12));
    }
}

TEST_CASE("qk_rms_norm (Qwen3, Gemma3) and full-width (OLMo2) agree with the RMSNorm composition and autograd",
          "[peers][torch][qk_norm]") {
    const index_type tokens = 7, heads = 4, key_heads = 2;
    for (index_type d : {index_type(3), index_type(64), index_type(128)}) {
        for (int form = 0; form < 3; ++form) {
            INFO("d " << d << " form " << form);
            const bool full_width = form == 2;
            const auto options =
                form == 0 ? norm::presets::qwen3() : (form == 1 ? norm::presets::gemma3() : norm::presets::olmo2());
            auto q = random_values(tokens * heads * d, 10 + form, 0.3, 2.0),
                 k = random_values(tokens * key_heads * d, 20 + form);
            auto dq_out = random_values(q.size(), 30 + form), dk_out = random_values(k.size(), 40 + form);
            const index_type q_width = full_width ? heads * d : d, k_width = full_width ? key_heads * d : d;
            auto qw = random_values(q_width, 50 + form, options.offset ? 0.0 : 1.0, 0.3),
                 kw = random_values(k_width, 60 + form, options.offset ? 0.0 : 1.0, 0.3);

            auto tq = leaf(q, {tokens, heads, d}), tk = leaf(k, {tokens, key_heads, d});
            auto tqw = leaf(qw, full_width ? std::vector<int64_t>{heads, d} : std::vector<int64_t>{d});
            auto tkw = leaf(kw, full_width ? std::vector<int64_t>{key_heads, d} : std::vector<int64_t>{d});
            const std::vector<int64_t> axes = full_width ? std::vector<int64_t>{-2, -1} : std::vector<int64_t>{-1};
            const auto yq = rms(tq, options.offset ? 1 + tqw : tqw, options.eps, axes),
                       yk = rms(tk, options.offset ? 1 + tkw : tkw, options.eps, axes);
            ((yq * wrap(dq_out, {tokens, heads, d})).sum() + (yk * wrap(dk_out, {tokens, key_heads, d})).sum())
                .backward();

            Eigen::Tensor<double, 3, Eigen::RowMajor> q_t(tokens, heads, d), k_t(tokens, key_heads, d),
                q_out(tokens, heads, d), k_out(tokens, key_heads, d), dq(tokens, heads, d), dk(tokens, key_heads, d);
            std::copy(q.begin(), q.end(), q_t.data());
            std::copy(k.begin(), k.end(), k_t.data());
            const auto dq_view = view(dq_out.data(), tokens * heads, d),
                       dk_view = view(dk_out.data(), tokens * key_heads, d);
            std::vector<double> q_rstd(full_width ? tokens : tokens * heads),
                k_rstd(full_width ? tokens : tokens * key_heads), dqw(q_width), dkw(k_width);
            if (full_width) {
                norm::qk_rms_norm_forward(q_t, k_t, qw, kw, q_out, k_out, q_rstd, k_rstd, options);
                norm::qk_rms_norm_backward(dq_view, dk_view, q_t, k_t, qw, kw, dq, dk, dqw, dkw, q_rstd, k_rstd,
                                           options);
            } else {
                norm::qk_rms_norm_forward(q_t, k_t, qw, kw, q_out, k_out, q_rstd, k_rstd, options);
                norm::qk_rms_norm_backward(dq_view, dk_view, q_t, k_t, qw, kw, dq, dk, dqw, dkw, q_rstd, k_rstd,
                                           options);
            }
            CHECK(relative_error(std::vector<double>(q_out.data(), q_out.data() + q_out.size()), values_of(yq)) <
                  1e-13);
            CHECK(relative_error(std::vector<double>(k_out.data(), k_out.data() + k_out.size()), values_of(yk)) <
                  1e-13);
            CHECK(relative_error(std::vector<double>(dq.data(), dq.data() + dq.size()), values_of(tq.grad())) < 1e-12);
            CHECK(relative_error(std::vector<double>(dk.data(), dk.data() + dk.size()), values_of(tk.grad())) < 1e-12);
            CHECK(relative_error(dqw, values_of(tqw.grad())) < 1e-12);
            CHECK(relative_error(dkw, values_of(tkw.grad())) < 1e-12);
        }
    }
}

TEST_CASE("qk_rms_norm in bf16 agrees with HF Qwen3's bf16 composition", "[peers][torch][qk_norm]") {
    // HF: w * (x.float() * rsqrt(mean(x²) + eps)).to(bf16), in bf16 storage.
    const index_type rows = 64, d = 128;
    const auto x = to_storage<Eigen::bfloat16>(random_values(rows * d, 71, 0.0, 2.0)),
               w = to_storage<Eigen::bfloat16>(random_values(d, 72, 1.0, 0.3));
    std::vector<Eigen::bfloat16> y(rows * d), y_k(rows * d);
    norm::qk_rms_norm_forward(view(x.data(), rows, d), view(x.data(), rows, d), w, w, view(y.data(), rows, d),
                              view(y_k.data(), rows, d), {}, {}, norm::presets::qwen3());
    const auto tx = torch::from_blob(const_cast<Eigen::bfloat16*>(x.data()), {rows, d}, torch::kBFloat16);
    const auto tw = torch::from_blob(const_cast<Eigen::bfloat16*>(w.data()), {d}, torch::kBFloat16);
    const auto xf = tx.to(torch::kFloat32);
    const auto expected =
        (tw * (xf * torch::rsqrt(xf.pow(2).mean(-1, true) + 1e-6)).to(torch::kBFloat16)).to(torch::kFloat64);
    const auto ours = to_double(y);
    // The statistic's summation order may move an element by one bf16 rounding.
    CHECK(relative_error(ours, values_of(expected)) < 2 * tolerance<Eigen::bfloat16>());
    long identical = 0;
    const auto theirs = values_of(expected);
    for (std::size_t i = 0; i < ours.size(); ++i) identical += ours[i] == theirs[i];
    CHECK(identical > static_cast<long>(ours.size() * 9 / 10));
}

TEST_CASE("l2_norm (ScaleNorm) agrees with g * F.normalize and autograd, dg included", "[peers][torch][l2_norm]") {
    for (index_type n : {index_type(1), index_type(31), index_type(512)}) {
        INFO("n " << n);
        const index_type rows = 11;
        auto x = random_values(rows * n, 80, 0.1, 1.0), dy = random_values(rows * n, 81);
        const double gain = norm::scale_norm_initial_gain(n);
        auto tx = leaf(x, {rows, n});
        auto tg = torch::tensor(gain, torch::kFloat64).requires_grad_(true);
        const auto ty =
            tg * torch::nn::functional::normalize(tx, torch::nn::functional::NormalizeFuncOptions().p(2).dim(-1));
        (ty * wrap(dy, {rows, n})).sum().backward();
        std::vector<double> y(x.size()), dx(x.size());
        norm::l2_norm_forward(view(x.data(), rows, n), gain, view(y.data(), rows, n));
        const double dg =
            norm::l2_norm_backward(view(dy.data(), rows, n), view(x.data(), rows, n), gain, view(dx.data(), rows, n));
        CHECK(relative_error(y, values_of(ty)) < 1e-13);
        CHECK(relative_error(dx, values_of(tx.grad()), gain * max_abs(dy) / smallest_norm(x, n)) < 1e-12);
        CHECK(dg == Approx(tg.grad().item<double>()).epsilon(1e-12));
    }
}

TEST_CASE("fused_add_rms_norm agrees with add, RMSNorm and autograd, the residual-stream gradient included",
          "[peers][torch][fused_add_rms_norm]") {
    for (index_type n : {index_type(5), index_type(256), index_type(1000)}) {
        INFO("n " << n);
        const index_type rows = 9;
        auto x = random_values(rows * n, 90), s = random_values(rows * n, 91, 0.5, 2.0),
             dy = random_values(rows * n, 92), d = random_values(rows * n, 93);
        auto w = random_values(n, 94, 1.0, 0.3);
        auto tx = leaf(x, {rows, n}), ts = leaf(s, {rows, n}), tw = leaf(w, {n});
        const auto th = tx + ts;
        const auto ty = rms(th, tw, 1e-6, {-1});
        ((ty * wrap(dy, {rows, n})).sum() + (th * wrap(d, {rows, n})).sum()).backward();
        std::vector<double> stream = s, y(x.size()), rstd(rows), dh = d, dw(n);
        norm::fused_add_rms_norm_forward(view(x.data(), rows, n), w, view(stream.data(), rows, n),
                                         view(y.data(), rows, n), rstd);
        norm::fused_add_rms_norm_backward(view(dy.data(), rows, n), view(stream.data(), rows, n), w,
                                          view(dh.data(), rows, n), dw, rstd);
        CHECK(relative_error(stream, values_of(th)) < 1e-15);
        CHECK(relative_error(y, values_of(ty)) < 1e-13);
        CHECK(relative_error(dh, values_of(tx.grad())) < 1e-12);
        CHECK(relative_error(dh, values_of(ts.grad())) < 1e-12);
        CHECK(relative_error(dw, values_of(tw.grad())) < 1e-12);
    }
}
