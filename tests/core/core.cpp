// The core layer: views, storage conversion, row reductions, the fixed-partition reduction.
#include "support.hpp"

#include <normkit/core/group_moments.hpp>
#include <normkit/core/groups.hpp>
#include <normkit/core/math.hpp>
#include <normkit/core/transpose.hpp>
#include <normkit/core/parallel.hpp>
#include <normkit/core/reduce.hpp>
#include <normkit/core/stream.hpp>

#include <atomic>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#if defined(__unix__)
#include <sys/mman.h>
#include <unistd.h>
#endif
#include <cmath>
#include <numeric>
#include <random>

using namespace normkit;
using namespace normkit::testing;

namespace {

long double exact_sum(const std::vector<double>& values) {
    long double sum = 0;
    for (double value : values) sum += value;
    return sum;
}

// The mean and biased variance of values, in long double.
std::pair<long double, long double> exact_moments(const std::vector<double>& values) {
    const long double mean = exact_sum(values) / static_cast<long double>(values.size());
    long double m2 = 0;
    for (double value : values) m2 += (value - mean) * (value - mean);
    return {mean, m2 / static_cast<long double>(values.size())};
}

}  // namespace

namespace {

// Σx by core::sum_batches, one accumulator set of plain sums (the kernels sum squares and
// products; a plain sum is what the reduction primitive gives without a step of its own).
template <class T>
core::compute_t<T> row_sum(const T* x, index_type n) {
    using C = core::compute_t<T>;
    return core::sum_batches<1, C>(
        n, [&](index_type i, index_type count) { return std::array<core::batch<C>, 1>{core::load(x + i, count)}; })[0];
}

}  // namespace

TEMPLATE_TEST_CASE("row reductions match long-double sums over every tail", "[core][reduce]", float, double,
                   Eigen::bfloat16, Eigen::half) {
    std::uint32_t seed = 7;
    for (index_type n : tail_dims) {
        test_matrix<TestType> x(1, n, random_values(n, seed++, 0.5, 1.0)), y(1, n, random_values(n, seed++));
        const auto xs = x.values(), ys = y.values();
        std::vector<double> squares(n), products(n);
        for (index_type i = 0; i < n; ++i) {
            squares[i] = xs[i] * xs[i];
            products[i] = xs[i] * ys[i];
        }
        const double scale = static_cast<double>(n) * (std::is_same_v<TestType, double> ? 1e-15 : 1e-6);
        CHECK(std::abs(row_sum(x.view.data, n) - static_cast<double>(exact_sum(xs))) < scale * 4);
        CHECK(std::abs(core::row_sum_of_squares(x.view.data, n) - static_cast<double>(exact_sum(squares))) < scale * 8);
        CHECK(std::abs(core::row_dot(x.view.data, y.view.data, n) - static_cast<double>(exact_sum(products))) <
              scale * 8);
        // The two-row sweeps give each row the bits of the one-row ones.
        const auto pair = core::two_rows_sum_of_squares(x.view.data, y.view.data, n);
        CHECK(pair[0] == core::row_sum_of_squares(x.view.data, n));
        CHECK(pair[1] == core::row_sum_of_squares(y.view.data, n));
        const auto moments = core::two_rows_moments(x.view.data, y.view.data, n);
        for (int k = 0; k < 2; ++k) {
            const auto single = core::row_moments(k == 0 ? x.view.data : y.view.data, n);
            CHECK(moments[k].mean == single.mean);
            CHECK(moments[k].variance == single.variance);
        }
    }
}

TEST_CASE("float sums of squares stay within 2^-22 at any length, and in pieces give the bits of one call",
          "[core][reduce]") {
    // A single float accumulator per lane loses about n/16·2⁻²⁴ over a row of positive terms; the
    // blocked sum rounds chains of at most six before going on in double (a bound of 6·2⁻²⁴ at
    // any length; these rows stay within 2⁻²²).
    for (index_type n : {index_type(1), index_type(255), index_type(256), index_type(257), index_type(65536 + 17),
                         index_type(1) << 20}) {
        std::vector<float> x(static_cast<std::size_t>(n));
        std::vector<double> squares(x.size());
        std::uint32_t state = 12345;
        for (std::size_t i = 0; i < x.size(); ++i) {
            state = state * 1664525u + 1013904223u;
            x[i] = 1000.0f + static_cast<float>(state >> 8) / 16777216.0f;  // large offset: every term alike
            squares[i] = static_cast<double>(x[i]) * x[i];
        }
        const double exact = static_cast<double>(exact_sum(squares));
        const double sum = core::row_sum_of_squares(x.data(), n);
        CHECK(std::abs(sum - exact) <= std::ldexp(exact, -22));
        // The same sum taken in pieces (stream_row_pairs' way) at uneven points.
        const auto step = [&](index_type i, index_type count, auto& sums) {
            core::add_squares(sums[0], core::load(x.data() + i, count));
        };
        core::batch_accumulator<1, float, double, float> pieces;
        for (index_type to = 0; to < n; to += 77) pieces.add_groups(to, step);
        CHECK(pieces.finish(n, step)[0] == sum);
    }
}

