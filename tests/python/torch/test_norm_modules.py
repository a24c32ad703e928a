"""normkit.torch: every module against torch's own ops, gradcheck of every autograd Function,
bf16 bit-equal to normkit.norm, zero copies, devices, dtypes, strides and the module surface."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as TF  # noqa: E402

import normkit  # noqa: E402
from normkit import norm  # noqa: E402

nt = normkit.torch
F = nt.functional
N = 16  # the row width of the tests


def randn(*shape, dtype=torch.float64, seed=0, scale=1.0, shift=0.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(tuple(shape), generator=g, dtype=torch.float64) * scale + shift).to(dtype)


def randomize(module, seed=1):
    """Parameters away from their init (so a wrong parameter path shows), kept moderate."""
    with torch.no_grad():
        for i, (name, p) in enumerate(sorted(module.named_parameters())):
            noise = randn(*p.shape, dtype=p.dtype, seed=seed + i, scale=0.3)
            p.copy_(noise if name in ("beta",) else p + noise)
    return module


def bits(t):
    """A bf16 tensor's bit pattern as numpy uint16 (normkit's bfloat16)."""
    return t.detach().contiguous().view(torch.int16).numpy().view(np.uint16)


def from_bits(array):
    return torch.from_numpy(np.ascontiguousarray(array).view(np.int16)).view(torch.bfloat16)


# ------------------------------------------------------------------ references in torch's own ops

def rms(x, width, eps, weight=None, offset=False):
    shape = x.shape
    rows = x.reshape(-1, width)
    y = rows * torch.rsqrt(rows.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * ((1 + weight) if offset else weight).reshape(-1)
    return y.reshape(shape)


def ref_layer(m, x):
    return TF.layer_norm(x, m.normalized_shape, m.weight, m.bias, m.eps)


def ref_rms(m, x):
    return rms(x, x.shape[-1], m.eps, m.weight, m.offset)


def ref_partial(m, x):
    k = math.ceil(m.p * x.shape[-1])
    r = torch.rsqrt(x[..., :k].pow(2).mean(-1, keepdim=True) + m.eps)
    return x * r * m.weight


def ref_fused(m, x, s):
    h = x + s
    return ref_rms(m, h), h


def ref_dyt(m, x):
    return torch.tanh(m.alpha * x) * m.weight + m.bias


def ref_derf(m, x):
    return torch.erf(m.alpha * x + m.shift) * m.weight + m.bias


def ref_scale(m, x):
    return m.scale * TF.normalize(x, dim=-1, eps=m.eps)


def ref_l2(m, x):
    return m.gain * TF.normalize(x, dim=-1, eps=m.eps)


def ref_qk_l2(m, q, k):
    return m.gain * TF.normalize(q, dim=-1, eps=m.eps), TF.normalize(k, dim=-1, eps=m.eps)


def ref_qk_rms(m, q, k):
    return (rms(q, m.query_weight.numel(), m.eps, m.query_weight, m.offset),
            rms(k, m.key_weight.numel(), m.eps, m.key_weight, m.offset))


def ref_seed(m, x):
    h = m.heads
    split = (*x.shape[:-1], h, x.shape[-1] // h)
    sigma = torch.tanh((x.reshape(split) * m.beta.reshape(h, -1)).sum(-1, keepdim=True))
    scale = (sigma * m.alpha.reshape(h, -1) + m.gamma.reshape(h, -1)).reshape(x.shape)
    return scale * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + m.eps)


def rows(dtype, seed=10):
    return (randn(3, 5, N, dtype=dtype, seed=seed, scale=2.0, shift=0.5),)


def qk(dtype, seed=20):
    return randn(4, 3, 8, dtype=dtype, seed=seed, scale=2.0), randn(4, 2, 8, dtype=dtype, seed=seed + 1)


# (id, module factory, inputs, torch reference)
CASES = [
    ("LayerNorm", lambda d: nt.LayerNorm(N, dtype=d), rows, ref_layer),
    ("LayerNorm-nobias", lambda d: nt.LayerNorm(N, bias=False, dtype=d), rows, ref_layer),
    ("LayerNorm-noaffine", lambda d: nt.LayerNorm(N, elementwise_affine=False, dtype=d), rows, ref_layer),
    ("RMSNorm", lambda d: nt.RMSNorm(N, dtype=d), rows, ref_rms),
    ("RMSNorm-offset", lambda d: nt.RMSNorm(N, offset=True, dtype=d), rows, ref_rms),
    ("RMSNorm-noaffine", lambda d: nt.RMSNorm(N, elementwise_affine=False, eps=1e-5, dtype=d), rows, ref_rms),
    ("PartialRMSNorm", lambda d: nt.PartialRMSNorm(N, p=0.3, dtype=d), rows, ref_partial),
    ("FusedAddRMSNorm", lambda d: nt.FusedAddRMSNorm(N, dtype=d),
     lambda d: (rows(d)[0], randn(3, 5, N, dtype=d, seed=11)), ref_fused),
    ("DyT", lambda d: nt.DyT(N, dtype=d), rows, ref_dyt),
    ("Derf", lambda d: nt.Derf(N, dtype=d), rows, ref_derf),
    ("ScaleNorm", lambda d: nt.ScaleNorm(N, dtype=d), rows, ref_scale),
    ("L2Norm", lambda d: nt.L2Norm(gain=1.5), rows, ref_l2),
    ("QKL2Norm", lambda d: nt.QKL2Norm(512, dtype=d), qk, ref_qk_l2),
    ("QKRMSNorm-head", lambda d: nt.QKRMSNorm(8, casting="llama", dtype=d), qk, ref_qk_rms),
    ("QKRMSNorm-gemma3", lambda d: nt.QKRMSNorm(8, offset=True, dtype=d), qk, ref_qk_rms),
    ("QKRMSNorm-olmo2", lambda d: nt.QKRMSNorm(24, eps=1e-5, key_normalized_shape=16, dtype=d), qk, ref_qk_rms),
    ("SeeDNorm", lambda d: nt.SeeDNorm(N, dtype=d), rows, ref_seed),
    ("SeeDNorm-heads", lambda d: nt.SeeDNorm(N, heads=4, dtype=d), rows, ref_seed),
]


def as_tuple(y):
    return y if isinstance(y, tuple) else (y,)


def assert_near(actual, expected, tolerance):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    scale = max(1.0, expected.abs().max().item())
    assert (actual - expected).abs().max().item() <= tolerance * scale


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_module_forward_and_gradients_against_torch(case, dtype):
    _, make, inputs, reference = case
    module = randomize(make(dtype))
    xs = [x.requires_grad_() for x in inputs(dtype)]
    ours, theirs = as_tuple(module(*xs)), as_tuple(reference(module, *xs))
    tolerance = 1e-12 if dtype == torch.float64 else 2e-6
    for a, b in zip(ours, theirs):
        assert_near(a.detach(), b.detach(), tolerance)
    wrt = xs + list(module.parameters())
    dys = [randn(*y.shape, dtype=dtype, seed=30 + i) for i, y in enumerate(ours)]
    ours_g = torch.autograd.grad(ours, wrt, dys, allow_unused=True)
    theirs_g = torch.autograd.grad(theirs, wrt, dys, allow_unused=True)
    for a, b in zip(ours_g, theirs_g):
        assert_near(a, b, 1e-11 if dtype == torch.float64 else 2e-5)


# ------------------------------------------------------------------ gradcheck of every Function

def leaf(*shape, seed, scale=1.0, shift=0.0):
    return randn(*shape, seed=seed, scale=scale, shift=shift).requires_grad_()


def x64(seed=40):
    return leaf(3, 2, 7, seed=seed, scale=1.5, shift=0.3)


def w64(seed=41, n=7, shift=1.0):
    return leaf(n, seed=seed, scale=0.3, shift=shift)


O = norm  # options classes and presets
GRADCHECK = [
    ("layer", F.LayerNormFunction, lambda: (x64(), w64(), w64(42, shift=0.0), O.layer_norm_options())),
    ("layer-noparams", F.LayerNormFunction, lambda: (x64(), None, None, O.layer_norm_options())),
    ("layer-weight", F.LayerNormFunction, lambda: (x64(), w64(), None, O.layer_norm_options())),
    ("rms", F.RMSNormFunction, lambda: (x64(), w64(), O.rms_norm_options())),
    ("rms-noweight", F.RMSNormFunction, lambda: (x64(), None, O.rms_norm_options())),
    ("rms-gemma", F.RMSNormFunction, lambda: (x64(), w64(shift=0.0), O.presets.gemma())),
    ("partial", F.PartialRMSNormFunction, lambda: (x64(), w64(), O.partial_rms_norm_options(p=0.5)
                                                    if False else _partial(p=0.5))),
    ("partial-authors", F.PartialRMSNormFunction, lambda: (x64(), w64(), O.presets.zhang_sennrich_prmsnorm(0.5))),
    ("fused", F.FusedAddRMSNormFunction, lambda: (x64(), x64(43), w64(), O.rms_norm_options())),
    ("fused-noweight", F.FusedAddRMSNormFunction, lambda: (x64(), x64(43), None, O.rms_norm_options())),
    ("dyt-0d", F.DyTFunction, lambda: (x64(), leaf(seed=44, shift=0.7), w64(), w64(45, shift=0.0),
                                       O.dyt_options())),
    ("dyt-1", F.DyTFunction, lambda: (x64(), leaf(1, seed=44, shift=0.7), w64(), None, O.dyt_options())),
    ("dyt-noparams", F.DyTFunction, lambda: (x64(), leaf(seed=44, shift=0.7), None, None, O.dyt_options())),
    ("derf", F.DerfFunction, lambda: (x64(), leaf(seed=46, shift=0.5), leaf(seed=47, scale=0.2), w64(),
                                      w64(48, shift=0.0), O.derf_options())),
    ("derf-1", F.DerfFunction, lambda: (x64(), leaf(1, seed=46, shift=0.5), leaf(1, seed=47, scale=0.2), None,
                                        None, O.derf_options())),
    ("scale", F.L2NormFunction, lambda: (x64(), leaf(seed=49, shift=2.0), O.l2_norm_options())),
    ("fixnorm", F.L2NormFunction, lambda: (x64(), 3.0, O.l2_norm_options())),
    ("qk-l2", F.QKL2NormFunction, lambda: (leaf(3, 4, 6, seed=50), leaf(3, 2, 6, seed=51), leaf(seed=52, shift=3),
                                           O.l2_norm_options())),
    ("qk-rms-head", F.QKRMSNormFunction, lambda: (leaf(3, 4, 6, seed=50), leaf(3, 2, 6, seed=51), w64(53, 6),
                                                  w64(54, 6), O.presets.qwen3())),
    ("qk-rms-full", F.QKRMSNormFunction, lambda: (leaf(3, 4, 6, seed=50), leaf(3, 2, 6, seed=51), w64(53, 24),
                                                  w64(54, 12), O.presets.olmo2())),
    ("qk-rms-noweight", F.QKRMSNormFunction, lambda: (leaf(3, 4, 6, seed=50), leaf(3, 2, 6, seed=51), None, None,
                                                      O.rms_norm_options())),
    ("seed", F.SeedNormFunction, lambda: (leaf(3, 8, seed=55), w64(56, 8), leaf(8, seed=57, scale=0.3),
                                          w64(58, 8), _seed(heads=1))),
    ("seed-heads", F.SeedNormFunction, lambda: (leaf(3, 8, seed=55), w64(56, 8), leaf(8, seed=57, scale=0.3),
                                                w64(58, 8), _seed(heads=4))),
]


def _partial(**keywords):
    o = norm.partial_rms_norm_options()
    for k, v in keywords.items():
        setattr(o, k, v)
    return o


def _seed(**keywords):
    o = norm.seed_norm_options()
    for k, v in keywords.items():
        setattr(o, k, v)
    return o


@pytest.mark.parametrize("case", GRADCHECK, ids=[c[0] for c in GRADCHECK])
def test_gradcheck(case):
    _, function, arguments = case
    assert torch.autograd.gradcheck(function.apply, arguments(), eps=1e-6, atol=1e-8, rtol=1e-6)


# ------------------------------------------------------------------ bfloat16, bit for bit

def _bf16_numpy(name, m, xs):
    """The normkit.norm call the module makes, on the same bits."""
    p = {k: (bits(v) if v.numel() > 1 else float(v)) for k, v in m.named_parameters()}
    if name.startswith("LayerNorm"):
        return norm.layer_norm_forward(bits(xs[0]), p.get("weight"), p.get("bias"), eps=m.eps)[0]
    if name.startswith("RMSNorm"):
        return norm.rms_norm_forward(bits(xs[0]), p.get("weight"), eps=m.eps, offset=m.offset,
                                     casting=m.casting)[0]
    if name == "PartialRMSNorm":
        return norm.partial_rms_norm_forward(bits(xs[0]), p["weight"], p=m.p, eps=m.eps)[0]
    if name == "FusedAddRMSNorm":
        h = bits(xs[1]).copy()
        return norm.fused_add_rms_norm_forward(bits(xs[0]), p["weight"], h, eps=m.eps)[0], h
    if name == "DyT":
        return norm.dyt_forward(bits(xs[0]), p["alpha"], p["weight"], p["bias"])
    if name == "Derf":
        return norm.derf_forward(bits(xs[0]), p["alpha"], p["shift"], p["weight"], p["bias"])
    if name == "ScaleNorm":
        return norm.l2_norm_forward(bits(xs[0]), float(m.scale), eps=m.eps)
    if name == "L2Norm":
        return norm.l2_norm_forward(bits(xs[0]), m.gain, eps=m.eps)
    if name == "QKL2Norm":
        return norm.qk_l2_norm_forward(bits(xs[0]), bits(xs[1]), float(m.gain), eps=m.eps)
    if name.startswith("QKRMSNorm"):
        return norm.qk_rms_norm_forward(bits(xs[0]), bits(xs[1]), p["query_weight"], p["key_weight"], eps=m.eps,
                                        offset=m.offset, casting=m.casting)[:2]
    if name.startswith("SeeDNorm"):
        return norm.seed_norm_forward(bits(xs[0]), p["alpha"], p["beta"], p["gamma"], eps=m.eps, heads=m.heads)[0]
    raise AssertionError(name)


BF16_CASES = CASES + [("RMSNorm-llama", lambda d: nt.RMSNorm(N, casting="llama", dtype=d), rows, ref_rms)]


@pytest.mark.parametrize("case", BF16_CASES, ids=[c[0] for c in BF16_CASES])
def test_bf16_forward_is_normkit_bit_for_bit(case):
    name, make, inputs, _ = case
    module = randomize(make(torch.bfloat16))
    xs = inputs(torch.bfloat16)
    ours = as_tuple(module(*xs))
    expected = _bf16_numpy(name, module, xs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert len(ours) == len(expected)
    for a, b in zip(ours, expected):
        assert a.dtype == torch.bfloat16
        np.testing.assert_array_equal(bits(a), b)


def test_bf16_backward_is_normkit_bit_for_bit():
    module = randomize(nt.RMSNorm(N, dtype=torch.bfloat16))
    x = rows(torch.bfloat16)[0].requires_grad_()
    dy = randn(*x.shape, dtype=torch.bfloat16, seed=60)
    module(x).backward(dy)
    y, rstd = norm.rms_norm_forward(bits(x), bits(module.weight), eps=module.eps)
    dx, dw = norm.rms_norm_backward(bits(dy), bits(x), bits(module.weight), rstd, eps=module.eps)
    np.testing.assert_array_equal(bits(x.grad), dx)
    assert dw.dtype == np.float32 and module.weight.grad.dtype == torch.bfloat16
    np.testing.assert_array_equal(bits(module.weight.grad), bits(torch.from_numpy(dw).to(torch.bfloat16)))


def test_float16_runs_in_place():
    module = nt.LayerNorm(N, dtype=torch.float16)
    x = rows(torch.float16)[0]
    y = module(x)
    expected = norm.layer_norm_forward(x.numpy(), module.weight.detach().numpy(), module.bias.detach().numpy())[0]
    np.testing.assert_array_equal(y.detach().numpy(), expected)


# ------------------------------------------------------------------ zero copy

# RMSNorm's and LayerNorm's Functions call the binding (normkit._norm) with every array positional:
# its positions as the keys and positions of the normkit.norm function the other Functions call.
_RMS = {0: 0, 1: 1, 2: "out", 3: "rstd"}
_RMS_BACKWARD = {0: 0, 1: 1, 2: 2, 3: "input_gradient", 4: "weight_gradient", 5: 3}
_BINDING = {"rms_norm_forward": _RMS, "partial_rms_norm_forward": _RMS, "rms_norm_backward": _RMS_BACKWARD,
            "partial_rms_norm_backward": _RMS_BACKWARD,
            "layer_norm_forward": {0: 0, 1: 1, 2: 2, 3: "out", 4: "mean", 5: "rstd"},
            "layer_norm_backward": {0: 0, 1: 1, 2: 2, 3: "input_gradient", 4: "weight_gradient", 5: "bias_gradient",
                                    6: 3, 7: 4}}


def _recording(monkeypatch, name, *keys):
    """Replaces the function normkit.torch calls for normkit.norm.<name> by a wrapper recording the
    data pointers of the arrays it gets, keyed as normkit.norm.<name>'s arguments."""
    seen = {}
    module = normkit._norm if name in _BINDING else norm
    original = getattr(module, name)

    def wrapper(*args, **kwargs):
        for i, a in enumerate(args):
            if isinstance(a, np.ndarray):
                seen[_BINDING[name][i] if name in _BINDING else i] = a.__array_interface__["data"][0]
        for k in keys:
            if isinstance(kwargs.get(k), np.ndarray):
                seen[k] = kwargs[k].__array_interface__["data"][0]
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return seen


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_rms_norm_writes_the_output_tensor(monkeypatch, dtype):
    forward = _recording(monkeypatch, "rms_norm_forward", "out", "rstd")
    backward = _recording(monkeypatch, "rms_norm_backward", "input_gradient", "weight_gradient")
    module = nt.RMSNorm(N, dtype=dtype)
    x = rows(dtype)[0].requires_grad_()
    y = module(x)
    assert forward["out"] == y.data_ptr() and forward[0] == x.data_ptr() and forward[1] == module.weight.data_ptr()
    (dx,) = torch.autograd.grad(y, x, torch.ones_like(y))
    assert backward["input_gradient"] == dx.data_ptr() and backward[1] == x.data_ptr()


