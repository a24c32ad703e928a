// The policy losses against the same math composed from libtorch ops, with
// the gradient from libtorch's autograd (the frameworks' own formulas,
// transcribed from verl's core_algos.py, TRL's grpo_trainer.py and OpenRLHF's
// loss.py in torch ops), in double.
// libtorch first: its glog defines CHECK, which would otherwise replace Catch's CHECK (a glog CHECK
// aborts instead of reporting, and is not counted as an assertion).
#include <torch/torch.h>
#undef CHECK

#include "support.hpp"

#include <stdexcept>

#include <normkit/loss/policy_loss.hpp>
#include <normkit/loss/presets.hpp>

using namespace normkit;
using namespace normkit::testing;

namespace {

using loss::aggregation_mode;
using loss::surrogate_mode;

struct torch_data {
    index_type rows, cols;
    std::vector<double> x, old, ref, mask, advantages;  // advantages per sample
};

torch_data make(index_type rows, index_type cols, std::uint32_t seed) {
    torch_data d{rows, cols, {}, {}, {}, {}, {}};
    std::mt19937 generator(seed);
    std::uniform_real_distribution<double> log_prob(-3.0, -0.01), shift(-0.5, 0.5), advantage(-2.0, 2.0);
    std::uniform_int_distribution<index_type> length(1, cols);
    for (index_type i = 0; i < rows; ++i) {
        d.advantages.push_back(advantage(generator));
        const index_type n = i == 1 ? 0 : length(generator);
        for (index_type t = 0; t < cols; ++t) {
            const double x = log_prob(generator);
            d.x.push_back(x);
            d.old.push_back(x + shift(generator));
            d.ref.push_back(x + shift(generator));
            d.mask.push_back(t < n ? 1.0 : 0.0);
        }
    }
    return d;
}

torch::Tensor tensor_of(std::vector<double>& values, index_type rows, index_type cols) {
    return torch::from_blob(values.data(), {rows, cols}, torch::kFloat64);
}

// verl's agg_loss (and TRL's reductions) in torch ops.
torch::Tensor aggregate(const torch::Tensor& ell, const torch::Tensor& mask, aggregation_mode mode,
                        bool count_empty_rows, double length) {
    const auto masked = torch::where(mask != 0, ell * mask, torch::zeros_like(ell));
    const auto lengths = mask.sum(-1);
    const auto sequences = count_empty_rows ? torch::tensor(static_cast<double>(mask.size(0)), torch::kFloat64)
                                            : (lengths > 0).sum().to(torch::kFloat64);
    switch (mode) {
        case aggregation_mode::token_mean:
            return masked.sum() / mask.sum();
        case aggregation_mode::token_sum:
            return masked.sum();
        case aggregation_mode::seq_mean_token_sum:
            return masked.sum(-1).sum() / sequences;
        case aggregation_mode::seq_mean_token_mean:
            return torch::where(lengths > 0, masked.sum(-1) / lengths.clamp_min(1.0), torch::zeros_like(lengths))
                       .sum() /
                   sequences;
        case aggregation_mode::seq_mean_token_sum_norm:
            return masked.sum() / (sequences * length);
        default:
            break;
    }
    // ΔL (zerolllin/Delta-L-Normalization): x_i = L_i^−α / Σ L^−α over non-empty rows, ÷ T_max.
    const auto weights = torch::where(lengths > 0, lengths.clamp_min(1.0).pow(-0.75), torch::zeros_like(lengths));
    return (masked.sum(-1) * weights / weights.sum()).sum() / length;
}

// The per-token surrogate in torch ops, as the frameworks write it.
torch::Tensor surrogate(const torch::Tensor& x, const torch::Tensor& old, const torch::Tensor& advantages,
                        const torch::Tensor& mask, const loss::surrogate_options& o) {
    const double low = 1 - o.epsilon_low, high = 1 + o.epsilon_high;
    const auto log_ratio = torch::clamp(x - old, -o.log_ratio_clamp, o.log_ratio_clamp);
    const auto ratio = torch::exp(log_ratio);
    const auto ppo = [&](const torch::Tensor& r) {
        return torch::maximum(-advantages * r, -advantages * torch::clamp(r, low, high));
    };
    const auto lengths = mask.sum(-1, true).clamp_min(1.0);
    switch (o.mode) {
        case surrogate_mode::ppo_clip: {
            auto value = ppo(ratio);
            if (o.dual_clip)
                value = torch::where(advantages < 0, torch::minimum(-advantages * *o.dual_clip, value), value);
            return value;
        }
        case surrogate_mode::cispo_clip:
            return -torch::clamp(ratio, low, high).detach() * advantages * x;
        case surrogate_mode::cispo_cap:
            return -torch::clamp_max(ratio, o.epsilon_high).detach() * advantages * x;
        case surrogate_mode::gspo_token: {
            const auto z = ((x - old) * mask).sum(-1, true) / lengths;
            return ppo(torch::exp(torch::clamp_max(x - x.detach() + z.detach(), 10.0)));
        }
        case surrogate_mode::gspo_sequence: {
            const auto z = ((x - old) * mask).sum(-1, true) / lengths;
            return ppo(torch::exp(torch::clamp(z, -o.log_ratio_clamp, o.log_ratio_clamp)));
        }
        case surrogate_mode::sapo: {
            const auto tau = torch::where(advantages > 0, torch::full_like(advantages, o.tau_positive),
                                          torch::full_like(advantages, o.tau_negative));
            return -advantages * torch::sigmoid(tau * (ratio - 1)) * 4 / tau;
        }
        case surrogate_mode::reinforce:
            return -advantages * x;
        case surrogate_mode::gmpo: {
            const auto sign = torch::sign(advantages);
            const auto clipped =
                sign * torch::minimum(sign * log_ratio, sign * torch::clamp(log_ratio, -o.epsilon_low, o.epsilon_high));
            return -advantages * torch::exp((clipped * mask).sum(-1, true) / lengths);
        }
        case surrogate_mode::gft: {
            const auto p = torch::exp(x).detach();
            return -advantages * torch::where(p > o.gft_threshold, torch::ones_like(p), p) * x;
        }
        default:
            // The newer modes (sapo_sequence, dppo, vespo, the covariance forms) are checked against
            // libtorch in bench/loss.cpp and against the frameworks' numbers in tests/loss/golden.cpp;
            // the test below iterates the modes written above.
            throw std::logic_error("no libtorch form for this surrogate mode here");
    }
}

}  // namespace

