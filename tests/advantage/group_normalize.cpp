// group_normalize and the moments type: every option against
// tests/reference/advantage_options.hpp, the frameworks' regression cases,
// the properties from the math, bad input, threads.
#include "reference/advantage_options.hpp"
#include "support.hpp"

#include <normkit/advantage/group_normalize.hpp>
#include <normkit/advantage/presets.hpp>

#include <algorithm>
#include <cstring>
#include <random>

using namespace normkit;
using namespace normkit::advantage;
using namespace normkit::testing;

namespace {

// A batch: rewards, ids, and optional mask / lengths / baseline.
struct batch_data {
    std::vector<double> rewards;
    reference::ids_t ids;
    index_type group_size = 0;  // > 0: contiguous
    std::vector<int> valid;
    std::vector<double> lengths;
    std::vector<double> baseline;
};

batch_data contiguous_batch(index_type group_size, index_type groups, std::uint32_t seed, bool binary = false) {
    batch_data data;
    data.group_size = group_size;
    const auto n = static_cast<std::size_t>(group_size * groups);
    data.rewards = random_values(n, seed, 0.5, 1.0);
    if (binary) {
        std::mt19937 generator(seed);
        for (auto& value : data.rewards) value = static_cast<double>(generator() % 2);
    }
    data.ids = reference::contiguous_ids(n, static_cast<std::size_t>(group_size));
    data.baseline = random_values(n, seed + 7);
    return data;
}

// Ragged groups of 1..max_size with large, shuffled ids; NaNs, a mask and lengths (some zero).
batch_data ragged_batch(std::uint32_t seed, bool with_extras, std::int64_t id_scale = 1) {
    std::mt19937 generator(seed);
    batch_data data;
    std::vector<std::int64_t> ids;
    for (std::int64_t g = 0; g < 9; ++g) {
        const index_type size = g == 0 ? 1 : 1 + static_cast<index_type>(generator() % 19);
        for (index_type j = 0; j < size; ++j) ids.push_back(g * 37 * id_scale + 5);
    }
    std::shuffle(ids.begin(), ids.end(), generator);
    data.ids = ids;
    data.rewards = random_values(ids.size(), seed + 1, -0.3, 2.0);
    data.baseline = random_values(ids.size(), seed + 2);
    if (with_extras) {
        data.valid.assign(ids.size(), 1);
        data.lengths.assign(ids.size(), 0);
        for (std::size_t i = 0; i < ids.size(); ++i) {
            if (generator() % 9 == 0) data.rewards[i] = reference::nan_value;
            if (generator() % 11 == 0) data.valid[i] = 0;
            data.lengths[i] = static_cast<double>(generator() % 13 == 0 ? 0 : 1 + generator() % 40);
        }
    }
    return data;
}

template <class T>
std::vector<double> run(const batch_data& data, const group_normalize_options& options, bool use_token_mask = false) {
    const auto rewards = to_storage<T>(data.rewards);
    const auto baseline = to_storage<T>(data.baseline);
    std::vector<std::uint8_t> valid(data.valid.begin(), data.valid.end());
    std::vector<std::int64_t> lengths(data.lengths.begin(), data.lengths.end());
    const index_type width = 48;
    std::vector<std::uint8_t> mask;
    reward_inputs<T> inputs;
    inputs.rewards = rewards;
    inputs.grouping = data.group_size > 0 ? contiguous_groups(data.group_size) : group_ids(data.ids);
    inputs.valid = valid;
    inputs.baseline = baseline;
    if (use_token_mask && !lengths.empty()) {
        // The same token counts as a [n × T] mask with holes (not a prefix).
        mask.assign(lengths.size() * width, 0);
        for (std::size_t i = 0; i < lengths.size(); ++i)
            for (index_type t = 0; t < lengths[i]; ++t) mask[i * width + (t * 7) % width] = 1;
        inputs.token_mask =
            view(static_cast<const std::uint8_t*>(mask.data()), static_cast<index_type>(lengths.size()), width);
    } else {
        inputs.lengths = lengths;
    }
    std::vector<T> output(rewards.size(), T(-99));
    group_normalize(inputs, output, options);
    return to_double(output);
}

template <class T>
void check_against_reference(const batch_data& data, const group_normalize_options& options,
                             bool use_token_mask = false) {
    const auto expected = reference::group_normalize(stored<T>(data.rewards), data.ids, data.valid, data.lengths,
                                                     stored<T>(data.baseline), options);
    const auto actual = run<T>(data, options, use_token_mask);
    const double tolerance = std::is_same_v<T, double> ? 1e-9 : 2e-5;
    CHECK(relative_error(actual, expected, 1.0) < tolerance);
}

const center_mode all_centers[] = {center_mode::group_mean,      center_mode::batch_mean,    center_mode::leave_one_out,
                                   center_mode::length_weighted, center_mode::window_median, center_mode::window_mean,
                                   center_mode::baseline,        center_mode::none};
const scale_mode all_scales[] = {scale_mode::group_std, scale_mode::batch_std, scale_mode::window_spread,
                                 scale_mode::none};
const eps_mode all_placements[] = {eps_mode::add_to_std, eps_mode::inside_sqrt, eps_mode::clamp_variance,
                                   eps_mode::std_floor_skip};

}  // namespace

