// expect-error: kl_penalty_options
// A kl_options (what to compute, nested in policy_loss_options) is not a kl_penalty_options (the
// top-level options with threads): the conversion is explicit, so passing one where the other is
// wanted does not compile. The control spells the conversion.
#include <normkit/loss/kl.hpp>

#include <vector>

int main() {
    std::vector<double> x(6, -1.0), ref(6, -1.2), value(6);
    normkit::loss::kl_options what;
    what.estimator = normkit::loss::kl_estimator::k2;
#ifdef NORMKIT_COMPILE_FAIL_CONTROL
    normkit::loss::kl_penalty(normkit::view(static_cast<const double*>(x.data()), 2, 3),
                              normkit::view(static_cast<const double*>(ref.data()), 2, 3),
                              normkit::view(value.data(), 2, 3), {}, normkit::loss::kl_penalty_options(what));
#else
    normkit::loss::kl_penalty(normkit::view(static_cast<const double*>(x.data()), 2, 3),
                              normkit::view(static_cast<const double*>(ref.data()), 2, 3),
                              normkit::view(value.data(), 2, 3), {}, what);
#endif
    return 0;
}
