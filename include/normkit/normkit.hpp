// normkit: normalization kernels, advantage normalizers, token credit and
// losses for RL training code. Include this, or only the headers you use
// (each module's headers stand alone).
#pragma once

#include "version.hpp"

#include "core/error.hpp"
#include "core/execution.hpp"
#include "core/groups.hpp"
#include "core/moments.hpp"
#include "core/view.hpp"

#include "norm/derf.hpp"
#include "norm/dyt.hpp"
#include "norm/fused_add_rms_norm.hpp"
#include "norm/l2_norm.hpp"
#include "norm/layer_norm.hpp"
#include "norm/logit_norm.hpp"
#include "norm/partial_rms_norm.hpp"
#include "norm/qk_norm.hpp"
#include "norm/rms_norm.hpp"
#include "norm/seed_norm.hpp"

#include "advantage/all.hpp"

#include "credit/broadcast.hpp"
#include "credit/cort.hpp"
#include "credit/entropy.hpp"
#include "credit/logits_statistics.hpp"
#include "credit/optimal_token_baseline.hpp"
#include "credit/presets.hpp"
#include "credit/returns.hpp"
#include "credit/spans.hpp"
#include "credit/turns.hpp"

#include "loss/aggregate.hpp"
#include "loss/kl.hpp"
#include "loss/policy_loss.hpp"
#include "loss/rollout_correction.hpp"
#include "loss/value_loss.hpp"
#include "loss/covariance_selection.hpp"
#include "loss/presets.hpp"
#include "loss/surrogate.hpp"
