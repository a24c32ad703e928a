// normkit._loss: the losses of normkit::loss over numpy arrays.
// The Python functions (normkit/loss.py) allocate the outputs and build the options; these take
// every array explicitly, None where the C++ argument is {}. The policy functions take the fields
// of policy_inputs<T> as arrays, in its field order, and build it here (make_policy_inputs' role).
// Masks, selections and keeps have the data's storage type, as in C++.
#include "bind.hpp"

namespace normkit::python {
namespace {

namespace nl = normkit::loss;
namespace np = normkit::loss::presets;
using py::arg;

// policy_inputs<T> from its eight arrays; log_probs fixes T (the caller dispatched on it).
template <class T>
nl::policy_inputs<T> inputs_of(const char* f, const py::object& x, const py::object& old, const py::object& a,
                               const py::object& mask, const py::object& ref, const py::object& h,
                               const py::object& is_weights, const py::object& selection) {
    nl::policy_inputs<T> p;
    p.log_probs = matrix_of<const T>(x, f, "log_probs");
    p.old_log_probs = optional_matrix_of<const T>(old, f, "old_log_probs");
    p.advantages = matrix_of<const T>(a, f, "advantages");
    p.mask = optional_matrix_of<const T>(mask, f, "mask");
    p.ref_log_probs = optional_matrix_of<const T>(ref, f, "ref_log_probs");
    p.entropies = optional_matrix_of<const T>(h, f, "entropies");
    p.is_weights = optional_matrix_of<const T>(is_weights, f, "is_weights");
    p.selection = optional_matrix_of<const T>(selection, f, "selection");
    return p;
}

void bind_enums(py::module_& m) {
    py::enum_<nl::aggregation_mode>(m, "aggregation_mode", "loss = Σ_i a_i Σ_t m ℓ: the a_i of each mode")
        .value("token_mean", nl::aggregation_mode::token_mean)
        .value("token_sum", nl::aggregation_mode::token_sum)
        .value("seq_mean_token_sum", nl::aggregation_mode::seq_mean_token_sum)
        .value("seq_mean_token_mean", nl::aggregation_mode::seq_mean_token_mean)
        .value("seq_mean_token_sum_norm", nl::aggregation_mode::seq_mean_token_sum_norm)
        .value("delta_l", nl::aggregation_mode::delta_l);
    py::enum_<nl::sum_norm_form>(m, "sum_norm_form", "seq_mean_token_sum_norm: Σ/(B·L) (dr_grpo) or Σ/L (verl_old)")
        .value("dr_grpo", nl::sum_norm_form::dr_grpo)
        .value("verl_old", nl::sum_norm_form::verl_old);
    py::enum_<nl::mask_rule>(m, "mask_rule", "a mask value: 0 or 1 (binary), or any finite weight ≥ 0 (weights)")
        .value("binary", nl::mask_rule::binary)
        .value("weights", nl::mask_rule::weights);
    // The C++ aliases (gpg, kl, mse, low_var_kl) are members too; a value's name is the first one.
    py::enum_<nl::surrogate_mode>(m, "surrogate_mode", "the per-token surrogate (formulas: loss/surrogate.hpp)")
        .value("ppo_clip", nl::surrogate_mode::ppo_clip)
        .value("cispo_clip", nl::surrogate_mode::cispo_clip)
        .value("cispo_cap", nl::surrogate_mode::cispo_cap)
        .value("gspo_token", nl::surrogate_mode::gspo_token)
        .value("gspo_sequence", nl::surrogate_mode::gspo_sequence)
        .value("sapo", nl::surrogate_mode::sapo)
        .value("reinforce", nl::surrogate_mode::reinforce)
        .value("gmpo", nl::surrogate_mode::gmpo)
        .value("gft", nl::surrogate_mode::gft)
        .value("sapo_sequence", nl::surrogate_mode::sapo_sequence)
        .value("dppo_tv", nl::surrogate_mode::dppo_tv)
        .value("dppo_kl", nl::surrogate_mode::dppo_kl)
        .value("vespo", nl::surrogate_mode::vespo)
        .value("kl_cov", nl::surrogate_mode::kl_cov)
        .value("clip_cov", nl::surrogate_mode::clip_cov)
        .value("gpg", nl::surrogate_mode::gpg);
    py::enum_<nl::kl_estimator>(m, "kl_estimator", "k1 = d, abs = |d|, k2 = ½d², k3 = e^(−d) + d − 1 (d = x − x_ref)")
        .value("k1", nl::kl_estimator::k1)
        .value("abs", nl::kl_estimator::abs)
        .value("k2", nl::kl_estimator::k2)
        .value("k3", nl::kl_estimator::k3)
        .value("kl", nl::kl_estimator::kl)
        .value("mse", nl::kl_estimator::mse)
        .value("low_var_kl", nl::kl_estimator::low_var_kl);
    py::enum_<nl::correction_level>(m, "correction_level", "the IS ratio per token, per sequence, or OpenRLHF's filter")
        .value("token", nl::correction_level::token)
        .value("sequence", nl::correction_level::sequence)
        .value("sequence_mean_filter", nl::correction_level::sequence_mean_filter);
    py::enum_<nl::correction_bound>(m, "correction_bound", "truncate (TIS) or mask (IcePop)")
        .value("truncate", nl::correction_bound::truncate)
        .value("mask", nl::correction_bound::mask);
    py::enum_<nl::rejection_level>(m, "rejection_level", "verl rollout_rs: token, seq_sum, seq_mean, seq_max")
        .value("token", nl::rejection_level::token)
        .value("sequence_sum", nl::rejection_level::sequence_sum)
        .value("sequence_mean", nl::rejection_level::sequence_mean)
        .value("sequence_max", nl::rejection_level::sequence_max);
    py::enum_<nl::rejection_statistic>(m, "rejection_statistic", "k1 = −d, k2 = ½d², k3 = e^d − 1 − d")
        .value("k1", nl::rejection_statistic::k1)
        .value("k2", nl::rejection_statistic::k2)
        .value("k3", nl::rejection_statistic::k3);
    py::enum_<nl::covariance_rule>(m, "covariance_rule", "kl_cov: the top-k cov tokens; clip_cov: a subset of a band")
        .value("kl_cov", nl::covariance_rule::kl_cov)
        .value("clip_cov", nl::covariance_rule::clip_cov);
}

// The fields of the three "what" structs, bound on them and on the function options that add
// threads to them (def_readwrite takes a base class's member).
template <class C>
py::class_<C>& aggregation_fields(py::class_<C>& c) {
    return c
        .def_readwrite("mode", &C::mode,
                       "token_mean (default), token_sum, seq_mean_token_sum, seq_mean_token_mean, "
                       "seq_mean_token_sum_norm, delta_l")
        .def_readwrite("form", &C::form, "seq_mean_token_sum_norm only: dr_grpo Σ/(B·L) (default) or verl_old Σ/L")
        .def_readwrite("normalizer_length", &C::normalizer_length,
                       "L (sum-norm) or T_max (delta_l), > 0 (default None: the padded width T)")
        .def_readwrite("alpha", &C::alpha, "the delta_l exponent α ≥ 0 (default 0.75)")
        .def_readwrite("global_token_count", &C::global_token_count, "N of the whole batch (default None: this call's)")
        .def_readwrite("global_sequence_count", &C::global_sequence_count,
                       "B of the whole batch (default None: this call's)")
        .def_readwrite("global_length_weight_sum", &C::global_length_weight_sum,
                       "S = Σ n^(−α) of the whole batch, delta_l (default None: this call's)")
        .def_readwrite("data_parallel_size", &C::data_parallel_size, "dp ≥ 1 (default 1)")
        .def_readwrite("count_empty_rows", &C::count_empty_rows, "B counts fully-masked rows too (TRL; default False)")
        .def_readwrite("mask_values", &C::mask_values, "binary: 0 or 1 (default); weights: any finite value ≥ 0");
}

template <class C>
py::class_<C>& kl_fields(py::class_<C>& c) {
    return c.def_readwrite("estimator", &C::estimator, "k1 (= kl), abs, k2 (= mse), k3 (= low_var_kl; default)")
        .def_readwrite("straight_through", &C::straight_through,
                       "verl's '+': the value of the estimator, the gradient of k2 (default False)")
        .def_readwrite("clamp", &C::clamp, "verl's clamps on k3: ±20 on the log-ratio, ±10 on k (default True)")
        .def_readwrite("value_limit", &C::value_limit,
                       "c > 0: every estimator's value clamped to ±c (OpenRLHF: 10; default None)")
        .def_readwrite("bias_correction", &C::bias_correction,
                       "policy_loss only: k ← k·r, r = e^(x − x_old) (TRL use_bias_correction_kl; default False)");
}

template <class C>
py::class_<C>& surrogate_fields(py::class_<C>& c) {
    return c.def_readwrite("mode", &C::mode, "the surrogate (default ppo_clip)")
        .def_readwrite("epsilon_low", &C::epsilon_low, "lo = 1 − ε_low, ≥ 0 (default 0.2)")
        .def_readwrite("epsilon_high", &C::epsilon_high,
                       "hi = 1 + ε_high, ≥ 0; cispo_cap: the absolute cap on r, > 0 (default 0.2)")
        .def_readwrite("dual_clip", &C::dual_clip,
                       "c > 1: ppo_clip caps a negative-advantage loss at c·|A| (verl clip_ratio_c); gspo_sequence "
                       "clamps the sequence ratio at c (TRL delta); dppo truncates r at c (default None)")
        .def_readwrite("log_ratio_clamp", &C::log_ratio_clamp, "d clamped to ±C, > 0; inf for none (TRL) (default 20)")
        .def_readwrite("tau_positive", &C::tau_positive, "SAPO τ+ (default 1.0)")
        .def_readwrite("tau_negative", &C::tau_negative, "SAPO τ− (default 1.05)")
        .def_readwrite("gft_threshold", &C::gft_threshold, "GFT τ (default 0.5)")
        .def_readwrite("raw_approx_kl", &C::raw_approx_kl,
                       "approx_kl from the unclamped log-ratio (OpenRLHF's ppo_kl; default False)")
        .def_readwrite("vespo_k_positive", &C::vespo_k_positive, "VESPO k+ (default 2.0)")
        .def_readwrite("vespo_lambda_positive", &C::vespo_lambda_positive, "VESPO λ+ (default 3.0)")
        .def_readwrite("vespo_k_negative", &C::vespo_k_negative, "VESPO k− (default 3.0)")
        .def_readwrite("vespo_lambda_negative", &C::vespo_lambda_negative, "VESPO λ− (default 2.0)")
        .def_readwrite("kl_cov_coefficient", &C::kl_cov_coefficient, "kl_cov's c_kl (verl ppo_kl_coef; default 0.1)");
}

void bind_options(py::module_& m) {
    auto aggregation = options_class<nl::aggregation_options>(m, "aggregation_options", "what to aggregate");
    aggregation_fields(aggregation);
    auto aggregate = options_class<nl::aggregate_loss_options>(m, "aggregate_loss_options",
                                                               "aggregate_loss: aggregation_options + threads");
    aggregate.def(py::init<const nl::aggregation_options&>(), arg("aggregation"));
    aggregation_fields(aggregate);

    auto kl = options_class<nl::kl_options>(m, "kl_options", "which KL estimator");
    kl_fields(kl);
    auto kl_penalty =
        options_class<nl::kl_penalty_options>(m, "kl_penalty_options", "kl_penalty: kl_options + threads");
    kl_penalty.def(py::init<const nl::kl_options&>(), arg("kl"));
    kl_fields(kl_penalty);

    auto surrogate = options_class<nl::surrogate_options>(m, "surrogate_options", "which surrogate and its constants");
    surrogate_fields(surrogate);
    auto policy_surrogate = options_class<nl::policy_surrogate_options>(
        m, "policy_surrogate_options", "policy_surrogate_forward / _backward: surrogate_options + threads");
    policy_surrogate.def(py::init<const nl::surrogate_options&>(), arg("surrogate"));
    surrogate_fields(policy_surrogate);

    // The nested structs by reference (def_readwrite): o.surrogate.epsilon_low = 0.1 changes o.
    using plo = nl::policy_loss_options;
    options_class<plo>(m, "policy_loss_options", "policy_loss: surrogate → KL → entropy bonus → aggregation")
        .def_readwrite("surrogate", &plo::surrogate, "surrogate_options (default: PPO clip, ε 0.2 / 0.2, clamp ±20)")
        .def_readwrite("use_kl_loss", &plo::use_kl_loss, "add the β·k term; needs ref_log_probs (default False)")
        .def_readwrite("kl", &plo::kl, "kl_options (default: k3 with verl's clamps)")
        .def_readwrite("kl_coefficient", &plo::kl_coefficient, "β (verl kl_loss_coef; default 0.001)")
        .def_readwrite("entropy_coefficient", &plo::entropy_coefficient,
                       "c_H of − c_H·H; needs entropies when ≠ 0 (default 0)")
        .def_readwrite("aggregation", &plo::aggregation, "aggregation_options of all three terms (default token-mean)");

    options_class<nl::value_loss_options>(m, "value_loss_options", "value_loss: ½·max((v − R)², (v_c − R)²)")
        .def_readwrite("clip", &nl::value_loss_options::clip,
                       "c ≥ 0 of clip(v, v_old ± c) (verl cliprange_value; default None: unclipped)")
        .def_readwrite("aggregation", &nl::value_loss_options::aggregation, "aggregation_options (default token-mean)");

    using rco = nl::rollout_correction_options;
    options_class<rco>(m, "rollout_correction_options", "rollout_correction_weights")
        .def_readwrite("level", &rco::level, "token (default), sequence, sequence_mean_filter (needs lower)")
        .def_readwrite("bound", &rco::bound, "truncate (TIS; default) or mask (IcePop)")
        .def_readwrite("lower", &rco::lower, "truncate: the floor; mask: the lowest ratio kept; ≤ upper (default None)")
        .def_readwrite("upper", &rco::upper, "the upper bound, > 0 (default 2.0)")
        .def_readwrite("log_ratio_clamp", &rco::log_ratio_clamp, "d clamped to ±this, > 0; inf: none (default 20)")
        .def_readwrite("batch_normalize", &rco::batch_normalize, "w ← w / mean(w) (default False)");
    options_class<nl::off_policy_sequence_mask_options>(m, "off_policy_sequence_mask_options",
                                                        "off_policy_sequence_mask: the threads");

    using rrc = nl::rollout_rejection_criterion;
    options_class<rrc>(m, "rollout_rejection_criterion", "one verl rollout_rs option with its threshold")
        .def(py::init([](nl::rejection_level level, nl::rejection_statistic statistic, double upper,
                         std::optional<double> lower) {
                 return rrc{level, statistic, upper, lower};
             }),
             arg("level"), arg("statistic") = nl::rejection_statistic::k1, arg("upper") = 2.0,
             arg("lower") = std::optional<double>{})
        .def_readwrite("level", &rrc::level, "token (default), sequence_sum, sequence_mean, sequence_max")
        .def_readwrite("statistic", &rrc::statistic, "k1 (default), k2, k3")
        .def_readwrite("upper", &rrc::upper, "k1: the upper ratio bound; k2, k3: the bound on s; > 0 (default 2.0)")
        .def_readwrite("lower", &rrc::lower, "k1 only: the lower ratio bound (default None: 1/upper)");
    using rro = nl::rollout_rejection_options;
    options_class<rro>(m, "rollout_rejection_options", "rollout_rejection_mask")
        .def_readwrite("criteria", &rro::criteria,
                       "list of rollout_rejection_criterion, all must pass (default one token_k1, upper 2); "
                       "assign a list, not in place")
        .def_readwrite("log_ratio_clamp", &rro::log_ratio_clamp, "d clamped to ±this, > 0 (default 20)");

    using cso = nl::covariance_selection_options;
    options_class<cso>(m, "covariance_selection_options", "covariance_selection")
        .def_readwrite("rule", &cso::rule, "kl_cov (default) or clip_cov")
        .def_readwrite("ratio", &cso::ratio, "k = max(1, ⌊ratio·N⌋) tokens at most, > 0 (default 2e-4)")
        .def_readwrite("lower", &cso::lower, "clip_cov's band lower < cov (default 1.0)")
        .def_readwrite("upper", &cso::upper, "cov < upper (default 5.0)")
        .def_readwrite("epsilon_low", &cso::epsilon_low, "clip_cov: the PPO clip left out of the candidates (0.2)")
        .def_readwrite("epsilon_high", &cso::epsilon_high, "(default 0.2)")
        .def_readwrite("seed", &cso::seed, "clip_cov's random subset (default 0)");

    py::class_<nl::aggregation_result>(m, "aggregation_result")
        .def_readonly("loss", &nl::aggregation_result::loss)
        .def_readonly("token_count", &nl::aggregation_result::token_count, "this call's N = Σ m")
        .def_readonly("sequence_count", &nl::aggregation_result::sequence_count, "this call's B");
    py::class_<nl::surrogate_metrics>(m, "surrogate_metrics")
        .def_readonly("clip_fraction", &nl::surrogate_metrics::clip_fraction, "verl pg_clipfrac")
        .def_readonly("clip_fraction_lower", &nl::surrogate_metrics::clip_fraction_lower, "verl pg_clipfrac_lower")
        .def_readonly("approx_kl", &nl::surrogate_metrics::approx_kl, "masked mean of x_old − x (verl ppo_kl)")
        .def_readonly("token_count", &nl::surrogate_metrics::token_count);
    py::class_<nl::policy_loss_result>(m, "policy_loss_result")
        .def_readonly("loss", &nl::policy_loss_result::loss)
        .def_readonly("policy_loss", &nl::policy_loss_result::policy_loss)
        .def_readonly("kl_loss", &nl::policy_loss_result::kl_loss, "before β")
        .def_readonly("entropy_loss", &nl::policy_loss_result::entropy_loss, "before c_H")
        .def_readonly("sequence_count", &nl::policy_loss_result::sequence_count)
        .def_readonly("metrics", &nl::policy_loss_result::metrics);
    py::class_<nl::value_loss_result>(m, "value_loss_result")
        .def_readonly("loss", &nl::value_loss_result::loss)
        .def_readonly("clip_fraction", &nl::value_loss_result::clip_fraction, "verl vf_clipfrac")
        .def_readonly("token_count", &nl::value_loss_result::token_count);
}

void bind_presets(py::module_& m) {
    py::module_ p = m.def_submodule("presets", "the loss options of verl, TRL and OpenRLHF (loss/presets.hpp)");
    py::enum_<np::trl_loss_type>(p, "trl_loss_type", "TRL GRPOConfig.loss_type")
        .value("grpo", np::trl_loss_type::grpo)
        .value("bnpo", np::trl_loss_type::bnpo)
        .value("dr_grpo", np::trl_loss_type::dr_grpo)
        .value("dapo", np::trl_loss_type::dapo)
        .value("cispo", np::trl_loss_type::cispo)
        .value("sapo", np::trl_loss_type::sapo)
        .value("luspo", np::trl_loss_type::luspo)
        .value("vespo", np::trl_loss_type::vespo);
    py::enum_<np::trl_is_mode>(p, "trl_is_mode", "TRL vllm_importance_sampling_mode")
        .value("token_truncate", np::trl_is_mode::token_truncate)
        .value("token_mask", np::trl_is_mode::token_mask)
        .value("sequence_truncate", np::trl_is_mode::sequence_truncate)
        .value("sequence_mask", np::trl_is_mode::sequence_mask);
    py::enum_<np::openrlhf_is_type>(p, "openrlhf_is_type", "OpenRLHF is_correction_type")
        .value("tis", np::openrlhf_is_type::tis)
        .value("icepop", np::openrlhf_is_type::icepop)
        .value("seq_mask_tis", np::openrlhf_is_type::seq_mask_tis);

    p.def("verl_actor", &np::verl_actor, arg("use_kl_loss") = false);
    p.def("trl", &np::trl, arg("loss_type"), arg("max_completion_length") = std::optional<double>{}, arg("beta") = 0.0);
    p.def("openrlhf_ppo", &np::openrlhf_ppo);
    p.def("verl_reinforce", &np::verl_reinforce);
    p.def("verl_dppo", &np::verl_dppo, arg("binary_kl") = false, arg("clip_ratio_c") = 3.0);
    p.def("verl_kl_cov", &np::verl_kl_cov, arg("ppo_kl_coef") = 0.1);
    p.def("verl_clip_cov", &np::verl_clip_cov);
    p.def("k3_plus", &np::k3_plus);
    p.def("openrlhf_kl", &np::openrlhf_kl, arg("estimator") = nl::kl_estimator::k1);
    p.def("verl_value", &np::verl_value, arg("cliprange_value") = 0.5);
    p.def("openrlhf_value", &np::openrlhf_value, arg("clip_eps") = std::optional<double>{},
          arg("token_level_loss") = true);
    p.def("verl_rollout_is", &np::verl_rollout_is, arg("sequence") = false, arg("upper") = 2.0,
          arg("lower") = std::optional<double>{}, arg("batch_normalize") = false);
    p.def("trl_vllm_is", &np::trl_vllm_is, arg("mode") = np::trl_is_mode::sequence_mask, arg("clip_max") = 3.0,
          arg("clip_min") = std::optional<double>{});
    p.def("openrlhf_vllm_is", &np::openrlhf_vllm_is, arg("type") = np::openrlhf_is_type::tis, arg("low") = 0.5,
          arg("high") = 5.0);
    // The chain first: a list is never an enum, and the one-criterion overload accepts no arguments.
    p.def("verl_rollout_rs", py::overload_cast<std::vector<nl::rollout_rejection_criterion>>(&np::verl_rollout_rs),
          arg("criteria"));
    p.def("verl_rollout_rs",
          py::overload_cast<nl::rejection_level, nl::rejection_statistic, double, std::optional<double>>(
              &np::verl_rollout_rs),
          arg("level") = nl::rejection_level::token, arg("statistic") = nl::rejection_statistic::k1, arg("upper") = 2.0,
          arg("lower") = std::optional<double>{});
}

void bind_aggregate_and_kl(py::module_& m) {
    m.def("aggregate_loss",
          [](py::object loss, py::object mask, py::object weights, const nl::aggregate_loss_options& o) {
              constexpr const char* f = "aggregate_loss";
              return dispatch(storage_of(loss, f, "loss"), [&](auto t) -> nl::aggregation_result {
                  using T = typename decltype(t)::type;
                  auto l = matrix_of<const T>(loss, f, "loss");
                  auto mv = optional_matrix_of<const T>(mask, f, "mask");
                  auto w = optional_matrix_of<T>(weights, f, "weights");
                  return without_gil([&] { return nl::aggregate_loss(l, mv, w, o); });
              });
          });
    m.def("kl_penalty",
          [](py::object x, py::object ref, py::object value, py::object gradient, const nl::kl_penalty_options& o) {
              constexpr const char* f = "kl_penalty";
              dispatch(storage_of(x, f, "log_probs"), [&](auto t) {
                  using T = typename decltype(t)::type;
                  auto xv = matrix_of<const T>(x, f, "log_probs");
                  auto rv = matrix_of<const T>(ref, f, "ref_log_probs");
                  auto k = matrix_of<T>(value, f, "value");
                  auto g = optional_matrix_of<T>(gradient, f, "gradient");
                  without_gil([&] { nl::kl_penalty(xv, rv, k, g, o); });
              });
          });
}

void bind_policy(py::module_& m) {
    m.def("policy_surrogate_forward",
          [](py::object x, py::object old, py::object a, py::object mask, py::object ref, py::object h, py::object isw,
             py::object sel, py::object loss, const nl::policy_surrogate_options& o) {
              constexpr const char* f = "policy_surrogate_forward";
              return dispatch(storage_of(x, f, "log_probs"), [&](auto t) -> nl::surrogate_metrics {
                  using T = typename decltype(t)::type;
                  const auto p = inputs_of<T>(f, x, old, a, mask, ref, h, isw, sel);
                  auto out = matrix_of<T>(loss, f, "loss");
                  return without_gil([&] { return nl::policy_surrogate_forward(p, out, o); });
              });
          });
    m.def("policy_surrogate_backward",
          [](py::object x, py::object old, py::object a, py::object mask, py::object ref, py::object h, py::object isw,
             py::object sel, py::object loss_gradient, py::object gradient, const nl::policy_surrogate_options& o) {
              constexpr const char* f = "policy_surrogate_backward";
              return dispatch(storage_of(x, f, "log_probs"), [&](auto t) -> nl::surrogate_metrics {
                  using T = typename decltype(t)::type;
                  const auto p = inputs_of<T>(f, x, old, a, mask, ref, h, isw, sel);
                  auto up = matrix_of<const T>(loss_gradient, f, "loss_gradient");
                  auto g = optional_matrix_of<T>(gradient, f, "log_probs_gradient");
                  return without_gil([&] { return nl::policy_surrogate_backward(up, p, g, o); });
              });
          });
    m.def("policy_loss",
          [](py::object x, py::object old, py::object a, py::object mask, py::object ref, py::object h, py::object isw,
             py::object sel, py::object gradient, py::object entropy_gradient, const nl::policy_loss_options& o) {
              constexpr const char* f = "policy_loss";
              return dispatch(storage_of(x, f, "log_probs"), [&](auto t) -> nl::policy_loss_result {
                  using T = typename decltype(t)::type;
                  const auto p = inputs_of<T>(f, x, old, a, mask, ref, h, isw, sel);
                  auto g = optional_matrix_of<T>(gradient, f, "log_probs_gradient");
                  auto gh = optional_matrix_of<T>(entropy_gradient, f, "entropy_gradient");
                  return without_gil([&] { return nl::policy_loss(p, g, gh, o); });
              });
          });
    m.def("value_loss", [](py::object v, py::object old, py::object returns, py::object mask, py::object gradient,
                           const nl::value_loss_options& o) {
        constexpr const char* f = "value_loss";
        return dispatch(storage_of(v, f, "values"), [&](auto t) -> nl::value_loss_result {
            using T = typename decltype(t)::type;
            auto vv = matrix_of<const T>(v, f, "values");
            auto ov = matrix_of<const T>(old, f, "old_values");
            auto rv = matrix_of<const T>(returns, f, "returns");
            auto mv = optional_matrix_of<const T>(mask, f, "mask");
            auto g = optional_matrix_of<T>(gradient, f, "values_gradient");
            return without_gil([&] { return nl::value_loss(vv, ov, rv, mv, g, o); });
        });
    });
}

void bind_corrections(py::module_& m) {
    m.def("rollout_correction_weights", [](py::object x, py::object rollout, py::object mask, py::object weights,
                                           const nl::rollout_correction_options& o) {
        constexpr const char* f = "rollout_correction_weights";
        return dispatch(storage_of(x, f, "log_probs"), [&](auto t) -> double {
            using T = typename decltype(t)::type;
            auto xv = matrix_of<const T>(x, f, "log_probs");
            auto rv = matrix_of<const T>(rollout, f, "rollout_log_probs");
            auto mv = optional_matrix_of<const T>(mask, f, "mask");
            auto w = matrix_of<T>(weights, f, "weights");
            return without_gil([&] { return nl::rollout_correction_weights(xv, rv, mv, w, o); });
        });
    });
    m.def("rollout_rejection_mask", [](py::object x, py::object rollout, py::object mask, py::object keep,
                                       const nl::rollout_rejection_options& o) {
        constexpr const char* f = "rollout_rejection_mask";
        return dispatch(storage_of(x, f, "log_probs"), [&](auto t) -> double {
            using T = typename decltype(t)::type;
            auto xv = matrix_of<const T>(x, f, "log_probs");
            auto rv = matrix_of<const T>(rollout, f, "rollout_log_probs");
            auto mv = optional_matrix_of<const T>(mask, f, "mask");
            auto k = matrix_of<T>(keep, f, "keep");
            return without_gil([&] { return nl::rollout_rejection_mask(xv, rv, mv, k, o); });
        });
    });
    m.def("covariance_selection", [](py::object x, py::object old, py::object a, py::object mask, py::object selected,
                                     const nl::covariance_selection_options& o) {
        constexpr const char* f = "covariance_selection";
        return dispatch(storage_of(x, f, "log_probs"), [&](auto t) -> index_type {
            using T = typename decltype(t)::type;
            auto xv = matrix_of<const T>(x, f, "log_probs");
            auto ov = matrix_of<const T>(old, f, "old_log_probs");
            auto av = matrix_of<const T>(a, f, "advantages");
            auto mv = optional_matrix_of<const T>(mask, f, "mask");
            auto s = matrix_of<T>(selected, f, "selected");
            return without_gil([&] { return nl::covariance_selection(xv, ov, av, mv, s, o); });
        });
    });
    m.def("off_policy_sequence_mask",
          [](py::object x, py::object sampling, py::object a, py::object mask, py::object keep, double threshold,
             const nl::off_policy_sequence_mask_options& o) {
              constexpr const char* f = "off_policy_sequence_mask";
              dispatch(storage_of(x, f, "log_probs"), [&](auto t) {
                  using T = typename decltype(t)::type;
                  auto xv = matrix_of<const T>(x, f, "log_probs");
                  auto sv = matrix_of<const T>(sampling, f, "sampling_log_probs");
                  auto av = matrix_of<const T>(a, f, "advantages");
                  auto mv = optional_matrix_of<const T>(mask, f, "mask");
                  auto k = matrix_of<T>(keep, f, "keep");
                  without_gil([&] { nl::off_policy_sequence_mask(xv, sv, av, mv, k, threshold, o); });
              });
          });
}

}  // namespace
}  // namespace normkit::python

PYBIND11_MODULE(_loss, m) {
    using namespace normkit::python;
    m.doc() = "normkit::loss over numpy arrays (use normkit.loss)";
    bind_enums(m);
    bind_options(m);
    bind_presets(m);
    bind_aggregate_and_kl(m);
    bind_policy(m);
    bind_corrections(m);
}
