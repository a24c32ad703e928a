// NaN and ±inf in the data of the credit token kernels (docs/errors.md §4):
// each documented value, at a valid and at a masked position, in float and
// double storage, at 17 and 33 tokens (or turns), with the non-finite value at
// the first positions and at the last. Every position the rule does not name
// must keep the bits of the run without the non-finite value, so other rows,
// groups and tokens are checked to be unaffected.
#include "credit/fixtures.hpp"
#include "support.hpp"

#include <normkit/credit/cort.hpp>
#include <normkit/credit/entropy.hpp>
#include <normkit/credit/optimal_token_baseline.hpp>
#include <normkit/credit/spans.hpp>
#include <normkit/credit/turns.hpp>

#include <cstring>
#include <limits>
#include <map>
#include <sstream>

using namespace normkit;
using namespace normkit::testing;

namespace {

const double nan_value = std::numeric_limits<double>::quiet_NaN();
const double infinity = std::numeric_limits<double>::infinity();
const std::vector<double> specials = {nan_value, infinity, -infinity};
const std::vector<index_type> lengths = {17, 33};

template <class T>
double at(const std::vector<T>& x, std::size_t k) {
    return static_cast<double>(core::to_compute(x[k]));
}

// out against base: each position of `changed` holds its value (NaN: a NaN; a zero with its
// sign), every other position holds base's bits.
template <class T>
void check_changed(const std::vector<T>& out, const std::vector<T>& base, const std::map<std::size_t, double>& changed,
                   index_type cols) {
    REQUIRE(out.size() == base.size());
    std::size_t wrong = 0;
    for (std::size_t k = 0; k < out.size(); ++k) {
        const auto it = changed.find(k);
        const double actual = at(out, k);
        if (it != changed.end()) {
            const double expected = it->second;
            const bool ok = std::isnan(expected) ? std::isnan(actual)
                                                 : actual == expected && std::signbit(actual) == std::signbit(expected);
            if (!ok) {
                ++wrong;
                UNSCOPED_INFO("(" << k / cols << ", " << k % cols << ") = " << actual << ", expected " << expected);
            }
        } else if (std::memcmp(&out[k], &base[k], sizeof(T)) != 0) {
            ++wrong;
            UNSCOPED_INFO("(" << k / cols << ", " << k % cols << ") = " << actual << " changed from " << at(base, k));
        }
    }
    CHECK(wrong == 0);
}

template <class T>
std::size_t count_nan(const std::vector<T>& x) {
    std::size_t n = 0;
    for (std::size_t k = 0; k < x.size(); ++k) n += std::isnan(at(x, k)) ? 1 : 0;
    return n;
}

// A mask [rows × cols] from row lengths, with holes (mask 0) at the given (row, token) pairs.
std::vector<double> mask_of(index_type cols, const std::vector<index_type>& row_lengths,
                            const std::vector<std::pair<index_type, index_type>>& holes = {}) {
    const auto rows = static_cast<index_type>(row_lengths.size());
    std::vector<double> mask(static_cast<std::size_t>(rows * cols), 0.0);
    for (index_type i = 0; i < rows; ++i)
        for (index_type t = 0; t < row_lengths[static_cast<std::size_t>(i)]; ++t) mask[i * cols + t] = 1.0;
    for (const auto& [i, t] : holes) mask[i * cols + t] = 0.0;
    return mask;
}

std::vector<double> uniform_values(std::size_t count, std::uint32_t seed, double low, double high) {
    std::mt19937 generator(seed);
    std::uniform_real_distribution<double> uniform(low, high);
    std::vector<double> values(count);
    for (auto& v : values) v = uniform(generator);
    return values;
}

}  // namespace

// ---- cort_weights -------------------------------------------------------------

