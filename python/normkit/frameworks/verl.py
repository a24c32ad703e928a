"""verl's advantage estimators and actor losses with verl's own signatures, over normkit (CPU tensors).

Reproduces verl-project/verl @ 1dda039b9c6311889a9c9a26040677e1254814f9 (2026-08-22):
verl/trainer/ppo/core_algos.py (compute_*_outcome_advantage, agg_loss, compute_policy_loss_vanilla,
compute_policy_loss, the registered policy losses reinforce, dppo_tv, dppo_kl, kl_cov and clip_cov,
compute_value_loss, kl_penalty) and verl/utils/torch_functional.py (masked_whiten). Every function
takes and returns torch tensors as verl's does: the same argument names, defaults, shapes, dtypes and
return tuples; the arithmetic is normkit's (normkit.advantage, normkit.loss with the verl presets).

- `index` is verl's uid array (numpy, strings or integers, any order, ragged groups): it is mapped
  to int64 group ids with np.unique(index, return_inverse=True).
- The advantage estimators run under no_grad in verl and return tensors without a graph here too.
- The losses carry autograd to log_prob (agg_loss to loss_mat, compute_value_loss to vpreds, kl_penalty to
  both inputs) through normkit's exact gradient (first order; normkit.torch.losses).
- Where verl divides by a count plus 1e-8 (masked_mean, seq-mean-token-mean), normkit divides by the
  count: the results differ by that relative 1e-8. A batch whose mask is entirely zero gives verl's
  0/0 = NaN for token-mean and 0 here.
- `config` may be verl's ActorConfig / AlgoConfig, a dict or any object with the fields; None takes
  ActorConfig's defaults (clip_ratio 0.2, clip_ratio_c 3.0) or AlgoConfig's (gamma 1.0) where verl
  would assert.
"""
import numpy as np
import torch

from .. import advantage as _advantage
from .. import loss as _loss
from ..torch import losses as _losses
from ._autograd import as_array, attach, constant, differentiable, group_ids, option, storage_dtype

COMMIT = "1dda039b9c6311889a9c9a26040677e1254814f9"

__all__ = ["compute_grpo_outcome_advantage", "compute_grpo_vectorized_outcome_advantage",
           "compute_grpo_passk_outcome_advantage", "compute_rloo_outcome_advantage",
           "compute_rloo_vectorized_outcome_advantage", "compute_reinforce_plus_plus_baseline_outcome_advantage",
           "compute_opo_outcome_advantage", "compute_gpg_outcome_advantage",
           "compute_reinforce_plus_plus_outcome_advantage", "compute_remax_outcome_advantage", "agg_loss",
           "compute_policy_loss_vanilla", "compute_policy_loss", "compute_policy_loss_reinforce",
           "compute_policy_loss_dppo_tv", "compute_policy_loss_dppo_kl", "compute_policy_loss_kl_cov",
           "compute_policy_loss_clip_cov", "compute_value_loss", "kl_penalty", "masked_whiten"]


# ---------------------------------------------------------------------------------------------- advantages

def _scores(token_level_rewards):
    """verl's scores = token_level_rewards.sum(dim=-1), as a float32 / float64 array for normkit."""
    scores = token_level_rewards.detach().sum(dim=-1)
    work = scores if scores.dtype in (torch.float32, torch.float64) else scores.to(torch.float32)
    return scores, np.ascontiguousarray(work.numpy())


def _outcome(function, token_level_rewards, response_mask, index, estimator):
    """A per-sample advantage (normkit) broadcast over the response tokens: verl's scores.unsqueeze(-1) * mask."""
    scores, values = _scores(token_level_rewards)
    a = estimator(values, group_ids(index, function))
    advantages = torch.from_numpy(a).to(scores.dtype).unsqueeze(-1) * response_mask
    return advantages, advantages


