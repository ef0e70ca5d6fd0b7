#!/bin/sh
# it_s3.sh - datasets in an S3-compatible store (docs/S3.md), against a real S3 API server: moto's,
# signatures checked (tests/s3_lib.sh; skipped only when PyPI cannot be reached to install it),
# started once for the whole script, and a misbehaving one (tests/s3_fault.py: 503/429, responses
# cut short, resets):
#   the S3 client's cases (tests/test_s3.c with LOADERD_S3_TEST=1): put, head, get, ranges in
#   flight, multipart, list, the store's errors named, a store that is down, retries on 503, 429,
#   cut and reset responses, a store that stops sending mid-response (timed out, retried);
#   dpack pack --shard-size into s3://bucket/prefix/NAME: the shards under the prefix, NAME last;
#   a pack whose third shard the store refuses leaves no manifest; dpack verify, inspect, decode
#   and fetch on s3:// (through the user's cache: a second fetch fetches nothing; a shard replaced
#   in the store is fetched again and refused by its identity, named; four fetches at once into one
#   cache fetch each object once in all); a single .dpk; a missing
#   key, a wrong secret: exit 1, the object and the store's code named, no secret printed;
#   dpack append to an s3:// set: a new set made, a shard added (verify sees both), a shard of
#   another shape refused with the store's manifest untouched;
#   jobs on s3:// sets (the client fetches into its user's cache and passes descriptors; loaderd
#   has no network): ldcat over 2 ranks, every sample exactly once in an epoch, with the local
#   set's labels; the Python Loader over 2 ranks, the same; nothing fetched the second time;
#   the trainer over 2 MPI ranks runs an epoch of an s3:// set of RGB tensors;
#   a job whose credentials the store refuses fails before loaderd is asked, naming the object;
#   resume: 2 ranks read 2 steps each, loaderd is killed (SIGKILL) mid-epoch and restarted, the
#   ranks resume from their state_dict on the warm cache: every sample of
#   the epoch exactly once across both runs;
#   two real uids: A fetches a set into its cache; B, whose store credentials may not read it,
#   is refused by the store (AccessDenied, named) though A has it cached, and cannot open A's
#   cached copy either (the kernel: A's cache is mode 0700);
#   bytes that are not the object's (their MD5 against the ETag) are refused and never cached;
#   a cache disk that fills mid-fetch (a file size limit): the fetch fails naming the object and
#   the reason, leaves no partial file, and the next fetch with room completes;
#   the cache's bound (LOADERD_S3_CACHE_SIZE): a second dataset that fits exactly beside the first
#   keeps both; one byte less evicts the least recently used dataset, and the cache never holds
#   more than its bound; a dataset above the bound is refused, named, with the figures;
#   loaderd's node cache (--cache-dir; ldfetch fetches with each job's own credentials): made 0700,
#   loaderd's; uid A reads a set over 2 ranks through it, every sample once, each object fetched
#   once though both ranks open at once; a fetch the store stalls 5 s delays no other uid's open
#   of a cached set; uid B whose IAM policy
#   denies the objects is refused by the store (AccessDenied, named) though the bytes are cached;
#   uid B allowed reads it with nothing fetched again (the objects' inodes unchanged); no
#   credential in loaderd's log or status; loaderd links no HTTP library, ldfetch does; a shard
#   replaced in the store: the running job's next rank is refused naming the shard, a new job
#   fetches the new object (one) and refuses it by its identity; --cache-size at exactly a set's
#   allocated size holds it, one byte under refuses it, and a second set is refused while a job
#   holds the first (objects in use never evicted); --cache-size-per-uid at exactly the set's
#   allocated bytes (blocks, as --cache-size counts), one under, and a second set while the
#   uid's job holds the first (another uid is not charged for it), and a uid's charge ends with
#   its own job while another uid's job still reads the same objects; a store that never answers (tests/s3_hold.py) a third uid's HEAD, then 17 of
#   its opens, holds up no other uid's open of a cached set; ldfetch's child for a set of 2048
#   shards holds under 6 MiB more than one for one object; its clients SIGKILLed mid-fetch stay
#   counted in --max-conns-per-uid until their opens end; without --cache-dir the client fetches as
#   before; a cache folder others may write is refused at start; the node cache fetches only from
#   the stores --cache-endpoints lists (AWS's by default): moto's endpoint unlisted is left to the
#   client (its own cache, nothing fetched by ldfetch), and a list entry with a path, a user, a
#   scheme other than http(s) or a trailing comma stops loaderd at start.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/bin
T=$(mktemp -d /tmp/it_s3.XXXXXX)
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3_lib.sh"
FPID=""
trap 'stop_loaderd; stop_pid "$FPID"; stop_pid "${HPID:-}"; s3_stop; [ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
trap 'exit 130' INT TERM HUP PIPE
[ -x "$BUILD/tests/test_s3" ] || { echo "not built: $BUILD/tests/test_s3 (run make)"; exit 1; }

