#!/bin/sh
# it_block.sh - block sampling with the geometry the client chooses (ldcat --sampling block
# --block N --window M, --window-shards K), against a real loaderd: over 2 and 3 ranks and two
# epochs, every sample exactly once per epoch (the tail's repeats flagged), and each window of
# block x window positions reads at most `window` blocks; at the limits (block 2^24, window 2^16)
# and the edges (block 1 window 1, a block larger than the dataset, a short last block and window);
# --window-shards K on a set of 10-record shards reads K shards a window; a rank that gives
# another block than its job's is refused naming the field, as are values out of range and
# --window-shards on a single file. Exact resume across a loaderd restart is in it_resume.sh
# (the trainer's checkpoints). A few seconds.
set -u
BIN=${BUILD:-build}/bin
T=$(mktemp -d /tmp/it_block.XXXXXX)
. "$(dirname "$0")/lib.sh"
need_bins loaderd ldcat dsgen dpack
trap 'stop_loaderd; rm -rf "$T"' EXIT
trap 'exit 130' INT TERM HUP
SOCK=$T/s.sock
N=101

# 101 raw 4x4x3 records (48 bytes); the set: shards of 10 records, align64(4096 + 10 x 48) +
# 10 x 64 = 5248 bytes each, the last one of 1.
"$BIN/dsgen" npy "$T/x.npy" "$T/y.npy" --count $N --height 4 --width 4 --channels 3 \
	--classes 5 >/dev/null
"$BIN/dpack" pack --no-fsync "$T/x.npy" "$T/y.npy" "$T/d.dpk" >/dev/null 2>&1
"$BIN/dpack" pack --no-fsync --shard-size 5248 "$T/x.npy" "$T/y.npy" "$T/s.dpks" >/dev/null 2>&1
check "the set: 11 shards, 10 records each and 1 in the last" \
	sh -c "[ \"\$(sed -n 's/^\([0-9]*\) .*/\1/p' '$T/s.dpks' | tr '\n' ' ')\" = '10 10 10 10 10 10 10 10 10 10 1 ' ]"

start_loaderd "$T/ld.log" --socket "$SOCK" --workers 2 || exit 1

# ranks DATASET JOB WORLD [ldcat options]: WORLD ldcat ranks of one job, 2 epochs, batch 4, in
# parallel; rank r's lines in $T/JOB.r. Returns non-zero when a rank failed.
ranks() {
	ds=$1 job=$2 world=$3
	shift 3
	pids="" r=0
	while [ $r -lt "$world" ]; do
		"$BIN/ldcat" --socket "$SOCK" --dataset "$ds" --job "$job" --world "$world" --rank $r \
			--batch 4 --epochs 2 --crop 0 --seed 3 "$@" >"$T/$job.$r" 2>"$T/$job.$r.err" &
		pids="$pids $!"
		r=$((r + 1))
	done
	rc=0
	for p in $pids; do wait "$p" || rc=1; done
	return $rc
}

