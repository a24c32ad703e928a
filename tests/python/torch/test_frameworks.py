"""normkit.frameworks: the verl / TRL / OpenRLHF drop-ins against the golden values the C++ tests hold
(tests/*/golden_<framework>.hpp, written from the frameworks' own functions by scripts/golden/), against
torch compositions of the frameworks' formulas (ragged string uids, singletons, all-masked rows), and
their gradients against torch.autograd.gradcheck (float64).

The golden tables are read from the C++ headers themselves, so both test suites see the same numbers.
"""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from golden import tables  # noqa: E402
from normkit.frameworks import openrlhf, trl, verl  # noqa: E402

D = torch.float64


def golden(path, table):
    """[(name, {key: [floats]})] of one table of a tests/<module>/golden_<framework>.hpp header."""
    module, header = path.split("/")[1:3]
    return tables(module)[f"{header[len('golden_'):-len('.hpp')]}.{table}"]


def mat(c, key, cols=None):
    rows = int(c["rows"][0])
    return torch.tensor(c[key], dtype=D).reshape(rows, -1 if cols is None else cols)


def close(a, b, rtol=1e-10, atol=1e-12):
    a = torch.as_tensor(a, dtype=D)
    b = torch.as_tensor(b, dtype=D).reshape(a.shape)
    assert torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True), (a, b)


# ------------------------------------------------------------------------------------------------ verl

def grpo_reference(rewards, mask, index, eps=1e-6, norm=True, mode="grpo"):
    """A torch composition of verl's outcome estimators (mean 0 / std 1 for a group of one)."""
    scores = rewards.sum(-1)
    out = torch.zeros_like(scores)
    for uid in set(index.tolist()):
        members = [i for i, u in enumerate(index.tolist()) if u == uid]
        s = scores[members]
        n = len(members)
        mean = s.mean() if n > 1 else torch.tensor(0.0, dtype=D)
        std = s.std() if n > 1 else torch.tensor(1.0, dtype=D)
        if mode == "grpo":
            a = (s - mean) / (std + eps) if norm else s - mean
        elif mode == "rloo":
            a = (s * n / (n - 1) - mean * n / (n - 1)) if n > 1 else s
        elif mode == "rloo_vectorized":
            a = (s * n / (n - 1) - mean * n / (n - 1)) if n > 1 else torch.zeros_like(s)
        out[members] = a
    return out.unsqueeze(-1) * mask


@pytest.fixture
def batch():
    g = torch.Generator().manual_seed(7)
    rewards = torch.rand((7, 5), generator=g, dtype=D) * (torch.rand((7, 5), generator=g) < 0.5)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0],
                         [1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], dtype=D)
    rewards = rewards * mask
    index = np.array(["q-b", "q-a", "q-b", "q-c", "q-a", "q-b", "q-a"], dtype=object)  # ragged, any order, a singleton
    return rewards, mask, index


@pytest.mark.parametrize("norm", [True, False])
def test_verl_grpo_ragged_string_uids(batch, norm):
    rewards, mask, index = batch
    for f in (verl.compute_grpo_outcome_advantage, verl.compute_grpo_vectorized_outcome_advantage):
        advantages, returns = f(rewards, mask, index, norm_adv_by_std_in_grpo=norm)
        assert advantages is returns and advantages.shape == rewards.shape and advantages.dtype == D
        close(advantages, grpo_reference(rewards, mask, index, norm=norm))
        assert torch.all(advantages[2] == 0)  # the all-masked row: its score still enters the group statistics
    # integer uids, and epsilon
    a, _ = verl.compute_grpo_outcome_advantage(rewards, mask, np.array([5, 9, 5, 1, 9, 5, 9]), epsilon=0.1)
    close(a, grpo_reference(rewards, mask, index, eps=0.1))
    a32, _ = verl.compute_grpo_outcome_advantage(rewards.float(), mask.float(), index)
    assert a32.dtype == torch.float32
    close(a32, grpo_reference(rewards, mask, index), rtol=1e-5, atol=1e-6)


def test_verl_rloo_and_vectorized(batch):
    rewards, mask, index = batch
    close(verl.compute_rloo_outcome_advantage(rewards, mask, index)[0], grpo_reference(rewards, mask, index, mode="rloo"))
    close(verl.compute_rloo_vectorized_outcome_advantage(rewards, mask, index)[0],
          grpo_reference(rewards, mask, index, mode="rloo_vectorized"))


def test_verl_passk_gpg_baseline(batch):
    rewards, mask, index = batch
    scores = rewards.sum(-1)
    two = np.array(["x", "y", "x", "y", "x", "y", "x"], dtype=object)
    for norm in (True, False):
        a, _ = verl.compute_grpo_passk_outcome_advantage(rewards, mask, two, config={"norm_adv_by_std_in_grpo": norm})
        expected = torch.zeros_like(scores)
        for uid in ("x", "y"):
            members = [i for i, u in enumerate(two) if u == uid]
            s = scores[members]
            top, at = torch.topk(s, 2)
            expected[members[at[0]]] = (top[0] - top[1]) / ((s.std() + 1e-6) if norm else 1.0)
        close(a, expected.unsqueeze(-1) * mask)
    with pytest.raises(ValueError):
        verl.compute_grpo_passk_outcome_advantage(rewards, mask, index, config={})  # q-c has one sample
    # GPG: α(r − μ_g)/f_norm, α = B / #nonzero scores
    alpha = scores.numel() / max(1, int(torch.count_nonzero(scores)))
    expected = alpha * grpo_reference(rewards, mask, index, norm=False) / 2.0
    close(verl.compute_gpg_outcome_advantage(rewards, mask, index, f_norm=2.0)[0], expected)
    # REINFORCE++-baseline: r − μ_g tiled, whitened over the valid tokens (unbiased, √(v + 1e-8)), × mask
    centred = grpo_reference(rewards, torch.ones_like(mask), index, norm=False) * mask
    n = mask.sum()
    mean = (centred * mask).sum() / n
    var = (((centred - mean) ** 2) * mask).sum() / n * n / (n - 1)
    close(verl.compute_reinforce_plus_plus_baseline_outcome_advantage(rewards, mask, index)[0],
          (centred - mean) * torch.rsqrt(var + 1e-8) * mask, rtol=1e-8)


