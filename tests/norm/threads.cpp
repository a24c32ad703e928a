// Any thread count gives the same bits (docs/api.md §5): QK-norm (L2 and both
// RMS widths), every row method of tests/norm/methods.hpp (streamed or not as
// well) and logit normalization at 1, 2, 3, 4 and 7 threads,
// on odd sizes, forward and backward, against the one-thread bits. Rows are
// more than the 64 chunks of a cross-row reduction (core/parallel.hpp) and
// fewer, and the row counts do not divide by the thread counts.
#include "methods.hpp"
#include "support.hpp"

#include <normkit/norm/logit_norm.hpp>
#include <normkit/norm/qk_norm.hpp>

#include <cstring>
#include <limits>

using namespace normkit;
using namespace normkit::testing;

namespace {

const int thread_counts[] = {2, 3, 4, 7};

// Everything one run writes, as bits.
struct written {
    std::vector<std::vector<float>> arrays;
    std::vector<double> scalars;

    void add(std::vector<float> values) { arrays.push_back(std::move(values)); }
    void add(const test_matrix<float>& m) { arrays.push_back(m.storage); }
};

// memcmp's arguments must not be null, which an empty vector's data() may be.
bool same_bytes(const void* a, const void* b, std::size_t bytes) { return bytes == 0 || std::memcmp(a, b, bytes) == 0; }

bool same_bits(const written& a, const written& b) {
    if (a.arrays.size() != b.arrays.size() || a.scalars.size() != b.scalars.size()) return false;
    for (std::size_t k = 0; k < a.arrays.size(); ++k)
        if (a.arrays[k].size() != b.arrays[k].size() ||
            !same_bytes(a.arrays[k].data(), b.arrays[k].data(), a.arrays[k].size() * sizeof(float)))
            return false;
    return same_bytes(a.scalars.data(), b.scalars.data(), a.scalars.size() * sizeof(double));
}

// run(threads) at 1 thread and at every other count: the same bits.
template <class Run>
void check_thread_counts(Run&& run) {
    const written one = run(1);
    for (int threads : thread_counts) {
        INFO("threads " << threads);
        CHECK(same_bits(run(threads), one));
    }
}

std::vector<long> labels_for(index_type rows, index_type classes) {
    std::vector<long> labels(static_cast<std::size_t>(rows));
    for (index_type i = 0; i < rows; ++i) labels[static_cast<std::size_t>(i)] = (i * 7 + 3) % classes;
    return labels;
}

}  // namespace

TEST_CASE("qk_norm: L2 and RMS forms, every width, bitwise at 1, 2, 3, 4 and 7 threads", "[qk_norm][threads]") {
    for (index_type tokens : {index_type(1), index_type(5), index_type(611)}) {
        const index_type heads = 3, key_heads = 1, d = 67, rows = tokens * heads, key_rows = tokens * key_heads;
        INFO("tokens " << tokens);
        const test_matrix<float> q(rows, d, random_values(rows * d, 11), 1),
            k(key_rows, d, random_values(key_rows * d, 12)), dq_out(rows, d, random_values(rows * d, 13)),
            dk_out(key_rows, d, random_values(key_rows * d, 14));
        const auto weight = to_storage<float>(random_values(d, 15, 1.0, 0.2));
        const auto wide = to_storage<float>(random_values(heads * d, 16, 1.0, 0.2));
        const auto key_wide = to_storage<float>(random_values(key_heads * d, 17, 1.0, 0.2));
        check_thread_counts([&](int threads) {
            written out;
            norm::l2_norm_options l2;
            l2.threads = threads;
            test_matrix<float> q_out(rows, d), k_out(key_rows, d), dq(rows, d), dk(key_rows, d);
            norm::qk_l2_norm_forward(q.view, k.view, 2.5, q_out.view, k_out.view, l2);
            out.scalars.push_back(
                norm::qk_l2_norm_backward(dq_out.view, dk_out.view, q.view, k.view, 2.5, dq.view, dk.view, l2));
            out.add(q_out), out.add(k_out), out.add(dq), out.add(dk);

            auto rms = norm::presets::gemma3();
            rms.threads = threads;
            std::vector<float> q_rstd(rows), k_rstd(key_rows), dqw(d), dkw(d);
            norm::qk_rms_norm_forward(q.view, k.view, weight, weight, q_out.view, k_out.view, q_rstd, k_rstd, rms);
            norm::qk_rms_norm_backward(dq_out.view, dk_out.view, q.view, k.view, weight, weight, dq.view, dk.view, dqw,
                                       dkw, q_rstd, k_rstd, rms);
            out.add(q_out), out.add(k_out), out.add(dq), out.add(dk);
            out.add(q_rstd), out.add(k_rstd), out.add(dqw), out.add(dkw);

            // Full width (OLMo2): the head rows of a token contiguous.
            auto olmo = norm::presets::olmo2();
            olmo.threads = threads;
            const test_matrix<float> qc(rows, d, q.values(), 0, false), kc(key_rows, d, k.values(), 0, false);
            test_matrix<float> qo(rows, d, 0, false), ko(key_rows, d, 0, false), gq(rows, d, 0, false),
                gk(key_rows, d, 0, false);
            std::vector<float> tq(tokens), tk(tokens), wq(heads * d), wk(key_heads * d);
            norm::qk_rms_norm_forward(qc.view, kc.view, wide, key_wide, qo.view, ko.view, tq, tk, olmo);
            const test_matrix<float> dqc(rows, d, dq_out.values(), 0, false),
                dkc(key_rows, d, dk_out.values(), 0, false);
            norm::qk_rms_norm_backward(dqc.view, dkc.view, qc.view, kc.view, wide, key_wide, gq.view, gk.view, wq, wk,
                                       tq, tk, olmo);
            out.add(qo), out.add(ko), out.add(gq), out.add(gk), out.add(tq), out.add(tk), out.add(wq), out.add(wk);
            return out;
        });
    }
}

