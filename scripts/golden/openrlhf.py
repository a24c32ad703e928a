"""Golden values from OpenRLHF's own functions (see frameworks.py for how they are loaded).

Writes tests/loss/golden_openrlhf.hpp and tests/credit/golden_openrlhf.hpp.
"""
import os
import sys
import types

sys.path.insert(0, os.path.dirname(__file__))
import frameworks as fw  # noqa: E402
from frameworks import t  # noqa: E402

import torch  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
UTILS, LOSS = "openrlhf/models/utils.py", "openrlhf/models/loss.py"
MAKER = "openrlhf/trainer/ppo_utils/experience_maker.py"
SAMPLES = "openrlhf/trainer/ppo_utils/samples_generator.py"

ns = fw.base_namespace()
fw.functions("openrlhf", UTILS, ["masked_mean", "compute_approx_kl"], ns)
fw.functions("openrlhf", LOSS, ["aggregate_loss", "PolicyLoss", "ValueLoss"], ns)
maker = fw.methods("openrlhf", MAKER, "RemoteExperienceMaker", ["get_advantages_and_returns", "get_cumulative_returns"], ns)

loss_out = fw.Emitter("openrlhf")
credit_out = fw.Emitter("openrlhf")
generator = torch.Generator().manual_seed(18)


def rand(shape, low, high):
    return low + (high - low) * torch.rand(shape, generator=generator, dtype=torch.float64)


# compute_approx_kl: every estimator clamped to ±10; the value and its gradient w.r.t. log_probs.
d_values = [0.0, 0.3, -0.7, 5.0, -5.0, 12.0, -12.0, -3.0, 2.5, 4.4721]
for case, estimator in enumerate(["k1", "k2", "k3", "k1", "k2", "k3"]):
    base = rand((2, 10), -4.0, -0.5)
    # the first three: the edge values (±10 crossed, d = 5 for k2, d = −12 for k1); the others: random d.
    d = t([d_values, [v / 2 for v in d_values]]) if case < 3 else rand((2, 10), -14.0, 14.0)
    x = (base + d).requires_grad_(True)
    value = ns["compute_approx_kl"](x, base, kl_estimator=estimator)
    value.sum().backward()
    loss_out.add("approx_kl", UTILS, "compute_approx_kl", estimator, log_probs=x, log_probs_base=base, value=value,
                 gradient=x.grad, rows=2, cols=10)


# PolicyLoss: loss, clip_ratio, ppo_kl (raw log-ratio) and the gradient; ppo with and without dual clip.
def policy_case(name, x, old, advantages, mask, dual_clip=None, eps=(0.2, 0.2), token_level=True,
                is_type=None, rollout=None, threshold=(0.5, 5.0), table="policy_loss"):
    x = x.clone().requires_grad_(True)
    module = ns["PolicyLoss"](clip_eps_low=eps[0], clip_eps_high=eps[1], dual_clip=dual_clip,
                              token_level_loss=token_level, enable_vllm_is_correction=is_type is not None,
                              vllm_is_truncated_threshold=list(threshold), vllm_is_correction_type=is_type or "tis")
    loss, clip_ratio, ppo_kl, vllm_kl = module(x, old, advantages, action_mask=mask, rollout_log_probs=rollout)
    loss.backward()
    fields = dict(log_probs=x, old_log_probs=old, advantages=advantages, mask=mask, loss=loss, clip_ratio=clip_ratio,
                  ppo_kl=ppo_kl, gradient=x.grad, rows=x.shape[0], cols=x.shape[1],
                  dual_clip=dual_clip if dual_clip else 0.0, epsilon_low=eps[0], epsilon_high=eps[1])
    if rollout is not None:
        fields.update(rollout_log_probs=rollout, threshold_low=threshold[0], threshold_high=threshold[1])
    loss_out.add(table, LOSS, "PolicyLoss.forward" + (f" ({is_type})" if is_type else ""), name, **fields)


mask = t([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1]])
x = rand((3, 5), -3.0, -0.1)
old = x + rand((3, 5), -0.6, 0.6)
adv = rand((3, 5), -2.0, 2.0)
policy_case("issue_raw_log_ratio", t([[24.0]]), t([[-1.0]]), t([[1.0]]), t([[1.0]]))
policy_case("random", x, old, adv, mask)
policy_case("random_dual_clip", x, old, adv, mask, dual_clip=3.0, eps=(0.2, 0.28))
policy_case("extreme_ratios", t([[-30.0, 0.0, 5.0, -0.1]]), t([[0.0, -30.0, -1.0, 0.0]]), t([[1.0, -1.0, -2.0, 0.5]]),
            t([[1.0, 1.0, 1.0, 1.0]]), dual_clip=3.0)
policy_case("masked_garbage", t([[-1.0, -2.0, 40.0]]), t([[-1.5, -1.0, -40.0]]), t([[1.0, -1.0, 3.0]]),
            t([[1.0, 1.0, 0.0]]))

# vLLM IS correction (PolicyLoss, ppo): tis, icepop, seq-mask-tis against rollout log-probs.
rollout = old + rand((3, 5), -1.5, 1.5)
for kind in ["tis", "icepop", "seq-mask-tis"]:
    policy_case("random", x, old, adv, mask, is_type=kind, rollout=rollout, table="is_correction")
    policy_case("narrow", x, old, adv, mask, is_type=kind, rollout=rollout, threshold=(0.8, 1.25),
                table="is_correction")

