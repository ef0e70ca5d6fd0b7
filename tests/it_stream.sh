#!/bin/sh
# it_stream.sh - a set of shards streamed through loaderd's node cache (loaderd --cache-stream;
# docs/STREAMING.md), against a real S3 API server (moto's, tests/s3_lib.sh):
#   a set of 16 shards and a cache of about a quarter of it: refused whole without --cache-stream
#   (ENOSPC, as before); with it, two ranks over two epochs (windowed sampling, 2 shards a
#   window) get every sample exactly once per epoch with the labels of the local set, shards are
#   attached as they arrive and let go when the sampler's future no longer needs them (the log's
#   counts: more attaches than the set has shards, some let go), and the cache's objects never
#   exceed its size while the job runs; the global shuffle through the same small cache, one
#   epoch: every sample once; a step that reads more shards than the cache holds fails its job,
#   named, with the way out; --window-shards through the node cache is refused with the way out
#   (block and window); the windowed job again with --cache-evict lru: every sample once, the
#   cache within its bound, and --cache-evict without --cache-stream a usage error; a shard replaced in the store while a job streams: the job fails,
#   naming the object and the store's answer, and loaderd serves the next job; a uid's streams at
#   most LDF_STREAMS_UID (4) of ldfetch's 16 places: its 5th refused while another uid streams;
#   the node cache shared by the future across jobs and uids (loader/stream_share.c): a fast
#   job of one uid and a slow one of another, each uid allowed the whole cache, their shares
#   (loaderctl's "stream") within --cache-size together at every look, the fast job's the larger.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/bin
T=$(mktemp -d /tmp/it_stream.XXXXXX)
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3_lib.sh"
WPID=""
trap 'stop_loaderd; stop_pid "$WPID"; s3_stop; [ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
trap 'exit 130' INT TERM HUP PIPE
need_bins loaderd ldcat ldfetch dpack dsgen

s3_start "$T"
EPS=$AWS_ENDPOINT_URL
s3_curl PUT /data >/dev/null
"$BIN/dsgen" npy "$T/x.npy" "$T/y.npy" --count 64 --height 32 --width 32 --channels 1 >/dev/null
mkdir "$T/local"
# 4 records a shard: 16 shards
"$BIN/dpack" pack --no-fsync --shard-size 8800 "$T/x.npy" "$T/y.npy" "$T/local/set.dpks" \
	>/dev/null 2>&1
"$BIN/dpack" pack --no-fsync --shard-size 8800 "$T/x.npy" "$T/y.npy" s3://data/st/set.dpks \
	>"$T/pack.log" 2>&1
n=$(ls "$T/local" | grep -c '^set-.*\.dpk$')
check "the set: 16 shards" [ "$n" -eq 16 ] || show "$T/pack.log"
# a quarter of the set's allocated bytes (the cache counts blocks), and the manifest
setb=$(du -B1 -c "$T"/local/set-*.dpk | tail -1 | cut -f1)
manb=$(du -B1 "$T/local/set.dpks" | cut -f1)
one=$(du -B1 "$T/local/set-00000.dpk" | cut -f1)
size=$((setb / 4 + manb))
osize() { find "$1/objects" -type f ! -name .lock -printf '%k\n' 2>/dev/null |
	awk '{ s += $1 * 1024 } END { print s + 0 }'; }
# watch DIR FILE: the most DIR's objects take, kept in FILE every 50 ms, until unwatch
watch() {
	( max=0; while :; do u=$(osize "$1"); [ "$u" -gt "$max" ] && max=$u && echo "$max" >"$2";
	  sleep 0.05; done ) &
	WPID=$!
}
unwatch() { stop_pid "$WPID"; WPID=""; }
# local labels, by id (sequential over the local set)
lref() {
	serve_loaderd "$T/r.sock" "$T/r.log"
	"$BIN/ldcat" --socket "$T/r.sock" --crop 0 --batch 4 --world 1 --seed 3 --sampling sequential \
		--dataset "$T/local/set.dpks" --job ref --rank 0 >"$T/ref" 2>"$T/ref.e"
	stop_loaderd
	cut -d' ' -f2,3 "$T/ref" | sort -n >"$T/ref.labels"
}
lref
check "the local set read sequentially: 64 labelled samples" [ "$(wc -l <"$T/ref.labels")" -eq 64 ] ||
	show "$T/ref.e"