TEST_CASE("every registered row method: forward and backward bitwise at 1, 2, 3, 4 and 7 threads, streamed or not",
          "[norm][threads][stream]") {
    REQUIRE(row_methods().size() >= 3);
    for (const auto& method : row_methods()) {
        for (index_type rows : {index_type(1), index_type(37), index_type(2051)}) {
            const index_type n = 69;
            INFO(method.name << " rows " << rows);
            const test_matrix<float> x(rows, n, random_values(rows * n, 21), 2),
                dy(rows, n, random_values(rows * n, 22));
            const auto run = [&](int threads, std::size_t stream_above_bytes) {
                streaming_options execution;
                execution.threads = threads;
                execution.stream_above_bytes = stream_above_bytes;
                written out;
                for (auto& array : method.outputs(x, dy, execution)) out.add(std::move(array));
                return out;
            };
            check_thread_counts([&](int threads) { return run(threads, streaming_options{}.stream_above_bytes); });
            // Streaming stores change no bit: every row streamed (0) and none streamed, at 1 and 2 threads.
            const written one = run(1, streaming_options{}.stream_above_bytes);
            for (int threads : {1, 2})
                for (std::size_t threshold : {std::size_t(0), std::numeric_limits<std::size_t>::max()}) {
                    INFO("threads " << threads << " stream_above_bytes " << threshold);
                    CHECK(same_bits(run(threads, threshold), one));
                }
        }
    }
}

TEST_CASE("logit_norm: loss, gradient, scores and the order selection bitwise at 1, 2, 3, 4 and 7 threads",
          "[logit_norm][threads]") {
    for (index_type rows : {index_type(1), index_type(41), index_type(3001)}) {
        const index_type classes = 23;
        INFO("rows " << rows);
        const test_matrix<float> logits(rows, classes, random_values(rows * classes, 31, 0.0, 2.0), 3);
        const auto labels = labels_for(rows, classes);
        check_thread_counts([&](int threads) {
            written out;
            norm::logit_norm_options options;
            options.threads = threads;
            options.temperature = 0.7;
            std::vector<float> losses(rows);
            test_matrix<float> gradient(rows, classes, 1);
            out.scalars.push_back(norm::logit_norm_loss(logits.view, labels, losses, options));
            out.scalars.push_back(norm::logit_norm_loss_gradient(logits.view, labels, gradient.view, {}, options));
            out.add(losses), out.add(gradient);
            for (double p : {1.0, 3.0, static_cast<double>(INFINITY)}) {
                norm::selective_score_options score;
                score.p = p;
                score.threads = threads;
                std::vector<float> scores(rows);
                norm::selective_classification_score(logits.view, scores, score);
                out.add(scores);
            }
            norm::select_norm_order_options selection_options;
            selection_options.threads = threads;
            const auto selection = norm::select_norm_order(logits.view, labels, selection_options);
            out.scalars.push_back(selection.p);
            out.scalars.push_back(selection.aurc);
            out.scalars.insert(out.scalars.end(), selection.aurcs.begin(), selection.aurcs.end());
            return out;
        });
    }
}
