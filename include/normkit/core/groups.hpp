// Groups of samples that share a prompt: contiguous blocks of G, or arbitrary
// integer ids (ragged groups of any size, members in any order).
//
//   contiguous_groups(G)      samples [kG, (k+1)G) form group k (TRL, OpenRLHF after reordering)
//   group_ids(ids)            samples with equal ids form a group (verl's uid), any order and size
//   group_ids(ids, count)     the same with ids declared to lie in [0, count); an id outside is "unknown"
//
// Conventions:
// - ids are int64 or int32 (torch.long / torch.int); negative ids are bad
//   input, as is an id ≥ count when a count is declared, or a sample count
//   that is not a multiple of G.
// - With undeclared ids, groups are numbered by first appearance; with a
//   declared count, group k is id k and may be empty.
// - Resolving ragged ids costs a SIMD scan that checks them, one pass of a direct table
//   (ids < 4n + 64) or an open-addressing hash table (sized at first as the thread's last call
//   needed, so that a training loop's alike batches rehash nothing), and, when member lists are
//   wanted, one counting sort; group_normalize reuses per-thread buffers for it. A sample whose id
//   equals the one before takes that sample's group without a lookup, so ids in runs (verl repeats
//   each uid n times) cost a compare each. The contiguous case is pure arithmetic.
// - Ids where each group is one run (repeated uids, numbered in order or by any distinct labels)
//   need none of that per sample: id_runs hands a caller the runs a block at a time, in one
//   branch-free pass over the ids, and distinct_runs checks the runs' ids once a run (none at all
//   when they ascend).
#pragma once

#include "error.hpp"
#include "stream.hpp"
#include "view.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace normkit {

struct groups {
    index_type size = 0;  // > 0: contiguous groups of this size
    const std::int64_t* ids64 = nullptr;
    const std::int32_t* ids32 = nullptr;
    index_type id_count = 0;
    index_type declared_count = -1;  // ≥ 0: ids must lie in [0, declared_count)

    bool contiguous() const { return size > 0; }
};

inline groups contiguous_groups(index_type group_size) {
    core::require(group_size > 0, "group_size must be positive, got ", group_size);
    groups result;
    result.size = group_size;
    return result;
}

namespace core {

// groups over caller ids of either width: `slot` is where the pointer goes (ids64 or ids32).
template <class Id>
groups ids_groups(vector_view<const Id> ids, const Id* groups::*slot, index_type group_count) {
    require(ids.data != nullptr || ids.size == 0, "group ids are null");
    groups result;
    result.*slot = ids.data;
    result.id_count = ids.size;
    result.declared_count = group_count;
    return result;
}

}  // namespace core

inline groups group_ids(vector_view<const std::int64_t> ids, index_type group_count = -1) {
    return core::ids_groups(ids, &groups::ids64, group_count);
}

inline groups group_ids(vector_view<const std::int32_t> ids, index_type group_count = -1) {
    return core::ids_groups(ids, &groups::ids32, group_count);
}

// groups keep a pointer to the ids, so ids from a temporary would dangle once the full expression
// ends: name the ids first (docs/api.md, Ownership).
template <class Ids, std::enable_if_t<core::is_owning_temporary_v<Ids>, int> = 0>
groups group_ids(Ids&& temporary_ids, index_type group_count = -1) = delete;

// The memory of the group ids (none for contiguous groups), for the aliasing checks of
// core/view.hpp: an output may not overlap the ids it is grouped by ("group ids").
inline core::memory_span span_of(const groups& grouping) {
    if (grouping.ids64) return core::span_of(vector_view<const std::int64_t>(grouping.ids64, grouping.id_count));
    return core::span_of(vector_view<const std::int32_t>(grouping.ids32, grouping.id_count));
}