# every sample exactly once per epoch ($2 epochs of 8 steps), with the local labels: files $1.r0 $1.r1
once() {
	python3 - "$1" "$2" "$T/ref.labels" <<'EOF'
import sys
pre, epochs, ref = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lab = dict(l.split() for l in open(ref))
per = {}
for r in ("r0", "r1"):
    for l in open(pre + "." + r):
        step, i, label, flags = l.split()
        e = int(step) // 8
        per.setdefault(e, []).append(i)
        assert lab[i] == label, (i, label, lab[i])
assert sorted(per) == list(range(epochs)), sorted(per)
for e, ids in per.items():
    assert sorted(ids, key=int) == [str(k) for k in range(64)], (e, sorted(ids, key=int))
EOF
}
# two_checks WHAT JOB MAXFILE LOG: two's 2-epoch job JOB (its status in $rc) ended well on both
# ranks, every sample once per epoch with the local labels, the cache (watched into MAXFILE)
# never above $size
two_checks() {
	check "$1: both ranks end well" [ $rc -eq 0 ] || { show "$T/$2.e0"; show "$T/$2.e1"; show "$4"; }
	check "... every sample once per epoch, with the local set's labels" once "$T/$2" 2
	check "... the cache's objects never above --cache-size ($size)" \
		sh -c "[ -s '$3' ] && [ \$(cat '$3') -le $size ]" || echo "# max $(cat "$3" 2>/dev/null)"
}
two() {  # two ranks of job $1 through socket $2, more ldcat options after
	_j=$1 _s=$2
	shift 2
	"$BIN/ldcat" --socket "$_s" --crop 0 --batch 4 --world 2 --seed 3 \
		--dataset "${DS:-s3://data/st/set.dpks}" --job "$_j" --rank 0 "$@" >"$T/$_j.r0" 2>"$T/$_j.e0" &
	_p=$!
	"$BIN/ldcat" --socket "$_s" --crop 0 --batch 4 --world 2 --seed 3 \
		--dataset "${DS:-s3://data/st/set.dpks}" --job "$_j" --rank 1 "$@" >"$T/$_j.r1" 2>"$T/$_j.e1"
	_rc1=$?
	wait $_p
	return $(($? | _rc1))
}

# 1. without --cache-stream: the set is larger than the cache, refused whole (as before)
serve_loaderd "$T/w.sock" "$T/w.log" --cache-dir "$T/nw" --cache-endpoints "$EPS" \
	--cache-size "$size" --cache-size-per-uid "$size"
LOADERD_S3_CLIENT_FETCH= two whole "$T/w.sock" --epochs 1
rc=$?
check "without --cache-stream, a set four times the cache: refused, ENOSPC named" sh -c "
	[ $rc -ne 0 ] && grep -q 'above' '$T/whole.e1'" || { show "$T/whole.e1"; show "$T/w.log"; }
stop_loaderd

# 2. with it: two ranks, two epochs, windowed, through a quarter of the set
serve_loaderd "$T/s.sock" "$T/s.log" --cache-dir "$T/ns" --cache-endpoints "$EPS" \
	--cache-size "$size" --cache-size-per-uid "$size" --cache-stream --linger 2
watch "$T/ns" "$T/max"
two win "$T/s.sock" --epochs 2 --sampling block --block 4 --window 2
rc=$?
unwatch
two_checks "streamed, windowed, 2 ranks x 2 epochs" win "$T/max" "$T/s.log"

# --window-shards needs the manifest's counts, which the client does not have here: said, with the way
"$BIN/ldcat" --socket "$T/s.sock" --crop 0 --batch 4 --world 1 --seed 3 --epochs 1 \
	--sampling block --window-shards 2 --dataset s3://data/st/set.dpks --job ws --rank 0 \
	>/dev/null 2>"$T/ws.e"
rc=$?
check "--window-shards through the node cache: refused, naming the dataset and the way (block, window)" \
	sh -c "[ $rc -ne 0 ] && grep -q 'node cache, so its shards.* records cannot be counted here: give block' '$T/ws.e'" ||
	show "$T/ws.e"

# 3. the global shuffle through the same cache (a step reads many shards)
two glob "$T/s.sock" --epochs 1
rc=$?
check "streamed, global shuffle, 2 ranks: both end well" [ $rc -eq 0 ] ||
	{ show "$T/glob.e0"; show "$T/glob.e1"; }
check "... every sample once, with the local set's labels" once "$T/glob" 1

# a step that reads more shards than the cache can hold could never be filled: the job fails, named
"$BIN/ldcat" --socket "$T/s.sock" --crop 0 --batch 16 --world 1 --seed 3 --epochs 1 \
	--dataset s3://data/st/set.dpks --job big --rank 0 >/dev/null 2>"$T/big.e"
