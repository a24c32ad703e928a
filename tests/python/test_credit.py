"""normkit.credit against float64 numpy references of the formulas of include/normkit/credit/*.hpp.

Each reference below is the header's formula written out in float64 over the stored inputs (their
exact float64 values); widths 1, 15, 17, 33 reach the SIMD tails, x[::2] slices the strided rows.
"""
import math

import numpy as np
import pytest

import normkit.advantage as adv
import normkit.credit as cr
from conftest import STORAGE, as_storage, value_of

FLOATS = [np.float32, np.float64]
WIDTHS = [1, 15, 17, 33]


def close(dtype):
    return dict(rtol=3e-5, atol=3e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-11)


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def random_mask(rng, rows, cols, dtype, keep_first=True):
    m = (rng.random((rows, cols)) < 0.7).astype(dtype)
    if keep_first:
        m[:, 0] = 1
    return m


def strided(a):
    """a as every other row of a buffer twice its height: a row-strided view."""
    buffer = np.full((2 * a.shape[0],) + a.shape[1:], 7, a.dtype)
    buffer[::2] = a
    view = buffer[::2]
    assert not view.flags.c_contiguous or a.shape[0] <= 1
    return view


def members(grouping, n):
    ids = np.arange(n) // grouping if isinstance(grouping, int) else np.asarray(grouping)
    _, first = np.unique(ids, return_index=True)
    return [np.flatnonzero(ids == ids[i]) for i in np.sort(first)]


def zscore(x, ddof, eps):
    """The standardize() of token_data.hpp: a set of one or of equal values gives 0."""
    x = np.asarray(x, np.float64)
    if x.size < 2 or np.all(x == x[0]):
        return np.zeros_like(x)
    return (x - x.mean()) / (math.sqrt(((x - x.mean()) ** 2).sum() / (x.size - ddof)) + eps)


# ---------------------------------------------------------------------------------- broadcast, CoRT

@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("mask_dtype", ["uint8", "same"])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("adv_dtype", FLOATS)
def test_broadcast_advantages(rng, cols, mask_dtype, dtype, adv_dtype):
    a = rng.normal(size=6).astype(adv_dtype)
    m = random_mask(rng, 6, cols, np.uint8 if mask_dtype == "uint8" else dtype, keep_first=False)
    out = np.empty((6, cols), dtype)
    got = cr.broadcast_advantages(a, m, out=out)
    assert got is out
    ref = np.where(m != 0, a.astype(dtype)[:, None], 0)
    assert same_bits(got, ref.astype(dtype))
    if mask_dtype == "same":
        assert cr.broadcast_advantages(a, m).dtype == dtype
        got = cr.broadcast_advantages(a, strided(m), threads=3)
        assert same_bits(got, ref.astype(dtype))


def test_smoothstep_ramp():
    for step, start, end in [(0, 0, 0), (-1, 0, 0), (5, 0, 10), (2.5, 1, 4), (20, 0, 10)]:
        if end > start:
            u = min(max((step - start) / (end - start), 0), 1)
            ref = u * u * (3 - 2 * u)
        else:
            ref = 1.0 if step >= start else 0.0
        assert cr.smoothstep_ramp(step, start, end) == pytest.approx(ref, rel=1e-15)


def ref_cort(rubric, free, mask, a, mapping="clipped_exp", tau=1.0, lo=0.5, hi=2.0, normalize=True, step=0.0,
             start=0.0, end=0.0):
    c = rubric - free
    if mapping == "clipped_exp":
        u = np.clip(np.exp(c / tau), lo, hi)
    elif mapping == "scaled_sigmoid":
        u = lo + (hi - lo) / (1 + np.exp(-c / tau))
    else:
        t = np.tanh(c / tau)
        u = np.where(c >= 0, 1 + (hi - 1) * t, 1 + (1 - lo) * t)
    w = np.zeros_like(u)
    for i in range(u.shape[0]):
        v = mask[i] != 0
        if not v.any():
            continue
        ui = u[i, v]
        if not normalize:
            w[i, v] = ui
        elif np.all(ui == ui[0]):
            w[i, v] = 1.0
        else:
            s_lo, s_hi = 1e-9, 1e9
            for _ in range(300):  # bisection on the mean of clip(s·u) (non-decreasing in s)
                s = math.sqrt(s_lo * s_hi)
                if np.clip(s * ui, lo, hi).mean() < 1:
                    s_lo = s
                else:
                    s_hi = s
            w[i, v] = np.clip(math.sqrt(s_lo * s_hi) * ui, lo, hi)
    S = cr.smoothstep_ramp(step, start, end)
    eff = np.where(mask != 0, 1 + S * (w - 1), 0)  # the weights output is w_eff
    return eff, eff * a[:, None]


