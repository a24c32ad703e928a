"""normkit.norm against float64 numpy references, over storage types, strides and bad input."""
import numpy as np
import pytest

import normkit
from conftest import STORAGE, TOLERANCE, as_storage, value_of
from normkit import norm


def close(actual, expected, tolerance, scale=None):
    scale = np.max(np.abs(expected)) if scale is None else scale
    assert np.max(np.abs(value_of(actual) - expected)) <= tolerance * max(scale, 1e-300)


def rms_reference(x, w, eps, offset=False):
    r = 1 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    w_eff = np.ones(x.shape[-1]) if w is None else (1 + w if offset else w)
    return x * r * w_eff, r[..., 0]


def layer_reference(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    r = 1 / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)
    y = (x - mu) * r
    return (y if g is None else y * g) + (0 if b is None else b), mu[..., 0], r[..., 0]


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("cols", [1, 7, 16, 67, 1031])
def test_rms_norm_forward_and_backward(rng, dtype, cols):
    x, x64 = as_storage(rng.normal(size=(5, cols)) + 3, dtype)
    w, w64 = as_storage(rng.normal(size=cols), dtype)
    y, rstd = norm.rms_norm_forward(x, w)
    ref, r = rms_reference(x64, w64, 1e-6)
    close(y, ref, 4 * TOLERANCE[dtype])
    close(rstd, r, 2e-6 if dtype != np.float64 else 1e-13)
    dy, dy64 = as_storage(rng.normal(size=(5, cols)), dtype)
    dx, dw = norm.rms_norm_backward(dy, x, w, rstd)
    xhat = x64 * value_of(rstd)[:, None]
    g = dy64 * w64
    dx_ref = value_of(rstd)[:, None] * (g - xhat * np.mean(g * xhat, -1, keepdims=True))
    close(dx, dx_ref, 8 * TOLERANCE[dtype], np.max(np.abs(g)) * np.max(value_of(rstd)))
    close(dw, (dy64 * xhat).sum(0), 1e-5 if dtype != np.float64 else 1e-12, np.abs(dy64 * xhat).sum(0).max())
    assert dw.dtype == (np.float64 if dtype == np.float64 else np.float32)


def test_rms_norm_presets_and_offset(rng):
    x = rng.normal(size=(3, 8))
    w = rng.normal(size=8)
    y, _ = norm.rms_norm_forward(x, w, options=norm.presets.gemma())
    close(y, rms_reference(x, w, 1e-6, offset=True)[0], 1e-13)
    y2, _ = norm.rms_norm_forward(x, w, offset=True)
    assert np.array_equal(y, y2)
    assert norm.presets.llama().casting == norm.rms_norm_casting.llama
    assert norm.rms_norm_options().casting == norm.rms_norm_casting.gemma
    y3, _ = norm.rms_norm_forward(x, w, options=norm.presets.olmo2(), eps=1e-3)  # keywords override the preset
    close(y3, rms_reference(x, w, 1e-3)[0], 1e-13)


@pytest.mark.parametrize("dtype", STORAGE)
def test_layer_norm_forward_and_backward(rng, dtype):
    x, x64 = as_storage(rng.normal(size=(4, 3, 33)) * 2 + 100, dtype)
    g, g64 = as_storage(rng.normal(size=33), dtype)
    b, b64 = as_storage(rng.normal(size=33), dtype)
    y, mean, rstd = norm.layer_norm_forward(x, g, b)
    assert y.shape == x.shape and mean.shape == (12,)
    ref, mu, r = layer_reference(x64, g64, b64, 1e-5)
    close(y, ref, 4 * TOLERANCE[dtype], np.max(np.abs(g64)) * 4 + np.max(np.abs(b64)))
    close(mean, mu.ravel(), 1e-6 if dtype != np.float64 else 1e-14)
    dy, dy64 = as_storage(rng.normal(size=x.shape), dtype)
    dx, dg, db = norm.layer_norm_backward(dy, x, g, mean, rstd, bias=True)
    xhat = (x64 - mu[..., None]) * r[..., None]
    gg = dy64 * g64
    dx_ref = r[..., None] * (gg - gg.mean(-1, keepdims=True) - xhat * (gg * xhat).mean(-1, keepdims=True))
    close(dx, dx_ref, 8 * TOLERANCE[dtype], np.max(np.abs(gg)) * np.max(r))
    close(db, dy64.reshape(-1, 33).sum(0), 1e-5, np.abs(dy64).reshape(-1, 33).sum(0).max())
    close(dg, (dy64 * xhat).reshape(-1, 33).sum(0), 1e-5, np.abs(dy64 * xhat).reshape(-1, 33).sum(0).max())


