#!/bin/sh
# it_resume.sh - exactly once across crashes (issue 14), with the real loaderd and real MPI ranks
# on the host device. The dataset has bad records, so substitution is exercised throughout.
#   Equivalence: a run SIGKILLed and resumed (--resume) from its last checkpoint ends with
#     byte-identical parameters (--dump-params, cmp) to the uninterrupted run, and its committed
#     stream (tests/committed_stream.py over --log-consumed) equals the uninterrupted run's: for 1
#     and 2 ranks; the kill hitting a trainer rank (--inject-kill-at) and, separately, loaderd
#     (SIGKILL, restarted before the ranks resume); at the first step, mid-epoch, the last step of
#     an epoch and the first step after an epoch boundary (loaderd with 1 rank: the middle two).
#   Bad records: the committed ids (substitutes included) equal the uninterrupted run's on every
#     rank, and no bad record's id is ever committed.
#   Chaos: a 2-rank job over 20 whole epochs with CHAOS_KILLS (default 21) random SIGKILLs of
#     ranks and of loaderd (seed printed; CHAOS_SEED replays it), resumed each time: the same
#     final parameters and the same committed stream, none missing, none twice.
#   Checkpointing does not change the result; SIGTERM writes a checkpoint after the step the ranks
#     agree on and stops them, and the run resumes from it bit for bit.
#   A damaged checkpoint is refused, naming the file.
#   Block sampling with the job's own geometry (--sampling block --block 5 --window 3): loaderd
#     SIGKILLed mid-epoch and restarted, the ranks resume with the same stream and parameters as
#     the uninterrupted block-mode run; a resume with another --block is refused, naming it.
# Needs mpirun and python3 (exit 77 without). About 2 minutes on 2 shared cores.
set -u
BIN=${BUILD:-build}/bin
command -v mpirun >/dev/null 2>&1 || { echo "# skip: no mpirun"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "# skip: no python3"; exit 77; }
[ -x "$BIN/trainer" ] || { echo "# $BIN/trainer not built"; exit 1; }
T=$(mktemp -d /tmp/it_resume.XXXXXX)
. "$(dirname "$0")/lib.sh"
mpi_session_in "$T"
trap 'stop_pid "${MP:-}"; stop_loaderd; rm -rf "$T"' EXIT
trap 'exit 130' INT TERM HUP
STREAM="python3 $(dirname "$0")/committed_stream.py"

# Open MPI refuses root without these; --oversubscribe: ranks on 2 shared cores. One BLAS thread:
# the same arithmetic in every run, and no oversubscription of the cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
SOCK=$T/s.sock

