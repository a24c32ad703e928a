// The accuracy contract of the fp32 row kernels, as a grid: rows of N(μ, σ)
// for μ ∈ {0, 10², 10⁴, 10⁶}, σ ∈ {1, 10⁻³}, n ∈ {1, 7, 128, 1024, 4096,
// 16384, 65536}, every kernel against its float64 reference on the same
// (stored) inputs:
//   y           within 4 ulp: ulps of the fp32 value at |y| for the products
//               (RMSNorm, L2, QK), and for the affine forms (LayerNorm, DyT,
//               Derf, SeeDNorm) ulps at |γ|·(1 + |x̂|) + |β| (|γ|·|t| + |β| for
//               DyT and Derf, (|σ·α| + |γ|)·|x̂| for SeeDNorm), since an affine
//               form may cancel to anything;
//   statistics  saved mean and rstd within 4 ulp;
//   gradients   dx, dγ, dβ within 1e-6 of the reference, relative to its
//               largest entry (tests/support.hpp: relative_error) or, where the
//               reference cancels (n = 1: dx of RMSNorm is r·(g − x̂²g) ≈ 0),
//               to the size of the terms that cancelled: |r·g| for dx, the
//               root-sum-square over rows of dy⊙x̂ (dy) for dγ (dβ).
// NORMKIT_ACCURACY_TABLE=<file> writes the worst case of each kernel as the
// table of docs/accuracy.md (scripts/accuracy).
#include "reference/norm.hpp"
#include "reference/norm_elementwise.hpp"
#include "reference/norm_qk.hpp"
#include "support.hpp"

#include <normkit/norm/derf.hpp>
#include <normkit/norm/dyt.hpp>
#include <normkit/norm/fused_add_rms_norm.hpp>
#include <normkit/norm/l2_norm.hpp>
#include <normkit/norm/layer_norm.hpp>
#include <normkit/norm/partial_rms_norm.hpp>
#include <normkit/norm/presets.hpp>
#include <normkit/norm/qk_norm.hpp>
#include <normkit/norm/rms_norm.hpp>
#include <normkit/norm/seed_norm.hpp>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

using namespace normkit;
using namespace normkit::testing;

