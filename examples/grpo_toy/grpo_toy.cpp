// A GRPO training run, start to finish, in one file: a tiny policy learns to
// answer "target S" with digits that sum to S, trained by the GRPO family.
//
// The task. A prompt is one token, the target S ∈ [0, 27]. The response is up
// to 4 tokens from {0..9, EOS}, sampled autoregressively; it ends at EOS (which
// counts as a token, as in an LM) or after 4 tokens. Two verifiable rewards:
//   correct   1 − min(|Σ digits − S|, 5)/5   (1 exactly when the digits sum to S)
//   format    1 if the response is closed by EOS (so at most 3 digits)
// The scalar estimators train on r = correct + 0.5·format; GDPO normalizes the
// two columns separately (weights 1 and 0.5). "reward" below is that sum, so the
// estimators are compared on one scale (its maximum is 1.5).
//
// The policy, per response position t of sample i (llm.c-style: every layer's
// forward and backward are written out, and the heavy ones are normkit calls):
//   h = E_target[S] + E_position[t] + Σ_{u<t} E_token[y_u]   a bag-of-prefix context
//   x = RMSNorm(h)·w                                         normkit rms_norm_forward
//   z = W2·relu(W1·x + b1) + b2                              logits over 11 tokens
// A sum of prefix embeddings is the cheapest context that can carry "how much of
// S is left": it stands in for attention, which this example is not about.
//
// One training step (verl's and TRL's order):
//   1. rollout: G samples for each of P prompts, sampling from softmax(z), the
//      logsumexp from normkit logits_statistics;
//   2. old log-probs: a teacher-forced forward of the sampled responses (verl
//      recomputes them with the actor, so sampler and learner agree exactly);
//   3. rewards → advantages: grpo, dr_grpo, rloo (one reward), gdpo (two),
//      gepo (grpo shaped by group entropy, with its state kept across steps);
//   4. PPO: `epochs` passes over the batch in `minibatches` parts, one Adam step
//      each. Only the very first part is on-policy; later ones see ratio ≠ 1, so
//      the clip does work. Per part: forward → logits_statistics (log π, entropy)
//      → token credit (broadcast, or TRL's top-entropy mask) → policy_loss (PPO
//      clip + aggregation) → logits_backward → MLP backward → rms_norm_backward
//      → embedding scatter.
//
// Run `grpo_toy --help` for the options; `--compare` trains every estimator over
// the same seeds and prints a table. `--check-gradient` compares the whole
// backward with finite differences first; `--require-gain X` makes the exit
// code non-zero unless final − first mean reward ≥ X (the ctest uses both).

// GCC 12 flags the _mm512_undefined operands inside its own AVX-512 intrinsics
// (GCC bug 105593, fixed in 13) wherever Eigen's matrix products are inlined at
// -march=native. A false positive: silenced for this file, before any include,
// so that the intrinsics' own lines are covered.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <normkit/advantage/estimators.hpp>
#include <normkit/advantage/gepo.hpp>
#include <normkit/advantage/multi_reward.hpp>
#include <normkit/credit/broadcast.hpp>
#include <normkit/credit/entropy.hpp>
#include <normkit/credit/logits_statistics.hpp>
#include <normkit/loss/policy_loss.hpp>
#include <normkit/norm/rms_norm.hpp>

#include <Eigen/Core>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using normkit::index_type;
using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<Matrix>;
using VectorMap = Eigen::Map<Eigen::VectorXf>;
using Mask = Eigen::Matrix<std::uint8_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

constexpr index_type targets = 28;  // S ∈ [0, 27]: reachable with 3 digits and EOS
constexpr index_type digits = 10;
constexpr index_type end_of_response = digits;  // the EOS token id
constexpr index_type vocabulary = digits + 1;
constexpr index_type max_length = 4;  // response positions
constexpr index_type width = 32;      // d_model
constexpr index_type hidden = 64;

// ---------------------------------------------------------------- options

enum class estimator { grpo, dr_grpo, rloo, gdpo, gepo };
const char* const estimator_names[] = {"grpo", "dr_grpo", "rloo", "gdpo", "gepo"};