TEST_CASE("policy_loss agrees with the libtorch composition and its autograd", "[loss][peers][torch]") {
    const index_type rows = 6, cols = 37;
    for (const auto mode : {surrogate_mode::ppo_clip, surrogate_mode::cispo_clip, surrogate_mode::cispo_cap,
                            surrogate_mode::gspo_token, surrogate_mode::gspo_sequence, surrogate_mode::sapo,
                            surrogate_mode::reinforce, surrogate_mode::gmpo, surrogate_mode::gft}) {
        for (const auto aggregation : {aggregation_mode::token_mean, aggregation_mode::token_sum,
                                       aggregation_mode::seq_mean_token_sum, aggregation_mode::seq_mean_token_mean,
                                       aggregation_mode::seq_mean_token_sum_norm, aggregation_mode::delta_l}) {
            INFO("surrogate " << static_cast<int>(mode) << " aggregation " << static_cast<int>(aggregation));
            auto d = make(rows, cols, 11 + static_cast<std::uint32_t>(mode));
            loss::policy_loss_options options;
            options.surrogate.mode = mode;
            options.surrogate.epsilon_high = mode == surrogate_mode::cispo_cap ? 1.3 : 0.28;
            if (mode == surrogate_mode::ppo_clip) options.surrogate.dual_clip = 3.0;
            options.use_kl_loss = true;
            options.kl = mode == surrogate_mode::sapo ? loss::presets::k3_plus() : loss::kl_options{};
            options.kl_coefficient = 0.1;
            options.aggregation.mode = aggregation;
            loss::policy_inputs<double> inputs{view(d.x.data(), rows, cols),       view(d.old.data(), rows, cols),
                                               view(d.advantages.data(), rows, 1), view(d.mask.data(), rows, cols),
                                               view(d.ref.data(), rows, cols),     {}};
            std::vector<double> gradient(rows * cols);
            const auto result = loss::policy_loss(inputs, view(gradient.data(), rows, cols), {}, options);

            const auto x = tensor_of(d.x, rows, cols).clone().requires_grad_(true);
            const auto old = tensor_of(d.old, rows, cols), ref = tensor_of(d.ref, rows, cols),
                       mask = tensor_of(d.mask, rows, cols);
            const auto advantages =
                torch::from_blob(d.advantages.data(), {rows, 1}, torch::kFloat64).expand({rows, cols});
            // verl kl_penalty: low_var_kl with its clamps; "k3+" = k2's gradient with k3's value.
            const auto kl_log_ratio = torch::clamp(ref - x, -20.0, 20.0);
            auto kl = torch::clamp(torch::exp(kl_log_ratio) - kl_log_ratio - 1, -10.0, 10.0);
            if (options.kl.straight_through) {
                const auto k2 = 0.5 * (x - ref).square();
                kl = k2 - k2.detach() + kl.detach();
            }
            const auto ell = surrogate(x, old, advantages, mask, options.surrogate) + 0.1 * kl;
            const auto value = aggregate(ell, mask, aggregation, false, static_cast<double>(cols));
            value.backward();
            const auto expected = x.grad().contiguous();
            const std::vector<double> torch_gradient(expected.data_ptr<double>(),
                                                     expected.data_ptr<double>() + rows * cols);
            CHECK(result.loss == Approx(value.item<double>()).epsilon(1e-12));
            CHECK(relative_error(gradient, torch_gradient) < 1e-12);
        }
    }
}
