// aggregate_loss against tests/reference/loss.hpp, the exact numbers,
// the micro-batch / data-parallel identities (verl #5625, TRL #5619), and errors.
#include "reference/loss.hpp"
#include "support.hpp"

#include <normkit/loss/aggregate.hpp>

#include <limits>

using namespace normkit;
using namespace normkit::testing;

namespace {

const std::vector<loss::aggregation_mode> all_modes = {loss::aggregation_mode::token_mean,
                                                       loss::aggregation_mode::token_sum,
                                                       loss::aggregation_mode::seq_mean_token_sum,
                                                       loss::aggregation_mode::seq_mean_token_mean,
                                                       loss::aggregation_mode::seq_mean_token_sum_norm,
                                                       loss::aggregation_mode::delta_l};

// A 0/1 mask of right-padded responses with lengths drawn in [0, cols]; row 1 is empty when rows > 2.
std::vector<double> padded_mask(index_type rows, index_type cols, std::uint32_t seed) {
    std::mt19937 generator(seed);
    std::uniform_int_distribution<index_type> length(0, cols);
    std::vector<double> mask(static_cast<std::size_t>(rows * cols), 0.0);
    for (index_type i = 0; i < rows; ++i) {
        const index_type n = rows > 2 && i == 1 ? 0 : std::max<index_type>(length(generator), i == 0 ? 1 : 0);
        for (index_type t = 0; t < n; ++t) mask[i * cols + t] = 1.0;
    }
    return mask;
}

template <class T>
void check_against_reference(index_type rows, index_type cols, index_type padding,
                             const loss::aggregation_options& options, std::uint32_t seed) {
    INFO(type_name<T>() << " rows " << rows << " cols " << cols << " mode " << static_cast<int>(options.mode));
    test_matrix<T> ell(rows, cols, random_values(rows * cols, seed), padding),
        mask(rows, cols, padded_mask(rows, cols, seed + 1), padding + 1);
    test_matrix<T> weights(rows, cols, padding);
    const auto result =
        loss::aggregate_loss(matrix_view<const T>(ell.view), matrix_view<const T>(mask.view), weights.view, options);
    std::vector<double> expected_weights;
    const double expected = reference::aggregate(ell.values(), mask.values(), {rows, cols}, options, &expected_weights);
    // The loss may cancel: measure it against Σ|a·m·ℓ|.
    std::vector<double> magnitude = ell.values();
    for (auto& value : magnitude) value = std::abs(value);
    const double scale = std::max(reference::aggregate(magnitude, mask.values(), {rows, cols}, options), 1e-30);
    CHECK(std::abs(result.loss - expected) / scale < (std::is_same_v<T, double> ? 1e-12 : 2e-5));
    CHECK(relative_error(weights.values(), expected_weights) < tolerance<T>());
    CHECK(weights.padding_untouched());
    double tokens = 0;
    for (double m : mask.values()) tokens += m;
    CHECK(result.token_count == tokens);
}

}  // namespace