TEMPLATE_TEST_CASE("special values: cort_weights", "[credit][special_values][cort]", float, double) {
    using T = TestType;
    for (index_type cols : lengths) {
        const index_type rows = 3, last = cols - 1;
        const auto mask = mask_of(cols, {cols, cols, cols - 4}, {{1, 5}});
        const auto rubric = random_values(rows * cols, 40 + cols, -1.5, 0.5);
        const auto free = random_values(rows * cols, 41 + cols, -1.5, 0.5);
        const std::vector<double> advantages = {0.7, -1.3, 2.1};
        std::vector<T> weights, token_advantages;
        const auto run = [&](const std::vector<double>& r, const std::vector<double>& f, const std::vector<double>& a) {
            auto R = to_storage<T>(r), F = to_storage<T>(f), M = to_storage<T>(mask), A = to_storage<T>(a);
            weights.assign(rows * cols, T(-7));
            token_advantages.assign(rows * cols, T(-7));
            credit::cort_weights(view(R.data(), rows, cols), view(F.data(), rows, cols), view(M.data(), rows, cols),
                                 vector_view<const T>(A), view(weights.data(), rows, cols),
                                 view(token_advantages.data(), rows, cols));
        };
        run(rubric, free, advantages);
        const auto base_w = weights, base_a = token_advantages;
        for (double special : specials) {
            INFO(type_name<T>() << " T " << cols << " value " << special);
            // Masked log-probs are never read.
            for (const auto& [i, t] : std::vector<std::pair<index_type, index_type>>{{1, 5}, {2, last}}) {
                auto r = rubric, f = free;
                r[i * cols + t] = special;
                f[i * cols + t] = -special;
                run(r, f, advantages);
                check_changed(weights, base_w, {}, cols);
                check_changed(token_advantages, base_a, {}, cols);
            }
            // A NaN contrast at a valid token (NaN, or inf − inf) is an error, and nothing is written.
            for (const auto& [i, t] : std::vector<std::pair<index_type, index_type>>{{1, last}, {2, 0}}) {
                auto r = rubric, f = free;
                r[i * cols + t] = special;
                if (!std::isnan(special)) f[i * cols + t] = special;
                std::ostringstream where;
                where << "the contrast log_prob_rubric - log_prob_free is NaN at valid token (" << i << ", " << t
                      << ")";
                require_error_naming([&] { run(r, f, advantages); }, where.str());
                for (std::size_t k = 0; k < weights.size(); ++k) {
                    CHECK(at(weights, k) == -7.0);
                    CHECK(at(token_advantages, k) == -7.0);
                }
            }
            // ±inf contrast maps to the bound it points at: as a contrast of ±100 (exp(±100) is clipped).
            if (!std::isnan(special))
                for (const auto& [i, t] : std::vector<std::pair<index_type, index_type>>{{1, last}, {0, 0}}) {
                    const double sign = special > 0 ? 1.0 : -1.0;
                    for (bool on_rubric : {true, false}) {
                        auto r = rubric, f = free, r_finite = rubric, f_finite = free;
                        if (on_rubric) {
                            r[i * cols + t] = special;
                            r_finite[i * cols + t] = free[i * cols + t] + 100 * sign;
                        } else {
                            f[i * cols + t] = special;
                            f_finite[i * cols + t] = rubric[i * cols + t] + 100 * sign;
                        }
                        run(r_finite, f_finite, advantages);
                        const auto finite_w = weights, finite_a = token_advantages;
                        run(r, f, advantages);
                        check_changed(weights, finite_w, {}, cols);
                        check_changed(token_advantages, finite_a, {}, cols);
                    }
                }
            // A non-finite A_i reaches row i's valid tokens as w·A_i (w > 0): the value itself; masked stay 0.
            auto a = advantages;
            a[1] = special;
            run(rubric, free, a);
            check_changed(weights, base_w, {}, cols);
            std::map<std::size_t, double> changed;
            for (index_type t = 0; t < cols; ++t)
                if (mask[cols + t] != 0) changed[cols + t] = special;
            check_changed(token_advantages, base_a, changed, cols);
        }
    }
}

// ---- optimal_token_baseline -----------------------------------------------------

namespace {

template <class T>
struct otb_case {
    index_type rows = 6, cols = 0;
    std::vector<index_type> ids = {0, 0, 0, 1, 1, 2};  // row 5 is a group of one
    std::vector<double> mask, rewards, log_p, sum_p2, rho;
    std::vector<T> advantages, returns;

