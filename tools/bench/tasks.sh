#!/bin/sh
# tasks.sh - issue 15's "every worker on every ring" figures on one .dpk: ldbench (RandomResizedCrop
# 224 + flip, one ring, batch 256) with 1 and 2 workers, and with --slots 2 and --slots 8, rows
# interleaved within each round so that other load on a shared host hits every row alike.
# BASE_BIN=DIR adds rows for another build's ldbench/loaderd (e.g. main; its ldbench has no
# --slots, and its loaderd reports no latency: its fill time per step is its batch latency).
# Prints per row: the window line, the per-CPU-second line, the latency line and the last line.
# Not part of `make test`.
# usage: tools/bench/tasks.sh DATASET.dpk [ROUNDS] [SECONDS]   (default 2 rounds of 8 s)
set -eu
BIN=${BUILD:-build}/bin
ds=$1 rounds=${2:-2} secs=${3:-8}
rows="new:1:4 new:2:4 new:2:2 new:2:8"
[ -n "${BASE_BIN:-}" ] && rows="base:1:4 base:2:4 $rows"
for r in $(seq "$rounds"); do
	for row in $rows; do
		name=${row%%:*} rest=${row#*:}
		w=${rest%%:*} slots=${rest#*:}
		bin=$BIN sl="--slots $slots"
		[ "$name" = base ] && bin=$BASE_BIN sl=
		echo "=== round $r $name workers=$w slots=$slots"
		# shellcheck disable=SC2086
		"$bin/ldbench" --dataset "$ds" --workers "$w" --batch 256 --crop 224 $sl \
			--seconds "$secs" --warmup 2 --ceiling-seconds 0.5 --ceiling-records 50 2>&1 |
			grep -E "drained|loaderd stats|per CPU-second|per-batch latency|samples_per_s"
	done
done
