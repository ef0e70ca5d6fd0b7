#!/bin/sh
# s3_link.sh [DIR] - an s3:// set of real photographs read through a shaped link
# (docs/BENCHMARKS.md, "Through a shaped link"): the store (moto's S3 server, as tests/s3_lib.sh
# installs it) in one network namespace, loaderd and its client in another, joined by a veth
# pair shaped by tbf to RATE (tc's NUMBER[k|m|g]bit, 1gbit) each way; the round trip (20 ms)
# is added by tools/bench/delay_proxy.py in front of the store (DELAY_MS each way), since this
# kernel has no sch_netem. A third, unshaped veth joins the store's namespace to this one, for the setup
# (packing, uploads) and for the store's own throughput. Measured, all in one run on the same
# data (photo_tree.py's ImageNet-sized copies, PER_SOURCE per source photograph, 8 classes,
# packed in shards of SHARD_SIZE, 2M, for dpack and Mosaic alike):
#   the link's ceiling (bytes/s through it, raw and through the proxy), the proxy's own ceiling
#   without delay, the store's own throughput unshaped (a cold dpack fetch over the third veth);
#   (a) a cold dpack fetch through the link (the fetch phase alone: its wall time, the veth's
#       received bytes every 2 ms for when the shards' bytes flow and how fast, the CPU of the
#       store, the proxy and dpack) and epoch 1 of ldcat (224 crops, batch 64, loaderd with 2
#       workers) on the s3:// set through the link from a cold cache, fetch included;
#   (b) the warm cache's resolve alone through the link, then epoch 2 of ldcat on the s3:// set
#       from the warm cache against the same set packed locally: PAIRS pairs back to back, the
#       median of each and of the pairs' ratios;
#   (c) bytes fetched per epoch by a cache of a quarter of the set, LRU against the sampler's
#       future: a replay by tools/ldcachesim on this set's shards and sampler;
#   (d) Mosaic Streaming's StreamingDataset on the same photographs as MDS shards in the same
#       store, through the same link: epoch 1 cold, epoch 2 warm, and 2 epochs with a cache_limit
#       of a quarter (its default shuffle; then shuffle blocks of 2 shards); samples/s and bytes received (the veth's counters) per epoch. Needs the
#       venv MOSAIC_VENV (default BUILD/mosaicvenv, made when missing: --system-site-packages
#       over Debian's python3-torch, pip install mosaicml-streaming); skipped if it cannot be made.
#   (e) streamed through loaderd's node cache (loaderd --cache-dir, --cache-endpoints the link,
#       docs/STREAMING.md), loaderd (2 workers) and ldcat in the loader's namespace, the client
#       offering the set to loaderd (not LOADERD_S3_CLIENT_FETCH): (e1) epoch 1 from a fresh
#       cache holding the whole set, with --cache-stream (the global shuffle, then the windowed
#       one) and without it (the set fetched whole before the job opens), and the local set's
#       epoch after it (both samplings); (e2) a cache of a quarter of
#       the set (--cache-size and --cache-size-per-uid) with --cache-stream, 2 epochs of the
#       windowed shuffle (blocks of a shard's records, 2 a window, as the (c) replay): bytes
#       received per epoch (the veth's counters) against the replay, and
#       every sample once an epoch; the same with a cache of half the set; (e3) two jobs on one
#       node cache of a quarter of their two sets, a fast one and a slow one (ldcat --rate), the
#       future shared across jobs against LRU: bytes received. (e1) runs E1_RUNS
#       times (3; medians); in (e2) epoch 1 is a job of its own on a fresh cache and epoch 2 the
#       2-epoch job's bytes less it (ldcat's output is buffered: no per-step clock). Each ldcat
#       is stopped after E_TIMEOUT s (300): a failure or a stall is shown, and the run goes on.
# MOSAIC=0 skips (d); PAIRS (5): the warm/local pairs of (b); DELAY_MS=0 leaves the link unshaped
# in time (the rate still shaped), to tell the round trips' share from the rate's.
# Cleans up its namespaces and processes on exit. Root only. Not part of `make test`.
# Ends on one JSON line ((e) under "stream").
set -eu
BUILD=${BUILD:-build}
BIN=$BUILD/bin
HERE=$(cd "$(dirname "$0")" && pwd)
T=${1:-$(mktemp -d /tmp/s3_link.XXXXXX)}
mkdir -p "$T"
T=$(cd "$T" && pwd)
PER=${PER_SOURCE:-100}
SHARD=${SHARD_SIZE:-2M}  # dpack --shard-size; Mosaic's size_limit the same
RATE=${RATE:-1gbit}
DELAY_MS=${DELAY_MS:-10}
PY=/usr/bin/python3
MOSAIC_VENV=${MOSAIC_VENV:-$BUILD/mosaicvenv}
. "$HERE/../../tests/lib.sh"
. "$HERE/../../tests/s3_lib.sh"
. "$HERE/lib.sh"