def compute_grpo_outcome_advantage(token_level_rewards, response_mask, index, epsilon=1e-6,
                                   norm_adv_by_std_in_grpo=True, config=None):
    """GRPO: A_i = (r_i − μ_g)/(σ_g + ε), σ unbiased; r_i − μ_g when norm_adv_by_std_in_grpo=False (Dr. GRPO).

    A group of one gives r/(1 + ε) (verl's mean 0, std 1). normkit: group_normalize with
    presets.verl_grpo(norm_adv_by_std_in_grpo), eps=epsilon. verl @ 1dda039b9c63. Returns (advantages, returns),
    both (bs, response_length), the same tensor.
    """
    options = _advantage.presets.verl_grpo(bool(norm_adv_by_std_in_grpo))
    return _outcome("compute_grpo_outcome_advantage", token_level_rewards, response_mask, index,
                    lambda r, g: _advantage.group_normalize(r, g, options=options, eps=float(epsilon)))


def compute_grpo_vectorized_outcome_advantage(token_level_rewards, response_mask, index, epsilon=1e-6,
                                              norm_adv_by_std_in_grpo=True, config=None):
    """verl's grpo_vectorized (group_mean_std, centred two-pass variance, no floor): the same arithmetic as
    compute_grpo_outcome_advantage. The function honours norm_adv_by_std_in_grpo; verl's dispatcher does
    not forward it (PR #7893), which a caller reproduces by leaving it True. verl @ 1dda039b9c63."""
    options = (_advantage.presets.verl_grpo_vectorized() if norm_adv_by_std_in_grpo
               else _advantage.presets.verl_grpo(False))
    return _outcome("compute_grpo_vectorized_outcome_advantage", token_level_rewards, response_mask, index,
                    lambda r, g: _advantage.group_normalize(r, g, options=options, eps=float(epsilon)))


def compute_grpo_passk_outcome_advantage(token_level_rewards, response_mask, index, epsilon=1e-6,
                                         norm_adv_by_std_in_grpo=True, config=None, **kwargs):
    """Pass@k: the group's arg-max gets r_max − r_2nd (÷ (σ_g + ε) if norm), every other sample 0.

    As verl, the flag is read from config.norm_adv_by_std_in_grpo (default True) when config is given,
    from the argument otherwise. A group of one is a ValueError. normkit: pass_at_k.
    verl @ 1dda039b9c63.
    """
    norm = bool(option(config, "norm_adv_by_std_in_grpo", True)) if config is not None else bool(
        norm_adv_by_std_in_grpo)
    return _outcome("compute_grpo_passk_outcome_advantage", token_level_rewards, response_mask, index,
                    lambda r, g: _advantage.pass_at_k(r, g, scale_by_std=norm, eps=float(epsilon)))


def compute_rloo_outcome_advantage(token_level_rewards, response_mask, index, epsilon=1e-6, config=None, **kwargs):
    """RLOO (verl's loop): A_i = n/(n − 1)·(r_i − μ_g); a group of one keeps its raw score.

    normkit: group_normalize with presets.verl_rloo(). verl @ 1dda039b9c63.
    """
    options = _advantage.presets.verl_rloo()
    return _outcome("compute_rloo_outcome_advantage", token_level_rewards, response_mask, index,
                    lambda r, g: _advantage.group_normalize(r, g, options=options))


def compute_rloo_vectorized_outcome_advantage(token_level_rewards, response_mask, index, epsilon=1e-6, config=None,
                                              **kwargs):
    """RLOO (verl's bincount form): as compute_rloo_outcome_advantage, but a group of one gives 0 (PRs #7581,
    #7794). normkit: group_normalize with presets.verl_rloo_vectorized(). verl @ 1dda039b9c63."""
    options = _advantage.presets.verl_rloo_vectorized()
    return _outcome("compute_rloo_vectorized_outcome_advantage", token_level_rewards, response_mask, index,
                    lambda r, g: _advantage.group_normalize(r, g, options=options))


