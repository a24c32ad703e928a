// LayerNorm and RMSNorm against libtorch on the same inputs: at::native_layer_norm
// and at::native_layer_norm_backward, and an RMSNorm composed from torch ops with autograd.
// libtorch first: it brings glog, whose CHECK would otherwise replace Catch's.
#include <torch/torch.h>
#undef CHECK

#include "support.hpp"

#include <normkit/norm/layer_norm.hpp>
#include <normkit/norm/rms_norm.hpp>

using namespace normkit;
using namespace normkit::testing;

namespace {

std::vector<float> to_floats(const std::vector<double>& values) { return {values.begin(), values.end()}; }

torch::Tensor wrap(std::vector<float>& values, std::vector<int64_t> shape) {
    return torch::from_blob(values.data(), shape, torch::kFloat32);
}

double largest_difference(const std::vector<float>& ours, const torch::Tensor& theirs) {
    const auto contiguous = theirs.contiguous();
    const float* data = contiguous.data_ptr<float>();
    double worst = 0, scale = 1e-30;
    for (std::size_t i = 0; i < ours.size(); ++i) {
        worst = std::max(worst, std::abs(static_cast<double>(ours[i]) - data[i]));
        scale = std::max(scale, std::abs(static_cast<double>(data[i])));
    }
    return worst / scale;
}

}  // namespace

TEST_CASE("layer_norm forward and backward agree with libtorch", "[peers][torch][layer_norm]") {
    for (index_type n : {index_type(1), index_type(17), index_type(128), index_type(1000), index_type(4097)}) {
        const index_type rows = 9;
        INFO("n " << n);
        auto x = to_floats(random_values(rows * n, 1, 2.0, 3.0)), dy = to_floats(random_values(rows * n, 2));
        auto weight = to_floats(random_values(n, 3, 1.0, 0.5)), bias = to_floats(random_values(n, 4));
        std::vector<float> y(rows * n), mean(rows), rstd(rows), dx(rows * n), dweight(n), dbias(n);
        norm::layer_norm_options layer_norm_eps;
        layer_norm_eps.eps = 1e-5;
        norm::layer_norm_forward(view(x.data(), rows, n), weight, bias, view(y.data(), rows, n), mean, rstd,
                                 layer_norm_eps);
        norm::layer_norm_backward(view(dy.data(), rows, n), view(x.data(), rows, n), weight, view(dx.data(), rows, n),
                                  dweight, dbias, mean, rstd, layer_norm_eps);

        const auto tx = wrap(x, {rows, n}), tdy = wrap(dy, {rows, n}), tw = wrap(weight, {n}), tb = wrap(bias, {n});
        const auto [ty, tmean, trstd] = at::native_layer_norm(tx, {n}, tw, tb, 1e-5);
        const auto [tdx, tdw, tdb] =
            at::native_layer_norm_backward(tdy, tx, {n}, tmean, trstd, tw, tb, {true, true, true});
        CHECK(largest_difference(mean, tmean.reshape({rows})) < 1e-5);
        CHECK(largest_difference(rstd, trstd.reshape({rows})) < 1e-5);
        CHECK(largest_difference(dbias, tdb) < 1e-5);
        if (n > 1) {
            CHECK(largest_difference(y, ty) < 1e-5);
            CHECK(largest_difference(dx, tdx) < 1e-4);
            CHECK(largest_difference(dweight, tdw) < 1e-4);
            CHECK(largest_difference(y, at::layer_norm(tx, {n}, tw, tb, 1e-5)) < 1e-5);
        } else {
            // n = 1 is a constant row: x̂ = 0 exactly, so y = β and dγ = 0. libtorch's CPU
            // kernel leaves a rounding residue in x − μ there (PyTorch #188372), so it is not
            // the reference for this case; the definition is.
            INFO("libtorch y - beta: " << largest_difference(y, ty)
                                       << ", libtorch dweight: " << tdw.abs().max().item<float>());
            for (index_type i = 0; i < rows; ++i) CHECK(y[i] == bias[0]);
            CHECK(dweight[0] == 0.0f);
            // dx = r·(g − mean(g)) = 0 up to the rounding of g = γ·dy, which the
            // compiler may fuse into the subtraction (fma): measured against r·|g|.
            for (index_type i = 0; i < rows; ++i)
                CHECK(std::abs(dx[i]) <= 1e-6f * rstd[i] * std::abs(dy[i] * weight[0]));
        }
    }
}

TEST_CASE("rms_norm forward and backward agree with an autograd composition in libtorch", "[peers][torch][rms_norm]") {
    for (bool offset : {false, true}) {
        for (index_type n : {index_type(3), index_type(64), index_type(1000), index_type(4097)}) {
            const index_type rows = 7;
            INFO("n " << n << " offset " << offset);
            auto x = to_floats(random_values(rows * n, 11, 0.5, 2.0)), dy = to_floats(random_values(rows * n, 12));
            auto weight = to_floats(random_values(n, 13, offset ? 0.0 : 1.0, 0.3));
            std::vector<float> y(rows * n), rstd(rows), dx(rows * n), dweight(n);
            norm::rms_norm_options options;
            options.offset = offset;
            norm::rms_norm_forward(view(x.data(), rows, n), weight, view(y.data(), rows, n), rstd, options);
            norm::rms_norm_backward(view(dy.data(), rows, n), view(x.data(), rows, n), weight, view(dx.data(), rows, n),
                                    dweight, rstd, options);

            const auto tx = wrap(x, {rows, n}).clone().requires_grad_(true);
            const auto tw = wrap(weight, {n}).clone().requires_grad_(true);
            const auto r = torch::rsqrt(tx.pow(2).mean(-1, true) + 1e-6);
            const auto ty = tx * r * (offset ? tw + 1 : tw);
            ty.backward(wrap(dy, {rows, n}));
            CHECK(largest_difference(y, ty.detach()) < 1e-5);
            CHECK(largest_difference(rstd, r.detach().reshape({rows})) < 1e-5);
            CHECK(largest_difference(dx, tx.grad()) < 1e-4);
            CHECK(largest_difference(dweight, tw.grad()) < 1e-4);
        }
    }
}
