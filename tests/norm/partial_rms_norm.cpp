// pRMSNorm forward and backward against tests/reference/norm.hpp, in both conventions (the
// paper's ⌈p·n⌉ with ε inside, the authors' ⌊p·n⌋ with ε outside), and p = 1 as RMSNorm.
#include "golden_rmsnorm.hpp"
#include "methods.hpp"
#include "reference/norm.hpp"
#include "support.hpp"

#include <normkit/norm/partial_rms_norm.hpp>
#include <normkit/norm/presets.hpp>

#include <cmath>
#include <cstring>

using namespace normkit;
using namespace normkit::testing;

namespace {

norm::partial_rms_norm_options convention(double p, bool authors) {
    norm::partial_rms_norm_options options =
        authors ? norm::presets::zhang_sennrich_prmsnorm(p) : norm::partial_rms_norm_options{};
    options.p = p;
    return options;
}

template <class T>
void check_forward_backward(index_type rows, index_type n, index_type padding,
                            const norm::partial_rms_norm_options& base, bool offset, bool has_weight,
                            std::uint32_t seed) {
    auto options = base;
    options.offset = offset;
    const index_type k = norm::partial_rms_count(n, options);
    INFO(type_name<T>() << " rows " << rows << " n " << n << " k " << k << " padding " << padding << " offset "
                        << offset << " weight " << has_weight << " eps outside " << options.eps_outside);
    test_matrix<T> x(rows, n, random_values(rows * n, seed, 0.3, 2.0), padding);
    test_matrix<T> y(rows, n, padding + 2), dy(rows, n, random_values(rows * n, seed + 1), padding),
        dx(rows, n, padding);
    const auto weight_values =
        has_weight ? stored<T>(random_values(n, seed + 2, offset ? 0.0 : 1.0, 0.5)) : std::vector<double>{};
    const auto weight = to_storage<T>(weight_values);
    std::vector<core::statistic_t<T>> rstd(rows), dweight(n);

    norm::partial_rms_norm_forward(x.view, weight, y.view, rstd, options);
    std::vector<double> y_ref, rstd_ref;
    reference::partial_rms_norm_forward(x.values(), {rows, n}, weight_values, offset, options.eps, k,
                                        options.eps_outside, y_ref, rstd_ref);
    CHECK(relative_error(y.values(), y_ref) < tolerance<T>() * 4);
    CHECK(relative_error(to_double(rstd), rstd_ref) < std::max(tolerance<T>(), 2e-6));
    CHECK(y.padding_untouched());

    norm::partial_rms_norm_backward(dy.view, x.view, weight, dx.view, dweight, rstd, options);
    std::vector<double> dx_ref, dweight_ref;
    reference::partial_rms_norm_backward(dy.values(), x.values(), {rows, n}, weight_values, offset, options.eps, k,
                                         options.eps_outside, dx_ref, dweight_ref);
    const double gradient_tolerance =
        std::is_same_v<T, double> ? 1e-10 : (std::is_same_v<T, float> ? 1e-4 : tolerance<T>() * 4);
    const double terms = max_abs(rstd_ref) * max_abs(dy.values()) * (has_weight ? 1.0 + max_abs(weight_values) : 1.0);
    CHECK(relative_error(dx.values(), dx_ref, terms) < gradient_tolerance);
    CHECK(relative_error(to_double(dweight), dweight_ref) < (std::is_same_v<T, double> ? 1e-11 : 1e-4));
    CHECK(dx.padding_untouched());
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// pRMSNorm in the generic norm tests (tests/norm/methods.hpp), the paper's convention at p = 0.3.
const register_row_method partial_rms_norm_entry{
    {"partial_rms_norm",
     [](matrix_view<const float> x, matrix_view<float> y, const row_run& run) {
         const std::vector<float> weight(static_cast<std::size_t>(x.cols), 1.0f);
         norm::partial_rms_norm_forward(x, weight, y, {}, with_run(convention(0.3, false), run));
     },
     [](const test_matrix<float>& x, const test_matrix<float>& dy, const streaming_options& execution) {
         const index_type rows = x.view.rows, n = x.view.cols;
         const auto weight = to_storage<float>(random_values(n, 27, 1.0, 0.2));
         auto options = convention(0.3, false);
         set_execution(options, execution);
         test_matrix<float> y(rows, n), dx(rows, n);
         std::vector<float> rstd(rows), dweight(n);
         norm::partial_rms_norm_forward(x.view, weight, y.view, rstd, options);
         norm::partial_rms_norm_backward(dy.view, x.view, weight, dx.view, dweight, rstd, options);
         return std::vector<std::vector<float>>{storage_of(y), rstd, storage_of(dx), dweight};
     }}};

}  // namespace

TEMPLATE_TEST_CASE("partial_rms_norm matches the reference over SIMD tails, strides and unaligned rows",
                   "[partial_rms_norm]", float, double, Eigen::bfloat16, Eigen::half) {
    std::uint32_t seed = 300;
    for (bool authors : {false, true}) {
        for (double p : {0.0625, 0.3, 1.0}) {
            for (index_type n : tail_dims) {
                if (authors && std::floor(p * static_cast<double>(n)) < 1) continue;  // k = 0: an error, below
                check_forward_backward<TestType>(3, n, (n + 1) % 4, convention(p, authors), false, true, seed++);
                check_forward_backward<TestType>(2, n, 1, convention(p, authors), true, true, seed++);
                check_forward_backward<TestType>(2, n, 0, convention(p, authors), false, false, seed++);
            }
        }
    }
}

TEMPLATE_TEST_CASE("partial_rms_norm at p = 1 is rms_norm bit for bit, both castings", "[partial_rms_norm]", float,
                   double, Eigen::bfloat16, Eigen::half) {
    using T = TestType;
    using S = core::statistic_t<T>;
    std::uint32_t seed = 400;
    for (index_type n : tail_dims) {
        for (auto casting : {norm::rms_norm_casting::llama, norm::rms_norm_casting::gemma}) {
            INFO("n " << n << " llama " << (casting == norm::rms_norm_casting::llama));
            const index_type rows = 5;
            test_matrix<T> x(rows, n, random_values(rows * n, seed, 3.0, 2.0), 1),
                dy(rows, n, random_values(rows * n, seed + 1));
            const auto weight = to_storage<T>(random_values(n, seed + 2, 0.0, 0.5));
            seed += 3;
            norm::rms_norm_options rms;
            rms.offset = true;
            rms.casting = casting;
            norm::partial_rms_norm_options partial;
            partial.p = 1;
            partial.offset = true;
            partial.casting = casting;
            test_matrix<T> y(rows, n), y_partial(rows, n), dx(rows, n), dx_partial(rows, n);
            std::vector<S> rstd(rows), rstd_partial(rows), dw(n), dw_partial(n);
            norm::rms_norm_forward(x.view, weight, y.view, rstd, rms);
            norm::partial_rms_norm_forward(x.view, weight, y_partial.view, rstd_partial, partial);
            norm::rms_norm_backward(dy.view, x.view, weight, dx.view, dw, rstd, rms);
            norm::partial_rms_norm_backward(dy.view, x.view, weight, dx_partial.view, dw_partial, rstd_partial,
                                            partial);
            CHECK(same_bits(y.storage, y_partial.storage));
            CHECK(same_bits(rstd, rstd_partial));
            CHECK(same_bits(dx.storage, dx_partial.storage));
            CHECK(same_bits(dw, dw_partial));
        }
    }
}

TEST_CASE("partial_rms_norm gradients agree with central finite differences", "[partial_rms_norm]") {
    const index_type rows = 3, n = 21;
    const auto x = random_values(rows * n, 61), dy = random_values(rows * n, 62),
               weight = random_values(n, 63, 0.2, 0.5);
    for (bool authors : {false, true}) {
        for (double p : {0.2, 0.5, 1.0}) {
            INFO("p " << p << " authors " << authors);
            const auto options = convention(p, authors);
            const index_type k = norm::partial_rms_count(n, options);
            std::vector<double> y(rows * n), rstd(rows), dx(rows * n), dweight(n);
            norm::partial_rms_norm_forward(view(x.data(), rows, n), weight, view(y.data(), rows, n), rstd, options);
            norm::partial_rms_norm_backward(view(dy.data(), rows, n), view(x.data(), rows, n), weight,
                                            view(dx.data(), rows, n), dweight, rstd, options);
            const auto loss = [&](const std::vector<double>& xs, const std::vector<double>& w) {
                std::vector<double> out, r;
                reference::partial_rms_norm_forward(xs, {rows, n}, w, false, options.eps, k, options.eps_outside, out,
                                                    r);
                return dot(out, dy);
            };
            CHECK(relative_error(dx, finite_difference(x, [&](const auto& v) { return loss(v, weight); })) < 1e-7);
            CHECK(relative_error(dweight, finite_difference(weight, [&](const auto& v) { return loss(x, v); })) < 1e-7);
        }
    }
}

TEST_CASE("partial_rms_count: k = ⌈p·n⌉ (near-integers counted as integers) or the authors' ⌊p·n⌋",
          "[partial_rms_norm]") {
    const auto ceil_of = [](double p, index_type n) { return norm::partial_rms_count(n, convention(p, false)); };
    const auto floor_of = [](double p, index_type n) { return norm::partial_rms_count(n, convention(p, true)); };
    CHECK(ceil_of(0.0625, 128) == 8);
    CHECK(ceil_of(0.0625, 129) == 9);
    CHECK(ceil_of(0.07, 100) == 7);  // 0.07·100 = 7.000000000000001 in double
    CHECK(ceil_of(0.29, 100) == 29);
    CHECK(ceil_of(0.01, 5) == 1);
    CHECK(ceil_of(1.0, 37) == 37);
    CHECK(floor_of(0.29, 100) == 28);  // Python: int(100 * 0.29) == 28
    CHECK(floor_of(0.0625, 129) == 8);
    CHECK(floor_of(0.5, 3) == 1);
    CHECK(floor_of(1.0, 37) == 37);
    require_error_naming([&] { floor_of(0.1, 5); }, "p = 0.1");
    for (double bad : {0.0, -0.5, 1.5, std::nan("")}) require_error_naming([&] { ceil_of(bad, 8); }, "p must be in");
}

TEST_CASE("partial_rms_norm degenerate rows: the first k entries zero", "[partial_rms_norm]") {
    const index_type n = 16;
    std::vector<float> x(n, 0.0f), y(n), dy(n, 0.5f), dx(n), rstd(1), dweight(n);
    for (index_type j = 8; j < n; ++j) x[j] = 1.0f;  // k = 4 of 16: the statistic sees zeros only
    for (bool authors : {false, true}) {
        INFO("authors " << authors);
        const auto options = convention(0.25, authors);
        norm::partial_rms_norm_forward(view(x.data(), 1, n), {}, view(y.data(), 1, n), rstd, options);
        const double r = authors ? 1.0 / 1e-8 : 1.0 / std::sqrt(1e-6);
        CHECK(rstd[0] == Approx(r).epsilon(1e-6));
        for (index_type j = 0; j < n; ++j) CHECK(y[j] == Approx(x[j] * r).epsilon(1e-6));
        norm::partial_rms_norm_backward(view(dy.data(), 1, n), view(x.data(), 1, n), {}, view(dx.data(), 1, n), dweight,
                                        rstd, options);
        // dx = r·g beyond the first k; within them x̂ = 0, so dx = r·g there too.
        for (float value : dx) CHECK(value == Approx(0.5 * rstd[0]).epsilon(1e-6));
        for (index_type j = 0; j < n; ++j) CHECK(dweight[j] == Approx(0.5 * x[j] * rstd[0]).epsilon(1e-6));
    }
}

TEST_CASE("partial_rms_norm rejects bad p, naming it", "[partial_rms_norm][errors]") {
    std::vector<float> x(12, 1.0f), y(12), rstd(3);
    norm::partial_rms_norm_options bad;
    bad.p = 0;
    require_error_naming(
        [&] { norm::partial_rms_norm_forward(view(x.data(), 3, 4), {}, view(y.data(), 3, 4), {}, bad); },
        "p must be in (0, 1]");
    bad.p = 2;
    require_error_naming(
        [&] {
            norm::partial_rms_norm_backward(view(x.data(), 3, 4), view(x.data(), 3, 4), {}, view(y.data(), 3, 4), {},
                                            rstd, bad);
        },
        "p must be in (0, 1]");
    auto authors = norm::presets::zhang_sennrich_prmsnorm(0.2);
    require_error_naming(
        [&] { norm::partial_rms_norm_forward(view(x.data(), 3, 4), {}, view(y.data(), 3, 4), {}, authors); },
        "takes no entry of a row of n = 4");
}

// The authors' own RMSNorm(d, p) (bzhangGo/rmsnorm rmsnorm_torch.py), run by scripts/golden/rmsnorm.py
// in float64: presets::zhang_sennrich_prmsnorm(p) gives its y, dx and dscale.
TEST_CASE("partial_rms_norm with the authors' preset reproduces their RMSNorm(d, p)", "[partial_rms_norm][golden]") {
    const auto& cases = golden::rmsnorm::prmsnorm();
    REQUIRE(cases.size() >= 5);
    for (const auto& c : cases) {
        INFO(c.name);
        const auto rows = static_cast<index_type>(c.scalar("rows")), n = static_cast<index_type>(c.scalar("cols"));
        const auto options = norm::presets::zhang_sennrich_prmsnorm(c.scalar("p"));
        REQUIRE(options.eps == c.scalar("eps"));
        const std::vector<double> x = c["x"], dy = c["dy"], scale = c["scale"];
        std::vector<double> y(x.size()), dx(x.size()), rstd(rows), dscale(n);
        norm::partial_rms_norm_forward(view(x.data(), rows, n), scale, view(y.data(), rows, n), rstd, options);
        norm::partial_rms_norm_backward(view(dy.data(), rows, n), view(x.data(), rows, n), scale,
                                        view(dx.data(), rows, n), dscale, rstd, options);
        // The authors' r = 1/(‖x_{:k}‖·k^(−1/2) + ε) rounds differently from √(Σx²/k): relative 1e-12.
        golden::check_close(y.data(), c["y"], 1e-12);
        golden::check_close(dx.data(), c["dx"], 1e-10);
        golden::check_close(dscale.data(), c["dscale"], 1e-12);
    }
}
