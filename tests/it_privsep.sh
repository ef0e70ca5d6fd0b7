#!/bin/sh
# it_privsep.sh - loaderd lends no privilege: it runs as an unprivileged uid of its own (64010),
# traced (strace) from its start, and serves two more real uids (setpriv; 64011 "A", 64012 "B")
# through --group. The client opens the dataset and every shard with its own rights; what B
# cannot open, loaderd cannot serve B: A's private shards behind A's world-readable manifest, a
# shard symlinked into a root-only 0700 folder, a file an ACL denies B, a symlink swapped between
# A's private file and B's own while B opens it, a terminal (/dev/ptmx) and a FIFO named as shards.
# Each is refused naming the shard as B named it, without loaderd opening it: the trace shows
# no open of any path under the test's folder, nor of a terminal. A and B are each served their
# own sets. Needs root (skips, 77, without).
set -u
BIN=$(cd "${BUILD:-build}/bin" && pwd)
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" -eq 0 ] || { echo "# skip: needs root (setpriv to three other uids)"; exit 77; }
for c in setpriv strace setfacl; do
	command -v $c >/dev/null || { echo "# skip: no $c (scripts/deps.sh installs it)"; exit 77; }
done
GROUP=$(getent group 65534 | cut -d: -f1)
[ -n "$GROUP" ] || { echo "# skip: no group 65534"; exit 77; }
T=$(mktemp -d /tmp/it_privsep.XXXXXX)
SWAP=""
# loaderd runs under strace, which only detaches when stopped: loaderd itself ($LD, from its
# READY line) is stopped first, then strace ($LPID) ends with it
LD=""
trap 'stop_pid "$SWAP"; stop_pid "$LD"; stop_loaderd; rm -rf "$T"' EXIT
trap 'exit 130' INT TERM HUP
chmod 0711 "$T"
SVC="setpriv --reuid=64010 --regid=65534 --clear-groups --inh-caps=-all"
A="setpriv --reuid=64011 --regid=64011 --groups=65534"
B="setpriv --reuid=64012 --regid=64012 --groups=65534"

# ---- data: a set for A (shards 0600, manifest 0644), a set for B, a root-only folder ----
# A's images and B's differ (9 and 8 per class): no shard of one has the identity of the other's
"$BIN/dsgen" imagefolder "$T/tree" --classes 2 --per-class 9 --min-side 32 --max-side 48 \
	>/dev/null 2>&1
"$BIN/dsgen" imagefolder "$T/treeb" --classes 2 --per-class 8 --min-side 32 --max-side 48 \
	>/dev/null 2>&1
