// QK-norm (per-head RMSNorm, full-width RMSNorm, the original L2 form), L2
// normalization and fused add + RMSNorm, forward and backward, fp32 and bf16,
// single thread, against memcpy of the same bytes and the libtorch composition
// (PyTorch has no fused CPU kernel for any of these: the model code is this
// composition, and its backward is autograd's).
//
// Bytes are the minimum traffic. QK forms: read q and k, write both (4·E·s);
// backward: read q, k, dq′, dk′ and write dq, dk (6·E·s), with E the elements of
// one of q, k and s the element size. Fused add + RMSNorm: read x and s, write
// s and y (4·E·s); backward: read dy, h, d and write d (4·E·s).
// Shapes: QK is 16384 tokens × 8 heads × 128 (the target) for q and k;
// the rows are short, so this measures the per-row overhead. The bf16-vs-fp32
// element rate beyond the last-level cache is rms_norm_forward on 65536 × 4096
// (fp32: 2 GiB of traffic, bf16: 1 GiB), labelled :f32 and :bf16.
#include "harness.hpp"
#include "yardstick.hpp"

#include <normkit/norm/fused_add_rms_norm.hpp>
#include <normkit/norm/l2_norm.hpp>
#include <normkit/norm/qk_norm.hpp>
#include <normkit/norm/rms_norm.hpp>

#ifdef NORMKIT_HAVE_TORCH
#include <torch/torch.h>
#endif

#include <map>
#include <string>

