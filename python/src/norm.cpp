// normkit._norm: the row normalization kernels of normkit::norm over numpy arrays.
// The Python functions (normkit/norm.py) allocate the outputs and build the options; these
// take every array explicitly, None where the C++ argument is {}.
#include <chrono>

#include "bind.hpp"

namespace normkit::python {
namespace {

namespace nn = normkit::norm;
using py::arg;

template <class T>
using stat = statistic_t<T>;

void bind_options(py::module_& m) {
    py::enum_<nn::rms_norm_casting>(m, "rms_norm_casting", "16-bit rows: round x̂ first (llama) or w_eff·x̂ once (gemma)")
        .value("llama", nn::rms_norm_casting::llama)
        .value("gemma", nn::rms_norm_casting::gemma);
    py::enum_<nn::partial_count>(m, "partial_count",
                                 "pRMSNorm's k: ceil(p·n) (the paper) or floor(p·n) (the authors' code)")
        .value("ceil", nn::partial_count::ceil)
        .value("floor", nn::partial_count::floor);
    py::enum_<nn::llama_size>(m, "llama_size")
        .value("b7", nn::llama_size::b7)
        .value("b13", nn::llama_size::b13)
        .value("b34", nn::llama_size::b34)
        .value("b70", nn::llama_size::b70);

    options_class<nn::rms_norm_options>(m, "rms_norm_options", "RMSNorm, fused add + RMSNorm, QK RMS-norm")
        .def_readwrite("eps", &nn::rms_norm_options::eps, "inside the square root (default 1e-6); > 0")
        .def_readwrite("offset", &nn::rms_norm_options::offset, "w_eff = 1 + w (Gemma; default False)")
        .def_readwrite("casting", &nn::rms_norm_options::casting, "16-bit rows: gemma (default) or llama");
    options_class<nn::partial_rms_norm_options>(m, "partial_rms_norm_options", "pRMSNorm")
        .def_readwrite("p", &nn::partial_rms_norm_options::p, "share of the row the RMS takes (default 0.0625)")
        .def_readwrite("count", &nn::partial_rms_norm_options::count, "k = ceil(p·n) (default) or floor(p·n)")
        .def_readwrite("eps", &nn::partial_rms_norm_options::eps, "default 1e-6; > 0")
        .def_readwrite("eps_outside", &nn::partial_rms_norm_options::eps_outside, "r = 1/(RMS + eps) (default False)")
        .def_readwrite("offset", &nn::partial_rms_norm_options::offset, "w_eff = 1 + w (default False)")
        .def_readwrite("casting", &nn::partial_rms_norm_options::casting, "16-bit rows: gemma (default) or llama");
    options_class<nn::layer_norm_options>(m, "layer_norm_options", "LayerNorm")
        .def_readwrite("eps", &nn::layer_norm_options::eps, "added to the variance (default 1e-5); > 0");
    options_class<nn::dyt_options>(m, "dyt_options", "DyT")
        .def_readwrite("fast_tanh", &nn::dyt_options::fast_tanh,
                       "float rows: the rational tanh, 6 ulp (default False)");
    options_class<nn::derf_options>(m, "derf_options", "Derf")
        .def_readwrite("fast_erf", &nn::derf_options::fast_erf,
                       "float rows: the rational erf, 7.5 ulp (default False)");
    options_class<nn::l2_norm_options>(m, "l2_norm_options", "L2 / ScaleNorm, QK L2-norm")
        .def_readwrite("eps", &nn::l2_norm_options::eps, "the norm is clamped to at least eps (default 1e-12); > 0");
    options_class<nn::seed_norm_options>(m, "seed_norm_options", "SeeDNorm")
        .def_readwrite("eps", &nn::seed_norm_options::eps, "inside the square root (default 1e-5); > 0")
        .def_readwrite("heads", &nn::seed_norm_options::heads,
                       "contiguous chunks of the row, one seed each (default 1)");
    options_class<nn::logit_norm_options>(m, "logit_norm_options", "LogitNorm loss")
        .def_readwrite("temperature", &nn::logit_norm_options::temperature, "τ (default 1); > 0")
        .def_readwrite("delta", &nn::logit_norm_options::delta, "added to ‖f‖₂ (default 1e-7); > 0");
    options_class<nn::selective_score_options>(m, "selective_score_options", "selective classification score")
        .def_readwrite("p", &nn::selective_score_options::p, "order of the norm (default 2; inf allowed)");
    options_class<nn::select_norm_order_options>(m, "select_norm_order_options", "select_norm_order")
        .def_readwrite("candidates", &nn::select_norm_order_options::candidates, "orders tried (default 1…10)");

    py::class_<nn::norm_order_selection>(m, "norm_order_selection")
        .def_readonly("p", &nn::norm_order_selection::p)
        .def_readonly("aurc", &nn::norm_order_selection::aurc)
        .def_readonly("candidates", &nn::norm_order_selection::candidates)
        .def_readonly("aurcs", &nn::norm_order_selection::aurcs);
    py::class_<nn::dyt_llama_alphas>(m, "dyt_llama_alphas")
        .def_readonly("attention", &nn::dyt_llama_alphas::attention)
        .def_readonly("feed_forward", &nn::dyt_llama_alphas::feed_forward)
        .def_readonly("final_norm", &nn::dyt_llama_alphas::final_norm);

    py::module_ presets = m.def_submodule("presets", "rms_norm_options of named models");
    presets.def("llama", &nn::presets::llama);
    presets.def("gemma", &nn::presets::gemma);
    presets.def("qwen3", &nn::presets::qwen3);
    presets.def("gemma3", &nn::presets::gemma3);
    presets.def("olmo2", &nn::presets::olmo2);
    presets.def("zhang_sennrich_prmsnorm", &nn::presets::zhang_sennrich_prmsnorm, arg("p") = 0.0625);
}

// The rms family: input, weight, output, rstd, options.
void bind_rms(py::module_& m) {
    m.def("rms_norm_forward",
          [](py::object x, py::object w, py::object y, py::object rstd, const nn::rms_norm_options& o) {
              constexpr const char* f = "rms_norm_forward";
              dispatch(storage_of(x, f, "input"), [&](auto t) {
                  using T = typename decltype(t)::type;
                  auto in = matrix_of<const T>(x, f, "input");
                  auto wv = optional_vector_of<const T>(w, f, "weight");
                  auto out = matrix_of<T>(y, f, "output");
                  auto r = optional_vector_of<stat<T>>(rstd, f, "rstd");
                  without_gil([&] { nn::rms_norm_forward(in, wv, out, r, o); });
              });
          });
    m.def("rms_norm_backward", [](py::object dy, py::object x, py::object w, py::object dx, py::object dw,
                                  py::object rstd, const nn::rms_norm_options& o) {
        constexpr const char* f = "rms_norm_backward";
        dispatch(storage_of(x, f, "input"), [&](auto t) {
            using T = typename decltype(t)::type;
            auto g = matrix_of<const T>(dy, f, "output_gradient");
            auto in = matrix_of<const T>(x, f, "input");
            auto wv = optional_vector_of<const T>(w, f, "weight");
            auto gx = optional_matrix_of<T>(dx, f, "input_gradient");
            auto gw = optional_vector_of<stat<T>>(dw, f, "weight_gradient");
            auto r = vector_of<const stat<T>>(rstd, f, "rstd");
            without_gil([&] { nn::rms_norm_backward(g, in, wv, gx, gw, r, o); });
        });
    });
    m.def("partial_rms_count", &nn::partial_rms_count, arg("n"), arg("options"));
    m.def("partial_rms_norm_forward",
          [](py::object x, py::object w, py::object y, py::object rstd, const nn::partial_rms_norm_options& o) {
              constexpr const char* f = "partial_rms_norm_forward";
              dispatch(storage_of(x, f, "input"), [&](auto t) {
                  using T = typename decltype(t)::type;
                  auto in = matrix_of<const T>(x, f, "input");
                  auto wv = optional_vector_of<const T>(w, f, "weight");
                  auto out = matrix_of<T>(y, f, "output");
                  auto r = optional_vector_of<stat<T>>(rstd, f, "rstd");
                  without_gil([&] { nn::partial_rms_norm_forward(in, wv, out, r, o); });
              });
          });
    m.def("partial_rms_norm_backward", [](py::object dy, py::object x, py::object w, py::object dx, py::object dw,
                                          py::object rstd, const nn::partial_rms_norm_options& o) {
        constexpr const char* f = "partial_rms_norm_backward";
        dispatch(storage_of(x, f, "input"), [&](auto t) {
            using T = typename decltype(t)::type;
            auto g = matrix_of<const T>(dy, f, "output_gradient");
            auto in = matrix_of<const T>(x, f, "input");
            auto wv = optional_vector_of<const T>(w, f, "weight");
            auto gx = optional_matrix_of<T>(dx, f, "input_gradient");
            auto gw = optional_vector_of<stat<T>>(dw, f, "weight_gradient");
            auto r = vector_of<const stat<T>>(rstd, f, "rstd");
            without_gil([&] { nn::partial_rms_norm_backward(g, in, wv, gx, gw, r, o); });
        });
    });
    m.def("fused_add_rms_norm_forward",
          [](py::object x, py::object w, py::object h, py::object y, py::object rstd, const nn::rms_norm_options& o) {
              constexpr const char* f = "fused_add_rms_norm_forward";
              dispatch(storage_of(x, f, "input"), [&](auto t) {
                  using T = typename decltype(t)::type;
                  auto in = matrix_of<const T>(x, f, "input");
                  auto wv = optional_vector_of<const T>(w, f, "weight");
                  auto res = matrix_of<T>(h, f, "residual");
                  auto out = matrix_of<T>(y, f, "output");
                  auto r = optional_vector_of<stat<T>>(rstd, f, "rstd");
                  without_gil([&] { nn::fused_add_rms_norm_forward(in, wv, res, out, r, o); });
              });
          });
    m.def("fused_add_rms_norm_backward", [](py::object dy, py::object h, py::object w, py::object dh, py::object dw,
                                            py::object rstd, const nn::rms_norm_options& o) {
        constexpr const char* f = "fused_add_rms_norm_backward";
        dispatch(storage_of(h, f, "residual"), [&](auto t) {
            using T = typename decltype(t)::type;
            auto g = matrix_of<const T>(dy, f, "output_gradient");
            auto res = matrix_of<const T>(h, f, "residual");
            auto wv = optional_vector_of<const T>(w, f, "weight");
            auto gh = matrix_of<T>(dh, f, "residual_gradient");
            auto gw = optional_vector_of<stat<T>>(dw, f, "weight_gradient");
            auto r = vector_of<const stat<T>>(rstd, f, "rstd");
            without_gil([&] { nn::fused_add_rms_norm_backward(g, res, wv, gh, gw, r, o); });
        });
    });
}

void bind_layer_and_seed(py::module_& m) {
    m.def("layer_norm_forward", [](py::object x, py::object w, py::object b, py::object y, py::object mean,
                                   py::object rstd, const nn::layer_norm_options& o) {
        constexpr const char* f = "layer_norm_forward";
        dispatch(storage_of(x, f, "input"), [&](auto t) {
            using T = typename decltype(t)::type;
            auto in = matrix_of<const T>(x, f, "input");
            auto wv = optional_vector_of<const T>(w, f, "weight");
            auto bv = optional_vector_of<const T>(b, f, "bias");
            auto out = matrix_of<T>(y, f, "output");
            auto mu = optional_vector_of<stat<T>>(mean, f, "mean");
            auto r = optional_vector_of<stat<T>>(rstd, f, "rstd");
            without_gil([&] { nn::layer_norm_forward(in, wv, bv, out, mu, r, o); });
        });
    });
    m.def("layer_norm_backward", [](py::object dy, py::object x, py::object w, py::object dx, py::object dw,
                                    py::object db, py::object mean, py::object rstd, const nn::layer_norm_options& o) {
        constexpr const char* f = "layer_norm_backward";
        dispatch(storage_of(x, f, "input"), [&](auto t) {
            using T = typename decltype(t)::type;
            auto g = matrix_of<const T>(dy, f, "output_gradient");
            auto in = matrix_of<const T>(x, f, "input");
            auto wv = optional_vector_of<const T>(w, f, "weight");
            auto gx = optional_matrix_of<T>(dx, f, "input_gradient");
            auto gw = optional_vector_of<stat<T>>(dw, f, "weight_gradient");
            auto gb = optional_vector_of<stat<T>>(db, f, "bias_gradient");
            auto mu = vector_of<const stat<T>>(mean, f, "mean");
            auto r = vector_of<const stat<T>>(rstd, f, "rstd");
            without_gil([&] { nn::layer_norm_backward(g, in, wv, gx, gw, gb, mu, r, o); });
        });
    });
    m.def("seed_norm_forward", [](py::object x, py::object a, py::object b, py::object c, py::object y, py::object rstd,
                                  const nn::seed_norm_options& o) {
        constexpr const char* f = "seed_norm_forward";
        dispatch(storage_of(x, f, "input"), [&](auto t) {
            using T = typename decltype(t)::type;
            auto in = matrix_of<const T>(x, f, "input");
            auto av = vector_of<const T>(a, f, "alpha");
            auto bv = vector_of<const T>(b, f, "beta");
            auto cv = vector_of<const T>(c, f, "gamma");
            auto out = matrix_of<T>(y, f, "output");
            auto r = optional_vector_of<stat<T>>(rstd, f, "rstd");
            without_gil([&] { nn::seed_norm_forward(in, av, bv, cv, out, r, o); });
        });
    });
    m.def("seed_norm_backward",
          [](py::object dy, py::object x, py::object a, py::object b, py::object c, py::object dx, py::object da,
             py::object db, py::object dc, py::object rstd, const nn::seed_norm_options& o) {
              constexpr const char* f = "seed_norm_backward";
              dispatch(storage_of(x, f, "input"), [&](auto t) {
                  using T = typename decltype(t)::type;
                  auto g = matrix_of<const T>(dy, f, "output_gradient");
                  auto in = matrix_of<const T>(x, f, "input");
                  auto av = vector_of<const T>(a, f, "alpha");
                  auto bv = vector_of<const T>(b, f, "beta");
                  auto cv = vector_of<const T>(c, f, "gamma");
                  auto gx = optional_matrix_of<T>(dx, f, "input_gradient");
                  auto ga = optional_vector_of<stat<T>>(da, f, "alpha_gradient");
                  auto gb = optional_vector_of<stat<T>>(db, f, "beta_gradient");
                  auto gc = optional_vector_of<stat<T>>(dc, f, "gamma_gradient");
                  auto r = vector_of<const stat<T>>(rstd, f, "rstd");
                  without_gil([&] { nn::seed_norm_backward(g, in, av, bv, cv, gx, ga, gb, gc, r, o); });
              });
          });
}

void bind_pointwise(py::module_& m) {
    m.def("dyt_forward",
          [](py::object x, double alpha, py::object w, py::object b, py::object y, const nn::dyt_options& o) {
              constexpr const char* f = "dyt_forward";
              dispatch(storage_of(x, f, "input"), [&](auto t) {
                  using T = typename decltype(t)::type;
                  auto in = matrix_of<const T>(x, f, "input");
                  auto wv = optional_vector_of<const T>(w, f, "weight");
                  auto bv = optional_vector_of<const T>(b, f, "bias");
                  auto out = matrix_of<T>(y, f, "output");
                  without_gil([&] { nn::dyt_forward(in, alpha, wv, bv, out, o); });
              });
          });
    m.def("dyt_backward", [](py::object dy, py::object x, double alpha, py::object w, py::object dx, py::object dw,
                             py::object db, const nn::dyt_options& o) {
        constexpr const char* f = "dyt_backward";
        return dispatch(storage_of(x, f, "input"), [&](auto t) -> double {
            using T = typename decltype(t)::type;
            auto g = matrix_of<const T>(dy, f, "output_gradient");
            auto in = matrix_of<const T>(x, f, "input");
            auto wv = optional_vector_of<const T>(w, f, "weight");
            auto gx = optional_matrix_of<T>(dx, f, "input_gradient");
            auto gw = optional_vector_of<stat<T>>(dw, f, "weight_gradient");
            auto gb = optional_vector_of<stat<T>>(db, f, "bias_gradient");
            return without_gil([&] { return nn::dyt_backward(g, in, alpha, wv, gx, gw, gb, o); });
        });
    });
    m.def("derf_forward", [](py::object x, double alpha, double shift, py::object w, py::object b, py::object y,
                             const nn::derf_options& o) {
        constexpr const char* f = "derf_forward";
        dispatch(storage_of(x, f, "input"), [&](auto t) {
            using T = typename decltype(t)::type;
            auto in = matrix_of<const T>(x, f, "input");
            auto wv = optional_vector_of<const T>(w, f, "weight");
            auto bv = optional_vector_of<const T>(b, f, "bias");
            auto out = matrix_of<T>(y, f, "output");
            without_gil([&] { nn::derf_forward(in, alpha, shift, wv, bv, out, o); });
        });
    });
    m.def("derf_backward", [](py::object dy, py::object x, double alpha, double shift, py::object w, py::object dx,
                              py::object dw, py::object db, const nn::derf_options& o) {
        constexpr const char* f = "derf_backward";
        return dispatch(storage_of(x, f, "input"), [&](auto t) -> std::pair<double, double> {
            using T = typename decltype(t)::type;
            auto g = matrix_of<const T>(dy, f, "output_gradient");
            auto in = matrix_of<const T>(x, f, "input");
            auto wv = optional_vector_of<const T>(w, f, "weight");
            auto gx = optional_matrix_of<T>(dx, f, "input_gradient");
            auto gw = optional_vector_of<stat<T>>(dw, f, "weight_gradient");
            auto gb = optional_vector_of<stat<T>>(db, f, "bias_gradient");
            auto s = without_gil([&] { return nn::derf_backward(g, in, alpha, shift, wv, gx, gw, gb, o); });
            return {static_cast<double>(s.alpha), static_cast<double>(s.shift)};
        });
    });
    m.def("dyt_llama_alpha", &nn::dyt_llama_alpha, arg("llama_size"));
    m.attr("dyt_default_alpha") = nn::dyt_default_alpha;
    m.attr("derf_default_alpha") = nn::derf_default_alpha;
    m.attr("derf_default_shift") = nn::derf_default_shift;
}

void bind_l2(py::module_& m) {
    m.def("l2_norm_forward", [](py::object x, double gain, py::object y, const nn::l2_norm_options& o) {
        constexpr const char* f = "l2_norm_forward";
        dispatch(storage_of(x, f, "input"), [&](auto t) {
            using T = typename decltype(t)::type;
            auto in = matrix_of<const T>(x, f, "input");
            auto out = matrix_of<T>(y, f, "output");
            without_gil([&] { nn::l2_norm_forward(in, gain, out, o); });
        });
    });
    m.def("l2_norm_backward",
          [](py::object dy, py::object x, double gain, py::object dx, const nn::l2_norm_options& o) {
              constexpr const char* f = "l2_norm_backward";
              return dispatch(storage_of(x, f, "input"), [&](auto t) -> double {
                  using T = typename decltype(t)::type;
                  auto g = matrix_of<const T>(dy, f, "output_gradient");
                  auto in = matrix_of<const T>(x, f, "input");
                  auto gx = optional_matrix_of<T>(dx, f, "input_gradient");
                  return without_gil([&] { return nn::l2_norm_backward(g, in, gain, gx, o); });
              });
          });
    m.def("l2_normalize_rows", [](py::object x, const nn::l2_norm_options& o) {
        constexpr const char* f = "l2_normalize_rows";
        dispatch(storage_of(x, f, "matrix"), [&](auto t) {
            using T = typename decltype(t)::type;
            auto rows = matrix_of<T>(x, f, "matrix");
            without_gil([&] { nn::l2_normalize_rows(rows, o); });
        });
    });
    m.def("scale_norm_initial_gain", &nn::scale_norm_initial_gain, arg("n"));
    m.def("qk_norm_initial_gain", &nn::qk_norm_initial_gain, arg("sequence_length"));
    m.def("qk_l2_norm_forward",
          [](py::object q, py::object k, double gain, py::object qo, py::object ko, const nn::l2_norm_options& o) {
              constexpr const char* f = "qk_l2_norm_forward";
              dispatch(storage_of(q, f, "query"), [&](auto t) {
                  using T = typename decltype(t)::type;
                  auto qv = matrix_of<const T>(q, f, "query");
                  auto kv = matrix_of<const T>(k, f, "key");
                  auto qov = matrix_of<T>(qo, f, "query_output");
                  auto kov = matrix_of<T>(ko, f, "key_output");
                  without_gil([&] { nn::qk_l2_norm_forward(qv, kv, gain, qov, kov, o); });
              });
          });
    m.def("qk_l2_norm_backward", [](py::object dq, py::object dk, py::object q, py::object k, double gain,
                                    py::object gq, py::object gk, const nn::l2_norm_options& o) {
        constexpr const char* f = "qk_l2_norm_backward";
        return dispatch(storage_of(q, f, "query"), [&](auto t) -> double {
            using T = typename decltype(t)::type;
            auto dqv = matrix_of<const T>(dq, f, "query_output_gradient");
            auto dkv = matrix_of<const T>(dk, f, "key_output_gradient");
            auto qv = matrix_of<const T>(q, f, "query");
            auto kv = matrix_of<const T>(k, f, "key");
            auto gqv = optional_matrix_of<T>(gq, f, "query_gradient");
            auto gkv = optional_matrix_of<T>(gk, f, "key_gradient");
            return without_gil([&] { return nn::qk_l2_norm_backward(dqv, dkv, qv, kv, gain, gqv, gkv, o); });
        });
    });
    m.def("qk_rms_norm_forward", [](py::object q, py::object k, py::object qw, py::object kw, py::object qo,
                                    py::object ko, py::object qr, py::object kr, const nn::rms_norm_options& o) {
        constexpr const char* f = "qk_rms_norm_forward";
        dispatch(storage_of(q, f, "query"), [&](auto t) {
            using T = typename decltype(t)::type;
            auto qv = matrix_of<const T>(q, f, "query");
            auto kv = matrix_of<const T>(k, f, "key");
            auto qwv = optional_vector_of<const T>(qw, f, "query_weight");
            auto kwv = optional_vector_of<const T>(kw, f, "key_weight");
            auto qov = matrix_of<T>(qo, f, "query_output");
            auto kov = matrix_of<T>(ko, f, "key_output");
            auto qrv = optional_vector_of<stat<T>>(qr, f, "query_rstd");
            auto krv = optional_vector_of<stat<T>>(kr, f, "key_rstd");
            without_gil([&] { nn::qk_rms_norm_forward(qv, kv, qwv, kwv, qov, kov, qrv, krv, o); });
        });
    });
    m.def("qk_rms_norm_backward", [](py::object dq, py::object dk, py::object q, py::object k, py::object qw,
                                     py::object kw, py::object gq, py::object gk, py::object gqw, py::object gkw,
                                     py::object qr, py::object kr, const nn::rms_norm_options& o) {
        constexpr const char* f = "qk_rms_norm_backward";
        dispatch(storage_of(q, f, "query"), [&](auto t) {
            using T = typename decltype(t)::type;
            auto dqv = matrix_of<const T>(dq, f, "query_output_gradient");
            auto dkv = matrix_of<const T>(dk, f, "key_output_gradient");
            auto qv = matrix_of<const T>(q, f, "query");
            auto kv = matrix_of<const T>(k, f, "key");
            auto qwv = optional_vector_of<const T>(qw, f, "query_weight");
            auto kwv = optional_vector_of<const T>(kw, f, "key_weight");
            auto gqv = optional_matrix_of<T>(gq, f, "query_gradient");
            auto gkv = optional_matrix_of<T>(gk, f, "key_gradient");
            auto gqwv = optional_vector_of<stat<T>>(gqw, f, "query_weight_gradient");
            auto gkwv = optional_vector_of<stat<T>>(gkw, f, "key_weight_gradient");
            auto qrv = vector_of<const stat<T>>(qr, f, "query_rstd");
            auto krv = vector_of<const stat<T>>(kr, f, "key_rstd");
            without_gil(
                [&] { nn::qk_rms_norm_backward(dqv, dkv, qv, kv, qwv, kwv, gqv, gkv, gqwv, gkwv, qrv, krv, o); });
        });
    });
}

void bind_logits(py::module_& m) {
    m.def("logit_norm_loss", [](py::object z, py::object labels, py::object losses, const nn::logit_norm_options& o) {
        constexpr const char* f = "logit_norm_loss";
        return dispatch(storage_of(z, f, "logits"), [&](auto t) -> double {
            using T = typename decltype(t)::type;
            auto zv = matrix_of<const T>(z, f, "logits");
            auto lv = vector_of<const index_type>(labels, f, "labels");
            auto ov = optional_vector_of<stat<T>>(losses, f, "losses");
            return without_gil([&] { return nn::logit_norm_loss(zv, lv, ov, o); });
        });
    });
    m.def("logit_norm_loss_gradient",
          [](py::object z, py::object labels, py::object gradient, py::object losses, const nn::logit_norm_options& o) {
              constexpr const char* f = "logit_norm_loss_gradient";
              return dispatch(storage_of(z, f, "logits"), [&](auto t) -> double {
                  using T = typename decltype(t)::type;
                  auto zv = matrix_of<const T>(z, f, "logits");
                  auto lv = vector_of<const index_type>(labels, f, "labels");
                  auto gv = matrix_of<T>(gradient, f, "gradient");
                  auto ov = optional_vector_of<stat<T>>(losses, f, "losses");
                  return without_gil([&] { return nn::logit_norm_loss_gradient(zv, lv, gv, ov, o); });
              });
          });
    m.def("selective_classification_score", [](py::object z, py::object scores, const nn::selective_score_options& o) {
        constexpr const char* f = "selective_classification_score";
        dispatch(storage_of(z, f, "logits"), [&](auto t) {
            using T = typename decltype(t)::type;
            auto zv = matrix_of<const T>(z, f, "logits");
            auto sv = vector_of<stat<T>>(scores, f, "scores");
            without_gil([&] { nn::selective_classification_score(zv, sv, o); });
        });
    });
    m.def("area_under_risk_coverage", [](py::object scores, py::object losses) {
        constexpr const char* f = "area_under_risk_coverage";
        return dispatch_floating(storage_of(scores, f, "scores", true), [&](auto t) -> double {
            using T = typename decltype(t)::type;
            auto sv = vector_of<const T>(scores, f, "scores");
            auto lv = vector_of<const T>(losses, f, "losses");
            return without_gil([&] { return nn::area_under_risk_coverage(sv, lv); });
        });
    });
    m.def("select_norm_order", [](py::object z, py::object labels, const nn::select_norm_order_options& o) {
        constexpr const char* f = "select_norm_order";
        return dispatch(storage_of(z, f, "validation_logits"), [&](auto t) {
            using T = typename decltype(t)::type;
            auto zv = matrix_of<const T>(z, f, "validation_logits");
            auto lv = vector_of<const index_type>(labels, f, "labels");
            return without_gil([&] { return nn::select_norm_order(zv, lv, o); });
        });
    });
}

// For bench/python: a binding that only converts its argument (the floor of a call's cost), and
// the RMSNorm kernel repeated in C++ (the throughput a Python call is compared with).
void bind_bench_hooks(py::module_& m) {
    m.def("_noop", [](py::object x) { return matrix_of<const float>(x, "_noop", "input").rows; });
    m.def("_rms_norm_forward_loop", [](py::object x, py::object w, py::object y, py::object rstd, int repeats) {
        auto in = matrix_of<const float>(x, "_rms_norm_forward_loop", "input");
        auto wv = optional_vector_of<const float>(w, "_rms_norm_forward_loop", "weight");
        auto out = matrix_of<float>(y, "_rms_norm_forward_loop", "output");
        auto r = optional_vector_of<float>(rstd, "_rms_norm_forward_loop", "rstd");
        return without_gil([&] {
            const auto start = std::chrono::steady_clock::now();
            for (int i = 0; i < repeats; ++i) nn::rms_norm_forward(in, wv, out, r);
            return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / repeats;
        });
    });
}

}  // namespace
}  // namespace normkit::python

PYBIND11_MODULE(_norm, m) {
    using namespace normkit::python;
    m.doc() = "normkit.norm's kernels over numpy arrays (use normkit.norm)";
    m.attr("__version__") = std::to_string(NORMKIT_VERSION_MAJOR) + "." + std::to_string(NORMKIT_VERSION_MINOR) + "." +
                            std::to_string(NORMKIT_VERSION_PATCH);
    bind_options(m);
    bind_rms(m);
    bind_layer_and_seed(m);
    bind_pointwise(m);
    bind_l2(m);
    bind_logits(m);
    bind_bench_hooks(m);
}
