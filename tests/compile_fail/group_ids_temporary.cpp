// expect-error: deleted function.*group_ids
// groups keep a pointer to their ids: ids from a temporary vector would dangle.
#include <normkit/core/groups.hpp>

#include <cstdint>
#include <vector>

std::vector<std::int64_t> make_ids() { return {3, 3, 9}; }

int main() {
#ifdef NORMKIT_COMPILE_FAIL_CONTROL
    const std::vector<std::int64_t> ids = make_ids();
    const normkit::groups prompts = normkit::group_ids(ids);
#else
    const normkit::groups prompts = normkit::group_ids(make_ids());
#endif
    return prompts.id_count == 3 ? 0 : 1;
}
