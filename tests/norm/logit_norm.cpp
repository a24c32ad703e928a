// LogitNorm loss and the p-norm selective-classification score, AURC and the
// choice of p, against tests/reference/norm_elementwise.hpp.
#include "reference/norm_elementwise.hpp"
#include "support.hpp"

#include <normkit/norm/logit_norm.hpp>

#include <algorithm>
#include <cstring>

using namespace normkit;
using namespace normkit::testing;

namespace {

norm::selective_score_options score_order(double p, int threads = 1) {
    norm::selective_score_options options;
    options.p = p;
    options.threads = threads;
    return options;
}

norm::select_norm_order_options candidate_orders(std::vector<double> candidates) {
    norm::select_norm_order_options options;
    options.candidates = std::move(candidates);
    return options;
}

std::vector<long> random_labels(index_type rows, index_type classes, std::uint32_t seed) {
    std::mt19937 generator(seed);
    std::uniform_int_distribution<long> pick(0, classes - 1);
    std::vector<long> labels(rows);
    for (auto& label : labels) label = pick(generator);
    return labels;
}

// ∂(mean loss)/∂f in double, from the reference loss by central differences.
std::vector<double> loss_gradient_by_differences(const std::vector<double>& logits, index_type rows, index_type classes,
                                                 const std::vector<long>& labels, double temperature) {
    return finite_difference(
        logits,
        [&](const std::vector<double>& f) {
            return reference::logit_norm_loss(f, rows, classes, labels, temperature, 1e-7);
        },
        1e-6);
}

template <class T>
void check_loss(index_type rows, index_type classes, double temperature, index_type padding, std::uint32_t seed) {
    INFO(type_name<T>() << " rows " << rows << " classes " << classes << " temperature " << temperature << " padding "
                        << padding);
    using S = core::statistic_t<T>;
    test_matrix<T> logits(rows, classes, random_values(rows * classes, seed, 0.5, 3.0), padding),
        gradient(rows, classes, padding + 1);
    const auto labels = random_labels(rows, classes, seed + 1);
    std::vector<S> losses(rows);
    norm::logit_norm_options options;
    options.temperature = temperature;
    const double loss = norm::logit_norm_loss_gradient(logits.view, labels, gradient.view, losses, options);
    std::vector<double> losses_ref;
    const double loss_ref =
        reference::logit_norm_loss(logits.values(), rows, classes, labels, temperature, 1e-7, &losses_ref);
    // The loss is O(1/τ): float arithmetic on logits stored exactly.
    const double value_tolerance = std::is_same_v<T, double> ? 1e-12 : 2e-5;
    CHECK(std::abs(loss - loss_ref) <= value_tolerance * std::max(1.0, 1.0 / temperature));
    CHECK(relative_error(to_double(losses), losses_ref, 1.0 / temperature) < value_tolerance);
    // The value alone is the same computation (up to the compiler's choice of fused multiply-adds).
    CHECK(std::abs(norm::logit_norm_loss(logits.view, labels, {}, options) - loss) <=
          1e-6 * std::max(1.0, std::abs(loss)));
    if (classes == 1) CHECK(loss == 0.0);
    // The gradient against double differences of the reference at the stored logits.
    const auto expected = loss_gradient_by_differences(logits.values(), rows, classes, labels, temperature);
    const double gradient_tolerance =
        std::is_same_v<T, double> ? 1e-6 : (std::is_same_v<T, float> ? 1e-4 : tolerance<T>() * 2);
    CHECK(relative_error(gradient.values(), expected) < gradient_tolerance);
    CHECK(gradient.padding_untouched());
}

}  // namespace

