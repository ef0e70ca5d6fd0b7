#!/bin/sh
# it_trainer.sh - the trainer end to end on the host device (issue 5, "Tests (host device, in CI)").
#   DDP equivalence: N ranks x batch b end with the same parameters as 1 rank x batch N*b on the
#     same samples (synthetic data: rank r's sample i is id i*world + r, so the union is ids
#     0..N*b-1 either way), to 1e-5 relative, for N = 2 and 4, with --accum 2, and with small
#     buckets so that several allreduces overlap backward; other samples, or a sum instead of an
#     average, are far off (the comparison can fail).
#   The mlp learns through loaderd on a generated class-dependent dataset (accuracy well above
#     chance), and the last line is `trainer: samples_per_s=X au=Y verdict=Z`.
#   loaderd killed under a running job, a rank that dies (SIGKILL, SIGTERM; rank 0 or 1) or that
#     fails (a bad argument on one rank only): mpirun exits non-zero within seconds with a
#     message, and no rank is left behind.
#   --trace writes valid JSON with both ranks' events; --report-json a report that parses, with the
#     dataset's class count, per-rank figures, the thresholds and the last line's verdict.
#   Bad usage: --device cuda without a GPU, unknown --model/--device/option, no data source, no
#     loaderd: a clear error and a non-zero exit.
# Needs mpirun (exit 77 without). About 35 s on 2 cores.
set -u
BIN=${BUILD:-build}/bin
command -v mpirun >/dev/null 2>&1 || { echo "# skip: no mpirun"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "# skip: no python3"; exit 77; }
[ -x "$BIN/trainer" ] || { echo "# $BIN/trainer not built"; exit 1; }
T=$(mktemp -d /tmp/it_trainer.XXXXXX)
. "$(dirname "$0")/lib.sh"
mpi_session_in "$T"
trap 'stop_loaderd; rm -rf "$T"' EXIT
trap 'exit 130' INT TERM HUP
# No process whose command line holds $1 (this script's own does not).
noproc() { ! pgrep -f "$1" >/dev/null; }

# Open MPI refuses root without these; --oversubscribe: 4 ranks on 2 cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN="mpirun --oversubscribe"
# Every run has a guard: nothing here may hang the suite.
GUARD="timeout -k 5 120"

# ---- DDP equivalence ----
# run NAME NP [trainer options...]: 20 synthetic steps; the final parameters in $T/NAME.bin,
# the output in $T/NAME.out.
run() {
	name=$1 np=$2
	shift 2
	if [ "$np" -eq 1 ]; then
		$GUARD "$BIN/trainer" --synthetic --device host --crop 32 --steps 20 --log-every 0 \
			--dump-params "$T/$name.bin" "$@" >"$T/$name.out" 2>&1
	else
		$GUARD $MPIRUN -np "$np" "$BIN/trainer" --synthetic --device host --crop 32 --steps 20 \
			--log-every 0 --dump-params "$T/$name.bin" "$@" >"$T/$name.out" 2>&1
	fi
	rc=$?
	[ $rc -eq 0 ] || { echo "# $name (np $np $*) exited $rc:"; show "$T/$name.out"; }
	return $rc
}

# same A B / differ A B: cmp_params (lib.sh) on $T/A.bin and $T/B.bin, from $T/init.bin.
same() { cmp_params same "$T/$1.bin" "$T/$2.bin" "$T/init.bin"; }
differ() { cmp_params differ "$T/$1.bin" "$T/$2.bin" "$T/init.bin"; }
buckets() { grep -o "in [0-9]* buckets" "$T/$1.out" | grep -o "[0-9][0-9]*"; }