TEMPLATE_TEST_CASE("row_moments is as accurate at a mean of 1e6 as at 0", "[core][reduce]", float, double) {
    for (index_type n : {index_type(16), index_type(1000), index_type(4097)}) {
        double worst_relative_variance_error[2] = {0, 0};
        for (int which = 0; which < 2; ++which) {
            const double offset = which == 0 ? 0.0 : 1e6;
            for (std::uint32_t seed = 1; seed <= 5; ++seed) {
                const auto values = stored<TestType>(random_values(n, seed, offset, 1.0));
                const auto row = to_storage<TestType>(values);
                const auto [mean, exact_variance] = exact_moments(values);
                const double variance = static_cast<double>(exact_variance);
                const auto m = core::row_moments(row.data(), n);
                CHECK(std::abs(m.mean - static_cast<double>(mean)) <=
                      std::abs(static_cast<double>(mean)) * 1e-6 + 1e-5);
                worst_relative_variance_error[which] =
                    std::max(worst_relative_variance_error[which], std::abs(m.variance - variance) / variance);
            }
        }
        INFO("n " << n << " relative variance error at 0: " << worst_relative_variance_error[0]
                  << ", at 1e6: " << worst_relative_variance_error[1]);
        const double bound = std::is_same_v<TestType, double> ? 1e-13 : 1e-5;
        CHECK(worst_relative_variance_error[0] < bound);
        CHECK(worst_relative_variance_error[1] < bound);
    }
}

// The rule stated in core/reduce.hpp: float rows, summed in double, are summed again only when
// σ² would keep less than 2⁻²⁰ of the spread; below that the moments hand back the float nearest
// μ as the center and the rest of μ as δ. A lone outlier first puts δ at √(n − 1)·σ: rows up to
// 4097 wide stay in one sweep, the row of 2²¹ takes the second; every one gives the exact moments
// to double's rounding.
TEST_CASE("row_moments of float rows: one sweep up to about 1000σ, the center the float nearest μ", "[core][reduce]") {
    for (const double distance : {500.0, 1e7}) {
        for (index_type n : {index_type(2), index_type(17), index_type(4097), index_type(1) << 21}) {
            auto values = stored<float>(random_values(n, 7, 0.0, 1.0));
            values[0] = static_cast<double>(static_cast<float>(distance));
            const auto row = to_storage<float>(values);
            const auto [mean, variance] = exact_moments(values);
            const auto m = core::row_moments(row.data(), n);
            INFO("distance " << distance << ", n " << n);
            // μ carries double's rounding of δ (up to the distance); σ² keeps at least 30 bits.
            CHECK(std::abs(m.mean - static_cast<double>(mean)) <= 1e-12 * distance);
            CHECK(std::abs(m.variance - static_cast<double>(variance)) <= 0x1p-30 * static_cast<double>(variance));
            CHECK(m.center == static_cast<float>(m.mean));
            CHECK(static_cast<double>(m.center) + m.shift == m.mean);
        }
    }
}

TEST_CASE("row_moments of a constant row is exact", "[core][reduce]") {
    for (float constant : {0.1f, -3.3f, 1e6f, 7e-20f}) {
        for (index_type n : {index_type(1), index_type(5), index_type(100)}) {
            const std::vector<float> row(n, constant);
            const auto m = core::row_moments(row.data(), n);
            CHECK(m.mean == constant);
            CHECK(m.variance == 0.0f);
        }
    }
}

TEST_CASE("bf16 and fp16 conversion round to nearest even and keep NaN", "[core][types]") {
    std::mt19937 generator(3);
    std::uniform_int_distribution<std::uint32_t> bits;
    for (int trial = 0; trial < 100000; ++trial) {
        const std::uint32_t word = bits(generator);
        float value;
        std::memcpy(&value, &word, sizeof value);
        const Eigen::bfloat16 ours = core::from_compute<Eigen::bfloat16>(value);
        const Eigen::bfloat16 eigens = static_cast<Eigen::bfloat16>(value);
        if (std::isnan(value)) {
            CHECK(std::isnan(core::to_compute(ours)));
        } else {
            CHECK(Eigen::numext::bit_cast<std::uint16_t>(ours) == Eigen::numext::bit_cast<std::uint16_t>(eigens));
        }
    }
    // SIMD store/load agree with the scalar conversions, tails included.
    std::vector<float> values(37);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = 1.0f + 0.00390625f * static_cast<float>(i) / 3.0f;
    std::vector<Eigen::bfloat16> packed(values.size());
    core::for_each_batch<float>(37, [&](index_type i, index_type count) {
        core::store(packed.data() + i, core::load(values.data() + i, count), count);
    });
    for (std::size_t i = 0; i < values.size(); ++i)
        CHECK(Eigen::numext::bit_cast<std::uint16_t>(packed[i]) ==
              Eigen::numext::bit_cast<std::uint16_t>(static_cast<Eigen::bfloat16>(values[i])));
    std::vector<Eigen::half> halves(values.size());
    core::for_each_batch<float>(37, [&](index_type i, index_type count) {
        core::store(halves.data() + i, core::load(values.data() + i, count), count);
    });
    for (std::size_t i = 0; i < values.size(); ++i)
        CHECK(static_cast<float>(halves[i]) == static_cast<float>(static_cast<Eigen::half>(values[i])));
}

// A partial batch (core::load / core::store with count < lanes; masked moves with AVX-512 and AVX, a
// memcpy elsewhere): load reads the count elements and gives 0 in every other lane, store
// writes the count elements and not one byte beyond them, for every count and storage type.
TEMPLATE_TEST_CASE("partial loads zero the missing lanes and partial stores write only their lanes", "[core][simd]",
                   float, double, Eigen::bfloat16, Eigen::half) {
    using C = core::compute_t<TestType>;
    constexpr index_type lanes = core::width<C>;
    std::vector<TestType> source(3 * lanes);
    for (index_type i = 0; i < 3 * lanes; ++i) source[i] = static_cast<TestType>(static_cast<float>(i + 1) * 0.5f);
    const TestType sentinel = static_cast<TestType>(-7.0f);
    for (index_type offset = 0; offset < 2; ++offset)  // aligned and one element past it
        for (index_type count = 0; count < lanes; ++count) {
            INFO("offset " << offset << ", count " << count);
            alignas(64) C lanes_of[lanes];
            core::load(source.data() + lanes + offset, count).store_aligned(lanes_of);
            for (index_type lane = 0; lane < lanes; ++lane)
                CHECK(lanes_of[lane] == (lane < count ? core::to_compute(source[lanes + offset + lane]) : C(0)));
            std::vector<TestType> destination(3 * lanes, sentinel);
            core::store(destination.data() + lanes + offset, core::load(source.data() + offset, lanes), count);
            for (index_type i = 0; i < 3 * lanes; ++i) {
                const index_type lane = i - lanes - offset;
                const TestType expected = lane >= 0 && lane < count ? source[offset + lane] : sentinel;
                CHECK(core::to_compute(destination[i]) == core::to_compute(expected));
            }
        }
}

