// Token credit: the fused logits statistics on T = 512, V = 152064 (fp32 and
// bf16) against their limit and libtorch, and the token kernels (OTB, CoRT,
// turns, returns, spans) on [64 × 4096], each with its yardstick (bench/yardstick.hpp).
//
// Logits cases report the logits' bytes (T·V·sizeof), so every figure of one
// operation/shape is elements per second times the element size:
//   normkit  logits_statistics: logsumexp, log π(y), H and Σπ², one thread
//   memcpy   the harness's memcpy of that traffic (half read, half written)
//   exp      a bare xsimd exp loop over T·V elements of an L1-resident buffer
//   limit    the slower of memcpy and exp, chosen by timing both on the first
//            (warm-up) call: the kernel's speed limit
//   torch    log_softmax + gather + entropy (−Σ exp(lp)·lp), one thread; for
//            bf16, log_softmax with dtype float (the upcast is part of its work)
// Token kernels report their minimum traffic (inputs read, outputs written).
#include "harness.hpp"
#include "yardstick.hpp"

#include <normkit/credit/cort.hpp>
#include <normkit/credit/logits_statistics.hpp>
#include <normkit/credit/optimal_token_baseline.hpp>
#include <normkit/credit/returns.hpp>
#include <normkit/credit/spans.hpp>
#include <normkit/credit/turns.hpp>

#ifdef NORMKIT_HAVE_TORCH
#include <torch/torch.h>
#endif

#include <chrono>
#include <string>

// GCC 12's false -Wmaybe-uninitialized inside its AVX-512 intrinsics, for the bare loop's
// xsimd::exp instantiated here (normkit's own calls go through core/math.hpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace {

using namespace normkit;
using bench::register_case;

std::shared_ptr<std::vector<float>> uniform_floats(std::size_t count, std::uint32_t seed, float low, float high) {
    return std::make_shared<std::vector<float>>(bench::uniform_values<float>(count, seed, low, high));
}

// Σ exp over `elements` elements of a 4096-float buffer that stays in L1.
float exp_loop(const std::vector<float>& buffer, std::size_t elements) {
    using batch = xsimd::batch<float>;
    batch a(0.0f), b(0.0f);
    const std::size_t size = buffer.size();
    for (std::size_t done = 0; done < elements; done += size)
        for (std::size_t i = 0; i < size; i += 2 * batch::size) {
            a += xsimd::exp(batch::load_unaligned(buffer.data() + i));
            b += xsimd::exp(batch::load_unaligned(buffer.data() + i + batch::size));
        }
    return core::horizontal_sum(a + b);
}