s3_start "$T"
python3 "$(dirname "$0")/s3_fault.py" "$T/fault.port" 2>"$T/fault.log" &
FPID=$!
i=0
while [ ! -s "$T/fault.port" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
python3 "$(dirname "$0")/s3_hold.py" "$T/hold.port" "$T/hold.go" 2>"$T/hold.log" &
HPID=$!
i=0
while [ ! -s "$T/hold.port" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
# the stores loaderd's node cache may fetch from (loaderd --cache-endpoints): moto, the faulty
# one and the one that never answers
EPS="$AWS_ENDPOINT_URL,http://127.0.0.1:$(cat "$T/fault.port"),http://127.0.0.1:$(cat "$T/hold.port")/"

# 1. the client's own cases
if LOADERD_S3_TEST=1 LOADERD_S3_FAULT="http://127.0.0.1:$(cat "$T/fault.port")" \
	"$BUILD/tests/test_s3" >"$T/unit.log" 2>&1 && ! grep -q SKIPPED "$T/unit.log"; then
	ok "test_s3 against moto and the fault server: every case ran and passed"
else
	no "test_s3 against moto and the fault server"
	SHOW_LINES=40 show "$T/unit.log"
fi

# 2. dpack and s3://
need_bins dpack dsgen
export LOADERD_S3_CACHE="$T/cache"
"$BIN/dsgen" npy "$T/x.npy" "$T/y.npy" --count 10 --height 32 --width 32 --channels 1 >/dev/null
"$BIN/dpack" pack --no-fsync "$T/x.npy" "$T/y.npy" "$T/whole.dpk" >/dev/null 2>&1
mkdir "$T/local"
"$BIN/dpack" pack --no-fsync --shard-size 6272 "$T/x.npy" "$T/y.npy" "$T/local/set.dpks" \
	>/dev/null 2>&1
s3_curl PUT /data >/dev/null
"$BIN/dpack" pack --no-fsync --shard-size 6272 "$T/x.npy" "$T/y.npy" s3://data/sets/set.dpks \
	>"$T/pack.log" 2>&1
s3_curl GET "/data?list-type=2" >"$T/list"
check "pack to s3://: five shards under the prefix and the manifest" sh -c "
	[ \$(grep -o '<Key>sets/set-0000[0-4].dpk</Key>' '$T/list' | wc -l) -eq 5 ] &&
	grep -q '<Key>sets/set.dpks</Key>' '$T/list'" || show "$T/pack.log"
"$BIN/dpack" verify s3://data/sets/set.dpks >"$T/v1" 2>&1
check "verify s3://: every record of the five shards checks out" \
	grep -q '5 shards, 10 records OK' "$T/v1" || show "$T/v1"
"$BIN/dpack" fetch s3://data/sets/set.dpks >"$T/f1" 2>&1
check "fetch again: six objects, none fetched (cached under their ETags)" python3 -c "
import json; r = json.loads(open('$T/f1').read().splitlines()[-1])
assert r['objects'] == 6 and r['fetched'] == 0 and r['fetched_bytes'] == 0, r" || show "$T/f1"
check "the cache is the user's alone (mode 0700)" [ "$(stat -c %a "$T/cache")" = 700 ]
# four fetches of one set at once into one cache (the ranks of a node): fetched once in all
pids=""
for i in 1 2 3 4; do
	LOADERD_S3_CACHE="$T/cc" "$BIN/dpack" fetch s3://data/sets/set.dpks >"$T/cc.$i" 2>&1 &
	pids="$pids $!"
done
for p in $pids; do wait "$p"; done
check "four fetches at once into one cache: each object fetched once in all" python3 -c "
import json
rs = [json.loads(open('$T/cc.%d' % i).read().splitlines()[-1]) for i in (1, 2, 3, 4)]
assert sum(r['fetched'] for r in rs) == 6 and all(r['objects'] == 6 for r in rs), rs" ||
	show "$T/cc.1"
"$BIN/dpack" inspect --json s3://data/sets/set.dpks 2>/dev/null >"$T/is"
"$BIN/dpack" inspect --json "$T/local/set.dpks" >"$T/il"
check "inspect s3://: the local set's samples, labels, kinds, bytes" python3 -c "
import json
a, b = json.load(open('$T/is')), json.load(open('$T/il'))
for k in ('samples', 'labels', 'kinds', 'stored_bytes', 'classes'):
    assert a[k] == b[k], k"
"$BIN/dpack" pack --no-fsync "$T/x.npy" "$T/y.npy" s3://data/one/whole.dpk >/dev/null 2>&1
"$BIN/dpack" decode s3://data/one/whole.dpk 3 >"$T/d1" 2>/dev/null
"$BIN/dpack" decode "$T/whole.dpk" 3 >"$T/d2" 2>/dev/null
check "a single .dpk in the store: sample 3 decodes as the local file's" cmp -s "$T/d1" "$T/d2"
# dpack append into the store
"$BIN/dpack" append s3://data/app/set.dpks "$T/local/set-00000.dpk" >"$T/a1" 2>&1 &&
	"$BIN/dpack" append s3://data/app/set.dpks "$T/local/set-00002.dpk" >>"$T/a1" 2>&1
rc=$?
"$BIN/dpack" verify s3://data/app/set.dpks >"$T/a2" 2>&1
check "append to s3://: a new set, then a second shard; verify reads both" sh -c "[ $rc -eq 0 ] &&
	grep -q '2 shards, 4 records OK' '$T/a2'" || { show "$T/a1"; show "$T/a2"; }
"$BIN/dsgen" npy "$T/x16.npy" "$T/y16.npy" --count 2 --height 16 --width 16 --channels 1 >/dev/null
"$BIN/dpack" pack --no-fsync "$T/x16.npy" "$T/y16.npy" "$T/other.dpk" >/dev/null 2>&1
before=$(s3_curl HEAD /data/app/set.dpks -D - -o /dev/null | grep -i '^etag')
"$BIN/dpack" append s3://data/app/set.dpks "$T/other.dpk" >"$T/a3" 2>&1
rc=$?
after=$(s3_curl HEAD /data/app/set.dpks -D - -o /dev/null | grep -i '^etag')
check "a shard of another shape: refused, the store's manifest untouched" sh -c "[ $rc -eq 1 ] &&
	[ -n '$before' ] && [ '$before' = '$after' ]" || show "$T/a3"
# a shard replaced in the store by another shard's bytes: fetched again (a new ETag), then
# refused by its identity against the manifest's line, named
st=$(s3_put_file /data/sets/set-00001.dpk "$T/local/set-00003.dpk")
"$BIN/dpack" fetch s3://data/sets/set.dpks >"$T/f2" 2>&1
check "a replaced shard is fetched again, alone" python3 -c "
import json; r = json.loads(open('$T/f2').read().splitlines()[-1])
assert r['fetched'] == 1 and r['fetched_bytes'] == 6272, r" || { echo "# PUT: $st"; show "$T/f2"; }
"$BIN/dpack" verify s3://data/sets/set.dpks >"$T/v2" 2>&1
rc=$?
check "verify refuses the replaced shard, naming it" sh -c "[ $rc -eq 1 ] &&
	grep -q 'set-00001.dpk' '$T/v2' && grep -qi 'identity' '$T/v2'" || show "$T/v2"
# a pack the store refuses half-way leaves no manifest: a user who may not write the third shard
keys=$(s3_user packer '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"},{"Effect":"Deny","Action":"s3:PutObject","Resource":"arn:aws:s3:::data/half/set-00002.dpk"}]}')
AWS_ACCESS_KEY_ID=${keys% *} AWS_SECRET_ACCESS_KEY=${keys#* } "$BIN/dpack" pack --no-fsync \
	--shard-size 6272 "$T/x.npy" "$T/y.npy" s3://data/half/set.dpks >"$T/p2" 2>&1
rc=$?
s3_curl HEAD /data/half/set.dpks -o /dev/null >"$T/h2" 2>&1
check "a shard refused: pack fails naming it and the store's code" sh -c "[ $rc -eq 1 ] &&
	grep -q 's3://data/half/set-00002.dpk' '$T/p2' && grep -q 'AccessDenied' '$T/p2'" ||
	show "$T/p2"
check "... and the manifest was never written" grep -qx 404 "$T/h2"
"$BIN/dpack" verify s3://data/nope/x.dpks >"$T/v3" 2>&1
rc=$?
check "a missing dataset: exit 1, named, the store's NoSuchKey" sh -c "[ $rc -eq 1 ] &&
	grep -q 's3://data/nope/x.dpks' '$T/v3' && grep -q 'NoSuchKey' '$T/v3'" || show "$T/v3"
rm -rf "$T/cache"
AWS_SECRET_ACCESS_KEY=not-the-secret-0042 "$BIN/dpack" verify s3://data/sets/set.dpks >"$T/v4" 2>&1
rc=$?
check "a wrong secret: exit 1, SignatureDoesNotMatch, the secret never printed" sh -c "
	[ $rc -eq 1 ] && grep -q SignatureDoesNotMatch '$T/v4' && ! grep -q not-the-secret '$T/v4' &&
	! grep -q '$AWS_ACCESS_KEY_ID' '$T/v4'" || show "$T/v4"

# 3. jobs on s3:// datasets
need_bins loaderd ldcat
rm -rf "$T/cache"
"$BIN/dsgen" npy "$T/x40.npy" "$T/y40.npy" --count 40 --height 32 --width 32 --channels 1 >/dev/null
mkdir "$T/l40"
"$BIN/dpack" pack --no-fsync --shard-size 12800 "$T/x40.npy" "$T/y40.npy" "$T/l40/set.dpks" \
	>/dev/null 2>&1
"$BIN/dpack" pack --no-fsync --shard-size 12800 "$T/x40.npy" "$T/y40.npy" s3://data/job/set.dpks \
	>/dev/null 2>&1
serve_loaderd "$T/s.sock" "$T/l.log"
ldc() { "$BIN/ldcat" --socket "$T/s.sock" --crop 0 --batch 4 --world 2 --seed 3 "$@"; }
ldc --dataset s3://data/job/set.dpks --job j1 --rank 0 >"$T/r0" 2>"$T/e0" &
p0=$!
ldc --dataset s3://data/job/set.dpks --job j1 --rank 1 >"$T/r1" 2>"$T/e1"
wait $p0
check "ldcat, 2 ranks over s3://: every sample exactly once in the epoch" sh -c "
	cat '$T/r0' '$T/r1' | cut -d' ' -f2 | sort -n | uniq >'$T/ids'
	[ \$(wc -l <'$T/ids') -eq 40 ] && [ \$(cat '$T/r0' '$T/r1' | wc -l) -eq 40 ] &&
	[ \$(head -1 '$T/ids') -eq 0 ] && [ \$(tail -1 '$T/ids') -eq 39 ]" || { show "$T/e0"; show "$T/e1"; }
ldc --dataset "$T/l40/set.dpks" --job j2 --rank 0 >"$T/q0" 2>/dev/null &
p0=$!
ldc --dataset "$T/l40/set.dpks" --job j2 --rank 1 >"$T/q1" 2>/dev/null
wait $p0
check "... the same steps, samples and labels as the local set" sh -c "
	cut -d' ' -f1-3 '$T/r0' >'$T/a'; cut -d' ' -f1-3 '$T/q0' >'$T/b'; cmp -s '$T/a' '$T/b' &&
	cut -d' ' -f1-3 '$T/r1' >'$T/a'; cut -d' ' -f1-3 '$T/q1' >'$T/b'; cmp -s '$T/a' '$T/b'"
inet=$(for l in /proc/$LPID/fd/*; do readlink "$l"; done 2>/dev/null |
	sed -n 's/^socket:\[\([0-9]*\)\]$/\1/p' | while read -r ino; do
		awk -v i="$ino" '$10 == i' /proc/net/tcp /proc/net/tcp6 /proc/net/udp /proc/net/udp6
	done | wc -l)
check "loaderd holds no network socket and links no HTTP library (descriptors only)" sh -c "
	[ $inet -eq 0 ] && ! ldd '$BIN/loaderd' | grep -q curl && ! grep -q 's3://' '$T/l.log'"
need_python "import numpy" python3-numpy
LOADERD_LIB="$BUILD/lib/libldc.so" LOADERD_DPACK="$BIN/dpack" PYTHONPATH="$(dirname "$0")/../python" \
	"$PY" - "$T/s.sock" >"$T/py" 2>&1 <<'PY'
import sys, threading
import loaderd
ids, labels = {}, {}
def rank(r):
    with loaderd.Loader(sys.argv[1], "s3://data/job/set.dpks", 4, crop=None, output="numpy",
                        rank=r, world_size=2, job="py", epochs=1, seed=3,
                        return_meta=True) as it:
        for b in it:
            for i, l in zip(b.ids.tolist(), b.labels.tolist()):
                ids[i] = ids.get(i, 0) + 1
                labels[i] = l
ts = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
[t.start() for t in ts]
[t.join() for t in ts]
assert sorted(ids) == list(range(40)) and set(ids.values()) == {1}, ids
print("labels", " ".join(f"{i}:{labels[i]}" for i in sorted(labels)))
PY
rc=$?
sort -n "$T/r0" "$T/r1" | awk '{ print $2 ":" $3 }' | sort -n -t: -k1 | tr '\n' ' ' | sed 's/ $//' >"$T/lab"
check "Python Loader, 2 ranks over s3://: every sample once, the labels ldcat saw" sh -c "
	[ $rc -eq 0 ] && grep -q \"^labels \$(cat '$T/lab')\$\" '$T/py'" || show "$T/py"
"$BIN/dpack" fetch s3://data/job/set.dpks >"$T/f3" 2>&1
check "the set stays cached: a fetch after the jobs fetches nothing" python3 -c "
import json; r = json.loads(open('$T/f3').read().splitlines()[-1])
assert r['objects'] == 6 and r['fetched'] == 0, r"
# the trainer over 2 MPI ranks on an s3:// set
if command -v mpirun >/dev/null 2>&1 && [ -x "$BIN/trainer" ]; then
	mpi_session_in "$T"
	"$BIN/dsgen" npy "$T/xt.npy" "$T/yt.npy" --count 32 --height 32 --width 32 --channels 3 \
		>/dev/null
	"$BIN/dpack" pack --no-fsync --shard-size 20000 "$T/xt.npy" "$T/yt.npy" \
		s3://data/trn/set.dpks >/dev/null 2>&1
	OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -k 5 120 \
		mpirun --oversubscribe -np 2 "$BIN/trainer" --dataset s3://data/trn/set.dpks \
		--socket "$T/s.sock" --crop 32 --batch 4 --epochs 1 --device host --log-every 0 \
		>"$T/trn.out" 2>"$T/trn.err"
	rc=$?
	check "trainer, 2 MPI ranks, --dataset s3://: the epoch runs from the cached set" sh -c "
		[ $rc -eq 0 ] && grep -q 's3://data/trn/set.dpks is .*set.dpks' '$T/trn.err'" ||
		show "$T/trn.err"
else
	echo "# skip the trainer case: no mpirun or no trainer built"
fi

# resume across a killed loaderd, with a warm cache
cat >"$T/resume.py" <<'PY'
import json, pickle, sys, threading
import loaderd
sock, phase, state = sys.argv[1], sys.argv[2], sys.argv[3]
ids, sds = [], {}
def rank(r):
    with loaderd.Loader(sock, "s3://data/job/set.dpks", 4, crop=None, output="numpy", rank=r,
                        world_size=2, job="res", epochs=1, seed=11, return_meta=True) as it:
        if phase == "2":
            it.load_state_dict(pickle.load(open(f"{state}.{r}", "rb")))
        for k, b in enumerate(it):
            ids.extend(b.ids.tolist())
            if phase == "1" and k == 1:
                pickle.dump(it.state_dict(), open(f"{state}.{r}", "wb"))
                break
ts = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
[t.start() for t in ts]
[t.join() for t in ts]
print(json.dumps(ids))
PY
pyrun() { LOADERD_LIB="$BUILD/lib/libldc.so" LOADERD_DPACK="$BIN/dpack" \
	PYTHONPATH="$(dirname "$0")/../python" "$PY" "$T/resume.py" "$T/s.sock" "$@"; }
pyrun 1 "$T/state" >"$T/res1" 2>"$T/res1.err"
kill -KILL "$LPID"
wait "$LPID" 2>/dev/null
LPID=""
serve_loaderd "$T/s.sock" "$T/l2.log"
pyrun 2 "$T/state" >"$T/res2" 2>"$T/res2.err"
check "resume after loaderd was killed mid-epoch: every sample exactly once across both runs" \
	python3 -c "
import json
a, b = json.load(open('$T/res1')), json.load(open('$T/res2'))
assert len(a) == 16, len(a)
assert sorted(a + b) == list(range(40)), sorted(a + b)" || { show "$T/res1.err"; show "$T/res2.err"; }
AWS_SECRET_ACCESS_KEY=wrong-0042 ldc --dataset s3://data/job/set.dpks --job j3 --rank 0 \
	>/dev/null 2>"$T/e3"
rc=$?
check "refused credentials: the job fails before loaderd is asked, naming the object" sh -c "
	[ $rc -eq 1 ] && grep -q 's3://data/job/set.dpks' '$T/e3' &&
	grep -q SignatureDoesNotMatch '$T/e3' && ! grep -q wrong-0042 '$T/e3'" || show "$T/e3"
stop_loaderd

# 5. another uid: refused by the store even when the object is cached for someone else
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
	chmod 711 "$T"
	mkdir "$T/ua" "$T/ub"
	chown 64021:64021 "$T/ua"
	chown 64022:64022 "$T/ub"
	chmod 700 "$T/ua" "$T/ub"
	kb=$(s3_user reader2 '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"},{"Effect":"Deny","Action":"s3:GetObject","Resource":"arn:aws:s3:::data/job/*"}]}')
	HOME="$T/ua" setpriv --reuid=64021 --regid=64021 --clear-groups env -u LOADERD_S3_CACHE \
		"$BIN/dpack" fetch s3://data/job/set.dpks >"$T/ua.out" 2>&1
	ra=$?
	view=$(python3 -c "import json; print(json.loads(open('$T/ua.out').read().splitlines()[-1])['path'])" 2>/dev/null)
	HOME="$T/ub" AWS_ACCESS_KEY_ID=${kb% *} AWS_SECRET_ACCESS_KEY=${kb#* } \
		setpriv --reuid=64022 --regid=64022 --clear-groups env -u LOADERD_S3_CACHE \
		"$BIN/dpack" fetch s3://data/job/set.dpks >"$T/ub.out" 2>&1
	rb=$?
	setpriv --reuid=64022 --regid=64022 --clear-groups cat "$view" >/dev/null 2>"$T/ub.cat"
	rc=$?
	check "uid A fetches the set into its own cache" sh -c "[ $ra -eq 0 ] && [ -n '$view' ] &&
		[ \$(stat -c %u '$view') -eq 64021 ]" || show "$T/ua.out"
	check "uid B, whose credentials may not read it, is refused by the store, named" sh -c "
		[ $rb -eq 1 ] && grep -q 's3://data/job/set.dpks' '$T/ub.out' &&
		grep -q 'AccessDenied' '$T/ub.out'" || show "$T/ub.out"
	check "... and cannot open A's cached copy (the kernel refuses: mode 0700)" sh -c "
		[ $rc -ne 0 ] && grep -qi 'permission denied' '$T/ub.cat'"
else
	echo "# skip the two-uid case: not root or no setpriv"
fi

# a cache disk that fills mid-fetch: RLIMIT_FSIZE (SIGXFSZ ignored, so the write fails EFBIG)
(trap '' XFSZ; ulimit -f 8; LOADERD_S3_CACHE="$T/cf" exec "$BIN/dpack" fetch s3://data/job/set.dpks) \
	>"$T/full" 2>&1
rc=$?
check "a full cache disk: the fetch fails naming the object and why, no partial file left" sh -c "
	[ $rc -eq 1 ] && grep -q 's3://data/job/set-0000[0-9].dpk' '$T/full' &&
	grep -qi 'too large' '$T/full' && [ -z \"\$(find '$T/cf' -name '*.tmp.*')\" ]" || show "$T/full"
LOADERD_S3_CACHE="$T/cf" "$BIN/dpack" fetch s3://data/job/set.dpks >"$T/full2" 2>&1
check "... and with room, the next fetch completes" grep -q '"objects": 6' "$T/full2"

# an object whose bytes are not its ETag's MD5 (the fault server changes them): never cached
AWS_ENDPOINT_URL="http://127.0.0.1:$(cat "$T/fault.port")" LOADERD_S3_CACHE="$T/cx" \
	"$BIN/dpack" fetch s3://bkt/corrupt/x.dpk >"$T/cx.out" 2>&1
rc=$?
check "bytes that are not the object's (MD5 against the ETag): refused, named, not cached" sh -c "
	[ $rc -eq 1 ] && grep -q 's3://bkt/corrupt/x.dpk: the bytes fetched have MD5 .* corrupted' '$T/cx.out' &&
	[ \$(find '$T/cx/objects' -type f ! -name .lock | wc -l) -eq 0 ]" || show "$T/cx.out"

# 4. the cache's bound
used() { # bytes allocated under DIR/objects
	find "$1/objects" -type f -printf '%b\n' 2>/dev/null | awk '{ s += $1 * 512 } END { print s + 0 }'
}
LOADERD_S3_CACHE="$T/c1" "$BIN/dpack" fetch s3://data/job/set.dpks >/dev/null 2>&1
u1=$(used "$T/c1")
s2=$(($(stat -c %b "$T/whole.dpk") * 512))
LOADERD_S3_CACHE="$T/c1" LOADERD_S3_CACHE_SIZE=$((u1 + s2)) "$BIN/dpack" fetch \
	s3://data/one/whole.dpk >"$T/b1" 2>&1
rc=$?
check "a bound that holds both datasets exactly: both kept" sh -c "[ $rc -eq 0 ] &&
	[ \$(ls '$T/c1/sets' | wc -l) -eq 2 ] && [ $(used "$T/c1") -eq $((u1 + s2)) ]" || show "$T/b1"
LOADERD_S3_CACHE="$T/c2" "$BIN/dpack" fetch s3://data/job/set.dpks >/dev/null 2>&1
LOADERD_S3_CACHE="$T/c2" LOADERD_S3_CACHE_SIZE=$((u1 + s2 - 1)) "$BIN/dpack" fetch \
	s3://data/one/whole.dpk >"$T/b2" 2>&1
rc=$?
check "one byte less: the older dataset is evicted, the cache within its bound" sh -c "
	[ $rc -eq 0 ] && [ \$(ls '$T/c2/sets' | wc -l) -eq 1 ] &&
	[ \$(ls '$T/c2/objects' | wc -l) -eq 1 ] && [ $(used "$T/c2") -le $((u1 + s2 - 1)) ]" ||
	show "$T/b2"
LOADERD_S3_CACHE="$T/c3" LOADERD_S3_CACHE_SIZE=10K "$BIN/dpack" fetch s3://data/job/set.dpks \
	>"$T/b3" 2>&1
rc=$?
check "a dataset above the bound: refused, named, with the figures; nothing kept" sh -c "
	[ $rc -eq 1 ] && grep -q 's3://data/job/set.dpks: a dataset of [0-9]* bytes, above the cache.s bound of 10240' '$T/b3' &&
	[ $(used "$T/c3") -le 10240 ]" || show "$T/b3"

# 6. loaderd's node cache (loaderd --cache-dir): ldfetch fetches with each job's own credentials
need_bins loaderd ldcat ldfetch loaderctl
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
	UA=64021 UB=64022
	asu() { _u=$1; shift; setpriv --reuid="$_u" --regid="$_u" --clear-groups env HOME=/nonexistent "$@"; }
else
	echo "# the node cache's uids are this one: not root or no setpriv"
	UA=$(id -u) UB=$(id -u)
	asu() { shift; env HOME=/nonexistent "$@"; }
fi
chmod 711 "$T"
nld() { _s=$1; shift; "$BIN/ldcat" --socket "$_s" --crop 0 --batch 4 --world 2 --seed 3 "$@"; }
# two ranks of job $3 on dataset $2 as uid $1 through socket $4: every sample once, out in $T/$3.*
nboth() {
	asu "$1" "$BIN/ldcat" --socket "$4" --crop 0 --batch 4 --world 2 --seed 3 --dataset "$2" \
		--job "$3" --rank 0 >"$T/$3.r0" 2>"$T/$3.e0" &
	_p=$!
	asu "$1" "$BIN/ldcat" --socket "$4" --crop 0 --batch 4 --world 2 --seed 3 --dataset "$2" \
		--job "$3" --rank 1 >"$T/$3.r1" 2>"$T/$3.e1"
	_r1=$?
	wait $_p && [ $_r1 -eq 0 ] && cat "$T/$3.r0" "$T/$3.r1" | cut -d' ' -f2 | sort -n | uniq >"$T/$3.ids" &&
		[ "$(wc -l <"$T/$3.ids")" -eq 40 ] && [ "$(cat "$T/$3.r0" "$T/$3.r1" | wc -l)" -eq 40 ]
}
inodes() { ls -i "$1/objects" | grep -v '\.lock' | sort; }
serve_loaderd "$T/n.sock" "$T/n.log" --all-users --cache-dir "$T/node" --cache-endpoints "$EPS"
check "the node cache is made mode 0700, loaderd's own" \
	[ "$(stat -c '%a %u' "$T/node")" = "700 $(id -u)" ]
nboth $UA s3://data/job/set.dpks na "$T/n.sock"
rc=$?
check "node cache: uid A, 2 ranks, every sample exactly once, fetched by loaderd" sh -c "[ $rc -eq 0 ] &&
	grep -q \"through loaderd's node cache\" '$T/na.e0' &&
	[ \$(ls '$T/node/objects' | grep -vc lock) -eq 6 ] &&
	grep -q 'uid $UA: s3://data/job/set.dpks: 6 objects, 6 fetched now' '$T/n.log'" ||
	{ show "$T/na.e0"; show "$T/na.e1"; show "$T/n.log"; }
fa=$(sed -n "s|^ldfetch: uid $UA: s3://data/job/set.dpks: 6 objects, \([0-9]*\) fetched now.*|\1|p" \
	"$T/n.log" | awk '{ s += $1; k++ } END { print k ":" s }')
check "... its two ranks opened at once: each object fetched once in all (requests:fetched $fa)" \
	[ "$fa" = 2:6 ]
inodes "$T/node" >"$T/ino1"
u1=$(used "$T/node")
b1=$u1  # the per-uid charge counts allocated blocks, as --cache-size does
kd=$(s3_user nodedeny '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"},{"Effect":"Deny","Action":"s3:GetObject","Resource":"arn:aws:s3:::data/job/*"}]}')
AWS_ACCESS_KEY_ID=${kd% *} AWS_SECRET_ACCESS_KEY=${kd#* } asu $UB "$BIN/ldcat" --socket "$T/n.sock" \
	--crop 0 --batch 4 --world 2 --seed 3 --dataset s3://data/job/set.dpks --job nb --rank 0 \
	>/dev/null 2>"$T/nb.e"
rc=$?
check "uid B, whose credentials the store refuses, is refused though the set is cached: the store's code, named" \
	sh -c "[ $rc -eq 1 ] && grep -q 's3://data/job/set.dpks' '$T/nb.e' &&
	grep -Eq 'AccessDenied|403' '$T/nb.e' && ! grep -q '${kd#* }' '$T/nb.e'" || show "$T/nb.e"
ko=$(s3_user nodeok '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"}]}')
AWS_ACCESS_KEY_ID=${ko% *} AWS_SECRET_ACCESS_KEY=${ko#* } nboth $UB s3://data/job/set.dpks nc "$T/n.sock"
rc=$?
inodes "$T/node" >"$T/ino2"
check "uid B, allowed, reads the cached set: every sample once, nothing fetched again" sh -c "
	[ $rc -eq 0 ] && cmp -s '$T/ino1' '$T/ino2' &&
	grep -q 'uid $UB: s3://data/job/set.dpks: 6 objects, 0 fetched now' '$T/n.log'" ||
	{ show "$T/nc.e0"; show "$T/n.log"; }
# a long fetch (a store that stalls 5 s mid-response, tests/s3_fault.py) delays no other open
AWS_ENDPOINT_URL="http://127.0.0.1:$(cat "$T/fault.port")" asu $UA "$BIN/ldcat" --socket "$T/n.sock" \
	--crop 0 --batch 4 --world 1 --seed 3 --dataset s3://bkt/stall-2/node.dpk --job ns \
	>/dev/null 2>"$T/ns.e" &
pst=$!
sleep 1
t0=$(now)
AWS_ACCESS_KEY_ID=${ko% *} AWS_SECRET_ACCESS_KEY=${ko#* } nboth $UB s3://data/job/set.dpks nq "$T/n.sock"
rq=$?
dt=$(since "$t0")
kill -0 $pst 2>/dev/null
still=$?
lt "$dt" 3.5
fast=$?
wait $pst
check "a fetch the store stalls delays no other open: uid B reads the cached set meanwhile (${dt} s)" \
	sh -c "[ $rq -eq 0 ] && [ $still -eq 0 ] && [ $fast -eq 0 ] &&
	grep -q 's3://bkt/stall-2/node.dpk' '$T/ns.e'" || { show "$T/ns.e"; show "$T/nq.e0"; }
# a store that never answers (tests/s3_hold.py: connections taken, requests read, nothing sent)
# holds up no other uid: not while it HEADs (no cache lock held through a request to a store), nor
# with more requests of one uid waiting than ldfetch serves at once (a uid's run one at a time)
if [ "$UA" != "$UB" ]; then
	UC=64023
	hold() {
		AWS_ENDPOINT_URL="http://127.0.0.1:$(cat "$T/hold.port")" AWS_ACCESS_KEY_ID=${ko% *} \
			AWS_SECRET_ACCESS_KEY=${ko#* } asu $UC "$BIN/ldcat" --socket "$T/n.sock" --crop 0 \
			--batch 4 --world 1 --seed 3 --dataset s3://bkt/held/h.dpk --job "hold$1" \
			>/dev/null 2>"$T/hold$1.e" &
		HOLDERS="$HOLDERS $!"
	}
	bquick() {  # uid B reads the cached set meanwhile, in under 3.5 s
		t0=$(now)
		AWS_ACCESS_KEY_ID=${ko% *} AWS_SECRET_ACCESS_KEY=${ko#* } nboth $UB s3://data/job/set.dpks "$1" \
			"$T/n.sock" &
		_bp=$!
		i=0
		while kill -0 $_bp 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
		kill -0 $_bp 2>/dev/null && { BDT=stuck; HOLDERS="$HOLDERS $_bp"; return 1; }
		wait $_bp || { BDT=failed; return 1; }
		BDT=$(since "$t0")
		lt "$BDT" 3.5
	}
	HOLDERS=""
	hold 0
	sleep 1
	bquick nh1
	check "a store that never answers uid C's HEAD holds up no other uid: B reads the cached set meanwhile ($BDT s)" \
		[ $? -eq 0 ] || { show "$T/nh1.e0"; show "$T/n.log"; }
	for k in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do hold $k; done
	sleep 1
	bquick nh2
	check "... nor 17 opens of uid C waiting on it: B reads the cached set meanwhile ($BDT s)" \
		[ $? -eq 0 ] || { show "$T/nh2.e0"; show "$T/n.log"; }
	# a set of 2048 shards held at its first GET (every shard HEADed): what ldfetch's child holds
	# for it beside one that HEADs one object, in VmHWM (was 8 KiB a shard: two PATH_MAX arrays)
	UD=64024
	AWS_ENDPOINT_URL="http://127.0.0.1:$(cat "$T/hold.port")" AWS_ACCESS_KEY_ID=${ko% *} \
		AWS_SECRET_ACCESS_KEY=${ko#* } asu $UD "$BIN/ldcat" --socket "$T/n.sock" --crop 0 \
		--batch 4 --world 1 --seed 3 --dataset s3://bkt/many-2048/set.dpks --job many \
		>/dev/null 2>"$T/many.e" &
	HOLDERS="$HOLDERS $!"
	i=0
	while [ ! -e "$T/hold.go.get" ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
	sleep 0.5
	lfp=$(sed -n 's/.*fetched by .*ldfetch (pid \([0-9]*\)).*/\1/p' "$T/n.log" | head -n 1)
	hwm=$(for k in $(cat "/proc/$lfp/task/$lfp/children"); do
		awk '/^VmHWM:/ { print $2 }' "/proc/$k/status"; done | sort -n)
	hlo=$(echo "$hwm" | head -n 1)
	hhi=$(echo "$hwm" | tail -n 1)
	lfb=$(sed -n 's/.*fetched by \(.*ldfetch\) (pid .*/\1/p' "$T/n.log" | head -n 1)
	if grep -qa __asan_init "$lfb"; then
		echo "# skip the memory of ldfetch's child: built with AddressSanitizer ($(echo $hwm) kB)"
	else
		check "ldfetch's child for a set of 2048 shards holds $((hhi - hlo)) KiB more than one for one object (under 6144; $(echo $hwm))" \
			sh -c "[ -e '$T/hold.go.get' ] && [ -n '$hlo' ] && [ $((hhi - hlo)) -lt 6144 ]" ||
			echo "# VmHWM of ldfetch's children (kB):" $hwm
	fi
	# clients killed mid-fetch leave their opens counted in their uid's connections until the
	# opens end: a uid never has more opens in flight than --max-conns-per-uid
	_keep=$LPID
	start_loaderd "$T/h.log" --socket "$T/h.sock" --all-users --cache-dir "$T/nodeh" --cache-endpoints "$EPS" \
		\
		--max-conns-per-uid 2
	HLPID=$LPID
	LPID=$_keep
	hc() {  # hc JOB [SECONDS]: uid C's ldcat, SIGKILLed after SECONDS (10)
		AWS_ENDPOINT_URL="http://127.0.0.1:$(cat "$T/hold.port")" AWS_ACCESS_KEY_ID=${ko% *} \
			AWS_SECRET_ACCESS_KEY=${ko#* } timeout -s KILL "${2:-10}" setpriv --reuid=$UC \
			--regid=$UC --clear-groups env HOME=/nonexistent "$BIN/ldcat" --socket "$T/h.sock" \
			--crop 0 --batch 4 --world 1 --seed 3 --dataset s3://bkt/held/h.dpk --job "$1" \
			>/dev/null
	}
	hc ka 1 2>/dev/null &
	_ka=$!
	hc kb 1 2>/dev/null &
	_kb=$!
	wait $_ka $_kb
	t0=$(now)
	hc kc 2>"$T/kc.e"
	rc=$?
	dt=$(since "$t0")
	check "... 2 opens of uid C whose clients were killed mid-fetch still count: a third is refused at once (${dt} s, --max-conns-per-uid 2)" \
		sh -c "[ $rc -ne 0 ] && [ $rc -ne 137 ] && $(lt "$dt" 3 && echo true || echo false) &&
		grep -q 'uid $UC has 2 connections to loaderd, the limit (loaderd --max-conns-per-uid)' \
		'$T/h.log'" || { show "$T/kc.e"; show "$T/h.log"; }
	touch "$T/hold.go"
	for p in $HOLDERS; do wait $p; done
	check "... the held opens fail when the store answers (403, named), none left waiting" \
		sh -c "grep -q 's3://bkt/held/h.dpk' '$T/hold16.e' && grep -q 403 '$T/hold16.e'" ||
		show "$T/hold16.e"
	i=0
	while ! hc kd 2>"$T/kd.e" && ! grep -q 403 "$T/kd.e" && [ $i -lt 20 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	check "... and once they end, uid C's connections are its own again (the store's 403 answers)" \
		grep -q 403 "$T/kd.e" || show "$T/kd.e"
	stop_pid "$HLPID"
	stop_pid "$HPID"
fi
"$BIN/loaderctl" --socket "$T/n.sock" status --json >"$T/nst" 2>&1
check "no credential in loaderd's log or its status" sh -c "! grep -q '${ko#* }' '$T/n.log' &&
	! grep -q '${kd#* }' '$T/n.log' && ! grep -q '${ko#* }' '$T/nst' &&
	! grep -q '$AWS_SECRET_ACCESS_KEY' '$T/n.log' && grep -q nc '$T/nst'" || show "$T/nst"
# ---- the trainer and the Python Loader through the node cache (ldc_s3_offer, ldcat's rule) ----
# Each as uid A on a set of its own that no one has read yet: every sample once over 2 ranks,
# fetched by loaderd, nothing in the user's own cache; uid B with credentials the store refuses:
# the store's error through both, no secret; loaderd without --cache-dir, and
# LOADERD_S3_CLIENT_FETCH=1 with it: the user's own cache, as before.
mkdir -m 777 "$T/wu"
"$BIN/dsgen" npy "$T/xw.npy" "$T/yw.npy" --count 32 --height 32 --width 32 --channels 3 >/dev/null
for p in wtrn wpy; do
	"$BIN/dpack" pack --no-fsync --shard-size 20000 "$T/xw.npy" "$T/yw.npy" "s3://data/$p/set.dpks" \
		>/dev/null 2>&1
done
# wtrn NAME SOCKET [ENV=V...]: the trainer, 2 MPI ranks, one epoch of s3://data/wtrn/set.dpks as
# uid $WU, samples in $T/wu/NAME.smp.RANK, the user's cache $T/wu/NAME.cache
wtrn() {
	_n=$1 _s=$2
	shift 2
	asu "$WU" env OMPI_MCA_orte_tmpdir_base="$T/wu" OMPI_ALLOW_RUN_AS_ROOT=1 \
		OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LOADERD_S3_CACHE="$T/wu/$_n.cache" "$@" \
		timeout -k 5 120 mpirun --oversubscribe -np 2 "$BIN/trainer" \
		--dataset s3://data/wtrn/set.dpks --socket "$_s" --crop 32 --batch 4 --epochs 1 \
		--classes 10 --device host --log-every 0 --log-samples "$T/wu/$_n.smp" \
		>"$T/wu/$_n.out" 2>"$T/wu/$_n.err"
}
# wpy NAME SOCKET [ENV=V...]: the Python Loader, 2 ranks (threads), one epoch of
# s3://data/wpy/set.dpks as uid $WU: "once 32" when each sample came once, else the LoaderdError;
# the user's cache $T/wu/NAME.cache
wpy() {
	_n=$1 _s=$2
	shift 2
	asu "$WU" env LOADERD_LIB="$BUILD/lib/libldc.so" LOADERD_DPACK="$BIN/dpack" \
		PYTHONPATH="$(dirname "$0")/../python" LOADERD_S3_CACHE="$T/wu/$_n.cache" "$@" \
		"$PY" - "$_s" >"$T/wu/$_n.py" 2>&1 <<'PY'
import sys, threading
import loaderd
ids, errs = {}, []
def rank(r):
    try:
        with loaderd.Loader(sys.argv[1], "s3://data/wpy/set.dpks", 4, crop=None, output="numpy",
                            rank=r, world_size=2, job="pyw", epochs=1, seed=3,
                            return_meta=True) as it:
            for b in it:
                for i in b.ids.tolist():
                    ids[i] = ids.get(i, 0) + 1
    except loaderd.LoaderdError as e:
        errs.append(f"LoaderdError: {e}")
ts = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
[t.start() for t in ts]
[t.join() for t in ts]
if errs:
    sys.exit("\n".join(errs))
assert sorted(ids) == list(range(32)) and set(ids.values()) == {1}, ids
print("once", len(ids))
PY
}
# wonce NAME: NAME's two ranks' trainer samples are the set's 32, each once
wonce() {
	cat "$T/wu/$1".smp.* 2>/dev/null | awk '{ print $2 }' | sort -n | uniq >"$T/wu/$1.ids" &&
		[ "$(wc -l <"$T/wu/$1.ids")" -eq 32 ] && [ "$(cat "$T/wu/$1".smp.* | wc -l)" -eq 32 ] &&
		[ "$(head -1 "$T/wu/$1.ids")" -eq 0 ] && [ "$(tail -1 "$T/wu/$1.ids")" -eq 31 ]
}
if command -v mpirun >/dev/null 2>&1 && [ -x "$BIN/trainer" ]; then
	WU=$UA
	wtrn wt "$T/n.sock"
	rc=$?
	check "trainer, 2 MPI ranks on s3:// through the node cache: every sample once, fetched by loaderd, nothing in the user's cache" \
		sh -c "[ $rc -eq 0 ] && grep -q \"s3://data/wtrn/set.dpks through loaderd's node cache\" '$T/wu/wt.err' &&
		grep -q 'uid $UA: s3://data/wtrn/set.dpks: 8 objects, [1-8] fetched now' '$T/n.log' &&
		[ ! -e '$T/wu/wt.cache' ] && $(wonce wt && echo true || echo false)" ||
		{ show "$T/wu/wt.err"; show "$T/n.log"; }
	kw=$(s3_user wiredeny '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"},{"Effect":"Deny","Action":"s3:GetObject","Resource":["arn:aws:s3:::data/wtrn/*","arn:aws:s3:::data/wpy/*"]}]}')
	WU=$UB
	wtrn wd "$T/n.sock" AWS_ACCESS_KEY_ID="${kw% *}" AWS_SECRET_ACCESS_KEY="${kw#* }"
	rc=$?
	check "trainer, uid B whose credentials the store refuses: the store's code, named, no secret" \
		sh -c "[ $rc -ne 0 ] && grep -q 's3://data/wtrn/set.dpks' '$T/wu/wd.err' &&
		grep -Eq 'AccessDenied|403' '$T/wu/wd.err' && ! grep -q '${kw#* }' '$T/wu/wd.err' &&
		[ ! -e '$T/wu/wd.cache' ]" || show "$T/wu/wd.err"
	WU=$UA
	wtrn we "$T/n.sock" LOADERD_S3_CLIENT_FETCH=1
	rc=$?
	check "trainer with LOADERD_S3_CLIENT_FETCH=1: every sample once from the user's cache" \
		sh -c "[ $rc -eq 0 ] && grep -q 's3://data/wtrn/set.dpks is $T/wu/we.cache/sets/' '$T/wu/we.err' &&
		$(wonce we && echo true || echo false)" || show "$T/wu/we.err"
else
	echo "# skip the trainer's node cache cases: no mpirun or no trainer built"
fi
WU=$UA
wpy wp "$T/n.sock"
rc=$?
check "Python Loader, 2 ranks on s3:// through the node cache: every sample once, fetched by loaderd, nothing in the user's cache" \
	sh -c "[ $rc -eq 0 ] && grep -q '^once 32\$' '$T/wu/wp.py' &&
	grep -q 'uid $UA: s3://data/wpy/set.dpks: 8 objects, [1-8] fetched now' '$T/n.log' &&
	[ ! -e '$T/wu/wp.cache' ]" || { show "$T/wu/wp.py"; show "$T/n.log"; }
WU=$UB
wpy wpd "$T/n.sock" AWS_ACCESS_KEY_ID="${kw% *}" AWS_SECRET_ACCESS_KEY="${kw#* }"
rc=$?
check "Python Loader, uid B whose credentials the store refuses: LoaderdError with the store's code, named, no secret" \
	sh -c "[ $rc -ne 0 ] && grep -q '^LoaderdError: .*s3://data/wpy/set.dpks' '$T/wu/wpd.py' &&
	grep -Eq 'AccessDenied|403' '$T/wu/wpd.py' && ! grep -q '${kw#* }' '$T/wu/wpd.py' &&
	[ ! -e '$T/wu/wpd.cache' ]" || show "$T/wu/wpd.py"
WU=$UA
wpy wpe "$T/n.sock" LOADERD_S3_CLIENT_FETCH=1
rc=$?
check "Python Loader with LOADERD_S3_CLIENT_FETCH=1: every sample once from the user's cache" \
	sh -c "[ $rc -eq 0 ] && grep -q '^once 32\$' '$T/wu/wpe.py' && [ -d '$T/wu/wpe.cache/sets' ]" ||
	show "$T/wu/wpe.py"
# loaderd without --cache-dir beside it: both fetch into the user's cache, as before
_lk=$LPID
start_loaderd "$T/wf.log" --socket "$T/wf.sock" --workers 1 --all-users ||
	{ echo "# loaderd did not start"; exit 1; }
WFPID=$LPID LPID=$_lk
if command -v mpirun >/dev/null 2>&1 && [ -x "$BIN/trainer" ]; then
	wtrn wf "$T/wf.sock"
	rc=$?
	check "trainer, loaderd without --cache-dir: every sample once from the user's cache" \
		sh -c "[ $rc -eq 0 ] && grep -q 's3://data/wtrn/set.dpks is $T/wu/wf.cache/sets/' '$T/wu/wf.err' &&
		$(wonce wf && echo true || echo false)" || show "$T/wu/wf.err"
fi
wpy wpf "$T/wf.sock"
rc=$?
check "Python Loader, loaderd without --cache-dir: every sample once from the user's cache" \
	sh -c "[ $rc -eq 0 ] && grep -q '^once 32\$' '$T/wu/wpf.py' && [ -d '$T/wu/wpf.cache/sets' ]" ||
	show "$T/wu/wpf.py"
stop_pid "$WFPID"
# ---- end of the trainer's and the Python Loader's node cache cases ----
lfp=$(sed -n 's/.*fetched by .*ldfetch (pid \([0-9]*\)).*/\1/p' "$T/n.log" | head -n 1)
check "ldfetch, whose children hold users' credentials, dumps no core (its core size limit 0, soft and hard)" \
	grep -Eq '^Max core file size +0 +0 ' "/proc/$lfp/limits" || grep core "/proc/$lfp/limits"
# hostile CTL_S3_OPEN bodies on the wire: each refused with the field named, loaderd serving on
cat >"$T/raw.py" <<'PY'
import socket, struct, sys
def msg(typ, body):
    return struct.pack("<IHHII", 0x3143444c, 2, typ, 16 + len(body), 0) + body
EP = sys.argv[2].encode()  # one the node cache fetches from (--cache-endpoints)
def s3body(url=b"s3://data/job/set.dpks", ep=EP, region=b"us-east-1",
           ak=b"AKIA", sk=b"SECRETSECRET", tok=b"", reserved=0, extra=b""):
    f = (url, ep, region, ak, sk, tok)
    return struct.pack("<6HI", *[len(x) for x in f], reserved) + b"".join(f) + extra
cases = {
    "long": s3body(region=b"r" * 65),
    "junk": s3body(sk=b"SECRET\nSECRET"),
    "sum": s3body(extra=b"x"),
    "url": s3body(url=b"http://data/x"),
}
out = []
for name, body in cases.items():
    c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    c.connect(sys.argv[1])
    c.send(msg(14, body))
    r = c.recv(4096)
    typ, = struct.unpack_from("<H", r, 6)
    err, = struct.unpack_from("<i", r, 16) if len(r) >= 20 else (0,)
    text = r[20:].split(b"\0")[0].decode(errors="replace")
    out.append("%s %d %d %s" % (name, typ, err, text))
# twice on one connection: the second is refused
c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
c.connect(sys.argv[1])
c.send(msg(14, s3body()))
a = c.recv(4096)
c.send(msg(14, s3body()))
r = c.recv(4096)
out.append("twice %d %d %s" % (struct.unpack_from("<H", a, 6)[0], struct.unpack_from("<H", r, 6)[0],
                              r[20:].split(b"\0")[0].decode(errors="replace")))
# a region that would change the signature's scope (aws:amz:REGION:s3): refused at the job open
c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
c.connect(sys.argv[1])
c.send(msg(14, s3body(region=b"us-east-1:x")))
a = c.recv(4096)
job = struct.pack("<64s1024sQQ12IQQ16s3I2H", b"rg", b"s3://data/job/set.dpks", 1, 0, 1, 4, 0, 0,
                  0, 0, 1, 0, 0, 0, 0, 0, 0, 0, b"", 0, 0, 0, 0, 0)
c.send(msg(1, job))
r = c.recv(4096)
out.append("region %d %d %s" % (struct.unpack_from("<H", a, 6)[0], struct.unpack_from("<H", r, 6)[0],
                               r[20:].split(b"\0")[0].decode(errors="replace")))
print("\n".join(out))
PY
python3 "$T/raw.py" "$T/n.sock" "http://127.0.0.1:$(cat "$T/fault.port")" >"$T/raw.out" 2>&1
check "hostile s3 opens on the wire: refused, EINVAL, the field named, no secret quoted; one per connection" sh -c "
	grep -q '^long 5 22 an s3 open whose region is 65 bytes (1..64)' '$T/raw.out' &&
	grep -q '^junk 5 22 an s3 open whose secret key holds a byte that is not printable ASCII' '$T/raw.out' &&
	grep -q '^sum 5 22 an s3 open of .* bytes whose strings add up to' '$T/raw.out' &&
	grep -q '^url 5 22 an s3 open whose url does not start with s3://' '$T/raw.out' &&
	grep -q '^twice 15 5 an s3 dataset comes once, before the job open' '$T/raw.out' &&
	grep -q \"^region 15 5 job rg: s3://data/job/set.dpks: region 'us-east-1:x': not a region name\" '$T/raw.out' &&
	! grep -q SECRET '$T/raw.out' && kill -0 $LPID" || show "$T/raw.out"
check "loaderd links no HTTP library; ldfetch, which fetches, does" sh -c "
	! ldd '$BIN/loaderd' | grep -q curl && ldd '$BIN/ldfetch' | grep -q curl"
# an object replaced in the store: fetched again under its new ETag; the job that read the old
# one refuses a rank that would read the new one, naming it
"$BIN/dpack" pack --no-fsync --shard-size 12800 "$T/x40.npy" "$T/y40.npy" s3://data/rep/set.dpks \
	>/dev/null 2>&1
asu $UA "$BIN/ldcat" --socket "$T/n.sock" --crop 0 --batch 4 --world 2 --seed 3 \
	--dataset s3://data/rep/set.dpks --job nr --rank 0 >"$T/nr.r0" 2>"$T/nr.e0"
ra=$?
st=$(s3_put_file /data/rep/set-00001.dpk "$T/l40/set-00003.dpk")
asu $UA "$BIN/ldcat" --socket "$T/n.sock" --crop 0 --batch 4 --world 2 --seed 3 \
	--dataset s3://data/rep/set.dpks --job nr --rank 1 >/dev/null 2>"$T/nr.e1"
rb=$?
check "a shard replaced under a running job: its next rank fails, naming the set and the shard" \
	sh -c "[ $ra -eq 0 ] && [ $rb -eq 1 ] && grep -q 's3://data/rep/set.dpks: shard 1 of its manifest changed in the store' '$T/nr.e1'" ||
	{ echo "# PUT: $st"; show "$T/nr.e0"; show "$T/nr.e1"; }
asu $UA "$BIN/ldcat" --socket "$T/n.sock" --crop 0 --batch 4 --world 2 --seed 3 \
	--dataset s3://data/rep/set.dpks --job nr2 --rank 0 >/dev/null 2>"$T/nr2.e"
rc=$?
check "... a new job fetches the new version (one object) and refuses it by its identity, named" \
	sh -c "[ $rc -eq 1 ] && grep -q 'uid $UA: s3://data/rep/set.dpks: 6 objects, 1 fetched now' '$T/n.log' &&
	grep -q 'set-00001.dpk' '$T/nr2.e'" || { show "$T/nr2.e"; show "$T/n.log"; }
# ldfetch gone: a job open through the cache fails naming it; loaderd serves on
fpid=$(pgrep -P "$LPID" -x ldfetch)
[ -n "$fpid" ] && kill -KILL "$fpid"
sleep 0.2
asu $UA "$BIN/ldcat" --socket "$T/n.sock" --crop 0 --batch 4 --world 1 --seed 3 \
	--dataset s3://data/job/set.dpks --job nz >/dev/null 2>"$T/nz.e"
rc=$?
check "ldfetch killed: a job open through the cache fails naming it, loaderd serves on" sh -c "
	[ -n '$fpid' ] && [ $rc -eq 1 ] && grep -q 'the node cache.s fetcher (ldfetch)' '$T/nz.e' &&
	kill -0 $LPID" || show "$T/nz.e"
stop_loaderd
# the bound: exactly the set's allocated bytes holds it; one byte less refuses it, named
serve_loaderd "$T/n.sock" "$T/n2.log" --all-users --cache-dir "$T/node2" --cache-endpoints "$EPS" \
	--cache-size "$u1" \
	--cache-size-per-uid "$u1"
nboth $UA s3://data/job/set.dpks nd "$T/n.sock"
rc=$?
check "--cache-size at exactly the set's size: the job reads it, the cache within its bound" sh -c "
	[ $rc -eq 0 ] && [ $(used "$T/node2") -le $u1 ]" || { show "$T/nd.e0"; show "$T/n2.log"; }
asu $UA "$BIN/ldcat" --socket "$T/n.sock" --crop 0 --batch 4 --world 1 --seed 3 \
	--dataset s3://data/one/whole.dpk --job ne >/dev/null 2>"$T/ne.e"
rc=$?
check "... another set while a job holds the first: refused (objects in use are never evicted)" \
	sh -c "[ $rc -eq 1 ] && grep -q 's3://data/one/whole.dpk' '$T/ne.e' &&
	grep -q 'loaderd --cache-size' '$T/ne.e' && [ $(used "$T/node2") -le $u1 ]" || show "$T/ne.e"
stop_loaderd
serve_loaderd "$T/n.sock" "$T/n3.log" --all-users --cache-dir "$T/node3" --cache-endpoints "$EPS" \
	--cache-size $((u1 - 1)) \
	--cache-size-per-uid "$u1"
asu $UA "$BIN/ldcat" --socket "$T/n.sock" --crop 0 --batch 4 --world 2 --seed 3 \
	--dataset s3://data/job/set.dpks --job nf --rank 0 >/dev/null 2>"$T/nf.e"
rc=$?
check "--cache-size one byte under the set's size: refused, named, the bound quoted; nothing kept" \
	sh -c "[ $rc -eq 1 ] && grep -q 's3://data/job/set.dpks' '$T/nf.e' &&
	grep -q \"$((u1 - 1)) (loaderd --cache-size)\" '$T/nf.e' && [ $(used "$T/node3") -le $((u1 - 1)) ]" ||
	show "$T/nf.e"
stop_loaderd
# the bound per uid: exactly the set's bytes, then one byte less
serve_loaderd "$T/n.sock" "$T/n4.log" --all-users --cache-dir "$T/node4" --cache-endpoints "$EPS" \
	--cache-size-per-uid "$b1"
nboth $UA s3://data/job/set.dpks ng "$T/n.sock"
rc=$?
check "--cache-size-per-uid at exactly the set's bytes: the job reads it" [ $rc -eq 0 ] ||
	{ show "$T/ng.e0"; show "$T/n4.log"; }
asu $UA "$BIN/ldcat" --socket "$T/n.sock" --crop 0 --batch 4 --world 1 --seed 3 \
	--dataset s3://data/one/whole.dpk --job nh >/dev/null 2>"$T/nh.e"
rc=$?
check "... a second set while the uid's job holds the first: refused with both figures" sh -c "
	[ $rc -eq 1 ] && grep -q 's3://data/one/whole.dpk: [0-9]* bytes for uid $UA, whose jobs hold $b1 bytes of the node cache: above loaderd --cache-size-per-uid $b1\$' '$T/nh.e'" || show "$T/nh.e"
AWS_ACCESS_KEY_ID=${ko% *} AWS_SECRET_ACCESS_KEY=${ko#* } asu $UB "$BIN/ldcat" --socket "$T/n.sock" \
	--crop 0 --batch 4 --world 1 --seed 3 --dataset s3://data/one/whole.dpk --job ni \
	>/dev/null 2>"$T/ni.e"
rc=$?
check "... while another uid, with its own bound, reads it" [ $rc -eq 0 ] || show "$T/ni.e"
stop_loaderd
serve_loaderd "$T/n.sock" "$T/n5.log" --all-users --cache-dir "$T/node5" --cache-endpoints "$EPS" \
	--cache-size-per-uid $((b1 - 1))
asu $UA "$BIN/ldcat" --socket "$T/n.sock" --crop 0 --batch 4 --world 2 --seed 3 \
	--dataset s3://data/job/set.dpks --job nj --rank 0 >/dev/null 2>"$T/nj.e"
rc=$?
check "--cache-size-per-uid one byte under the set's bytes: refused, named, with both figures" sh -c "
	[ $rc -eq 1 ] && grep -q 's3://data/job/set.dpks: $b1 bytes for uid $UA, whose jobs hold 0 bytes of the node cache: above loaderd --cache-size-per-uid $((b1 - 1))\$' '$T/nj.e'" || show "$T/nj.e"
stop_loaderd
# a uid's charge ends with its own jobs, even while another uid's job holds the same objects
serve_loaderd "$T/n.sock" "$T/n7.log" --all-users --cache-dir "$T/node7" --cache-endpoints "$EPS" \
	--cache-size-per-uid "$b1" \
	--linger 1
AWS_ACCESS_KEY_ID=${ko% *} AWS_SECRET_ACCESS_KEY=${ko#* } asu $UB "$BIN/ldcat" --socket "$T/n.sock" \
	--crop 0 --batch 4 --world 1 --seed 3 --dataset s3://data/job/set.dpks --job nl --epochs 0 \
	--rate 20 --seconds 4 >/dev/null 2>"$T/nl.e" &
pl=$!
nboth $UA s3://data/job/set.dpks nm "$T/n.sock"
ra=$?
sleep 2.5  # A's job ends (--linger 1); B's still reads the set
asu $UA "$BIN/ldcat" --socket "$T/n.sock" --crop 0 --batch 4 --world 1 --seed 3 \
	--dataset s3://data/one/whole.dpk --job nn >/dev/null 2>"$T/nn.e"
rc=$?
wait $pl
rb=$?
check "a uid's charge ends with its own jobs, though another uid's job holds the same objects" sh -c "
	[ $ra -eq 0 ] && [ $rc -eq 0 ] && [ $rb -eq 0 ]" || { show "$T/nn.e"; show "$T/nl.e"; }
stop_loaderd
# without --cache-dir: the client fetches, as before; a cache folder others may write is refused
serve_loaderd "$T/n.sock" "$T/n6.log" --all-users
LOADERD_S3_CACHE="$T/nk" "$BIN/ldcat" --socket "$T/n.sock" --crop 0 --batch 4 --world 1 --seed 3 \
	--dataset s3://data/one/whole.dpk --job nk >/dev/null 2>"$T/nk.e"
rc=$?
check "loaderd without --cache-dir: the client fetches into its user's cache, as before" sh -c "
	[ $rc -eq 0 ] && grep -q 'whole.dpk is $T/nk/sets/' '$T/nk.e' && [ ! -e '$T/node6' ]" ||
	show "$T/nk.e"
stop_loaderd
# a node cache fetches only from the stores its operator lists: by default AWS's own, so moto's
# endpoint (a client's choice) is left to the client, which fetches with its own rights; ldfetch
# sends the store nothing (no object in the node cache, the store's request count unchanged)
serve_loaderd "$T/n.sock" "$T/n8.log" --all-users --cache-dir "$T/node8"
LOADERD_S3_CACHE="$T/ne" "$BIN/ldcat" --socket "$T/n.sock" --crop 0 --batch 4 --world 1 --seed 3 \
	--dataset s3://data/one/whole.dpk --job ne >/dev/null 2>"$T/ne.e"
rc=$?
check "a node cache without --cache-endpoints leaves moto's endpoint to the client (its own cache), fetching nothing" \
	sh -c "[ $rc -eq 0 ] && grep -q 'whole.dpk is $T/ne/sets/' '$T/ne.e' &&
	grep -q 'names the endpoint $AWS_ENDPOINT_URL, which the node cache does not fetch from' \
	'$T/n8.log' && [ -z \"\$(ls '$T/node8/objects' 2>/dev/null | grep -v '^.lock\$')\" ]" ||
	{ show "$T/ne.e"; show "$T/n8.log"; }
stop_loaderd
# only the fault store listed: moto's endpoint is refused as above, with the list's spelling
# (case, a trailing slash) not mattering
serve_loaderd "$T/n.sock" "$T/n9.log" --all-users --cache-dir "$T/node9" \
	--cache-endpoints "HTTP://127.0.0.1:$(cat "$T/fault.port")/"
LOADERD_S3_CACHE="$T/nf" "$BIN/ldcat" --socket "$T/n.sock" --crop 0 --batch 4 --world 1 --seed 3 \
	--dataset s3://data/one/whole.dpk --job nf >/dev/null 2>"$T/nf.e"
rc=$?
check "--cache-endpoints listing another store: moto's endpoint is left to the client" sh -c "
	[ $rc -eq 0 ] && grep -q 'whole.dpk is $T/nf/sets/' '$T/nf.e' &&
	grep -q 'does not fetch from' '$T/n9.log'" || { show "$T/nf.e"; show "$T/n9.log"; }
stop_loaderd
for bad in "ftp://127.0.0.1:1" "http://127.0.0.1:1/path" "http://user@127.0.0.1:1" \
	"http://127.0.0.1:1," "http://"; do
	timeout 10 "$BIN/loaderd" --socket "$T/bad.sock" --cache-dir "$T/nodeb" --cache-endpoints "$bad" \
		>/dev/null 2>"$T/badep.e"
	rc=$?
	check "--cache-endpoints '$bad': loaderd refuses to start, naming it" sh -c "
		[ $rc -eq 1 ] && grep -q -- '--cache-endpoints: ' '$T/badep.e'" || show "$T/badep.e"
done
mkdir "$T/bad" && chmod 770 "$T/bad"
"$BIN/loaderd" --socket "$T/bad.sock" --cache-dir "$T/bad" >/dev/null 2>"$T/bad.e"
rc=$?
check "a cache folder that group or others may write: loaderd refuses to start, naming it" sh -c "
	[ $rc -eq 1 ] && grep -q '$T/bad: owned by uid $(id -u), mode 770' '$T/bad.e'" || show "$T/bad.e"
if [ "$(id -u)" -eq 0 ]; then
	mkdir -m 700 "$T/bad2" && chown 64021:64021 "$T/bad2"
	"$BIN/loaderd" --socket "$T/bad.sock" --cache-dir "$T/bad2" >/dev/null 2>"$T/bad2.e"
	rc=$?
	check "a cache folder another user owns: loaderd refuses to start, naming it" sh -c "
		[ $rc -eq 1 ] && grep -q '$T/bad2: owned by uid 64021, mode 700' '$T/bad2.e'" ||
		show "$T/bad2.e"
fi

echo "1..$n"
[ "$fails" -eq 0 ]
