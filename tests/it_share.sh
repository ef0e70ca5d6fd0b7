#!/bin/sh
# it_share.sh - jobs belong to their owner (issue 23, item 4), through the tools, as two real
# users (setpriv) of a loaderd --group: user B can neither join nor list user A's job "s"; once A
# opens it with `ldcat --share-group G`, B, a member of G, joins it as rank 1 with
# `ldcat --owner A` and the two ranks read one epoch between them, every sample once; B without
# G is refused; B's own job of the same name is another job; only A stops A's job. The uids
# (64001, 64002) and the group (64100) need no passwd entries. Needs root (skips, 77, without).
set -u
BIN=${BUILD:-build}/bin
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" -eq 0 ] || { echo "# skip: needs root (setpriv to two other uids)"; exit 77; }
command -v setpriv >/dev/null || { echo "# skip: no setpriv (util-linux)"; exit 77; }
NOGROUP=$(getent group 65534 | cut -d: -f1)
[ -n "$NOGROUP" ] || { echo "# skip: no group 65534"; exit 77; }
T=$(mktemp -d /tmp/it_share.XXXXXX)
trap 'stop_loaderd; rm -rf "$T"' EXIT
trap 'exit 130' INT TERM HUP
chmod 0711 "$T"

A="setpriv --reuid=64001 --regid=65534 --groups=65534,64100"
B="setpriv --reuid=64002 --regid=65534 --groups=65534,64100"
B_OUT="setpriv --reuid=64002 --regid=65534 --groups=65534"   # not in 64100
N=48
"$BIN/dsgen" imagefolder "$T/tree" --classes 4 --per-class 12 --min-side 32 --max-side 64 \
	>/dev/null 2>&1
"$BIN/dpack" pack --no-fsync "$T/tree" "$T/a.dpk" >/dev/null 2>&1
check "dpack packs $N samples" [ $? -eq 0 ]
chmod 0644 "$T/a.dpk"
start_loaderd "$T/loaderd.log" --socket "$T/s.sock" --workers 2 --group "$NOGROUP" ||
	{ echo "0 passed, 1 failed"; exit 1; }
# cat_as WHO NAME [ldcat option...]: ldcat as WHO, stdout in $T/NAME.out, stderr in .err
cat_as() {
	who=$1 name=$2
	shift 2
	$who "$BIN/ldcat" --socket "$T/s.sock" --dataset "$T/a.dpk" --batch 4 --crop 16 --seed 3 \
		--timeout-ms 10000 "$@" >"$T/$name.out" 2>"$T/$name.err"
}
ctl_as() { $1 "$BIN/loaderctl" --socket "$T/s.sock" --json "$2" ${3:+"$3"} 2>&1; }

# A's rank 0 of job s, not shared: B cannot join it, nor see it
( cat_as "$A" a0 --job s --world 2 --rank 0 --epochs 1 --steps 2 )
check "A opens its job s" [ $? -eq 0 ]
cat_as "$B" b1 --job s --world 2 --rank 1 --epochs 1 --owner 64001
check "B cannot join A's unshared job" [ $? -ne 0 ]
check "... told there is no such job shared with it" \
	grep -q "job s of uid 64001: no such job shared with a group of yours" "$T/b1.err"
check "B does not see it" [ "$(ctl_as "$B" jobs)" = "[]" ]
# B's own s: another job, though B names it the same; A's s is untouched by it
cat_as "$B" bown --job s --world 1 --rank 0 --epochs 1
check "B's own job s is B's: a whole epoch to itself" \
	[ $? -eq 0 -a "$(wc -l <"$T/bown.out")" -eq $N ]

# A's job t, shared with 64100: B joins it as rank 1, and the two ranks read one epoch
cat_as "$A" t0 --job t --world 2 --rank 0 --epochs 1 --share-group 64100 &
p0=$!
# a join never creates the job: B waits until A's open made it
i=0
while ! matches "$(ctl_as "$A" jobs)" '"job":"t"' && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
cat_as "$B" t1 --job t --world 2 --rank 1 --epochs 1 --owner 64001
r1=$?
wait $p0
r0=$?
check "A (rank 0, --share-group) and B (rank 1, --owner) read job t" [ "$r0$r1" = 00 ]
cat "$T/t0.out" "$T/t1.out" | awk '$4 == 0 { print $2 }' | sort -n >"$T/got"
awk -v n=$N 'BEGIN { for (i = 0; i < n; i++) print i }' >"$T/want"
check "... every sample once between them" cmp -s "$T/got" "$T/want"
check "B sees the shared job, with its owner and group" \
	matches "$(ctl_as "$B" jobs)" '"job":"t","id":[0-9]+,"uid":64001,"shared_gid":64100'
check "B does not stop it" matches "$(ctl_as "$B" stop t)" "only its owner stops it"
cat_as "$B_OUT" tout --job t --world 2 --rank 1 --epochs 1 --owner 64001
check "B outside group 64100 cannot join it" \
	grep -q "no such job shared with a group of yours" "$T/tout.err"
check "A stops it" matches "$(ctl_as "$A" stop t)" '"stopped":"t"'
check "loaderd is alive" kill -0 "$LPID"
[ $fails -eq 0 ] || show "$T/loaderd.log"

echo "$((n - fails)) passed, $fails failed"
[ $fails -eq 0 ]