namespace core {

namespace detail {

// Ids i − 1 and i of samples [i, stop) (i ≥ 1) compared: a run ends at each i whose id differs from
// the one before, appended to ends[found ...]; `down` notes an id below the one before. Branch-free:
// 8 ids a step where AVX-512 or AVX2 compress the indices of the ends into a register (stored whole,
// so ends has 8 slots of slack; the register form, as Zen 4 runs the memory form slowly), asking
// for the ids prefetch_bytes ahead (the scan is the pass that reads them from memory), and one
// id a step elsewhere (each writes ends[found] and moves found on where a run ends). The AVX-512
// widening is maskz: GCC 12 reports the unmasked form's undefined source as uninitialized.
template <class Id>
index_type run_ends(const Id* ids, index_type i, index_type stop, index_type* ends, index_type found, bool& down) {
    static_assert(sizeof(index_type) == 8, "the ends are 64-bit lanes");
#if defined(__AVX512F__)
    const auto load = [](const Id* p) {
        if constexpr (sizeof(Id) == 8)
            return _mm512_loadu_si512(p);
        else
            return _mm512_maskz_cvtepi32_epi64(0xff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    };
    __m512i index = _mm512_add_epi64(_mm512_set1_epi64(i), _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7));
    __mmask8 below = 0;
    for (; i + 8 <= stop; i += 8) {
        prefetch_ahead(ids + i);
        const __m512i id = load(ids + i), previous = load(ids + i - 1);
        const __mmask8 ending = _mm512_cmpneq_epi64_mask(id, previous);
        below = static_cast<__mmask8>(below | _mm512_cmplt_epi64_mask(id, previous));
        _mm512_storeu_si512(ends + found, _mm512_maskz_compress_epi64(ending, index));
        found += __builtin_popcount(ending);
        index = _mm512_add_epi64(index, _mm512_set1_epi64(8));
    }
    down = down || below != 0;
#elif defined(__AVX2__)
    // The 4-lane compress: for each mask, the 32-bit halves of its set lanes first (vpermd).
    static constexpr struct lanes {
        alignas(32) std::int32_t order[16][8] = {};
        constexpr lanes() {
            for (int mask = 0; mask < 16; ++mask)
                for (int lane = 0, k = 0; lane < 4; ++lane)
                    if (mask >> lane & 1) {
                        order[mask][2 * k] = 2 * lane;
                        order[mask][2 * k + 1] = 2 * lane + 1;
                        ++k;
                    }
        }
    } compress{};
    const auto load = [](const Id* p) {
        if constexpr (sizeof(Id) == 8)
            return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
        else
            return _mm256_cvtepi32_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    };
    __m256i below = _mm256_setzero_si256();
    for (; i + 8 <= stop; i += 8) {
        prefetch_ahead(ids + i);
        for (int half = 0; half < 8; half += 4) {
            const __m256i id = load(ids + i + half), previous = load(ids + i + half - 1);
            const int ending = 15 ^ _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(id, previous)));
            below = _mm256_or_si256(below, _mm256_cmpgt_epi64(previous, id));
            const __m256i index = _mm256_add_epi64(_mm256_set1_epi64x(i + half), _mm256_setr_epi64x(0, 1, 2, 3));
            const __m256i order = _mm256_load_si256(reinterpret_cast<const __m256i*>(compress.order[ending]));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(ends + found), _mm256_permutevar8x32_epi32(index, order));
            found += __builtin_popcount(static_cast<unsigned>(ending));
        }
    }
    down = down || !_mm256_testz_si256(below, below);
#endif
    bool tail_down = false;
    for (; i < stop; ++i) {
        ends[found] = i;
        found += ids[i] != ids[i - 1];
        tail_down |= ids[i] < ids[i - 1];
    }
    down = down || tail_down;
    return found;
}

// From `from`, a run's start, to `samples`, a run's end: sets ends[k] = the end of run k for the runs
// that end in whole chunks of `chunk` samples, scanned until one has (or the ids end); returns their
// number (≤ chunk + 1).
template <class Id>
index_type scan_runs(const Id* ids, index_type samples, index_type from, index_type chunk, index_type* ends,
                     bool& descent) {
    index_type found = 0, i = from + 1;
    while (found == 0 && i < samples) {
        const index_type stop = std::min(samples, i + chunk);
        found = run_ends(ids, i, stop, ends, found, descent);
        i = stop;
    }
    if (i >= samples) ends[found++] = samples;  // the last run ends with the ids
    return found;
}

}  // namespace detail

