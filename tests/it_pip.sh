#!/bin/sh
# it_pip.sh - the Python package as a user installs it, with no LOADERD_LIB: `pip install ./python`
# into a fresh virtual environment, a wheel from `pip wheel ./python`, and a wheel built from an
# sdist away from the checkout (the C sources travel in it). Each is imported from another
# directory and reads one epoch from a real loaderd; the installed package finds dpack and loaderd
# for diagnose through $LOADERD_BIN_DIR, or its error says what to do. No network: --no-index --no-build-isolation,
# with Debian's setuptools, wheel and numpy seen through --system-site-packages. Debian's
# interpreter (LOADERD_PYTHON overrides): a pyenv python3 on PATH cannot see Debian's packages.
# Skipped (exit 77) when that interpreter lacks venv, setuptools, wheel or numpy.
. "$(dirname "$0")/lib.sh"
BUILD=${BUILD:-build}
BIN=$BUILD/bin
need_python 'import venv, ensurepip, setuptools, wheel, numpy' \
	"python3-venv python3-setuptools python3-wheel python3-numpy"
need_bins loaderd dsgen dpack
REPO=$(pwd)
T=$(mktemp -d /tmp/it_pip.XXXXXX)
trap 'stop_loaderd; rm -rf "$T"' EXIT
unset LOADERD_LIB PYTHONPATH
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1

# A clean copy of the checkout's python/, shm/, the S3 settings reader (s3/s3cfg.*) and the
# verdict's table (pip builds in place: nothing lands in the tree).
mkdir -p "$T/src" "$T/elsewhere"
tar -C "$REPO" --exclude=build --exclude='*.egg-info' --exclude=__pycache__ \
	--exclude=libldc.so --exclude=python/loaderd/report_limits.def -cf - python shm \
	s3/s3cfg.c s3/s3cfg.h trainer/report_limits.def | tar -C "$T/src" -xf -

"$BIN/dsgen" npy "$T/x.npy" "$T/y.npy" --count 30 --height 8 --width 8 --channels 3 \
	--classes 5 >/dev/null && "$BIN/dpack" pack "$T/x.npy" "$T/y.npy" "$T/d.dpk" >/dev/null ||
	{ echo "not ok - dataset"; exit 1; }
serve_loaderd "$T/s.sock" "$T/loaderd.log"

# One epoch from loaderd through the installed package; prints where its library came from.
cat >"$T/client.py" <<'PYEOF'
import sys
import numpy as np
import loaderd
sock, dpk, job = sys.argv[1:4]
x = np.load(dpk.replace("d.dpk", "x.npy"))
n = 0
with loaderd.Loader(sock, dpk, 7, job=job, output="numpy", crop=None, epochs=1,
                    sampling="sequential", return_meta=True) as it:
    for b in it:
        assert all(np.array_equal(b.images[j], x[i]) for j, i in enumerate(b.ids.tolist()))
        n += b.count
assert n == len(x), n
from loaderd import report   # the verdict's table ships inside the package
assert report.thresholds()["lost_min"] > 0 and "/site-packages/loaderd/" in report._def_path()
print(loaderd.__file__, loaderd.lib()._name)
PYEOF

# venv NAME: a fresh environment that sees Debian's packages.
venv() { "$PY" -m venv --system-site-packages "$T/$1" >"$T/$1.log" 2>&1; }
# client VENV JOB: run client.py from $T/elsewhere; ok when the library is the package's own.
client() {
	out=$(cd "$T/elsewhere" && "$T/$1/bin/python" "$T/client.py" "$T/s.sock" "$T/d.dpk" "$2" \
		2>"$T/$2.err") && matches "$out" "/site-packages/loaderd/__init__.py .*/site-packages/loaderd/libldc.so$"
	rc=$?
	[ $rc -eq 0 ] || { echo "# $out"; show "$T/$2.err"; }
	return $rc
}
pip() { v=$1; shift; (cd "$T/elsewhere" && "$T/$v/bin/python" -m pip "$@" >>"$T/$v.log" 2>&1); }

