"""normkit.advantage against double-precision numpy references and the frameworks' own numbers.

The references below are the formulas of include/normkit/advantage/*.hpp written out in float64;
the golden tables at the end are copied from tests/advantage/golden_verl.hpp and golden_trl.hpp
(the output of verl's and TRL's own functions at the commits those files name).
"""
import copy
import math
from math import inf, nan

import numpy as np
import pytest

import normkit.advantage as adv

FLOATS = [np.float32, np.float64]
KINDS = ["contiguous", "int64", "int32"]


def close(dtype):
    return dict(rtol=3e-5, atol=3e-5) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-12)


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.fixture
def rng():
    return np.random.default_rng(20240607)


def ragged_ids(rng, groups=10, dtype=np.int64, smallest=1, largest=6):
    """Shuffled ids of groups of 1–6 samples with labels that are not 0..G−1."""
    ids = np.repeat(np.arange(groups) * 5 + 2, rng.integers(smallest, largest + 1, groups))
    rng.shuffle(ids)
    return ids.astype(dtype)


def grouping_of(rng, kind, G=4, groups=10, smallest=1):
    if kind == "contiguous":
        return G, G * groups
    ids = ragged_ids(rng, groups, np.int64 if kind == "int64" else np.int32, smallest)
    return ids, ids.size


def members(grouping, n):
    """Each group's sample indices, groups in order of first appearance."""
    ids = np.arange(n) // grouping if isinstance(grouping, int) else np.asarray(grouping)
    _, first = np.unique(ids, return_index=True)
    return [np.flatnonzero(ids == ids[i]) for i in np.sort(first)]


# ------------------------------------------------------------------------------------- references

def ref_grpo(r, grouping, eps=1e-6, scale=True):
    """(r − μ_g)/(σ_g + ε), σ unbiased; a group of one keeps its raw value (μ = 0, σ = 1)."""
    r = r.astype(np.float64)
    out = np.empty_like(r)
    for idx in members(grouping, r.size):
        g = r[idx]
        mu, sd = (0.0, 1.0) if g.size == 1 else (g.mean(), g.std(ddof=1))
        out[idx] = (g - mu) / (sd + eps) if scale else g - mu
    return out


def ref_rloo(r, grouping):
    r = r.astype(np.float64)
    out = r.copy()
    for idx in members(grouping, r.size):
        g = r[idx]
        if g.size > 1:
            out[idx] = g - (g.sum() - g) / (g.size - 1)
    return out