TEMPLATE_TEST_CASE("group_normalize matches the reference for every option, contiguous and ragged",
                   "[advantage][group_normalize]", float, double) {
    std::vector<batch_data> batches;
    std::uint32_t seed = 10;
    for (index_type size : {1, 2, 3, 15, 16, 17, 33}) batches.push_back(contiguous_batch(size, 4, seed++));
    batches.push_back(contiguous_batch(16, 6, seed++, true));
    batches.push_back(ragged_batch(seed++, false));
    batches.push_back(ragged_batch(seed++, true));
    batches.push_back(ragged_batch(seed++, true, 1000000007));  // ids far beyond n: the hashed path
    for (std::size_t b = 0; b < batches.size(); ++b) {
        const auto& data = batches[b];
        const bool has_lengths = !data.lengths.empty();
        for (auto center : all_centers)
            for (auto scale : all_scales)
                for (auto placement : all_placements)
                    for (int ddof : {0, 1})
                        for (auto singleton : {singleton_policy::keep_raw, singleton_policy::zero}) {
                            if (center == center_mode::length_weighted && !has_lengths) continue;
                            group_normalize_options options;
                            options.center = center;
                            options.scale = scale;
                            options.placement = placement;
                            options.ddof = ddof;
                            options.singleton = singleton;
                            options.eps = placement == eps_mode::std_floor_skip ? 1e-3 : 1e-4;
                            INFO("batch " << b << " center " << int(center) << " scale " << int(scale) << " placement "
                                          << int(placement) << " ddof " << ddof << " singleton " << int(singleton));
                            check_against_reference<TestType>(data, options);
                        }
        // Whitening, clip, the window fraction and empty responses on a subset of centers.
        for (auto whiten : {whiten_mode::sample_weighted, whiten_mode::token_weighted})
            for (auto placement : all_placements)
                for (int ddof : {0, 1}) {
                    if (whiten == whiten_mode::token_weighted && !has_lengths) continue;
                    group_normalize_options options;
                    options.scale = ddof ? scale_mode::none : scale_mode::group_std;
                    options.whiten = {whiten, ddof, placement == eps_mode::std_floor_skip ? 1e-3 : 1e-8, placement};
                    options.clip_min = -1.5;
                    options.clip_max = 2.0;
                    INFO("batch " << b << " whiten " << int(whiten) << " placement " << int(placement) << " ddof "
                                  << ddof);
                    check_against_reference<TestType>(data, options);
                    options.exclude_empty_responses = false;
                    check_against_reference<TestType>(data, options);
                    if (has_lengths) check_against_reference<TestType>(data, options, true);
                }
        for (double fraction : {0.1, 0.3, 0.5, 0.75, 1.0}) {
            group_normalize_options options;
            options.center = center_mode::window_median;
            options.scale = scale_mode::window_spread;
            options.window_fraction = fraction;
            INFO("batch " << b << " fraction " << fraction);
            check_against_reference<TestType>(data, options);
        }
    }
}

TEST_CASE("group_normalize regression cases from the frameworks' bug lists", "[advantage][group_normalize]") {
    SECTION("[1.0, 1.00001]: ±0.707 without eps, ±0.62 with verl's σ + 1e-6, ±0.005 under old verl's variance floor") {
        const std::vector<double> rewards = {1.0, 1.00001};
        std::vector<double> out(2);
        group_normalize_options options;
        options.placement = eps_mode::std_floor_skip;
        options.eps = 1e-12;
        group_normalize(rewards, contiguous_groups(2), out, options);
        CHECK(out[0] == Approx(-std::sqrt(0.5)).epsilon(1e-6));
        CHECK(out[1] == Approx(std::sqrt(0.5)).epsilon(1e-6));
        group_normalize(rewards, contiguous_groups(2), out, presets::verl_grpo());
        const double d = 0.5e-5, sigma = std::sqrt(2 * d * d);
        CHECK(out[1] == Approx(d / (sigma + 1e-6)).epsilon(1e-9));
        CHECK(out[1] == Approx(0.6195).epsilon(1e-3));
        options.placement = eps_mode::clamp_variance;
        options.eps = 1e-6;
        group_normalize(rewards, contiguous_groups(2), out, options);
        CHECK(std::abs(out[1]) == Approx(0.005).epsilon(1e-3));
    }
    SECTION("sixteen rewards of 0.95 give exactly 0, in float and double, for every eps placement") {
        for (auto placement : all_placements) {
            const std::vector<float> single(16, 0.95f);
            const std::vector<double> twice(16, 0.95);
            group_normalize_options options;
            options.placement = placement;
            const auto a = group_normalize(single, contiguous_groups(16), options);
            const auto b = group_normalize(twice, contiguous_groups(16), options);
            for (int i = 0; i < 16; ++i) {
                CHECK(a[i] == 0.0f);
                CHECK(b[i] == 0.0);
            }
        }
    }
    SECTION("rewards offset by 1e6 keep the accuracy of rewards near 0") {
        const auto base = random_values(64, 3);
        auto shifted = base;
        for (auto& value : shifted) value += 1e6;
        const auto near = group_normalize(base, contiguous_groups(16));
        const auto far = group_normalize(shifted, contiguous_groups(16));
        // The shifted rewards are base + 1e6 rounded to double: 1e-10 absolute, i.e. ~1e-10 relative in A.
        CHECK(relative_error(far, near, 1.0) < 1e-8);
        const auto expected = reference::verl_grpo(shifted, reference::contiguous_ids(64, 16));
        CHECK(relative_error(far, expected, 1.0) < 1e-9);
    }
}

