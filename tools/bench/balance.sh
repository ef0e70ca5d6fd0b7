#!/bin/sh
# balance.sh - balanced shares measured for real: 2 host ranks, each bound to its own core
# (taskset), rank 1 slowed by real CPU contention (K - 1 busy loops pinned on its core: about 1/K
# of the core is left to it). Throughput (the trainer's samples_per_s: all ranks' samples over the
# longest wall) with even splits, with --balance, and the ideal: the sum of the two ranks' own
# rates (a rank's samples per second of its compute: samples_per_s / au, from --report-json),
# measured in the same run, at the same moment, so that other tenants' load shifts both alike.
# Then the time to follow a change: a balanced run in which the busy loop starts mid-run, in
# steps until rank 0's share settles. Not part of `make test`.
#
# usage: tools/bench/balance.sh [--reps R] [--steps N] [--workdir DIR] [--world W] [--inject]
#   --reps R      rounds of every configuration (default 3); the table gives each round's ratios
#   --steps N     trainer steps per run (default 60; the first 20 are warm-up)
#   --workdir DIR data and logs (default /tmp/loaderd-balance)
#   --inject      slow the last rank with the trainer's --inject-slow-rank R:K (a sleep of (K - 1)
#                 x its compute) instead of busy loops, and skip the follow run: the controlled case
#   --world W     W ranks (default 2), rank r on core r mod 2: W = 4 oversubscribes the 2 cores
#                 (two ranks per core); the last rank is the slow one (busy loops on its core slow
#                 the rank that shares it too: use --inject there). No follow run for W > 2.
# Needs mpirun and taskset, and 2 cores. The machine's load average goes into the output: other
# processes on these cores change the absolute rates, so read the ratios (each within one round).
# Last line: balance: k2_vs_even=X k2_vs_ideal=Y k3_vs_even=X k3_vs_ideal=Y follow_steps=S
set -eu
cd "$(dirname "$0")/../.."
reps=3 steps=60 W=/tmp/loaderd-balance inject= world=2
while [ $# -gt 0 ]; do
	case $1 in
	--reps) reps=$2; shift 2 ;;
	--steps) steps=$2; shift 2 ;;
	--workdir) W=$2; shift 2 ;;
	--inject) inject=1; shift ;;
	--world) world=$2; shift 2 ;;
	-h|--help) sed -n '2,21p' "$0"; exit 0 ;;
	*) echo "balance.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