TEST_CASE("aggregate_loss gives the issue's numbers on rows [1,2,3,pad] and [4,pad,pad,pad]", "[loss][aggregate]") {
    const double pad = std::numeric_limits<double>::quiet_NaN();  // padding never reaches the result
    const std::vector<double> ell = {1, 2, 3, pad, 4, pad, pad, pad}, mask = {1, 1, 1, 0, 1, 0, 0, 0};
    const auto run = [&](loss::aggregation_options options, std::vector<double>& weights) {
        weights.assign(8, -1.0);
        return loss::aggregate_loss(view(ell.data(), 2, 4), view(mask.data(), 2, 4), view(weights.data(), 2, 4),
                                    options)
            .loss;
    };
    std::vector<double> w;
    loss::aggregation_options options;
    options.mode = loss::aggregation_mode::token_mean;
    CHECK(run(options, w) == Approx(2.5).epsilon(1e-15));
    CHECK(w == std::vector<double>{0.25, 0.25, 0.25, 0, 0.25, 0, 0, 0});
    options.mode = loss::aggregation_mode::token_sum;
    CHECK(run(options, w) == 10.0);
    CHECK(w == std::vector<double>{1, 1, 1, 0, 1, 0, 0, 0});
    options.mode = loss::aggregation_mode::seq_mean_token_sum;
    CHECK(run(options, w) == 5.0);
    CHECK(w == std::vector<double>{0.5, 0.5, 0.5, 0, 0.5, 0, 0, 0});
    options.mode = loss::aggregation_mode::seq_mean_token_mean;
    CHECK(run(options, w) == Approx(3.0).epsilon(1e-15));  // (2 + 4)/2
    CHECK(w[0] == Approx(1.0 / 6));
    CHECK(w[4] == 0.5);
    CHECK(w[3] == 0);
    options.mode = loss::aggregation_mode::seq_mean_token_sum_norm;  // dr_grpo form: ÷B÷T
    CHECK(run(options, w) == 1.25);
    CHECK(w == std::vector<double>{0.125, 0.125, 0.125, 0, 0.125, 0, 0, 0});
    options.form = loss::sum_norm_form::verl_old;  // ÷T only
    CHECK(run(options, w) == 2.5);
    options.normalizer_length = 8.0;
    CHECK(run(options, w) == 1.25);
    // ΔL, α = 1: x = (1/3, 1) / (4/3) = (1/4, 3/4); loss = (6/4 + 4·3/4)/T = 4.5/4.
    options = {};
    options.mode = loss::aggregation_mode::delta_l;
    options.alpha = 1.0;
    CHECK(run(options, w) == Approx(4.5 / 4).epsilon(1e-14));
    CHECK(w[0] == Approx(0.25 / 4));
    CHECK(w[4] == Approx(0.75 / 4));
}

TEMPLATE_TEST_CASE("aggregate_loss matches the reference over SIMD tails, strides and unaligned rows",
                   "[loss][aggregate]", float, double, Eigen::bfloat16, Eigen::half) {
    std::uint32_t seed = 10;
    for (index_type cols : tail_dims) {
        for (const auto mode : all_modes) {
            loss::aggregation_options options;
            options.mode = mode;
            options.alpha = 0.75;
            check_against_reference<TestType>(cols > 1000 ? 3 : 7, cols, cols % 3, options, seed++);
        }
    }
    loss::aggregation_options options;
    options.mode = loss::aggregation_mode::seq_mean_token_sum;
    options.count_empty_rows = true;
    check_against_reference<TestType>(9, 33, 2, options, 77);
    options.mode = loss::aggregation_mode::seq_mean_token_sum_norm;
    options.form = loss::sum_norm_form::verl_old;
    options.normalizer_length = 40.0;
    check_against_reference<TestType>(9, 33, 0, options, 78);
}

TEST_CASE("delta_l with alpha = 0 is the constant (Dr. GRPO) normalizer with L = T_max", "[loss][aggregate]") {
    const index_type rows = 6, cols = 37;
    const auto ell = random_values(rows * cols, 3);
    const auto mask = padded_mask(rows, cols, 4);
    std::vector<double> w_delta(rows * cols), w_norm(rows * cols);
    loss::aggregation_options delta;
    delta.mode = loss::aggregation_mode::delta_l;
    delta.alpha = 0.0;
    loss::aggregation_options norm;
    norm.mode = loss::aggregation_mode::seq_mean_token_sum_norm;
    const double a = loss::aggregate_loss(view(ell.data(), rows, cols), view(mask.data(), rows, cols),
                                          view(w_delta.data(), rows, cols), delta)
                         .loss;
    const double b = loss::aggregate_loss(view(ell.data(), rows, cols), view(mask.data(), rows, cols),
                                          view(w_norm.data(), rows, cols), norm)
                         .loss;
    CHECK(a == Approx(b).epsilon(1e-14));
    CHECK(relative_error(w_delta, w_norm) < 1e-15);
    // α > 0 weighs short responses up: it differs.
    delta.alpha = 1.0;
    CHECK(std::abs(loss::aggregate_loss(view(ell.data(), rows, cols), view(mask.data(), rows, cols), {}, delta).loss -
                   b) > 1e-6);
}

