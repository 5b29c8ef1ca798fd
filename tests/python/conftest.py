"""Shared pytest set-up: make core/python importable and point at the build directory."""
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "core", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
sys.path.insert(0, os.path.join(ROOT, "tools"))
os.environ.setdefault("RECUR_BUILD", os.path.join(ROOT, "build"))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