    explicit otb_case(index_type cols_) : cols(cols_) {
        // Two full rows per group of three or two: no unique longest response, the zero tail stays off.
        mask = mask_of(cols, {cols, cols, cols - 5, cols, cols, cols - 2}, {{2, 3}, {5, 2}, {5, 9}});
        rewards = random_values(rows * cols, 70 + cols);
        for (auto& r : rewards) r = std::abs(r) < 0.8 ? 0.0 : r;
        log_p = uniform_values(rows * cols, 71 + cols, -3.0, -0.05);
        sum_p2 = uniform_values(rows * cols, 72 + cols, 0.05, 1.0);
        rho = uniform_values(rows * cols, 73 + cols, 0.5, 1.5);
    }
    void run(const std::vector<double>& r, const std::vector<double>& lp, const std::vector<double>& s,
             const std::vector<double>& w, bool compact) {
        auto R = to_storage<T>(r), M = to_storage<T>(mask), L = to_storage<T>(lp), S = to_storage<T>(s),
             W = to_storage<T>(w);
        advantages.assign(rows * cols, T(-7));
        returns.assign(rows * cols, T(-7));
        credit::optimal_token_baseline_options options;
        options.compact = compact;
        credit::optimal_token_baseline(view(R.data(), rows, cols), view(M.data(), rows, cols), normkit::group_ids(ids),
                                       view(L.data(), rows, cols), view(S.data(), rows, cols),
                                       matrix_view<const T>(view(W.data(), rows, cols)),
                                       view(advantages.data(), rows, cols), view(returns.data(), rows, cols), options);
    }
    bool valid(index_type i, index_type t) const { return mask[i * cols + t] != 0; }
    // The valid positions of row i, in order.
    std::vector<index_type> positions(index_type i) const {
        std::vector<index_type> p;
        for (index_type t = 0; t < cols; ++t)
            if (valid(i, t)) p.push_back(t);
        return p;
    }
    // The advantages a non-finite G or W of row i at `poisoned` positions changes: B_t is NaN at each
    // poisoned valid t (packed index under compact), so every member valid there is NaN. A group
    // of one has no baseline, A = G: the value of G there (g_value) if G is what is not finite, else
    // nothing.
    std::map<std::size_t, double> nan_advantages(index_type i, const std::vector<char>& poisoned, bool compact,
                                                 bool g_poisoned, double g_value) const {
        std::map<std::size_t, double> changed;
        std::vector<index_type> members;
        for (index_type k = 0; k < rows; ++k)
            if (ids[k] == ids[i]) members.push_back(k);
        if (members.size() == 1) {
            if (g_poisoned)
                for (index_type t = 0; t < cols; ++t)
                    if (valid(i, t) && poisoned[t]) changed[i * cols + t] = g_value;
            return changed;
        }
        if (!compact) {
            for (index_type t = 0; t < cols; ++t)
                if (valid(i, t) && poisoned[t])
                    for (index_type k : members)
                        if (valid(k, t)) changed[k * cols + t] = nan_value;
        } else {
            const auto own = positions(i);
            for (std::size_t packed = 0; packed < own.size(); ++packed)
                if (poisoned[own[packed]])
                    for (index_type k : members) {
                        const auto theirs = positions(k);
                        if (packed < theirs.size()) changed[k * cols + theirs[packed]] = nan_value;
                    }
        }
        return changed;
    }
};

}  // namespace

TEMPLATE_TEST_CASE("special values: optimal_token_baseline", "[credit][special_values][otb]", float, double) {
    using T = TestType;
    for (index_type cols : lengths)
        for (bool compact : {false, true}) {
            otb_case<T> c(cols);
            const index_type last = cols - 1;
            c.run(c.rewards, c.log_p, c.sum_p2, c.rho, compact);
            const auto base_a = c.advantages, base_g = c.returns;
            for (double special : specials) {
                INFO(type_name<T>() << " T " << cols << " compact " << compact << " value " << special);
                // Masked positions are never read, in any input.
                for (const auto& [i, t] : std::vector<std::pair<index_type, index_type>>{{2, 3}, {2, last}, {5, 9}})
                    for (int input = 0; input < 4; ++input) {
                        auto r = c.rewards, lp = c.log_p, s = c.sum_p2, w = c.rho;
                        (input == 0 ? r : input == 1 ? lp : input == 2 ? s : w)[i * cols + t] = special;
                        c.run(r, lp, s, w, compact);
                        check_changed(c.advantages, base_a, {}, cols);
                        check_changed(c.returns, base_g, {}, cols);
                    }
                // A reward at valid (i, t): G of row i is that value (NaN, ±inf) at and before t, masked
                // positions included; the baseline of its group NaN where row i is valid up to t.
                for (const auto& [i, t] : std::vector<std::pair<index_type, index_type>>{
                         {1, last}, {0, 0}, {2, 8}, {5, cols - 3}, {4, last}}) {
                    auto r = c.rewards;
                    r[i * cols + t] = special;
                    c.run(r, c.log_p, c.sum_p2, c.rho, compact);
                    std::vector<char> poisoned(cols, 0);
                    std::map<std::size_t, double> returns_changed;
                    for (index_type j = 0; j <= t; ++j) {
                        poisoned[j] = 1;
                        returns_changed[i * cols + j] = special;
                    }
                    INFO("reward at (" << i << ", " << t << ")");
                    check_changed(c.advantages, base_a, c.nan_advantages(i, poisoned, compact, true, special), cols);
                    check_changed(c.returns, base_g, returns_changed, cols);
                }
                // old_log_prob (but −inf, below), Σπ², ρ at valid (i, t): W of row i not finite from t on.
                for (int input = 1; input < 4; ++input)
                    for (const auto& [i, t] :
                         std::vector<std::pair<index_type, index_type>>{{1, last}, {0, 0}, {2, 8}, {3, 4}, {5, 0}}) {
                        auto lp = c.log_p, s = c.sum_p2, w = c.rho;
                        auto& x = input == 1 ? lp : input == 2 ? s : w;
                        if (input == 1 && special < 0) {
                            // π = 0: ordinary, the same bits as a log-prob of −1000 (exp gives 0).
                            x[i * cols + t] = -1000;
                            c.run(c.rewards, lp, s, w, compact);
                            const auto finite_a = c.advantages;
                            x[i * cols + t] = special;
                            c.run(c.rewards, lp, s, w, compact);
                            check_changed(c.advantages, finite_a, {}, cols);
                            check_changed(c.returns, base_g, {}, cols);
                            continue;
                        }
                        x[i * cols + t] = special;
                        c.run(c.rewards, lp, s, w, compact);
                        std::vector<char> poisoned(cols, 0);
                        for (index_type j = t; j < cols; ++j) poisoned[j] = 1;
                        INFO("input " << input << " at (" << i << ", " << t << ")");
                        // A group of one has no baseline, so W does not reach its A.
                        check_changed(c.advantages, base_a, c.nan_advantages(i, poisoned, compact, false, 0.0), cols);
                        check_changed(c.returns, base_g, {}, cols);
                    }
            }
        }
}

