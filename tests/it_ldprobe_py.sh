#!/bin/sh
# it_ldprobe_py.sh - the pytest tests of ldprobe's analysis and advice (tools/tests/): constructed
# trainer reports and ceilings in, verdict, reasons and advice (text and numbers) out; and the
# report the trainer writes has every field ldprobe reads. Runs Debian's python3 (pytest comes
# from the python3-pytest package, scripts/deps.sh); exit 77 when pytest is not there. A second.
set -u
PY=/usr/bin/python3
[ -x "$PY" ] || { echo "# skip: no $PY"; exit 77; }
"$PY" -c 'import pytest' 2>/dev/null ||
	{ echo "# skip: no pytest for $PY (apt-get install python3-pytest; scripts/deps.sh does)"; exit 77; }
export BUILD=${BUILD:-build}
cd "$(dirname "$0")/.." || exit 1
# -p no:cacheprovider: no .pytest_cache in the tree; -B: no __pycache__ next to ldprobe.py
exec "$PY" -B -m pytest -q -p no:cacheprovider tools/tests