# verify JOB WORLD BLOCK WINDOW: exactly once per epoch across the ranks (flags 0 each sample
# once; 4, the tail's repeats, only past N) and at most WINDOW blocks of BLOCK records read by
# each window of BLOCK x WINDOW positions (position = (step in epoch x 4 + i) x world + rank).
verify() {
	python3 - "$T/$1" "$2" "$3" "$4" $N <<'EOF'
import sys
pre, world, block, window, n = sys.argv[1], *map(int, sys.argv[2:])
per_rank = -(-n // world)
spe = -(-per_rank // 4)
order = {}
for r in range(world):
    seen_step = {}
    for line in open(f"{pre}.{r}"):
        step, sid, _label, flags = map(int, line.split())
        e, k = divmod(step, spe)
        i = seen_step.get(step, 0)
        seen_step[step] = i + 1
        pos = (k * 4 + i) * world + r
        if pos < n:
            assert flags == 0, f"rank {r} step {step}: flags {flags} inside the dataset"
            order.setdefault(e, {})[pos] = sid
        else:
            assert flags == 4, f"rank {r} step {step}: a repeat without its flag"
for e in (0, 1):
    got = order.get(e, {})
    ids = sorted(got.values())
    assert ids == list(range(n)), f"epoch {e}: {len(ids)} samples, {len(set(ids))} distinct"
    wsz = block * window
    for w0 in range(0, n, wsz):
        blocks = {got[p] // block for p in range(w0, min(n, w0 + wsz))}
        assert len(blocks) <= window, f"epoch {e}: window at {w0} reads {len(blocks)} blocks"
assert [order[0][p] for p in range(n)] != [order[1][p] for p in range(n)] or n < 2, \
    "both epochs in one order"
print(f"{world} ranks, block {block} window {window}: {n} samples once in each of 2 epochs")
EOF
}

# case WORLD BLOCK WINDOW: a job of that geometry on d.dpk, checked
case_geo() {
	job=g$1-$2-$3
	ranks "$T/d.dpk" "$job" "$1" --sampling block --block "$2" --window "$3"
	rc=$?
	out=$(verify "$job" "$1" "$2" "$3" 2>&1)
	vrc=$?
	check "$(printf '%s' "$out" | tail -n 1) (ranks exit $rc)" [ $rc -eq 0 -a $vrc -eq 0 ]
	[ $rc -eq 0 ] || show "$T/$job.0.err"
}
case_geo 2 7 3        # 14 full blocks and a short one of 3; windows of 21, the last of 17
case_geo 3 7 3
case_geo 2 1 1        # a window is one record: the order of the blocks is the order
case_geo 3 10 4
case_geo 2 200 2      # one block larger than the dataset: one window, all of it
case_geo 3 16777216 65536   # both at their limits

# --window-shards 2 on the set: block 10 (the largest shard), windows of 2 shards
ranks "$T/s.dpks" ws 2 --sampling block --window-shards 2
rc=$?
out=$(verify ws 2 10 2 2>&1)
vrc=$?
check "--window-shards 2 on shards of 10: $(printf '%s' "$out" | tail -n 1) (ranks exit $rc)" \
	[ $rc -eq 0 -a $vrc -eq 0 ]
check "  the same as --block 10 --window 2" sh -c "
	'$BIN/ldcat' --socket '$SOCK' --dataset '$T/s.dpks' --job ws-b --world 2 --rank 1 --batch 4 \
		--epochs 2 --crop 0 --seed 3 --sampling block --block 10 --window 2 >'$T/wsb.1' 2>/dev/null &&
	cmp -s '$T/ws.1' '$T/wsb.1'"

# refusals
"$BIN/ldcat" --socket "$SOCK" --dataset "$T/d.dpk" --job g2-7-3 --world 2 --rank 1 --batch 4 \
	--epochs 2 --crop 0 --seed 3 --sampling block --block 8 --window 3 >/dev/null 2>"$T/err"
rc=$?
check "a rank with another block than its job's: refused (exit $rc), naming it" \
	[ $rc -eq 1 ] && grep -q "exists with another block" "$T/err"
"$BIN/ldcat" --socket "$SOCK" --dataset "$T/d.dpk" --job g2-7-3 --world 2 --rank 1 --batch 4 \
	--epochs 2 --crop 0 --seed 3 --sampling block >/dev/null 2>"$T/err"
check "  and one that gives none (the defaults, 64 x 16)" grep -q "exists with another block" "$T/err"
"$BIN/ldcat" --socket "$SOCK" --dataset "$T/d.dpk" --sampling block --block 16777217 \
	>/dev/null 2>"$T/err"
rc=$?
check "--block 16777217: bad usage (exit $rc), naming the option" [ $rc -eq 2 ] && grep -q -- "--block" "$T/err"
"$BIN/ldcat" --socket "$SOCK" --dataset "$T/d.dpk" --sampling block --window 65537 \
	>/dev/null 2>"$T/err"
rc=$?
check "--window 65537: bad usage (exit $rc)" [ $rc -eq 2 ] && grep -q -- "--window" "$T/err"
"$BIN/ldcat" --socket "$SOCK" --dataset "$T/d.dpk" --block 5 >/dev/null 2>"$T/err"
rc=$?
check "--block without --sampling block: bad usage (exit $rc)" [ $rc -eq 2 ] && grep -q "sampling block" "$T/err"
"$BIN/ldcat" --socket "$SOCK" --dataset "$T/d.dpk" --crop 0 --sampling block --window-shards 2 \
	>/dev/null 2>"$T/err"
rc=$?
check "--window-shards on a single .dpk: refused (exit $rc): not a set of shards" \
	[ $rc -eq 1 ] && grep -q "not a set of shards" "$T/err"
stop_loaderd
echo "$((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
