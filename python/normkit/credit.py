"""normkit.credit: token-level credit assignment (broadcasts, entropy credit, logits statistics, returns, GAE,
optimal token baseline, span and turn advantages), over numpy arrays.

Every function mirrors its C++ namesake (include/normkit/credit/<method>.hpp, docs/credit.md): the
inputs are positional, in the C++ order; an optional input is a keyword, None being the C++ `{}`;
the outputs are returned (several as a tuple in the C++ order, then a returned count), and each may
be passed in by keyword (`out=`, ...) for a loop that allocates nothing: what is passed in is what is
returned, written in place. An optional output is True (allocated), False (skipped: None returned)
or an array. The options are `options=` (an options object or a preset of normkit.credit.presets)
and/or keywords naming its fields, with the C++ defaults; an enum field takes its member or its name.

Arrays are used in place (no copy). Token data [B × T] (rewards, masks, log-probs, entropies,
per-turn tables) are float32 or float64 and fix the call's storage type, which the masks and the
outputs have too (broadcast_advantages also takes a uint8 mask). A mask's nonzero entries are the
valid tokens. The logits kernels take float32, float64, float16 or bfloat16 (its bits in a uint16
array) logits [T × V]; their statistics are float32 (float64 for float64 logits) and the logits
gradient has the logits' dtype. Token ids, turn counts and turn indices are int64 (an int32 array
is refused, not copied). `grouping` is an int G (contiguous groups of G rows) or an int64 / int32
array of ids. A matrix needs contiguous rows and takes any row stride (x[::2] passes as it is); a
vector must be contiguous. Any `threads` gives the same bits.
"""
import numpy as np

from . import _credit
from ._arrays import (grouping_of as _grouping, like as _like, optional_output as _optional, presets_module,
                      require_array, rows_of, statistic_dtype)
from ._options import install_repr, make_options

install_repr(_credit)
cort_mapping = _credit.cort_mapping
hapo_sign = _credit.hapo_sign
outside_span = _credit.outside_span
normalization_scope = _credit.normalization_scope
gtpo_scope = _credit.gtpo_scope
return_mask_rule = _credit.return_mask_rule
broadcast_options = _credit.broadcast_options
cort_options = _credit.cort_options
top_entropy_options = _credit.top_entropy_options
hapo_entropy_options = _credit.hapo_entropy_options
hapo_advantage_options = _credit.hapo_advantage_options
hapo_clip_options = _credit.hapo_clip_options
hapo_redistribute_options = _credit.hapo_redistribute_options
logits_options = _credit.logits_options
optimal_token_baseline_options = _credit.optimal_token_baseline_options
discounted_returns_options = _credit.discounted_returns_options
gae_options = _credit.gae_options
span_options = _credit.span_options
a2tgpo_options = _credit.a2tgpo_options
mapo_options = _credit.mapo_options
gtpo_options = _credit.gtpo_options
turns_to_tokens_options = _credit.turns_to_tokens_options
span = _credit.span
smoothstep_ramp = _credit.smoothstep_ramp

# normkit.credit.presets: the C++ presets (`from normkit.credit.presets import hapo_paper` works too).
presets = presets_module(__name__, _credit.presets)





def _float_dtype(function, name, x):
    """The storage type the token data x fixes (float32 or float64)."""
    require_array(function, name, x)
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"{function}: {name} has dtype {x.dtype}; expected float32 or float64")
    return x.dtype


# ------------------------------------------------------------------------------------ broadcast, CoRT

def broadcast_advantages(advantages, mask, *, out=None, options=None, **keywords):
    """A_{i,t} = A_i where m_{i,t} ≠ 0, 0 elsewhere.

    advantages (B) float32 / float64; mask [B × T] uint8 or of the output's dtype. The output has
    the mask's dtype (a uint8 mask: the advantages' dtype), or out's float dtype. Options
    (broadcast_options): threads=1. Returns the token advantages [B × T].
    """
    f = "broadcast_advantages"
    o = make_options(broadcast_options, f, options, keywords)
    require_array(f, "mask", mask)
    if out is None:
        dtype = mask.dtype if mask.dtype in (np.float32, np.float64) else _float_dtype(f, "advantages", advantages)
        out = np.empty(mask.shape, dtype)
    else:
        require_array(f, "out", out)
        if tuple(out.shape) != tuple(mask.shape):
            raise ValueError(f"{f}: out has shape {tuple(out.shape)} but must be {tuple(mask.shape)}")
    _credit.broadcast_advantages(advantages, mask, out, o)
    return out


