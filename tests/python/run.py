"""ctest's entry to the Python tests: pytest over one folder of tests/python.

Exit code 77 (ctest's skip, shown in its summary) when pytest, numpy or, for the torch folder,
torch is not importable, or when pytest collects nothing (its exit code 5); otherwise pytest's.
So a missing dependency is a visible skip, never a silent pass, and with torch installed the
torch tests run.
"""
import importlib.util
import sys

SKIP = 77


def main(argv):
    folder, needs = argv[1], argv[2:]
    for module in ["pytest", "numpy", *needs]:
        if importlib.util.find_spec(module) is None:
            print(f"SKIPPED: {module} is not installed for {sys.executable}")
            return SKIP
    import pytest

    arguments = ["-q", "-p", "no:cacheprovider", folder]
    if not needs:  # the torch tests are their own ctest test
        arguments.append(f"--ignore={folder}/torch")
    code = pytest.main(arguments)
    if code == pytest.ExitCode.NO_TESTS_COLLECTED:
        print(f"SKIPPED: pytest collected no tests in {folder}")
        return SKIP
    return int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