def test_layer_norm_backward_by_finite_differences(rng):
    x = rng.normal(size=(3, 9))
    g = rng.normal(size=9)
    b = rng.normal(size=9)
    dy = rng.normal(size=(3, 9))
    _, mean, rstd = norm.layer_norm_forward(x, g, b)
    dx, dg, db = norm.layer_norm_backward(dy, x, g, mean, rstd, bias=True)
    h = 1e-6

    def loss(xx, gg, bb):
        return float(np.sum(dy * norm.layer_norm_forward(xx, gg, bb)[0]))

    for i, j in [(0, 0), (1, 4), (2, 8)]:
        e = np.zeros_like(x)
        e[i, j] = h
        assert abs((loss(x + e, g, b) - loss(x - e, g, b)) / (2 * h) - dx[i, j]) < 1e-7
    for j in [0, 5]:
        e = np.zeros(9)
        e[j] = h
        assert abs((loss(x, g + e, b) - loss(x, g - e, b)) / (2 * h) - dg[j]) < 1e-7
        assert abs((loss(x, g, b + e) - loss(x, g, b - e)) / (2 * h) - db[j]) < 1e-7


def test_strided_rows_pass_without_a_copy(rng):
    wide = rng.normal(size=(6, 40)).astype(np.float32)
    x = wide[::2, 3:35]  # every other row, a window of each: row stride 80 elements
    out_wide = np.zeros((6, 40), np.float32)
    out = out_wide[1::2, :32]
    y, _ = norm.rms_norm_forward(x, None, out=out)
    assert y is out and np.shares_memory(y, out_wide)
    close(y, rms_reference(x.astype(np.float64), None, 1e-6)[0], 4 * TOLERANCE[np.float32])
    assert np.all(out_wide[0::2] == 0) and np.all(out_wide[:, 32:] == 0)  # nothing outside the view written
    with pytest.raises(ValueError, match="input.*last-axis stride"):
        norm.rms_norm_forward(wide[:, ::2], None, out=np.empty((6, 20), np.float32))


def test_outputs_passed_in_are_the_outputs(rng):
    x = rng.normal(size=(4, 8))
    out = np.empty_like(x)
    mean = np.empty(4)
    rstd = np.empty(4)
    y, m, r = norm.layer_norm_forward(x, out=out, mean=mean, rstd=rstd)
    assert y is out and m is mean and r is rstd
    y2, _, _ = norm.layer_norm_forward(x, out=x.copy())
    assert np.array_equal(y, y2)


def test_output_may_be_the_input(rng):
    x = rng.normal(size=(4, 8))
    expected, _ = norm.rms_norm_forward(x)
    y, _ = norm.rms_norm_forward(x, out=x)
    assert y is x and np.array_equal(x, expected)


def test_bad_input_names_the_argument(rng):
    x = rng.normal(size=(4, 8)).astype(np.float32)
    with pytest.raises(TypeError, match="weight has dtype float64"):
        norm.rms_norm_forward(x, np.ones(8))
    with pytest.raises(TypeError, match="input has dtype int64"):
        norm.rms_norm_forward(np.ones((2, 2), np.int64), None, out=np.empty((2, 2), np.float32))
    with pytest.raises(TypeError, match="input must be a numpy.ndarray"):
        norm.rms_norm_forward([[1.0, 2.0]], None, out=np.empty((1, 2), np.float32))
    with pytest.raises(ValueError, match="weight has length 7"):
        norm.rms_norm_forward(x, np.ones(7, np.float32))
    with pytest.raises(ValueError, match="out has shape"):
        norm.rms_norm_forward(x, out=np.empty((4, 7), np.float32))
    with pytest.raises(TypeError, match="out has dtype"):
        norm.rms_norm_forward(x, out=np.empty((4, 8)))
    with pytest.raises(TypeError, match="unexpected keyword argument 'epsilon'"):
        norm.rms_norm_forward(x, epsilon=1e-5)
    with pytest.raises(ValueError, match="casting must be one of"):
        norm.rms_norm_forward(x, casting="mistral")
    with pytest.raises(ValueError, match="eps"):
        norm.rms_norm_forward(x, eps=0.0)
    frozen = np.empty_like(x)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="output is not writeable"):
        norm.rms_norm_forward(x, out=frozen)
    with pytest.raises(ValueError, match="output.*input"):  # a partial overlap is refused by name
        wide = np.zeros((4, 9), np.float32)
        norm.rms_norm_forward(wide[:, :8], out=wide[:, 1:])