def cort_weights(log_prob_rubric, log_prob_free, mask, advantages=None, *, weights=True, token_advantages=None,
                 options=None, **keywords):
    """CoRT: c_t = log π(y_t|x, rubric) − log π(y_t|x), w_t = clip(s·f(c_t), w_min, w_max) with mean_{V_i} w = 1,
    w_eff = 1 + S(step)·(w − 1), A_{i,t} = w_eff·A_i on valid tokens.

    The weights returned are w_eff (0 at masked tokens). All matrices [B × T] share a float dtype (the
    mask's). advantages (B) is needed only for the token
    advantages, which are computed when it is given (token_advantages=None) or True; weights=False skips
    the weights. Options (cort_options): mapping='clipped_exp' (or 'scaled_sigmoid', 'tanh'),
    temperature=1, min_weight=0.5, max_weight=2, normalize=True, step=0, ramp_start=0, ramp_end=0,
    threads=1. Returns (weights, token_advantages, the largest clip-and-renormalize round count).
    """
    f = "cort_weights"
    o = make_options(cort_options, f, options, keywords)
    dtype = _float_dtype(f, "mask", mask)
    if token_advantages is None:
        token_advantages = advantages is not None
    weights = _optional(f, "weights", weights, mask.shape, dtype)
    token_advantages = _optional(f, "token_advantages", token_advantages, mask.shape, dtype)
    rounds = _credit.cort_weights(log_prob_rubric, log_prob_free, mask, advantages, weights, token_advantages, o)
    return weights, token_advantages, rounds


# ----------------------------------------------------------------------------------- entropy credit

def top_entropy_mask(entropy, mask, *, out=None, options=None, **keywords):
    """keep_{i,t} = m_{i,t} ∧ H_{i,t} ≥ q, q = quantile_{1−ρ}(H over valid tokens), linear as torch.quantile (TRL).

    entropy, mask [B × T] float32 / float64; keep (1 or 0) has their dtype. Options
    (top_entropy_options): rho=1 (keep every valid token), threads=1. Returns keep.
    """
    o = make_options(top_entropy_options, "top_entropy_mask", options, keywords)
    out = _like("top_entropy_mask", "entropy", out, entropy)
    _credit.top_entropy_mask(entropy, mask, out, o)
    return out


def hapo_entropy_signal(entropy, mask, *, out=None, options=None, **keywords):
    """HAPO h̃: ℓ = log max(H, 1e-8), h = (ℓ − Q_p(ℓ))/s, s = max(√mean((ℓ − Q_p)²), 1e-8), h̃ = h/max(h) for h > 0.

    For h < 0: h/|min(h)| (sign='paper_range') or h/min(h) ('released_code'); masked tokens 0. Options
    (hapo_entropy_options): pivot=0.8, sign='paper_range', threads=1; presets.hapo_paper(),
    presets.hapo_released_code(). Returns h̃ [B × T].
    """
    o = make_options(hapo_entropy_options, "hapo_entropy_signal", options, keywords)
    out = _like("hapo_entropy_signal", "entropy", out, entropy)
    _credit.hapo_entropy_signal(entropy, mask, out, o)
    return out


