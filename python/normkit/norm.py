"""normkit.norm: row normalizations forward and backward, over numpy arrays.

Every function mirrors its C++ namesake (include/normkit/norm/<method>.hpp, docs/reference.md):
the inputs and parameters are positional, a parameter that is None is the C++ `{}` (absent);
the outputs are returned, and each may be passed in by keyword for a loop that allocates nothing;
the options are `options=` (an options object or a preset) and/or keywords naming its fields,
with the C++ defaults. The last axis is normalized; every leading axis is a row. Arrays are used
in place (no copy): float32, float64, float16, and bfloat16 as a uint16 array of its bits.
Saved statistics and parameter gradients are float32 (float64 for float64 data).
"""
import numpy as np

from . import _norm
from ._arrays import data, output, rows_of, statistic_dtype
from ._options import install_repr, make_options

install_repr(_norm)
presets = _norm.presets
rms_norm_casting = _norm.rms_norm_casting
partial_count = _norm.partial_count
llama_size = _norm.llama_size
rms_norm_options = _norm.rms_norm_options
partial_rms_norm_options = _norm.partial_rms_norm_options
layer_norm_options = _norm.layer_norm_options
dyt_options = _norm.dyt_options
derf_options = _norm.derf_options
l2_norm_options = _norm.l2_norm_options
seed_norm_options = _norm.seed_norm_options
logit_norm_options = _norm.logit_norm_options
selective_score_options = _norm.selective_score_options
select_norm_order_options = _norm.select_norm_order_options
dyt_default_alpha = _norm.dyt_default_alpha
derf_default_alpha = _norm.derf_default_alpha
derf_default_shift = _norm.derf_default_shift
dyt_llama_alpha = _norm.dyt_llama_alpha
scale_norm_initial_gain = _norm.scale_norm_initial_gain
qk_norm_initial_gain = _norm.qk_norm_initial_gain
area_under_risk_coverage = _norm.area_under_risk_coverage


def _statistic(function, name, given, x):
    return output(function, name, given, (rows_of(x),), statistic_dtype(x.dtype))


def _parameter_gradient(function, name, given, parameter, x):
    if parameter is None and given is None:
        return None
    return output(function, name, given, (x.shape[-1],), statistic_dtype(x.dtype))


def _input_gradient(function, given, x):
    if given is False:
        return None
    return output(function, "input_gradient", None if given is True else given, x.shape, x.dtype)


def rms_norm_forward(input, weight=None, *, out=None, rstd=None, options=None, **keywords):
    """RMSNorm: y = w_eff ⊙ x · r, r = 1/√(Σx²/n + eps); w_eff = w, 1 + w (offset) or 1.

    Options (rms_norm_options): eps=1e-6, offset=False, casting='gemma' ('llama' rounds x̂ first),
    threads=1, stream_above_bytes. Presets: normkit.norm.presets.llama(), gemma(), qwen3(),
    gemma3(), olmo2(). Returns (output, rstd); rstd is float32 (float64 for float64 input).
    """
    data("rms_norm_forward", "input", input)
    o = make_options(rms_norm_options, "rms_norm_forward", options, keywords)
    out = output("rms_norm_forward", "out", out, input.shape, input.dtype)
    rstd = _statistic("rms_norm_forward", "rstd", rstd, input)
    _norm.rms_norm_forward(input, weight, out, rstd, o)
    return out, rstd


def rms_norm_backward(output_gradient, input, weight, rstd, *, input_gradient=True, weight_gradient=None,
                      options=None, **keywords):
    """RMSNorm's backward: dx = r·(g − x̂·mean(g ⊙ x̂)), g = w_eff ⊙ dy; dw = Σ_rows dy ⊙ x̂.

    dw is computed when weight is given (or weight_gradient is passed in); input_gradient=False
    skips dx. Returns (input_gradient, weight_gradient), None for what was not computed.
    """
    f = "rms_norm_backward"
    data("rms_norm_backward", "output_gradient", output_gradient)
    o = make_options(rms_norm_options, f, options, keywords)
    dx = _input_gradient(f, input_gradient, input)
    dw = _parameter_gradient(f, "weight_gradient", weight_gradient, weight, input)
    _norm.rms_norm_backward(output_gradient, input, weight, dx, dw, rstd, o)
    return dx, dw


