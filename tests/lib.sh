# lib.sh - shared by the integration scripts (tests/it_*.sh, tests/gpu_*.sh, scripts/gpu-run.sh,
# scripts/demo.sh):
# source it with `. "$(dirname "$0")/lib.sh"`. Functions only; nothing runs on load.

fails=0 n=0
# TAP-like checks: ok DESC, no DESC, check DESC COMMAND... (ok when COMMAND succeeds).
ok() { n=$((n + 1)); echo "ok $n - $1"; }
no() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; }
check() { desc=$1; shift; if "$@"; then ok "$desc"; else no "$desc"; fi; }
# show FILE [LINES]: a file's tail as comments (after a failure); SHOW_LINES sets the default.
show() { [ -f "$1" ] && tail -n "${2:-${SHOW_LINES:-15}}" "$1" | sed 's/^/#   /'; }
# matches TEXT ERE
matches() { printf '%s\n' "$1" | grep -Eq "$2"; }
# lt A B: A < B as numbers (floats too)
lt() { python3 -c "import sys; sys.exit(not $1 < $2)"; }

# stop_pid PID: SIGTERM, up to 5 s, then SIGKILL, and reap it. No-op when PID is empty.
stop_pid() {
	[ -n "$1" ] || return 0
	kill -TERM "$1" 2>/dev/null
	i=0
	while kill -0 "$1" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
	kill -KILL "$1" 2>/dev/null
	wait "$1" 2>/dev/null
}
# The test's loaderd is $LPID; start_loaderd starts it, stop_loaderd stops it and forgets it.
LPID=""
# start_loaderd LOG [OPTION...]: start ${LOADERD:-$BIN/loaderd} OPTION... in the background, its
# stderr in LOG, and wait until it serves: loaderd writes one line ("READY socket=... pid=...") on
# --ready-fd, here a FIFO, once its socket listens and its workers run. Sets LPID. Returns 1,
# with LOG's tail, when loaderd exits first or is not ready within READY_TIMEOUT s (default 10;
# LPID is then still set, for stop_loaderd).
start_loaderd() {
	_sl_log=$1
	shift
	_sl_fifo=$(mktemp -u "${TMPDIR:-/tmp}/loaderd-ready.XXXXXX") || return 1
	mkfifo -m 600 "$_sl_fifo" || return 1
	"${LOADERD:-$BIN/loaderd}" "$@" --ready-fd 3 3>"$_sl_fifo" 2>"$_sl_log" &
	LPID=$!
	# EOF (loaderd exited, or never started) ends the read as surely as the line does.
	_sl_line=$(timeout "${READY_TIMEOUT:-10}" head -n 1 "$_sl_fifo")
	rm -f "$_sl_fifo"
	case $_sl_line in
	READY*) return 0 ;;
	esac
	if kill -0 "$LPID" 2>/dev/null; then
		echo "# loaderd did not get ready within ${READY_TIMEOUT:-10} s:"
	else
		wait "$LPID"
		echo "# loaderd exited (status $?) before it served:"
		LPID=""
	fi
	show "$_sl_log"
	return 1
}
stop_loaderd() {
	stop_pid "$LPID"
	LPID=""
}

