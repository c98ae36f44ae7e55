#!/usr/bin/env python3
"""Runs pytest for meson test: run_pytest.py [PYTEST-ARGS...] TEST-FILES...

Exit status: pytest's, or 77 (skipped, for meson) when pytest or onnx is not
installed for this interpreter or when every test that ran was skipped.
"""

import os
import sys

try:
    import onnx  # noqa: F401
    import pytest
except ImportError as e:
    print("%s: %s - skipped (scripts/requirements.txt lists them)" % (sys.executable, e))
    sys.exit(77)


class Outcomes:
    """Counts passed and skipped tests (a pytest plugin)."""

    def __init__(self):
        self.passed = 0
        self.skipped = 0

    def pytest_runtest_logreport(self, report):
        if report.skipped:
            self.skipped += 1
        elif report.when == "call" and report.passed:
            self.passed += 1


def main(argv):
    # pytest makes --basetemp itself (emptied first) but not its parents
    for i, arg in enumerate(argv[:-1]):
        if arg == "--basetemp":
            os.makedirs(os.path.dirname(os.path.abspath(argv[i + 1])), exist_ok=True)
    outcomes = Outcomes()
    rc = int(pytest.main(["-p", "no:cacheprovider", "-ra", *argv], plugins=[outcomes]))
    if rc == 0 and outcomes.passed == 0 and outcomes.skipped:
        return 77
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