// ---- top_entropy_mask -----------------------------------------------------------

TEMPLATE_TEST_CASE("special values: top_entropy_mask", "[credit][special_values][entropy]", float, double) {
    using T = TestType;
    for (index_type cols : lengths)
        for (double rho : {0.3, 1.0, 0.0, 0.5}) {
            const index_type rows = 4, last = cols - 1;
            const auto mask = mask_of(cols, {cols, cols - 3, cols, cols - 6}, {{0, 4}, {2, 1}});
            const auto entropy = uniform_values(rows * cols, 90 + cols, 0.1, 3.0);
            std::vector<T> keep;
            const auto run = [&](const std::vector<double>& h, const std::vector<double>& m) {
                auto H = to_storage<T>(h), M = to_storage<T>(m);
                keep.assign(rows * cols, T(-7));
                credit::top_entropy_options options;
                options.rho = rho;
                credit::top_entropy_mask(view(H.data(), rows, cols), view(M.data(), rows, cols),
                                         view(keep.data(), rows, cols), options);
            };
            run(entropy, mask);
            const auto base = keep;
            for (double special : specials) {
                INFO(type_name<T>() << " T " << cols << " rho " << rho << " value " << special);
                for (const auto& [i, t] : std::vector<std::pair<index_type, index_type>>{{0, 4}, {3, last}}) {
                    auto h = entropy;
                    h[i * cols + t] = special;
                    run(h, mask);
                    check_changed(keep, base, {}, cols);
                }
                for (const auto& [i, t] : std::vector<std::pair<index_type, index_type>>{{2, last}, {0, 0}, {1, 7}}) {
                    auto h = entropy, h_equivalent = entropy, m_equivalent = mask;
                    h[i * cols + t] = special;
                    if (std::isnan(special))
                        m_equivalent[i * cols + t] = 0;  // NaN: never kept, out of the quantile
                    else
                        h_equivalent[i * cols + t] = special > 0 ? 1e6 : -1e6;  // ranked above / below every value
                    run(h_equivalent, m_equivalent);
                    const auto equivalent = keep;
                    run(h, mask);
                    INFO("at (" << i << ", " << t << ")");
                    check_changed(keep, equivalent, {}, cols);
                    CHECK(at(keep, i * cols + t) == (std::isnan(special)         ? 0.0
                                                     : special > 0 || rho == 1.0 ? 1.0
                                                                                 : 0.0));
                }
            }
            // Every valid entropy NaN: nothing is kept.
            run(std::vector<double>(rows * cols, nan_value), mask);
            for (std::size_t k = 0; k < keep.size(); ++k) CHECK(at(keep, k) == 0.0);
        }
}

// ---- hapo_* ---------------------------------------------------------------------

TEMPLATE_TEST_CASE("special values: hapo_entropy_signal", "[credit][special_values][hapo]", float, double) {
    using T = TestType;
    for (index_type cols : lengths)
        for (auto sign : {credit::hapo_sign::paper_range, credit::hapo_sign::released_code}) {
            const index_type rows = 4, last = cols - 1;
            const auto mask = mask_of(cols, {cols, cols - 3, cols, cols - 6}, {{0, 4}, {2, 1}});
            const auto entropy = uniform_values(rows * cols, 95 + cols, 0.05, 3.0);
            std::vector<T> signal;
            const auto run = [&](const std::vector<double>& h, const std::vector<double>& m) {
                auto H = to_storage<T>(h), M = to_storage<T>(m);
                signal.assign(rows * cols, T(-7));
                credit::hapo_entropy_options options;
                options.sign = sign;
                credit::hapo_entropy_signal(view(H.data(), rows, cols), view(M.data(), rows, cols),
                                            view(signal.data(), rows, cols), options);
            };
            run(entropy, mask);
            const auto base = signal;
            CHECK(count_nan(base) == 0);
            for (double special : specials) {
                INFO(type_name<T>() << " T " << cols << " value " << special);
                for (const auto& [i, t] : std::vector<std::pair<index_type, index_type>>{{0, 4}, {3, last}}) {
                    auto h = entropy;
                    h[i * cols + t] = special;
                    run(h, mask);
                    check_changed(signal, base, {}, cols);
                }
                for (const auto& [i, t] : std::vector<std::pair<index_type, index_type>>{{2, last}, {0, 0}, {1, 7}}) {
                    auto h = entropy, h_equivalent = entropy, m_equivalent = mask;
                    h[i * cols + t] = special;
                    std::map<std::size_t, double> changed;
                    if (special < 0) {
                        h_equivalent[i * cols + t] = 0;  // −inf is below the floor 1e-8, as 0 is
                    } else {
                        m_equivalent[i * cols + t] = 0;  // NaN, +inf: out of the statistics, h̃ = NaN
                        changed[i * cols + t] = nan_value;
                    }
                    run(h_equivalent, m_equivalent);
                    const auto equivalent = signal;
                    run(h, mask);
                    INFO("at (" << i << ", " << t << ")");
                    check_changed(signal, equivalent, changed, cols);
                }
            }
        }
}