def test_any_thread_count_gives_the_same_bits(rng):
    x = rng.normal(size=(300, 129)).astype(np.float32)
    w = rng.normal(size=129).astype(np.float32)
    y1, r1 = norm.rms_norm_forward(x, w)
    y3, r3 = norm.rms_norm_forward(x, w, threads=3)
    assert np.array_equal(y1, y3) and np.array_equal(r1, r3)
    dy = rng.normal(size=x.shape).astype(np.float32)
    a = norm.rms_norm_backward(dy, x, w, r1)
    b = norm.rms_norm_backward(dy, x, w, r1, threads=3)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_degenerate_rows(rng):
    x = np.full((2, 16), 5.0, np.float32)
    b = rng.normal(size=16).astype(np.float32)
    y, mean, rstd = norm.layer_norm_forward(x, None, b)
    assert np.array_equal(y, np.broadcast_to(b, y.shape))  # a constant row gives β exactly
    empty, r = norm.rms_norm_forward(np.empty((0, 8), np.float32))
    assert empty.shape == (0, 8) and r.shape == (0,)


def test_partial_rms_norm(rng):
    x = rng.normal(size=(3, 64))
    y, _ = norm.partial_rms_norm_forward(x, None, p=0.25)
    k = norm.partial_rms_count(64, p=0.25)
    assert k == 16
    close(y, x / np.sqrt(np.mean(x[:, :k] ** 2, -1, keepdims=True) + 1e-6), 1e-13)
    a, _ = norm.partial_rms_norm_forward(x, None, p=1.0)
    b, _ = norm.rms_norm_forward(x)
    assert np.array_equal(a, b)
    o = norm.presets.zhang_sennrich_prmsnorm(0.3)
    assert o.count == norm.partial_count.floor and o.eps_outside
    y, _ = norm.partial_rms_norm_forward(x, None, options=o)
    k = int(64 * 0.3)
    close(y, x / (np.sqrt(np.mean(x[:, :k] ** 2, -1, keepdims=True)) + o.eps), 1e-13)


def test_fused_add_rms_norm(rng):
    x = rng.normal(size=(3, 12))
    h = rng.normal(size=(3, 12))
    w = rng.normal(size=12)
    h_sum = x + h
    y, rstd = norm.fused_add_rms_norm_forward(x, w, h)
    assert np.array_equal(h, h_sum)  # the residual is updated in place
    close(y, rms_reference(h_sum, w, 1e-6)[0], 1e-13)
    dy = rng.normal(size=(3, 12))
    dh = np.zeros((3, 12))
    dw = norm.fused_add_rms_norm_backward(dy, h, w, dh, rstd)
    dx, dw2 = norm.rms_norm_backward(dy, h, w, rstd)
    assert np.allclose(dh, dx, rtol=0, atol=1e-14) and np.allclose(dw, dw2, rtol=0, atol=1e-14)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dyt_and_derf(rng, dtype):
    from math import erf, pi, sqrt

    x = rng.normal(size=(4, 10)).astype(dtype)
    w = rng.normal(size=10).astype(dtype)
    b = rng.normal(size=10).astype(dtype)
    x64, w64, b64 = (a.astype(np.float64) for a in (x, w, b))
    y = norm.dyt_forward(x, 0.7, w, b)
    close(y, w64 * np.tanh(0.7 * x64) + b64, 4 * TOLERANCE[dtype], np.abs(w64).max() + np.abs(b64).max())
    dy = rng.normal(size=x.shape).astype(dtype)
    dx, dalpha, dw, db = norm.dyt_backward(dy, x, 0.7, w, bias=True)
    t = np.tanh(0.7 * x64)
    c = dy * w64 * (1 - t * t)
    close(dx, 0.7 * c, 1e-5, np.abs(c).max())
    assert abs(dalpha - np.sum(c * x64)) <= 1e-5 * np.sum(np.abs(c * x64))
    close(db, dy.astype(np.float64).sum(0), 1e-5, np.abs(dy).sum(0).max())
    y = norm.derf_forward(x, 0.5, 0.1, w, b)
    erfs = np.vectorize(erf)(0.5 * x64 + 0.1)
    close(y, w64 * erfs + b64, 4 * TOLERANCE[dtype], np.abs(w64).max() + np.abs(b64).max())
    dx, dalpha, dshift, dw, db = norm.derf_backward(dy, x, 0.5, 0.1, w)
    c = dy * w64 * 2 / sqrt(pi) * np.exp(-((0.5 * x64 + 0.1) ** 2))
    assert db is None
    assert abs(dshift - c.sum()) <= 1e-5 * np.abs(c).sum()