TEST_CASE("micro-batches with global denominators add up to the whole batch (verl #5625, TRL #5619)",
          "[loss][aggregate][micro_batch]") {
    // 8 rows of very different lengths (one empty), split into 4 micro-batches of 2 rows.
    const index_type rows = 8, cols = 29, micro = 2;
    const auto ell = random_values(rows * cols, 5, 0.3, 1.0);
    auto mask = padded_mask(rows, cols, 6);
    for (index_type t = 0; t < cols; ++t) mask[5 * cols + t] = t < 2 ? 1.0 : 0.0;  // a short row next to long ones
    double tokens = 0, sequences = 0, length_weights = 0;
    for (index_type i = 0; i < rows; ++i) {
        double n = 0;
        for (index_type t = 0; t < cols; ++t) n += mask[i * cols + t];
        tokens += n;
        sequences += n > 0 ? 1 : 0;
        length_weights += n > 0 ? std::pow(n, -0.75) : 0;
    }
    for (const auto mode : all_modes) {
        INFO("mode " << static_cast<int>(mode));
        loss::aggregation_options whole_options;
        whole_options.mode = mode;
        std::vector<double> whole_weights(rows * cols);
        const double whole = loss::aggregate_loss(view(ell.data(), rows, cols), view(mask.data(), rows, cols),
                                                  view(whole_weights.data(), rows, cols), whole_options)
                                 .loss;
        for (double dp : {1.0, 2.0}) {
            // dp ranks each take rows/dp rows in micro-batches; each rank's gradient is averaged over ranks.
            loss::aggregation_options options = whole_options;
            options.global_token_count = tokens;
            options.global_sequence_count = sequences;
            options.global_length_weight_sum = length_weights;
            options.data_parallel_size = dp;
            double sum = 0;
            std::vector<double> weights(rows * cols);
            for (index_type begin = 0; begin < rows; begin += micro) {
                sum += loss::aggregate_loss(view(ell.data() + begin * cols, micro, cols),
                                            view(mask.data() + begin * cols, micro, cols),
                                            view(weights.data() + begin * cols, micro, cols), options)
                           .loss;
            }
            CHECK(sum / dp == Approx(whole).epsilon(1e-13));
            for (auto& w : weights) w /= dp;
            CHECK(relative_error(weights, whole_weights) < 1e-14);
        }
        // Without the global denominators the per-micro-batch normalization is biased (verl's legacy
        // path: local token-mean, averaged over the gradient-accumulation steps).
        if (mode == loss::aggregation_mode::token_mean || mode == loss::aggregation_mode::seq_mean_token_mean) {
            double local = 0;
            for (index_type begin = 0; begin < rows; begin += micro)
                local += loss::aggregate_loss(view(ell.data() + begin * cols, micro, cols),
                                              view(mask.data() + begin * cols, micro, cols), {}, whole_options)
                             .loss /
                         static_cast<double>(rows / micro);
            CHECK(std::abs(local - whole) > 1e-3 * std::abs(whole));
        }
    }
    // TRL #5619: dapo normalizes by the tokens of the whole generation batch (4 micro-batches) while an
    // optimizer step accumulates only 2. The step's count restores the token mean of the step.
    loss::aggregation_options dapo;
    dapo.mode = loss::aggregation_mode::token_mean;
    const index_type step_rows = 4;
    double step_tokens = 0;
    for (index_type k = 0; k < step_rows * cols; ++k) step_tokens += mask[k];
    const double step_mean =
        loss::aggregate_loss(view(ell.data(), step_rows, cols), view(mask.data(), step_rows, cols), {}, dapo).loss;
    double with_step = 0, with_generation = 0;
    for (index_type begin = 0; begin < step_rows; begin += micro) {
        dapo.global_token_count = step_tokens;
        with_step += loss::aggregate_loss(view(ell.data() + begin * cols, micro, cols),
                                          view(mask.data() + begin * cols, micro, cols), {}, dapo)
                         .loss;
        dapo.global_token_count = tokens;
        with_generation += loss::aggregate_loss(view(ell.data() + begin * cols, micro, cols),
                                                view(mask.data() + begin * cols, micro, cols), {}, dapo)
                               .loss;
    }
    CHECK(with_step == Approx(step_mean).epsilon(1e-13));
    CHECK(with_generation == Approx(step_mean * step_tokens / tokens).epsilon(1e-13));
}