def test_verl_token_estimators(batch):
    rewards, mask, _ = batch
    mask = mask.clone()
    mask[1, 2] = 0  # an observation token inside a response
    gamma = 0.9
    returns = torch.zeros_like(rewards)
    running = torch.zeros(rewards.shape[0], dtype=D)
    for t in reversed(range(rewards.shape[1])):
        new = rewards[:, t] + gamma * running
        returns[:, t] = new * mask[:, t]
        running = new * mask[:, t] + running * (1 - mask[:, t])
    n = mask.sum()
    mean = (returns * mask).sum() / n
    var = (((returns - mean) ** 2) * mask).sum() / n * n / (n - 1)
    a, r = verl.compute_reinforce_plus_plus_outcome_advantage(rewards, mask, config={"gamma": gamma})
    close(r, returns)
    close(a, (returns - mean) * torch.rsqrt(var + 1e-8) * mask, rtol=1e-8)
    baselines = torch.linspace(-1, 1, rewards.shape[0], dtype=D)
    a, r = verl.compute_remax_outcome_advantage(rewards, baselines, mask)
    expected = (rewards * mask).flip(-1).cumsum(-1).flip(-1)
    close(r, expected)
    close(a, expected - baselines.unsqueeze(-1) * mask)


def test_verl_golden_masked_whiten():
    for name, c in golden("tests/advantage/golden_verl.hpp", "masked_whiten"):
        out = verl.masked_whiten(mat(c, "values"), mat(c, "mask"), shift_mean=bool(c["shift_mean"][0]))
        # verl's masked_mean divides by Σm + 1e-8; normkit takes the exact mean (the C++ test's tolerance)
        atol = 2e-4 if name in ("offset", "constant") else 1e-9
        close(out, c["whitened"], rtol=5e-8, atol=atol)
    with pytest.raises(ValueError):
        verl.masked_whiten(torch.ones(2, 2, dtype=D), torch.tensor([[1.0, 0], [0, 0]], dtype=D))


def test_verl_golden_opo():
    for name, c in golden("tests/advantage/golden_verl.hpp", "opo"):
        rewards, mask = mat(c, "token_level_rewards"), mat(c, "response_mask")
        G = int(c["group_size"][0])
        index = np.array([f"uid{i // G}" for i in range(rewards.shape[0])], dtype=object)
        a, r = verl.compute_opo_outcome_advantage(rewards, mask, index)
        assert a is r
        expected = torch.tensor(c["advantages"], dtype=D).reshape(a.shape)
        valid = ~torch.isnan(expected)  # an all-empty group: verl 0/0, normkit the unweighted mean
        close(a[valid], expected[valid])


def vanilla_reference(old, x, adv, mask, low=0.2, high=0.2, c=3.0, mode="token-mean", w=None):
    d = torch.clamp(x - old, -20, 20)
    ratio = torch.exp(d)
    l1, l2 = -adv * ratio, -adv * torch.clamp(ratio, 1 - low, 1 + high)
    lc = torch.maximum(l1, l2)
    loss = torch.where(adv < 0, torch.min(-adv * c, lc), lc)
    if w is not None:
        loss = loss * w
    return agg_reference(loss, mask, mode), (l2 > l1).to(D), -d


def agg_reference(loss, mask, mode, L=None):
    rows = (mask.sum(-1) > 0).to(D)
    if mode == "token-mean":
        return (loss * mask).sum() / mask.sum()
    if mode == "token-sum":
        return (loss * mask).sum()
    if mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm"):
        out = ((loss * mask).sum(-1) * rows).sum() / rows.sum()
        return out / (mask.shape[-1] if L is None else L) if mode.endswith("norm") else out
    per_row = (loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    return (per_row * rows).sum() / rows.sum()


@pytest.fixture
def policy():
    g = torch.Generator().manual_seed(11)
    x = -3 * torch.rand((4, 6), generator=g, dtype=D)
    old = x + 0.8 * (torch.rand((4, 6), generator=g, dtype=D) - 0.5)
    adv = 2 * torch.rand((4, 6), generator=g, dtype=D) - 1
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0]], dtype=D)
    return x, old, adv, mask


MODES = ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


