#!/bin/sh
# snapshot.sh - issue 36's "one loaderctl stats took loaderd from 21 MB to 730 MB": a user opens
# JOBS jobs of world WORLD (one rank of each attached, reading; the other ranks never come), then
# asks `loaderctl stats` once; prints loaderd's resident memory before and its peak after (VmRSS,
# VmHWM), and the time the answer took. A snapshot that copied every rank of every job grew with
# JOBS x WORLD; one that lists the attached ranks grows with JOBS. Not part of `make test`.
# BASE_BIN=DIR runs the same with another build's loaderd (e.g. main's) first.
# usage: tools/bench/snapshot.sh [JOBS] [WORLD]   (default 63 jobs of world 65536)
set -eu
BIN=${BUILD:-build}/bin
jobs=${1:-63} world=${2:-65536}
T=$(mktemp -d)
trap 'kill $(cat "$T"/*.pid 2>/dev/null) 2>/dev/null; rm -rf "$T"' EXIT
"$BIN/dsgen" npy "$T/i.npy" "$T/l.npy" --count 64 >/dev/null
"$BIN/dpack" pack "$T/i.npy" "$T/l.npy" "$T/d.dpk" >/dev/null
kb() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$2/status"; }

run() {  # run NAME LOADERD
	"$2" --socket "$T/s.sock" --workers 1 --max-world "$world" >"$T/ld.log" 2>&1 &
	echo $! >"$T/ld.pid"
	i=0
	while [ ! -S "$T/s.sock" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
	for k in $(seq "$jobs"); do
		# one rank reading slowly: attached for the whole run
		"$BIN/ldcat" --socket "$T/s.sock" --dataset "$T/d.dpk" --job "j$k" --world "$world" \
			--batch 4 --crop 0 --epochs 0 --slots 2 2>/dev/null |
			(while read -r l; do sleep 1; done) &
		echo $! >"$T/c$k.pid"
	done
	i=0
	until "$BIN/loaderctl" --socket "$T/s.sock" --json status 2>/dev/null |
		python3 -c "import json,sys; sys.exit(json.load(sys.stdin)['ranks_attached'] != $jobs)"
	do
		sleep 0.2; i=$((i + 1)); [ $i -lt 300 ] || { echo "$1: the ranks did not attach"; exit 1; }
	done
	pid=$(cat "$T/ld.pid")
	before=$(kb VmRSS "$pid")
	t0=$(date +%s.%N)
	"$BIN/loaderctl" --socket "$T/s.sock" stats >"$T/stats.out" 2>&1 || true
	t1=$(date +%s.%N)
	after=$(kb VmHWM "$pid")
	echo "$1: $jobs jobs of world $world, 1 rank attached each: loaderd VmRSS $((before / 1024)) MB" \
	     "before loaderctl stats, VmHWM $((after / 1024)) MB after; answer $(wc -c <"$T/stats.out")" \
	     "bytes in $(echo "$t1 - $t0" | bc) s: $(tail -n 1 "$T/stats.out" | cut -c1-100)"
	for f in "$T"/c*.pid; do kill "$(cat "$f")" 2>/dev/null || true; done
	kill "$pid"; wait "$pid" 2>/dev/null || true
	rm -f "$T"/*.pid "$T/s.sock"
}
[ -n "${BASE_BIN:-}" ] && run base "$BASE_BIN/loaderd"
run new "$BIN/loaderd"