# ValueLoss: 0.5·max((v_clip − R)², (v − R)²), token or sample aggregation.
values = rand((3, 5), -1.0, 1.0)
old_values = values + rand((3, 5), -0.5, 0.5)
returns = rand((3, 5), -1.5, 1.5)
for name, clip, token_level in [("clip_token", 0.2, True), ("clip_sample", 0.2, False), ("none_token", None, True),
                                ("none_sample", None, False), ("wide_clip_token", 1.0, True)]:
    v = values.clone().requires_grad_(True)
    loss = ns["ValueLoss"](clip_eps=clip, token_level_loss=token_level)(v, old_values, returns, action_mask=mask)
    loss.backward()
    loss_out.add("value_loss", LOSS, "ValueLoss.forward", name, values=v, old_values=old_values, returns=returns,
                 mask=mask, clip=clip if clip is not None else 0.0, token_level=token_level, loss=loss,
                 gradient=v.grad, rows=3, cols=5)

# GAE and cumulative returns with masked tokens inside the response.
self_stub = types.SimpleNamespace()
gae_cases = [
    ("issue", t([[0, 0, 0, 1.0]]), t([[0.5, 0.3, 0.2, 0.1]]), t([[1, 0, 1, 1.0]]), 0.9, 0.95),
    ("random_holes", rand((3, 6), -1, 1), rand((3, 6), -1, 1), t([[1, 1, 0, 1, 0, 1], [1, 0, 0, 1, 1, 0],
                                                                     [1, 1, 1, 1, 1, 1]]), 0.99, 0.9),
    ("gamma_one", rand((2, 5), -1, 1), rand((2, 5), -1, 1), t([[1, 0, 1, 0, 1], [0, 1, 1, 1, 0]]), 1.0, 1.0),
    ("all_masked", rand((1, 4), -1, 1), rand((1, 4), -1, 1), t([[0, 0, 0, 0.0]]), 0.9, 0.95),
    ("contiguous", rand((2, 5), -1, 1), rand((2, 5), -1, 1), t([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]), 0.95, 0.8),
]
for name, rewards, values, m, gamma, lam in gae_cases:
    advantages, returns = maker.get_advantages_and_returns(self_stub, values, rewards, m, gamma, lam)
    credit_out.add("gae", MAKER, "get_advantages_and_returns", name, rewards=rewards, values=values, mask=m,
                   gamma=gamma, lambd=lam, advantages=advantages, returns=returns, rows=m.shape[0], cols=m.shape[1])
    cumulative = maker.get_cumulative_returns(self_stub, rewards, m, gamma)
    credit_out.add("cumulative_returns", MAKER, "get_cumulative_returns", name, rewards=rewards, mask=m, gamma=gamma,
                   returns=cumulative, rows=m.shape[0], cols=m.shape[1])

# Whitening over all action tokens (population variance clamped at 1e-8), and no_std_norm.
for name, no_std in [("std", False), ("no_std_norm", True), ("std_2", False), ("no_std_norm_2", True),
                     ("std_constant", False)]:
    adv = rand((3, 4), -2, 2) if name != "std_constant" else torch.full((3, 4), 0.7, dtype=torch.float64)
    m = t([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]]) if not name.endswith("2") else t([[1, 1, 0, 0], [1, 1, 1, 0],
                                                                                         [0, 0, 0, 0]])
    experience = types.SimpleNamespace(advantages=adv.clone(), action_mask=m)
    args = types.SimpleNamespace(algo=types.SimpleNamespace(advantage=types.SimpleNamespace(
        estimator="reinforce", no_std_norm=no_std)))
    scope = dict(ns, experiences=[experience], args=args)
    fw.block("openrlhf", MAKER, "all_advantages = torch.cat(", "exp.advantages = (exp.advantages - mean) * rstd",
             scope)
    credit_out.add("whiten", MAKER, "compute_advantages_and_returns (global whitening)", name, advantages=adv,
                   mask=m, no_std_norm=no_std, whitened=experience.advantages, rows=3, cols=4)

# Dynamic filtering: a group is kept when min_r < mean score < max_r.
for name, scores, bounds in [("all_zero", [0, 0, 0, 0], (0, 1)), ("all_one", [1, 1, 1, 1], (0, 1)),
                             ("mixed", [1, 0, 0, 1], (0, 1)), ("range", [0.2, 0.4, 0.9], (0.3, 0.6)),
                             ("edge", [0.3, 0.3], (0.3, 0.6)), ("negative", [-1, 0.5], (-1, 1)),
                             ("constant_inside", [0.5, 0.5, 0.5], (0, 1)), ("spread_outside", [0.2, 0.4, 0.9], (0.6, 1))]:
    experiences = [types.SimpleNamespace(scores=t([s])) for s in scores]
    args = types.SimpleNamespace(algo=types.SimpleNamespace(dynamic_filtering_range=bounds))
    scope = dict(ns, experiences=experiences, dynamic_filtering=True, logger=types.SimpleNamespace(info=print),
                 self=types.SimpleNamespace(args=args))
    fw.block("openrlhf", SAMPLES, "if dynamic_filtering and all(e.scores is not None", "experiences = []", scope)
    credit_out.add("dynamic_filtering", SAMPLES, "dynamic filtering (avg score in the open range)", name,
                   scores=scores, low=bounds[0], high=bounds[1], kept=len(scope["experiences"]) > 0)

loss_out.write(os.path.join(ROOT, "tests/loss/golden_openrlhf.hpp"))
credit_out.write(os.path.join(ROOT, "tests/credit/golden_openrlhf.hpp"))