TEMPLATE_TEST_CASE("logit_norm_loss and its gradient match the reference over class counts", "[logit_norm]", float,
                   double, Eigen::bfloat16, Eigen::half) {
    std::uint32_t seed = 1;
    for (index_type classes : {index_type(1), index_type(2), index_type(3), index_type(10), index_type(17),
                               index_type(33), index_type(100)}) {
        for (double temperature : {1.0, 0.04}) check_loss<TestType>(5, classes, temperature, classes % 3, seed++);
    }
    check_loss<TestType>(2, 257, 1.0, 1, seed++);
}

TEST_CASE("logit_norm_loss degenerate rows", "[logit_norm]") {
    SECTION("an empty batch has loss 0") {
        std::vector<double> none;
        const std::vector<long> no_labels{};
        CHECK(norm::logit_norm_loss(view(none.data(), 0, 10), no_labels) == 0.0);
    }
    SECTION("a zero logit row: loss log K, gradient g/(τδ)") {
        const index_type classes = 4;
        std::vector<double> logits(2 * classes, 0.0), gradient(2 * classes);
        logits[classes] = 1.0;  // a second, ordinary row
        const std::vector<long> labels = {2, 0};
        std::vector<double> losses(2);
        norm::logit_norm_loss_gradient(view(logits.data(), 2, classes), labels, view(gradient.data(), 2, classes),
                                       losses);
        CHECK(losses[0] == Approx(std::log(4.0)).epsilon(1e-14));
        for (index_type k = 0; k < classes; ++k) {
            const double g = (0.25 - (k == 2 ? 1.0 : 0.0)) / 2;  // (p − e_y)/N
            CHECK(gradient[k] == Approx(g / 1e-7).epsilon(1e-9));
        }
        CHECK(std::isfinite(gradient[classes]));
    }
    SECTION("the normalized logits have norm 1/τ: the loss is bounded by 2/τ + log K") {
        const index_type classes = 7;
        auto logits = random_values(3 * classes, 5, 0.0, 1e4);
        const std::vector<long> labels = {0, 3, 6};
        std::vector<double> losses(3);
        norm::logit_norm_options options;
        options.temperature = 0.1;
        norm::logit_norm_loss(view(logits.data(), 3, classes), labels, losses, options);
        for (double value : losses) CHECK((value >= 0 && value <= 2 / 0.1 + std::log(7.0)));
    }
}

TEST_CASE("selective_classification_score matches the reference", "[logit_norm][selective]") {
    for (index_type classes : {index_type(1), index_type(2), index_type(3), index_type(10), index_type(17),
                               index_type(100), index_type(1000)}) {
        const index_type rows = 6;
        const auto logits = random_values(rows * classes, 11 + classes, 2.0, 3.0);
        for (double p : {0.5, 1.0, 2.0, 3.0, 7.5, 10.0, double(INFINITY)}) {
            INFO("classes " << classes << " p " << p);
            const auto expected = reference::selective_score(logits, rows, classes, p);
            std::vector<double> scores(rows);
            norm::selective_classification_score(view(logits.data(), rows, classes), scores, score_order(p));
            CHECK(relative_error(scores, expected, 1.0) < 1e-12);
            test_matrix<float> stored_logits(rows, classes, logits, 2);
            std::vector<float> float_scores(rows);
            norm::selective_classification_score(stored_logits.view, float_scores, score_order(p));
            CHECK(relative_error(to_double(float_scores),
                                 reference::selective_score(stored_logits.values(), rows, classes, p), 1.0) < 2e-5);
            test_matrix<Eigen::bfloat16> bf16_logits(rows, classes, logits, 1);
            norm::selective_classification_score(bf16_logits.view, float_scores, score_order(p));
            CHECK(relative_error(to_double(float_scores),
                                 reference::selective_score(bf16_logits.values(), rows, classes, p), 1.0) < 2e-5);
        }
    }
}

