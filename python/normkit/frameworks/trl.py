"""TRL GRPOTrainer's advantages and loss as functions with TRL's arguments, over normkit (CPU tensors).

Reproduces huggingface/trl @ f2cd57710ae345ea6428ae95363267fcf38a3dc8 (2026-07-24),
trl/trainer/grpo_trainer.py: the advantage block of GRPOTrainer._generate_and_score_completions
(multi_objective_aggregation="sum_then_normalize"), the vLLM importance-sampling ratio of
_generate_and_score_completions and GRPOTrainer._compute_loss (token- and sequence-level
importance sampling). The arithmetic is normkit's (normkit.advantage.presets.trl,
normkit.loss.presets.trl); the loss carries autograd to per_token_logps.
"""
import math

import numpy as np
import torch

from .. import advantage as _advantage
from .. import loss as _loss
from ..torch import losses as _losses
from ._autograd import as_array, constant, differentiable, storage_dtype

COMMIT = "f2cd57710ae345ea6428ae95363267fcf38a3dc8"

__all__ = ["compute_rewards", "compute_advantages", "vllm_importance_sampling_ratio", "compute_loss"]


def compute_rewards(rewards_per_func, reward_weights=None):
    """TRL's reward of each completion: nansum_k w_k·rewards_per_func[:, k]; NaN where every function returned None.

    rewards_per_func (B, K); reward_weights (K,) default all 1. Returns rewards (B,).
    """
    x = rewards_per_func
    w = torch.ones(x.shape[1], dtype=x.dtype) if reward_weights is None else torch.as_tensor(reward_weights,
                                                                                              dtype=x.dtype)
    rewards = (x * w.unsqueeze(0)).nansum(dim=1)
    rewards[torch.isnan(x).all(dim=1)] = torch.nan
    return rewards


def compute_advantages(rewards, num_generations, scale_rewards="group"):
    """GRPOTrainer's advantages: A = r − nanmean_g r, ÷ (σ + 1e-4) unless scale_rewards is 'none'.

    rewards (B,) in contiguous groups of num_generations (RepeatSampler order); scale_rewards 'group'
    (or True: σ = the group's unbiased nanstd), 'batch' (σ of every reward of the batch, Lite PPO) or
    'none' (or False). NaN rewards (unscorable completions) are left out of the statistics and get 0,
    as does a group with one scored completion (TRL's nanstd NaN, then nan_to_num). normkit:
    group_normalize with presets.trl(scale_rewards). trl @ f2cd57710ae3. Returns advantages (B,),
    rewards' dtype.
    """
    scale = {True: "group", False: "none"}.get(scale_rewards, scale_rewards)
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"Invalid value for scale_rewards: {scale_rewards}. Must be one of 'batch', 'group', or "
                         "'none'.")
    r = rewards.detach()
    dtype = r.dtype if r.dtype in (torch.float32, torch.float64) else torch.float32
    values = np.ascontiguousarray(r.to(dtype).reshape(-1).numpy())
    a = _advantage.group_normalize(values, int(num_generations), options=_advantage.presets.trl(scale))
    return torch.from_numpy(a).to(r.dtype).reshape(r.shape)


_IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