TEST_CASE("group_normalize properties from the math", "[advantage][group_normalize]") {
    std::mt19937 generator(5);
    for (index_type size : {2, 3, 8, 16, 17}) {
        const auto data = contiguous_batch(size, 40, 100 + static_cast<std::uint32_t>(size), true);
        const auto ids = data.ids;
        group_normalize_options scaled;
        scaled.ddof = 0;
        scaled.placement = eps_mode::std_floor_skip;
        scaled.eps = 1e-12;
        const auto grpo = group_normalize(data.rewards, contiguous_groups(size), scaled);
        group_normalize_options centred = scaled;
        centred.scale = scale_mode::none;
        const auto dr = group_normalize(data.rewards, contiguous_groups(size), centred);
        group_normalize_options loo = centred;
        loo.center = center_mode::leave_one_out;
        const auto rloo = group_normalize(data.rewards, contiguous_groups(size), loo);
        for (const auto& [id, list] : reference::members(ids)) {
            const auto a = reference::pick(grpo, list), d = reference::pick(dr, list), r = reference::pick(rloo, list);
            const double p = reference::mean_of(reference::pick(data.rewards, list));
            INFO("G " << size << " p " << p);
            CHECK(std::abs(reference::mean_of(a)) < 1e-12);  // zero mean per group
            CHECK(std::abs(reference::mean_of(d)) < 1e-12);
            double mean_abs = 0, mean_square = 0;
            for (double value : d) mean_abs += std::abs(value) / static_cast<double>(size);
            for (double value : a) mean_square += value * value / static_cast<double>(size);
            CHECK(mean_abs == Approx(2 * p * (1 - p)).margin(1e-12));  // Dr. GRPO: mean |A| = 2p(1 − p)
            if (p > 0 && p < 1)
                CHECK(mean_square == Approx(1.0).epsilon(1e-12));  // GRPO (population std): mean A² = 1
            else
                CHECK(mean_square == 0.0);
            for (std::size_t j = 0; j < list.size(); ++j)  // RLOO = G/(G−1)·Dr. GRPO
                CHECK(r[j] == Approx(d[j] * size / (size - 1.0)).margin(1e-12));
        }
        // Unit std when scaled, with the same ddof (eps placement tiny).
        const auto real = contiguous_batch(size, 10, 300 + static_cast<std::uint32_t>(size));
        for (int ddof : {0, 1}) {
            group_normalize_options options = scaled;
            options.ddof = ddof;
            const auto a = group_normalize(real.rewards, contiguous_groups(size), options);
            for (const auto& [id, list] : reference::members(real.ids))
                CHECK(reference::variance_of(reference::pick(a, list), ddof) == Approx(1.0).epsilon(1e-9));
        }
    }
    SECTION("permutation invariance: shuffling samples with their ids permutes the result") {
        const auto data = ragged_batch(77, true);
        std::vector<std::size_t> order(data.rewards.size());
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), generator);
        batch_data shuffled = data;
        for (std::size_t k = 0; k < order.size(); ++k) {
            shuffled.rewards[k] = data.rewards[order[k]];
            shuffled.ids[k] = data.ids[order[k]];
            shuffled.valid[k] = data.valid[order[k]];
            shuffled.lengths[k] = data.lengths[order[k]];
            shuffled.baseline[k] = data.baseline[order[k]];
        }
        for (auto center : all_centers) {
            group_normalize_options options;
            options.center = center;
            options.whiten.mode = whiten_mode::token_weighted;
            const auto a = run<double>(data, options), b = run<double>(shuffled, options);
            for (std::size_t k = 0; k < order.size(); ++k) CHECK(b[k] == Approx(a[order[k]]).margin(1e-12));
        }
    }
}

TEST_CASE("group_normalize degenerate inputs have their documented results", "[advantage][group_normalize]") {
    std::vector<double> none;
    std::vector<double> empty_out;
    const std::vector<std::int64_t> no_ids{};
    group_normalize(none, contiguous_groups(4), empty_out);  // an empty batch: nothing to do
    group_normalize(none, group_ids(no_ids), empty_out);

    const std::vector<double> lonely = {3.0, 1.0, 2.0};
    const std::vector<std::int64_t> ids = {0, 1, 1};
    std::vector<double> out(3);
    group_normalize(lonely, group_ids(ids), out);  // keep_raw: r/(1 + 1e-6)
    CHECK(out[0] == 3.0 / (1 + 1e-6));
    auto options = presets::trl();
    group_normalize(lonely, group_ids(ids), out, options);
    CHECK(out[0] == 0.0);
    options.singleton = singleton_policy::error;
    require_error_naming([&] { group_normalize(lonely, group_ids(ids), out, options); },
                         "group 0 has one valid sample");

    const double nan = reference::nan_value;
    const std::vector<double> all_nan = {nan, nan, 1.0, 2.0};
    group_normalize(all_nan, contiguous_groups(2), out = std::vector<double>(4), presets::trl());
    CHECK(out[0] == 0.0);
    CHECK(out[1] == 0.0);
    CHECK(out[2] == Approx(-0.5 / (std::sqrt(0.5) + 1e-4)));
    require_error_naming([&] { group_normalize(all_nan, contiguous_groups(2), out, presets::verl_grpo()); },
                         "rewards[0]");
    const std::vector<double> infinite = {1.0, INFINITY};
    require_error_naming([&] { group_normalize(infinite, contiguous_groups(2), out = std::vector<double>(2)); },
                         "infinite");

    // Whitening with nothing valid: zeros; one valid sample: 0.
    std::vector<std::uint8_t> nothing = {0, 0, 0, 0};
    reward_inputs<double> inputs;
    const std::vector<double> four = {1, 2, 3, 4};
    inputs.rewards = four;
    inputs.grouping = contiguous_groups(2);
    inputs.valid = nothing;
    group_normalize_options whitened;
    whitened.whiten.mode = whiten_mode::sample_weighted;
    std::vector<double> out4(4, 5.0);
    group_normalize(inputs, out4, whitened);
    for (double value : out4) CHECK(value == 0.0);
    std::vector<std::uint8_t> one = {0, 0, 1, 0};
    inputs.valid = one;
    group_normalize(inputs, out4, whitened);
    for (double value : out4) CHECK(value == 0.0);
}