TEST_CASE("selective_classification_score, p = 2: within 1 ulp of float64 on long offset rows",
          "[logit_norm][selective][accuracy]") {
    // The p = 2 score comes from the row's moments in double (no sum in float), so float and
    // 16-bit rows keep one rounding from the exact score, however long and far from zero.
    const index_type rows = 5;
    for (index_type classes : tail_dims) {
        for (double offset : {0.0, 100.0, 1e4}) {  // 1e4: bf16 rows of σ = 2 are nearly constant there
            INFO("classes " << classes << " offset " << offset);
            const auto logits = random_values(rows * classes, 3 + classes, offset, 2.0);
            std::vector<float> scores(rows);
            const auto check = [&](const std::vector<double>& stored) {
                const auto expected = reference::selective_score(stored, rows, classes, 2.0);
                for (index_type i = 0; i < rows; ++i) {
                    const float e = static_cast<float>(expected[i]);
                    const double ulp = static_cast<double>(std::nextafter(e, INFINITY) - e);
                    CHECK(std::abs(static_cast<double>(scores[i]) - expected[i]) <= ulp);
                }
            };
            test_matrix<float> as_float(rows, classes, logits, 3);
            norm::selective_classification_score(as_float.view, scores);
            check(as_float.values());
            test_matrix<Eigen::bfloat16> as_bf16(rows, classes, logits, 1);
            norm::selective_classification_score(as_bf16.view, scores);
            check(as_bf16.values());
        }
    }
}

TEST_CASE("selective_classification_score properties", "[logit_norm][selective]") {
    const index_type rows = 20, classes = 37;
    const auto logits = random_values(rows * classes, 21, 0.0, 2.0);
    SECTION("invariant to positive scaling and shifting of the logits") {
        for (double p : {1.0, 2.0, 5.0, 10.0}) {
            std::vector<double> scores(rows), transformed_scores(rows);
            norm::selective_classification_score(view(logits.data(), rows, classes), scores, score_order(p));
            for (double scale : {1e-3, 0.5, 7.0, 1e4}) {
                for (double shift : {-100.0, 0.0, 3.25, 1e4}) {
                    INFO("p " << p << " scale " << scale << " shift " << shift);
                    std::vector<double> transformed(logits.size());
                    for (std::size_t k = 0; k < logits.size(); ++k) transformed[k] = scale * logits[k] + shift;
                    norm::selective_classification_score(view(transformed.data(), rows, classes), transformed_scores,
                                                         score_order(p));
                    CHECK(relative_error(transformed_scores, scores) < 1e-9);
                }
            }
            // In float the shift costs at most the precision of the shifted logits.
            std::vector<float> as_float(logits.begin(), logits.end()), shifted(logits.size()), float_scores(rows),
                shifted_scores(rows);
            for (std::size_t k = 0; k < logits.size(); ++k) shifted[k] = 4.0f * as_float[k] + 8.0f;
            norm::selective_classification_score(view(as_float.data(), rows, classes), float_scores, score_order(p));
            norm::selective_classification_score(view(shifted.data(), rows, classes), shifted_scores, score_order(p));
            CHECK(relative_error(to_double(shifted_scores), to_double(float_scores)) < 1e-5);
        }
    }
    SECTION("scores lie in (0, 1]; a constant row scores 0") {
        std::vector<double> with_constant = logits, scores(rows);
        std::fill(with_constant.begin() + classes, with_constant.begin() + 2 * classes, 3.5);
        norm::selective_classification_score(view(with_constant.data(), rows, classes), scores, score_order(2.0));
        CHECK(scores[1] == 0.0);
        for (index_type i = 0; i < rows; ++i)
            if (i != 1) CHECK((scores[i] > 0 && scores[i] <= 1));
        // One-hot-like rows reach the maximum for p = ∞: max z̃ = ‖z̃‖_∞.
        std::vector<double> one_hot(classes, 0.0), score(1);
        one_hot[4] = 5.0;
        norm::selective_classification_score(view(one_hot.data(), 1, classes), score, score_order(INFINITY));
        CHECK(score[0] == Approx(1.0).epsilon(1e-15));
    }
}