BIN=${BUILD:-build}/bin
mkdir -p "$W"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
HOGS=""
LD=""
cleanup() {
	for p in $HOGS $LD; do kill "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

slow_rank=$((world - 1))
hogs_start() {  # hogs_start N: N busy loops pinned on the slow rank's core
	i=0
	while [ "$i" -lt "$1" ]; do
		taskset -c $((slow_rank % 2)) sh -c 'while :; do :; done' &
		HOGS="$HOGS $!"
		i=$((i + 1))
	done
}
hogs_stop() {
	for p in $HOGS; do kill "$p" 2>/dev/null || true; done
	for p in $HOGS; do wait "$p" 2>/dev/null || true; done
	HOGS=""
}

[ -s "$W/d.dpk" ] || {
	"$BIN/dsgen" imagefolder "$W/tree" --classes 4 --per-class 128 --min-side 32 \
		--max-side 40 >/dev/null
	"$BIN/dpack" pack --no-fsync "$W/tree" "$W/d.dpk" >/dev/null 2>&1
}
rm -f "$W/s.sock"
"$BIN/loaderd" --socket "$W/s.sock" --workers 1 --balance 2>"$W/loaderd.log" &
LD=$!
i=0
while [ ! -S "$W/s.sock" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done

MODEL=synthetic:flops=30M,params=64K
# trainer_run NAME [option...]: $world ranks, rank r on core r mod 2; prints "samples_per_s ideal
# own(slow)/own(0)"
trainer_run() {
	name=$1
	shift
	mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$world" sh -c \
		'exec taskset -c "$((${OMPI_COMM_WORLD_RANK:-0} % 2))" "$0" "$@"' \
		"$BIN/trainer" --dataset "$W/d.dpk" --socket "$W/s.sock" --device host --crop 32 \
		--batch 32 --model "$MODEL" --steps "$steps" --warmup 20 --log-every 0 \
		--report-json "$W/$name.json" "$@" \
		>"$W/$name.out" 2>"$W/$name.err" || { tail -n 5 "$W/$name.err" >&2; return 1; }
	python3 - "$W/$name.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
own = [x["samples_per_s"] / x["au"] for x in r["per_rank"]]
print("%.1f %.1f %.3f" % (r["samples_per_s"], sum(own), own[-1] / own[0]))
PY
}
ratio() { python3 -c "print('%.3f' % ($1 / $2))"; }

echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg); $world ranks on 2 cores"
echo "| round | slowdown | rank $slow_rank / rank 0 speed (even run) | even samples/s | balanced samples/s | ideal (sum of own rates, balanced run) | balanced / even | balanced / ideal | even / ideal |"
echo "|---|---|---|---|---|---|---|---|---|"
R2E="" R2I="" R3E="" R3I=""
r=1
while [ "$r" -le "$reps" ]; do
	for k in 2 3; do
		slow=""
		if [ -n "$inject" ]; then slow="--inject-slow-rank $slow_rank:$k"; else hogs_start $((k - 1)); fi
		set -- $(trainer_run "even.k$k.$r" $slow)
		even=$1 ideal_e=$2 speed=$3
		set -- $(trainer_run "bal.k$k.$r" --balance $slow)
		bal=$1 ideal=$2
		hogs_stop
		be=$(ratio "$bal" "$even") bi=$(ratio "$bal" "$ideal") ei=$(ratio "$even" "$ideal_e")
		what="$((k - 1)) busy loop(s)"
		[ -z "$inject" ] || what="--inject-slow-rank $slow_rank:$k"
		echo "| $r | $what | $speed | $even | $bal | $ideal | $be | $bi | $ei |"
		if [ $k = 2 ]; then R2E="$R2E $be" R2I="$R2I $bi"; else R3E="$R3E $be" R3I="$R3I $bi"; fi
	done
	r=$((r + 1))
done
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

if [ -n "$inject" ] || [ "$world" -gt 2 ]; then
	med() { python3 -c "import statistics, sys; print('%.3f' % statistics.median(map(float, sys.argv[1:])))" "$@"; }
	echo "balance: k2_vs_even=$(med $R2E) k2_vs_ideal=$(med $R2I) k3_vs_even=$(med $R3E) k3_vs_ideal=$(med $R3I) follow_steps=none"
	exit 0
fi

# ---- following a change: a busy loop starts on rank 1's core during a balanced run ----
# The step it started at is read back from the run itself: the first step from which rank 1's
# compute per sample (trace) stays above 1.5x what it was; then the steps until rank 0's share
# is within 10% of where it ends.
name=follow
rm -f "$W/$name.smp.0" "$W/$name.smp.1" "$W/$name.trace"
mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 sh -c \
	'exec taskset -c "${OMPI_COMM_WORLD_RANK:-0}" "$0" "$@"' \
	"$BIN/trainer" --dataset "$W/d.dpk" --socket "$W/s.sock" --device host --crop 32 \
	--batch 32 --model "$MODEL" --steps 240 --warmup 20 --log-every 0 --balance --slots 2 \
	--prefetch 1 --log-samples "$W/$name.smp" --trace "$W/$name.trace" \
	>"$W/$name.out" 2>"$W/$name.err" &
mp=$!
while kill -0 $mp 2>/dev/null && [ ! -s "$W/$name.smp.0" ]; do sleep 0.05; done
sleep "${FOLLOW_DELAY:-5}"
hogs_start 1
wait $mp || true
hogs_stop
follow=$(python3 - "$W/$name" <<'PY'
import collections, json, statistics, sys
p = sys.argv[1]
c = [collections.Counter(int(l.split()[0]) for l in open("%s.smp.%d" % (p, r))) for r in (0, 1)]
n = max(c[0]) + 1
comp = {}
for e in json.load(open(p + ".trace"))["traceEvents"]:
    if e["name"] == "compute" and e["pid"] == 1:
        comp[e["args"]["step"]] = e["dur"] / max(1, c[1][e["args"]["step"]])
ps1 = [comp.get(s, 0) for s in range(n)]
base = statistics.median(ps1[10:30])
h = next(s for s in range(30, n - 5) if statistics.median(ps1[s:s + 5]) > 1.5 * base)
before = statistics.median(c[0][s] for s in range(max(0, h - 20), h))
final = statistics.median(c[0][s] for s in range(n - 20, n))
move = final - before
settle = next(s for s in range(h, n)
              if all(abs(c[0][t] - final) <= 0.1 * abs(move) + 0.5 for t in range(s, min(n, s + 4))))
print("# rank 1's compute per sample %.0f us before, %.0f after step %d; rank 0's share of 64: "
      "%.0f before, %.0f at the end; within 10%% of it %d steps after the slowdown"
      % (base, statistics.median(ps1[h:h + 20]), h, before, final, settle - h), file=sys.stderr)
print(settle - h)
PY
)
med() { python3 -c "import statistics, sys; print('%.3f' % statistics.median(map(float, sys.argv[1:])))" "$@"; }
echo "balance: k2_vs_even=$(med $R2E) k2_vs_ideal=$(med $R2I) k3_vs_even=$(med $R3E) k3_vs_ideal=$(med $R3I) follow_steps=$follow"