TEST_CASE("aggregate_loss of an all-masked batch is 0 with zero weights in every mode",
          "[loss][aggregate][degenerate]") {
    const index_type rows = 3, cols = 17;
    std::vector<double> ell(rows * cols, std::numeric_limits<double>::quiet_NaN()), mask(rows * cols, 0.0),
        weights(rows * cols, 5.0);
    for (const auto mode : all_modes) {
        for (bool empty_rows : {false, true}) {
            loss::aggregation_options options;
            options.mode = mode;
            options.count_empty_rows = empty_rows;
            const auto result = loss::aggregate_loss(view(ell.data(), rows, cols), view(mask.data(), rows, cols),
                                                     view(weights.data(), rows, cols), options);
            CHECK(result.loss == 0.0);
            CHECK(max_abs(weights) == 0.0);
            CHECK(result.token_count == 0.0);
        }
    }
    // An empty batch too.
    CHECK(loss::aggregate_loss(view(ell.data(), 0, cols), view(mask.data(), 0, cols)).loss == 0.0);
}

TEST_CASE("aggregate_loss: absent mask, fractional weights and the count_empty_rows option", "[loss][aggregate]") {
    const index_type rows = 4, cols = 9;
    const auto ell = random_values(rows * cols, 8);
    std::vector<double> ones(rows * cols, 1.0);
    loss::aggregation_options options;
    options.mode = loss::aggregation_mode::seq_mean_token_mean;
    CHECK(loss::aggregate_loss(view(ell.data(), rows, cols), matrix_view<const double>{}, {}, options).loss ==
          Approx(loss::aggregate_loss(view(ell.data(), rows, cols), view(ones.data(), rows, cols), {}, options).loss)
              .epsilon(1e-15));
    // Fractional weights: accepted only under mask_rule::weights, and then used as weights.
    std::vector<double> fractional(rows * cols);
    for (std::size_t k = 0; k < fractional.size(); ++k) fractional[k] = static_cast<double>(k % 5) / 4.0;
    require_error_naming(
        [&] { loss::aggregate_loss(view(ell.data(), rows, cols), view(fractional.data(), rows, cols), {}, options); },
        "mask");
    options.mask_values = loss::mask_rule::weights;
    std::vector<double> weights(rows * cols), expected_weights;
    const double value = loss::aggregate_loss(view(ell.data(), rows, cols), view(fractional.data(), rows, cols),
                                              view(weights.data(), rows, cols), options)
                             .loss;
    CHECK(value ==
          Approx(reference::aggregate(ell, fractional, {rows, cols}, options, &expected_weights)).epsilon(1e-14));
    CHECK(relative_error(weights, expected_weights) < 1e-15);
    // A fully-masked row leaves B by default and stays in it with count_empty_rows (TRL).
    std::vector<double> mask(rows * cols, 1.0);
    for (index_type t = 0; t < cols; ++t) mask[2 * cols + t] = 0.0;
    loss::aggregation_options verl, trl;
    verl.mode = trl.mode = loss::aggregation_mode::seq_mean_token_sum;
    trl.count_empty_rows = true;
    const auto a = loss::aggregate_loss(view(ell.data(), rows, cols), view(mask.data(), rows, cols), {}, verl);
    const auto b = loss::aggregate_loss(view(ell.data(), rows, cols), view(mask.data(), rows, cols), {}, trl);
    CHECK(a.sequence_count == 3.0);
    CHECK(b.sequence_count == 4.0);
    CHECK(a.loss * 3.0 == Approx(b.loss * 4.0).epsilon(1e-14));
}