#if defined(__unix__)
// A partial batch that ends where the memory does: the count elements just before a page the
// process may not touch (PROT_NONE). The masked moves (AVX-512; vmaskmov in 4-byte words with
// 256-bit batches, a 16-bit type's odd last element alone) must neither read nor write a byte
// past the count: a wider access faults and ends the test.
TEMPLATE_TEST_CASE("partial loads and stores at the end of mapped memory touch nothing beyond it", "[core][simd]",
                   float, double, Eigen::bfloat16, Eigen::half) {
    using C = core::compute_t<TestType>;
    constexpr index_type lanes = core::width<C>;
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    void* mapped = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(mapped != MAP_FAILED);
    REQUIRE(mprotect(static_cast<char*>(mapped) + page, page, PROT_NONE) == 0);
    TestType* end = reinterpret_cast<TestType*>(static_cast<char*>(mapped) + page);
    for (index_type i = 1; i <= 2 * lanes; ++i) end[-i] = static_cast<TestType>(static_cast<float>(i) * 0.25f);
    for (index_type count = 1; count < lanes; ++count) {
        INFO("count " << count);
        alignas(64) C lanes_of[lanes];
        core::load(end - count, count).store_aligned(lanes_of);
        for (index_type lane = 0; lane < lanes; ++lane)
            CHECK(lanes_of[lane] == (lane < count ? core::to_compute(end[lane - count]) : C(0)));
        const TestType before = end[-count - 1];
        core::store(end - count, core::load(end - 2 * lanes, lanes), count);
        for (index_type lane = 0; lane < count; ++lane)
            CHECK(core::to_compute(end[lane - count]) == core::to_compute(end[lane - 2 * lanes]));
        CHECK(core::to_compute(end[-count - 1]) == core::to_compute(before));
    }
    munmap(mapped, 2 * page);
}
#endif

// The run-time half of core/tuning.hpp reads the vendor and family the kernel reports.
TEST_CASE("the tuning's host vendor and family are the ones /proc/cpuinfo names", "[core][tuning]") {
    std::ifstream info("/proc/cpuinfo");
    std::string line, vendor;
    int family = -1;
    while (std::getline(info, line) && (vendor.empty() || family < 0)) {
        if (vendor.empty() && line.rfind("vendor_id", 0) == 0) vendor = line.substr(line.find(':') + 2);
        if (family < 0 && line.rfind("cpu family", 0) == 0) family = std::stoi(line.substr(line.find(':') + 2));
    }
    if (vendor.empty() || family < 0) {
        WARN("no vendor_id or cpu family in /proc/cpuinfo: nothing to compare with");
        return;
    }
    const auto expected = vendor == "GenuineIntel"   ? core::tuning::vendor::intel
                          : vendor == "AuthenticAMD" ? core::tuning::vendor::amd
                                                     : core::tuning::vendor::other;
    CHECK(core::tuning::host_vendor() == expected);
    CHECK(core::tuning::host_family() == static_cast<unsigned>(family));
    // DyT and Derf stream everywhere but on Intel and on AMD from Zen 5 (family 26) on.
    const bool zen5_on = expected == core::tuning::vendor::amd && family >= 26;
    CHECK(core::tuning::host().stream_pointwise == (expected != core::tuning::vendor::intel && !zen5_on));
}

// The vector narrowing to bf16 (with AVX512-BF16: vcvtneps2bf16, and the integer rounding for
// batches with a NaN or subnormal lane) and the streaming store give the scalar bits, for any
// float: random words, batches of normal values only, and batches with one subnormal or NaN lane.
TEST_CASE("bf16 vector stores, streaming or not, and round_to round every float as the scalar conversion",
          "[core][types]") {
    constexpr index_type lanes = core::width<float>;
    std::mt19937 generator(5);
    std::uniform_int_distribution<std::uint32_t> bits;
    std::vector<float> values;
    for (int block = 0; block < 3000; ++block) {
        for (index_type lane = 0; lane < lanes; ++lane) {
            std::uint32_t word = bits(generator);
            if (block % 3 == 1) word = (word & 0x807fffffu) | ((1u + word % 250u) << 23);  // a normal value
            float value;
            std::memcpy(&value, &word, sizeof value);
            values.push_back(value);
        }
        if (block % 3 == 2) {  // one subnormal or NaN lane among normal ones
            const std::uint32_t special =
                block % 2 ? 0x00000001u + bits(generator) % 0x007fffffu : 0x7fc00001u + bits(generator) % 0x3fffffu;
            std::memcpy(&values[values.size() - 1 - bits(generator) % lanes], &special, sizeof special);
        }
    }
    std::vector<Eigen::bfloat16> stored(values.size()), streamed(values.size() + 64);
    Eigen::bfloat16* aligned =
        streamed.data() + (64 - reinterpret_cast<std::uintptr_t>(streamed.data()) % 64) % 64 / sizeof(Eigen::bfloat16);
    core::for_each_batch<float>(static_cast<index_type>(values.size()), [&](index_type i, index_type count) {
        core::store(stored.data() + i, core::load(values.data() + i, count), count);
    });
    core::write_row(aligned, static_cast<index_type>(values.size()), true,
                    [&](index_type i, index_type count) { return core::load(values.data() + i, count); });
    core::stream_fence();
    // round_to (in the registers) gives the float a store and a load give: the bf16 bits on top;
    // store_rounded of that float stores the same bits without rounding again.
    std::vector<float> rounded(values.size());
    std::vector<Eigen::bfloat16> stored_rounded(values.size());
    core::for_each_batch<float>(static_cast<index_type>(values.size()), [&](index_type i, index_type count) {
        const auto value = core::round_to<Eigen::bfloat16>(core::load(values.data() + i, count));
        core::store(rounded.data() + i, value, count);
        core::store_rounded(stored_rounded.data() + i, value, count);
    });
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < values.size(); ++i) {
        const std::uint16_t want = core::float_to_bfloat16_bits(values[i]);
        mismatches += Eigen::numext::bit_cast<std::uint16_t>(stored[i]) != want;
        mismatches += Eigen::numext::bit_cast<std::uint16_t>(aligned[i]) != want;
        mismatches += Eigen::numext::bit_cast<std::uint32_t>(rounded[i]) != std::uint32_t(want) << 16;
        mismatches += Eigen::numext::bit_cast<std::uint16_t>(stored_rounded[i]) != want;
    }
    CHECK(mismatches == 0);
}

