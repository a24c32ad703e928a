// normkit on torch::Tensor memory, without copies, and as a custom autograd
// function; every result is compared with torch's own.
//
// 1. Views: a normkit matrix_view over tensor.data_ptr() (rows of the last
//    axis, the tensor's row stride), so a kernel reads and writes the tensor's
//    storage directly: LayerNorm on a strided, unaligned slice; RMSNorm on a
//    bf16 tensor in place.
// 2. RmsNormFunction: torch::autograd::Function with normkit's RMSNorm forward
//    (saving rstd) and backward, for float, double and bf16 tensors, checked
//    against an RMSNorm composed from torch ops and differentiated by autograd.
//
// libtorch comes first: its headers must see their own macros before anything
// else defines them (glog's CHECK would otherwise clash with a test framework's).
#include <torch/torch.h>

#include <normkit/norm/layer_norm.hpp>
#include <normkit/norm/rms_norm.hpp>

#include <cstdio>
#include <string>

namespace {

namespace norm = normkit::norm;

// Both bf16 types are one uint16_t holding the top half of an IEEE float, so a
// buffer of one is a buffer of the other.
static_assert(sizeof(at::BFloat16) == sizeof(Eigen::bfloat16) && alignof(at::BFloat16) == alignof(Eigen::bfloat16),
              "at::BFloat16 and Eigen::bfloat16 must share their layout");

template <class T>
torch::ScalarType dtype_of() {
    using U = std::remove_const_t<T>;
    if constexpr (std::is_same_v<U, float>)
        return torch::kFloat32;
    else if constexpr (std::is_same_v<U, double>)
        return torch::kFloat64;
    else {
        static_assert(std::is_same_v<U, Eigen::bfloat16>, "normkit storage used here: float, double, bfloat16");
        return torch::kBFloat16;
    }
}

// The normkit view of a CPU tensor of element type T: rows of its last axis.
// A 2-D tensor may have any row stride (a slice of a wider one); higher ranks
// must be contiguous so their leading axes flatten into rows. Never copies.
template <class T>
normkit::matrix_view<T> as_view(const torch::Tensor& tensor) {
    TORCH_CHECK(tensor.device().is_cpu() && tensor.scalar_type() == dtype_of<T>(), "as_view: expected a CPU ",
                dtype_of<T>(), " tensor, got ", tensor.scalar_type(), " on ", tensor.device());
    TORCH_CHECK(tensor.dim() >= 1 && (tensor.stride(-1) == 1 || tensor.size(-1) <= 1),
                "as_view: the last axis must be contiguous, strides ", tensor.strides());
    const int64_t cols = tensor.size(-1), rows = cols == 0 ? 0 : tensor.numel() / cols;
    int64_t row_stride = cols;
    if (tensor.dim() == 2)
        row_stride = tensor.stride(0);
    else
        TORCH_CHECK(tensor.dim() == 1 || tensor.is_contiguous(), "as_view: a tensor of rank ", tensor.dim(),
                    " must be contiguous");
    return normkit::view(static_cast<T*>(tensor.data_ptr()), rows, cols, std::max(row_stride, cols));
}

// Weights, biases, saved statistics: contiguous 1-D tensors; undefined → absent.
template <class T>
normkit::vector_view<T> as_vector_view(const torch::Tensor& tensor) {
    if (!tensor.defined()) return {};
    TORCH_CHECK(tensor.device().is_cpu() && tensor.scalar_type() == dtype_of<T>() && tensor.dim() == 1 &&
                    tensor.is_contiguous(),
                "as_vector_view: expected a contiguous 1-D CPU ", dtype_of<T>(), " tensor");
    return {static_cast<T*>(tensor.data_ptr()), tensor.numel()};
}

// Runs f(T{}) with T the normkit storage type of a torch dtype.
template <class F>
void with_storage(torch::ScalarType type, F&& f) {
    switch (type) {
        case torch::kFloat32:
            f(float{});
            break;
        case torch::kFloat64:
            f(double{});
            break;
        case torch::kBFloat16:
            f(Eigen::bfloat16{});
            break;
        default:
            TORCH_CHECK(false, "normkit kernels here take float, double or bfloat16, got ", type);
    }
}

// The address the last RmsNormFunction::forward wrote its output to, kept only
// so main() can show that autograd hands back that very memory.
const void* last_forward_output = nullptr;

// y = RMSNorm(x)·w over the last axis, differentiable in x and w.
struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
    static torch::Tensor forward(torch::autograd::AutogradContext* context, const torch::Tensor& input,
                                 const torch::Tensor& weight, double eps) {
        const torch::Tensor x = input.contiguous();  // the same tensor, no copy, when it already is
        torch::Tensor y = torch::empty_like(x);
        torch::Tensor rstd;
        with_storage(x.scalar_type(), [&](auto storage) {
            using T = decltype(storage);
            using S = normkit::statistic_t<T>;  // rstd and parameter gradients: float (double for double)
            const int64_t rows = x.numel() / std::max<int64_t>(x.size(-1), 1);
            rstd = torch::empty({rows}, x.options().dtype(dtype_of<S>()));
            norm::rms_norm_options options;
            options.eps = eps;
            norm::rms_norm_forward(as_view<const T>(x), as_vector_view<const T>(weight.contiguous()), as_view<T>(y),
                                   as_vector_view<S>(rstd), options);
        });
        last_forward_output = y.data_ptr();
        context->save_for_backward({x, weight, rstd});
        context->saved_data["eps"] = eps;
        return y;
    }