@pytest.mark.parametrize("mode", MODES)
def test_verl_vanilla_loss_and_gradient(policy, mode):
    x, old, adv, mask = policy
    config = {"clip_ratio": 0.2, "clip_ratio_high": 0.28, "clip_ratio_c": 3.0, "global_batch_info": {}}
    lp = x.clone().requires_grad_(True)
    loss, metrics = verl.compute_policy_loss_vanilla(old, lp, adv, mask, loss_agg_mode=mode, config=config)
    assert loss.shape == () and loss.dtype == D
    assert set(metrics) == {"actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"}
    ref_x = x.clone().requires_grad_(True)
    expected, clipped, neg_kl = vanilla_reference(old, ref_x, adv, mask, 0.2, 0.28, 3.0, mode)
    close(loss, expected)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(float((clipped * mask).sum() / mask.sum()), abs=1e-12)
    assert metrics["actor/ppo_kl"] == pytest.approx(float((neg_kl * mask).sum() / mask.sum()), abs=1e-12)
    loss.backward()
    expected.backward()
    close(lp.grad, ref_x.grad)
    assert torch.all(lp.grad[3] == 0)  # the all-masked row
    assert torch.autograd.gradcheck(
        lambda t: verl.compute_policy_loss_vanilla(old, t, adv, mask, mode, config)[0], (x.clone().requires_grad_(),))


def test_verl_compute_policy_loss_tuple_and_weights(policy):
    x, old, adv, mask = policy
    out = verl.compute_policy_loss(old, x, adv, mask, cliprange=0.2)
    assert len(out) == 4 and all(isinstance(t, torch.Tensor) and t.shape == () for t in out)
    close(out[0], vanilla_reference(old, x, adv, mask)[0])
    w = torch.rand(x.shape, dtype=D, generator=torch.Generator().manual_seed(3)) + 0.5
    loss, _ = verl.compute_policy_loss_vanilla(old, x, adv, mask, config={"clip_ratio": 0.2}, rollout_is_weights=w)
    close(loss, vanilla_reference(old, x, adv, mask, w=w)[0])
    with pytest.raises(AssertionError):
        verl.compute_policy_loss_vanilla(old, x, adv, mask, config={"clip_ratio": 0.2, "clip_ratio_c": 1.0})


@pytest.mark.parametrize("mode", MODES)
def test_verl_agg_loss(policy, mode):
    x, _, _, mask = policy
    close(verl.agg_loss(x, mask, mode), agg_reference(x, mask, mode))
    assert torch.autograd.gradcheck(lambda t: verl.agg_loss(t, mask, mode), (x.clone().requires_grad_(),))
    # global denominators and dp_size
    if mode == "token-mean":
        close(verl.agg_loss(x, mask, mode, dp_size=2, batch_num_tokens=30), (x * mask).sum() / 30 * 2)
    if mode == "seq-mean-token-sum-norm":
        close(verl.agg_loss(x, mask, mode, loss_scale_factor=100), agg_reference(x, mask, mode, L=100))
    with pytest.raises(ValueError):
        verl.agg_loss(x, mask, "seq-mean", 1)
    if mode != "token-sum":
        with pytest.raises(ValueError):
            verl.agg_loss(x, mask, mode, dp_size=2)


@pytest.mark.parametrize("name", ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "k3+", "k1+", "abs+"])
def test_verl_kl_penalty(policy, name):
    x, old, _, _ = policy
    ref = old.clone()
    ref[0, 0] = x[0, 0] + 25  # the ±20 / ±10 clamps of k3
    base = name.rstrip("+")
    d = x - ref
    forward = {"kl": d, "k1": d, "abs": d.abs(), "mse": 0.5 * d ** 2, "k2": 0.5 * d ** 2}.get(base)
    if forward is None:
        k = torch.clamp(ref - x, -20, 20)
        forward = torch.clamp(torch.exp(k) - k - 1, -10, 10)
    value = verl.kl_penalty(x, ref, name)
    close(value, forward)
    if name.endswith("+"):
        lp = x.clone().requires_grad_(True)
        verl.kl_penalty(lp, ref, name).sum().backward()
        close(lp.grad, x - ref)  # k2's gradient
    else:
        assert torch.autograd.gradcheck(lambda a, b: verl.kl_penalty(a, b, name),
                                        (x.clone().requires_grad_(), old.clone().requires_grad_()))
    with pytest.raises(NotImplementedError):
        verl.kl_penalty(x, ref, "full")


VERL_MODES = ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean"]  # the tables' "mode" index


def test_verl_golden_reinforce_loss():
    cases = golden("tests/loss/golden_verl.hpp", "reinforce_loss")
    assert len(cases) >= 5
    for name, c in cases:
        x = mat(c, "log_probs").requires_grad_(True)
        mode = VERL_MODES[int(c["mode"][0])]
        weights = mat(c, "is_weights") if c["is_weights"] else None
        loss, metrics = verl.compute_policy_loss_reinforce(mat(c, "rollout_log_probs"), x, mat(c, "advantages"),
                                                           mat(c, "mask"), loss_agg_mode=mode, config={},
                                                           rollout_is_weights=weights)
        assert set(metrics) == {"actor/ppo_kl"} and loss.dtype == D
        # verl's seq-mean-token-mean divides each row by |o_i| + 1e-8 (the C++ test's tolerance)
        rtol = 5e-8 if mode == "seq-mean-token-mean" else 1e-10
        close(loss, c["loss"][0], rtol=rtol)
        # verl's masked_mean divides by Σm + 1e-8
        assert metrics["actor/ppo_kl"] == pytest.approx(c["ppo_kl"][0], rel=1e-8, abs=1e-12)
        loss.backward()
        close(x.grad, c["gradient"], rtol=rtol)
        assert torch.autograd.gradcheck(
            lambda t: verl.compute_policy_loss_reinforce(mat(c, "rollout_log_probs"), t, mat(c, "advantages"),
                                                         mat(c, "mask"), mode, {}, weights)[0],
            (mat(c, "log_probs").requires_grad_(),))


