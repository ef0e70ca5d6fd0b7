#!/bin/sh
# it_signals.sh - a terminal's signals neither stop nor kill loaderd (issue 36): loaderd, in a
# process group of its own beside this shell's (as a job of an interactive shell is), is sent
# SIGTSTP, SIGTTIN and SIGTTOU (job control: the default stops it) and SIGHUP (a hang-up: the
# default kills it); after each it still runs and is not stopped, it then serves a client one
# whole epoch, and SIGTERM still stops it, exit 0. (In an orphaned process group, a session
# leader's under systemd for one, the kernel drops the three stop signals itself: the group of
# its own, whose parent is this shell, keeps them deliverable, so the test can fail.)
set -u
. "$(dirname "$0")/lib.sh"
BUILD=${BUILD:-build}
BIN=$BUILD/bin
need_bins loaderd ldcat dsgen dpack
T=$(mktemp -d /tmp/it_signals.XXXXXX)
trap 'stop_loaderd; rm -rf "$T"' EXIT
trap 'exit 130' INT TERM HUP

# A process group of its own, then loaderd in place (exec: $LPID is loaderd).
LOADERD=$T/loaderd-pgrp
printf '#!/bin/sh\nexec python3 -c "import os, sys; os.setpgid(0, 0); os.execv(sys.argv[1], sys.argv[1:])" "%s" "$@"\n' \
	"$(cd "$BIN" && pwd)/loaderd" >"$LOADERD"
chmod +x "$LOADERD"
"$BIN/dsgen" npy "$T/x.npy" "$T/y.npy" --count 24 --height 8 --width 8 --channels 3 \
	--classes 3 >/dev/null && "$BIN/dpack" pack --no-fsync "$T/x.npy" "$T/y.npy" "$T/d.dpk" >/dev/null
check "a dataset of 24 samples" [ $? -eq 0 ]
serve_loaderd "$T/s.sock" "$T/loaderd.log"
# field N of /proc/PID/stat (default $LPID), counted after the command name: 1 state, 3 pgrp
stat_field() { sed 's/^.*) //' "/proc/${2:-$LPID}/stat" 2>/dev/null | cut -d' ' -f"$1"; }
check "loaderd leads a process group ($(stat_field 3)) beside this shell's ($(stat_field 3 $$))" \
	[ "$(stat_field 3)" = "$LPID" -a "$(stat_field 3 $$)" != "$LPID" ]

for sig in TSTP TTIN TTOU HUP; do
	kill -"$sig" "$LPID"
	sleep 0.3
	st=$(stat_field 1)
	check "SIG$sig: loaderd runs on (state ${st:-gone})" sh -c "[ -n '$st' ] && [ '$st' != T ] && [ '$st' != t ]"
	# a stopped daemon would hold up every later check: let it go on, the failure is counted
	[ "$st" = T ] && kill -CONT "$LPID"
done

out=$("$BIN/ldcat" --socket "$T/s.sock" --dataset "$T/d.dpk" --batch 6 --crop 0 --timeout-ms 10000 \
	2>"$T/ldcat.err" | awk '{ print $2 }' | sort -n | uniq | wc -l)
check "then it serves one whole epoch: $out distinct samples of 24" [ "$out" -eq 24 ]
show "$T/ldcat.err" 3
kill -TERM "$LPID"
wait "$LPID"
rc=$?
LPID=""
check "SIGTERM still stops it: exit $rc" [ "$rc" -eq 0 ]
check "... cleanly" grep -q "stopped" "$T/loaderd.log"
echo "$((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