TEMPLATE_TEST_CASE("special values: hapo_token_advantages", "[credit][special_values][hapo]", float, double) {
    using T = TestType;
    for (index_type cols : lengths)
        for (bool by_std : {true, false}) {
            const index_type rows = 6;
            // Row 5 has no valid token; the lengths are close enough that no group falls back to GRPO.
            const auto mask = mask_of(cols, {cols, cols - 3, cols - 6, cols, cols - 2, 0}, {{1, 2}, {3, 0}});
            const auto scores = random_values(rows, 100 + cols);
            std::vector<T> out;
            const auto run = [&](const std::vector<double>& s) {
                auto S = to_storage<T>(s), M = to_storage<T>(mask);
                out.assign(rows * cols, T(-7));
                credit::hapo_advantage_options options;
                options.normalize_by_std = by_std;
                credit::hapo_token_advantages(vector_view<const T>(S), normkit::contiguous_groups(3),
                                              view(M.data(), rows, cols), view(out.data(), rows, cols), options);
            };
            run(scores);
            const auto base = out;
            CHECK(count_nan(base) == 0);
            for (double special : specials) {
                INFO(type_name<T>() << " T " << cols << " by_std " << by_std << " value " << special);
                for (index_type i : {index_type(1), index_type(3)}) {
                    auto s = scores;
                    s[i] = special;
                    run(s);
                    std::map<std::size_t, double> changed;
                    const index_type first = i / 3 * 3;
                    for (index_type k = first; k < first + 3; ++k)
                        for (index_type t = 0; t < cols; ++t)
                            if (mask[k * cols + t] != 0) changed[k * cols + t] = nan_value;
                    check_changed(out, base, changed, cols);
                }
                // A response without valid tokens is not in its group's statistics.
                auto s = scores;
                s[5] = special;
                run(s);
                check_changed(out, base, {}, cols);
            }
        }
    // A group whose valid tokens all have one non-finite score: NaN, not the 0 of a degenerate set
    // (it was 0 for a NaN of a single token, a set of one, and for ±inf, a set of equal values).
    for (double special : specials)
        for (bool two_rows : {false, true}) {
            const index_type cols = 17, rows = 5;
            auto m = mask_of(cols, {cols, cols, 0, 0, 0});
            m[4 * cols + cols - 1] = 1;
            if (two_rows) m[3 * cols + 0] = 1;
            const auto S = to_storage<T>({0.5, -0.25, 0.0, two_rows ? special : 1.0, special}), M = to_storage<T>(m);
            std::vector<T> out(rows * cols, T(-7));
            const std::vector<index_type> ids{0, 0, 1, 1, 1};
            credit::hapo_token_advantages(vector_view<const T>(S), normkit::group_ids(ids), view(M.data(), rows, cols),
                                          view(out.data(), rows, cols));
            INFO(type_name<T>() << " value " << special << " two rows " << two_rows);
            for (index_type k = 2 * cols; k < rows * cols; ++k)
                CHECK((m[k] != 0 ? std::isnan(at(out, k)) : at(out, k) == 0.0));
            CHECK(count_nan(out) == (two_rows ? 2u : 1u));
        }
}

TEMPLATE_TEST_CASE("special values: hapo_clip_ranges", "[credit][special_values][hapo]", float, double) {
    using T = TestType;
    for (index_type cols : lengths) {
        const index_type rows = 3;
        const auto signal = uniform_values(rows * cols, 110 + cols, -1.0, 1.0);
        std::vector<T> low, high;
        const auto run = [&](const std::vector<double>& h) {
            auto H = to_storage<T>(h);
            low.assign(rows * cols, T(-7));
            high.assign(rows * cols, T(-7));
            credit::hapo_clip_ranges(view(H.data(), rows, cols), view(low.data(), rows, cols),
                                     view(high.data(), rows, cols));
        };
        run(signal);
        const auto base_low = low, base_high = high;
        const double base = static_cast<double>(core::round_to<T>(static_cast<core::compute_t<T>>(0.2)));
        for (double special : specials)
            for (const auto& [i, t] : std::vector<std::pair<index_type, index_type>>{{1, cols - 1}, {0, 0}}) {
                INFO(type_name<T>() << " T " << cols << " value " << special << " at " << i << ", " << t);
                auto h = signal;
                h[i * cols + t] = special;
                run(h);
                const std::size_t k = i * cols + t;
                // NaN: both NaN; +inf: ε_L, ε_H(1 + α·inf) = inf; −inf: ε_L(1 + α·inf) = inf, ε_H.
                check_changed(low, base_low,
                              {{k, std::isnan(special) ? nan_value
                                   : special > 0       ? base
                                                       : infinity}},
                              cols);
                check_changed(high, base_high,
                              {{k, std::isnan(special) ? nan_value
                                   : special > 0       ? infinity
                                                       : base}},
                              cols);
            }
    }
}