rc=$?
check "a global-shuffle step of 16 samples through a cache of 4 shards: the job fails, naming the step and the way" \
	sh -c "[ $rc -ne 0 ] && grep -q 'step [0-9]* of rank 0 reads [0-9]* shards.*windowed sampling' '$T/big.e'" ||
	show "$T/big.e"

# 4. a shard replaced in the store while a job streams: that job fails naming the object
"$BIN/ldcat" --socket "$T/s.sock" --crop 0 --batch 4 --world 1 --seed 3 --epochs 0 \
	--sampling block --block 4 --window 2 --dataset s3://data/st/set.dpks --job rep --rank 0 \
	>"$T/rep.r0" 2>"$T/rep.e0" &
rp=$!
sleep 1
s3_put_file /data/st/set-00007.dpk "$T/local/set-00003.dpk" >/dev/null
s3_put_file /data/st/set-00011.dpk "$T/local/set-00003.dpk" >/dev/null
i=0
while kill -0 $rp 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
kill $rp 2>/dev/null
wait $rp
rc=$?
check "a shard replaced mid-stream: the job fails naming the object" sh -c "[ $rc -ne 0 ] &&
	grep -q 'set-000\(07\|11\).dpk' '$T/rep.e0'" || { show "$T/rep.e0"; show "$T/s.log"; }
"$BIN/ldcat" --socket "$T/s.sock" --crop 0 --batch 4 --world 1 --seed 3 --epochs 1 \
	--dataset "$T/local/set.dpks" --job after --rank 0 >"$T/after" 2>"$T/after.e"
check "... and loaderd serves the next job" sh -c "[ \$(wc -l <'$T/after') -eq 64 ]" ||
	show "$T/after.e"
stop_loaderd  # the jobs close: their streams say what they did
att=$(sed -n 's/.*job win: stream ends: \([0-9]*\) shards attached, \([0-9]*\) let go.*/\1/p' "$T/s.log")
let=$(sed -n 's/.*job win: stream ends: \([0-9]*\) shards attached, \([0-9]*\) let go.*/\2/p' "$T/s.log")
check "... shards streamed: more attaches than shards (re-read in epoch 2), some let go" \
	sh -c "[ '${att:-0}' -gt 16 ] && [ '${let:-0}' -gt 0 ]" || { echo "# attached ${att:-?} let go ${let:-?}"; show "$T/s.log"; }

# the same through a cache that does not know the future (--cache-evict lru, for comparisons), on
# a set of its own (section 4 replaced shards of the first)
"$BIN/dpack" pack --no-fsync --shard-size 8800 "$T/x.npy" "$T/y.npy" s3://data/l/set.dpks \
	>"$T/packl.log" 2>&1
serve_loaderd "$T/l.sock" "$T/l.log" --cache-dir "$T/nl" --cache-endpoints "$EPS" \
	--cache-size "$size" --cache-size-per-uid "$size" --cache-stream --cache-evict lru --linger 1
watch "$T/nl" "$T/maxl"
DS=s3://data/l/set.dpks two lru "$T/l.sock" --epochs 2 --sampling block --block 4 --window 2
rc=$?
unwatch
two_checks "--cache-evict lru, the same job" lru "$T/maxl" "$T/l.log"
stop_loaderd
"$BIN/loaderd" --socket "$T/x.sock" --cache-dir "$T/nx" --cache-evict lru >/dev/null 2>"$T/ev.e"
rc=$?
check "--cache-evict without --cache-stream: usage error (2), naming both" sh -c "[ $rc -eq 2 ] &&
	grep -q 'cache-evict without --cache-stream' '$T/ev.e'" || show "$T/ev.e"

# 5. one uid's streams hold at most a quarter of ldfetch's 16 places: its 5th streamed job is
# refused, naming the bound, while another uid's streamed job opens and ends well
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
	UB=64032
	asu() { _u=$1; shift; setpriv --reuid="$_u" --regid="$_u" --clear-groups env HOME=/nonexistent "$@"; }
else
	echo "# the other uid is this one: not root or no setpriv"
	UB=$(id -u)
	asu() { shift; env HOME=/nonexistent "$@"; }
fi
chmod 711 "$T"
"$BIN/dpack" pack --no-fsync --shard-size 8800 "$T/x.npy" "$T/y.npy" s3://data/q/set.dpks \
	>"$T/packq.log" 2>&1  # a set of its own: section 4 replaced shards of the first
serve_loaderd "$T/q.sock" "$T/q.log" --all-users --cache-dir "$T/nq" --cache-endpoints "$EPS" \
	--cache-size $((4 * setb)) --cache-size-per-uid "$setb" --cache-stream --linger 1