// write_row and write_two_rows, streaming, at every start within a streaming block (so that the
// ordinary stores before the first aligned block take zero, one or two batches): each element gets
// value's lane for it, bit for bit, and nothing outside the rows is written. The second row of a pair
// starts at the same offset within a block as the first, at another one, or is the first row again.
TEMPLATE_TEST_CASE("streaming row writes put every batch where it belongs", "[core][stream]", float, double,
                   Eigen::bfloat16, Eigen::half) {
    using C = core::compute_t<TestType>;
    constexpr index_type block = static_cast<index_type>(core::stream_alignment<TestType> / sizeof(TestType));
    const TestType fill = core::from_compute<TestType>(C(-7));
    // Element i holds 1 + i mod 127 in the first row and its negative in the second: exact in every
    // storage type, and a batch one place off shows.
    const auto expected = [](int k, index_type i) { return static_cast<C>((k == 0 ? 1 : -1) * (1 + i % 127)); };
    const auto value = [&](int k, index_type i, index_type count) {
        alignas(64) C lanes[core::width<C>] = {};
        for (index_type lane = 0; lane < count; ++lane) lanes[lane] = expected(k, i + lane);
        return core::batch<C>::load_aligned(lanes);
    };
    for (index_type n : {index_type(1), index_type(17), index_type(31), index_type(95), index_type(1000)}) {
        for (index_type start = 0; start < block + 1; start += std::max<index_type>(1, block / 5)) {
            for (index_type other_start : {start, start + 1, index_type(-1)}) {
                std::vector<TestType> storage(static_cast<std::size_t>(4 * (n + 2 * block) + 64), fill);
                TestType* base = storage.data() +
                                 (64 - reinterpret_cast<std::uintptr_t>(storage.data()) % 64) % 64 / sizeof(TestType);
                TestType* first = base + start;
                TestType* second = other_start < 0 ? first : base + 2 * (n + 2 * block) + other_start;
                core::write_two_rows(first, second, n, true, value);
                core::stream_fence();
                std::size_t wrong = 0, outside = 0;
                for (std::size_t j = 0; j < storage.size(); ++j) {
                    const TestType* p = storage.data() + j;
                    const int k = p >= first && p < first + n ? 0 : p >= second && p < second + n ? 1 : -1;
                    if (k < 0)
                        outside += core::to_compute(*p) != C(-7);
                    else
                        wrong += core::to_compute(*p) != expected(k, k == 0 ? p - first : p - second);
                }
                INFO("n " << n << ", start " << start << ", second row at " << other_start);
                CHECK(wrong == 0);
                CHECK(outside == 0);
            }
        }
    }
}

// streamed_parameter puts its element at the output row's stream_head on a batch boundary, for
// every start of the row within a streaming block, and holds n values; absent, it has no data.
TEMPLATE_TEST_CASE("streamed_parameter lines its batches up with the output's streaming blocks", "[core][stream]",
                   float, double, Eigen::bfloat16, Eigen::half) {
    using C = core::compute_t<TestType>;
    constexpr index_type block = static_cast<index_type>(core::stream_alignment<TestType> / sizeof(TestType));
    CHECK(core::streamed_parameter<C>().data() == nullptr);
    std::vector<TestType> rows(static_cast<std::size_t>(2 * block + 2000 + 64));
    TestType* base = rows.data() + (64 - reinterpret_cast<std::uintptr_t>(rows.data()) % 64) % 64 / sizeof(TestType);
    for (index_type n : {index_type(1), index_type(17), index_type(95), index_type(1000)}) {
        for (index_type start = 0; start < block; ++start) {
            const TestType* row = base + start;
            core::streamed_parameter<C> parameter(n, row);
            // Rows that cannot stream (16-bit on a baseline below 256-bit) are written from element 0.
            const index_type head = core::can_stream_v<TestType> ? core::detail::stream_head(row, n) : 0;
            INFO("n " << n << ", start " << start << ", head " << head);
            if (head < n)
                CHECK(reinterpret_cast<std::uintptr_t>(parameter.data() + head) % sizeof(core::batch<C>) == 0);
            for (index_type i = 0; i < n; ++i)
                parameter.data()[i] = static_cast<C>(i);  // room for n: the sanitizer run checks
            CHECK(parameter.data()[n - 1] == static_cast<C>(n - 1));
        }
    }
}