// The runs of equal ragged ids, a block at a time: the runs that start in samples [first, last) (all
// of them by default), so that threads can take shares of the ids. When each group is one run (ids
// in ascending order, as repeated uids numbered in order give, or any distinct labels, as
// np.unique's inverse of repeated uids gives), run k of all the ids is group k in the numbering by
// first appearance, and a caller can take the groups straight from the runs. ascending() says
// whether the share's ids (and the pair where it begins) never went down, which proves that; for ids
// that went down, distinct_runs over every run's id decides. usable() is false for ids this cannot
// take (not one per sample), and for ids whose first or last is bad input (negative, or at or above
// a declared count, which for ascending ids checks every id): the caller resolves those the general
// way (resolve_cached), which names what is wrong.
class id_runs {
public:
    // Runs ending within one next(): at most `most`; the ends array needs `slots`.
    static constexpr index_type chunk = 512, most = chunk + 1, slots = chunk + 16;

    id_runs(const groups& grouping, index_type samples, index_type first = 0, index_type last = -1)
        : ids64_(grouping.ids64), ids32_(grouping.ids32) {
        usable_ = !grouping.contiguous() && grouping.id_count == samples && (ids64_ || ids32_) &&
                  (samples == 0 ||
                   (id(0) >= 0 && (grouping.declared_count < 0 || id(samples - 1) < grouping.declared_count)));
        if (!usable_) return;
        // A share starts at the first run that starts in it: past the rest of a run begun before it.
        const auto run_start = [&](index_type i) {
            while (i > 0 && i < samples && id(i) == id(i - 1)) ++i;
            return i;
        };
        begin_ = run_start(first);
        end_ = run_start(last < 0 ? samples : last);
        ascending_ = !(begin_ > 0 && begin_ < samples && id(begin_) < id(begin_ - 1));
    }

    bool usable() const { return usable_; }
    bool ascending() const { return ascending_; }
    index_type begin() const { return begin_; }  // where the next block's first run starts
    index_type end() const { return end_; }      // where the share's last run ends
    bool done() const { return begin_ >= end_; }
    std::int64_t id(index_type i) const { return ids64_ ? ids64_[i] : ids32_[i]; }

    // The next block of runs: ends[k] (ends has `slots` slots) is the end of the block's run k, which
    // starts at ends[k − 1] (run 0 at the begin() before the call). 0 at the end of the share.
    index_type next(index_type* ends) {
        if (!usable_ || begin_ >= end_) return 0;
        bool descent = false;
        const index_type found = ids64_ ? detail::scan_runs(ids64_, end_, begin_, chunk, ends, descent)
                                        : detail::scan_runs(ids32_, end_, begin_, chunk, ends, descent);
        ascending_ = ascending_ && !descent;
        begin_ = ends[found - 1];
        return found;
    }

private:
    const std::int64_t* ids64_;
    const std::int32_t* ids32_;
    index_type begin_ = 0, end_ = 0;
    bool usable_ = false, ascending_ = false;
};

// The resolved grouping: group g's members, in sample order.
struct group_layout {
    index_type samples = 0;
    index_type count = 0;             // number of groups
    index_type size = 0;              // > 0: contiguous
    std::vector<index_type> offsets;  // ragged: members of g are order[offsets[g] .. offsets[g+1])
    std::vector<index_type> order;
    std::vector<std::int64_t> labels;  // ragged: the caller's id of each group (for messages)

    index_type members(index_type g) const { return size > 0 ? size : offsets[g + 1] - offsets[g]; }
    std::int64_t label(index_type g) const { return size > 0 ? static_cast<std::int64_t>(g) : labels[g]; }
    template <class Body>
    void for_members(index_type g, Body&& body) const {
        if (size > 0) {
            for (index_type i = g * size, end = i + size; i < end; ++i) body(i);
        } else {
            for (index_type k = offsets[g]; k < offsets[g + 1]; ++k) body(order[k]);
        }
    }
};

