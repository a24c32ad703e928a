"""OpenRLHF's advantage estimators, KL estimator and PolicyLoss with OpenRLHF's arguments, over normkit.

Reproduces OpenRLHF/OpenRLHF @ 3c3be6234e0cb353e76bb8019947db9dfe99fca7 (2026-08-13):
openrlhf/trainer/ppo_utils/experience_maker.py (RemoteExperienceMaker.compute_advantages_and_returns:
the group baselines of group_norm, rloo, reinforce_baseline, dr_grpo; the global whitening;
get_advantages_and_returns, get_cumulative_returns),
openrlhf/models/utils.py (compute_approx_kl, compute_reward's reward clip) and
openrlhf/models/loss.py (PolicyLoss, ppo and gspo). The arithmetic is normkit's (presets.openrlhf*,
credit.presets.openrlhf_gae / openrlhf_returns, loss.presets.openrlhf_ppo / openrlhf_kl / openrlhf_vllm_is);
losses carry autograd to log_probs.
"""
import math

import numpy as np
import torch

from .. import advantage as _advantage
from .. import credit as _credit
from .. import loss as _loss
from ..torch import losses as _losses
from ._autograd import as_array, attach, constant, differentiable, storage_dtype

COMMIT = "3c3be6234e0cb353e76bb8019947db9dfe99fca7"

__all__ = ["compute_group_advantages", "whiten_advantages", "get_advantages_and_returns", "get_cumulative_returns",
           "compute_approx_kl", "PolicyLoss"]

ESTIMATORS = ("group_norm", "rloo", "reinforce_baseline", "dr_grpo")


def compute_group_advantages(rewards, n_samples_per_prompt, estimator="group_norm", reward_clip_range=(-10.0, 10.0)):
    """The scalar each response's EOS token receives: OpenRLHF's group baseline, then compute_reward's clip.

    rewards (B,) in prompt order (contiguous groups of n_samples_per_prompt > 1, as after OpenRLHF's
    reorder by index). estimator: 'group_norm' (r − μ_g)/(σ_g,unbiased + 1e-9), 'rloo' r − mean_{j≠i},
    'reinforce_baseline' and 'dr_grpo' r − μ_g; then clamped to reward_clip_range (OpenRLHF's default
    (−10, 10); None: no clip). The per-token KL shaping and returns follow in OpenRLHF; for
    reinforce_baseline the global token whitening is whiten_advantages. normkit: group_normalize with
    presets.openrlhf(estimator) (without its whitening). OpenRLHF @ 3c3be6234e0c. Returns (B,).
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {', '.join(ESTIMATORS)}, got {estimator!r}")
    o = _advantage.presets.openrlhf(estimator)
    o.whiten = _advantage.whiten_options()
    low, high = (-np.inf, np.inf) if not reward_clip_range else reward_clip_range
    o.clip_min, o.clip_max = float(low), float(high)
    r = rewards.detach()
    dtype = r.dtype if r.dtype in (torch.float32, torch.float64) else torch.float32
    values = np.ascontiguousarray(r.to(dtype).reshape(-1).numpy())
    a = _advantage.group_normalize(values, int(n_samples_per_prompt), options=o)
    return torch.from_numpy(a).to(r.dtype).reshape(r.shape)


def whiten_advantages(advantages, action_mask, no_std_norm=False):
    """OpenRLHF's global whitening (gae, reinforce, reinforce_baseline): (A − μ)·rsqrt(max(v, 1e-8)), μ and the
    population v over every action token; no_std_norm only takes μ away. Every position is written.

    normkit: masked_whiten with presets.openrlhf_whiten(no_std_norm) (in the advantages' precision; OpenRLHF
    whitens .float() values). OpenRLHF @ 3c3be6234e0c. Returns a tensor of advantages' shape."""
    x = advantages.detach()
    dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    v = np.ascontiguousarray(x.to(dtype).numpy())
    m = np.ascontiguousarray(action_mask.detach().to(dtype).numpy())
    out, _ = _advantage.masked_whiten(v, m, options=_advantage.presets.openrlhf_whiten(bool(no_std_norm)))
    return torch.from_numpy(out).to(x.dtype)


def _credit_arrays(function, tensors):
    """Detached float32 / float64 numpy views of a credit estimator's inputs (the first one's dtype)."""
    first = tensors[0].detach()
    dtype = first.dtype if first.dtype in (torch.float32, torch.float64) else torch.float32
    return first.dtype, [np.ascontiguousarray(t.detach().to(dtype).numpy()) for t in tensors]


