#!/bin/sh
# demo.sh - `make demo`: generate a small ImageNet-like dataset, pack it, start loaderd (one decode
# worker by default, DEMO_WORKERS to change it), train a
# 2-rank mlp through it (mpirun; the GPU when there is one, else the host device) for about half
# a minute, print the diagnosis, and stop loaderd. Leaves nothing running.
set -eu
BIN=${BUILD:-build}/bin
D=${DEMO_DIR:-build/demo}
STEPS=${DEMO_STEPS:-1500}
rm -rf "$D"
mkdir -p "$D"
. "$(dirname "$0")/../tests/lib.sh"   # start_loaderd, stop_loaderd
# (|| true: under set -e, a kill that finds loaderd already gone must not end the script)
cleanup() {
	stop_loaderd || true
}
trap cleanup EXIT INT TERM

echo "== dsgen: an ImageNet-like JPEG tree (10 classes x 60 images, 120..360 px)"
"$BIN/dsgen" imagefolder "$D/tree" --classes 10 --per-class 60 --min-side 120 --max-side 360
echo "== dpack pack"
"$BIN/dpack" pack "$D/tree" "$D/demo.dpk"
"$BIN/dpack" verify "$D/demo.dpk"

echo "== loaderd (1 decode worker: try --workers 2 and compare) on $D/loaderd.sock"
start_loaderd "$D/loaderd.log" --socket "$D/loaderd.sock" --workers "${DEMO_WORKERS:-1}" >&2 || {
	echo "demo: loaderd did not start" >&2
	exit 1
}

# Open MPI refuses root unless told, and wants --oversubscribe when there are fewer cores than ranks.
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OVERSUB=
[ "$(nproc)" -lt 4 ] && OVERSUB=--oversubscribe

echo "== trainer: 2 ranks (mpirun), mlp, crop 64, batch 32, $STEPS steps, through loaderd"
mpirun $OVERSUB -np 2 "$BIN/trainer" --socket "$D/loaderd.sock" --dataset "$D/demo.dpk" \
	--model mlp --crop 64 --batch 32 --steps "$STEPS" --log-every 250 --trace "$D/trace.json"
echo
echo "== loaderctl stats"
"$BIN/loaderctl" --socket "$D/loaderd.sock" stats || true

if [ -x "$BIN/ldprobe" ]; then
	echo
	echo "== ldprobe: loader ceiling, compute ceiling, the real run, and what to change"
	"$BIN/ldprobe" --socket "$D/loaderd.sock" --dataset "$D/demo.dpk" --ranks 2 --model mlp \
		--crop 64 --batch 32 --seconds 5 --out "$D/probe" || true
fi

echo
echo "== stopping loaderd"
stop_loaderd || true
echo "demo: done. Trace (open in https://ui.perfetto.dev): $D/trace.json; loaderd log: $D/loaderd.log"