TEMPLATE_TEST_CASE("special values: hapo_redistribute", "[credit][special_values][hapo]", float, double) {
    using T = TestType;
    for (index_type cols : lengths) {
        const index_type rows = 3, last = cols - 1;
        const std::size_t n = static_cast<std::size_t>(rows * cols);
        const auto mask = mask_of(cols, {cols, cols - 2, cols}, {{0, 5}, {2, 0}});
        std::vector<std::vector<double>> inputs = {
            random_values(n, 120 + cols),                                // advantages
            uniform_values(n, 121 + cols, -0.9, 0.9),                    // signal
            uniform_values(n, 122 + cols, 0.7, 1.3),                     // ratio: inside and outside the band
            std::vector<double>(n, 0.2), std::vector<double>(n, 0.28)};  // clip_low, clip_high
        std::vector<T> out;
        const auto run = [&](const std::vector<std::vector<double>>& x) {
            std::vector<std::vector<T>> X;
            for (const auto& v : x) X.push_back(to_storage<T>(v));
            auto M = to_storage<T>(mask);
            out.assign(n, T(-7));
            const auto v = [&](std::vector<T>& y) { return matrix_view<const T>(view(y.data(), rows, cols)); };
            credit::hapo_redistribute(v(X[0]), v(X[1]), v(X[2]), v(X[3]), v(X[4]), matrix_view<const T>(v(M)),
                                      view(out.data(), rows, cols));
        };
        run(inputs);
        const auto base = out;
        for (double special : specials)
            for (std::size_t input = 0; input < inputs.size(); ++input) {
                INFO(type_name<T>() << " T " << cols << " value " << special << " input " << input);
                // Masked: never read.
                for (const auto& [i, t] : std::vector<std::pair<index_type, index_type>>{{0, 5}, {1, last}}) {
                    auto x = inputs;
                    x[input][i * cols + t] = special;
                    run(x);
                    check_changed(out, base, {}, cols);
                }
                for (const auto& [i, t] : std::vector<std::pair<index_type, index_type>>{{2, last}, {0, 0}, {1, 9}}) {
                    const std::size_t k = i * cols + t;
                    auto x = inputs;
                    x[input][k] = special;
                    run(x);
                    INFO("at (" << i << ", " << t << ")");
                    const auto stored_at = [&](std::size_t j) {
                        return static_cast<double>(core::round_to<T>(static_cast<core::compute_t<T>>(inputs[j][k])));
                    };
                    const double a = stored_at(0), r = stored_at(2);
                    const double band_low = 1.0 - stored_at(3) / 2, band_high = 1.0 + stored_at(4) / 2;
                    if (std::isnan(special)) {
                        check_changed(out, base, {{k, nan_value}}, cols);  // any NaN input: NaN
                    } else if (input == 0) {
                        check_changed(out, base, {{k, special}}, cols);  // ±inf·(1 + β·h̃ > 0) or ±inf
                    } else if (input == 1) {
                        // ±inf h̃: a·(1 + β·h̃) = ±inf in its branch, A outside it.
                        const bool inside = r > band_low && r < band_high;
                        const bool scaled = special > 0 ? !inside : inside;
                        const double expected = scaled ? (a * special > 0 ? infinity : -infinity) : a;
                        check_changed(out, base, {{k, expected}}, cols);
                    } else {
                        // ±inf ratio or bound: compared as any number (as ±1e6, ±1e9).
                        auto finite = inputs;
                        finite[input][k] = special > 0 ? (input == 2 ? 1e6 : 1e9) : (input == 2 ? -1e6 : -1e9);
                        const auto with_special = out;
                        run(finite);
                        check_changed(with_special, out, {}, cols);
                    }
                }
            }
    }
}

// ---- span_advantages ------------------------------------------------------------