TEST_CASE("group_normalize rejects bad input, naming the argument", "[advantage][group_normalize]") {
    const std::vector<double> rewards = {1, 2, 3, 4, 5};
    std::vector<double> out(5);
    require_error_naming([&] { group_normalize(rewards, contiguous_groups(2), out); },
                         "not a multiple of group_size 2");
    require_error_naming([&] { contiguous_groups(0); }, "group_size");
    std::vector<double> short_out(4);
    require_error_naming([&] { group_normalize(rewards, contiguous_groups(5), short_out); }, "output has length 4");
    const std::vector<std::int64_t> negative = {0, 1, -2, 1, 0};
    require_error_naming([&] { group_normalize(rewards, group_ids(negative), out); }, "group ids[2] is negative");
    const std::vector<std::int32_t> unknown = {0, 1, 7, 1, 0};
    require_error_naming([&] { group_normalize(rewards, group_ids(unknown, 3), out); }, "is unknown");
    const std::vector<std::int64_t> too_few = {0, 1};
    require_error_naming([&] { group_normalize(rewards, group_ids(too_few), out); }, "group ids has length 2");
    group_normalize_options options;
    options.eps = 0;
    require_error_naming([&] { group_normalize(rewards, contiguous_groups(5), out, options); }, "eps");
    options = {};
    options.ddof = 2;
    require_error_naming([&] { group_normalize(rewards, contiguous_groups(5), out, options); }, "ddof");
    options = {};
    options.clip_min = 1;
    options.clip_max = -1;
    require_error_naming([&] { group_normalize(rewards, contiguous_groups(5), out, options); }, "clip range");
    options = {};
    options.window_fraction = 0;
    require_error_naming([&] { group_normalize(rewards, contiguous_groups(5), out, options); }, "window_fraction");
    options = {};
    options.center = center_mode::length_weighted;
    require_error_naming([&] { group_normalize(rewards, contiguous_groups(5), out, options); },
                         "length_weighted needs lengths");
    options = {};
    options.center = center_mode::baseline;
    require_error_naming([&] { group_normalize(rewards, contiguous_groups(5), out, options); },
                         "baseline has length 0");
    options = {};
    options.whiten.mode = whiten_mode::token_weighted;
    require_error_naming([&] { group_normalize(rewards, contiguous_groups(5), out, options); },
                         "token_weighted needs lengths");

    reward_inputs<double> inputs;
    inputs.rewards = rewards;
    inputs.grouping = contiguous_groups(5);
    const std::vector<std::uint8_t> short_mask = {1, 1};
    inputs.valid = short_mask;
    require_error_naming([&] { group_normalize(inputs, out); }, "valid has length 2");
    inputs.valid = {};
    const std::vector<std::int64_t> lengths = {1, 2, 40, 1, 1};
    const std::vector<std::uint8_t> mask(5 * 32, 1);
    inputs.lengths = lengths;
    inputs.token_mask = view(mask.data(), 5, 32);
    require_error_naming([&] { group_normalize(inputs, out); }, "lengths[2] = 40 exceeds the padded width T = 32");
    const std::vector<std::int64_t> negative_length = {1, -1, 1, 1, 1};
    inputs.lengths = negative_length;
    inputs.token_mask = {};
    require_error_naming([&] { group_normalize(inputs, out); }, "lengths[1] is negative");

    // A strided Eigen vector is not a contiguous reward array.
    Eigen::Matrix<double, 5, 2, Eigen::RowMajor> matrix = Eigen::Matrix<double, 5, 2, Eigen::RowMajor>::Ones();
    require_error_naming([&] { group_normalize(matrix.col(0), contiguous_groups(5), out); }, "contiguous");
}

TEST_CASE("group_normalize accepts Eigen vectors, std::vector and vector_view, float or double output",
          "[advantage][group_normalize]") {
    const auto values = random_values(48, 9);
    Eigen::VectorXf eigen_rewards(48);
    for (int i = 0; i < 48; ++i) eigen_rewards[i] = static_cast<float>(values[i]);
    Eigen::VectorXd eigen_out(48);
    group_normalize(eigen_rewards, contiguous_groups(16), eigen_out);
    const auto expected = reference::verl_grpo(stored<float>(values), reference::contiguous_ids(48, 16));
    std::vector<double> got(eigen_out.data(), eigen_out.data() + 48);
    CHECK(relative_error(got, expected) < 1e-12);  // float rewards, statistics and output in double
    std::vector<float> float_out(48);
    group_normalize(vector_view<const float>(eigen_rewards.data(), 48), contiguous_groups(16),
                    vector_view<float>(float_out.data(), 48));
    CHECK(relative_error(to_double(float_out), expected) < 2e-7);
    // A segment of a longer vector (unaligned start).
    Eigen::VectorXd longer(50);
    for (int i = 0; i < 48; ++i) longer[i + 1] = values[i];
    std::vector<double> out(48);
    group_normalize(longer.segment(1, 48), contiguous_groups(16), out);
    CHECK(relative_error(out, reference::verl_grpo(values, reference::contiguous_ids(48, 16))) < 1e-12);
}

TEST_CASE("group_normalize gives the same bits for one and two threads", "[advantage][group_normalize]") {
    const auto contiguous = contiguous_batch(16, 300, 41);
    const auto ragged = ragged_batch(42, true);
    for (const auto* data : {&contiguous, &ragged})
        for (auto center : {center_mode::group_mean, center_mode::window_median, center_mode::leave_one_out}) {
            group_normalize_options options;
            options.center = center;
            options.threads = 1;
            const auto one = run<float>(*data, options);
            options.threads = 2;
            const auto two = run<float>(*data, options);
            CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(double)) == 0);
        }
}

// Ragged groups of 1..31 (one of each size at least, so groups of one occur) in shuffled order, ids
// 0 .. groups − 1 numbered by first appearance.
struct shuffled_groups {
    std::vector<std::int64_t> ids;
    std::vector<double> rewards;
};

shuffled_groups shuffled_ragged(std::uint32_t seed) {
    std::mt19937 generator(seed);
    std::vector<std::int64_t> ids;
    for (std::int64_t g = 0; g < 120; ++g) {
        const index_type size = g < 31 ? g + 1 : 1 + static_cast<index_type>(generator() % 31);
        for (index_type j = 0; j < size; ++j) ids.push_back(g);
    }
    std::shuffle(ids.begin(), ids.end(), generator);
    shuffled_groups data;
    data.ids = ids;
    data.rewards = random_values(ids.size(), seed + 1, 0.5, 1.0);
    for (std::size_t i = 0; i < ids.size(); i += 3) data.rewards[i] = generator() % 2;  // ties, binary rewards
    return data;
}

// group_normalize over ids (optionally as int32, optionally with an all-ones mask) in the output type O.
template <class T, class O, class Id = std::int64_t>
std::vector<O> normalized(const std::vector<double>& values, const std::vector<std::int64_t>& ids,
                          const group_normalize_options& options, bool all_ones_mask = false,
                          index_type declared_count = -1) {
    const auto rewards = to_storage<T>(values);
    const std::vector<Id> narrow(ids.begin(), ids.end());
    const std::vector<std::uint8_t> valid(values.size(), 1);
    reward_inputs<T> inputs;
    inputs.rewards = rewards;
    inputs.grouping =
        group_ids(vector_view<const Id>(narrow.data(), static_cast<index_type>(narrow.size())), declared_count);
    if (all_ones_mask) inputs.valid = valid;
    std::vector<O> out(values.size(), O(-99));
    group_normalize(inputs, out, options);
    return out;
}

template <class O>
bool same_bits(const std::vector<O>& a, const std::vector<O>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(O)) == 0;
}

