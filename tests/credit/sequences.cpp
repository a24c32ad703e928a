// Spans (SCRL), turns (A²TGPO, MAPO, GTPO, token broadcast) and returns/GAE
// against tests/reference/credit.hpp, with properties.
#include "credit/fixtures.hpp"
#include "reference/credit.hpp"
#include "support.hpp"

#include <normkit/credit/returns.hpp>
#include <normkit/credit/spans.hpp>
#include <normkit/credit/turns.hpp>

using namespace normkit;
using namespace normkit::testing;

namespace {

std::vector<double> holed_mask(index_type rows, index_type cols, std::uint32_t seed, index_type empty_row) {
    std::mt19937 generator(seed);
    std::vector<double> mask(rows * cols, 0.0);
    for (index_type i = 0; i < rows; ++i) {
        if (i == empty_row) continue;
        const index_type length = 1 + static_cast<index_type>(generator() % static_cast<std::uint32_t>(cols));
        for (index_type t = 0; t < length; ++t) mask[i * cols + t] = generator() % 4 == 0 ? 0.0 : 1.0;
    }
    return mask;
}

template <class T>
double tolerance_for() {
    return std::is_same_v<T, double> ? 1e-12 : 3e-6;
}

}  // namespace

// ---- spans ------------------------------------------------------------------

TEMPLATE_TEST_CASE("span_advantages assigns each span its position's advantage", "[credit][spans]", float, double) {
    const index_type rows = 3, cols = 20, positions = 4;
    const auto mask_values = holed_mask(rows, cols, 700, -1);
    std::vector<double> mask_full(rows * cols, 1.0);
    const auto position_values = stored<TestType>(random_values(rows * positions, 701));
    const std::vector<credit::span> spans = {{0, 2, 5, 0}, {0, 5, 9, 1}, {0, 12, 20, 3},
                                             {2, 0, 3, 2}, {2, 7, 7, 1}, {1, 4, 6, 1}};
    std::vector<reference::span_row> reference_spans;
    for (const auto& s : spans) reference_spans.push_back({s.sample, s.start, s.end, s.position});
    test_matrix<TestType> table(rows, positions, position_values, 1), mask(rows, cols, mask_values),
        full(rows, cols, mask_full), out(rows, cols, 2);
    const auto response_values = stored<TestType>(random_values(rows, 702));
    const auto response = to_storage<TestType>(response_values);
    credit::span_advantages(spans, table.view, mask.view, {}, out.view);
    CHECK(out.values() ==
          reference::span_advantages(reference_spans, position_values, positions, mask_values, rows, cols, {}));
    credit::span_advantages(spans, table.view, mask.view, response, out.view,
                            span_settings(credit::outside_span::response_advantage));
    CHECK(out.values() == reference::span_advantages(reference_spans, position_values, positions, mask_values, rows,
                                                     cols, response_values));
    CHECK(out.padding_untouched());
    // With every token valid, a span's advantages sum to |span|·A^(j).
    credit::span_advantages(spans, table.view, full.view, {}, out.view);
    for (const auto& s : spans) {
        double total = 0;
        for (index_type t = s.start; t < s.end; ++t) total += out.values()[s.sample * cols + t];
        CHECK(total == Approx((s.end - s.start) * position_values[s.sample * positions + s.position])
                           .epsilon(tolerance_for<TestType>()));
    }
    for (index_type t = 0; t < cols; ++t)
        CHECK(out.values()[1 * cols + t] == (t == 4 || t == 5 ? position_values[1 * positions + 1] : 0.0));
}

