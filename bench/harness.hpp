// Benchmark harness: every case is named operation/shape/implementation and
// reports bytes processed, so scripts/bench can print each implementation's
// GB/s beside memcpy of the same bytes (the physical limit) and the peers.
//
//   register_case("rms_norm_forward", "16384x128", "normkit", bytes, body);
//   register_memcpy("rms_norm_forward", "16384x128", bytes);
//
// `bytes` is the minimum traffic of the operation (forward: read x, write y;
// backward: read x and dy, write dx), and memcpy copies that many bytes: half
// read, half written. Buffers are allocated and touched before timing.
#pragma once

#include <normkit/core/types.hpp>

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace normkit::bench {

inline std::string case_name(const std::string& operation, const std::string& shape, const std::string& implementation) {
    return operation + "/" + shape + "/" + implementation;
}

// Registers body, run once per iteration, as operation/shape/implementation.
inline void register_case(const std::string& operation, const std::string& shape, const std::string& implementation, double bytes,
                          std::function<void()> body) {
    benchmark::RegisterBenchmark(case_name(operation, shape, implementation).c_str(),
                                 [bytes, body = std::move(body)](benchmark::State& state) {
                                     body();  // warm-up: page in, fill caches, let lazy set-up happen
                                     for (auto _ : state) {
                                         body();
                                         benchmark::ClobberMemory();
                                     }
                                     state.SetBytesProcessed(static_cast<std::int64_t>(bytes * static_cast<double>(state.iterations())));
                                 })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
}

// memcpy of `bytes` bytes (half source, half destination), the limit each case
// is read against. The buffers are allocated on first use and shared by every
// case of the same size, so registering many large cases costs no memory.
inline void register_memcpy(const std::string& operation, const std::string& shape, double bytes) {
    const auto half = static_cast<std::size_t>(bytes / 2);
    register_case(operation, shape, "memcpy", bytes, [half] {
        static std::map<std::size_t, std::pair<std::vector<char>, std::vector<char>>> buffers;
        auto& pair = buffers[half];
        if (pair.first.size() != half) pair = {std::vector<char>(half, 1), std::vector<char>(half, 0)};
        std::memcpy(pair.second.data(), pair.first.data(), half);
        benchmark::DoNotOptimize(pair.second.data());
    });
}

// Uniform values in [low, high) from a xorshift generator, rounded to storage
// type T: fast enough for 1 GiB buffers (std::normal_distribution takes tens of
// seconds there), and the same values for the same seed on every run.
template <class T>
std::vector<T> uniform_values(std::size_t count, std::uint32_t seed, float low, float high) {
    std::vector<T> values(count);
    std::uint32_t state = seed * 2654435761u + 1u;
    for (auto& value : values) {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        value = normkit::core::from_compute<T>(low + (high - low) * static_cast<float>(state >> 8) * (1.0f / 16777216.0f));
    }
    return values;
}

template <class T>
std::shared_ptr<std::vector<T>> random_buffer(std::size_t count, std::uint32_t seed, float mean = 0.0f, float stddev = 1.0f) {
    auto buffer = std::make_shared<std::vector<T>>(count);
    std::mt19937 generator(seed);
    std::normal_distribution<float> normal(mean, stddev);
    for (auto& value : *buffer) value = static_cast<T>(normal(generator));
    return buffer;
}

}  // namespace normkit::bench