@pytest.mark.parametrize("function", ["dppo_tv", "dppo_kl"])
def test_verl_golden_dppo(function):
    cases = golden("tests/loss/golden_verl.hpp", function)
    assert len(cases) >= 5
    f = getattr(verl, "compute_policy_loss_" + function)
    for name, c in cases:
        x = mat(c, "log_probs").requires_grad_(True)
        low, high = c["epsilon_low"][0], c["epsilon_high"][0]
        config = {"clip_ratio": low, "clip_ratio_low": low, "clip_ratio_high": high,
                  "clip_ratio_c": c["clip_ratio_c"][0], "global_batch_info": {}}
        loss, metrics = f(mat(c, "old_log_probs"), x, mat(c, "advantages"), mat(c, "mask"), config=config)
        close(loss, c["loss"][0])
        assert metrics["actor/pg_clipfrac"] == pytest.approx(c["clip_fraction"][0], rel=1e-8, abs=1e-12)
        assert metrics["actor/pg_clipfrac_lower"] == pytest.approx(c["clip_fraction_lower"][0], rel=1e-8, abs=1e-12)
        assert metrics["actor/ppo_kl"] == pytest.approx(c["ppo_kl"][0], rel=1e-8, abs=1e-12)
        loss.backward()
        close(x.grad, c["gradient"])  # sg(min(r, c)): not the forward value's derivative, so no gradcheck


def test_verl_dppo_clip_ratio_c_default(policy):
    x, old, adv, mask = policy
    old = old.clamp(max=-1e-3)
    # verl's config.get("clip_ratio_c", 20.0): a config without the field takes 20; None takes ActorConfig's 3.0
    for config, c in [({"clip_ratio": 0.2}, 20.0), (None, 3.0)]:
        got = verl.compute_policy_loss_dppo_tv(old, x, adv, mask, config=config)[0]
        expected = verl.compute_policy_loss_dppo_tv(old, x, adv, mask, config={"clip_ratio": 0.2, "clip_ratio_c": c})[0]
        assert float(got) == float(expected)
    ratio = torch.exp(x - old)
    p, p_old = torch.exp(x), torch.exp(old)
    valid = torch.where(adv > 0, p - p_old <= 0.2, p - p_old >= -0.2).to(D)
    close(verl.compute_policy_loss_dppo_tv(old, x, adv, mask)[0],
          agg_reference(-adv * ratio.clamp(max=3.0) * x * valid, mask, "token-mean"))


@pytest.mark.parametrize("function", ["kl_cov", "clip_cov"])
def test_verl_golden_covariance_losses(function):
    cases = golden("tests/loss/golden_verl.hpp", function)
    assert len(cases) >= 5
    f = getattr(verl, "compute_policy_loss_" + function)
    for name, c in cases:
        x = mat(c, "log_probs").requires_grad_(True)
        old, adv, mask = mat(c, "old_log_probs"), mat(c, "advantages"), mat(c, "mask")
        if function == "kl_cov":
            policy = {"kl_cov_ratio": c["ratio"][0], "ppo_kl_coef": c["coefficient"][0]}
        else:
            policy = {"clip_cov_ratio": c["ratio"][0], "clip_cov_lb": c["lower"][0], "clip_cov_ub": c["upper"][0]}
        config = {"clip_ratio": 0.2, "global_batch_info": {}, "policy_loss": policy}
        loss, metrics = f(old, x, adv, mask, config=config)
        close(loss, c["loss"][0])
        loss.backward()
        close(x.grad, c["gradient"])
        if function == "kl_cov":
            assert metrics["actor/ppo_kl"] == pytest.approx(float(((x - old).abs() * mask).sum() / mask.sum()),
                                                            rel=1e-7)
        else:
            assert metrics["actor/pg_clipfrac"] == pytest.approx(c["clip_fraction"][0], rel=1e-8)
            assert metrics["actor/ppo_kl"] == pytest.approx(float(((old - x) * mask).sum() / mask.sum()), abs=1e-12)
        # the selection is locally constant in log_prob: the loss is differentiable at these points
        assert torch.autograd.gradcheck(lambda t: f(old, t, adv, mask, config=config)[0],
                                        (mat(c, "log_probs").requires_grad_(),))
    with pytest.raises(AssertionError):
        f(old, x, adv, mask, config={"policy_loss": {function + "_ratio": 0.0}})