namespace {

using namespace normkit;
using bench::register_case;

// The buffers of one case, filled on first use so a filtered run allocates only what it times.
template <class T>
struct buffers {
    std::vector<T> q, k, q_out, k_out, dq_out, dk_out, dq, dk, weight, wide_weight;
    std::vector<float> q_rstd, k_rstd, dq_weight, dk_weight, wide_q_rstd, wide_k_rstd, wide_dq_weight, wide_dk_weight;
};

template <class T>
struct lazy {
    index_type rows, cols, tokens;
    std::shared_ptr<buffers<T>> data;
    buffers<T>& get() {
        if (!data) {
            const auto count = static_cast<std::size_t>(rows * cols);
            const auto width = static_cast<std::size_t>(rows / tokens * cols);
            data = std::make_shared<buffers<T>>(buffers<T>{
                bench::uniform_values<T>(count, 1, -2, 2), bench::uniform_values<T>(count, 2, -2, 2),
                std::vector<T>(count), std::vector<T>(count), bench::uniform_values<T>(count, 3, -1, 1),
                bench::uniform_values<T>(count, 4, -1, 1), std::vector<T>(count), std::vector<T>(count),
                bench::uniform_values<T>(cols, 5, 0.5f, 1.5f), bench::uniform_values<T>(width, 6, 0.5f, 1.5f),
                std::vector<float>(rows), std::vector<float>(rows), std::vector<float>(cols), std::vector<float>(cols),
                std::vector<float>(tokens), std::vector<float>(tokens), std::vector<float>(width),
                std::vector<float>(width)});
        }
        return *data;
    }
};

using bench::register_memcpy;

#ifdef NORMKIT_HAVE_TORCH
template <class T>
torch::Tensor wrap(std::vector<T>& values, at::IntArrayRef shape) {
    return torch::from_blob(values.data(), shape, std::is_same_v<T, float> ? torch::kFloat32 : torch::kBFloat16);
}
#endif

template <class T>
void register_qk(index_type tokens, index_type heads, index_type d) {
    const std::string type = std::is_same_v<T, float> ? "" : ":bf16";
    const std::string label = std::to_string(tokens) + "x" + std::to_string(heads) + "x" + std::to_string(d) + type;
    const index_type rows = tokens * heads;
    const double elements = static_cast<double>(rows * d), forward_bytes = 4 * elements * sizeof(T),
                 backward_bytes = 6 * elements * sizeof(T);
    auto data = std::make_shared<lazy<T>>(lazy<T>{rows, d, tokens, nullptr});
    bench::release_on_shape_change([data] { data->data.reset(); });
    const auto qwen3 = norm::presets::qwen3();
    const auto olmo2 = norm::presets::olmo2();
    const double gain = norm::qk_norm_initial_gain(4096);

    for (const char* operation : {"qk_rms_norm_forward", "qk_full_width_rms_norm_forward", "qk_l2_norm_forward"})
        register_memcpy(operation, label, forward_bytes);
    for (const char* operation : {"qk_rms_norm_backward", "qk_full_width_rms_norm_backward", "qk_l2_norm_backward"})
        register_memcpy(operation, label, backward_bytes);

    register_case("qk_rms_norm_forward", label, "normkit", forward_bytes, [=] {
        auto& b = data->get();
        norm::qk_rms_norm_forward(view(b.q.data(), rows, d), view(b.k.data(), rows, d), b.weight, b.weight,
                                  view(b.q_out.data(), rows, d), view(b.k_out.data(), rows, d), b.q_rstd, b.k_rstd,
                                  qwen3);
    });
    register_case("qk_rms_norm_backward", label, "normkit", backward_bytes, [=] {
        auto& b = data->get();
        norm::qk_rms_norm_backward(view(b.dq_out.data(), rows, d), view(b.dk_out.data(), rows, d),
                                   view(b.q.data(), rows, d), view(b.k.data(), rows, d), b.weight, b.weight,
                                   view(b.dq.data(), rows, d), view(b.dk.data(), rows, d), b.dq_weight, b.dk_weight,
                                   b.q_rstd, b.k_rstd, qwen3);
    });
    // The full-width form (OLMo2) is qk_rms_norm_forward with weights of heads·head_dim entries.
    register_case("qk_full_width_rms_norm_forward", label, "normkit", forward_bytes, [=] {
        auto& b = data->get();
        norm::qk_rms_norm_forward(view(b.q.data(), rows, d), view(b.k.data(), rows, d), b.wide_weight, b.wide_weight,
                                  view(b.q_out.data(), rows, d), view(b.k_out.data(), rows, d), b.wide_q_rstd,
                                  b.wide_k_rstd, olmo2);
    });
    register_case("qk_full_width_rms_norm_backward", label, "normkit", backward_bytes, [=] {
        auto& b = data->get();
        norm::qk_rms_norm_backward(view(b.dq_out.data(), rows, d), view(b.dk_out.data(), rows, d),
                                   view(b.q.data(), rows, d), view(b.k.data(), rows, d), b.wide_weight, b.wide_weight,
                                   view(b.dq.data(), rows, d), view(b.dk.data(), rows, d), b.wide_dq_weight,
                                   b.wide_dk_weight, b.wide_q_rstd, b.wide_k_rstd, olmo2);
    });
    // The yardstick of the per-head form: RMSNorm over the query rows, then over the key rows, with
    // x̂ rounded to the storage type before the weight as the Qwen3 preset does (llama casting).
    register_case("qk_rms_norm_forward", label, "yardstick", forward_bytes, [=] {
        auto& b = data->get();
        bench::yardstick::rms_norm_forward<true>(b.q.data(), b.weight.data(), b.q_out.data(), rows, d, 1e-6f);
        bench::yardstick::rms_norm_forward<true>(b.k.data(), b.weight.data(), b.k_out.data(), rows, d, 1e-6f);
    });
    register_case("qk_rms_norm_backward", label, "yardstick", backward_bytes, [=] {
        auto& b = data->get();
        bench::yardstick::rms_norm_backward(b.dq_out.data(), b.q.data(), b.weight.data(), b.q_rstd.data(), b.dq.data(),
                                            b.dq_weight.data(), rows, d);
        bench::yardstick::rms_norm_backward(b.dk_out.data(), b.k.data(), b.weight.data(), b.k_rstd.data(), b.dk.data(),
                                            b.dk_weight.data(), rows, d);
    });
    // The full-width form's: RMSNorm over each token's heads·head_dim values, the wide weight.
    const index_type width = heads * d;
    register_case("qk_full_width_rms_norm_forward", label, "yardstick", forward_bytes, [=] {
        auto& b = data->get();
        bench::yardstick::rms_norm_forward(b.q.data(), b.wide_weight.data(), b.q_out.data(), tokens, width, 1e-6f);
        bench::yardstick::rms_norm_forward(b.k.data(), b.wide_weight.data(), b.k_out.data(), tokens, width, 1e-6f);
    });
    register_case("qk_full_width_rms_norm_backward", label, "yardstick", backward_bytes, [=] {
        auto& b = data->get();
        bench::yardstick::rms_norm_backward(b.dq_out.data(), b.q.data(), b.wide_weight.data(), b.wide_q_rstd.data(),
                                            b.dq.data(), b.wide_dq_weight.data(), tokens, width);
        bench::yardstick::rms_norm_backward(b.dk_out.data(), b.k.data(), b.wide_weight.data(), b.wide_k_rstd.data(),
                                            b.dk.data(), b.wide_dk_weight.data(), tokens, width);
    });
    register_case("qk_l2_norm_backward", label, "yardstick", backward_bytes, [=] {
        auto& b = data->get();
        benchmark::DoNotOptimize(bench::yardstick::l2_norm_backward(b.dq_out.data(), b.q.data(), b.dq.data(), rows, d,
                                                                    static_cast<float>(gain), 1e-6f));
        benchmark::DoNotOptimize(
            bench::yardstick::l2_norm_backward(b.dk_out.data(), b.k.data(), b.dk.data(), rows, d, 1.0f, 1e-6f));
    });
    register_case("qk_l2_norm_forward", label, "yardstick", forward_bytes, [=] {
        auto& b = data->get();
        bench::yardstick::l2_norm_forward(b.q.data(), b.q_out.data(), rows, d, static_cast<float>(gain), 1e-6f);
        bench::yardstick::l2_norm_forward(b.k.data(), b.k_out.data(), rows, d, static_cast<float>(gain), 1e-6f);
    });
    register_case("qk_l2_norm_forward", label, "normkit", forward_bytes, [=] {
        auto& b = data->get();
        norm::qk_l2_norm_forward(view(b.q.data(), rows, d), view(b.k.data(), rows, d), gain,
                                 view(b.q_out.data(), rows, d), view(b.k_out.data(), rows, d));
    });
    register_case("qk_l2_norm_backward", label, "normkit", backward_bytes, [=] {
        auto& b = data->get();
        benchmark::DoNotOptimize(norm::qk_l2_norm_backward(
            view(b.dq_out.data(), rows, d), view(b.dk_out.data(), rows, d), view(b.q.data(), rows, d),
            view(b.k.data(), rows, d), gain, view(b.dq.data(), rows, d), view(b.dk.data(), rows, d)));
    });

#ifdef NORMKIT_HAVE_TORCH
    // Forward: the modeling code's composition. Backward: autograd through it,
    // with the graph built once outside the timed loop.
    struct graph {
        torch::Tensor q, k, w_q, w_k, y_q, y_k;
    };
    const auto rms = [](const torch::Tensor& x, const torch::Tensor& w, double eps, bool full_width) {
        const auto xf = x.to(torch::kFloat32);
        const auto normalized = full_width ? xf * torch::rsqrt(xf.pow(2).mean({-2, -1}, true) + eps)
                                           : xf * torch::rsqrt(xf.pow(2).mean(-1, true) + eps);
        return full_width ? (w.to(torch::kFloat32) * normalized).to(x.scalar_type())
                          : w * normalized.to(x.scalar_type());
    };
    const auto l2 = [](const torch::Tensor& x, double g) {
        return g * torch::nn::functional::normalize(x, torch::nn::functional::NormalizeFuncOptions().p(2).dim(-1));
    };
    for (int form = 0; form < 3; ++form) {
        const std::string name = form == 0 ? "qk_rms_norm" : (form == 1 ? "qk_full_width_rms_norm" : "qk_l2_norm");
        register_case(name + "_forward", label, "torch", forward_bytes, [=] {
            auto& b = data->get();
            at::set_num_threads(1);
            torch::NoGradGuard no_grad;
            const auto q = wrap(b.q, {tokens, heads, d}), k = wrap(b.k, {tokens, heads, d});
            torch::Tensor y_q, y_k;
            if (form == 2) {
                y_q = l2(q, gain), y_k = l2(k, 1.0);
            } else {
                const auto w = form == 0 ? wrap(b.weight, {d}) : wrap(b.wide_weight, {heads, d});
                y_q = rms(q, w, form == 0 ? 1e-6 : 1e-5, form == 1),
                y_k = rms(k, w, form == 0 ? 1e-6 : 1e-5, form == 1);
            }
            benchmark::DoNotOptimize(y_q.data_ptr());
            benchmark::DoNotOptimize(y_k.data_ptr());
        });
        auto saved = std::make_shared<graph>();
        register_case(name + "_backward", label, "torch", backward_bytes, [=] {
            auto& b = data->get();
            at::set_num_threads(1);
            if (!saved->q.defined()) {
                saved->q = wrap(b.q, {tokens, heads, d}).clone().requires_grad_(true);
                saved->k = wrap(b.k, {tokens, heads, d}).clone().requires_grad_(true);
                if (form == 2) {
                    saved->y_q = l2(saved->q, gain), saved->y_k = l2(saved->k, 1.0);
                } else {
                    const auto w = form == 0 ? wrap(b.weight, {d}) : wrap(b.wide_weight, {heads, d});
                    saved->w_q = w.clone().requires_grad_(true), saved->w_k = w.clone().requires_grad_(true);
                    saved->y_q = rms(saved->q, saved->w_q, 1e-6, form == 1),
                    saved->y_k = rms(saved->k, saved->w_k, 1e-6, form == 1);
                }
            }
            std::vector<torch::Tensor> inputs = {saved->q, saved->k};
            if (form != 2) inputs.insert(inputs.end(), {saved->w_q, saved->w_k});
            const auto gradients =
                torch::autograd::grad({saved->y_q, saved->y_k}, inputs,
                                      {wrap(b.dq_out, {tokens, heads, d}), wrap(b.dk_out, {tokens, heads, d})}, true);
            benchmark::DoNotOptimize(gradients[0].data_ptr());
        });
    }
#endif
}

template <class T>
void register_rows(index_type rows, index_type n) {
    const std::string type = std::is_same_v<T, float> ? "" : ":bf16";
    const std::string label = std::to_string(rows) + "x" + std::to_string(n) + type;
    const double elements = static_cast<double>(rows * n);
    auto data = std::make_shared<lazy<T>>(lazy<T>{rows, n, rows, nullptr});
    bench::release_on_shape_change([data] { data->data.reset(); });
    const double gain = norm::scale_norm_initial_gain(n);

    register_memcpy("l2_norm_forward", label, 2 * elements * sizeof(T));
    register_case("l2_norm_forward", label, "normkit", 2 * elements * sizeof(T), [=] {
        auto& b = data->get();
        norm::l2_norm_forward(view(b.q.data(), rows, n), gain, view(b.q_out.data(), rows, n));
    });
    register_memcpy("l2_norm_backward", label, 3 * elements * sizeof(T));
    register_case("l2_norm_backward", label, "normkit", 3 * elements * sizeof(T), [=] {
        auto& b = data->get();
        benchmark::DoNotOptimize(norm::l2_norm_backward(view(b.dq_out.data(), rows, n), view(b.q.data(), rows, n), gain,
                                                        view(b.dq.data(), rows, n)));
    });
    register_memcpy("fused_add_rms_norm_forward", label, 4 * elements * sizeof(T));
    register_case("fused_add_rms_norm_forward", label, "normkit", 4 * elements * sizeof(T), [=] {
        auto& b = data->get();
        // The stream keeps growing across iterations; RMSNorm is scale-invariant, so the work is the same.
        norm::fused_add_rms_norm_forward(view(b.q.data(), rows, n), b.weight, view(b.k.data(), rows, n),
                                         view(b.q_out.data(), rows, n), b.q_rstd);
    });
    register_case("l2_norm_forward", label, "yardstick", 2 * elements * sizeof(T), [=] {
        auto& b = data->get();
        bench::yardstick::l2_norm_forward(b.q.data(), b.q_out.data(), rows, n, static_cast<float>(gain), 1e-6f);
    });
    register_case("fused_add_rms_norm_forward", label, "yardstick", 4 * elements * sizeof(T), [=] {
        auto& b = data->get();
        bench::yardstick::fused_add_rms_norm_forward(b.q.data(), b.k.data(), b.weight.data(), b.q_out.data(), rows, n,
                                                     1e-6f);
    });
    register_memcpy("fused_add_rms_norm_backward", label, 4 * elements * sizeof(T));
    register_case("fused_add_rms_norm_backward", label, "normkit", 4 * elements * sizeof(T), [=] {
        auto& b = data->get();
        norm::fused_add_rms_norm_backward(view(b.dq_out.data(), rows, n), view(b.k.data(), rows, n), b.weight,
                                          view(b.dk_out.data(), rows, n), b.dq_weight, b.q_rstd);
    });
    register_case("l2_norm_backward", label, "yardstick", 3 * elements * sizeof(T), [=] {
        auto& b = data->get();
        benchmark::DoNotOptimize(bench::yardstick::l2_norm_backward(b.dq_out.data(), b.q.data(), b.dq.data(), rows, n,
                                                                    static_cast<float>(gain), 1e-6f));
    });
    register_case("fused_add_rms_norm_backward", label, "yardstick", 4 * elements * sizeof(T), [=] {
        auto& b = data->get();
        bench::yardstick::rms_norm_backward<true>(b.dq_out.data(), b.k.data(), b.weight.data(), b.q_rstd.data(),
                                                  b.dk_out.data(), b.dq_weight.data(), rows, n);
    });
#ifdef NORMKIT_HAVE_TORCH
    register_case("l2_norm_forward", label, "torch", 2 * elements * sizeof(T), [=] {
        auto& b = data->get();
        at::set_num_threads(1);
        torch::NoGradGuard no_grad;
        const auto y = gain * torch::nn::functional::normalize(
                                  wrap(b.q, {rows, n}), torch::nn::functional::NormalizeFuncOptions().p(2).dim(-1));
        benchmark::DoNotOptimize(y.data_ptr());
    });
    register_case("fused_add_rms_norm_forward", label, "torch", 4 * elements * sizeof(T), [=] {
        auto& b = data->get();
        at::set_num_threads(1);
        torch::NoGradGuard no_grad;
        auto stream = wrap(b.k, {rows, n});
        stream.add_(wrap(b.q, {rows, n}));
        const auto hf = stream.to(torch::kFloat32);
        const auto y = (hf * torch::rsqrt(hf.pow(2).mean(-1, true) + 1e-6) * wrap(b.weight, {n}).to(torch::kFloat32))
                           .to(stream.scalar_type());
        benchmark::DoNotOptimize(y.data_ptr());
    });
#endif
}

// bf16 against fp32 beyond the last-level cache: the element rate is what the storage type buys.
template <class T>
void register_storage_rate(index_type rows, index_type n) {
    const std::string label =
        std::to_string(rows) + "x" + std::to_string(n) + (std::is_same_v<T, float> ? ":f32" : ":bf16");
    const double bytes = 2.0 * static_cast<double>(rows * n) * sizeof(T);
    auto data = std::make_shared<lazy<T>>(lazy<T>{rows, n, rows, nullptr});
    bench::release_on_shape_change([data] { data->data.reset(); });
    register_memcpy("rms_norm_forward_storage", label, bytes);
    register_case("rms_norm_forward_storage", label, "normkit", bytes, [=] {
        auto& b = data->get();
        norm::rms_norm_forward(view(b.q.data(), rows, n), b.weight, view(b.q_out.data(), rows, n), b.q_rstd);
    });
    register_case("rms_norm_forward_storage", label, "yardstick", bytes, [=] {
        auto& b = data->get();
        bench::yardstick::rms_norm_forward(b.q.data(), b.weight.data(), b.q_out.data(), rows, n, 1e-6f);
    });
}

const bool registered = [] {
    for (index_type d : {index_type(64), index_type(128), index_type(256)}) {
        register_qk<float>(16384 * 128 / d, 8, d);
        register_qk<Eigen::bfloat16>(16384 * 128 / d, 8, d);
    }
    register_rows<float>(4096, 4096);
    register_rows<Eigen::bfloat16>(4096, 4096);
    register_storage_rate<float>(65536, 4096);
    register_storage_rate<Eigen::bfloat16>(65536, 4096);
    return true;
}();

}  // namespace
