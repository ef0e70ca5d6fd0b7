#!/bin/sh
# it_scale.sh - a job's memory does not grow with the dataset's sample count: loaderd's private
# (anonymous) memory grows by about as much from a first job to a third on 4M samples as on 1M
# (1-byte raw records, shuffled, each job served until its consumer's pipe is full). A copy of the
# index per job (64 bytes a sample) or a permutation per job (4-8 bytes a sample) would add 12-190
# MB at 4M against 3-48 MB at 1M. Then loaderd shuts down cleanly with the jobs attached. And
# dpack packs the 4M in no more memory than the 1M (labels were held whole: 8 bytes a sample).
# The 128M-sample version of this is tools/bench/scale.sh --parts open --shape "1 1 1".
set -u
BIN=${BUILD:-build}/bin
T=$(mktemp -d /tmp/it_scale.XXXXXX)
PIDS=""
cleanup() {
	for p in $PIDS; do kill "$p" 2>/dev/null; done
	stop_loaderd
	rm -rf "$T"
}
trap cleanup EXIT
. "$(dirname "$0")/lib.sh"
SLACK_KB=4096  # malloc arenas and thread stacks of a job's threads: the same at any count

rss_anon_kb() { awk '/^RssAnon/ {print $2}' "/proc/$LPID/status"; }
# maxrss FILE CMD...: run CMD, its peak RSS in KB into FILE; CMD's status
maxrss() {
	python3 -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL).returncode
open(sys.argv[1], "w").write("%d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(r)' "$@"
}

# job K D: a job on D through ldcat, held open once its first batch is in (ldcat then blocks on
# the pipe: the ring fills and stays full). Waits for the first batch (up to 20 s).
job() {
	rm -f "$T/first$1"
	"$BIN/ldcat" --socket "$T/s" --dataset "$2" --crop 0 --batch 256 --job "j$1" --epochs 0 \
		2>>"$T/ldcat.log" | { head -c 1 >/dev/null; : >"$T/first$1"; exec sleep 120; } &
	PIDS="$PIDS $!"
	i=0
	while [ ! -e "$T/first$1" ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
	[ -e "$T/first$1" ]
}

# growth N: KB of loaderd's anonymous memory from its first job on N samples to its third
growth() {
	"$BIN/dsgen" npy "$T/x.npy" "$T/y.npy" --count "$1" --height 1 --width 1 --channels 1 \
		--classes 10 >/dev/null &&
		maxrss "$T/pack$1" "$BIN/dpack" pack --no-fsync "$T/x.npy" "$T/y.npy" "$T/d$1.dpk" ||
		return 1
	rm -f "$T/x.npy" "$T/y.npy"
	start_loaderd "$T/ld$1.log" --socket "$T/s" --log-level warn || return 1
	job 1 "$T/d$1.dpk" || return 1
	sleep 0.5
	a=$(rss_anon_kb)
	job 2 "$T/d$1.dpk" && job 3 "$T/d$1.dpk" || return 1
	sleep 0.5
	b=$(rss_anon_kb)
	echo $((b - a)) >"$T/growth$1"
	# shut down with the three jobs attached: exits 0, within stop_pid's 5 s
	kill -TERM "$LPID"
	i=0
	while kill -0 "$LPID" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
	wait "$LPID"
	echo $? >"$T/exit$1"
	LPID=""
	for p in $PIDS; do kill "$p" 2>/dev/null; done
	PIDS=""
	rm -f "$T/d$1.dpk"
}

check "1M samples: three jobs served" growth 1000000
check "4M samples: three jobs served" growth 4000000
g1=$(cat "$T/growth1000000" 2>/dev/null || echo -1)
g4=$(cat "$T/growth4000000" 2>/dev/null || echo -1)
echo "# loaderd's RssAnon from job 1 to job 3: $g1 KB at 1M samples, $g4 KB at 4M"
# at most: g1 (0 if it shrank) + SLACK_KB; -1 is a run that did not measure
within() { [ "$1" != -1 ] && [ "$2" != -1 ] && [ "$2" -le $(($1 > 0 ? $1 + SLACK_KB : SLACK_KB)) ]; }
check "jobs 2 and 3 cost no more at 4M samples than at 1M (+ $SLACK_KB KB)" within "$g1" "$g4"
p1=$(cat "$T/pack1000000" 2>/dev/null || echo -1)
p4=$(cat "$T/pack4000000" 2>/dev/null || echo -1)
echo "# dpack's peak RSS: $p1 KB at 1M samples, $p4 KB at 4M"
check "dpack packs 4M samples in no more memory than 1M (+ $SLACK_KB KB)" within "$p1" "$p4"
check "loaderd exits 0 on SIGTERM with jobs attached (1M)" [ "$(cat "$T/exit1000000")" = 0 ]
check "loaderd exits 0 on SIGTERM with jobs attached (4M)" [ "$(cat "$T/exit4000000")" = 0 ]
# ldcat writes its lines by hand (tools/ldcat.c put_line): labels at int64's ends, 0 and -1 come
# out as printf would write them (npy labels go into the index as they are when there are no
# class names)
"$BIN/dsgen" npy "$T/x.npy" "$T/y.npy" --count 6 --height 1 --width 1 --channels 1 >/dev/null
python3 -c "
import struct, sys
v = [-(1 << 63), (1 << 63) - 1, 0, -1, 9, -10]
h = \"{'descr': '<i8', 'fortran_order': False, 'shape': (6,), }\"
h += ' ' * (118 - len(h)) + '\\n'
open(sys.argv[1], 'wb').write(b'\\x93NUMPY\\x01\\x00' + struct.pack('<H', len(h)) + h.encode() + struct.pack('<6q', *v))
" "$T/y.npy"
"$BIN/dpack" pack --no-fsync "$T/x.npy" "$T/y.npy" "$T/neg.dpk" >/dev/null 2>&1
start_loaderd "$T/ldneg.log" --socket "$T/s" --log-level warn &&
	"$BIN/ldcat" --socket "$T/s" --dataset "$T/neg.dpk" --crop 0 --batch 4 --sampling sequential \
		--job neg >"$T/neg.out" 2>>"$T/ldcat.log"
stop_loaderd
printf '%s\n' "0 0 -9223372036854775808 0" "0 1 9223372036854775807 0" "0 2 0 0" "0 3 -1 0" \
	"1 4 9 0" "1 5 -10 0" >"$T/neg.want"
check "ldcat's lines: int64's ends, 0 and negative labels as printf writes them" \
	cmp -s "$T/neg.out" "$T/neg.want"
[ $fails -eq 0 ] || { show "$T/ld1000000.log"; show "$T/ld4000000.log"; show "$T/ldcat.log"; }
echo "1..$n"
exit $((fails > 0))
