"""normkit.advantage: group-relative advantages (GRPO and its family), over numpy arrays.

Every function mirrors its C++ namesake (include/normkit/advantage/<method>.hpp, docs/advantage.md):
the inputs are positional; `grouping` is an int G (contiguous groups of G samples) or an int64 /
int32 array of ids (ragged groups, any order, numbered by first appearance); an optional input is
a keyword, None being the C++ `{}`; the outputs are returned, and each may be passed in by keyword
(`out=`, ...) for a loop that allocates nothing; the options are `options=` (an options object or
a preset of normkit.advantage.presets) and/or keywords naming its fields, with the C++ defaults.

Arrays are used in place (no copy). Rewards are float32 or float64 and fix the call's storage
type, which the outputs have too. A vector must be contiguous; a matrix [n × T] needs contiguous
rows and takes any row stride (a slice of rows passes as it is). Masks with no float data beside
them (valid, token_mask, keep) are uint8; the masks of token data (masked_whiten, reinforce_pp,
remax, gepo) have the data's dtype; lengths and prompt ids are int64. Any `threads` gives the
same bits.
"""
import numpy as np

from . import _advantage
from ._arrays import (grouping_of as _grouping, like as _like, optional_output as _optional, presets_module,
                      output, require_array, rows_of)
from ._options import install_repr, make_options

install_repr(_advantage)
center_mode = _advantage.center_mode
scale_mode = _advantage.scale_mode
eps_mode = _advantage.eps_mode
singleton_policy = _advantage.singleton_policy
nan_policy = _advantage.nan_policy
whiten_mode = _advantage.whiten_mode
dapo_filter_rule = _advantage.dapo_filter_rule
gdpo_flavour = _advantage.gdpo_flavour
return_mask_rule = _advantage.return_mask_rule
whiten_options = _advantage.whiten_options
group_normalize_options = _advantage.group_normalize_options
grpo_options = _advantage.grpo_options
dr_grpo_options = _advantage.dr_grpo_options
rloo_options = _advantage.rloo_options
opo_options = _advantage.opo_options
gpg_options = _advantage.gpg_options
gapo_options = _advantage.gapo_options
pass_at_k_options = _advantage.pass_at_k_options
dapo_filter_options = _advantage.dapo_filter_options
w_reinforce_options = _advantage.w_reinforce_options
dna_train_options = _advantage.dna_train_options
masked_whiten_options = _advantage.masked_whiten_options
reinforce_pp_options = _advantage.reinforce_pp_options
reinforce_pp_baseline_options = _advantage.reinforce_pp_baseline_options
remax_options = _advantage.remax_options
gdpo_options = _advantage.gdpo_options
sa_mrpo_options = _advantage.sa_mrpo_options
bnpo_options = _advantage.bnpo_options
gepo_options = _advantage.gepo_options
scrl_options = _advantage.scrl_options
spo_options = _advantage.spo_options
moments = _advantage.moments
merge = _advantage.merge
beta_parameters = _advantage.beta_parameters
gepo_state = _advantage.gepo_state


def _member(function, name, enum, value):
    """An enum argument given as its member or the member's name."""
    if not isinstance(value, str):
        return value
    if value not in enum.__members__:
        raise ValueError(f"{function}: {name} must be one of {', '.join(enum.__members__)}, got '{value}'")
    return enum.__members__[value]


# normkit.advantage.presets: the C++ presets, with trl and openrlhf also taking their enum's member
# names ("batch", "rloo"), as the frameworks' configs spell them. Registered in sys.modules so that
# `from normkit.advantage.presets import trl` works as well.
presets = presets_module(__name__, _advantage.presets)


def _trl(scale_rewards="group"):
    """TRL GRPOTrainer: μ_g, σ unbiased + 1e-4 (scale_rewards 'group'), the batch's σ ('batch', Lite PPO)
    or no division ('none'); a group of one gives 0, NaN rewards are excluded."""
    return _advantage.presets.trl(_member("trl", "scale_rewards", presets.trl_scale_rewards, scale_rewards))


def _openrlhf(estimator="group_norm"):
    """OpenRLHF --advantage_estimator: 'group_norm' (σ + 1e-9), 'dr_grpo', 'rloo' or 'reinforce_baseline'
    (+ token whitening, ddof 0, √max(v, 1e-8)); clip ±10, a group of one and NaN are errors."""
    return _advantage.presets.openrlhf(_member("openrlhf", "estimator", presets.openrlhf_estimator, estimator))