// The options of the unmasked ragged path (group mean or leave-one-out; group std or none), and the
// singleton policies and clip that change its per-group record.
std::vector<group_normalize_options> unmasked_ragged_options() {
    std::vector<group_normalize_options> all;
    for (auto center : {center_mode::group_mean, center_mode::leave_one_out})
        for (auto scale : {scale_mode::group_std, scale_mode::none})
            for (auto singleton : {singleton_policy::keep_raw, singleton_policy::zero, singleton_policy::exclude}) {
                group_normalize_options options;
                options.center = center;
                options.scale = scale;
                options.singleton = singleton;
                all.push_back(options);
            }
    all.push_back(presets::trl());
    auto clipped = all.front();
    clipped.clip_min = -0.5;
    clipped.clip_max = 0.75;
    all.push_back(clipped);
    auto whitened = all.front();
    whitened.singleton = singleton_policy::exclude;
    whitened.whiten.mode = whiten_mode::sample_weighted;
    all.push_back(whitened);
    for (auto placement : all_placements) {
        auto placed = all.front();
        placed.placement = placement;
        placed.ddof = 0;
        all.push_back(placed);
    }
    return all;
}

TEMPLATE_TEST_CASE("ragged ids without a mask: the masked path's bits, in runs or shuffled, small or hashed ids",
                   "[advantage][group_normalize]", float, double) {
    using T = TestType;
    const auto data = shuffled_ragged(61);
    const std::size_t n = data.ids.size();
    // The same samples reordered so that each group is one run, members in their shuffled order (a stable
    // sort by group): every group sums the same values in the same order, so the same bits.
    std::vector<std::size_t> order(n);
    for (std::size_t i = 0; i < n; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return data.ids[a] < data.ids[b]; });
    std::vector<std::int64_t> run_ids(n), hashed_ids(n);
    std::vector<double> run_rewards(n);
    for (std::size_t k = 0; k < n; ++k) {
        run_ids[k] = data.ids[order[k]];
        run_rewards[k] = data.rewards[order[k]];
    }
    // Ids far beyond n (the hash table) and near the top of int64.
    for (std::size_t i = 0; i < n; ++i) hashed_ids[i] = (std::int64_t(1) << 62) - 1 - data.ids[i] * 1000000007;
    for (const auto& options : unmasked_ragged_options()) {
        for (int output_double = 0; output_double < 2; ++output_double) {
            const auto check = [&](auto tag) {
                using O = decltype(tag);
                const auto masked = normalized<T, O>(data.rewards, data.ids, options, true);
                const auto plain = normalized<T, O>(data.rewards, data.ids, options);
                CHECK(same_bits(plain, masked));
                CHECK(same_bits(normalized<T, O>(data.rewards, hashed_ids, options), masked));
                CHECK(same_bits(normalized<T, O, std::int32_t>(data.rewards, data.ids, options), masked));
                const auto runs = normalized<T, O>(run_rewards, run_ids, options);
                const auto runs_masked = normalized<T, O>(run_rewards, run_ids, options, true);
                CHECK(same_bits(runs, runs_masked));
                bool permuted = true;
                for (std::size_t k = 0; k < n; ++k)
                    permuted = permuted && std::memcmp(&runs[k], &plain[order[k]], sizeof(O)) == 0;
                // Whitening sums over the whole batch in sample order, which the reordering changes.
                if (options.whiten.mode == whiten_mode::none) CHECK(permuted);
                for (int threads : {2, 3}) {
                    auto threaded = options;
                    threaded.threads = threads;
                    CHECK(same_bits(normalized<T, O>(data.rewards, hashed_ids, threaded), plain));
                }
            };
            if (output_double)
                check(double{});
            else
                check(float{});
        }
    }
}

TEST_CASE("ragged ids without a mask: one group, every sample its own group, NaN and bad ids",
          "[advantage][group_normalize]") {
    const auto values = random_values(300, 5, 1.0, 2.0);
    const std::vector<std::int64_t> one_group(values.size(), 987654321987);
    std::vector<std::int64_t> own(values.size());
    for (std::size_t i = 0; i < own.size(); ++i) own[i] = static_cast<std::int64_t>(own.size() - i) * 3;
    group_normalize_options options;
    // One group: the reference's two-pass GRPO, and the masked path's bits.
    const auto single = normalized<double, double>(values, one_group, options);
    CHECK(same_bits(single, normalized<double, double>(values, one_group, options, true)));
    CHECK(relative_error(
              single, reference::verl_grpo(values, reference::contiguous_ids(values.size(), values.size()))) < 1e-12);
    // Every sample alone: keep_raw gives r/(1 + ε) (GRPO, as r·(1/(1 + ε)): the scatter path multiplies by
    // each group's 1/D, one double rounding from the quotient) and r (RLOO); zero gives 0.
    const auto alone = normalized<double, double>(values, own, options);
    options.center = center_mode::leave_one_out;
    options.scale = scale_mode::none;
    const auto alone_loo = normalized<double, double>(values, own, options);
    options.singleton = singleton_policy::zero;
    const auto alone_zero = normalized<double, double>(values, own, options);
    for (std::size_t i = 0; i < values.size(); ++i) {
        CHECK(alone[i] == values[i] * (1 / (1 + 1e-6)));
        CHECK(std::abs(alone[i] - values[i] / (1 + 1e-6)) <= std::ldexp(std::abs(values[i]), -52));
        CHECK(alone_loo[i] == values[i]);
        CHECK(alone_zero[i] == 0.0);
    }
    // A NaN reward leaves its group (TRL's rule) also without a mask: the other members' statistics.
    auto with_nan = values;
    with_nan[7] = reference::nan_value;
    const auto excluded = normalized<double, double>(with_nan, one_group, group_normalize_options{});
    std::vector<double> rest(values);
    rest.erase(rest.begin() + 7);
    const auto rest_out = reference::verl_grpo(rest, reference::contiguous_ids(rest.size(), rest.size()));
    CHECK(excluded[7] == 0.0);
    CHECK(excluded[8] == Approx(rest_out[7]).epsilon(1e-12));
    // Bad ids are named whichever path would take them.
    auto negative = own;
    negative[299] = -4;
    std::vector<double> out(values.size());
    require_error_naming([&] { group_normalize(values, group_ids(negative), out); }, "group ids[299] is negative");
    options = group_normalize_options{};
    options.singleton = singleton_policy::error;
    require_error_naming([&] { group_normalize(values, group_ids(own), out, options); },
                         "group 900 has one valid sample");
}