def test_verl_golden_value_loss():
    cases = golden("tests/loss/golden_verl.hpp", "value_loss")
    assert len(cases) >= 5
    for name, c in cases:
        v = mat(c, "values").requires_grad_(True)
        mode = VERL_MODES[int(c["mode"][0])]
        loss, clipfrac = verl.compute_value_loss(v, mat(c, "returns"), mat(c, "old_values"), mat(c, "mask"),
                                                 c["clip"][0], loss_agg_mode=mode)
        assert loss.shape == () and clipfrac.shape == () and loss.dtype == D
        rtol = 5e-8 if mode == "seq-mean-token-mean" else 1e-10
        close(loss, c["loss"][0], rtol=rtol)
        close(clipfrac, c["clip_fraction"][0], rtol=1e-8)  # verl's masked_mean: Σm + 1e-8
        loss.backward()
        close(v.grad, c["gradient"], rtol=rtol)
        assert torch.autograd.gradcheck(
            lambda t: verl.compute_value_loss(t, mat(c, "returns"), mat(c, "old_values"), mat(c, "mask"),
                                              c["clip"][0], mode)[0], (mat(c, "values").requires_grad_(),))
    v = torch.zeros(2, 3, dtype=D)
    close(verl.compute_value_loss(v, v + 1, v, torch.ones(2, 3), 0.5, dp_size=2, batch_num_tokens=12)[0],
          0.5 * 6 / 12 * 2)


# ------------------------------------------------------------------------------------------------ TRL

def trl_reference(rewards, G, scale):
    g = rewards.view(-1, G)
    mean = torch.nanmean(g, dim=1).repeat_interleave(G)
    a = rewards - mean
    if scale == "group":
        std = torch.tensor([np.nanstd(row.numpy(), ddof=1) if np.sum(~np.isnan(row.numpy())) > 1 else np.nan
                            for row in g], dtype=D).repeat_interleave(G)
        a = a / (std + 1e-4)
    elif scale == "batch":
        a = a / (float(np.nanstd(rewards.numpy(), ddof=1)) + 1e-4)
    return torch.nan_to_num(a, nan=0.0)


@pytest.mark.parametrize("scale", ["group", "batch", "none", True, False])
def test_trl_advantages(scale):
    rewards = torch.tensor([1.0, 0.0, 0.5, 1.0, math.nan, 2.0, 3.0, 3.0, math.nan, math.nan, 0.0, 1.0], dtype=D)
    a = trl.compute_advantages(rewards, 3, scale_rewards=scale)
    assert a.shape == rewards.shape and a.dtype == D
    name = {True: "group", False: "none"}.get(scale, scale)
    close(a, trl_reference(rewards, 3, name), rtol=1e-9)
    assert a[4] == 0 and torch.all(a[6:9] == 0)  # NaN rewards; a constant group; a group with one scored sample
    with pytest.raises(ValueError):
        trl.compute_advantages(rewards, 3, scale_rewards="sample")
    per_func = torch.tensor([[1.0, math.nan], [math.nan, math.nan], [0.5, 0.5]], dtype=D)
    r = trl.compute_rewards(per_func, [2.0, 1.0])
    close(r[[0, 2]], torch.tensor([2.0, 1.5], dtype=D))
    assert torch.isnan(r[1])


def test_trl_golden_vllm_is_dapo_loss():
    cases = golden("tests/loss/golden_trl.hpp", "vllm_is_loss")
    assert len(cases) >= 5
    for name, c in cases:
        x = mat(c, "log_probs").requires_grad_(True)
        mask = mat(c, "mask")
        loss = trl.compute_loss(x, mat(c, "old_log_probs"), torch.tensor(c["advantages"], dtype=D), mask,
                                loss_type="dapo", epsilon_low=c["epsilon_low"][0], epsilon_high=c["epsilon_high"][0],
                                num_items_in_batch=mask.sum(), importance_sampling_ratio=mat(c, "is_ratio"))
        close(loss, c["loss"][0])
        loss.backward()
        close(x.grad, c["gradient"])


def test_trl_golden_bias_correction_kl_and_delta():
    for name, c in golden("tests/loss/golden_trl.hpp", "bias_correction_kl"):
        if c["sequence_level"][0] != 0:
            continue  # importance_sampling_level='sequence' is not a compute_loss option
        x = mat(c, "log_probs").requires_grad_(True)
        mask = mat(c, "mask")
        loss_type = ["grpo", "bnpo", "dapo"][int(c["loss_type"][0])]
        loss = trl.compute_loss(x, mat(c, "old_log_probs"), torch.tensor(c["advantages"], dtype=D), mask, loss_type,
                                epsilon_low=c["epsilon_low"][0], epsilon_high=c["epsilon_high"][0],
                                beta=c["beta"][0], ref_per_token_logps=mat(c, "ref_log_probs"),
                                use_bias_correction_kl=True, num_items_in_batch=mask.sum())
        close(loss, c["loss"][0])
        loss.backward()
        close(x.grad, c["gradient"])
    checked = 0
    for name, c in golden("tests/loss/golden_trl.hpp", "delta_sequence"):
        if name != "token_level":
            continue
        x = mat(c, "log_probs").requires_grad_(True)
        loss = trl.compute_loss(x, mat(c, "old_log_probs"), torch.tensor(c["advantages"], dtype=D), mat(c, "mask"),
                                "grpo", epsilon_low=c["epsilon_low"][0], epsilon_high=c["epsilon_high"][0],
                                delta=c["delta"][0])
        close(loss, c["loss"][0])
        loss.backward()
        close(x.grad, c["gradient"])
        checked += 1
    assert checked == 1


