#!/bin/sh
# set_open_stall.sh - does one user's large set of shards stall another's job open? A set of N
# shards (hard links of one small .dpk, N lines of one manifest) is opened by one client while a
# second client opens a one-file job and reads its first batch; the second's time is measured
# (median of REPS), alone and beside the set's open, for each loaderd build given.
#
#   sh tools/bench/set_open_stall.sh [-n N] [-r REPS] BIN_DIR...
#
# LOADERD_OPTS: more options for every loaderd (e.g. --max-fds-per-uid for a build that has it).
# BIN_DIR holds loaderd, ldcat, dsgen and dpack of one build (e.g. build/bin, or an older
# checkout's). Prints one row per build: the victim's median open-to-first-batch alone and beside
# the set, and what happened to the set's own open.
set -eu
N=1200
REPS=5
while getopts n:r: o; do
	case $o in
	n) N=$OPTARG ;;
	r) REPS=$OPTARG ;;
	*) echo "usage: $0 [-n N] [-r REPS] BIN_DIR..." >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: $0 [-n N] [-r REPS] BIN_DIR..." >&2; exit 2; }
T=$(mktemp -d /tmp/set_open_stall.XXXXXX)
trap 'kill $LP 2>/dev/null; rm -rf "$T"' EXIT
LP=""
B1=$(cd "$1" && pwd)
"$B1/dsgen" npy "$T/x.npy" "$T/y.npy" --count 8 --height 8 --width 8 --channels 3 --classes 2 \
	>/dev/null
"$B1/dpack" pack --no-fsync --shard-size 1G "$T/x.npy" "$T/y.npy" "$T/one.dpks" >/dev/null 2>&1
line=$(sed -n 2p "$T/one.dpks" | cut -d' ' -f1,2)
mkdir "$T/set"
python3 - "$T" "$N" "$line" <<'EOF'
import os, sys
t, n, line = sys.argv[1], int(sys.argv[2]), sys.argv[3]
src = os.path.join(t, "one-00000.dpk")
with open(os.path.join(t, "set", "big.dpks"), "w") as m:
    m.write("dpkset 1\n")
    for k in range(n):
        os.link(src, os.path.join(t, "set", "s%05d.dpk" % k))
        m.write("%s s%05d.dpk\n" % (line, k))
    m.write("end %d\n" % n)
EOF
now() { python3 -c 'import time; print(time.monotonic())'; }
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
printf '%-40s %12s %14s  %s\n' "build" "victim alone" "beside the set" "the set's own open"
for bin in "$@"; do
	B=$(cd "$bin" && pwd)
	# shellcheck disable=SC2086
	"$B/loaderd" --socket "$T/s.sock" --workers 2 --linger 1 ${LOADERD_OPTS:-} 2>"$T/l.log" &
	LP=$!
	i=0
	while [ ! -S "$T/s.sock" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
	victim() {
		t0=$(now)
		"$B/ldcat" --socket "$T/s.sock" --dataset "$T/one-00000.dpk" --job "v$1" --batch 4 \
			--crop 0 --steps 1 >/dev/null 2>&1
		t1=$(now)
		python3 -c "print(round(($t1 - $t0) * 1000, 1))"
	}
	alone=$(for r in $(seq "$REPS"); do victim "a$r"; done | median)
	beside=$(for r in $(seq "$REPS"); do
		"$B/ldcat" --socket "$T/s.sock" --dataset "$T/set/big.dpks" --job "big$r" --batch 4 \
			--crop 0 --steps 1 >/dev/null 2>"$T/big.err" &
		bp=$!
		sleep 0.02
		victim "b$r"
		wait $bp || true
	done | median)
	setmsg=$(tail -1 "$T/big.err" | cut -c1-80)
	printf '%-40s %10s ms %12s ms  %s\n' "$bin" "$alone" "$beside" "${setmsg:-served}"
	kill $LP
	wait $LP 2>/dev/null || true
	LP=""
	sleep 1.2
done