@pytest.mark.parametrize("name, make, args, forward_keys", [
    ("layer_norm_forward", lambda: nt.LayerNorm(N), 1, ("out", "mean", "rstd")),
    ("partial_rms_norm_forward", lambda: nt.PartialRMSNorm(N), 1, ("out",)),
    ("dyt_forward", lambda: nt.DyT(N), 1, ("out",)),
    ("derf_forward", lambda: nt.Derf(N), 1, ("out",)),
    ("l2_norm_forward", lambda: nt.ScaleNorm(N), 1, ("out",)),
    ("seed_norm_forward", lambda: nt.SeeDNorm(N), 1, ("out",)),
])
def test_every_forward_writes_its_output_tensor(monkeypatch, name, make, args, forward_keys):
    seen = _recording(monkeypatch, name, *forward_keys)
    x = rows(torch.float32)[0]
    y = make()(x)
    assert seen["out"] == y.data_ptr() and seen[0] == x.data_ptr()


def test_fused_and_qk_write_their_output_tensors(monkeypatch):
    fused = _recording(monkeypatch, "fused_add_rms_norm_forward", "out")
    qk_seen = _recording(monkeypatch, "qk_rms_norm_forward", "query_output", "key_output")
    x, s = rows(torch.float32)[0], randn(3, 5, N, dtype=torch.float32, seed=3)
    y, h = nt.FusedAddRMSNorm(N)(x, s)
    assert fused["out"] == y.data_ptr() and fused[2] == h.data_ptr() and fused[0] == x.data_ptr()
    q, k = qk(torch.float32)
    qo, ko = nt.QKRMSNorm(8)(q, k)
    assert qk_seen["query_output"] == qo.data_ptr() and qk_seen["key_output"] == ko.data_ptr()
    assert qk_seen[0] == q.data_ptr() and qk_seen[1] == k.data_ptr()


