"""Golden values from verl's own functions (see frameworks.py for how they are loaded).

Writes tests/loss/golden_verl.hpp and tests/advantage/golden_verl.hpp.
"""
import math
import os
import sys
import types
from collections import defaultdict

sys.path.insert(0, os.path.dirname(__file__))
import frameworks as fw  # noqa: E402
from frameworks import t  # noqa: E402

import torch  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
CORE, TF = "verl/trainer/ppo/core_algos.py", "verl/utils/torch_functional.py"
RC = "verl/trainer/ppo/rollout_corr_helper.py"

verl_F = types.SimpleNamespace(**fw.functions("verl", TF, ["clip_by_value", "masked_sum", "masked_mean", "masked_var",
                                                          "masked_whiten"], fw.base_namespace()))
ns = fw.base_namespace()
ns.update(verl_F=verl_F, AlgoConfig=type("AlgoConfig", (), {}), ActorConfig=object, DictConfig=object,
          defaultdict=defaultdict, SAFETY_BOUND=20.0)
fw.functions("verl", CORE, ["agg_loss", "compute_value_loss", "compute_policy_loss_reinforce",
                            "compute_policy_loss_dppo_tv", "compute_policy_loss_dppo_kl",
                            "compute_opo_outcome_advantage", "compute_policy_loss_kl_cov",
                            "compute_policy_loss_clip_cov"], ns)
fw.functions("verl", RC, ["_parse_rollout_is_threshold", "compute_is_metrics", "compute_rollout_correction_weights"],
             ns)
fw.constants("verl", RC, ["SUPPORTED_ROLLOUT_RS_OPTIONS", "TOKEN_LEVEL_ROLLOUT_RS_OPTIONS"], ns)
fw.functions("verl", RC, ["_parse_rollout_rs_thresholds", "compute_rs_metrics", "compute_rollout_rejection_mask"], ns)

loss_out = fw.Emitter("verl")
advantage_out = fw.Emitter("verl")
generator = torch.Generator().manual_seed(1818)


def rand(shape, low, high):
    return low + (high - low) * torch.rand(shape, generator=generator, dtype=torch.float64)


def config(**fields):
    base = dict(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2, global_batch_info={})
    base.update(fields)
    return fw.Config(base)


mask = t([[1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0]])
rows, cols = mask.shape

# compute_value_loss: 0.5·agg(max((v − R)², (clip(v, old ± c) − R)²)) and vf_clipfrac.
for name, clip, mode in [("token_mean", 0.5, "token-mean"), ("seq_mean_token_mean", 0.5, "seq-mean-token-mean"),
                         ("seq_mean_token_sum", 0.2, "seq-mean-token-sum"), ("tight", 0.05, "token-mean"),
                         ("token_sum", 0.5, "token-sum"), ("wide", 10.0, "token-mean")]:
    vpreds = rand((rows, cols), -1, 1).requires_grad_(True)
    values = (vpreds + rand((rows, cols), -0.6, 0.6)).detach()
    returns = rand((rows, cols), -1.5, 1.5)
    loss, clipfrac = ns["compute_value_loss"](vpreds, returns, values, mask, clip, loss_agg_mode=mode)
    loss.backward()
    loss_out.add("value_loss", CORE, "compute_value_loss", name, values=vpreds, old_values=values, returns=returns,
                 mask=mask, clip=clip, mode=["token-mean", "token-sum", "seq-mean-token-sum",
                                             "seq-mean-token-mean"].index(mode),
                 loss=loss, clip_fraction=clipfrac, gradient=vpreds.grad, rows=rows, cols=cols)

# masked_whiten: (x − masked mean)·rsqrt(unbiased masked var + 1e-8).
for name, values, m, shift in [("random", rand((3, 5), -2, 2), mask[:3, :5], True),
                               ("no_shift", rand((3, 5), -2, 2), mask[:3, :5], False),
                               ("offset", 1e4 + rand((2, 4), -1, 1), t([[1, 1, 1, 0], [1, 0, 1, 1]]), True),
                               ("two_tokens", t([[3.0, -1.0, 7.0]]), t([[1, 0, 1.0]]), True),
                               ("constant", torch.full((2, 3), 0.25, dtype=torch.float64), t([[1, 1, 1], [1, 0, 0.0]]),
                                True)]:
    whitened = verl_F.masked_whiten(values, m, shift_mean=shift)
    advantage_out.add("masked_whiten", TF, "masked_whiten", name, values=values, mask=m, shift_mean=shift,
                      whitened=whitened, rows=m.shape[0], cols=m.shape[1])

