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

inline std::string case_name(const std::string& operation, const std::string& shape,
                             const std::string& implementation) {
    return operation + "/" + shape + "/" + implementation;
}

// Buffers of one shape are released when the run moves on to another shape:
// cases run in registration order, a shape's cases mostly together, and the
// large shapes of all files held at once exceed the memory of a 24 GB
// machine. Each file registers how to drop its lazily made buffers; they are
// made again (in an untimed warm-up call) if a later case needs them.
inline std::vector<std::function<void()>>& releasers() {
    static std::vector<std::function<void()>> list;
    return list;
}

inline void release_on_shape_change(std::function<void()> release) { releasers().push_back(std::move(release)); }

inline void enter_shape(const std::string& shape) {
    static std::string current;
    if (shape == current) return;
    for (auto& release : releasers()) release();
    current = shape;
}

// Registers body, run once per iteration, as operation/shape/implementation.
inline void register_case(const std::string& operation, const std::string& shape, const std::string& implementation,
                          double bytes, std::function<void()> body) {
    benchmark::RegisterBenchmark(
        case_name(operation, shape, implementation).c_str(),
        [bytes, shape, body = std::move(body)](benchmark::State& state) {
            enter_shape(shape);
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
// case of the same size until the run moves to another shape.
inline std::map<std::size_t, std::pair<std::vector<char>, std::vector<char>>>& memcpy_buffers() {
    static std::map<std::size_t, std::pair<std::vector<char>, std::vector<char>>> buffers;
    static const bool released = (release_on_shape_change([] { buffers.clear(); }), true);
    (void)released;
    return buffers;
}

inline void register_memcpy(const std::string& operation, const std::string& shape, double bytes) {
    const auto half = static_cast<std::size_t>(bytes / 2);
    register_case(operation, shape, "memcpy", bytes, [half] {
        auto& pair = memcpy_buffers()[half];
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
        value =
            normkit::core::from_compute<T>(low + (high - low) * static_cast<float>(state >> 8) * (1.0f / 16777216.0f));
    }
    return values;
}

template <class T>
std::shared_ptr<std::vector<T>> random_buffer(std::size_t count, std::uint32_t seed, float mean = 0.0f,
                                              float stddev = 1.0f) {
    auto buffer = std::make_shared<std::vector<T>>(count);
    std::mt19937 generator(seed);
    std::normal_distribution<float> normal(mean, stddev);
    for (auto& value : *buffer) value = static_cast<T>(normal(generator));
    return buffer;
}

}  // namespace normkit::bench
