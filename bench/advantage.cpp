// Advantage normalizers on one million fp32 rewards: contiguous groups of 16
// and ragged groups (sizes 1..31, ids shuffled; the same ids in runs, one run
// per group, as verl lays out the n responses of a prompt, ascending; and the
// runs under labels that do not ascend, as np.unique's inverse of string uids
// gives), against memcpy of the reward array and, when installed, libtorch doing
// the same arithmetic.
//
// Bytes are the minimum traffic: read the rewards, write the advantages
// (2·n·4). The ragged cases also read 8-byte ids, which are not counted, so
// their GB/s reads against the same memcpy. ns per sample = time / 10⁶.
#include "harness.hpp"
#include "yardstick.hpp"

#include <normkit/advantage/estimators.hpp>
#include <normkit/advantage/presets.hpp>

#ifdef NORMKIT_HAVE_TORCH
#include <torch/torch.h>
#endif

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>

namespace {

using namespace normkit;
using namespace normkit::advantage;
using bench::register_case;

constexpr index_type samples = 1 << 20;  // one million (2²⁰)

struct batch {
    std::vector<float> rewards, output;
    std::vector<std::int64_t> ragged_ids, run_ids, relabelled_ids;  // run_ids: the same groups, each one run
};

std::shared_ptr<batch> make_batch() {
    auto data = std::make_shared<batch>();
    data->rewards = *bench::random_buffer<float>(samples, 1, 0.5f, 0.5f);
    for (auto& value : data->rewards) value = value > 0.5f ? 1.0f : value;  // a mix of binary-looking and continuous
    data->output.assign(samples, 0.0f);
    std::mt19937 generator(2);
    std::int64_t group = 0;
    for (index_type i = 0; i < samples;) {
        const index_type size = std::min<index_type>(1 + static_cast<index_type>(generator() % 31), samples - i);
        for (index_type j = 0; j < size; ++j) data->ragged_ids.push_back(group * 7919 + 13);
        ++group;
        i += size;
    }
    data->run_ids = data->ragged_ids;
    std::vector<std::int64_t> label(static_cast<std::size_t>(group));
    std::iota(label.begin(), label.end(), std::int64_t(0));
    std::shuffle(label.begin(), label.end(), generator);
    for (const std::int64_t id : data->run_ids)
        data->relabelled_ids.push_back(label[static_cast<std::size_t>((id - 13) / 7919)] * 7919 + 13);
    std::shuffle(data->ragged_ids.begin(), data->ragged_ids.end(), generator);
    return data;
}

const bool registered = [] {
    auto data = make_batch();
    const double bytes = 2.0 * samples * sizeof(float);
    const std::string contiguous = "1M_G16", ragged = "1M_ragged", runs = "1M_ragged_runs",
                      relabelled = "1M_ragged_runs_relabelled";
    const std::string operations[] = {"grpo", "dr_grpo", "rloo", "trl_group"};
    for (const auto& operation : operations) {
        for (const auto& shape : {contiguous, ragged, runs, relabelled}) {
            bench::register_memcpy(operation, shape, bytes);
            const std::vector<std::int64_t>* ids = shape == ragged       ? &data->ragged_ids
                                                   : shape == runs       ? &data->run_ids
                                                   : shape == relabelled ? &data->relabelled_ids
                                                                         : nullptr;
            register_case(operation, shape, "normkit", bytes, [data, operation, ids] {
                const groups grouping = ids ? group_ids(*ids) : contiguous_groups(16);
                if (operation == "grpo")
                    grpo(data->rewards, grouping, data->output);
                else if (operation == "dr_grpo")
                    dr_grpo(data->rewards, grouping, data->output);
                else if (operation == "rloo")
                    rloo(data->rewards, grouping, data->output);
                else
                    group_normalize(data->rewards, grouping, data->output, presets::trl());
                benchmark::DoNotOptimize(data->output.data());
            });
        }
    }
    // The yardsticks: plain per-group loops (contiguous) and a hash map of group sums (ragged), with each
    // estimator's center and scale; TRL's group rule is GRPO's with ε = 1e-4.
    for (const auto& operation : operations) {
        bench::yardstick::group_rule rule;
        rule.leave_one_out = operation == "rloo";
        rule.scale = operation == "grpo" || operation == "trl_group";
        rule.eps = operation == "trl_group" ? 1e-4f : 1e-6f;
        register_case(operation, contiguous, "yardstick", bytes, [data, rule] {
            bench::yardstick::contiguous_groups(data->rewards.data(), data->output.data(), samples, 16, rule);
            benchmark::DoNotOptimize(data->output.data());
        });
        for (const auto& shape : {ragged, runs, relabelled}) {
            const std::int64_t* ids = shape == ragged ? data->ragged_ids.data()
                                      : shape == runs ? data->run_ids.data()
                                                      : data->relabelled_ids.data();
            register_case(operation, shape, "yardstick", bytes, [data, rule, ids] {
                bench::yardstick::ragged_groups(data->rewards.data(), ids, data->output.data(), samples, rule);
                benchmark::DoNotOptimize(data->output.data());
            });
        }
    }
    register_case("grpo", contiguous, "normkit_2threads", bytes, [data] {
        grpo_options options;
        options.threads = 2;
        grpo(data->rewards, contiguous_groups(16), data->output, options);
        benchmark::DoNotOptimize(data->output.data());
    });
    register_case("grpo", runs, "normkit_2threads", bytes, [data] {
        grpo_options options;
        options.threads = 2;
        grpo(data->rewards, group_ids(data->run_ids), data->output, options);
        benchmark::DoNotOptimize(data->output.data());
    });
#ifdef NORMKIT_HAVE_TORCH
    // verl's vectorized arithmetic in torch: view(-1, G), mean, unbiased std, (r − μ)/(σ + ε).
    register_case("grpo", contiguous, "torch", bytes, [data] {
        torch::set_num_threads(1);
        const auto rewards = torch::from_blob(data->rewards.data(), {samples / 16, 16});
        const auto mean = rewards.mean(-1, true);
        const auto std = rewards.std(-1, true, true);
        auto out = (rewards - mean) / (std + 1e-6);
        benchmark::DoNotOptimize(out.data_ptr());
    });
    register_case("dr_grpo", contiguous, "torch", bytes, [data] {
        torch::set_num_threads(1);
        const auto rewards = torch::from_blob(data->rewards.data(), {samples / 16, 16});
        auto out = rewards - rewards.mean(-1, true);
        benchmark::DoNotOptimize(out.data_ptr());
    });
    // Ragged, as verl's groupwise helper does it: factorize ids, bincount-style index_add, gather back.
    register_case("grpo", ragged, "torch", bytes, [data] {
        torch::set_num_threads(1);
        const auto rewards = torch::from_blob(data->rewards.data(), {samples});
        const auto ids = torch::from_blob(data->ragged_ids.data(), {samples}, torch::kLong);
        const auto unique = torch::_unique2(ids, false, true, false);
        const auto& inverse = std::get<1>(unique);
        const auto groups = std::get<0>(unique).size(0);
        const auto count = torch::zeros({groups}).index_add_(0, inverse, torch::ones({samples}));
        const auto sum = torch::zeros({groups}).index_add_(0, inverse, rewards);
        const auto mean = sum / count;
        const auto centred = rewards - mean.index_select(0, inverse);
        const auto squares = torch::zeros({groups}).index_add_(0, inverse, centred * centred);
        const auto std = torch::where(count > 1, (squares / (count - 1).clamp_min(1)).sqrt(), torch::ones({groups}));
        auto out = torch::where((count > 1).index_select(0, inverse), centred, rewards) /
                   (std.index_select(0, inverse) + 1e-6);
        benchmark::DoNotOptimize(out.data_ptr());
    });
#endif
    return true;
}();

}  // namespace
