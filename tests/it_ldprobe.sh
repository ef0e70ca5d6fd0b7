#!/bin/sh
# it_ldprobe.sh - ldprobe names the cause in situations whose answer is known (issue 6, "The
# diagnosis"), on the host device with 2 ranks (mpirun):
#   (a) a loader throttled to one worker under a heavy compute model -> compute-limited (run
#       against a loaderd the test started, --socket: it is left running, ldprobe's jobs gone);
#   (b) a tiny model (mlp) with a slow loader (1 worker, crop 224, large images) -> loader-limited,
#       and the advice names a worker count > 1;
#   (c) an injected straggler (--inject-slow-rank 1:3 through --trainer-args) -> straggler-limited
#       naming rank 1;
#   (d) an injected slow allreduce (--inject-comm-delay-ms) -> communication-limited, with the
#       exposed allreduce share.
# Each run: the last line's format, report.txt equal to what was printed, a well-formed SVG
# (xml.etree) with one timeline row per rank and the three rate bars, no process left behind.
# Also: SIGTERM during the real run stops everything ldprobe started and exits 130; bad usage
# exits 2. Needs mpirun and python3 (exit 77 without). About 60 s on 2 cores.
set -u
BIN=${BUILD:-build}/bin
command -v mpirun >/dev/null 2>&1 || { echo "# skip: no mpirun"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "# skip: no python3"; exit 77; }
for p in ldprobe trainer loaderd ldcat loaderctl dsgen dpack; do
	[ -x "$BIN/$p" ] || { echo "# $BIN/$p not built"; exit 1; }
