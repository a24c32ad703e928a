"""normkit.loss against float64 numpy references of the header formulas (include/normkit/loss/*.hpp) and the
golden values tests/loss/golden.cpp checks (read from its headers by golden.py), over storage types, SIMD tails, strides,
gradients by finite differences, outputs passed in, bad input and all-masked rows."""
import math

import numpy as np
import pytest

from conftest import STORAGE, TOLERANCE, as_storage, value_of
from golden import tables
from normkit import loss

GOLDEN = tables("loss")

WIDTHS = [1, 15, 17, 33]


def close(actual, expected, tolerance, scale=None):
    expected = np.asarray(expected, np.float64)
    scale = np.max(np.abs(expected)) if scale is None else scale
    assert np.max(np.abs(value_of(np.asarray(actual)) - expected), initial=0) <= tolerance * max(scale, 1e-300)


def batch(rng, rows, cols, spread=0.3, empty_row=False):
    """log_probs, old_log_probs, advantages (B × T), a 0/1 mask with every row holding its first token."""
    x = -np.abs(rng.normal(size=(rows, cols))) - 0.1
    old = x + spread * rng.normal(size=(rows, cols))
    a = rng.normal(size=(rows, cols))
    mask = (rng.random((rows, cols)) < 0.8).astype(np.float64)
    mask[:, 0] = 1
    if empty_row:
        mask[-1] = 0
    return x, old, a, mask


# ---------------------------------------------------------------- references of the formulas


def aggregation_scale(mask, mode="token_mean", form="dr_grpo", length=None, alpha=0.75, dp=1.0):
    """a_i of aggregate.hpp per row (B,), for a 0/1 or weighted mask."""
    n = mask.sum(-1)
    rows = n > 0
    b = rows.sum()
    big_l = mask.shape[-1] if length is None else length
    with np.errstate(divide="ignore", invalid="ignore"):
        if mode == "token_mean":
            a = np.full(n.shape, dp / n.sum() if n.sum() > 0 else 0.0)
        elif mode == "token_sum":
            a = np.full(n.shape, dp)
        elif mode == "seq_mean_token_sum":
            a = np.full(n.shape, dp / b if b else 0.0)
        elif mode == "seq_mean_token_mean":
            a = np.where(rows, dp / (b * n), 0.0)
        elif mode == "seq_mean_token_sum_norm":
            a = np.full(n.shape, dp / (b * big_l) if form == "dr_grpo" else dp / big_l)
        else:  # delta_l
            s = np.sum(n[rows] ** -alpha)
            a = np.where(rows, dp * n ** -alpha / (s * big_l), 0.0)
    return np.where(rows, a, 0.0)


def aggregate_reference(ell, mask, **kw):
    a = aggregation_scale(mask, **kw)
    return float(np.sum(a[:, None] * np.where(mask != 0, mask * ell, 0.0))), a[:, None] * mask


def kl_reference(x, ref, estimator="k3", clamp=True, limit=None, straight=False):
    d = x - ref
    if estimator == "k1":
        k, g = d, np.ones_like(d)
    elif estimator == "abs":
        k, g = np.abs(d), np.sign(d)
    elif estimator == "k2":
        k, g = 0.5 * d * d, d
    elif clamp:
        lr = np.clip(-d, -20, 20)
        raw = np.exp(lr) - lr - 1
        k = np.clip(raw, -10, 10)
        g = np.where((lr == -d) & (k == raw), 1 - np.exp(lr), 0.0)
    else:
        k, g = np.exp(-d) + d - 1, 1 - np.exp(-d)
    if straight:
        g = d
    if limit is not None:
        g = np.where(np.abs(k) <= limit, g, 0.0)
        k = np.clip(k, -limit, limit)
    return k, g


def ppo_reference(x, old, a, eps_low=0.2, eps_high=0.2, dual=None, clamp=20.0):
    """ℓ and ∂ℓ/∂x per token of ppo_clip (surrogate.hpp), gradient 0 where a clamp or clip is active."""
    d_raw = x - old
    d = np.clip(d_raw, -clamp, clamp)
    r = np.exp(d)
    live = (d == d_raw).astype(np.float64)
    lo, hi = 1 - eps_low, 1 + eps_high
    rc = np.clip(r, lo, hi)
    l1, l2 = -a * r, -a * rc
    ell = np.maximum(l1, l2)
    g1 = -a * r
    g2 = np.where((r >= lo) & (r <= hi), -a * r, 0.0)
    grad = np.where(l1 >= l2, g1, g2)
    if dual is not None:
        cap = -a * dual
        capped = (a < 0) & (ell > cap)
        ell = np.where(capped, cap, ell)
        grad = np.where(capped, 0.0, grad)
    clipped = l2 > l1
    return ell, grad * live, clipped


def value_reference(v, old, ret, clip=None):
    un = (v - ret) ** 2
    if clip is None:
        return 0.5 * un, v - ret, np.zeros(v.shape, bool)
    vc = np.clip(v, old - clip, old + clip)
    cl = (vc - ret) ** 2
    bigger = cl > un
    return (0.5 * np.where(bigger, cl, un), np.where(bigger, np.where(np.abs(v - old) <= clip, vc - ret, 0.0), v - ret),
            bigger)


def correction_reference(x, xr, mask, level="token", bound="truncate", lower=None, upper=2.0, clamp=20.0):
    d = x - xr
    if level == "token":
        rho = np.exp(np.clip(d, -clamp, clamp))
    else:
        rho = np.repeat(np.exp(np.clip(np.sum(np.where(mask != 0, mask * d, 0), -1, keepdims=True), -clamp, clamp)),
                        x.shape[-1], -1)
    if bound == "truncate":
        w = np.minimum(rho if lower is None else np.maximum(rho, lower), upper)
    else:
        w = np.where((rho >= (0 if lower is None else lower)) & (rho <= upper), rho, 0.0)
    return np.where(mask != 0, w, 0.0)


def finite_difference(f, x, points, h=1e-6):
    """Central differences of the scalar f at the given (i, t) of x (float64)."""
    out = []
    for i, t in points:
        e = np.zeros_like(x)
        e[i, t] = h
        out.append((f(x + e) - f(x - e)) / (2 * h))
    return np.array(out)