namespace {

struct grid_point {
    double mean, sigma;
    index_type n;
};

// Enough rows for a few hundred thousand elements at most, two at the longest.
index_type rows_of(index_type n) { return std::max<index_type>(2, std::min<index_type>(256, 16384 / n)); }

// The spacing of fp32 values at |v| (the smallest subnormal at 0).
double ulp_at(double v) {
    const float magnitude = static_cast<float>(std::abs(v));
    if (magnitude == 0 || !std::isfinite(magnitude)) return std::numeric_limits<float>::denorm_min();
    return static_cast<double>(std::nextafter(magnitude, INFINITY) - magnitude);
}

// The largest |a − b| in ulps of scale_i.
double worst_ulps(const std::vector<double>& actual, const std::vector<double>& expected,
                  const std::vector<double>& scale) {
    double worst = 0;
    for (std::size_t i = 0; i < actual.size(); ++i) {
        if (std::isnan(actual[i]) || std::isnan(expected[i])) return INFINITY;
        worst = std::max(worst, std::abs(actual[i] - expected[i]) / ulp_at(scale[i]));
    }
    return worst;
}

std::vector<double> magnitudes(const std::vector<double>& v) {
    std::vector<double> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = std::abs(v[i]);
    return out;
}

// max_i |scale_i·g_i|: the size of the terms of dx = scale·(g − ...), g = w⊙dy.
double term_floor(const std::vector<double>& dy, const std::vector<double>& weight, const std::vector<double>& scale,
                  index_type n) {
    double floor = 0;
    for (std::size_t k = 0; k < dy.size(); ++k) {
        const double w = weight.empty() ? 1.0 : weight[k % static_cast<std::size_t>(n)];
        floor = std::max(floor, std::abs(scale[k / static_cast<std::size_t>(n)] * w * dy[k]));
    }
    return floor;
}

// max_j √(Σ_rows t_ij²): the size of a column sum of the terms t (dy⊙x̂ for dγ, dy for dβ).
double column_floor(const std::vector<double>& terms, index_type n) {
    std::vector<double> squares(static_cast<std::size_t>(n), 0.0);
    for (std::size_t k = 0; k < terms.size(); ++k) squares[k % static_cast<std::size_t>(n)] += terms[k] * terms[k];
    double floor = 0;
    for (double v : squares) floor = std::max(floor, std::sqrt(v));
    return floor;
}

std::vector<double> product(const std::vector<double>& a, const std::vector<double>& b) {
    std::vector<double> out(a.size());
    for (std::size_t k = 0; k < a.size(); ++k) out[k] = a[k] * b[k];
    return out;
}

// x̂ = x·r (RMS forms) from the reference rstd, per row.
std::vector<double> scaled_rows(const std::vector<double>& x, const std::vector<double>& rstd, index_type n) {
    std::vector<double> out(x.size());
    for (std::size_t k = 0; k < x.size(); ++k) out[k] = x[k] * rstd[k / static_cast<std::size_t>(n)];
    return out;
}

// What one kernel gives at one grid point (NaN: not measured).
struct measured {
    double y = NAN, statistics = NAN, dx = NAN, dweight = NAN, dbias = NAN;
};

struct kernel {
    const char* name;
    std::function<measured(const grid_point&, std::uint32_t)> run;
};

// The data of one grid point: x ~ N(μ, σ) as stored in fp32, dy ~ N(0, 1), γ ~ N(1, 0.5), β ~ N(0, 1).
struct problem {
    index_type rows, n;
    test_matrix<float> x, dy;
    std::vector<double> xs, dys, weight_values, bias_values;
    std::vector<float> weight, bias;