namespace detail {

// Checks every id (non-negative, below a declared count); returns the largest. The scan has no early
// exit, so that it compiles to SIMD min / max; a bad id is then found by a second scan, for the message.
template <class Id>
std::int64_t checked_largest_id(const Id* ids, index_type samples, index_type declared_count) {
    std::int64_t smallest = 0, largest = -1;
    for (index_type i = 0; i < samples; ++i) {
        smallest = std::min<std::int64_t>(smallest, ids[i]);
        largest = std::max<std::int64_t>(largest, ids[i]);
    }
    if (smallest >= 0 && (declared_count < 0 || largest < declared_count)) return largest;
    for (index_type i = 0; i < samples; ++i) {
        require(ids[i] >= 0, "group ids[", i, "] is negative (", ids[i], ")");
        if (declared_count >= 0 && ids[i] >= declared_count)
            fail("group ids[", i, "] = ", ids[i], " is unknown: ids must lie in [0, ", declared_count, ")");
    }
    return largest;
}

// Small ids: a direct table of `largest + 1` slots, groups numbered by first appearance.
template <class Id>
void number_by_table(group_layout& layout, index_type* dense, const Id* ids, index_type samples, std::int64_t largest,
                     std::vector<index_type>& storage) {
    storage.assign(static_cast<std::size_t>(largest + 1), -1);
    index_type* table = storage.data();
    index_type count = 0;
    std::int64_t previous = -1;  // ids are ≥ 0: no sample matches before the first
    index_type previous_group = -1;
    for (index_type i = 0; i < samples; ++i) {
        const std::int64_t value = ids[i];
        if (value != previous) {  // within a run of one id (verl repeats each uid n times), no table access
            previous = value;
            index_type& slot = table[value];
            if (slot < 0) {
                slot = count++;
                layout.labels.push_back(value);
            }
            previous_group = slot;
        }
        dense[i] = previous_group;
    }
    layout.count = count;
}

// Large ids: open addressing (linear probing, Fibonacci hashing) of (id, group) pairs in a
// power-of-two table kept at most half full, grown with the number of groups (not samples), so it
// stays cache-resident. Groups numbered by first appearance. The home slot of the id `ahead`
// samples on is fetched early: in shuffled order every probe is to a random slot.
template <class Id>
void number_by_hash(group_layout& layout, index_type* dense, const Id* ids, index_type samples) {
    using slot_type = std::pair<std::int64_t, index_type>;
    thread_local std::vector<slot_type> storage;
    // The table starts at the largest size this thread's calls have needed (a training loop's batches
    // are alike, so it rehashes nothing), but no larger than the 2n slots that hold n distinct ids (1024
    // at least): a small batch after a large one does not clear the large table.
    thread_local int last_bits = 10;
    int bits = 10;
    while (bits < last_bits && (std::size_t(1) << bits) < 2 * static_cast<std::size_t>(samples)) ++bits;
    std::size_t capacity = std::size_t(1) << bits;
    int shift = 64 - bits;
    storage.assign(capacity, {-1, -1});
    slot_type* slots = storage.data();
    const auto home = [&](std::int64_t value) {
        return static_cast<std::size_t>((static_cast<std::uint64_t>(value) * 0x9E3779B97F4A7C15ull) >> shift);
    };
    const auto find = [&](std::int64_t value) {
        std::size_t slot = home(value);
        while (slots[slot].first >= 0 && slots[slot].first != value) slot = (slot + 1) & (capacity - 1);
        return slot;
    };
    index_type count = 0;
    const auto insert = [&](std::int64_t value) {
        const index_type group = count++;
        slots[find(value)] = {value, group};
        layout.labels.push_back(value);
        if (2 * static_cast<std::size_t>(count) > capacity) {  // rehash into twice the room
            capacity *= 2;
            --shift;
            ++bits;
            storage.assign(capacity, {-1, -1});
            slots = storage.data();
            for (index_type g = 0; g < count; ++g) slots[find(layout.labels[g])] = {layout.labels[g], g};
        }
        return group;
    };
    const auto slot_of = [&](index_type j) { return home(ids[j]); };
    std::int64_t previous = -1;
    index_type previous_group = -1;
    for (index_type i = 0; i < samples; ++i) {
        core::prefetch_gathered(slots, slot_of, i, samples);
        const std::int64_t value = ids[i];
        if (value != previous) {  // the same id as the sample before: its group, without a probe
            previous = value;
            const slot_type& slot = slots[find(value)];
            previous_group = slot.first < 0 ? insert(value) : slot.second;
        }
        dense[i] = previous_group;
    }
    layout.count = count;
    last_bits = std::max(last_bits, bits);
}

// The caller's ids of either width: checked, then numbered by first appearance (or by id, with a
// declared count).
template <class Id>
void number_groups(group_layout& layout, index_type* dense, const Id* ids, index_type samples,
                   index_type declared_count, std::vector<index_type>& table) {
    const std::int64_t largest = checked_largest_id(ids, samples, declared_count);
    if (declared_count >= 0) {
        layout.count = declared_count;
        layout.labels.resize(static_cast<std::size_t>(layout.count));
        for (index_type g = 0; g < layout.count; ++g) layout.labels[g] = g;
        for (index_type i = 0; i < samples; ++i) dense[i] = static_cast<index_type>(ids[i]);
    } else if (largest < 4 * samples + 64) {
        number_by_table(layout, dense, ids, samples, largest, table);
    } else {
        number_by_hash(layout, dense, ids, samples);
    }
}

// Counting sort: the members of each group in sample order.
inline void sort_members(group_layout& layout, const std::vector<index_type>& dense, index_type samples,
                         std::vector<index_type>& next) {
    layout.offsets.assign(static_cast<std::size_t>(layout.count + 1), 0);
    for (index_type i = 0; i < samples; ++i) ++layout.offsets[dense[i] + 1];
    for (index_type g = 0; g < layout.count; ++g) layout.offsets[g + 1] += layout.offsets[g];
    layout.order.resize(static_cast<std::size_t>(samples));
    next.assign(layout.offsets.begin(), layout.offsets.end() - 1);  // the next free position of each group
    for (index_type i = 0; i < samples; ++i) layout.order[next[dense[i]]++] = i;
}

}  // namespace detail

