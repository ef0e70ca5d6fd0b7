#!/bin/sh
# it_balance.sh - balanced shares through the real daemon and ldcat (issue 25): a loaderd
# without --balance refuses a job that asks for them, naming the option; with it, two ranks that
# report 1000 and 3000 ns of compute per sample split every global step of a 2-epoch job so
# that the steps hold exactly the samples of an even run, in the same order (rank 0's part then
# rank 1's), every step the same count, and the fast rank ends with about 3/4 of each step.
# Nonsense reports starve nobody and the clamp is logged; no rank opens an update's step before
# every rank gave its report (a lone rank 0 gets exactly 4 steps). Over MPI: the trainer's
# parameters with shares equal even splits' (float tolerance), and resume chaos (rank kills while
# the shares change; loaderd SIGKILLed after a rank and under a running trainer: the
# checkpoint's split seed) ends byte-identical to the uninterrupted run. PyTorch DDP over gloo
# with loaderd.ddp's hook equals even splits. Every report is fixed (--report-ns): no check
# depends on the machine's load. About 25-60 s on 2 shared cores.
set -u
BIN=${BUILD:-build}/bin
. "$(dirname "$0")/lib.sh"
T=$(mktemp -d /tmp/it_balance.XXXXXX)
trap 'stop_loaderd; [ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
trap 'exit 130' INT TERM HUP

"$BIN/dsgen" imagefolder "$T/tree" --classes 4 --per-class 24 --min-side 16 --max-side 24 \
	>/dev/null 2>&1
"$BIN/dpack" pack --no-fsync "$T/tree" "$T/a.dpk" >/dev/null 2>&1
check "dpack packs 96 samples" [ $? -eq 0 ]
# cat_rank NAME RANK [ldcat option...]: rank RANK of 2, stdout in $T/NAME.RANK
cat_rank() {
	name=$1 rank=$2
	shift 2
	"$BIN/ldcat" --socket "$T/s.sock" --dataset "$T/a.dpk" --job "$name" --batch 8 --crop 8 \
		--epochs 8 --seed 5 --world 2 --rank "$rank" --slots 2 --timeout-ms 10000 "$@" \
		>"$T/$name.$rank" 2>"$T/$name.$rank.err"
}

start_loaderd "$T/loaderd.log" --socket "$T/s.sock" --workers 2 ||
	{ echo "0 passed, 1 failed"; exit 1; }
cat_rank refused 0 --balance
check "without loaderd --balance a balanced job is refused" [ $? -eq 1 ]
check "the refusal names --balance" grep -q "start it with --balance" "$T/refused.0.err"
stop_loaderd

start_loaderd "$T/loaderd.log" --socket "$T/s.sock" --workers 2 --balance ||
	{ echo "0 passed, 1 failed"; exit 1; }
cat_rank even 0 & p0=$!
cat_rank even 1; s1=$?
wait $p0; s0=$?
check "an even run ends" [ $s0 -eq 0 ] && [ $s1 -eq 0 ]
cat_rank bal 0 --balance --report-ns 1000 & p0=$!
cat_rank bal 1 --balance --report-ns 3000; s1=$?
wait $p0; s0=$?
check "a balanced run ends" [ $s0 -eq 0 ] && [ $s1 -eq 0 ]
show "$T/bal.0.err" 2
python3 - "$T" >"$T/cmp.out" 2>&1 <<'PY'
import sys, collections
t = sys.argv[1]
def steps(name):
    per = [collections.defaultdict(list), collections.defaultdict(list)]
    for r in (0, 1):
        for line in open(f"{t}/{name}.{r}"):
            s, i, lab, fl = map(int, line.split())
            per[r][s].append((i, fl))
    return per
