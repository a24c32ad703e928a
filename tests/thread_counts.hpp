// Any thread count gives the same bits (docs/api.md §5): a run of an operation at `threads`
// records the bytes of every output it wrote, and check_thread_counts compares the runs at 2, 3,
// 4 and 7 threads with the run at 1, byte for byte. Outputs start as test_matrix's fill (-7), and
// the run at 1 must have overwritten every element it records, so that a run that writes nothing
// cannot pass.
#pragma once

#include "support.hpp"

#include <cstring>
#include <string>
#include <vector>

namespace normkit::testing {

inline const int thread_counts[] = {2, 3, 4, 7};

struct written {
    struct output {
        std::string name;
        std::vector<unsigned char> bytes;
        bool untouched = false;  // some element still holds the fill value
    };
    std::vector<output> outputs;

    template <class T>
    void add(const std::string& name, matrix_view<T> x) {
        const T fill = core::from_compute<T>(core::compute_t<T>(-7));
        output o{name, {}, false};
        for (index_type i = 0; i < x.rows; ++i)
            for (index_type j = 0; j < x.cols; ++j) {
                const auto* p = reinterpret_cast<const unsigned char*>(&x(i, j));
                o.bytes.insert(o.bytes.end(), p, p + sizeof(T));
                o.untouched = o.untouched || std::memcmp(&x(i, j), &fill, sizeof(T)) == 0;
            }
        outputs.push_back(std::move(o));
    }
    template <class T>
    void add(const std::string& name, const test_matrix<T>& x) {
        add(name, matrix_view<T>(x.view));
    }
    // A returned value (a count, a batch mean): never a fill.
    template <class T>
    void value(const std::string& name, T v) {
        output o{name, std::vector<unsigned char>(sizeof(T)), false};
        std::memcpy(o.bytes.data(), &v, sizeof(T));
        outputs.push_back(std::move(o));
    }
};

// run(threads) returns the `written` of one run at that thread count.
template <class Run>
void check_thread_counts(Run&& run) {
    const written one = run(1);
    REQUIRE(!one.outputs.empty());
    for (const auto& o : one.outputs) {
        INFO("output " << o.name << " at 1 thread");
        CHECK_FALSE(o.untouched);
    }
    for (int threads : thread_counts) {
        const written many = run(threads);
        REQUIRE(many.outputs.size() == one.outputs.size());
        for (std::size_t k = 0; k < one.outputs.size(); ++k) {
            INFO("output " << one.outputs[k].name << " at " << threads << " threads");
            CHECK(many.outputs[k].bytes == one.outputs[k].bytes);
        }
    }
}

}  // namespace normkit::testing