double seconds_of(const std::function<void()>& body) {
    double best = 1e300;
    for (int k = 0; k < 3; ++k) {
        const auto start = std::chrono::steady_clock::now();
        body();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return best;
}

template <class T>
void register_logits(const char* type_label) {
    const index_type rows = 512, vocabulary = 152064;
    const auto elements = static_cast<std::size_t>(rows * vocabulary);
    const double bytes = static_cast<double>(elements * sizeof(T));
    const std::string operation = std::string("logits_statistics_") + type_label, shape = "512x152064";
    struct data {
        std::vector<T> logits;
        std::vector<index_type> tokens;
        std::vector<float> lse, log_p, entropy, squares;
    };
    auto shared = std::make_shared<std::shared_ptr<data>>();
    bench::release_on_shape_change([shared] { shared->reset(); });
    const auto get = [shared, rows, vocabulary, elements]() -> data& {
        if (!*shared) {
            auto d = std::make_shared<data>();
            const auto values = uniform_floats(elements, 7, -8.0f, 8.0f);
            d->logits.resize(elements);
            for (std::size_t k = 0; k < elements; ++k) d->logits[k] = core::from_compute<T>((*values)[k]);
            for (index_type i = 0; i < rows; ++i) d->tokens.push_back((i * 7919) % vocabulary);
            d->lse.resize(rows);
            d->log_p.resize(rows);
            d->entropy.resize(rows);
            d->squares.resize(rows);
            *shared = d;
        }
        return **shared;
    };
    register_case(operation, shape, "normkit", bytes, [get, rows, vocabulary] {
        data& d = get();
        credit::logits_statistics(view(d.logits.data(), rows, vocabulary), d.tokens,
                                  credit::logits_outputs<float>()
                                      .token_log_probability(d.log_p)
                                      .entropy(d.entropy)
                                      .sum_probability_squared(d.squares)
                                      .logsumexp(d.lse));
        benchmark::DoNotOptimize(d.entropy.data());
    });
    register_case(operation, shape, "yardstick", bytes, [get, rows, vocabulary] {
        data& d = get();
        bench::yardstick::logits_statistics(d.logits.data(), d.tokens.data(), d.lse.data(), d.log_p.data(),
                                            d.entropy.data(), rows, vocabulary);
        benchmark::DoNotOptimize(d.entropy.data());
    });
    bench::register_memcpy(operation, shape, bytes);
    auto exp_buffer = uniform_floats(4096, 9, -8.0f, 0.0f);
    const auto run_exp = [exp_buffer, elements] {
        float sum = exp_loop(*exp_buffer, elements);
        benchmark::DoNotOptimize(sum);
    };
    register_case(operation, shape, "exp", bytes, run_exp);
    // The limit: whichever of memcpy (of the same traffic) and exp is slower here.
    const auto half = static_cast<std::size_t>(bytes / 2);
    auto buffers = std::make_shared<std::vector<char>>();  // source and destination, allocated on first use
    bench::release_on_shape_change([buffers] { std::vector<char>().swap(*buffers); });
    const auto run_memcpy = [buffers, half] {
        if (buffers->empty()) buffers->assign(2 * half, 1);
        std::memcpy(buffers->data() + half, buffers->data(), half);
        benchmark::DoNotOptimize(buffers->data());
    };
    auto choice = std::make_shared<int>(-1);
    register_case(operation, shape, "limit", bytes, [choice, run_exp, run_memcpy] {
        if (*choice < 0) *choice = seconds_of(run_exp) > seconds_of(run_memcpy) ? 0 : 1;
        if (*choice == 0)
            run_exp();
        else
            run_memcpy();
    });
#ifdef NORMKIT_HAVE_TORCH
    register_case(operation, shape, "torch", bytes, [get, rows, vocabulary] {
        at::set_num_threads(1);
        data& d = get();
        const auto dtype = std::is_same_v<T, float> ? torch::kFloat32 : torch::kBFloat16;
        const auto z = torch::from_blob(d.logits.data(), {rows, vocabulary}, dtype);
        const auto y = torch::from_blob(d.tokens.data(), {rows, 1}, torch::kInt64);
        const auto log_p = torch::log_softmax(z, -1, torch::kFloat32);
        const auto token_log_p = log_p.gather(-1, y);
        const auto entropy = -(log_p.exp() * log_p).sum(-1);
        benchmark::DoNotOptimize(token_log_p.data_ptr());
        benchmark::DoNotOptimize(entropy.data_ptr());
    });
#endif
}

void register_token_kernels() {
    const index_type rows = 64, cols = 4096;
    const auto count = static_cast<std::size_t>(rows * cols);
    const std::string shape = "64x4096";
    auto rewards = uniform_floats(count, 11, -1.0f, 1.0f), log_p = uniform_floats(count, 12, -3.0f, 0.0f),
         squares = uniform_floats(count, 13, 0.1f, 0.9f), values = uniform_floats(count, 14, -1.0f, 1.0f),
         other_log_p = uniform_floats(count, 15, -3.0f, 0.0f);
    auto mask = std::make_shared<std::vector<float>>(count, 1.0f);
    for (index_type i = 0; i < rows; ++i)
        for (index_type t = cols - (i * 37) % 1024; t < cols; ++t)
            (*mask)[static_cast<std::size_t>(i * cols + t)] = 0.0f;
    auto out = std::make_shared<std::vector<float>>(count), out2 = std::make_shared<std::vector<float>>(count);
    auto ids = std::make_shared<std::vector<index_type>>(rows);
    for (index_type i = 0; i < rows; ++i) (*ids)[static_cast<std::size_t>(i)] = i / 8;
    auto advantages = uniform_floats(rows, 16, -1.0f, 1.0f);
    auto turn_count = std::make_shared<std::vector<index_type>>(rows);
    for (index_type i = 0; i < rows; ++i) (*turn_count)[static_cast<std::size_t>(i)] = cols - (i * 37) % 1024;
    const auto v = [rows, cols](std::vector<float>& x) { return view(x.data(), rows, cols); };
    const double matrix_bytes = static_cast<double>(count * sizeof(float));

    register_case("optimal_token_baseline", shape, "normkit", 5 * matrix_bytes, [=] {
        credit::optimal_token_baseline(v(*rewards), v(*mask), group_ids(*ids), v(*log_p), v(*squares), {}, v(*out));
        benchmark::DoNotOptimize(out->data());
    });
    register_case("optimal_token_baseline", shape, "yardstick", 5 * matrix_bytes, [=] {
        bench::yardstick::optimal_token_baseline(rewards->data(), mask->data(), log_p->data(), squares->data(),
                                                 out->data(), rows, cols, 8, false);
        benchmark::DoNotOptimize(out->data());
    });
    bench::register_memcpy("optimal_token_baseline", shape, 5 * matrix_bytes);
    credit::optimal_token_baseline_options tir;
    tir.compact = true;
    register_case("optimal_token_baseline_tir", shape, "normkit", 5 * matrix_bytes, [=] {
        credit::optimal_token_baseline(v(*rewards), v(*mask), group_ids(*ids), v(*log_p), v(*squares), {}, v(*out), {},
                                       tir);
        benchmark::DoNotOptimize(out->data());
    });
    register_case("optimal_token_baseline_tir", shape, "yardstick", 5 * matrix_bytes, [=] {
        bench::yardstick::optimal_token_baseline(rewards->data(), mask->data(), log_p->data(), squares->data(),
                                                 out->data(), rows, cols, 8, true);
        benchmark::DoNotOptimize(out->data());
    });
    bench::register_memcpy("optimal_token_baseline_tir", shape, 5 * matrix_bytes);
    register_case("cort_weights", shape, "normkit", 5 * matrix_bytes, [=] {
        credit::cort_weights(v(*log_p), v(*other_log_p), v(*mask), vector_view<const float>(*advantages), v(*out),
                             v(*out2));
        benchmark::DoNotOptimize(out->data());
    });
    register_case("cort_weights", shape, "yardstick", 5 * matrix_bytes, [=] {
        bench::yardstick::cort_weights(log_p->data(), other_log_p->data(), mask->data(), advantages->data(),
                                       out->data(), out2->data(), rows, cols);
        benchmark::DoNotOptimize(out->data());
    });
    bench::register_memcpy("cort_weights", shape, 5 * matrix_bytes);
    register_case("a2tgpo_advantages", shape, "normkit", 3 * matrix_bytes, [=] {
        credit::a2tgpo_advantages(v(*values), *turn_count, group_ids(*ids), vector_view<const float>(*advantages),
                                  v(*out), v(*out2));
        benchmark::DoNotOptimize(out->data());
    });
    register_case("a2tgpo_advantages", shape, "yardstick", 3 * matrix_bytes, [=] {
        bench::yardstick::a2tgpo_advantages(values->data(), turn_count->data(), advantages->data(), out->data(),
                                            out2->data(), rows, cols, 8);
        benchmark::DoNotOptimize(out->data());
    });
    bench::register_memcpy("a2tgpo_advantages", shape, 3 * matrix_bytes);
    register_case("mapo_advantages", shape, "normkit", 2 * matrix_bytes, [=] {
        credit::mapo_advantages(v(*rewards), *turn_count, group_ids(*ids), v(*out));
        benchmark::DoNotOptimize(out->data());
    });
    register_case("mapo_advantages", shape, "yardstick", 2 * matrix_bytes, [=] {
        bench::yardstick::mapo_advantages(rewards->data(), turn_count->data(), out->data(), rows, cols, 8);
        benchmark::DoNotOptimize(out->data());
    });
    bench::register_memcpy("mapo_advantages", shape, 2 * matrix_bytes);
    register_case("gtpo_advantages", shape, "normkit", 2 * matrix_bytes, [=] {
        credit::gtpo_advantages(v(*rewards), *turn_count, group_ids(*ids), v(*out));
        benchmark::DoNotOptimize(out->data());
    });
    register_case("gtpo_advantages", shape, "yardstick", 2 * matrix_bytes, [=] {
        bench::yardstick::gtpo_advantages(rewards->data(), turn_count->data(), out->data(), rows, cols, 8);
        benchmark::DoNotOptimize(out->data());
    });
    bench::register_memcpy("gtpo_advantages", shape, 2 * matrix_bytes);
    credit::gae_options gae;
    gae.gamma = 0.99;
    gae.lambda = 0.95;
    register_case("generalized_advantage_estimation", shape, "normkit", 5 * matrix_bytes, [=] {
        credit::generalized_advantage_estimation(v(*rewards), v(*values), v(*mask), v(*out), v(*out2), gae);
        benchmark::DoNotOptimize(out->data());
    });
    register_case("generalized_advantage_estimation", shape, "yardstick", 5 * matrix_bytes, [=] {
        bench::yardstick::generalized_advantage_estimation(rewards->data(), values->data(), mask->data(), out->data(),
                                                           out2->data(), rows, cols, 0.99, 0.95);
        benchmark::DoNotOptimize(out->data());
    });
    bench::register_memcpy("generalized_advantage_estimation", shape, 5 * matrix_bytes);
    // Eight spans of 256 tokens per response, one per subproblem position (K = 8).
    const index_type positions = 8;
    auto spans = std::make_shared<std::vector<credit::span>>();
    auto plain_spans = std::make_shared<std::vector<bench::yardstick::token_span>>();
    for (index_type i = 0; i < rows; ++i)
        for (index_type j = 0; j < positions; ++j) {
            spans->push_back({i, 512 * j, 512 * j + 256, j});
            plain_spans->push_back({i, 512 * j, 512 * j + 256, j});
        }
    auto position_values = uniform_floats(static_cast<std::size_t>(rows * positions), 17, -1.0f, 1.0f);
    register_case("span_advantages", shape, "normkit", 2 * matrix_bytes, [=] {
        credit::span_advantages(vector_view<const credit::span>(*spans), view(position_values->data(), rows, positions),
                                v(*mask), {}, v(*out));
        benchmark::DoNotOptimize(out->data());
    });
    register_case("span_advantages", shape, "yardstick", 2 * matrix_bytes, [=] {
        bench::yardstick::span_advantages(plain_spans->data(), static_cast<index_type>(plain_spans->size()),
                                          position_values->data(), positions, mask->data(), out->data(), rows, cols);
        benchmark::DoNotOptimize(out->data());
    });
    bench::register_memcpy("span_advantages", shape, 2 * matrix_bytes);
}

const bool registered = [] {
    register_logits<float>("fp32");
    register_logits<Eigen::bfloat16>("bf16");
    register_token_kernels();
    return true;
}();

}  // namespace