struct aggregation_name {
    const char* name;
    normkit::loss::aggregation_mode mode;
};
const aggregation_name aggregation_names[] = {
    {"token_mean", normkit::loss::aggregation_mode::token_mean},
    {"token_sum", normkit::loss::aggregation_mode::token_sum},
    {"seq_mean_token_sum", normkit::loss::aggregation_mode::seq_mean_token_sum},
    {"seq_mean_token_mean", normkit::loss::aggregation_mode::seq_mean_token_mean},
    {"seq_mean_token_sum_norm", normkit::loss::aggregation_mode::seq_mean_token_sum_norm},
    {"delta_l", normkit::loss::aggregation_mode::delta_l},
};

struct config {
    estimator method = estimator::grpo;
    bool entropy_credit = false;  // TRL top_entropy_quantile instead of broadcast
    double rho = 0.5;             // share of highest-entropy tokens that keep their advantage
    normkit::loss::aggregation_mode aggregation = normkit::loss::aggregation_mode::token_mean;
    int steps = 300;
    int prompts = 16;  // per step
    int group = 16;    // samples per prompt
    int epochs = 2;
    int minibatches = 2;
    double learning_rate = 3e-3;
    double format_weight = 0.5;
    std::uint64_t seed = 1;
    bool verbose = true;
};

// A B × T matrix as the flat per-row vector the logits kernels read and write
// (row r = sample·T + position): as_vector accepts only one-row/one-column shapes.
normkit::vector_view<float> all_of(Matrix& m) { return {m.data(), m.size()}; }

// ---------------------------------------------------------------- random numbers

// splitmix64: the same stream on every compiler and standard library, so a seed
// means the same run everywhere (std:: distributions are not portable).
struct random_stream {
    std::uint64_t state;
    std::uint64_t next() {
        std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
};

// ---------------------------------------------------------------- parameters

// Every tensor is a view into one flat buffer, so the optimizer, the gradient
// and Adam's moments are plain loops over the same layout.
struct weights {
    MatrixMap target, position, token;  // embeddings
    VectorMap norm;                     // RMSNorm w
    MatrixMap w1;                       // hidden × width
    VectorMap b1;
    MatrixMap w2;  // vocabulary × hidden
    VectorMap b2;

    static constexpr index_type count = (targets + max_length + vocabulary) * width + width + hidden * width + hidden +
                                        vocabulary * hidden + vocabulary;