done
T=$(mktemp -d /tmp/it_ldprobe.XXXXXX)
LPID="" PROBE_PID=""
. "$(dirname "$0")/lib.sh"
mpi_session_in "$T"
cleanup() {
	stop_pid "$PROBE_PID"
	stop_pid "$LPID"
	rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
SHOW_LINES=20
# No process whose command line holds the test directory (ldprobe's private socket, the
# datasets and the report all live under it; TMPDIR points there).
# The test's own loaderd ($LPID, in (a)) is not ldprobe's to stop.
others() { pgrep -f "$T/" | grep -vx "${LPID:-none}"; }
noproc() {
	i=0
	while others >/dev/null && [ $i -lt 20 ]; do sleep 0.1; i=$((i + 1)); done
	! others >/dev/null
}
export TMPDIR="$T"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
GUARD="timeout -k 5 150"
SECS=${LDPROBE_TEST_SECONDS:-2}

# Small generated datasets: small images (cheap decode) and large ones (a slow loader).
if ! { "$BIN/dsgen" imagefolder "$T/small" --classes 4 --per-class 50 --min-side 64 \
		--max-side 160 >/dev/null &&
	"$BIN/dpack" pack --no-fsync "$T/small" "$T/small.dpk" >/dev/null &&
	"$BIN/dsgen" imagefolder "$T/big" --classes 4 --per-class 40 --min-side 400 \
		--max-side 800 >/dev/null &&
	"$BIN/dpack" pack --no-fsync "$T/big" "$T/big.dpk" >/dev/null; }; then
	echo "# could not make the datasets"
	exit 1
fi

# probe NAME [ldprobe options...]: output in $T/NAME.out (stdout) and $T/NAME.err, report in
# $T/NAME/. Checks what every run must satisfy.
probe() {
	name=$1
	shift
	$GUARD "$BIN/ldprobe" --ranks 2 --device host --seconds "$SECS" --out "$T/$name" "$@" \
		>"$T/$name.out" 2>"$T/$name.err"
	rc=$?
	check "($name) ldprobe exits 0" [ $rc -eq 0 ]
	[ $rc -eq 0 ] || { show "$T/$name.err"; show "$T/$name.out"; }
	last=$(tail -n 1 "$T/$name.out")
	echo "# ($name) $last"
	check "($name) last line: ldprobe: loader_per_s=X compute_per_s=Y actual_per_s=Z au=A verdict=V" \
		sh -c "printf '%s\n' '$last' | grep -Eq '^ldprobe: loader_per_s=[0-9]+\.[0-9] compute_per_s=[0-9]+\.[0-9] actual_per_s=[0-9]+\.[0-9] au=[0-9]\.[0-9]{3} verdict=(loader|compute|communication|straggler)-limited$'"
	check "($name) report.txt is what was printed" cmp -s "$T/$name.out" "$T/$name/report.txt"
	check "($name) the report shows the three figures and AU" sh -c \
		"grep -q 'loader ceiling' '$T/$name.out' && grep -q 'compute ceiling' '$T/$name.out' &&
		 grep -q 'actual ' '$T/$name.out' && grep -q 'AU ' '$T/$name.out'"
	check "($name) timeline.svg is well-formed XML with one row per rank and 3 rate bars" \
		python3 - "$T/$name/timeline.svg" <<'PY'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ns = "{http://www.w3.org/2000/svg}"
assert root.tag == ns + "svg", root.tag
gs = list(root.iter(ns + "g"))
rows = [g.get("data-rank") for g in gs if g.get("class") == "rank-row"]
bars = [g.get("data-name") for g in gs if g.get("class") == "rate-bar"]
assert rows == ["0", "1"], rows
assert bars == ["loader ceiling", "compute ceiling", "actual"], bars
# every row holds coloured phases
for g in gs:
    if g.get("class") == "rank-row":
        fills = {r.get("fill") for r in g.iter(ns + "rect")}
        assert len(fills) >= 2, fills
PY
	check "($name) the trace is there" [ -s "$T/$name/trace.json" ]
	check "($name) nothing left running" noproc
	return 0
}
verdict() { tail -n 1 "$T/$1.out" | sed -n 's/.* verdict=\([a-z-]*\)$/\1/p'; }

# ---- (a) throttled loader (1 worker, test's own loaderd), heavy model: compute-limited ----
start_loaderd "$T/ld.log" --socket "$T/ld.sock" --workers 1
probe a --socket "$T/ld.sock" --dataset "$T/small.dpk" --crop 64 --batch 32 \
	--model synthetic:flops=100M,params=64K
check "(a) heavy model, 1 decode worker: compute-limited" [ "$(verdict a)" = compute-limited ]
check "(a) the workers of the given loaderd are reported (1)" grep -q "1 decode worker (on " "$T/a.out"
check "(a) the given loaderd is still running" kill -0 "$LPID"
"$BIN/loaderctl" --socket "$T/ld.sock" jobs >"$T/a.jobs" 2>&1
check "(a) ldprobe's jobs on it are gone" grep -qx "no jobs" "$T/a.jobs"
stop_pid "$LPID"
LPID=""

# ---- (b) tiny model, slow loader: loader-limited, more workers advised ----
probe b --dataset "$T/big.dpk" --workers 1 --crop 224 --batch 32 --model mlp
check "(b) mlp, 1 worker, crop 224, large images: loader-limited" [ "$(verdict b)" = loader-limited ]
w=$(sed -n 's/.*loaderd --workers \([0-9]*\).*/\1/p' "$T/b.out" | head -n 1)
echo "# (b) advised workers: ${w:-none}"
check "(b) the advice names a worker count > 1" [ "${w:-0}" -gt 1 ]
check "(b) the advice gives the measured per-worker rate" grep -Eq "per worker\)" "$T/b.out"
check "(b) a cheaper transform is measured" grep -q "cheaper transform: .*--crop 112" "$T/b.out"

# ---- (c) injected straggler: straggler-limited, rank 1 named ----
probe c --dataset "$T/small.dpk" --workers 1 --crop 64 --batch 32 \
	--model synthetic:flops=30M,params=64K --trainer-args '--inject-slow-rank 1:3'
check "(c) --inject-slow-rank 1:3: straggler-limited" [ "$(verdict c)" = straggler-limited ]
check "(c) the report names rank 1 and how much slower" \
	grep -Eq "rank 1 computes [0-9.]+x as long as rank 0" "$T/c.out"
check "(c) the advice names --balance" grep -q "trainer --balance" "$T/c.out"

# ---- (d) injected slow allreduce: communication-limited, exposed share given ----
probe d --dataset "$T/small.dpk" --workers 1 --crop 64 --batch 32 \
	--model synthetic:flops=30M,params=64K --trainer-args '--inject-comm-delay-ms 40'
check "(d) --inject-comm-delay-ms 40: communication-limited" [ "$(verdict d)" = communication-limited ]
check "(d) the report gives the exposed allreduce share" \
	grep -Eq "exposed allreduce [0-9]+% of each step" "$T/d.out"
check "(d) the advice names a larger batch or bucket size" \
	grep -Eq "(--batch [0-9]+|--bucket-mb [0-9.]+)" "$T/d.out"

# ---- SIGTERM in the middle of the real run: everything stopped, exit 130 ----
"$BIN/ldprobe" --ranks 2 --device host --seconds 5 --out "$T/int" --dataset "$T/big.dpk" \
	--workers 1 --crop 224 --batch 32 --model mlp >"$T/int.out" 2>"$T/int.err" &
PROBE_PID=$!
i=0
while ! pgrep -f "trainer --socket $T/" >/dev/null && kill -0 "$PROBE_PID" 2>/dev/null &&
	[ $i -lt 600 ]; do
	sleep 0.1
	i=$((i + 1))
done
started() { pgrep -f "trainer --socket $T/" >/dev/null; }
check "the real run started (trainer through ldprobe's loaderd)" started
sleep 0.5
kill -TERM "$PROBE_PID"
wait "$PROBE_PID"
rc=$?
PROBE_PID=""
check "SIGTERM: ldprobe exits 130" [ $rc -eq 130 ]
check "SIGTERM: no loaderd, mpirun, trainer or ldcat left" noproc
check "SIGTERM: its private socket directory is removed" sh -c "! ls -d '$T'/ldprobe.* 2>/dev/null"

# ---- bad usage: exit 2 ----
usage() {
	"$BIN/ldprobe" "$@" >"$T/usage.out" 2>&1
	rc=$?
	check "bad usage exits 2: ldprobe $*" [ $rc -eq 2 ]
	[ $rc -eq 2 ] || show "$T/usage.out" 5
}
usage
usage --dataset "$T/none.dpk"
usage --dataset "$T/small.dpk" --ranks 0
usage --dataset "$T/small.dpk" --crop x
usage --dataset "$T/small.dpk" --socket "$T/ld.sock" --workers 2
usage --dataset "$T/small.dpk" --frobnicate
usage --dataset "$T/small.dpk" --ranks 1 --seconds 0.6 --out "$T/bm" --model nosuchmodel
check "an unknown model is named" grep -q "nosuchmodel" "$T/usage.out"
check "help exits 0 and gives the last line's format" sh -c \
	"'$BIN/ldprobe' --help | grep -q 'ldprobe: loader_per_s=X compute_per_s=Y actual_per_s=Z au=A verdict=V'"
check "nothing left running at the end" noproc

echo "$((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
