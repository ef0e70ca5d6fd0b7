#!/bin/sh
# it_ldprobe_py.sh - the pytest tests of ldprobe's analysis and advice (tools/tests/): constructed
# trainer reports and ceilings in, verdict, reasons and advice (text and numbers) out; and the
# report the trainer writes has every field ldprobe reads. Runs the Python tests' interpreter
# (need_python: Debian's python3 with python3-pytest from scripts/deps.sh); exit 77 when pytest is
# not there. A second.
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
export BUILD=${BUILD:-build}
need_python 'import pytest' python3-pytest
# -p no:cacheprovider: no .pytest_cache in the tree; -B: no __pycache__ next to ldprobe.py
exec "$PY" -B -m pytest -q -p no:cacheprovider tools/tests
