#!/bin/sh
# weights.sh - issue 36's "a weight-1000 job took a weight-1 victim of another uid from 64 to 1.6
# samples/s under --cpu-budget 1": under loaderd --cpu-budget 1, a victim (uid VICTIM_UID,
# weight 1, asking --rate 64 samples/s of 224 px crops) reads SECS seconds alone, then beside a
# greedy job of weight 1000 (uid HEAVY_UID, as fast as it comes). Prints each phase's victim rate.
# Runs as root (setpriv gives the clients their uids). Not part of `make test`.
# BASE_BIN=DIR runs the same with another build's loaderd first.
# usage: tools/bench/weights.sh [SECS]   (default 8)
set -eu
BIN=${BUILD:-build}/bin
secs=${1:-8} vu=${VICTIM_UID:-65533} hu=${HEAVY_UID:-65534}
T=$(mktemp -d)
chmod 755 "$T"
trap 'kill $(cat "$T"/*.pid 2>/dev/null) 2>/dev/null; rm -rf "$T"' EXIT
"$BIN/dsgen" imagefolder "$T/if" --classes 4 --per-class 50 --jobs 1 >/dev/null
"$BIN/dpack" pack "$T/if" "$T/d.dpk" >/dev/null 2>&1
chmod 644 "$T/d.dpk"
grp=$(getent group nogroup | cut -d: -f1)
as() { u=$1; shift; setpriv --reuid "$u" --regid "$(getent group "$grp" | cut -d: -f3)" \
	--clear-groups "$@"; }
rate() {  # rate UID JOB SECS [ldcat options]: samples/s it read
	u=$1 j=$2 s=$3; shift 3
	as "$u" "$BIN/ldcat" --socket "$T/s.sock" --dataset "$T/d.dpk" --job "$j" --batch 16 \
		--crop 224 --epochs 0 --seconds "$s" "$@" 2>/dev/null | wc -l |
		awk -v s="$s" '{ printf "%.1f", $1 / s }'
}
run() {  # run NAME LOADERD
	"$2" --socket "$T/s.sock" --workers 2 --cpu-budget 1 --group "$grp" >"$T/ld.log" 2>&1 &
	echo $! >"$T/ld.pid"
	i=0
	while [ ! -S "$T/s.sock" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
	alone=$(rate "$vu" victim "$secs" --rate 64)
	as "$hu" "$BIN/ldcat" --socket "$T/s.sock" --dataset "$T/d.dpk" --job heavy --batch 16 \
		--crop 224 --epochs 0 --weight 1000 >/dev/null 2>&1 &
	echo $! >"$T/h.pid"
	sleep 2
	beside=$(rate "$vu" victim2 "$secs" --rate 64)
	echo "$1: victim (uid $vu, weight 1, --rate 64) alone $alone samples/s; beside uid $hu's" \
	     "weight-1000 job $beside samples/s (--cpu-budget 1)"
	kill "$(cat "$T/h.pid")" "$(cat "$T/ld.pid")" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -f "$T"/*.pid "$T/s.sock"
}
[ -n "${BASE_BIN:-}" ] && run base "$BASE_BIN/loaderd"
run new "$BIN/loaderd"
