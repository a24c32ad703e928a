// Differential fuzz target of group_normalize and the named estimators against
// tests/reference/advantage*.hpp.
//
// Per case: contiguous or ragged groups (shuffled ids, ids in ascending runs or
// runs under shuffled labels; int64 or int32, small or far beyond n), rewards of one kind (integers, binary, normal, offset by 10⁶),
// NaN rewards, a valid mask, lengths (some zero) or the same counts as a token
// mask, and every option of group_normalize_options (center × scale × eps
// placement × ddof × singleton policy × whitening × clip range × window
// fraction), float or double rewards and output. It checks
//   - agreement with the reference (relative 1e-9 for double output, 2e-5 for
//     float, relative to max(1, |A|) and to what whitening amplifies);
//   - bitwise equality for any thread count; the same values (to rounding)
//     when the samples are permuted together with their ids;
//   - infinite valid rewards throw normkit::error; singleton_policy::error
//     throws exactly when a group has one valid sample;
//   - grpo, dr_grpo, rloo, opo, gpg, gapo and pass_at_k against verl's
//     arithmetic (the reference) on finite rewards.
#include "fuzz_support.hpp"
#include "reference/advantage_options.hpp"

#include <normkit/advantage/estimators.hpp>
#include <normkit/advantage/group_normalize.hpp>

#include <algorithm>
#include <map>
#include <numeric>

using namespace normkit;
using namespace normkit::advantage;
using fuzz::check;

