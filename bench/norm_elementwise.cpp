// DyT, Derf, SeeDNorm and logit normalization, forward and backward, fp32 and
// bf16, single thread, against memcpy of the same bytes and the libtorch
// composition (PyTorch has no fused CPU kernel for any of them: the model code
// is the composition, its backward autograd's, timed as forward + backward
// since that is what autograd has to run).
//
// Bytes are the minimum traffic: forward reads x and writes y (2·E·s);
// backward reads x and dy and writes dx (3·E·s), s the element size. Logit
// normalization: the loss gradient reads the logits and writes the gradient
// (2·E·s); the selective score reads the logits (E·s, memcpy of the same).
// Shapes: 32 × 4096 (x and y fit in L2, where memcpy runs at about 80 GB/s
// and every tanh loop is bound by its arithmetic), 4096 × 4096 (64 MiB per
// fp32 tensor, inside the last-level cache of the README's machine: the shape
// where a bare tanh loop reaches the "about 83 %", so the DyT / Derf
// "in cache" target is read here), logits 256 × 1000 (ImageNet classes).
// `bare_tanh` / `bare_erf` are the bare loops y = tanh(αx) / erf(αx + s) over
// the same elements with the fast rational tanh / erf (what 16-bit rows and
// `normkit_fast_*` use), `xsimd_tanh` / `xsimd_erf` the same loops with xsimd's
// (what fp32 rows use by default): the ceilings the DyT / Derf target (80 % of
// memcpy) is read against. Labels end in :f32 or :bf16.
#include "harness.hpp"
#include "yardstick.hpp"

#include <normkit/core/math.hpp>
#include <normkit/norm/derf.hpp>
#include <normkit/norm/dyt.hpp>
#include <normkit/norm/logit_norm.hpp>
#include <normkit/norm/seed_norm.hpp>

#ifdef NORMKIT_HAVE_TORCH
#include <torch/torch.h>
#endif

#include <string>