def compute_reinforce_plus_plus_baseline_outcome_advantage(token_level_rewards, response_mask, index, epsilon=1e-6,
                                                           config=None, **kwargs):
    """REINFORCE++-baseline: a_i = r_i − μ_g, tiled over the response, masked_whiten over every valid token
    (unbiased variance, √(v + 1e-8)), × mask. normkit: group_normalize with
    presets.verl_reinforce_pp_baseline() and the response mask's token counts. verl @ 1dda039b9c63."""
    function = "compute_reinforce_plus_plus_baseline_outcome_advantage"
    token_mask = np.ascontiguousarray((response_mask.detach() != 0).to(torch.uint8).numpy())
    options = _advantage.presets.verl_reinforce_pp_baseline()
    return _outcome(function, token_level_rewards, response_mask, index,
                    lambda r, g: _advantage.group_normalize(r, g, token_mask=token_mask, options=options))


def compute_opo_outcome_advantage(token_level_rewards, response_mask, index, epsilon=1e-6, config=None, **kwargs):
    """OPO: A_i = r_i − Σ_g |o_j| r_j / Σ_g |o_j|; a group of one keeps its raw score.

    A group whose responses are all empty: verl 0/0 = NaN, normkit the unweighted mean. normkit: opo.
    verl @ 1dda039b9c63.
    """
    lengths = np.ascontiguousarray(response_mask.detach().sum(dim=-1).to(torch.int64).numpy())
    return _outcome("compute_opo_outcome_advantage", token_level_rewards, response_mask, index,
                    lambda r, g: _advantage.opo(r, g, lengths))


def compute_gpg_outcome_advantage(token_level_rewards, response_mask, index, epsilon=1e-6, f_norm=1.0, alpha=1.0,
                                  config=None, **kwargs):
    """GPG: A_i = α·(r_i − μ_g)/f_norm, α = B / max(1, #nonzero scores) (verl overwrites the alpha argument).

    normkit: gpg. verl @ 1dda039b9c63.
    """
    return _outcome("compute_gpg_outcome_advantage", token_level_rewards, response_mask, index,
                    lambda r, g: _advantage.gpg(r, g) / f_norm)


def _token_estimator(token_level_rewards, response_mask, run):
    x = token_level_rewards.detach()
    dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    values = np.ascontiguousarray(x.to(dtype).numpy())
    mask = np.ascontiguousarray(response_mask.detach().to(dtype).numpy())
    advantages, returns = run(values, mask)
    return torch.from_numpy(advantages).to(x.dtype), torch.from_numpy(returns).to(x.dtype)


def compute_reinforce_plus_plus_outcome_advantage(token_level_rewards, response_mask, config=None, **kwargs):
    """REINFORCE++: G_t = r_t + γ·G_{t+1}, carried through mask-0 (observation) tokens, returns zeroed there;
    A = masked_whiten(G)·mask. γ = config.gamma (1.0 without a config). normkit: reinforce_pp
    (mask_rule 'carry', token-weighted whitening, ddof 1, √(v + 1e-8)). verl @ 1dda039b9c63.
    Returns (advantages, returns)."""
    gamma = float(option(config, "gamma", 1.0))
    return _token_estimator(token_level_rewards, response_mask,
                            lambda r, m: _advantage.reinforce_pp(r, m, gamma=gamma))


def compute_remax_outcome_advantage(token_level_rewards, reward_baselines, response_mask, config=None, **kwargs):
    """ReMax: returns = reverse cumsum of masked rewards, A = returns − b·mask (reward_baselines (bs,)).

    normkit: remax. verl @ 1dda039b9c63. Returns (advantages, returns)."""
    x = token_level_rewards.detach()
    dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    baselines = np.ascontiguousarray(reward_baselines.detach().to(dtype).reshape(-1).numpy())
    return _token_estimator(token_level_rewards, response_mask,
                            lambda r, m: _advantage.remax(r, m, baselines))


# ---------------------------------------------------------------------------------------------- losses

_MODES = {"token-mean": "token_mean", "token-sum": "token_sum", "seq-mean-token-sum": "seq_mean_token_sum",
          "seq-mean-token-mean": "seq_mean_token_mean", "seq-mean-token-sum-norm": "seq_mean_token_sum_norm"}


