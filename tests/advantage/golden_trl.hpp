// Golden values from trl's own functions, run with torch 1.13.0a0 on CPU in
// float64 by scripts/golden/trl.py (generated: do not edit; rerun the driver).
// trl @ f2cd57710ae345ea6428ae95363267fcf38a3dc8
#pragma once

#include "reference/golden.hpp"

namespace normkit::golden::trl {

// trl/trainer/rloo_trainer.py: RLOOTrainer._generate_and_score_completions (advantages) (7 cases)
inline const std::vector<golden_case>& rloo() {
    static const std::vector<golden_case> cases = {
        {"issue", {{"rewards_per_func", {NAN, 1.0, 0.0, 1.0}}, {"functions", {1.0}}, {"group_size", {2.0}}, {"normalize", {1.0}}, {"clip_low", {-INFINITY}}, {"clip_high", {INFINITY}}, {"beta", {0.0}}, {"sequence_kl", {0.22021408382472307, -0.0337229619436078, -0.3391622483106814, 0.3083723264922642}}, {"advantages", {0.0, 0.0, -0.7070567847218314, 0.7070567847218314}}}},
        {"plain", {{"rewards_per_func", {0.5, 1.0, 0.0, 2.0, 1.5, -1.0}}, {"functions", {1.0}}, {"group_size", {3.0}}, {"normalize", {0.0}}, {"clip_low", {-INFINITY}}, {"clip_high", {INFINITY}}, {"beta", {0.0}}, {"sequence_kl", {-0.022943355902911744, 0.2756923953752307, 0.7490405616473383, -0.2662232779083432, -0.22939904825629986, 0.2349018149950013}}, {"advantages", {0.0, 0.75, -0.75, 1.75, 1.0, -2.75}}}},
        {"normalized", {{"rewards_per_func", {0.5, 1.0, 0.0, 2.0, 1.5, -1.0}}, {"functions", {1.0}}, {"group_size", {3.0}}, {"normalize", {1.0}}, {"clip_low", {-INFINITY}}, {"clip_high", {INFINITY}}, {"beta", {0.0}}, {"sequence_kl", {-0.04523805215705545, -0.09945579079417133, 0.34662813035845075, -0.3358228573693548, -0.46291327374408453, -0.12601515226031457}}, {"advantages", {0.0, 0.4696387990605768, -0.4696387990605768, 1.0958238644746792, 0.6261850654141025, -1.7220089298887815}}}},
        {"clip", {{"rewards_per_func", {5.0, -3.0, 0.2, 0.9, 4.0, 1.0}}, {"functions", {1.0}}, {"group_size", {2.0}}, {"normalize", {1.0}}, {"clip_low", {-1.0}}, {"clip_high", {2.0}}, {"beta", {0.0}}, {"sequence_kl", {-0.10068734020748304, 0.32109140618484755, 0.6246404197595401, -0.1585858668101846, 0.26026194036861905, -0.4005966693127261}}, {"advantages", {1.464476156938749, -1.464476156938749, -0.3417111032857082, 0.3417111032857081, 0.488158718979583, -0.488158718979583}}}},
        {"kl", {{"rewards_per_func", {1.0, 0.0, 1.0, 1.0, 0.0, 0.5}}, {"functions", {1.0}}, {"group_size", {3.0}}, {"normalize", {0.0}}, {"clip_low", {-INFINITY}}, {"clip_high", {INFINITY}}, {"beta", {0.05}}, {"sequence_kl", {0.09499944838212993, -0.11362205762745003, 0.0037988040233640774, 0.5194989218390988, 0.1567048324079725, 0.8244102364551136}}, {"advantages", {0.49250444624079126, -0.9918489408084903, 0.4993444945676986, 0.7485529306296222, -0.7242375126630433, -0.024315417966578823}}}},
        {"clip_kl_normalized", {{"rewards_per_func", {3.0, NAN, 1.0, -2.0, 0.5, 0.0, NAN, NAN}}, {"functions", {1.0}}, {"group_size", {4.0}}, {"normalize", {1.0}}, {"clip_low", {-1.0}}, {"clip_high", {1.0}}, {"beta", {0.1}}, {"sequence_kl", {0.20521891374728496, -0.0023757352505672236, 0.7817559477521863, -0.39961870348528616, -0.8368224375469068, -0.11881175704793434, -0.5930575736801175, 0.019160955154743586}}, {"advantages", {0.806337393069123, 0.0, 0.7365060743656823, -1.5428434674348055, 0.4617179268963863, -0.4617179268963863, 0.0, 0.0}}}},
        {"two_functions", {{"rewards_per_func", {1.0, NAN, NAN, NAN, 0.0, 2.0, 1.0, 1.0}}, {"functions", {2.0}}, {"group_size", {2.0}}, {"normalize", {1.0}}, {"clip_low", {-INFINITY}}, {"clip_high", {INFINITY}}, {"beta", {0.0}}, {"sequence_kl", {0.7242486731317888, 0.9372358839142167, -0.033566833681472175, -0.18902899864939848}}, {"advantages", {0.0, 0.0, 0.0, 0.0}}}},
    };
    return cases;
}

}  // namespace normkit::golden::trl