def test_layer_norm_saves_mean_and_rstd_for_backward(monkeypatch):
    forward = _recording(monkeypatch, "layer_norm_forward", "mean", "rstd")
    backward = _recording(monkeypatch, "layer_norm_backward", "input_gradient")
    x = rows(torch.float32)[0].requires_grad_()
    nt.LayerNorm(N)(x).sum().backward()
    assert backward[3] == forward["mean"] and backward[4] == forward["rstd"]


# ------------------------------------------------------------------ devices, dtypes, shapes, strides

def test_a_meta_input_is_an_error_naming_it():
    with pytest.raises(RuntimeError, match="normkit.torch: input is on meta; normkit runs on CPU tensors"):
        nt.LayerNorm(N)(torch.empty(4, N, device="meta"))
    with pytest.raises(RuntimeError, match="weight is on meta"):
        nt.RMSNorm(N, device="meta")(torch.randn(4, N))
    with pytest.raises(RuntimeError, match="alpha is on meta"):
        F.dyt(torch.randn(4, N), torch.tensor(0.5, device="meta"))
    with pytest.raises(RuntimeError, match="key is on meta"):
        F.qk_l2_norm(torch.randn(2, 8), torch.empty(2, 8, device="meta"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_cuda_input_is_an_error_naming_it():
    with pytest.raises(RuntimeError, match="input is on cuda:0; normkit runs on CPU tensors"):
        nt.LayerNorm(N)(torch.randn(4, N, device="cuda"))


def test_a_dtype_mix_is_a_type_error():
    with pytest.raises(TypeError, match="weight has dtype torch.float32 but must be torch.float64"):
        nt.LayerNorm(N)(torch.randn(4, N, dtype=torch.float64))
    with pytest.raises(TypeError, match="bias has dtype torch.bfloat16"):
        F.layer_norm(torch.randn(4, N), torch.ones(N), torch.zeros(N, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="key has dtype torch.float64"):
        F.qk_rms_norm(torch.randn(2, 8), torch.randn(2, 8, dtype=torch.float64))
    with pytest.raises(TypeError, match="input has dtype torch.int64"):
        F.rms_norm(torch.ones(4, N, dtype=torch.int64))
    with pytest.raises(TypeError, match="input must be a torch.Tensor"):
        F.rms_norm(np.ones((4, N), np.float32))


def test_options_come_from_keywords_or_presets():
    x, w = rows(torch.float32)[0], randn(N, dtype=torch.float32, seed=5)
    torch.testing.assert_close(F.rms_norm(x, w, options=norm.presets.gemma()), F.rms_norm(x, w, offset=True),
                               rtol=0, atol=0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'epsilon'"):
        F.rms_norm(x, w, epsilon=1e-5)
    with pytest.raises(ValueError, match="casting must be one of"):
        nt.RMSNorm(N, casting="mistral")


def test_normalized_shape_is_the_last_dimension():
    for module in (nt.LayerNorm, nt.RMSNorm, nt.DyT, nt.SeeDNorm, nt.ScaleNorm):
        with pytest.raises(ValueError, match="normalized_shape must be the last dimension"):
            module((4, N))
        assert module((N,)).normalized_shape == (N,) == module(N).normalized_shape
    with pytest.raises(ValueError, match=r"expected input with shape \[\*, 16\]"):
        nt.LayerNorm(N)(torch.randn(4, N + 1))


@pytest.mark.parametrize("make", [lambda: nt.LayerNorm(8), lambda: nt.RMSNorm(8), lambda: nt.DyT(8),
                                  lambda: nt.SeeDNorm(8, heads=2), lambda: nt.ScaleNorm(8)])
def test_strided_inputs(monkeypatch, make):
    module = randomize(make())
    base = randn(6, 2, 8, dtype=torch.float32, seed=70)
    column_strided = base.reshape(6, 16)[:, ::2]             # last axis stride 2: copied (.contiguous())
    row_strided = base[::2, 0]                               # rows 32 floats apart: used as it is
    non_collapsing = base[:, :1, :].expand(6, 3, 8)          # stride 0 on an axis: copied
    for x in (column_strided, row_strided, non_collapsing):
        xc = x.detach().clone().requires_grad_()
        x = x.detach().requires_grad_()
        y, yc = module(x), module(xc)
        torch.testing.assert_close(y, yc, rtol=0, atol=0)
        dy = randn(*y.shape, dtype=torch.float32, seed=71)
        torch.testing.assert_close(torch.autograd.grad(y, x, dy)[0], torch.autograd.grad(yc, xc, dy)[0],
                                   rtol=0, atol=0)
    name = {"LayerNorm": "layer_norm_forward", "RMSNorm": "rms_norm_forward", "DyT": "dyt_forward",
            "SeeDNorm": "seed_norm_forward", "ScaleNorm": "l2_norm_forward"}[type(module).__name__]
    seen = _recording(monkeypatch, name)
    module(row_strided)
    assert seen[0] == row_strided.data_ptr()


def test_an_expanded_output_gradient():
    x = rows(torch.float64)[0].requires_grad_()
    m = randomize(nt.RMSNorm(N, dtype=torch.float64))
    dy = torch.ones(N, dtype=torch.float64).expand(x.shape)   # stride 0 everywhere but a copy is taken
    ours = torch.autograd.grad(m(x), x, dy)[0]
    theirs = torch.autograd.grad(ref_rms(m, x), x, dy)[0]
    assert_near(ours, theirs, 1e-12)


# ------------------------------------------------------------------ module surface

def test_layer_norm_state_dict_and_repr_match_torch():
    ours, theirs = nt.LayerNorm(N), torch.nn.LayerNorm(N)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["weight", "bias"]
    assert repr(ours) == repr(theirs)
    assert repr(nt.LayerNorm(N, elementwise_affine=False)) == repr(torch.nn.LayerNorm(N, elementwise_affine=False))
    randomize(theirs)
    ours.load_state_dict(theirs.state_dict())
    x = rows(torch.float32)[0]
    torch.testing.assert_close(ours(x), theirs(x), rtol=2e-6, atol=2e-6)
    assert list(nt.LayerNorm(N, bias=False).state_dict()) == ["weight"]
    assert list(nt.LayerNorm(N, elementwise_affine=False).state_dict()) == []


def test_module_parameters_and_initial_values():
    assert torch.equal(nt.RMSNorm(N).weight, torch.ones(N))
    assert torch.equal(nt.RMSNorm(N, offset=True).weight, torch.zeros(N))
    dyt = nt.DyT(N, alpha_init_value=0.8, bias=False)
    assert list(dyt.state_dict()) == ["alpha", "weight"] and dyt.alpha.shape == (1,) and dyt.alpha.item() == pytest.approx(0.8)
    derf = nt.Derf(N)
    assert list(derf.state_dict()) == ["alpha", "shift", "weight", "bias"] and derf.shift.item() == 0.0
    assert nt.ScaleNorm(N).scale.shape == () and nt.ScaleNorm(N).scale.item() == pytest.approx(4.0)
    assert nt.QKL2Norm(512).gain.item() == pytest.approx(math.log2(512 * 512 - 512))
    seed = nt.SeeDNorm(N)
    assert list(seed.state_dict()) == ["alpha", "beta", "gamma"]
    x = rows(torch.float32)[0]
    torch.testing.assert_close(seed(x), F.rms_norm(x, seed.gamma, eps=1e-5), rtol=0, atol=0)  # SeeDNorm's init
    assert list(nt.QKRMSNorm(8).state_dict()) == ["query_weight", "key_weight"]
    m = nt.LayerNorm(N, dtype=torch.float64)
    assert m.weight.dtype == torch.float64
    assert "threads=2" in repr(nt.RMSNorm(N, threads=2))


def test_fused_add_leaves_the_residual_and_gives_both_gradients():
    m = randomize(nt.FusedAddRMSNorm(N, dtype=torch.float64))
    x, s = rows(torch.float64)[0].requires_grad_(), randn(3, 5, N, seed=80).requires_grad_()
    before = s.detach().clone()
    y, h = m(x, s)
    assert torch.equal(s.detach(), before) and torch.equal(h.detach(), (x + s).detach())
    (y.sum() + (h * 2).sum()).backward()
    torch.testing.assert_close(x.grad, s.grad, rtol=0, atol=0)
    xr, sr = x.detach().clone().requires_grad_(), s.detach().clone().requires_grad_()
    yr, hr = ref_fused(m, xr, sr)
    (yr.sum() + (hr * 2).sum()).backward()
    assert_near(x.grad, xr.grad, 1e-12)


def test_parameter_gradients_take_the_parameter_dtype():
    for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
        m = nt.DyT(N, dtype=dtype)
        x = rows(dtype)[0].requires_grad_()
        m(x).sum().backward()
        assert all(p.grad.dtype == dtype and p.grad.shape == p.shape for p in m.parameters())
        assert x.grad.dtype == dtype


def test_a_parameter_view_follows_the_parameter():
    """The torch layer remembers a parameter's numpy view: an in-place step is seen, a new .data or
    dtype makes it again, and a freed module leaves nothing behind."""
    import gc

    from normkit.torch import _convert

    x = rows(torch.float32)[0]
    module = nt.RMSNorm(N)
    y0 = module(x).detach()
    with torch.no_grad():
        module.weight.mul_(3.0)
    torch.testing.assert_close(module(x), 3 * y0)
    module.weight.data = torch.full((N,), 2.0)
    torch.testing.assert_close(module(x), 2 * y0)
    module.double()
    torch.testing.assert_close(module(x.double()), 2 * y0.double(), rtol=1e-6, atol=1e-6)
    with pytest.raises(TypeError, match="weight has dtype torch.float64"):
        module(x)
    key = id(module.weight)
    assert key in _convert._PARAMETER_VIEWS
    del module
    gc.collect()
    assert key not in _convert._PARAMETER_VIEWS