namespace {

struct batch {
    std::vector<double> rewards;  // as given (the reward type rounds them)
    std::vector<std::int64_t> ids;
    index_type group_size = 0;  // > 0: contiguous groups
    bool int32_ids = false;
    std::vector<int> valid;  // empty: all valid
    std::vector<double> lengths;
    bool token_mask = false;  // the lengths given as a [n × T] mask
    std::vector<double> baseline;
};

batch read_batch(fuzz::source& in) {
    batch b;
    if (in.flag()) {
        b.group_size = in.integer<index_type>(1, 40);
        const auto groups = in.integer<index_type>(1, in.flag() ? 40 : 4);
        for (index_type g = 0; g < groups; ++g)
            for (index_type j = 0; j < b.group_size; ++j) b.ids.push_back(g);
    } else {
        const auto groups = in.integer<int>(1, 12);
        const std::int64_t scale = in.flag() ? 1000000007 : 3;
        // shuffled ids, each group one run in ascending ids, or runs under shuffled labels (the run path)
        const auto layout = in.integer<int>(0, 2);
        std::vector<std::int64_t> label(static_cast<std::size_t>(groups));
        std::iota(label.begin(), label.end(), std::int64_t(0));
        if (layout == 2) std::shuffle(label.begin(), label.end(), in.generator);
        for (int g = 0; g < groups; ++g) {
            const int size = in.integer<int>(1, 20);
            for (int j = 0; j < size; ++j) b.ids.push_back(label[static_cast<std::size_t>(g)] * scale + 5);
        }
        if (layout == 0) std::shuffle(b.ids.begin(), b.ids.end(), in.generator);
        b.int32_ids = scale < 1000 && in.flag();
    }
    const std::size_t n = b.ids.size();
    const auto kind = in.integer<int>(0, 3);
    for (std::size_t i = 0; i < n; ++i) {
        switch (kind) {
            case 0:
                b.rewards.push_back(std::floor(in.uniform(-3, 4)));
                break;
            case 1:
                b.rewards.push_back(in.uniform(0, 1) < 0.5 ? 0.0 : 1.0);
                break;
            case 2:
                b.rewards.push_back(in.normal() * std::pow(10.0, in.integer<int>(-2, 2)));
                break;
            default:
                b.rewards.push_back(1e6 + std::floor(in.uniform(0, 8)) * 0.25);
                break;
        }
    }
    const int nans = in.integer<int>(0, 3);
    for (int k = 0; k < nans; ++k) b.rewards[in.integer<std::size_t>(0, n - 1)] = std::nan("");
    if (in.flag()) {
        b.valid.assign(n, 1);
        for (auto& v : b.valid) v = in.uniform(0, 1) < 0.15 ? 0 : 1;
    }
    if (in.flag()) {
        for (std::size_t i = 0; i < n; ++i)
            b.lengths.push_back(in.uniform(0, 1) < 0.1 ? 0 : std::floor(in.uniform(1, 40)));
        b.token_mask = in.flag();
    }
    for (std::size_t i = 0; i < n; ++i) b.baseline.push_back(in.normal());
    return b;
}

group_normalize_options read_options(fuzz::source& in, const batch& b) {
    const center_mode centers[] = {center_mode::group_mean,      center_mode::batch_mean,    center_mode::leave_one_out,
                                   center_mode::length_weighted, center_mode::window_median, center_mode::window_mean,
                                   center_mode::baseline,        center_mode::none};
    const scale_mode scales[] = {scale_mode::group_std, scale_mode::batch_std, scale_mode::window_spread,
                                 scale_mode::none};
    const eps_mode placements[] = {eps_mode::add_to_std, eps_mode::inside_sqrt, eps_mode::clamp_variance,
                                   eps_mode::std_floor_skip};
    const double epsilons[] = {1e-6, 1e-4, 1e-2, 0.5, 1e-300};
    group_normalize_options o;
    o.center = in.pick(centers);
    if (o.center == center_mode::length_weighted && b.lengths.empty()) o.center = center_mode::group_mean;
    o.scale = in.pick(scales);
    o.placement = in.pick(placements);
    o.ddof = in.integer<int>(0, 1);
    o.eps = in.pick(epsilons);
    if (o.placement == eps_mode::std_floor_skip && in.flag()) o.eps = 0;  // accepted there: no floor
    // std_floor_skip steps from √v to 1 at √v = ε: with quarter-step rewards √v is often exactly 0.5,
    // where a rounding of v (the reference's long double against the kernel's double) takes either side.
    if (o.placement == eps_mode::std_floor_skip && o.eps == 0.5) o.eps = 0.4999;
    o.singleton = in.flag() ? singleton_policy::keep_raw : singleton_policy::zero;
    const double fractions[] = {0.5, 0.3, 1.0, 0.01, 0.75};
    o.window_fraction = in.pick(fractions);
    const auto whiten = in.integer<int>(0, b.lengths.empty() ? 1 : 2);
    o.whiten.mode = static_cast<whiten_mode>(whiten);
    o.whiten.ddof = in.integer<int>(0, 1);
    o.whiten.eps = in.pick(epsilons);
    o.whiten.placement = in.pick(placements);
    if (o.whiten.placement == eps_mode::std_floor_skip && o.whiten.eps == 0.5) o.whiten.eps = 0.4999;
    if (in.flag()) {
        o.clip_min = -in.uniform(0.1, 3);
        o.clip_max = in.uniform(0.1, 3);
    }
    // singleton exclude also leaves the whitening statistics, which the reference does not model
    if (o.whiten.mode == whiten_mode::none && in.flag()) o.singleton = singleton_policy::exclude;
    return o;
}

groups grouping_of(const batch& b, std::vector<std::int32_t>& ids32) {
    if (b.group_size > 0) return contiguous_groups(b.group_size);
    if (b.int32_ids) {
        ids32.assign(b.ids.begin(), b.ids.end());
        return group_ids(vector_view<const std::int32_t>(ids32));
    }
    return group_ids(vector_view<const std::int64_t>(b.ids));
}

// group_normalize on reward type T into output type O.
template <class T, class O>
std::vector<O> normalize(const batch& b, const group_normalize_options& options) {
    const auto rewards = fuzz::to_storage<T>(b.rewards);
    const auto baseline = fuzz::to_storage<T>(b.baseline);
    std::vector<std::uint8_t> valid(b.valid.begin(), b.valid.end());
    std::vector<std::int64_t> lengths(b.lengths.begin(), b.lengths.end());
    std::vector<std::uint8_t> mask;
    std::vector<std::int32_t> ids32;
    reward_inputs<T> inputs;
    inputs.rewards = rewards;
    inputs.grouping = grouping_of(b, ids32);
    inputs.valid = valid;
    inputs.baseline = baseline;
    const index_type width = 41;
    if (b.token_mask && !lengths.empty()) {
        mask.assign(lengths.size() * width, 0);
        for (std::size_t i = 0; i < lengths.size(); ++i)
            for (index_type t = 0; t < lengths[i]; ++t) mask[i * width + (t * 7) % width] = 1;
        inputs.token_mask =
            view(static_cast<const std::uint8_t*>(mask.data()), static_cast<index_type>(lengths.size()), width);
    } else {
        inputs.lengths = lengths;
    }
    std::vector<O> output(rewards.size(), O(-99));
    group_normalize(inputs, output, options);
    return output;
}

bool has_lonely_group(const batch& b, const std::vector<double>& rewards) {
    std::map<std::int64_t, int> counts;
    for (std::size_t i = 0; i < b.ids.size(); ++i) {
        const bool ok =
            (b.valid.empty() || b.valid[i]) && !std::isnan(rewards[i]) && !(!b.lengths.empty() && b.lengths[i] <= 0);
        counts[b.ids[i]] += ok ? 1 : 0;
    }
    for (const auto& [id, count] : counts)
        if (count == 1) return true;
    return false;
}

template <class T, class O>
void check_group_normalize(const batch& b, const group_normalize_options& options, fuzz::source& in) {
    const char* types = std::is_same_v<T, double> ? (std::is_same_v<O, double> ? "double->double" : "double->float")
                                                  : (std::is_same_v<O, double> ? "float->double" : "float->float");
    const auto stored_rewards = fuzz::stored<T>(b.rewards);
    const auto actual_values = normalize<T, O>(b, options);
    const auto actual = fuzz::to_double(actual_values);
    const auto expected =
        reference::group_normalize(stored_rewards, b.ids, b.valid, b.lengths, fuzz::stored<T>(b.baseline), options);
    // Whitening divides the group-normalized values by D_W, their spread (with eps): every rounding of
    // them is amplified by max|A|/D_W, in the reference's long double sums as in the kernel's.
    double amplification = 1;
    if (options.whiten.mode != whiten_mode::none) {
        auto unwhitened = options;
        unwhitened.whiten.mode = whiten_mode::none;
        const auto before = reference::group_normalize(stored_rewards, b.ids, b.valid, b.lengths,
                                                       fuzz::stored<T>(b.baseline), unwhitened);
        long double weight = 0, sum = 0, squares = 0;
        const auto weight_of = [&](std::size_t i) {
            const bool ok = (b.valid.empty() || b.valid[i]) && !std::isnan(stored_rewards[i]) &&
                            !(!b.lengths.empty() && b.lengths[i] <= 0);
            return !ok ? 0.0 : (options.whiten.mode == whiten_mode::token_weighted ? b.lengths[i] : 1.0);
        };
        for (std::size_t i = 0; i < before.size(); ++i) weight += weight_of(i), sum += weight_of(i) * before[i];
        const long double mean = weight > 0 ? sum / weight : 0;
        for (std::size_t i = 0; i < before.size(); ++i)
            squares += weight_of(i) * (before[i] - mean) * (before[i] - mean);
        const double variance =
            weight - options.whiten.ddof > 0 ? static_cast<double>(squares / (weight - options.whiten.ddof)) : 0.0;
        const double divisor = reference::divisor(variance, options.whiten.eps, options.whiten.placement);
        amplification = std::max(1.0, fuzz::max_abs(before)) * std::max(1.0, 1.0 / divisor);
    }
    const double tolerance = (std::is_same_v<O, double> && std::is_same_v<T, double> ? 1e-9 : 2e-5) * amplification;
    if (std::getenv("NORMKIT_FUZZ_VERBOSE")) {
        for (std::size_t i = 0; i < b.rewards.size(); ++i)
            std::fprintf(stderr, "%zu id %lld r %.17g valid %d length %g -> %.17g (reference %.17g)\n", i,
                         static_cast<long long>(b.ids[i]), stored_rewards[i], b.valid.empty() ? 1 : b.valid[i],
                         b.lengths.empty() ? -1.0 : b.lengths[i], actual[i], expected[i]);
    }
    // A value beyond float's range (a tiny eps dividing an uncentred reward) is ±inf in float output:
    // compared by its sign, and left out of the relative error.
    auto comparable = actual, wanted = expected;
    if (!std::is_same_v<O, double>)
        for (std::size_t i = 0; i < wanted.size(); ++i)
            if (std::abs(wanted[i]) > 3e38) {
                check(std::abs(comparable[i]) >= 3e38 && (comparable[i] > 0) == (wanted[i] > 0), "group_normalize ",
                      types, ": ", wanted[i], " beyond float gives ", comparable[i], " (center ", int(options.center),
                      " scale ", int(options.scale), " placement ", int(options.placement), " eps ", options.eps,
                      " whiten ", int(options.whiten.mode), "/", int(options.whiten.placement), "/", options.whiten.eps,
                      ")");
                comparable[i] = wanted[i] = 0;
            }
    const double error = fuzz::relative_error(comparable, wanted, 1.0);
    check(error < tolerance || (!std::isfinite(tolerance) && !std::isnan(error)), "group_normalize ", types,
          ": relative error ", error, " > ", tolerance, " (center ", int(options.center), " scale ", int(options.scale),
          " placement ", int(options.placement), " ddof ", options.ddof, " eps ", options.eps, " singleton ",
          int(options.singleton), " whiten ", int(options.whiten.mode), "/", int(options.whiten.placement), "/",
          options.whiten.eps, " n ", b.rewards.size(), " group size ", b.group_size, ")");
    // A zero-variance group (two or more valid samples, one value) gives r − μ_g = 0 exactly under
    // every placement (group_normalize.hpp: 0, and r − c under std_floor_skip).
    if (options.center == center_mode::group_mean && options.scale == scale_mode::group_std &&
        options.whiten.mode == whiten_mode::none) {
        std::map<std::int64_t, std::vector<std::size_t>> members;
        for (std::size_t i = 0; i < b.ids.size(); ++i) {
            const bool ok = (b.valid.empty() || b.valid[i]) && !std::isnan(stored_rewards[i]) &&
                            !(!b.lengths.empty() && b.lengths[i] <= 0);
            if (ok) members[b.ids[i]].push_back(i);
        }
        for (const auto& member : members) {
            const auto& list = member.second;
            const double first = stored_rewards[list[0]];
            if (list.size() < 2) continue;
            if (!std::all_of(list.begin(), list.end(), [&](std::size_t i) { return stored_rewards[i] == first; }))
                continue;
            for (std::size_t i : list)
                check(actual[i] == 0, "group_normalize ", types, ": a zero-variance group gives ", actual[i],
                      ", documented 0 (placement ", int(options.placement), ", eps ", options.eps, ")");
        }
    }
    // Any thread count gives the same bits.
    auto threaded = options;
    threaded.threads = in.integer<int>(2, 5);
    check(fuzz::same_bits(normalize<T, O>(b, threaded), actual_values), "group_normalize ", types, ": threads ",
          threaded.threads, " differ from 1");
    // Permuting the samples with their ids (ragged form) permutes the advantages.
    if (b.group_size == 0 && !b.token_mask) {
        std::vector<std::size_t> order(b.ids.size());
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), in.generator);
        batch p = b;
        for (std::size_t k = 0; k < order.size(); ++k) {
            p.ids[k] = b.ids[order[k]];
            p.rewards[k] = b.rewards[order[k]];
            p.baseline[k] = b.baseline[order[k]];
            if (!b.valid.empty()) p.valid[k] = b.valid[order[k]];
            if (!b.lengths.empty()) p.lengths[k] = b.lengths[order[k]];
        }
        const auto permuted = fuzz::to_double(normalize<T, O>(p, options));
        std::vector<double> back(permuted.size());
        for (std::size_t k = 0; k < order.size(); ++k) back[order[k]] = permuted[k];
        const double error = fuzz::relative_error(back, actual, 1.0);
        check(error < 2 * tolerance || !std::isfinite(tolerance), "group_normalize ", types,
              ": permuting the samples changes the advantages by ", error);
    }
}