# compute_policy_loss_reinforce: −A·logπ·w, agg_loss, ppo_kl against the rollout log-probs.
for name, mode, with_weights in [("seq_mean_token_sum", "seq-mean-token-sum", False),
                                 ("token_mean", "token-mean", False), ("weights_token_mean", "token-mean", True),
                                 ("weights_seq_mean_token_mean", "seq-mean-token-mean", True),
                                 ("weights_seq_mean_token_sum", "seq-mean-token-sum", True)]:
    x = rand((rows, cols), -3, -0.05).requires_grad_(True)
    rollout = (x + rand((rows, cols), -0.5, 0.5)).detach()
    adv = rand((rows, cols), -2, 2)
    weights = rand((rows, cols), 0, 2) * mask if with_weights else None
    loss, metrics = ns["compute_policy_loss_reinforce"](rollout, x, adv, mask, loss_agg_mode=mode, config=config(),
                                                        rollout_is_weights=weights)
    loss.backward()
    loss_out.add("reinforce_loss", CORE, "compute_policy_loss_reinforce", name, log_probs=x, rollout_log_probs=rollout,
                 advantages=adv, mask=mask, mode=["token-mean", "token-sum", "seq-mean-token-sum",
                                                  "seq-mean-token-mean"].index(mode),
                 is_weights=weights if weights is not None else [], loss=loss, ppo_kl=metrics["actor/ppo_kl"],
                 gradient=x.grad, rows=rows, cols=cols)

# DPPO (binary TV and binary KL): −A·sg(min(r, c))·logπ·valid.
for function in ["dppo_tv", "dppo_kl"]:
    for name, eps, c in [("default", (0.2, 0.2), 3.0), ("asymmetric", (0.1, 0.28), 3.0), ("paper_c", (0.2, 0.2), 20.0),
                         ("tight", (0.02, 0.02), 3.0), ("extreme", (0.2, 0.2), 1.5)]:
        x = rand((rows, cols), -2.5, -0.02)
        old = x + rand((rows, cols), -1.2, 1.2) * (2 if name == "extreme" else 1)
        old = old.clamp(max=-1e-3)
        x = x.requires_grad_(True)
        adv = rand((rows, cols), -2, 2)
        adv[0, 1] = 0.0
        cfg = config(clip_ratio=eps[0], clip_ratio_low=eps[0], clip_ratio_high=eps[1], clip_ratio_c=c)
        loss, metrics = ns["compute_policy_loss_" + function](old, x, adv, mask, loss_agg_mode="token-mean",
                                                              config=cfg)
        loss.backward()
        loss_out.add(function, CORE, "compute_policy_loss_" + function, name, log_probs=x, old_log_probs=old,
                     advantages=adv, mask=mask, epsilon_low=eps[0], epsilon_high=eps[1], clip_ratio_c=c, loss=loss,
                     clip_fraction=metrics["actor/pg_clipfrac"], clip_fraction_lower=metrics["actor/pg_clipfrac_lower"],
                     ppo_kl=metrics["actor/ppo_kl"], gradient=x.grad, rows=rows, cols=cols)

# kl_cov (top-k covariance tokens get + coef·|log r|) and clip_cov (tokens with covariance in (lb, ub) not
# already clipped lose their gradient; a random subset in verl, so every candidate is taken here: ratio high).
for function, cases in [("kl_cov", [("default_k", 0.2, 0.1, None), ("one_token", 1e-4, 1.0, None),
                                    ("many", 0.5, 0.3, None), ("coef_zero", 0.3, 0.0, None), ("large_ratio", 0.9, 0.1,
                                                                                                None)]),
                        ("clip_cov", [("band", 0.9, None, (0.05, 5.0)), ("narrow", 0.9, None, (0.2, 0.8)),
                                      ("wide", 0.9, None, (-1.0, 10.0)), ("none", 0.9, None, (100.0, 200.0)),
                                      ("all_ratio", 1.0, None, (0.0, 3.0))])]:
    for name, ratio, coef, bounds in cases:
        x = rand((rows, cols), -2.5, -0.05)
        old = x + rand((rows, cols), -0.5, 0.5)
        x = x.requires_grad_(True)
        adv = rand((rows, cols), -2, 2)
        policy = (dict(kl_cov_ratio=ratio, ppo_kl_coef=coef) if function == "kl_cov" else
                  dict(clip_cov_ratio=ratio, clip_cov_lb=bounds[0], clip_cov_ub=bounds[1]))
        cfg = config(policy_loss=fw.Config(policy))
        loss, metrics = ns["compute_policy_loss_" + function](old, x, adv, mask, loss_agg_mode="token-mean", config=cfg)
        loss.backward()
        fields = dict(log_probs=x, old_log_probs=old, advantages=adv, mask=mask, ratio=ratio, loss=loss,
                      gradient=x.grad, rows=rows, cols=cols)
        if function == "kl_cov":
            fields.update(coefficient=coef)
        else:
            fields.update(lower=bounds[0], upper=bounds[1], clip_fraction=metrics["actor/pg_clipfrac"])
        loss_out.add(function, CORE, "compute_policy_loss_" + function, name, **fields)