TEMPLATE_TEST_CASE("special values: span_advantages", "[credit][special_values][spans]", float, double) {
    using T = TestType;
    for (index_type cols : lengths)
        for (auto outside : {credit::outside_span::zero, credit::outside_span::response_advantage}) {
            const index_type rows = 3, positions = 4;
            const auto mask = mask_of(cols, {cols, cols - 2, cols}, {{0, 6}, {2, 1}});
            const std::vector<credit::span> spans = {
                {0, 0, 5, 0}, {0, 5, cols, 1}, {1, 2, 9, 2}, {1, 9, cols, 3}, {2, 0, cols - 3, 1}};
            const auto table = random_values(rows * positions, 130 + cols);
            const auto response = random_values(rows, 131 + cols);
            std::vector<T> out;
            const auto run = [&](const std::vector<double>& p, const std::vector<double>& r) {
                auto P = to_storage<T>(p), M = to_storage<T>(mask), R = to_storage<T>(r);
                out.assign(rows * cols, T(-7));
                credit::span_advantages(vector_view<const credit::span>(spans), view(P.data(), rows, positions),
                                        view(M.data(), rows, cols), vector_view<const T>(R),
                                        view(out.data(), rows, cols), span_settings(outside));
            };
            run(table, response);
            const auto base = out;
            for (double special : specials) {
                INFO(type_name<T>() << " T " << cols << " value " << special);
                // A named position: its value on the span's valid tokens (row 0, [5, T), token 6 masked).
                auto p = table;
                p[0 * positions + 1] = special;
                run(p, response);
                std::map<std::size_t, double> changed;
                for (index_type t = 5; t < cols; ++t)
                    if (t != 6) changed[t] = special;
                check_changed(out, base, changed, cols);
                // A position no span of its sample names is not read.
                p = table;
                p[2 * positions + 3] = special;
                run(p, response);
                check_changed(out, base, {}, cols);
                // A response advantage: on the valid tokens outside the spans under response_advantage
                // (row 1, [0, 2)); not read under zero.
                auto r = response;
                r[1] = special;
                run(table, r);
                changed.clear();
                if (outside == credit::outside_span::response_advantage)
                    for (index_type t = 0; t < 2; ++t) changed[cols + t] = special;
                check_changed(out, base, changed, cols);
            }
        }
}

// ---- turns: a2tgpo, mapo, gtpo, turns_to_tokens -----------------------------------

namespace {

struct turn_case {
    index_type rows = 6, turns;
    std::vector<index_type> count;
    std::vector<double> table;

    explicit turn_case(index_type turns_, std::uint32_t seed) : turns(turns_) {
        count = {turns, turns - 4, 3, turns, turns - 1, 0};  // groups {0, 1, 2}, {3, 4, 5}
        table = random_values(rows * turns, seed);
    }
    // Rows of i's group (contiguous groups of 3).
    std::vector<index_type> group_of(index_type i) const {
        const index_type first = i / 3 * 3;
        return {first, first + 1, first + 2};
    }
};

}  // namespace

TEMPLATE_TEST_CASE("special values: a2tgpo_advantages", "[credit][special_values][turns]", float, double) {
    using T = TestType;
    for (index_type turns : lengths) {
        turn_case c(turns, 140 + turns);
        const index_type rows = c.rows;
        const auto outcome = random_values(rows, 141 + turns);
        std::vector<T> advantages, clip;
        const auto run = [&](const std::vector<double>& ig, const std::vector<double>& o) {
            auto G = to_storage<T>(ig), O = to_storage<T>(o);
            advantages.assign(rows * turns, T(-7));
            clip.assign(rows * turns, T(-7));
            credit::a2tgpo_advantages(view(G.data(), rows, turns), c.count, normkit::contiguous_groups(3),
                                      vector_view<const T>(O), view(advantages.data(), rows, turns),
                                      view(clip.data(), rows, turns));
        };
        run(c.table, outcome);
        const auto base_a = advantages, base_c = clip;
        for (double special : specials) {
            INFO(type_name<T>() << " N " << turns << " value " << special);
            // Padding (t ≥ turn_count) is not read.
            for (const auto& [i, t] : std::vector<std::pair<index_type, index_type>>{{1, turns - 1}, {5, 0}}) {
                auto ig = c.table;
                ig[i * turns + t] = special;
                run(ig, outcome);
                check_changed(advantages, base_a, {}, turns);
                check_changed(clip, base_c, {}, turns);
            }
            // IG at a valid turn (i, t): the cell (group, t) standardizes to NaN, so D and A are NaN at
            // turns ≤ t of every member that reaches t, and c at t; the outcome turn keeps its value.
            for (const auto& [i, t] :
                 std::vector<std::pair<index_type, index_type>>{{1, 2}, {1, turns - 5}, {0, turns - 1}, {4, 0}}) {
                auto ig = c.table;
                ig[i * turns + t] = special;
                run(ig, outcome);
                std::map<std::size_t, double> changed_a, changed_c;
                for (index_type k : c.group_of(i)) {
                    if (c.count[k] <= t) continue;
                    for (index_type j = 0; j <= t; ++j) changed_a[k * turns + j] = nan_value;
                    changed_c[k * turns + t] = nan_value;
                }
                INFO("IG at (" << i << ", " << t << ")");
                check_changed(advantages, base_a, changed_a, turns);
                check_changed(clip, base_c, changed_c, turns);
            }
            // The outcome advantage of row i: A at every turn up to its outcome turn n_i (outcome + α·D).
            for (index_type i : {index_type(1), index_type(5)}) {
                auto o = outcome;
                o[i] = special;
                run(c.table, o);
                std::map<std::size_t, double> changed;
                for (index_type j = 0; j <= c.count[i] && j < turns; ++j) changed[i * turns + j] = special;
                check_changed(advantages, base_a, changed, turns);
                check_changed(clip, base_c, {}, turns);
            }
        }
    }
}