# ---- pip install ./python ----
venv v1 && pip v1 install --no-build-isolation "$T/src/python"
rc=$?
check "pip install ./python into a fresh venv" [ $rc -eq 0 ]
[ $rc -eq 0 ] || show "$T/v1.log"
check "installed: imported from elsewhere, one epoch from loaderd, its own libldc.so" client v1 inst

# ---- pip wheel ./python: a platform wheel with the library in it ----
pip v1 wheel --no-build-isolation --no-deps -w "$T/wheels" "$T/src/python"
whl=$(ls "$T"/wheels/loaderd-*.whl 2>/dev/null)
check "pip wheel ./python makes a wheel" [ -n "$whl" ]
check "the wheel is tagged for the platform, not pure" matches "$whl" "linux_[a-z0-9_]+\.whl$"
check "the wheel holds loaderd/libldc.so" \
	"$PY" -c 'import sys, zipfile; sys.exit("loaderd/libldc.so" not in zipfile.ZipFile(sys.argv[1]).namelist())' "$whl"
venv v2 && pip v2 install --no-deps "$whl" || show "$T/v2.log"
check "wheel installed: one epoch from loaderd" client v2 whl

# ---- an sdist, built into a wheel away from the checkout ----
(cd "$T/src/python" && "$T/v1/bin/python" setup.py -q sdist -d "$T/dist" >>"$T/v1.log" 2>&1)
sd=$(ls "$T"/dist/loaderd-*.tar.gz 2>/dev/null)
check "sdist carries the C sources" sh -c "tar -tzf '$sd' | grep -q 'csrc/shm/ldc.c' &&
	tar -tzf '$sd' | grep -q 'csrc/s3/s3cfg.c'"
pip v1 wheel --no-build-isolation --no-deps -w "$T/wheels-sd" "$sd" || show "$T/v1.log"
venv v3 && pip v3 install --no-deps "$T"/wheels-sd/loaderd-*.whl || show "$T/v3.log"
check "wheel from the sdist: one epoch from loaderd" client v3 sdist

# ---- LOADERD_LIB still overrides; the ABI check still runs ----
if [ -e "$BUILD/lib/libldc.so" ]; then
	lib=$(cd "$BUILD/lib" && pwd)/libldc.so
	out=$(cd "$T/elsewhere" && LOADERD_LIB=$lib "$T/v1/bin/python" -c \
		'import loaderd; loaderd.abi_check(); print(loaderd.lib()._name)' 2>&1)
	check "LOADERD_LIB overrides the package's library" [ "$out" = "$lib" ]
fi
# ---- diagnose's programs from a pip-installed package: $LOADERD_BIN_DIR, else said what to do ----
bindir=$(cd "$BUILD/bin" && pwd)
out=$(cd "$T/elsewhere" && LOADERD_BIN_DIR=$bindir PATH=/nonexistent "$T/v1/bin/python" -c \
	'from loaderd import _bins; print(_bins.find_bin("dpack"), _bins.find_bin("loaderd"))' 2>&1)
check "installed: dpack and loaderd found through \$LOADERD_BIN_DIR" \
	[ "$out" = "$bindir/dpack $bindir/loaderd" ]
out=$(cd "$T/elsewhere" && env -u LOADERD_BIN_DIR PATH=/nonexistent "$T/v1/bin/python" -c \
	'from loaderd import _bins; import sys
b = [n for n in ("dpack", "loaderd") if not _bins.find_bin(n, ("/nonexistent",), ())]
print(_bins.not_found(b) if b else "found")' 2>&1)
check "installed, no programs anywhere: the error says to make install or set \$LOADERD_BIN_DIR" \
	sh -c "echo \"\$1\" | grep -q 'not found: looked in .*make install.*LOADERD_BIN_DIR='" _ "$out"
[ -n "$out" ] && echo "# $out"
echo "$((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
