#!/bin/sh
# it_unpriv.sh - loaderd as the installed service runs it, without systemd (issue 36, item 2): as
# a user of its own (uid 64020, no passwd entry, as DynamicUser= gives it), with no capability
# (empty bounding set), no_new_privs and umask 077 (setpriv), its socket in a 0755 directory of
# that user (the unit's RuntimeDirectory), under strace. Checked: its credentials; --all-users
# makes the socket 0666 and another uid's connection is kept, not refused; the metrics file is
# written there by that user, mode 0644; with --group (the user and the client in it) a client
# of another uid reads one whole epoch through it; while a rank is attached its rings are memfds
# that no other uid can reach (no /dev/shm file, /proc/PID/fd closed to the client and a third
# uid); SIGTERM stops it, exit 0; and every system call it made is one the unit's
# SystemCallFilter= allows (systemd-analyze syscall-filter expands the unit's groups). Needs
# root, setpriv and strace (skips, 77, without).
set -u
. "$(dirname "$0")/lib.sh"
BUILD=${BUILD:-build}
BIN=$BUILD/bin
need_bins loaderd ldcat dsgen dpack
[ "$(id -u)" -eq 0 ] || { echo "skip: needs root (setpriv to other uids)"; exit 77; }
for t in setpriv strace systemd-analyze; do
	command -v $t >/dev/null || { echo "skip: no $t (scripts/deps.sh installs it)"; exit 77; }
done
need_python "import socket, select" python3
NOGROUP=$(getent group 65534 | cut -d: -f1)
[ -n "$NOGROUP" ] || { echo "skip: no group 65534"; exit 77; }
# Under /run (root's, 0755) when it can be: a client trusts the service's socket there, in a
# folder only the service and root can write (shm/ldc.c, placed_by), as in the unit's
# RuntimeDirectory; /tmp (1777) is where another user could have put one.
T=$(mktemp -d /run/it_unpriv.XXXXXX 2>/dev/null) || T=$(mktemp -d /tmp/it_unpriv.XXXXXX)
trap 'stop_loaderd; rm -rf "$T"' EXIT
trap 'exit 130' INT TERM HUP
chmod 0711 "$T"
SVC=64020 CLI=64021 OTHER=64022
AS_CLI="setpriv --reuid=$CLI --regid=$CLI --groups=65534"
AS_OTHER="setpriv --reuid=$OTHER --regid=$OTHER --clear-groups"
mkdir -m 0755 "$T/run" "$T/sys" && chown $SVC:$SVC "$T/run" "$T/sys"
# the service: GROUPS (setpriv's --clear-groups or --groups=...) then loaderd's options; under
# strace (its syscall summary in $T/sys/NAME), in place of start_loaderd's loaderd
L=$(cd "$BIN" && pwd)/loaderd
cat >"$T/svc" <<SEOF
#!/bin/sh
g=\$1 name=\$2
shift 2
umask 077
exec setpriv --reuid=$SVC --regid=$SVC \$g --no-new-privs --bounding-set=-all --inh-caps=-all \
	strace -f -qq -c -o "$T/sys/\$name" "$L" "\$@"
SEOF
chmod +x "$T/svc"

"$BIN/dsgen" npy "$T/x.npy" "$T/y.npy" --count 24 --height 8 --width 8 --channels 3 \
	--classes 3 >/dev/null && "$BIN/dpack" pack --no-fsync "$T/x.npy" "$T/y.npy" "$T/d.dpk" >/dev/null
check "a dataset of 24 samples" [ $? -eq 0 ]
chmod 0644 "$T/d.dpk"
S=$T/run/loaderd.sock