def hapo_token_advantages(scores, grouping, mask, *, out=None, options=None, **keywords):
    """HAPO token-level group average: μ = Σ|o_i| r_i/Σ|o_i|, σ = √(Σ|o_i|(r_i − μ)²/Σ|o_i|), A_i = (r_i − μ)/(σ + ε).

    A group with a valid |A| ≥ fallback_threshold falls back to GRPO (unbiased σ + ε; a group of one
    keeps r). Output A_{i,t} = A_i·[m ≠ 0]. scores (B) and mask [B × T] share a float dtype. Options
    (hapo_advantage_options): eps=1e-6, normalize_by_std=True, fallback_threshold=5, threads=1.
    Returns the token advantages [B × T].
    """
    f = "hapo_token_advantages"
    o = make_options(hapo_advantage_options, f, options, keywords)
    out = _like(f, "mask", out, mask)
    _credit.hapo_token_advantages(scores, _grouping(f, grouping), mask, out, o)
    return out


def hapo_clip_ranges(signal, *, low=None, high=None, options=None, **keywords):
    """ε_L,t = ε_L·(1 − α_c·h̃) if h̃ ≤ 0 else ε_L;  ε_H,t = ε_H·(1 + α_c·h̃) if h̃ > 0 else ε_H.

    Options (hapo_clip_options): clip_low=0.2, clip_high=0.2, alpha=1, threads=1. Returns (low, high).
    """
    o = make_options(hapo_clip_options, "hapo_clip_ranges", options, keywords)
    low = _like("hapo_clip_ranges", "signal", low, signal, out_name="low")
    high = _like("hapo_clip_ranges", "signal", high, signal, out_name="high")
    _credit.hapo_clip_ranges(signal, low, high, o)
    return low, high


def hapo_redistribute(advantages, signal, ratio, clip_low, clip_high, mask, *, out=None, options=None, **keywords):
    """HAPO redistribution, r = ratio in the open band (1 − ε_L,t/2, 1 + ε_H,t/2): h̃ > 0: A·(1 + β·h̃) outside the
    band, A inside; h̃ ≤ 0: A·(1 + β·h̃) inside the band, A outside.

    ratio = π/π_old per token; all matrices [B × T] share a float dtype; masked tokens 0. Options
    (hapo_redistribute_options): beta=1, threads=1. Returns the redistributed advantages.
    """
    o = make_options(hapo_redistribute_options, "hapo_redistribute", options, keywords)
    out = _like("hapo_redistribute", "advantages", out, advantages)
    _credit.hapo_redistribute(advantages, signal, ratio, clip_low, clip_high, mask, out, o)
    return out


# ------------------------------------------------------------------------------------------- logits

def logits_statistics(logits, tokens=None, *, token_log_probability=None, entropy=True, sum_probability_squared=True,
                      logsumexp=True, options=None, **keywords):
    """Per row z of logits [T × V], z' = z/τ: lse = log Σ exp(z'), log π_y = z'_y − lse, H = lse − Σ π z', Σπ².

    logits float32, float64, float16 or bfloat16 (uint16 bits); tokens int64 (T), needed only for the
    token log-probabilities, which are computed when tokens are given (token_log_probability=None) or
    True. Each output is True (allocated), False (skipped) or an array of T float32 (float64 for float64
    logits). Options (logits_options): temperature=1, threads=1. Returns (token_log_probability,
    entropy, sum_probability_squared, logsumexp), None for the ones skipped; logsumexp is what
    logits_backward takes.
    """
    f = "logits_statistics"
    o = make_options(logits_options, f, options, keywords)
    require_array(f, "logits", logits)
    rows = rows_of(logits)
    stat = statistic_dtype(logits.dtype)
    if token_log_probability is None:
        token_log_probability = tokens is not None
    outs = [_optional(f, name, given, (rows,), stat) for name, given in (
        ("token_log_probability", token_log_probability), ("entropy", entropy),
        ("sum_probability_squared", sum_probability_squared), ("logsumexp", logsumexp))]
    _credit.logits_statistics(logits, tokens, *outs, o)
    return tuple(outs)