def interior_points(rows, cols, mask, count=6, seed=1):
    picks = np.random.default_rng(seed).choice(rows * cols, size=min(count, rows * cols), replace=False)
    return [(int(k // cols), int(k % cols)) for k in picks]


# ---------------------------------------------------------------- aggregate_loss

MODES = ["token_mean", "token_sum", "seq_mean_token_sum", "seq_mean_token_mean", "seq_mean_token_sum_norm", "delta_l"]


def test_aggregation_table_of_docs():
    ell = np.array([[1.0, 2, 3, 9], [4, 7, 7, 7]])
    mask = np.array([[1.0, 1, 1, 0], [1, 0, 0, 0]])
    expected = {"token_mean": (2.5, 1 / 4, 1 / 4), "token_sum": (10, 1, 1), "seq_mean_token_sum": (5, 1 / 2, 1 / 2),
                "seq_mean_token_mean": (3, 1 / 6, 1 / 2), "seq_mean_token_sum_norm": (1.25, 1 / 8, 1 / 8)}
    for mode, (value, w0, w1) in expected.items():
        result, weights = loss.aggregate_loss(ell, mask, weights=True, mode=mode)
        assert result.loss == pytest.approx(value, rel=1e-14)
        assert np.allclose(weights, [[w0, w0, w0, 0], [w1, 0, 0, 0]], rtol=1e-14, atol=0)
        assert result.token_count == 4 and result.sequence_count == 2
    result, _ = loss.aggregate_loss(ell, mask, mode="seq_mean_token_sum_norm", form="verl_old")
    assert result.loss == pytest.approx(2.5)
    result, weights = loss.aggregate_loss(ell, mask, weights=True, mode=loss.aggregation_mode.delta_l, alpha=1.0)
    assert result.loss == pytest.approx(1.125) and weights[0, 0] == pytest.approx(1 / 16) and weights[1, 0] == 3 / 16


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("mode", MODES)
def test_aggregate_loss_against_reference(rng, dtype, cols, mode):
    ell, ell64 = as_storage(rng.normal(size=(5, cols)), dtype)
    _, _, _, m = batch(rng, 5, cols, empty_row=True)
    mask, mask64 = as_storage(m, dtype)
    result, weights = loss.aggregate_loss(ell, mask, weights=True, mode=mode, data_parallel_size=1)
    value, w = aggregate_reference(ell64, mask64, mode=mode)
    assert weights.dtype == ell.dtype and weights.shape == ell.shape
    close(weights, w, 2 * TOLERANCE[dtype])
    assert abs(result.loss - value) <= 4 * TOLERANCE[dtype] * max(np.sum(np.abs(w * ell64)), 1e-30)
    assert result.token_count == mask64.sum() and result.sequence_count == 4
    assert np.all(value_of(weights)[-1] == 0)  # the all-masked row


def test_aggregate_loss_options_global_counts_and_weighted_mask(rng):
    ell = rng.normal(size=(4, 9))
    mask = rng.random((4, 9))
    whole, w_whole = loss.aggregate_loss(ell, mask, weights=True, mode="seq_mean_token_mean", mask_values="weights")
    value, w = aggregate_reference(ell, mask, mode="seq_mean_token_mean")
    assert whole.loss == pytest.approx(value, rel=1e-12) and np.allclose(w_whole, w, rtol=1e-12, atol=0)
    # micro-batches with the whole batch's counts add up to the whole
    m01 = (rng.random((4, 9)) < 0.7).astype(np.float64)
    full = loss.aggregate_loss(ell, m01)[0].loss
    n = m01.sum()
    parts = [loss.aggregate_loss(ell[k:k + 2], m01[k:k + 2], global_token_count=n)[0].loss for k in (0, 2)]
    assert sum(parts) == pytest.approx(full, rel=1e-12)
    dp = loss.aggregate_loss(ell, m01, options=loss.aggregation_options(), data_parallel_size=2, global_token_count=n)
    assert dp[0].loss == pytest.approx(2 * full, rel=1e-12)
    with pytest.raises(ValueError, match="data_parallel_size|global"):
        loss.aggregate_loss(ell, m01, data_parallel_size=2)
    o = loss.aggregate_loss_options()
    o.mode = loss.aggregation_mode.token_sum
    assert loss.aggregate_loss(ell, m01, options=o, mode="token_mean")[0].loss == pytest.approx(full)
    assert o.mode == loss.aggregation_mode.token_sum  # the options passed are copied, never changed
    with pytest.raises(ValueError, match="mask"):
        loss.aggregate_loss(ell, mask)  # a non-binary mask under mask_values=binary
    # count_empty_rows: TRL's mean over every row
    m01[1] = 0
    r = loss.aggregate_loss(ell, m01, mode="seq_mean_token_sum", count_empty_rows=True)[0]
    assert r.sequence_count == 4
    assert r.loss == pytest.approx(np.sum(ell * m01) / 4, rel=1e-12)


def test_aggregate_loss_all_masked_and_masked_nan():
    ell = np.array([[np.nan, np.inf], [1.0, -np.inf]])
    for mode in MODES:
        result, weights = loss.aggregate_loss(ell, np.zeros((2, 2)), weights=True, mode=mode)
        assert result.loss == 0 and result.token_count == 0 and np.all(weights == 0)
    result, weights = loss.aggregate_loss(ell, np.array([[0.0, 0], [1, 0]]), weights=True)
    assert result.loss == 1 and np.array_equal(weights, [[0, 0], [1, 0]])


# ---------------------------------------------------------------- kl_penalty


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("estimator", ["k1", "abs", "k2", "k3"])
def test_kl_penalty_against_reference(rng, dtype, cols, estimator):
    x, x64 = as_storage(-np.abs(rng.normal(size=(3, cols))), dtype)
    ref, ref64 = as_storage(x64 + rng.normal(size=(3, cols)), dtype)
    value, gradient = loss.kl_penalty(x, ref, gradient=True, estimator=estimator)
    k, g = kl_reference(x64, ref64, estimator)
    assert value.dtype == x.dtype and gradient.dtype == x.dtype
    close(value, k, 8 * TOLERANCE[dtype], np.max(np.abs(k)) + np.max(np.abs(x64 - ref64)))
    close(gradient, g, 8 * TOLERANCE[dtype], np.max(np.abs(g)) + 1)


def test_kl_penalty_clamps_presets_and_finite_differences(rng):
    x = np.array([[-30.0, 0.0, 25.0, -1.0, 3.0]])
    ref = np.zeros((1, 5))
    for options, kw in [(None, {}), (loss.kl_options(), {"clamp": False}), (loss.presets.k3_plus(), {}),
                        (loss.presets.openrlhf_kl(), {}), (loss.presets.openrlhf_kl("k2"), {})]:
        value, gradient = loss.kl_penalty(x, ref, gradient=True, options=options, **kw)
        o = loss.kl_penalty_options(options) if options is not None else loss.kl_penalty_options()
        for key, v in kw.items():
            setattr(o, key, v)
        k, g = kl_reference(x, ref, o.estimator.name, o.clamp, o.value_limit, o.straight_through)
        with np.errstate(over="ignore"):
            assert np.allclose(value, k, rtol=1e-12, atol=1e-12, equal_nan=True)
        assert np.allclose(gradient, g, rtol=1e-12, atol=1e-12)
    assert loss.presets.k3_plus().straight_through and loss.presets.openrlhf_kl().value_limit == 10
    assert loss.presets.openrlhf_kl().estimator == loss.kl_estimator.k1
    # gradients by finite differences (away from the kinks)
    x = -np.abs(rng.normal(size=(2, 6)))
    ref = x + rng.normal(size=(2, 6))
    for estimator in ["k1", "k2", "k3"]:
        _, g = loss.kl_penalty(x, ref, gradient=True, estimator=estimator)
        for i, t in [(0, 0), (1, 3), (1, 5)]:
            e = np.zeros_like(x)
            e[i, t] = 1e-6
            fd = (loss.kl_penalty(x + e, ref, estimator=estimator)[0][i, t] -
                  loss.kl_penalty(x - e, ref, estimator=estimator)[0][i, t]) / 2e-6
            assert abs(fd - g[i, t]) < 1e-6
    value, gradient = loss.kl_penalty(x, ref)
    assert gradient is None


# ---------------------------------------------------------------- surrogates


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("cols", WIDTHS)
def test_ppo_surrogate_forward_backward_against_reference(rng, dtype, cols):
    x0, old0, a0, m0 = batch(rng, 4, cols, empty_row=True)
    (x, x64), (old, old64), (a, a64), (mask, m64) = (as_storage(v, dtype) for v in (x0, old0, a0, m0))
    metrics, ell = loss.policy_surrogate_forward(x, old, a, mask)
    ref, grad, clipped = ppo_reference(x64, old64, a64)
    scale = np.max(np.abs(a64)) * 2
    assert ell.dtype == x.dtype
    close(value_of(ell) * (m64 != 0), ref * (m64 != 0), 8 * TOLERANCE[dtype], scale)
    sel = m64 != 0
    assert metrics.token_count == m64.sum()
    assert metrics.approx_kl == pytest.approx(np.mean((old64 - x64)[sel]), rel=2e-4, abs=1e-6)
    assert abs(metrics.clip_fraction - np.mean(clipped[sel])) <= 2 / sel.sum()
    upstream, up64 = as_storage(rng.random((4, cols)), dtype)
    _, gradient = loss.policy_surrogate_backward(upstream, x, old, a, mask)
    assert gradient.dtype == x.dtype
    close(gradient, np.where(sel, up64 * grad, 0.0), 8 * TOLERANCE[dtype], scale)
    assert np.all(value_of(gradient)[-1] == 0)


def test_ppo_dual_clip_and_per_sample_advantages(rng):
    x, old, _, mask = batch(rng, 5, 17, spread=1.0)
    a = rng.normal(size=(5, 1))
    _, ell = loss.policy_surrogate_forward(x, old, a, mask, dual_clip=3.0, epsilon_low=0.1, epsilon_high=0.28)
    ref, grad, _ = ppo_reference(x, old, np.broadcast_to(a, x.shape), 0.1, 0.28, 3.0)
    assert np.allclose(ell[mask != 0], ref[mask != 0], rtol=1e-12, atol=1e-13)
    w = rng.random(x.shape)
    _, g = loss.policy_surrogate_backward(w, x, old, a, mask, dual_clip=3.0, epsilon_low=0.1, epsilon_high=0.28)
    assert np.allclose(g, np.where(mask != 0, w * grad, 0), rtol=1e-12, atol=1e-13)


SIMPLE_MODES = {  # ℓ and ∂ℓ/∂x per token of the token-level modes (surrogate.hpp), A per token
    "reinforce": lambda x, old, a: (-a * x, -a),
    "cispo_clip": lambda x, old, a: (-np.clip(np.exp(x - old), 0.8, 1.2) * a * x, -np.clip(np.exp(x - old), 0.8, 1.2) * a),
    "cispo_cap": lambda x, old, a: (-np.minimum(np.exp(x - old), 0.2) * a * x, -np.minimum(np.exp(x - old), 0.2) * a),
    "sapo": lambda x, old, a: _sapo(x, old, a),
    "gft": lambda x, old, a: (-a * np.where(np.exp(x) > 0.5, 1, np.exp(x)) * x, -a * np.where(np.exp(x) > 0.5, 1, np.exp(x))),
}


def _sapo(x, old, a):
    r = np.exp(x - old)
    tau = np.where(a > 0, 1.0, 1.05)
    s = 1 / (1 + np.exp(-tau * (r - 1)))
    return -a * s * 4 / tau, -a * 4 * s * (1 - s) * r


@pytest.mark.parametrize("mode", sorted(SIMPLE_MODES))
def test_token_level_modes_against_reference(rng, mode):
    x, old, a, mask = batch(rng, 3, 33)
    _, ell = loss.policy_surrogate_forward(x, old, a, mask, mode=mode)
    ref, grad = SIMPLE_MODES[mode](x, old, a)
    sel = mask != 0
    assert np.allclose(ell[sel], ref[sel], rtol=1e-11, atol=1e-13)
    w = rng.random(x.shape)
    _, g = loss.policy_surrogate_backward(w, x, old, a, mask, mode=mode)
    assert np.allclose(g, np.where(sel, w * grad, 0), rtol=1e-11, atol=1e-13)


def gspo_sequence_reference(x, old, a, mask, eps=0.2):
    """gspo_sequence's ℓ (surrogate.hpp): s_i = exp(masked mean of x − old), ppo form on s, A (B × 1)."""
    n = np.maximum(mask.sum(-1, keepdims=True), 1)
    s = np.exp(np.sum(mask * (x - old), -1, keepdims=True) / n)
    return np.maximum(-a * s, -a * np.clip(s, 1 - eps, 1 + eps)) * np.ones_like(x)


@pytest.mark.parametrize("mode", ["gspo_sequence", "gmpo", "sapo_sequence", "sapo", "ppo_clip"])
def test_surrogate_backward_by_finite_differences(rng, mode):
    """The VJP of the coupled forms (and of modes without a stop-gradient) against central differences of
    Σ w·ℓ, away from clip kinks (gspo_token, vespo, cispo, gft, dppo detach a factor: no finite difference)."""
    x, old, _, mask = batch(rng, 3, 15, spread=0.05)
    a = rng.normal(size=(3, 1))
    w = rng.random(x.shape) * mask

    def objective(xx):
        return float(np.sum(w * loss.policy_surrogate_forward(xx, old, a, mask, mode=mode)[1]))

    _, g = loss.policy_surrogate_backward(w, x, old, a, mask, mode=mode)
    points = [(i, t) for i, t in interior_points(3, 15, mask, 8) if mask[i, t] != 0]
    fd = finite_difference(objective, x, points)
    assert np.allclose([g[p] for p in points], fd, rtol=1e-5, atol=1e-7)
    if mode == "gspo_sequence":
        _, ell = loss.policy_surrogate_forward(x, old, a, mask, mode=mode)
        ref = gspo_sequence_reference(x, old, a, mask)
        assert np.allclose(ell[mask != 0], ref[mask != 0], rtol=1e-12)


def test_covariance_modes_need_a_selection(rng):
    x, old, a, mask = batch(rng, 2, 8)
    with pytest.raises(ValueError, match="selection"):
        loss.policy_surrogate_forward(x, old, a, mask, mode="kl_cov")
    sel = np.zeros_like(x)
    sel[0, 1] = 1
    _, ell = loss.policy_surrogate_forward(x, old, a, mask, selection=sel, mode="kl_cov", kl_cov_coefficient=0.5)
    d = x - old
    ref = -a * np.exp(d) + 0.5 * sel * np.abs(d)
    assert np.allclose(ell[mask != 0], ref[mask != 0], rtol=1e-12)


# ---------------------------------------------------------------- policy_loss


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("cols", WIDTHS)
def test_policy_loss_against_reference(rng, dtype, cols):
    x0, old0, a0, m0 = batch(rng, 4, cols, empty_row=True)
    ref0 = x0 + 0.2 * rng.normal(size=x0.shape)
    h0 = rng.random(x0.shape)
    (x, x64), (old, old64), (a, a64), (mask, m64), (ref, ref64), (h, h64) = (
        as_storage(v, dtype) for v in (x0, old0, a0, m0, ref0, h0))
    result, g, gh = loss.policy_loss(x, old, a, mask, ref, h, log_probs_gradient=True, entropy_gradient=True,
                                     use_kl_loss=True, kl_coefficient=0.1, entropy_coefficient=0.01)
    ell, dl, _ = ppo_reference(x64, old64, a64)
    k, dk = kl_reference(x64, ref64)
    _, w = aggregate_reference(ell, m64)
    sel = m64 != 0
    pg = float(np.sum(w[sel] * ell[sel]))
    kl = float(np.sum(w[sel] * k[sel]))
    ent = float(np.sum(w[sel] * h64[sel]))
    total = pg + 0.1 * kl - 0.01 * ent
    tol = 8 * TOLERANCE[dtype]
    assert abs(result.policy_loss - pg) <= tol * np.sum(np.abs(w * ell)) + 1e-300
    assert abs(result.kl_loss - kl) <= tol * (np.sum(np.abs(w * k)) + 1e-3)
    assert abs(result.entropy_loss - ent) <= tol * np.sum(np.abs(w * h64))
    assert abs(result.loss - total) <= tol * (np.sum(np.abs(w * ell)) + np.sum(np.abs(w * k)) + np.sum(w * h64))
    assert result.sequence_count == 3 and result.metrics.token_count == m64.sum()
    close(g, np.where(sel, w * (dl + 0.1 * dk), 0), tol, np.max(np.abs(w * dl)) + np.max(np.abs(w * dk)))
    close(gh, -0.01 * w, tol)
    assert np.all(value_of(g)[-1] == 0) and np.all(value_of(gh)[-1] == 0)


def test_policy_loss_by_finite_differences_and_against_its_parts(rng):
    x, old, a, mask = batch(rng, 3, 17, spread=0.05)
    ref = x + 0.3 * rng.normal(size=x.shape)
    options = loss.presets.verl_actor(True)
    options.aggregation.mode = loss.aggregation_mode.seq_mean_token_mean

    def objective(xx):
        return loss.policy_loss(xx, old, a, mask, ref, options=options)[0].loss

    result, g, gh = loss.policy_loss(x, old, a, mask, ref, options=options, log_probs_gradient=True)
    assert gh is None
    points = [p for p in interior_points(3, 17, mask, 10, seed=3)]
    assert np.allclose([g[p] for p in points], finite_difference(objective, x, points), rtol=1e-5, atol=1e-8)
    # the one pass equals its parts: surrogate → aggregate (→ weights → VJP) plus β·kl_penalty
    _, ell = loss.policy_surrogate_forward(x, old, a, mask, options=options.surrogate)
    agg, w = loss.aggregate_loss(ell, mask, weights=True, options=options.aggregation)
    _, vjp = loss.policy_surrogate_backward(w, x, old, a, mask, options=options.surrogate)
    k, dk = loss.kl_penalty(x, ref, gradient=True, options=options.kl)
    kl = loss.aggregate_loss(k, mask, options=options.aggregation)[0].loss
    assert result.policy_loss == pytest.approx(agg.loss, rel=1e-12, abs=1e-14)
    assert result.kl_loss == pytest.approx(kl, rel=1e-12)
    assert result.loss == pytest.approx(agg.loss + options.kl_coefficient * kl, rel=1e-12, abs=1e-14)
    assert np.allclose(g, vjp + options.kl_coefficient * w * dk, rtol=1e-12, atol=1e-15)


def test_policy_loss_is_weights_and_nested_dicts(rng):
    x = np.array([[-1.0, -2.0]])
    half = np.full((1, 2), 0.5)
    r = loss.policy_loss(x, x, np.ones((1, 2)), np.ones((1, 2)), is_weights=half, options=loss.presets.verl_actor())
    assert r[0].loss == pytest.approx(-0.5)
    r = loss.policy_loss(x, x, np.ones((1, 2)), half, options=loss.presets.verl_actor(),
                         aggregation={"mask_values": "weights"})
    assert r[0].loss == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="is_weights"):
        loss.policy_loss(x, x, np.ones((1, 2)), is_weights=np.ones((2, 2)))
    x, old, a, mask = batch(rng, 2, 9)
    o = loss.presets.verl_actor()
    r1 = loss.policy_loss(x, old, a, mask, options=o, surrogate={"epsilon_low": 0.1, "mode": "ppo_clip"})[0]
    o2 = loss.presets.verl_actor()
    o2.surrogate.epsilon_low = 0.1
    assert r1.loss == loss.policy_loss(x, old, a, mask, options=o2)[0].loss
    assert o.surrogate.epsilon_low == 0.2
    with pytest.raises(TypeError, match="epsilon"):
        loss.policy_loss(x, old, a, mask, surrogate={"epsilon": 0.1})


def test_policy_loss_all_masked_and_masked_nan():
    x = np.array([[np.nan, -1.0], [np.inf, -2.0]])
    old = np.array([[-1.0, np.nan], [-1.0, -1.0]])
    a = np.ones((2, 2))
    for mask in (np.zeros((2, 2)), np.array([[0.0, 0], [0, 1]])):
        result, g, _ = loss.policy_loss(x, old, a, mask, log_probs_gradient=True)
        assert np.isfinite(result.loss) and np.all(np.isfinite(g))
        assert np.all(g[mask == 0] == 0)
    assert loss.policy_loss(x, old, a, np.zeros((2, 2)))[0].loss == 0


# ---------------------------------------------------------------- value_loss


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("clip", [None, 0.2])
def test_value_loss_against_reference(rng, dtype, cols, clip):
    (v, v64), (old, old64), (ret, ret64) = (as_storage(rng.normal(size=(4, cols)), dtype) for _ in range(3))
    _, _, _, m = batch(rng, 4, cols, empty_row=True)
    mask, m64 = as_storage(m, dtype)
    result, g = loss.value_loss(v, old, ret, mask, values_gradient=True, clip=clip, aggregation={"mode": "token_sum"})
    ell, dl, bigger = value_reference(v64, old64, ret64, clip)
    sel = m64 != 0
    assert abs(result.loss - np.sum(ell[sel])) <= 1e-12 * np.sum(ell[sel]) + 1e-300
    assert result.clip_fraction == pytest.approx(np.mean(bigger[sel]), abs=1e-12)
    assert result.token_count == m64.sum()
    close(g, np.where(sel, dl, 0), 2 * TOLERANCE[dtype])


def test_value_loss_presets_and_finite_differences(rng):
    v, old, ret = (rng.normal(size=(3, 7)) for _ in range(3))
    mask = (rng.random((3, 7)) < 0.7).astype(np.float64)
    assert loss.presets.verl_value().clip == 0.5 and loss.presets.openrlhf_value().clip is None
    assert loss.presets.openrlhf_value(0.2, False).aggregation.mode == loss.aggregation_mode.seq_mean_token_mean
    for options in (loss.presets.verl_value(0.3), loss.presets.openrlhf_value(None, False)):
        result, g = loss.value_loss(v, old, ret, mask, values_gradient=True, options=options)
        ell, dl, _ = value_reference(v, old, ret, options.clip)
        value, w = aggregate_reference(ell, mask, mode=options.aggregation.mode.name)
        assert result.loss == pytest.approx(value, rel=1e-12)
        assert np.allclose(g, w * dl, rtol=1e-12, atol=1e-15)
        points = interior_points(3, 7, mask, 6, seed=5)
        fd = finite_difference(lambda vv: loss.value_loss(vv, old, ret, mask, options=options)[0].loss, v, points)
        assert np.allclose([g[p] for p in points], fd, rtol=1e-5, atol=1e-8)
    with pytest.raises(ValueError, match="clip"):
        loss.value_loss(v, old, ret, clip=-1.0)
    r, g = loss.value_loss(v, old, ret, np.zeros((3, 7)), values_gradient=True)
    assert r.loss == 0 and np.all(g == 0)


# ---------------------------------------------------------------- rollout correction, rejection, OPSM, covariance


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("level,bound,lower", [("token", "truncate", None), ("token", "mask", 0.5),
                                               ("sequence", "truncate", 0.8), ("sequence", "mask", 0.5)])
def test_rollout_correction_weights_against_reference(rng, dtype, cols, level, bound, lower):
    x0, xr0, _, m0 = batch(rng, 4, cols, spread=0.1 if level == "token" else 0.3 / math.sqrt(cols), empty_row=True)
    (x, x64), (xr, xr64), (mask, m64) = (as_storage(v, dtype) for v in (x0, xr0, m0))
    mean, w = loss.rollout_correction_weights(x, xr, mask, level=level, bound=bound, lower=lower, upper=1.5)
    assert mean == 1.0 and w.dtype == x.dtype
    expected = correction_reference(x64, xr64, m64, level, bound, lower, 1.5)
    if bound == "mask":  # a ratio on a bound may fall either way after rounding: compare the others
        rho = np.exp(x64 - xr64) if level == "token" else expected
        keep = np.abs(np.log(np.maximum(rho, 1e-300)) - np.log(1.5)) > 1e-2
        close(value_of(w) * keep, expected * keep, 64 * TOLERANCE[dtype], 2)
    else:
        close(w, expected, 64 * TOLERANCE[dtype], 2)
    assert np.all(value_of(w)[-1] == 0)


def test_rollout_correction_batch_normalize_and_presets(rng):
    x, xr, _, mask = batch(rng, 3, 10, spread=0.3)
    mean, w = loss.rollout_correction_weights(x, xr, mask, options=loss.presets.verl_rollout_is(batch_normalize=True))
    raw = correction_reference(x, xr, mask)
    assert mean == pytest.approx(raw[mask != 0].mean(), rel=1e-12)
    assert np.allclose(w, raw / mean, rtol=1e-12)
    assert loss.presets.trl_vllm_is().level == loss.correction_level.sequence
    assert loss.presets.trl_vllm_is("token_truncate", 2.0).bound == loss.correction_bound.truncate
    assert loss.presets.openrlhf_vllm_is("icepop").bound == loss.correction_bound.mask
    assert loss.presets.openrlhf_vllm_is("seq_mask_tis").level == loss.correction_level.sequence_mean_filter
    with pytest.raises(ValueError, match="mode"):
        loss.presets.trl_vllm_is("sequence")
    with pytest.raises(ValueError, match="lower"):
        loss.rollout_correction_weights(x, xr, mask, lower=3.0)


def rejection_reference(d, mask, level, statistic, upper, lower=None):
    d = np.clip(d, -20, 20)
    k = {"k1": -d, "k2": 0.5 * d * d, "k3": np.exp(d) - 1 - d}[statistic]
    sel = mask != 0
    if level == "token":
        s = k
    elif level == "sequence_sum":
        s = np.sum(np.where(sel, mask * k, 0), -1, keepdims=True)
    elif level == "sequence_mean":
        s = np.sum(np.where(sel, mask * k, 0), -1, keepdims=True) / (mask.sum(-1, keepdims=True) + 1e-8)
    else:
        s = np.max(np.where(sel, k, 0), -1, keepdims=True)
    if statistic == "k1":
        lo = math.log(1 / upper if lower is None else lower)
        passes = (s >= lo) & (s <= math.log(upper))
    else:
        passes = s <= upper
    passes = np.broadcast_to(passes, d.shape)
    return np.where(passes, mask, 0), float(np.sum(np.where(passes, 0, mask)))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("level,statistic,upper", [("token", "k1", 1.5), ("token", "k3", 0.05),
                                                   ("sequence_sum", "k2", 0.2), ("sequence_mean", "k1", 1.1),
                                                   ("sequence_max", "k3", 0.1)])
def test_rollout_rejection_mask_against_reference(rng, dtype, cols, level, statistic, upper):
    x0, xr0, _, m0 = batch(rng, 6, cols, spread=0.3, empty_row=True)
    (x, x64), (xr, xr64), (mask, m64) = (as_storage(v, dtype) for v in (x0, xr0, m0))
    rejected, keep = loss.rollout_rejection_mask(x, xr, mask, criteria=[{"level": level, "statistic": statistic,
                                                                        "upper": upper}])
    expected, mass = rejection_reference(x64 - xr64, m64, level, statistic, upper)
    assert keep.dtype == x.dtype
    assert np.array_equal(value_of(keep), expected)
    assert rejected == mass
    assert np.all(keep[-1] == 0)


def test_rollout_rejection_chain_and_presets(rng):
    x, xr, _, mask = batch(rng, 5, 12, spread=0.3)
    chain = loss.presets.verl_rollout_rs([{"level": "token", "statistic": "k1", "upper": 2.0},
                                          loss.rollout_rejection_criterion(loss.rejection_level.sequence_max,
                                                                           loss.rejection_statistic.k2, 0.1)])
    assert len(chain.criteria) == 2
    _, keep = loss.rollout_rejection_mask(x, xr, mask, options=chain)
    k1, _ = rejection_reference(x - xr, mask, "token", "k1", 2.0)
    k2, _ = rejection_reference(x - xr, mask, "sequence_max", "k2", 0.1)
    assert np.array_equal(keep, k1 * (k2 != 0))
    single = loss.presets.verl_rollout_rs("sequence_mean", "k3", 0.01)
    assert single.criteria[0].level == loss.rejection_level.sequence_mean and single.criteria[0].upper == 0.01
    with pytest.raises(ValueError, match="statistic"):
        loss.presets.verl_rollout_rs("token", "k4")
    with pytest.raises(ValueError, match="lower"):
        loss.rollout_rejection_mask(x, xr, mask, criteria=[{"statistic": "k2", "upper": 1.0, "lower": 0.5}])
    rejected, keep = loss.rollout_rejection_mask(x, xr, np.zeros_like(x))
    assert rejected == 0 and np.all(keep == 0)


def test_covariance_selection_kl_cov_and_clip_cov(rng):
    x, old, a, mask = batch(rng, 4, 33, spread=0.1)
    count, selected = loss.covariance_selection(x, old, a, mask, ratio=0.05)
    sel = mask != 0
    cov = (a - a[sel].mean()) * (x - x[sel].mean())
    n = int(sel.sum())
    k = max(1, int(math.floor(0.05 * n)))
    order = np.argsort(-np.where(sel, cov, -np.inf).ravel(), kind="stable")[:k]
    expected = np.zeros(x.size)
    expected[order] = 1
    assert count == k and np.array_equal(selected.ravel(), expected)
    # clip_cov: every candidate of the band is taken when the quota allows
    count, selected = loss.covariance_selection(x, old, a, mask, rule="clip_cov", ratio=1.0, lower=-0.05, upper=0.05)
    r = np.exp(x - old)
    unclipped = ~(-a * np.clip(r, 0.8, 1.2) > -a * r)
    band = sel & (cov > -0.05) & (cov < 0.05) & unclipped
    assert count == band.sum() and np.array_equal(selected != 0, band)
    with pytest.raises(ValueError, match="ratio"):
        loss.covariance_selection(x, old, a, mask, ratio=0.0)
    assert loss.covariance_selection(x, old, a, np.zeros_like(x), ratio=0.5)[0] == 0


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("cols", WIDTHS)
def test_off_policy_sequence_mask_against_reference(rng, dtype, cols):
    x0, xs0, _, m0 = batch(rng, 8, cols, spread=0.2, empty_row=True)
    (x, x64), (xs, xs64), (mask, m64) = (as_storage(v, dtype) for v in (x0, xs0, m0))
    a, a64 = as_storage(rng.normal(size=(8, 1)), dtype)
    mean = np.sum(m64 * (xs64 - x64), -1, keepdims=True) / np.maximum(1, m64.sum(-1, keepdims=True))
    threshold = float(np.median(mean))
    keep = loss.off_policy_sequence_mask(x, xs, a, mask, threshold)
    assert keep.shape == (8, 1) and keep.dtype == x.dtype
    expected = ((a64 >= 0) | (mean <= threshold)).astype(np.float64)
    decided = np.abs(mean - threshold) > 1e-2 * (1 + abs(threshold))  # rounding may move a mean onto the threshold
    assert np.array_equal(value_of(keep)[decided], expected[decided])
    assert value_of(loss.off_policy_sequence_mask(x, xs, a, None, threshold)).shape == (8, 1)


def test_presets():
    actor = loss.presets.verl_actor()
    assert actor.surrogate.mode == loss.surrogate_mode.ppo_clip and actor.aggregation.mode.name == "token_mean"
    assert loss.presets.verl_actor(True).use_kl_loss
    for name in ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"]:
        o = loss.presets.trl(name)
        assert isinstance(o, loss.policy_loss_options)
        assert o.surrogate.log_ratio_clamp == math.inf or name == "luspo" or o.surrogate.log_ratio_clamp > 0
    assert loss.presets.trl("grpo").aggregation.mode == loss.aggregation_mode.seq_mean_token_mean
    assert loss.presets.trl("dr_grpo", 512).aggregation.normalizer_length == 512
    assert loss.presets.trl("grpo", beta=0.04).use_kl_loss
    assert loss.presets.trl(loss.presets.trl_loss_type.cispo).surrogate.mode == loss.surrogate_mode.cispo_cap
    assert loss.presets.openrlhf_ppo().surrogate.raw_approx_kl
    assert loss.presets.verl_reinforce().surrogate.mode == loss.surrogate_mode.reinforce
    assert loss.presets.verl_dppo(True).surrogate.mode == loss.surrogate_mode.dppo_kl
    assert loss.presets.verl_kl_cov(0.2).surrogate.kl_cov_coefficient == 0.2
    assert loss.presets.verl_clip_cov().surrogate.mode == loss.surrogate_mode.clip_cov
    with pytest.raises(ValueError, match="loss_type"):
        loss.presets.trl("ppo")
    assert "mode=" in repr(actor.surrogate)
    assert loss.presets.trl.__module__ == "normkit.loss.presets"


# ---------------------------------------------------------------- golden values (tests/loss/golden.cpp)


def fields(case, *names, rows_cols=None):
    c = case[1]
    rows, cols = int(c["rows"][0]), int(c["cols"][0])
    out = []
    for name in names:
        values = np.array(c[name], np.float64)
        out.append(values.reshape(rows, -1))
    return out


def check_policy_golden(case, options, per_sample, **inputs):
    c = case[1]
    x, old, mask = fields(case, "log_probs", "old_log_probs", "mask")
    (a,) = fields(case, "advantages")
    assert a.shape[1] == (1 if per_sample else x.shape[1])
    result, g, _ = loss.policy_loss(x, old, a, mask, options=options, log_probs_gradient=True, **inputs)
    assert result.loss == pytest.approx(c["loss"][0], rel=1e-10, abs=1e-12), case[0]
    assert np.allclose(g.ravel(), c["gradient"], rtol=1e-10, atol=1e-10), case[0]
    return result


def test_golden_openrlhf_approx_kl():
    cases = GOLDEN["openrlhf.approx_kl"]
    assert len(cases) == 6
    for e, case in enumerate(cases):
        x, base = (v.astype(np.float32) for v in fields(case, "log_probs", "log_probs_base"))
        value, gradient = loss.kl_penalty(x, base, gradient=True, options=loss.presets.openrlhf_kl(["k1", "k2", "k3"][e % 3]))
        assert np.allclose(value.ravel(), case[1]["value"], rtol=2e-6, atol=2e-6)
        assert np.allclose(gradient.ravel(), case[1]["gradient"], rtol=2e-6, atol=2e-6)


def test_golden_openrlhf_policy_loss():
    for case in GOLDEN["openrlhf.policy_loss"]:
        c = case[1]
        o = loss.presets.openrlhf_ppo()
        o.surrogate.epsilon_low, o.surrogate.epsilon_high = c["epsilon_low"][0], c["epsilon_high"][0]
        if c["dual_clip"][0] > 0:
            o.surrogate.dual_clip = c["dual_clip"][0]
        result = check_policy_golden(case, o, False)
        assert result.metrics.clip_fraction == pytest.approx(c["clip_ratio"][0], abs=1e-12)
        assert result.metrics.approx_kl == pytest.approx(c["ppo_kl"][0], abs=1e-12)


def test_golden_trl_delta_and_sapo_sequence():
    for case in GOLDEN["trl.delta_sequence"]:
        o = loss.presets.trl("grpo")
        o.surrogate.mode = loss.surrogate_mode.ppo_clip if "token_level" in case[1] else loss.surrogate_mode.gspo_sequence
        o.surrogate.dual_clip = case[1]["delta"][0]
        check_policy_golden(case, o, True)
    for case in GOLDEN["trl.sapo_sequence"]:
        check_policy_golden(case, loss.presets.trl("sapo"), True,
                            surrogate={"mode": "sapo_sequence", "tau_negative": float(np.float32(1.05))})


def bound(value):
    return None if value < 0 else value


def test_golden_verl_rollout_is_weights():
    for case in GOLDEN["verl.rollout_is_weights"]:
        c = case[1]
        x, mask = fields(case, "log_ratio", "mask")
        _, w = loss.rollout_correction_weights(x, np.zeros_like(x), mask, options=loss.presets.verl_rollout_is(
            c["sequence"][0] != 0, c["upper"][0], bound(c["lower"][0]), c["batch_normalize"][0] != 0))
        assert np.allclose(w.ravel(), c["weights"], rtol=1e-8, atol=1e-8), case[0]


def test_golden_verl_rollout_rejection_mask():
    cases = GOLDEN["verl.rollout_rs_mask"]
    assert len(cases) == 75
    for case in cases:
        c = case[1]
        x, mask = fields(case, "log_ratio", "mask")
        criteria = [loss.rollout_rejection_criterion(loss.rejection_level(int(level)), loss.rejection_statistic(int(s)),
                                                     upper, bound(lower))
                    for level, s, upper, lower in zip(c["level"], c["statistic"], c["upper"], c["lower"])]
        with np.errstate(invalid="ignore"):
            rejected, keep = loss.rollout_rejection_mask(x, np.zeros_like(x), mask,
                                                         options=loss.presets.verl_rollout_rs(criteria))
        assert np.array_equal(keep.ravel(), c["keep"]), case[0]
        assert rejected / (mask.sum() + 1e-8) == pytest.approx(c["masked_fraction"][0], rel=1e-12, abs=1e-15)


def trl_mode(c):
    return ("sequence_" if c["sequence"][0] else "token_") + ("truncate" if c["truncate"][0] else "mask")


def test_golden_trl_vllm_is_and_dapo_loss():
    ratios, losses = GOLDEN["trl.vllm_is_ratio"], GOLDEN["trl.vllm_is_loss"]
    assert len(ratios) == len(losses) >= 5
    for case, loss_case in zip(ratios, losses):
        c = case[1]
        old, sampling, mask = fields(case, "old_log_probs", "sampling_log_probs", "mask")
        _, w = loss.rollout_correction_weights(old, sampling, mask, options=loss.presets.trl_vllm_is(
            trl_mode(c), c["clip_max"][0], bound(c["clip_min"][0])))
        marked = mask.ravel() != 0
        assert np.allclose(w.ravel()[marked], np.array(c["ratio"])[marked], rtol=1e-12, atol=1e-12), case[0]
        x = np.array(loss_case[1]["log_probs"]).reshape(old.shape)
        a = np.array(loss_case[1]["advantages"]).reshape(old.shape[0], 1)
        result, g, _ = loss.policy_loss(x, old, a, mask, is_weights=w, options=loss.presets.trl("dapo"),
                                        log_probs_gradient=True)
        assert result.loss == pytest.approx(loss_case[1]["loss"][0], rel=1e-10, abs=1e-12)
        assert np.allclose(g.ravel(), loss_case[1]["gradient"], rtol=1e-10, atol=1e-10)


def test_golden_openrlhf_is_correction():
    cases = GOLDEN["openrlhf.is_correction"]
    assert len(cases) == 6
    for k, case in enumerate(cases):
        c = case[1]
        x, old, rollout, mask, a = fields(case, "log_probs", "old_log_probs", "rollout_log_probs", "mask", "advantages")
        _, w = loss.rollout_correction_weights(old, rollout, mask, options=loss.presets.openrlhf_vllm_is(
            ["tis", "icepop", "seq_mask_tis"][k // 2], c["threshold_low"][0], c["threshold_high"][0]))
        result, g, _ = loss.policy_loss(x, old, a, mask, is_weights=w, options=loss.presets.openrlhf_ppo(),
                                        log_probs_gradient=True)
        assert result.loss == pytest.approx(c["loss"][0], rel=1e-10, abs=1e-12)
        assert np.allclose(g.ravel(), c["gradient"], rtol=1e-10, atol=1e-10)
        assert result.metrics.approx_kl == pytest.approx(c["ppo_kl"][0], abs=1e-12)


AGG_MODES = ["token_mean", "token_sum", "seq_mean_token_sum", "seq_mean_token_mean"]


def test_golden_verl_reinforce():
    for case in GOLDEN["verl.reinforce_loss"]:
        c = case[1]
        x, rollout, mask, a = fields(case, "log_probs", "rollout_log_probs", "mask", "advantages")
        is_weights = fields(case, "is_weights")[0] if c["is_weights"] else None
        mode = AGG_MODES[int(c["mode"][0])]
        result, g, _ = loss.policy_loss(x, rollout, a, mask, is_weights=is_weights,
                                        options=loss.presets.verl_reinforce(), aggregation={"mode": mode},
                                        log_probs_gradient=True)
        tol = 5e-8 if mode == "seq_mean_token_mean" else 1e-10
        assert result.loss == pytest.approx(c["loss"][0], rel=tol, abs=1e-12)
        assert np.allclose(g.ravel(), c["gradient"], rtol=tol, atol=tol)
        # verl's masked mean divides by N + 1e-8
        assert result.metrics.approx_kl == pytest.approx(c["ppo_kl"][0], rel=1e-7, abs=1e-12)


def check_value_golden(case, options, tol):
    c = case[1]
    v, old, ret, mask = fields(case, "values", "old_values", "returns", "mask")
    result, g = loss.value_loss(v, old, ret, mask, values_gradient=True, options=options)
    assert result.loss == pytest.approx(c["loss"][0], rel=tol, abs=1e-12), case[0]
    assert np.allclose(g.ravel(), c["gradient"], rtol=tol, atol=tol), case[0]
    if "clip_fraction" in c:
        assert result.clip_fraction == pytest.approx(c["clip_fraction"][0], rel=1e-7, abs=1e-12)  # ÷ (N + 1e-8)


def test_golden_value_loss():
    for case in GOLDEN["verl.value_loss"]:
        mode = AGG_MODES[int(case[1]["mode"][0])]
        o = loss.presets.verl_value(case[1]["clip"][0])
        o.aggregation.mode = loss.aggregation_mode.__members__[mode]
        check_value_golden(case, o, 5e-8 if mode == "seq_mean_token_mean" else 1e-10)
    for case in GOLDEN["openrlhf.value_loss"]:
        c = case[1]
        token_level = c["token_level"][0] != 0
        check_value_golden(case, loss.presets.openrlhf_value(c["clip"][0] if c["clip"][0] > 0 else None, token_level),
                           1e-10 if token_level else 5e-8)


@pytest.mark.parametrize("binary_kl", [False, True])
def test_golden_verl_dppo(binary_kl):
    for case in GOLDEN["verl.dppo_kl" if binary_kl else "verl.dppo_tv"]:
        c = case[1]
        o = loss.presets.verl_dppo(binary_kl, c["clip_ratio_c"][0])
        o.surrogate.epsilon_low, o.surrogate.epsilon_high = c["epsilon_low"][0], c["epsilon_high"][0]
        result = check_policy_golden(case, o, False)
        # verl's masked means divide by N + 1e-8
        assert result.metrics.clip_fraction == pytest.approx(c["clip_fraction"][0], rel=1e-7, abs=1e-12)
        assert result.metrics.clip_fraction_lower == pytest.approx(c["clip_fraction_lower"][0], rel=1e-7, abs=1e-12)
        assert result.metrics.approx_kl == pytest.approx(c["ppo_kl"][0], rel=1e-7, abs=1e-12)


def test_golden_trl_luspo_vespo_bias_correction_and_off_policy_mask():
    for case in GOLDEN["trl.luspo"]:
        check_policy_golden(case, loss.presets.trl("luspo"), True, surrogate={"epsilon_high": case[1]["epsilon_high"][0]})
    for case in GOLDEN["trl.vespo"]:
        extra = {"is_weights": fields(case, "is_ratio")[0]} if "is_ratio" in case[1] else {}
        check_policy_golden(case, loss.presets.trl("vespo"), True, **extra)
    for case in GOLDEN["trl.bias_correction_kl"]:
        c = case[1]
        o = loss.presets.trl(["grpo", "bnpo", "dapo"][int(c["loss_type"][0])], None, c["beta"][0])
        o.kl.bias_correction = True
        (ref,) = fields(case, "ref_log_probs")
        if c["sequence_level"][0]:
            x, old, mask, a = fields(case, "log_probs", "old_log_probs", "mask", "advantages")
            with pytest.raises(ValueError, match="bias_correction"):
                loss.policy_loss(x, old, a, mask, ref, options=o, surrogate={"mode": "gspo_sequence"})
            continue
        check_policy_golden(case, o, True, ref_log_probs=ref)
    for case in GOLDEN["trl.off_policy_mask"]:
        x, mask, sampling, a = fields(case, "log_probs", "mask", "sampling_log_probs", "advantages")
        keep = loss.off_policy_sequence_mask(x, sampling, a, mask, case[1]["threshold"][0])
        check_policy_golden(case, loss.presets.trl("dapo"), True, is_weights=keep)


@pytest.mark.parametrize("kl", [True, False])
def test_golden_verl_kl_cov_and_clip_cov(kl):
    for case in GOLDEN["verl.kl_cov" if kl else "verl.clip_cov"]:
        c = case[1]
        x, old, mask, a = fields(case, "log_probs", "old_log_probs", "mask", "advantages")
        band = {} if kl else {"lower": c["lower"][0], "upper": c["upper"][0]}
        count, selection = loss.covariance_selection(x, old, a, mask, rule="kl_cov" if kl else "clip_cov",
                                                     ratio=c["ratio"][0], **band)
        options = loss.presets.verl_kl_cov(c["coefficient"][0]) if kl else loss.presets.verl_clip_cov()
        result = check_policy_golden(case, options, False, selection=selection)
        if not kl:
            assert count / result.metrics.token_count == pytest.approx(c["clip_fraction"][0], rel=1e-8)


# ---------------------------------------------------------------- strides, outputs passed in, threads


def test_strided_rows_pass_without_a_copy(rng):
    wide = -np.abs(rng.normal(size=(8, 40)))
    x = wide[::2, 3:20]
    old = x + 0.1
    a = rng.normal(size=(8, 40))[::2, 3:20]
    mask = np.ones((8, 40))[1::2, :17]
    assert not x.flags.c_contiguous
    out_wide = np.zeros((8, 40))
    g = out_wide[1::2, 5:22]
    result, got, _ = loss.policy_loss(x, old, a, mask, log_probs_gradient=g)
    assert got is g and np.shares_memory(got, out_wide)
    expected, ge, _ = loss.policy_loss(*(np.ascontiguousarray(v) for v in (x, old, a, mask)), log_probs_gradient=True)
    assert result.loss == expected.loss and np.array_equal(got, ge)
    assert np.all(out_wide[0::2] == 0) and np.all(out_wide[:, :5] == 0) and np.all(out_wide[:, 22:] == 0)
    k, _ = loss.kl_penalty(x, old)
    assert np.array_equal(k, loss.kl_penalty(np.ascontiguousarray(x), np.ascontiguousarray(old))[0])
    agg = loss.aggregate_loss(x, mask)[0]
    assert agg.loss == loss.aggregate_loss(np.ascontiguousarray(x), np.ascontiguousarray(mask))[0].loss
    v = loss.value_loss(x, old, a, mask)[0]
    assert v.loss == loss.value_loss(*(np.ascontiguousarray(t) for t in (x, old, a, mask)))[0].loss
    w = loss.rollout_correction_weights(x, old, mask)[1]
    assert np.array_equal(w, loss.rollout_correction_weights(*(np.ascontiguousarray(t) for t in (x, old, mask)))[1])
    # 3-d: every leading axis a row
    x3 = -np.abs(rng.normal(size=(2, 3, 5)))
    r3 = loss.policy_loss(x3, x3 + 0.1, np.ones((2, 3, 5)))[0]
    assert r3.loss == loss.policy_loss(x3.reshape(6, 5), x3.reshape(6, 5) + 0.1, np.ones((6, 5)))[0].loss
    with pytest.raises(ValueError, match="log_probs.*stride"):
        loss.kl_penalty(wide[:, ::2], wide[:, ::2].copy())


def test_outputs_passed_in_are_the_outputs(rng):
    x, old, a, mask = batch(rng, 3, 17)
    cases = [
        (lambda o: loss.aggregate_loss(x, mask, weights=o)[1]),
        (lambda o: loss.kl_penalty(x, old, value=o)[0]),
        (lambda o: loss.kl_penalty(x, old, gradient=o)[1]),
        (lambda o: loss.policy_surrogate_forward(x, old, a, mask, loss=o)[1]),
        (lambda o: loss.policy_surrogate_backward(mask, x, old, a, mask, log_probs_gradient=o)[1]),
        (lambda o: loss.policy_loss(x, old, a, mask, log_probs_gradient=o)[1]),
        (lambda o: loss.policy_loss(x, old, a, mask, rng.random(x.shape), rng.random(x.shape), entropy_gradient=o,
                                    entropy_coefficient=0.1)[2]),
        (lambda o: loss.value_loss(x, old, a, mask, values_gradient=o)[1]),
        (lambda o: loss.rollout_correction_weights(x, old, mask, weights=o)[1]),
        (lambda o: loss.rollout_rejection_mask(x, old, mask, keep=o)[1]),
        (lambda o: loss.covariance_selection(x, old, a, mask, selected=o)[1]),
    ]
    optional = {0, 2, 4, 5, 6, 7}  # computed when asked (True); the others always written (None: allocated)
    for k, call in enumerate(cases):
        out = np.full(x.shape, np.nan)
        got = call(out)
        assert got is out and np.all(np.isfinite(out))
        assert np.array_equal(got, call(True if k in optional else None))
    keep = np.empty((3, 1))
    assert loss.off_policy_sequence_mask(x, old, a[:, :1], mask, 0.1, keep=keep) is keep
    # an output may be an input of the same shape (the headers allow it): the gradient written over log_probs
    xc = x.copy()
    expected = loss.policy_loss(x, old, a, mask, log_probs_gradient=True)[1]
    assert loss.policy_loss(xc, old, a, mask, log_probs_gradient=xc)[1] is xc
    assert np.array_equal(xc, expected)
    # policy_surrogate_backward computes its gradient by default, False gives only the metrics
    metrics, none = loss.policy_surrogate_backward(mask, x, old, a, mask, log_probs_gradient=False)
    assert none is None and metrics.token_count == mask.sum()


def test_threads_give_the_same_bits(rng):
    x, old, a, mask = batch(rng, 37, 65)
    one = loss.policy_loss(x, old, a, mask, log_probs_gradient=True)
    four = loss.policy_loss(x, old, a, mask, log_probs_gradient=True, threads=4)
    assert one[0].loss == four[0].loss and np.array_equal(one[1], four[1])
    assert loss.aggregate_loss(x, mask, threads=3)[0].loss == loss.aggregate_loss(x, mask)[0].loss
    assert np.array_equal(loss.kl_penalty(x, old, threads=4)[0], loss.kl_penalty(x, old)[0])
    # a function's own options object keeps its threads (it is copied, not cut down to its part)
    for cls, part in ((loss.aggregate_loss_options, loss.aggregation_options), (loss.kl_penalty_options, loss.kl_options),
                      (loss.policy_surrogate_options, loss.surrogate_options)):
        o = cls()
        o.threads = 4
        assert loss._make(cls, "f", o, {}, part).threads == 4 and loss._make(cls, "f", part(), {}, part).threads == 1


# ---------------------------------------------------------------- bad input


def test_bad_input_is_named(rng):
    x, old, a, mask = batch(rng, 3, 8)
    f32 = old.astype(np.float32)
    with pytest.raises(TypeError, match="log_probs"):
        loss.policy_loss(x.astype(np.int64), old, a)
    with pytest.raises(TypeError, match="old_log_probs"):
        loss.policy_loss(x, f32, a)
    with pytest.raises(TypeError, match="mask"):
        loss.aggregate_loss(x, mask.astype(np.float32))
    with pytest.raises(TypeError, match="ref_log_probs"):
        loss.kl_penalty(x, f32)
    with pytest.raises(TypeError, match="returns"):
        loss.value_loss(x, old, [1.0])
    with pytest.raises(TypeError, match="rollout_log_probs"):
        loss.rollout_correction_weights(x, f32)
    with pytest.raises(TypeError, match="sampling_log_probs"):
        loss.off_policy_sequence_mask(x, f32, a[:, :1], None, 0.1)
    with pytest.raises(TypeError, match="log_probs_gradient"):
        loss.policy_loss(x, old, a, log_probs_gradient=np.empty((3, 8), np.float32))
    with pytest.raises(TypeError, match="loss_gradient"):
        loss.policy_surrogate_backward(mask.astype(np.float32), x, old, a)
    with pytest.raises(ValueError, match="old_log_probs"):
        loss.policy_loss(x, old[:, :5], a)
    with pytest.raises(ValueError, match="advantages"):
        loss.policy_loss(x, old, a[:, :3])
    with pytest.raises(ValueError, match="weights"):
        loss.aggregate_loss(x, weights=np.empty((3, 7)))
    with pytest.raises(ValueError, match="keep"):
        loss.off_policy_sequence_mask(x, old, a[:, :1], None, 0.1, keep=np.empty((3, 2)))
    with pytest.raises(ValueError, match="mask"):
        loss.rollout_rejection_mask(x, old, mask[:2])
    for call in (lambda: loss.aggregate_loss(x, bogus=1), lambda: loss.kl_penalty(x, old, estimatr="k1"),
                 lambda: loss.policy_loss(x, old, a, clip=0.2), lambda: loss.value_loss(x, old, a, mode="token_sum"),
                 lambda: loss.covariance_selection(x, old, a, seeds=1),
                 lambda: loss.off_policy_sequence_mask(x, old, a[:, :1], None, 0.1, thresh=2)):
        with pytest.raises(TypeError, match="unexpected keyword"):
            call()
    with pytest.raises(ValueError, match="mode"):
        loss.aggregate_loss(x, mode="token_median")
    with pytest.raises(TypeError, match="options"):
        loss.value_loss(x, old, a, options=loss.aggregation_options())
    frozen = np.empty_like(x)
    frozen.flags.writeable = False
    for call in (lambda: loss.aggregate_loss(x, weights=frozen), lambda: loss.kl_penalty(x, old, value=frozen),
                 lambda: loss.policy_loss(x, old, a, log_probs_gradient=frozen),
                 lambda: loss.value_loss(x, old, a, values_gradient=frozen),
                 lambda: loss.rollout_correction_weights(x, old, weights=frozen),
                 lambda: loss.rollout_rejection_mask(x, old, keep=frozen),
                 lambda: loss.covariance_selection(x, old, a, selected=frozen),
                 lambda: loss.policy_surrogate_forward(x, old, a, loss=frozen)):
        with pytest.raises(ValueError, match="writeable"):
            call()
    with pytest.raises(ValueError, match="epsilon_low"):
        loss.policy_surrogate_forward(x, old, a, epsilon_low=-0.1)
