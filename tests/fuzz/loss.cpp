// Differential fuzz target of policy_loss and aggregate_loss against
// tests/reference/loss.hpp: every surrogate × aggregation × KL estimator, in
// every storage type.
//
// Per case: B × T log-probs (old and reference shifted from them), per-sample
// or per-token advantages, a mask with holes and all-zero rows, entropies, the
// options of the fuzzer's choice, and NaN / ±inf / huge values under the mask.
// It checks
//   - the loss against the reference (1e-12 double, 3e-5 others, relative to
//     the aggregate of |terms|) and ∂loss/∂logπ against central differences
//     of the reference at sampled tokens where the loss is differentiable
//     there (both one-sided slopes agree), on clean data;
//   - masked tokens never reach the loss, whatever they hold: the same loss
//     and the same gradient bits as with ordinary values there, and exactly 0
//     gradient at every masked token; an all-masked batch gives 0 and 0;
//   - bitwise equality for any thread count;
//   - aggregate_loss: the reference's value, exact token count, weights a_i·m
//     and exactly 0 under the mask, even where ℓ is NaN.
#include "fuzz_support.hpp"
#include "reference/loss.hpp"

#include <normkit/loss/aggregate.hpp>
#include <normkit/loss/policy_loss.hpp>

#include <tuple>

using namespace normkit;
using fuzz::check;
using loss::aggregation_mode;
using loss::surrogate_mode;

