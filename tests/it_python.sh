#!/bin/sh
# it_python.sh - the Python client (python/loaderd) under pytest against a loaderd of its own:
# every sample once with its label, exact resume from state_dict(), a killed daemon raising
# within a second, numpy views and torch tensors over the ring (python/tests/). Debian's
# interpreter (LOADERD_PYTHON overrides): a pyenv python3 on PATH cannot see Debian's numpy,
# pytest and torch, which scripts/deps.sh installs. Skipped (exit 77) when that interpreter lacks
# numpy, pytest or torch, so that a missing package is counted and never passes for a run.
. "$(dirname "$0")/lib.sh"
BUILD=${BUILD:-build}
export BUILD
need_python 'import numpy, pytest, torch' "python3-numpy python3-pytest python3-torch"
need_bins loaderd dsgen dpack
[ -e "$BUILD/lib/libldc.so" ] || { echo "not built: $BUILD/lib/libldc.so (run make)"; exit 1; }
# No bytecode or cache directories in the source tree; LOADERD_LIB: this build's library.
# -rs: the reason of every skipped case (the GPU case without a GPU) in the log.
LOADERD_LIB=$(cd "$BUILD/lib" && pwd)/libldc.so PYTHONDONTWRITEBYTECODE=1 \
	exec "$PY" -m pytest -q -rs -p no:cacheprovider python/tests