TEMPLATE_TEST_CASE("special values: mapo_advantages and gtpo_advantages", "[credit][special_values][turns]", float,
                   double) {
    using T = TestType;
    for (index_type turns : lengths)
        for (int variant = 0; variant < 4; ++variant) {
            // 0: mapo (group scope), 1: mapo (batch scope), 2: gtpo all_turns, 3: gtpo turn_index
            turn_case c(turns, 150 + turns);
            const index_type rows = c.rows;
            std::vector<T> advantages;
            const auto run = [&](const std::vector<double>& r) {
                auto R = to_storage<T>(r);
                advantages.assign(rows * turns, T(-7));
                const auto table = view(R.data(), rows, turns);
                const auto out = view(advantages.data(), rows, turns);
                if (variant < 2) {
                    credit::mapo_options options;
                    options.immediate_scope =
                        variant == 0 ? credit::normalization_scope::group : credit::normalization_scope::batch;
                    credit::mapo_advantages(table, c.count, normkit::contiguous_groups(3), out, options);
                } else {
                    credit::gtpo_options options;
                    options.scope = variant == 2 ? credit::gtpo_scope::all_turns : credit::gtpo_scope::turn_index;
                    credit::gtpo_advantages(table, c.count, normkit::contiguous_groups(3), out, options);
                }
            };
            run(c.table);
            const auto base = advantages;
            CHECK(count_nan(base) == 0);
            for (double special : specials) {
                INFO(type_name<T>() << " N " << turns << " variant " << variant << " value " << special);
                for (const auto& [i, t] : std::vector<std::pair<index_type, index_type>>{{1, turns - 1}, {5, 0}}) {
                    auto r = c.table;
                    r[i * turns + t] = special;
                    run(r);
                    check_changed(advantages, base, {}, turns);
                }
                for (const auto& [i, t] :
                     std::vector<std::pair<index_type, index_type>>{{1, 2}, {1, turns - 5}, {0, turns - 1}, {4, 0}}) {
                    auto r = c.table;
                    r[i * turns + t] = special;
                    run(r);
                    std::map<std::size_t, double> changed;
                    // mapo: the group term covers the group (the batch); gtpo all_turns: the group;
                    // gtpo turn_index: the cells of turn indices ≤ t (G is not finite at and before t).
                    std::vector<index_type> reached =
                        variant == 1 ? std::vector<index_type>{0, 1, 2, 3, 4, 5} : c.group_of(i);
                    for (index_type k : reached)
                        for (index_type j = 0; j < c.count[k]; ++j)
                            if (variant != 3 || j <= t) changed[k * turns + j] = nan_value;
                    INFO("reward at (" << i << ", " << t << ")");
                    check_changed(advantages, base, changed, turns);
                }
            }
        }
}

TEMPLATE_TEST_CASE("special values: turns_to_tokens", "[credit][special_values][turns]", float, double) {
    using T = TestType;
    for (index_type cols : lengths) {
        const index_type rows = 2, turns = 4;
        std::vector<index_type> turn_index(rows * cols);
        for (index_type t = 0; t < cols; ++t) {
            turn_index[t] = t < 3 ? -1 : t < 10 ? 0 : 2;
            turn_index[cols + t] = t < 5 ? 1 : t < cols - 2 ? 3 : -1;
        }
        const auto per_turn = random_values(rows * turns, 160 + cols);
        std::vector<T> out;
        const auto run = [&](const std::vector<double>& p, double outside) {
            auto P = to_storage<T>(p);
            out.assign(rows * cols, T(-7));
            credit::turns_to_tokens(view(P.data(), rows, turns), view(turn_index.data(), rows, cols),
                                    view(out.data(), rows, cols), turns_to_tokens_settings(outside));
        };
        run(per_turn, 0.0);
        const auto base = out;
        for (double special : specials) {
            INFO(type_name<T>() << " T " << cols << " value " << special);
            // Copied: the tokens of that turn get the value; a turn no token names is not read.
            auto p = per_turn;
            p[0 * turns + 2] = special;
            p[0 * turns + 1] = special;
            run(p, 0.0);
            std::map<std::size_t, double> changed;
            for (index_type t = 10; t < cols; ++t) changed[t] = special;
            check_changed(out, base, changed, cols);
            // options.outside is written as given.
            run(per_turn, special);
            changed.clear();
            for (std::size_t k = 0; k < turn_index.size(); ++k)
                if (turn_index[k] < 0) changed[k] = special;
            check_changed(out, base, changed, cols);
        }
    }
}