B=16
run init 1 --batch $B --lr 0 || no "initial parameters (--lr 0)"
check "synthetic run, 1 rank x $B (the reference)" run r1 1 --batch $B
check "2 ranks x $((B / 2))" run r2 2 --batch $((B / 2))
check "  same parameters as 1 rank x $B after 20 steps (1e-5)" same r1 r2
check "4 ranks x $((B / 4)), oversubscribed" run r4 4 --batch $((B / 4))
check "  same parameters as 1 rank x $B (1e-5)" same r1 r4
# Caps of 0.005 / 0.01 MiB split the mlp's four parameters into four buckets.
SMALL="--first-bucket-mb 0.005 --bucket-mb 0.01"
check "2 ranks x $((B / 2)), small buckets" run r2b 2 --batch $((B / 2)) $SMALL
check "  uses 4 buckets (the log says $(buckets r2b))" [ "$(buckets r2b)" = 4 ]
check "  same parameters as 1 rank x $B in one bucket (1e-5)" same r1 r2b
check "4 ranks x $((B / 4)), small buckets" run r4b 4 --batch $((B / 4)) $SMALL
check "  same parameters as 1 rank x $B (1e-5)" same r1 r4b
check "--accum 2: 1 rank x $B" run a1 1 --batch $B --accum 2
check "--accum 2: 2 ranks x $((B / 2))" run a2 2 --batch $((B / 2)) --accum 2
check "  same parameters (1e-5)" same a1 a2
check "--accum 2: 4 ranks x $((B / 4)), small buckets" run a4 4 --batch $((B / 4)) --accum 2 $SMALL
check "  same parameters as 1 rank x $B --accum 2 (1e-5)" same a1 a4
# Negative controls: other samples (1 rank x B/2 sees only ids 0..B/2-1), or a sum over ranks
# instead of the average (what twice the learning rate on one rank gives), are far off.
check "1 rank x $((B / 2)) (other samples)" run h1 1 --batch $((B / 2))
check "  differs from 2 ranks x $((B / 2)) (the check can fail)" differ r2 h1
check "1 rank x $B at twice the learning rate" run lr2 1 --batch $B --lr 0.1
check "  differs from 2 ranks x $((B / 2)) (no sum in place of the average)" differ r2 lr2

# ---- the mlp learns through loaderd ----
"$BIN/dsgen" imagefolder "$T/tree" --classes 4 --per-class 40 --min-side 64 --max-side 128 >/dev/null
"$BIN/dpack" pack --no-fsync "$T/tree" "$T/d.dpk" >/dev/null 2>&1
check "dataset: 4 classes x 40 generated and packed" [ -s "$T/d.dpk" ]

check "loaderd starts" start_loaderd "$T/loaderd.log" --socket "$T/s.sock" --workers 2 --linger 5
$GUARD $MPIRUN -np 2 "$BIN/trainer" --dataset "$T/d.dpk" --socket "$T/s.sock" --crop 32 --batch 16 \
	--steps 300 --device host --log-every 100 --report-json "$T/learn.json" >"$T/learn.out" 2>"$T/learn.err"
rc=$?
check "mpirun -np 2 trainer --dataset: 300 steps, exit 0 (exit $rc)" [ $rc -eq 0 ]
grep "accuracy" "$T/learn.err" | sed 's/^/# /'
acc=$(grep -o "accuracy [0-9.]*" "$T/learn.err" | tail -n 1 | cut -d' ' -f2)
check "accuracy logged at steps 100, 200 and 300" [ "$(grep -c "step [123]00: loss .* accuracy" "$T/learn.err")" = 3 ]
check "last accuracy ${acc:-none} > 0.5 (2 x chance, 0.25)" lt 0.5 "${acc:-0}"
check "data came from loaderd: both ranks attached" [ "$(grep -c "rank [01]/2 attached" "$T/loaderd.log")" = 2 ]
last=$(tail -n 1 "$T/learn.out")
echo "# $last"
check "last line: trainer: samples_per_s=X au=Y verdict=Z" matches "$last" \
	'^trainer: samples_per_s=[0-9]+(\.[0-9]+)? au=[0-9]+(\.[0-9]+)? verdict=(loader|compute|communication|straggler)-limited$'
[ $rc -eq 0 ] && [ -n "$acc" ] || { show "$T/learn.err"; show "$T/learn.out"; }
check "--report-json: the dataset's 4 classes, 2 ranks, the verdict of the last line" python3 -c "
import json, sys
r = json.load(open('$T/learn.json'))
last = open('$T/learn.out').read().splitlines()[-1]
ok = (r['classes'] == 4 and r['ranks'] == 2 and len(r['per_rank']) == 2 and
      last.endswith('verdict=' + r['verdict']) and r['device'] == 'host')
print('# classes %s, verdict %s, samples_per_s %s' % (r['classes'], r['verdict'], r['samples_per_s']))
sys.exit(not ok)"

