// Storage types and casting: bf16/fp16 conversion bit for bit, parameter
// gradients accumulated in fp32 over many rows, and RMSNorm's casting policies
// (llama, gemma) each equal to its definition bit for bit on bf16/fp16 input.
#include "reference/norm.hpp"
#include "support.hpp"

#include <normkit/core/simd.hpp>
#include <normkit/norm/fused_add_rms_norm.hpp>
#include <normkit/norm/layer_norm.hpp>
#include <normkit/norm/rms_norm.hpp>

using namespace normkit;
using namespace normkit::testing;

namespace {

template <class T>
std::uint16_t bits_of(T value) {
    return Eigen::numext::bit_cast<std::uint16_t>(value);
}

template <class T>
T from_bits(std::uint16_t bits) {
    return Eigen::numext::bit_cast<T>(bits);
}

// The scalar conversions every SIMD path must reproduce.
template <class T>
std::uint16_t scalar_bits(float value) {
    if constexpr (std::is_same_v<T, Eigen::bfloat16>)
        return core::float_to_bfloat16_bits(value);
    else
        return bits_of(static_cast<Eigen::half>(value));
}

template <class T>
float scalar_value(std::uint16_t bits) {
    if constexpr (std::is_same_v<T, Eigen::bfloat16>)
        return core::bfloat16_bits_to_float(bits);
    else
        return static_cast<float>(from_bits<Eigen::half>(bits));
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEMPLATE_TEST_CASE("core::load and core::store of 16-bit storage match the scalar conversions bit for bit", "[storage]",
                   Eigen::bfloat16, Eigen::half) {
    using T = TestType;
    constexpr index_type lanes = core::width<float>;
    SECTION("every one of the 65536 patterns widens exactly, in full batches and tails") {
        long mismatches = 0;
        for (std::uint32_t base = 0; base < 65536; base += lanes) {
            T source[lanes];
            for (index_type lane = 0; lane < lanes; ++lane)
                source[lane] = from_bits<T>(static_cast<std::uint16_t>(base + lane));
            const index_type count = 1 + static_cast<index_type>(base / lanes) % lanes;
            alignas(64) float full[lanes], tail[lanes];
            core::load(source).store_aligned(full);
            core::load(source, count).store_aligned(tail);
            for (index_type lane = 0; lane < lanes; ++lane) {
                mismatches += !same_bits(full[lane], scalar_value<T>(static_cast<std::uint16_t>(base + lane)));
                mismatches += !same_bits(
                    tail[lane], lane < count ? scalar_value<T>(static_cast<std::uint16_t>(base + lane)) : 0.0f);
            }
        }
        CHECK(mismatches == 0);
    }
    SECTION("narrowing rounds to nearest even, NaN and infinities included, and writes only count lanes") {
        std::mt19937 generator(7);
        std::vector<float> values = {0.0f,     -0.0f,    1.0f,  INFINITY, -INFINITY, NAN,      -NAN,
                                     65504.0f, 65520.0f, 1e-8f, 5.96e-8f, 3e38f,     -3.4e38f, 1e-40f};
        for (std::uint32_t bits :
             {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f800001u, 0xffc12345u, 0x7fbfffffu, 0x00000001u, 0x80008000u}) {
            float value;
            std::memcpy(&value, &bits, sizeof value);
            values.push_back(value);
        }
        for (int i = 0; i < 200000; ++i) {
            std::uint32_t bits = generator();
            if (i % 3 == 0) bits = (bits & 0xffff0000u) | 0x8000u;  // exact ties
            float value;
            std::memcpy(&value, &bits, sizeof value);
            values.push_back(value);
        }
        while (values.size() % lanes) values.push_back(0.5f);
        long mismatches = 0;
        for (std::size_t base = 0; base < values.size(); base += lanes) {
            const auto batch = core::batch<float>::load_unaligned(values.data() + base);
            T out[lanes + 1];
            const index_type count = 1 + static_cast<index_type>(base / lanes) % lanes;
            for (auto& o : out) o = from_bits<T>(0x1234);
            core::store(out, batch, count);
            for (index_type lane = 0; lane <= lanes; ++lane)
                mismatches +=
                    bits_of(out[lane]) != (lane < count ? scalar_bits<T>(values[base + lane]) : std::uint16_t(0x1234));
            core::store(out, batch);
            for (index_type lane = 0; lane < lanes; ++lane)
                mismatches += bits_of(out[lane]) != scalar_bits<T>(values[base + lane]);
        }
        CHECK(mismatches == 0);
    }
}

TEMPLATE_TEST_CASE("16-bit parameter gradients over 65536 rows agree with the double reference to 1e-5", "[storage]",
                   Eigen::bfloat16, Eigen::half) {
    // A 16-bit (or per-row rounded) accumulator stalls on sums this long: dy and x
    // are mostly positive, so dγ and dβ grow to ~10⁴ over the rows.
    using T = TestType;
    const index_type rows = 65536, n = 24;
    const auto x_values = stored<T>(random_values(rows * n, 171, 1.0, 0.5)),
               dy_values = stored<T>(random_values(rows * n, 172, 1.0, 0.5));
    const auto x = to_storage<T>(x_values), dy = to_storage<T>(dy_values);
    const auto weight_values = stored<T>(random_values(n, 173, 1.0, 0.2));
    const auto weight = to_storage<T>(weight_values);
    std::vector<T> dx(rows * n);
    std::vector<float> mean(rows), rstd(rows), dweight(n), dbias(n);

    SECTION("LayerNorm dγ and dβ") {
        norm::layer_norm_forward(view(x.data(), rows, n), weight, {}, view(dx.data(), rows, n), mean, rstd);
        norm::layer_norm_backward(view(dy.data(), rows, n), view(x.data(), rows, n), weight, view(dx.data(), rows, n),
                                  dweight, dbias, mean, rstd);
        std::vector<double> dx_ref, dweight_ref, dbias_ref;
        reference::layer_norm_backward(dy_values, x_values, {rows, n}, weight_values, 1e-5, dx_ref, dweight_ref,
                                       dbias_ref);
        CHECK(relative_error(to_double(dweight), dweight_ref) < 1e-5);
        CHECK(relative_error(to_double(dbias), dbias_ref) < 1e-5);
        CHECK(max_abs(dbias_ref) > 1e4);
    }
    SECTION("RMSNorm dw, both casting policies") {
        for (auto casting : {norm::rms_norm_casting::llama, norm::rms_norm_casting::gemma}) {
            norm::rms_norm_options options;
            options.casting = casting;
            norm::rms_norm_forward(view(x.data(), rows, n), weight, view(dx.data(), rows, n), rstd, options);
            norm::rms_norm_backward(view(dy.data(), rows, n), view(x.data(), rows, n), weight, view(dx.data(), rows, n),
                                    dweight, rstd, options);
            std::vector<double> dx_ref, dweight_ref;
            reference::rms_norm_backward(dy_values, x_values, {rows, n}, weight_values, false, options.eps, dx_ref,
                                         dweight_ref);
            CHECK(relative_error(to_double(dweight), dweight_ref) < 1e-5);
            CHECK(max_abs(dweight_ref) > 1e4);
        }
    }
    SECTION("fused add + RMSNorm dw") {
        std::vector<T> stream(rows * n, from_bits<T>(0)), gradient(rows * n, from_bits<T>(0));
        norm::fused_add_rms_norm_forward(view(x.data(), rows, n), weight, view(stream.data(), rows, n),
                                         view(dx.data(), rows, n), rstd);
        norm::fused_add_rms_norm_backward(view(dy.data(), rows, n), view(stream.data(), rows, n), weight,
                                          view(gradient.data(), rows, n), dweight, rstd);
        std::vector<double> dx_ref, dweight_ref;
        reference::rms_norm_backward(dy_values, x_values, {rows, n}, weight_values, false, 1e-6, dx_ref, dweight_ref);
        CHECK(relative_error(to_double(dweight), dweight_ref) < 1e-5);
    }
}

TEMPLATE_TEST_CASE("RMSNorm casting policies match their definitions bit for bit", "[storage][rms_norm]",
                   Eigen::bfloat16, Eigen::half) {
    // Given the kernel's r (the statistic's summation order is not part of the
    // policy), each output element is, in float arithmetic:
    //   llama  y = T(w_eff · float(T(x·r)))     HF LlamaRMSNorm: weight * hidden.to(dtype)
    //   gemma  y = T((x·r) · w_eff)              HF Gemma: (x·(1 + w)).to(dtype), all fp32
    using T = TestType;
    std::uint32_t seed = 180;
    for (index_type n :
         {index_type(1), index_type(7), index_type(16), index_type(33), index_type(128), index_type(1000)}) {
        for (bool offset : {false, true}) {
            for (auto casting : {norm::rms_norm_casting::llama, norm::rms_norm_casting::gemma}) {
                INFO("n " << n << " offset " << offset << " llama " << (casting == norm::rms_norm_casting::llama));
                const index_type rows = 9;
                const auto x = to_storage<T>(random_values(rows * n, seed++, 0.0, 2.0));
                const auto weight = to_storage<T>(random_values(n, seed++, offset ? 0.0 : 1.0, 0.5));
                std::vector<T> y(rows * n);
                std::vector<float> rstd(rows);
                norm::rms_norm_options options;
                options.offset = offset;
                options.casting = casting;
                norm::rms_norm_forward(view(x.data(), rows, n), weight, view(y.data(), rows, n), rstd, options);
                long mismatches = 0;
                for (index_type i = 0; i < rows; ++i)
                    for (index_type j = 0; j < n; ++j) {
                        const float xhat = core::to_compute(x[i * n + j]) * rstd[i];
                        const float w_eff = core::to_compute(weight[j]) + (offset ? 1.0f : 0.0f);
                        const float value =
                            casting == norm::rms_norm_casting::llama ? w_eff * core::round_to<T>(xhat) : xhat * w_eff;
                        mismatches += bits_of(y[i * n + j]) != bits_of(core::from_compute<T>(value));
                    }
                CHECK(mismatches == 0);
            }
        }
    }
}
