#!/usr/bin/env python3
"""Generates ONNX's node tests (once) and runs them on the CPU runtime.
Exit 77 (skipped) when the onnx package is missing."""
import argparse
import os
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runner", required=True)
    ap.add_argument("--data", required=True)
    a = ap.parse_args()
    try:
        import onnx  # noqa: F401
    except ImportError:
        print("onnx not installed: skipped")
        return 77
    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run([sys.executable, os.path.join(here, "gen-node-data.py"), a.data])
    if r.returncode:
        return 1
    return subprocess.run([a.runner, a.data, "--list-failures"]).returncode


if __name__ == "__main__":
    sys.exit(main())
