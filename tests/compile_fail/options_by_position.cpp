// expect-error: execution_options
// An options struct that inherits execution_options is set by name: a positional brace list would
// bind its first value to the base's threads (here true → threads = 1 and compact = false), so it
// does not compile. The control sets the fields by name.
#include <normkit/credit/optimal_token_baseline.hpp>

int main() {
#ifdef NORMKIT_COMPILE_FAIL_CONTROL
    normkit::credit::optimal_token_baseline_options options;
    options.handle_zero_tail = true;
    options.compact = true;
#else
    normkit::credit::optimal_token_baseline_options options{true, true};
#endif
    return options.compact ? 0 : 1;
}