def vllm_importance_sampling_ratio(old_per_token_logps, sampling_per_token_logps, completion_mask,
                                   vllm_importance_sampling_mode="sequence_mask",
                                   vllm_importance_sampling_clip_min=None, vllm_importance_sampling_clip_max=3.0):
    """The vLLM importance-sampling ratio of GRPOTrainer._generate_and_score_completions (inputs
    "importance_sampling_ratio", which compute_loss's importance_sampling_ratio takes).

    ρ = exp(m·(old − sampling)) per token (token_*), exp(Σ_t m·(old − sampling)) per sequence (sequence_*);
    *_truncate clamps ρ to [clip_min, clip_max], *_mask sets ρ outside [clip_min, clip_max] to 0 (None: unbounded).
    completion_mask is TRL's completion_mask (times tool_mask when there is one). Where m = 0 (and for a row
    with no valid token) TRL's ρ is that of a zero log-ratio, as here. normkit: rollout_correction_weights with
    presets.trl_vllm_is(mode, clip_max, clip_min). trl @ f2cd57710ae3. Returns (B, T) for the token modes,
    (B, 1) for the sequence modes, in old_per_token_logps' dtype (no graph: TRL computes it under no_grad).
    """
    mode = vllm_importance_sampling_mode
    if mode not in _IS_MODES:
        raise ValueError(f"Unknown vLLM importance sampling level: {mode}. Possible values are 'token_truncate', "
                         "'token_mask', 'sequence_truncate', and 'sequence_mask'.")
    low, high = vllm_importance_sampling_clip_min, vllm_importance_sampling_clip_max
    dtype = storage_dtype(old_per_token_logps)
    old = as_array(old_per_token_logps, "old_per_token_logps", dtype)
    valid = completion_mask.detach() != 0
    _, weights = _loss.rollout_correction_weights(
        old, as_array(sampling_per_token_logps, "sampling_per_token_logps", dtype),
        as_array(completion_mask, "completion_mask", dtype),
        options=_loss.presets.trl_vllm_is(mode, math.inf if high is None else float(high),
                                          None if low is None else float(low)))
    from ..torch._convert import tensor_of
    weights = tensor_of(weights)
    # TRL's ρ of a zero log-ratio (masked tokens, empty rows)
    lo = -math.inf if low is None else float(low)
    hi = math.inf if high is None else float(high)
    one = min(max(1.0, lo), hi) if mode.endswith("truncate") else (1.0 if lo <= 1.0 <= hi else 0.0)
    if mode.startswith("sequence"):
        rows = valid.any(dim=-1)
        first = valid.to(torch.int8).argmax(dim=-1)
        per_row = weights.gather(1, first.unsqueeze(-1))
        return torch.where(rows.unsqueeze(-1), per_row, torch.full_like(per_row, one))
    return torch.where(valid, weights, torch.full_like(weights, one))


_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")