# ---- loaderd killed under a running job: the ranks exit with a message ----
$GUARD $MPIRUN -np 2 "$BIN/trainer" --dataset "$T/d.dpk" --socket "$T/s.sock" --crop 32 --batch 16 \
	--steps 1000000 --seed 9 --device host --log-every 0 >"$T/lk.out" 2>&1 &
mp=$!
# Kill it once both ranks of this job are attached and training (or after 20 s at most).
i=0
while [ "$(grep -c "rank [01]/2 attached" "$T/loaderd.log")" -lt 4 ] && [ $i -lt 200 ]; do
	sleep 0.1
	i=$((i + 1))
done
sleep 0.5
kill_wait "$LPID" $mp
LPID=""
check "loaderd killed: mpirun exits non-zero (exit $rc)" [ $rc -ne 0 ]
check "  within $dt s of the kill (< 15)" lt "$dt" 15
check "  and says loaderd went away" grep -q "loaderd closed the connection" "$T/lk.out"
sleep 0.3
check "  no trainer process left behind" noproc "$T/d.dpk"
[ $rc -ne 0 ] || show "$T/lk.out"

# ---- a rank that dies ----
# die_rank NAME RANK SIGNAL: send SIGNAL to rank RANK of a long synthetic run 1.5 s in. A wrapper
# per rank execs the trainer, so its $$ is the trainer's pid. The dump path marks this run's
# processes (it is never written: the run never ends).
die_rank() {
	name=$1 victim=$2 sig=$3
	t0=$(now)
	$GUARD $MPIRUN -np 2 sh -c 'if [ "${OMPI_COMM_WORLD_RANK:-$PMI_RANK}" = '"$victim"' ]; then
		( sleep 1.5; kill -'"$sig"' $$ ) & fi
		exec "$0" "$@"' "$BIN/trainer" --synthetic --device host --crop 32 --batch 4 --steps 100000000 \
		--log-every 0 --dump-params "$T/$name.never" >"$T/$name.out" 2>&1
	rc=$?
	dt=$(python3 -c "print('%.1f' % ($(now) - $t0 - 1.5))")
	check "rank $victim sent SIG$sig: mpirun exits non-zero (exit $rc)" [ $rc -ne 0 ]
	check "  within $dt s of the signal (< 15)" lt "$dt" 15
	check "  with a message naming rank $victim" grep -Eq "rank $victim .*(signal|exited)" "$T/$name.out"
	sleep 0.3
	check "  no trainer process left behind" noproc "$T/$name.never"
	[ $rc -ne 0 ] || show "$T/$name.out"
}
die_rank kill1 1 KILL
die_rank kill0 0 KILL
die_rank term1 1 TERM

# A rank that fails (here: a bad --model on rank 1 only) takes the job down with its message,
# while rank 0 waits in the parameter broadcast.
t0=$(now)
$GUARD $MPIRUN -np 2 sh -c 'm=mlp; [ "${OMPI_COMM_WORLD_RANK:-$PMI_RANK}" = 1 ] && m=bogus
	exec "$0" --model $m "$@"' "$BIN/trainer" --synthetic --device host --crop 32 --batch 4 \
	--steps 100000000 --log-every 0 >"$T/fail1.out" 2>&1
rc=$?
dt=$(since "$t0")
check "rank 1 fails alone: mpirun exits non-zero (exit $rc)" [ $rc -ne 0 ]
check "  within $dt s (< 15)" lt "$dt" 15
check "  rank 1's message is shown" grep -q "rank 1: error: unknown model 'bogus'" "$T/fail1.out"

# ---- --trace ----
$GUARD $MPIRUN -np 2 "$BIN/trainer" --synthetic --device host --crop 32 --batch 4 --steps 10 \
	--log-every 0 --trace "$T/trace.json" --report-json "$T/report.json" >"$T/trace.out" 2>&1
check "--trace run exits 0" [ $? -eq 0 ]
check "  the trace is valid JSON (python3 -m json.tool)" sh -c "python3 -m json.tool '$T/trace.json' >/dev/null"
check "  complete events of ranks 0 and 1, a compute event for each step" python3 -c "
import json, sys
ev = json.load(open('$T/trace.json'))['traceEvents']
ok = len(ev) > 0 and all(e['ph'] == 'X' and e['dur'] >= 0 and e['ts'] >= 0 for e in ev)
for r in (0, 1):
    steps = sorted(e['args']['step'] for e in ev if e['pid'] == r and e['name'] == 'compute')
    ok = ok and steps == list(range(10))
