// The fused policy loss (PPO clip with dual clip + k3 KL + token-mean
// aggregation, value and d loss / d logπ), B = 64, T = 16384 (one million
// tokens), fp32, 1 and 2 threads, against memcpy of the same bytes and the
// same math composed from libtorch ops with autograd.
//
// Bytes are the minimum traffic: read logπ, logπ_old, logπ_ref and the mask
// (4 bytes each a token), the per-sample advantages (B floats), write the
// gradient (4 bytes a token).
//   policy_loss               verl's default actor with use_kl_loss, the global token count given
//                             (verl-new passes it), so the pass reads each input once;
//   policy_loss_local_count   the same without the global count: one extra read of the mask first.
#include "harness.hpp"
#include "yardstick.hpp"

#include <normkit/loss/policy_loss.hpp>
#include <normkit/loss/presets.hpp>

#ifdef NORMKIT_HAVE_TORCH
#include <torch/torch.h>
#endif

#include <cmath>
#include <memory>
#include <string>

namespace {

using namespace normkit;
using bench::register_case;

struct policy_tensors {
    index_type rows, cols;
    // 64-byte aligned, as torch's CPU allocator aligns tensors.
    using buffer = std::vector<float, Eigen::aligned_allocator<float>>;
    buffer x, old, ref, mask, advantages, gradient, selection;
    double tokens = 0, sequences = 0;  // masked tokens, rows with a token
};

std::shared_ptr<policy_tensors> make_tensors(index_type rows, index_type cols) {
    auto t = std::make_shared<policy_tensors>();
    t->rows = rows;
    t->cols = cols;
    const auto count = static_cast<std::size_t>(rows * cols);
    t->x.resize(count);
    t->old.resize(count);
    t->ref.resize(count);
    t->mask.resize(count);
    t->gradient.resize(count);
    t->advantages.resize(static_cast<std::size_t>(rows));
    std::uint32_t state = 12345u;
    const auto uniform = [&](float low, float high) {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        return low + (high - low) * static_cast<float>(state >> 8) * (1.0f / 16777216.0f);
    };
    for (index_type i = 0; i < rows; ++i) {
        t->advantages[static_cast<std::size_t>(i)] = uniform(-2.0f, 2.0f);
        const index_type length = static_cast<index_type>(uniform(0.25f, 1.0f) * static_cast<float>(cols));
        for (index_type j = 0; j < cols; ++j) {
            const auto k = static_cast<std::size_t>(i * cols + j);
            t->x[k] = uniform(-4.0f, -0.01f);
            t->old[k] = t->x[k] + uniform(-0.3f, 0.3f);
            t->ref[k] = t->x[k] + uniform(-0.3f, 0.3f);
            t->mask[k] = j < length ? 1.0f : 0.0f;
            t->tokens += t->mask[k];
        }
        t->sequences += length > 0 ? 1 : 0;
    }
    return t;
}

// Log-probs, old log-probs, per-sample advantages and the mask as policy_inputs.
// Keeps every value a loss yardstick returns (it is inline), so that no metric's sum is optimized away.
void keep(const bench::yardstick::policy_loss_values& values) {
    benchmark::DoNotOptimize(values.loss);
    benchmark::DoNotOptimize(values.clipfrac);
    benchmark::DoNotOptimize(values.clipfrac_lower);
    benchmark::DoNotOptimize(values.ppo_kl);
}

loss::policy_inputs<float> inputs_of(policy_tensors& t) {
    loss::policy_inputs<float> inputs;
    inputs.log_probs = view(t.x.data(), t.rows, t.cols);
    inputs.old_log_probs = view(t.old.data(), t.rows, t.cols);
    inputs.advantages = view(t.advantages.data(), t.rows, 1);
    inputs.mask = view(t.mask.data(), t.rows, t.cols);
    return inputs;
}

void register_policy_loss(index_type rows, index_type cols, int threads) {
    const double count = static_cast<double>(rows * cols);
    const double bytes = count * 4 * 5 + static_cast<double>(rows) * 4;
    const std::string shape =
        std::to_string(rows) + "x" + std::to_string(cols) + (threads > 1 ? ":t" + std::to_string(threads) : "");
    auto holder = std::make_shared<std::shared_ptr<policy_tensors>>();
    const auto get = [holder, rows, cols]() -> policy_tensors& {
        if (!*holder) *holder = make_tensors(rows, cols);
        return **holder;
    };
    for (const bool global_count : {true, false}) {
        const std::string operation = global_count ? "policy_loss" : "policy_loss_local_count";
        bench::register_memcpy(operation, shape, bytes);
        register_case(operation, shape, "normkit", bytes, [=] {
            auto& t = get();
            auto inputs = inputs_of(t);
            inputs.ref_log_probs = view(t.ref.data(), rows, cols);
            auto options = loss::presets::verl_actor(true);
            options.threads = threads;
            if (global_count) options.aggregation.global_token_count = t.tokens;
            const auto result = loss::policy_loss(inputs, view(t.gradient.data(), rows, cols), {}, options);
            benchmark::DoNotOptimize(result.loss);
            benchmark::DoNotOptimize(t.gradient.data());
        });
        if (threads == 1)
            register_case(operation, shape, "yardstick", bytes, [=] {
                auto& t = get();
                const auto values = bench::yardstick::policy_loss(t.x.data(), t.old.data(), t.ref.data(), t.mask.data(),
                                                                  t.advantages.data(), t.gradient.data(), rows, cols,
                                                                  static_cast<float>(t.tokens));
                keep(values);
                benchmark::DoNotOptimize(t.gradient.data());
            });
#ifdef NORMKIT_HAVE_TORCH
        register_case(operation, shape, "torch", bytes, [=] {
            auto& t = get();
            at::set_num_threads(threads);
            const auto x = torch::from_blob(t.x.data(), {rows, cols}).detach().requires_grad_(true);
            const auto old = torch::from_blob(t.old.data(), {rows, cols});
            const auto ref = torch::from_blob(t.ref.data(), {rows, cols});
            const auto mask = torch::from_blob(t.mask.data(), {rows, cols});
            const auto advantages = torch::from_blob(t.advantages.data(), {rows, 1});
            // verl's compute_policy_loss_vanilla + kl_penalty(low_var_kl) + agg_loss(token-mean).
            const auto ratio = torch::exp(torch::clamp(x - old, -20.0, 20.0));
            const auto loss1 = -advantages * ratio;
            const auto loss2 = -advantages * torch::clamp(ratio, 0.8, 1.2);
            const auto clipped = torch::maximum(loss1, loss2);
            const auto dual = torch::minimum(-advantages * 3.0, clipped);
            const auto policy = torch::where(advantages < 0, dual, clipped);
            const auto kl = torch::clamp(ref - x, -20.0, 20.0);
            const auto kld = torch::clamp(torch::exp(kl) - kl - 1, -10.0, 10.0);
            const auto tokens = global_count ? torch::tensor(t.tokens) : mask.sum();
            const auto value = ((policy + 0.001 * kld) * mask).sum() / tokens;
            value.backward();
            benchmark::DoNotOptimize(x.grad().data_ptr());
        });
#endif
    }
}

// The losses issue 18 added, each through the one-pass policy_loss (token-mean unless the framework
// aggregates otherwise; the global token or sequence count given, as verl-new passes them) beside the
// same arithmetic in libtorch ops with autograd. Bytes: logπ, logπ_old
// (or the rollout's), the mask and, for reinforce_is, the IS weights read, the gradient written, 4 bytes a
// token each, and the per-sample advantages; kl_cov and clip_cov read the selection instead of the weights.
struct new_loss {
    const char* operation;
    int arrays;  // B × T arrays moved
    loss::policy_loss_options (*options)();
    bench::yardstick::policy_loss_values (*yardstick)(policy_tensors& t);
#ifdef NORMKIT_HAVE_TORCH
    torch::Tensor (*torch_loss)(const torch::Tensor& x, const torch::Tensor& old, const torch::Tensor& mask,
                                const torch::Tensor& advantages, const torch::Tensor& weights, double tokens);
#endif
};

#ifdef NORMKIT_HAVE_TORCH
// verl compute_policy_loss_dppo_tv, c = 3, ε = 0.2.
torch::Tensor torch_dppo_tv(const torch::Tensor& x, const torch::Tensor& old, const torch::Tensor& mask,
                            const torch::Tensor& a, const torch::Tensor&, double tokens) {
    const auto ratio = torch::exp(torch::clamp(x - old, -20.0, 20.0));
    const auto truncated = torch::clamp(ratio, c10::nullopt, 3.0).detach();
    const auto change = torch::exp(x) - torch::exp(old);
    const auto valid = torch::where(a > 0, change <= 0.2, change >= -0.2).detach().to(torch::kFloat);
    return (-a * truncated * x * valid * mask).sum() / tokens;
}

// TRL sapo at importance_sampling_level="sequence", seq-mean-token-mean over every row.
torch::Tensor torch_sapo_sequence(const torch::Tensor& x, const torch::Tensor& old, const torch::Tensor& mask,
                                  const torch::Tensor& a, const torch::Tensor&, double) {
    const auto lengths = mask.sum(-1).clamp_min(1.0);
    const auto s = torch::exp(((x - old) * mask).sum(-1) / lengths).unsqueeze(-1);
    const auto tau = torch::where(a > 0, torch::full_like(a, 1.0), torch::full_like(a, 1.05));
    const auto ell = -torch::sigmoid(tau * (s - 1)) * 4 / tau * a;
    return ((ell * mask).sum(-1) / lengths).mean();
}

// TRL vespo (get_gamma_weights, no IS ratio), token mean over the batch's tokens.
torch::Tensor torch_vespo(const torch::Tensor& x, const torch::Tensor& old, const torch::Tensor& mask,
                          const torch::Tensor& a, const torch::Tensor&, double tokens) {
    torch::Tensor phi;
    {
        torch::NoGradGuard no_grad;
        const auto log_w =
            torch::clamp((torch::clamp(x - old, -20.0, 20.0) * mask).sum(-1, true), std::log(1e-8), 20.0);
        const auto k = torch::where(a >= 0, torch::full_like(a, 2.0), torch::full_like(a, 3.0));
        const auto lambda = torch::where(a >= 0, torch::full_like(a, 3.0), torch::full_like(a, 2.0));
        phi = torch::nan_to_num(torch::exp(lambda + k * log_w - lambda * torch::exp(log_w)), 0.0, 0.0, 0.0);
    }
    return (-phi * a * x * mask).sum() / tokens;
}

// verl compute_policy_loss_kl_cov and _clip_cov given the selected tokens (s), token-mean, no log-ratio clamp.
torch::Tensor torch_kl_cov(const torch::Tensor& x, const torch::Tensor& old, const torch::Tensor& mask,
                           const torch::Tensor& a, const torch::Tensor& s, double tokens) {
    const auto d = x - old;
    const auto ell = -a * torch::exp(d) + 0.1 * torch::abs(d) * s;
    return (ell * mask).sum() / tokens;
}

torch::Tensor torch_clip_cov(const torch::Tensor& x, const torch::Tensor& old, const torch::Tensor& mask,
                             const torch::Tensor& a, const torch::Tensor& s, double tokens) {
    const auto ratio = torch::exp(x - old);
    const auto clipped = torch::maximum(-a * ratio, -a * torch::clamp(ratio, 0.8, 1.2));
    return (clipped * (1 - s) * mask).sum() / tokens;
}

// verl compute_policy_loss_reinforce with rollout IS weights, seq-mean-token-sum.
torch::Tensor torch_reinforce_is(const torch::Tensor& x, const torch::Tensor&, const torch::Tensor& mask,
                                 const torch::Tensor& a, const torch::Tensor& w, double) {
    const auto sequences = (mask.sum(-1) > 0).to(torch::kFloat).sum();
    return (-a * x * w * mask).sum() / sequences;
}
#endif

loss::policy_loss_options dppo_options() { return loss::presets::verl_dppo(false, 3.0); }
loss::policy_loss_options sapo_sequence_options() {
    auto options = loss::presets::trl(loss::presets::trl_loss_type::sapo);
    options.surrogate.mode = loss::surrogate_mode::sapo_sequence;
    return options;
}
loss::policy_loss_options vespo_options() { return loss::presets::trl(loss::presets::trl_loss_type::vespo); }
loss::policy_loss_options reinforce_options() { return loss::presets::verl_reinforce(); }
loss::policy_loss_options kl_cov_options() { return loss::presets::verl_kl_cov(); }
loss::policy_loss_options clip_cov_options() { return loss::presets::verl_clip_cov(); }

// The yardsticks, over the same tensors (ref holds the IS weights).
namespace yardstick = bench::yardstick;
using yardstick::policy_loss_values;
policy_loss_values dppo_yardstick(policy_tensors& t) {
    return yardstick::dppo_tv(t.x.data(), t.old.data(), t.mask.data(), t.advantages.data(), t.gradient.data(), t.rows,
                              t.cols, static_cast<float>(t.tokens));
}
policy_loss_values sapo_sequence_yardstick(policy_tensors& t) {
    return yardstick::sapo_sequence(t.x.data(), t.old.data(), t.mask.data(), t.advantages.data(), t.gradient.data(),
                                    t.rows, t.cols);
}
policy_loss_values vespo_yardstick(policy_tensors& t) {
    return yardstick::vespo(t.x.data(), t.old.data(), t.mask.data(), t.advantages.data(), t.gradient.data(), t.rows,
                            t.cols, static_cast<float>(t.tokens));
}
policy_loss_values reinforce_yardstick(policy_tensors& t) {
    return yardstick::reinforce_is(t.x.data(), t.old.data(), t.ref.data(), t.mask.data(), t.advantages.data(),
                                   t.gradient.data(), t.rows, t.cols, static_cast<float>(t.tokens),
                                   static_cast<float>(t.sequences));
}
template <bool clip>
policy_loss_values covariance_yardstick(policy_tensors& t) {
    return yardstick::covariance_loss<clip>(t.x.data(), t.old.data(), t.mask.data(), t.selection.data(),
                                            t.advantages.data(), t.gradient.data(), t.rows, t.cols,
                                            static_cast<float>(t.tokens));
}

void register_new_losses(index_type rows, index_type cols) {
    const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
    auto holder = std::make_shared<std::shared_ptr<policy_tensors>>();
    const auto get = [holder, rows, cols]() -> policy_tensors& {
        if (!*holder) {
            *holder = make_tensors(rows, cols);
            auto& t = **holder;
            for (auto& w : t.ref) w = 0.5f + std::abs(w) * 0.25f;  // ref holds the IS weights here
            // one token in 64 selected by the covariance modes (verl's ratio 2e-4 selects fewer)
            t.selection.resize(t.x.size());
            for (std::size_t k = 0; k < t.x.size(); ++k) t.selection[k] = k % 64 == 7 ? 1.0f : 0.0f;
        }
        return **holder;
    };
    static const new_loss losses[] = {
#ifdef NORMKIT_HAVE_TORCH
        {"dppo_tv", 4, dppo_options, dppo_yardstick, torch_dppo_tv},
        {"sapo_sequence", 4, sapo_sequence_options, sapo_sequence_yardstick, torch_sapo_sequence},
        {"vespo", 4, vespo_options, vespo_yardstick, torch_vespo},
        {"reinforce_is", 5, reinforce_options, reinforce_yardstick, torch_reinforce_is},
        {"kl_cov", 5, kl_cov_options, covariance_yardstick<false>, torch_kl_cov},
        {"clip_cov", 5, clip_cov_options, covariance_yardstick<true>, torch_clip_cov},
#else
        {"dppo_tv", 4, dppo_options, dppo_yardstick},
        {"sapo_sequence", 4, sapo_sequence_options, sapo_sequence_yardstick},
        {"vespo", 4, vespo_options, vespo_yardstick},
        {"reinforce_is", 5, reinforce_options, reinforce_yardstick},
        {"kl_cov", 5, kl_cov_options, covariance_yardstick<false>},
        {"clip_cov", 5, clip_cov_options, covariance_yardstick<true>},
#endif
    };
    for (const auto& l : losses) {
        const double bytes = static_cast<double>(rows * cols) * 4 * l.arrays + static_cast<double>(rows) * 4;
        const bool weighted = std::string(l.operation) == "reinforce_is";
        const bool covariance = std::string(l.operation).find("_cov") != std::string::npos;
        bench::register_memcpy(l.operation, shape, bytes);
        register_case(l.operation, shape, "normkit", bytes, [=] {
            auto& t = get();
            auto inputs = inputs_of(t);
            if (weighted) inputs.is_weights = view(t.ref.data(), rows, cols);
            if (covariance) inputs.selection = view(t.selection.data(), rows, cols);
            auto options = l.options();
            if (options.aggregation.mode == loss::aggregation_mode::token_mean)
                options.aggregation.global_token_count = t.tokens;
            if (options.aggregation.mode == loss::aggregation_mode::seq_mean_token_sum)
                options.aggregation.global_sequence_count = t.sequences;
            const auto result = loss::policy_loss(inputs, view(t.gradient.data(), rows, cols), {}, options);
            benchmark::DoNotOptimize(result.loss);
            benchmark::DoNotOptimize(t.gradient.data());
        });
        register_case(l.operation, shape, "yardstick", bytes, [=] {
            auto& t = get();
            keep(l.yardstick(t));
            benchmark::DoNotOptimize(t.gradient.data());
        });
#ifdef NORMKIT_HAVE_TORCH
        register_case(l.operation, shape, "torch", bytes, [=] {
            auto& t = get();
            at::set_num_threads(1);
            const auto x = torch::from_blob(t.x.data(), {rows, cols}).detach().requires_grad_(true);
            const auto value = l.torch_loss(
                x, torch::from_blob(t.old.data(), {rows, cols}), torch::from_blob(t.mask.data(), {rows, cols}),
                torch::from_blob(t.advantages.data(), {rows, 1}),
                torch::from_blob(covariance ? t.selection.data() : t.ref.data(), {rows, cols}), t.tokens);
            value.backward();
            benchmark::DoNotOptimize(x.grad().data_ptr());
        });
#endif
    }
}

const bool registered = [] {
    for (int threads : {1, 2}) register_policy_loss(64, 16384, threads);
    register_new_losses(64, 16384);
    return true;
}();

}  // namespace