even, bal = steps("even"), steps("bal")
n = max(even[0]) + 1
bad = [s for s in range(n) if even[0][s] + even[1][s] != bal[0][s] + bal[1][s]]
print("steps", n, "differing", len(bad), bad[:5])
late = [len(bal[0][s]) for s in range(n - 8, n)]
print("rank 0's counts in the last 8 steps", late)
ok = not bad and n == 48 and all(11 <= c <= 13 for c in late)
sys.exit(0 if ok else 1)
PY
check "every step holds the even run's samples in order; rank 0 ends near 12 of 16" [ $? -eq 0 ]
show "$T/cmp.out" 3
# ---- a rank reporting nonsense starves nobody and crashes nothing ----
LOADERD_LIB=$(pwd)/${BUILD:-build}/lib/libldc.so timeout -k 5 60 python3 \
	"$(dirname "$0")/balance_hostile.py" "$T/s.sock" "$T/a.dpk" >"$T/hostile.out" 2>&1
check "nonsense reports (NaN, <0, 0, inf, 1e300, 1e-300, garbage bits): every step whole, \
no share under the floor; reopened from step 0, every split as recorded" [ $? -eq 0 ]
show "$T/hostile.out" 2
check "the clamp is logged, naming the job" \
	grep -q "job hostile-reports step [0-9]*: balanced shares: 1 rank(s) reported" "$T/loaderd.log"