def _number(value):
    if value is None:
        return None
    return float(value.detach()) if isinstance(value, torch.Tensor) else float(value)


def _aggregation(loss_agg_mode, dp_size=1, batch_num_tokens=None, global_batch_size=None, loss_scale_factor=None):
    """verl's agg_loss arguments as a normkit aggregation_options (its ValueErrors included)."""
    if loss_agg_mode not in _MODES:
        raise ValueError(f"Invalid loss_agg_mode: {loss_agg_mode}")
    dp_size = int(dp_size)
    if dp_size > 1 and loss_agg_mode == "token-mean" and batch_num_tokens is None:
        raise ValueError("(global) batch_num_tokens is required when dp_size > 1")
    if dp_size > 1 and loss_agg_mode.startswith("seq-mean") and global_batch_size is None:
        raise ValueError("global_batch_size is required when dp_size > 1")
    o = _loss.aggregation_options()
    o.mode = _loss.aggregation_mode.__members__[_MODES[loss_agg_mode]]
    o.form = _loss.sum_norm_form.dr_grpo  # verl-new: [seq-mean-token-sum] / loss_scale_factor
    o.data_parallel_size = dp_size
    o.global_token_count = _number(batch_num_tokens)
    o.global_sequence_count = _number(global_batch_size)
    o.normalizer_length = _number(loss_scale_factor)
    return o


def agg_loss(loss_mat, loss_mask, loss_agg_mode, dp_size=1, batch_num_tokens=None, global_batch_size=None,
             loss_scale_factor=None):
    """verl's agg_loss: token-mean Σℓm/N·dp, token-sum Σℓm·dp, seq-mean-token-sum Σ_i(Σ_t ℓm)/B·dp,
    seq-mean-token-mean Σ_i(Σ_t ℓm/|o_i|)/B·dp, seq-mean-token-sum-norm [seq-mean-token-sum]/loss_scale_factor
    (default: the padded width). N, B default to this call's valid tokens / non-empty rows. normkit:
    loss.aggregate_loss. Differentiable in loss_mat. verl @ 1dda039b9c63. Returns a 0-dim tensor."""
    dtype = storage_dtype(loss_mat)
    options = _aggregation(loss_agg_mode, dp_size, batch_num_tokens, global_batch_size, loss_scale_factor)
    loss, _ = _losses.aggregate_loss(differentiable(loss_mat, dtype), constant(loss_mask, dtype), options=options)
    return loss


def _policy(function, old_log_prob, log_prob, advantages, response_mask, options, is_weights=None, selection=None):
    """normkit.torch.losses.policy_loss on verl's tensors: (loss tensor carrying autograd to log_prob, metrics)."""
    dtype = storage_dtype(log_prob)
    loss, result = _losses.policy_loss(
        differentiable(log_prob, dtype), constant(old_log_prob, dtype), constant(advantages, dtype),
        constant(response_mask, dtype), None, None, constant(is_weights, dtype), constant(selection, dtype),
        options=options)
    return loss, result.metrics


def _vanilla_options(clip_low, clip_high, clip_ratio_c, aggregation):
    if not clip_ratio_c > 1.0:
        raise AssertionError("The lower bound of the clip_ratio_c for dual-clip PPO should be greater than 1.0,"
                             f" but get the value: {clip_ratio_c}.")
    o = _loss.presets.verl_actor()
    o.surrogate.epsilon_low = float(clip_low)
    o.surrogate.epsilon_high = float(clip_high)
    o.surrogate.dual_clip = float(clip_ratio_c)
    o.aggregation = aggregation
    return o


