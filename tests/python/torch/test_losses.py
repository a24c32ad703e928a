"""normkit.torch.losses: gradcheck of every autograd Function in double, the results against torch compositions
of the formulas and against the numpy normkit.loss, dtypes, zero copies, devices and bad input."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import normkit  # noqa: E402
from normkit import loss as nl  # noqa: E402

nt = normkit.torch
L = nt.losses


def randn(*shape, dtype=torch.float64, seed=0, scale=1.0, shift=0.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(tuple(shape), generator=g, dtype=torch.float64) * scale + shift).to(dtype)


def batch(rows=4, cols=17, dtype=torch.float64, spread=0.05, seed=0):
    """log_probs (requires grad), old_log_probs, advantages, a 0/1 mask with a fully-masked last row."""
    x = -randn(rows, cols, seed=seed).abs() - 0.1
    old = x + randn(rows, cols, seed=seed + 1, scale=spread)
    a = randn(rows, cols, seed=seed + 2)
    mask = (torch.rand(rows, cols, generator=torch.Generator().manual_seed(seed + 3), dtype=torch.float64) < 0.8)
    mask = mask.to(torch.float64)
    mask[:, 0] = 1
    mask[-1] = 0
    return [t.to(dtype) for t in (x, old, a, mask)]


def bits(t):
    return t.detach().contiguous().view(torch.int16).numpy().view(np.uint16)


def numpy_of(t):
    return bits(t) if t.dtype == torch.bfloat16 else t.detach().numpy()


def token_mean(ell, mask):
    return (ell * mask).sum() / mask.sum()


# ---------------------------------------------------------------- gradcheck


def test_gradcheck_policy_loss_with_kl_and_entropy():
    x, old, a, mask = batch()
    ref = x + randn(*x.shape, seed=9, scale=0.3)
    h = randn(*x.shape, seed=10).abs()
    x.requires_grad_(True)
    h.requires_grad_(True)
    o = nl.presets.verl_actor(True)
    o.entropy_coefficient = 0.01
    o.kl_coefficient = 0.1
    for mode in ("token_mean", "seq_mean_token_mean"):
        o.aggregation.mode = nl.aggregation_mode.__members__[mode]
        assert torch.autograd.gradcheck(
            lambda xx, hh: L.PolicyLossFunction.apply(xx, old, a, mask, ref, hh, None, None, o, None), (x, h))
    # the coupled sequence forms too: normkit's vector-Jacobian product
    for mode in ("gspo_sequence", "gmpo", "sapo_sequence"):
        o2 = nl.policy_loss_options()
        o2.surrogate.mode = nl.surrogate_mode.__members__[mode]
        a1 = a[:, :1].contiguous()
        assert torch.autograd.gradcheck(
            lambda xx: L.PolicyLossFunction.apply(xx, old, a1, mask, None, None, None, None, o2, None), (x,))


def test_gradcheck_value_kl_and_aggregate():
    v, old, ret, mask = batch(seed=4)
    v = randn(*v.shape, seed=5).requires_grad_(True)
    for clip in (None, 0.3):
        o = nl.value_loss_options()
        o.clip = clip
        assert torch.autograd.gradcheck(lambda vv: L.ValueLossFunction.apply(vv, old, ret, mask, o, None), (v,))
    x = randn(3, 15, seed=6).requires_grad_(True)
    ref = x.detach() + randn(3, 15, seed=7, scale=0.5)
    for estimator in ("k1", "abs", "k2", "k3"):
        o = nl.kl_penalty_options()
        o.estimator = nl.kl_estimator.__members__[estimator]
        assert torch.autograd.gradcheck(lambda xx: L.KLPenaltyFunction.apply(xx, ref, o), (x,))
    ell = randn(4, 17, seed=8).requires_grad_(True)
    for mode in ("token_mean", "token_sum", "seq_mean_token_mean", "delta_l"):
        o = nl.aggregate_loss_options()
        o.mode = nl.aggregation_mode.__members__[mode]
        assert torch.autograd.gradcheck(lambda ll: L.AggregateLossFunction.apply(ll, mask, o, None), (ell,))


# ---------------------------------------------------------------- against torch compositions of the formulas


def test_policy_loss_against_the_ppo_clip_composition():
    x, old, a, mask = batch(spread=0.3)
    xc = x.clone().requires_grad_(True)
    x.requires_grad_(True)
    value, result = nt.policy_loss(x, old, a, mask, surrogate={"dual_clip": 3.0})
    value.backward()
    r = torch.exp(xc - old)
    pg = -torch.min(r * a, torch.clamp(r, 0.8, 1.2) * a)
    pg = torch.where(a < 0, torch.min(pg, -3.0 * a), pg)
    expected = token_mean(pg, mask)
    expected.backward()
    assert value.dtype == torch.float64 and value.dim() == 0
    assert torch.allclose(value, expected.detach(), rtol=1e-12, atol=1e-15)
    assert torch.allclose(x.grad, xc.grad, rtol=1e-12, atol=1e-15)
    assert result.policy_loss == pytest.approx(float(expected), rel=1e-12)
    clipped = (-torch.clamp(r, 0.8, 1.2) * a > -r * a) & (mask != 0)
    assert result.metrics.clip_fraction == pytest.approx(float(clipped.sum() / mask.sum()), abs=1e-12)
    assert result.metrics.approx_kl == pytest.approx(float(((old - xc) * mask).sum() / mask.sum()), rel=1e-12)
    assert result.metrics.token_count == float(mask.sum()) and result.sequence_count == 3


def test_policy_loss_kl_entropy_and_seq_mean_against_composition():
    x, old, a, mask = batch(spread=0.1, seed=3)
    ref = x + randn(*x.shape, seed=11, scale=0.4)
    h = randn(*x.shape, seed=12).abs()
    x.requires_grad_(True)
    h.requires_grad_(True)
    xc, hc = x.detach().clone().requires_grad_(True), h.detach().clone().requires_grad_(True)
    value, result = nt.policy_loss(x, old, a, mask, ref, h, options=nl.presets.verl_actor(True),
                                   kl_coefficient=0.1, entropy_coefficient=0.01,
                                   aggregation={"mode": "seq_mean_token_mean"})
    value.backward()
    r = torch.exp(xc - old)
    pg = -torch.min(r * a, torch.clamp(r, 0.8, 1.2) * a)
    lr = torch.clamp(ref - xc, -20, 20)
    k3 = torch.clamp(torch.exp(lr) - lr - 1, -10, 10)
    ell = pg + 0.1 * k3 - 0.01 * hc
    n = mask.sum(-1)
    rows = n > 0
    expected = ((ell * mask).sum(-1)[rows] / n[rows]).mean()
    expected.backward()
    assert torch.allclose(value, expected.detach(), rtol=1e-12, atol=1e-15)
    assert torch.allclose(x.grad, xc.grad, rtol=1e-11, atol=1e-15)
    assert torch.allclose(h.grad, hc.grad, rtol=1e-12, atol=1e-15)
    assert result.kl_loss == pytest.approx(float(((k3 * mask).sum(-1)[rows] / n[rows]).mean()), rel=1e-12)


def test_value_kl_and_aggregate_against_compositions():
    v, old, ret, mask = batch(seed=5)
    v = randn(*v.shape, seed=6).requires_grad_(True)
    vc = v.detach().clone().requires_grad_(True)
    value, result = nt.value_loss(v, old, ret, mask, options=nl.presets.verl_value(0.2))
    value.backward()
    clipped = old + torch.clamp(vc - old, -0.2, 0.2)
    expected = 0.5 * token_mean(torch.max((vc - ret) ** 2, (clipped - ret) ** 2), mask)
    expected.backward()
    assert torch.allclose(value, expected.detach(), rtol=1e-12)
    assert torch.allclose(v.grad, vc.grad, rtol=1e-12, atol=1e-15)
    frac = (((clipped - ret) ** 2 > (vc - ret) ** 2) & (mask != 0)).sum() / mask.sum()
    assert result.clip_fraction == pytest.approx(float(frac), abs=1e-12)

    x = randn(3, 33, seed=7).requires_grad_(True)
    ref = x.detach() + randn(3, 33, seed=8)
    xc = x.detach().clone().requires_grad_(True)
    k = nt.kl_penalty(x, ref, estimator="k3", clamp=False)
    upstream = randn(3, 33, seed=9)
    (k * upstream).sum().backward()
    kc = torch.exp(ref - xc) - (ref - xc) - 1
    (kc * upstream).sum().backward()
    assert k.shape == x.shape and torch.allclose(k, kc.detach(), rtol=1e-12)
    assert torch.allclose(x.grad, xc.grad, rtol=1e-12, atol=1e-15)

    ell = randn(4, 17, seed=10).requires_grad_(True)
    ellc = ell.detach().clone().requires_grad_(True)
    agg, info = nt.aggregate_loss(ell, mask, mode="seq_mean_token_sum")
    (2.5 * agg).backward()
    n = mask.sum(-1)
    expected = 2.5 * (ellc * mask).sum(-1)[n > 0].mean()
    expected.backward()
    assert torch.allclose(2.5 * agg.detach(), expected.detach(), rtol=1e-12)
    assert torch.allclose(ell.grad, ellc.grad, rtol=1e-12, atol=0)
    assert info.sequence_count == 3 and info.token_count == float(mask.sum())


def test_aggregate_of_a_torch_surrogate_chains_into_its_graph():
    x, old, a, mask = batch(seed=2)
    x.requires_grad_(True)
    ell = -a * torch.exp(x - old)  # a torch per-token loss, aggregated by normkit
    value, _ = nt.aggregate_loss(ell, mask)
    value.backward()
    xc = x.detach().clone().requires_grad_(True)
    token_mean(-a * torch.exp(xc - old), mask).backward()
    assert torch.allclose(x.grad, xc.grad, rtol=1e-12, atol=1e-15)


# ---------------------------------------------------------------- against the numpy normkit.loss, every dtype


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_same_bits_as_numpy_normkit_loss(dtype):
    x, old, a, mask = batch(4, 33, dtype=dtype, spread=0.3, seed=1)
    ref = (x.double() + randn(*x.shape, seed=13, scale=0.3)).to(dtype)
    x.requires_grad_(True)
    value, result = nt.policy_loss(x, old, a, mask, ref, options=nl.presets.verl_actor(True))
    value.backward()
    r, g, _ = nl.policy_loss(*(numpy_of(t) for t in (x, old, a, mask, ref)), options=nl.presets.verl_actor(True),
                             log_probs_gradient=True)
    assert value.dtype == dtype and result.loss == r.loss and result.metrics.clip_fraction == r.metrics.clip_fraction
    assert np.array_equal(numpy_of(x.grad), g)
    k = nt.kl_penalty(x, ref, options=nl.presets.k3_plus())
    kn, _ = nl.kl_penalty(numpy_of(x), numpy_of(ref), options=nl.presets.k3_plus())
    assert k.dtype == dtype and np.array_equal(numpy_of(k), kn)
    v = x.detach().clone().requires_grad_(True)
    vl, vr = nt.value_loss(v, old, a, mask, clip=0.2)
    vl.backward()
    vn, vg = nl.value_loss(*(numpy_of(t) for t in (v, old, a, mask)), clip=0.2, values_gradient=True)
    assert vr.loss == vn.loss and np.array_equal(numpy_of(v.grad), vg)
    ell = a.clone().requires_grad_(True)
    al, _ = nt.aggregate_loss(ell, mask, mode="delta_l")
    al.backward()
    an, w = nl.aggregate_loss(numpy_of(a), numpy_of(mask), mode="delta_l", weights=True)
    assert float(al) == pytest.approx(an.loss, rel=1e-2) and np.array_equal(numpy_of(ell.grad), w)


# ---------------------------------------------------------------- zero copies, devices, bad input, degenerate


def test_tensors_reach_normkit_without_a_copy(monkeypatch):
    seen = {}
    original = nl.policy_loss

    def spy(*arrays, **keywords):
        seen["arrays"] = arrays
        seen["gradient"] = keywords["log_probs_gradient"]
        return original(*arrays, **keywords)

    monkeypatch.setattr(nl, "policy_loss", spy)
    wide, old, a, mask = batch(8, 40, seed=4)
    x = wide[::2, 3:20].detach().requires_grad_(True)  # row-strided: passed as it is
    x_view = wide[::2, 3:20]
    old_s, a_s, mask_s = old[::2, 3:20], a[::2, 3:20], mask[1::2, 3:20]
    value, _ = nt.policy_loss(x_view.detach().requires_grad_(True), old_s, a_s, mask_s)
    for array, tensor in zip(seen["arrays"][:4], (x_view, old_s, a_s, mask_s)):
        assert np.shares_memory(array, wide.numpy() if tensor is x_view else tensor._base.numpy())
    assert seen["gradient"] is not None and seen["gradient"].flags.writeable
    value, _ = nt.policy_loss(x, old_s, a_s, mask_s)
    value.backward()
    expected = nl.policy_loss(*(np.ascontiguousarray(t.detach().numpy()) for t in (x, old_s, a_s, mask_s)),
                              log_probs_gradient=True)[1]
    assert np.array_equal(x.grad.numpy(), expected)
    # no gradient wanted: none computed
    nt.policy_loss(x.detach(), old_s, a_s, mask_s)
    assert seen["gradient"] is None


def test_only_cpu_tensors_and_one_dtype():
    x, old, a, mask = batch()
    meta = torch.empty(x.shape, dtype=x.dtype, device="meta")
    with pytest.raises(RuntimeError, match="log_probs.*CPU"):
        nt.policy_loss(meta, old, a, mask)
    with pytest.raises(RuntimeError, match="advantages.*CPU"):
        nt.policy_loss(x, old, meta, mask)
    with pytest.raises(RuntimeError, match="mask.*CPU"):
        nt.aggregate_loss(x, meta)
    with pytest.raises(RuntimeError, match="returns.*CPU"):
        nt.value_loss(x, old, meta)
    with pytest.raises(RuntimeError, match="ref_log_probs.*CPU"):
        nt.kl_penalty(x, meta)
    with pytest.raises(TypeError, match="mask"):
        nt.policy_loss(x, old, a, mask.bool())
    with pytest.raises(TypeError, match="old_values"):
        nt.value_loss(x, old.float(), a)
    with pytest.raises(TypeError, match="unexpected keyword"):
        nt.policy_loss(x, old, a, clip=0.2)
    with pytest.raises(TypeError, match="unexpected keyword"):
        nt.kl_penalty(x, old, estimatr="k1")
    with pytest.raises(ValueError, match="old_log_probs"):
        nt.policy_loss(x, old[:, :3], a)


def test_all_masked_gives_zero_loss_and_gradient():
    x, old, a, _ = batch()
    x.requires_grad_(True)
    zero = torch.zeros_like(old)
    value, result = nt.policy_loss(x, old, a, zero)
    value.backward()
    assert float(value) == 0 and result.metrics.token_count == 0 and torch.all(x.grad == 0)
    ell = a.clone().requires_grad_(True)
    agg, _ = nt.aggregate_loss(ell, zero, mode="seq_mean_token_mean")
    agg.backward()
    assert float(agg) == 0 and torch.all(ell.grad == 0)


def test_exports():
    for name in ("PolicyLossFunction", "ValueLossFunction", "KLPenaltyFunction", "AggregateLossFunction",
                 "policy_loss", "value_loss", "kl_penalty", "aggregate_loss"):
        assert getattr(nt, name) is getattr(L, name) and name in L.__all__
