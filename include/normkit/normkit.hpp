// normkit: normalization kernels, advantage normalizers, token credit and
// losses for RL training code. Include this, or only the headers you use.
#pragma once

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/reduce.hpp"
#include "core/view.hpp"
#include "norm/layer_norm.hpp"
#include "norm/rms_norm.hpp"