def partial_rms_count(n, options=None, **keywords):
    """k, the entries pRMSNorm's statistic takes: ceil(p·n) (or floor with count='floor')."""
    return _norm.partial_rms_count(n, make_options(partial_rms_norm_options, "partial_rms_count", options, keywords))


def partial_rms_norm_forward(input, weight=None, *, out=None, rstd=None, options=None, **keywords):
    """pRMSNorm: y = w_eff ⊙ x · r, r = 1/√(Σ_{j<k} x²/k + eps) (eps_outside: 1/(√(Σ_{j<k} x²/k) + eps)).

    Options (partial_rms_norm_options): p=0.0625, count='ceil', eps=1e-6, eps_outside=False,
    offset=False, casting='gemma', threads=1; presets.zhang_sennrich_prmsnorm(p) is the authors'
    code. Returns (output, rstd).
    """
    f = "partial_rms_norm_forward"
    data("partial_rms_norm_forward", "input", input)
    o = make_options(partial_rms_norm_options, f, options, keywords)
    out = output(f, "out", out, input.shape, input.dtype)
    rstd = _statistic(f, "rstd", rstd, input)
    _norm.partial_rms_norm_forward(input, weight, out, rstd, o)
    return out, rstd


def partial_rms_norm_backward(output_gradient, input, weight, rstd, *, input_gradient=True, weight_gradient=None,
                              options=None, **keywords):
    """pRMSNorm's backward. Returns (input_gradient, weight_gradient)."""
    f = "partial_rms_norm_backward"
    data("partial_rms_norm_backward", "output_gradient", output_gradient)
    o = make_options(partial_rms_norm_options, f, options, keywords)
    dx = _input_gradient(f, input_gradient, input)
    dw = _parameter_gradient(f, "weight_gradient", weight_gradient, weight, input)
    _norm.partial_rms_norm_backward(output_gradient, input, weight, dx, dw, rstd, o)
    return dx, dw


def fused_add_rms_norm_forward(input, weight, residual, *, out=None, rstd=None, options=None, **keywords):
    """residual ← input + residual (in place, rounded once), output = RMSNorm(residual).

    Options as rms_norm_forward. Returns (output, rstd); `residual` is updated in place.
    """
    f = "fused_add_rms_norm_forward"
    data("fused_add_rms_norm_forward", "input", input)
    o = make_options(rms_norm_options, f, options, keywords)
    out = output(f, "out", out, input.shape, input.dtype)
    rstd = _statistic(f, "rstd", rstd, input)
    _norm.fused_add_rms_norm_forward(input, weight, residual, out, rstd, o)
    return out, rstd


def fused_add_rms_norm_backward(output_gradient, residual, weight, residual_gradient, rstd, *, weight_gradient=None,
                                options=None, **keywords):
    """residual_gradient ← r·(g − ĥ·mean(g ⊙ ĥ)) + residual_gradient (in place). Returns weight_gradient."""
    f = "fused_add_rms_norm_backward"
    data("fused_add_rms_norm_backward", "output_gradient", output_gradient)
    o = make_options(rms_norm_options, f, options, keywords)
    dw = _parameter_gradient(f, "weight_gradient", weight_gradient, weight, residual)
    _norm.fused_add_rms_norm_backward(output_gradient, residual, weight, residual_gradient, dw, rstd, o)
    return dw


def layer_norm_forward(input, weight=None, bias=None, *, out=None, mean=None, rstd=None, options=None, **keywords):
    """LayerNorm: y = γ ⊙ (x − μ)·r + β, biased σ², r = 1/√(σ² + eps); γ, β optional.

    Options (layer_norm_options): eps=1e-5, threads=1, stream_above_bytes. Returns (output, mean, rstd).
    """
    f = "layer_norm_forward"
    data("layer_norm_forward", "input", input)
    o = make_options(layer_norm_options, f, options, keywords)
    out = output(f, "out", out, input.shape, input.dtype)
    mean = _statistic(f, "mean", mean, input)
    rstd = _statistic(f, "rstd", rstd, input)
    _norm.layer_norm_forward(input, weight, bias, out, mean, rstd, o)
    return out, mean, rstd