for _preset in (_trl, _openrlhf):
    _preset.__name__ = _preset.__qualname__ = _preset.__name__[1:]
    _preset.__module__ = presets.__name__
    setattr(presets, _preset.__name__, _preset)





def _group_count(function, grouping, n):
    g = _grouping(function, grouping)
    if isinstance(g, np.ndarray):
        return int(np.unique(g).size)
    return n // g if g > 0 else 0


def group_normalize(rewards, grouping, *, valid=None, lengths=None, token_mask=None, baseline=None,
                    batch_statistics=None, sequence_kl=None, out=None, options=None, **keywords):
    """A_i = clip((r_i − c_i)/D(v)), then optionally whitened over the batch.

    Optional inputs (the C++ reward_inputs): valid (uint8, nonzero = the sample counts), lengths
    (int64 |o_i|) or token_mask (uint8 [n × T]), baseline (center='baseline'), batch_statistics
    (a moments, e.g. merged across processes) and sequence_kl (× kl_coefficient off the reward).
    Options (group_normalize_options): center='group_mean', scale='group_std', ddof=1, eps=1e-6,
    placement='add_to_std', singleton='keep_raw', nan='exclude', window_fraction=0.5,
    whiten=whiten_options() (mode='none', ddof=1, eps=1e-8, placement='inside_sqrt'), clip_min=-inf,
    clip_max=inf, exclude_empty_responses=True, reward_clip_min=-inf, reward_clip_max=inf,
    kl_coefficient=0, threads=1. Presets: normkit.advantage.presets. Returns the advantages.
    """
    f = "group_normalize"
    o = make_options(group_normalize_options, f, options, keywords)
    out = _like(f, "rewards", out, rewards)
    _advantage.group_normalize(rewards, _grouping(f, grouping), valid, lengths, token_mask, baseline,
                               batch_statistics, sequence_kl, out, o)
    return out


def batch_moments(values, valid=None, weights=None):
    """moments (count, mean, M2) of the valid, non-NaN values, each weighted 1 or weights[i] (float64).

    For cross-process batch statistics: merge the shards' moments (merge) and pass the result to
    group_normalize(batch_statistics=...).
    """
    return _advantage.batch_moments(values, valid, weights)


def grpo_normalization(options=None, **keywords):
    """The group_normalize_options grpo runs with (scale_by_std, eps, ddof, singleton, threads)."""
    return _advantage.grpo_normalization(make_options(grpo_options, "grpo_normalization", options, keywords))


def _grouped(name, cls, formula):
    kernel = getattr(_advantage, name)

    def estimator(rewards, grouping, *, out=None, options=None, **keywords):
        o = make_options(cls, name, options, keywords)
        out = _like(name, "rewards", out, rewards)
        kernel(rewards, _grouping(name, grouping), out, o)
        return out

    estimator.__name__ = estimator.__qualname__ = name
    estimator.__doc__ = formula
    return estimator


grpo = _grouped("grpo", grpo_options, """A_i = (r_i − μ_g)/(σ_g + ε), σ_g unbiased (GRPO; verl).

    Options (grpo_options): scale_by_std=True (False: Dr. GRPO, r − μ_g), eps=1e-6, ddof=1,
    singleton='keep_raw' (a group of one gives r/(1 + ε)), threads=1. Returns the advantages.
    """)
dr_grpo = _grouped("dr_grpo", dr_grpo_options, """A_i = r_i − μ_g (Dr. GRPO).

    Options (dr_grpo_options): singleton='keep_raw', threads=1. Returns the advantages.
    """)
rloo = _grouped("rloo", rloo_options, """A_i = r_i − mean_{j≠i} r_j = n/(n − 1)·(r_i − μ_g) (RLOO).

    Options (rloo_options): singleton='keep_raw' (verl loop; 'zero': verl rloo_vectorized, TRL),
    threads=1. Returns the advantages.
    """)
gpg = _grouped("gpg", gpg_options, """A_i = α(r_i − μ_g), α = B / max(1, #{j : r_j ≠ 0}) (GPG).

    Options (gpg_options): threads=1. Returns the advantages.
    """)
