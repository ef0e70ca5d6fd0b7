#!/bin/sh
# roi.sh - issue 15's figures for one ImageFolder tree: packs it with --keep-jpeg (the old decode
# path), with the restart-marker rewrite (--restart-width 64: jpeg+rst) and with the default
# index (jpeg+idx), then runs ldbench (2 workers, RandomResizedCrop 224 + flip, batch 256) on each,
# ROUNDS times, rows alternating in one run.
# BASE_BIN=DIR adds a row for another build's ldbench/loaderd on the --keep-jpeg file (e.g. main).
# Prints ldbench's ceiling, window, per-CPU-second and last lines per row. Not part of `make test`.
# usage: tools/bench/roi.sh TREE [ROUNDS] [WORKDIR]   (default 2, build/bench-roi)
set -eu
BIN=${BUILD:-build}/bin
tree=$1 rounds=${2:-2} W=${3:-build/bench-roi}
mkdir -p "$W"
"$BIN/dpack" pack --no-fsync --keep-jpeg "$tree" "$W/keep.dpk"
"$BIN/dpack" pack --no-fsync --restart-width 64 "$tree" "$W/rst.dpk"
"$BIN/dpack" pack --no-fsync "$tree" "$W/idx.dpk"
rows="new:$BIN:keep rst:$BIN:rst idx:$BIN:idx"
[ -n "${BASE_BIN:-}" ] && rows="base:$BASE_BIN:keep $rows"
for r in $(seq "$rounds"); do
	for row in $rows; do
		name=${row%%:*} rest=${row#*:}
		bin=${rest%%:*} ds=${rest#*:}
		echo "=== round $r $name ($ds.dpk)"
		"$bin/ldbench" --dataset "$W/$ds.dpk" --workers 2 --batch 256 --crop 224 --seconds 10 \
			--warmup 2 2>&1 | grep -E "full-size decode|crop-aware|loaderd stats|per CPU-second|samples_per_s"
	done
done