def layer_norm_backward(output_gradient, input, weight, mean, rstd, *, input_gradient=True, weight_gradient=None,
                        bias_gradient=None, bias=False, options=None, **keywords):
    """LayerNorm's backward: dx = r·(g − mean(g) − x̂·mean(g ⊙ x̂)), dγ = Σ dy ⊙ x̂, dβ = Σ dy.

    dγ is computed when weight is given, dβ when bias=True (or bias_gradient is passed in).
    Returns (input_gradient, weight_gradient, bias_gradient).
    """
    f = "layer_norm_backward"
    data("layer_norm_backward", "output_gradient", output_gradient)
    o = make_options(layer_norm_options, f, options, keywords)
    dx = _input_gradient(f, input_gradient, input)
    dw = _parameter_gradient(f, "weight_gradient", weight_gradient, weight, input)
    db = _parameter_gradient(f, "bias_gradient", bias_gradient, True if bias else None, input)
    _norm.layer_norm_backward(output_gradient, input, weight, dx, dw, db, mean, rstd, o)
    return dx, dw, db


def seed_norm_forward(input, alpha, beta, gamma, *, out=None, rstd=None, options=None, **keywords):
    """SeeDNorm: y_j = (tanh(⟨x_h, β_h⟩)·α_j + γ_j)·x̂_j, x̂ = x/RMS(x).

    Options (seed_norm_options): eps=1e-5, heads=1, threads=1. Returns (output, rstd).
    """
    f = "seed_norm_forward"
    data("seed_norm_forward", "input", input)
    o = make_options(seed_norm_options, f, options, keywords)
    out = output(f, "out", out, input.shape, input.dtype)
    rstd = _statistic(f, "rstd", rstd, input)
    _norm.seed_norm_forward(input, alpha, beta, gamma, out, rstd, o)
    return out, rstd


def seed_norm_backward(output_gradient, input, alpha, beta, gamma, rstd, *, input_gradient=True,
                       parameter_gradients=True, options=None, **keywords):
    """SeeDNorm's backward. Returns (input_gradient, alpha_gradient, beta_gradient, gamma_gradient)."""
    f = "seed_norm_backward"
    data("seed_norm_backward", "output_gradient", output_gradient)
    o = make_options(seed_norm_options, f, options, keywords)
    dx = _input_gradient(f, input_gradient, input)
    grads = [None, None, None]
    if parameter_gradients:
        grads = [np.empty(p.shape, statistic_dtype(input.dtype)) for p in (alpha, beta, gamma)]
    _norm.seed_norm_backward(output_gradient, input, alpha, beta, gamma, dx, *grads, rstd, o)
    return (dx, *grads)


def dyt_forward(input, alpha, weight=None, bias=None, *, out=None, options=None, **keywords):
    """DyT: y = γ ⊙ tanh(αx) + β. Options (dyt_options): fast_tanh=False, threads=1. Returns output."""
    f = "dyt_forward"
    data("dyt_forward", "input", input)
    o = make_options(dyt_options, f, options, keywords)
    out = output(f, "out", out, input.shape, input.dtype)
    _norm.dyt_forward(input, float(alpha), weight, bias, out, o)
    return out


def dyt_backward(output_gradient, input, alpha, weight=None, *, input_gradient=True, weight_gradient=None,
                 bias_gradient=None, bias=False, options=None, **keywords):
    """DyT's backward: dx = α·c, c = dy ⊙ γ ⊙ (1 − t²); dα = Σ c ⊙ x; dγ = Σ dy ⊙ t; dβ = Σ dy.

    Returns (input_gradient, alpha_gradient, weight_gradient, bias_gradient).
    """
    f = "dyt_backward"
    data("dyt_backward", "output_gradient", output_gradient)
    o = make_options(dyt_options, f, options, keywords)
    dx = _input_gradient(f, input_gradient, input)
    dw = _parameter_gradient(f, "weight_gradient", weight_gradient, weight, input)
    db = _parameter_gradient(f, "bias_gradient", bias_gradient, True if bias else None, input)
    dalpha = _norm.dyt_backward(output_gradient, input, float(alpha), weight, dx, dw, db, o)
    return dx, dalpha, dw, db


