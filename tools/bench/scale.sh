#!/bin/sh
# scale.sh - loaderd at dataset scales: CIFAR-shaped raw records (raw and rrc+flip) with the
# default --io against each explicit mode, job open time and loaderd RSS against the sample count,
# and dpack against cp. Not part of `make test`: it writes GBs. Prints a markdown table per part.
#
# usage: tools/bench/scale.sh [--workdir DIR] [--bin DIR] [--counts "N ..."] [--shape "H W C"]
#                             [--cifar N] [--parts P] [--modes "M ..."] [--epochs E]
#   --workdir DIR  datasets and logs (default /tmp/loaderd-scale); never the repository
#   --bin DIR      the loaderd/ldcat/dpack/dsgen to measure (default build/bin): point it at another
#                  build to compare two versions on the same data in one run
#   --counts "N.." sample counts of the open part's datasets (open time and RSS; default
#                  "1280000 12800000"); each made once in DIR, with its dpack and cp times
#   --shape "H W C" record shape of the open part's datasets (default "8 8 3"; "1 1 1": 1-byte
#                  records, the index is then 98% of the file)
#   --cifar N      records of the 32x32x3 set (default 50000)
#   --parts P      any of "rate open pack" (default all three)
#   --modes "M.."  loaderd --io modes of the rate part (default "auto direct pread buffered";
#                  a build from before --io direct: "auto pread buffered")
#   --epochs E     epochs of each rate run (default 5)
# Figures are wall-clock on whatever else the machine runs: the load average is printed with them.
set -eu
cd "$(dirname "$0")/../.."
W=/tmp/loaderd-scale B=build/bin counts="1280000 12800000" cifar=50000 parts="rate open pack"
modes="auto direct pread buffered" epochs=5 shape="8 8 3"
while [ $# -gt 0 ]; do
	case $1 in
	--workdir) W=$2; shift 2 ;;
	--bin) B=$2; shift 2 ;;
	--counts) counts=$2; shift 2 ;;
	--shape) shape=$2; shift 2 ;;
	--cifar) cifar=$2; shift 2 ;;
	--parts) parts=$2; shift 2 ;;
	--modes) modes=$2; shift 2 ;;
	--epochs) epochs=$2; shift 2 ;;
	-h|--help) sed -n '2,20p' "$0"; exit 0 ;;
	*) echo "scale.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
mkdir -p "$W"
B=$(cd "$B" && pwd)
SOCK=$W/ld.sock
LDPID= RUN=0
. "$(dirname "$0")/lib.sh"
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"

start_ld() {  # start_ld [loaderd options]
	stop_ld
	rm -f "$SOCK"
	"$B/loaderd" --socket "$SOCK" --log-level warn --ready-fd 3 "$@" 3>"$W/ready" 2>>"$W/loaderd.log" &
	LDPID=$!
	for _ in $(seq 100); do grep -q READY "$W/ready" 2>/dev/null && return 0; sleep 0.1; done
	echo "scale.sh: loaderd did not start (see $W/loaderd.log)" >&2; exit 1
}
stop_ld() { [ -n "$LDPID" ] && kill "$LDPID" 2>/dev/null && wait "$LDPID" 2>/dev/null; LDPID=; }
trap stop_ld EXIT

# dataset N H W [C]: d=$W/dN_HxW[xC].dpk, made from a dsgen npy pair unless there; adds the
# cp and dpack seconds and
# dpack's max RSS to pack.txt once
dataset() {
	c=${4:-3}
	d=$W/d$1_$2x$3$([ "$c" = 3 ] || echo "x$c").dpk
	[ -e "$d" ] && return 0
	"$B/dsgen" npy "$W/x.npy" "$W/y.npy" --count "$1" --height "$2" --width "$3" --channels "$c" \
		--classes 1000 >/dev/null
	sync
	t0=$(now); cp "$W/x.npy" "$W/x.cp"; cp "$W/y.npy" "$W/y.cp"; sync; t1=$(now)
	/usr/bin/time -f %M -o "$W/pack.kb" "$B/dpack" pack "$W/x.npy" "$W/y.npy" "$d" >/dev/null
	t2=$(now)
	# the disk's time for the output's bytes (a 1-byte record's index entry is 64 bytes)
	rm -f "$W/x.cp" "$W/y.cp"; sync
	t3=$(now); cp "$d" "$W/d.cp"; sync; t4=$(now)
	echo "$1 $2x$3x$c $(echo "$t1 - $t0" | bc) $(echo "$t2 - $t1" | bc) $(cat "$W/pack.kb")" \
		"$(echo "$t4 - $t3" | bc)" >>"$W/pack.txt"
	rm -f "$W/x.npy" "$W/y.npy" "$W/d.cp"
}