// Ragged ids where each group is one run take core::id_runs (blocks of runs, lanes of runs for float
// rewards): ids in ascending order, or any distinct labels (checked by core::distinct_runs). The scatter
// path must give the same bits, since each group adds the same values in the same order; the same runs
// under labels that do not ascend, with a declared count, take it (a declared count needs ascending runs).
// Sizes 1..40 (runs longer than a float batch's lanes), thousands of samples (many blocks), masked and
// unmasked, int64 and int32 ids, 1–3 threads.
TEMPLATE_TEST_CASE("ragged ids in runs: the scatter path's bits, and its fallback when a group is not one run",
                   "[advantage][group_normalize]", float, double) {
    using T = TestType;
    std::mt19937 generator(91);
    std::vector<std::int64_t> label(400);
    for (std::size_t g = 0; g < label.size(); ++g) label[g] = static_cast<std::int64_t>(g);
    std::shuffle(label.begin(), label.end(), generator);
    std::vector<std::int64_t> ascending, relabelled;
    for (std::size_t g = 0; g < label.size(); ++g) {
        const index_type size = 1 + static_cast<index_type>(generator() % 40);
        ascending.insert(ascending.end(), size, 3 * static_cast<std::int64_t>(g) + 2);
        relabelled.insert(relabelled.end(), size, 3 * label[g] + 2);
    }
    const std::size_t n = ascending.size();
    const index_type count = 3 * 400 + 2;
    auto rewards = random_values(n, 17, 0.5, 1.0);
    for (std::size_t i = 0; i < n; i += 5) rewards[i] = generator() % 2;  // ties, binary rewards
    // The last sample joins the first group, which is then two runs: found at the end, in the last block.
    auto late = ascending, late_relabelled = relabelled;
    late.back() = ascending.front();
    late_relabelled.back() = relabelled.front();
    for (const auto& options : unmasked_ragged_options()) {
        for (int masked = 0; masked < 2; ++masked) {
            const auto check = [&](auto tag) {
                using O = decltype(tag);
                const auto scattered = normalized<T, O>(rewards, relabelled, options, masked, count);
                const auto late_scattered = normalized<T, O>(rewards, late_relabelled, options, masked, count);
                for (int threads : {1, 2, 3}) {  // shares of the runs, split at run starts
                    auto threaded = options;
                    threaded.threads = threads;
                    CHECK(same_bits(normalized<T, O>(rewards, ascending, threaded, masked), scattered));
                    CHECK(same_bits(normalized<T, O>(rewards, relabelled, threaded, masked), scattered));
                    CHECK(same_bits(normalized<T, O>(rewards, late, threaded, masked), late_scattered));
                    CHECK(same_bits(normalized<T, O>(rewards, late_relabelled, threaded, masked), late_scattered));
                }
                CHECK(same_bits(normalized<T, O, std::int32_t>(rewards, ascending, options, masked), scattered));
                CHECK(same_bits(normalized<T, O, std::int32_t>(rewards, relabelled, options, masked), scattered));
            };
            check(float{});
            check(double{});
        }
    }
    // A NaN or ±inf inside runs summed in lanes, unmasked: those runs are summed again with the validity test
    // (NaN leaves its group; ±inf is bad input, named by its sample).
    auto with_nan = rewards, with_inf = rewards;
    with_nan[n / 2] = reference::nan_value;
    with_nan[n / 3] = reference::nan_value;
    with_inf[n / 2] = std::numeric_limits<double>::infinity();
    for (const auto& options : unmasked_ragged_options())
        for (int threads : {1, 2}) {
            auto threaded = options;
            threaded.threads = threads;
            CHECK(same_bits(normalized<T, T>(with_nan, ascending, threaded),
                            normalized<T, T>(with_nan, relabelled, options, false, count)));
            CHECK(same_bits(normalized<T, T>(with_nan, relabelled, threaded),
                            normalized<T, T>(with_nan, relabelled, options, false, count)));
        }
    require_error_naming([&] { normalized<T, T>(with_inf, ascending, group_normalize_options{}); },
                         "rewards[" + std::to_string(n / 2) + "] is inf");
    // What the runs noted is dropped when a group turns out to be two runs: ids 0, then pairs 1, 1, 2, 2, …,
    // then 0 again (ascending until the end), and the same under descending labels, so the first run looks
    // like a group of one until the last sample. No error under singleton_policy::error, and the
    // whitening's exclusions are the scatter path's.
    std::vector<std::int64_t> pairs{0}, pairs_relabelled{5000};
    for (std::int64_t g = 1; g <= 1500; ++g) {
        pairs.insert(pairs.end(), 2, g);
        pairs_relabelled.insert(pairs_relabelled.end(), 2, 5000 - g);
    }
    pairs.push_back(0);
    pairs_relabelled.push_back(5000);
    const auto pair_rewards = random_values(pairs.size(), 23, 0.5, 1.0);
    auto strict = group_normalize_options{};
    strict.singleton = singleton_policy::error;
    auto excluded = group_normalize_options{};
    excluded.singleton = singleton_policy::exclude;
    excluded.whiten.mode = whiten_mode::sample_weighted;
    for (auto options : {strict, excluded})
        for (int threads : {1, 2}) {
            options.threads = threads;
            const auto scattered = normalized<T, T>(pair_rewards, pairs_relabelled, options, false, 5001);
            CHECK(same_bits(normalized<T, T>(pair_rewards, pairs, options), scattered));
            CHECK(same_bits(normalized<T, T>(pair_rewards, pairs_relabelled, options), scattered));
        }
    // A group of one far into the ids (after several blocks) is named by its id: pairs of ids 0, 2, 4, …,
    // where the second member of 2000's pair becomes 2001.
    std::vector<std::int64_t> far;
    for (std::int64_t g = 0; g < 3000; g += 2) far.insert(far.end(), 2, g);
    far[2001] = 2001;
    for (int threads : {1, 2}) {  // with two, the lonely group is in the second thread's share
        strict.threads = threads;
        require_error_naming([&] { normalized<T, T>(random_values(far.size(), 29), far, strict); },
                             "group 2000 has one valid sample");
    }
    // Under labels that do not ascend, the group that appears first is named, as the scatter path names it.
    std::vector<std::int64_t> far_down;
    for (std::int64_t g = 0; g < 1500; ++g) far_down.insert(far_down.end(), 2, 10000 - g);
    far_down[2001] = 20001;
    far_down[2005] = 20003;  // after a group of one that does not ascend
    require_error_naming([&] { normalized<T, T>(random_values(far_down.size(), 31), far_down, strict); },
                         "group 9000 has one valid sample");
    // A negative id inside runs that do not ascend is found after the runs, and named by its first sample.
    auto negative_inside = relabelled;
    const auto inside = static_cast<std::size_t>(std::find(relabelled.begin(), relabelled.end(), relabelled[n / 2]) -
                                                 relabelled.begin());
    std::fill(negative_inside.begin() + static_cast<std::ptrdiff_t>(inside),
              std::find_if(negative_inside.begin() + static_cast<std::ptrdiff_t>(inside), negative_inside.end(),
                           [&](std::int64_t id) { return id != relabelled[n / 2]; }),
              -7);
    require_error_naming([&] { normalized<T, T>(rewards, negative_inside, group_normalize_options{}); },
                         "group ids[" + std::to_string(inside) + "] is negative");
    // Bad ids at either end of ascending ids; with a declared count, group k is id k (the same bits).
    auto negative = ascending;
    negative[0] = -1;
    require_error_naming([&] { normalized<T, T>(rewards, negative, group_normalize_options{}); },
                         "group ids[0] is negative");
    const auto typed = to_storage<T>(rewards);
    std::vector<T> declared(n), out(n);
    const auto top = static_cast<index_type>(ascending.back());
    require_error_naming([&] { group_normalize(typed, group_ids(ascending, top), out); },
                         "group ids[" +
                             std::to_string(std::find(ascending.begin(), ascending.end(), top) - ascending.begin()) +
                             "] = " + std::to_string(top) + " is unknown");
    group_normalize(typed, group_ids(ascending, top + 1), declared);
    group_normalize(typed, group_ids(ascending), out);
    CHECK(same_bits(declared, out));
}