def test_trl_golden_sequence_level():
    """importance_sampling_level='sequence': grpo with delta, sapo and luspo (GRPOTrainer._compute_loss's tables)."""
    checked = 0
    for table, loss_type in [("delta_sequence", "grpo"), ("sapo_sequence", "sapo"), ("luspo", "luspo")]:
        cases = golden("tests/loss/golden_trl.hpp", table)
        assert len(cases) >= 5
        for name, c in cases:
            if name == "token_level":
                continue  # the token-level delta case: test_trl_golden_bias_correction_kl_and_delta
            x = mat(c, "log_probs").requires_grad_(True)
            old, adv, mask = mat(c, "old_log_probs"), torch.tensor(c["advantages"], dtype=D), mat(c, "mask")
            kwargs = dict(epsilon_low=c["epsilon_low"][0], epsilon_high=c["epsilon_high"][0],
                          delta=c["delta"][0] if "delta" in c else None, importance_sampling_level="sequence")
            loss = trl.compute_loss(x, old, adv, mask, loss_type, **kwargs)
            close(loss, c["loss"][0])
            loss.backward()
            close(x.grad, c["gradient"])
            assert torch.autograd.gradcheck(lambda t: trl.compute_loss(t, old, adv, mask, loss_type, **kwargs),
                                            (mat(c, "log_probs").requires_grad_(),))
            checked += 1
    assert checked >= 15
    x = torch.zeros(2, 3, dtype=D)
    for loss_type, level in [("luspo", "token"), ("cispo", "sequence"), ("vespo", "sequence"), ("grpo", "word")]:
        with pytest.raises(ValueError):
            trl.compute_loss(x, x, torch.ones(2, dtype=D), torch.ones(2, 3), loss_type,
                             importance_sampling_level=level)
    for name, c in golden("tests/loss/golden_trl.hpp", "bias_correction_kl"):
        if c["sequence_level"][0] != 0:  # the sequence ratio couples a row's KL terms: not provided
            with pytest.raises(ValueError):
                trl.compute_loss(mat(c, "log_probs"), mat(c, "old_log_probs"), torch.tensor(c["advantages"], dtype=D),
                                 mat(c, "mask"), "grpo", beta=c["beta"][0], ref_per_token_logps=mat(c, "ref_log_probs"),
                                 use_bias_correction_kl=True, importance_sampling_level="sequence")


def test_trl_golden_vllm_importance_sampling_ratio():
    ratios = golden("tests/loss/golden_trl.hpp", "vllm_is_ratio")
    losses = golden("tests/loss/golden_trl.hpp", "vllm_is_loss")
    assert len(ratios) >= 5 and len(ratios) == len(losses)
    for (name, c), (_, l) in zip(ratios, losses):
        sequence, truncate = c["sequence"][0] != 0, c["truncate"][0] != 0
        mode = ("sequence_" if sequence else "token_") + ("truncate" if truncate else "mask")
        old, mask = mat(c, "old_log_probs"), mat(c, "mask")
        ratio = trl.vllm_importance_sampling_ratio(old, mat(c, "sampling_log_probs"), mask, mode,
                                                   None if c["clip_min"][0] < 0 else c["clip_min"][0], c["clip_max"][0])
        assert ratio.shape == ((old.shape[0], 1) if sequence else old.shape) and ratio.dtype == D
        close(ratio.expand_as(old), c["ratio"], rtol=1e-12)  # every position, masked ones and the empty row too
        x = mat(l, "log_probs").requires_grad_(True)
        loss = trl.compute_loss(x, old, torch.tensor(l["advantages"], dtype=D), mask, "dapo",
                                epsilon_low=l["epsilon_low"][0], epsilon_high=l["epsilon_high"][0],
                                importance_sampling_ratio=ratio)
        close(loss, l["loss"][0])
        loss.backward()
        close(x.grad, l["gradient"])
    with pytest.raises(ValueError):
        trl.vllm_importance_sampling_ratio(old, old, mask, "sequence")