// The named estimators against verl's arithmetic on finite rewards.
template <class T>
void check_estimators(const batch& b, fuzz::source& in) {
    auto values = fuzz::stored<T>(b.rewards);
    for (auto& v : values)
        if (std::isnan(v)) v = 0.5;
    const auto rewards = fuzz::to_storage<T>(values);
    std::vector<std::int32_t> ids32;
    const auto grouping = grouping_of(b, ids32);
    std::vector<T> out(rewards.size(), T(-99));
    // verl's forms (r·n/(n − 1) − μ·n/(n − 1)) cancel: the reference itself is exact only to ~ε·|r|.
    const double tolerance = (std::is_same_v<T, double> ? 1e-10 : 2e-5) * std::max(1.0, fuzz::max_abs(values));
    const auto compare = [&](const char* name, const std::vector<double>& expected) {
        const double error = fuzz::relative_error(fuzz::to_double(out), expected, 1.0);
        check(error < tolerance, name, " ", fuzz::type_name<T>(), ": relative error ", error, " (n ", values.size(),
              ", group size ", b.group_size, ")");
    };
    switch (in.integer<int>(0, 6)) {
        case 0: {
            grpo_options options;
            options.scale_by_std = in.flag();
            options.threads = in.integer<int>(1, 3);
            grpo(rewards, grouping, out, options);
            return compare("grpo", reference::verl_grpo(values, b.ids, options.scale_by_std));
        }
        case 1:
            dr_grpo(rewards, grouping, out);
            return compare("dr_grpo", reference::verl_grpo(values, b.ids, false));
        case 2:
            if (in.flag()) {
                rloo(rewards, grouping, out);
                return compare("rloo", reference::verl_rloo(values, b.ids));
            }
            rloo(rewards, grouping, out, {{}, singleton_policy::zero});
            return compare("rloo (zero)", reference::verl_rloo_vectorized(values, b.ids));
        case 3: {
            std::vector<std::int64_t> lengths(values.size());
            std::vector<double> length_values(values.size());
            for (std::size_t i = 0; i < values.size(); ++i)
                length_values[i] = static_cast<double>(lengths[i] = in.integer<std::int64_t>(1, 30));
            opo(rewards, grouping, lengths, out);
            return compare("opo", reference::verl_opo(values, length_values, b.ids));
        }
        case 4:
            gpg(rewards, grouping, out);
            return compare("gpg", reference::verl_gpg(values, b.ids));
        case 5: {
            const double fractions[] = {0.5, 0.3, 1.0, 0.01, 0.75};
            const double fraction = in.pick(fractions);
            const bool median = in.flag();
            gapo(rewards, grouping, out, {{}, fraction, median});
            return compare("gapo", reference::gapo(values, b.ids, fraction, median));
        }
        default: {
            std::map<std::int64_t, int> sizes;
            for (auto id : b.ids) ++sizes[id];
            const bool lonely = std::any_of(sizes.begin(), sizes.end(), [](const auto& s) { return s.second < 2; });
            if (lonely) {
                check(fuzz::throws_error([&] { pass_at_k(rewards, grouping, out); }),
                      "pass_at_k: a group of one does not throw");
                return;
            }
            pass_at_k(rewards, grouping, out);
            return compare("pass_at_k", reference::verl_passk(values, b.ids));
        }
    }
}