def compute_policy_loss_vanilla(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                                config=None, rollout_is_weights=None):
    """verl's vanilla PPO loss (policy_loss.loss_mode 'vanilla'): r = exp(clamp(logπ − logπ_old, ±20)),
    ℓ = max(−A·r, −A·clip(r, 1 − ε_lo, 1 + ε_hi)), for A < 0 min(ℓ, −A·clip_ratio_c); × rollout_is_weights;
    agg_loss(loss_agg_mode, **config.global_batch_info).

    config: clip_ratio (0.2), clip_ratio_low / clip_ratio_high (None: clip_ratio), clip_ratio_c (3.0),
    global_batch_info ({}). normkit: policy_loss with presets.verl_actor(). verl @ 1dda039b9c63.
    Returns (pg_loss, pg_metrics) as verl at that commit: pg_loss a 0-dim tensor differentiable in log_prob,
    pg_metrics {"actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"} of floats.
    """
    clip_ratio = option(config, "clip_ratio", 0.2)
    low = option(config, "clip_ratio_low", clip_ratio)
    high = option(config, "clip_ratio_high", clip_ratio)
    c = option(config, "clip_ratio_c", 3.0)
    info = dict(option(config, "global_batch_info", {}) or {})
    options = _vanilla_options(low, high, c, _aggregation(loss_agg_mode, **info))
    loss, metrics = _policy("compute_policy_loss_vanilla", old_log_prob, log_prob, advantages, response_mask, options,
                            rollout_is_weights)
    return loss, {"actor/pg_clipfrac": float(metrics.clip_fraction), "actor/ppo_kl": float(metrics.approx_kl),
                  "actor/pg_clipfrac_lower": float(metrics.clip_fraction_lower)}


def compute_policy_loss(old_log_prob, log_prob, advantages, response_mask, cliprange=None, cliprange_low=None,
                        cliprange_high=None, clip_ratio_c=3.0, loss_agg_mode="token-mean"):
    """verl's (deprecated) compute_policy_loss: the vanilla PPO loss with explicit clip ranges
    (cliprange_low / cliprange_high default to cliprange, which must then be given).

    normkit: policy_loss with presets.verl_actor(). verl @ 1dda039b9c63. Returns (pg_loss, pg_clipfrac, ppo_kl,
    pg_clipfrac_lower), 0-dim tensors of log_prob's dtype, pg_loss differentiable in log_prob.
    """
    low = cliprange if cliprange_low is None else cliprange_low
    high = cliprange if cliprange_high is None else cliprange_high
    if low is None or high is None:
        raise TypeError("compute_policy_loss: cliprange (or both cliprange_low and cliprange_high) must be given")
    options = _vanilla_options(low, high, clip_ratio_c, _aggregation(loss_agg_mode))
    loss, metrics = _policy("compute_policy_loss", old_log_prob, log_prob, advantages, response_mask, options)
    dtype = loss.dtype
    return (loss, torch.tensor(metrics.clip_fraction, dtype=dtype), torch.tensor(metrics.approx_kl, dtype=dtype),
            torch.tensor(metrics.clip_fraction_lower, dtype=dtype))


def _clip_ranges(config):
    """verl's clip_ratio / clip_ratio_low / clip_ratio_high of an ActorConfig (ActorConfig's 0.2 without one)."""
    clip_ratio = option(config, "clip_ratio", 0.2)
    return float(option(config, "clip_ratio_low", clip_ratio)), float(option(config, "clip_ratio_high", clip_ratio))


def _global_aggregation(loss_agg_mode, config):
    return _aggregation(loss_agg_mode, **dict(option(config, "global_batch_info", {}) or {}))


def compute_policy_loss_reinforce(rollout_log_prob, log_prob, advantages, response_mask,
                                  loss_agg_mode="seq-mean-token-sum", config=None, rollout_is_weights=None):
    """verl's REINFORCE loss (bypass mode): ℓ = −A·logπ·w (w = rollout_is_weights, constant), agg_loss(loss_agg_mode,
    **config.global_batch_info); actor/ppo_kl the masked mean of rollout_log_prob − log_prob (unclamped).

    normkit: policy_loss with presets.verl_reinforce() (old log-probs = rollout_log_prob). verl @ 1dda039b9c63.
    Returns (pg_loss, {"actor/ppo_kl"}), pg_loss differentiable in log_prob.
    """
    options = _loss.presets.verl_reinforce()
    options.aggregation = _global_aggregation(loss_agg_mode, config)
    loss, metrics = _policy("compute_policy_loss_reinforce", rollout_log_prob, log_prob, advantages, response_mask,
                            options, rollout_is_weights)
    return loss, {"actor/ppo_kl": float(metrics.approx_kl)}