def get_advantages_and_returns(values, rewards, action_mask, gamma, lambd):
    """OpenRLHF's GAE (RemoteExperienceMaker.get_advantages_and_returns): r and V masked by action_mask, then
    δ_t = r_t + γ·V_{t+1} − V_t, A_t = δ_t + γλ·A_{t+1} over every position (masked ones discounted through),
    returns = A + V (the masked V).

    values, rewards, action_mask (B, T). normkit: credit.generalized_advantage_estimation with
    credit.presets.openrlhf_gae(gamma, lambd). OpenRLHF @ 3c3be6234e0c. Returns (advantages, returns) in the
    rewards' dtype, without a graph (OpenRLHF detaches the advantages; its returns carry no graph either, as the
    values come from the critic's no_grad forward).
    """
    dtype, (r, v, m) = _credit_arrays("get_advantages_and_returns", [rewards, values, action_mask])
    advantages, returns = _credit.generalized_advantage_estimation(
        r, v, m, options=_credit.presets.openrlhf_gae(float(gamma), float(lambd)))
    return torch.from_numpy(advantages).to(dtype), torch.from_numpy(returns).to(dtype)


def get_cumulative_returns(rewards, action_mask, gamma):
    """OpenRLHF's REINFORCE returns (RemoteExperienceMaker.get_cumulative_returns): G_t = m_t·r_t + γ·G_{t+1} over
    every position (masked ones discounted through).

    normkit: credit.discounted_returns with credit.presets.openrlhf_returns(gamma). OpenRLHF @ 3c3be6234e0c.
    Returns the returns (B, T) in the rewards' dtype.
    """
    dtype, (r, m) = _credit_arrays("get_cumulative_returns", [rewards, action_mask])
    returns = _credit.discounted_returns(r, m, options=_credit.presets.openrlhf_returns(float(gamma)))
    return torch.from_numpy(returns).to(dtype)


def compute_approx_kl(log_probs, log_probs_base, kl_estimator="k1"):
    """OpenRLHF's compute_approx_kl: d = log_probs − log_probs_base; k1 d, k2 d²/2, k3 exp(−d) − 1 + d; clamped to ±10.

    Computed in float32 as OpenRLHF (.float()). normkit: kl_penalty with loss.presets.openrlhf_kl(kl_estimator).
    Differentiable in both inputs. OpenRLHF @ 3c3be6234e0c. Returns a float32 tensor of log_probs' shape.
    """
    if kl_estimator not in ("k1", "k2", "k3"):
        raise ValueError(f"Unknown kl_estimator: {kl_estimator}")
    x = as_array(log_probs, "log_probs", torch.float32)
    base = as_array(log_probs_base, "log_probs_base", torch.float32)
    value, gradient = _loss.kl_penalty(x, base, gradient=True, options=_loss.presets.openrlhf_kl(kl_estimator))
    value, gradient = torch.from_numpy(value), torch.from_numpy(gradient)
    return attach(value, [log_probs, log_probs_base], [gradient, -gradient])


