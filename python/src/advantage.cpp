// normkit._advantage: the advantage normalizers of normkit::advantage over numpy arrays.
// The Python functions (normkit/advantage.py) allocate the outputs and build the options; these
// take every array explicitly, None where the C++ argument is {}. Rewards are float32 or float64
// and fix the call's storage type; outputs have that type (the C++ also takes an output of the
// other float type, which would double every instantiation here for a conversion numpy does).
#include "bind.hpp"

#include <limits>
#include <optional>

namespace normkit::python {
namespace {

namespace na = normkit::advantage;
using py::arg;

// Calls f(type_tag<T>{}) for the storage type of the array that fixes it, float or double.
template <class F>
decltype(auto) floating(const py::handle& object, const char* function, const char* name, F&& f) {
    return dispatch_floating(storage_of(object, function, name, true), std::forward<F>(f));
}

// reward_inputs<T>: every optional input None or an array (valid and token_mask uint8, lengths int64).
template <class T>
na::reward_inputs<T> inputs_of(const char* f, const py::object& rewards, const py::object& grouping,
                               const py::object& valid, const py::object& lengths, const py::object& token_mask,
                               const py::object& baseline, const std::optional<moments>& statistics,
                               const py::object& sequence_kl) {
    na::reward_inputs<T> in;
    in.rewards = vector_of<const T>(rewards, f, "rewards");
    in.grouping = groups_of(grouping, f);
    in.valid = optional_vector_of<const std::uint8_t>(valid, f, "valid");
    in.lengths = optional_vector_of<const std::int64_t>(lengths, f, "lengths");
    in.token_mask = optional_matrix_of<const std::uint8_t>(token_mask, f, "token_mask");
    in.baseline = optional_vector_of<const T>(baseline, f, "baseline");
    in.batch_statistics = statistics;
    in.sequence_kl = optional_vector_of<const T>(sequence_kl, f, "sequence_kl");
    return in;
}

void bind_enums(py::module_& m) {
    py::enum_<na::center_mode>(m, "center_mode", "c_i of group_normalize")
        .value("group_mean", na::center_mode::group_mean)
        .value("batch_mean", na::center_mode::batch_mean)
        .value("leave_one_out", na::center_mode::leave_one_out)
        .value("length_weighted", na::center_mode::length_weighted)
        .value("window_median", na::center_mode::window_median)
        .value("window_mean", na::center_mode::window_mean)
        .value("baseline", na::center_mode::baseline)
        .value("none", na::center_mode::none);
    py::enum_<na::scale_mode>(m, "scale_mode", "the variance v that D(v) divides by")
        .value("group_std", na::scale_mode::group_std)
        .value("batch_std", na::scale_mode::batch_std)
        .value("window_spread", na::scale_mode::window_spread)
        .value("none", na::scale_mode::none);
    py::enum_<na::eps_mode>(m, "eps_mode", "D(v): σ + ε, √(v + ε), √max(v, ε), or σ where σ ≥ ε and σ > 0, else 1")
        .value("add_to_std", na::eps_mode::add_to_std)
        .value("inside_sqrt", na::eps_mode::inside_sqrt)
        .value("clamp_variance", na::eps_mode::clamp_variance)
        .value("std_floor_skip", na::eps_mode::std_floor_skip);
    py::enum_<na::singleton_policy>(m, "singleton_policy", "a group of one valid sample")
        .value("keep_raw", na::singleton_policy::keep_raw)
        .value("zero", na::singleton_policy::zero)
        .value("exclude", na::singleton_policy::exclude)
        .value("error", na::singleton_policy::error);
    py::enum_<na::nan_policy>(m, "nan_policy", "a NaN reward: excluded (A = 0) or an error")
        .value("exclude", na::nan_policy::exclude)
        .value("error", na::nan_policy::error);
    py::enum_<na::whiten_mode>(m, "whiten_mode", "batch whitening: none, each sample weighs 1, or its token count")
        .value("none", na::whiten_mode::none)
        .value("sample_weighted", na::whiten_mode::sample_weighted)
        .value("token_weighted", na::whiten_mode::token_weighted);
    py::enum_<na::dapo_filter_rule>(m, "dapo_filter_rule", "spread: min < mean < max; mean_in_range: low < mean < high")
        .value("spread", na::dapo_filter_rule::spread)
        .value("mean_in_range", na::dapo_filter_rule::mean_in_range);
    py::enum_<na::gdpo_flavour>(m, "gdpo_flavour", "trl: per-sample whitening; verl: per-token whitening")
        .value("trl", na::gdpo_flavour::trl)
        .value("verl", na::gdpo_flavour::verl);
    bind_return_mask_rule(m);
}

void bind_options(py::module_& m) {
    options_class<na::whiten_options>(m, "whiten_options", "the batch whitening after the group step")
        .def_readwrite("mode", &na::whiten_options::mode, "none (default), sample_weighted or token_weighted")
        .def_readwrite("ddof", &na::whiten_options::ddof, "0 or 1 (default 1; verl masked_whiten: unbiased)")
        .def_readwrite("eps", &na::whiten_options::eps, "ε of D(v) (default 1e-8); > 0")
        .def_readwrite("placement", &na::whiten_options::placement,
                       "D(v) (default inside_sqrt; verl masked_whiten: rsqrt(var + 1e-8))");
    using gn = na::group_normalize_options;
    options_class<gn>(m, "group_normalize_options", "A_i = clip((r_i − c_i)/D(v)), then optionally whitened")
        .def_readwrite("center", &gn::center,
                       "c_i: group_mean (default), batch_mean, leave_one_out, length_weighted, window_median, "
                       "window_mean, baseline, none")
        .def_readwrite("scale", &gn::scale, "v: group_std (default), batch_std, window_spread, none")
        .def_readwrite("ddof", &gn::ddof, "the variance's denominator n − ddof (default 1: torch.std is unbiased)")
        .def_readwrite("eps", &gn::eps, "ε of D(v) (default 1e-6); > 0 whenever something is scaled")
        .def_readwrite("placement", &gn::placement,
                       "D(v): add_to_std σ + ε (default), inside_sqrt, clamp_variance, std_floor_skip")
        .def_readwrite("singleton", &gn::singleton,
                       "a group of one: keep_raw (default; verl), zero, exclude (also leaves the whitening), error")
        .def_readwrite("nan", &gn::nan, "a NaN reward: exclude (default; A = 0, TRL) or error")
        .def_readwrite("window_fraction", &gn::window_fraction, "GAPO's find_target_fraction τ ∈ (0, 1] (default 0.5)")
        .def_readwrite("whiten", &gn::whiten, "the batch whitening after the group step (default mode none)")
        .def_readwrite("clip_min", &gn::clip_min, "the advantages clipped before whitening (default -inf)")
        .def_readwrite("clip_max", &gn::clip_max, "(default inf; OpenRLHF ±10)")
        .def_readwrite("exclude_empty_responses", &gn::exclude_empty_responses,
                       "rows with no token leave the statistics (default True)")
        .def_readwrite("reward_clip_min", &gn::reward_clip_min, "on the raw rewards (TRL RLOO) (default -inf)")
        .def_readwrite("reward_clip_max", &gn::reward_clip_max, "(default inf)")
        .def_readwrite("kl_coefficient", &gn::kl_coefficient,
                       "β of sequence_kl, subtracted from the clipped reward (TRL RLOO) (default 0)");
    options_class<na::grpo_options>(m, "grpo_options", "grpo")
        .def_readwrite("scale_by_std", &na::grpo_options::scale_by_std,
                       "verl norm_adv_by_std_in_grpo (default True); False gives Dr. GRPO")
        .def_readwrite("eps", &na::grpo_options::eps, "added to σ (default 1e-6)")
        .def_readwrite("ddof", &na::grpo_options::ddof, "σ's denominator n − ddof (default 1)")
        .def_readwrite("singleton", &na::grpo_options::singleton,
                       "verl: a group of one keeps its raw reward (default keep_raw)");
    options_class<na::dr_grpo_options>(m, "dr_grpo_options", "dr_grpo")
        .def_readwrite("singleton", &na::dr_grpo_options::singleton,
                       "verl: a group of one keeps its raw reward (default keep_raw)");
    options_class<na::rloo_options>(m, "rloo_options", "rloo")
        .def_readwrite("singleton", &na::rloo_options::singleton,
                       "default keep_raw (verl loop); zero = verl rloo_vectorized / TRL");
    options_class<na::opo_options>(m, "opo_options", "opo: the threads (the method has no other setting)");
    options_class<na::gpg_options>(m, "gpg_options", "gpg: the threads (the method has no other setting)");
    options_class<na::gapo_options>(m, "gapo_options", "gapo")
        .def_readwrite("target_fraction", &na::gapo_options::target_fraction,
                       "τ: the window covers ⌈n·τ⌉ sorted rewards (default 0.5)")
        .def_readwrite("median", &na::gapo_options::median, "False: GAPO's find_method = mean (default True)")
        .def_readwrite("scale_by_std", &na::gapo_options::scale_by_std,
                       "False: no division by the window spread (default True)")
        .def_readwrite("eps", &na::gapo_options::eps, "added to the spread (default 1e-6)");
    options_class<na::pass_at_k_options>(m, "pass_at_k_options", "pass_at_k")
        .def_readwrite("scale_by_std", &na::pass_at_k_options::scale_by_std,
                       "verl reads norm_adv_by_std_in_grpo here (default True)")
        .def_readwrite("eps", &na::pass_at_k_options::eps, "added to σ (default 1e-6)");
    options_class<na::dapo_filter_options>(m, "dapo_filter_options", "dapo_filter")
        .def_readwrite("rule", &na::dapo_filter_options::rule, "default spread: the group's own min < mean < max")
        .def_readwrite("low", &na::dapo_filter_options::low, "mean_in_range: low < mean < high (default 0)")
        .def_readwrite("high", &na::dapo_filter_options::high, "(default 1, OpenRLHF's)");
    options_class<na::w_reinforce_options>(m, "w_reinforce_options", "w_reinforce")
        .def_readwrite("positive_weight", &na::w_reinforce_options::positive_weight,
                       "λ ≥ 0: W-REINFORCE's weight of positive samples (default 0.1; 1: REINFORCE, 0: NSR only)");
    options_class<na::dna_train_options>(m, "dna_train_options", "dna_train")
        .def_readwrite("group_size", &na::dna_train_options::group_size,
                       "G > 0 (required; default 0): the size of each real and each counterfactual group");
    options_class<na::masked_whiten_options>(m, "masked_whiten_options", "masked_whiten")
        .def_readwrite("ddof", &na::masked_whiten_options::ddof, "verl masked_var: unbiased (default 1)")
        .def_readwrite("eps", &na::masked_whiten_options::eps, "> 0 (default 1e-8)")
        .def_readwrite("placement", &na::masked_whiten_options::placement,
                       "default inside_sqrt (verl: rsqrt(v + 1e-8)); OpenRLHF: clamp_variance")
        .def_readwrite("shift_mean", &na::masked_whiten_options::shift_mean,
                       "False: the mean is added back (verl shift_mean=False) (default True)")
        .def_readwrite("scale", &na::masked_whiten_options::scale,
                       "False: only the mean is taken away (OpenRLHF no_std_norm) (default True)");
    options_class<na::reinforce_pp_options>(m, "reinforce_pp_options", "reinforce_pp")
        .def_readwrite("gamma", &na::reinforce_pp_options::gamma, "γ ∈ [0, 1] of the returns (default 1.0)")
        .def_readwrite("mask_rule", &na::reinforce_pp_options::mask_rule,
                       "carry (default; verl-new) or reset (verl-old)")
        .def_readwrite("whiten", &na::reinforce_pp_options::whiten,
                       "default {token_weighted, 1, 1e-8, inside_sqrt}: verl's masked_whiten of the returns");
    options_class<na::reinforce_pp_baseline_options>(m, "reinforce_pp_baseline_options", "reinforce_pp_baseline")
        .def_readwrite("singleton", &na::reinforce_pp_baseline_options::singleton,
                       "verl: μ = 0 for a group of one (default keep_raw)")
        .def_readwrite("whiten", &na::reinforce_pp_baseline_options::whiten,
                       "default {token_weighted, 1, 1e-8, inside_sqrt}")
        .def_readwrite("exclude_empty_responses", &na::reinforce_pp_baseline_options::exclude_empty_responses,
                       "rows with no token leave the statistics (default True)");
    options_class<na::remax_options>(m, "remax_options", "remax: the threads (the method has no other setting)");
    options_class<na::gdpo_options>(m, "gdpo_options", "gdpo")
        .def_readwrite("flavour", &na::gdpo_options::flavour, "trl (default) or verl")
        .def_readwrite("weights", &na::gdpo_options::weights,
                       "w_k, one per reward column; empty: all 1 (default); assign a list, not in place");
    options_class<na::sa_mrpo_options>(m, "sa_mrpo_options", "sa_mrpo")
        .def_readwrite("gamma", &na::sa_mrpo_options::gamma, "γ = 0 is GDPO (default 0.5)")
        .def_readwrite("weights", &na::sa_mrpo_options::weights, "w_k; empty: all 1 (default)")
        .def_readwrite("lower", &na::sa_mrpo_options::lower, "r_min,k (required, K entries)")
        .def_readwrite("upper", &na::sa_mrpo_options::upper, "r_max,k > r_min,k (required, K entries)");
    options_class<na::bnpo_options>(m, "bnpo_options", "bnpo, bnpo_decomposed")
        .def_readwrite("alpha", &na::bnpo_options::alpha, "fixed Beta α instead of the batch fit (default None)")
        .def_readwrite("beta", &na::bnpo_options::beta, "fixed Beta β instead of the batch fit (default None)")
        .def_readwrite("clamp", &na::bnpo_options::clamp, "upper bound of 1/f_Beta (default 1e6)");
    options_class<na::gepo_options>(m, "gepo_options", "gepo")
        .def_readwrite("alpha_low", &na::gepo_options::alpha_low,
                       "scale of positive advantages in low-entropy groups (default 0.5)")
        .def_readwrite("alpha_high", &na::gepo_options::alpha_high,
                       "scale of negative advantages in high-entropy groups (default 0.2)")
        .def_readwrite("beta_low", &na::gepo_options::beta_low, "Ĥ_low = μ_H − β_low·σ_H (default 0.2)")
        .def_readwrite("beta_high", &na::gepo_options::beta_high, "Ĥ_high = μ_H + β_high·σ_H (default 0.3)")
        .def_readwrite("gamma", &na::gepo_options::gamma, "EMA rate (default 0.01)");
    options_class<na::scrl_options>(m, "scrl_options", "scrl")
        .def_readwrite("eps", &na::scrl_options::eps, "0 (default): divide by the std itself; > 0: by std + eps");
    options_class<na::spo_options>(m, "spo_options", "spo_tracker")
        .def_readwrite("rho_min", &na::spo_options::rho_min, "ρ_min (default 0.875)")
        .def_readwrite("rho_max", &na::spo_options::rho_max, "ρ_max (default 0.96)")
        .def_readwrite("half_life_kl", &na::spo_options::half_life_kl, "D_half (default 0.06)")
        .def_readwrite("constant_rho", &na::spo_options::constant_rho, "ρ = rho_min always (default False)")
        .def_readwrite("eps", &na::spo_options::eps, "added to the batch std (default 1e-8)")
        .def_readwrite("priority_floor", &na::spo_options::priority_floor,
                       "added to √(p̂(1 − p̂)) in sampling_weights (default 0.05)");
}

void bind_values(py::module_& m) {
    bind_moments(m);
    m.def("merge", &normkit::merge, arg("a"), arg("b"), "Chan's merge: the moments of the union");
    py::class_<na::beta_parameters>(m, "beta_parameters", "the Beta(α, β) BNPO used")
        .def(py::init<>())
        .def_readwrite("alpha", &na::beta_parameters::alpha)
        .def_readwrite("beta", &na::beta_parameters::beta)
        .def("__repr__", [](const na::beta_parameters& b) {
            return py::str("beta_parameters(alpha={!r}, beta={!r})").format(b.alpha, b.beta);
        });
    py::class_<na::gepo_state>(m, "gepo_state", "GEPO's EMA entropy thresholds, read and written by every call")
        .def(py::init<>())
        .def(py::init<const na::gepo_state&>(), arg("other"))
        .def_readwrite("initialized", &na::gepo_state::initialized, "False: the next call seeds the thresholds")
        .def_readwrite("low", &na::gepo_state::low, "H_low")
        .def_readwrite("high", &na::gepo_state::high, "H_high")
        .def("__copy__", [](const na::gepo_state& s) { return s; })
        .def("__repr__", [](const na::gepo_state& s) {
            return py::str("gepo_state(initialized={!r}, low={!r}, high={!r})").format(s.initialized, s.low, s.high);
        });
}

void bind_presets(py::module_& m) {
    namespace pr = na::presets;
    py::module_ p = m.def_submodule("presets", "the options that reproduce verl's, TRL's and OpenRLHF's arithmetic");
    py::enum_<pr::trl_scale_rewards>(p, "trl_scale_rewards", "TRL GRPOConfig.scale_rewards")
        .value("group", pr::trl_scale_rewards::group)
        .value("batch", pr::trl_scale_rewards::batch)
        .value("none", pr::trl_scale_rewards::none);
    py::enum_<pr::openrlhf_estimator>(p, "openrlhf_estimator", "OpenRLHF --advantage_estimator")
        .value("group_norm", pr::openrlhf_estimator::group_norm)
        .value("dr_grpo", pr::openrlhf_estimator::dr_grpo)
        .value("rloo", pr::openrlhf_estimator::rloo)
        .value("reinforce_baseline", pr::openrlhf_estimator::reinforce_baseline);
    constexpr double inf = std::numeric_limits<double>::infinity();
    p.def("verl_grpo", &pr::verl_grpo, arg("norm_adv_by_std_in_grpo") = true);
    p.def("verl_grpo_vectorized", &pr::verl_grpo_vectorized);
    p.def("verl_rloo", &pr::verl_rloo, arg("vectorized") = false);
    p.def("verl_rloo_vectorized", &pr::verl_rloo_vectorized);
    p.def("verl_reinforce_pp_baseline", &pr::verl_reinforce_pp_baseline);
    p.def("trl", &pr::trl, arg("scale_rewards") = pr::trl_scale_rewards::group);
    p.def("trl_async", &pr::trl_async);
    p.def("openrlhf", &pr::openrlhf, arg("estimator") = pr::openrlhf_estimator::group_norm);
    p.def("trl_rloo", &pr::trl_rloo, arg("normalize_advantages") = false, arg("beta") = 0.05,
          arg("reward_clip_min") = -inf, arg("reward_clip_max") = inf);
    p.def("openrlhf_dynamic_filtering", &pr::openrlhf_dynamic_filtering, arg("low") = 0.0, arg("high") = 1.0);
    p.def("openrlhf_whiten", &pr::openrlhf_whiten, arg("no_std_norm") = false);
}

// The estimators f(rewards, grouping, output, options) [→ result].
template <class Options, class Kernel>
void def_grouped(py::module_& m, const char* name, Kernel kernel) {
    m.def(name, [name, kernel](py::object rewards, py::object grouping, py::object output, const Options& o) {
        return floating(rewards, name, "rewards", [&](auto t) {
            using T = typename decltype(t)::type;
            auto r = vector_of<const T>(rewards, name, "rewards");
            auto g = groups_of(grouping, name);
            auto out = vector_of<T>(output, name, "output");
            return without_gil([&] { return kernel(r, g, out, o); });
        });
    });
}

void bind_group_normalize(py::module_& m) {
    // The full form; the short form is the full form with every optional input None.
    m.def("group_normalize", [](py::object rewards, py::object grouping, py::object valid, py::object lengths,
                                py::object token_mask, py::object baseline, std::optional<moments> statistics,
                                py::object sequence_kl, py::object output, const na::group_normalize_options& o) {
        constexpr const char* f = "group_normalize";
        floating(rewards, f, "rewards", [&](auto t) {
            using T = typename decltype(t)::type;
            auto in = inputs_of<T>(f, rewards, grouping, valid, lengths, token_mask, baseline, statistics, sequence_kl);
            auto out = vector_of<T>(output, f, "output");
            without_gil([&] { na::group_normalize(in, out, o); });
        });
    });
    m.def("reinforce_pp_baseline", [](py::object rewards, py::object grouping, py::object valid, py::object lengths,
                                      py::object token_mask, py::object baseline, std::optional<moments> statistics,
                                      py::object sequence_kl, py::object output,
                                      const na::reinforce_pp_baseline_options& o) {
        constexpr const char* f = "reinforce_pp_baseline";
        floating(rewards, f, "rewards", [&](auto t) {
            using T = typename decltype(t)::type;
            auto in = inputs_of<T>(f, rewards, grouping, valid, lengths, token_mask, baseline, statistics, sequence_kl);
            auto out = vector_of<T>(output, f, "output");
            without_gil([&] { na::reinforce_pp_baseline(in, out, o); });
        });
    });
    m.def("batch_moments", [](py::object values, py::object valid, py::object weights) {
        constexpr const char* f = "batch_moments";
        return floating(values, f, "values", [&](auto t) {
            using T = typename decltype(t)::type;
            auto v = vector_of<const T>(values, f, "values");
            auto m_ = optional_vector_of<const std::uint8_t>(valid, f, "valid");
            auto w = optional_vector_of<const double>(weights, f, "weights");
            return without_gil([&] { return na::batch_moments(v, m_, w); });
        });
    });
    m.def("grpo_normalization", &na::grpo_normalization, arg("options"));
}

void bind_estimators(py::module_& m) {
    def_grouped<na::grpo_options>(m, "grpo",
                                  [](auto r, const groups& g, auto out, const auto& o) { na::grpo(r, g, out, o); });
    def_grouped<na::dr_grpo_options>(
        m, "dr_grpo", [](auto r, const groups& g, auto out, const auto& o) { na::dr_grpo(r, g, out, o); });
    def_grouped<na::rloo_options>(m, "rloo",
                                  [](auto r, const groups& g, auto out, const auto& o) { na::rloo(r, g, out, o); });
    def_grouped<na::gpg_options>(m, "gpg",
                                 [](auto r, const groups& g, auto out, const auto& o) { na::gpg(r, g, out, o); });
    def_grouped<na::gapo_options>(m, "gapo",
                                  [](auto r, const groups& g, auto out, const auto& o) { na::gapo(r, g, out, o); });
    def_grouped<na::pass_at_k_options>(
        m, "pass_at_k", [](auto r, const groups& g, auto out, const auto& o) { na::pass_at_k(r, g, out, o); });
    def_grouped<na::bnpo_options>(
        m, "bnpo", [](auto r, const groups& g, auto out, const auto& o) { return na::bnpo(r, g, out, o); });
    m.def("opo",
          [](py::object rewards, py::object grouping, py::object lengths, py::object output, const na::opo_options& o) {
              constexpr const char* f = "opo";
              floating(rewards, f, "rewards", [&](auto t) {
                  using T = typename decltype(t)::type;
                  auto r = vector_of<const T>(rewards, f, "rewards");
                  auto g = groups_of(grouping, f);
                  auto l = vector_of<const std::int64_t>(lengths, f, "lengths");
                  auto out = vector_of<T>(output, f, "output");
                  without_gil([&] { na::opo(r, g, l, out, o); });
              });
          });
    m.def("dapo_filter",
          [](py::object rewards, py::object grouping, py::object keep, const na::dapo_filter_options& o) {
              constexpr const char* f = "dapo_filter";
              return floating(rewards, f, "rewards", [&](auto t) {
                  using T = typename decltype(t)::type;
                  auto r = vector_of<const T>(rewards, f, "rewards");
                  auto g = groups_of(grouping, f);
                  auto k = vector_of<std::uint8_t>(keep, f, "keep");
                  return without_gil([&] { return na::dapo_filter(r, g, k, o); });
              });
          });
    m.def("w_reinforce", [](py::object rewards, py::object output, const na::w_reinforce_options& o) {
        constexpr const char* f = "w_reinforce";
        floating(rewards, f, "rewards", [&](auto t) {
            using T = typename decltype(t)::type;
            auto r = vector_of<const T>(rewards, f, "rewards");
            auto out = vector_of<T>(output, f, "output");
            without_gil([&] { na::w_reinforce(r, out, o); });
        });
    });
    m.def("dna_train", [](py::object advantages, py::object output, const na::dna_train_options& o) {
        constexpr const char* f = "dna_train";
        floating(advantages, f, "advantages", [&](auto t) {
            using T = typename decltype(t)::type;
            auto a = vector_of<const T>(advantages, f, "advantages");
            auto out = vector_of<T>(output, f, "output");
            without_gil([&] { na::dna_train(a, out, o); });
        });
    });
    m.def("scrl", [](py::object rewards, py::object grouping, py::object output, const na::scrl_options& o) {
        constexpr const char* f = "scrl";
        floating(rewards, f, "subproblem_rewards", [&](auto t) {
            using T = typename decltype(t)::type;
            auto r = matrix_of<const T>(rewards, f, "subproblem_rewards");
            auto g = groups_of(grouping, f);
            auto out = matrix_of<T>(output, f, "output");
            without_gil([&] { na::scrl(r, g, out, o); });
        });
    });
}

void bind_multi_reward(py::module_& m) {
    m.def("gdpo", [](py::object columns, py::object grouping, py::object lengths, py::object token_mask,
                     py::object output, const na::gdpo_options& o) {
        constexpr const char* f = "gdpo";
        floating(columns, f, "reward_columns", [&](auto t) {
            using T = typename decltype(t)::type;
            auto c = matrix_of<const T>(columns, f, "reward_columns");
            auto g = groups_of(grouping, f);
            auto l = optional_vector_of<const std::int64_t>(lengths, f, "lengths");
            auto tm = optional_matrix_of<const std::uint8_t>(token_mask, f, "token_mask");
            auto out = vector_of<T>(output, f, "output");
            without_gil([&] { na::gdpo(c, g, l, tm, out, o); });
        });
    });
    m.def("sa_mrpo", [](py::object columns, py::object grouping, py::object output, py::object effective_weights,
                        const na::sa_mrpo_options& o) {
        constexpr const char* f = "sa_mrpo";
        floating(columns, f, "reward_columns", [&](auto t) {
            using T = typename decltype(t)::type;
            auto c = matrix_of<const T>(columns, f, "reward_columns");
            auto g = groups_of(grouping, f);
            auto out = vector_of<T>(output, f, "output");
            auto w = optional_vector_of<double>(effective_weights, f, "effective_weights");
            without_gil([&] { na::sa_mrpo(c, g, out, w, o); });
        });
    });
    m.def("bnpo_decomposed", [](py::object columns, py::object grouping, py::object output, const na::bnpo_options& o) {
        constexpr const char* f = "bnpo_decomposed";
        return floating(columns, f, "reward_columns", [&](auto t) {
            using T = typename decltype(t)::type;
            auto c = matrix_of<const T>(columns, f, "reward_columns");
            auto g = groups_of(grouping, f);
            auto out = vector_of<T>(output, f, "output");
            return without_gil([&] { return na::bnpo_decomposed(c, g, out, o); });
        });
    });
    m.def("gepo", [](py::object advantages, py::object grouping, py::object log_probs, py::object mask,
                     na::gepo_state& state, py::object output, py::object group_entropy, const na::gepo_options& o) {
        constexpr const char* f = "gepo";
        // The advantages and the log-probs each have their own storage type.
        floating(advantages, f, "advantages", [&](auto a) {
            using A = typename decltype(a)::type;
            floating(log_probs, f, "log_probs", [&](auto l) {
                using L = typename decltype(l)::type;
                auto av = vector_of<const A>(advantages, f, "advantages");
                auto g = groups_of(grouping, f);
                auto lp = matrix_of<const L>(log_probs, f, "log_probs");
                auto mv = matrix_of<const L>(mask, f, "mask");
                auto out = vector_of<A>(output, f, "output");
                auto h = optional_vector_of<double>(group_entropy, f, "group_entropy");
                without_gil([&] { na::gepo(av, g, lp, mv, state, out, h, o); });
            });
        });
    });
}

void bind_tokens(py::module_& m) {
    m.def("masked_whiten",
          [](py::object values, py::object mask, py::object output, const na::masked_whiten_options& o) {
              constexpr const char* f = "masked_whiten";
              return floating(values, f, "values", [&](auto t) {
                  using T = typename decltype(t)::type;
                  auto x = matrix_of<const T>(values, f, "values");
                  auto mv = matrix_of<const T>(mask, f, "mask");
                  auto out = matrix_of<T>(output, f, "output");
                  return without_gil([&] { return na::masked_whiten(x, mv, out, o); });
              });
          });
    m.def("reinforce_pp", [](py::object rewards, py::object mask, py::object advantages, py::object returns,
                             const na::reinforce_pp_options& o) {
        constexpr const char* f = "reinforce_pp";
        floating(rewards, f, "token_rewards", [&](auto t) {
            using T = typename decltype(t)::type;
            auto r = matrix_of<const T>(rewards, f, "token_rewards");
            auto mv = matrix_of<const T>(mask, f, "mask");
            auto a = matrix_of<T>(advantages, f, "advantages");
            auto g = optional_matrix_of<T>(returns, f, "returns");
            without_gil([&] { na::reinforce_pp(r, mv, a, g, o); });
        });
    });
    m.def("remax", [](py::object rewards, py::object mask, py::object baselines, py::object advantages,
                      py::object returns, const na::remax_options& o) {
        constexpr const char* f = "remax";
        floating(rewards, f, "token_rewards", [&](auto t) {
            using T = typename decltype(t)::type;
            auto r = matrix_of<const T>(rewards, f, "token_rewards");
            auto mv = matrix_of<const T>(mask, f, "mask");
            auto b = vector_of<const T>(baselines, f, "baselines");
            auto a = matrix_of<T>(advantages, f, "advantages");
            auto g = optional_matrix_of<T>(returns, f, "returns");
            without_gil([&] { na::remax(r, mv, b, a, g, o); });
        });
    });
}

void bind_spo(py::module_& m) {
    using tracker = na::spo_tracker;
    py::class_<tracker> c(m, "spo_tracker", "SPO's persistent per-prompt Beta tracker (a value type: copy it freely)");
    py::class_<tracker::beta_state>(c, "beta_state", "Beta(α, β) of one prompt")
        .def(py::init<>())
        .def_readwrite("alpha", &tracker::beta_state::alpha)
        .def_readwrite("beta", &tracker::beta_state::beta)
        .def("__repr__", [](const tracker::beta_state& s) {
            return py::str("beta_state(alpha={!r}, beta={!r})").format(s.alpha, s.beta);
        });
    c.def(py::init<const na::spo_options&>(), arg("options") = na::spo_options{})
        .def(py::init<const tracker&>(), arg("other"))
        .def("__copy__", [](const tracker& s) { return s; })
        .def(
            "initialize",
            [](tracker& s, std::int64_t prompt, py::object scores) {
                constexpr const char* f = "spo_tracker.initialize";
                floating(scores, f, "offline_scores", [&](auto t) {
                    using T = typename decltype(t)::type;
                    s.initialize(prompt, vector_of<const T>(scores, f, "offline_scores"));
                });
            },
            arg("prompt"), arg("offline_scores"), "seeds a prompt from n₀ offline scores in [0, 1]")
        .def("value", &tracker::value, arg("prompt"), "p̂ = α/(α + β)")
        .def("state", &tracker::state, arg("prompt"))
        .def("forgetting", &tracker::forgetting, arg("kl_divergence"), "ρ = clamp(2^(−D/D_half), ρ_min, ρ_max)")
        .def("update", &tracker::update, arg("prompt"), arg("reward"), arg("kl_divergence"),
             "after the actor update: α ← ρα + r, β ← ρβ + (1 − r)")
        .def(
            "advantages",
            [](const tracker& s, py::object prompts, py::object rewards, py::object output) {
                constexpr const char* f = "spo_tracker.advantages";
                floating(rewards, f, "rewards", [&](auto t) {
                    using T = typename decltype(t)::type;
                    auto p = vector_of<const std::int64_t>(prompts, f, "prompt_ids");
                    auto r = vector_of<const T>(rewards, f, "rewards");
                    auto out = vector_of<T>(output, f, "output");
                    without_gil([&] { s.advantages(p, r, out); });
                });
            },
            arg("prompt_ids"), arg("rewards"), arg("output"), "A_i = r_i − p̂(x_i), then batch-normalized")
        .def(
            "sampling_weights",
            [](const tracker& s, py::object prompts, py::object output) {
                constexpr const char* f = "spo_tracker.sampling_weights";
                floating(output, f, "output", [&](auto t) {
                    using T = typename decltype(t)::type;
                    auto p = vector_of<const std::int64_t>(prompts, f, "prompt_ids");
                    auto out = vector_of<T>(output, f, "output");
                    without_gil([&] { s.sampling_weights(p, out); });
                });
            },
            arg("prompt_ids"), arg("output"), "√(p̂(1 − p̂)) + priority_floor");
}

}  // namespace
}  // namespace normkit::python

PYBIND11_MODULE(_advantage, m) {
    using namespace normkit::python;
    m.doc() = "normkit.advantage's normalizers over numpy arrays (use normkit.advantage)";
    bind_enums(m);
    bind_options(m);
    bind_values(m);
    bind_presets(m);
    bind_group_normalize(m);
    bind_estimators(m);
    bind_multi_reward(m);
    bind_tokens(m);
    bind_spo(m);
}