def _dppo(function, binary_kl, old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config,
          rollout_is_weights):
    low, high = _clip_ranges(config)
    # verl reads config.get("clip_ratio_c", 20.0); ActorConfig defines clip_ratio_c = 3.0 (the default without one)
    c = float(option(config, "clip_ratio_c", 3.0 if config is None else 20.0))
    options = _loss.presets.verl_dppo(binary_kl, c)
    options.surrogate.epsilon_low, options.surrogate.epsilon_high = low, high
    options.aggregation = _global_aggregation(loss_agg_mode, config)
    loss, metrics = _policy(function, old_log_prob, log_prob, advantages, response_mask, options, rollout_is_weights)
    return loss, {"actor/pg_clipfrac": float(metrics.clip_fraction), "actor/ppo_kl": float(metrics.approx_kl),
                  "actor/pg_clipfrac_lower": float(metrics.clip_fraction_lower)}


def compute_policy_loss_dppo_tv(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                                config=None, rollout_is_weights=None):
    """verl's DPPO-Binary-TV: ℓ = −A·sg(min(r, c))·logπ·valid (× rollout_is_weights), valid where A > 0 and
    p − p_old ≤ clip_ratio_high, or A ≤ 0 and p − p_old ≥ −clip_ratio_low (p = exp logπ); r = exp(clamp(Δ, ±20)).
    c = config.get("clip_ratio_c", 20.0) (ActorConfig's 3.0 without a config). actor/pg_clipfrac the share of
    invalid tokens, actor/pg_clipfrac_lower of valid ones with r > c.

    normkit: policy_loss with presets.verl_dppo(False, c). verl @ 1dda039b9c63. Returns (pg_loss, pg_metrics).
    """
    return _dppo("compute_policy_loss_dppo_tv", False, old_log_prob, log_prob, advantages, response_mask,
                 loss_agg_mode, config, rollout_is_weights)


def compute_policy_loss_dppo_kl(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                                config=None, rollout_is_weights=None):
    """verl's DPPO-Binary-KL: as compute_policy_loss_dppo_tv with validity by the binary KL
    p_old·log(p_old/p) + (1 − p_old)·log((1 − p_old + 1e-8)/(1 − p + 1e-8)) ≤ clip_ratio_high (A > 0; or p ≤ p_old),
    ≤ clip_ratio_low (A ≤ 0; or p ≥ p_old).

    normkit: policy_loss with presets.verl_dppo(True, c). verl @ 1dda039b9c63. Returns (pg_loss, pg_metrics).
    """
    return _dppo("compute_policy_loss_dppo_kl", True, old_log_prob, log_prob, advantages, response_mask,
                 loss_agg_mode, config, rollout_is_weights)


def _selection(log_prob, old_log_prob, advantages, response_mask, options):
    """normkit.loss.covariance_selection on verl's tensors: (count, the 0/1 selection as a tensor)."""
    dtype = storage_dtype(log_prob)
    from ..torch._convert import tensor_of
    count, selected = _loss.covariance_selection(
        as_array(log_prob, "log_prob", dtype), as_array(old_log_prob, "old_log_prob", dtype),
        as_array(advantages, "advantages", dtype), as_array(response_mask, "response_mask", dtype), options=options)
    return count, tensor_of(selected)