class PolicyLoss(torch.nn.Module):
    """OpenRLHF's PolicyLoss. policy_loss_type 'ppo': r = exp(clamp(logπ − logπ_old, ±20)); 'gspo' (GSPO): the
    sequence ratio r_i = exp(Σ_t m·(logπ − logπ_old) / max(1, |o_i|)) (unclamped, differentiable in every token;
    against rollout_log_probs instead of old_log_probs when enable_vllm_is_correction), with token_level_loss
    forced False as OpenRLHF (normkit takes a GSPO dual_clip ≥ 1 + clip_eps_high only: a ValueError below it).
    ℓ = −min(r·A, clip(r, 1 − clip_eps_low, 1 + clip_eps_high)·A), dual_clip c > 1:
    −max(·, c·A) for A < 0; for 'ppo' the vLLM IS correction (tis / icepop / seq-mask-tis,
    vllm_is_truncated_threshold [low, high]) against rollout_log_probs; aggregate_loss: token_level_loss
    Σℓm / N·dp (N = batch_num_tokens or Σm), else Σ_i(Σ_t ℓm/|o_i|) / B·dp (B = global_batch_size or the
    non-empty rows).

    forward(log_probs, old_log_probs, advantages, action_mask=None, rollout_log_probs=None, dp_size=1,
    batch_num_tokens=None, global_batch_size=None) → (loss, clip_ratio, ppo_kl, vllm_kl): 0-dim tensors
    (vllm_kl None without the 'ppo' correction), loss differentiable in log_probs; ppo_kl is the masked mean of the
    raw log-ratio old − new. normkit: normkit.torch.losses.policy_loss with loss.presets.openrlhf_ppo() (surrogate
    gspo_sequence for 'gspo') and rollout_correction_weights with loss.presets.openrlhf_vllm_is().
    OpenRLHF @ 3c3be6234e0c.
    """

    def __init__(self, clip_eps_low=0.2, clip_eps_high=0.2, dual_clip=None, token_level_loss=True,
                 policy_loss_type="ppo", enable_vllm_is_correction=False, vllm_is_truncated_threshold=None,
                 vllm_is_correction_type="tis"):
        super().__init__()
        if policy_loss_type not in ("ppo", "gspo"):
            raise ValueError(f"Invalid policy loss type: {policy_loss_type}")
        if policy_loss_type == "gspo":
            token_level_loss = False  # OpenRLHF: GSPO requires sequence-level loss (per-sample mean)
        if dual_clip is not None:
            assert dual_clip > 1.0, f"dual_clip must be > 1.0, got {dual_clip}"
        if vllm_is_correction_type not in {"tis", "icepop", "seq-mask-tis"}:
            raise ValueError(f"Invalid vllm_is_correction_type: {vllm_is_correction_type}, must be one of "
                             "tis/icepop/seq-mask-tis")
        self.clip_eps_low = clip_eps_low
        self.clip_eps_high = clip_eps_high
        self.dual_clip = dual_clip
        self.token_level_loss = token_level_loss
        self.policy_loss_type = policy_loss_type
        self.enable_vllm_is_correction = enable_vllm_is_correction
        self.vllm_is_truncated_threshold = vllm_is_truncated_threshold
        self.vllm_is_correction_type = vllm_is_correction_type

    def forward(self, log_probs, old_log_probs, advantages, action_mask=None, rollout_log_probs=None, dp_size=1,
                batch_num_tokens=None, global_batch_size=None):
        dtype = storage_dtype(log_probs)
        if action_mask is None:
            action_mask = torch.ones_like(log_probs.detach())
        gspo = self.policy_loss_type == "gspo"
        o = _loss.presets.openrlhf_ppo()
        o.surrogate.epsilon_low = float(self.clip_eps_low)
        o.surrogate.epsilon_high = float(self.clip_eps_high)
        if gspo:
            o.surrogate.mode = _loss.surrogate_mode.gspo_sequence
            o.surrogate.log_ratio_clamp = math.inf
        if self.dual_clip is not None:
            o.surrogate.dual_clip = float(self.dual_clip)
        a = o.aggregation
        a.data_parallel_size = int(dp_size)
        if self.token_level_loss:
            if batch_num_tokens is None:
                a.data_parallel_size = 1  # OpenRLHF: masked_mean without the dp factor
            else:
                a.global_token_count = float(batch_num_tokens)
        else:
            a.mode = _loss.aggregation_mode.seq_mean_token_mean
            if global_batch_size is None:
                a.data_parallel_size = 1
            else:
                a.global_sequence_count = float(global_batch_size)
        old = constant(old_log_probs, dtype)
        mask = constant(action_mask, dtype)
        weights, vllm_kl, reference = None, None, old
        if self.enable_vllm_is_correction and gspo:
            reference = constant(rollout_log_probs, dtype)  # OpenRLHF's GSPO ratio is against the rollout
        elif self.enable_vllm_is_correction:
            low, high = self.vllm_is_truncated_threshold
            rollout = constant(rollout_log_probs, dtype)
            _, w = _loss.rollout_correction_weights(
                as_array(old, "old_log_probs", dtype), as_array(rollout, "rollout_log_probs", dtype),
                as_array(mask, "action_mask", dtype), options=_loss.presets.openrlhf_vllm_is(
                    self.vllm_is_correction_type.replace("-", "_"), float(low), float(high)))
            from ..torch._convert import tensor_of
            weights = tensor_of(w)
            vllm_kl = ((rollout - old) * mask).sum() / mask.sum()
        loss, result = _losses.policy_loss(differentiable(log_probs, dtype), reference, constant(advantages, dtype),
                                           mask, None, None, weights, None, options=o)
        metrics = result.metrics
        if reference is old:
            ppo_kl = torch.tensor(metrics.approx_kl, dtype=dtype)
        else:
            ppo_kl = ((old - log_probs.detach().to(dtype)) * mask).sum() / mask.sum()
        return loss, torch.tensor(metrics.clip_fraction, dtype=dtype), ppo_kl, vllm_kl