    explicit weights(float* p)
        : target(p, targets, width),
          position(target.data() + target.size(), max_length, width),
          token(position.data() + position.size(), vocabulary, width),
          norm(token.data() + token.size(), width),
          w1(norm.data() + norm.size(), hidden, width),
          b1(w1.data() + w1.size(), hidden),
          w2(b1.data() + b1.size(), vocabulary, hidden),
          b2(w2.data() + w2.size(), vocabulary) {}
};

void initialize(weights& w, random_stream& random) {
    const auto fill = [&](float* data, index_type n, double scale) {
        for (index_type i = 0; i < n; ++i) data[i] = static_cast<float>(scale * (2 * random.uniform() - 1));
    };
    fill(w.target.data(), w.target.size(), 1.0);
    fill(w.position.data(), w.position.size(), 1.0);
    fill(w.token.data(), w.token.size(), 1.0);
    w.norm.setOnes();
    fill(w.w1.data(), w.w1.size(), 1.0 / std::sqrt(double(width)));
    w.b1.setZero();
    // Small output weights: the first policy is close to uniform, so the first
    // step's reward is the untrained baseline.
    fill(w.w2.data(), w.w2.size(), 0.1 / std::sqrt(double(hidden)));
    w.b2.setZero();
}

// Adam (Kingma & Ba 2015) over the flat buffer, bias-corrected.
struct adam {
    std::vector<float> first, second;
    int step = 0;
    void update(std::vector<float>& parameters, const std::vector<float>& gradient, double learning_rate) {
        const double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
        first.resize(parameters.size(), 0.0f);
        second.resize(parameters.size(), 0.0f);
        ++step;
        const double c1 = 1 - std::pow(beta1, step), c2 = 1 - std::pow(beta2, step);
        for (std::size_t i = 0; i < parameters.size(); ++i) {
            const double g = gradient[i];
            first[i] = static_cast<float>(beta1 * first[i] + (1 - beta1) * g);
            second[i] = static_cast<float>(beta2 * second[i] + (1 - beta2) * g * g);
            parameters[i] -= static_cast<float>(learning_rate * (first[i] / c1) / (std::sqrt(second[i] / c2) + eps));
        }
    }
};

// ---------------------------------------------------------------- the policy

// A batch of responses: n samples of max_length tokens, padded with EOS after
// the first EOS; mask marks the tokens that were generated (EOS included).
struct responses {
    std::vector<index_type> target;  // per sample
    Matrix tokens_mask;              // n × max_length, 0/1 as float (the loss's mask type)
    std::vector<index_type> tokens;  // n·max_length, row-major
};

// The rows a forward runs on: position t of sample i.
struct row {
    index_type sample, position;
};

struct activations {
    Matrix h, x, u, a, z;     // embedding sum, normalized, pre-activation, hidden, logits
    std::vector<float> rstd;  // saved by the norm's forward for its backward
};

// h = E_target[S] + E_position[t] + Σ_{u<t} E_token[y_u]
void embed_forward(const weights& w, const responses& batch, const std::vector<row>& rows, Matrix& h) {
    h.resize(static_cast<index_type>(rows.size()), width);
    for (index_type r = 0; r < h.rows(); ++r) {
        const auto [i, t] = rows[static_cast<std::size_t>(r)];
        h.row(r) = w.target.row(batch.target[static_cast<std::size_t>(i)]) + w.position.row(t);
        for (index_type u = 0; u < t; ++u)
            h.row(r) += w.token.row(batch.tokens[static_cast<std::size_t>(i * max_length + u)]);
    }
}

// dE_target[S] += dh, dE_position[t] += dh, dE_token[y_u] += dh for u < t
void embed_backward(weights& grad, const responses& batch, const std::vector<row>& rows, const Matrix& dh) {
    for (index_type r = 0; r < dh.rows(); ++r) {
        const auto [i, t] = rows[static_cast<std::size_t>(r)];
        grad.target.row(batch.target[static_cast<std::size_t>(i)]) += dh.row(r);
        grad.position.row(t) += dh.row(r);
        for (index_type u = 0; u < t; ++u)
            grad.token.row(batch.tokens[static_cast<std::size_t>(i * max_length + u)]) += dh.row(r);
    }
}

void forward(const weights& w, const responses& batch, const std::vector<row>& rows, activations& act) {
    embed_forward(w, batch, rows, act.h);
    // x = h/√(mean(h²) + ε) ⊙ w, rstd saved for the backward
    act.x.resize(act.h.rows(), width);
    act.rstd.resize(static_cast<std::size_t>(act.h.rows()));
    normkit::norm::rms_norm_forward(act.h, w.norm, act.x, act.rstd);
    // u = x·W1ᵀ + b1,  a = max(u, 0)
    act.u = act.x * w.w1.transpose();
    act.u.rowwise() += w.b1.transpose();
    act.a = act.u.cwiseMax(0.0f);
    // z = a·W2ᵀ + b2
    act.z = act.a * w.w2.transpose();
    act.z.rowwise() += w.b2.transpose();
}

// From dL/dz back to every parameter; grad is overwritten.
void backward(const weights& w, weights& grad, const responses& batch, const std::vector<row>& rows,
              const activations& act, const Matrix& dz) {
    // dW2 = dzᵀ·a,  db2 = Σ_rows dz,  da = dz·W2
    grad.w2 = dz.transpose() * act.a;
    grad.b2 = dz.colwise().sum().transpose();
    Matrix du = dz * w.w2;
    // du = da ⊙ [u > 0]
    du = du.cwiseProduct((act.u.array() > 0.0f).cast<float>().matrix());
    // dW1 = duᵀ·x,  db1 = Σ_rows du,  dx = du·W1
    grad.w1 = du.transpose() * act.x;
    grad.b1 = du.colwise().sum().transpose();
    const Matrix dx = du * w.w1;
    // dh = rstd·(g − x̂·mean(g⊙x̂)), g = w⊙dx;  dw = Σ_rows dx⊙x̂  (normkit writes dw in place)
    Matrix dh(dx.rows(), width);
    normkit::norm::rms_norm_backward(dx, act.h, w.norm, dh, grad.norm, act.rstd);
    grad.target.setZero();
    grad.position.setZero();
    grad.token.setZero();
    embed_backward(grad, batch, rows, dh);
}

// ---------------------------------------------------------------- rollout and rewards

// Samples `group` responses for each prompt, one position at a time: each
// position's forward sees the tokens sampled before it.
responses rollout(const weights& w, const std::vector<index_type>& prompts, int group, random_stream& random) {
    responses batch;
    const index_type n = static_cast<index_type>(prompts.size()) * group;
    for (index_type prompt : prompts) batch.target.insert(batch.target.end(), static_cast<std::size_t>(group), prompt);
    batch.tokens.assign(static_cast<std::size_t>(n * max_length), end_of_response);
    batch.tokens_mask = Matrix::Zero(n, max_length);
    std::vector<char> open(static_cast<std::size_t>(n), 1);
    activations act;
    std::vector<float> logsumexp(static_cast<std::size_t>(n));
    for (index_type t = 0; t < max_length; ++t) {
        std::vector<row> rows;
        for (index_type i = 0; i < n; ++i) rows.push_back({i, t});
        forward(w, batch, rows, act);
        // π_v = exp(z_v − logsumexp): the sampler's distribution, from the same kernel the learner uses.
        normkit::credit::logits_statistics(act.z, {}, normkit::credit::logits_outputs<float>().logsumexp(logsumexp));
        for (index_type i = 0; i < n; ++i) {
            if (!open[static_cast<std::size_t>(i)]) continue;
            double u = random.uniform(), cumulative = 0;
            index_type token = vocabulary - 1;
            for (index_type v = 0; v < vocabulary; ++v) {
                cumulative += std::exp(static_cast<double>(act.z(i, v)) - logsumexp[static_cast<std::size_t>(i)]);
                if (u < cumulative) {
                    token = v;
                    break;
                }
            }
            batch.tokens[static_cast<std::size_t>(i * max_length + t)] = token;
            batch.tokens_mask(i, t) = 1;
            if (token == end_of_response) open[static_cast<std::size_t>(i)] = 0;
        }
    }
    return batch;
}

struct reward_columns {
    Matrix columns;  // n × 2: correct, format (the layout gdpo takes)
    std::vector<float> total;
    double exact = 0;  // share of responses whose digits sum to S
};

reward_columns score(const responses& batch, double format_weight) {
    const index_type n = static_cast<index_type>(batch.target.size());
    reward_columns r;
    r.columns.resize(n, 2);
    r.total.resize(static_cast<std::size_t>(n));
    for (index_type i = 0; i < n; ++i) {
        index_type sum = 0;
        bool closed = false;
        for (index_type t = 0; t < max_length && !closed; ++t) {
            const index_type token = batch.tokens[static_cast<std::size_t>(i * max_length + t)];
            if (token == end_of_response)
                closed = true;
            else
                sum += token;
        }
        const index_type miss = std::abs(sum - batch.target[static_cast<std::size_t>(i)]);
        r.columns(i, 0) = 1.0f - static_cast<float>(std::min<index_type>(miss, 5)) / 5.0f;
        r.columns(i, 1) = closed ? 1.0f : 0.0f;
        r.total[static_cast<std::size_t>(i)] = r.columns(i, 0) + static_cast<float>(format_weight) * r.columns(i, 1);
        r.exact += miss == 0 ? 1.0 / static_cast<double>(n) : 0.0;
    }
    return r;
}

// ---------------------------------------------------------------- training

// clip_fraction and approx_kl: means over the step's updates (the first is
// on-policy, so its clip fraction is 0 and its approx_kl is 0).
struct step_record {
    double reward, exact, clip_fraction, approx_kl;
};

struct run_result {
    std::vector<step_record> steps;
    double seconds = 0;
};

// The teacher-forced rows of samples [begin, end): row (i − begin)·max_length + t.
std::vector<row> response_rows(index_type begin, index_type end) {
    std::vector<row> rows;
    for (index_type i = begin; i < end; ++i)
        for (index_type t = 0; t < max_length; ++t) rows.push_back({i, t});
    return rows;
}

// The PPO loss of samples [begin, end) against the rollout's log-probs and,
// when grad is given, its gradient with respect to every weight (overwritten).
normkit::loss::policy_loss_result minibatch_loss(const config& c, const weights& w, weights* grad,
                                                 const responses& batch, index_type begin, index_type end,
                                                 const Matrix& old_log_probs, const std::vector<float>& advantages,
                                                 const normkit::loss::policy_loss_options& loss_options) {
    const index_type part = end - begin;
    const std::vector<row> rows = response_rows(begin, end);
    activations act;
    forward(w, batch, rows, act);
    // log π(y_t), entropy and logsumexp per row from one read of the logits
    const std::vector<index_type> tokens(batch.tokens.begin() + begin * max_length,
                                         batch.tokens.begin() + end * max_length);
    std::vector<float> logsumexp(rows.size()), entropy(rows.size());
    Matrix log_probs(part, max_length);
    normkit::credit::logits_statistics(act.z, tokens,
                                       normkit::credit::logits_outputs<float>()
                                           .token_log_probability(all_of(log_probs))
                                           .entropy(entropy)
                                           .logsumexp(logsumexp));

    // Token credit: every token gets its response's advantage, or (TRL
    // top_entropy_quantile) only the top ρ share of tokens by entropy do. The
    // dropped tokens keep their place in the mask, so the aggregation's counts
    // are TRL's (it multiplies the per-token loss by the entropy mask).
    const normkit::matrix_view<const float> mask = normkit::view(batch.tokens_mask.middleRows(begin, part));
    const std::vector<float> part_advantages(advantages.begin() + begin, advantages.begin() + end);
    Matrix keep(part, max_length), token_advantages(part, max_length);
    if (c.entropy_credit) {
        const normkit::matrix_view<const float> entropies = normkit::view(entropy.data(), part, max_length);
        normkit::credit::top_entropy_options top;
        top.rho = c.rho;
        normkit::credit::top_entropy_mask(entropies, mask, keep, top);
    }
    normkit::credit::broadcast_advantages(part_advantages, c.entropy_credit ? normkit::view(keep) : mask,
                                          token_advantages);

    // The PPO-clip surrogate, aggregated; dL/dlog π per token.
    Matrix log_probs_gradient(part, max_length);
    normkit::loss::policy_inputs<float> inputs;
    inputs.log_probs = normkit::view(log_probs);
    inputs.old_log_probs = normkit::view(old_log_probs.middleRows(begin, part));
    inputs.advantages = normkit::view(token_advantages);
    inputs.mask = mask;
    const auto loss = normkit::loss::policy_loss(inputs, log_probs_gradient, {}, loss_options);
    if (!grad) return loss;

    // dL/dz = g_t·(e_y − π) per row, from dL/dlog π
    Matrix dz(static_cast<index_type>(rows.size()), vocabulary);
    normkit::credit::logits_backward(all_of(log_probs_gradient), act.z, tokens, dz, logsumexp);
    backward(w, *grad, batch, rows, act, dz);
    return loss;
}

std::vector<float> advantages_for(const config& c, const reward_columns& rewards, const responses& batch,
                                  const Matrix& old_log_probs, normkit::advantage::gepo_state& gepo_state) {
    namespace adv = normkit::advantage;
    const auto groups = normkit::contiguous_groups(c.group);
    std::vector<float> advantages(rewards.total.size());
    switch (c.method) {
        case estimator::grpo:
            adv::grpo(rewards.total, groups, advantages);
            break;
        case estimator::dr_grpo:
            adv::dr_grpo(rewards.total, groups, advantages);
            break;
        case estimator::rloo:
            adv::rloo(rewards.total, groups, advantages);
            break;
        case estimator::gdpo: {
            adv::gdpo_options options;
            options.weights = {1.0, c.format_weight};
            adv::gdpo(rewards.columns, groups, advantages, options);
            break;
        }
        case estimator::gepo: {
            // GEPO shapes GRPO's advantages by each group's entropy under the sampling policy.
            adv::grpo(rewards.total, groups, advantages);
            adv::gepo(advantages, groups, old_log_probs, batch.tokens_mask, gepo_state, advantages);
            break;
        }
    }
    return advantages;
}

// The backward chain (policy_loss → logits_backward → MLP → rms_norm_backward →
// embeddings) against central differences of the loss, on one rollout, at a
// few coordinates of every tensor. Worth keeping when you change the model: a
// sign error still "trains" for a while. Returns the largest error relative
// to the gradient's largest entry. Broadcast credit only: the top-entropy mask
// is piecewise constant, and a difference step that moves a token across the
// quantile measures the jump, not a derivative.
double gradient_error(config c) {
    c.entropy_credit = false;
    random_stream random{c.seed};
    std::vector<float> parameters(weights::count), gradient(weights::count);
    weights w(parameters.data()), grad(gradient.data());
    initialize(w, random);
    std::vector<index_type> prompts(static_cast<std::size_t>(c.prompts));
    for (auto& prompt : prompts) prompt = static_cast<index_type>(random.next() % targets);
    const responses batch = rollout(w, prompts, c.group, random);
    const index_type n = static_cast<index_type>(batch.target.size());
    activations act;
    forward(w, batch, response_rows(0, n), act);
    Matrix old_log_probs(n, max_length);
    normkit::credit::logits_statistics(
        act.z, batch.tokens, normkit::credit::logits_outputs<float>().token_log_probability(all_of(old_log_probs)));
    // Old log-probs a little off the current ones, so that ratios differ from 1.
    for (index_type i = 0; i < old_log_probs.size(); ++i)
        old_log_probs.data()[i] += static_cast<float>(0.1 * (random.uniform() - 0.5));
    normkit::advantage::gepo_state unused;
    const std::vector<float> advantages =
        advantages_for(c, score(batch, c.format_weight), batch, old_log_probs, unused);
    normkit::loss::policy_loss_options options;
    options.aggregation.mode = c.aggregation;
    minibatch_loss(c, w, &grad, batch, 0, n, old_log_probs, advantages, options);

    const double h = 1e-3;
    double largest = 1e-12;
    for (float g : gradient) largest = std::max(largest, std::abs(static_cast<double>(g)));
    double worst = 0;
    for (int probe = 0; probe < 64; ++probe) {
        const std::size_t k = static_cast<std::size_t>(random.next() % weights::count);
        const float saved = parameters[k];
        parameters[k] = saved + static_cast<float>(h);
        const double up = minibatch_loss(c, w, nullptr, batch, 0, n, old_log_probs, advantages, options).loss;
        parameters[k] = saved - static_cast<float>(h);
        const double down = minibatch_loss(c, w, nullptr, batch, 0, n, old_log_probs, advantages, options).loss;
        parameters[k] = saved;
        worst = std::max(worst, std::abs((up - down) / (2 * h) - gradient[k]) / largest);
    }
    return worst;
}

run_result train(const config& c) {
    const auto start = std::chrono::steady_clock::now();
    random_stream random{c.seed};
    std::vector<float> parameters(weights::count), gradient(weights::count);
    weights w(parameters.data()), grad(gradient.data());
    initialize(w, random);
    adam optimizer;
    normkit::advantage::gepo_state gepo_state;

    normkit::loss::policy_loss_options loss_options;  // PPO clip, ε = 0.2 both sides, log-ratio clamp ±20
    loss_options.aggregation.mode = c.aggregation;

    run_result result;
    const index_type n = static_cast<index_type>(c.prompts) * c.group;
    for (int step = 0; step < c.steps; ++step) {
        // 1. rollout
        std::vector<index_type> prompts(static_cast<std::size_t>(c.prompts));
        for (auto& prompt : prompts) prompt = static_cast<index_type>(random.next() % targets);
        const responses batch = rollout(w, prompts, c.group, random);

        // 2. old log-probs, teacher-forced: log π_old(y_t) per token, an n × max_length matrix
        activations act;
        forward(w, batch, response_rows(0, n), act);
        Matrix old_log_probs(n, max_length);
        normkit::credit::logits_statistics(
            act.z, batch.tokens, normkit::credit::logits_outputs<float>().token_log_probability(all_of(old_log_probs)));

        // 3. rewards and advantages
        const reward_columns rewards = score(batch, c.format_weight);
        const std::vector<float> advantages = advantages_for(c, rewards, batch, old_log_probs, gepo_state);

        // 4. PPO epochs over minibatches of whole groups
        step_record record{0, rewards.exact, 0, 0};
        for (float r : rewards.total) record.reward += r / static_cast<double>(n);
        const index_type part = n / c.minibatches;
        for (int epoch = 0; epoch < c.epochs; ++epoch) {
            for (int m = 0; m < c.minibatches; ++m) {
                const index_type begin = m * part, end = begin + part;
                const auto loss =
                    minibatch_loss(c, w, &grad, batch, begin, end, old_log_probs, advantages, loss_options);
                const double updates = c.epochs * c.minibatches;
                record.clip_fraction += loss.metrics.clip_fraction / updates;
                record.approx_kl += loss.metrics.approx_kl / updates;
                optimizer.update(parameters, gradient, c.learning_rate);
            }
        }
        result.steps.push_back(record);
        if (c.verbose)
            std::printf("step %4d  reward %.4f  exact %.3f  clip_fraction %.3f  approx_kl %+.5f\n", step + 1,
                        record.reward, record.exact, record.clip_fraction, record.approx_kl);
    }
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
}

// The last tenth of the steps (at least one): one step's 128 samples are too few
// to call a run's end reliably.
double final_mean(const std::vector<step_record>& steps, double step_record::*field) {
    const std::size_t count = std::max<std::size_t>(1, steps.size() / 10);
    double sum = 0;
    for (std::size_t s = steps.size() - count; s < steps.size(); ++s) sum += steps[s].*field;
    return sum / static_cast<double>(count);
}

// ---------------------------------------------------------------- command line

void usage() {
    std::printf(
        "grpo_toy: GRPO on a digit-sum task, every numeric kernel from normkit\n"
        "  --estimator grpo|dr_grpo|rloo|gdpo|gepo   advantage estimator (grpo)\n"
        "  --credit broadcast|entropy                token credit (broadcast); entropy = TRL top-entropy mask\n"
        "  --rho R                                   share of tokens the entropy mask keeps (0.5)\n"
        "  --aggregation token_mean|token_sum|seq_mean_token_sum|seq_mean_token_mean|\n"
        "                seq_mean_token_sum_norm|delta_l   loss aggregation (token_mean)\n"
        "  --steps N  --seed S  --epochs E  --minibatches M  --prompts P  --group G  --lr X\n"
        "  --compare [--seeds K]   every estimator over seeds S..S+K-1 (5), then a table\n"
        "  --require-gain X        exit 1 unless final - first mean reward >= X (for every estimator with --compare)\n"
        "  --check-gradient        first compare the backward with finite differences (exit 1 if it disagrees)\n"
        "  --quiet                 no per-step lines\n");
}

}  // namespace