    static torch::autograd::variable_list backward(torch::autograd::AutogradContext* context,
                                                   torch::autograd::variable_list gradients) {
        const auto saved = context->get_saved_variables();
        const torch::Tensor &x = saved[0], &weight = saved[1], &rstd = saved[2];
        const torch::Tensor dy = gradients[0].contiguous();
        torch::Tensor dx = torch::empty_like(x), dweight = torch::empty_like(weight, rstd.options());
        with_storage(x.scalar_type(), [&](auto storage) {
            using T = decltype(storage);
            using S = normkit::statistic_t<T>;
            norm::rms_norm_options options;
            options.eps = context->saved_data["eps"].toDouble();
            norm::rms_norm_backward(as_view<const T>(dy), as_view<const T>(x),
                                    as_vector_view<const T>(weight.contiguous()), as_view<T>(dx),
                                    as_vector_view<S>(dweight), as_vector_view<const S>(rstd), options);
        });
        // normkit accumulates dw in float; autograd wants it in the weight's dtype. eps gets no gradient.
        return {dx, dweight.to(weight.scalar_type()), torch::Tensor()};
    }
};

// RMSNorm as PyTorch users write it; autograd differentiates it.
torch::Tensor composed_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
    return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * weight;
}

bool all_ok = true;

// max |ours − theirs| / max |theirs|, compared in double.
void compare(const std::string& what, const torch::Tensor& ours, const torch::Tensor& theirs, double tolerance) {
    const auto a = ours.to(torch::kFloat64), b = theirs.to(torch::kFloat64);
    const double error = (a - b).abs().max().item<double>() / std::max(b.abs().max().item<double>(), 1e-300);
    const bool ok = error <= tolerance;
    all_ok = all_ok && ok;
    std::printf("  %-44s max error %.2e  tolerance %.0e  %s\n", what.c_str(), error, tolerance, ok ? "ok" : "FAILED");
}

void require(const std::string& what, bool ok) {
    all_ok = all_ok && ok;
    std::printf("  %-44s %s\n", what.c_str(), ok ? "ok" : "FAILED");
}

