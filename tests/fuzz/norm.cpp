// Differential fuzz target of the row norms: rms_norm (forward and backward),
// layer_norm (forward and backward), fused_add_rms_norm, l2_norm, DyT, Derf and
// the RMS form of QK-norm, in every storage type, against the double references
// of tests/reference/norm*.hpp.
//
// Per case: a shape (SIMD tails, strides, unaligned), rows of different kinds
// (ordinary, offset, constant, zero, subnormal, wide, integers) at a scale of
// the fuzzer's choice, special values sprinkled (NaN, ±inf, huge, subnormal),
// eps, offset and casting, absent or present parameters. It checks
//   - rows whose arithmetic stays inside the compute type's range agree with
//     the reference within the tolerance docs/reference.md gives (a row is its
//     own batch: rows are independent), every other row only runs (NaN / inf
//     input has no documented value: no crash, no UB, no effect on other rows);
//   - the degenerate values the headers give: an all-zero row → y = 0 (RMS),
//     a constant row → y = β (LayerNorm), an all-zero row → 0 (L2);
//   - bitwise: any thread count, streamed (stream_above_bytes = 0) or not, in
//     place or not; fused add + RMSNorm = add in T then rms_norm_forward; the
//     RMS QK-norm = rms_norm_forward on rows of head_dim; padding untouched.
#include "fuzz_support.hpp"
#include "reference/norm.hpp"
#include "reference/norm_elementwise.hpp"
#include "reference/norm_qk.hpp"

#include <normkit/norm/derf.hpp>
#include <normkit/norm/dyt.hpp>
#include <normkit/norm/fused_add_rms_norm.hpp>
#include <normkit/norm/l2_norm.hpp>
#include <normkit/norm/layer_norm.hpp>
#include <normkit/norm/qk_norm.hpp>
#include <normkit/norm/rms_norm.hpp>

#include <cstdio>
#include <cstdlib>
#include <type_traits>

using namespace normkit;
using fuzz::check;

namespace {

enum class method { rms, layer, fused_add, l2, dyt, derf, qk_rms };

// One case's data and how to run it.
struct layout {
    index_type rows, cols, padding;
    bool unaligned, in_place, streamed, weight, bias;
    int threads;
    double eps;
};

const index_type tail_dims[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 257, 1000, 2049};

layout read_layout(fuzz::source& in) {
    layout l{};
    l.rows = in.integer<index_type>(1, 6);
    l.cols = in.flag() ? in.pick(tail_dims) : in.integer<index_type>(1, 300);
    l.padding = in.integer<index_type>(0, 3);
    l.unaligned = in.flag();
    l.in_place = in.flag();
    l.streamed = in.flag();
    l.weight = in.flag();
    l.bias = in.flag();
    l.threads = in.integer<int>(2, 4);
    const double epsilons[] = {1e-6, 1e-5, 1e-12, 0.5, 1e-30, 1e-300};
    l.eps = in.pick(epsilons);
    return l;
}

// The rows × cols input, each row of its own kind and scale; specials sprinkled.
std::vector<double> read_rows(fuzz::source& in, index_type rows, index_type cols, int max_exponent) {
    std::vector<double> out;
    for (index_type i = 0; i < rows; ++i) {
        const auto kind = static_cast<fuzz::profile>(in.integer<int>(0, 6));
        const auto row =
            fuzz::values(in, static_cast<std::size_t>(cols), kind, in.integer<int>(-max_exponent, max_exponent));
        out.insert(out.end(), row.begin(), row.end());
    }
    fuzz::sprinkle(in, out, in.integer<int>(0, 3));
    return out;
}

std::vector<double> row_of(const std::vector<double>& values, index_type row, index_type cols) {
    return {values.begin() + row * cols, values.begin() + (row + 1) * cols};
}

// Whether a row's Σx² (and the output) stays inside the compute type's normal range, so the
// reference's tolerance applies. C is float for every storage but double.
template <class T>
bool ordinary_sum_of_squares(const std::vector<double>& row, double eps) {
    if (!fuzz::all_finite(row)) return false;
    long double squares = 0;
    for (double value : row) squares += static_cast<long double>(value) * value;
    const double high = std::is_same_v<T, double> ? 1e300 : 1e36, low = std::is_same_v<T, double> ? 1e-290 : 1e-30;
    const double mean_square = static_cast<double>(squares / static_cast<long double>(row.size()));
    return squares < high && mean_square + eps >= low;
}

// The output row is comparable in T: no overflow, not all below T's normal range.
template <class T>
bool representable(const std::vector<double>& expected_row) {
    const double largest = fuzz::max_abs(expected_row);
    const double smallest_normal =
        std::is_same_v<T, Eigen::half> ? 6.2e-5 : (std::is_same_v<T, double> ? 2.3e-308 : 1.2e-38);
    return std::isfinite(largest) && largest < fuzz::largest<T>() / 4 &&
           (largest == 0 || largest > smallest_normal * 1e4);
}

template <class T>
struct norm_case {
    layout l;
    std::vector<double> x, weight, bias;  // as stored in T
    std::vector<T> weight_storage, bias_storage;

