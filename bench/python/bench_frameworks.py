"""bench.py's last table: the verl drop-ins against a torch composition of the same formulas, written
the frameworks' way (tensor ops, and for GRPO a Python loop over the prompt uids), on a verl-sized
batch: NORMKIT_BENCH_PROMPTS prompts × 16 samples × NORMKIT_BENCH_TOKENS tokens, fp32, one thread.
The compositions are this benchmark's own, not the frameworks' code; the drop-ins' agreement with
the frameworks' functions is tests/python/torch/test_frameworks.py's business.
"""
import os

import numpy as np


def _grpo_composition(torch, rewards, mask, index, eps=1e-6):
    """Outcome GRPO as verl computes it: per-uid mean and std of the scores, in a loop."""
    scores = rewards.sum(-1)
    members = {}
    for i, uid in enumerate(index):
        members.setdefault(uid, []).append(i)
    mean = torch.zeros_like(scores)
    std = torch.ones_like(scores)
    for rows in members.values():
        if len(rows) > 1:
            group = scores[rows]
            mean[rows] = group.mean()
            std[rows] = group.std()
    return ((scores - mean) / (std + eps)).unsqueeze(-1) * mask


def _ppo_composition(torch, old_log_prob, log_prob, advantages, mask, low=0.2, high=0.2, c=3.0):
    """PPO's dual-clip surrogate, token-mean, as verl's vanilla policy loss composes it."""
    ratio = torch.exp(log_prob - old_log_prob)
    clipped = torch.maximum(-advantages * ratio, -advantages * torch.clamp(ratio, 1 - low, 1 + high))
    dual = torch.min(-advantages * c, clipped)
    losses = torch.where(advantages < 0, dual, clipped)
    return (losses * mask).sum() / mask.sum()


def framework_table(torch, median_time):
    from normkit.frameworks import verl

    prompts = int(os.environ.get("NORMKIT_BENCH_PROMPTS", "1024"))
    tokens = int(os.environ.get("NORMKIT_BENCH_TOKENS", "4096"))
    samples = 16
    rows = prompts * samples
    g = torch.Generator().manual_seed(3)
    lengths = torch.randint(1, tokens + 1, (rows,), generator=g)
    mask = (torch.arange(tokens)[None, :] < lengths[:, None]).float()
    rewards = torch.zeros(rows, tokens)
    rewards[torch.arange(rows), lengths - 1] = torch.randint(0, 2, (rows,), generator=g).float()
    index = np.array([f"uid-{i // samples}" for i in range(rows)], dtype=object)
    log_prob = (-torch.rand(rows, tokens, generator=g)).requires_grad_(True)
    old_log_prob = log_prob.detach() + 0.05 * torch.randn(rows, tokens, generator=g)
    advantages = torch.randn(rows, tokens, generator=g) * mask

    def ours_loss():
        log_prob.grad = None
        verl.compute_policy_loss_vanilla(old_log_prob, log_prob, advantages, mask)[0].backward()

    def theirs_loss():
        log_prob.grad = None
        _ppo_composition(torch, old_log_prob, log_prob, advantages, mask).backward()

    cases = [
        ("compute_grpo_outcome_advantage", lambda: verl.compute_grpo_outcome_advantage(rewards, mask, index),
         lambda: _grpo_composition(torch, rewards, mask, index)),
        ("compute_policy_loss_vanilla, forward + backward", ours_loss, theirs_loss),
    ]
    print(f"| verl drop-in, {prompts}×{samples} samples × {tokens} tokens, fp32 | normkit ms | torch composition ms "
          f"| ÷ |\n|---|---|---|---|")
    for name, ours, theirs in cases:
        a, b = median_time(ours, repeats=3), median_time(theirs, repeats=3)
        print(f"| {name} | {a * 1e3:.1f} | {b * 1e3:.1f} | {b / a:.2f}× |")
    print()