void views_without_copies() {
    std::printf("normkit kernels on torch memory\n");
    const int64_t rows = 9, n = 67;
    const double eps = 1e-5;

    // LayerNorm on columns 3..3+n of a wider tensor: rows are (n + 8) apart and
    // start 12 bytes past an allocation, and normkit reads them in place.
    const torch::Tensor wide = torch::randn({rows, n + 8}) * 2 + 1;
    const torch::Tensor x = wide.narrow(1, 3, n), weight = 1 + 0.2 * torch::randn({n}), bias = 0.2 * torch::randn({n});
    torch::Tensor y = torch::empty({rows, n}), mean = torch::empty({rows}), rstd = torch::empty({rows});
    const auto x_view = as_view<const float>(x);
    require("view of a strided slice reads its storage",
            x_view.data == x.data_ptr() && x_view.row_stride == n + 8 && !x.is_contiguous());
    norm::layer_norm_options options;
    options.eps = eps;
    norm::layer_norm_forward(x_view, as_vector_view<const float>(weight), as_vector_view<const float>(bias),
                             as_view<float>(y), as_vector_view<float>(mean), as_vector_view<float>(rstd), options);
    compare("layer_norm float, strided input", y, torch::layer_norm(x, {n}, weight, bias, eps), 1e-6);
    compare("layer_norm saved rstd", rstd, torch::rsqrt((x - x.mean(-1, /*keepdim=*/true)).pow(2).mean(-1) + eps),
            1e-6);

    // RMSNorm on a bf16 tensor, written back into the same storage.
    torch::Tensor h = torch::randn({rows, n}).to(torch::kBFloat16);
    const torch::Tensor h_weight = (1 + 0.2 * torch::randn({n})).to(torch::kBFloat16);
    const torch::Tensor expected =
        composed_rms_norm(h.to(torch::kFloat32), h_weight.to(torch::kFloat32), 1e-6);  // the exact math in float
    const void* storage = h.data_ptr();
    norm::rms_norm_forward(as_view<const Eigen::bfloat16>(h), as_vector_view<const Eigen::bfloat16>(h_weight),
                           as_view<Eigen::bfloat16>(h));
    require("rms_norm bf16 in place keeps the storage", h.data_ptr() == storage && h.scalar_type() == torch::kBFloat16);
    // One rounding to bf16 (8 significant bits) of the float result: ≤ 2⁻⁸ relative.
    compare("rms_norm bf16 in place vs float math", h, expected, 1e-2);
}

void autograd_function(torch::ScalarType type, double output_tolerance, double gradient_tolerance) {
    std::printf("RmsNormFunction, %s\n", std::string(c10::toString(type)).c_str());
    const double eps = 1e-6;
    const int64_t n = 67;
    // Rank 3: [batch, tokens, n], normalized over n.
    const torch::Tensor x0 = torch::randn({3, 5, n}).to(type), w0 = (1 + 0.2 * torch::randn({n})).to(type);
    const torch::Tensor dy = torch::randn({3, 5, n}).to(type);

    const torch::Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_();
    const torch::Tensor y = RmsNormFunction::apply(x, w, eps);
    require("output is the memory normkit wrote into", y.data_ptr() == last_forward_output);
    y.backward(dy);

    // torch's side: in float for bf16 (the exact math on the same bf16 values), else in the same dtype.
    const auto reference_type = type == torch::kBFloat16 ? torch::kFloat32 : type;
    const torch::Tensor rx = x0.to(reference_type).requires_grad_(), rw = w0.to(reference_type).requires_grad_();
    const torch::Tensor ry = composed_rms_norm(rx, rw, eps);
    ry.backward(dy.to(reference_type));

    compare("output", y, ry, output_tolerance);
    compare("input gradient", x.grad(), rx.grad(), gradient_tolerance);
    compare("weight gradient", w.grad(), rw.grad(), gradient_tolerance);
    require("gradients in the parameters' dtype", x.grad().scalar_type() == type && w.grad().scalar_type() == type);
}

}  // namespace

int main() {
    torch::manual_seed(0);
    try {
        views_without_copies();
        // Tolerances relative to the largest |torch value| of each tensor:
        autograd_function(torch::kFloat64, 1e-13, 1e-13);  // the same math in double: rounding only (seen: 3e-16)
        autograd_function(torch::kFloat32, 1e-6, 1e-5);    // float: order of operations, dw sums 15 rows (seen: 2e-7)
        autograd_function(torch::kBFloat16, 1e-2, 1e-2);  // bf16 storage: one rounding to 8 bits, ≤ 2⁻⁸ (seen: 4e-3)
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    std::printf(all_ok ? "torch and normkit agree\n" : "MISMATCH\n");
    return all_ok ? 0 : 1;
}