TEST_CASE("parallel_for covers every index once; reduce_rows is independent of the thread count", "[core][parallel]") {
    for (index_type count : {index_type(0), index_type(1), index_type(7), index_type(1000)}) {
        for (int threads : {1, 2, 3, 8}) {
            std::vector<std::atomic<int>> visits(static_cast<std::size_t>(count));
            core::parallel_for(count, threads, [&](index_type begin, index_type end) {
                for (index_type i = begin; i < end; ++i) visits[i]++;
            });
            for (auto& visit : visits) CHECK(visit.load() == 1);
        }
    }
    const index_type rows = 5000, width = 7;
    const auto values = random_values(rows * width, 9);
    std::vector<std::vector<float>> totals;
    for (int threads : {1, 2, 3}) {
        const float* sums =
            core::reduce_rows<float>(rows, width, threads, [&](index_type begin, index_type end, float* partial) {
                for (index_type row = begin; row < end; ++row)
                    for (index_type j = 0; j < width; ++j) partial[j] += static_cast<float>(values[row * width + j]);
            });
        totals.emplace_back(sums, sums + width);
    }
    CHECK(totals[0] == totals[1]);
    CHECK(totals[0] == totals[2]);
    for (index_type j = 0; j < width; ++j) {
        long double exact = 0;
        for (index_type row = 0; row < rows; ++row) exact += values[row * width + j];
        CHECK(totals[0][j] == Approx(static_cast<double>(exact)).margin(1e-3));
    }
}

TEST_CASE("view reads Eigen tensors, row-major matrices, blocks and raw buffers", "[core][view]") {
    Eigen::Tensor<double, 4, Eigen::RowMajor> tensor(2, 3, 4, 5);
    auto v = view(tensor);
    CHECK(v.rows == 24);
    CHECK(v.cols == 5);
    CHECK(v.row_stride == 5);
    const auto& constant = tensor;
    static_assert(std::is_same_v<decltype(view(constant)), matrix_view<const double>>);

    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> matrix(6, 10);
    auto block = view(matrix.block(1, 2, 3, 4));
    CHECK(block.data == &matrix(1, 2));
    CHECK(block.rows == 3);
    CHECK(block.cols == 4);
    CHECK(block.row_stride == 10);

    Eigen::VectorXf column(9);
    auto as_rows = view(column);
    CHECK(as_rows.rows == 9);
    CHECK(as_rows.cols == 1);

    // Column-major matrices do not compile (tests/compile_fail/column_major_matrix.cpp); a
    // column-major type with one column at compile time is a vector.
    static_assert(core::is_column_major_matrix_v<Eigen::MatrixXf>);
    static_assert(!core::is_column_major_matrix_v<Eigen::VectorXf>);
    static_assert(!core::is_column_major_matrix_v<decltype(std::declval<Eigen::MatrixXf&>().col(1))>);
    static_assert(!core::is_column_major_matrix_v<Eigen::Matrix<float, -1, -1, Eigen::RowMajor>>);
    Eigen::MatrixXf column_major = Eigen::MatrixXf::Zero(3, 4);
    auto second_column = view(column_major.col(1));
    CHECK(second_column.data == &column_major(0, 1));
    CHECK(second_column.rows == 3);
    CHECK(second_column.cols == 1);
    std::vector<float> raw(30);
    require_error_naming([&] { view(raw.data(), 3, 10, 5); }, "row_stride");
    auto strided = view(raw.data(), 3, 8, 10);
    CHECK(&strided(2, 1) == raw.data() + 21);
}

// core::fma and core::fnma round once wherever the target has fused multiply-adds, with every
// compiler: (1 + 2^-12)^2 − (1 + 2^-11) is 2^-24 fused and 0 when the product is rounded first.
template <class C>
void check_fused(C half_ulp_bit) {
    using batch = core::batch<C>;
    const batch a(C(1) + half_ulp_bit), rounded_square(C(1) + 2 * half_ulp_bit);
    const C exact = half_ulp_bit * half_ulp_bit;
#if defined(__FMA__) || defined(__AVX512F__)
    CHECK(core::fma(a, a, -rounded_square).get(0) == exact);
    CHECK(core::fnma(a, a, rounded_square).get(0) == -exact);
#else
    const C product = core::fma(a, a, -rounded_square).get(0);
    CHECK((product == exact || product == C(0)));
#endif
    CHECK(core::fma(batch(C(3)), batch(C(5)), batch(C(-7))).get(batch::size - 1) == C(8));
    CHECK(core::fnma(batch(C(3)), batch(C(5)), batch(C(7))).get(batch::size - 1) == C(-8));
    if constexpr (std::is_same_v<C, double>) {
        // The scalar forms round as a lane of the batch forms does, fused or not.
        const double scalar = half_ulp_bit;
        CHECK(core::fma(1 + scalar, 1 + scalar, -(1 + 2 * scalar)) == core::fma(a, a, -rounded_square).get(0));
        CHECK(core::fnma(1 + scalar, 1 + scalar, 1 + 2 * scalar) == core::fnma(a, a, rounded_square).get(0));
        CHECK(core::fma(3.0, 5.0, -7.0) == 8.0);
        CHECK(core::fnma(3.0, 5.0, 7.0) == -8.0);
    }
}

TEST_CASE("core::fma and core::fnma are fused on every compiler where the target fuses", "[core][math]") {
    check_fused<float>(std::ldexp(1.0f, -12));
    check_fused<double>(std::ldexp(1.0, -27));
}