def test_l2_and_qk_norms(rng):
    x = rng.normal(size=(5, 16))
    y = norm.l2_norm_forward(x, 2.0)
    close(y, 2 * x / np.linalg.norm(x, axis=-1, keepdims=True), 1e-13)
    dy = rng.normal(size=x.shape)
    dx, dg = norm.l2_norm_backward(dy, x, 2.0)
    xhat = x / np.linalg.norm(x, axis=-1, keepdims=True)
    assert abs(dg - np.sum(dy * xhat)) < 1e-12
    z = x.copy()
    assert norm.l2_normalize_rows(z) is z
    close(z, xhat, 1e-13)
    q = rng.normal(size=(2, 3, 4, 8))  # (batch, seq, heads, head_dim): rows of head_dim
    k = rng.normal(size=(2, 3, 4, 8))
    qo, ko = norm.qk_l2_norm_forward(q, k, 1.5)
    close(qo, 1.5 * q / np.linalg.norm(q, axis=-1, keepdims=True), 1e-13)
    qw = rng.normal(size=8)
    kw = rng.normal(size=8)
    qo, ko, qr, kr = norm.qk_rms_norm_forward(q, k, qw, kw, options=norm.presets.qwen3())
    close(ko, rms_reference(k, kw, 1e-6)[0], 1e-13)
    assert qr.shape == (24,)
    dq, dk, dqw, dkw = norm.qk_rms_norm_backward(q, k, q, k, qw, kw, qr, kr)
    assert dq.shape == q.shape and dkw.shape == (8,)
    assert norm.scale_norm_initial_gain(16) == 4.0
    assert abs(norm.qk_norm_initial_gain(8) - np.log2(56)) < 1e-15


def test_seed_norm_reduces_to_rms_norm(rng):
    x = rng.normal(size=(3, 8)).astype(np.float32)
    gamma = rng.normal(size=8).astype(np.float32)
    y, r = norm.seed_norm_forward(x, np.ones(8, np.float32), np.zeros(8, np.float32), gamma)
    y2, _ = norm.rms_norm_forward(x, gamma, eps=1e-5)
    assert np.array_equal(y, y2)
    grads = norm.seed_norm_backward(x, x, np.ones(8, np.float32), np.zeros(8, np.float32), gamma, r)
    assert len(grads) == 4 and grads[1].dtype == np.float32


def test_logit_norm_and_selective_scores(rng):
    f = rng.normal(size=(6, 10))
    labels = rng.integers(0, 10, size=6)
    loss, losses = norm.logit_norm_loss(f, labels, temperature=0.5)
    z = f / (0.5 * (np.linalg.norm(f, axis=-1, keepdims=True) + 1e-7))
    lse = np.log(np.exp(z).sum(-1))
    ref = lse - z[np.arange(6), labels]
    close(losses, ref, 1e-12)
    assert abs(loss - ref.mean()) < 1e-12
    loss2, gradient, _ = norm.logit_norm_loss_gradient(f, labels, temperature=0.5)
    assert loss2 == loss and gradient.shape == f.shape
    with pytest.raises(TypeError, match="labels has dtype int32"):
        norm.logit_norm_loss(f, labels.astype(np.int32))
    s = norm.selective_classification_score(f)
    zc = f - f.mean(-1, keepdims=True)
    close(s, zc.max(-1) / np.linalg.norm(zc, axis=-1), 1e-12)
    aurc = norm.area_under_risk_coverage(s, (np.argmax(f, -1) != labels).astype(np.float64))
    assert 0 <= aurc <= 1
    choice = norm.select_norm_order(f, labels, candidates=[1.0, 2.0])
    assert choice.p in (1.0, 2.0) and len(choice.aurcs) == 2


def test_options_objects():
    o = norm.rms_norm_options()
    assert (o.eps, o.offset, o.threads) == (1e-6, False, 1)
    assert "eps=1e-06" in repr(o)
    o.threads = 2
    copy = norm.rms_norm_options(o)
    copy.threads = 4
    assert o.threads == 2
    with pytest.raises(TypeError, match="options must be a normkit rms_norm_options"):
        norm.rms_norm_forward(np.ones((1, 2)), options=norm.layer_norm_options())
    assert normkit.__version__.count(".") == 2