gapo = _grouped("gapo", gapo_options, """A_i = (r_i − Q_g)/(√(Σ_g (r_j − Q_g)²/(n − 1)) + ε), Q_g the window median (GAPO).

    Q_g: the median (median=False: the mean) of the shortest window covering ⌈n·τ⌉ sorted rewards.
    Options (gapo_options): target_fraction=0.5, median=True, scale_by_std=True, eps=1e-6,
    threads=1. Returns the advantages.
    """)
pass_at_k = _grouped("pass_at_k", pass_at_k_options, """A = r_max − r_2nd (÷ (σ_g + ε)) on each group's arg-max, 0 elsewhere.

    A group of one is an error; ties at the top give 0. Options (pass_at_k_options):
    scale_by_std=True, eps=1e-6, threads=1. Returns the advantages.
    """)


def opo(rewards, grouping, lengths, *, out=None, options=None, **keywords):
    """A_i = r_i − Σ_g |o_j| r_j / Σ_g |o_j| (OPO); lengths int64 (Σ = 0: the unweighted mean).

    Options (opo_options): threads=1. Returns the advantages.
    """
    o = make_options(opo_options, "opo", options, keywords)
    out = _like("opo", "rewards", out, rewards)
    _advantage.opo(rewards, _grouping("opo", grouping), lengths, out, o)
    return out


def dapo_filter(rewards, grouping, *, keep=None, options=None, **keywords):
    """keep[i] = 1 iff i's group passes: 'spread' min_g < mean_g < max_g (DAPO), 'mean_in_range' low < mean_g < high.

    Options (dapo_filter_options): rule='spread', low=0, high=1, threads=1; OpenRLHF's is
    presets.openrlhf_dynamic_filtering(low, high). Returns (keep (uint8), the number of groups kept).
    """
    o = make_options(dapo_filter_options, "dapo_filter", options, keywords)
    keep = _like("dapo_filter", "rewards", keep, rewards, np.uint8, "keep")
    return keep, _advantage.dapo_filter(rewards, _grouping("dapo_filter", grouping), keep, o)


def w_reinforce(rewards, *, out=None, options=None, **keywords):
    """A_i = λ r_i for r_i > 0, r_i otherwise (W-REINFORCE). out may be rewards itself.

    Options (w_reinforce_options): positive_weight=0.1 (λ ≥ 0), threads=1. Returns the advantages.
    """
    o = make_options(w_reinforce_options, "w_reinforce", options, keywords)
    out = _like("w_reinforce", "rewards", out, rewards)
    _advantage.w_reinforce(rewards, out, o)
    return out


def dna_train(advantages, *, out=None, options=None, **keywords):
    """A_i ← A_i·S*/S_side, S* = (S_R + S_CF)/2, S = Σ|A| of each side of a (real, counterfactual) pair of groups.

    advantages: consecutive pairs of groups of group_size, [real | counterfactual], ...; out may be
    advantages itself. Options (dna_train_options): group_size (required > 0), threads=1.
    """
    o = make_options(dna_train_options, "dna_train", options, keywords)
    out = _like("dna_train", "advantages", out, advantages)
    _advantage.dna_train(advantages, out, o)
    return out


def masked_whiten(values, mask, *, out=None, options=None, **keywords):
    """y = (x − μ)/D(v) over the tokens the mask marks (verl masked_whiten); every position written.

    mask has the values' dtype (nonzero = a token); out may be values itself. Options
    (masked_whiten_options): ddof=1, eps=1e-8, placement='inside_sqrt', shift_mean=True, scale=True,
    threads=1; OpenRLHF's is presets.openrlhf_whiten(no_std_norm). Returns (output, moments used).
    """
    o = make_options(masked_whiten_options, "masked_whiten", options, keywords)
    out = _like("masked_whiten", "values", out, values)
    return out, _advantage.masked_whiten(values, mask, out, o)


def reinforce_pp(token_rewards, mask, *, out=None, returns=True, options=None, **keywords):
    """REINFORCE++: G_t = r_t + γ·G_{t+1} (mask-aware), A = masked_whiten(G)·m, over [n × T].

    mask has the rewards' dtype. returns=False skips the returns. Options (reinforce_pp_options):
    gamma=1.0, mask_rule='carry' ('reset': verl-old), whiten=whiten_options(mode='token_weighted',
    ddof=1, eps=1e-8, placement='inside_sqrt'), threads=1. Returns (advantages, returns).
    """
    f = "reinforce_pp"
    o = make_options(reinforce_pp_options, f, options, keywords)
    out = _like(f, "token_rewards", out, token_rewards)
    returns = _optional(f, "returns", returns, token_rewards.shape, token_rewards.dtype)
    _advantage.reinforce_pp(token_rewards, mask, out, returns, o)
    return out, returns