# corrupt_record DPK ID: flip one byte in the middle of record ID's stored bytes in the .dpk
# (docs/FORMAT.md: the index offset at byte 56 of the header, 64-byte entries that start with
# the record's offset and length), so that its checksum fails.
corrupt_record() {
	cr_off=$(python3 -c "
import struct
f = open('$1', 'rb'); h = f.read(152)
idx = struct.unpack_from('<Q', h, 56)[0]
f.seek(idx + $2 * 64); off, ln = struct.unpack_from('<QQ', f.read(16)); print(off + ln // 2)") ||
		return 1
	cr_byte=$(od -An -tu1 -j "$cr_off" -N1 "$1" | tr -d ' ')
	printf "\\$(printf %03o $(((cr_byte + 1) % 256)))" |
		dd of="$1" bs=1 seek="$cr_off" conv=notrunc 2>/dev/null
}

# need_python CODE PACKAGES: set PY to the Python tests' interpreter, Debian's /usr/bin/python3 (it
# sees what scripts/deps.sh installs; a pyenv python3 first on PATH does not; LOADERD_PYTHON
# overrides), and skip (exit 77, saying why) unless it runs CODE; PACKAGES go into the reason.
need_python() {
	PY=${LOADERD_PYTHON:-/usr/bin/python3}
	"$PY" -c "$1" 2>/dev/null && return 0
	echo "skip: $PY cannot run '$1' (scripts/deps.sh installs $2)"
	exit 77
}
# need_torch_gloo: need_python for Debian's numpy and torch with torch.distributed's gloo (the
# torchrun tests).
need_torch_gloo() {
	need_python 'import numpy, torch.distributed as d; assert d.is_gloo_available()' \
		"python3-numpy python3-torch"
}
# need_bins NAME...: exit 1 unless $BUILD/bin/NAME is built, for each NAME.
need_bins() {
	for b in "$@"; do
		[ -x "${BUILD:-build}/bin/$b" ] || { echo "not built: ${BUILD:-build}/bin/$b (run make)"; exit 1; }
	done
}
# serve_loaderd SOCK LOG [OPTION...]: start_loaderd on SOCK with one worker as the test's
# loaderd ($LPID), its log in LOG; exit 1, showing the log, unless it serves.
serve_loaderd() {
	_sv_sock=$1 _sv_log=$2
	shift 2
	start_loaderd "$_sv_log" --socket "$_sv_sock" --workers 1 "$@" ||
		{ echo "# loaderd did not start"; exit 1; }
}

# now: the time in seconds; since T0: seconds from T0 (a now) to now, "%.1f"
now() { date +%s.%N; }
since() { python3 -c "print('%.1f' % ($(now) - $1))"; }
# kill_wait VICTIM JOB: SIGKILL the process VICTIM and reap it, then wait for the background
# process JOB; sets rc (JOB's exit status) and dt (seconds from the kill to JOB's end, "%.1f").
kill_wait() {
	kill -KILL "$1"
	wait "$1" 2>/dev/null
	_kw_t=$(now)
	wait "$2"
	rc=$?
	dt=$(since "$_kw_t")
}

# cmp_params same|differ A.bin B.bin INIT.bin: trainer --dump-params files. "same": they agree to
# 1e-5, as ||a-b|| / ||a|| and as max|a-b| <= 1e-5 max|a|; "differ": they are clearly apart
# (relative L2 difference > 1e-3), which shows that the comparison can fail. Prints the figures.
# Fails on different sizes, non-finite values, or parameters that never moved from INIT.bin.
cmp_params() {
	python3 - "$@" <<'PY'
import math, struct, sys
def load(p):
    b = open(p, 'rb').read()
    return struct.unpack('<%df' % (len(b) // 4), b)
mode = sys.argv[1]
name = '%s vs %s' % (sys.argv[2].split('/')[-1], sys.argv[3].split('/')[-1])
a, b, z = load(sys.argv[2]), load(sys.argv[3]), load(sys.argv[4])
if len(a) != len(b) or len(a) == 0 or len(a) != len(z):
    print('# %s: sizes %d, %d, init %d' % (name, len(a), len(b), len(z)))
    sys.exit(1)
if not all(math.isfinite(x) for x in a + b):
    print('# %s: non-finite parameters' % name)
    sys.exit(1)
na = math.sqrt(sum(x * x for x in a))
rel = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b))) / na
mx = max(abs(x - y) for x, y in zip(a, b))
ma = max(abs(x) for x in a)
moved = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, z))) / na
print('# %s: %d parameters, relative L2 difference %.3g, max abs difference %.3g '
      '(max abs value %.3g); moved from init by %.3g' % (name, len(a), rel, mx, ma, moved))
if moved < 1e-3:
    sys.exit(1)
if mode == 'same':
    sys.exit(0 if rel <= 1e-5 and mx <= 1e-5 * ma else 1)
sys.exit(0 if rel > 1e-3 else 1)
PY
}

# mpi_session_in DIR: Open MPI keeps its session folders (ompi.HOST.UID) under DIR, which the
# test removes; a rank or mpirun killed on purpose would otherwise leave them in /tmp.
mpi_session_in() { export OMPI_MCA_orte_tmpdir_base="$1"; }
