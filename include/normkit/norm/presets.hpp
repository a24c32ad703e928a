// The RMSNorm options of the models that compute it their own way, for
// rms_norm_forward / backward, fused_add_rms_norm_* and the RMS forms of
// QK-norm (qk_norm.hpp), which all take rms_norm_options.
//
// | preset     | ε     | w_eff  | casting | computes as (Hugging Face transformers)                        |
// |------------|-------|--------|---------|----------------------------------------------------------------|
// | llama()    | 1e-6  | w      | llama   | models/llama/modeling_llama.py, LlamaRMSNorm                   |
// | gemma()    | 1e-6  | 1 + w  | gemma   | models/gemma/modeling_gemma.py, GemmaRMSNorm                   |
// | qwen3()    | 1e-6  | w      | llama   | models/qwen3/modeling_qwen3.py, Qwen3RMSNorm (q_norm, k_norm)  |
// | gemma3()   | 1e-6  | 1 + w  | gemma   | models/gemma3/modeling_gemma3.py, Gemma3RMSNorm (q_norm, k_norm) |
// | olmo2()    | 1e-5  | w      | gemma   | models/olmo2/modeling_olmo2.py, Olmo2RMSNorm (q_norm, k_norm)  |
//
// llama casting rounds x̂ to the storage type before the weight multiply, as
// those modules cast the normalized hidden state back to the input dtype first;
// gemma casting multiplies in fp32 and rounds once (rms_norm.hpp). ε is each
// class's default; a released checkpoint may set its own (config.rms_norm_eps):
// set options.eps after taking the preset. The default rms_norm_options{} is
// gemma casting without offset, ε = 1e-6: the one rounding, the more accurate.
//
// pRMSNorm (partial_rms_norm.hpp), as its authors' code computes it:
// | zhang_sennrich_prmsnorm(p) | k = ⌊p·n⌋, ε = 1e-8 outside the root, w | bzhangGo/rmsnorm rmsnorm_torch.py, RMSNorm(d, p) |
#pragma once

#include "partial_rms_norm.hpp"
#include "rms_norm.hpp"

namespace normkit::norm::presets {

namespace detail {

inline rms_norm_options rms(double eps, bool offset, rms_norm_casting casting) {
    rms_norm_options options;
    options.eps = eps;
    options.offset = offset;
    options.casting = casting;
    return options;
}

}  // namespace detail

// Llama's RMSNorm: w, x̂ rounded to the storage type before the weight multiply.
inline rms_norm_options llama() { return detail::rms(1e-6, false, rms_norm_casting::llama); }

// Gemma's RMSNorm: the zero-centred weight 1 + w, all in fp32, one rounding.
inline rms_norm_options gemma() { return detail::rms(1e-6, true, rms_norm_casting::gemma); }

// Qwen3's per-head QK-norm (and its other RMSNorms): as llama().
inline rms_norm_options qwen3() { return detail::rms(1e-6, false, rms_norm_casting::llama); }

// Gemma 3's per-head QK-norm: as gemma().
inline rms_norm_options gemma3() { return detail::rms(1e-6, true, rms_norm_casting::gemma); }

// OLMo 2's full-width QK-norm: w multiplied before the one cast back, ε = 1e-5. That is
// Hugging Face transformers' Olmo2RMSNorm since PR #38131 (May 2025; releases from 4.53 —
// 4.52.x is uncertain) and OLMo 2's own training code; transformers 4.47 to 4.52 cast x̂ to the
// input dtype before the weight, which rms_norm_casting::llama reproduces.
inline rms_norm_options olmo2() { return detail::rms(1e-5, false, rms_norm_casting::gemma); }

// pRMSNorm as Zhang & Sennrich's own RMSNorm(d, p) computes it: k = int(d·p), r = 1/(RMS + ε),
// ε = 1e-8 (the default partial_rms_norm_options are the paper's ⌈p·n⌉, ε inside, 1e-6).
inline partial_rms_norm_options zhang_sennrich_prmsnorm(double p = 0.0625) {
    partial_rms_norm_options options;
    options.p = p;
    options.count = partial_count::floor;
    options.eps = 1e-8;
    options.eps_outside = true;
    return options;
}

}  // namespace normkit::norm::presets