namespace {

using namespace normkit;
using bench::register_case;

template <class T>
struct tensors {
    index_type rows, cols;
    std::vector<T> x, y, dy, dx, gamma, beta, alpha;
    std::vector<float> rstd, dgamma, dbeta, dalpha;
    tensors(index_type rows_, index_type cols_)
        : rows(rows_),
          cols(cols_),
          x(bench::uniform_values<T>(rows * cols, 1, -3, 3)),
          y(rows * cols),
          dy(bench::uniform_values<T>(rows * cols, 2, -1, 1)),
          dx(rows * cols),
          gamma(bench::uniform_values<T>(cols, 3, 0.5f, 1.5f)),
          beta(bench::uniform_values<T>(cols, 4, -0.1f, 0.1f)),
          alpha(bench::uniform_values<T>(cols, 5, 0.5f, 1.5f)),
          rstd(rows),
          dgamma(cols),
          dbeta(cols),
          dalpha(cols) {}
};

// Shared by every case of one shape and type, created on first use (the warm-up call).
template <class T>
struct lazy {
    index_type rows, cols;
    std::shared_ptr<tensors<T>> data;
    tensors<T>& get() {
        if (!data) data = std::make_shared<tensors<T>>(rows, cols);
        return *data;
    }
};

template <class T>
const char* suffix() {
    return std::is_same_v<T, float> ? ":f32" : ":bf16";
}

#ifdef NORMKIT_HAVE_TORCH
template <class T>
torch::Tensor wrap(std::vector<T>& values, std::vector<int64_t> sizes) {
    return torch::from_blob(values.data(), sizes, std::is_same_v<T, float> ? torch::kFloat32 : torch::kBFloat16);
}
#endif

// y = f(x) over a contiguous buffer, nothing else: the ceiling DyT and Derf
// are read against.
template <class C, class T, class F>
void bare_loop(const T* x, T* y, index_type count, F function) {
    core::for_each_batch<C>(count,
                            [&](index_type i, index_type c) { core::store(y + i, function(core::load(x + i, c)), c); });
    benchmark::DoNotOptimize(y);
}

// xsimd's own tanh and erf (normkit's float lanes use cheaper rationals,
// core/math.hpp), flattened for the reason math.hpp gives.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
template <class C>
[[gnu::flatten]] core::batch<C> xsimd_tanh(const core::batch<C>& x) {
    return xsimd::tanh(x);
}
template <class C>
[[gnu::flatten]] core::batch<C> xsimd_erf(const core::batch<C>& x) {
    return xsimd::erf(x);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

template <class T>
void register_pointwise(index_type rows, index_type cols) {
    const std::string label = std::to_string(rows) + "x" + std::to_string(cols) + suffix<T>();
    const double count = static_cast<double>(rows * cols);
    const double forward_bytes = 2 * count * sizeof(T), backward_bytes = 3 * count * sizeof(T);
    auto t = std::make_shared<lazy<T>>(lazy<T>{rows, cols, nullptr});
    bench::release_on_shape_change([t] { t->data.reset(); });
    const double alpha = 0.5, shift = 0.1;
    using C = core::compute_t<T>;

    bench::register_memcpy("dyt_forward", label, forward_bytes);
    register_case("dyt_forward", label, "normkit", forward_bytes, [=] {
        auto& d = t->get();
        norm::dyt_forward(view(d.x.data(), rows, cols), alpha, d.gamma, d.beta, view(d.y.data(), rows, cols));
    });
    // The fast form, and its bare loop: what the accurate default costs, in the same run.
    register_case("dyt_forward", label, "normkit_fast_tanh", forward_bytes, [=] {
        auto& d = t->get();
        norm::dyt_options fast;
        fast.fast_tanh = true;
        norm::dyt_forward(view(d.x.data(), rows, cols), alpha, d.gamma, d.beta, view(d.y.data(), rows, cols), fast);
    });
    register_case("dyt_forward", label, "bare_tanh", forward_bytes, [=] {
        auto& d = t->get();
        bare_loop<C>(d.x.data(), d.y.data(), rows * cols,
                     [a = core::batch<C>(static_cast<C>(alpha))](const auto& x) { return core::tanh<true>(x * a); });
    });
    register_case("dyt_forward", label, "xsimd_tanh", forward_bytes, [=] {
        auto& d = t->get();
        bare_loop<C>(d.x.data(), d.y.data(), rows * cols,
                     [a = core::batch<C>(static_cast<C>(alpha))](const auto& x) { return xsimd_tanh(x * a); });
    });
    register_case("dyt_forward", label, "yardstick", forward_bytes, [=] {
        auto& d = t->get();
        bench::yardstick::pointwise_forward<false>(d.x.data(), d.gamma.data(), d.beta.data(), d.y.data(), rows, cols,
                                                   static_cast<float>(alpha), 0.0f);
    });
    register_case("derf_forward", label, "yardstick", forward_bytes, [=] {
        auto& d = t->get();
        bench::yardstick::pointwise_forward<true>(d.x.data(), d.gamma.data(), d.beta.data(), d.y.data(), rows, cols,
                                                  static_cast<float>(alpha), static_cast<float>(shift));
    });
    bench::register_memcpy("dyt_backward", label, backward_bytes);
    register_case("dyt_backward", label, "normkit", backward_bytes, [=] {
        auto& d = t->get();
        benchmark::DoNotOptimize(norm::dyt_backward(view(d.dy.data(), rows, cols), view(d.x.data(), rows, cols), alpha,
                                                    d.gamma, view(d.dx.data(), rows, cols), d.dgamma, d.dbeta));
    });
    register_case("dyt_backward", label, "yardstick", backward_bytes, [=] {
        auto& d = t->get();
        benchmark::DoNotOptimize(bench::yardstick::pointwise_backward<false>(
            d.dy.data(), d.x.data(), d.gamma.data(), d.dx.data(), d.dgamma.data(), d.dbeta.data(), rows, cols,
            static_cast<float>(alpha), 0.0f));
    });
    bench::register_memcpy("derf_forward", label, forward_bytes);
    register_case("derf_forward", label, "normkit", forward_bytes, [=] {
        auto& d = t->get();
        norm::derf_forward(view(d.x.data(), rows, cols), alpha, shift, d.gamma, d.beta, view(d.y.data(), rows, cols));
    });
    register_case("derf_forward", label, "normkit_fast_erf", forward_bytes, [=] {
        auto& d = t->get();
        norm::derf_options fast;
        fast.fast_erf = true;
        norm::derf_forward(view(d.x.data(), rows, cols), alpha, shift, d.gamma, d.beta, view(d.y.data(), rows, cols),
                           fast);
    });
    register_case("derf_forward", label, "bare_erf", forward_bytes, [=] {
        auto& d = t->get();
        bare_loop<C>(d.x.data(), d.y.data(), rows * cols,
                     [a = core::batch<C>(static_cast<C>(alpha)),
                      s = core::batch<C>(static_cast<C>(shift))](const auto& x) { return core::erf<true>(x * a + s); });
    });
    register_case("derf_forward", label, "xsimd_erf", forward_bytes, [=] {
        auto& d = t->get();
        bare_loop<C>(d.x.data(), d.y.data(), rows * cols,
                     [a = core::batch<C>(static_cast<C>(alpha)),
                      s = core::batch<C>(static_cast<C>(shift))](const auto& x) { return xsimd_erf(x * a + s); });
    });
    bench::register_memcpy("derf_backward", label, backward_bytes);
    register_case("derf_backward", label, "normkit", backward_bytes, [=] {
        auto& d = t->get();
        benchmark::DoNotOptimize(norm::derf_backward(view(d.dy.data(), rows, cols), view(d.x.data(), rows, cols), alpha,
                                                     shift, d.gamma, view(d.dx.data(), rows, cols), d.dgamma, d.dbeta));
    });
    register_case("derf_backward", label, "yardstick", backward_bytes, [=] {
        auto& d = t->get();
        benchmark::DoNotOptimize(bench::yardstick::pointwise_backward<true>(
            d.dy.data(), d.x.data(), d.gamma.data(), d.dx.data(), d.dgamma.data(), d.dbeta.data(), rows, cols,
            static_cast<float>(alpha), static_cast<float>(shift)));
    });
    norm::seed_norm_options seed_options;
    seed_options.heads = 16;
    bench::register_memcpy("seed_norm_forward", label, forward_bytes);
    register_case("seed_norm_forward", label, "normkit", forward_bytes, [=] {
        auto& d = t->get();
        norm::seed_norm_forward(view(d.x.data(), rows, cols), d.alpha, d.beta, d.gamma, view(d.y.data(), rows, cols),
                                d.rstd, seed_options);
    });
    register_case("seed_norm_forward", label, "yardstick", forward_bytes, [=] {
        auto& d = t->get();
        bench::yardstick::seed_norm_forward(d.x.data(), d.alpha.data(), d.beta.data(), d.gamma.data(), d.y.data(),
                                            d.rstd.data(), rows, cols, seed_options.heads,
                                            static_cast<float>(seed_options.eps));
    });
    bench::register_memcpy("seed_norm_backward", label, backward_bytes);
    auto rstd_ready = std::make_shared<bool>(false);
    const auto with_rstd = [=]() -> tensors<T>& {
        auto& d = t->get();
        if (!*rstd_ready) {  // the forward's saved rstd, once (the warm-up call)
            norm::seed_norm_forward(view(d.x.data(), rows, cols), d.alpha, d.beta, d.gamma,
                                    view(d.y.data(), rows, cols), d.rstd, seed_options);
            *rstd_ready = true;
        }
        return d;
    };
    register_case("seed_norm_backward", label, "yardstick", backward_bytes, [=] {
        auto& d = with_rstd();
        bench::yardstick::seed_norm_backward(d.dy.data(), d.x.data(), d.alpha.data(), d.beta.data(), d.gamma.data(),
                                             d.rstd.data(), d.dx.data(), d.dalpha.data(), d.dbeta.data(),
                                             d.dgamma.data(), rows, cols, seed_options.heads);
    });
    register_case("seed_norm_backward", label, "normkit", backward_bytes, [=] {
        auto& d = with_rstd();
        norm::seed_norm_backward(view(d.dy.data(), rows, cols), view(d.x.data(), rows, cols), d.alpha, d.beta, d.gamma,
                                 view(d.dx.data(), rows, cols), d.dalpha, d.dbeta, d.dgamma, d.rstd, seed_options);
    });

#ifdef NORMKIT_HAVE_TORCH
    // The compositions a model writes, forward under no_grad, backward through autograd.
    register_case("dyt_forward", label, "torch", forward_bytes, [=] {
        auto& d = t->get();
        at::set_num_threads(1);
        torch::NoGradGuard no_grad;
        auto y = wrap(d.y, {rows, cols});
        y.copy_(torch::tanh(wrap(d.x, {rows, cols}) * alpha) * wrap(d.gamma, {cols}) + wrap(d.beta, {cols}));
    });
    register_case("derf_forward", label, "torch", forward_bytes, [=] {
        auto& d = t->get();
        at::set_num_threads(1);
        torch::NoGradGuard no_grad;
        auto y = wrap(d.y, {rows, cols});
        y.copy_(torch::erf(wrap(d.x, {rows, cols}) * alpha + shift) * wrap(d.gamma, {cols}) + wrap(d.beta, {cols}));
    });
    const auto scalar_options =
        torch::TensorOptions().dtype(std::is_same_v<T, float> ? torch::kFloat32 : torch::kBFloat16);
    register_case("dyt_backward", label, "torch", backward_bytes, [=] {
        auto& d = t->get();
        at::set_num_threads(1);
        auto x = wrap(d.x, {rows, cols}).detach().requires_grad_(true);
        auto a = torch::full({1}, alpha, scalar_options).requires_grad_(true);
        auto g = wrap(d.gamma, {cols}).detach().requires_grad_(true),
             b = wrap(d.beta, {cols}).detach().requires_grad_(true);
        (torch::tanh(x * a) * g + b).backward(wrap(d.dy, {rows, cols}));
        benchmark::DoNotOptimize(x.grad().data_ptr());
    });
    register_case("derf_backward", label, "torch", backward_bytes, [=] {
        auto& d = t->get();
        at::set_num_threads(1);
        auto x = wrap(d.x, {rows, cols}).detach().requires_grad_(true);
        auto a = torch::full({1}, alpha, scalar_options).requires_grad_(true),
             s = torch::full({1}, shift, scalar_options).requires_grad_(true);
        auto g = wrap(d.gamma, {cols}).detach().requires_grad_(true),
             b = wrap(d.beta, {cols}).detach().requires_grad_(true);
        (torch::erf(x * a + s) * g + b).backward(wrap(d.dy, {rows, cols}));
        benchmark::DoNotOptimize(x.grad().data_ptr());
    });
    const auto seed_norm_composition = [](const torch::Tensor& x, const torch::Tensor& a, const torch::Tensor& b,
                                          const torch::Tensor& g, int64_t rows_, int64_t cols_, int64_t heads) {
        const auto xf = x.to(torch::kFloat32);
        const auto seeds =
            torch::tanh((xf.view({rows_, heads, cols_ / heads}) * b.to(torch::kFloat32).view({heads, cols_ / heads}))
                            .sum(-1, true));
        const auto gain =
            (seeds * a.to(torch::kFloat32).view({heads, cols_ / heads})).view({rows_, cols_}) + g.to(torch::kFloat32);
        return (gain * xf * torch::rsqrt(xf.pow(2).mean(-1, true) + 1e-5)).to(x.scalar_type());
    };
    register_case("seed_norm_forward", label, "torch", forward_bytes, [=] {
        auto& d = t->get();
        at::set_num_threads(1);
        torch::NoGradGuard no_grad;
        wrap(d.y, {rows, cols})
            .copy_(seed_norm_composition(wrap(d.x, {rows, cols}), wrap(d.alpha, {cols}), wrap(d.beta, {cols}),
                                         wrap(d.gamma, {cols}), rows, cols, 16));
    });
    register_case("seed_norm_backward", label, "torch", backward_bytes, [=] {
        auto& d = t->get();
        at::set_num_threads(1);
        auto x = wrap(d.x, {rows, cols}).detach().requires_grad_(true);
        auto a = wrap(d.alpha, {cols}).detach().requires_grad_(true),
             b = wrap(d.beta, {cols}).detach().requires_grad_(true),
             g = wrap(d.gamma, {cols}).detach().requires_grad_(true);
        seed_norm_composition(x, a, b, g, rows, cols, 16).backward(wrap(d.dy, {rows, cols}));
        benchmark::DoNotOptimize(x.grad().data_ptr());
    });
#endif
}

template <class T>
void register_logits(index_type rows, index_type classes) {
    const std::string label = std::to_string(rows) + "x" + std::to_string(classes) + suffix<T>();
    const double count = static_cast<double>(rows * classes);
    auto t = std::make_shared<lazy<T>>(lazy<T>{rows, classes, nullptr});
    auto labels = std::make_shared<std::vector<index_type>>(rows);
    for (index_type i = 0; i < rows; ++i) (*labels)[i] = (i * 7919) % classes;
    auto scores = std::make_shared<std::vector<float>>(rows);

    bench::register_memcpy("logit_norm_loss_gradient", label, 2 * count * sizeof(T));
    register_case("logit_norm_loss_gradient", label, "normkit", 2 * count * sizeof(T), [=] {
        auto& d = t->get();
        benchmark::DoNotOptimize(
            norm::logit_norm_loss_gradient(view(d.x.data(), rows, classes), *labels, view(d.dx.data(), rows, classes)));
    });
    register_case("logit_norm_loss_gradient", label, "yardstick", 2 * count * sizeof(T), [=] {
        auto& d = t->get();
        benchmark::DoNotOptimize(
            bench::yardstick::logit_norm_loss_gradient(d.x.data(), labels->data(), d.dx.data(), rows, classes));
    });
    bench::register_memcpy("selective_score", label, count * sizeof(T));
    register_case("selective_score", label, "yardstick", count * sizeof(T), [=] {
        auto& d = t->get();
        bench::yardstick::selective_score(d.x.data(), scores->data(), rows, classes);
        benchmark::DoNotOptimize(scores->data());
    });
    register_case("selective_score", label, "normkit", count * sizeof(T), [=] {
        auto& d = t->get();
        norm::selective_classification_score(view(d.x.data(), rows, classes), *scores);  // p = 2, the default
        benchmark::DoNotOptimize(scores->data());
    });
#ifdef NORMKIT_HAVE_TORCH
    register_case("logit_norm_loss_gradient", label, "torch", 2 * count * sizeof(T), [=] {
        auto& d = t->get();
        at::set_num_threads(1);
        auto f = wrap(d.x, {rows, classes}).detach().requires_grad_(true);
        const auto target = torch::from_blob(labels->data(), {rows}, torch::kInt64);
        const auto normalized = f / (f.norm(2, -1, true) + 1e-7);
        torch::nn::functional::cross_entropy(normalized, target).backward();
        benchmark::DoNotOptimize(f.grad().data_ptr());
    });
    register_case("selective_score", label, "torch", count * sizeof(T), [=] {
        auto& d = t->get();
        at::set_num_threads(1);
        torch::NoGradGuard no_grad;
        const auto z = wrap(d.x, {rows, classes}).to(torch::kFloat32);
        const auto centered = z - z.mean(-1, true);
        const auto s = std::get<0>(centered.max(-1)) / centered.norm(2, -1);
        benchmark::DoNotOptimize(s.data_ptr());
    });
#endif
}

const bool registered = [] {
    for (index_type rows : {index_type(32), index_type(4096)}) {
        register_pointwise<float>(rows, 4096);
        register_pointwise<Eigen::bfloat16>(rows, 4096);
    }
    register_logits<float>(256, 1000);
    register_logits<Eigen::bfloat16>(256, 1000);
    return true;
}();

}  // namespace
