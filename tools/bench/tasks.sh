#!/bin/sh
# tasks.sh - issue 15's "every worker on every ring" figures on one .dpk: ldbench (RandomResizedCrop
# 224 + flip, one ring, batch 256) with 1 and 2 workers, with --slots 2 and --slots 8, and with
# tasks of 16 and 32 samples (the default at batch 256 is 8), rows interleaved
# within each round so that other load on a shared host hits every row alike.
# BASE_BIN=DIR adds rows for another build's ldbench/loaderd (e.g. main; its ldbench has no
# --slots, and its loaderd reports no latency: its fill time per step is its batch latency).
# Prints per row: the window line, the stats line, the latency and per-CPU-second lines, and the
# last line. Not part of `make test`.
# usage: tools/bench/tasks.sh DATASET.dpk [ROUNDS] [SECONDS]   (default 2 rounds of 8 s)
set -eu
BIN=${BUILD:-build}/bin
ds=$1 rounds=${2:-2} secs=${3:-8}
# name:workers:slots:task-samples (0: loaderd's default); ROWS=... picks others
rows="new:1:4:0 new:2:4:0 new:2:2:0 new:2:8:0 new:2:4:16 new:2:4:32"
[ -n "${BASE_BIN:-}" ] && rows="base:1:4:0 base:2:4:0 $rows"
rows=${ROWS:-$rows}
for r in $(seq "$rounds"); do
	for row in $rows; do
		IFS=: read -r name w slots task <<-ROW
		$row
		ROW
		bin=$BIN opt="--slots $slots --task-samples $task"
		[ "$task" = 0 ] && opt="--slots $slots"
		[ "$name" = base ] && bin=$BASE_BIN opt=
		echo "=== round $r $name workers=$w slots=$slots task=$task"
		# shellcheck disable=SC2086
		"$bin/ldbench" --dataset "$ds" --workers "$w" --batch 256 --crop 224 $opt \
			--seconds "$secs" --warmup 2 --ceiling-seconds 0.5 --ceiling-records 50 2>&1 |
			grep -E "drained|loaderd stats|per CPU-second|per-batch latency|samples_per_s"
	done
done