mkdir -p "$T/a" "$T/b" "$T/root700" "$T/run"
"$BIN/dpack" pack --no-fsync --shard-size 8K "$T/tree" "$T/a/set.dpks" >/dev/null 2>&1
check "dpack packs A's set of several shards" [ "$(ls "$T/a" | grep -c '\.dpk$')" -ge 2 ]
"$BIN/dpack" pack --no-fsync --shard-size 8K "$T/treeb" "$T/b/own.dpks" >/dev/null 2>&1
cp "$T/a/set-00000.dpk" "$T/root700/x.dpk"
chown -R 64011:64011 "$T/a"
chmod 0755 "$T/a"
chmod 0600 "$T"/a/*.dpk
chmod 0644 "$T/a/set.dpks"
chown -R 64012:64012 "$T/b"
chmod 0700 "$T/root700"
chown 64010:64010 "$T/run"
# B's manifests, as an attacker writes them: A's counts and identities (known from A's
# world-readable manifest), shards that B can name but not open.
id0=$(sed -n 2p "$T/a/set.dpks" | cut -d' ' -f1,2)
b_set() {  # NAME SHARD: a one-shard set in B's folder naming SHARD with A's shard 0's line
	printf 'dpkset 1\n%s %s\nend 1\n' "$id0" "$2" >"$T/b/$1"
	chown 64012:64012 "$T/b/$1"
}
ln -s "$T/root700/x.dpk" "$T/b/root.dpk"
b_set root.dpks root.dpk
cp "$T/a/set-00000.dpk" "$T/b/acl.dpk"
chmod 0644 "$T/b/acl.dpk"
setfacl -m u:64012:--- "$T/b/acl.dpk"
b_set acl.dpks acl.dpk
ln -s /dev/ptmx "$T/b/tty.dpk"
b_set tty.dpks tty.dpk
mkfifo "$T/b/fifo.dpk"
chown 64012:64012 "$T/b/fifo.dpk"
b_set fifo.dpks fifo.dpk
chown -h 64012:64012 "$T/b/root.dpk" "$T/b/tty.dpk"

# ---- loaderd as 64010, traced from its first instruction ----
cat >"$T/ld.sh" <<EOF
#!/bin/sh
exec $SVC strace -f -qq -e trace=open,openat,openat2,open_by_handle_at,creat -o "$T/run/trace" \
	"$BIN/loaderd" "\$@"
EOF
chmod 0755 "$T/ld.sh"
LOADERD="$T/ld.sh" start_loaderd "$T/loaderd.log" --socket "$T/run/s.sock" --workers 2 \
	--group "$GROUP" || { echo "0 passed, 1 failed"; exit 1; }
LD=${_sl_line##*pid=}
check "loaderd runs as uid 64010" \
	sh -c "ps -o uid= -p \$(pgrep -u 64010 -x loaderd | head -1) | grep -qw 64010"
check "... with no capability" \
	sh -c "grep -q '^CapEff:[[:space:]]*0*\$' /proc/\$(pgrep -u 64010 -x loaderd | head -1)/status"

# cat_as WHO NAME DATASET: ldcat as WHO, one epoch, stdout in $T/NAME.out, stderr in .err
cat_as() {
	$1 timeout 20 "$BIN/ldcat" --socket "$T/run/s.sock" --dataset "$3" --job "$2" --batch 4 \
		--crop 16 --epochs 1 --timeout-ms 10000 >"$T/$2.out" 2>"$T/$2.err"
}
cat_as "$A" aown "$T/a/set.dpks"
check "A is served its own private set (every sample once)" \
	[ $? -eq 0 -a "$(wc -l <"$T/aown.out")" -eq 18 ]
cat_as "$B" bown "$T/b/own.dpks"
check "B is served its own set" [ $? -eq 0 -a "$(wc -l <"$T/bown.out")" -eq 16 ]

# refused WHAT NAME DATASET NEEDLE: B's ldcat fails, saying NEEDLE
refused() {
	cat_as "$B" "$2" "$3"
	rc=$?
	if [ $rc -ne 0 ] && grep -q "$4" "$T/$2.err" && [ ! -s "$T/$2.out" ]; then
		ok "B refused: $1"
	else
		no "B refused: $1 (exit $rc)"
		show "$T/$2.err"
	fi
}
refused "A's private shards behind A's 0644 manifest" priv "$T/a/set.dpks" \
	"set.dpks line 2: shard set-00000.dpk: Permission denied"
refused "a symlinked shard into a root-only 0700 folder" root "$T/b/root.dpks" \
	"root.dpks line 2: shard root.dpk: Permission denied"
refused "a shard an ACL denies B (mode 0644)" acl "$T/b/acl.dpks" \
	"acl.dpks line 2: shard acl.dpk: Permission denied"
refused "a terminal named as a shard" tty "$T/b/tty.dpks" \
	"tty.dpks line 2: shard tty.dpk: not a regular file"
refused "a FIFO named as a shard (no wait for a writer)" fifo "$T/b/fifo.dpks" \
	"fifo.dpks line 2: shard fifo.dpk: not a regular file"
check "... and no message tells B a count or an identity of what B cannot read" \
	sh -c "! grep -Eq 'samples|identity' '$T/priv.err' '$T/root.err' '$T/acl.err'"

# A symlink swapped between A's private shard and B's own copy of its shard 0 while B opens it,
# B's manifest naming B's shard: B is served when it opened its own file and refused by the
# kernel when it tried A's. Had loaderd opened the link itself, A's shard would have been read
# and refused by its identity (A's differs from B's): never seen.
cp "$T/b/own-00000.dpk" "$T/b/mine.dpk"
chown 64012:64012 "$T/b/mine.dpk"
printf 'dpkset 1\n%s swap.dpk\nend 1\n' "$(sed -n 2p "$T/b/own.dpks" | cut -d' ' -f1,2)" \
	>"$T/b/swap.dpks"
( while :; do
	ln -sfn "$T/a/set-00000.dpk" "$T/b/swap.dpk"
	ln -sfn "$T/b/mine.dpk" "$T/b/swap.dpk"
done ) &
SWAP=$!
served=0 denied=0 other=0
for i in 1 2 3 4 5 6 7 8 9 10 11 12; do
	cat_as "$B" "sw$i" "$T/b/swap.dpks"
	if [ $? -eq 0 ]; then
		served=$((served + 1))
	elif grep -q "Permission denied" "$T/sw$i.err"; then
		denied=$((denied + 1))
	else
		other=$((other + 1))
		show "$T/sw$i.err" 3
	fi
done
stop_pid "$SWAP"
SWAP=""
echo "# swapped symlink: $served served (B's own), $denied denied by the kernel, $other else"
check "the swapped symlink: B served its own file or refused by the kernel, nothing else" \
	[ "$other" -eq 0 -a $((served + denied)) -eq 12 ]

# loaderd serves on, and opened nothing a client named
cat_as "$A" after "$T/a/set.dpks"
check "loaderd serves A after all of it" [ $? -eq 0 -a "$(wc -l <"$T/after.out")" -eq 18 ]
stop_pid "$LD"
check "loaderd itself stopped (not left running when strace detaches)" sh -c "! kill -0 $LD 2>/dev/null"
LD=""
stop_loaderd
check "the trace was written" [ -s "$T/run/trace" ]
check "loaderd opened no path under the users' folders" \
	sh -c "! grep -Eq '$T/(a|b|root700|tree)' '$T/run/trace'"
check "... nor a terminal or device" sh -c "! grep -Eq '\"/dev/(pts|ptmx|tty)' '$T/run/trace'"
grep -E "$T/(a|b|root700|tree)|/dev/(pts|ptmx|tty)" "$T/run/trace" | head -5 | sed 's/^/#   /'
echo "$((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