def logits_backward(output_gradient, logits, tokens, *, logsumexp=None, out=None, options=None, **keywords):
    """∂L/∂z_v = (g_t/τ)·(δ_{v y_t} − π_v) for L = Σ_t g_t·log π(y_t), over the raw logits.

    output_gradient (T) float32 (float64 for float64 logits); tokens int64; logsumexp: the forward's
    (fast), or None to recompute it per row (exact at large |z|). The gradient has the logits' shape
    and dtype and is overwritten. Options (logits_options): temperature=1, threads=1. Returns the
    logits gradient.
    """
    o = make_options(logits_options, "logits_backward", options, keywords)
    out = _like("logits_backward", "logits", out, logits)
    _credit.logits_backward(output_gradient, logits, tokens, out, logsumexp, o)
    return out


# ----------------------------------------------------------------------------------- returns, OTB

def optimal_token_baseline(rewards, mask, grouping, old_log_prob, sum_probability_squared, *,
                           importance_weights=None, out=None, returns=True, options=None, **keywords):
    """OTB: G_t = Σ_{j≥t} r_j m_j, W_t = Σ_{j≤t} (1 − 2π_j + Σπ²_j)ρ_j² m_j, B_t = Σ_g G_t W_t m_t/(Σ_g W_t m_t + ε),
    A_t = (G_t − B_t)·m_t (verl optimal_token_baseline).

    All matrices [B × T] share a float dtype; π = exp(old_log_prob); importance_weights ρ (None: 1).
    returns=False skips G. Options (optimal_token_baseline_options): handle_zero_tail=True, compact=False
    (the TIR variant), eps=1e-8, threads=1; presets.verl_new/old/tir_optimal_token_baseline().
    Returns (advantages, returns).
    """
    f = "optimal_token_baseline"
    o = make_options(optimal_token_baseline_options, f, options, keywords)
    out = _like(f, "rewards", out, rewards)
    returns = _optional(f, "returns", returns, rewards.shape, rewards.dtype)
    _credit.optimal_token_baseline(rewards, mask, _grouping(f, grouping), old_log_prob, sum_probability_squared,
                                   importance_weights, out, returns, o)
    return out, returns


def discounted_returns(rewards, mask, *, out=None, options=None, **keywords):
    """G_t = r_t + γ·G_{t+1} over valid tokens (REINFORCE++ returns).

    mask has the rewards' dtype. Options (discounted_returns_options): gamma=1, mask_rule='carry'
    ('reset': verl-old, 'discount_through': OpenRLHF), threads=1; presets.verl_new_returns(γ),
    verl_old_returns(γ), openrlhf_returns(γ). Returns the returns [B × T].
    """
    o = make_options(discounted_returns_options, "discounted_returns", options, keywords)
    out = _like("discounted_returns", "rewards", out, rewards)
    _credit.discounted_returns(rewards, mask, out, o)
    return out


def generalized_advantage_estimation(rewards, values, mask, *, out=None, returns=True, options=None, **keywords):
    """GAE: δ_t = r_t + γ·V_{next valid} − V_t, A_t = δ_t + γλ·A_{next valid}, R_t = A_t + V_t.

    rewards, values, mask [B × T] share a float dtype. returns=False skips R. Options (gae_options):
    gamma=1, lambda_=1 (C++ lambda), mask_rule='carry' ('discount_through': OpenRLHF), threads=1;
    presets.openrlhf_gae(γ, λ). Returns (advantages, returns).
    """
    f = "generalized_advantage_estimation"
    o = make_options(gae_options, f, options, keywords)
    out = _like(f, "rewards", out, rewards)
    returns = _optional(f, "returns", returns, rewards.shape, rewards.dtype)
    _credit.generalized_advantage_estimation(rewards, values, mask, out, returns, o)
    return out, returns


# ------------------------------------------------------------------------------------ spans, turns

def span_advantages(spans, position_advantages, mask, response_advantages=None, *, out=None, options=None,
                    **keywords):
    """SCRL: A_{i,t} = A_i^(j) for t in a span (i, [start, end), j) with m_{i,t} ≠ 0; outside every span 0
    (outside='zero') or A_i (outside='response_advantage'); masked tokens 0.

    spans: a list of span(sample, start, end, position) or an int64 array [S × 4] of those columns;
    position_advantages [B × K], mask [B × T] and response_advantages (B; read only under
    response_advantage) share a float dtype. Options (span_options): outside='zero', threads=1.
    Returns the token advantages [B × T].
    """
    o = make_options(span_options, "span_advantages", options, keywords)
    out = _like("span_advantages", "mask", out, mask)
    _credit.span_advantages(spans, position_advantages, mask, response_advantages, out, o)
    return out