@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mapping", ["clipped_exp", "scaled_sigmoid", "tanh"])
def test_cort_weights(rng, cols, dtype, mapping):
    B = 5
    rubric = rng.normal(-2, 1, (B, cols)).astype(dtype)
    free = rng.normal(-2, 1, (B, cols)).astype(dtype)
    mask = random_mask(rng, B, cols, dtype)
    a = rng.normal(size=B).astype(dtype)
    kw = dict(mapping=mapping, temperature=0.8, step=3.0, ramp_start=1.0, ramp_end=5.0)
    w, ta, rounds = cr.cort_weights(rubric, free, mask, a, **kw)
    f = lambda x: x.astype(np.float64)  # noqa: E731
    rw, rta = ref_cort(f(rubric), f(free), mask, f(a), mapping, 0.8, step=3.0, start=1.0, end=5.0)
    tol = dict(rtol=3e-5, atol=3e-6) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(w, rw, **tol)
    np.testing.assert_allclose(ta, rta, **tol)
    assert 1 <= rounds <= cols + 1
    for i in range(B):  # mean weight 1 over the valid tokens
        assert w[i, mask[i] != 0].astype(np.float64).mean() == pytest.approx(1, rel=1e-5 if dtype == np.float32 else 1e-12)
    # No advantages: no token advantages; weights=False skips the weights; strided rows; out= in place.
    w2, ta2, _ = cr.cort_weights(strided(rubric), strided(free), strided(mask), options=cr.cort_options(), **kw)
    assert ta2 is None and same_bits(w2, w)
    out = np.empty_like(ta)
    w3, ta3, _ = cr.cort_weights(rubric, free, mask, a, weights=False, token_advantages=out, threads=2, **kw)
    assert w3 is None and ta3 is out and same_bits(out, ta)


def test_cort_zero_contrast_is_broadcast(rng):
    lp = rng.normal(size=(4, 17))
    mask = random_mask(rng, 4, 17, np.float64)
    a = rng.normal(size=4)
    w, ta, _ = cr.cort_weights(lp, lp.copy(), mask, a)
    assert same_bits(ta, cr.broadcast_advantages(a, mask))
    with pytest.raises(ValueError):
        cr.cort_weights(lp, lp, mask, a, temperature=0)


# ---------------------------------------------------------------------------------- entropy credit

@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("rho", [0.0, 0.2, 0.5, 1.0])
def test_top_entropy_mask(rng, cols, dtype, rho):
    H = rng.gamma(2.0, 1.0, (6, cols)).astype(dtype)
    mask = random_mask(rng, 6, cols, dtype)
    keep = cr.top_entropy_mask(H, mask, rho=rho)
    valid = mask != 0
    q = np.quantile(H[valid].astype(np.float64), 1 - rho)
    ref = (valid & (H.astype(np.float64) >= q)).astype(dtype)
    assert same_bits(keep, ref)
    out = np.empty_like(H)
    assert cr.top_entropy_mask(strided(H), strided(mask), out=out, rho=rho) is out
    assert same_bits(out, ref)


def ref_hapo_signal(H, mask, pivot=0.8, released=False):
    valid = mask != 0
    ell = np.log(np.maximum(H[valid], 1e-8))
    s_ell = np.sort(ell)
    q = s_ell[int(round(pivot * (ell.size - 1)))]
    s = max(math.sqrt(((ell - q) ** 2).mean()), 1e-8)
    h = (ell - q) / s
    out_v = np.zeros_like(h)
    pos, neg = h > 0, h < 0
    if pos.any():
        out_v[pos] = h[pos] / h[pos].max()
    if neg.any():
        out_v[neg] = h[neg] / (h[neg].min() if released else abs(h[neg].min()))
    out = np.zeros(H.shape)
    out[valid] = out_v
    return out


@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("preset", ["hapo_paper", "hapo_released_code"])
def test_hapo_entropy_signal(rng, cols, dtype, preset):
    H = rng.gamma(2.0, 1.0, (7, cols)).astype(dtype)
    mask = random_mask(rng, 7, cols, dtype)
    o = getattr(cr.presets, preset)()
    got = cr.hapo_entropy_signal(H, mask, options=o)
    ref = ref_hapo_signal(H.astype(np.float64), mask, 0.8, preset == "hapo_released_code")
    np.testing.assert_allclose(got, ref, **close(dtype))
    got2 = cr.hapo_entropy_signal(strided(H), strided(mask), options=o, pivot=0.5, threads=3)
    np.testing.assert_allclose(got2, ref_hapo_signal(H.astype(np.float64), mask, 0.5,
                                                     preset == "hapo_released_code"), **close(dtype))


def ref_hapo_advantages(scores, grouping, mask, eps=1e-6, by_std=True, threshold=5.0):
    n = mask.shape[0]
    lengths = (mask != 0).sum(axis=1).astype(np.float64)
    A = np.zeros(n)
    for idx in members(grouping, n):
        L, r = lengths[idx], scores[idx]
        if L.sum() == 0:
            continue
        mu = (L * r).sum() / L.sum()
        sd = math.sqrt((L * (r - mu) ** 2).sum() / L.sum())
        a = (r - mu) / (sd + eps) if by_std else r - mu
        if np.any(np.abs(a[L > 0]) >= threshold):
            mu, sd = (0.0, 1.0) if idx.size == 1 else (r.mean(), r.std(ddof=1))
            a = (r - mu) / (sd + eps) if by_std else r - mu
        A[idx] = a
    return A[:, None] * (mask != 0)