    parameter_t<matrix_view<T>> w() const {
        return l.weight ? parameter_t<matrix_view<T>>(weight_storage) : parameter_t<matrix_view<T>>{};
    }
    parameter_t<matrix_view<T>> b() const {
        return l.bias ? parameter_t<matrix_view<T>>(bias_storage) : parameter_t<matrix_view<T>>{};
    }
    std::vector<double> w_ref() const { return l.weight ? weight : std::vector<double>{}; }
    std::vector<double> b_ref() const { return l.bias ? bias : std::vector<double>{}; }
};

// "k: a vs b" at the first entry where two outputs differ (NaN = NaN).
std::string first_difference(const std::vector<double>& a, const std::vector<double>& b) {
    for (std::size_t k = 0; k < a.size(); ++k)
        if (!(a[k] == b[k] || (std::isnan(a[k]) && std::isnan(b[k]))))
            return std::to_string(k) + ": " + std::to_string(a[k]) + " vs " + std::to_string(b[k]);
    return "none (NaN bits or signed zero)";
}

// Runs forward(x, y, threads, stream_above_bytes) out of place and single-threaded, then again
// with the case's threads, streaming and in-place choices; the two must give the same bits.
template <class T, class Forward>
fuzz::matrix<T> run_twice(const norm_case<T>& c, const char* name, Forward&& forward) {
    const auto& l = c.l;
    fuzz::matrix<T> x(l.rows, l.cols, l.padding, l.unaligned), y(l.rows, l.cols, l.padding + 1, !l.unaligned);
    x.set(c.x);
    forward(matrix_view<const T>(x.view), y.view, 1, default_stream_above_bytes);
    check(y.padding_untouched(), name, ": wrote outside the output view");
    const std::size_t stream = l.streamed ? 0 : default_stream_above_bytes;
    if (l.in_place) {
        fuzz::matrix<T> z(l.rows, l.cols, l.padding, l.unaligned);
        z.set(c.x);
        forward(matrix_view<const T>(z.view), z.view, l.threads, stream);
        check(fuzz::same_bits(z.elements(), y.elements()), name, " ", fuzz::type_name<T>(), ": in place (threads ",
              l.threads, ", streamed ", l.streamed, ") differs from out of place (", l.rows, "x", l.cols, ", padding ",
              l.padding, ", unaligned ", l.unaligned, ", first difference ", first_difference(z.values(), y.values()),
              ")");
    } else {
        fuzz::matrix<T> z(l.rows, l.cols, l.padding, l.unaligned);
        forward(matrix_view<const T>(x.view), z.view, l.threads, stream);
        check(fuzz::same_bits(z.elements(), y.elements()), name, " ", fuzz::type_name<T>(), ": threads ", l.threads,
              " streamed ", l.streamed, " differ from one thread, not streamed (", l.rows, "x", l.cols, ", padding ",
              l.padding, ", unaligned ", l.unaligned, ", first difference ", first_difference(z.values(), y.values()),
              ")");
    }
    return y;
}

// Rows that qualify agree with the reference within tolerance (relative to the row's terms).
template <class T, class Qualifies>
void compare_rows(const norm_case<T>& c, const char* name, const std::vector<double>& actual,
                  const std::vector<double>& expected, const std::vector<double>& terms, double tolerance,
                  Qualifies&& qualifies) {
    for (index_type i = 0; i < c.l.rows; ++i) {
        const auto row = row_of(c.x, i, c.l.cols), want = row_of(expected, i, c.l.cols);
        bool qualified;
        if constexpr (std::is_invocable_v<Qualifies, const std::vector<double>&, index_type>)
            qualified = qualifies(row, i);
        else
            qualified = qualifies(row);
        if (!qualified || !representable<T>(want)) continue;
        const double error = fuzz::relative_error(row_of(actual, i, c.l.cols), want, terms.empty() ? 0.0 : terms[i]);
        if (std::getenv("NORMKIT_FUZZ_VERBOSE") && !(error < tolerance))
            for (index_type j = 0; j < c.l.cols; ++j)
                std::fprintf(stderr, "row %td [%td] x %.9g -> %.9g (reference %.9g)\n", i, j, row[j],
                             actual[i * c.l.cols + j], want[j]);
        check(error < tolerance, name, " ", fuzz::type_name<T>(), ": row ", i, " of ", c.l.rows, "x", c.l.cols,
              " relative error ", error, " > ", tolerance, " (eps ", c.l.eps, ")");
    }
}

template <class T>
void rms(const norm_case<T>& c, fuzz::source& in) {
    const auto& l = c.l;
    norm::rms_norm_options options;
    options.eps = l.eps;
    options.offset = in.flag();
    options.casting = in.flag() ? norm::rms_norm_casting::llama : norm::rms_norm_casting::gemma;
    std::vector<core::statistic_t<T>> rstd(static_cast<std::size_t>(l.rows));
    const auto y = run_twice<T>(c, "rms_norm_forward", [&](auto x, auto out, int threads, std::size_t stream) {
        auto o = options;
        o.threads = threads;
        o.stream_above_bytes = stream;
        norm::rms_norm_forward(x, c.w(), out,
                               threads == 1 ? statistics_t<matrix_view<T>>(rstd) : statistics_t<matrix_view<T>>{}, o);
    });
    std::vector<double> y_ref, rstd_ref;
    reference::rms_norm_forward(c.x, {l.rows, l.cols}, c.w_ref(), options.offset, l.eps, y_ref, rstd_ref);
    const auto actual = y.values();
    compare_rows<T>(c, "rms_norm_forward", actual, y_ref, {}, 4 * fuzz::tolerance<T>(), [&](const auto& row) {
        return fuzz::all_finite(c.w_ref()) && ordinary_sum_of_squares<T>(row, l.eps);
    });
    // An all-zero row: r = 1/√ε, y = 0 (rms_norm.hpp), with a finite weight.
    for (index_type i = 0; i < l.rows; ++i) {
        const auto row = row_of(c.x, i, l.cols);
        if (fuzz::max_abs(row) != 0 || !fuzz::all_finite(c.w_ref())) continue;
        for (double value : row_of(actual, i, l.cols))
            check(value == 0, "rms_norm_forward ", fuzz::type_name<T>(), ": an all-zero row gives ", value,
                  ", documented 0 (eps ", l.eps, ")");
    }
    // The backward, on the rows the forward's tolerance covers.
    const auto dy_values = fuzz::stored<T>(read_rows(in, l.rows, l.cols, 3));
    bool ordinary = fuzz::all_finite(dy_values) && fuzz::all_finite(c.w_ref());
    for (index_type i = 0; i < l.rows; ++i)
        ordinary = ordinary && ordinary_sum_of_squares<T>(row_of(c.x, i, l.cols), l.eps);
    if (!ordinary || l.eps < 1e-30) return;
    fuzz::matrix<T> x(l.rows, l.cols, l.padding, l.unaligned), dy(l.rows, l.cols, 0, false),
        dx(l.rows, l.cols, 1, true);
    x.set(c.x);
    dy.set(dy_values);
    using S = core::statistic_t<T>;
    std::vector<S> dweight(static_cast<std::size_t>(l.cols)), dweight_threads(dweight.size());
    norm::rms_norm_backward(dy.view, x.view, c.w(), dx.view, dweight, rstd, options);
    auto threaded = options;
    threaded.threads = l.threads;
    norm::rms_norm_backward(dy.view, x.view, c.w(), {}, dweight_threads, rstd, threaded);
    check(fuzz::same_bits(dweight, dweight_threads), "rms_norm_backward: dw differs with threads ", l.threads,
          " and no dx");
    std::vector<double> dx_ref, dw_ref;
    reference::rms_norm_backward(dy_values, c.x, {l.rows, l.cols}, c.w_ref(), options.offset, l.eps, dx_ref, dw_ref);
    const double w_size = c.l.weight ? 1.0 + fuzz::max_abs(c.weight) : 1.0;
    const double terms = fuzz::max_abs(rstd_ref) * fuzz::max_abs(dy_values) * w_size;
    // g = dy⊙w_eff must be representable in the compute type (rms_norm.hpp, "Range"; F18).
    const bool representable_g = fuzz::max_abs(dy_values) * w_size < fuzz::largest<T>() / 4;
    const double dx_tolerance =
        std::is_same_v<T, double> ? 1e-10 : (std::is_same_v<T, float> ? 1e-4 : 4 * fuzz::tolerance<T>());
    if (representable<T>(dx_ref) && terms < fuzz::largest<T>() / 4 && representable_g) {
        const double error = fuzz::relative_error(dx.values(), dx_ref, terms);
        if (std::getenv("NORMKIT_FUZZ_VERBOSE") && !(error < dx_tolerance))
            for (std::size_t k = 0; k < dx_ref.size(); ++k)
                std::fprintf(stderr, "[%zu] x %.9g dy %.9g w %.9g rstd %.9g -> dx %.9g (reference %.9g)\n", k, c.x[k],
                             dy_values[k], c.l.weight ? c.weight[k % static_cast<std::size_t>(l.cols)] : 1.0,
                             static_cast<double>(rstd[k / static_cast<std::size_t>(l.cols)]), dx.values()[k],
                             dx_ref[k]);
        check(error < dx_tolerance, "rms_norm_backward ", fuzz::type_name<T>(), ": dx relative error ", error);
    }
}

template <class T>
void layer(const norm_case<T>& c, fuzz::source& in) {
    const auto& l = c.l;
    norm::layer_norm_options options;
    options.eps = l.eps;
    using S = core::statistic_t<T>;
    std::vector<S> mean(static_cast<std::size_t>(l.rows)), rstd(mean.size());
    const auto y = run_twice<T>(c, "layer_norm_forward", [&](auto x, auto out, int threads, std::size_t stream) {
        auto o = options;
        o.threads = threads;
        o.stream_above_bytes = stream;
        if (threads == 1)
            norm::layer_norm_forward(x, c.w(), c.b(), out, mean, rstd, o);
        else
            norm::layer_norm_forward(x, c.w(), c.b(), out, {}, {}, o);
    });
    std::vector<double> y_ref, mean_ref, rstd_ref;
    reference::layer_norm_forward(c.x, {l.rows, l.cols}, c.w_ref(), c.b_ref(), l.eps, y_ref, mean_ref, rstd_ref);
    const auto actual = y.values();
    // On layer_norm.hpp's scale |γ|(1 + |x̂|) + |β|: the bias may cancel the rest, and where ε dominates
    // the variance x̂ is tiny while x − μ still carries the rounding of x's own offset (FINDINGS.md F15).
    std::vector<double> terms(static_cast<std::size_t>(l.rows), 0.0);
    for (index_type i = 0; i < l.rows; ++i)
        for (index_type j = 0; j < l.cols; ++j) {
            const double xhat = (c.x[i * l.cols + j] - mean_ref[i]) * rstd_ref[i];
            terms[i] = std::max(terms[i], std::abs(l.weight ? c.weight[j] : 1.0) * (1 + std::abs(xhat)) +
                                              (l.bias ? std::abs(c.bias[j]) : 0.0));
        }
    const auto parameters_finite = fuzz::all_finite(c.w_ref()) && fuzz::all_finite(c.b_ref());
    compare_rows<T>(c, "layer_norm_forward", actual, y_ref, terms, 4 * fuzz::tolerance<T>(),
                    [&](const auto& row, index_type i) {
                        if (!parameters_finite || !ordinary_sum_of_squares<T>(row, l.eps)) return false;
                        // With the scale itself beyond the type's range, γ·x̂ + β may overflow without an FMA (layer_norm.hpp; F17).
                        if (!(terms[static_cast<std::size_t>(i)] < fuzz::largest<T>() / 4)) return false;
                        // Centred moments: the row's spread (not its offset) must stay in range too.
                        long double mu = 0, variance = 0;
                        for (double v : row) mu += v;
                        mu /= static_cast<long double>(row.size());
                        for (double v : row) variance += (v - mu) * (v - mu);
                        variance /= static_cast<long double>(row.size());
                        return static_cast<double>(variance) + l.eps >= (std::is_same_v<T, double> ? 1e-290 : 1e-30);
                    });
    // A constant row: σ² = 0 exactly, x̂ = 0, y = β (layer_norm.hpp).
    for (index_type i = 0; i < l.rows; ++i) {
        const auto row = row_of(c.x, i, l.cols);
        if (!fuzz::all_finite(row) || !parameters_finite) continue;
        if (std::any_of(row.begin(), row.end(), [&](double v) { return v != row[0]; })) continue;
        for (index_type j = 0; j < l.cols; ++j) {
            const double expected = l.bias ? c.bias[j] : 0.0;
            check(actual[i * l.cols + j] == expected, "layer_norm_forward ", fuzz::type_name<T>(), ": constant row ", i,
                  " gives ", actual[i * l.cols + j], " at ", j, ", documented beta = ", expected, " (eps ", l.eps, ")");
        }
    }
    // The backward: dγ and dβ do not depend on the thread count or on dx being asked for.
    const auto dy_values = fuzz::stored<T>(read_rows(in, l.rows, l.cols, 3));
    fuzz::matrix<T> x(l.rows, l.cols, l.padding, l.unaligned), dy(l.rows, l.cols, 0, false),
        dx(l.rows, l.cols, 1, true);
    x.set(c.x);
    dy.set(dy_values);
    std::vector<S> dw(static_cast<std::size_t>(l.cols)), db(dw.size()), dw2(dw.size()), db2(dw.size());
    norm::layer_norm_backward(dy.view, x.view, c.w(), dx.view, dw, db, mean, rstd, options);
    auto threaded = options;
    threaded.threads = l.threads;
    norm::layer_norm_backward(dy.view, x.view, c.w(), {}, dw2, db2, mean, rstd, threaded);
    check(fuzz::same_bits(dw, dw2) && fuzz::same_bits(db, db2),
          "layer_norm_backward: dgamma/dbeta differ with threads ", l.threads, " and no dx");
    bool ordinary = fuzz::all_finite(dy_values) && parameters_finite && l.eps >= 1e-12;
    for (index_type i = 0; i < l.rows && ordinary; ++i) {
        const auto row = row_of(c.x, i, l.cols);
        ordinary = ordinary_sum_of_squares<T>(row, l.eps) && rstd_ref[i] * fuzz::max_abs(row) < 1e6;
    }
    if (!ordinary) return;
    std::vector<double> dx_ref, dw_ref, db_ref;
    reference::layer_norm_backward(dy_values, c.x, {l.rows, l.cols}, c.w_ref(), l.eps, dx_ref, dw_ref, db_ref);
    const double w_size = l.weight ? std::max(1.0, fuzz::max_abs(c.weight)) : 1.0;
    const double scale = fuzz::max_abs(rstd_ref) * fuzz::max_abs(dy_values) * w_size;
    const double dx_tolerance =
        std::is_same_v<T, double> ? 1e-10 : (std::is_same_v<T, float> ? 1e-4 : 4 * fuzz::tolerance<T>());
    // g = dy⊙γ must be representable in the compute type (layer_norm.hpp, "Range"; F19).
    const bool representable_g = fuzz::max_abs(dy_values) * w_size < fuzz::largest<T>() / 4;
    if (representable<T>(dx_ref) && scale < fuzz::largest<T>() / 4 && representable_g) {
        const double error = fuzz::relative_error(dx.values(), dx_ref, scale);
        if (std::getenv("NORMKIT_FUZZ_VERBOSE") && !(error < dx_tolerance))
            for (std::size_t k = 0; k < dx_ref.size(); ++k)
                std::fprintf(stderr, "[%zu] x %.9g dy %.9g -> dx %.9g (reference %.9g)\n", k, c.x[k], dy_values[k],
                             dx.values()[k], dx_ref[k]);
        check(error < dx_tolerance, "layer_norm_backward ", fuzz::type_name<T>(), ": dx relative error ", error);
    }
}

template <class T>
void fused_add(const norm_case<T>& c, fuzz::source& in) {
    const auto& l = c.l;
    norm::rms_norm_options options;
    options.eps = l.eps;
    options.offset = in.flag();
    options.threads = l.threads;
    options.stream_above_bytes = l.streamed ? 0 : default_stream_above_bytes;
    const auto residual_values = fuzz::stored<T>(read_rows(in, l.rows, l.cols, 4));
    fuzz::matrix<T> x(l.rows, l.cols, l.padding, l.unaligned), h(l.rows, l.cols, 0, !l.unaligned),
        y(l.rows, l.cols, 2, true), expected_h(l.rows, l.cols, 0, false), expected_y(l.rows, l.cols, 0, false);
    x.set(c.x);
    h.set(residual_values);
    // Documented: bit for bit "add in T, then rms_norm_forward".
    for (index_type i = 0; i < l.rows; ++i)
        for (index_type j = 0; j < l.cols; ++j)
            expected_h.view(i, j) =
                core::from_compute<T>(core::to_compute(x.view(i, j)) + core::to_compute(h.view(i, j)));
    norm::fused_add_rms_norm_forward(x.view, c.w(), h.view, y.view, {}, options);
    auto plain = options;
    plain.threads = 1;
    plain.stream_above_bytes = default_stream_above_bytes;
    norm::rms_norm_forward(expected_h.view, c.w(), expected_y.view, {}, plain);
    check(fuzz::same_bits(h.elements(), expected_h.elements()), "fused_add_rms_norm_forward ", fuzz::type_name<T>(),
          ": the residual is not input + residual rounded to T");
    check(fuzz::same_bits(y.elements(), expected_y.elements()), "fused_add_rms_norm_forward ", fuzz::type_name<T>(),
          ": the output is not rms_norm_forward of the new residual (threads ", l.threads, ", streamed ", l.streamed,
          ")");
    check(y.padding_untouched() && h.padding_untouched(), "fused_add_rms_norm_forward: wrote outside a view");
}

template <class T>
void l2(const norm_case<T>& c, fuzz::source& in) {
    const auto& l = c.l;
    const double gains[] = {1.0, 0.5, -3.0, 0.0, 40.0};
    const double gain = in.pick(gains);
    norm::l2_norm_options options;
    options.eps = l.eps;
    const auto y = run_twice<T>(c, "l2_norm_forward", [&](auto x, auto out, int threads, std::size_t) {
        auto o = options;
        o.threads = threads;
        norm::l2_norm_forward(x, gain, out, o);
    });
    const auto y_ref = reference::l2_norm_forward(c.x, {l.rows, l.cols}, gain, l.eps);
    const auto actual = y.values();
    compare_rows<T>(c, "l2_norm_forward", actual, y_ref, {}, 4 * fuzz::tolerance<T>(), [&](const auto& row) {
        long double squares = 0;
        for (double v : row) squares += static_cast<long double>(v) * v;
        const double low = std::is_same_v<T, double> ? 1e-290 : 1e-30;
        return fuzz::all_finite(row) && ordinary_sum_of_squares<T>(row, 0) &&
               std::max<double>(static_cast<double>(squares), l.eps * l.eps) >= low;
    });
    for (index_type i = 0; i < l.rows; ++i) {
        if (fuzz::max_abs(row_of(c.x, i, l.cols)) != 0) continue;
        for (double value : row_of(actual, i, l.cols))
            check(value == 0, "l2_norm_forward ", fuzz::type_name<T>(), ": an all-zero row gives ", value, " (eps ",
                  l.eps, ")");
    }
}

template <class T>
void pointwise(const norm_case<T>& given, fuzz::source& in, bool erf) {
    auto c = given;
    const auto& l = c.l;
    const double alphas[] = {0.5, 1.0, -2.0, 1e-3, 30.0, 0.0};
    const double alpha = in.pick(alphas), shift = erf ? in.uniform(-2, 2) : 0.0;
    const auto y =
        run_twice<T>(c, erf ? "derf_forward" : "dyt_forward", [&](auto x, auto out, int threads, std::size_t stream) {
            norm::dyt_options o;  // derf_options has the same fields
            o.threads = threads;
            o.stream_above_bytes = stream;
            if (erf) {
                norm::derf_options d;
                d.threads = threads;
                d.stream_above_bytes = stream;
                norm::derf_forward(x, alpha, shift, c.w(), c.b(), out, d);
            } else {
                norm::dyt_forward(x, alpha, c.w(), c.b(), out, o);
            }
        });
    const auto y_ref = erf ? reference::derf_forward(c.x, l.cols, alpha, shift, c.w_ref(), c.b_ref())
                           : reference::dyt_forward(c.x, l.cols, alpha, c.w_ref(), c.b_ref());
    std::vector<double> terms(static_cast<std::size_t>(l.rows), 0.0);
    for (index_type i = 0; i < l.rows; ++i)
        for (index_type j = 0; j < l.cols; ++j)
            terms[i] =
                std::max(terms[i], (l.weight ? std::abs(c.weight[j]) : 1.0) + (l.bias ? std::abs(c.bias[j]) : 0.0));
    const bool parameters_finite = fuzz::all_finite(c.w_ref()) && fuzz::all_finite(c.b_ref());
    compare_rows<T>(c, erf ? "derf_forward" : "dyt_forward", y.values(), y_ref, terms, 2 * fuzz::tolerance<T>(),
                    [&](const auto& row) {
                        // αx must be a float (not an overflow to inf, whose tanh is still ±1, but keep to range)
                        return parameters_finite && fuzz::all_finite(row) &&
                               fuzz::max_abs(row) * std::abs(alpha) < 1e30;
                    });
}

template <class T>
void qk_rms(const norm_case<T>& c, fuzz::source& in) {
    const auto& l = c.l;
    norm::rms_norm_options options;
    options.eps = l.eps;
    options.offset = in.flag();
    options.threads = l.threads;
    const auto key_values = fuzz::stored<T>(read_rows(in, l.rows + 1, l.cols, 10));
    fuzz::matrix<T> q(l.rows, l.cols, l.padding, l.unaligned), k(l.rows + 1, l.cols, 0, false),
        q_out(l.rows, l.cols, 0, false), k_out(l.rows + 1, l.cols, 1, true), q_expected(l.rows, l.cols, 0, false),
        k_expected(l.rows + 1, l.cols, 0, false);
    q.set(c.x);
    k.set(key_values);
    // Documented: the per-head form is rms_norm_forward on rows of head_dim, bit for bit.
    norm::qk_rms_norm_forward(q.view, k.view, c.w(), c.b(), q_out.view, k_out.view, {}, {}, options);
    auto plain = options;
    plain.threads = 1;
    norm::rms_norm_forward(q.view, c.w(), q_expected.view, {}, plain);
    norm::rms_norm_forward(k.view, c.b(), k_expected.view, {}, plain);
    check(fuzz::same_bits(q_out.elements(), q_expected.elements()) &&
              fuzz::same_bits(k_out.elements(), k_expected.elements()),
          "qk_rms_norm_forward ", fuzz::type_name<T>(), ": not rms_norm_forward on the head rows (threads ", l.threads,
          ")");
}

template <class T>
void run(fuzz::source& in) {
    norm_case<T> c;
    c.l = read_layout(in);
    const auto which = static_cast<method>(in.integer<int>(0, 6));
    c.x = fuzz::stored<T>(read_rows(in, c.l.rows, c.l.cols, std::is_same_v<T, Eigen::half> ? 4 : 30));
    c.weight = fuzz::stored<T>(read_rows(in, 1, c.l.cols, 1));
    c.bias = fuzz::stored<T>(read_rows(in, 1, c.l.cols, 1));
    c.weight_storage = fuzz::to_storage<T>(c.weight);
    c.bias_storage = fuzz::to_storage<T>(c.bias);
    switch (which) {
        case method::rms:
            return rms(c, in);
        case method::layer:
            return layer(c, in);
        case method::fused_add:
            return fused_add(c, in);
        case method::l2:
            return l2(c, in);
        case method::dyt:
            return pointwise(c, in, false);
        case method::derf:
            return pointwise(c, in, true);
        case method::qk_rms:
            return qk_rms(c, in);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::source in(data, size);
    switch (in.integer<int>(0, 3)) {
        case 0:
            run<float>(in);
            break;
        case 1:
            run<double>(in);
            break;
        case 2:
            run<Eigen::bfloat16>(in);
            break;
        default:
            run<Eigen::half>(in);
            break;
    }
    return 0;
}