def reinforce_pp_baseline(rewards, grouping, token_mask=None, *, lengths=None, valid=None, batch_statistics=None,
                          sequence_kl=None, out=None, options=None, **keywords):
    """A_i = r_i − μ_g, whitened over the tokens (each sample weighs its token count) (REINFORCE++-baseline).

    The token counts come from token_mask (uint8 [n × T]) or lengths (int64); valid,
    batch_statistics and sequence_kl as group_normalize's. Options (reinforce_pp_baseline_options):
    singleton='keep_raw', whiten=whiten_options(mode='token_weighted', ddof=1, eps=1e-8,
    placement='inside_sqrt'), exclude_empty_responses=True, threads=1. Returns the advantages.
    """
    f = "reinforce_pp_baseline"
    o = make_options(reinforce_pp_baseline_options, f, options, keywords)
    out = _like(f, "rewards", out, rewards)
    _advantage.reinforce_pp_baseline(rewards, _grouping(f, grouping), valid, lengths, token_mask, None,
                                     batch_statistics, sequence_kl, out, o)
    return out


def remax(token_rewards, mask, baselines, *, out=None, returns=True, options=None, **keywords):
    """ReMax: G_t = Σ_{s≥t} r_s·m_s, A_t = G_t − b_i·m_t; baselines (n) the greedy rollouts' rewards.

    mask has the rewards' dtype. returns=False skips the returns. Options (remax_options):
    threads=1. Returns (advantages, returns).
    """
    o = make_options(remax_options, "remax", options, keywords)
    out = _like("remax", "token_rewards", out, token_rewards)
    returns = _optional("remax", "returns", returns, token_rewards.shape, token_rewards.dtype)
    _advantage.remax(token_rewards, mask, baselines, out, returns, o)
    return out, returns


def gdpo(reward_columns, grouping, *, lengths=None, token_mask=None, out=None, options=None, **keywords):
    """GDPO: z_{i,k} = group-normalized column k, s_i = Σ_k w_k·z_{i,k}, A = whiten_batch(s).

    reward_columns [n × K]. flavour='trl' (default): σ + 1e-4, NaN excluded, per-sample whitening;
    'verl': verl GRPO per column, per-token whitening, which needs lengths (int64) or token_mask
    (uint8 [n × T]). Options (gdpo_options): flavour='trl', weights=[] (all 1), threads=1.
    Returns the advantages (n).
    """
    o = make_options(gdpo_options, "gdpo", options, keywords)
    require_array("gdpo", "reward_columns", reward_columns)
    out = output("gdpo", "out", out, (rows_of(reward_columns),), reward_columns.dtype)
    _advantage.gdpo(reward_columns, _grouping("gdpo", grouping), lengths, token_mask, out, o)
    return out


def sa_mrpo(reward_columns, grouping, *, out=None, effective_weights=True, options=None, **keywords):
    """SA-MRPO: w̃_k = w_k(1 − s_k)^γ, s_k = clamp((mean_B r_k − r_min,k)/(r_max,k − r_min,k), 0, 1), then GDPO (TRL).

    Options (sa_mrpo_options): gamma=0.5, weights=[] (all 1), lower and upper (required, K each),
    threads=1. effective_weights=False skips w̃. Returns (advantages, effective_weights (float64, K)).
    """
    o = make_options(sa_mrpo_options, "sa_mrpo", options, keywords)
    require_array("sa_mrpo", "reward_columns", reward_columns)
    out = output("sa_mrpo", "out", out, (rows_of(reward_columns),), reward_columns.dtype)
    weights = _optional("sa_mrpo", "effective_weights", effective_weights, reward_columns.shape[-1:], np.float64)
    _advantage.sa_mrpo(reward_columns, _grouping("sa_mrpo", grouping), out, weights, o)
    return out, weights


