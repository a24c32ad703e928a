// Every advantage normalizer: group_normalize and its options, the mergeable
// moments, the named estimators and the framework presets.
#pragma once

#include "bnpo.hpp"
#include "estimators.hpp"
#include "gepo.hpp"
#include "group_normalize.hpp"
#include "../core/groups.hpp"
#include "moments.hpp"
#include "multi_reward.hpp"
#include "presets.hpp"
#include "returns.hpp"
#include "scrl.hpp"
#include "spo.hpp"
#include "whiten.hpp"