# Rollout importance-sampling weights: token / sequence, TIS / IcePop, batch normalization.
log_ratio = rand((rows, cols), -0.8, 0.8)
log_ratio[2, 3] = 25.0  # past the ±20 safety bound
for name, level, threshold, normalize in [("token_tis", "token", 2.0, False), ("sequence_tis", "sequence", 2.0, False),
                                          ("token_icepop", "token", "0.5_1.5", False),
                                          ("sequence_icepop", "sequence", "0.5_5.0", False),
                                          ("token_tis_normalized", "token", 1.5, True),
                                          ("sequence_tis_normalized", "sequence", 3.0, True),
                                          ("token_icepop_normalized", "token", "0.7_1.3", True)]:
    weights, metrics = ns["compute_rollout_correction_weights"](log_ratio, mask, rollout_is=level,
                                                                rollout_is_threshold=threshold,
                                                                rollout_is_batch_normalize=normalize)
    upper, lower = ns["_parse_rollout_is_threshold"](threshold)
    loss_out.add("rollout_is_weights", RC, "compute_rollout_correction_weights", name, log_ratio=log_ratio,
                 mask=mask, sequence=level == "sequence", upper=upper, lower=lower if lower is not None else -1.0,
                 batch_normalize=normalize, weights=weights, rows=rows, cols=cols)

# OPO: a group whose responses are all empty divides 0 by 0 in verl (NaN); normkit falls back to the mean.
opo_cases = [("all_empty_group", t([[0, 0, 0], [0, 0, 0], [1, 1, 0], [1, 0, 0]]),
              t([[0, 0, 1.0], [0, 0, 0.5], [0, 2.0, 0], [3.0, 0, 0]]))]
for k in range(4):
    lengths = torch.randint(0 if k == 3 else 1, 6, (6,), generator=generator)
    if k == 3:
        lengths[:3] = 0  # the first group all empty
    m = (torch.arange(5).unsqueeze(0) < lengths.unsqueeze(1)).double()
    opo_cases.append((f"random_{k}", m, rand((6, 5), -1, 1) * m))
for name, scores_mask, token_rewards in opo_cases:
    index = ["a", "a", "b", "b"] if scores_mask.shape[0] == 4 else ["a", "a", "a", "b", "b", "b"]
    advantages, _ = ns["compute_opo_outcome_advantage"](token_rewards, scores_mask, index)
    advantage_out.add("opo", CORE, "compute_opo_outcome_advantage", name, token_level_rewards=token_rewards,
                      response_mask=scores_mask, advantages=advantages, rows=scores_mask.shape[0],
                      cols=scores_mask.shape[1], group_size=3 if scores_mask.shape[0] == 6 else 2)

# Rejection sampling (rollout_rs): every option of verl's list on the same inputs, each with its threshold; then
# chained options. Own generator, so the tables above keep their numbers.
rs_generator = torch.Generator().manual_seed(1819)


def rs_rand(shape, low, high):
    return low + (high - low) * torch.rand(shape, generator=rs_generator, dtype=torch.float64)


LEVELS = {"token": 0, "seq_sum": 1, "seq_mean": 2, "seq_max": 3}
LOG2, ABOVE_ONE = math.log(2.0), math.nextafter(1.0, 2.0)
rs_mask = t([[1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0]])
huge = rs_rand((5, 6), -30, 30)
huge[0, 1], huge[0, 4], huge[1, 5] = math.inf, math.nan, -math.inf  # inf kept (clamped), NaN and -inf masked
huge[2, 2] = -math.inf
nan_row = rs_rand((5, 6), -0.3, 0.3)
nan_row[2, 3] = math.nan  # a NaN under the mask: its token (token level) or its row (sequence level) rejected
# The bounds themselves (k1: -d = log 0.5 and log 2; k2: d = ±1 against 0.5) and one ulp past them, one row each.
ties = t([[LOG2, -LOG2, 0.0, 0.0], [1.0, -1.0, 0.0, 0.0], [ABOVE_ONE, 0.0, 0.0, 0.0], [-LOG2, 0.0, 0.0, 0.0],
          [math.nextafter(LOG2, 1.0), 0.0, 0.0, 0.0], [LOG2, LOG2, 0.0, 0.0]])