template <class T>
void bad_rewards(batch b, fuzz::source& in) {
    // An infinite reward of a valid sample is bad input, named by normkit::error.
    const std::size_t at = in.integer<std::size_t>(0, b.rewards.size() - 1);
    b.rewards[at] = in.flag() ? INFINITY : -INFINITY;
    if (!b.valid.empty()) b.valid[at] = 1;
    if (!b.lengths.empty()) b.lengths[at] = 1;
    check(fuzz::throws_error([&] { normalize<T, double>(b, {}); }),
          "group_normalize: an infinite valid reward does not throw");
}

template <class T>
void singleton_error(const batch& b) {
    group_normalize_options options;
    options.singleton = singleton_policy::error;
    const bool lonely = has_lonely_group(b, fuzz::stored<T>(b.rewards));
    const bool threw = fuzz::throws_error([&] { normalize<T, double>(b, options); });
    check(threw == lonely, "group_normalize: singleton_policy::error threw ", threw, " with a group of one ", lonely);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::source in(data, size);
    const auto b = read_batch(in);
    const bool float_rewards = in.flag();
    switch (in.integer<int>(0, 4)) {
        case 0:
        case 1: {
            const auto options = read_options(in, b);
            const bool float_output = in.flag();
            if (float_rewards)
                float_output ? check_group_normalize<float, float>(b, options, in)
                             : check_group_normalize<float, double>(b, options, in);
            else
                float_output ? check_group_normalize<double, float>(b, options, in)
                             : check_group_normalize<double, double>(b, options, in);
            break;
        }
        case 2:
            float_rewards ? check_estimators<float>(b, in) : check_estimators<double>(b, in);
            break;
        case 3:
            float_rewards ? bad_rewards<float>(b, in) : bad_rewards<double>(b, in);
            break;
        default:
            float_rewards ? singleton_error<float>(b) : singleton_error<double>(b);
            break;
    }
    return 0;
}