def a2tgpo_advantages(information_gain, turn_count, grouping, outcome_advantages, *, out=None, clip_scale=True,
                      options=None, **keywords):
    """A²TGPO: ĨG_t = (IG_t − mean_c)/(std_c + ε) over the cell (group, t), D_t = Σ_{j=t}^{n−1} γ^{j−t}ĨG_j/√(n − t),
    A_t = outcome_i + α·D_t (t < n), A_n = outcome_i; c_t = 1 + κ·(2σ(ĨG_t) − 1), 1 for the outcome turn.

    information_gain [B × N] and outcome_advantages (B) share a float dtype; turn_count int64 (B).
    clip_scale=False skips c. Options (a2tgpo_options): gamma=1, alpha=0.3, clip_spread=0.3,
    normalize_by_std=True, ddof=0, eps=1e-6, threads=1. Returns (advantages, clip_scale) [B × N].
    """
    f = "a2tgpo_advantages"
    o = make_options(a2tgpo_options, f, options, keywords)
    out = _like(f, "information_gain", out, information_gain)
    clip_scale = _optional(f, "clip_scale", clip_scale, information_gain.shape, information_gain.dtype)
    _credit.a2tgpo_advantages(information_gain, turn_count, _grouping(f, grouping), outcome_advantages, out,
                              clip_scale, o)
    return out, clip_scale


def mapo_advantages(rewards, turn_count, grouping, *, out=None, options=None, **keywords):
    """MAPO: G_t = Σ_{k≥t} γ^{k−t} r_k, A_t = α·z_turn(G_t) + (1 − α)·z_group(r_t), z = (x − μ)/(σ + ε) (population σ).

    z_turn over the group's rows at turn index t; z_group over the group's valid turns (the batch's
    under immediate_scope='batch'). rewards [B × N] float; turn_count int64 (B). Options
    (mapo_options): alpha=0.5, gamma=1, eps=1e-8, immediate_scope='group', threads=1.
    Returns the advantages [B × N].
    """
    f = "mapo_advantages"
    o = make_options(mapo_options, f, options, keywords)
    out = _like(f, "rewards", out, rewards)
    _credit.mapo_advantages(rewards, turn_count, _grouping(f, grouping), out, o)
    return out


def gtpo_advantages(rewards, turn_count, grouping, *, out=None, options=None, **keywords):
    """GTPO: G_t = Σ_{k≥t} γ^{k−t} r_k, A_t = (G_t − μ)/(σ + ε).

    μ, σ (ddof) over the group's valid turns (scope='all_turns') or its rows at turn index t
    ('turn_index'). rewards [B × N] float; turn_count int64 (B). Options (gtpo_options): gamma=0.9,
    scope='all_turns', ddof=1, eps=1e-6, threads=1. Returns the advantages [B × N].
    """
    f = "gtpo_advantages"
    o = make_options(gtpo_options, f, options, keywords)
    out = _like(f, "rewards", out, rewards)
    _credit.gtpo_advantages(rewards, turn_count, _grouping(f, grouping), out, o)
    return out


def turns_to_tokens(per_turn, turn_index, *, out=None, options=None, **keywords):
    """output(i, t) = per_turn(i, turn_index(i, t)), or options.outside where turn_index = −1.

    per_turn [B × N] float; turn_index [B × T] int64 (non-decreasing per row). Options
    (turns_to_tokens_options): outside=0, threads=1. Returns the token values [B × T] (per_turn's dtype).
    """
    f = "turns_to_tokens"
    o = make_options(turns_to_tokens_options, f, options, keywords)
    require_array(f, "per_turn", per_turn)
    out = _like(f, "turn_index", out, turn_index, per_turn.dtype)
    _credit.turns_to_tokens(per_turn, turn_index, out, o)
    return out