# run_svc NAME GROUPS OPTION...: start it; LD is loaderd's pid (from its READY line; $LPID is
# strace's)
run_svc() {
	_name=$1 _g=$2
	shift 2
	LOADERD="$T/svc"
	start_loaderd "$T/$_name.log" "$_g" "$_name" --socket "$S" --workers 1 "$@" ||
		{ echo "# loaderd did not start"; echo "$((n - fails)) passed, $((fails + 1)) failed"; exit 1; }
	unset LOADERD
	LD=${_sl_line##*pid=}
}
# stop_svc NAME: SIGTERM to loaderd; strace exits with its status
stop_svc() {
	kill -TERM "$LD"
	wait "$LPID"
	rc=$?
	LPID=""
	check "$1: SIGTERM stops it, exit $rc" [ "$rc" -eq 0 ]
}

# ---- --all-users: anyone may connect ----
run_svc all --clear-groups --all-users --metrics-file "$T/run/loaderd.prom" --metrics-interval 0.2
st=$(grep -E '^(Uid|Gid|Groups|CapEff|CapPrm|CapBnd|NoNewPrivs):' "/proc/$LD/status" | tr -s '\t ' ' ' | tr '\n' ';')
check "loaderd runs as uid $SVC, no group, no capability, no new privileges: $st" \
	[ "$st" = "Uid: $SVC $SVC $SVC $SVC;Gid: $SVC $SVC $SVC $SVC;Groups: ;CapPrm: 0000000000000000;CapEff: 0000000000000000;CapBnd: 0000000000000000;NoNewPrivs: 1;" ]
check "--all-users: the socket is 0666, owned by uid $SVC: $(stat -c '%a %u' "$S")" \
	[ "$(stat -c '%a %u' "$S")" = "666 $SVC" ]
# a connection refused is told why and closed at once; one let in waits for its job (idle-timeout)
out=$($AS_OTHER "$PY" -c "
import select, socket, sys
c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
c.connect(sys.argv[1])
r, _, _ = select.select([c], [], [], 0.5)
print('kept' if not r else 'answered %r' % c.recv(256)[:60])" "$S" 2>&1)
check "uid $OTHER, in no group of its, connects and is kept: $out" [ "$out" = kept ]
case $T in
/run/*)
	out=$($AS_OTHER "$BIN/ldcat" --socket "$S" --dataset "$T/d.dpk" --batch 6 --crop 0 \
		--timeout-ms 10000 2>"$T/all.err" | awk '{ print $2 }' | sort -n | uniq | wc -l)
	check "uid $OTHER trusts the service's socket in its runtime folder and reads an epoch: $out of 24" \
		[ "$out" -eq 24 ]
	show "$T/all.err" 3
	# the same service behind a socket in a folder others may write: refused by the client
	mkdir -m 1777 "$T/open"
	ln "$S" "$T/open/s.sock"
	$AS_OTHER "$BIN/ldcat" --socket "$T/open/s.sock" --dataset "$T/d.dpk" --batch 6 --crop 0 \
		--timeout-ms 10000 >/dev/null 2>"$T/open.err"
	check "... and refuses it behind a folder others may write" \
		grep -q "refusing loaderd at $T/open/s.sock" "$T/open.err"
	;;
*) echo "# /run not writable: the trusted runtime folder is not checked" ;;
esac
i=0
while [ ! -f "$T/run/loaderd.prom" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
check "the metrics file, in its runtime directory: owner uid, mode $(stat -c '%u %a' "$T/run/loaderd.prom" 2>&1)" \
	[ "$(stat -c '%u %a' "$T/run/loaderd.prom" 2>&1)" = "$SVC 644" ]
stop_svc all

# ---- --group: a client of another uid, end to end ----
run_svc grp --groups=65534 --group "$NOGROUP"
check "--group: the socket is 0660, of group 65534: $(stat -c '%a %u %g' "$S")" \
	[ "$(stat -c '%a %u %g' "$S")" = "660 $SVC 65534" ]
out=$($AS_CLI "$BIN/ldcat" --socket "$S" --dataset "$T/d.dpk" --batch 6 --crop 0 --timeout-ms 10000 \
	2>"$T/ldcat.err" | awk '{ print $2 }' | sort -n | uniq | wc -l)
check "a client of uid $CLI reads one whole epoch through it: $out distinct samples of 24" [ "$out" -eq 24 ]
show "$T/ldcat.err" 3
# a rank attached for 2 s (an unbounded job), while its ring is looked for
$AS_CLI "$BIN/ldcat" --socket "$S" --dataset "$T/d.dpk" --job held --batch 6 --crop 0 --epochs 0 \
	--seconds 2 --timeout-ms 10000 >/dev/null 2>"$T/held.err" &
HPID=$!
sleep 0.7
mem=$(ls -l "/proc/$LD/fd" 2>/dev/null | grep -c 'memfd:')
check "its ring is a memfd of loaderd's ($mem memfd descriptors)" [ "$mem" -ge 1 ]
check "no file of uid $SVC in /dev/shm" [ -z "$(find /dev/shm -user $SVC 2>/dev/null)" ]
for who in CLI OTHER; do
	eval "as=\$AS_$who"
	out=$($as sh -c "ls /proc/$LD/fd >/dev/null 2>&1 && echo listed; for f in /proc/$LD/fd/*; do
		head -c1 \"\$f\" >/dev/null 2>&1 && echo opened; done" 2>&1)
	check "uid $(eval echo \$$who) can neither list nor open loaderd's descriptors${out:+: $out}" [ -z "$out" ]
done
wait $HPID
check "the attached rank ran its 2 s" [ $? -eq 0 ]
show "$T/held.err" 3
stop_svc grp

# ---- every system call it made is one the unit allows ----
# syscalls_allowed TRACE [GROUP...]: the calls in strace's summary TRACE are all allowed by the
# unit's SystemCallFilter= lines plus GROUP... (the unit's documented additions)
syscalls_allowed() {
	"$PY" - scripts/loaderd.service.in "$@" <<'PYEOF'
import re, subprocess, sys
groups, cur = {}, None
for line in subprocess.run(["systemd-analyze", "syscall-filter", "--no-pager"], capture_output=True,
                           text=True).stdout.splitlines():
    if line.startswith("@"):
        cur = groups.setdefault(line.strip(), [])
    elif cur is not None and line.strip() and not line.strip().startswith("#"):
        cur.append(line.strip())
def expand(name, seen=()):
    if not name.startswith("@"):
        return {name}
    return set().union(*[expand(x, seen + (name,)) for x in groups.get(name, []) if x not in seen])
allow, deny = None, set()
for line in open(sys.argv[1]):
    m = re.match(r"SystemCallFilter=(~?)(.*)", line.strip())
    if m:
        names = set().union(*[expand(x) for x in m.group(2).split()])
        if m.group(1):
            deny |= names
        else:
            allow = names if allow is None else allow | names
allowed = (allow or set()) - deny
allowed |= set().union(*[expand(g) for g in sys.argv[3:]])
used = set()
for line in open(sys.argv[2]):
    w = line.split()
    if len(w) >= 5 and w[0][0].isdigit() and w[-1] not in ("total", "syscall"):
        used.add(w[-1])
bad = sorted(used - allowed)
print("%d system calls used, %d allowed by the unit%s" % (len(used), len(allowed),
      "; not allowed: " + " ".join(bad) if bad else ""))
sys.exit(1 if bad or len(used) < 20 else 0)
PYEOF
}
out=$(syscalls_allowed "$T/sys/all")
check "--all-users, strace: $out" [ $? -eq 0 ]
out=$(syscalls_allowed "$T/sys/grp" @chown)
check "--group (the unit's SystemCallFilter=@chown added), jobs served, strace: $out" [ $? -eq 0 ]
echo "$((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