    problem(const grid_point& p, std::uint32_t seed)
        : rows(rows_of(p.n)),
          n(p.n),
          x(rows, n, random_values(static_cast<std::size_t>(rows * n), seed, p.mean, p.sigma)),
          dy(rows, n, random_values(static_cast<std::size_t>(rows * n), seed + 1)),
          xs(x.values()),
          dys(dy.values()),
          weight_values(stored<float>(random_values(static_cast<std::size_t>(n), seed + 2, 1.0, 0.5))),
          bias_values(stored<float>(random_values(static_cast<std::size_t>(n), seed + 3))),
          weight(to_storage<float>(weight_values)),
          bias(to_storage<float>(bias_values)) {}
};

measured layer_norm(const grid_point& p, std::uint32_t seed) {
    problem d(p, seed);
    test_matrix<float> y(d.rows, d.n), dx(d.rows, d.n);
    std::vector<float> mean(d.rows), rstd(d.rows), dweight(d.n), dbias(d.n);
    norm::layer_norm_forward(d.x.view, d.weight, d.bias, y.view, mean, rstd);
    norm::layer_norm_backward(d.dy.view, d.x.view, d.weight, dx.view, dweight, dbias, mean, rstd);
    std::vector<double> y_ref, mean_ref, rstd_ref, dx_ref, dweight_ref, dbias_ref;
    reference::layer_norm_forward(d.xs, {d.rows, d.n}, d.weight_values, d.bias_values, 1e-5, y_ref, mean_ref, rstd_ref);
    reference::layer_norm_backward(d.dys, d.xs, {d.rows, d.n}, d.weight_values, 1e-5, dx_ref, dweight_ref, dbias_ref);
    std::vector<double> scale(y_ref.size());
    for (index_type i = 0; i < d.rows; ++i)
        for (index_type j = 0; j < d.n; ++j) {
            const double xhat = (d.xs[i * d.n + j] - mean_ref[i]) * rstd_ref[i];
            scale[i * d.n + j] = std::abs(d.weight_values[j]) * (1 + std::abs(xhat)) + std::abs(d.bias_values[j]);
        }
    measured m;
    m.y = worst_ulps(y.values(), y_ref, scale);
    m.statistics = std::max(worst_ulps(to_double(mean), mean_ref, magnitudes(mean_ref)),
                            worst_ulps(to_double(rstd), rstd_ref, magnitudes(rstd_ref)));
    std::vector<double> xhat(d.xs.size());
    for (std::size_t k = 0; k < xhat.size(); ++k)
        xhat[k] = (d.xs[k] - mean_ref[k / static_cast<std::size_t>(d.n)]) * rstd_ref[k / static_cast<std::size_t>(d.n)];
    m.dx = relative_error(dx.values(), dx_ref, term_floor(d.dys, d.weight_values, rstd_ref, d.n));
    m.dweight = relative_error(to_double(dweight), dweight_ref, column_floor(product(d.dys, xhat), d.n));
    m.dbias = relative_error(to_double(dbias), dbias_ref, column_floor(d.dys, d.n));
    return m;
}

measured rms_norm(const grid_point& p, std::uint32_t seed, bool offset) {
    problem d(p, seed);
    norm::rms_norm_options options;
    options.offset = offset;
    options.casting = offset ? norm::rms_norm_casting::gemma : norm::rms_norm_casting::llama;
    std::vector<double> weight_values = d.weight_values;
    if (offset)  // w_eff = 1 + w near 1
        for (auto& w : weight_values) w = static_cast<double>(static_cast<float>(w - 1));
    const auto weight = to_storage<float>(weight_values);
    test_matrix<float> y(d.rows, d.n), dx(d.rows, d.n);
    std::vector<float> rstd(d.rows), dweight(d.n);
    norm::rms_norm_forward(d.x.view, weight, y.view, rstd, options);
    norm::rms_norm_backward(d.dy.view, d.x.view, weight, dx.view, dweight, rstd, options);
    std::vector<double> y_ref, rstd_ref, dx_ref, dweight_ref;
    reference::rms_norm_forward(d.xs, {d.rows, d.n}, weight_values, offset, options.eps, y_ref, rstd_ref);
    reference::rms_norm_backward(d.dys, d.xs, {d.rows, d.n}, weight_values, offset, options.eps, dx_ref, dweight_ref);
    measured m;
    m.y = worst_ulps(y.values(), y_ref, magnitudes(y_ref));
    m.statistics = worst_ulps(to_double(rstd), rstd_ref, magnitudes(rstd_ref));
    std::vector<double> effective = weight_values;
    if (offset)
        for (auto& w : effective) w += 1;
    m.dx = relative_error(dx.values(), dx_ref, term_floor(d.dys, effective, rstd_ref, d.n));
    m.dweight = relative_error(to_double(dweight), dweight_ref,
                               column_floor(product(d.dys, scaled_rows(d.xs, rstd_ref, d.n)), d.n));
    return m;
}

// pRMSNorm at p = 1/16: the paper's convention (⌈p·n⌉, ε inside) or the authors' (⌊p·n⌋, ε outside).
measured partial_rms_norm(const grid_point& p, std::uint32_t seed, bool authors) {
    problem d(p, seed);
    auto options = authors ? norm::presets::zhang_sennrich_prmsnorm() : norm::partial_rms_norm_options{};
    if (authors && d.n < 16) options.count = norm::partial_count::ceil;  // ⌊n/16⌋ = 0 is an error
    const index_type k = norm::partial_rms_count(d.n, options);
    test_matrix<float> y(d.rows, d.n), dx(d.rows, d.n);
    std::vector<float> rstd(d.rows), dweight(d.n);
    norm::partial_rms_norm_forward(d.x.view, d.weight, y.view, rstd, options);
    norm::partial_rms_norm_backward(d.dy.view, d.x.view, d.weight, dx.view, dweight, rstd, options);
    std::vector<double> y_ref, rstd_ref, dx_ref, dweight_ref;
    reference::partial_rms_norm_forward(d.xs, {d.rows, d.n}, d.weight_values, false, options.eps, k,
                                        options.eps_outside, y_ref, rstd_ref);
    reference::partial_rms_norm_backward(d.dys, d.xs, {d.rows, d.n}, d.weight_values, false, options.eps, k,
                                         options.eps_outside, dx_ref, dweight_ref);
    measured m;
    m.y = worst_ulps(y.values(), y_ref, magnitudes(y_ref));
    m.statistics = worst_ulps(to_double(rstd), rstd_ref, magnitudes(rstd_ref));
    m.dx = relative_error(dx.values(), dx_ref, term_floor(d.dys, d.weight_values, rstd_ref, d.n));
    m.dweight = relative_error(to_double(dweight), dweight_ref,
                               column_floor(product(d.dys, scaled_rows(d.xs, rstd_ref, d.n)), d.n));
    return m;
}

// h = x + s with s ~ N(0, 1): the reference normalizes h as stored.
measured fused_add(const grid_point& p, std::uint32_t seed) {
    problem d(p, seed);
    test_matrix<float> residual(d.rows, d.n, random_values(static_cast<std::size_t>(d.rows * d.n), seed + 4));
    test_matrix<float> y(d.rows, d.n), dh(d.rows, d.n, random_values(static_cast<std::size_t>(d.rows * d.n), seed + 5));
    const auto dh_in = dh.values();
    std::vector<float> rstd(d.rows), dweight(d.n);
    norm::fused_add_rms_norm_forward(d.x.view, d.weight, residual.view, y.view, rstd);
    norm::fused_add_rms_norm_backward(d.dy.view, residual.view, d.weight, dh.view, dweight, rstd);
    const auto h = residual.values();
    std::vector<double> y_ref, rstd_ref, dh_ref, dweight_ref;
    reference::rms_norm_forward(h, {d.rows, d.n}, d.weight_values, false, 1e-6, y_ref, rstd_ref);
    reference::fused_add_rms_norm_backward(d.dys, dh_in, h, {d.rows, d.n}, d.weight_values, false, 1e-6, dh_ref,
                                           dweight_ref);
    measured m;
    m.y = worst_ulps(y.values(), y_ref, magnitudes(y_ref));
    m.statistics = worst_ulps(to_double(rstd), rstd_ref, magnitudes(rstd_ref));
    m.dx = relative_error(dh.values(), dh_ref, term_floor(d.dys, d.weight_values, rstd_ref, d.n));
    m.dweight = relative_error(to_double(dweight), dweight_ref,
                               column_floor(product(d.dys, scaled_rows(h, rstd_ref, d.n)), d.n));
    return m;
}

// Per head (head_dim = n) and full width (4 heads of n/4, where n divides): both are RMSNorm
// over rows of n, one rstd per row.
measured qk_rms_norm(const grid_point& p, std::uint32_t seed, bool full_width) {
    const index_type heads = full_width ? 4 : 1;
    if (p.n % heads != 0) return {};
    problem d(p, seed);
    const index_type head_dim = d.n / heads;
    const matrix_view<const float> q{d.x.view.data, d.rows * heads, head_dim, head_dim};
    std::vector<float> q_out(static_cast<std::size_t>(d.rows * d.n)), k_out(q_out.size());
    std::vector<float> q_rstd(d.rows), k_rstd(d.rows);
    const auto options = norm::presets::olmo2();
    norm::qk_rms_norm_forward(q, q, d.weight, d.weight, view(q_out.data(), d.rows * heads, head_dim),
                              view(k_out.data(), d.rows * heads, head_dim), q_rstd, k_rstd, options);
    std::vector<double> y_ref, rstd_ref;
    reference::rms_norm_forward(d.xs, {d.rows, d.n}, d.weight_values, false, options.eps, y_ref, rstd_ref);
    measured m;
    m.y = std::max(worst_ulps(to_double(q_out), y_ref, magnitudes(y_ref)),
                   worst_ulps(to_double(k_out), y_ref, magnitudes(y_ref)));
    m.statistics = std::max(worst_ulps(to_double(q_rstd), rstd_ref, magnitudes(rstd_ref)),
                            worst_ulps(to_double(k_rstd), rstd_ref, magnitudes(rstd_ref)));
    return m;
}

measured l2_norm(const grid_point& p, std::uint32_t seed) {
    problem d(p, seed);
    const double gain = 1.7;
    test_matrix<float> y(d.rows, d.n), dx(d.rows, d.n);
    norm::l2_norm_forward(d.x.view, gain, y.view);
    const double dgain = norm::l2_norm_backward(d.dy.view, d.x.view, gain, dx.view);
    const auto y_ref = reference::l2_norm_forward(d.xs, {d.rows, d.n}, gain, 1e-12);
    std::vector<double> dx_ref;
    const double dgain_ref = reference::l2_norm_backward(d.dys, d.xs, {d.rows, d.n}, gain, 1e-12, dx_ref);
    std::vector<double> inverse_norm(static_cast<std::size_t>(d.rows));
    for (index_type i = 0; i < d.rows; ++i) {
        double squares = 0;
        for (index_type j = 0; j < d.n; ++j) squares += d.xs[i * d.n + j] * d.xs[i * d.n + j];
        inverse_norm[i] = gain / std::max(std::sqrt(squares), 1e-12);
    }
    measured m;
    m.y = worst_ulps(y.values(), y_ref, magnitudes(y_ref));
    m.dx = relative_error(dx.values(), dx_ref, term_floor(d.dys, {}, inverse_norm, d.n));
    m.dweight = std::abs(dgain - dgain_ref) / std::max(1.0, std::abs(dgain_ref));
    return m;
}

// DyT (shift = NaN) or Derf: y = γ·f(αx + s) + β, f = tanh or erf.
measured pointwise(const grid_point& p, std::uint32_t seed, bool derf) {
    problem d(p, seed);
    // The kernel takes α and s in its compute type: the reference gets them as rounded there.
    const double alpha = 0.5, shift = static_cast<double>(0.1f);
    test_matrix<float> y(d.rows, d.n), dx(d.rows, d.n);
    std::vector<float> dweight(d.n), dbias(d.n);
    reference::pointwise_gradients ref;
    std::vector<double> y_ref;
    if (derf) {
        norm::derf_forward(d.x.view, alpha, shift, d.weight, d.bias, y.view);
        norm::derf_backward(d.dy.view, d.x.view, alpha, shift, d.weight, dx.view, dweight, dbias);
        y_ref = reference::derf_forward(d.xs, d.n, alpha, shift, d.weight_values, d.bias_values);
        ref = reference::derf_backward(d.dys, d.xs, d.n, alpha, shift, d.weight_values);
    } else {
        norm::dyt_forward(d.x.view, alpha, d.weight, d.bias, y.view);
        norm::dyt_backward(d.dy.view, d.x.view, alpha, d.weight, dx.view, dweight, dbias);
        y_ref = reference::dyt_forward(d.xs, d.n, alpha, d.weight_values, d.bias_values);
        ref = reference::dyt_backward(d.dys, d.xs, d.n, alpha, d.weight_values);
    }
    std::vector<double> scale(y_ref.size());
    for (std::size_t k = 0; k < scale.size(); ++k) {
        const std::size_t j = k % static_cast<std::size_t>(d.n);
        const double u = alpha * d.xs[k] + (derf ? shift : 0.0);
        const double t = derf ? std::erf(u) : std::tanh(u);
        scale[k] = std::abs(d.weight_values[j]) * std::abs(t) + std::abs(d.bias_values[j]);
    }
    std::vector<double> activation(d.xs.size());
    for (std::size_t k = 0; k < activation.size(); ++k) {
        const double u = alpha * d.xs[k] + (derf ? shift : 0.0);
        activation[k] = derf ? std::erf(u) : std::tanh(u);
    }
    measured m;
    m.y = worst_ulps(y.values(), y_ref, scale);
    m.dx =
        relative_error(dx.values(), ref.dx,
                       term_floor(d.dys, d.weight_values, std::vector<double>(d.rows, alpha * (derf ? 1.13 : 1)), d.n));
    m.dweight = relative_error(to_double(dweight), ref.dweight, column_floor(product(d.dys, activation), d.n));
    m.dbias = relative_error(to_double(dbias), ref.dbias, column_floor(d.dys, d.n));
    return m;
}

measured seed_norm(const grid_point& p, std::uint32_t seed) {
    problem d(p, seed);
    const auto alpha_values = stored<float>(random_values(static_cast<std::size_t>(d.n), seed + 6, 0.0, 0.3));
    const auto beta_values = stored<float>(random_values(static_cast<std::size_t>(d.n), seed + 7, 0.0, 0.01));
    const auto alpha = to_storage<float>(alpha_values), beta = to_storage<float>(beta_values);
    test_matrix<float> y(d.rows, d.n), dx(d.rows, d.n);
    std::vector<float> rstd(d.rows), dalpha(d.n), dbeta(d.n), dgamma(d.n);
    norm::seed_norm_forward(d.x.view, alpha, beta, d.weight, y.view, rstd);
    norm::seed_norm_backward(d.dy.view, d.x.view, alpha, beta, d.weight, dx.view, dalpha, dbeta, dgamma, rstd);
    std::vector<double> rstd_ref;
    const norm::seed_norm_options options;
    const auto y_ref = reference::seed_norm_forward(d.xs, d.rows, d.n, alpha_values, beta_values, d.weight_values, 1,
                                                    options.eps, &rstd_ref);
    const auto ref = reference::seed_norm_backward(d.dys, d.xs, d.rows, d.n, alpha_values, beta_values, d.weight_values,
                                                   1, options.eps);
    // y = (σ·α + γ)·x̂, and σ·α + γ may cancel: ulps on the scale (|σ·α| + |γ|)·|x̂|.
    const auto xhat = scaled_rows(d.xs, rstd_ref, d.n);
    std::vector<double> scale(y_ref.size());
    for (index_type i = 0; i < d.rows; ++i) {
        double dot = 0;
        for (index_type j = 0; j < d.n; ++j) dot += d.xs[i * d.n + j] * beta_values[j];
        const double sigma = std::tanh(dot);
        for (index_type j = 0; j < d.n; ++j)
            scale[i * d.n + j] =
                (std::abs(sigma * alpha_values[j]) + std::abs(d.weight_values[j])) * std::abs(xhat[i * d.n + j]);
    }
    measured m;
    m.y = worst_ulps(y.values(), y_ref, scale);
    m.statistics = worst_ulps(to_double(rstd), rstd_ref, magnitudes(rstd_ref));
    m.dx = relative_error(dx.values(), ref.dx, term_floor(d.dys, d.weight_values, rstd_ref, d.n));
    m.dweight = relative_error(to_double(dgamma), ref.dgamma, column_floor(product(d.dys, xhat), d.n));
    m.dbias = relative_error(to_double(dalpha), ref.dalpha, column_floor(product(d.dys, xhat), d.n));
    return m;
}

const std::vector<kernel>& kernels() {
    static const std::vector<kernel> all = {
        {"layer_norm (γ, β)", layer_norm},
        {"rms_norm (llama casting)", [](const grid_point& p, std::uint32_t s) { return rms_norm(p, s, false); }},
        {"rms_norm (gemma casting, offset)", [](const grid_point& p, std::uint32_t s) { return rms_norm(p, s, true); }},
        {"fused_add_rms_norm", fused_add},
        {"partial_rms_norm (p = 1/16)",
         [](const grid_point& p, std::uint32_t s) { return partial_rms_norm(p, s, false); }},
        {"partial_rms_norm (authors': ⌊p·n⌋, ε outside)",
         [](const grid_point& p, std::uint32_t s) { return partial_rms_norm(p, s, true); }},
        {"qk_rms_norm (per head)", [](const grid_point& p, std::uint32_t s) { return qk_rms_norm(p, s, false); }},
        {"qk_rms_norm (full width, 4 heads)",
         [](const grid_point& p, std::uint32_t s) { return qk_rms_norm(p, s, true); }},
        {"l2_norm (gain 1.7)", l2_norm},
        {"dyt (α 0.5, γ, β)", [](const grid_point& p, std::uint32_t s) { return pointwise(p, s, false); }},
        {"derf (α 0.5, s 0.1, γ, β)", [](const grid_point& p, std::uint32_t s) { return pointwise(p, s, true); }},
        {"seed_norm (1 head)", seed_norm},
    };
    return all;
}

std::vector<grid_point> grid() {
    std::vector<grid_point> points;
    for (double mean : {0.0, 1e2, 1e4, 1e6})
        for (double sigma : {1.0, 1e-3})
            for (index_type n : {1, 7, 128, 1024, 4096, 16384, 65536}) points.push_back({mean, sigma, n});
    return points;
}

// The worst value of one measure over the grid and where it occurred.
struct worst {
    double value = 0;
    grid_point at{};
    bool seen = false;
    void add(double v, const grid_point& p) {
        if (std::isnan(v)) return;
        seen = true;
        if (v >= value) value = v, at = p;
    }
    std::string text(bool ulps) const {
        if (!seen) return "—";
        std::ostringstream out;
        out.precision(ulps ? 2 : 2);
        if (ulps)
            out << std::fixed << value;
        else
            out << std::scientific << value;
        out << " (μ " << at.mean << ", σ " << at.sigma << ", n " << at.n << ")";
        return out.str();
    }
};

}  // namespace