ST=s3l_st$$ LD=s3l_ld$$              # the store's namespace, the loader's
VS=s3ls$$ VL=s3ll$$ VA=s3la$$ VB=s3lb$$ # the shaped pair (VS in ST, VL in LD); the setup pair
ST_IP=10.213.7.1 LD_IP=10.213.7.2 ADM_IP=10.213.8.1 STA_IP=10.213.8.2
PIDS=""
cleanup() {
	set +e
	stop_loaderd
	for p in $PIDS; do stop_pid "$p"; done
	ip netns del "$ST" 2>/dev/null
	ip netns del "$LD" 2>/dev/null
	ip link del "$VA" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP PIPE
[ "$(id -u)" -eq 0 ] || { echo "s3_link.sh: needs root (network namespaces)"; exit 1; }
inst() { ip netns exec "$ST" "$@"; }
inld() { ip netns exec "$LD" "$@"; }
bg_st() { # bg_st LOG CMD...: CMD in the store's namespace, in the background
	_log=$1
	shift
	ip netns exec "$ST" "$@" >"$_log" 2>&1 &
	LAST=$!
	PIDS="$PIDS $LAST"
}
rx() { inld cat "/sys/class/net/$VL/statistics/rx_bytes"; }
wait_port() { # wait_port NS-CMD HOST PORT
	_i=0
	until $1 "$PY" -c "import socket; socket.create_connection(('$2', $3), 1).close()" 2>/dev/null; do
		_i=$((_i + 1))
		[ $_i -lt 150 ] || { echo "s3_link.sh: nothing listens on $2:$3"; exit 1; }
		sleep 0.1
	done
}
py() { "$PY" -c "$@"; }

# the photographs, the ImageNet-sized copies only, one class per folder
[ -d "$T/tree" ] || "$PY" "$HERE/photo_tree.py" "$T" --per-source "$PER" --shards 1 >/dev/null
rm -rf "$T/shards"
mkdir -p "$T/inet"
for d in "$T"/tree/inet_*; do ln -sfn "$d" "$T/inet/$(basename "$d")"; done
N=$(find "$T"/tree/inet_* -name '*.JPEG' | wc -l)

# the namespaces and links
ip netns add "$ST"
ip netns add "$LD"
ip link add "$VS" type veth peer name "$VL"
ip link set "$VS" netns "$ST"
ip link set "$VL" netns "$LD"
inst ip addr add "$ST_IP/24" dev "$VS"
inld ip addr add "$LD_IP/24" dev "$VL"
inst ip link set lo up
inld ip link set lo up
inst ip link set "$VS" up
inld ip link set "$VL" up
# tbf each way: the burst above a GSO packet (64 KiB), the queue 20 ms at the rate
inst tc qdisc add dev "$VS" root tbf rate "$RATE" burst 256kb latency 20ms
inld tc qdisc add dev "$VL" root tbf rate "$RATE" burst 256kb latency 20ms
ip link add "$VA" type veth peer name "$VB"
ip link set "$VB" netns "$ST"
ip addr add "$ADM_IP/24" dev "$VA"
ip link set "$VA" up
inst ip addr add "$STA_IP/24" dev "$VB"
inst ip link set "$VB" up

# the store: moto on 0.0.0.0:9000 in ST; the delay proxy on the shaped link in front of it
s3_venv
bg_st "$T/moto.log" env INITIAL_NO_AUTH_ACTION_COUNT=3 "$S3VENV/bin/moto_server" -H 0.0.0.0 -p 9000
MOTO=$LAST
bg_st "$T/proxy.log" "$PY" "$HERE/delay_proxy.py" proxy "$ST_IP:9001" 127.0.0.1:9000 "$DELAY_MS"
PROXY=$LAST
# the ceilings: a source of zeros, the proxy without delay (over the setup pair) and with it
bg_st "$T/source.log" "$PY" "$HERE/delay_proxy.py" source 0.0.0.0:9100
bg_st "$T/proxy0.log" "$PY" "$HERE/delay_proxy.py" proxy "$STA_IP:9102" 127.0.0.1:9100 0
bg_st "$T/proxys.log" "$PY" "$HERE/delay_proxy.py" proxy "$STA_IP:9002" 127.0.0.1:9000 0
bg_st "$T/proxyd.log" "$PY" "$HERE/delay_proxy.py" proxy "$ST_IP:9103" 127.0.0.1:9100 "$DELAY_MS"
export AWS_ENDPOINT_URL="http://$STA_IP:9000" AWS_REGION=us-east-1
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
wait_port "" "$STA_IP" 9000
for p in 9001 9100 9103; do wait_port inld "$ST_IP" "$p"; done
wait_port "" "$STA_IP" 9102
wait_port "" "$STA_IP" 9002
keys=$(s3_user owner '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:*","iam:*"],"Resource":"*"}]}')
export AWS_ACCESS_KEY_ID="${keys% *}" AWS_SECRET_ACCESS_KEY="${keys#* }"
s3_curl PUT /bench >/dev/null
LINK="http://$ST_IP:9001"

raw=$(inld "$PY" "$HERE/delay_proxy.py" sink "$ST_IP:9100" 400000000)
proxied=$(inld "$PY" "$HERE/delay_proxy.py" sink "$ST_IP:9103" 400000000)
proxy0=$("$PY" "$HERE/delay_proxy.py" sink "$STA_IP:9102" 1000000000)
rtt=$(inld "$PY" -c "
import socket, time
ts = []
for _ in range(5):  # a fresh connection each: the time from the request to the answer's first byte
    c = socket.create_connection(('$ST_IP', 9001))
    t = time.monotonic()
    c.sendall(b'GET /moto-api/ HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n')
    c.recv(1)
    ts.append(time.monotonic() - t)
    c.close()
print('%.1f' % (min(ts) * 1000))")

# the set: packed locally and into the store (over the setup pair)
mkdir -p "$T/local"
rm -f "$T"/local/*
"$BIN/dpack" pack --no-fsync --shard-size "$SHARD" "$T/inet" "$T/local/set.dpks" >/dev/null
BYTES=$(du -cb "$T"/local/*.dpk | tail -1 | cut -f1)
SHARDS=$(ls "$T"/local/*.dpk | wc -l)
"$BIN/dpack" pack --no-fsync --shard-size "$SHARD" "$T/inet" s3://bench/photos/set.dpks >/dev/null 2>&1
# the store's own throughput: a cold fetch over the unshaped pair, no proxy
rm -rf "$T/c_store"
t0=$(now)
LOADERD_S3_CACHE="$T/c_store" "$BIN/dpack" fetch s3://bench/photos/set.dpks >"$T/store.json"
t1=$(now)
store_s=$(echo "$t1 - $t0" | bc)
# ... and through the proxy without delay, unshaped: the store's and the proxy's CPU together
rm -rf "$T/c_storep"
t0=$(now)
AWS_ENDPOINT_URL="http://$STA_IP:9002" LOADERD_S3_CACHE="$T/c_storep" "$BIN/dpack" fetch \
	s3://bench/photos/set.dpks >"$T/storep.json"
t1=$(now)
storep_s=$(echo "$t1 - $t0" | bc)

# (a) the fetch phase alone through the link, then epoch 1 of ldcat, fetch included
rm -rf "$T/c_fetch" "$T/c_job"
b0=$(rx)
m0=$(cpu_s "$MOTO") p0=$(cpu_s "$PROXY")
# the veth's received bytes every 2 ms while the fetch runs: when the shards' bytes start to flow,
# and the rate while they do
ip netns exec "$LD" "$PY" -c "
import sys, time
f = open('/sys/class/net/$VL/statistics/rx_bytes')
out = open('$T/fetch.rx', 'w')
while True:
    f.seek(0)
    out.write('%.4f %s\\n' % (time.time(), f.read().strip()))
    out.flush()
    time.sleep(0.002)" &
RXLOG=$!
PIDS="$PIDS $RXLOG"
sleep 0.2
t0=$(now)
inld env AWS_ENDPOINT_URL="$LINK" LOADERD_S3_CACHE="$T/c_fetch" /usr/bin/time -f "%U %S" \
	-o "$T/fetch.cpu" "$BIN/dpack" fetch s3://bench/photos/set.dpks >"$T/fetch.json"
t1=$(now)
stop_pid "$RXLOG" || true
fetch_cpu=$(py "
u, s = open('$T/fetch.cpu').read().split()[-2:]
print('%.2f %.2f %.2f' % ($(cpu_s "$MOTO") - $m0, $(cpu_s "$PROXY") - $p0, float(u) + float(s)))")
fetch_s=$(echo "$t1 - $t0" | bc)
ft0=$t0 ft1=$t1
fetch_rx=$(($(rx) - b0))
printf '#!/bin/sh\nexec ip netns exec %s %s "$@"\n' "$LD" "$(cd "$BIN" && pwd)/loaderd" >"$T/loaderd-ns"
chmod +x "$T/loaderd-ns"
LOADERD="$T/loaderd-ns" start_loaderd "$T/l.log" --socket "$T/s.sock" --workers 2 ||
	{ echo "s3_link.sh: loaderd did not start"; exit 1; }
job() { # job NAME DATASET: one epoch of ldcat in LD through the link; prints "wall-s ldcat-json"
	_t0=$(now)
	inld env AWS_ENDPOINT_URL="$LINK" LOADERD_S3_CACHE="$T/c_job" "$BIN/ldcat" --socket "$T/s.sock" \
		--batch 64 --crop 224 --epochs 1 --json --job "$1" --dataset "$2" 2>"$T/$1.err" >"$T/$1.out"
	_t1=$(now)
	echo "$(echo "$_t1 - $_t0" | bc) $(tail -1 "$T/$1.err")"
}
b0=$(rx)
e1=$(job epoch1 s3://bench/photos/set.dpks)
e1_rx=$(($(rx) - b0))
[ "$(wc -l <"$T/epoch1.out")" -ge "$N" ] || { echo "s3_link.sh: epoch 1 short"; cat "$T/epoch1.err"; exit 1; }

# the warm cache's resolve alone through the link: what a job on it adds to the local set's
t0=$(now)
inld env AWS_ENDPOINT_URL="$LINK" LOADERD_S3_CACHE="$T/c_job" "$BIN/dpack" fetch \
	s3://bench/photos/set.dpks >"$T/warmfetch.json"
t1=$(now)
warm_s=$(echo "$t1 - $t0" | bc)
# (b) epoch 2 from the warm cache against the local set, alternated, best of 3 each
job warmup "$T/local/set.dpks" >/dev/null
# the warm cache's resolve alone through the link: what a job on it adds to the local set's
t0=$(now)
inld env AWS_ENDPOINT_URL="$LINK" LOADERD_S3_CACHE="$T/c_job" "$BIN/dpack" fetch \
	s3://bench/photos/set.dpks >"$T/warmfetch.json"
t1=$(now)
warm_s=$(echo "$t1 - $t0" | bc)
# (b) epoch 2 from the warm cache against the local set: PAIRS pairs, each warm then local, back
# to back (the CPU is shared: a pair's ratio is the least disturbed figure; the median is kept)
PAIRS=${PAIRS:-5}
walls_w="" walls_l="" e2_rx=0
for i in $(seq "$PAIRS"); do
	b0=$(rx)
	w=$(job warm$i s3://bench/photos/set.dpks | cut -d' ' -f1)
	e2_rx=$(($(rx) - b0))
	l=$(job local$i "$T/local/set.dpks" | cut -d' ' -f1)
	walls_w="$walls_w$w," walls_l="$walls_l$l,"
done
stop_loaderd || true

# (c) a cache of a quarter of the set: the replay on this set's shards and sampler
REC=$((N / SHARDS))
sim() { "$BIN/ldcachesim" --samples "$N" --shard-records "$REC" --record-bytes $((BYTES / N)) \
	--world 1 --batch 64 --epochs 3 --cache 0.25 "$@" | tail -1; }
sim_shuffle=$(sim --sampling shuffle)
sim_block=$(sim --sampling block)

# (e) streamed through loaderd's node cache (loaderd --cache-stream, docs/STREAMING.md)
enode() { # enode NAME SIZE [loaderd options]: loaderd in LD on a fresh node cache of SIZE bytes
	_n=$1 _z=$2
	shift 2
	rm -rf "$T/nc_$_n"
	mkdir -p "$T/nc_$_n"
	LOADERD="$T/loaderd-ns" start_loaderd "$T/$_n.log" --socket "$T/$_n.sock" --workers 2 \
		--cache-dir "$T/nc_$_n" --cache-endpoints "$LINK" --cache-size "$_z" --cache-size-per-uid "$_z" \
		"$@" || { echo "s3_link.sh: loaderd ($_n) did not start"; show "$T/$_n.log"; exit 1; }
}
ejob() { # ejob SOCK NAME DATASET [ldcat options]: ldcat in LD through the node cache, at most
	# E_TIMEOUT s; prints its wall seconds, or "fail"
	_s=$1 _n=$2 _d=$3
	shift 3
	_t0=$(now)
	if inld env -u LOADERD_S3_CLIENT_FETCH -u LOADERD_S3_CACHE AWS_ENDPOINT_URL="$LINK" \
		timeout "${E_TIMEOUT:-300}" "$BIN/ldcat" --socket "$T/$_s.sock" --batch 64 --crop 224 --json \
		--job "$_n" --dataset "$_d" "$@" 2>"$T/$_n.err" >"$T/$_n.out"; then
		echo "$(now) - $_t0" | bc
	else
		echo "# (e) $_n failed or stalled (rc $?):" >&2
		show "$T/$_n.err" >&2
		echo fail
	fi
}
ecount() { # ecount NAME: samples ldcat delivered
	wc -l <"$T/$1.out"
}
# (e1) epoch 1 cold, streamed (the global shuffle, then the windowed one: blocks of a shard's
# records, 2 a window, as (c)), each on a fresh cache; the same without --cache-stream (the set
# fetched whole before the job opens); the local set's epoch (both samplings) after it
WIN="--sampling block --block $REC --window 2"
e1() { # e1 NAME SAMPLING-OPTIONS...: the figures of one epoch 1 job: "wall rx count"
	_n=$1
	shift
	b0=$(rx)
	_w=$(ejob "$ES" "$_n" s3://bench/photos/set.dpks --epochs 1 "$@")
	echo "$_w $(($(rx) - b0)) $(ecount "$_n")"
}
E1_RUNS=${E1_RUNS:-3}
e1s="" e1w="" e1h="" e1l="" e1lw=""
for r in $(seq "$E1_RUNS"); do  # not i: stop_pid (tests/lib.sh) sets it
	ES=es1_$r && enode "$ES" $((BYTES * 2)) --cache-stream && e1s="$e1s$(e1 "$ES")," && stop_loaderd || true
	# shellcheck disable=SC2086
	ES=es1w_$r && enode "$ES" $((BYTES * 2)) --cache-stream && e1w="$e1w$(e1 "$ES" $WIN)," &&
		stop_loaderd || true
	ES=ew1_$r && enode "$ES" $((BYTES * 2)) && e1h="$e1h$(e1 "$ES"),"
	e1l="$e1l$(ejob "$ES" el1_$r "$T/local/set.dpks" --epochs 1) 0 $(ecount el1_$r),"
	# shellcheck disable=SC2086
	e1lw="$e1lw$(ejob "$ES" el1w_$r "$T/local/set.dpks" --epochs 1 $WIN) 0 $(ecount el1w_$r),"
	stop_loaderd || true
done
# (e2) a cache of 1/DIV of the set (--cache-size and --cache-size-per-uid), streamed, 2 epochs of
# the windowed shuffle, the sampler's future (--cache-evict future) against LRU (--cache-evict
# lru) on the same store and data: the veth's received bytes over the job (ldcat's output is
# buffered, so epoch 1 alone is a job of its own, on a fresh cache, and epoch 2 the difference);
# DIV 4 (a quarter, as (c)), then 2 (a half). On the same photographs in a shuffled order (a
# WebDataset tar, shuffled with seed 1) packed in shards of REC records each (dpack
# --shard-records: as many shards as the tree's SHARD_SIZE set), read with --block REC --window 2:
# blocks that are whole shards, 2 a window, the geometry the (c) replay assumes (blocks over
# shards cut by size straddle them: a window then reads up to 3 shards a block, and a step
# across two windows up to 12, more than a quarter cache holds)
"$PY" - "$T/inet" "$T/mixed.tar" <<'PYEOF'
import os, random, sys, tarfile
root, out = sys.argv[1], sys.argv[2]
cls = sorted(os.listdir(root))
files = [(c, os.path.join(root, d, f)) for c, d in enumerate(cls)
         for f in sorted(os.listdir(os.path.join(root, d)))]
random.Random(1).shuffle(files)
with tarfile.open(out, "w") as t:
    for i, (c, f) in enumerate(files):
        t.add(f, "%07d.jpg" % i)
        b = str(c).encode()
        import io
        ti = tarfile.TarInfo("%07d.cls" % i)
        ti.size = len(b)
        t.addfile(ti, io.BytesIO(b))
PYEOF
mkdir -p "$T/mixed"
rm -f "$T"/mixed/*
"$BIN/dpack" pack --no-fsync --shard-records "$REC" "$T/mixed.tar" "$T/mixed/set.dpks" >/dev/null
MBYTES=$(du -cb "$T"/mixed/*.dpk | tail -1 | cut -f1)
MSHARDS=$(ls "$T"/mixed/*.dpk | wc -l)
MREC=$(py "
import json
d = json.load(open('/dev/stdin'))
print(max(s['samples'] for s in d['shards']))" <<EOF2
$("$BIN/dpack" inspect "$T/mixed/set.dpks" --json)
EOF2
)
MMIN=$(awk 'NR > 1 && $1 ~ /^[0-9]+$/ { print $1 }' "$T/mixed/set.dpks" | sort -n | head -1)
"$BIN/dpack" pack --no-fsync --shard-records "$REC" "$T/mixed.tar" s3://bench/mixed/set.dpks >/dev/null 2>&1
MWIN="--sampling block --block $MREC --window 2"
e2() { # e2 NAME DIV EPOCHS POLICY
	_n=$1 _e=$3
	enode "$_n" $((MBYTES / $2)) --cache-stream --cache-evict "$4"
	rx >"$T/$_n.rx0"
	_t0=$(now)
	{
		# shellcheck disable=SC2086
		if inld env -u LOADERD_S3_CLIENT_FETCH -u LOADERD_S3_CACHE AWS_ENDPOINT_URL="$LINK" \
			timeout "${E_TIMEOUT:-300}" "$BIN/ldcat" --socket "$T/$_n.sock" --batch 64 --crop 224 \
			--json --job "$_n" --dataset s3://bench/mixed/set.dpks --epochs "$_e" $MWIN \
			2>"$T/$_n.err"; then
			echo 0 >"$T/$_n.rc"
		else
			echo $? >"$T/$_n.rc"
		fi
	} >"$T/$_n.out"
	rx >"$T/$_n.rx1"
	_w=$(echo "$(now) - $_t0" | bc)
	[ "$(cat "$T/$_n.rc")" = 0 ] ||
		{ echo "# (e) $_n failed or stalled (rc $(cat "$T/$_n.rc")):"; show "$T/$_n.err"; _w=fail; }
	echo "$_w" >"$T/$_n.wall"
	stop_loaderd || true
}
for d in 4 2; do  # epoch 1 alone, then 2 epochs: epoch 2's bytes are the difference
	for pol in future lru; do
		e2 es2_1_${d}_$pol "$d" 1 $pol
		e2 es2_2_${d}_$pol "$d" 2 $pol
	done
done
# (e3) two jobs on one node cache, each on a set of its own (the shuffled photographs under two
# prefixes: two sets to the cache), 2 epochs of the windowed shuffle each: a fast one (unthrottled)
# and a slow one (ldcat --rate E3_RATE, 400 samples/s), started together; the cache (and the uid's
# bound) a quarter of the two sets; the future shared across the jobs (--cache-evict future,
# loader/stream_share.c) against LRU (--cache-evict lru: each stream an even split, ldfetch
# evicting the least recently used between them): bytes received over both jobs. E3_RUNS (2)
# runs of each, interleaved.
"$BIN/dpack" pack --no-fsync --shard-records "$REC" "$T/mixed.tar" s3://bench/mixed2/set.dpks >/dev/null 2>&1
e3() { # e3 NAME POLICY (not _n: ejob sets it)
	_m=$1
	enode "$_m" $((MBYTES / 2)) --cache-stream --cache-evict "$2"
	rx >"$T/$_m.rx0"
	# shellcheck disable=SC2086
	ejob "$_m" "${_m}_slow" s3://bench/mixed2/set.dpks --epochs 2 --rate "${E3_RATE:-400}" $MWIN \
		>"$T/${_m}_slow.wall" &
	_sp=$!
	# shellcheck disable=SC2086
	ejob "$_m" "${_m}_fast" s3://bench/mixed/set.dpks --epochs 2 $MWIN >"$T/${_m}_fast.wall"
	wait $_sp || true
	rx >"$T/$_m.rx1"
	for _k in fast slow; do cp "$T/$_m.rx0" "$T/${_m}_$_k.rx0"; cp "$T/$_m.rx1" "$T/${_m}_$_k.rx1"; done
	stop_loaderd || true
}
E3_RUNS=${E3_RUNS:-2}
for r in $(seq "$E3_RUNS"); do
	for pol in future lru; do e3 es3_${r}_$pol $pol; done
done
grep -h 'stream ends' "$T"/es*.log || true
msim() { "$BIN/ldcachesim" --samples "$N" --shard-records $((N / MSHARDS)) --record-bytes $((MBYTES / N)) \
	--world 1 --batch 64 --epochs 3 --sampling block --window 2 "$@" | tail -1; }
sim_block_q=$(msim --cache 0.25)
sim_block_h=$(msim --cache 0.5)
estream=$(py "
import json, collections, statistics
N, B = $N, $BYTES
def one(s):
    w, rx, n = s.split()
    return {'wall_s': None if w == 'fail' else float(w), 'rx': int(rx), 'samples': int(n)}
def runs(s):
    r = [one(x) for x in s.split(',') if x]
    ok = [x['wall_s'] for x in r]
    return {'wall_s': None if None in ok else statistics.median(ok), 'walls': ok,
        'rx': max(x['rx'] for x in r), 'samples': min(x['samples'] for x in r)}
def job(name):
    w = open('$T/%s.wall' % name).read().strip()
    ids = collections.defaultdict(collections.Counter)
    rows = [l.split() for l in open('$T/%s.out' % name)]
    rows = [p for p in rows if len(p) >= 2 and p[0].isdigit()]
    spe = -(-N // 64)  # steps an epoch, one rank of batch 64
    for p in rows:
        ids[int(p[0]) // spe][p[1]] += 1
    e = max(ids) + 1 if ids else 0
    once = [len(ids[k]) == N and all(c == 1 for c in ids[k].values()) for k in range(e)]
    rx = int(open('$T/%s.rx1' % name).read()) - int(open('$T/%s.rx0' % name).read())
    return {'wall_s': None if w == 'fail' else float(w), 'rx': rx, 'samples': [sum(ids[k].values()) for k in range(e)], 'each_once': once}
MB = $MBYTES
def two(div, pol):
    a, b = job('es2_1_%d_%s' % (div, pol)), job('es2_2_%d_%s' % (div, pol))
    ok = a['wall_s'] is not None and b['wall_s'] is not None
    return {'cache_bytes': MB // div, 'epoch1_job': a, 'epochs2_job': b,
        'rx_sets_per_epoch': [round(a['rx'] / MB, 3), round((b['rx'] - a['rx']) / MB, 3)] if ok else None}
def three(r, pol):
    n = 'es3_%d_%s' % (r, pol)
    f, s = job(n + '_fast'), job(n + '_slow')
    return {'cache_bytes': MB // 2, 'rx_sets': round(f['rx'] / MB, 3), 'fast': f, 'slow': s}
E3 = {pol: [three(r, pol) for r in range(1, $E3_RUNS + 1)] for pol in ('future', 'lru')}
print(json.dumps({'two_jobs': E3, 'streamed': runs('$e1s'), 'streamed_window': runs('$e1w'), 'whole': runs('$e1h'),
    'local': runs('$e1l'), 'local_window': runs('$e1lw'),
    'mixed': {'bytes': MB, 'shards': $MSHARDS, 'block': $MREC, 'smallest_shard': $MMIN},
    'quarter': two(4, 'future'), 'half': two(2, 'future'), 'quarter_lru': two(4, 'lru'), 'half_lru': two(2, 'lru'),
    'sim_block_quarter': json.loads('''$sim_block_q'''), 'sim_block_half': json.loads('''$sim_block_h''')}))")
# (d) Mosaic Streaming, the same photographs as MDS shards of 8 MiB in the same store
mosaic='null'
if [ "${MOSAIC:-1}" = 1 ] && { [ ! -x "$MOSAIC_VENV/bin/python" ] ||
	! "$MOSAIC_VENV/bin/python" -c "import streaming" 2>/dev/null; }; then
	rm -rf "$MOSAIC_VENV"
	"$PY" -m venv --system-site-packages "$MOSAIC_VENV" &&
		printf 'numpy<2\ntorch<1.14\n' >"$T/mosaic-constraints.txt" &&
		"$MOSAIC_VENV/bin/pip" install -q -c "$T/mosaic-constraints.txt" mosaicml-streaming \
			>"$T/mosaic-pip.log" 2>&1 || { echo "# Mosaic Streaming could not be installed:"; show "$T/mosaic-pip.log"; }
fi
if [ "${MOSAIC:-1}" = 1 ] && "$MOSAIC_VENV/bin/python" -c "import streaming" 2>/dev/null; then
	MP="$MOSAIC_VENV/bin/python $HERE/s3_link_mosaic.py"
	rm -rf "$T/mds" "$T/mds_cold" "$T/mds_q" "$T/mds_w"
	$MP write "$T/inet" "$T/mds" "$(numfmt --from=iec "$SHARD")" >/dev/null
	$MP upload "$T/mds" s3://bench/mds >/dev/null
	MDS_BYTES=$(du -cb "$T"/mds/*.mds | tail -1 | cut -f1)
	mread() { inld env AWS_ENDPOINT_URL="$LINK" S3_ENDPOINT_URL="$LINK" $MP read s3://bench/mds "$@"; }
	mread "$T/mds_cold" 2 2 "$VL" >"$T/mosaic.json" 2>"$T/mosaic.err" ||
		{ echo "# Mosaic's read failed:"; show "$T/mosaic.err"; }
	# a quarter of the set: Mosaic's default shuffle (one shuffle block: the whole of this set),
	# then blocks of two shards' samples (as ldcachesim's window of 2 of the cache's 10 shards)
	mread "$T/mds_q" 2 2 "$VL" $((MDS_BYTES / 4)) >"$T/mosaic_q.json" 2>"$T/mosaic_q.err" ||
		{ echo "# Mosaic's read with a quarter cache failed:"; show "$T/mosaic_q.err"; }
	mread "$T/mds_w" 2 2 "$VL" $((MDS_BYTES / 4)) $((2 * N / SHARDS)) >"$T/mosaic_w.json" \
		2>"$T/mosaic_w.err" || { echo "# Mosaic's read with a quarter cache, blocks of 2 shards, failed:"; show "$T/mosaic_w.err"; }
	mosaic=$(py "
import json
def rows(p):
    try: return [json.loads(l) for l in open(p) if l.startswith('{')]
    except OSError: return []
print(json.dumps({'mds_bytes': $MDS_BYTES, 'full': rows('$T/mosaic.json'), 'quarter': rows('$T/mosaic_q.json'), 'quarter_block2': rows('$T/mosaic_w.json')}))")
fi

py "
import json
N, B = $N, $BYTES
bps = B / N
import re
r = re.fullmatch(r'([0-9.]+)([kmg]?)bit', '$RATE'.lower())
link = float(r.group(1)) * {'': 1, 'k': 1e3, 'm': 1e6, 'g': 1e9}[r.group(2)] / 8
raw, prx, p0 = json.loads('''$raw'''), json.loads('''$proxied'''), json.loads('''$proxy0''')
st = json.loads(open('$T/store.json').read().splitlines()[-1])
store = st['fetched_bytes'] / $store_s
storep = json.loads(open('$T/storep.json').read().splitlines()[-1])['fetched_bytes'] / $storep_s
f = json.loads(open('$T/fetch.json').read().splitlines()[-1])
fetch = f['fetched_bytes'] / $fetch_s
eff = min(link, store, p0['MBps'] * 1e6)
e1w, e1j = '''$e1'''.split(' ', 1)
e1w, e1j = float(e1w), json.loads(e1j)
lim = link / bps
elim = eff / bps
e1 = N / e1w
import statistics
ww, wl = [$walls_w], [$walls_l]
w, l = N / statistics.median(ww), N / statistics.median(wl)
ratio = statistics.median(b / a for a, b in zip(ww, wl))
wf = json.loads(open('$T/warmfetch.json').read().splitlines()[-1])
print('set: %d photographs, %.1f MB in %d shards (%.0f bytes a sample); RTT through the proxy %s ms' % (N, B / 1e6, $SHARDS, bps, '$rtt'))
print('link %s: nominal %.1f MB/s; measured raw %.1f MB/s, through the delay proxy %.1f MB/s' % ('$RATE', link / 1e6, raw['MBps'], prx['MBps']))
print('proxy ceiling without delay (unshaped): %.1f MB/s; the store unshaped (cold dpack fetch): %.1f MB/s' % (p0['MBps'], store / 1e6))
print('the store through the proxy without delay, unshaped (cold dpack fetch): %.1f MB/s' % (storep / 1e6))
print('effective limit min(link, store, proxy): %.1f MB/s = %.0f samples/s (the link alone: %.0f samples/s)' % (eff / 1e6, elim, lim))
print('(a) fetch alone through the link: %.1f MB in %.2f s = %.1f MB/s: %.3f of the link, %.3f of the effective limit' % (f['fetched_bytes'] / 1e6, $fetch_s, fetch / 1e6, fetch / link, fetch / eff))
mc, pc, cc = [float(x) for x in '$fetch_cpu'.split()]
# from the samples: the first moment 1% of the set has arrived, the last before 99%, the rate between
rs = [(float(a), int(b)) for a, b in (l.split() for l in open('$T/fetch.rx') if len(l.split()) == 2)]
b0 = rs[0][1]
t_first = next(t for t, b in rs if b - b0 >= 0.01 * B)
t_last = next(t for t, b in rs if b - b0 >= 0.99 * B)
flow = 0.98 * B / (t_last - t_first)
print('(a) the fetch through the link: the first 1%% of the set after %.3f s, 1%% to 99%% in %.3f s = %.1f MB/s (%.3f of the link); after 99%%: %.3f s' % (t_first - $ft0, t_last - t_first, flow / 1e6, flow / link, $ft1 - t_last))
print('(a) CPU during the fetch: moto %.2f s, the proxy %.2f s, dpack %.2f s (of %.2f s wall on 2 vCPUs)' % (mc, pc, cc, $fetch_s))
print('(a) epoch 1 (fetch + decode): %.2f s, %.0f samples/s: %.3f of the link limit, %.3f of the effective; ldcat after the fetch: %.0f samples/s; %.1f MB received' % (e1w, e1, e1 / lim, e1 / elim, e1j['samples_per_s'], $e1_rx / 1e6))
pl = min(elim, l)
print('(a) epoch 1 against the pipeline-full bound min(effective limit, the local set decoded: %.0f samples/s) = %.0f samples/s: %.3f' % (l, pl, e1 / pl))
print('(b) the warm cache resolved through the link (%d objects HEADed, %d fetched): %.3f s; the ratio it allows: %.3f' % (wf['objects'], wf['fetched'], $warm_s, 1 / (1 + $warm_s * l / N)))
print('(b) epoch 2, warm cache: %.0f samples/s; local set: %.0f samples/s (medians of %d); median of the pairs\' ratios %.3f (each: %s); %.3f MB received' % (w, l, len(ww), ratio, ' '.join('%.3f' % (b / a) for a, b in zip(ww, wl)), $e2_rx / 1e6))
ss, sb = json.loads('''$sim_shuffle'''), json.loads('''$sim_block''')
print('(c) replay, cache %d of %d shards: shuffle LRU %s future %s; block LRU %s future %s (datasets per epoch)' % (ss['cache_shards'], ss['shards'], ss['lru'], ss['future'], sb['lru'], sb['future']))
es = json.loads('''$estream''')
def sps(k):
    return N / es[k]['wall_s'] if es[k]['wall_s'] else None
def rat(a, b):
    return round(a / b, 3) if a and b else None
f1 = lambda x: 'failed' if x is None else '%.0f' % x
for k in ('streamed', 'streamed_window', 'whole', 'local', 'local_window'):
    es[k]['sps'] = sps(k) and round(sps(k), 1)
for k, lk in (('streamed', 'local'), ('streamed_window', 'local_window')):
    s1, w1, l1 = sps(k), sps('whole'), sps(lk)
    es[k].update({'over_whole': rat(s1, w1), 'over_local': rat(s1, l1), 'over_link': rat(s1, lim),
        'over_min_link_local': rat(s1, l1 and min(lim, l1))})
    print('(e1) epoch 1 cold through the node cache, %s: streamed %s samples/s (%d delivered, %.1f MB received); whole set first %s samples/s; the local set %s' % (
        'global shuffle' if k == 'streamed' else 'windowed', f1(s1), es[k]['samples'], es[k]['rx'] / 1e6, f1(w1), f1(l1)))
    print('(e1)   streamed/whole %s, streamed/local %s, streamed/link limit %s, streamed/min(link, local) %s' % (
        es[k]['over_whole'], es[k]['over_local'], es[k]['over_link'], es[k]['over_min_link_local']))
mx = es['mixed']
print('(e2) the shuffled set: %.1f MB in %d shards of %d to %d records; windowed as --window-shards 2: --block %d --window 2' % (
    mx['bytes'] / 1e6, mx['shards'], mx['smallest_shard'], mx['block'], mx['block']))
for k, s in (('quarter', es['sim_block_quarter']), ('half', es['sim_block_half'])):
    for pol in ('future', 'lru'):
        q = es[k if pol == 'future' else k + '_lru']
        q2 = q['epochs2_job']
        print('(e2) a cache of a %s (%.1f MB), streamed, windowed, --cache-evict %s: received %s sets per epoch (epoch 1 a job alone, %s s; epoch 2 = the 2-epoch job, %s s, less it); the replay: future %s, LRU %s; the 2-epoch job: samples per epoch %s, each once: %s' % (
            k, q['cache_bytes'] / 1e6, pol, q['rx_sets_per_epoch'], q['epoch1_job']['wall_s'], q2['wall_s'], s['future'][:2], s['lru'][:2], q2['samples'], q2['each_once']))
for pol in ('future', 'lru'):
    for r in es['two_jobs'][pol]:
        print('(e3) two jobs, one node cache of %.1f MB (a quarter of their two sets), --cache-evict %s: received %s sets over their 4 epochs; fast %s s, slow %s s; samples per epoch %s and %s, each once: %s %s' % (
            r['cache_bytes'] / 1e6, pol, r['rx_sets'], r['fast']['wall_s'], r['slow']['wall_s'], r['fast']['samples'], r['slow']['samples'], r['fast']['each_once'], r['slow']['each_once']))
m = json.loads('''$mosaic''')
if m:
    for k, r in (('full', m['full']), ('quarter', m['quarter']), ('quarter, blocks of 2 shards,', m['quarter_block2'])):
        for e in r:
            print('(d) Mosaic %s cache, epoch %d: %.0f samples/s (%.3f of the link limit), %.1f MB received (%.3f of its %.1f MB)' % (k, e['epoch'], e['samples_per_s'], e['samples_per_s'] / lim, e['rx_bytes'] / 1e6, e['rx_bytes'] / m['mds_bytes'], m['mds_bytes'] / 1e6))
print(json.dumps({'samples': N, 'bytes': B, 'shards': $SHARDS, 'rtt_ms': float('$rtt'), 'link_Bps': link,
    'raw_MBps': raw['MBps'], 'proxied_MBps': prx['MBps'], 'proxy0_MBps': p0['MBps'], 'store_MBps': round(store / 1e6, 1), 'store_proxy0_MBps': round(storep / 1e6, 1),
    'fetch_s': $fetch_s, 'fetch_MBps': round(fetch / 1e6, 1), 'fetch_rx': $fetch_rx, 'fetch_cpu_moto_proxy_client': [mc, pc, cc], 'warm_resolve_s': $warm_s, 'fetch_first_s': round(t_first - $ft0, 3), 'fetch_flow_MBps': round(flow / 1e6, 1), 'epoch1_s': e1w, 'epoch1_sps': round(e1, 1),
    'epoch1_rx': $e1_rx, 'epoch1_after_fetch_sps': e1j['samples_per_s'], 'full_bound_sps': round(pl, 1), 'warm_sps': round(w, 1), 'local_sps': round(l, 1), 'epoch2_ratio': round(ratio, 3),
    'epoch2_rx': $e2_rx, 'sim_shuffle': ss, 'sim_block': sb, 'mosaic': m, 'stream': es}))
"
