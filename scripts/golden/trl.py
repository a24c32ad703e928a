"""Golden values from TRL's own code (see frameworks.py for how it is loaded).

GRPOTrainer._compute_loss runs as TRL wrote it on a stand-in trainer whose model returns the given
log-probs; the RLOO advantages and the vLLM importance-sampling ratio are inline in the trainers'
long methods, so their lines are run as a block. Writes tests/loss/golden_trl.hpp and
tests/advantage/golden_trl.hpp.
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
GRPO, RLOO, UTILS = "trl/trainer/grpo_trainer.py", "trl/trainer/rloo_trainer.py", "trl/trainer/utils.py"

ns = fw.base_namespace()
fw.functions("trl", UTILS, ["nanstd", "nanmin", "nanmax"], ns)
Trainer = fw.methods("trl", GRPO, "GRPOTrainer", ["_compute_loss", "get_off_policy_mask", "get_gamma_weights"], ns)

loss_out = fw.Emitter("trl")
advantage_out = fw.Emitter("trl")
generator = torch.Generator().manual_seed(1819)


def rand(shape, low, high):
    return low + (high - low) * torch.rand(shape, generator=generator, dtype=torch.float64)


class Accelerator:
    num_processes = 1
    sync_gradients = True

    def gather(self, x):
        return x

    gather_for_metrics = gather

    def reduce(self, x, reduction="sum"):
        return x


def trainer(loss_type, level="token", beta=0.0, delta=None, bias_kl=False, opsm=None, vllm_is=False, epsilon=(0.2, 0.2),
            max_completion_length=8):
    self = Trainer.__new__(Trainer)
    args = types.SimpleNamespace(delta=delta, use_bias_correction_kl=bias_kl, sapo_temperature_pos=1.0,
                                 sapo_temperature_neg=1.05, vespo_k_pos=2.0, vespo_lambda_pos=3.0, vespo_k_neg=3.0,
                                 vespo_lambda_neg=2.0, entropy_target=0.2)
    self.__dict__.update(args=args, loss_type=loss_type, importance_sampling_level=level, beta=beta,
                         off_policy_mask_threshold=opsm, epsilon_low=epsilon[0], epsilon_high=epsilon[1],
                         top_entropy_quantile=1.0, use_vllm=vllm_is, vllm_importance_sampling_correction=vllm_is,
                         model=types.SimpleNamespace(training=True), current_gradient_accumulation_steps=1,
                         max_completion_length=max_completion_length, accelerator=Accelerator(),
                         _entropy_bonus_enabled=False, aux_loss_enabled=False,
                         _metrics={"train": defaultdict(list), "eval": defaultdict(list)})
    return self


def run_loss(table, name, options, x, old, advantages, mask, ref=None, sampling=None, is_ratio=None, **extra):
    self = trainer(**options)
    x = x.clone().requires_grad_(True)
    entropies = torch.zeros_like(x)
    self._get_per_token_logps_and_entropies = lambda *a, **k: (x, entropies, None)
    B, T = x.shape
    inputs = {"prompt_ids": torch.zeros((B, 0), dtype=torch.long), "prompt_mask": torch.zeros((B, 0), dtype=torch.long),
              "completion_ids": torch.zeros((B, T), dtype=torch.long), "completion_mask": mask,
              "advantages": advantages, "old_per_token_logps": old, "num_items_in_batch": mask.sum()}
    if ref is not None:
        inputs["ref_per_token_logps"] = ref
    if sampling is not None:
        inputs["sampling_per_token_logps"] = sampling
    if is_ratio is not None:
        inputs["importance_sampling_ratio"] = is_ratio
    loss = self._compute_loss(None, inputs)
    loss.backward()
    fields = dict(log_probs=x, old_log_probs=old, advantages=advantages, mask=mask, loss=loss, gradient=x.grad, rows=B,
                  cols=T, epsilon_low=options.get("epsilon", (0.2, 0.2))[0],
                  epsilon_high=options.get("epsilon", (0.2, 0.2))[1])
    if ref is not None:
        fields.update(ref_log_probs=ref, beta=options["beta"])
    if sampling is not None:
        fields.update(sampling_log_probs=sampling)
    if is_ratio is not None:
        fields.update(is_ratio=is_ratio)
    fields.update(extra)
    loss_out.add(table, GRPO, "GRPOTrainer._compute_loss", name, **fields)


def data(B=4, T=6, spread=0.6, empty_row=True):
    x = rand((B, T), -2.5, -0.05)
    old = x + rand((B, T), -spread, spread)
    adv = rand((B,), -2, 2)
    lengths = [T - 2, 2, T, 0 if empty_row else 3][:B]
    mask = torch.tensor([[1.0 if j < n else 0.0 for j in range(T)] for n in lengths], dtype=torch.float64)
    return x, old, adv, mask


# delta at importance_sampling_level="sequence": the case, then random ones.
run_loss("delta_sequence", "issue", dict(loss_type="grpo", level="sequence", delta=1.5), t([[0.0]]), t([[-1.0]]),
         t([-1.0]), t([[1.0]]), delta=1.5)
for k, (delta, spread) in enumerate([(1.5, 0.6), (1.3, 1.0), (2.0, 1.5), (1.25, 0.3)]):
    x, old, adv, mask = data(spread=spread)
    run_loss("delta_sequence", f"random_{k}", dict(loss_type="grpo", level="sequence", delta=delta), x, old, adv, mask,
             delta=delta)
x, old, adv, mask = data(spread=1.0)
run_loss("delta_sequence", "token_level", dict(loss_type="grpo", level="token", delta=1.4), x, old, adv, mask,
         delta=1.4, token_level=1.0)

# SAPO at sequence level.
for k, spread in enumerate([0.2, 0.6, 1.2, 2.5, 0.05]):
    x, old, adv, mask = data(spread=spread)
    run_loss("sapo_sequence", f"random_{k}", dict(loss_type="sapo", level="sequence"), x, old, adv, mask)

# LUSPO (sequence level: mean over B of ℓ_i·|o_i|).
for k, spread in enumerate([0.1, 0.5, 1.0, 2.0, 0.3]):
    x, old, adv, mask = data(spread=spread)
    run_loss("luspo", f"random_{k}", dict(loss_type="luspo", level="sequence", epsilon=(0.2, 0.28)), x, old, adv, mask)

# VESPO (token level; the sequence weight is computed inside), with and without the vLLM IS ratio.
for k, spread in enumerate([0.05, 0.2, 0.5, 1.0]):
    x, old, adv, mask = data(spread=spread)
    run_loss("vespo", f"random_{k}", dict(loss_type="vespo"), x, old, adv, mask)
x, old, adv, mask = data(spread=0.2)
is_ratio = rand(x.shape, 0.5, 1.5) * mask
run_loss("vespo", "is_ratio", dict(loss_type="vespo", vllm_is=True), x, old, adv, mask, is_ratio=is_ratio)

# use_bias_correction_kl: β·k3·coef_1.
for k, (loss_type, level) in enumerate([("grpo", "token"), ("dapo", "token"), ("bnpo", "token"), ("grpo", "sequence"),
                                        ("dapo", "token")]):
    x, old, adv, mask = data(spread=0.4)
    ref = x + rand(x.shape, -0.7, 0.7)
    run_loss("bias_correction_kl", f"{loss_type}_{level}_{k}",
             dict(loss_type=loss_type, level=level, beta=0.04 * (k + 1), bias_kl=True), x, old, adv, mask, ref=ref,
             sequence_level=1.0 if level == "sequence" else 0.0, loss_type=["grpo", "bnpo", "dapo"].index(loss_type))

# off_policy_mask_threshold (OPSM): a sequence with A < 0 and mean(sampling − logπ) > δ is dropped.
for k, (threshold, spread) in enumerate([(0.0, 0.5), (0.1, 0.5), (0.05, 1.0), (-0.1, 0.3), (0.5, 2.0)]):
    x, old, adv, mask = data(spread=spread)
    sampling = old + rand(x.shape, -spread, spread)
    run_loss("off_policy_mask", f"random_{k}", dict(loss_type="dapo", opsm=threshold), x, old, adv, mask,
             sampling=sampling, threshold=threshold)

# vLLM importance-sampling ratio, the four modes (a block of _generate_and_score_completions), and the
# loss it multiplies.
for mode, clip_min, clip_max in [("token_truncate", None, 3.0), ("token_mask", 0.5, 2.0), ("sequence_truncate", None, 3.0),
                                 ("sequence_mask", None, 3.0), ("sequence_mask", 0.5, 1.5), ("token_truncate", 0.8, 1.2)]:
    x, old, adv, mask = data(spread=0.3)
    sampling = old + rand(x.shape, -0.6, 0.6)
    scope = dict(ns, old_per_token_logps=old, sampling_per_token_logps=sampling, completion_mask=mask, tool_mask=None,
                 self=types.SimpleNamespace(use_vllm=True, vllm_importance_sampling_correction=True,
                                            vllm_importance_sampling_mode=mode,
                                            vllm_importance_sampling_clip_min=clip_min,
                                            vllm_importance_sampling_clip_max=clip_max))
    scope2 = dict(scope, mask=mask)
    fw.block("trl", GRPO, "per_token_logps_diff = (old_per_token_logps - sampling_per_token_logps) * mask",
             "invalid_mis_mask, value=0.0", scope2, extra_lines=1)
    ratio = scope2["vllm_importance_sampling_ratio"]
    loss_out.add("vllm_is_ratio", GRPO, "vLLM importance-sampling ratio (_generate_and_score_completions)",
                 mode + f"_{clip_min}_{clip_max}", old_log_probs=old, sampling_log_probs=sampling, mask=mask,
                 sequence=mode.startswith("sequence"), truncate=mode.endswith("truncate"),
                 clip_min=clip_min if clip_min is not None else -1.0, clip_max=clip_max,
                 ratio=ratio.expand_as(old), rows=x.shape[0], cols=x.shape[1])
    run_loss("vllm_is_loss", mode + f"_{clip_min}_{clip_max}", dict(loss_type="dapo", vllm_is=True), x, old, adv, mask,
             is_ratio=ratio)

# RLOOTrainer advantages (the block of _generate_and_score_completions from the unscorable mask to nan_to_num).
for name, rewards_per_func, G, normalize, clip, beta in [
        ("issue", [[math.nan], [1.0], [0.0], [1.0]], 2, True, None, 0.0),
        ("plain", [[0.5], [1.0], [0.0], [2.0], [1.5], [-1.0]], 3, False, None, 0.0),
        ("normalized", [[0.5], [1.0], [0.0], [2.0], [1.5], [-1.0]], 3, True, None, 0.0),
        ("clip", [[5.0], [-3.0], [0.2], [0.9], [4.0], [1.0]], 2, True, (-1.0, 2.0), 0.0),
        ("kl", [[1.0], [0.0], [1.0], [1.0], [0.0], [0.5]], 3, False, None, 0.05),
        ("clip_kl_normalized", [[3.0], [math.nan], [1.0], [-2.0], [0.5], [0.0], [math.nan], [math.nan]], 4, True,
         (-1.0, 1.0), 0.1),
        ("two_functions", [[1.0, math.nan], [math.nan, math.nan], [0.0, 2.0], [1.0, 1.0]], 2, True, None, 0.0)]:
    rpf = t(rewards_per_func)
    n = rpf.shape[0]
    old = rand((n, 3), -2, -0.1)
    ref = old + rand((n, 3), -0.5, 0.5)
    cmask = t([[1, 1, 0]] * n)
    scope = dict(ns, rewards_per_func=rpf, num_generations=G, device="cpu", old_per_token_logps=old,
                 ref_per_token_logps=ref, completion_mask=cmask, gather=lambda x: x,
                 self=types.SimpleNamespace(reward_weights=torch.ones(rpf.shape[1], dtype=torch.float64),
                                            reward_clip_range=clip, beta=beta, normalize_advantages=normalize))
    fw.block("trl", RLOO, "unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)",
             "advantages = torch.nan_to_num(advantages, nan=0.0)", scope)
    kl = (old - ref).mul(cmask).sum(-1)
    advantage_out.add("rloo", RLOO, "RLOOTrainer._generate_and_score_completions (advantages)", name,
                      rewards_per_func=rpf, functions=rpf.shape[1], group_size=G, normalize=normalize,
                      clip_low=clip[0] if clip else -math.inf, clip_high=clip[1] if clip else math.inf, beta=beta,
                      sequence_kl=kl, advantages=scope["advantages"])

loss_out.write(os.path.join(ROOT, "tests/loss/golden_trl.hpp"))
advantage_out.write(os.path.join(ROOT, "tests/advantage/golden_trl.hpp"))
