#!/bin/sh
# fd_peak.sh - how far past --max-fds / --max-fds-per-uid loaderd's descriptors go while sets of
# shards open (a measurement, not in make test: the peak is a race). Four real uids each hold as
# many 64-shard sets as --max-fds-per-uid lets them send (reserved whole at a set's first batch:
# 2 per shard + 2), then open every job at once. While a job opens, its dataset takes the client's
# descriptors over and adds their O_DIRECT twins, within the reservation. Prints loaderd's peak
# descriptors above its idle count and exits 1 when it passes --max-fds. Needs root and setpriv.
# Usage: BUILD=build sh tests/hostile/fd_peak.sh
set -u
BUILD=${BUILD:-build}
BIN=$(cd "$BUILD/bin" && pwd)
H=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null || { echo "skip: needs root and setpriv"; exit 77; }
T=$(mktemp -d /run/fd_peak.XXXXXX) || exit 1
trap 'kill $LD 2>/dev/null; rm -rf "$T"' EXIT
chmod 0755 "$T"; mkdir -m 0755 "$T/run" "$T/d"; chown 64020:64020 "$T/run"
"$BIN/dsgen" npy "$T/d/x.npy" "$T/d/y.npy" --count 64 --height 8 --width 8 --channels 3 --classes 3 >/dev/null
"$BIN/dpack" pack --no-fsync --shard-size 4k "$T/d/x.npy" "$T/d/y.npy" "$T/d/set.dpks" >/dev/null 2>&1
chmod -R a+rX "$T/d"
MAXF=4000 MAXU=1000
setpriv --reuid=64020 --regid=64020 --clear-groups "$BIN/loaderd" --socket "$T/run/s" --workers 1 \
	--all-users --max-fds $MAXF --max-fds-per-uid $MAXU >"$T/log" 2>&1 &
LD=$!
for i in $(seq 100); do [ -S "$T/run/s" ] && break; sleep 0.05; done
base=$(ls /proc/$LD/fd | wc -l)
K=$(( (MAXU - 130) / 64 + 1 ))
P=""
for u in 64051 64052 64053 64054; do
	setpriv --reuid=$u --regid=$u --clear-groups /usr/bin/python3 "$H/burst.py" "$T/run/s" "$T/d/set.dpks" $K "$T/go" &
	P="$P $!"
done
sleep 3
held=$(( $(ls /proc/$LD/fd | wc -l) - base ))
touch "$T/go"
peak=0
for i in $(seq 300); do
	c=$(ls /proc/$LD/fd 2>/dev/null | wc -l)
	[ "$c" -gt "$peak" ] && peak=$c
done
wait $P
peak=$((peak - base))
echo "loaderd --max-fds $MAXF --max-fds-per-uid $MAXU: $held held before the opens, peak $peak during them"
[ "$peak" -le "$MAXF" ]