ties_mask = t([[1, 1, 0, 0], [1, 1, 0, 0], [1, 0, 0, 0], [1, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0]])
# A k1 lower bound above 1: a mean lying on it is moved off it by verl's Σm + 1e-8 (rejected).
above = t([[-math.log(1.5), -math.log(1.5)], [-math.log(1.5), 0.0], [-math.log(2.9), -math.log(1.6)]])
above_mask = t([[1, 1], [1, 0], [1, 1]])
datasets = [
    ("random", rs_rand((5, 6), -0.8, 0.8), rs_mask),
    ("wide", rs_rand((5, 6), -3.0, 3.0), rs_mask),
    ("huge", huge, rs_mask),
    ("masked_nan", nan_row, rs_mask),
    ("single_token", rs_rand((6, 1), -1.0, 1.0), t([[1], [1], [0], [1], [1], [1]])),
    ("ties", ties, ties_mask),
    ("k1_lower_above_one", above, above_mask),
]
# Thresholds per option and data set: (upper, lower) for k1 (lower None: verl's 1/upper), upper for k2 and k3.
scale = {"token": 1.0, "seq_sum": 4.0, "seq_mean": 0.7, "seq_max": 1.5}
k1_scale = {"token": 1.0, "seq_sum": 2.0, "seq_mean": 0.7}
k1_bounds = {"random": (1.6, 0.6), "wide": (4.0, None), "huge": (1e6, 1e-6), "masked_nan": (1.4, 0.7),
             "single_token": (1.8, 0.9), "ties": (2.0, 0.5), "k1_lower_above_one": (3.0, 1.5)}
k23_upper = {"random": 0.15, "wide": 1.0, "huge": 50.0, "masked_nan": 0.03, "single_token": 0.2, "ties": 0.5,
             "k1_lower_above_one": 0.1}


def rs_case(name, criteria, log_ratio, m, shared_spec=None):
    options = ",".join(option for option, _ in criteria)
    specs = shared_spec if shared_spec is not None else ",".join(spec for _, spec in criteria)
    keep, metrics = ns["compute_rollout_rejection_mask"](log_ratio, m, rollout_rs=options, rollout_rs_threshold=specs)
    parsed = ns["_parse_rollout_rs_thresholds"]([option for option, _ in criteria], specs)
    levels, statistics, uppers, lowers = [], [], [], []
    for option, _ in criteria:
        level, statistic = option.rsplit("_", 1)
        levels.append(LEVELS[level])
        statistics.append(int(statistic[1]) - 1)
        uppers.append(parsed[option]["upper"])
        lowers.append(parsed[option]["lower"] if parsed[option]["lower"] is not None else -1.0)
    loss_out.add("rollout_rs_mask", RC, "compute_rollout_rejection_mask", name, log_ratio=log_ratio, mask=m,
                 level=levels, statistic=statistics, upper=uppers, lower=lowers, keep=keep,
                 masked_fraction=metrics["rollout_rs_masked_fraction"], rows=m.shape[0], cols=m.shape[1])


def spec(option, dataset):
    level, statistic = option.rsplit("_", 1)
    if statistic == "k1":
        upper, lower = k1_bounds[dataset]
        if level != "token" and dataset not in ("ties", "k1_lower_above_one", "huge"):
            upper, lower = upper ** k1_scale[level], (lower ** k1_scale[level] if lower is not None else None)
        return repr(upper) if lower is None else f"{lower!r}_{upper!r}"
    upper = k23_upper[dataset]
    if dataset not in ("ties", "k1_lower_above_one"):
        upper *= scale[level]
    if dataset == "ties" and level == "seq_sum":
        upper = 1.0  # two tokens of ½ each sum to the bound exactly
    return repr(upper)


for option in sorted(ns["SUPPORTED_ROLLOUT_RS_OPTIONS"]):
    for dataset, log_ratio, m in datasets:
        if dataset == "k1_lower_above_one" and not option.endswith("k1"):
            continue
        rs_case(f"{option}/{dataset}", [(option, spec(option, dataset))], log_ratio, m)
# Chained options: all must pass, each on the original mask; one threshold may serve every option.
for name, criteria, dataset in [("token_k1+seq_max_k3", [("token_k1", "0.5_2.0"), ("seq_max_k3", "0.2")], 0),
                                ("seq_mean_k1+token_k2", [("seq_mean_k1", "0.8_1.25"), ("token_k2", "0.2")], 0),
                                ("seq_sum_k3+seq_mean_k2", [("seq_sum_k3", "0.6"), ("seq_mean_k2", "0.1")], 0),
                                ("token_k3+seq_sum_k1", [("token_k3", "0.15"), ("seq_sum_k1", "0.3_3.0")], 0),
                                ("three", [("token_k1", "0.5_2.0"), ("seq_max_k2", "0.3"), ("seq_mean_k3", "0.2")], 0),
                                ("shared_huge", [("token_k2", "50.0"), ("seq_max_k3", "50.0")], 2)]:
    _, log_ratio, m = datasets[dataset]
    rs_case(f"chained/{name}", criteria, log_ratio, m, shared_spec="50.0" if name == "shared_huge" else None)

loss_out.write(os.path.join(ROOT, "tests/loss/golden_verl.hpp"))
advantage_out.write(os.path.join(ROOT, "tests/advantage/golden_verl.hpp"))
