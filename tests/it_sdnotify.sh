#!/bin/sh
# it_sdnotify.sh - loaderd under a service manager's readiness protocol, without systemd: a
# datagram listener on a temporary socket plays systemd's NOTIFY_SOCKET (a path, then a name in
# the abstract namespace, '@'). It must receive READY=1 when loaderd serves (a connect to loaderd's
# socket succeeds at that moment) and STOPPING=1 on SIGTERM; a NOTIFY_SOCKET that cannot be
# reached is logged and loaderd serves anyway; without NOTIFY_SOCKET nothing is sent.
set -u
. "$(dirname "$0")/lib.sh"
BUILD=${BUILD:-build}
BIN=$BUILD/bin
need_bins loaderd
need_python "import socket; socket.AF_UNIX" "python3"
T=$(mktemp -d /tmp/it_sdnotify.XXXXXX)
NPID=""
trap 'stop_pid "$NPID"; stop_loaderd; rm -rf "$T"' EXIT
trap 'exit 130' INT TERM HUP

# listen.py ADDR LOADERD_SOCK OUT BOUND: bind ADDR (a path, or @name), touch BOUND, then write each
# datagram to OUT as a line; after READY=1 also whether LOADERD_SOCK accepts a connection then.
# Ends after STOPPING=1, or after 20 s.
cat >"$T/listen.py" <<'PYEOF'
import os, socket, sys, time
addr, lsock, out, bound = sys.argv[1:5]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("\0" + addr[1:] if addr.startswith("@") else addr)
open(bound, "w").close()
s.settimeout(20)
with open(out, "w", buffering=1) as f:
    try:
        while True:
            msg = s.recv(4096).decode()
            line = msg.replace("\n", " ")
            if "READY=1" in msg:
                c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                try:
                    c.connect(lsock)
                    line += " connect=ok"
                except OSError as e:
                    line += " connect=%s" % e.strerror
                c.close()
            f.write(line + "\n")
            if "STOPPING=1" in msg:
                break
    except socket.timeout:
        f.write("timeout\n")
PYEOF

# notify_run NAME ADDR: loaderd with NOTIFY_SOCKET=ADDR and the listener on ADDR; its lines in
# $T/NAME.out.
notify_run() {
	rm -f "$T/bound"
	"$PY" "$T/listen.py" "$2" "$T/s.sock" "$T/$1.out" "$T/bound" 2>"$T/$1.err" &
	NPID=$!
	i=0
	while [ ! -e "$T/bound" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
	NOTIFY_SOCKET=$2
	export NOTIFY_SOCKET
	start_loaderd "$T/$1.log" --socket "$T/s.sock" --workers 1
	unset NOTIFY_SOCKET
	i=0
	while ! grep -q READY "$T/$1.out" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
	check "$1: READY=1 arrives while loaderd accepts connections" grep -qx "READY=1 connect=ok" "$T/$1.out"
	stop_loaderd
	i=0
	while kill -0 "$NPID" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
	check "$1: STOPPING=1 at SIGTERM, nothing else" \
		[ "$(cat "$T/$1.out")" = "$(printf 'READY=1 connect=ok\nSTOPPING=1')" ]
	stop_pid "$NPID"
	NPID=""
	show "$T/$1.err"
}

notify_run path "$T/notify.sock"
notify_run abstract "@loaderd-it-sdnotify-$$"

NOTIFY_SOCKET=$T/nobody.sock
export NOTIFY_SOCKET
start_loaderd "$T/nobody.log" --socket "$T/s.sock" --workers 1
check "a NOTIFY_SOCKET nobody listens on: loaderd serves" kill -0 "${LPID:-none}" 2>/dev/null
unset NOTIFY_SOCKET
check "... and says why it could not notify" grep -q "NOTIFY_SOCKET=$T/nobody.sock: cannot tell" "$T/nobody.log"
stop_loaderd
NOTIFY_SOCKET=vsock:2:1234
export NOTIFY_SOCKET
start_loaderd "$T/vsock.log" --socket "$T/s.sock" --workers 1
check "an address of another kind (vsock:): loaderd serves and says so" \
	grep -q "NOTIFY_SOCKET=vsock:2:1234: .*Address family not supported" "$T/vsock.log"
unset NOTIFY_SOCKET
stop_loaderd

echo "$((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
