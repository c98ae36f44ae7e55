"""Imported first by the Python test drivers that need the onnx package
(roundtrip.py, backend_roundtrip.py, cli_check.py): without onnx (or numpy)
the driver exits 77, which meson reports as skipped.  The driver's own
folder, tests/, is on the import path for onnx_compare and the fixtures."""

import os
import sys

try:
    import numpy  # noqa: F401
    import onnx  # noqa: F401
except ImportError:
    print("onnx is not installed for", sys.executable, "- skipped")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