TEST_CASE("span_advantages rejects bad span tables, naming them", "[credit][spans]") {
    std::vector<double> table(2 * 3, 1.0), mask(2 * 10, 1.0), out(2 * 10);
    const auto run = [&](std::vector<credit::span> spans) {
        credit::span_advantages(spans, view(table.data(), 2, 3), view(mask.data(), 2, 10), {}, view(out.data(), 2, 10));
    };
    require_error_naming([&] { run({{0, 0, 5, 0}, {0, 4, 8, 1}}); }, "overlap");
    require_error_naming([&] { run({{0, 0, 9, 0}, {0, 3, 3, 1}, {0, 5, 6, 1}}); }, "overlap");
    require_error_naming([&] { run({{1, 8, 11, 0}}); }, "spans[0]");
    require_error_naming([&] { run({{1, -1, 2, 0}}); }, "spans[0]");
    require_error_naming([&] { run({{1, 5, 2, 0}}); }, "spans[0]");
    require_error_naming([&] { run({{0, 0, 2, 0}, {2, 0, 2, 0}}); }, "spans[1].sample");
    require_error_naming([&] { run({{0, 0, 2, 3}}); }, "position");
    require_error_naming(
        [&] {
            const std::vector<double> one_advantage{1.0};
            const std::vector<credit::span> no_spans{};
            credit::span_advantages(no_spans, view(table.data(), 2, 3), view(mask.data(), 2, 10), one_advantage,
                                    view(out.data(), 2, 10), span_settings(credit::outside_span::response_advantage));
        },
        "response_advantages");
    // Adjacent spans and empty spans are fine; a format-broken response (no spans) gets 0.
    run({{0, 0, 5, 0}, {0, 5, 10, 1}, {1, 3, 3, 2}});
    for (index_type t = 0; t < 10; ++t) CHECK(out[10 + t] == 0.0);
}

// ---- turns ------------------------------------------------------------------

TEMPLATE_TEST_CASE("a2tgpo_advantages matches the reference", "[credit][turns]", float, double) {
    const index_type rows = 9, cols = 6;
    const std::vector<long> ids = {0, 0, 0, 0, 1, 1, 1, 2, 3};
    const std::vector<index_type> group_ids(ids.begin(), ids.end()), count = {3, 5, 5, 0, 2, 4, 6, 1, 5};
    auto ig_values = stored<TestType>(random_values(rows * cols, 800));
    ig_values[4 * cols + 0] = ig_values[5 * cols + 0] = ig_values[6 * cols + 0] = 0.25;  // an all-equal cell
    const auto outcome_values = stored<TestType>(random_values(rows, 801));
    test_matrix<TestType> ig(rows, cols, ig_values, 1), advantages(rows, cols, 2), clip(rows, cols);
    const auto outcome = to_storage<TestType>(outcome_values);
    for (double gamma : {1.0, 0.9}) {
        credit::a2tgpo_options options;
        options.gamma = gamma;
        credit::a2tgpo_advantages(ig.view, count, normkit::group_ids(group_ids), outcome, advantages.view, clip.view,
                                  options);
        reference::turn_rows expected, expected_clip;
        reference::a2tgpo(turn_rows_of(ig_values, cols, count), ids, outcome_values, gamma, 0.3, 0.3, 0, 1e-6, expected,
                          expected_clip);
        CHECK(relative_error(advantages.values(), table_of(expected, cols)) < tolerance_for<TestType>() * 4);
        CHECK(relative_error(clip.values(), table_of(expected_clip, cols, 1.0)) < tolerance_for<TestType>() * 4);
        CHECK(advantages.padding_untouched());
        for (index_type i = 0; i < rows; ++i)
            for (index_type t = 0; t < count[i]; ++t) {
                CHECK(clip.values()[i * cols + t] > 0.7);
                CHECK(clip.values()[i * cols + t] < 1.3);
            }
    }
    require_error_naming(
        [&] {
            const std::vector<index_type> turn_count{3, 5, 5, 0, 2, 4, 7, 1, 5};
            credit::a2tgpo_advantages(ig.view, turn_count, normkit::group_ids(group_ids), outcome, advantages.view);
        },
        "turn_count[6]");
}