def ref_gapo(r, grouping, fraction=0.5, median=True, eps=1e-6, scale=True):
    r = r.astype(np.float64)
    out = np.empty_like(r)
    for idx in members(grouping, r.size):
        s = np.sort(r[idx])
        n = s.size
        q, spread = 0.0, 1.0
        if n > 1:
            m = min(max(math.ceil(n * (100.0 * fraction) / 100.0), 1), n)
            widths = s[m - 1:] - s[:n - m + 1]
            w = s[int(np.argmin(widths)):][:m]
            q = (w[m // 2] if m % 2 else (w[m // 2 - 1] + w[m // 2]) / 2) if median else w.mean()
            spread = math.sqrt(((s - q) ** 2).sum() / (n - 1))
        out[idx] = (r[idx] - q) / (spread + eps) if scale else r[idx] - q
    return out


def ref_pass_at_k(r, grouping, scale=True, eps=1e-6):
    r = r.astype(np.float64)
    out = np.zeros_like(r)
    for idx in members(grouping, r.size):
        g = r[idx]
        order = np.argsort(-g, kind="stable")
        a = g[order[0]] - g[order[1]]
        out[idx[order[0]]] = a / (g.std(ddof=1) + eps) if scale else a
    return out


def ref_token_whiten(a, weights, ddof=1, eps=1e-8, clamp=False):
    """Each sample's value on weights[i] tokens, whitened over the tokens."""
    w = weights.astype(np.float64)
    mean = (a * w).sum() / w.sum()
    var = (w * (a - mean) ** 2).sum() / (w.sum() - ddof)
    return (a - mean) / (math.sqrt(max(var, eps)) if clamp else math.sqrt(var + eps))


def ref_returns(rewards, mask, gamma, carry):
    rows, cols = rewards.shape
    out = np.zeros((rows, cols))
    for i in range(rows):
        running = 0.0
        for t in reversed(range(cols)):
            m = mask[i, t]
            if carry:
                running = rewards[i, t] + gamma * running if m != 0 else running
                out[i, t] = running * m
            else:
                running = rewards[i, t] + gamma * running
                out[i, t] = running
                running *= m
    return out


def ref_masked_whiten(x, mask, ddof=1, eps=1e-8, clamp=False, shift_mean=True, scale=True):
    kept = x[mask != 0].astype(np.float64)
    mean = kept.mean() if kept.size else 0.0
    var = kept.var(ddof=ddof) if kept.size > ddof else 0.0
    d = 1.0 if not scale else math.sqrt(max(var, eps)) if clamp else math.sqrt(var + eps)
    return (x - mean) / d + (0.0 if shift_mean else mean)


def nanstd(x):
    kept = x[~np.isnan(x)]
    return kept.std(ddof=1) if kept.size > 1 else nan


def ref_trl_gdpo(columns, grouping, weights):
    n, K = columns.shape
    total = np.zeros(n)
    for k in range(K):
        c = columns[:, k]
        for idx in members(grouping, n):
            g = c[idx]
            mean = np.nanmean(g) if (~np.isnan(g)).any() else nan
            total[idx] += weights[k] * np.nan_to_num((g - mean) / (nanstd(g) + 1e-4))
    s = np.where(np.isnan(columns).all(axis=1), nan, total)
    return np.nan_to_num((s - np.nanmean(s)) / (nanstd(s) + 1e-4))


def ref_bnpo(r, grouping, alpha=None, beta=None, clamp=1e6):
    r = r.astype(np.float64)
    low, high = r.min(), r.max()
    x = (r - low) / (high - low) if high > low else np.zeros_like(r)
    groups = members(grouping, r.size)
    p = np.empty_like(x)
    ps = []
    for idx in groups:
        p[idx] = x[idx].mean()
        ps.append(x[idx].mean())
    a, b = 1.0, 1.0
    if alpha is not None:
        a, b = alpha, beta
    elif len(ps) >= 2:
        m, v = np.mean(ps), np.var(ps, ddof=1)
        if v > 0 and 0 < m < 1:
            a = max(1.0, 1 + (m * (1 - m) / v - 1) * m / 3)
            b = max(1.0, 1 + (m * (1 - m) / v - 1) * (1 - m) / 3)
    f = p ** (a - 1) * (1 - p) ** (b - 1) * math.gamma(a + b) / (math.gamma(a) * math.gamma(b))
    with np.errstate(divide="ignore"):
        scale = np.minimum(np.maximum(1 / f, 0.0), clamp)
    return (x - p) * scale, (a, b)


def ref_scrl(rewards, grouping, eps=0.0):
    n, K = rewards.shape
    progress = np.array([next((j for j in range(K) if rewards[i, j] != 1), K) for i in range(n)])
    corrected = np.where(np.arange(K)[None, :] < progress[:, None], rewards, 0.0)
    out = np.zeros((n, K))
    for idx in members(grouping, n):
        for j in range(K):
            c = corrected[idx, j]
            sd = c.std()
            out[idx, j] = (c - c.mean()) / (sd + eps) if sd > 0 else 0.0
    return out


def ref_gepo(a, grouping, log_probs, mask, state, al=0.5, ah=0.2, bl=0.2, bh=0.3, gamma=0.01):
    """Returns (shaped, entropy per group in order of first appearance, new (initialized, low, high))."""
    groups = members(grouping, a.size)
    entropy = []
    for idx in groups:
        tokens = mask[idx].sum()
        entropy.append(-(log_probs[idx] * mask[idx]).sum() / tokens if tokens > 0 else None)
    values = np.array([h for h in entropy if h is not None])
    out = a.astype(np.float64)
    if values.size == 0:
        return out, entropy, state
    mu, sigma = values.mean(), values.std()
    low, high = mu - bl * sigma, mu + bh * sigma
    if state[0]:
        low, high = (1 - gamma) * state[1] + gamma * low, (1 - gamma) * state[2] + gamma * high
    for idx, h in zip(groups, entropy):
        if h is None:
            continue
        for i in idx:
            if out[i] > 0 and h < low:
                out[i] *= al
            elif out[i] < 0 and h > high:
                out[i] *= ah
    return out, entropy, (True, low, high)


# -------------------------------------------------------------------------------- the estimators

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_grpo_family(rng, kind, dtype):
    grouping, n = grouping_of(rng, kind)
    r = (rng.normal(size=n) * 3 + 10).astype(dtype)
    np.testing.assert_allclose(adv.grpo(r, grouping), ref_grpo(r, grouping), **close(dtype))
    np.testing.assert_allclose(adv.grpo(r, grouping, eps=1e-4, scale_by_std=True), ref_grpo(r, grouping, 1e-4),
                               **close(dtype))
    np.testing.assert_allclose(adv.grpo(r, grouping, scale_by_std=False), ref_grpo(r, grouping, scale=False),
                               **close(dtype))
    np.testing.assert_allclose(adv.dr_grpo(r, grouping), ref_grpo(r, grouping, scale=False), **close(dtype))
    np.testing.assert_allclose(adv.rloo(r, grouping), ref_rloo(r, grouping), **close(dtype))
    alpha = n / max(1, np.count_nonzero(r))
    np.testing.assert_allclose(adv.gpg(r, grouping), alpha * ref_grpo(r, grouping, scale=False), **close(dtype))
    # group_normalize's defaults are grpo's, and grpo_normalization says what grpo runs.
    assert same_bits(adv.group_normalize(r, grouping), adv.grpo(r, grouping))
    o = adv.grpo_normalization(scale_by_std=False, threads=2)
    assert o.scale == adv.scale_mode.none and o.threads == 2
    assert same_bits(adv.group_normalize(r, grouping, options=o), adv.dr_grpo(r, grouping))
    out = adv.grpo(r, grouping)
    assert out.dtype == dtype and out.shape == r.shape


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("median, fraction", [(True, 0.5), (False, 0.5), (True, 0.3)])
def test_gapo(rng, kind, dtype, median, fraction):
    grouping, n = grouping_of(rng, kind, G=7)
    r = rng.integers(0, 5, n).astype(dtype) / 4 + rng.normal(size=n).astype(dtype) * 0.1
    got = adv.gapo(r, grouping, median=median, target_fraction=fraction)
    np.testing.assert_allclose(got, ref_gapo(r, grouping, fraction, median), **close(dtype))
    np.testing.assert_allclose(adv.gapo(r, grouping, median=median, target_fraction=fraction, scale_by_std=False),
                               ref_gapo(r, grouping, fraction, median, scale=False), **close(dtype))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_pass_at_k(rng, kind, dtype):
    grouping, n = grouping_of(rng, kind, smallest=2)
    r = rng.normal(size=n).astype(dtype)
    np.testing.assert_allclose(adv.pass_at_k(r, grouping), ref_pass_at_k(r, grouping), **close(dtype))
    np.testing.assert_allclose(adv.pass_at_k(r, grouping, scale_by_std=False),
                               ref_pass_at_k(r, grouping, scale=False), **close(dtype))
    with pytest.raises(ValueError):
        adv.pass_at_k(r, 1)  # a group of one has no runner-up


@pytest.mark.parametrize("dtype", FLOATS)
def test_opo_golden_verl(dtype):
    for name, c in VERL_OPO:
        rows, cols, G = int(c["rows"][0]), int(c["cols"][0]), int(c["group_size"][0])
        rewards = np.array(c["token_level_rewards"]).reshape(rows, cols)
        mask = np.array(c["response_mask"]).reshape(rows, cols)
        expected = np.array(c["advantages"]).reshape(rows, cols)
        scores, lengths = rewards.sum(axis=1).astype(dtype), mask.sum(axis=1).astype(np.int64)
        got = adv.opo(scores, np.arange(rows, dtype=np.int64) // G, lengths)
        for start in range(0, rows, G):
            group = slice(start, start + G)
            if lengths[group].sum() == 0:  # verl: 0/0 for the group; normkit: the unweighted mean
                assert np.isnan(expected[group]).all()
                np.testing.assert_allclose(got[group], scores[group] - scores[group].astype(float).mean(),
                                           **close(dtype), err_msg=name)
                continue
            for i in range(start, start + G):
                for t in np.flatnonzero(mask[i]):
                    np.testing.assert_allclose(got[i], expected[i, t], **close(dtype), err_msg=name)


@pytest.mark.parametrize("kind", KINDS)
def test_opo_reference(rng, kind):
    grouping, n = grouping_of(rng, kind)
    r, lengths = rng.normal(size=n), rng.integers(1, 20, n).astype(np.int64)
    expected = r.copy()
    for idx in members(grouping, n):
        if idx.size > 1:
            expected[idx] -= (lengths[idx] * r[idx]).sum() / lengths[idx].sum()
    np.testing.assert_allclose(adv.opo(r, grouping, lengths), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_dapo_filter(rng, kind, dtype):
    grouping, n = grouping_of(rng, kind)
    r = (rng.integers(0, 3, n) / 2).astype(dtype)
    spread, in_range = np.zeros(n, np.uint8), np.zeros(n, np.uint8)
    kept_spread = kept_range = 0
    for idx in members(grouping, n):
        g = r[idx].astype(np.float64)
        s, m = g.min() < g.mean() < g.max(), 0.2 < g.mean() < 0.9
        spread[idx], in_range[idx] = s, m
        kept_spread, kept_range = kept_spread + s, kept_range + m
    keep, kept = adv.dapo_filter(r, grouping)
    assert keep.dtype == np.uint8 and np.array_equal(keep, spread) and kept == kept_spread
    keep, kept = adv.dapo_filter(r, grouping, rule="mean_in_range", low=0.2, high=0.9)
    assert np.array_equal(keep, in_range) and kept == kept_range
    keep, kept = adv.dapo_filter(r, grouping, options=adv.presets.openrlhf_dynamic_filtering(0.2, 0.9))
    assert np.array_equal(keep, in_range) and kept == kept_range
    with pytest.raises(ValueError, match="range"):
        adv.dapo_filter(r, grouping, options=adv.presets.openrlhf_dynamic_filtering(1.0, 0.0))


@pytest.mark.parametrize("dtype", FLOATS)
def test_w_reinforce_and_dna_train(rng, dtype):
    r = rng.normal(size=24).astype(dtype)
    np.testing.assert_allclose(adv.w_reinforce(r), np.where(r > 0, 0.1 * r.astype(float), r), **close(dtype))
    np.testing.assert_allclose(adv.w_reinforce(r, positive_weight=1.0), r, **close(dtype))
    expected = np.where(r > 0, 0.3 * r.astype(float), r)
    same = adv.w_reinforce(r, out=r, positive_weight=0.3)  # in place is allowed
    assert same is r
    np.testing.assert_allclose(r, expected, **close(dtype))

    a = rng.normal(size=24).astype(dtype)
    a[8:12] = 0  # the real side of the second pair: Σ|A| = 0 stays 0
    expected = a.astype(np.float64)
    for p in range(0, 24, 8):
        real, cf = np.abs(expected[p:p + 4]).sum(), np.abs(expected[p + 4:p + 8]).sum()
        target = (real + cf) / 2
        expected[p:p + 4] *= target / real if real > 0 else 0
        expected[p + 4:p + 8] *= target / cf if cf > 0 else 0
    np.testing.assert_allclose(adv.dna_train(a, group_size=4), expected, **close(dtype))
    with pytest.raises(ValueError, match="group_size"):
        adv.dna_train(a)  # G is required
    with pytest.raises(ValueError):
        adv.dna_train(a, group_size=5)  # 24 is not a multiple of 2G


def test_masked_whiten_golden_verl():
    dtype = np.float64  # the offset case (1e4) is beyond float32's resolution
    for name, c in VERL_MASKED_WHITEN:
        shape = int(c["rows"][0]), int(c["cols"][0])
        values = np.array(c["values"], dtype).reshape(shape)
        mask = np.array(c["mask"], dtype).reshape(shape)
        out, stats = adv.masked_whiten(values, mask, shift_mean=c["shift_mean"][0] != 0)
        assert stats.count == mask.sum()
        expected = np.array(c["whitened"]).reshape(shape)
        if name == "constant":  # verl's masked_mean residue (μ·1e-8/N) leaves 6e-6; the exact mean gives 0
            assert np.abs(out).max() == 0 and np.abs(expected).max() < 1e-5
            continue
        # verl divides by Σm + 1e-8: its mean is low by μ·1e-8/N (2.4e-5 in the output at μ = 1e4).
        shift = abs(stats.mean) * 1e-8 / stats.count / math.sqrt(stats.variance(1) + 1e-8)
        np.testing.assert_allclose(out, expected, rtol=1e-9, atol=1e-9 + 2 * shift, err_msg=name)


@pytest.mark.parametrize("dtype", FLOATS)
def test_masked_whiten_reference_and_openrlhf(rng, dtype):
    x = (rng.normal(size=(5, 9)) * 2 + 3).astype(dtype)
    mask = (rng.random((5, 9)) > 0.3).astype(dtype)
    out, stats = adv.masked_whiten(x, mask)
    np.testing.assert_allclose(out, ref_masked_whiten(x.astype(float), mask), **close(dtype))
    kept = x[mask != 0].astype(float)
    assert stats.count == kept.size
    np.testing.assert_allclose([stats.mean, stats.m2], [kept.mean(), ((kept - kept.mean()) ** 2).sum()],
                               rtol=1e-6 if dtype == np.float32 else 1e-12)
    for flag in (False, True):
        out, _ = adv.masked_whiten(x, mask, options=adv.presets.openrlhf_whiten(flag))
        expected = ref_masked_whiten(x.astype(float), mask, ddof=0, clamp=True, scale=not flag)
        np.testing.assert_allclose(out, expected, **close(dtype))
    out, _ = adv.masked_whiten(x, mask, shift_mean=False)
    np.testing.assert_allclose(out, ref_masked_whiten(x.astype(float), mask, shift_mean=False), **close(dtype))
    expected = ref_masked_whiten(x.astype(float), mask)
    same, _ = adv.masked_whiten(x, mask, out=x)  # in place is allowed
    assert same is x
    np.testing.assert_allclose(x, expected, **close(dtype))
    with pytest.raises(ValueError, match="ddof"):
        adv.masked_whiten(x, mask, ddof=2)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("gamma, rule", [(1.0, "carry"), (0.9, "carry"), (0.9, "reset")])
def test_reinforce_pp(rng, dtype, gamma, rule):
    rewards = rng.normal(size=(6, 8)).astype(dtype)
    mask = (rng.random((6, 8)) > 0.25).astype(dtype)
    advantages, returns = adv.reinforce_pp(rewards, mask, gamma=gamma, mask_rule=rule)
    expected_returns = ref_returns(rewards.astype(float), mask, gamma, rule == "carry")
    np.testing.assert_allclose(returns, expected_returns, **close(dtype))
    whitened = ref_masked_whiten(expected_returns, mask) * mask
    np.testing.assert_allclose(advantages, whitened, **close(dtype))
    a, none = adv.reinforce_pp(rewards, mask, returns=False, gamma=gamma, mask_rule=rule)
    assert none is None and same_bits(a, advantages)
    plain, _ = adv.reinforce_pp(rewards, mask, gamma=gamma, mask_rule=rule,
                                whiten=adv.whiten_options())  # mode none: the returns themselves, masked
    np.testing.assert_allclose(plain, expected_returns * mask, **close(dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_remax(rng, dtype):
    rewards = rng.normal(size=(5, 7)).astype(dtype)
    mask = (rng.random((5, 7)) > 0.3).astype(dtype)
    baselines = rng.normal(size=5).astype(dtype)
    advantages, returns = adv.remax(rewards, mask, baselines)
    g = np.cumsum((rewards.astype(float) * mask)[:, ::-1], axis=1)[:, ::-1]
    np.testing.assert_allclose(returns, g, **close(dtype))
    np.testing.assert_allclose(advantages, g - baselines[:, None].astype(float) * mask, **close(dtype))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_reinforce_pp_baseline(rng, kind, dtype):
    grouping, n = grouping_of(rng, kind)
    r = rng.normal(size=n).astype(dtype)
    lengths = rng.integers(1, 9, n).astype(np.int64)
    token_mask = (np.arange(9)[None, :] < lengths[:, None]).astype(np.uint8)
    expected = ref_token_whiten(ref_grpo(r, grouping, scale=False), lengths)
    by_mask = adv.reinforce_pp_baseline(r, grouping, token_mask)
    np.testing.assert_allclose(by_mask, expected, **close(dtype))
    assert same_bits(adv.reinforce_pp_baseline(r, grouping, lengths=lengths), by_mask)
    # = group_normalize with verl's preset
    np.testing.assert_allclose(adv.group_normalize(r, grouping, lengths=lengths,
                                                   options=adv.presets.verl_reinforce_pp_baseline()),
                               expected, **close(dtype))
    # the full form: an invalid sample gets 0 and leaves the statistics
    valid = np.ones(n, np.uint8)
    valid[::5] = 0
    got = adv.reinforce_pp_baseline(r, grouping, token_mask, valid=valid)
    assert (got[::5] == 0).all()


# --------------------------------------------------------------------------------- multi-reward

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_gdpo(rng, kind, dtype):
    grouping, n = grouping_of(rng, kind, smallest=2)
    columns = rng.normal(size=(n, 3)).astype(dtype)
    trl_columns = columns.copy()
    trl_columns[rng.random((n, 3)) < 0.15] = np.nan
    trl_columns[0] = np.nan  # unscorable: 0
    weights = [1.0, 0.5, 2.0]
    got = adv.gdpo(trl_columns, grouping, weights=weights)
    assert got[0] == 0
    np.testing.assert_allclose(got, ref_trl_gdpo(trl_columns.astype(float), grouping, weights), **close(dtype))
    # verl: verl GRPO per column, the weighted sum whitened over tokens
    lengths = rng.integers(1, 6, n).astype(np.int64)
    total = sum(w * ref_grpo(columns[:, k], grouping) for k, w in enumerate(weights))
    got = adv.gdpo(columns, grouping, lengths=lengths, flavour="verl", weights=weights)
    np.testing.assert_allclose(got, ref_token_whiten(total, lengths), **close(dtype))
    token_mask = (np.arange(6)[None, :] < lengths[:, None]).astype(np.uint8)
    assert same_bits(adv.gdpo(columns, grouping, token_mask=token_mask, flavour="verl", weights=weights), got)
    with pytest.raises(ValueError, match="lengths or a token_mask"):
        adv.gdpo(columns, grouping, flavour=adv.gdpo_flavour.verl)


@pytest.mark.parametrize("dtype", FLOATS)
def test_sa_mrpo(rng, dtype):
    columns = rng.random((24, 2)).astype(dtype)
    columns[3, 1] = np.nan
    lower, upper, weights = [0.0, -1.0], [1.0, 2.0], [1.0, 3.0]
    out, w = adv.sa_mrpo(columns, 4, gamma=0.0, lower=lower, upper=upper, weights=weights)
    assert same_bits(out, adv.gdpo(columns, 4, weights=weights)) and np.array_equal(w, weights)
    out, w = adv.sa_mrpo(columns, 4, gamma=0.5, lower=lower, upper=upper, weights=weights)
    s = np.clip((np.nanmean(columns.astype(float), axis=0) - lower) / (np.array(upper) - lower), 0, 1)
    np.testing.assert_allclose(w, np.array(weights) * (1 - s) ** 0.5, rtol=1e-12)
    assert w.dtype == np.float64
    assert same_bits(out, adv.gdpo(columns, 4, weights=list(w)))
    out2, none = adv.sa_mrpo(columns, 4, effective_weights=False, lower=lower, upper=upper, weights=weights)
    assert none is None and same_bits(out2, out)
    with pytest.raises(ValueError):
        adv.sa_mrpo(columns, 4, lower=[0.0], upper=[1.0])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_bnpo(rng, kind, dtype):
    grouping, n = grouping_of(rng, kind, G=6)
    r = (rng.integers(0, 5, n) / 4).astype(dtype)
    out, fit = adv.bnpo(r, grouping)
    expected, (a, b) = ref_bnpo(r, grouping)
    np.testing.assert_allclose([fit.alpha, fit.beta], [a, b], rtol=1e-12)
    np.testing.assert_allclose(out, expected, **close(dtype))
    out, fit = adv.bnpo(r, grouping, alpha=1.5, beta=1.5)
    assert (fit.alpha, fit.beta) == (1.5, 1.5)
    np.testing.assert_allclose(out, ref_bnpo(r, grouping, 1.5, 1.5)[0], **close(dtype))
    # α = β = 1: REINFORCE with the group-mean baseline (on the rescaled rewards)
    x = (r.astype(float) - r.min()) / (r.max() - r.min())
    expected = x.copy()
    for idx in members(grouping, n):
        expected[idx] -= x[idx].mean()
    np.testing.assert_allclose(adv.bnpo(r, grouping, alpha=1.0, beta=1.0)[0], expected, **close(dtype))

    columns = np.stack([r, (rng.integers(0, 3, n) / 2).astype(dtype)], axis=1)
    out, fits = adv.bnpo_decomposed(columns, grouping)
    parts = [ref_bnpo(columns[:, k], grouping) for k in range(2)]
    np.testing.assert_allclose(out, (parts[0][0] + parts[1][0]) / 2, **close(dtype))
    assert len(fits) == 2
    for fit, (_, (a, b)) in zip(fits, parts):
        np.testing.assert_allclose([fit.alpha, fit.beta], [a, b], rtol=1e-12)


# ----------------------------------------------------------------------- GEPO, SCRL and SPO

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_gepo(rng, kind, dtype):
    grouping, n = grouping_of(rng, kind)
    a = rng.normal(size=n).astype(dtype)
    log_probs = -rng.random((n, 6)).astype(dtype) * 3
    mask = (rng.random((n, 6)) > 0.3).astype(dtype)
    groups = members(grouping, n)
    mask[groups[1]] = 0  # a group without tokens: no entropy, not shaped
    state = adv.gepo_state()
    expected_state = (False, 0.0, 0.0)
    for _ in range(2):  # the first call seeds the thresholds, the second blends them
        out, entropy = adv.gepo(a, grouping, log_probs, mask, state)
        expected, h, expected_state = ref_gepo(a, grouping, log_probs.astype(float), mask, expected_state)
        np.testing.assert_allclose(out, expected, **close(dtype))
        assert entropy.dtype == np.float64 and entropy.size == len(groups) and entropy[1] == 0
        np.testing.assert_allclose(np.delete(entropy, 1), [x for x in h if x is not None], **close(dtype))
        assert state.initialized
        np.testing.assert_allclose([state.low, state.high], expected_state[1:], **close(dtype))
    assert np.array_equal(out[groups[1]], a[groups[1]])
    twin, before = copy.copy(state), (state.low, state.high)
    _, none = adv.gepo(a, grouping, log_probs * 2, mask, twin, out=a, group_entropy=False)
    assert none is None and (state.low, state.high) == before and (twin.low, twin.high) != before


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_scrl(rng, kind, dtype):
    grouping, n = grouping_of(rng, kind)
    rewards = (rng.random((n, 4)) > 0.3).astype(dtype)
    np.testing.assert_allclose(adv.scrl(rewards, grouping), ref_scrl(rewards, grouping), **close(dtype))
    np.testing.assert_allclose(adv.scrl(rewards, grouping, eps=1e-6), ref_scrl(rewards, grouping, 1e-6),
                               **close(dtype))
    bad = rewards.copy()
    bad[0, 0] = 0.5
    with pytest.raises(ValueError):
        adv.scrl(bad, grouping)


@pytest.mark.parametrize("dtype", FLOATS)
def test_spo_tracker(dtype):
    tracker = adv.spo_tracker()
    assert tracker.value(7) == 0.5  # never seen: Beta(0.5, 0.5)
    tracker.initialize(1, np.array([1.0, 0.0, 1.0, 1.0], dtype))
    strength = 1 / (1 - 0.875)
    alpha, beta = strength * 3.5 / 5, strength * 1.5 / 5
    state = tracker.state(1)
    np.testing.assert_allclose([state.alpha, state.beta], [alpha, beta], rtol=1e-12)
    assert tracker.forgetting(0.0) == 0.96 and tracker.forgetting(10.0) == 0.875
    rho = min(max(2 ** (-0.03 / 0.06), 0.875), 0.96)
    before = copy.copy(tracker)
    tracker.update(1, 1.0, 0.03)
    alpha, beta = rho * alpha + 1, rho * beta
    np.testing.assert_allclose(tracker.value(1), alpha / (alpha + beta), rtol=1e-12)
    np.testing.assert_allclose(before.value(1), 3.5 / 5, rtol=1e-12)  # the copy is independent
    assert isinstance(before, adv.spo_tracker)

    prompts = np.array([1, 7, 1, 3], np.int64)
    rewards = np.array([1.0, 0.0, 0.0, 1.0], dtype)
    centred = rewards - np.array([tracker.value(int(p)) for p in prompts])
    expected = (centred - centred.mean()) / (centred.std(ddof=1) + 1e-8)
    np.testing.assert_allclose(tracker.advantages(prompts, rewards), expected, **close(dtype))
    p = np.array([tracker.value(int(x)) for x in prompts])
    np.testing.assert_allclose(tracker.sampling_weights(prompts), np.sqrt(p * (1 - p)) + 0.05, rtol=1e-12)
    weights = np.empty(4, np.float32)
    assert tracker.sampling_weights(prompts, out=weights) is weights
    constant = adv.spo_tracker(constant_rho=True, rho_min=0.9)
    assert constant.forgetting(0.0) == 0.9
    with pytest.raises(ValueError, match="rho_min"):
        adv.spo_tracker(rho_min=0.99, rho_max=0.9)
    with pytest.raises(ValueError):
        tracker.update(1, 2.0, 0.0)  # rewards lie in [0, 1]
    with pytest.raises(TypeError, match="prompt_ids"):
        tracker.advantages(prompts.astype(np.int32), rewards)


# ------------------------------------------------------------- group_normalize, moments, presets

def test_moments_and_batch_statistics(rng):
    m = adv.moments()
    for x in (1.0, 2.0, 4.0):
        m.add(x)
    assert m.count == 3 and m.mean == pytest.approx(7 / 3)
    assert m.variance(1) == pytest.approx(np.var([1, 2, 4], ddof=1))
    assert m.variance() == pytest.approx(np.var([1, 2, 4]))
    assert m.standard_deviation(1) == pytest.approx(np.std([1, 2, 4], ddof=1))
    assert adv.moments(1, 5.0, 0).variance(1) == 0  # count ≤ ddof: 0, not NaN
    assert "count=3.0" in repr(m)
    r = rng.normal(size=40) * 2 + 1
    valid = (rng.random(40) > 0.2).astype(np.uint8)
    weights = rng.random(40) * 3
    whole = adv.batch_moments(r, valid, weights)
    kept, w = r[valid != 0], weights[valid != 0]
    mean = (w * kept).sum() / w.sum()
    np.testing.assert_allclose([whole.count, whole.mean, whole.m2], [w.sum(), mean, (w * (kept - mean) ** 2).sum()],
                               rtol=1e-12)
    shards = adv.merge(adv.batch_moments(r[:25], valid[:25], weights[:25]),
                       adv.batch_moments(r[25:], valid[25:], weights[25:]))
    np.testing.assert_allclose([shards.count, shards.mean, shards.m2], [whole.count, whole.mean, whole.m2],
                               rtol=1e-12)
    f32 = adv.batch_moments(r.astype(np.float32))
    assert f32.count == 40
    # merged moments of two shards replace the local batch moments: each shard normalizes as the batch
    options = adv.presets.trl("batch")
    merged = adv.merge(adv.batch_moments(r[:20]), adv.batch_moments(r[20:]))
    full = adv.group_normalize(r, 4, options=options)
    part = adv.group_normalize(r[:20], 4, batch_statistics=merged, options=options)
    np.testing.assert_allclose(part, full[:20], rtol=1e-12, atol=1e-12)
    batch_center = adv.group_normalize(r[20:], 4, batch_statistics=merged, center="batch_mean", scale="batch_std")
    np.testing.assert_allclose(batch_center, (r[20:] - r.mean()) / (r.std(ddof=1) + 1e-6), rtol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_group_normalize_full_form(rng, kind, dtype):
    grouping, n = grouping_of(rng, kind, smallest=3)
    r = rng.normal(size=n).astype(dtype)
    ids = np.arange(n) // grouping if isinstance(grouping, int) else grouping
    # valid: invalid samples get 0 and leave the statistics
    valid = np.ones(n, np.uint8)
    valid[rng.choice(n, n // 6, replace=False)] = 0
    got = adv.group_normalize(r, grouping, valid=valid)
    keep = valid != 0
    expected = np.zeros(n)
    expected[keep] = ref_grpo(r[keep], ids[keep])
    np.testing.assert_allclose(got, expected, **close(dtype))
    assert same_bits(adv.group_normalize(r, grouping, valid=np.ones(n, np.uint8)), adv.group_normalize(r, grouping))
    # lengths: an empty response leaves the statistics (exclude_empty_responses), the token mask counts tokens
    lengths = np.where(keep, rng.integers(1, 5, n), 0).astype(np.int64)
    assert same_bits(adv.group_normalize(r, grouping, lengths=lengths), got)
    token_mask = (np.arange(5)[None, :] < lengths[:, None]).astype(np.uint8)
    assert same_bits(adv.group_normalize(r, grouping, token_mask=token_mask), got)
    kept_too = adv.group_normalize(r, grouping, lengths=lengths, exclude_empty_responses=False)
    np.testing.assert_allclose(kept_too, ref_grpo(r, grouping), **close(dtype))
    # the caller's baseline
    baseline = rng.normal(size=n).astype(dtype)
    got = adv.group_normalize(r, grouping, baseline=baseline, center="baseline", scale="none")
    np.testing.assert_allclose(got, r.astype(float) - baseline, **close(dtype))
    # NaN rewards: excluded (A = 0) by default, an error with nan='error'
    with_nan = r.copy()
    with_nan[~keep] = np.nan
    np.testing.assert_allclose(adv.group_normalize(with_nan, grouping), expected, **close(dtype))
    with pytest.raises(ValueError):
        adv.group_normalize(with_nan, grouping, nan="error")
    # nested whitening: sample-weighted over the batch after the group step
    o = adv.group_normalize_options()
    o.whiten.mode = adv.whiten_mode.sample_weighted
    o.whiten.eps = 1e-4
    o.whiten.placement = adv.eps_mode.add_to_std
    assert o.whiten.mode == adv.whiten_mode.sample_weighted and o.whiten.eps == 1e-4  # reference semantics
    a = ref_grpo(r, grouping)
    np.testing.assert_allclose(adv.group_normalize(r, grouping, options=o),
                               (a - a.mean()) / (a.std(ddof=1) + 1e-4), **close(dtype))
    # the clip, then the token-weighted whitening (OpenRLHF reinforce_baseline)
    lengths = rng.integers(1, 7, n).astype(np.int64)
    clipped = np.clip(ref_grpo(r * 40, grouping, scale=False), -10, 10)
    got = adv.group_normalize(r * 40, grouping, lengths=lengths, options=adv.presets.openrlhf("reinforce_baseline"))
    np.testing.assert_allclose(got, ref_token_whiten(clipped, lengths, ddof=0, clamp=True), **close(dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_framework_presets(rng, dtype):
    r = rng.normal(size=24).astype(dtype)
    r64 = r.astype(float)
    groups = r64.reshape(-1, 4)
    mean = groups.mean(axis=1, keepdims=True)
    trl_group = (groups - mean) / (groups.std(ddof=1, axis=1, keepdims=True) + 1e-4)
    np.testing.assert_allclose(adv.group_normalize(r, 4, options=adv.presets.trl()), trl_group.ravel(), **close(dtype))
    np.testing.assert_allclose(adv.group_normalize(r, 4, options=adv.presets.trl("batch")),
                               ((groups - mean) / (r64.std(ddof=1) + 1e-4)).ravel(), **close(dtype))
    np.testing.assert_allclose(adv.group_normalize(r, 4, options=adv.presets.trl(adv.presets.trl_scale_rewards.none)),
                               (groups - mean).ravel(), **close(dtype))
    np.testing.assert_allclose(adv.group_normalize(r, 4, options=adv.presets.trl_async()),
                               ((groups - mean) / (groups.std(axis=1, keepdims=True) + 1e-8)).ravel(), **close(dtype))
    norm = (groups - mean) * 100 / (groups.std(ddof=1, axis=1, keepdims=True) * 100 + 1e-9)
    np.testing.assert_allclose(adv.group_normalize(r * 100, 4, options=adv.presets.openrlhf()),
                               np.clip(norm, -10, 10).ravel(), **close(dtype))
    np.testing.assert_allclose(adv.group_normalize(r, 4, options=adv.presets.openrlhf("rloo")), ref_rloo(r, 4),
                               **close(dtype))
    np.testing.assert_allclose(adv.group_normalize(r, 4, options=adv.presets.verl_grpo()), ref_grpo(r, 4),
                               **close(dtype))
    np.testing.assert_allclose(adv.group_normalize(r, 4, options=adv.presets.verl_grpo(False)),
                               ref_grpo(r, 4, scale=False), **close(dtype))
    np.testing.assert_allclose(adv.group_normalize(r, 4, options=adv.presets.verl_rloo()), ref_rloo(r, 4),
                               **close(dtype))
    # groups of one: verl keeps the raw value (r/(1 + 1e-6), r in RLOO), TRL and rloo_vectorized give 0
    np.testing.assert_allclose(adv.group_normalize(r, 1, options=adv.presets.verl_grpo_vectorized()),
                               r64 / (1 + 1e-6), **close(dtype))
    np.testing.assert_allclose(adv.group_normalize(r, 1, options=adv.presets.verl_rloo()), r, **close(dtype))
    assert not adv.group_normalize(r, 1, options=adv.presets.verl_rloo_vectorized()).any()
    assert not adv.group_normalize(r, 1, options=adv.presets.trl()).any()
    with pytest.raises(ValueError):
        adv.group_normalize(r, 1, options=adv.presets.openrlhf())
    with pytest.raises(ValueError):
        adv.group_normalize(np.array([nan, 1.0]), 2, options=adv.presets.verl_grpo())


def test_preset_fields():
    p = adv.presets
    o = p.verl_grpo()
    assert (o.center, o.scale, o.ddof, o.eps, o.placement, o.singleton, o.nan, o.exclude_empty_responses) == (
        adv.center_mode.group_mean, adv.scale_mode.group_std, 1, 1e-6, adv.eps_mode.add_to_std,
        adv.singleton_policy.keep_raw, adv.nan_policy.error, False)
    assert p.verl_grpo(False).scale == adv.scale_mode.none
    assert p.verl_grpo(norm_adv_by_std_in_grpo=False).scale == adv.scale_mode.none
    assert p.verl_rloo(vectorized=True).singleton == adv.singleton_policy.zero
    w = p.verl_reinforce_pp_baseline().whiten
    assert (w.mode, w.ddof, w.eps, w.placement) == (adv.whiten_mode.token_weighted, 1, 1e-8, adv.eps_mode.inside_sqrt)
    assert [p.trl(s).scale for s in ("group", "batch", "none")] == [
        adv.scale_mode.group_std, adv.scale_mode.batch_std, adv.scale_mode.none]
    assert (p.trl().eps, p.trl().singleton, p.trl().nan) == (1e-4, adv.singleton_policy.zero, adv.nan_policy.exclude)
    assert (p.trl_async().ddof, p.trl_async().eps) == (0, 1e-8)
    o = p.openrlhf()
    assert (o.eps, o.clip_min, o.clip_max, o.singleton) == (1e-9, -10, 10, adv.singleton_policy.error)
    assert p.openrlhf(p.openrlhf_estimator.dr_grpo).scale == adv.scale_mode.none
    w = p.openrlhf("reinforce_baseline").whiten
    assert (w.mode, w.ddof, w.placement) == (adv.whiten_mode.token_weighted, 0, adv.eps_mode.clamp_variance)
    o = p.trl_rloo(True, 0.1, -1.0, 2.0)
    assert (o.center, o.singleton, o.kl_coefficient, o.reward_clip_min, o.reward_clip_max, o.whiten.mode) == (
        adv.center_mode.leave_one_out, adv.singleton_policy.exclude, 0.1, -1.0, 2.0, adv.whiten_mode.sample_weighted)
    assert p.trl_rloo().whiten.mode == adv.whiten_mode.none and p.trl_rloo().kl_coefficient == 0.05
    f = p.openrlhf_dynamic_filtering()
    assert (f.rule, f.low, f.high) == (adv.dapo_filter_rule.mean_in_range, 0, 1)
    w = p.openrlhf_whiten(no_std_norm=True)
    assert (w.ddof, w.placement, w.scale) == (0, adv.eps_mode.clamp_variance, False)
    from normkit.advantage.presets import trl
    assert trl is p.trl
    with pytest.raises(ValueError, match="scale_rewards must be one of group, batch, none"):
        p.trl("unbiased")
    with pytest.raises(ValueError, match="estimator"):
        p.openrlhf("ppo")


@pytest.mark.parametrize("dtype", FLOATS)
def test_trl_rloo_golden(dtype):
    for name, c in TRL_RLOO:
        functions = int(c["functions"][0])
        per_function = np.array(c["rewards_per_func"]).reshape(-1, functions)
        # TRL's reward: nansum over the reward functions, NaN when every function returned None
        rewards = np.where(np.isnan(per_function).all(axis=1), nan, np.nansum(per_function, axis=1)).astype(dtype)
        beta = c["beta"][0]
        kl = np.array(c["sequence_kl"], dtype) if beta != 0 else None
        normalize = c["normalize"][0] != 0
        options = adv.presets.trl_rloo(normalize, beta, c["clip_low"][0], c["clip_high"][0])
        got = adv.group_normalize(rewards, int(c["group_size"][0]), sequence_kl=kl, options=options)
        # TRL's nanstd takes its Bessel factor in float32 (~3e-8 relative) when normalizing.
        tolerance = close(dtype) if not normalize or dtype == np.float32 else dict(rtol=1e-7, atol=1e-7)
        np.testing.assert_allclose(got, c["advantages"], **tolerance, err_msg=name)


# ------------------------------------------------------------ degenerate and bad input, memory

@pytest.mark.parametrize("dtype", FLOATS)
def test_degenerate(dtype):
    constant = np.full(16, 0.95, dtype)
    for f in (adv.grpo, adv.rloo, adv.dr_grpo, adv.gapo, adv.group_normalize):
        assert not f(constant, 16).any() and not f(constant + 1e6, 8).any()
    assert not adv.group_normalize(constant, 4, options=adv.presets.trl("batch")).any()
    r = np.array([3.0, -2.0, 0.5], dtype)
    np.testing.assert_allclose(adv.grpo(r, 1), r.astype(float) / (1 + 1e-6), **close(dtype))
    assert not adv.grpo(r, 1, singleton="zero").any()
    assert np.array_equal(adv.dr_grpo(r, 1), r) and np.array_equal(adv.rloo(r, 1), r)
    assert not adv.group_normalize(np.array([nan, nan, 1.0, 2.0], dtype), 2)[:2].any()
    empty = np.empty(0, dtype)
    assert adv.grpo(empty, 4).shape == (0,) and adv.group_normalize(empty, np.empty(0, np.int64)).shape == (0,)
    assert adv.group_normalize(np.array([1.0, 1.00001]), 2, eps=0.0, placement="std_floor_skip") \
        == pytest.approx([-0.7071067811865476, 0.7071067811865476])
    assert not adv.scrl(np.ones((4, 3), dtype), 4).any()  # every column constant


def test_bad_input():
    r = np.arange(8, dtype=np.float64)
    with pytest.raises(TypeError, match="rewards has dtype int64"):
        adv.grpo(np.arange(8), 4)
    with pytest.raises(TypeError, match="rewards has dtype float16"):
        adv.group_normalize(r.astype(np.float16), 4)
    with pytest.raises(TypeError, match="rewards must be a numpy.ndarray"):
        adv.grpo([1.0, 2.0], 2)
    with pytest.raises(TypeError, match="valid has dtype bool"):
        adv.group_normalize(r, 4, valid=np.ones(8, bool))
    with pytest.raises(TypeError, match="lengths has dtype int32"):
        adv.opo(r, 4, np.ones(8, np.int32))
    with pytest.raises(TypeError, match="grouping"):
        adv.grpo(r, np.zeros(8))
    with pytest.raises(TypeError, match="grouping"):
        adv.grpo(r, "4")
    with pytest.raises(TypeError, match="out has dtype float32"):
        adv.grpo(r, 4, out=np.empty(8, np.float32))
    with pytest.raises(TypeError, match="mask has dtype uint8"):
        adv.masked_whiten(r.reshape(2, 4), np.ones((2, 4), np.uint8))
    with pytest.raises(TypeError, match="baselines has dtype float32"):
        adv.remax(r.reshape(2, 4), np.ones((2, 4)), np.zeros(2, np.float32))
    with pytest.raises(TypeError, match="unexpected keyword argument 'epsilon'"):
        adv.grpo(r, 4, epsilon=1e-4)
    with pytest.raises(TypeError, match="unexpected keyword argument 'eps'"):
        adv.dr_grpo(r, 4, eps=1e-4)
    with pytest.raises(TypeError, match="options must be a normkit grpo_options"):
        adv.grpo(r, 4, options=adv.presets.trl())
    with pytest.raises(ValueError, match="center must be one of"):
        adv.group_normalize(r, 4, center="median")
    with pytest.raises(ValueError, match="out has shape"):
        adv.grpo(r, 4, out=np.empty(7))
    with pytest.raises(ValueError):
        adv.grpo(r, 3)  # 8 samples are not groups of 3
    with pytest.raises(ValueError):
        adv.grpo(r, 0)
    with pytest.raises(ValueError):
        adv.grpo(r, np.arange(7, dtype=np.int64))  # one id per reward
    with pytest.raises(ValueError):
        adv.grpo(r, -np.ones(8, np.int64))  # negative ids
    with pytest.raises(ValueError, match="valid"):
        adv.group_normalize(r, 4, valid=np.ones(7, np.uint8))
    with pytest.raises(ValueError):
        adv.group_normalize(r, 4, eps=0.0)
    with pytest.raises(ValueError):
        adv.group_normalize(r, 4, ddof=2)
    with pytest.raises(ValueError):
        adv.reinforce_pp(r.reshape(2, 4), np.ones((2, 3)))
    with pytest.raises(ValueError):
        adv.reinforce_pp(r.reshape(2, 4), np.ones((2, 4)), gamma=1.5)
    frozen = np.empty(8)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="output is not writeable"):
        adv.grpo(r, 4, out=frozen)
    with pytest.raises(ValueError, match="overlaps"):
        adv.grpo(r, 4, out=r)  # outputs overlap no input


def test_strided_inputs(rng):
    block = rng.normal(size=(16, 3))
    column = block[:, 1]  # a column slice: not contiguous, rejected by name
    with pytest.raises(ValueError, match="rewards of shape \\(16,\\) must be contiguous"):
        adv.grpo(column, 4)
    with pytest.raises(ValueError, match="output .* must be contiguous"):
        adv.grpo(np.ascontiguousarray(column), 4, out=np.empty((16, 2))[:, 0])
    with pytest.raises(ValueError, match="grouping"):
        adv.grpo(np.ascontiguousarray(column), np.zeros((16, 2), np.int64)[:, 0])
    # a contiguous run of a vector passes as it is
    r = rng.normal(size=40)
    np.testing.assert_allclose(adv.grpo(r[8:24], 4), ref_grpo(r[8:24], 4), rtol=1e-12)
    # matrices take any row stride: every other row, or a block of columns, without a copy
    tokens = rng.normal(size=(12, 10))
    mask = (rng.random((12, 10)) > 0.3).astype(np.float64)
    rows, mrows = tokens[::2], mask[::2]
    assert not rows.flags.c_contiguous
    out, _ = adv.masked_whiten(rows, mrows)
    assert same_bits(out, adv.masked_whiten(rows.copy(), mrows.copy())[0])
    a, g = adv.reinforce_pp(rows, mrows)
    a2, g2 = adv.reinforce_pp(rows.copy(), mrows.copy())
    assert same_bits(a, a2) and same_bits(g, g2)
    sub = tokens[:, 2:5]
    assert same_bits(adv.gdpo(sub, 4), adv.gdpo(sub.copy(), 4))
    binary = (tokens > 0).astype(np.float64)[::2, :4]
    assert same_bits(adv.scrl(binary, 3), adv.scrl(binary.copy(), 3))
    # an output with strided rows is written in place
    wide = np.zeros((6, 20))
    out = wide[:, :10]
    assert adv.masked_whiten(rows, mrows, out=out)[0] is out
    assert same_bits(np.ascontiguousarray(out), adv.masked_whiten(rows, mrows)[0]) and not wide[:, 10:].any()
    with pytest.raises(ValueError, match="values of shape \\(12, 5\\) has last-axis stride 16"):
        adv.masked_whiten(tokens[:, ::2], mask[:, ::2])


def test_outputs_passed_in_are_returned(rng):
    r = rng.normal(size=12)
    out = np.empty(12)
    for f in (adv.grpo, adv.dr_grpo, adv.rloo, adv.gpg, adv.gapo, adv.pass_at_k, adv.group_normalize):
        assert f(r, 4, out=out) is out
    assert adv.opo(r, 4, np.ones(12, np.int64), out=out) is out
    assert adv.w_reinforce(r, out=out) is out and adv.dna_train(r, out=out, group_size=3) is out
    assert adv.bnpo(r, 4, out=out)[0] is out
    keep = np.empty(12, np.uint8)
    assert adv.dapo_filter(r, 4, keep=keep)[0] is keep
    assert adv.reinforce_pp_baseline(r, 4, np.ones((12, 3), np.uint8), out=out) is out
    columns = rng.random((12, 2))
    assert adv.gdpo(columns, 4, out=out) is out and adv.bnpo_decomposed(columns, 4, out=out)[0] is out
    weights = np.empty(2)
    got = adv.sa_mrpo(columns, 4, out=out, effective_weights=weights, lower=[0, 0], upper=[1, 1])
    assert got[0] is out and got[1] is weights
    tokens, mask = rng.normal(size=(12, 5)), np.ones((12, 5))
    advantages, returns = np.empty((12, 5)), np.empty((12, 5))
    got = adv.reinforce_pp(tokens, mask, out=advantages, returns=returns)
    assert got[0] is advantages and got[1] is returns and np.shares_memory(got[0], advantages)
    got = adv.remax(tokens, mask, r, out=advantages, returns=returns)
    assert got[0] is advantages and got[1] is returns
    assert adv.masked_whiten(tokens, mask, out=advantages)[0] is advantages
    entropy = np.empty(3)
    got = adv.gepo(r, 4, tokens, mask, adv.gepo_state(), out=out, group_entropy=entropy)
    assert got[0] is out and got[1] is entropy
    shaped = r.copy()
    assert adv.gepo(shaped, 4, tokens, mask, adv.gepo_state(), out=shaped)[0] is shaped  # in place
    binary = (tokens > 0).astype(np.float64)
    assert adv.scrl(binary, 4, out=advantages) is advantages
    tracker = adv.spo_tracker()
    assert tracker.advantages(np.arange(12, dtype=np.int64), (r > 0) * 1.0, out=out) is out


@pytest.mark.parametrize("dtype", FLOATS)
def test_threads_give_the_same_bits(rng, dtype):
    n = 3000
    ids = np.concatenate([np.arange(300), np.arange(300), rng.integers(0, 300, n - 600)])  # no group of one
    rng.shuffle(ids)
    r = rng.normal(size=n).astype(dtype)
    lengths = rng.integers(0, 9, n).astype(np.int64)
    tokens = rng.normal(size=(n // 10, 40)).astype(dtype)
    mask = (rng.random((n // 10, 40)) > 0.3).astype(dtype)
    columns = rng.normal(size=(n, 3)).astype(dtype)
    binary = (rng.random((n, 4)) > 0.4).astype(dtype)
    calls = [
        lambda t: adv.grpo(r, 6, threads=t),
        lambda t: adv.grpo(r, ids, threads=t),
        lambda t: adv.grpo(r, ids.astype(np.int32), threads=t),
        lambda t: adv.rloo(r, np.sort(ids), threads=t),
        lambda t: adv.gapo(r, ids, threads=t),
        lambda t: adv.gpg(r, 6, threads=t),
        lambda t: adv.opo(r, ids, lengths, threads=t),
        lambda t: adv.dapo_filter(r, ids, threads=t)[0],
        lambda t: adv.dna_train(r, group_size=5, threads=t),
        lambda t: adv.w_reinforce(r, threads=t),
        lambda t: adv.group_normalize(r, ids, lengths=lengths, threads=t,
                                      options=adv.presets.openrlhf("reinforce_baseline")),
        lambda t: adv.group_normalize(r, 6, threads=t, options=adv.presets.trl_rloo(True)),
        lambda t: adv.reinforce_pp_baseline(r, ids, lengths=lengths, threads=t),
        lambda t: adv.masked_whiten(tokens, mask, threads=t)[0],
        lambda t: adv.reinforce_pp(tokens, mask, gamma=0.95, threads=t)[0],
        lambda t: adv.remax(tokens, mask, r[:n // 10], threads=t)[0],
        lambda t: adv.gdpo(columns, ids, threads=t),
        lambda t: adv.gdpo(columns, ids, lengths=lengths + 1, flavour="verl", threads=t),
        lambda t: adv.bnpo(r, ids, threads=t)[0],
        lambda t: adv.bnpo_decomposed(columns, 6, threads=t)[0],
        lambda t: adv.scrl(binary, ids, threads=t),
        lambda t: adv.gepo(r[:n // 10], 10, tokens, mask, adv.gepo_state(), threads=t)[0],
    ]
    for k, call in enumerate(calls):
        assert same_bits(call(1), call(3)), f"call {k}"


def test_options_objects():
    o = adv.group_normalize_options()
    o.whiten.eps = 1
    assert o.whiten.eps == 1  # nested options by reference
    copied = copy.copy(o)
    copied.whiten.eps = 2
    assert o.whiten.eps == 1
    assert adv.group_normalize_options(o).whiten.eps == 1
    assert "whiten=whiten_options(ddof=1, eps=1.0" in repr(o)
    preset = adv.presets.trl()
    tuned = adv.group_normalize(np.array([0.0, 1.0, 2.0, 4.0]), 4, options=preset, eps=1.0, threads=2)
    np.testing.assert_allclose(tuned, (np.array([0, 1, 2, 4]) - 1.75) / (np.std([0, 1, 2, 4], ddof=1) + 1))
    assert preset.eps == 1e-4  # options= is copied, never changed
    o = adv.bnpo_options()
    assert o.alpha is None and o.clamp == 1e6
    o.alpha = 2.0
    assert o.alpha == 2.0
    g = adv.gdpo_options()
    g.weights = [1.0, 2.0]
    assert g.weights == [1.0, 2.0]
    assert adv.reinforce_pp_options().whiten.mode == adv.whiten_mode.token_weighted
    assert adv.reinforce_pp_options().mask_rule == adv.return_mask_rule.carry
    assert adv.spo_options().rho_min == 0.875 and adv.dna_train_options().group_size == 0
    # every field of every options class says its default (or that it is required)
    classes = [getattr(adv, name) for name in dir(adv) if name.endswith("_options") and name != "make_options"]
    assert len(classes) == 22
    for cls in classes:
        for name in dir(cls):
            field = getattr(cls, name)
            if isinstance(field, property):
                assert "default" in field.__doc__ or "required" in field.__doc__, f"{cls.__name__}.{name}"


# ------------------------------------------------------------------------- golden values
# Copied from tests/advantage/golden_verl.hpp (verl @ 1dda039b9c63, masked_whiten and
# compute_opo_outcome_advantage) and tests/advantage/golden_trl.hpp (TRL @ f2cd57710ae3, RLOOTrainer).

VERL_MASKED_WHITEN = [
    ("random", {
        "values": [
            -1.1533903191014563, -1.1216714979732911, 0.5342114369472082, 0.7622021745199543, -1.109820627533359,
            1.7171912879383688, 1.1218210472244805, -0.2615752459789098, -0.4073805921778786, 0.045310551519008424,
            -1.3268956012087125, 1.439655954470393, -1.4019797885077527, -0.3989878730776515, -0.6387638588447979
        ],
        "mask": [1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0],
        "shift_mean": [1.0],
        "whitened": [
            -0.9386659297737883, -0.9118665233159665, 0.48719807748347665, 0.6798287058458005, -0.9018536576891065,
            1.4867042612102837, 0.9836726696731464, -0.18516646857846808, -0.3083582076636219, 0.07412302991984053,
            -1.0852614970864243, 1.2522131312290714, -1.1487005399768118, -0.30126715312712177, -0.5038552025200649
        ],
        "rows": [3.0],
        "cols": [5.0],
    }),
    ("no_shift", {
        "values": [
            -1.3011975750885436, 1.8114454733311773, -0.5247821858145048, -0.43794994285845235, 1.2687056774381396,
            1.7514842131086197, 1.4898284543995621, 1.5552749174949612, 0.7418508421347898, -0.8517244883786232,
            0.8652952794064834, -0.40315868301700863, -0.7733108012699446, 1.3332175230472094, -1.0451189380843817
        ],
        "mask": [1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0],
        "shift_mean": [0.0],
        "whitened": [
            -1.0418621498917426, 1.5508767418019118, -0.39513127051825186, -0.32280260004013556, 1.0987906673655332,
            1.5009307990916105, 1.2829793503429312, 1.3374943035680957, 0.6599362916730289, -0.6674644645310464,
            0.7627618288447424, -0.29382251749333427, -0.6021482001714094, 1.1525271120794527, -0.8285562773055251
        ],
        "rows": [3.0],
        "cols": [5.0],
    }),
    ("offset", {
        "values": [
            10000.958957657374, 10000.697525225103, 9999.425362757082, 9999.897179577956, 10000.089393193006,
            10000.955153543402, 9999.750802456074, 9999.262967287874
        ],
        "mask": [1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0],
        "shift_mean": [1.0],
        "whitened": [
            1.3555760907316883, 0.9737460629100426, -0.8842859583594692, -0.19518312488096998, 0.08555071270952246,
            1.350020066441643, -0.40897136850175503, -1.1214694859997874
        ],
        "rows": [2.0],
        "cols": [4.0],
    }),
    ("two_tokens", {
        "values": [3.0, -1.0, 7.0],
        "mask": [1.0, 0.0, 1.0],
        "shift_mean": [1.0],
        "whitened": [-0.7071067736735381, -2.1213203386982835, 0.7071067913512072],
        "rows": [1.0],
        "cols": [3.0],
    }),
    ("constant", {
        "values": [0.25, 0.25, 0.25, 0.25, 0.25, 0.25],
        "mask": [1.0, 1.0, 1.0, 1.0, 0.0, 0.0],
        "shift_mean": [1.0],
        "whitened": [
            6.2499999618530465e-06, 6.2499999618530465e-06, 6.2499999618530465e-06, 6.2499999618530465e-06,
            6.2499999618530465e-06, 6.2499999618530465e-06
        ],
        "rows": [2.0],
        "cols": [3.0],
    }),
]
VERL_OPO = [
    ("all_empty_group", {
        "token_level_rewards": [0.0, 0.0, 1.0, 0.0, 0.0, 0.5, 0.0, 2.0, 0.0, 3.0, 0.0, 0.0],
        "response_mask": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0],
        "advantages": [
            nan, nan, nan, nan, nan, nan, -0.3333333333333335, -0.3333333333333335, -0.0, 0.6666666666666665, 0.0,
            0.0
        ],
        "rows": [4.0],
        "cols": [3.0],
        "group_size": [2.0],
    }),
    ("random_0", {
        "token_level_rewards": [
            -0.5326156170155096, 0.324166110686563, -0.0, 0.0, -0.0, -0.8050493261917033, 0.021898989942465974,
            -0.0, 0.0, -0.0, -0.1895967219993666, -0.13696498839050797, -0.7148170478652356, -0.0, -0.0,
            0.09681231455238981, -0.28503091132408476, 0.0, 0.0, 0.0, -0.8820039473543562, -0.5751139667621479,
            0.8892531539413888, -0.15616583336962786, -0.0, -0.3932512996645554, 0.0, 0.0, -0.0, -0.0
        ],
        "response_mask": [
            1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0,
            1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0
        ],
        "advantages": [
            0.5211699165170103, 0.5211699165170103, 0.0, 0.0, 0.0, -0.05353091340328042, -0.05353091340328042, -0.0,
            -0.0, -0.0, -0.31175933540915324, -0.31175933540915324, -0.31175933540915324, -0.0, -0.0,
            0.33546866999786473, 0.33546866999786473, 0.0, 0.0, 0.0, -0.2003433267751834, -0.2003433267751834,
            -0.2003433267751834, -0.2003433267751834, -0.0, 0.13043596710500427, 0.0, 0.0, 0.0, 0.0
        ],
        "rows": [6.0],
        "cols": [5.0],
        "group_size": [3.0],
    }),
    ("random_1", {
        "token_level_rewards": [
            -0.9467452206745139, 0.02976540275568773, 0.0, -0.0, -0.0, -0.9518101903227887, 0.0, -0.0, 0.0, -0.0,
            -0.8837580485781222, 0.9401538101717526, 0.0, 0.0, 0.0, -0.2877485678381675, -0.18379162278831296,
            -0.8271314808826562, -0.1359151575065214, -0.0315609641996617, 0.7108719768479936, 0.5419337482027147,
            0.4102568274180991, -0.0, -0.0, -0.26612007525249504, -0.8285683544352096, -0.8196065157443764,
            -0.48762059657404055, 0.8528220607109505
        ],
        "response_mask": [
            1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0,
            1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0
        ],
        "advantages": [
            -0.3823841573241902, -0.3823841573241902, -0.0, -0.0, -0.0, -0.41721452972815265, -0.0, -0.0, -0.0,
            -0.0, 0.5909914221882664, 0.5909914221882664, 0.0, 0.0, 0.0, -0.690223276665625, -0.690223276665625,
            -0.690223276665625, -0.690223276665625, -0.690223276665625, 2.438987069018502, 2.438987069018502,
            2.438987069018502, 0.0, 0.0, -0.7731689647454764, -0.7731689647454764, -0.7731689647454764,
            -0.7731689647454764, -0.7731689647454764
        ],
        "rows": [6.0],
        "cols": [5.0],
        "group_size": [3.0],
    }),
    ("random_2", {
        "token_level_rewards": [
            0.329878335143196, 0.1728056548072987, -0.9592948296409105, 0.0, -0.0, 0.9062560654063181, 0.0, -0.0,
            -0.0, 0.0, -0.03954274378821809, -0.23675097594544647, -0.0, 0.0, 0.0, -0.07248276821928945,
            0.8511381335999499, 0.0, -0.0, -0.0, 0.03618041303327679, -0.7741645121595464, -0.8050899440140675,
            -0.7549354377039279, -0.5299819928000791, -0.48757784200055365, -0.035560277330768164,
            -0.3693721583348115, -0.0, -0.0
        ],
        "response_mask": [
            1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0,
            1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0
        ],
        "advantages": [
            -0.28725019083503944, -0.28725019083503944, -0.28725019083503944, -0.0, -0.0, 1.0756167142616946, 0.0,
            0.0, 0.0, 0.0, -0.10693307087828816, -0.10693307087828816, -0.0, -0.0, -0.0, 2.3046731124265403,
            2.3046731124265403, 0.0, 0.0, 0.0, -1.301973726598464, -1.301973726598464, -1.301973726598464,
            -1.301973726598464, -1.301973726598464, 0.6335074693797467, 0.6335074693797467, 0.6335074693797467, 0.0,
            0.0
        ],
        "rows": [6.0],
        "cols": [5.0],
        "group_size": [3.0],
    }),
    ("random_3", {
        "token_level_rewards": [
            -0.0, -0.0, -0.0, 0.0, -0.0, -0.0, -0.0, -0.0, 0.0, -0.0, 0.0, 0.0, -0.0, 0.0, 0.0, 0.3538199347614368,
            -0.4985910958585551, -0.93297210206539, 0.07937050148780544, 0.0, -0.0, -0.0, -0.0, 0.0, -0.0, -0.0,
            0.0, 0.0, -0.0, -0.0
        ],
        "response_mask": [
            0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0,
            0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
        ],
        "advantages": [
            nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
            0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
        ],
        "rows": [6.0],
        "cols": [5.0],
        "group_size": [3.0],
    }),
]
TRL_RLOO = [
    ("issue", {
        "rewards_per_func": [nan, 1.0, 0.0, 1.0],
        "functions": [1.0],
        "group_size": [2.0],
        "normalize": [1.0],
        "clip_low": [-inf],
        "clip_high": [inf],
        "beta": [0.0],
        "sequence_kl": [0.22021408382472307, -0.0337229619436078, -0.3391622483106814, 0.3083723264922642],
        "advantages": [0.0, 0.0, -0.7070567847218314, 0.7070567847218314],
    }),
    ("plain", {
        "rewards_per_func": [0.5, 1.0, 0.0, 2.0, 1.5, -1.0],
        "functions": [1.0],
        "group_size": [3.0],
        "normalize": [0.0],
        "clip_low": [-inf],
        "clip_high": [inf],
        "beta": [0.0],
        "sequence_kl": [
            -0.022943355902911744, 0.2756923953752307, 0.7490405616473383, -0.2662232779083432,
            -0.22939904825629986, 0.2349018149950013
        ],
        "advantages": [0.0, 0.75, -0.75, 1.75, 1.0, -2.75],
    }),
    ("normalized", {
        "rewards_per_func": [0.5, 1.0, 0.0, 2.0, 1.5, -1.0],
        "functions": [1.0],
        "group_size": [3.0],
        "normalize": [1.0],
        "clip_low": [-inf],
        "clip_high": [inf],
        "beta": [0.0],
        "sequence_kl": [
            -0.04523805215705545, -0.09945579079417133, 0.34662813035845075, -0.3358228573693548,
            -0.46291327374408453, -0.12601515226031457
        ],
        "advantages": [
            0.0, 0.4696387990605768, -0.4696387990605768, 1.0958238644746792, 0.6261850654141025,
            -1.7220089298887815
        ],
    }),
    ("clip", {
        "rewards_per_func": [5.0, -3.0, 0.2, 0.9, 4.0, 1.0],
        "functions": [1.0],
        "group_size": [2.0],
        "normalize": [1.0],
        "clip_low": [-1.0],
        "clip_high": [2.0],
        "beta": [0.0],
        "sequence_kl": [
            -0.10068734020748304, 0.32109140618484755, 0.6246404197595401, -0.1585858668101846, 0.26026194036861905,
            -0.4005966693127261
        ],
        "advantages": [
            1.464476156938749, -1.464476156938749, -0.3417111032857082, 0.3417111032857081, 0.488158718979583,
            -0.488158718979583
        ],
    }),
    ("kl", {
        "rewards_per_func": [1.0, 0.0, 1.0, 1.0, 0.0, 0.5],
        "functions": [1.0],
        "group_size": [3.0],
        "normalize": [0.0],
        "clip_low": [-inf],
        "clip_high": [inf],
        "beta": [0.05],
        "sequence_kl": [
            0.09499944838212993, -0.11362205762745003, 0.0037988040233640774, 0.5194989218390988,
            0.1567048324079725, 0.8244102364551136
        ],
        "advantages": [
            0.49250444624079126, -0.9918489408084903, 0.4993444945676986, 0.7485529306296222, -0.7242375126630433,
            -0.024315417966578823
        ],
    }),
    ("clip_kl_normalized", {
        "rewards_per_func": [3.0, nan, 1.0, -2.0, 0.5, 0.0, nan, nan],
        "functions": [1.0],
        "group_size": [4.0],
        "normalize": [1.0],
        "clip_low": [-1.0],
        "clip_high": [1.0],
        "beta": [0.1],
        "sequence_kl": [
            0.20521891374728496, -0.0023757352505672236, 0.7817559477521863, -0.39961870348528616,
            -0.8368224375469068, -0.11881175704793434, -0.5930575736801175, 0.019160955154743586
        ],
        "advantages": [
            0.806337393069123, 0.0, 0.7365060743656823, -1.5428434674348055, 0.4617179268963863,
            -0.4617179268963863, 0.0, 0.0
        ],
    }),
    ("two_functions", {
        "rewards_per_func": [1.0, nan, nan, nan, 0.0, 2.0, 1.0, 1.0],
        "functions": [2.0],
        "group_size": [2.0],
        "normalize": [1.0],
        "clip_low": [-inf],
        "clip_high": [inf],
        "beta": [0.0],
        "sequence_kl": [0.7242486731317888, 0.9372358839142167, -0.033566833681472175, -0.18902899864939848],
        "advantages": [0.0, 0.0, 0.0, 0.0],
    }),
]