@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kind", ["contiguous", "int64", "int32"])
def test_hapo_token_advantages(rng, cols, dtype, kind):
    B = 12
    scores = rng.normal(size=B).astype(dtype)
    mask = random_mask(rng, B, cols, dtype)
    grouping = 4 if kind == "contiguous" else rng.permutation(np.repeat([3, 8, 11], 4)).astype(kind)
    got = cr.hapo_token_advantages(scores, grouping, mask)
    ref = ref_hapo_advantages(scores.astype(np.float64), grouping, mask)
    np.testing.assert_allclose(got, ref, **close(dtype))
    got = cr.hapo_token_advantages(scores, grouping, strided(mask), normalize_by_std=False, threads=2)
    np.testing.assert_allclose(got, ref_hapo_advantages(scores.astype(np.float64), grouping, mask, by_std=False),
                               **close(dtype))


def test_hapo_token_advantages_fallback():
    # One short response scoring 1 among long ones scoring 0: its token-weighted |A| ≥ 5 → GRPO.
    mask = np.zeros((4, 40))
    mask[0, :1] = 1
    mask[1:, :] = 1
    scores = np.array([1.0, 0.0, 0.0, 0.0])
    got = cr.hapo_token_advantages(scores, 4, mask)
    ref = ref_hapo_advantages(scores, 4, mask)
    grpo = (scores - scores.mean()) / (scores.std(ddof=1) + 1e-6)
    np.testing.assert_allclose(ref[:, 0], grpo, rtol=1e-12)
    np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_hapo_clip_ranges_and_redistribute(rng, cols, dtype):
    h = rng.uniform(-1, 1, (5, cols)).astype(dtype)
    h[:, 0] = 0
    low, high = cr.hapo_clip_ranges(h, clip_low=0.2, clip_high=0.28, alpha=0.5)
    hd = h.astype(np.float64)
    ref_low = np.where(hd <= 0, 0.2 * (1 - 0.5 * hd), 0.2)
    ref_high = np.where(hd > 0, 0.28 * (1 + 0.5 * hd), 0.28)
    np.testing.assert_allclose(low, ref_low, **close(dtype))
    np.testing.assert_allclose(high, ref_high, **close(dtype))
    lo_out, hi_out = np.empty_like(h), np.empty_like(h)
    got = cr.hapo_clip_ranges(strided(h), low=lo_out, high=hi_out, clip_low=0.2, clip_high=0.28, alpha=0.5)
    assert got[0] is lo_out and got[1] is hi_out and same_bits(lo_out, low)

    A = rng.normal(size=(5, cols)).astype(dtype)
    ratio = rng.uniform(0.8, 1.2, (5, cols)).astype(dtype)
    mask = random_mask(rng, 5, cols, dtype)
    out = cr.hapo_redistribute(A, h, ratio, low, high, mask, beta=0.7)
    Ad, rd, ld, hgd = (x.astype(np.float64) for x in (A, ratio, low, high))
    inside = (rd > 1 - ld / 2) & (rd < 1 + hgd / 2)
    scaled = Ad * (1 + 0.7 * hd)
    ref = np.where(hd > 0, np.where(inside, Ad, scaled), np.where(inside, scaled, Ad)) * (mask != 0)
    np.testing.assert_allclose(out, ref, **close(dtype))
    given = np.empty_like(A)
    assert cr.hapo_redistribute(strided(A), h, ratio, low, high, mask, out=given, beta=0.7) is given
    assert same_bits(given, out)


# -------------------------------------------------------------------------------------------- logits

def ref_logits(z, y, tau):
    """float64 log_softmax(z/τ): (log π_y, H, Σπ², lse)."""
    zt = z / tau
    m = zt.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(zt - m).sum(axis=1, keepdims=True)))[:, 0]
    logp = zt - lse[:, None]
    p = np.exp(logp)
    H = -(p * np.where(p > 0, logp, 0)).sum(axis=1)
    return logp[np.arange(z.shape[0]), y], H, (p * p).sum(axis=1), lse


def logits_tolerance(storage):
    return dict(rtol=1e-10, atol=1e-10) if storage == np.float64 else dict(rtol=3e-5, atol=3e-5)