TEST_CASE("area_under_risk_coverage", "[logit_norm][aurc]") {
    SECTION("distinct scores: the mean over coverages of the selective risk") {
        const std::vector<double> scores = {0.9, 0.1, 0.5, 0.7, 0.3, 0.8};
        const std::vector<double> errors = {0, 1, 1, 0, 1, 0};
        // Accepted in order 0.9, 0.8, 0.7, 0.5, 0.3, 0.1 → errors 0, 0, 0, 1, 1, 1.
        CHECK(norm::area_under_risk_coverage(scores, errors) ==
              Approx(reference::aurc_in_order({0, 0, 0, 1, 1, 1})).epsilon(1e-15));
        CHECK(norm::area_under_risk_coverage(scores, errors) ==
              Approx((0 + 0 + 0 + 1.0 / 4 + 2.0 / 5 + 3.0 / 6) / 6).epsilon(1e-15));
    }
    SECTION("tied scores: the average over every order of the tie") {
        const std::vector<float> scores = {0.5f, 0.9f, 0.5f, 0.2f, 0.5f, 0.7f};
        const std::vector<double> errors = {1, 0, 0, 1, 1, 0};
        // The tie {0, 2, 4} sits at positions 3..5 after 0.9 and 0.7; average the reference over its 3! orders.
        std::vector<int> tie = {0, 2, 4};
        double total = 0;
        int orders = 0;
        do {
            total += reference::aurc_in_order(
                {errors[1], errors[5], errors[tie[0]], errors[tie[1]], errors[tie[2]], errors[3]});
            ++orders;
        } while (std::next_permutation(tie.begin(), tie.end()));
        CHECK(norm::area_under_risk_coverage(scores, errors) == Approx(total / orders).epsilon(1e-14));
        // And the input order does not matter.
        const std::vector<float> reversed_scores(scores.rbegin(), scores.rend());
        const std::vector<double> reversed_errors(errors.rbegin(), errors.rend());
        CHECK(norm::area_under_risk_coverage(reversed_scores, reversed_errors) ==
              norm::area_under_risk_coverage(scores, errors));
    }
    SECTION("empty input gives 0; errors only at the lowest scores give the least AURC") {
        CHECK(norm::area_under_risk_coverage(std::vector<double>{}, std::vector<double>{}) == 0.0);
        const std::vector<double> scores = {4, 3, 2, 1}, best = {0, 0, 1, 1}, worst = {1, 1, 0, 0};
        CHECK(norm::area_under_risk_coverage(scores, best) < norm::area_under_risk_coverage(scores, worst));
    }
}

TEST_CASE("select_norm_order picks the p of least validation AURC", "[logit_norm][selective]") {
    // Logits whose confidence is informative: the true class gets a margin that
    // varies per sample, and some samples are misclassified.
    const index_type rows = 300, classes = 10;
    auto logits = random_values(rows * classes, 31, 0.0, 1.0);
    const auto labels = random_labels(rows, classes, 32);
    const auto margins = random_values(rows, 33, 0.5, 1.5);
    for (index_type i = 0; i < rows; ++i) logits[i * classes + labels[i]] += margins[i];
    const auto selection = norm::select_norm_order(view(logits.data(), rows, classes), labels);
    REQUIRE(selection.aurcs.size() == 10);
    std::vector<double> errors(rows);
    for (index_type i = 0; i < rows; ++i) {
        const auto row = logits.begin() + i * classes;
        errors[i] = std::max_element(row, row + classes) - row == labels[i] ? 0.0 : 1.0;
    }
    double best_aurc = INFINITY, best_p = 0;
    for (int p = 1; p <= 10; ++p) {
        std::vector<double> scores = reference::selective_score(logits, rows, classes, p);
        const double aurc = norm::area_under_risk_coverage(scores, errors);
        CHECK(selection.aurcs[p - 1] == Approx(aurc).epsilon(1e-9));
        if (aurc < best_aurc) {
            best_aurc = aurc;
            best_p = p;
        }
    }
    CHECK(selection.p == best_p);
    CHECK(selection.aurc == Approx(best_aurc).epsilon(1e-9));
    const auto restricted =
        norm::select_norm_order(view(logits.data(), rows, classes), labels, candidate_orders({2.0, 2.0}));
    CHECK(restricted.p == 2.0);
    CHECK(restricted.aurcs.size() == 2);
}

