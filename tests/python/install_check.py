"""ctest's python_install: `cmake --install BUILD --component python --prefix TMP` puts a package
that imports and runs from TMP alone (the build tree's normkit is not on the path)."""
import os
import subprocess
import sys
import tempfile

CHECK = """
import numpy as np, normkit, normkit.norm, normkit.advantage, normkit.credit, normkit.loss, normkit.frameworks
assert normkit.__file__.startswith({prefix!r}), normkit.__file__
y, rstd = normkit.norm.rms_norm_forward(np.ones((2, 8), np.float32), None)
assert np.allclose(y, 1.0, rtol=1e-6), y
print("normkit", normkit.__version__, "installed and imported from", normkit.__file__)
"""


def main(cmake, build, site):
    with tempfile.TemporaryDirectory() as prefix:
        subprocess.run([cmake, "--install", build, "--component", "python", "--prefix", prefix], check=True,
                       stdout=subprocess.DEVNULL)
        environment = dict(os.environ, PYTHONPATH=os.path.join(prefix, site), PYTHONDONTWRITEBYTECODE="1")
        return subprocess.run([sys.executable, "-c", CHECK.format(prefix=prefix)], env=environment).returncode


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