@pytest.mark.parametrize("storage", STORAGE)
@pytest.mark.parametrize("cols", WIDTHS + [1000, 2100])
@pytest.mark.parametrize("tau", [1.0, 0.7])
def test_logits_statistics(rng, storage, cols, tau):
    T = 6
    z, zd = as_storage(rng.normal(0, 3, (T, cols)), storage)
    y = rng.integers(0, cols, T).astype(np.int64)
    logp, H, sq, lse = cr.logits_statistics(z, y, temperature=tau)
    stat = np.float64 if storage == np.float64 else np.float32
    assert logp.dtype == H.dtype == sq.dtype == lse.dtype == stat
    for got, ref in zip((logp, H, sq, lse), ref_logits(zd, y, tau)):
        np.testing.assert_allclose(got, ref, **logits_tolerance(storage))
    # Strided rows, outputs passed in (zero-copy), skipped outputs.
    outs = [np.empty(T, stat) for _ in range(4)]
    got = cr.logits_statistics(strided(z), y, token_log_probability=outs[0], entropy=outs[1],
                               sum_probability_squared=outs[2], logsumexp=outs[3], temperature=tau, threads=2)
    assert all(g is o for g, o in zip(got, outs))
    for g, ref in zip(got, (logp, H, sq, lse)):
        assert same_bits(g, ref)
    none = cr.logits_statistics(z, entropy=False, sum_probability_squared=False, temperature=tau)
    assert none[0] is None and none[1] is None and none[2] is None and same_bits(none[3], lse)


def test_logits_statistics_bf16_bits_and_masked_vocabulary(rng):
    z, _ = as_storage(rng.normal(0, 3, (9, 333)), "bf16")
    y = rng.integers(0, 333, 9).astype(np.int64)
    a, b = cr.logits_statistics(z, y), cr.logits_statistics(z, y, threads=3)
    assert all(same_bits(p, q) for p, q in zip(a, b))
    zm = rng.normal(size=(4, 40))
    zm[:, 20:] = -np.inf
    y = np.array([0, 5, 19, 25], np.int64)
    logp, H, sq, lse = cr.logits_statistics(zm, y)
    ref = ref_logits(np.where(np.isinf(zm), -1e300, zm), y, 1.0)
    np.testing.assert_allclose(logp[:3], ref[0][:3], rtol=1e-10)
    assert logp[3] == -np.inf
    np.testing.assert_allclose(H, ref[1], rtol=1e-10)