def compute_policy_loss_kl_cov(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                               config=None, rollout_is_weights=None):
    """verl's KL-Cov: ℓ = −A·r (r = exp(logπ − logπ_old), unclamped); on the top k = max(1, ⌊kl_cov_ratio·N⌋) valid
    tokens by cov = (A − Ā)(logπ − mean logπ) ℓ = −A·r + ppo_kl_coef·|logπ − logπ_old|; × rollout_is_weights;
    agg_loss. config.policy_loss: kl_cov_ratio (None: 2e-4), ppo_kl_coef (None: 1.0, as verl's function).
    actor/ppo_kl is the masked mean of |logπ − logπ_old|.

    normkit: covariance_selection (rule kl_cov) into policy_loss with presets.verl_kl_cov(ppo_kl_coef).
    verl @ 1dda039b9c63. Returns (pg_loss, {"actor/ppo_kl"}).
    """
    policy = option(config, "policy_loss", None)
    ratio = float(option(policy, "kl_cov_ratio", 2e-4))
    coefficient = float(option(policy, "ppo_kl_coef", 1.0))
    if not ratio > 0:
        raise AssertionError("kl_cov_ratio should be larger than 0.")
    selection = _loss.covariance_selection_options()
    selection.rule, selection.ratio = _loss.covariance_rule.kl_cov, ratio
    _, selected = _selection(log_prob, old_log_prob, advantages, response_mask, selection)
    options = _loss.presets.verl_kl_cov(coefficient)
    options.aggregation = _global_aggregation(loss_agg_mode, config)
    loss, metrics = _policy("compute_policy_loss_kl_cov", old_log_prob, log_prob, advantages, response_mask, options,
                            rollout_is_weights, selected)
    m = response_mask.detach().to(loss.dtype)
    kl = float(((log_prob.detach().to(loss.dtype) - old_log_prob.detach().to(loss.dtype)).abs() * m).sum()
               / (m.sum() + 1e-8))
    return loss, {"actor/ppo_kl": kl}


def compute_policy_loss_clip_cov(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                                 config=None, rollout_is_weights=None):
    """verl's Clip-Cov: the PPO clip max(−A·r, −A·clip(r, 1 − ε_lo, 1 + ε_hi)) (r unclamped, no dual clip), with the
    loss of up to max(1, ⌊clip_cov_ratio·N⌋) tokens not already clipped whose cov lies in (clip_cov_lb, clip_cov_ub)
    zeroed; × rollout_is_weights; agg_loss. config: clip_ratio(_low/_high); config.policy_loss: clip_cov_ratio
    (2e-4), clip_cov_lb (1.0), clip_cov_ub (5.0).

    verl draws the zeroed subset with torch.randperm; normkit takes a seeded subset (seed 0): the same tokens
    whenever every candidate is taken (ratio·N ≥ the candidates), another subset of the same size otherwise.
    actor/pg_clipfrac is the zeroed share, actor/ppo_kl the masked mean of logπ_old − logπ.
    normkit: covariance_selection (rule clip_cov) into policy_loss with presets.verl_clip_cov().
    verl @ 1dda039b9c63. Returns (pg_loss, pg_metrics).
    """
    policy = option(config, "policy_loss", None)
    ratio = float(option(policy, "clip_cov_ratio", 2e-4))
    if not ratio > 0:
        raise AssertionError("clip_ratio should be larger than 0.")
    low, high = _clip_ranges(config)
    selection = _loss.covariance_selection_options()
    selection.rule, selection.ratio = _loss.covariance_rule.clip_cov, ratio
    selection.lower = float(option(policy, "clip_cov_lb", 1.0))
    selection.upper = float(option(policy, "clip_cov_ub", 5.0))
    selection.epsilon_low, selection.epsilon_high = low, high
    count, selected = _selection(log_prob, old_log_prob, advantages, response_mask, selection)
    options = _loss.presets.verl_clip_cov()
    options.surrogate.epsilon_low, options.surrogate.epsilon_high = low, high
    options.aggregation = _global_aggregation(loss_agg_mode, config)
    loss, metrics = _policy("compute_policy_loss_clip_cov", old_log_prob, log_prob, advantages, response_mask, options,
                            rollout_is_weights, selected)
    n = float(response_mask.detach().to(torch.float64).sum())
    return loss, {"actor/pg_clipfrac": count / (n + 1e-8), "actor/ppo_kl": float(metrics.approx_kl)}