def derf_forward(input, alpha, shift, weight=None, bias=None, *, out=None, options=None, **keywords):
    """Derf: y = γ ⊙ erf(αx + s) + β. Options (derf_options): fast_erf=False, threads=1. Returns output."""
    f = "derf_forward"
    data("derf_forward", "input", input)
    o = make_options(derf_options, f, options, keywords)
    out = output(f, "out", out, input.shape, input.dtype)
    _norm.derf_forward(input, float(alpha), float(shift), weight, bias, out, o)
    return out


def derf_backward(output_gradient, input, alpha, shift, weight=None, *, input_gradient=True, weight_gradient=None,
                  bias_gradient=None, bias=False, options=None, **keywords):
    """Derf's backward. Returns (input_gradient, alpha_gradient, shift_gradient, weight_gradient, bias_gradient)."""
    f = "derf_backward"
    data("derf_backward", "output_gradient", output_gradient)
    o = make_options(derf_options, f, options, keywords)
    dx = _input_gradient(f, input_gradient, input)
    dw = _parameter_gradient(f, "weight_gradient", weight_gradient, weight, input)
    db = _parameter_gradient(f, "bias_gradient", bias_gradient, True if bias else None, input)
    dalpha, dshift = _norm.derf_backward(output_gradient, input, float(alpha), float(shift), weight, dx, dw, db, o)
    return dx, dalpha, dshift, dw, db


def l2_norm_forward(input, gain=1.0, *, out=None, options=None, **keywords):
    """L2 / ScaleNorm: y = g·x / max(‖x‖₂, eps). Options (l2_norm_options): eps=1e-12, threads=1."""
    f = "l2_norm_forward"
    data("l2_norm_forward", "input", input)
    o = make_options(l2_norm_options, f, options, keywords)
    out = output(f, "out", out, input.shape, input.dtype)
    _norm.l2_norm_forward(input, float(gain), out, o)
    return out


def l2_norm_backward(output_gradient, input, gain=1.0, *, input_gradient=True, options=None, **keywords):
    """dx = g·r·(dy − x̂⟨x̂, dy⟩) (g·r·dy on the clamp); dg = Σ dy ⊙ x̂. Returns (input_gradient, gain_gradient)."""
    f = "l2_norm_backward"
    data("l2_norm_backward", "output_gradient", output_gradient)
    o = make_options(l2_norm_options, f, options, keywords)
    dx = _input_gradient(f, input_gradient, input)
    dg = _norm.l2_norm_backward(output_gradient, input, float(gain), dx, o)
    return dx, dg


def l2_normalize_rows(matrix, options=None, **keywords):
    """Every row ← x / max(‖x‖₂, eps), in place (nGPT). Returns matrix."""
    _norm.l2_normalize_rows(matrix, make_options(l2_norm_options, "l2_normalize_rows", options, keywords))
    return matrix


def qk_l2_norm_forward(query, key, gain=1.0, *, query_output=None, key_output=None, options=None, **keywords):
    """QK L2-norm (Henry et al. 2020): q′ = g·q/max(‖q‖, eps), k′ = k/max(‖k‖, eps). Returns (q′, k′)."""
    f = "qk_l2_norm_forward"
    data("qk_l2_norm_forward", "query", query)
    o = make_options(l2_norm_options, f, options, keywords)
    qo = output(f, "query_output", query_output, query.shape, query.dtype)
    ko = output(f, "key_output", key_output, key.shape, key.dtype)
    _norm.qk_l2_norm_forward(query, key, float(gain), qo, ko, o)
    return qo, ko


def qk_l2_norm_backward(query_output_gradient, key_output_gradient, query, key, gain=1.0, *, options=None,
                        **keywords):
    """Returns (query_gradient, key_gradient, gain_gradient)."""
    f = "qk_l2_norm_backward"
    data("qk_l2_norm_backward", "query_output_gradient", query_output_gradient)
    o = make_options(l2_norm_options, f, options, keywords)
    dq = np.empty(query.shape, query.dtype)
    dk = np.empty(key.shape, key.dtype)
    dg = _norm.qk_l2_norm_backward(query_output_gradient, key_output_gradient, query, key, float(gain), dq, dk, o)
    return dq, dk, dg