print('# %d events, pids %s' % (len(ev), sorted({e['pid'] for e in ev})))
sys.exit(not ok)"

check "--report-json is valid JSON: figures per rank and phase, thresholds, verdict" python3 -c "
import json, sys
r = json.load(open('$T/report.json'))
ph = ('data', 'copy', 'compute', 'comm', 'opt', 'gap')
ok = (r['schema'] == 'loaderd-trainer-report/1' and r['synthetic'] is True and r['steps'] == 10 and
      [x['rank'] for x in r['per_rank']] == [0, 1] and
      all(set(ph) <= set(x['shares']) for x in r['per_rank'] + [r]) and
      set(r['thresholds']) == {'lost_min', 'imbalance_min', 'straggler_steps'} and
      r['verdict'].endswith('-limited') and r['params'] > 0 and r['classes'] == 10)
sys.exit(not ok)"

# ---- bad usage ----
$GUARD "$BIN/trainer" --synthetic --device cuda --crop 32 --batch 4 --steps 2 --log-every 0 >"$T/cuda.out" 2>&1
rc=$?
if [ $rc -eq 0 ]; then
	# A GPU is visible to this build: then the run must really have used it.
	check "--device cuda ran on the GPU (one is visible here)" grep -q "device cuda" "$T/cuda.out"
else
	check "--device cuda without a GPU: exit 1 (exit $rc)" [ $rc -eq 1 ]
	check "  says why and what to do" grep -Eq "error: --device cuda: .*(GPU|CUDA).*--device host" "$T/cuda.out"
	grep "error" "$T/cuda.out" | sed 's/^/# /'
fi
"$BIN/trainer" --synthetic --device host --model resnet9000 --steps 2 >/dev/null 2>"$T/model.err"
rc=$?
check "unknown --model: exit 1 or 2 (exit $rc)" [ $rc -eq 1 -o $rc -eq 2 ]
check "  names the model and the choices" grep -q "unknown model 'resnet9000': use mlp" "$T/model.err"
"$BIN/trainer" --synthetic --device tpu --steps 2 >/dev/null 2>"$T/dev.err"
rc=$?
check "unknown --device: exit 1 or 2 (exit $rc)" [ $rc -eq 1 -o $rc -eq 2 ]
check "  names it and the choices" grep -q "device tpu: use cuda or host" "$T/dev.err"
"$BIN/trainer" --synthetic --bogus >/dev/null 2>&1
check "unknown option: exit 2" [ $? -eq 2 ]
"$BIN/trainer" --device host >/dev/null 2>"$T/nodata.err"
rc=$?
check "no data source: exit 2 (exit $rc)" [ $rc -eq 2 ]
check "  says to give --dataset or --synthetic" grep -q "give --dataset D.dpk .* or --synthetic" "$T/nodata.err"
$GUARD "$BIN/trainer" --dataset "$T/d.dpk" --socket "$T/none.sock" --device host --steps 2 >/dev/null 2>"$T/nosock.err"
rc=$?
check "no loaderd at --socket: exit 1 (exit $rc)" [ $rc -eq 1 ]
check "  names the socket" grep -q "cannot connect to loaderd at $T/none.sock" "$T/nosock.err"
check "--help exits 0 and describes the last line" sh -c "'$BIN/trainer' --help | grep -q 'samples_per_s'"
# Regression (trainer/main.c, micro_total with --synthetic --epochs): the run did 0 steps and
# exited 0 with samples_per_s=0.0. Either refuse the combination or train; never do nothing.
$GUARD "$BIN/trainer" --synthetic --device host --crop 32 --batch 4 --epochs 2 --log-every 0 >"$T/ep.out" 2>&1
rc=$?
check "--synthetic --epochs 2: refused (exit 2) or trains, not 0 steps (exit $rc)" \
	[ $rc -eq 2 -o \( $rc -eq 0 -a -z "$(grep " 0 steps" "$T/ep.out")" \) ]

echo "$((n - fails)) passed, $fails failed"
[ $fails -eq 0 ]
