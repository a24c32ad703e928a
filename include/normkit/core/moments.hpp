// Mergeable moments (count, mean, M2), Chan's merge, and the two-pass centred
// moments every double-precision statistic of the library is taken with.
//
//   add one value x with weight w:   W' = W + w,  δ = x − μ,  μ' = μ + w·δ/W',  M2' = M2 + w·δ·(x − μ')
//   merge a and b (Chan, Golub & LeVeque 1979):
//       W = W_a + W_b,  δ = μ_b − μ_a,  μ = μ_a + δ·W_b/W,  M2 = M2_a + M2_b + δ²·W_a·W_b/W
//   variance(ddof) = M2 / (W − ddof)
//
// Conventions:
// - Everything in double; moments are centred and never formed as E[x²] − E[x]²
//   (NeMo-RL #1518: sixteen rewards of 0.95 leave a fp32 one-pass residue that
//   inflated advantages 2000×; here a constant stream gives M2 = 0 exactly).
// - The count W is a double so token counts and fractional weights share one
//   type; with unit weights it is the sample count.
// - Merging with an empty side returns the other side unchanged, so partial
//   moments of empty shards are harmless.
// - Degenerate: variance(ddof) is 0 when W ≤ ddof (no data, or one sample with
//   ddof = 1), never NaN or negative. Callers that must tell "undefined" from
//   "zero" test count against ddof themselves.
#pragma once

#include <algorithm>
#include <cmath>

namespace normkit {

struct moments {
    double count = 0;  // Σw
    double mean = 0;   // Σw·x / Σw
    double m2 = 0;     // Σw·(x − mean)²

    void add(double value, double weight = 1.0) {
        if (weight == 0) return;
        const double total = count + weight;
        const double delta = value - mean;
        mean += weight * delta / total;
        m2 += weight * delta * (value - mean);
        count = total;
    }

    double variance(int ddof = 0) const {
        const double denominator = count - ddof;
        return denominator > 0 ? std::max(m2 / denominator, 0.0) : 0.0;
    }

    double standard_deviation(int ddof = 0) const { return std::sqrt(variance(ddof)); }
};

// Chan's merge of two partial moments: the moments of the union.
inline moments merge(const moments& a, const moments& b) {
    if (b.count == 0) return a;
    if (a.count == 0) return b;
    const double total = a.count + b.count;
    const double delta = b.mean - a.mean;
    moments result;
    result.count = total;
    result.mean = a.mean + delta * (b.count / total);
    result.m2 = a.m2 + b.m2 + delta * delta * (a.count * (b.count / total));
    return result;
}

namespace core {

// Two-pass centred moments of values[i] for i in a set: exact 0 for constant data.
template <class Visit>
moments two_pass_moments(Visit&& visit) {
    double count = 0, sum = 0;
    visit([&](double value, double weight) {
        count += weight;
        sum += weight * value;
    });
    moments result;
    if (count == 0) return result;
    result.count = count;
    result.mean = sum / count;
    double centred = 0, squares = 0;
    visit([&](double value, double weight) {
        const double deviation = value - result.mean;
        centred += weight * deviation;
        squares += weight * deviation * deviation;
    });
    // The correction term is a rounding-sized residue of the first pass (Chan, Golub & LeVeque 1983).
    result.mean += centred / count;
    result.m2 = std::max(squares - centred * centred / count, 0.0);
    return result;
}

// The two-pass moments of x/s, where s = 1 unless some |x| (of nonzero weight) is at least 2^500:
// then Σw·x² could overflow, and s is the power of two 2^⌊log2 max|x|⌋, so that x/s is below 2 in
// magnitude and exact (but where it underflows, 2^1022 below the largest value). The moments of x itself are the scaled ones with mean·s and M2·s².
// Whitening takes these (advantage/whiten.hpp), since a tiny eps can make its input huge.
struct scaled_moments {
    moments scaled;
    double scale = 1;
};

template <class Visit>
scaled_moments two_pass_moments_scaled(Visit&& visit) {
    double largest = 0;
    visit([&](double value, double weight) {
        if (weight != 0) largest = std::max(largest, std::fabs(value));
    });
    scaled_moments result;
    if (std::isfinite(largest) && largest >= 0x1p500) result.scale = std::ldexp(1.0, std::ilogb(largest));
    const double inverse = 1.0 / result.scale;
    result.scaled = two_pass_moments(
        [&](auto&& sink) { visit([&](double value, double weight) { sink(value * inverse, weight); }); });
    return result;
}

}  // namespace core

}  // namespace normkit
