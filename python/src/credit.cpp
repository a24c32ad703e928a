// normkit._credit: the token-credit kernels of normkit::credit over numpy arrays.
// The Python functions (normkit/credit.py) allocate the outputs and build the options; these
// take every array explicitly, None where the C++ argument is {}. Token data are float32 or
// float64 and fix the call's storage type (masks and outputs have it too); the logits kernels
// take float32, float64, float16 and bfloat16 (uint16 bits), their statistics float32 (float64
// for float64 logits), the logits gradient the logits' storage type. Token ids, turn counts and
// turn indices are int64 (index_type).
#include "bind.hpp"

#include <vector>

namespace normkit::python {
namespace {

namespace nc = normkit::credit;
using py::arg;

template <class T>
using stat = statistic_t<T>;

// Calls f(type_tag<T>{}) for the storage type of the array that fixes it, float or double.
template <class F>
decltype(auto) floating(const py::handle& object, const char* function, const char* name, F&& f) {
    return dispatch_floating(storage_of(object, function, name, true), std::forward<F>(f));
}

void bind_enums(py::module_& m) {
    py::enum_<nc::cort_mapping>(m, "cort_mapping", "CoRT's u = f(c): clipped_exp, scaled_sigmoid or tanh")
        .value("clipped_exp", nc::cort_mapping::clipped_exp)
        .value("scaled_sigmoid", nc::cort_mapping::scaled_sigmoid)
        .value("tanh", nc::cort_mapping::tanh);
    py::enum_<nc::hapo_sign>(m, "hapo_sign", "h̃ for h < 0: paper_range h/|min| ∈ [−1, 0), released_code h/min")
        .value("paper_range", nc::hapo_sign::paper_range)
        .value("released_code", nc::hapo_sign::released_code);
    py::enum_<nc::outside_span>(m, "outside_span", "a valid token outside every span: zero or response_advantage")
        .value("zero", nc::outside_span::zero)
        .value("response_advantage", nc::outside_span::response_advantage);
    py::enum_<nc::normalization_scope>(m, "normalization_scope", "MAPO's immediate term over the group or the batch")
        .value("group", nc::normalization_scope::group)
        .value("batch", nc::normalization_scope::batch);
    py::enum_<nc::gtpo_scope>(m, "gtpo_scope", "GTPO's set: all valid turns of the group, or one turn index")
        .value("all_turns", nc::gtpo_scope::all_turns)
        .value("turn_index", nc::gtpo_scope::turn_index);
    bind_return_mask_rule(m);
}

void bind_options(py::module_& m) {
    options_class<nc::broadcast_options>(m, "broadcast_options",
                                         "broadcast_advantages: the threads (the broadcast has no other setting)");
    options_class<nc::cort_options>(m, "cort_options", "cort_weights")
        .def_readwrite("mapping", &nc::cort_options::mapping, "clipped_exp (default), scaled_sigmoid or tanh")
        .def_readwrite("temperature", &nc::cort_options::temperature, "τ > 0 (default 1)")
        .def_readwrite("min_weight", &nc::cort_options::min_weight, "w_min > 0 (default 0.5)")
        .def_readwrite("max_weight", &nc::cort_options::max_weight, "w_max ≥ w_min (default 2)")
        .def_readwrite("normalize", &nc::cort_options::normalize, "mean weight 1 per response (default True)")
        .def_readwrite("step", &nc::cort_options::step, "the training step of the SmoothStep ramp (default 0)")
        .def_readwrite("ramp_start", &nc::cort_options::ramp_start, "S = 0 up to here (default 0)")
        .def_readwrite("ramp_end", &nc::cort_options::ramp_end, "S = 1 from here (default 0)");
    options_class<nc::top_entropy_options>(m, "top_entropy_options", "top_entropy_mask")
        .def_readwrite("rho", &nc::top_entropy_options::rho,
                       "TRL top_entropy_quantile ρ ∈ [0, 1]: the share of valid tokens kept (default 1)");
    options_class<nc::hapo_entropy_options>(m, "hapo_entropy_options", "hapo_entropy_signal")
        .def_readwrite("pivot", &nc::hapo_entropy_options::pivot, "p of the quantile Q_p ∈ [0, 1] (default 0.8)")
        .def_readwrite("sign", &nc::hapo_entropy_options::sign, "paper_range (default) or released_code");
    options_class<nc::hapo_advantage_options>(m, "hapo_advantage_options", "hapo_token_advantages")
        .def_readwrite("eps", &nc::hapo_advantage_options::eps, "added to σ (default 1e-6)")
        .def_readwrite("normalize_by_std", &nc::hapo_advantage_options::normalize_by_std,
                       "norm_adv_by_std_in_grpo (default True)")
        .def_readwrite("fallback_threshold", &nc::hapo_advantage_options::fallback_threshold,
                       "any |A| ≥ this → GRPO for that group (default 5)");
    options_class<nc::hapo_clip_options>(m, "hapo_clip_options", "hapo_clip_ranges")
        .def_readwrite("clip_low", &nc::hapo_clip_options::clip_low, "ε_L ≥ 0 (default 0.2)")
        .def_readwrite("clip_high", &nc::hapo_clip_options::clip_high, "ε_H ≥ 0 (default 0.2)")
        .def_readwrite("alpha", &nc::hapo_clip_options::alpha, "α_c (default 1)");
    options_class<nc::hapo_redistribute_options>(m, "hapo_redistribute_options", "hapo_redistribute")
        .def_readwrite("beta", &nc::hapo_redistribute_options::beta, "β, the paper's adv_beta (default 1)");
    options_class<nc::logits_options>(m, "logits_options", "logits_statistics, logits_backward")
        .def_readwrite("temperature", &nc::logits_options::temperature,
                       "τ > 0: statistics of softmax(z/τ) (default 1)");
    using otb = nc::optimal_token_baseline_options;
    options_class<otb>(m, "optimal_token_baseline_options", "optimal_token_baseline")
        .def_readwrite("handle_zero_tail", &otb::handle_zero_tail, "verl-new (default True; verl-old False)")
        .def_readwrite("compact", &otb::compact, "the TIR variant: positions index valid tokens (default False)")
        .def_readwrite("eps", &otb::eps, "added to Σ W in the denominator, ≥ 0 (default 1e-8)");
    options_class<nc::discounted_returns_options>(m, "discounted_returns_options", "discounted_returns")
        .def_readwrite("gamma", &nc::discounted_returns_options::gamma, "γ ∈ [0, 1] (default 1)")
        .def_readwrite("mask_rule", &nc::discounted_returns_options::mask_rule,
                       "carry (default; verl-new), reset (verl-old), discount_through (OpenRLHF)");
    options_class<nc::gae_options>(m, "gae_options", "generalized_advantage_estimation")
        .def_readwrite("gamma", &nc::gae_options::gamma, "γ ∈ [0, 1] (default 1)")
        .def_readwrite("lambda_", &nc::gae_options::lambda, "λ ∈ [0, 1] (default 1; C++ lambda)")
        .def_readwrite("mask_rule", &nc::gae_options::mask_rule,
                       "carry (default; verl) or discount_through (OpenRLHF)");
    options_class<nc::span_options>(m, "span_options", "span_advantages")
        .def_readwrite("outside", &nc::span_options::outside, "zero (default) or response_advantage");
    options_class<nc::a2tgpo_options>(m, "a2tgpo_options", "a2tgpo_advantages")
        .def_readwrite("gamma", &nc::a2tgpo_options::gamma, "γ ∈ [0, 1] of D_t (default 1)")
        .def_readwrite("alpha", &nc::a2tgpo_options::alpha, "α, the weight of D_t (default 0.3)")
        .def_readwrite("clip_spread", &nc::a2tgpo_options::clip_spread, "κ of the clip scale (default 0.3)")
        .def_readwrite("normalize_by_std", &nc::a2tgpo_options::normalize_by_std, "(default True)")
        .def_readwrite("ddof", &nc::a2tgpo_options::ddof, "(default 0)")
        .def_readwrite("eps", &nc::a2tgpo_options::eps, "added to σ (default 1e-6)");
    options_class<nc::mapo_options>(m, "mapo_options", "mapo_advantages")
        .def_readwrite("alpha", &nc::mapo_options::alpha, "weight of the turn-index term (default 0.5)")
        .def_readwrite("gamma", &nc::mapo_options::gamma, "γ ∈ [0, 1] (default 1)")
        .def_readwrite("eps", &nc::mapo_options::eps, "added to σ (default 1e-8)")
        .def_readwrite("immediate_scope", &nc::mapo_options::immediate_scope, "group (default) or batch");
    options_class<nc::gtpo_options>(m, "gtpo_options", "gtpo_advantages")
        .def_readwrite("gamma", &nc::gtpo_options::gamma, "γ ∈ [0, 1] (default 0.9)")
        .def_readwrite("scope", &nc::gtpo_options::scope, "all_turns (default) or turn_index")
        .def_readwrite("ddof", &nc::gtpo_options::ddof, "(default 1)")
        .def_readwrite("eps", &nc::gtpo_options::eps, "added to σ (default 1e-6)");
    options_class<nc::turns_to_tokens_options>(m, "turns_to_tokens_options", "turns_to_tokens")
        .def_readwrite("outside", &nc::turns_to_tokens_options::outside,
                       "the value of a token in no turn (turn_index −1) (default 0)");
}

void bind_span(py::module_& m) {
    py::class_<nc::span>(m, "span", "an answer span: sample, tokens [start, end), subproblem position")
        .def(py::init([](index_type sample, index_type start, index_type end, index_type position) {
                 return nc::span{sample, start, end, position};
             }),
             arg("sample") = 0, arg("start") = 0, arg("end") = 0, arg("position") = 0)
        .def_readwrite("sample", &nc::span::sample)
        .def_readwrite("start", &nc::span::start, "first token")
        .def_readwrite("end", &nc::span::end, "one past the last token")
        .def_readwrite("position", &nc::span::position, "subproblem index j into position_advantages' columns")
        .def("__repr__", [](const nc::span& s) {
            return py::str("span(sample={!r}, start={!r}, end={!r}, position={!r})")
                .format(s.sample, s.start, s.end, s.position);
        });
}

void bind_presets(py::module_& m) {
    namespace pr = nc::presets;
    py::module_ p = m.def_submodule("presets", "the options that reproduce verl's, OpenRLHF's and HAPO's arithmetic");
    p.def("verl_new_optimal_token_baseline", &pr::verl_new_optimal_token_baseline);
    p.def("verl_old_optimal_token_baseline", &pr::verl_old_optimal_token_baseline);
    p.def("verl_tir_optimal_token_baseline", &pr::verl_tir_optimal_token_baseline);
    p.def("verl_new_returns", &pr::verl_new_returns, arg("gamma") = 1.0);
    p.def("verl_old_returns", &pr::verl_old_returns, arg("gamma") = 1.0);
    p.def("openrlhf_returns", &pr::openrlhf_returns, arg("gamma") = 1.0);
    p.def("openrlhf_gae", &pr::openrlhf_gae, arg("gamma") = 1.0, arg("lambda_") = 1.0);
    p.def("hapo_paper", &pr::hapo_paper);
    p.def("hapo_released_code", &pr::hapo_released_code);
}

void bind_broadcast(py::module_& m) {
    m.def("broadcast_advantages",
          [](py::object advantages, py::object mask, py::object output, const nc::broadcast_options& o) {
              constexpr const char* f = "broadcast_advantages";
              floating(advantages, f, "advantages", [&](auto a) {
                  using A = typename decltype(a)::type;
                  floating(output, f, "output", [&](auto t) {
                      using T = typename decltype(t)::type;
                      auto adv = vector_of<const A>(advantages, f, "advantages");
                      auto out = matrix_of<T>(output, f, "output");
                      const py::array& ma = require_array(mask, f, "mask");
                      if (has_dtype<std::uint8_t>(ma)) {
                          auto mv = matrix_of<const std::uint8_t>(mask, f, "mask");
                          without_gil([&] { nc::broadcast_advantages(adv, mv, out, o); });
                      } else {
                          if (!has_dtype<T>(ma))
                              fail_type(f, ": mask has dtype ", dtype_name(ma), " but must be uint8 or ",
                                        storage_name<T>(), " (the output's storage type)");
                          auto mv = matrix_of<const T>(mask, f, "mask");
                          without_gil([&] { nc::broadcast_advantages(adv, mv, out, o); });
                      }
                  });
              });
          });
    m.def("smoothstep_ramp", &nc::smoothstep_ramp, arg("step"), arg("start"), arg("end"),
          "S(step) = 3u² − 2u³, u = clamp((step − start)/(end − start), 0, 1); a unit step when end = start");
    m.def("cort_weights", [](py::object rubric, py::object free_, py::object mask, py::object advantages,
                             py::object weights, py::object token_advantages, const nc::cort_options& o) {
        constexpr const char* f = "cort_weights";
        return floating(mask, f, "mask", [&](auto t) {
            using T = typename decltype(t)::type;
            auto r = matrix_of<const T>(rubric, f, "log_prob_rubric");
            auto c = matrix_of<const T>(free_, f, "log_prob_free");
            auto mv = matrix_of<const T>(mask, f, "mask");
            auto a = optional_vector_of<const T>(advantages, f, "advantages");
            auto w = optional_matrix_of<T>(weights, f, "weights");
            auto ta = optional_matrix_of<T>(token_advantages, f, "token_advantages");
            return without_gil([&] { return nc::cort_weights(r, c, mv, a, w, ta, o); });
        });
    });
}

void bind_entropy(py::module_& m) {
    m.def("top_entropy_mask",
          [](py::object entropy, py::object mask, py::object keep, const nc::top_entropy_options& o) {
              constexpr const char* f = "top_entropy_mask";
              floating(entropy, f, "entropy", [&](auto t) {
                  using T = typename decltype(t)::type;
                  auto h = matrix_of<const T>(entropy, f, "entropy");
                  auto mv = matrix_of<const T>(mask, f, "mask");
                  auto k = matrix_of<T>(keep, f, "keep");
                  without_gil([&] { nc::top_entropy_mask(h, mv, k, o); });
              });
          });
    m.def("hapo_entropy_signal",
          [](py::object entropy, py::object mask, py::object signal, const nc::hapo_entropy_options& o) {
              constexpr const char* f = "hapo_entropy_signal";
              floating(entropy, f, "entropy", [&](auto t) {
                  using T = typename decltype(t)::type;
                  auto h = matrix_of<const T>(entropy, f, "entropy");
                  auto mv = matrix_of<const T>(mask, f, "mask");
                  auto s = matrix_of<T>(signal, f, "signal");
                  without_gil([&] { nc::hapo_entropy_signal(h, mv, s, o); });
              });
          });
    m.def("hapo_token_advantages", [](py::object scores, py::object grouping, py::object mask, py::object output,
                                      const nc::hapo_advantage_options& o) {
        constexpr const char* f = "hapo_token_advantages";
        floating(scores, f, "scores", [&](auto t) {
            using T = typename decltype(t)::type;
            auto s = vector_of<const T>(scores, f, "scores");
            auto g = groups_of(grouping, f);
            auto mv = matrix_of<const T>(mask, f, "mask");
            auto out = matrix_of<T>(output, f, "output");
            without_gil([&] { nc::hapo_token_advantages(s, g, mv, out, o); });
        });
    });
    m.def("hapo_clip_ranges", [](py::object signal, py::object low, py::object high, const nc::hapo_clip_options& o) {
        constexpr const char* f = "hapo_clip_ranges";
        floating(signal, f, "signal", [&](auto t) {
            using T = typename decltype(t)::type;
            auto s = matrix_of<const T>(signal, f, "signal");
            auto l = matrix_of<T>(low, f, "low");
            auto h = matrix_of<T>(high, f, "high");
            without_gil([&] { nc::hapo_clip_ranges(s, l, h, o); });
        });
    });
    m.def("hapo_redistribute",
          [](py::object advantages, py::object signal, py::object ratio, py::object clip_low, py::object clip_high,
             py::object mask, py::object output, const nc::hapo_redistribute_options& o) {
              constexpr const char* f = "hapo_redistribute";
              floating(advantages, f, "advantages", [&](auto t) {
                  using T = typename decltype(t)::type;
                  auto a = matrix_of<const T>(advantages, f, "advantages");
                  auto s = matrix_of<const T>(signal, f, "signal");
                  auto r = matrix_of<const T>(ratio, f, "ratio");
                  auto l = matrix_of<const T>(clip_low, f, "clip_low");
                  auto h = matrix_of<const T>(clip_high, f, "clip_high");
                  auto mv = matrix_of<const T>(mask, f, "mask");
                  auto out = matrix_of<T>(output, f, "output");
                  without_gil([&] { nc::hapo_redistribute(a, s, r, l, h, mv, out, o); });
              });
          });
}

void bind_logits(py::module_& m) {
    m.def("logits_statistics", [](py::object logits, py::object tokens, py::object token_log_probability,
                                  py::object entropy, py::object sum_probability_squared, py::object logsumexp,
                                  const nc::logits_options& o) {
        constexpr const char* f = "logits_statistics";
        dispatch(storage_of(logits, f, "logits"), [&](auto t) {
            using T = typename decltype(t)::type;
            using S = stat<T>;
            auto z = matrix_of<const T>(logits, f, "logits");
            auto y = optional_vector_of<const index_type>(tokens, f, "tokens");
            nc::logits_outputs<S> outputs;
            outputs.token_log_probability(optional_vector_of<S>(token_log_probability, f, "token_log_probability"))
                .entropy(optional_vector_of<S>(entropy, f, "entropy"))
                .sum_probability_squared(optional_vector_of<S>(sum_probability_squared, f, "sum_probability_squared"))
                .logsumexp(optional_vector_of<S>(logsumexp, f, "logsumexp"));
            without_gil([&] { nc::logits_statistics(z, y, outputs, o); });
        });
    });
    // The gradient has the logits' storage type (C++ also takes another of the same compute type).
    m.def("logits_backward", [](py::object output_gradient, py::object logits, py::object tokens,
                                py::object logits_gradient, py::object logsumexp, const nc::logits_options& o) {
        constexpr const char* f = "logits_backward";
        dispatch(storage_of(logits, f, "logits"), [&](auto t) {
            using T = typename decltype(t)::type;
            using S = stat<T>;
            auto g = vector_of<const S>(output_gradient, f, "output_gradient");
            auto z = matrix_of<const T>(logits, f, "logits");
            auto y = vector_of<const index_type>(tokens, f, "tokens");
            auto dz = matrix_of<T>(logits_gradient, f, "logits_gradient");
            auto lse = optional_vector_of<const S>(logsumexp, f, "logsumexp");
            without_gil([&] { nc::logits_backward(g, z, y, dz, lse, o); });
        });
    });
}

void bind_returns(py::module_& m) {
    m.def("optimal_token_baseline",
          [](py::object rewards, py::object mask, py::object grouping, py::object old_log_prob,
             py::object sum_probability_squared, py::object importance_weights, py::object advantages,
             py::object returns, const nc::optimal_token_baseline_options& o) {
              constexpr const char* f = "optimal_token_baseline";
              floating(rewards, f, "rewards", [&](auto t) {
                  using T = typename decltype(t)::type;
                  auto r = matrix_of<const T>(rewards, f, "rewards");
                  auto mv = matrix_of<const T>(mask, f, "mask");
                  auto g = groups_of(grouping, f);
                  auto lp = matrix_of<const T>(old_log_prob, f, "old_log_prob");
                  auto sq = matrix_of<const T>(sum_probability_squared, f, "sum_probability_squared");
                  auto iw = optional_matrix_of<const T>(importance_weights, f, "importance_weights");
                  auto a = matrix_of<T>(advantages, f, "advantages");
                  auto ret = optional_matrix_of<T>(returns, f, "returns");
                  without_gil([&] { nc::optimal_token_baseline(r, mv, g, lp, sq, iw, a, ret, o); });
              });
          });
    m.def("discounted_returns",
          [](py::object rewards, py::object mask, py::object returns, const nc::discounted_returns_options& o) {
              constexpr const char* f = "discounted_returns";
              floating(rewards, f, "rewards", [&](auto t) {
                  using T = typename decltype(t)::type;
                  auto r = matrix_of<const T>(rewards, f, "rewards");
                  auto mv = matrix_of<const T>(mask, f, "mask");
                  auto ret = matrix_of<T>(returns, f, "returns");
                  without_gil([&] { nc::discounted_returns(r, mv, ret, o); });
              });
          });
    m.def("generalized_advantage_estimation", [](py::object rewards, py::object values, py::object mask,
                                                 py::object advantages, py::object returns, const nc::gae_options& o) {
        constexpr const char* f = "generalized_advantage_estimation";
        floating(rewards, f, "rewards", [&](auto t) {
            using T = typename decltype(t)::type;
            auto r = matrix_of<const T>(rewards, f, "rewards");
            auto v = matrix_of<const T>(values, f, "values");
            auto mv = matrix_of<const T>(mask, f, "mask");
            auto a = matrix_of<T>(advantages, f, "advantages");
            auto ret = optional_matrix_of<T>(returns, f, "returns");
            without_gil([&] { nc::generalized_advantage_estimation(r, v, mv, a, ret, o); });
        });
    });
}

// The span table: a list of span objects, or an int64 array [S × 4] of (sample, start, end,
// position) rows, read in place (a span is four index_type fields).
vector_view<const nc::span> spans_of(const py::object& spans, std::vector<nc::span>& storage, const char* f) {
    static_assert(sizeof(nc::span) == 4 * sizeof(index_type), "span is four index_type fields");
    if (py::isinstance<py::array>(spans)) {
        const py::array& a = reinterpret_cast<const py::array&>(spans);
        if (!has_dtype<std::int64_t>(a))
            fail_type(f, ": spans has dtype ", dtype_name(a),
                      " but must be int64 (rows of sample, start, end, position)");
        if (a.ndim() != 2 || a.shape(1) != 4)
            fail_value(f, ": spans of shape ", shape_string(a), " must be [S × 4] (sample, start, end, position)");
        if (!(a.flags() & py::array::c_style) && a.size() > 4)
            fail_value(f, ": spans of shape ", shape_string(a), " must be contiguous");
        return {static_cast<const nc::span*>(a.data()), static_cast<index_type>(a.shape(0))};
    }
    try {
        storage = spans.cast<std::vector<nc::span>>();
    } catch (const py::cast_error&) {
        fail_type(f, ": spans must be a list of normkit.credit.span or an int64 array [S × 4], got ",
                  py::str(py::type::of(spans)).cast<std::string>());
    }
    return {storage.data(), static_cast<index_type>(storage.size())};
}

void bind_spans(py::module_& m) {
    m.def("span_advantages", [](py::object spans, py::object position_advantages, py::object mask,
                                py::object response_advantages, py::object output, const nc::span_options& o) {
        constexpr const char* f = "span_advantages";
        floating(position_advantages, f, "position_advantages", [&](auto t) {
            using T = typename decltype(t)::type;
            std::vector<nc::span> storage;
            auto s = spans_of(spans, storage, f);
            auto p = matrix_of<const T>(position_advantages, f, "position_advantages");
            auto mv = matrix_of<const T>(mask, f, "mask");
            auto r = optional_vector_of<const T>(response_advantages, f, "response_advantages");
            auto out = matrix_of<T>(output, f, "output");
            without_gil([&] { nc::span_advantages(s, p, mv, r, out, o); });
        });
    });
}

void bind_turns(py::module_& m) {
    m.def("a2tgpo_advantages",
          [](py::object information_gain, py::object turn_count, py::object grouping, py::object outcome_advantages,
             py::object advantages, py::object clip_scale, const nc::a2tgpo_options& o) {
              constexpr const char* f = "a2tgpo_advantages";
              floating(information_gain, f, "information_gain", [&](auto t) {
                  using T = typename decltype(t)::type;
                  auto ig = matrix_of<const T>(information_gain, f, "information_gain");
                  auto n = vector_of<const index_type>(turn_count, f, "turn_count");
                  auto g = groups_of(grouping, f);
                  auto oa = vector_of<const T>(outcome_advantages, f, "outcome_advantages");
                  auto a = matrix_of<T>(advantages, f, "advantages");
                  auto c = optional_matrix_of<T>(clip_scale, f, "clip_scale");
                  without_gil([&] { nc::a2tgpo_advantages(ig, n, g, oa, a, c, o); });
              });
          });
    m.def("mapo_advantages", [](py::object rewards, py::object turn_count, py::object grouping, py::object advantages,
                                const nc::mapo_options& o) {
        constexpr const char* f = "mapo_advantages";
        floating(rewards, f, "rewards", [&](auto t) {
            using T = typename decltype(t)::type;
            auto r = matrix_of<const T>(rewards, f, "rewards");
            auto n = vector_of<const index_type>(turn_count, f, "turn_count");
            auto g = groups_of(grouping, f);
            auto a = matrix_of<T>(advantages, f, "advantages");
            without_gil([&] { nc::mapo_advantages(r, n, g, a, o); });
        });
    });
    m.def("gtpo_advantages", [](py::object rewards, py::object turn_count, py::object grouping, py::object advantages,
                                const nc::gtpo_options& o) {
        constexpr const char* f = "gtpo_advantages";
        floating(rewards, f, "rewards", [&](auto t) {
            using T = typename decltype(t)::type;
            auto r = matrix_of<const T>(rewards, f, "rewards");
            auto n = vector_of<const index_type>(turn_count, f, "turn_count");
            auto g = groups_of(grouping, f);
            auto a = matrix_of<T>(advantages, f, "advantages");
            without_gil([&] { nc::gtpo_advantages(r, n, g, a, o); });
        });
    });
    m.def("turns_to_tokens",
          [](py::object per_turn, py::object turn_index, py::object output, const nc::turns_to_tokens_options& o) {
              constexpr const char* f = "turns_to_tokens";
              floating(per_turn, f, "per_turn", [&](auto t) {
                  using T = typename decltype(t)::type;
                  auto p = matrix_of<const T>(per_turn, f, "per_turn");
                  auto ti = matrix_of<const index_type>(turn_index, f, "turn_index");
                  auto out = matrix_of<T>(output, f, "output");
                  without_gil([&] { nc::turns_to_tokens(p, ti, out, o); });
              });
          });
}

}  // namespace
}  // namespace normkit::python

PYBIND11_MODULE(_credit, m) {
    using namespace normkit::python;
    m.doc() = "normkit.credit's token-credit kernels over numpy arrays (use normkit.credit)";
    bind_enums(m);
    bind_options(m);
    bind_span(m);
    bind_presets(m);
    bind_broadcast(m);
    bind_entropy(m);
    bind_logits(m);
    bind_returns(m);
    bind_spans(m);
    bind_turns(m);
}
