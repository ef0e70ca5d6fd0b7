#!/bin/sh
# it_ldfetch_stream.sh - ldfetch's streamed sets (LDF_STREAM; docs/STREAMING.md, parts 3 and 4),
# driven directly as loaderd would (tests/ldfetch_stream.py: the socketpair as descriptor 3)
# against moto's S3 server (tests/s3_lib.sh): a streamed open delivers shard 0 then the manifest,
# each locked on byte UID; WANT [3,1,2] delivers 3, 1, 2 in order, each once; DROP then WANT
# delivers again; a second stream of the same uid opens while the first streams; malformed lists
# (count past the max, an index at the set's count, a shard twice, reserved set, a length one byte
# long or short), a DROP of a shard not delivered and any other message get CTL_ERROR naming the
# field, then the stream ends; a hangup ends it quietly; a cache of the manifest and 3 shards:
# wanting more waits while every shard is held, a DROP lets the next come, held shards are never
# evicted, the cache never above its bound, and a dropped shard evicted then wanted again is
# fetched again from the store; a shard the store refuses mid-stream (its policy changed after
# the open: 403) ends the stream with CTL_ERROR EACCES naming the object and AccessDenied.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/bin
LDFETCH=${LDFETCH:-$BIN/ldfetch}  # e.g. build/san/bin/ldfetch (AddressSanitizer, UBSan)
T=$(mktemp -d /tmp/it_ldfs.XXXXXX)
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3_lib.sh"
trap 's3_stop; [ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
trap 'exit 130' INT TERM HUP PIPE
need_bins ldfetch dpack dsgen

s3_start "$T"
mkdir "$T/set"
"$BIN/dsgen" npy "$T/x.npy" "$T/y.npy" --count 24 --height 32 --width 32 --channels 1 >/dev/null
"$BIN/dpack" pack --no-fsync --shard-size 8192 "$T/x.npy" "$T/y.npy" "$T/set/set.dpks" \
	>/dev/null 2>&1
s3_curl PUT /data >/dev/null
"$BIN/dpack" pack --no-fsync --shard-size 8192 "$T/x.npy" "$T/y.npy" s3://data/st/set.dpks \
	>"$T/pack.log" 2>&1 || { show "$T/pack.log"; exit 1; }
# a user whose policy is changed mid-stream: shard 5 denied after the open
ALLOW='{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"}]}'
DENY='{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"},{"Effect":"Deny","Action":"s3:GetObject","Resource":"arn:aws:s3:::data/st/set-00005.dpk"}]}'
keys=$(s3_user streamer "$ALLOW") || { echo "# cannot make moto's IAM user"; exit 1; }
cat >"$T/deny.sh" <<EOS
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"
. "$(cd "$(dirname "$0")" && pwd)/s3_lib.sh"
S3VENV=$S3VENV
_pol=\$("\$S3VENV/bin/python" -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' '$DENY')
s3_iam PutUserPolicy UserName=streamer PolicyName=p "PolicyDocument=\$_pol" >/dev/null
EOS
T=$T STREAM_KEYS="$keys" STREAM_DENY="sh $T/deny.sh" timeout 120 \
	python3 "$(dirname "$0")/ldfetch_stream.py" "$LDFETCH" "$T/set" s3://data/st/set.dpks \
	>"$T/out" 2>&1
rc=$?
while IFS= read -r line; do
	case $line in
	"ok - "*) ok "${line#ok - }" ;;
	"not ok - "*) no "${line#not ok - }" ;;
	*) echo "$line" ;;
	esac
done <"$T/out"
[ $rc -eq 0 ] || [ "$fails" -gt 0 ] || no "ldfetch_stream.py exited $rc"
[ "$fails" -eq 0 ] || for l in "$T"/ldfs.*/*.log; do echo "# $l:"; show "$l" 30; done
echo "1..$n"
[ "$fails" -eq 0 ]