def bnpo(rewards, grouping, *, out=None, options=None, **keywords):
    """BNPO: A_i = (r_i − p_g)·clamp(1/f_Beta(p_g; α, β), 0, clamp), r rescaled to [0, 1], Beta fitted over the groups.

    Options (bnpo_options): alpha=None, beta=None (fixed instead of the fit), clamp=1e6, threads=1.
    Returns (advantages, beta_parameters).
    """
    o = make_options(bnpo_options, "bnpo", options, keywords)
    out = _like("bnpo", "rewards", out, rewards)
    return out, _advantage.bnpo(rewards, _grouping("bnpo", grouping), out, o)


def bnpo_decomposed(reward_columns, grouping, *, out=None, options=None, **keywords):
    """The mean over the K columns of reward_columns [n × K] of each column's BNPO advantage.

    Options as bnpo. Returns (advantages (n), [beta_parameters of each column]).
    """
    o = make_options(bnpo_options, "bnpo_decomposed", options, keywords)
    require_array("bnpo_decomposed", "reward_columns", reward_columns)
    out = output("bnpo_decomposed", "out", out, (rows_of(reward_columns),), reward_columns.dtype)
    return out, _advantage.bnpo_decomposed(reward_columns, _grouping("bnpo_decomposed", grouping), out, o)


def gepo(advantages, grouping, log_probs, mask, state, *, out=None, group_entropy=True, options=None, **keywords):
    """GEPO: A_i ← α_low·A_i if A_i > 0 and H_g < H_low, α_high·A_i if A_i < 0 and H_g > H_high.

    H_g = −Σ m·log π / Σ m over the group; H_low/H_high are EMA thresholds kept in `state` (a
    gepo_state, read and updated in place). log_probs and mask [n × T] share a dtype; out may be
    advantages itself. group_entropy (float64, one per group in order of first appearance)
    receives H_g; False skips it. Options (gepo_options): alpha_low=0.5, alpha_high=0.2,
    beta_low=0.2, beta_high=0.3, gamma=0.01, threads=1. Returns (shaped advantages, group_entropy).
    """
    f = "gepo"
    o = make_options(gepo_options, f, options, keywords)
    out = _like(f, "advantages", out, advantages)
    if group_entropy is True:
        group_entropy = np.empty(_group_count(f, grouping, advantages.size))
    elif group_entropy is False:
        group_entropy = None
    _advantage.gepo(advantages, _grouping(f, grouping), log_probs, mask, state, out, group_entropy, o)
    return out, group_entropy


def scrl(subproblem_rewards, grouping, *, out=None, options=None, **keywords):
    """SCRL: A_i^(j) = (R_i^(j) − mean_g R^(j))/std_g R^(j), R progress-corrected binary rewards [n × K].

    std is the population std (a zero-spread column gives 0). Options (scrl_options): eps=0
    (> 0: divide by std + eps), threads=1. Returns the advantages [n × K].
    """
    o = make_options(scrl_options, "scrl", options, keywords)
    out = _like("scrl", "subproblem_rewards", out, subproblem_rewards)
    _advantage.scrl(subproblem_rewards, _grouping("scrl", grouping), out, o)
    return out


class spo_tracker(_advantage.spo_tracker):
    """SPO's persistent per-prompt Beta(α, β) tracker: p̂(x) = α/(α + β) replaces the group baseline.

    Options (spo_options): rho_min=0.875, rho_max=0.96, half_life_kl=0.06, constant_rho=False,
    eps=1e-8, priority_floor=0.05. Prompts are int64 ids. A plain value: copy.copy(tracker) is an
    independent tracker.
    """

    def __init__(self, options=None, **keywords):
        super().__init__(make_options(spo_options, "spo_tracker", options, keywords))

    def __copy__(self):
        twin = type(self).__new__(type(self))
        _advantage.spo_tracker.__init__(twin, self)
        return twin

    def __deepcopy__(self, memo):
        return self.__copy__()

    def advantages(self, prompt_ids, rewards, *, out=None):
        """A_i = r_i − p̂(x_i), then (A − mean_B A)/(std_u,B A + eps). Returns the advantages."""
        out = _like("spo_tracker.advantages", "rewards", out, rewards)
        super().advantages(prompt_ids, rewards, out)
        return out

    def sampling_weights(self, prompt_ids, *, out=None):
        """√(p̂(1 − p̂)) + priority_floor, float64 (or out's float32). Returns the weights."""
        if out is None:
            out = np.empty(require_array("spo_tracker.sampling_weights", "prompt_ids", prompt_ids).shape)
        super().sampling_weights(prompt_ids, out)
        return out