def qk_rms_norm_forward(query, key, query_weight, key_weight, *, query_output=None, key_output=None,
                        query_rstd=None, key_rstd=None, options=None, **keywords):
    """RMSNorm of q and k over the width of their weights (head_dim: presets qwen3(), gemma3(); the
    whole token: olmo2()). Returns (query_output, key_output, query_rstd, key_rstd)."""
    f = "qk_rms_norm_forward"
    data("qk_rms_norm_forward", "query", query)
    o = make_options(rms_norm_options, f, options, keywords)
    qo = output(f, "query_output", query_output, query.shape, query.dtype)
    ko = output(f, "key_output", key_output, key.shape, key.dtype)
    width_q = query_weight.shape[-1] if query_weight is not None else query.shape[-1]
    width_k = key_weight.shape[-1] if key_weight is not None else key.shape[-1]
    qr = output(f, "query_rstd", query_rstd, (query.size // max(width_q, 1),), statistic_dtype(query.dtype))
    kr = output(f, "key_rstd", key_rstd, (key.size // max(width_k, 1),), statistic_dtype(key.dtype))
    _norm.qk_rms_norm_forward(query, key, query_weight, key_weight, qo, ko, qr, kr, o)
    return qo, ko, qr, kr


def qk_rms_norm_backward(query_output_gradient, key_output_gradient, query, key, query_weight, key_weight,
                         query_rstd, key_rstd, *, options=None, **keywords):
    """Returns (query_gradient, key_gradient, query_weight_gradient, key_weight_gradient)."""
    f = "qk_rms_norm_backward"
    data("qk_rms_norm_backward", "query_output_gradient", query_output_gradient)
    o = make_options(rms_norm_options, f, options, keywords)
    dq = np.empty(query.shape, query.dtype)
    dk = np.empty(key.shape, key.dtype)
    s = statistic_dtype(query.dtype)
    dqw = None if query_weight is None else np.empty(query_weight.shape, s)
    dkw = None if key_weight is None else np.empty(key_weight.shape, s)
    _norm.qk_rms_norm_backward(query_output_gradient, key_output_gradient, query, key, query_weight, key_weight,
                               dq, dk, dqw, dkw, query_rstd, key_rstd, o)
    return dq, dk, dqw, dkw


def logit_norm_loss(logits, labels, *, losses=None, options=None, **keywords):
    """LogitNorm: ℓ = logsumexp(z) − z_y, z = f/(τ(‖f‖₂ + δ)); labels int64.

    Options (logit_norm_options): temperature=1, delta=1e-7, threads=1. Returns (mean loss, losses).
    """
    f = "logit_norm_loss"
    data("logit_norm_loss", "logits", logits)
    o = make_options(logit_norm_options, f, options, keywords)
    losses = _statistic(f, "losses", losses, logits)
    return _norm.logit_norm_loss(logits, labels, losses, o), losses


def logit_norm_loss_gradient(logits, labels, *, gradient=None, losses=None, options=None, **keywords):
    """The LogitNorm loss and ∂(mean loss)/∂f. Returns (mean loss, gradient, losses)."""
    f = "logit_norm_loss_gradient"
    data("logit_norm_loss_gradient", "logits", logits)
    o = make_options(logit_norm_options, f, options, keywords)
    gradient = output(f, "gradient", gradient, logits.shape, logits.dtype)
    losses = _statistic(f, "losses", losses, logits)
    loss = _norm.logit_norm_loss_gradient(logits, labels, gradient, losses, o)
    return loss, gradient, losses


def selective_classification_score(logits, *, scores=None, options=None, **keywords):
    """s = max z̃ / ‖z̃‖_p, z̃ = z − mean z (constant row → 0). Options: p=2 (inf allowed). Returns scores."""
    f = "selective_classification_score"
    data("selective_classification_score", "logits", logits)
    o = make_options(selective_score_options, f, options, keywords)
    scores = _statistic(f, "scores", scores, logits)
    _norm.selective_classification_score(logits, scores, o)
    return scores


def select_norm_order(validation_logits, labels, options=None, **keywords):
    """The candidate p (default 1…10) of least AURC of argmax errors; a norm_order_selection."""
    data("select_norm_order", "validation_logits", validation_logits)
    o = make_options(select_norm_order_options, "select_norm_order", options, keywords)
    return _norm.select_norm_order(validation_logits, labels, o)
