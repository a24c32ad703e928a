// The outcome-level estimators of the GRPO family, one header each (the formula, paper and
// conventions open each header); this umbrella includes them all:
//
//   grpo.hpp         grpo, dr_grpo          (Shao et al. 2024; Liu et al. 2025)
//   rloo.hpp         rloo                   (Ahmadian et al. 2024)
//   opo.hpp          opo                    (Hao et al. 2025)
//   gpg.hpp          gpg                    (Chu et al. 2025)
//   gapo.hpp         gapo                   (arXiv 2510.21830)
//   pass_at_k.hpp    pass_at_k              (verl grpo_passk)
//   dapo_filter.hpp  dapo_filter            (Yu et al. 2025)
//   w_reinforce.hpp  w_reinforce            (Zhu et al. 2025)
//   dna_train.hpp    dna_train              (arXiv 2512.24271)
//
// Every one takes its <name>_options last, defaulted, inheriting execution_options: any thread
// count gives the same bits. The per-token form every framework trains on, A[i, t] = A_i where
// m[i, t] ≠ 0, is credit::broadcast_advantages (credit/broadcast.hpp).
#pragma once

#include "dapo_filter.hpp"
#include "dna_train.hpp"
#include "gapo.hpp"
#include "gpg.hpp"
#include "grpo.hpp"
#include "opo.hpp"
#include "pass_at_k.hpp"
#include "rloo.hpp"
#include "w_reinforce.hpp"