# 96 JPEGs, 3 of them damaged (one byte flipped in the middle of the record).
"$BIN/dsgen" imagefolder "$T/tree" --classes 4 --per-class 24 --min-side 24 --max-side 48 >/dev/null
"$BIN/dpack" pack --no-fsync "$T/tree" "$T/d.dpk" >/dev/null 2>&1
BAD="5 40 77"
python3 - "$T/d.dpk" $BAD <<'EOF'
import struct, sys
path, ids = sys.argv[1], [int(x) for x in sys.argv[2:]]
with open(path, "r+b") as f:
    idx = struct.unpack_from("<Q", f.read(152), 56)[0]
    for i in ids:
        f.seek(idx + 64 * i)
        off, ln = struct.unpack_from("<QQ", f.read(16))
        f.seek(off + ln // 2)
        b = f.read(1)
        f.seek(off + ln // 2)
        f.write(bytes([(b[0] + 1) % 256]))
EOF
check "dpack verify finds the 3 bad records" \
	sh -c "[ \$('$BIN/dpack' verify '$T/d.dpk' | grep -c 'bad sample') = 3 ]"

start_loaderd "$T/ld.log" --socket "$SOCK" --workers 2 || exit 1

# train NP [options]: the trainer on NP ranks over 4 epochs of the dataset; a guard on each run.
EPOCHS=4
train() {
	np=$1
	shift
	# shellcheck disable=SC2086 # MODE: options, split on purpose
	timeout -k 5 60 mpirun --oversubscribe -np "$np" "$BIN/trainer" --socket "$SOCK" \
		--dataset "$T/d.dpk" --device host --crop 16 --batch 8 --epochs "$EPOCHS" \
		--log-every 0 --model mlp:hidden=32 $MODE "$@" </dev/null
}
MODE=""   # sampling options of every run (the block-mode cases set them)
TAG=""    # the reference run the cases compare with: $T/ref$TAG$np
# resumed_at OUT: the step a run's output says it resumed at ("fresh" when from the start).
resumed_at() {
	sed -n 's/.*resuming from .* at step \([0-9]*\).*/\1/p' "$1" | head -n 1 | grep . ||
		echo fresh
}
# restart_loaderd: SIGKILL loaderd and start a new one on the same socket.
kill_loaderd() {
	kill -KILL "$LPID" 2>/dev/null
	wait "$LPID" 2>/dev/null
	LPID=""
}
# wait_step LOG S: until LOG (a rank's --log-consumed file) has trained step S, or 20 s.
wait_step() {
	i=0
	while ! grep -q "^step $2 " "$1" 2>/dev/null && [ $i -lt 2000 ]; do
		sleep 0.01
		i=$((i + 1))
	done
}

t0=$(date +%s)
for np in 1 2; do
	train "$np" --dump-params "$T/ref$np.bin" --log-consumed "$T/ref$np" >"$T/ref$np.out" 2>&1
	check "reference: $np rank(s), $EPOCHS epochs, uninterrupted" [ $? -eq 0 ]
done
check "bad records were substituted (loaderd's log)" grep -q "substituted by sample" "$T/ld.log"
for b in $BAD; do
	check "bad record $b is in no reference stream" \
		sh -c "! cat '$T'/ref1.0 '$T'/ref2.0 '$T'/ref2.1 | grep -q '^step .* $b .*\.\$'"
done

# ---- a trainer rank killed ----
# rank_case NP STEP WHAT: the last rank SIGKILLs itself at STEP (batch held); checkpoints every
# step, so the resumed run starts at STEP exactly (from scratch for step 0).
rank_case() {
	np=$1 at=$2 what=$3 D=$T/r$1-$2
	mkdir -p "$D"
	train "$np" --checkpoint-dir "$D/ck" --checkpoint-every 1 --resume \
		--inject-kill-at "$((np - 1)):$at" --log-consumed "$D/log" >"$D/1.out" 2>&1
	rc1=$?
	train "$np" --checkpoint-dir "$D/ck" --checkpoint-every 1 --resume --dump-params "$D/p.bin" \
		--log-consumed "$D/log" >"$D/2.out" 2>&1
	rc2=$?
	want=$at
	[ "$at" -eq 0 ] && want=fresh
	got=$(resumed_at "$D/2.out")
	check "$np rank(s), rank $((np - 1)) SIGKILLed at step $at ($what): killed (exit $rc1), resumed at $got, exit $rc2" \
		[ "$rc1" -ne 0 -a "$rc2" -eq 0 -a "$got" = "$want" ]
	[ "$rc2" -eq 0 ] || show "$D/2.out"
	check "  parameters byte-identical to the uninterrupted run" cmp -s "$T/ref$np.bin" "$D/p.bin"
	out=$($STREAM "$T/ref$np" "$D/log" "$np")
	check "  $out" [ $? -eq 0 ]
}

# ---- loaderd killed ----
# loaderd_case NP STEP WHAT: loaderd is SIGKILLed once rank 0 has trained STEP (steps slowed by
# 15 ms so that the kill lands near it), the ranks fail, loaderd is restarted, the ranks resume
# from the last checkpoint (every 2 steps: some batches are delivered again). A ring of 2 slots,
# so that the ranks run dry soon after the kill.
loaderd_case() {
	np=$1 at=$2 what=$3 D=$T/l$TAG$1-$2
	mkdir -p "$D"
	train "$np" --checkpoint-dir "$D/ck" --checkpoint-every 2 --resume --inject-comm-delay-ms 15 \
		--slots 2 --prefetch 1 --log-consumed "$D/log" >"$D/1.out" 2>&1 &
	MP=$!
	if [ "$at" -eq 0 ]; then
		i=0
		while ! grep -q "^resume" "$D/log.0" 2>/dev/null && [ $i -lt 2000 ]; do
			sleep 0.01
			i=$((i + 1))
		done
	else
		wait_step "$D/log.0" "$at"
	fi
	hit=$(grep -c '^step' "$D/log.0" 2>/dev/null)
	kill_loaderd
	wait "$MP"
	rc1=$?
	MP=""
	start_loaderd "$T/ld.log" --socket "$SOCK" --workers 2 || exit 1
	train "$np" --checkpoint-dir "$D/ck" --checkpoint-every 2 --resume --dump-params "$D/p.bin" \
		--log-consumed "$D/log" >"$D/2.out" 2>&1
	rc2=$?
	check "$np rank(s), loaderd SIGKILLed after $hit steps ($what, step $at): ranks fail (exit $rc1), loaderd restarted, resumed at $(resumed_at "$D/2.out"), exit $rc2" \
		[ "$rc1" -ne 0 -a "$rc2" -eq 0 ]
	[ "$rc2" -eq 0 ] || show "$D/2.out"
	check "  parameters byte-identical to the uninterrupted run" cmp -s "$T/ref$TAG$np.bin" "$D/p.bin"
	out=$($STREAM "$T/ref$TAG$np" "$D/log" "$np")
	check "  $out" [ $? -eq 0 ]
}

for np in 1 2; do
	spe=$((96 / 8 / np))
	rank_case "$np" 0 "the first step"
	rank_case "$np" $((spe + spe / 2)) "mid-epoch 1"
	rank_case "$np" $((2 * spe - 1)) "the last step of epoch 1"
	rank_case "$np" $((2 * spe)) "the first step of epoch 2"
	# every point for 2 ranks; two for 1 rank (time: each case is two MPI launches)
	[ "$np" -eq 2 ] && loaderd_case "$np" 0 "the first step"
	loaderd_case "$np" $((spe + spe / 2)) "mid-epoch 1"
	loaderd_case "$np" $((2 * spe - 1)) "the last step of epoch 1"
	[ "$np" -eq 2 ] && loaderd_case "$np" $((2 * spe)) "the first step of epoch 2"
done
echo "# equivalence: $(($(date +%s) - t0)) s"

# ---- block sampling, the job's own geometry: exactly once across a loaderd restart ----
MODE="--sampling block --block 5 --window 3" TAG=b
train 2 --dump-params "$T/refb2.bin" --log-consumed "$T/refb2" >"$T/refb2.out" 2>&1
check "reference in block mode (--block 5 --window 3): 2 ranks, $EPOCHS epochs, uninterrupted" \
	[ $? -eq 0 ]
check "  a stream of its own (not the shuffle's)" sh -c "! cmp -s '$T/ref2.0' '$T/refb2.0'"
loaderd_case 2 9 "block mode, mid-epoch 1"
D=$T/lb2-9
MODE="--sampling block --block 6 --window 3"
train 2 --checkpoint-dir "$D/ck" --resume >"$D/3.out" 2>&1
rc=$?
check "  a resume with --block 6 from its checkpoint: refused (exit $rc), naming the field" \
	[ "$rc" -ne 0 ] && grep -q "resume token: block: the token is for blocks of 5 records" "$D/3.out"
MODE="" TAG=""

# ---- checkpoints do not change the result ----
D=$T/every
mkdir -p "$D"
train 2 --checkpoint-dir "$D/ck" --checkpoint-every 1 --dump-params "$D/p.bin" >"$D/1.out" 2>&1
check "a checkpoint after every step: the same parameters as without" \
	cmp -s "$T/ref2.bin" "$D/p.bin"
# ---- 20 epochs: SIGTERM, then the chaos ----
EPOCHS=20
TOTAL=$((EPOCHS * 6))
train 2 --dump-params "$T/cref.bin" --log-consumed "$T/cref" >"$T/cref.out" 2>&1
check "reference: 2 ranks, $EPOCHS epochs, uninterrupted" [ $? -eq 0 ]
D=$T/term
mkdir -p "$D"
# not through train(): the signal goes to timeout, which passes it to mpirun (alone: --foreground),
# which passes it to the ranks, about a second later
timeout --foreground -k 5 60 mpirun --oversubscribe -np 2 "$BIN/trainer" --socket "$SOCK" --dataset "$T/d.dpk" \
	--device host --crop 16 --batch 8 --epochs "$EPOCHS" --log-every 0 --model mlp:hidden=32 \
	--checkpoint-dir "$D/ck" --resume --inject-comm-delay-ms 20 --log-consumed "$D/log" \
	</dev/null >"$D/1.out" 2>&1 &
MP=$!
wait_step "$D/log.0" 8
kill -TERM "$MP"
wait "$MP"
MP=""
at=$(ls "$D"/ck/ckpt-*.ldck 2>/dev/null | tail -n 1 | sed 's/.*ckpt-0*\([0-9][0-9]*\)\.ldck/\1/')
train 2 --checkpoint-dir "$D/ck" --resume --dump-params "$D/p.bin" --log-consumed "$D/log" \
	>"$D/2.out" 2>&1
rc=$?
term_ok() {
	[ -n "$at" ] && [ "$rc" -eq 0 ] && grep -q "stopped by a signal" "$D/1.out" &&
		[ "$(resumed_at "$D/2.out")" = "$at" ]
}
check "SIGTERM to mpirun at step 8 (of $TOTAL): a checkpoint at step ${at:-none}, the ranks stop; resumed there (exit $rc)" \
	term_ok
check "  parameters byte-identical to the uninterrupted run" cmp -s "$T/cref.bin" "$D/p.bin"
out=$($STREAM "$T/cref" "$D/log" 2)
check "  $out" [ $? -eq 0 ]

# ---- a damaged checkpoint is refused ----
D=$T/r2-9
f=$(ls "$D"/ck/ckpt-*.ldck | tail -n 1)
printf 'X' | dd of="$f" bs=1 seek=400 conv=notrunc 2>/dev/null
train 2 --checkpoint-dir "$D/ck" --resume >"$D/3.out" 2>&1
rc=$?
refused() { [ "$rc" -ne 0 ] && grep -q "$(basename "$f"): checksum mismatch" "$D/3.out"; }
check "a damaged checkpoint: refused (exit $rc), naming the file" refused

# ---- chaos: random SIGKILLs of ranks and loaderd over whole epochs ----
t0=$(date +%s)
SEED=${CHAOS_SEED:-$(date +%s)}
KILLS=${CHAOS_KILLS:-21}
echo "# chaos: seed $SEED (CHAOS_SEED=$SEED replays it), $KILLS kills"
# the schedule: one "KIND OFFSET" line per kill; KIND 0, 1 = that rank, 2 = loaderd
python3 -c "
import random
r = random.Random($SEED)
for _ in range($KILLS):
    print(r.randrange(3), r.randint(1, 3))" >"$T/schedule"
D=$T/chaos
mkdir -p "$D"
kills=0 rank_kills=0 ld_kills=0 launches=0 failed=0 last_at=0
# latest checkpoint's step, 0 without one
ckstep() {
	f=$(ls "$D"/ck/ckpt-*.ldck 2>/dev/null | tail -n 1)
	[ -n "$f" ] && basename "$f" | sed 's/ckpt-0*\([0-9][0-9]*\)\.ldck/\1/;s/^$/0/' || echo 0
}
while read -r kind off; do
	cur=$(ckstep)
	at=$((cur + off))
	[ "$at" -lt $((TOTAL - 6)) ] || break
	launches=$((launches + 1))
	if [ "$kind" -lt 2 ]; then
		train 2 --checkpoint-dir "$D/ck" --checkpoint-every 2 --resume \
			--inject-kill-at "$kind:$at" --log-consumed "$D/log" >>"$D/out" 2>&1
		rc=$?
		rank_kills=$((rank_kills + 1))
	else
		train 2 --checkpoint-dir "$D/ck" --checkpoint-every 2 --resume --slots 2 \
			--prefetch 1 --inject-comm-delay-ms 15 --log-consumed "$D/log" >>"$D/out" 2>&1 &
		MP=$!
		wait_step "$D/log.0" "$at"
		kill_loaderd
		wait "$MP"
		rc=$?
		MP=""
		start_loaderd "$T/ld.log" --socket "$SOCK" --workers 2 || exit 1
		ld_kills=$((ld_kills + 1))
	fi
	[ "$rc" -ne 0 ] || failed=$((failed + 1))  # a kill that did not end the run
	kills=$((kills + 1))
	last_at=$at
done <"$T/schedule"
train 2 --checkpoint-dir "$D/ck" --checkpoint-every 2 --resume --dump-params "$D/p.bin" \
	--log-consumed "$D/log" >>"$D/out" 2>&1
rc=$?
launches=$((launches + 1))
resumes=$(grep -c "resuming from" "$D/out")
check "chaos: $kills SIGKILLs ($rank_kills of a rank, $ld_kills of loaderd; the last at step $last_at of $TOTAL), $launches launches, $resumes resumed from a checkpoint; the last run completes (exit $rc)" \
	[ "$kills" -ge 20 -a "$failed" -eq 0 -a "$rc" -eq 0 ]
check "chaos: parameters byte-identical to the uninterrupted run" cmp -s "$T/cref.bin" "$D/p.bin"
out=$($STREAM "$T/cref" "$D/log" 2)
check "chaos: $out" [ $? -eq 0 ]
echo "# chaos: $(($(date +%s) - t0)) s"
stop_loaderd
echo "$((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
