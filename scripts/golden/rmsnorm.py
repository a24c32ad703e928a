"""Golden values from the RMSNorm authors' own pRMSNorm (bzhangGo/rmsnorm, rmsnorm_torch.py, class
RMSNorm(d, p, eps)), loaded as frameworks.py loads the frameworks' functions.

Writes tests/norm/golden_rmsnorm.hpp: x, the scale, y and autograd's dx and dscale for a fixed dy,
in float64, for several d and p (k = int(d * p), ε = 1e-8 outside the root).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import frameworks as fw  # noqa: E402

import torch  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
PATH = "rmsnorm_torch.py"

ns = fw.base_namespace()
fw.functions("rmsnorm", PATH, ["RMSNorm"], ns)
out = fw.Emitter("rmsnorm")
generator = torch.Generator().manual_seed(49)


def rand(shape, low, high):
    return low + (high - low) * torch.rand(shape, generator=generator, dtype=torch.float64)


# (name, rows, d, p, how x is drawn): p·d integral and not, p = 0.29 (int(100 * 0.29) = 28), p = 1, a row
# far from zero, and a row whose first k entries are zero (the statistic is 0: r = 1/ε).
for name, rows, d, p, kind in [("quarter", 3, 12, 0.25, "uniform"), ("fraction", 2, 10, 0.29, "uniform"),
                               ("hundred", 2, 100, 0.29, "uniform"), ("sixteenth", 2, 67, 0.0625, "uniform"),
                               ("whole", 2, 9, 1.0, "uniform"), ("offset", 2, 33, 0.5, "offset"),
                               ("zero_head", 2, 8, 0.25, "zero_head")]:
    module = ns["RMSNorm"](d, p=p).double()
    with torch.no_grad():
        module.scale.copy_(rand((d,), 0.5, 1.5))
    x = rand((rows, d), -2.0, 2.0)
    if kind == "offset":
        x += 1e3
    if kind == "zero_head":
        x[:, : int(d * p)] = 0.0
    x.requires_grad_(True)
    dy = rand((rows, d), -1.0, 1.0)
    y = module(x)
    y.backward(dy)
    out.add("prmsnorm", PATH, "RMSNorm(d, p).forward, autograd backward", name, x=x, scale=module.scale, dy=dy, y=y,
            dx=x.grad, dscale=module.scale.grad, p=p, eps=module.eps, rows=rows, cols=d)

out.write(os.path.join(ROOT, "tests/norm/golden_rmsnorm.hpp"))