TEST_CASE("moments: Welford add, Chan's merge of parts equals the whole", "[advantage][moments]") {
    const auto values = random_values(1000, 8, 1e6, 3.0);
    moments whole;
    for (double value : values) whole.add(value);
    CHECK(whole.mean == Approx(reference::mean_of(values)).epsilon(1e-14));
    CHECK(whole.variance(1) == Approx(reference::variance_of(values, 1)).epsilon(1e-10));
    CHECK(whole.variance(0) == Approx(reference::variance_of(values, 0)).epsilon(1e-10));
    for (std::size_t parts : {2, 3, 7, 64}) {
        moments merged;
        for (std::size_t p = 0; p < parts; ++p) {
            const auto [begin, end] = core::block(1000, static_cast<index_type>(parts), static_cast<index_type>(p));
            const std::vector<double> shard(values.begin() + begin, values.begin() + end);
            merged = merge(merged, batch_moments(shard));
        }
        INFO("parts " << parts);
        CHECK(merged.count == 1000);
        CHECK(merged.mean == Approx(whole.mean).epsilon(1e-14));
        CHECK(merged.variance(1) == Approx(whole.variance(1)).epsilon(1e-10));
    }
    // Merged batch statistics drive batch_std exactly as the local ones do.
    const auto rewards = random_values(64, 12);
    const std::vector<double> left(rewards.begin(), rewards.begin() + 24), right(rewards.begin() + 24, rewards.end());
    reward_inputs<double> inputs;
    inputs.rewards = rewards;
    inputs.grouping = contiguous_groups(8);
    inputs.batch_statistics = merge(batch_moments(left), batch_moments(right));
    std::vector<double> with_merged(64), local(64);
    const auto options = presets::trl(presets::trl_scale_rewards::batch);
    group_normalize(inputs, with_merged, options);
    group_normalize(rewards, contiguous_groups(8), local, options);
    CHECK(relative_error(with_merged, local) < 1e-13);
    CHECK(relative_error(local, reference::trl_grpo(rewards, 8, reference::trl_scale::batch)) < 1e-12);
    // Weighted adds: integer weights equal repeated values; a constant stream has M2 = 0 exactly.
    moments weighted, repeated, constant;
    weighted.add(2.0, 3);
    weighted.add(5.0, 1);
    for (double value : {2.0, 2.0, 2.0, 5.0}) repeated.add(value);
    CHECK(weighted.mean == Approx(repeated.mean));
    CHECK(weighted.m2 == Approx(repeated.m2));
    for (int i = 0; i < 16; ++i) constant.add(0.95);
    CHECK(constant.m2 == 0.0);
    CHECK(moments{}.variance(1) == 0.0);
    const std::vector<std::uint8_t> mask = {1, 0, 1};
    const std::vector<double> three = {1.0, 100.0, 3.0};
    CHECK(batch_moments(vector_view<const double>(three), vector_view<const std::uint8_t>(mask)).mean == 2.0);
}

TEST_CASE(
    "group_normalize's blocked fast path (float, ≥ 16 contiguous groups; mean or leave-one-out) matches the reference",
    "[advantage][group_normalize]") {
    // 37 groups: two full blocks of 16 and a partial one, so both the blocked and the per-group moments run.
    for (index_type size : {2, 3, 8, 16, 17, 33}) {
        auto data = contiguous_batch(size, 37, 500 + static_cast<std::uint32_t>(size));
        for (index_type j = 0; j < size; ++j)
            data.rewards[static_cast<std::size_t>(5 * size + j)] = 0.95;  // a constant group
        for (index_type j = 0; j < size; ++j)
            data.rewards[static_cast<std::size_t>(7 * size + j)] += 1e6;          // a far offset
        data.rewards[static_cast<std::size_t>(9 * size)] = reference::nan_value;  // a NaN inside a block
        for (auto placement : all_placements)
            for (int ddof : {0, 1})
                for (auto scale : {scale_mode::group_std, scale_mode::none})
                    for (auto center : {center_mode::group_mean, center_mode::leave_one_out}) {
                        group_normalize_options options;
                        options.placement = placement;
                        options.ddof = ddof;
                        options.scale = scale;
                        options.center = center;
                        options.eps = placement == eps_mode::std_floor_skip ? 1e-3 : 1e-4;
                        INFO("G " << size << " placement " << int(placement) << " ddof " << ddof << " scale "
                                  << int(scale) << " center " << int(center));
                        const auto expected =
                            reference::group_normalize(stored<float>(data.rewards), data.ids, {}, {}, {}, options);
                        CHECK(relative_error(run<float>(data, options), expected, 1.0) < 2e-5);
                        options.clip_min = -0.5;
                        options.clip_max = 0.7;
                        const auto clipped =
                            reference::group_normalize(stored<float>(data.rewards), data.ids, {}, {}, {}, options);
                        CHECK(relative_error(run<float>(data, options), clipped, 1.0) < 2e-5);
                    }
        const auto a = run<float>(data, presets::trl());
        for (index_type j = 0; j < size; ++j) CHECK(a[static_cast<std::size_t>(5 * size + j)] == 0.0);
        CHECK(a[static_cast<std::size_t>(9 * size)] == 0.0);
        require_error_naming([&] { run<float>(data, presets::verl_grpo()); },
                             "rewards[" + std::to_string(9 * size) + "]");
    }
}