@pytest.mark.parametrize("storage", STORAGE)
@pytest.mark.parametrize("cols", WIDTHS + [2100])
@pytest.mark.parametrize("tau", [1.0, 0.7])
@pytest.mark.parametrize("saved", [True, False])
def test_logits_backward(rng, storage, cols, tau, saved):
    T = 5
    z, zd = as_storage(rng.normal(0, 2, (T, cols)), storage)
    y = rng.integers(0, cols, T).astype(np.int64)
    stat = np.float64 if storage == np.float64 else np.float32
    g = rng.normal(size=T).astype(stat)
    g[1] = 0
    lse = cr.logits_statistics(z, y, temperature=tau)[3] if saved else None
    out = np.empty_like(z)
    dz = cr.logits_backward(g, z, y, logsumexp=lse, out=out, temperature=tau)
    assert dz is out and np.shares_memory(dz, out) and dz.dtype == z.dtype
    zt = zd / tau
    p = np.exp(zt - zt.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    ref = -p
    ref[np.arange(T), y] += 1
    ref *= g.astype(np.float64)[:, None] / tau
    tol = {np.float64: 1e-10, np.float32: 2e-5, np.float16: 2e-3, "bf16": 1.6e-2}[storage]
    np.testing.assert_allclose(value_of(dz), ref, rtol=tol, atol=tol * np.abs(ref).max() + 1e-7)
    assert np.all(value_of(dz)[1] == 0)
    again = cr.logits_backward(g, strided(z), y, logsumexp=lse, temperature=tau, threads=2)
    assert same_bits(again, dz)


def test_logits_backward_finite_differences(rng):
    z = rng.normal(size=(3, 17))
    y = np.array([2, 16, 0], np.int64)
    g = np.array([0.5, -1.25, 2.0])

    def loss(x):
        return float((g * cr.logits_statistics(x, y, temperature=0.7)[0]).sum())

    dz = cr.logits_backward(g, z, y, temperature=0.7)
    h = 1e-6
    fd = np.empty_like(z)
    for idx in np.ndindex(z.shape):
        e = np.zeros_like(z)
        e[idx] = h
        fd[idx] = (loss(z + e) - loss(z - e)) / (2 * h)
    np.testing.assert_allclose(dz, fd, rtol=1e-6, atol=1e-8)


# ---------------------------------------------------------------------------------- returns, GAE, OTB

def ref_discounted(r, m, gamma, rule):
    out = np.zeros(r.shape)
    for i in range(r.shape[0]):
        running = 0.0
        for t in reversed(range(r.shape[1])):
            if rule == "carry":
                running = r[i, t] + gamma * running if m[i, t] != 0 else running
                out[i, t] = running if m[i, t] != 0 else 0.0
            elif rule == "reset":
                running = r[i, t] + gamma * running
                out[i, t] = running
                running = running if m[i, t] != 0 else 0.0
            else:
                running = r[i, t] * (m[i, t] != 0) + gamma * running
                out[i, t] = running
    return out


@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("preset,rule", [("verl_new_returns", "carry"), ("verl_old_returns", "reset"),
                                         ("openrlhf_returns", "discount_through")])
def test_discounted_returns(rng, cols, dtype, preset, rule):
    r = rng.normal(size=(6, cols)).astype(dtype)
    m = random_mask(rng, 6, cols, dtype, keep_first=False)
    got = cr.discounted_returns(r, m, options=getattr(cr.presets, preset)(0.9))
    np.testing.assert_allclose(got, ref_discounted(r.astype(np.float64), m, 0.9, rule), **close(dtype))
    out = np.empty_like(r)
    assert cr.discounted_returns(strided(r), strided(m), out=out, gamma=0.9, mask_rule=rule) is out
    assert same_bits(out, got)


def ref_gae(r, v, m, gamma, lam, rule):
    A, R = np.zeros(r.shape), np.zeros(r.shape)
    for i in range(r.shape[0]):
        if rule == "carry":
            next_v, next_a = 0.0, 0.0
            for t in reversed(range(r.shape[1])):
                if m[i, t] == 0:
                    continue
                delta = r[i, t] + gamma * next_v - v[i, t]
                next_a = delta + gamma * lam * next_a
                next_v = v[i, t]
                A[i, t], R[i, t] = next_a, next_a + v[i, t]
        else:
            rm, vm = r[i] * (m[i] != 0), v[i] * (m[i] != 0)
            next_v, next_a = 0.0, 0.0
            for t in reversed(range(r.shape[1])):
                next_a = rm[t] + gamma * next_v - vm[t] + gamma * lam * next_a
                next_v = vm[t]
                A[i, t], R[i, t] = next_a, next_a + vm[t]
    return A, R


@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("rule", ["carry", "discount_through"])
def test_generalized_advantage_estimation(rng, cols, dtype, rule):
    B = 11  # more rows than a SIMD batch, and a partial one
    r = rng.normal(size=(B, cols)).astype(dtype)
    v = rng.normal(size=(B, cols)).astype(dtype)
    m = random_mask(rng, B, cols, dtype, keep_first=False)
    A, R = cr.generalized_advantage_estimation(r, v, m, gamma=0.95, lambda_=0.9, mask_rule=rule)
    rA, rR = ref_gae(r.astype(np.float64), v.astype(np.float64), m, 0.95, 0.9, rule)
    np.testing.assert_allclose(A, rA, **close(dtype))
    np.testing.assert_allclose(R, rR, **close(dtype))
    out = np.empty_like(r)
    A2, R2 = cr.generalized_advantage_estimation(strided(r), strided(v), strided(m), out=out, returns=False,
                                                 options=cr.presets.openrlhf_gae(0.95, 0.9), mask_rule=rule)
    assert A2 is out and R2 is None and same_bits(A2, A)


def ref_otb(r, m, grouping, lp, sq, rho, zero_tail=True, eps=1e-8):
    valid = m != 0
    rm = np.where(valid, r, 0)
    G = np.cumsum(rm[:, ::-1], axis=1)[:, ::-1]
    w = np.where(valid, (1 - 2 * np.exp(np.where(valid, lp, 0)) + np.where(valid, sq, 0)) * rho ** 2, 0)
    W = np.cumsum(w, axis=1)
    A = np.zeros(r.shape)
    lengths = valid.sum(axis=1)
    for idx in members(grouping, r.shape[0]):
        if idx.size == 1:
            A[idx] = G[idx] * valid[idx]
            continue
        B = (G[idx] * W[idx] * valid[idx]).sum(axis=0) / ((W[idx] * valid[idx]).sum(axis=0) + eps)
        L = np.sort(lengths[idx])
        for i in idx:
            b = B.copy()
            if zero_tail and L[-1] > L[-2] and lengths[i] == L[-1]:
                b[L[-2]:] = 0
            A[i] = (G[i] - b) * valid[i]
    return A, G


@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("preset", ["verl_new_optimal_token_baseline", "verl_old_optimal_token_baseline"])
@pytest.mark.parametrize("weighted", [False, True])
def test_optimal_token_baseline(rng, cols, dtype, preset, weighted):
    B = 9
    r = rng.normal(size=(B, cols)).astype(dtype)
    m = random_mask(rng, B, cols, dtype)
    lp = np.log(rng.uniform(0.05, 1, (B, cols))).astype(dtype)
    sq = rng.uniform(0.1, 0.9, (B, cols)).astype(dtype)
    rho = rng.uniform(0.5, 1.5, (B, cols)).astype(dtype) if weighted else None
    grouping = np.array([4, 4, 9, 4, 9, 1, 9, 9, 4], np.int64)
    o = getattr(cr.presets, preset)()
    A, G = cr.optimal_token_baseline(r, m, grouping, lp, sq, importance_weights=rho, options=o)
    f = lambda x: x.astype(np.float64)  # noqa: E731
    rA, rG = ref_otb(f(r), m, grouping, f(lp), f(sq), 1.0 if rho is None else f(rho),
                     zero_tail=o.handle_zero_tail)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(A, rA, **tol)
    np.testing.assert_allclose(G, rG, **tol)
    out = np.empty_like(r)
    A2, G2 = cr.optimal_token_baseline(strided(r), m, grouping, lp, sq, importance_weights=rho, out=out,
                                       returns=False, options=o, threads=2)
    assert A2 is out and G2 is None and same_bits(A2, A)


def test_optimal_token_baseline_compact_on_prefix_masks(rng):
    # Valid tokens first and no empty response: packing changes nothing, so TIR = the full form.
    B, T = 8, 17
    r, lp, sq = rng.normal(size=(B, T)), np.log(rng.uniform(0.1, 1, (B, T))), rng.uniform(0.1, 0.9, (B, T))
    m = (np.arange(T)[None, :] < rng.integers(1, T + 1, B)[:, None]).astype(np.float64)
    full, _ = cr.optimal_token_baseline(r, m, 4, lp, sq, options=cr.presets.verl_new_optimal_token_baseline())
    tir, _ = cr.optimal_token_baseline(r, m, 4, lp, sq, options=cr.presets.verl_tir_optimal_token_baseline())
    np.testing.assert_allclose(tir, full, rtol=1e-12, atol=1e-12)
    assert cr.presets.verl_tir_optimal_token_baseline().compact


# ------------------------------------------------------------------------------------------ spans

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("outside", ["zero", "response_advantage"])
@pytest.mark.parametrize("form", ["list", "array"])
def test_span_advantages(rng, dtype, outside, form):
    B, T, K = 4, 33, 3
    pos = rng.normal(size=(B, K)).astype(dtype)
    resp = rng.normal(size=B).astype(dtype)
    mask = random_mask(rng, B, T, dtype)
    table = [(0, 2, 10, 0), (0, 12, 20, 2), (2, 0, 33, 1), (3, 5, 5, 0), (1, 30, 33, 1)]
    spans = [cr.span(*s) for s in table] if form == "list" else np.array(table, np.int64)
    got = cr.span_advantages(spans, pos, mask, resp if outside == "response_advantage" else None, outside=outside)
    ref = np.zeros((B, T)) if outside == "zero" else np.repeat(resp.astype(np.float64)[:, None], T, axis=1)
    for i, s, e, j in table:
        ref[i, s:e] = pos[i, j]
    ref = np.where(mask != 0, ref, 0.0)
    assert same_bits(got, ref.astype(dtype))
    out = np.empty_like(mask)
    assert cr.span_advantages(spans, strided(pos), strided(mask), resp, out=out, outside=outside) is out
    assert same_bits(out, got)
    with pytest.raises(ValueError, match="overlap"):
        cr.span_advantages([cr.span(0, 0, 5, 0), cr.span(0, 4, 8, 1)], pos, mask)
    with pytest.raises(TypeError, match="spans"):
        cr.span_advantages(np.array(table, np.int32), pos, mask)
    assert "span(sample=0, start=2" in repr(cr.span(0, 2, 10, 0))


# ------------------------------------------------------------------------------------------ turns

def turn_data(rng, dtype, B=12, N=5):
    table = rng.normal(size=(B, N)).astype(dtype)
    counts = rng.integers(0, N + 1, B).astype(np.int64)
    counts[:3] = [N, N - 1, 1]
    return table, counts


def returns_of(r, n, gamma):
    G = np.zeros(n)
    running = 0.0
    for t in reversed(range(n)):
        running = r[t] + gamma * running
        G[t] = running
    return G


def ref_a2tgpo(ig, counts, grouping, outcome, gamma=1.0, alpha=0.3, kappa=0.3, ddof=0, eps=1e-6):
    B, N = ig.shape
    norm = np.zeros((B, N))
    for idx in members(grouping, B):
        for t in range(N):
            cell = [i for i in idx if counts[i] > t]
            if cell:
                norm[cell, t] = zscore(ig[cell, t], ddof, eps)
    A, C = np.zeros((B, N)), np.ones((B, N))
    for i in range(B):
        n = counts[i]
        D = returns_of(norm[i], n, gamma)
        for t in range(n):
            A[i, t] = outcome[i] + alpha * D[t] / math.sqrt(n - t)
            C[i, t] = 1 + kappa * (2 / (1 + math.exp(-norm[i, t])) - 1)
        if n < N:
            A[i, n] = outcome[i]
    return A, C


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kind", ["contiguous", "int64"])
@pytest.mark.parametrize("N", [1, 5, 17])
def test_a2tgpo_advantages(rng, dtype, kind, N):
    ig, counts = turn_data(rng, dtype, N=N)
    counts = np.minimum(counts, N - 1) if N > 1 else np.zeros_like(counts)
    outcome = rng.normal(size=12).astype(dtype)
    grouping = 4 if kind == "contiguous" else np.repeat([5, 2, 7], 4).astype(np.int64)
    A, C = cr.a2tgpo_advantages(ig, counts, grouping, outcome, gamma=0.9)
    rA, rC = ref_a2tgpo(ig.astype(np.float64), counts, grouping, outcome.astype(np.float64), gamma=0.9)
    np.testing.assert_allclose(A, rA, **close(dtype))
    np.testing.assert_allclose(C, rC, **close(dtype))
    out = np.empty_like(ig)
    A2, C2 = cr.a2tgpo_advantages(strided(ig), counts, grouping, outcome, out=out, clip_scale=False, gamma=0.9)
    assert A2 is out and C2 is None and same_bits(A2, A)


def pop_z(x, eps):
    x = np.asarray(x, np.float64)
    if x.size < 2 or np.all(x == x[0]):
        return np.zeros_like(x)
    return (x - x.mean()) / (x.std() + eps)


def ref_mapo(r, counts, grouping, alpha=0.5, gamma=1.0, eps=1e-8, scope="group"):
    B, N = r.shape
    G = np.zeros((B, N))
    for i in range(B):
        G[i, :counts[i]] = returns_of(r[i], counts[i], gamma)
    turn, group = np.zeros((B, N)), np.zeros((B, N))
    sets = members(grouping, B) if scope == "group" else [np.arange(B)]
    for idx in members(grouping, B):
        for t in range(N):
            cell = [i for i in idx if counts[i] > t]
            if cell:
                turn[cell, t] = pop_z(G[cell, t], eps)
    for idx in sets:
        rows = np.concatenate([np.full(counts[i], i) for i in idx]).astype(int)
        cols = np.concatenate([np.arange(counts[i]) for i in idx]).astype(int)
        if rows.size:
            group[rows, cols] = pop_z(r[rows, cols], eps)
    return alpha * turn + (1 - alpha) * group


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("scope", ["group", "batch"])
@pytest.mark.parametrize("N", [1, 5, 17])
def test_mapo_advantages(rng, dtype, scope, N):
    r, counts = turn_data(rng, dtype, N=N)
    counts = np.minimum(counts, N)
    got = cr.mapo_advantages(r, counts, 4, gamma=0.9, immediate_scope=scope)
    ref = ref_mapo(r.astype(np.float64), counts, 4, gamma=0.9, scope=scope)
    np.testing.assert_allclose(got, ref, **close(dtype))
    out = np.empty_like(r)
    assert cr.mapo_advantages(strided(r), counts, 4, out=out, gamma=0.9, immediate_scope=scope) is out
    assert same_bits(out, got)


def ref_gtpo(r, counts, grouping, gamma=0.9, scope="all_turns", ddof=1, eps=1e-6):
    B, N = r.shape
    G = np.zeros((B, N))
    for i in range(B):
        G[i, :counts[i]] = returns_of(r[i], counts[i], gamma)
    A = np.zeros((B, N))
    for idx in members(grouping, B):
        if scope == "all_turns":
            rows = np.concatenate([np.full(counts[i], i) for i in idx]).astype(int)
            cols = np.concatenate([np.arange(counts[i]) for i in idx]).astype(int)
            if rows.size:
                A[rows, cols] = zscore(G[rows, cols], ddof, eps)
        else:
            for t in range(N):
                cell = [i for i in idx if counts[i] > t]
                if cell:
                    A[cell, t] = zscore(G[cell, t], ddof, eps)
    return A


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("scope", ["all_turns", "turn_index"])
@pytest.mark.parametrize("kind", ["contiguous", "int32"])
def test_gtpo_advantages(rng, dtype, scope, kind):
    r, counts = turn_data(rng, dtype, N=17)
    grouping = 3 if kind == "contiguous" else np.repeat([9, 1, 4, 6], 3).astype(np.int32)
    got = cr.gtpo_advantages(r, counts, grouping, scope=scope)
    np.testing.assert_allclose(got, ref_gtpo(r.astype(np.float64), counts, grouping, scope=scope), **close(dtype))
    out = np.empty_like(r)
    assert cr.gtpo_advantages(strided(r), counts, grouping, out=out, scope=scope, threads=3) is out
    assert same_bits(out, got)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("cols", WIDTHS)
def test_turns_to_tokens(rng, dtype, cols):
    B, N = 4, 3
    per_turn = rng.normal(size=(B, N)).astype(dtype)
    index = np.sort(rng.integers(-1, N, (B, cols)), axis=1).astype(np.int64)
    got = cr.turns_to_tokens(per_turn, index, outside=-5.0)
    ref = np.where(index < 0, -5.0, per_turn[np.arange(B)[:, None], np.maximum(index, 0)].astype(np.float64))
    assert same_bits(got, ref.astype(dtype))
    out = np.empty(index.shape, dtype)
    assert cr.turns_to_tokens(strided(per_turn), strided(index), out=out, outside=-5.0) is out
    assert same_bits(out, got)


# ---------------------------------------------------------------------------------------- the API

def test_options_presets_and_shared_types():
    assert cr.return_mask_rule is adv.return_mask_rule
    o = cr.presets.openrlhf_gae(0.9, 0.8)
    assert (o.gamma, o.lambda_, o.mask_rule) == (0.9, 0.8, cr.return_mask_rule.discount_through)
    assert cr.presets.verl_old_returns(0.5).mask_rule == cr.return_mask_rule.reset
    assert cr.presets.hapo_released_code().sign == cr.hapo_sign.released_code
    assert not cr.presets.verl_old_optimal_token_baseline().handle_zero_tail
    from normkit.credit.presets import hapo_paper
    assert hapo_paper().pivot == 0.8
    c = cr.cort_options()
    assert (c.mapping, c.temperature, c.min_weight, c.max_weight, c.normalize) == (
        cr.cort_mapping.clipped_exp, 1.0, 0.5, 2.0, True)
    assert cr.gtpo_options().gamma == 0.9 and cr.mapo_options().eps == 1e-8 and cr.a2tgpo_options().alpha == 0.3
    assert "temperature=1.0" in repr(cr.logits_options())
    copy = cr.cort_options(c)
    copy.temperature = 2.0
    assert c.temperature == 1.0
    for f in (cr.broadcast_advantages, cr.logits_statistics, cr.generalized_advantage_estimation, cr.cort_weights):
        assert "Options" in f.__doc__ and "threads=1" in f.__doc__


def test_bad_input(rng):
    z = rng.normal(size=(3, 8)).astype(np.float32)
    y = np.array([0, 1, 2], np.int64)
    with pytest.raises(TypeError, match="tokens has dtype int32"):
        cr.logits_statistics(z, y.astype(np.int32))
    with pytest.raises(TypeError, match="logits has dtype int64"):
        cr.logits_statistics(z.astype(np.int64), y)
    with pytest.raises(TypeError, match="unexpected keyword argument 'tau'"):
        cr.logits_statistics(z, y, tau=0.5)
    with pytest.raises(ValueError, match="entropy has shape"):
        cr.logits_statistics(z, y, entropy=np.empty(4, np.float32))
    with pytest.raises(TypeError, match="entropy has dtype float64"):
        cr.logits_statistics(z, y, entropy=np.empty(3, np.float64))
    with pytest.raises(ValueError):  # a token id outside [0, V)
        cr.logits_statistics(z, np.array([0, 1, 8], np.int64))
    with pytest.raises(ValueError, match="temperature"):
        cr.logits_statistics(z, y, temperature=0)
    with pytest.raises(ValueError, match="contiguous"):
        cr.logits_statistics(np.asfortranarray(z), y)
    with pytest.raises(TypeError, match="output_gradient has dtype float64"):
        cr.logits_backward(np.ones(3), z, y)
    frozen = np.empty_like(z)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="not writeable"):
        cr.logits_backward(np.ones(3, np.float32), z, y, out=frozen)
    r = rng.normal(size=(4, 5))
    m = np.ones((4, 5))
    with pytest.raises(TypeError, match="mask has dtype float32"):
        cr.discounted_returns(r, m.astype(np.float32))
    with pytest.raises(TypeError, match="rewards has dtype float16"):
        cr.discounted_returns(r.astype(np.float16), m)
    with pytest.raises(ValueError, match="gamma"):
        cr.discounted_returns(r, m, gamma=1.5)
    with pytest.raises(ValueError):
        cr.discounted_returns(r, np.ones((4, 6)))
    with pytest.raises(ValueError, match="mask_rule must be one of"):
        cr.discounted_returns(r, m, mask_rule="skip")
    with pytest.raises(TypeError, match="options must be a normkit discounted_returns_options"):
        cr.discounted_returns(r, m, options=cr.gae_options())
    with pytest.raises(TypeError, match="turn_count has dtype int32"):
        cr.gtpo_advantages(r, np.array([1, 2, 3, 4], np.int32), 2)
    with pytest.raises(ValueError, match="turn_count"):
        cr.gtpo_advantages(r, np.array([1, 2, 3, 9], np.int64), 2)
    with pytest.raises(TypeError, match="turn_index has dtype int32"):
        cr.turns_to_tokens(r, np.zeros((4, 3), np.int32))
    with pytest.raises(TypeError, match="grouping"):
        cr.hapo_token_advantages(np.ones(4), 2.5, m)
    with pytest.raises(TypeError, match="mask has dtype float32 but must be uint8 or float64"):
        cr.broadcast_advantages(np.ones(4), m.astype(np.float32), out=np.empty((4, 5)))
    with pytest.raises(TypeError, match="mask must be a numpy.ndarray"):
        cr.top_entropy_mask(r, [[1.0] * 5] * 4)
    with pytest.raises(ValueError, match="rho"):
        cr.top_entropy_mask(r, m, rho=2.0)
    with pytest.raises(ValueError):  # the output overlaps an input
        cr.generalized_advantage_estimation(r, r.copy(), m, out=r)