TEST_CASE("transpose_lanes swaps lane j of row i with lane i of row j", "[core][transpose]") {
    constexpr std::size_t L = core::batch<float>::size;
    core::float_register rows[L];
    for (std::size_t i = 0; i < L; ++i) {
        alignas(64) float row[L];
        for (std::size_t j = 0; j < L; ++j) row[j] = static_cast<float>(100 * i + j);
        rows[i] = core::batch<float>::load_aligned(row);
    }
    core::transpose_lanes(rows);
    int misplaced = 0;
    for (std::size_t i = 0; i < L; ++i)
        for (std::size_t j = 0; j < L; ++j) misplaced += core::batch<float>(rows[i]).get(j) != 100.0f * j + i;
    CHECK(misplaced == 0);
}

TEST_CASE("load_double_columns widens a square of rows into columns; store_double_columns rounds it back",
          "[core][transpose]") {
    constexpr index_type W = core::width<double>;
    std::vector<std::vector<float>> rows(W, std::vector<float>(3 * W));
    for (index_type k = 0; k < W; ++k)
        for (index_type j = 0; j < 3 * W; ++j) rows[k][j] = std::ldexp(1.0f + 0.001f * j, static_cast<int>(k)) - 3.0f;
    const float* sources[W];
    for (index_type k = 0; k < W; ++k) sources[k] = rows[k].data();
    alignas(64) double columns[W][W];
    core::load_double_columns(sources, W + 1, columns);  // an unaligned offset
    int misplaced = 0;
    for (index_type c = 0; c < W; ++c)
        for (index_type k = 0; k < W; ++k) misplaced += columns[c][k] != static_cast<double>(rows[k][W + 1 + c]);
    CHECK(misplaced == 0);
    // Doubles between floats: each must round to nearest, as static_cast<float> does.
    for (index_type c = 0; c < W; ++c)
        for (index_type k = 0; k < W; ++k) columns[c][k] = 1.0 / 3.0 * (1 + c) + 1e-9 * k - 7.0 * k;
    std::vector<std::vector<float>> out(W, std::vector<float>(3 * W, -1.0f));
    float* destinations[W];
    for (index_type k = 0; k < W; ++k) destinations[k] = out[k].data();
    core::store_double_columns(destinations, 3, columns);
    int wrong = 0;
    for (index_type k = 0; k < W; ++k)
        for (index_type j = 0; j < 3 * W; ++j)
            wrong += out[k][j] != (j >= 3 && j < 3 + W ? static_cast<float>(columns[j - 3][k]) : -1.0f);
    CHECK(wrong == 0);
}

// The lane sweep's arithmetic, one group at a time: the shifted sums in member order, the squares
// rounded once where the target fuses (core::fma), the finish as written-out fused multiply-adds.
// Equal bits here are what makes every FMA instruction set's sweep give the same bits.
moments shifted_group_moments(const float* x, index_type size) {
    const auto fused = [](double a, double b, double c) {
#ifdef __FMA__
        return std::fma(a, b, c);
#else
        return a * b + c;
#endif
    };
    const double shift = x[0], inverse_count = 1.0 / static_cast<double>(size);
    double sum = 0, square = 0;
    for (index_type k = 1; k < size; ++k) {
        const double deviation = static_cast<double>(x[k]) - shift;
        sum += deviation;
        square = fused(deviation, deviation, square);
    }
    moments result;
    const bool finite = shift - shift == 0 && sum - sum == 0 && square - square == 0;
    result.mean = finite ? fused(sum, inverse_count, shift) : std::numeric_limits<double>::quiet_NaN();
    const double spread = fused(-(sum * sum), inverse_count, square);
    result.m2 = spread > 0 ? spread : 0.0;
    return result;
}

TEST_CASE("sixteen_group_moments gives each group the bits of its own shifted sums", "[core][group_moments]") {
    std::mt19937 generator(41);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (index_type size : {2, 3, 5, 8, 16, 17, 33, 100}) {
        INFO("size " << size);
        std::vector<float> x(static_cast<std::size_t>(16 * size));
        for (index_type g = 0; g < 16; ++g)
            for (index_type k = 0; k < size; ++k)
                x[static_cast<std::size_t>(g * size + k)] =
                    std::ldexp(1.0f, static_cast<int>(g) - 4) * uniform(generator) +
                    (g % 3 == 0 ? 1e6f : 0.0f);                                                   // scales and offsets
        for (index_type k = 0; k < size; ++k) x[static_cast<std::size_t>(2 * size + k)] = 0.95f;  // constant
        x[static_cast<std::size_t>(4 * size + size - 1)] = std::numeric_limits<float>::quiet_NaN();
        x[static_cast<std::size_t>(6 * size)] = std::numeric_limits<float>::infinity();  // the shift itself
        x[static_cast<std::size_t>(11 * size + size / 2)] = -std::numeric_limits<float>::infinity();
        core::sixteen_moments result;
        core::sixteen_group_moments(x.data(), size, result);
        for (index_type g = 0; g < 16; ++g) {
            INFO("group " << g);
            const moments expected = shifted_group_moments(x.data() + g * size, size);
            if (std::isnan(expected.mean)) {
                CHECK(std::isnan(result.mean[g]));
                continue;
            }
            CHECK(result.mean[g] == expected.mean);
            CHECK(result.m2[g] == expected.m2);
            // core::shifted_sums, a value at a time in the group's order (the ragged scatter's form).
            const float* group = x.data() + g * size;
            core::shifted_sums sums{static_cast<double>(group[0]), 0, 0, static_cast<double>(size)};
            for (index_type k = 0; k < size; ++k)
                core::shifted_sums::accumulate(static_cast<double>(group[k]), sums.shift, sums.sum, sums.square);
            const moments scattered = sums.finish();
            CHECK(scattered.count == static_cast<double>(size));
            CHECK(scattered.mean == expected.mean);
            CHECK(scattered.m2 == expected.m2);
        }
        CHECK(result.m2[2] == 0.0);
        CHECK(result.mean[2] == static_cast<double>(0.95f));
        CHECK(std::isnan(result.mean[4]));
        CHECK(std::isnan(result.mean[6]));
        CHECK(std::isnan(result.mean[11]));
    }
}

