// Turn-level credit for multi-turn rollouts: A²TGPO, MAPO and GTPO advantages
// per turn, and their broadcast to tokens (turns_to_tokens: options.outside
// where a token is in no turn).
//
// Data: a per-turn table [B × N] (row i has turn_count[i] ≤ N valid turns,
// columns beyond are padding and are not read), the groups of the rows (a
// normkit::groups: contiguous_groups(G) or group_ids(uid)), and for the
// token broadcast a turn index per token [B × T] (−1 = in no turn).
//
// A²TGPO (arXiv 2605.06200; from third-party readings of
// the official code, mode turn-group-v1d). Row i has n = turn_count[i]
// information-gain turns IG_0..IG_{n−1}; its outcome turn is turn n.
//   ĨG_t = (IG_t − mean_c)/(std_c + ε)  over the cell c = (group, turn index t)
//          (mean-only if !normalize_by_std)
//   D_t  = Σ_{j=t}^{n−1} γ^{j−t}·ĨG_j / √(n − t)      (variance-rescaled accumulation)
//   A_t  = outcome_i + α·D_t  (t < n);  A_n = outcome_i;  padding beyond → 0
//   c_t  = 1 + κ·(2σ(ĨG_t) − 1) ∈ (1 − κ, 1 + κ) (t < n); 1 for the outcome turn and padding
//          (the per-turn clip scale: ε_low,eff = ε_low·c_t, ε_high,eff = ε_high·c_t)
// Defaults: α = 0.3, κ = 0.3 (adv_rescale_alpha and the clip spread, from the
// code readings). Not found, so parameters: γ = 1 (the demo note's value,
// unconfirmed); ddof = 0, because the statistics are scatter-add sums of x and
// x² over the cell (the population variance); ε = 1e-6 (verl's GRPO epsilon).
// With γ = 1 and i.i.d. unit-variance ĨG, Var D_t = 1 at every depth (tested).
// A cell of one, or of equal values, gives ĨG = 0. IG itself (probability or
// log-probability gain: the readings disagree) is the caller's.
//
// MAPO / MICA v3 (arXiv 2603.06194; third-party code):
//   G_t = Σ_{k=t}^{n−1} γ^{k−t} r_k
//   A_turn  = population z-score of G_t over the rows of the group at turn index t
//   A_group = population z-score of r_t over all valid turns of the group
//             (scope = batch: over all valid turns of the batch, v1's "batch-level")
//   A_t = α·A_turn + (1 − α)·A_group,   z = (x − μ)/(σ + ε), ε = 1e-8, α = 0.5
//   γ is NOT FOUND: default 1, as the potential-based rewards r_t = φ(s_{t−1}) − φ(s_t)
//   telescope to the total progress only undiscounted.
//
// GTPO (arXiv 2511.14846; abstract + third-party integrations):
//   G_t = Σ_{k=t}^{n−1} γ^{k−t} r_k,  A_t = (G_t − μ)/(σ + ε)
//   The normalization set is NOT FOUND, so it is options.scope:
//     all_turns (default): μ, σ over every valid turn of the group, the GRPO reading
//       (one baseline for the group's returns; a turn depth reached by a single
//       rollout would otherwise always get 0);
//     turn_index: over the group's rows at the same turn index t.
//   γ = 0.9 (third-party "paper optimal"); std unbiased + ε = 1e-6 (verl GRPO).
//
// Degenerate input: rows with no turns get 0; a set of one value or of equal
// values standardizes to 0. Bad input (turn_count outside [0, N], mismatched
// lengths, ε < 0, γ outside [0, 1] (the library's one discount rule), a turn
// index ≥ N or not non-decreasing within a row) → normkit::error naming the
// argument. The discounted sums run the recursion of core/returns.hpp.
//
// Non-finite data: padding (t ≥ turn_count[i]) is never read. A standardized set (a cell, a
// group, the batch) holding a NaN or ±inf standardizes to NaN throughout (token_data.hpp), so:
// - A²TGPO: a non-finite IG at turn t of row i makes ĨG of its cell (group, t) NaN, hence D and
//   A NaN at turns ≤ t of every member with more than t turns, and c NaN at turn t; the outcome
//   turn keeps A_n = outcome. A non-finite outcome_i gives A = that value (NaN, ±inf) at turns
//   0..n of row i (outcome + α·D), c unaffected.
// - MAPO: a non-finite r at turn t of row i makes A NaN at every valid turn of its group (of the
//   batch under immediate_scope = batch), through the group term.
// - GTPO: G of row i is not finite at turns ≤ t (γ = 0 too: 0·NaN = NaN); all_turns: every valid
//   turn of its group NaN; turn_index: the cells of turn indices ≤ t, every member's turns ≤ t.
// - turns_to_tokens copies: a NaN or ±inf per-turn value reaches exactly the tokens of that turn,
//   bit for bit; options.outside is written as given (NaN included).
// Every other turn, token, padding (A = 0, c = 1) and group keeps its bits.
//
// Memory (checked; an overlap is a normkit::error naming both arguments): every output is
// disjoint from every input (the group ids included) and from the other outputs; none is
// written in place.
//
// Summation order: a (group, turn index) cell's sums run over the group's rows in row order,
// as the two-pass moments of core/moments.hpp take them; a group's (or the batch's) sums over all
// its turns take each row in eight interleaved partial sums, so those z-scores (MAPO's group
// term, GTPO all_turns) differ from a sum in turn order by a few roundings of double, far below
// the float outputs' spacing (tested against the double reference, tests/credit/tails.cpp).
// A²TGPO multiplies D_t by 1/√(n − t) from a table (one rounding from the division).
//
// Speed target (bench/credit.cpp: a2tgpo_advantages, mapo_advantages, gtpo_advantages): at
// least 1.0× the yardstick of the same passes (bench/yardstick.hpp). Not held to a fraction of
// memcpy: G_t waits on G_{t+1} (a sequential recursion along each row; eight rows run together
// to overlap the chains), and the centred two-pass statistics sweep a double copy of the table
// several times (cells: two sweeps and the z-scores; groups: two more). Scratch tables are
// per-thread workspaces kept across calls; nothing is allocated per row, cell or turn.
//
// Threads (options.threads, execution_options, all four): the tables, the discounted sums and the
// writes run on contiguous blocks of rows, the statistics of groups and cells on contiguous blocks
// of groups (a set's sums in its members' row order, whatever thread takes it); MAPO's batch scope
// sums its one set on the calling thread. turns_to_tokens checks every row, on the threads, before
// it writes any. Any count gives the same bits.
#pragma once

