// A pre-norm transformer block, forward and backward by hand (llm.c style),
// with the normalization switchable between LayerNorm, RMSNorm, DyT, Derf and
// SeeDNorm and QK-norm inside the attention, every norm through normkit's
// kernels. main() checks the whole backward against central finite
// differences, for every norm and both QK-norm forms.
//
//   x ──┬─ norm₁ ─ q,k,v = n·W{q,k,v} ─ QK-norm(q,k) ─ causal softmax(q kᵀ·s) v ─ ·Wo ─(+)─ x₁
//       └──────────────────────────────────────────────────────────────────────────┘
//   x₁ ─┬─ norm₂ ─ ·W₁ ─ GELU ─ ·W₂ ─(+)─ y
//       └─────────────────────────────┘
//
// Storage is double so the finite differences are tight; change `Scalar` to
// float for speed once the block is what you want (the normkit calls are
// unchanged: gradients and statistics follow the storage type).
#include <normkit/norm/derf.hpp>
#include <normkit/norm/dyt.hpp>
#include <normkit/norm/layer_norm.hpp>
#include <normkit/norm/presets.hpp>
#include <normkit/norm/qk_norm.hpp>
#include <normkit/norm/rms_norm.hpp>
#include <normkit/norm/seed_norm.hpp>

#include <Eigen/Core>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using normkit::index_type;
namespace norm = normkit::norm;
using Scalar = double;
// Row-major throughout: normkit normalizes along contiguous rows (one token each).
using Matrix = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

enum class NormKind { layer_norm, rms_norm, dyt, derf, seed_norm };
enum class QkKind { rms, l2 };  // per-head RMSNorm (Qwen3) or the original L2 form with a gain

const char* name(NormKind kind) {
    constexpr const char* names[] = {"layer_norm", "rms_norm", "dyt", "derf", "seed_norm"};
    return names[static_cast<int>(kind)];
}
const char* name(QkKind kind) { return kind == QkKind::rms ? "rms" : "l2"; }

// A learnable tensor and its gradient (a vector is 1 × n, a scalar 1 × 1).
// An unused parameter stays 0 × 0.
struct Parameter {
    std::string name;
    Matrix value, gradient;
};