# rate D CROP [ldcat options]: one epoch through ldcat; "samples/s cpu-s-per-M"
rate() {
	d=$1; shift
	RUN=$((RUN + 1))
	ldcat_rate "$B/ldcat" "$SOCK" "$LDPID" "$d" "r$RUN" "$epochs" "$W" "$@"
}

if echo "$parts" | grep -q rate; then
	dataset "$cifar" 32 32
	d=$W/d${cifar}_32x32.dpk
	cat "$d" >/dev/null  # in the page cache
	echo "| case | --io | samples/s | CPU-s per M samples (loaderd + ldcat) |"
	echo "|---|---|---|---|"
	# a fresh loaderd per row: --io auto chooses when a dataset is first opened
	for io in $modes; do
		cat "$d" >/dev/null; start_ld --io "$io"
		echo "| raw 32x32x3, cached | $io | $(rate "$d" --crop 0 | sed 's/ / | /') |"
		cat "$d" >/dev/null; start_ld --io "$io"
		echo "| rrc+flip 28 px, cached | $io | $(rate "$d" --crop 28 --transforms rrc --flip | sed 's/ / | /') |"
		evict "$d"; start_ld --io "$io"
		echo "| raw 32x32x3, evicted first | $io | $(rate "$d" --crop 0 | sed 's/ / | /') |"
		stop_ld
	done
fi

if echo "$parts" | grep -q open; then
	echo "| samples | job 1 open + first batch (s) | job 2 | job 3 | loaderd RSS: before, 1 job, 3 jobs (MB) |"
	echo "|---|---|---|---|---|"
	for n in $counts; do
		# shellcheck disable=SC2086
		dataset "$n" $shape  # sets d
		start_ld
		sleep 0.3
		r0=$(rss_kb "$LDPID") line="| $n"
		pids=
		for k in 1 2 3; do
			rm -f "$W/first"
			t0=$(now)
			# ldcat prints a sample's line once its batch is in: the first byte is the first
			# batch. Then it blocks on the full pipe and the job stays open.
			"$B/ldcat" --socket "$SOCK" --dataset "$d" --crop 0 --batch 256 --job "o$k" \
				--epochs 0 2>/dev/null |
				{ head -c 1 >/dev/null; now >"$W/first"; exec sleep 600; } &
			pids="$pids $!"
			while [ ! -s "$W/first" ]; do sleep 0.01; done
			t1=$(cat "$W/first")
			line="$line | $(echo "$t1 - $t0" | bc | awk '{printf "%.2f", $1}')"
			[ $k = 1 ] && r1=$(rss_kb "$LDPID")
		done
		sleep 1
		r3=$(rss_kb "$LDPID")
		echo "$line | $((r0 / 1024)), $((r1 / 1024)), $((r3 / 1024)) |"
		for p in $pids; do kill "$p" 2>/dev/null || true; done  # the sleeps; ldcat gets EPIPE
		stop_ld
	done
fi

if echo "$parts" | grep -q pack && [ -e "$W/pack.txt" ]; then
	echo "| samples | shape | cp of the .npy pair (s) | dpack pack (s) | dpack / cp |" \
		"cp of the output (s) | dpack max RSS (MB) |"
	echo "|---|---|---|---|---|---|---|"
	awk '{ printf "| %s | %s | %.2f | %.2f | %.1f | %s | %d |\n", $1, $2, $3, $4, $4 / $3,
	       (NF > 5 ? sprintf("%.2f", $6) : "-"), $5 / 1024 }' "$W/pack.txt"
fi