// The accuracy contract at large offsets: fp32 advantages of GRPO, Dr. GRPO and RLOO within 4 ulp
// of the float64 reference on the same stored rewards, ulps taken at 1 + |A| (an advantage is a
// difference, which may cancel to anything below the rewards' own scale), for rewards N(μ, σ) with
// μ up to 10⁶, on every path: contiguous groups (the sixteen-group sweep and the per-group sweep),
// and ragged ids up to 3000 members in runs and shuffled (the scatter path).
TEST_CASE("fp32 GRPO, Dr. GRPO and RLOO are within 4 ulp of float64 at offsets up to 1e6, contiguous and ragged",
          "[advantage][group_normalize][accuracy]") {
    const auto ulps = [](const std::vector<float>& actual, const std::vector<double>& expected) {
        double worst = 0;
        for (std::size_t i = 0; i < actual.size(); ++i) {
            const auto scale = static_cast<float>(1 + std::abs(expected[i]));
            const double spacing = static_cast<double>(std::nextafter(scale, INFINITY) - scale);
            worst = std::max(worst, std::abs(static_cast<double>(actual[i]) - expected[i]) / spacing);
        }
        return worst;
    };
    std::mt19937 generator(17);
    struct layout {
        std::string name;
        reference::ids_t ids;
        index_type size;  // contiguous groups of this size; 0: ragged ids
    };
    std::vector<layout> layouts;
    for (index_type size : {2, 16, 17, 100})
        layouts.push_back(
            {"G " + std::to_string(size),
             reference::contiguous_ids(48 * static_cast<std::size_t>(size), static_cast<std::size_t>(size)), size});
    reference::ids_t runs;
    for (std::int64_t g = 0; runs.size() < 20000; ++g) {
        const std::size_t size = g % 7 == 0 ? 1 + generator() % 3000 : 1 + generator() % 40;
        runs.insert(runs.end(), size, g * 7919 + 5);
    }
    layouts.push_back({"ragged runs", runs, 0});
    auto shuffled = runs;
    std::shuffle(shuffled.begin(), shuffled.end(), generator);
    layouts.push_back({"ragged shuffled", shuffled, 0});
    for (const auto& [name, ids, size] : layouts)
        for (double mean : {0.0, 1e2, 1e4, 1e6})
            for (double sigma : {1.0, 1e-2}) {
                INFO(name << ", rewards N(" << mean << ", " << sigma << ")");
                std::vector<float> rewards(ids.size());
                std::vector<double> stored(ids.size());
                const auto values = random_values(ids.size(), 3, mean, sigma);
                for (std::size_t i = 0; i < ids.size(); ++i) stored[i] = rewards[i] = static_cast<float>(values[i]);
                const groups grouping = size > 0 ? contiguous_groups(size) : group_ids(ids);
                std::vector<float> out(ids.size());
                group_normalize(rewards, grouping, out, presets::verl_grpo());
                CHECK(ulps(out, reference::verl_grpo(stored, ids)) <= 4);
                group_normalize_options unscaled;
                unscaled.scale = scale_mode::none;
                group_normalize(rewards, grouping, out, unscaled);
                CHECK(ulps(out, reference::verl_grpo(stored, ids, false)) <= 4);
                unscaled.center = center_mode::leave_one_out;
                group_normalize(rewards, grouping, out, unscaled);
                CHECK(ulps(out, reference::verl_rloo(stored, ids)) <= 4);
            }
}

// A block of sixteen float groups whose sizes are whole float batches, none NaN, is written by one loop
// without a group's checks and tail; a block holding a NaN group writes the others one group at a time.
// Both must give a group the same bits: group 0 of the first block is made NaN (excluded, so A = 0
// there), and groups 1..15 must match the clean run's bits. Sizes 4..48: whole batches on some
// instruction sets and not on others (4, 8 and 16 lanes), each way on this one.
TEST_CASE("contiguous float groups: the block writer's bits equal the per-group writer's",
          "[advantage][group_normalize]") {
    for (index_type size : {4, 8, 12, 16, 24, 32, 48}) {
        const auto n = static_cast<std::size_t>(size * 32);
        const auto values = random_values(n, 29, 1e3, 0.5);
        std::vector<float> clean(values.begin(), values.end());
        auto poisoned = clean;
        poisoned[1] = std::numeric_limits<float>::quiet_NaN();
        group_normalize_options grpo, dr_grpo, loo;
        dr_grpo.scale = scale_mode::none;
        loo.scale = scale_mode::none;
        loo.center = center_mode::leave_one_out;
        for (const auto& options : {grpo, dr_grpo, loo}) {
            INFO("G " << size << ", center " << static_cast<int>(options.center) << ", scale "
                      << static_cast<int>(options.scale));
            std::vector<float> a(n), b(n);
            group_normalize(clean, contiguous_groups(size), a, options);
            group_normalize(poisoned, contiguous_groups(size), b, options);
            const auto first = static_cast<std::size_t>(size);
            CHECK(std::memcmp(a.data() + first, b.data() + first, (n - first) * sizeof(float)) == 0);
            CHECK(b[1] == 0.0f);
            CHECK(std::isfinite(b[0]));
        }
    }
}
