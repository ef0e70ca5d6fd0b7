#!/bin/sh
# it_python.sh - the Python client (python/loaderd) under pytest against a loaderd of its own:
# every sample once with its label, exact resume from state_dict(), a killed daemon raising
# within a second, numpy views and torch tensors over the ring (python/tests/). Debian's
# interpreter (LOADERD_PYTHON overrides): a pyenv python3 on PATH cannot see Debian's numpy,
# pytest and torch, which scripts/deps.sh installs. Skipped (exit 77) when that interpreter lacks
# numpy, pytest or torch, so that a missing package is counted and never passes for a run.
BUILD=${BUILD:-build}
export BUILD
PY=${LOADERD_PYTHON:-/usr/bin/python3}
if ! "$PY" -c 'import numpy, pytest, torch' 2>/dev/null; then
	echo "skip: $PY lacks numpy, pytest or torch (scripts/deps.sh installs python3-numpy" \
		"python3-pytest python3-torch)"
	exit 77
fi
if [ ! -e "$BUILD/lib/libldc.so" ] || [ ! -x "$BUILD/bin/loaderd" ]; then
	echo "not built: $BUILD/lib/libldc.so and $BUILD/bin/loaderd (run make)"
	exit 1
fi
# No bytecode or cache directories in the source tree; LOADERD_LIB: this build's library.
# -rs: the reason of every skipped case (the GPU case without a GPU) in the log.
LOADERD_LIB=$(cd "$BUILD/lib" && pwd)/libldc.so PYTHONDONTWRITEBYTECODE=1 \
	exec "$PY" -m pytest -q -rs -p no:cacheprovider python/tests