def trl_loss_reference(x, old, adv, mask, loss_type, beta=0.0, ref=None, L=None, gas=1, items=None, procs=1):
    coef_1 = torch.exp(x - old)
    a = adv.unsqueeze(1)
    if loss_type == "cispo":
        loss = -torch.clamp(coef_1, max=5.0).detach() * a * x
    elif loss_type == "sapo":
        tau = torch.where(a > 0, 1.0, 1.05).to(D)
        loss = -torch.sigmoid(tau * (coef_1 - 1)) * 4 / tau * a
    else:
        loss = -torch.min(coef_1 * a, torch.clamp(coef_1, 0.8, 1.2) * a)
    if beta:
        loss = loss + beta * (torch.exp(ref - x) - (ref - x) - 1)
    if loss_type in ("grpo", "sapo"):
        return ((loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean() / gas
    if loss_type == "bnpo":
        return (loss * mask).sum() / mask.sum().clamp(min=1) / gas
    if loss_type == "dr_grpo":
        return (loss * mask).sum() / (loss.size(0) * (mask.shape[1] if L is None else L)) / gas
    n = mask.sum() if items is None else torch.tensor(float(items))
    return (loss * mask).sum() / (n.clamp(min=1) / procs)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo"])
def test_trl_loss_types(policy, loss_type):
    x, old, adv, mask = policy
    adv = adv[:, 0]
    ref = old + 0.3
    kwargs = dict(beta=0.04, ref_per_token_logps=ref, max_completion_length=16, gradient_accumulation_steps=2,
                  num_items_in_batch=40, num_processes=2)
    lp = x.clone().requires_grad_(True)
    loss = trl.compute_loss(lp, old, adv, mask, loss_type, **kwargs)
    ref_x = x.clone().requires_grad_(True)
    expected = trl_loss_reference(ref_x, old, adv, mask, loss_type, 0.04, ref, 16, 2, 40, 2)
    close(loss, expected)
    loss.backward()
    expected.backward()
    close(lp.grad, ref_x.grad)
    assert torch.all(lp.grad[3] == 0)
    if loss_type != "cispo":  # cispo's coefficient is detached: its gradient is not the loss's derivative
        assert torch.autograd.gradcheck(lambda t: trl.compute_loss(t, old, adv, mask, loss_type, **kwargs),
                                        (x.clone().requires_grad_(),))


# ------------------------------------------------------------------------------------------------ OpenRLHF

def test_openrlhf_golden_policy_loss():
    cases = golden("tests/loss/golden_openrlhf.hpp", "policy_loss")
    assert len(cases) == 5
    for name, c in cases:
        x = mat(c, "log_probs").requires_grad_(True)
        module = openrlhf.PolicyLoss(clip_eps_low=c["epsilon_low"][0], clip_eps_high=c["epsilon_high"][0],
                                     dual_clip=c["dual_clip"][0] or None)
        loss, clip_ratio, ppo_kl, vllm_kl = module(x, mat(c, "old_log_probs"), mat(c, "advantages"),
                                                   action_mask=mat(c, "mask"))
        assert vllm_kl is None and loss.shape == () and loss.dtype == D
        close(loss, c["loss"][0])
        close(clip_ratio, c["clip_ratio"][0])
        close(ppo_kl, c["ppo_kl"][0])
        loss.backward()
        close(x.grad, c["gradient"])


def test_openrlhf_golden_is_correction():
    cases = golden("tests/loss/golden_openrlhf.hpp", "is_correction")
    assert len(cases) == 6
    for k, (name, c) in enumerate(cases):
        kind = ["tis", "icepop", "seq-mask-tis"][k // 2]
        x = mat(c, "log_probs").requires_grad_(True)
        old, rollout, mask = mat(c, "old_log_probs"), mat(c, "rollout_log_probs"), mat(c, "mask")
        module = openrlhf.PolicyLoss(enable_vllm_is_correction=True, vllm_is_correction_type=kind,
                                     vllm_is_truncated_threshold=[c["threshold_low"][0], c["threshold_high"][0]])
        loss, clip_ratio, ppo_kl, vllm_kl = module(x, old, mat(c, "advantages"), mask, rollout)
        close(loss, c["loss"][0])
        close(ppo_kl, c["ppo_kl"][0])
        close(vllm_kl, ((rollout - old) * mask).sum() / mask.sum())
        loss.backward()
        close(x.grad, c["gradient"])


def test_openrlhf_policy_loss_aggregation_and_gradcheck(policy):
    x, old, adv, mask = policy
    for token_level in (True, False):
        module = openrlhf.PolicyLoss(dual_clip=3.0, token_level_loss=token_level)
        assert torch.autograd.gradcheck(lambda t: module(t, old, adv, mask)[0], (x.clone().requires_grad_(),))
        r = torch.exp(torch.clamp(x - old, -20, 20))
        clip1 = torch.min(r * adv, torch.clamp(r, 0.8, 1.2) * adv)
        loss = -torch.where(adv < 0, torch.max(clip1, 3.0 * adv), clip1)
        mode = "token-mean" if token_level else "seq-mean-token-mean"
        close(module(x, old, adv, mask)[0], agg_reference(loss, mask, mode))
        n = 50.0 if token_level else 6.0
        got = module(x, old, adv, mask, dp_size=2, batch_num_tokens=n, global_batch_size=n)[0]
        close(got, agg_reference(loss, mask, mode) * (mask.sum() if token_level else 3.0) / n * 2)
    with pytest.raises(ValueError):
        openrlhf.PolicyLoss(policy_loss_type="grpo")


def test_openrlhf_golden_approx_kl():
    cases = golden("tests/loss/golden_openrlhf.hpp", "approx_kl")
    for k, (name, c) in enumerate(cases):
        x = mat(c, "log_probs").requires_grad_(True)
        value = openrlhf.compute_approx_kl(x, mat(c, "log_probs_base"), kl_estimator=["k1", "k2", "k3"][k % 3])
        assert value.dtype == torch.float32 and value.shape == x.shape
        close(value, c["value"], rtol=2e-6, atol=2e-6)
        value.sum().backward()
        close(x.grad, c["gradient"], rtol=2e-6, atol=2e-6)


def test_openrlhf_golden_whiten():
    for name, c in golden("tests/credit/golden_openrlhf.hpp", "whiten"):
        out = openrlhf.whiten_advantages(mat(c, "advantages"), mat(c, "mask"), no_std_norm=name.startswith("no_std"))
        if name == "std_constant":  # OpenRLHF's float32 mean leaves 1.2e-8, which rsqrt(1e-8) makes 1.2e-4
            assert torch.all(out == 0)
            continue
        close(out, c["whitened"], rtol=1e-6, atol=1e-6)  # OpenRLHF whitens in float32


@pytest.mark.parametrize("estimator", ["group_norm", "rloo", "reinforce_baseline", "dr_grpo"])
def test_openrlhf_group_advantages(estimator):
    rewards = torch.tensor([1.0, 0.0, 0.5, 30.0, 2.0, 2.0, -1.0, 4.0, 0.0], dtype=D)
    n = 3
    g = rewards.reshape(-1, n)
    if estimator == "rloo":
        expected = g - (g.sum(-1, keepdim=True) - g) / (n - 1)
    elif estimator == "group_norm":
        expected = (g - g.mean(-1, keepdim=True)) / (g.std(-1, keepdim=True) + 1e-9)
    else:
        expected = g - g.mean(-1, keepdim=True)
    a = openrlhf.compute_group_advantages(rewards, n, estimator)
    close(a, expected.reshape(-1).clamp(-10, 10))
    close(openrlhf.compute_group_advantages(rewards, n, estimator, reward_clip_range=None), expected.reshape(-1))
    with pytest.raises(ValueError):
        openrlhf.compute_group_advantages(rewards[:1], 1, estimator)  # OpenRLHF asserts n_samples_per_prompt > 1


def test_openrlhf_golden_gae_and_cumulative_returns():
    cases = golden("tests/credit/golden_openrlhf.hpp", "gae")
    assert len(cases) >= 5
    for name, c in cases:
        advantages, returns = openrlhf.get_advantages_and_returns(mat(c, "values"), mat(c, "rewards"), mat(c, "mask"),
                                                                  c["gamma"][0], c["lambd"][0])
        assert advantages.dtype == D and advantages.shape == mat(c, "rewards").shape
        close(advantages, c["advantages"])  # every position: masked ones are discounted through, as OpenRLHF
        close(returns, c["returns"])
    cases = golden("tests/credit/golden_openrlhf.hpp", "cumulative_returns")
    assert len(cases) >= 5
    for name, c in cases:
        returns = openrlhf.get_cumulative_returns(mat(c, "rewards"), mat(c, "mask"), c["gamma"][0])
        close(returns, c["returns"])
    # float32, and a bool mask
    c = cases[0][1]
    r32 = openrlhf.get_cumulative_returns(mat(c, "rewards").float(), mat(c, "mask").bool(), c["gamma"][0])
    assert r32.dtype == torch.float32
    close(r32, c["returns"], rtol=1e-5, atol=1e-5)


def openrlhf_gspo_reference(x, old, adv, mask, low=0.2, high=0.2, dual_clip=None):
    """OpenRLHF's PolicyLoss forward for policy_loss_type='gspo' (loss, clip_ratio), transcribed in torch."""
    ratio = ((x - old) * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    ratio = ratio.exp().unsqueeze(-1) * mask
    surr1, surr2 = ratio * adv, ratio.clamp(1 - low, 1 + high) * adv
    if dual_clip is None:
        loss = -torch.min(surr1, surr2)
    else:
        clip1 = torch.min(surr1, surr2)
        loss = -torch.where(adv < 0, torch.max(clip1, dual_clip * adv), clip1)
    counts = mask.sum(-1)
    rows = (counts > 0).to(D)
    value = (((loss * mask).sum(-1) / (counts + 1e-8)) * rows).sum() / rows.sum()
    return value, ((surr2 < surr1).to(D) * mask).sum() / mask.sum()


@pytest.mark.parametrize("dual_clip", [None, 3.0])
def test_openrlhf_gspo(policy, dual_clip):
    x, old, adv, mask = policy
    adv = adv.clone()
    adv[:, :] = adv[:, :1]  # OpenRLHF's sequence-level advantages: one value per response
    module = openrlhf.PolicyLoss(clip_eps_low=0.2, clip_eps_high=0.28, dual_clip=dual_clip, policy_loss_type="gspo")
    assert module.token_level_loss is False
    lp = x.clone().requires_grad_(True)
    loss, clip_ratio, ppo_kl, vllm_kl = module(lp, old, adv, mask)
    ref_x = x.clone().requires_grad_(True)
    expected, expected_clip = openrlhf_gspo_reference(ref_x, old, adv, mask, 0.2, 0.28, dual_clip)
    close(loss, expected, rtol=5e-8)  # OpenRLHF's per-sample mean divides by |o_i| + 1e-8
    close(clip_ratio, expected_clip)
    close(ppo_kl, ((old - x) * mask).sum() / mask.sum())
    assert vllm_kl is None
    with pytest.raises(ValueError):  # normkit's sequence-level dual clip needs c ≥ 1 + clip_eps_high
        openrlhf.PolicyLoss(clip_eps_high=0.28, dual_clip=1.1, policy_loss_type="gspo")(x, old, adv, mask)
    loss.backward()
    expected.backward()
    close(lp.grad, ref_x.grad, rtol=5e-8)
    assert torch.autograd.gradcheck(lambda t: module(t, old, adv, mask)[0], (x.clone().requires_grad_(),))
    # with the vLLM correction the GSPO ratio is taken against rollout_log_probs, and no IS weight is applied
    rollout = old + 0.1
    module = openrlhf.PolicyLoss(policy_loss_type="gspo", enable_vllm_is_correction=True,
                                 vllm_is_truncated_threshold=[0.5, 5.0], dual_clip=dual_clip)
    loss, _, ppo_kl, vllm_kl = module(x, old, adv, mask, rollout)
    close(loss, openrlhf_gspo_reference(x, rollout, adv, mask, dual_clip=dual_clip)[0], rtol=5e-8)
    close(ppo_kl, ((old - x) * mask).sum() / mask.sum())
    assert vllm_kl is None