// The float tanh and erf (core/math.hpp), xsimd's and the fast rational forms: a
// sweep of 2^20 points over [−10, 10], plus the tiny and huge ends, must stay
// within the ulp each is documented to have, be exactly odd, and saturate at ±1.
template <bool fast>
void check_tanh_and_erf(double tanh_ulps, double erf_ulps) {
    using batch = core::batch<float>;
    std::vector<float> inputs;
    for (int i = 0; i <= (1 << 20); ++i)
        inputs.push_back(-10.0f + 20.0f * static_cast<float>(i) / static_cast<float>(1 << 20));
    for (float tiny : {1e-30f, 1e-8f, 3.9e-4f, 4.1e-4f, 0.0f}) inputs.push_back(tiny);
    for (float huge : {9.0f, 50.0f, 1e30f, std::numeric_limits<float>::infinity()}) inputs.push_back(huge);
    while (inputs.size() % batch::size) inputs.push_back(0.5f);
    double worst_tanh = 0, worst_erf = 0;
    int not_odd = 0, beyond_one = 0;
    for (std::size_t i = 0; i < inputs.size(); i += batch::size) {
        alignas(64) float tanh_values[batch::size], erf_values[batch::size], negated_tanh[batch::size],
            negated_erf[batch::size];
        const auto x = batch::load_unaligned(inputs.data() + i);
        core::tanh<fast>(x).store_aligned(tanh_values);
        core::erf<fast>(x).store_aligned(erf_values);
        core::tanh<fast>(-x).store_aligned(negated_tanh);
        core::erf<fast>(-x).store_aligned(negated_erf);
        for (std::size_t lane = 0; lane < batch::size; ++lane) {
            const double input = inputs[i + lane];
            const auto ulps = [](double got, double want) {
                const float magnitude = static_cast<float>(std::fabs(want));
                return std::fabs(got - want) / static_cast<double>(std::nextafter(magnitude, 2.0f) - magnitude);
            };
            worst_tanh = std::max(worst_tanh, ulps(tanh_values[lane], std::tanh(input)));
            worst_erf = std::max(worst_erf, ulps(erf_values[lane], std::erf(input)));
            not_odd += negated_tanh[lane] != -tanh_values[lane] || negated_erf[lane] != -erf_values[lane];
            beyond_one += !(std::fabs(tanh_values[lane]) <= 1.0f && std::fabs(erf_values[lane]) <= 1.0f);
        }
    }
    CHECK(not_odd == 0);
    CHECK(beyond_one == 0);
    CHECK(worst_tanh <= tanh_ulps);
    CHECK(worst_erf <= erf_ulps);
    CHECK(core::tanh<fast>(batch(std::numeric_limits<float>::infinity())).get(0) == 1.0f);
    CHECK(core::tanh<fast>(batch(-9.5f)).get(0) == -1.0f);
    CHECK(core::erf<fast>(batch(-std::numeric_limits<float>::infinity())).get(0) == -1.0f);
    CHECK(std::isnan(core::tanh<fast>(batch(std::numeric_limits<float>::quiet_NaN())).get(0)));
    CHECK(std::isnan(core::erf<fast>(batch(std::numeric_limits<float>::quiet_NaN())).get(0)));
}

TEST_CASE("float tanh and erf stay within their documented ulp of the double functions", "[core][math]") {
    SECTION("xsimd's: 1.4 and 2.5 ulp") { check_tanh_and_erf<false>(1.4, 2.5); }
    SECTION("the fast rational forms: 6.5 and 7.5 ulp") { check_tanh_and_erf<true>(6.5, 7.5); }
}