#include "../core/execution.hpp"
#include "token_data.hpp"

namespace normkit::credit {

struct a2tgpo_options : execution_options {
    double gamma = 1.0;
    double alpha = 0.3;        // weight of the accumulated information gain
    double clip_spread = 0.3;  // κ of the clip scale
    bool normalize_by_std = true;
    int ddof = 0;
    double eps = 1e-6;
};

enum class normalization_scope { group, batch };

struct mapo_options : execution_options {
    double alpha = 0.5;  // weight of the turn-index term
    double gamma = 1.0;
    double eps = 1e-8;
    normalization_scope immediate_scope = normalization_scope::group;
};

enum class gtpo_scope { all_turns, turn_index };

struct gtpo_options : execution_options {
    double gamma = 0.9;
    gtpo_scope scope = gtpo_scope::all_turns;
    int ddof = 1;
    double eps = 1e-6;
};

struct turns_to_tokens_options : execution_options {
    double outside = 0.0;  // the value of a token in no turn (turn_index = −1)
};

namespace detail {
template <class T>
void a2tgpo_advantages(matrix_view<const T> information_gain, vector_view<const index_type> turn_count,
                       const groups& grouping, vector_view<const T> outcome_advantages, matrix_view<T> advantages,
                       matrix_view<T> clip_scale, const a2tgpo_options& options);
template <class T>
void mapo_advantages(matrix_view<const T> rewards, vector_view<const index_type> turn_count, const groups& grouping,
                     matrix_view<T> advantages, const mapo_options& options);
template <class T>
void gtpo_advantages(matrix_view<const T> rewards, vector_view<const index_type> turn_count, const groups& grouping,
                     matrix_view<T> advantages, const gtpo_options& options);
template <class T>
void turns_to_tokens(matrix_view<const T> per_turn, matrix_view<const index_type> turn_index, matrix_view<T> output,
                     const turns_to_tokens_options& options);
}  // namespace detail

// A²TGPO per-turn advantages [B × N] and (optional, {}) clip scales [B × N].
template <class Table, class Output>
void a2tgpo_advantages(const Table& information_gain, vector_view<const index_type> turn_count, const groups& grouping,
                       vector_view<const element_t<Output>> outcome_advantages, Output&& advantages,
                       matrix_t<Output> clip_scale = {}, const a2tgpo_options& options = {}) {
    static_assert(same_storage_v<element_t<Output>, Table>, "a2tgpo_advantages: the tables must share a storage type");
    detail::a2tgpo_advantages<element_t<Output>>(view(information_gain), turn_count, grouping, outcome_advantages,
                                                 view(advantages), clip_scale, options);
}

// MAPO per-turn advantages [B × N] from immediate turn rewards.
template <class Table, class Output>
void mapo_advantages(const Table& rewards, vector_view<const index_type> turn_count, const groups& grouping,
                     Output&& advantages, const mapo_options& options = {}) {
    static_assert(same_storage_v<element_t<Output>, Table>, "mapo_advantages: the tables must share a storage type");
    detail::mapo_advantages<element_t<Output>>(view(rewards), turn_count, grouping, view(advantages), options);
}

// GTPO per-turn advantages [B × N] from turn rewards.
template <class Table, class Output>
void gtpo_advantages(const Table& rewards, vector_view<const index_type> turn_count, const groups& grouping,
                     Output&& advantages, const gtpo_options& options = {}) {
    static_assert(same_storage_v<element_t<Output>, Table>, "gtpo_advantages: the tables must share a storage type");
    detail::gtpo_advantages<element_t<Output>>(view(rewards), turn_count, grouping, view(advantages), options);
}

// Token values [B × T] from per-turn values [B × N]: output(i, t) =
// per_turn(i, turn_index(i, t)), or options.outside where turn_index = −1.
template <class Table, class TurnIndex, class Output>
void turns_to_tokens(const Table& per_turn, const TurnIndex& turn_index, Output&& output,
                     const turns_to_tokens_options& options = {}) {
    static_assert(same_storage_v<element_t<Output>, Table>,
                  "turns_to_tokens: per_turn and output must share a storage type");
    detail::turns_to_tokens<element_t<Output>>(view(per_turn), view(turn_index), view(output), options);
}

}  // namespace normkit::credit

#include "detail/turns.hpp"