namespace {

struct data_set {
    index_type rows, cols;
    bool per_sample;
    std::vector<double> x, old, advantages, mask, ref, entropies;  // advantages: per token, dense
};

data_set read_data(fuzz::source& in) {
    const index_type dims[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 65, 129};
    data_set d{in.integer<index_type>(1, 6),
               in.flag() ? in.pick(dims) : in.integer<index_type>(1, 40),
               in.flag(),
               {},
               {},
               {},
               {},
               {},
               {}};
    const double shift = in.pick({0.5, 0.05, 3.0});
    const double hole = in.pick({0.0, 0.2, 0.6});
    for (index_type i = 0; i < d.rows; ++i) {
        const index_type length = in.uniform(0, 1) < 0.15 ? 0 : in.integer<index_type>(1, d.cols);
        const double a = in.uniform(-2, 2);
        for (index_type t = 0; t < d.cols; ++t) {
            const double x = in.uniform(-3, -0.01);
            d.x.push_back(x);
            d.old.push_back(x + in.uniform(-shift, shift));
            d.ref.push_back(x + in.uniform(-shift, shift));
            d.entropies.push_back(in.uniform(0, 2));
            d.advantages.push_back(d.per_sample ? a : in.uniform(-2, 2));
            d.mask.push_back(t < length && in.uniform(0, 1) >= hole ? 1.0 : 0.0);
        }
    }
    return d;
}

loss::policy_loss_options read_options(fuzz::source& in) {
    const surrogate_mode surrogates[] = {surrogate_mode::ppo_clip,      surrogate_mode::cispo_clip,
                                         surrogate_mode::cispo_cap,     surrogate_mode::gspo_token,
                                         surrogate_mode::gspo_sequence, surrogate_mode::sapo,
                                         surrogate_mode::reinforce,     surrogate_mode::gmpo,
                                         surrogate_mode::gft,           surrogate_mode::sapo_sequence};
    const aggregation_mode aggregations[] = {aggregation_mode::token_mean,
                                             aggregation_mode::token_sum,
                                             aggregation_mode::seq_mean_token_sum,
                                             aggregation_mode::seq_mean_token_mean,
                                             aggregation_mode::seq_mean_token_sum_norm,
                                             aggregation_mode::delta_l};
    const loss::kl_estimator estimators[] = {loss::kl_estimator::k1, loss::kl_estimator::abs, loss::kl_estimator::k2,
                                             loss::kl_estimator::k3};
    loss::policy_loss_options o;
    o.surrogate.mode = in.pick(surrogates);
    o.surrogate.epsilon_low = in.pick({0.2, 0.0, 0.5});
    o.surrogate.epsilon_high =
        o.surrogate.mode == surrogate_mode::cispo_cap ? in.pick({1.3, 5.0}) : in.pick({0.28, 0.2, 1.0});
    if ((o.surrogate.mode == surrogate_mode::ppo_clip || o.surrogate.mode == surrogate_mode::gspo_sequence) &&
        in.flag())
        o.surrogate.dual_clip = 3.0;
    o.surrogate.log_ratio_clamp = in.pick({20.0, 1.0, std::numeric_limits<double>::infinity()});
    o.surrogate.gft_threshold = in.pick({0.5, 0.3});
    o.surrogate.raw_approx_kl = in.flag();
    o.use_kl_loss = in.flag();
    o.kl.estimator = in.pick(estimators);
    o.kl.straight_through = in.flag();
    o.kl.clamp = in.flag();
    if (in.flag()) o.kl.value_limit = in.pick({10.0, 0.5});
    o.kl_coefficient = in.pick({0.001, 0.05, 1.0});
    o.entropy_coefficient = in.pick({0.0, 0.01, -0.3});
    o.aggregation.mode = in.pick(aggregations);
    o.aggregation.form = in.flag() ? loss::sum_norm_form::dr_grpo : loss::sum_norm_form::verl_old;
    if (in.flag()) o.aggregation.normalizer_length = in.pick({1.0, 100.0});
    o.aggregation.alpha = in.pick({0.75, 0.0, 1.0});
    o.aggregation.count_empty_rows = in.flag();
    o.aggregation.data_parallel_size = in.pick({1.0, 4.0});
    return o;
}

// With data_parallel_size dp > 1 the batch-wide counts are required: this call's counts × dp, as
// if every rank held a batch like this one.
void set_global_counts(loss::aggregation_options& o, const std::vector<double>& mask, index_type rows,
                       index_type cols) {
    if (o.data_parallel_size <= 1) return;
    double tokens = 0, sequences = 0, length_weights = 0;
    for (index_type i = 0; i < rows; ++i) {
        double n = 0;
        for (index_type t = 0; t < cols; ++t) n += mask[i * cols + t];
        tokens += n;
        sequences += n > 0 || o.count_empty_rows ? 1 : 0;
        if (n > 0) length_weights += std::pow(n, -o.alpha);
    }
    o.global_token_count = tokens * o.data_parallel_size;
    o.global_sequence_count = sequences * o.data_parallel_size;
    o.global_length_weight_sum = length_weights * o.data_parallel_size;
}

template <class T>
struct stored_data {
    fuzz::matrix<T> x, old, advantages, mask, ref, entropies;