namespace {

// The largest error(x, value) of an exp over 2^20 + 1 points of [−87, 88].
template <class Exp, class Error>
double worst_exp_error(Exp exp_function, Error error) {
    using batch = core::batch<float>;
    std::vector<float> inputs;
    for (int i = 0; i <= (1 << 20); ++i)
        inputs.push_back(-87.0f + 175.0f * static_cast<float>(i) / static_cast<float>(1 << 20));
    while (inputs.size() % batch::size) inputs.push_back(0.0f);
    double worst = 0;
    for (std::size_t i = 0; i < inputs.size(); i += batch::size) {
        alignas(64) float values[batch::size];
        exp_function(batch::load_unaligned(inputs.data() + i)).store_aligned(values);
        for (std::size_t lane = 0; lane < batch::size; ++lane)
            worst = std::max(worst, error(static_cast<double>(inputs[i + lane]), static_cast<double>(values[lane])));
    }
    return worst;
}

// 0 below the range, 1 at 0, +inf above it and NaN for NaN.
template <class Exp>
void check_exp_ends(Exp exp_function) {
    const float infinity = std::numeric_limits<float>::infinity();
    const auto exp_of = [&](float x) { return exp_function(core::batch<float>(x)).get(0); };
    CHECK(exp_of(-infinity) == 0.0f);
    CHECK(exp_of(-200.0f) == 0.0f);
    CHECK(exp_of(0.0f) == 1.0f);
    CHECK(exp_of(89.0f) == infinity);
    CHECK(exp_of(infinity) == infinity);
    CHECK(std::isnan(exp_of(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace

// core::exp: Cephes' expf with a vscalefps on AVX-512 float lanes, xsimd's elsewhere; either way
// within 2 ulp where the result is a normal float, exactly 0 / +inf / NaN at the ends.
TEST_CASE("float exp stays within 2 ulp and keeps 0, inf and NaN at the ends", "[core][math]") {
    const auto exp_function = [](const core::batch<float>& x) { return core::exp(x); };
    CHECK(worst_exp_error(exp_function, [](double x, double value) {
              const double want = std::exp(x);
              const float rounded = static_cast<float>(want);
              return std::fabs(value - want) / static_cast<double>(std::nextafter(rounded, 3e38f) - rounded);
          }) <= 2.0);
    check_exp_ends(exp_function);
}

// core::exp_in_range drops exp's clamp for x already in [−100, 100]: the same bits there, NaN for NaN.
TEST_CASE("exp_in_range gives exp's bits on [-100, 100] and NaN for NaN", "[core][math]") {
    using batch = core::batch<float>;
    std::vector<float> inputs;
    for (int i = 0; i <= (1 << 18); ++i)
        inputs.push_back(-100.0f + 200.0f * static_cast<float>(i) / static_cast<float>(1 << 18));
    inputs.push_back(std::numeric_limits<float>::quiet_NaN());
    while (inputs.size() % batch::size) inputs.push_back(-100.0f);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < inputs.size(); i += batch::size) {
        alignas(64) float fast[batch::size], plain[batch::size];
        const batch x = batch::load_unaligned(inputs.data() + i);
        core::exp_in_range(x).store_aligned(fast);
        core::exp(x).store_aligned(plain);
        for (std::size_t lane = 0; lane < batch::size; ++lane)
            differ += std::isnan(plain[lane]) ? !std::isnan(fast[lane])
                                              : Eigen::numext::bit_cast<std::uint32_t>(fast[lane]) !=
                                                    Eigen::numext::bit_cast<std::uint32_t>(plain[lane]);
    }
    CHECK(differ == 0);
}

// core::exp_of_difference trades accuracy at large |x| for speed: relative error within
// (2 + |x|)·2⁻²³ where the result is a normal float (the header's bound), the same ends as exp.
TEST_CASE("exp_of_difference stays within (2 + |x|) 2^-23 relative and keeps 0, inf and NaN at the ends",
          "[core][math]") {
    const auto exp_function = [](const core::batch<float>& x) { return core::exp_of_difference(x); };
    CHECK(worst_exp_error(exp_function, [](double x, double value) {
              const double want = std::exp(x);
              return std::fabs(value - want) / (want * (2 + std::fabs(x)) * std::ldexp(1.0, -23));
          }) <= 1.0);
    check_exp_ends(exp_function);
}

// Ragged ids are numbered by first appearance, by a direct table (small ids) or a hash table that
// starts at the size this thread's last call needed: a large call, a small one and a large one
// again must each give a naive numbering's groups and labels, for int64 and int32 ids.
template <class Id>
void check_numbering(const std::vector<Id>& ids) {
    std::map<std::int64_t, index_type> seen;
    std::vector<index_type> expected;
    std::vector<std::int64_t> labels;
    for (Id id : ids) {
        const auto found = seen.emplace(id, static_cast<index_type>(seen.size()));
        if (found.second) labels.push_back(id);
        expected.push_back(found.first->second);
    }
    const std::vector<index_type>* dense = nullptr;
    const auto& layout =
        core::resolve_cached(group_ids(ids), static_cast<index_type>(ids.size()), "rewards", false, &dense);
    CHECK(layout.count == static_cast<index_type>(labels.size()));
    CHECK(layout.labels == labels);
    CHECK(*dense == expected);
    const auto members = core::resolve(group_ids(ids), static_cast<index_type>(ids.size()));
    for (index_type g = 0; g < members.count; ++g) {
        index_type previous = -1;
        members.for_members(g, [&](index_type i) {
            CHECK(expected[static_cast<std::size_t>(i)] == g);
            CHECK(i > previous);  // in sample order
            previous = i;
        });
    }
}

TEST_CASE("group ids are numbered by first appearance, whatever table the last call needed", "[core][groups]") {
    std::mt19937 generator(5);
    const auto ids = [&](std::size_t samples, std::int64_t groups, std::int64_t scale, bool runs) {
        std::vector<std::int64_t> result;
        for (std::size_t i = 0; i < samples; ++i) result.push_back(static_cast<std::int64_t>(generator() % groups));
        if (runs) std::sort(result.begin(), result.end());
        for (auto& id : result) id = id * scale + 13;
        return result;
    };
    for (std::int64_t scale : {std::int64_t(1), std::int64_t(1000000007)}) {  // the direct table, the hash table
        INFO("scale " << scale);
        for (const auto& [samples, groups] :
             {std::pair<std::size_t, std::int64_t>{20000, 5000}, {30, 3}, {40000, 9000}, {1, 1}, {5000, 5000}})
            for (bool runs : {false, true}) {
                const auto wide = ids(samples, groups, scale, runs);
                check_numbering(wide);
                if (scale == 1) check_numbering(std::vector<std::int32_t>(wide.begin(), wide.end()));
            }
    }
    // An empty batch has no groups; the first bad id is the one named, wherever it lies.
    check_numbering(std::vector<std::int64_t>{});
    std::vector<std::int64_t> bad = ids(1000, 10, 1000000007, false);
    bad[700] = -3;
    bad[400] = -2;
    require_error_naming([&] { core::resolve(group_ids(bad), 1000); }, "group ids[400] is negative (-2)");
    std::vector<std::int32_t> unknown(100, 2);
    unknown[90] = 7;
    unknown[30] = 5;
    require_error_naming([&] { core::resolve(group_ids(unknown, 5), 100); }, "group ids[30] = 5 is unknown");
}