TEMPLATE_TEST_CASE("aggregate_loss is bitwise identical for 1 and 2 threads", "[loss][aggregate][threads]", float,
                   Eigen::bfloat16) {
    const index_type rows = 300, cols = 65;
    test_matrix<TestType> ell(rows, cols, random_values(rows * cols, 31)),
        mask(rows, cols, padded_mask(rows, cols, 32));
    for (const auto mode : all_modes) {
        std::vector<double> losses;
        std::vector<std::vector<TestType>> weights;
        for (int threads : {1, 2}) {
            test_matrix<TestType> w(rows, cols);
            loss::aggregate_loss_options options;
            options.mode = mode;
            options.threads = threads;
            losses.push_back(loss::aggregate_loss(matrix_view<const TestType>(ell.view),
                                                  matrix_view<const TestType>(mask.view), w.view, options)
                                 .loss);
            weights.push_back(w.storage);
        }
        CHECK(std::memcmp(&losses[0], &losses[1], sizeof(double)) == 0);
        CHECK(std::memcmp(weights[0].data(), weights[1].data(), weights[0].size() * sizeof(TestType)) == 0);
    }
}

TEST_CASE("aggregate_loss accepts Eigen matrices and tensors", "[loss][aggregate][view]") {
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> ell(3, 5), mask(3, 5), weights(3, 5);
    ell.setRandom();
    mask.setOnes();
    mask(1, 4) = 0;
    Eigen::Tensor<float, 2, Eigen::RowMajor> ell_tensor(3, 5), weights_tensor(3, 5);
    std::copy(ell.data(), ell.data() + 15, ell_tensor.data());
    const double a = loss::aggregate_loss(ell, mask, weights).loss;
    const double b = loss::aggregate_loss(ell_tensor, mask, weights_tensor).loss;
    CHECK(a == b);
    CHECK(std::equal(weights.data(), weights.data() + 15, weights_tensor.data()));
    CHECK(weights(1, 4) == 0.0f);
    CHECK(weights(0, 0) == Approx(1.0 / 14));
}

TEST_CASE("aggregate_loss rejects bad input, naming the argument", "[loss][aggregate][errors]") {
    std::vector<double> ell(12, 1.0), mask(12, 1.0), weights(12);
    const auto run = [&](loss::aggregation_options options) {
        loss::aggregate_loss(view(ell.data(), 3, 4), view(mask.data(), 3, 4), {}, options);
    };
    require_error_naming([&] { loss::aggregate_loss(view(ell.data(), 3, 4), view(mask.data(), 4, 3)); }, "mask");
    require_error_naming(
        [&] { loss::aggregate_loss(view(ell.data(), 3, 4), view(mask.data(), 3, 4), view(weights.data(), 2, 4)); },
        "weights");
    loss::aggregation_options options;
    options.normalizer_length = 0.0;
    require_error_naming([&] { run(options); }, "normalizer_length");
    options = {};
    options.alpha = -0.5;
    require_error_naming([&] { run(options); }, "alpha");
    options = {};
    options.data_parallel_size = 0.5;
    require_error_naming([&] { run(options); }, "data_parallel_size");
    options = {};
    options.data_parallel_size = 2;
    require_error_naming([&] { run(options); }, "global_token_count");
    options.mode = loss::aggregation_mode::seq_mean_token_mean;
    require_error_naming([&] { run(options); }, "global_sequence_count");
    options = {};
    options.global_token_count = 5.0;  // smaller than this call's 12 tokens
    require_error_naming([&] { run(options); }, "global_token_count");
    options.global_token_count = -1.0;
    require_error_naming([&] { run(options); }, "global_token_count");
    options = {};
    options.mode = loss::aggregation_mode::seq_mean_token_sum;
    options.global_sequence_count = 2.0;
    require_error_naming([&] { run(options); }, "global_sequence_count");
    // A non-binary mask is caught both by the up-front pass and during the main pass.
    mask[7] = 0.5;
    require_error_naming([&] { run({}); }, "mask");
    options = {};
    options.global_token_count = 12.0;
    require_error_naming([&] { run(options); }, "mask");
    mask[7] = -1.0;
    options.mask_values = loss::mask_rule::weights;
    require_error_naming([&] { run(options); }, "mask");
}