TEMPLATE_TEST_CASE("logit normalization is bitwise identical for 1 and 2 threads", "[logit_norm][threads]", float,
                   Eigen::bfloat16) {
    for (index_type rows : {index_type(1), index_type(33), index_type(1000), index_type(5000)}) {
        const index_type classes = 19;
        test_matrix<TestType> logits(rows, classes, random_values(rows * classes, 41, 0.0, 2.0));
        const auto labels = random_labels(rows, classes, 42);
        std::vector<std::vector<TestType>> gradients;
        std::vector<double> losses;
        std::vector<std::vector<float>> scores;
        for (int threads : {1, 2}) {
            test_matrix<TestType> gradient(rows, classes);
            norm::logit_norm_options options;
            options.threads = threads;
            losses.push_back(norm::logit_norm_loss_gradient(logits.view, labels, gradient.view, {}, options));
            gradients.push_back(gradient.storage);
            std::vector<float> s(rows);
            norm::selective_classification_score(logits.view, s, score_order(3.0, threads));
            scores.push_back(s);
        }
        CHECK(losses[0] == losses[1]);
        CHECK(std::memcmp(gradients[0].data(), gradients[1].data(), gradients[0].size() * sizeof(TestType)) == 0);
        CHECK(scores[0] == scores[1]);
    }
}

TEST_CASE("logit normalization rejects bad input, naming the argument", "[logit_norm][errors]") {
    std::vector<float> logits(12, 1.0f), gradient(12), scores(3);
    const std::vector<long> labels = {0, 1, 2}, bad_labels = {0, 4, 1}, short_labels = {0, 1};
    const auto z = view(logits.data(), 3, 4);
    norm::logit_norm_options cold;
    cold.temperature = 0;
    norm::logit_norm_options no_delta;
    no_delta.delta = -1;
    require_error_naming([&] { norm::logit_norm_loss(z, bad_labels); }, "labels[1]");
    require_error_naming([&] { norm::logit_norm_loss(z, short_labels); }, "labels");
    require_error_naming([&] { norm::logit_norm_loss(z, labels, {}, cold); }, "temperature");
    require_error_naming([&] { norm::logit_norm_loss(z, labels, {}, no_delta); }, "delta");
    require_error_naming([&] { norm::logit_norm_loss_gradient(z, labels, view(gradient.data(), 4, 3)); }, "gradient");
    require_error_naming([&] { norm::logit_norm_loss(z, labels, vector_view<float>(scores.data(), 2)); }, "losses");
    require_error_naming(
        [&] { norm::selective_classification_score(z, vector_view<float>(scores.data(), 2), score_order(2.0)); },
        "scores");
    require_error_naming([&] { norm::selective_classification_score(z, scores, score_order(0.0)); }, "p must");
    require_error_naming([&] { norm::selective_classification_score(z, scores, score_order(NAN)); }, "p must");
    require_error_naming(
        [&] {
            norm::area_under_risk_coverage(std::vector<double>{1, 2}, std::vector<double>{1});
        },
        "losses");
    require_error_naming(
        [&] {
            norm::area_under_risk_coverage(std::vector<double>{1, NAN}, std::vector<double>{1, 0});
        },
        "scores[1]");
    const std::vector<long> no_labels{};
    require_error_naming([&] { norm::select_norm_order(view(logits.data(), 0, 4), no_labels); }, "validation_logits");
    require_error_naming([&] { norm::select_norm_order(z, labels, candidate_orders({})); }, "candidates");
}