TEST_CASE("fp32 row kernels are within 4 ulp (y, statistics) and 1e-6 (gradients) of float64 over the grid",
          "[accuracy]") {
    std::ostringstream table;
    table
        << "| kernel | y, ulps | saved statistics, ulps | dx, relative | dγ, relative | dβ (SeeDNorm: dα), relative |\n"
        << "|---|---|---|---|---|---|\n";
    std::uint32_t seed = 1000;
    for (const auto& k : kernels()) {
        worst y, statistics, dx, dweight, dbias;
        for (const auto& p : grid()) {
            INFO(k.name << ": μ " << p.mean << " σ " << p.sigma << " n " << p.n);
            const measured m = k.run(p, seed += 10);
            if (!std::isnan(m.y)) CHECK(m.y <= 4);
            if (!std::isnan(m.statistics)) CHECK(m.statistics <= 4);
            if (!std::isnan(m.dx)) CHECK(m.dx <= 1e-6);
            if (!std::isnan(m.dweight)) CHECK(m.dweight <= 1e-6);
            if (!std::isnan(m.dbias)) CHECK(m.dbias <= 1e-6);
            y.add(m.y, p);
            statistics.add(m.statistics, p);
            dx.add(m.dx, p);
            dweight.add(m.dweight, p);
            dbias.add(m.dbias, p);
        }
        table << "| " << k.name << " | " << y.text(true) << " | " << statistics.text(true) << " | " << dx.text(false)
              << " | " << dweight.text(false) << " | " << dbias.text(false) << " |\n";
    }
    if (const char* path = std::getenv("NORMKIT_ACCURACY_TABLE")) std::ofstream(path) << table.str();
}