Matrix random_matrix(index_type rows, index_type cols, std::mt19937& rng, double mean = 0.0, double spread = 1.0) {
    std::normal_distribution<double> normal(mean, spread);
    Matrix m(rows, cols);
    for (index_type i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
    return m;
}

Parameter make_parameter(const std::string& name, index_type rows, index_type cols, std::mt19937& rng, double mean,
                         double spread) {
    Parameter p{name, random_matrix(rows, cols, rng, mean, spread), Matrix::Zero(rows, cols)};
    return p;
}

// ---------------------------------------------------------------- the switchable norm
//
// Each kind keeps only the parameters it uses, all initialised away from their
// usual init (β ≠ 0, α ≠ its default) so that every gradient path is exercised.
struct NormLayer {
    NormKind kind;
    Parameter weight, bias;                       // γ, β of LayerNorm, DyT, Derf; RMSNorm uses weight only
    Parameter alpha, shift;                       // DyT α, Derf α and s (scalars)
    Parameter seed_alpha, seed_beta, seed_gamma;  // SeeDNorm α, β, γ (per channel)
    Matrix mean, rstd;                            // saved by the forward (1 × tokens)
    norm::seed_norm_options seed_options;

    // `prefix` names the layer in the check's report ("norm1.weight").
    NormLayer(NormKind kind_, const std::string& prefix, index_type channels, index_type heads, std::mt19937& rng)
        : kind(kind_) {
        const index_type c = channels;
        switch (kind) {
            case NormKind::layer_norm:
                weight = make_parameter(prefix + ".weight", 1, c, rng, 1.0, 0.2);
                bias = make_parameter(prefix + ".bias", 1, c, rng, 0.0, 0.2);
                break;
            case NormKind::rms_norm:
                weight = make_parameter(prefix + ".weight", 1, c, rng, 1.0, 0.2);
                break;
            case NormKind::dyt:
                alpha = make_parameter(prefix + ".alpha", 1, 1, rng, norm::dyt_default_alpha, 0.1);
                weight = make_parameter(prefix + ".weight", 1, c, rng, 1.0, 0.2);
                bias = make_parameter(prefix + ".bias", 1, c, rng, 0.0, 0.2);
                break;
            case NormKind::derf:
                alpha = make_parameter(prefix + ".alpha", 1, 1, rng, norm::derf_default_alpha, 0.1);
                shift = make_parameter(prefix + ".shift", 1, 1, rng, 0.0, 0.2);
                weight = make_parameter(prefix + ".weight", 1, c, rng, 1.0, 0.2);
                bias = make_parameter(prefix + ".bias", 1, c, rng, 0.0, 0.2);
                break;
            case NormKind::seed_norm:
                seed_alpha = make_parameter(prefix + ".alpha", 1, c, rng, 1.0, 0.2);
                seed_beta = make_parameter(prefix + ".beta", 1, c, rng, 0.0, 0.3);
                seed_gamma = make_parameter(prefix + ".gamma", 1, c, rng, 1.0, 0.2);
                seed_options.heads = heads;  // one seed ⟨x_h, β_h⟩ per attention head's slice
                break;
        }
    }

    std::vector<Parameter*> parameters() {
        std::vector<Parameter*> all;
        for (Parameter* p : {&weight, &bias, &alpha, &shift, &seed_alpha, &seed_beta, &seed_gamma})
            if (p->value.size() > 0) all.push_back(p);
        return all;
    }

    // y = norm(x), one row per token; saves what the backward needs.
    void forward(const Matrix& x, Matrix& y) {
        y.resize(x.rows(), x.cols());
        mean.resize(1, x.rows());
        rstd.resize(1, x.rows());
        switch (kind) {
            case NormKind::layer_norm:
                norm::layer_norm_forward(x, weight.value, bias.value, y, mean, rstd);
                break;
            case NormKind::rms_norm:
                norm::rms_norm_forward(x, weight.value, y, rstd);
                break;
            case NormKind::dyt:
                norm::dyt_forward(x, alpha.value(0, 0), weight.value, bias.value, y);
                break;
            case NormKind::derf:
                norm::derf_forward(x, alpha.value(0, 0), shift.value(0, 0), weight.value, bias.value, y);
                break;
            case NormKind::seed_norm:
                norm::seed_norm_forward(x, seed_alpha.value, seed_beta.value, seed_gamma.value, y, rstd, seed_options);
                break;
        }
    }

    // dx from dy; the parameter gradients are overwritten (each layer is used once).
    void backward(const Matrix& dy, const Matrix& x, Matrix& dx) {
        dx.resize(x.rows(), x.cols());
        switch (kind) {
            case NormKind::layer_norm:
                norm::layer_norm_backward(dy, x, weight.value, dx, weight.gradient, bias.gradient, mean, rstd);
                break;
            case NormKind::rms_norm:
                norm::rms_norm_backward(dy, x, weight.value, dx, weight.gradient, rstd);
                break;
            case NormKind::dyt:
                alpha.gradient(0, 0) =
                    norm::dyt_backward(dy, x, alpha.value(0, 0), weight.value, dx, weight.gradient, bias.gradient);
                break;
            case NormKind::derf: {
                const auto scalars = norm::derf_backward(dy, x, alpha.value(0, 0), shift.value(0, 0), weight.value, dx,
                                                         weight.gradient, bias.gradient);
                alpha.gradient(0, 0) = scalars.alpha;
                shift.gradient(0, 0) = scalars.shift;
                break;
            }
            case NormKind::seed_norm:
                norm::seed_norm_backward(dy, x, seed_alpha.value, seed_beta.value, seed_gamma.value, dx,
                                         seed_alpha.gradient, seed_beta.gradient, seed_gamma.gradient, rstd,
                                         seed_options);
                break;
        }
    }
};

// ---------------------------------------------------------------- the block

struct Config {
    // Small enough for a sanitizer build; the widths (10, head_dim 5) leave a
    // SIMD tail at every vector width, so the kernels' tails are in the check.
    index_type tokens = 5, channels = 10, heads = 2, hidden = 20;
    NormKind norm = NormKind::rms_norm;
    QkKind qk = QkKind::rms;
    index_type head_dim() const { return channels / heads; }
};

// Causal multi-head self-attention with QK-norm: out = concat_h(P_h·v_h)·Wo,
// P_h = causal_softmax(s·q̂_h·k̂_hᵀ), q̂, k̂ = QK-norm(n·Wq, n·Wk), v = n·Wv.
struct Attention {
    Config config;
    Parameter query_weight, key_weight, value_weight, output_weight;  // C × C, applied as n·W
    Parameter qk_query_weight, qk_key_weight;                         // per-head RMS form: head_dim each
    Parameter qk_gain;                                                // L2 form: the scalar g (1 × 1)

    // Saved by the forward for the backward (llm.c's "acts").
    Matrix n, q, k, v, qn, kn, mixed;   // tokens × C; mixed = concat_h(P_h·v_h)
    Matrix query_rstd, key_rstd;        // QK-norm (RMS form): one per token and head
    std::vector<Matrix> probabilities;  // per head, tokens × tokens, 0 above the diagonal

    Attention(const Config& c, std::mt19937& rng) : config(c) {
        const double s = 1.0 / std::sqrt(double(c.channels));
        query_weight = make_parameter("query_weight", c.channels, c.channels, rng, 0.0, s);
        key_weight = make_parameter("key_weight", c.channels, c.channels, rng, 0.0, s);
        value_weight = make_parameter("value_weight", c.channels, c.channels, rng, 0.0, s);
        output_weight = make_parameter("output_weight", c.channels, c.channels, rng, 0.0, s);
        if (c.qk == QkKind::rms) {
            qk_query_weight = make_parameter("qk_query_weight", 1, c.head_dim(), rng, 1.0, 0.2);
            qk_key_weight = make_parameter("qk_key_weight", 1, c.head_dim(), rng, 1.0, 0.2);
        } else {
            // The paper's init log2(L² − L), jittered so the check is not at a special value.
            qk_gain = make_parameter("qk_gain", 1, 1, rng, norm::qk_norm_initial_gain(c.tokens), 0.1);
        }
    }

    std::vector<Parameter*> parameters() {
        std::vector<Parameter*> all;
        for (Parameter* p :
             {&query_weight, &key_weight, &value_weight, &qk_query_weight, &qk_key_weight, &qk_gain, &output_weight})
            if (p->value.size() > 0) all.push_back(p);
        return all;
    }

    // q, k (tokens × C) seen as rows of head_dim, one per token and head: the
    // layout QK-norm normalizes, with no copy.
    normkit::matrix_view<Scalar> heads_of(Matrix& m) const {
        return normkit::view(m.data(), config.tokens * config.heads, config.head_dim());
    }
    // The L2 form folds the gain into q̂, so the scores need no 1/√d; the RMS form keeps it.
    Scalar score_scale() const { return config.qk == QkKind::l2 ? 1.0 : 1.0 / std::sqrt(double(config.head_dim())); }

    Matrix forward(const Matrix& input) {
        const index_type T = config.tokens, D = config.head_dim();
        n = input;
        q = n * query_weight.value;
        k = n * key_weight.value;
        v = n * value_weight.value;
        qn.resize(T, config.channels);
        kn.resize(T, config.channels);
        if (config.qk == QkKind::rms) {
            query_rstd.resize(1, T * config.heads);
            key_rstd.resize(1, T * config.heads);
            norm::qk_rms_norm_forward(heads_of(q), heads_of(k), qk_query_weight.value, qk_key_weight.value,
                                      heads_of(qn), heads_of(kn), query_rstd, key_rstd, norm::presets::qwen3());
        } else {
            norm::qk_l2_norm_forward(heads_of(q), heads_of(k), qk_gain.value(0, 0), heads_of(qn), heads_of(kn));
        }
        mixed.resize(T, config.channels);
        probabilities.resize(config.heads);
        for (index_type h = 0; h < config.heads; ++h) {
            const Matrix scores = qn.middleCols(h * D, D) * kn.middleCols(h * D, D).transpose() * score_scale();
            Matrix& p = probabilities[h];
            p = Matrix::Zero(T, T);
            for (index_type t = 0; t < T; ++t) {  // causal: token t sees tokens 0..t
                const Scalar top = scores.row(t).head(t + 1).maxCoeff();
                p.row(t).head(t + 1) = (scores.row(t).head(t + 1).array() - top).exp();
                p.row(t).head(t + 1) /= p.row(t).head(t + 1).sum();
            }
            mixed.middleCols(h * D, D) = p * v.middleCols(h * D, D);
        }
        return mixed * output_weight.value;
    }

    // From d(out), writes every parameter gradient and returns d(input).
    // Each line is the transpose of a forward line, read bottom to top:
    //   out = m·Wo                 dWo = mᵀ·dout,  dm = dout·Woᵀ
    //   m_h = P_h·v_h              dP_h = dm_h·v_hᵀ,  dv_h = P_hᵀ·dm_h
    //   P = softmax(S) per row     dS = P ⊙ (dP − rowsum(dP ⊙ P))   (masked entries have P = 0, so dS = 0)
    //   S_h = s·q̂_h·k̂_hᵀ           dq̂_h = s·dS_h·k̂_h,  dk̂_h = s·dS_hᵀ·q̂_h
    //   q̂, k̂ = QK-norm(q, k)       dq, dk and d(weights) or d(gain): normkit's QK-norm backward
    //   q, k, v = n·W{q,k,v}       dW• = nᵀ·d•,  dn = dq·Wqᵀ + dk·Wkᵀ + dv·Wvᵀ
    Matrix backward(const Matrix& d_out) {
        const index_type T = config.tokens, D = config.head_dim();
        output_weight.gradient = mixed.transpose() * d_out;
        const Matrix d_mixed = d_out * output_weight.value.transpose();
        Matrix dqn(T, config.channels), dkn(T, config.channels), dv(T, config.channels);
        for (index_type h = 0; h < config.heads; ++h) {
            const Matrix& p = probabilities[h];
            const Matrix dp = d_mixed.middleCols(h * D, D) * v.middleCols(h * D, D).transpose();
            dv.middleCols(h * D, D) = p.transpose() * d_mixed.middleCols(h * D, D);
            const Matrix ds = p.cwiseProduct(dp - dp.cwiseProduct(p).rowwise().sum().replicate(1, T)) * score_scale();
            dqn.middleCols(h * D, D) = ds * kn.middleCols(h * D, D);
            dkn.middleCols(h * D, D) = ds.transpose() * qn.middleCols(h * D, D);
        }
        Matrix dq(T, config.channels), dk(T, config.channels);
        if (config.qk == QkKind::rms) {
            norm::qk_rms_norm_backward(heads_of(dqn), heads_of(dkn), heads_of(q), heads_of(k), qk_query_weight.value,
                                       qk_key_weight.value, heads_of(dq), heads_of(dk), qk_query_weight.gradient,
                                       qk_key_weight.gradient, query_rstd, key_rstd, norm::presets::qwen3());
        } else {
            qk_gain.gradient(0, 0) = norm::qk_l2_norm_backward(heads_of(dqn), heads_of(dkn), heads_of(q), heads_of(k),
                                                               qk_gain.value(0, 0), heads_of(dq), heads_of(dk));
        }
        query_weight.gradient = n.transpose() * dq;
        key_weight.gradient = n.transpose() * dk;
        value_weight.gradient = n.transpose() * dv;
        return dq * query_weight.value.transpose() + dk * key_weight.value.transpose() +
               dv * value_weight.value.transpose();
    }
};

// GELU, tanh form (GPT-2, llm.c), and its derivative.
constexpr double gelu_scale = 0.7978845608028654;  // √(2/π)
Scalar gelu(Scalar x) { return 0.5 * x * (1 + std::tanh(gelu_scale * (x + 0.044715 * x * x * x))); }
Scalar gelu_derivative(Scalar x) {
    const Scalar t = std::tanh(gelu_scale * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * gelu_scale * (1 + 3 * 0.044715 * x * x);
}

// out = GELU(n·W₁)·W₂ (no biases, as in LLaMA-style blocks).
struct Mlp {
    Parameter up_weight, down_weight;  // C × F and F × C
    Matrix n, pre_activation, activation;

    Mlp(const Config& c, std::mt19937& rng) {
        up_weight = make_parameter("up_weight", c.channels, c.hidden, rng, 0.0, 1.0 / std::sqrt(double(c.channels)));
        down_weight = make_parameter("down_weight", c.hidden, c.channels, rng, 0.0, 1.0 / std::sqrt(double(c.hidden)));
    }
    std::vector<Parameter*> parameters() { return {&up_weight, &down_weight}; }

    Matrix forward(const Matrix& input) {
        n = input;
        pre_activation = n * up_weight.value;
        activation = pre_activation.unaryExpr([](Scalar u) { return gelu(u); });
        return activation * down_weight.value;
    }

    //   out = a·W₂     dW₂ = aᵀ·dout,  da = dout·W₂ᵀ
    //   a = GELU(u)    du = da ⊙ GELU′(u)
    //   u = n·W₁       dW₁ = nᵀ·du,  dn = du·W₁ᵀ
    Matrix backward(const Matrix& d_out) {
        down_weight.gradient = activation.transpose() * d_out;
        const Matrix du = (d_out * down_weight.value.transpose()).cwiseProduct(pre_activation.unaryExpr([](Scalar u) {
            return gelu_derivative(u);
        }));
        up_weight.gradient = n.transpose() * du;
        return du * up_weight.value.transpose();
    }
};

//   x₁ = x + attention(norm₁(x)),  y = x₁ + mlp(norm₂(x₁))
struct Block {
    NormLayer norm1, norm2;
    Attention attention;
    Mlp mlp;
    Matrix x, n1, x1, n2;

    Block(const Config& c, std::mt19937& rng)
        : norm1(c.norm, "norm1", c.channels, c.heads, rng),
          norm2(c.norm, "norm2", c.channels, c.heads, rng),
          attention(c, rng),
          mlp(c, rng) {}

    std::vector<Parameter*> parameters() {
        std::vector<Parameter*> all;
        for (const std::vector<Parameter*>& layer :
             {norm1.parameters(), attention.parameters(), norm2.parameters(), mlp.parameters()})
            all.insert(all.end(), layer.begin(), layer.end());
        return all;
    }

    Matrix forward(const Matrix& input) {
        x = input;
        norm1.forward(x, n1);
        x1 = x + attention.forward(n1);
        norm2.forward(x1, n2);
        return x1 + mlp.forward(n2);
    }

    // A residual passes its gradient through unchanged and adds the branch's:
    //   dx₁ = dy + norm₂_backward(mlp_backward(dy)),  dx = dx₁ + norm₁_backward(attention_backward(dx₁))
    Matrix backward(const Matrix& dy) {
        Matrix dn2 = mlp.backward(dy), dx1;
        norm2.backward(dn2, x1, dx1);
        dx1 += dy;
        Matrix dn1 = attention.backward(dx1), dx;
        norm1.backward(dn1, x, dx);
        return dx + dx1;
    }
};

// ---------------------------------------------------------------- the gradient check

// L = Σ y ⊙ G for a fixed random G, so dL/dy = G.
Scalar loss(Block& block, const Matrix& x, const Matrix& target) { return block.forward(x).cwiseProduct(target).sum(); }

// Central differences with step h: error O(h²·f‴) + O(ε·|L|/h) ≈ 1e-10 here,
// while a wrong term in a backward is O(1) off. Each tensor passes when
// max|analytic − numeric| ≤ tolerance · max(max|numeric|, 1).
constexpr double step = 1e-5;
constexpr double tolerance = 1e-7;

// Largest error over the entries of `value` against `analytic`, relative as above.
double check_entries(Block& block, Matrix& value, const Matrix& analytic, const Matrix& x, const Matrix& target) {
    double worst = 0, scale = 1;
    Matrix numeric(value.rows(), value.cols());
    for (index_type i = 0; i < value.size(); ++i) {
        const Scalar saved = value.data()[i];
        value.data()[i] = saved + step;
        const Scalar plus = loss(block, x, target);
        value.data()[i] = saved - step;
        const Scalar minus = loss(block, x, target);
        value.data()[i] = saved;
        numeric.data()[i] = (plus - minus) / (2 * step);
    }
    for (index_type i = 0; i < value.size(); ++i) {
        worst = std::max(worst, std::abs(double(analytic.data()[i] - numeric.data()[i])));
        scale = std::max(scale, std::abs(double(numeric.data()[i])));
    }
    return worst / scale;
}

bool check(const Config& config, std::uint32_t seed) {
    std::mt19937 rng(seed);
    Block block(config, rng);
    Matrix x =
        random_matrix(config.tokens, config.channels, rng, 0.3, 1.0);  // an offset, so LayerNorm's centering matters
    const Matrix target = random_matrix(config.tokens, config.channels, rng);
    block.forward(x);
    Matrix dx = block.backward(target);
    // Copy the analytic gradients: the finite differences rerun the forward.
    std::vector<Parameter*> parameters = block.parameters();
    std::vector<Matrix> analytic;
    for (Parameter* p : parameters) analytic.push_back(p->gradient);

    bool ok = true;
    double worst = check_entries(block, x, dx, x, target);
    std::string worst_name = "input";
    ok = ok && worst <= tolerance;
    for (std::size_t i = 0; i < parameters.size(); ++i) {
        const double error = check_entries(block, parameters[i]->value, analytic[i], x, target);
        if (error > tolerance)
            std::printf("  FAIL %s: %s relative error %.3g > %.1g\n", name(config.norm), parameters[i]->name.c_str(),
                        error, tolerance);
        ok = ok && error <= tolerance;
        if (error > worst) worst = error, worst_name = parameters[i]->name;
    }
    std::printf("%-10s qk %-3s %2zu parameter tensors + input  worst error %.1e (%s)  %s\n", name(config.norm),
                name(config.qk), parameters.size(), worst, worst_name.c_str(), ok ? "ok" : "FAILED");
    return ok;
}

}  // namespace

// Usage: transformer_block [norm] [qk]   norm: layer_norm | rms_norm | dyt | derf | seed_norm | all (default)
//                                        qk:   rms | l2 | all (default)
int main(int argc, char** argv) {
    const std::string norm_choice = argc > 1 ? argv[1] : "all", qk_choice = argc > 2 ? argv[2] : "all";
    std::printf(
        "gradient check: central differences, step %.0e, tolerance %.0e (max |error| / max(max |numeric|, 1) per "
        "tensor)\n",
        step, tolerance);
    bool ok = true;
    int checked = 0;
    std::uint32_t seed = 1234;  // one per configuration, so a single run reproduces its line of the full run
    for (NormKind kind :
         {NormKind::layer_norm, NormKind::rms_norm, NormKind::dyt, NormKind::derf, NormKind::seed_norm}) {
        for (QkKind qk : {QkKind::rms, QkKind::l2}) {
            ++seed;
            if ((norm_choice != "all" && norm_choice != name(kind)) || (qk_choice != "all" && qk_choice != name(qk)))
                continue;
            Config config;
            config.norm = kind;
            config.qk = qk;
            ok = check(config, seed) && ok;
            ++checked;
        }
    }
    if (checked == 0) {
        std::fprintf(stderr,
                     "unknown choice '%s %s'; norms: layer_norm rms_norm dyt derf seed_norm all, qk: rms l2 all\n",
                     norm_choice.c_str(), qk_choice.c_str());
        return 2;
    }
    std::printf(ok ? "all gradients match\n" : "GRADIENT CHECK FAILED\n");
    return ok ? 0 : 1;
}