QP=""
for k in 1 2 3 4; do
	"$BIN/ldcat" --socket "$T/q.sock" --crop 0 --batch 4 --world 1 --seed 3 --epochs 0 \
		--sampling block --block 4 --window 2 --dataset s3://data/q/set.dpks --job q$k \
		--rank 0 >/dev/null 2>"$T/q$k.e" &
	QP="$QP $!"
	i=0  # its open answered: the uid's next request starts only then
	while [ "$(grep -c "uid $(id -u): s3://data/q/set.dpks: streamed" "$T/q.log")" -lt $k ] &&
		[ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
done
"$BIN/ldcat" --socket "$T/q.sock" --crop 0 --batch 4 --world 1 --seed 3 --epochs 1 \
	--sampling block --block 4 --window 2 --dataset s3://data/q/set.dpks --job q5 --rank 0 \
	>"$T/q5" 2>"$T/q5.e"
rc=$?
check "a uid's 5th streamed job at once: refused, naming the bound" sh -c "[ $rc -ne 0 ] &&
	grep -q 'already streams 4 sets' '$T/q5.e'" || { show "$T/q5.e"; show "$T/q.log"; }
asu $UB "$BIN/ldcat" --socket "$T/q.sock" --crop 0 --batch 4 --world 1 --seed 3 --epochs 1 \
	--sampling block --block 4 --window 2 --dataset s3://data/q/set.dpks --job qb --rank 0 \
	>"$T/qb" 2>"$T/qb.e"
rc=$?
check "... another uid's streamed job meanwhile: every sample" sh -c "[ $rc -eq 0 ] &&
	[ \$(wc -l <'$T/qb') -eq 64 ]" || { show "$T/qb.e"; show "$T/q.log"; }
for p in $QP; do stop_pid "$p"; done
stop_loaderd

# 6. the node cache shared among streams by their future, across uids: a fast job (this uid) and
# a slow one (--rate, the other uid), each uid allowed the whole cache (half the set). Each uid's
# even split would give each stream the whole: their shares would sum to twice the cache.
for k in 1 2; do
	"$BIN/dpack" pack --no-fsync --shard-size 8800 "$T/x.npy" "$T/y.npy" s3://data/n$k/set.dpks \
		>"$T/packn$k.log" 2>&1
done
half=$((setb / 2 + manb))
serve_loaderd "$T/n.sock" "$T/n.log" --all-users --cache-dir "$T/nn" --cache-endpoints "$EPS" \
	--cache-size "$half" --cache-size-per-uid "$half" --cache-stream --linger 1
"$BIN/ldcat" --socket "$T/n.sock" --crop 0 --batch 4 --world 1 --seed 3 --epochs 0 \
	--sampling block --block 4 --window 2 --dataset s3://data/n1/set.dpks --job fast \
	--rank 0 >/dev/null 2>"$T/fast.e" &
FP=$!
asu $UB "$BIN/ldcat" --socket "$T/n.sock" --crop 0 --batch 4 --world 1 --seed 3 --epochs 0 \
	--rate 8 --sampling block --block 4 --window 2 --dataset s3://data/n2/set.dpks --job slow \
	--rank 0 >/dev/null 2>"$T/slow.e" &
SP=$!
# 30 looks, 0.1 s apart, once both stream and have moved: fast's share, slow's
: >"$T/shares"
i=0
while [ $i -lt 100 ] && [ "$(wc -l <"$T/shares")" -lt 30 ]; do
	"$BIN/loaderctl" --socket "$T/n.sock" --json jobs 2>/dev/null | python3 -c '
import json, sys
d = {j["job"]: j["stream"] for j in json.load(sys.stdin)
     if j["stream"] and j["attached"] and j["stream"]["steps_per_s_per_rank"] > 0}
if "fast" in d and "slow" in d:
    print(d["fast"]["cache_share"], d["slow"]["cache_share"])' >>"$T/shares"
	sleep 0.1
	i=$((i + 1))
done
stop_pid "$FP"
stop_pid "$SP"
check "two uids' streams, a fast job and a slow one: 30 looks at both" \
	[ "$(wc -l <"$T/shares")" -ge 30 ] || { show "$T/fast.e"; show "$T/slow.e"; show "$T/n.log"; }
check "... their shares of the node cache within --cache-size ($half) together at every look" \
	awk -v c="$half" '$1 + $2 > c { bad = 1 } END { exit bad || NR == 0 }' "$T/shares" ||
	show "$T/shares"
check "... the fast job's share the larger at most looks" \
	awk '$1 > $2 { f++ } END { exit !(NR > 0 && f > NR / 2) }' "$T/shares" || show "$T/shares"
stop_loaderd

echo "1..$n"
[ "$fails" -eq 0 ]