def compute_loss(per_token_logps, old_per_token_logps, advantages, completion_mask, loss_type="dapo",
                 epsilon_low=0.2, epsilon_high=None, beta=0.0, ref_per_token_logps=None, delta=None,
                 use_bias_correction_kl=False, max_completion_length=None, num_items_in_batch=None, num_processes=1,
                 gradient_accumulation_steps=1, importance_sampling_ratio=None, importance_sampling_level="token"):
    """GRPOTrainer._compute_loss as a function of the tensors it reads from `inputs`: loss_type 'grpo', 'bnpo',
    'dr_grpo', 'dapo' (TRL's default), 'cispo', 'sapo', 'vespo' at importance_sampling_level='token', and
    'grpo', 'bnpo', 'dr_grpo', 'dapo', 'sapo', 'luspo' at importance_sampling_level='sequence' (GSPO: the ratio
    exp(Σ_t m·(logπ − logπ_old) / max(1, |o_i|)) of each sequence, constant over its tokens).

    per_token_logps, old_per_token_logps (None: per_token_logps detached, as TRL), completion_mask (B, T);
    advantages (B,) or (B, 1). epsilon_low (GRPOConfig.epsilon, 0.2), epsilon_high (None: epsilon_low;
    cispo: the absolute cap, TRL's recommended 5.0 when None), delta (INTELLECT-2 cap on the ratio),
    beta and ref_per_token_logps (k3, unclamped; use_bias_correction_kl multiplies it by the ratio),
    importance_sampling_ratio (the vLLM correction, (B, T) or (B, 1), not applied to vespo).
    Reductions: grpo/sapo mean_i(Σ_t ℓm / max(1, |o_i|)), bnpo Σℓm / max(1, Σm), dr_grpo Σℓm / (B·L) with
    L = max_completion_length (None: T), luspo mean_i(ℓ_i·|o_i|), each ÷ gradient_accumulation_steps;
    dapo/cispo/vespo Σℓm / (max(1, num_items_in_batch) / num_processes) (num_items_in_batch None: Σm of this call).
    Not provided (ValueError): luspo at the token level (TRL weighs every padded position there), cispo and vespo
    at the sequence level, use_bias_correction_kl at the sequence level (the sequence ratio couples a row's KL
    terms). normkit: normkit.torch.losses.policy_loss with presets.trl(loss_type, max_completion_length, beta)
    (surrogate gspo_sequence / sapo_sequence at the sequence level). trl @ f2cd57710ae3.
    Returns the loss, a 0-dim tensor differentiable in per_token_logps.
    """
    if loss_type not in _LOSS_TYPES:
        raise ValueError(f"Unknown loss type: {loss_type}")
    if importance_sampling_level not in ("token", "sequence"):
        raise ValueError(f"Unknown importance sampling level: {importance_sampling_level}. Possible values are 'token' "
                         "and 'sequence'.")
    sequence = importance_sampling_level == "sequence"
    if (loss_type == "luspo") != sequence and loss_type in ("luspo", "cispo", "vespo"):
        raise ValueError(f"normkit.frameworks.trl.compute_loss: loss_type {loss_type!r} at importance_sampling_level="
                         f"{importance_sampling_level!r} is not provided")
    if sequence and beta != 0.0 and use_bias_correction_kl:
        raise ValueError("normkit.frameworks.trl.compute_loss: use_bias_correction_kl at importance_sampling_level="
                         "'sequence' is not provided")
    dtype = storage_dtype(per_token_logps)
    B, T = per_token_logps.shape
    if old_per_token_logps is None:
        old_per_token_logps = per_token_logps.detach()
    adv = advantages.reshape(B, 1) if advantages.dim() == 1 else advantages
    o = _loss.presets.trl(loss_type, None if max_completion_length is None else float(max_completion_length),
                          float(beta))
    o.surrogate.epsilon_low = float(epsilon_low)
    if loss_type == "cispo":
        if epsilon_high is not None:
            o.surrogate.epsilon_high = float(epsilon_high)
    else:
        o.surrogate.epsilon_high = float(epsilon_low if epsilon_high is None else epsilon_high)
    if sequence:
        o.surrogate.mode = _loss.surrogate_mode.sapo_sequence if loss_type == "sapo" else \
            _loss.surrogate_mode.gspo_sequence
    if loss_type == "sapo":
        # TRL's torch.where(advantages > 0, 1.0, 1.05) of two Python floats is a float32 tensor: τ− = float32(1.05)
        o.surrogate.tau_negative = float(np.float32(1.05))
    if delta is not None and loss_type in ("grpo", "bnpo", "dr_grpo", "dapo", "luspo"):
        o.surrogate.dual_clip = float(delta)
    if beta != 0.0:
        if ref_per_token_logps is None:
            raise ValueError("compute_loss: beta != 0 needs ref_per_token_logps")
        o.kl.bias_correction = bool(use_bias_correction_kl)
    else:
        ref_per_token_logps = None
    mask = constant(completion_mask, dtype)
    gas = float(gradient_accumulation_steps)
    a = o.aggregation
    if loss_type in ("grpo", "sapo", "dr_grpo", "luspo"):
        a.global_sequence_count = B * gas
    elif loss_type == "bnpo":
        a.global_token_count = max(1.0, float(mask.to(torch.float64).sum())) * gas
    else:
        n = float(mask.to(torch.float64).sum()) if num_items_in_batch is None else float(
            num_items_in_batch.detach() if isinstance(num_items_in_batch, torch.Tensor) else num_items_in_batch)
        a.global_token_count = max(1.0, n)
        a.data_parallel_size = int(num_processes)
    weights = None
    if importance_sampling_ratio is not None and loss_type != "vespo":
        weights = torch.broadcast_to(constant(importance_sampling_ratio, dtype), (B, T)).contiguous()
    loss, _ = _losses.policy_loss(differentiable(per_token_logps, dtype), constant(old_per_token_logps, dtype),
                                  constant(adv, dtype), mask, constant(ref_per_token_logps, dtype), None, weights,
                                  None, options=o)
    return loss