def compute_value_loss(vpreds, returns, values, response_mask, cliprange_value, loss_agg_mode="token-mean", dp_size=1,
                       batch_num_tokens=None, global_batch_size=None, loss_scale_factor=None):
    """verl's compute_value_loss: 0.5·agg_loss(max((v − R)², (clip(v, v_old ± cliprange_value) − R)²)) with agg_loss's
    global counts, and vf_clipfrac the masked share where the clipped error is the larger.

    normkit: normkit.torch.losses.value_loss with presets.verl_value(cliprange_value). verl @ 1dda039b9c63.
    Returns (vf_loss, vf_clipfrac), 0-dim tensors of vpreds' dtype, vf_loss differentiable in vpreds.
    """
    dtype = storage_dtype(vpreds)
    options = _loss.presets.verl_value(float(cliprange_value))
    options.aggregation = _aggregation(loss_agg_mode, dp_size, batch_num_tokens, global_batch_size, loss_scale_factor)
    loss, result = _losses.value_loss(differentiable(vpreds, dtype), constant(values, dtype), constant(returns, dtype),
                                      constant(response_mask, dtype), options=options)
    return loss, torch.tensor(result.clip_fraction, dtype=dtype)


_KL = {"kl": "k1", "k1": "k1", "abs": "abs", "mse": "k2", "k2": "k2", "low_var_kl": "k3", "k3": "k3"}


def kl_penalty(logprob, ref_logprob, kl_penalty):
    """verl's kl_penalty: k1/kl d, abs |d|, k2/mse ½d², k3/low_var_kl exp(−d) + d − 1 (d = logπ − logπ_ref,
    clamped to ±20, the value to ±10); a '+' suffix keeps the value with k2's gradient (straight-through).

    normkit: loss.kl_penalty (verl's clamps). Differentiable in logprob and ref_logprob. 'full' is
    NotImplementedError, as in verl. verl @ 1dda039b9c63. Returns the per-token estimate, logprob's shape.
    """
    name = kl_penalty
    plus = name.endswith("+")
    base = name[:-1] if plus else name
    if base not in _KL:
        raise NotImplementedError(f"kl_penalty: {kl_penalty!r} is not one of verl's estimators")
    dtype = storage_dtype(logprob)
    x = as_array(logprob, "logprob", dtype)
    ref = as_array(ref_logprob, "ref_logprob", dtype)
    from ..torch._convert import tensor_of
    value, gradient = _loss.kl_penalty(x, ref, gradient=True, estimator=_KL[base],
                                       straight_through=plus and _KL[base] != "k2", clamp=True)
    value, gradient = tensor_of(value), tensor_of(gradient)
    return attach(value, [logprob, ref_logprob], [gradient, -gradient])


def masked_whiten(values, mask, shift_mean=True):
    """verl's masked_whiten: (x − μ)·rsqrt(v + 1e-8), μ and the unbiased v over the mask's tokens; shift_mean=False
    adds μ back. Every position is written (verl does not re-mask). A mask of 0 or 1 tokens is verl's ValueError.

    normkit: advantage.masked_whiten (exact mean where verl divides by Σm + 1e-8). verl @ 1dda039b9c63
    (verl/utils/torch_functional.py). Returns a tensor of values' shape (no graph: verl calls it under no_grad).
    """
    x = values.detach()
    dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    v = np.ascontiguousarray(x.to(dtype).numpy())
    m = np.ascontiguousarray(mask.detach().to(dtype).numpy())
    out, moments = _advantage.masked_whiten(v, m, shift_mean=bool(shift_mean))
    if moments.count == 0:
        raise ValueError("At least one element in the mask has to be 1.")
    if moments.count == 1:
        raise ValueError("The sum of the mask is one, which can cause a division by zero.")
    return torch.from_numpy(out).to(x.dtype)