// Whether the ids of runs of equal ids (one per run, in sample order) are all different, so that each
// group is one run: the ids checked and numbered as resolve numbers samples (a direct table for small
// ids, the hash table otherwise), over the runs alone, without a declared count. A negative id gives
// false, for the general path to name.
inline bool distinct_runs(const std::vector<std::int64_t>& run_ids) {
    if (std::any_of(run_ids.begin(), run_ids.end(), [](std::int64_t id) { return id < 0; })) return false;
    thread_local group_layout layout;
    thread_local std::vector<index_type> numbers, table;
    const auto runs = static_cast<index_type>(run_ids.size());
    layout.labels.clear();
    numbers.resize(run_ids.size());
    detail::number_groups(layout, numbers.data(), run_ids.data(), runs, -1, table);
    return layout.count == runs;
}

// Fills `layout` (reusing its storage) for n samples; `dense` is scratch for the per-sample group index.
// With with_members false only dense (each sample's group number), count and labels are filled.
inline void resolve_into(group_layout& layout, std::vector<index_type>& dense, const groups& grouping,
                         index_type samples, const char* what, bool with_members = true) {
    layout.samples = samples;
    layout.count = 0;
    layout.size = 0;
    layout.labels.clear();
    if (grouping.contiguous()) {
        core::require(samples % grouping.size == 0, what, " has ", samples, " samples, not a multiple of group_size ",
                      grouping.size);
        layout.size = grouping.size;
        layout.count = samples / grouping.size;
        return;
    }
    core::require(grouping.ids64 != nullptr || grouping.ids32 != nullptr || samples == 0,
                  "groups: neither a group_size nor group ids were given for ", samples, " samples");
    core::require(grouping.id_count == samples, "group ids has length ", grouping.id_count, " but ", what,
                  " has length ", samples);
    dense.resize(static_cast<std::size_t>(samples));
    thread_local std::vector<index_type> table;
    if (grouping.ids64)
        detail::number_groups(layout, dense.data(), grouping.ids64, samples, grouping.declared_count, table);
    else
        detail::number_groups(layout, dense.data(), grouping.ids32, samples, grouping.declared_count, table);
    if (with_members) detail::sort_members(layout, dense, samples, table);
}

inline group_layout resolve(const groups& grouping, index_type samples, const char* what = "rewards") {
    group_layout layout;
    std::vector<index_type> dense;
    resolve_into(layout, dense, grouping, samples, what);
    return layout;
}

// The same, into this thread's reusable layout: repeated calls on one thread do not allocate (or
// page-fault) once the buffers have grown. Valid until the next resolve_cached on the thread.
// dense (when given) receives this thread's reusable per-sample group numbers (ragged only).
inline const group_layout& resolve_cached(const groups& grouping, index_type samples, const char* what = "rewards",
                                          bool with_members = true,
                                          const std::vector<index_type>** dense_out = nullptr) {
    thread_local group_layout layout;
    thread_local std::vector<index_type> dense;
    resolve_into(layout, dense, grouping, samples, what, with_members);
    if (dense_out) *dense_out = &dense;
    return layout;
}

}  // namespace core
}  // namespace normkit
