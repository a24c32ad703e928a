// expect-error: deleted.*vector_view|vector_view.*deleted
// A vector_view of a temporary std::vector would dangle once the declaration ends.
#include <normkit/core/view.hpp>

#include <vector>

std::vector<float> make_weight() { return {1.0f, 2.0f}; }

int main() {
#ifdef NORMKIT_COMPILE_FAIL_CONTROL
    const std::vector<float> weight = make_weight();
    const normkit::vector_view<const float> viewed = weight;
#else
    const normkit::vector_view<const float> viewed = make_weight();
#endif
    return viewed.size == 2 ? 0 : 1;
}