TEST_CASE("a2tgpo: the accumulated advantage has variance ~1 at every depth for i.i.d. unit-variance gains",
          "[credit][turns]") {
    const index_type groups = 500, group_size = 8, rows = groups * group_size, turns = 6;
    const auto ig = random_values(rows * turns, 810);
    std::vector<index_type> ids(rows), count(rows, turns);
    for (index_type i = 0; i < rows; ++i) ids[i] = i / group_size;
    std::vector<double> outcome(rows, 0.0), advantages(rows * turns);
    credit::a2tgpo_options options;
    options.alpha = 1.0;
    credit::a2tgpo_advantages(view(ig.data(), rows, turns), count, normkit::group_ids(ids), outcome,
                              view(advantages.data(), rows, turns), {}, options);
    for (index_type t = 0; t < turns; ++t) {
        double sum = 0, squares = 0;
        for (index_type i = 0; i < rows; ++i) sum += advantages[i * turns + t];
        const double mean = sum / rows;
        for (index_type i = 0; i < rows; ++i)
            squares += (advantages[i * turns + t] - mean) * (advantages[i * turns + t] - mean);
        INFO("depth " << t);
        CHECK(std::abs(mean) < 1e-9);
        CHECK(squares / rows == Approx(1.0).margin(0.06));
    }
}

TEMPLATE_TEST_CASE("mapo_advantages and gtpo_advantages match the reference in each scope", "[credit][turns]", float,
                   double) {
    const index_type rows = 8, cols = 5;
    const std::vector<long> ids = {4, 4, 4, 7, 7, 7, 7, 9};
    const std::vector<index_type> group_ids(ids.begin(), ids.end()), count = {5, 2, 4, 3, 3, 0, 5, 2};
    const auto reward_values = stored<TestType>(random_values(rows * cols, 820));
    test_matrix<TestType> rewards(rows, cols, reward_values, 1), out(rows, cols, 2);
    const auto turns = turn_rows_of(reward_values, cols, count);
    for (auto scope : {credit::normalization_scope::group, credit::normalization_scope::batch}) {
        credit::mapo_options options;
        options.immediate_scope = scope;
        options.gamma = 0.8;
        credit::mapo_advantages(rewards.view, count, normkit::group_ids(group_ids), out.view, options);
        CHECK(relative_error(out.values(), table_of(reference::mapo(turns, ids, 0.5, 0.8, 1e-8,
                                                                    scope == credit::normalization_scope::batch),
                                                    cols)) < tolerance_for<TestType>() * 4);
    }
    for (auto scope : {credit::gtpo_scope::all_turns, credit::gtpo_scope::turn_index}) {
        credit::gtpo_options options;
        options.scope = scope;
        credit::gtpo_advantages(rewards.view, count, normkit::group_ids(group_ids), out.view, options);
        CHECK(relative_error(out.values(), table_of(reference::gtpo(turns, ids, 0.9,
                                                                    scope == credit::gtpo_scope::turn_index, 1, 1e-6),
                                                    cols)) < tolerance_for<TestType>() * 4);
        CHECK(out.padding_untouched());
    }
    // A group of one row: every turn-index cell has one member, so A_turn = 0.
    credit::mapo_options options;
    options.alpha = 1.0;
    credit::mapo_advantages(rewards.view, count, normkit::group_ids(group_ids), out.view, options);
    for (index_type t = 0; t < cols; ++t) CHECK(out.values()[7 * cols + t] == 0.0);
    require_error_naming(
        [&] {
            const std::vector<index_type> three_ids(3);
            credit::gtpo_advantages(rewards.view, count, normkit::group_ids(three_ids), out.view);
        },
        "group_ids");
    credit::gtpo_options bad;
    bad.gamma = -1;
    require_error_naming(
        [&] { credit::gtpo_advantages(rewards.view, count, normkit::group_ids(group_ids), out.view, bad); }, "gamma");
}