    stored_data(const data_set& d, index_type padding, bool unaligned)
        : x(d.rows, d.cols, padding, unaligned),
          old(d.rows, d.cols, padding + 1, !unaligned),
          advantages(d.rows, d.per_sample ? 1 : d.cols, d.per_sample ? 0 : padding, unaligned),
          mask(d.rows, d.cols, padding, unaligned),
          ref(d.rows, d.cols, 0, unaligned),
          entropies(d.rows, d.cols, 2, unaligned) {
        set(d);
    }
    void set(const data_set& d) {
        x.set(d.x);
        old.set(d.old);
        mask.set(d.mask);
        ref.set(d.ref);
        entropies.set(d.entropies);
        if (d.per_sample) {
            std::vector<double> a;
            for (index_type i = 0; i < d.rows; ++i) a.push_back(d.advantages[i * d.cols]);
            advantages.set(a);
        } else {
            advantages.set(d.advantages);
        }
    }
    loss::policy_inputs<T> inputs() const {
        loss::policy_inputs<T> in;
        in.log_probs = x.view;
        in.old_log_probs = old.view;
        in.advantages = advantages.view;
        in.mask = mask.view;
        in.ref_log_probs = ref.view;
        in.entropies = entropies.view;
        return in;
    }
    // The data as stored, per-token advantages.
    data_set values(const data_set& d) const {
        data_set s = d;
        s.x = x.values();
        s.old = old.values();
        s.mask = mask.values();
        s.ref = ref.values();
        s.entropies = entropies.values();
        const auto a = advantages.values();
        for (index_type i = 0; i < d.rows; ++i)
            for (index_type t = 0; t < d.cols; ++t)
                s.advantages[i * d.cols + t] = d.per_sample ? a[i] : a[i * d.cols + t];
        return s;
    }
};

double reference_loss(const data_set& s, const std::vector<double>& x, const loss::policy_loss_options& o) {
    return reference::policy_loss(x, s.x, s.old, s.advantages, s.mask, s.ref, s.entropies, {s.rows, s.cols}, o);
}

struct run_result {
    loss::policy_loss_result result;
    std::vector<double> gradient;
    std::vector<double> entropy_gradient;
};

template <class T>
run_result run(const stored_data<T>& data, const data_set& d, const loss::policy_loss_options& options) {
    fuzz::matrix<T> gradient(d.rows, d.cols, 1, true), entropy_gradient(d.rows, d.cols, 0, false);
    run_result r;
    r.result = loss::policy_loss(data.inputs(), gradient.view, entropy_gradient.view, options);
    check(gradient.padding_untouched() && entropy_gradient.padding_untouched(),
          "policy_loss: wrote outside a gradient view");
    r.gradient = gradient.values();
    r.entropy_gradient = entropy_gradient.values();
    return r;
}

bool same(const run_result& a, const run_result& b) {
    const auto bits = [](double v) {
        std::uint64_t u;
        std::memcpy(&u, &v, sizeof u);
        return u;
    };
    return bits(a.result.loss) == bits(b.result.loss) && fuzz::same_bits(a.gradient, b.gradient) &&
           fuzz::same_bits(a.entropy_gradient, b.entropy_gradient);
}

template <class T>
void check_policy_loss(fuzz::source& in) {
    const auto d = read_data(in);
    auto options = read_options(in);
    set_global_counts(options.aggregation, d.mask, d.rows, d.cols);
    const char* type = fuzz::type_name<T>();
    const int s = static_cast<int>(options.surrogate.mode), a = static_cast<int>(options.aggregation.mode),
              k = static_cast<int>(options.kl.estimator);
    const index_type padding = in.integer<index_type>(0, 2);
    const bool unaligned = in.flag();
    stored_data<T> data(d, padding, unaligned);
    const auto sv = data.values(d);
    const auto base = run(data, d, options);

    // Any thread count: the same bits.
    auto threaded = options;
    threaded.threads = in.integer<int>(2, 4);
    check(same(run(data, d, threaded), base), "policy_loss ", type, ": threads ", threaded.threads,
          " differ from 1 (surrogate ", s, " aggregation ", a, " kl ", k, ")");

    // Masked tokens: exactly 0 gradient; an all-masked batch gives loss 0.
    double tokens = 0;
    for (std::size_t j = 0; j < sv.mask.size(); ++j) {
        tokens += sv.mask[j];
        if (sv.mask[j] == 0)
            check(base.gradient[j] == 0 && base.entropy_gradient[j] == 0, "policy_loss ", type, ": masked token ", j,
                  " has gradient ", base.gradient[j], " / ", base.entropy_gradient[j]);
    }
    if (tokens == 0)
        check(base.result.loss == 0, "policy_loss ", type, ": an all-masked batch gives ", base.result.loss);

    // The loss against the reference, relative to the same aggregate of |terms|.
    const double expected = reference_loss(sv, sv.x, options);
    const auto ell =
        reference::surrogate(sv.x, sv.x, sv.old, sv.advantages, sv.mask, {d.rows, d.cols}, options.surrogate);
    std::vector<double> absolute(ell.size());
    for (std::size_t j = 0; j < ell.size(); ++j)
        absolute[j] =
            std::abs(ell[j]) +
            (options.use_kl_loss
                 ? std::abs(options.kl_coefficient * reference::kl_value(sv.x[j], sv.x[j], sv.ref[j], options.kl))
                 : 0.0) +
            std::abs(options.entropy_coefficient * sv.entropies[j]);
    const double scale =
        std::max(reference::aggregate(absolute, sv.mask, {d.rows, d.cols}, options.aggregation), 1e-30);
    const double loss_error = std::abs(base.result.loss - expected) / scale;
    check(loss_error < (std::is_same_v<T, double> ? 1e-12 : 3e-5), "policy_loss ", type, ": loss ", base.result.loss,
          " reference ", expected, " relative error ", loss_error, " (surrogate ", s, " aggregation ", a, " kl ", k,
          " use_kl ", options.use_kl_loss, ")");

    // ∂loss/∂logπ against central differences where both one-sided slopes agree (no kink within h).
    const double h = 1e-6;
    double fd_scale = 1e-3;
    std::vector<std::tuple<double, double, index_type>> pairs;
    const index_type total = d.rows * d.cols, stride = std::max<index_type>(1, total / 12);
    for (index_type j = in.integer<index_type>(0, stride - 1); j < total; j += stride) {
        auto probe = sv.x;
        probe[j] = sv.x[j] + h;
        const double up = reference_loss(sv, probe, options);
        probe[j] = sv.x[j] - h;
        const double down = reference_loss(sv, probe, options);
        const double forward = (up - expected) / h, backward = (expected - down) / h;
        if (std::abs(forward - backward) > 1e-4 * std::max({1e-3, std::abs(forward), std::abs(backward)})) continue;
        pairs.push_back({base.gradient[j], (up - down) / (2 * h), j});
        fd_scale = std::max(fd_scale, std::abs((up - down) / (2 * h)));
    }
    const double gradient_tolerance = std::is_same_v<T, double> ? 1e-6 : fuzz::tolerance<T>() * 8 + 1e-5;
    // The central difference itself carries the reference loss's rounding, ~ε·Σ|terms|/h.
    const double fd_noise = 4e-16 * scale / h;
    for (const auto& [kernel, fd, j] : pairs)
        check(std::abs(kernel - fd) < gradient_tolerance * fd_scale + fd_noise, "policy_loss ", type, ": gradient ",
              kernel, " finite difference ", fd, " at token ", j, " (log-prob ", sv.x[j], ", old ", sv.old[j],
              ", advantage ", sv.advantages[j], "; ", d.rows, "x", d.cols, "; surrogate ", s, " aggregation ", a,
              " kl ", k, " use_kl ", options.use_kl_loss, ")");

    // NaN / ±inf / huge under the mask: the same loss and gradient bits as ordinary values there.
    auto poisoned = d;
    bool any = false;
    for (std::size_t j = 0; j < d.mask.size(); ++j) {
        if (d.mask[j] != 0 || in.uniform(0, 1) < 0.5) continue;
        const double bad = fuzz::special_value(static_cast<fuzz::special>(in.integer<int>(1, 4)), in.flag());
        auto* field = in.pick({&poisoned.x, &poisoned.old, &poisoned.ref, &poisoned.entropies, &poisoned.advantages});
        if (field == &poisoned.advantages && d.per_sample) field = &poisoned.x;
        (*field)[j] = bad;
        any = true;
    }
    if (!any) return;
    stored_data<T> poisoned_data(poisoned, padding, unaligned);
    const auto result = run(poisoned_data, poisoned, options);
    check(same(result, base), "policy_loss ", type, ": values under the mask change the result: loss ",
          result.result.loss, " vs ", base.result.loss, " (surrogate ", s, " aggregation ", a, " kl ", k, " use_kl ",
          options.use_kl_loss, ")");
}

template <class T>
void check_aggregate(fuzz::source& in) {
    const auto d = read_data(in);
    auto options = read_options(in).aggregation;
    if (in.flag()) {
        options.mask_values = loss::mask_rule::weights;
    }
    auto mask_values = d.mask;
    if (options.mask_values == loss::mask_rule::weights)
        for (auto& m : mask_values)
            if (m != 0) m = in.pick({1.0, 0.5, 2.0});
    set_global_counts(options, mask_values, d.rows, d.cols);
    auto ell = d.x;
    for (std::size_t j = 0; j < ell.size(); ++j)
        if (mask_values[j] == 0 && in.flag())
            ell[j] = fuzz::special_value(static_cast<fuzz::special>(in.integer<int>(1, 4)), in.flag());
    fuzz::matrix<T> loss_matrix(d.rows, d.cols, 1, true), mask(d.rows, d.cols, 0, false),
        weights(d.rows, d.cols, 2, true);
    loss_matrix.set(ell);
    mask.set(mask_values);
    loss::aggregate_loss_options o(options);
    const auto result = loss::aggregate_loss(loss_matrix.view, mask.view, weights.view, o);
    o.threads = in.integer<int>(2, 4);
    const auto threaded = loss::aggregate_loss(loss_matrix.view, mask.view, {}, o);
    check(std::memcmp(&threaded.loss, &result.loss, sizeof(double)) == 0, "aggregate_loss: threads differ");
    const auto stored_ell = loss_matrix.values(), stored_mask = mask.values();
    std::vector<double> expected_weights;
    const double expected = reference::aggregate(stored_ell, stored_mask, {d.rows, d.cols}, options, &expected_weights);
    std::vector<double> absolute(stored_ell.size());
    double tokens = 0;
    for (std::size_t j = 0; j < absolute.size(); ++j) {
        absolute[j] = stored_mask[j] != 0 ? std::abs(stored_ell[j]) : 0.0;
        tokens += stored_mask[j];
    }
    const double scale = std::max(reference::aggregate(absolute, stored_mask, {d.rows, d.cols}, options), 1e-30);
    const char* type = fuzz::type_name<T>();
    check(std::abs(result.loss - expected) / scale < (std::is_same_v<T, double> ? 1e-12 : 2e-5), "aggregate_loss ",
          type, ": loss ", result.loss, " reference ", expected, " (mode ", int(options.mode), ")");
    check(result.token_count == tokens, "aggregate_loss ", type, ": token count ", result.token_count, " vs ", tokens);
    const auto w = weights.values();
    for (std::size_t j = 0; j < w.size(); ++j) {
        if (stored_mask[j] == 0) check(w[j] == 0, "aggregate_loss ", type, ": weight ", w[j], " under the mask");
    }
    const double error = fuzz::relative_error(w, expected_weights);
    check(error < fuzz::tolerance<T>() || (std::is_same_v<T, Eigen::half> && fuzz::max_abs(expected_weights) < 1e-3),
          "aggregate_loss ", type, ": weights relative error ", error);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::source in(data, size);
    const bool aggregate = in.integer<int>(0, 3) == 0;
    switch (in.integer<int>(0, 3)) {
        case 0:
            aggregate ? check_aggregate<float>(in) : check_policy_loss<float>(in);
            break;
        case 1:
            aggregate ? check_aggregate<double>(in) : check_policy_loss<double>(in);
            break;
        case 2:
            aggregate ? check_aggregate<Eigen::bfloat16>(in) : check_policy_loss<Eigen::bfloat16>(in);
            break;
        default:
            aggregate ? check_aggregate<Eigen::half>(in) : check_policy_loss<Eigen::half>(in);
            break;
    }
    return 0;
}
