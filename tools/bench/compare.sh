#!/bin/sh
# compare.sh - loaderd against PyTorch DataLoader, DALI (CPU) and FFCV on the same JPEG tree.
# Not part of `make test`. Writes docs/BENCHMARKS.md and docs/benchmarks.svg (see compare.py).
#
# usage: tools/bench/compare.sh [--images N] [--workdir DIR] [--tree DIR] [--repeat R] [--workers W]
#        tools/bench/compare.sh --check [--workdir DIR]
#   --images N    ImageNet-like images to generate with dsgen (300..900 px, 20 classes; default 2000)
#   --workdir DIR venv, data and logs live here, never in the repository (default /tmp/loaderd-bench)
#   --tree DIR    use this ImageFolder tree instead of generating one
#   --repeat R    rounds over all loaders (default 2)
#   --workers W   CPU workers/threads of every loader (default: all cores)
#   --check       make the venv, then run every row once on a small tree
#                 (tests/it_compare_rows.sh, FFCV included: about 3 minutes) instead of the
#                 benchmark: each row gives a number or says why not; writes nothing in docs/
#
# The venv is made from Debian's python ($PYTHON, default /usr/bin/python3) with
# --system-site-packages, so Debian's python3-torch and python3-torchvision (scripts/deps.sh)
# are reused rather than downloaded; every pip install is bounded by tools/bench/constraints.txt
# (numpy < 2, which that torch needs, and the versions of DALI and FFCV the rows ran with).
# A package that does not install leaves its reason in DIR/status/NAME.err, and its row in the
# table says so.
set -eu
cd "$(dirname "$0")/../.."
images=2000 W=/tmp/loaderd-bench tree="" repeat=2 workers=$(nproc) check=0
while [ $# -gt 0 ]; do
	case $1 in
	--images) images=$2; shift 2 ;;
	--workdir) W=$2; shift 2 ;;
	--tree) tree=$2; shift 2 ;;
	--repeat) repeat=$2; shift 2 ;;
	--workers) workers=$2; shift 2 ;;
	--check) check=1; shift ;;
	-h|--help) sed -n '2,25p' "$0"; exit 0 ;;
	*) echo "compare.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
cmd="tools/bench/compare.sh --images $images --workdir $W --repeat $repeat --workers $workers${tree:+ --tree $tree}"
mkdir -p "$W/status"
W=$(cd "$W" && pwd)
log() { echo "compare.sh: $*" >&2; }

make -j"$(nproc)" >/dev/null

# --- venv -------------------------------------------------------------------------------------
PY=$W/venv/bin/python
if [ ! -x "$PY" ]; then
	log "creating venv $W/venv from ${PYTHON:-/usr/bin/python3}"
	"${PYTHON:-/usr/bin/python3}" -m venv --system-site-packages "$W/venv"
fi
PIP_CONSTRAINT=$(pwd)/tools/bench/constraints.txt
export PIP_CONSTRAINT
"$PY" -m pip install -q --progress-bar off torch torchvision pillow numpy

# try_pip NAME SECONDS PACKAGE...: install once; record ok or the error's last lines
try_pip() {
	name=$1 secs=$2; shift 2
	[ -e "$W/status/$name.ok" ] && return 0
	rm -f "$W/status/$name.err"
	log "pip install $* (up to $secs s)"
	if timeout "$secs" "$PY" -m pip install --progress-bar off "$@" >"$W/status/$name.log" 2>&1; then
		touch "$W/status/$name.ok"
	else
		rc=$?
		{ [ $rc = 124 ] && echo "pip install $* timed out after $secs s;"
		  grep -E "Error|error:|ERROR" "$W/status/$name.log" | tail -3; } |
			tr '\n' ' ' >"$W/status/$name.err"
		log "$name did not install: $(cat "$W/status/$name.err")"
	fi
}
try_pip dali 900 nvidia-dali-cuda130
# FFCV compiles a C extension against OpenCV and libturbojpeg found through pkg-config.
if ! pkg-config --exists opencv4 libturbojpeg 2>/dev/null && [ ! -e "$W/status/ffcv.ok" ]; then
	SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
	log "ffcv needs libopencv-dev and libturbojpeg0-dev: apt-get install"
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
		libopencv-dev libturbojpeg0-dev >"$W/status/apt.log" 2>&1 ||
		log "apt-get failed (see $W/status/apt.log)"
fi
try_pip ffcv 900 ffcv
if [ $check = 1 ]; then
	COMPARE_PY=$PY COMPARE_ROWS_FFCV=1 exec sh tests/it_compare_rows.sh
fi

# --- data -------------------------------------------------------------------------------------
if [ -z "$tree" ]; then
	tree=$W/tree-$images
	if [ ! -e "$tree.done" ]; then
		classes=20; [ "$images" -lt 20 ] && classes=1
		rm -rf "$tree"
		build/bin/dsgen imagefolder "$tree" --classes $classes --per-class $((images / classes)) \
			--min-side 300 --max-side 900 >&2
		touch "$tree.done"
	fi
fi
tree=$(cd "$tree" && pwd)
key=$(echo "$tree" | cksum | cut -d' ' -f1)
dpk=$W/train-$key.dpk beton=$W/train-$key.beton
[ -e "$dpk" ] || build/bin/dpack pack "$tree" "$dpk" >&2
if [ -e "$W/status/ffcv.ok" ] && [ ! -e "$beton" ]; then
	log "writing $beton (FFCV re-encodes the JPEGs)"
	"$PY" tools/bench/run_loader.py ffcv_write --tree "$tree" --beton "$beton" --workers "$workers" \
		>"$W/status/beton.log" 2>&1 || { log "beton failed: $(tail -2 "$W/status/beton.log")"; rm -f "$beton"; }
fi
cat "$tree"/*/* "$dpk" >/dev/null    # page cache warm for every row
n=$(find "$tree" -type f | wc -l) bytes=$(du -sb "$tree" | cut -f1)
desc="$n JPEGs in $(ls "$tree" | wc -l) classes, $((bytes / 1000000)) MB ($tree; dsgen imagefolder, 300..900 px), packed to $(basename "$dpk") by dpack"

set -- --tree "$tree" --dpk "$dpk" --workers "$workers" --repeat "$repeat" \
	--json "$W/results.json" --dataset-desc "$desc" --command "$cmd"
[ -e "$beton" ] && set -- "$@" --beton "$beton"
[ -e "$W/status/dali.err" ] && set -- "$@" --skip "dali_cpu=pip install nvidia-dali-cuda130 failed: $(cat "$W/status/dali.err")"
[ -e "$W/status/ffcv.ok" ] && [ ! -e "$beton" ] && set -- "$@" --skip "ffcv=writing the .beton failed: $(tail -1 "$W/status/beton.log")"
[ -e "$W/status/ffcv.err" ] && set -- "$@" --skip "ffcv=pip install ffcv failed: $(cat "$W/status/ffcv.err")"
exec "$PY" tools/bench/compare.py "$@"