TEST_CASE("turns_to_tokens broadcasts per-turn values and rejects non-monotone turn indices", "[credit][turns]") {
    std::vector<double> per_turn = {1, 2, 3, 10, 20, 30}, out(2 * 7);
    std::vector<index_type> turn_index = {-1, 0, 0, -1, 1, 2, 2, 0, -1, 2, 2, -1, -1, -1};
    credit::turns_to_tokens(view(per_turn.data(), 2, 3), view(turn_index.data(), 2, 7), view(out.data(), 2, 7));
    CHECK(out == std::vector<double>{0, 1, 1, 0, 2, 3, 3, 10, 0, 30, 30, 0, 0, 0});
    turn_index[5] = 0;
    require_error_naming(
        [&] {
            credit::turns_to_tokens(view(per_turn.data(), 2, 3), view(turn_index.data(), 2, 7), view(out.data(), 2, 7));
        },
        "monotone");
    turn_index[5] = 3;
    require_error_naming(
        [&] {
            credit::turns_to_tokens(view(per_turn.data(), 2, 3), view(turn_index.data(), 2, 7), view(out.data(), 2, 7));
        },
        "turn_index(0, 5)");
}

// ---- returns ----------------------------------------------------------------

TEMPLATE_TEST_CASE("discounted_returns and GAE carry through masked tokens as verl-new", "[credit][returns]", float,
                   double) {
    for (index_type cols : {index_type(1), index_type(7), index_type(64)}) {
        const index_type rows = 5;
        const auto mask_values = holed_mask(rows, cols, 900 + cols, 2);
        const auto reward_values = stored<TestType>(random_values(rows * cols, 901));
        const auto value_values = stored<TestType>(random_values(rows * cols, 902));
        test_matrix<TestType> rewards(rows, cols, reward_values, 1), values(rows, cols, value_values),
            mask(rows, cols, mask_values), returns(rows, cols, 2), advantages(rows, cols), gae_returns(rows, cols);
        for (double gamma : {1.0, 0.95}) {
            INFO("cols " << cols << " gamma " << gamma);
            credit::discounted_returns(rewards.view, mask.view, returns.view, returns_options(gamma));
            CHECK(relative_error(returns.values(),
                                 reference::discounted_returns(reward_values, mask_values, rows, cols, gamma),
                                 1.0) < tolerance_for<TestType>() * cols);
            CHECK(returns.padding_untouched());
            for (double lambda : {1.0, 0.9}) {
                credit::generalized_advantage_estimation(rewards.view, values.view, mask.view, advantages.view,
                                                         gae_returns.view, gae_settings(gamma, lambda));
                const auto expected =
                    reference::gae(reward_values, value_values, mask_values, rows, cols, gamma, lambda);
                CHECK(relative_error(advantages.values(), expected, 1.0) < tolerance_for<TestType>() * cols * 2);
                for (std::size_t k = 0; k < expected.size(); ++k)
                    CHECK(gae_returns.values()[k] == Approx(mask_values[k] != 0 ? expected[k] + value_values[k] : 0.0)
                                                         .margin(tolerance_for<TestType>() * cols * 4));
            }
            // γ = λ = 1: GAE is the return minus the value.
            credit::generalized_advantage_estimation(rewards.view, values.view, mask.view, advantages.view, {},
                                                     gae_settings(gamma, 1.0));
            if (gamma == 1.0) {
                for (std::size_t k = 0; k < mask_values.size(); ++k)
                    CHECK(advantages.values()[k] ==
                          Approx(mask_values[k] != 0 ? returns.values()[k] - value_values[k] : 0.0)
                              .margin(tolerance_for<TestType>() * cols * 4));
            }
        }
        for (index_type t = 0; t < cols; ++t) CHECK(returns.values()[2 * cols + t] == 0.0);  // the all-masked row
    }
    std::vector<double> x(4, 1.0), y(4);
    require_error_naming(
        [&] {
            credit::discounted_returns(view(x.data(), 2, 2), view(x.data(), 2, 2), view(y.data(), 2, 2),
                                       returns_options(-0.5));
        },
        "gamma");
    require_error_naming(
        [&] {
            credit::generalized_advantage_estimation(view(x.data(), 2, 2), view(x.data(), 2, 2), view(x.data(), 2, 2),
                                                     view(y.data(), 2, 2), {}, gae_settings(1.0, NAN));
        },
        "lambda");
    require_error_naming(
        [&] {
            credit::discounted_returns(view(x.data(), 2, 2), view(x.data(), 1, 4), view(y.data(), 2, 2),
                                       returns_options(1.0));
        },
        "rewards");
}