int main(int argc, char** argv) {
    // One core by design: these matrices are far too small for threads to pay,
    // and with OpenMP on (normkit's default) Eigen would split every product.
    Eigen::setNbThreads(1);
    config c;
    bool compare = false;
    int seeds = 5;
    double required_gain = -1e300;
    bool check_gradient = false;
    for (int k = 1; k < argc; ++k) {
        const std::string option = argv[k];
        const auto value = [&]() -> std::string {
            if (k + 1 >= argc) {
                std::fprintf(stderr, "%s needs a value\n", option.c_str());
                std::exit(2);
            }
            return argv[++k];
        };
        const auto pick = [&](const std::string& name, auto& names, auto&& assign) {
            for (std::size_t i = 0; i < std::size(names); ++i)
                if (name == names[i]) return assign(i);
            std::fprintf(stderr, "unknown %s: %s\n", option.c_str(), name.c_str());
            std::exit(2);
        };
        if (option == "--estimator") {
            pick(value(), estimator_names, [&](std::size_t i) { c.method = static_cast<estimator>(i); });
        } else if (option == "--credit") {
            const std::string name = value();
            if (name != "broadcast" && name != "entropy") return usage(), 2;
            c.entropy_credit = name == "entropy";
        } else if (option == "--aggregation") {
            const std::string name = value();
            std::vector<std::string> names;
            for (const auto& a : aggregation_names) names.push_back(a.name);
            pick(name, names, [&](std::size_t i) { c.aggregation = aggregation_names[i].mode; });
        } else if (option == "--rho")
            c.rho = std::atof(value().c_str());
        else if (option == "--steps")
            c.steps = std::atoi(value().c_str());
        else if (option == "--seed")
            c.seed = std::strtoull(value().c_str(), nullptr, 10);
        else if (option == "--epochs")
            c.epochs = std::atoi(value().c_str());
        else if (option == "--minibatches")
            c.minibatches = std::atoi(value().c_str());
        else if (option == "--prompts")
            c.prompts = std::atoi(value().c_str());
        else if (option == "--group")
            c.group = std::atoi(value().c_str());
        else if (option == "--lr")
            c.learning_rate = std::atof(value().c_str());
        else if (option == "--seeds")
            seeds = std::atoi(value().c_str());
        else if (option == "--require-gain")
            required_gain = std::atof(value().c_str());
        else if (option == "--compare")
            compare = true;
        else if (option == "--check-gradient")
            check_gradient = true;
        else if (option == "--quiet")
            c.verbose = false;
        else
            return usage(), option == "--help" ? 0 : 2;
    }
    if (c.steps < 1 || c.epochs < 1 || c.minibatches < 1 || c.prompts < 1 || c.group < 2 ||
        c.prompts % c.minibatches != 0) {
        std::fprintf(
            stderr, "need steps, epochs, minibatches, prompts ≥ 1, group ≥ 2, and prompts a multiple of minibatches\n");
        return 2;
    }

    try {
        if (check_gradient) {
            // Float parameters and h = 1e-3: about 1e-4 is rounding; a wrong term is O(1).
            const double error = gradient_error(c);
            std::printf("gradient check: largest error %.2e of the largest gradient entry\n", error);
            if (!(error < 1e-2)) return 1;
        }
        if (!compare) {
            const run_result run = train(c);
            const double first = run.steps.front().reward, last = final_mean(run.steps, &step_record::reward);
            std::printf("first-step reward %.4f, final reward %.4f (mean of the last %zu steps), gain %+.4f, %.2f s\n",
                        first, last, std::max<std::size_t>(1, run.steps.size() / 10), last - first, run.seconds);
            return last - first >= required_gain ? 0 : 1;
        }
        // Same seeds for every estimator: each sees the same initial weights and first prompts.
        c.verbose = false;
        bool all_gained = true;
        std::printf(
            "%d steps of %d prompts x %d samples, seeds %llu..%llu; means over the seeds, final = the last tenth of "
            "the steps\n",
            c.steps, c.prompts, c.group, static_cast<unsigned long long>(c.seed),
            static_cast<unsigned long long>(c.seed + seeds - 1));
        std::printf("%-9s %8s %8s %8s %11s %10s %9s %8s\n", "estimator", "first", "final", "gain", "final exact",
                    "worst gain", "clip frac", "seconds");
        for (std::size_t e = 0; e < std::size(estimator_names); ++e) {
            c.method = static_cast<estimator>(e);
            double first = 0, last = 0, exact = 0, clip = 0, seconds = 0, worst = 1e300;
            for (int s = 0; s < seeds; ++s) {
                config run_config = c;
                run_config.seed = c.seed + static_cast<std::uint64_t>(s);
                const run_result run = train(run_config);
                const double f = run.steps.front().reward, l = final_mean(run.steps, &step_record::reward);
                first += f / seeds;
                last += l / seeds;
                exact += final_mean(run.steps, &step_record::exact) / seeds;
                for (const auto& record : run.steps)
                    clip += record.clip_fraction / (seeds * static_cast<double>(run.steps.size()));
                seconds += run.seconds;
                worst = std::min(worst, l - f);
            }
            all_gained = all_gained && worst >= required_gain;
            std::printf("%-9s %8.4f %8.4f %+8.4f %11.3f %+10.4f %9.4f %8.2f\n", estimator_names[e], first, last,
                        last - first, exact, worst, clip, seconds);
        }
        return all_gained ? 0 : 1;
    } catch (const normkit::error& e) {
        std::fprintf(stderr, "normkit: %s\n", e.what());
        return 3;
    }
}
