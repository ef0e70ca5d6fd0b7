#!/bin/sh
# it_python.sh - the Python client (python/loaderd) under pytest against a loaderd of its own:
# every sample once with its label, exact resume from state_dict(), a killed daemon raising
# within a second (python/tests/). Skipped (exit 77) without python3, numpy or pytest; torch
# tests skip inside pytest when torch is absent. Nothing is installed from here.
BUILD=${BUILD:-build}
export BUILD
if ! command -v python3 >/dev/null 2>&1; then
	echo "skip: no python3"
	exit 77
fi
if ! python3 -c 'import numpy, pytest' 2>/dev/null; then
	echo "skip: python3 lacks numpy or pytest (pip install numpy pytest)"
	exit 77
fi
if [ ! -e "$BUILD/lib/libldc.so" ] || [ ! -x "$BUILD/bin/loaderd" ]; then
	echo "not built: $BUILD/lib/libldc.so and $BUILD/bin/loaderd (run make)"
	exit 1
fi
# No bytecode or cache directories in the source tree; LOADERD_LIB: this build's library.
LOADERD_LIB=$(cd "$BUILD/lib" && pwd)/libldc.so PYTHONDONTWRITEBYTECODE=1 \
	exec python3 -m pytest -q -p no:cacheprovider python/tests