# ---- the gate: no rank opens an update's step before every rank gave its report ----
# Rank 0 alone (rank 1 not attached yet): steps 0..3 are split evenly, the update at step 4
# waits for rank 1's report, so loaderd publishes exactly 4 steps to rank 0 and no more; once
# rank 1 comes, both end with the whole job.
published0() {
	"$BIN/loaderctl" --socket "$T/s.sock" --json stats gate 2>/dev/null | python3 -c '
import json, sys
j = json.load(sys.stdin)
jobs = j["jobs"] if isinstance(j, dict) and "jobs" in j else j
print([r for r in jobs[0]["ranks"] if r["rank"] == 0][0]["published"])' 2>/dev/null || echo -1
}
cat_rank gate 0 --balance --report-ns 1000 & p0=$!
i=0
while [ "$(published0)" -lt 4 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
sleep 0.5
g=$(published0)
check "rank 1 absent: rank 0 gets exactly the 4 steps before the first update (got $g)" [ "$g" = 4 ]
cat_rank gate 1 --balance --report-ns 3000; s1=$?
wait $p0; s0=$?
check "rank 1 attached: both ranks end the job" [ $s0 -eq 0 ] && [ $s1 -eq 0 ] &&
	[ "$(cut -d' ' -f1 "$T/gate.0" | sort -un | wc -l)" = 48 ]

# ---- the trainer: the same parameters as even splits, on host ranks over MPI ----
if command -v mpirun >/dev/null 2>&1; then
	mpi_session_in "$T"
	"$BIN/dsgen" imagefolder "$T/t2" --classes 4 --per-class 16 --min-side 24 --max-side 40 \
		>/dev/null 2>&1
	"$BIN/dpack" pack --no-fsync "$T/t2" "$T/b.dpk" >/dev/null 2>&1
	# train NAME [trainer option...]: 2 host ranks, 24 steps of batch 8, params in $T/NAME.bin
	train() {
		name=$1
		shift
		timeout -k 5 120 mpirun --oversubscribe --allow-run-as-root -np 2 "$BIN/trainer" \
			--dataset "$T/b.dpk" --socket "$T/s.sock" --crop 16 --batch 8 --steps 24 \
			--seed 7 --device host --log-every 0 --slots 2 --prefetch 1 \
			--dump-params "$T/$name.bin" --log-samples "$T/$name.smp" "$@" \
			>"$T/$name.out" 2>"$T/$name.err"
	}
	train init --lr 0 --steps 1
	train even
	check "trainer, even splits: exit 0" [ $? -eq 0 ]
	# fixed reports (1000 and 3000 ns per sample): the shares do not depend on the load
	train bal --balance --inject-slow-rank 1:3 --report-ns 1000
	check "trainer --balance with rank 1 three times slower: exit 0" [ $? -eq 0 ]
	train lr --lr 0.06
	python3 - "$T" >"$T/tcmp.out" 2>&1 <<'PY'
import sys, collections
t = sys.argv[1]
c = [collections.Counter(), collections.Counter()]
for r in (0, 1):
    for line in open(f"{t}/bal.smp.{r}"):
        c[r][int(line.split()[0])] += 1
late = [c[0][s] for s in range(16, 24)]
print("rank 0's share of 16 in steps 16..23:", late)
sys.exit(0 if all(c[0][s] + c[1][s] == 16 for s in range(24)) and min(late) >= 10 else 1)
PY
	check "the shares moved: the fast rank takes 10 or more of 16" [ $? -eq 0 ]
	show "$T/tcmp.out" 1
	check "parameters with shares = parameters with even splits (float tolerance)" \
		cmp_params same "$T/even.bin" "$T/bal.bin" "$T/init.bin"
	check "and the comparison can fail (lr 0.06 against 0.05)" \
		cmp_params differ "$T/even.bin" "$T/lr.bin" "$T/init.bin"
	[ $fails -eq 0 ] || { show "$T/bal.err"; show "$T/even.err"; }
	# ---- resume chaos while the shares change (fixed speeds: the same splits every run) ----
	# A rank SIGKILLs itself at step K (checkpoints every step; mpirun ends the other) and the
	# run resumes from its checkpoint, the same job (--job) on the same loaderd, which still
	# holds the job's split log and its pending update: the same committed stream on every rank (so the same splits)
	# and byte-identical parameters to the uninterrupted run. Updates fall on steps 8, 12, 16,
	# 20 while the shares move from 8 to 12 of 16. 0:11 and 1:12 resume in the window of the
	# update at 16 (k - 4 - slots < resume <= k - 4, 2 slots), with the trainer's split seed
	# sent to the job loaderd holds: whether the killed ring had given its report for 16 before
	# the kill is a race (it usually had); test_srv_split covers the seed's report exactly.
	FIXED="--balance --inject-slow-rank 1:3 --report-ns 1000 --checkpoint-dir"
	train cref $FIXED "$T/cref.ck" --checkpoint-every 1 --log-consumed "$T/cref"
	check "chaos reference: balanced, fixed speeds, uninterrupted: exit 0" [ $? -eq 0 ]
	for k in 1:10 0:11 1:12 0:13 1:17; do
		cn=ck${k%%:*}_${k##*:}
		train "$cn" $FIXED "$T/$cn.ck" --checkpoint-every 1 --resume --inject-kill-at "$k" \
			--log-consumed "$T/$cn" --job "chaos-$cn"
		rc1=$?
		train "$cn" $FIXED "$T/$cn.ck" --checkpoint-every 1 --resume --log-consumed "$T/$cn" \
			--job "chaos-$cn"
		rc2=$?
		check "rank ${k%%:*} SIGKILLed at step ${k##*:}: killed (exit $rc1), resumed (exit $rc2)" \
			[ $rc1 -ne 0 ] && [ $rc2 -eq 0 ]
		check "  parameters byte-identical to the uninterrupted run" \
			cmp -s "$T/cref.bin" "$T/$cn.bin"
		out=$(python3 "$(dirname "$0")/committed_stream.py" "$T/cref" "$T/$cn" 2)
		check "  $out" [ $? -eq 0 ]
	done
	# ---- and loaderd SIGKILLed: the job's split log is gone with it ----
	# A rank SIGKILLs itself at step K, then loaderd is SIGKILLed and started again: the run
	# resumes from its checkpoint on a loaderd that never saw the job. The checkpoint's split
	# seed (the weights in force at its step and the reports of the updates still pending)
	# starts the new job's split log, so the splits from the resume on are the uninterrupted
	# run's: the same committed stream and byte-identical parameters. Resumed under the same
	# --job, and without --job (a new job name; the trainer's first launch had none either).
	for k in 1:10:job 0:13:nojob 1:17:job; do
		r=${k%%:*} rest=${k#*:}
		st=${rest%%:*} how=${rest##*:}
		cn=lk${r}_$st
		jopt=""
		[ "$how" = job ] && jopt="--job chaos-$cn"
		train "$cn" $FIXED "$T/$cn.ck" --checkpoint-every 1 --resume --inject-kill-at "$r:$st" \
			--log-consumed "$T/$cn" $jopt
		rc1=$?
		kill -9 "$LPID" 2>/dev/null
		wait "$LPID" 2>/dev/null
		start_loaderd "$T/loaderd.log.$cn" --socket "$T/s.sock" --workers 2 --balance ||
			{ echo "# loaderd did not start again"; fails=$((fails + 1)); break; }
		train "$cn" $FIXED "$T/$cn.ck" --checkpoint-every 1 --resume --log-consumed "$T/$cn" \
			$jopt
		rc2=$?
		check "rank $r SIGKILLed at step $st, then loaderd SIGKILLed and restarted: killed \
(exit $rc1), resumed ${jopt:-without --job} (exit $rc2)" [ $rc1 -ne 0 ] && [ $rc2 -eq 0 ]
		check "  parameters byte-identical to the uninterrupted run" \
			cmp -s "$T/cref.bin" "$T/$cn.bin"
		out=$(python3 "$(dirname "$0")/committed_stream.py" "$T/cref" "$T/$cn" 2)
		check "  $out" [ $? -eq 0 ]
	done
	# loaderd SIGKILLed under a running trainer (every allreduce 100 ms late, so that the kill
	# lands mid-run: after rank 0 logged step 11, while the shares move): the ranks lose loaderd
	# and end; loaderd starts again and the run resumes from its last checkpoint, whatever step
	# that was.
	cn=lkrun
	train "$cn" $FIXED "$T/$cn.ck" --checkpoint-every 1 --resume --log-consumed "$T/$cn" \
		--inject-comm-delay-ms 100 &
	tp=$!
	i=0
	while ! grep -q "^step 11 " "$T/$cn.0" 2>/dev/null && [ $i -lt 300 ]; do
		sleep 0.05
		i=$((i + 1))
	done
	kill -9 "$LPID" 2>/dev/null
	wait "$LPID" 2>/dev/null
	wait $tp
	rc1=$?
	at=$(grep -c "^step " "$T/$cn.0")
	start_loaderd "$T/loaderd.log.$cn" --socket "$T/s.sock" --workers 2 --balance ||
		{ echo "# loaderd did not start again"; fails=$((fails + 1)); }
	train "$cn" $FIXED "$T/$cn.ck" --checkpoint-every 1 --resume --log-consumed "$T/$cn"
	rc2=$?
	check "loaderd SIGKILLed under the running trainer (rank 0 had logged $at steps of 24): the \
run ended (exit $rc1), resumed (exit $rc2)" [ $rc1 -ne 0 ] && [ $at -lt 24 ] && [ $rc2 -eq 0 ]
	check "  parameters byte-identical to the uninterrupted run" cmp -s "$T/cref.bin" "$T/$cn.bin"
	out=$(python3 "$(dirname "$0")/committed_stream.py" "$T/cref" "$T/$cn" 2)
	check "  $out" [ $? -eq 0 ]
else
	echo "# no mpirun: the trainer's part is skipped"
fi
# ---- PyTorch: DistributedDataParallel over gloo with loaderd.ddp's hook ----
PY=${LOADERD_PYTHON:-/usr/bin/python3}
if "$PY" -c 'import numpy, torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
	LOADERD_LIB=$(pwd)/${BUILD:-build}/lib/libldc.so timeout -k 5 180 "$PY" \
		"$(dirname "$0")/balance_ddp.py" "$T/s.sock" "$T/b.dpk" >"$T/py.out" 2>&1
	check "torch DDP (gloo): balanced with loaderd.ddp = even splits; DDP's plain mean is not" \
		[ $? -eq 0 ]
	show "$T/py.out" 3
else
	echo "# no torch with gloo for $PY: the PyTorch part is skipped (scripts/deps.sh)"
fi
check "loaderd is alive" kill -0 "$LPID"
[ $fails -eq 0 ] || show "$T/loaderd.log"

echo "$((n - fails)) passed, $fails failed"
[ $fails -eq 0 ]
