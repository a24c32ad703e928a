// DNA-Train: each pair of (real, counterfactual) groups rescaled to an equal Σ|A|.
//
//   S_R = Σ_real |A_j|, S_CF = Σ_counterfactual |A_j|, S* = (S_R + S_CF)/2,
//   A_i ← A_i · S*/S_side for every i of each side
//
// Paper: arXiv 2512.24271 (DNA-Train).
// Conventions (assumed from the paper): the batch is consecutive pairs of groups of G samples,
// real first, counterfactual second (G = options.group_size, required > 0; a length that is not a
// multiple of 2G is a normkit::error); a side whose Σ|A| is 0 stays 0. Memory: the output may be
// the input itself (each pair is read before it is written) or disjoint from it. Any thread count
// gives the same bits (pairs are independent).
#pragma once

#include "detail/inputs.hpp"
#include "group_normalize.hpp"

namespace normkit::advantage {

// dna_train's options: G and the threads.
struct dna_train_options : execution_options {
    index_type group_size = 0;  // G > 0 (required): the size of each real and each counterfactual group
};

// advantages holds consecutive pairs of groups of group_size: [real | counterfactual], [real | counterfactual], ...
template <class Advantages, class Output>
void dna_train(const Advantages& advantages, Output&& output, const dna_train_options& options = {});

}  // namespace normkit::advantage

#include "detail/dna_train.hpp"
