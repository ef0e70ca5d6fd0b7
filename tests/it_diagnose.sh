#!/bin/sh
# it_diagnose.sh - python -m loaderd.diagnose around unchanged training scripts
# (examples/train_loop.py) with Debian's torch on the CPU, against a loaderd with one decode
# worker (docs/DIAGNOSE.md):
#   (a) full-size crops (224 of 640-800 px JPEGs) and a tiny model: loader-limited, and the
#       report has loaderd's side (1 worker, its fill time per sample);
#   (b) small crops (48 of 40-64 px images) and a convolutional model: compute-limited;
#   (c) two processes under torchrun, DDP over gloo: the report names rank 0 and rank 1, with the
#       gloo backend and timed allreduce buckets; Loader.profile_report() in the script gathers
#       both ranks through torch.distributed;
# each writes report.json (the trainer's schema), report.txt and timeline.svg, and ends on
# "loaderd.diagnose: samples_per_s=X data_wait=Y verdict=V". The analysis itself has pytest
# tests on constructed records (python/tests/test_report.py, test_diagnose.py, run by
# it_python.sh). Skipped (exit 77) without Debian's torch with gloo (LOADERD_PYTHON overrides).
. "$(dirname "$0")/lib.sh"
BUILD=${BUILD:-build}
BIN=$BUILD/bin
need_torch_gloo
need_bins loaderd dsgen dpack
T=$(mktemp -d /tmp/it_diagnose.XXXXXX)
trap 'stop_loaderd; rm -rf "$T"' EXIT

"$BIN/dsgen" imagefolder "$T/big" --classes 4 --per-class 12 --min-side 640 --max-side 800 \
	>/dev/null && "$BIN/dpack" pack "$T/big" "$T/big.dpk" >/dev/null &&
"$BIN/dsgen" imagefolder "$T/small" --classes 4 --per-class 32 --min-side 40 --max-side 64 \
	>/dev/null && "$BIN/dpack" pack "$T/small" "$T/small.dpk" >/dev/null ||
	{ echo "not ok - datasets"; exit 1; }
# --io buffered: records come from the page cache. With O_DIRECT (the default) a shared, busy
# disk makes reads of even these small records take milliseconds, now and then: the report then
# rightly says loader-limited (reading 99% of the fill time), but not every time.
serve_loaderd "$T/s.sock" "$T/loaderd.log" --io buffered   # --workers 1

# diag NAME DIAGNOSE-COMMAND...: python -m loaderd.diagnose --out $T/NAME -- ..., output in
# $T/NAME.out and .err; the package and library of this checkout.
diag() {
	name=$1
	shift
	start=$(date +%s)
	LOADERD_LIB=$(cd "$BUILD/lib" && pwd)/libldc.so PYTHONPATH=$(pwd)/python \
		PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1 \
		"$PY" -m loaderd.diagnose --out "$T/$name" -- "$@" >"$T/$name.out" 2>"$T/$name.err"
	rc=$?
	# torchrun's own rendezvous store can drop its connection on a loaded host: once more then
	if [ $rc -ne 0 ] && grep -q RendezvousConnectionError "$T/$name.err"; then
		echo "# $name: torchrun's rendezvous failed (RendezvousConnectionError); again"
		LOADERD_LIB=$(cd "$BUILD/lib" && pwd)/libldc.so PYTHONPATH=$(pwd)/python \
			PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1 "$PY" -m loaderd.diagnose \
			--out "$T/$name" -- "$@" >"$T/$name.out" 2>"$T/$name.err"
		rc=$?
	fi
	check "$name: loaderd.diagnose exits 0 (in $(($(date +%s) - start)) s)" [ $rc -eq 0 ]
	[ $rc -eq 0 ] || { show "$T/$name.err" 30; show "$T/loaderd.log"; }
	grep -E '^  (time per step|rank |loaderd:)|^verdict' "$T/$name.out" | sed 's/^/# /'
}
# last_line NAME VERDICT: the report's last line, with that verdict
last_line() {
	matches "$(tail -n 1 "$T/$1.out")" \
		"^loaderd\.diagnose: samples_per_s=[0-9.]+ data_wait=[0-9.]+ verdict=$2\$"
}
# json NAME PYTHON-EXPR: the expression is true of report.json (r) and timeline.svg parses
json() {
	"$PY" - "$T/$1" "$2" <<'PYEOF'
import json, sys, xml.dom.minidom
d, expr = sys.argv[1], sys.argv[2]
r = json.load(open(d + "/report.json"))
svg = xml.dom.minidom.parse(d + "/timeline.svg")
rows = [g.getAttribute("data-rank") for g in svg.getElementsByTagName("g")
        if g.getAttribute("class") == "rank-row"]
ok = r["schema"] == "loaderd-trainer-report/1" and eval("(" + expr + ")")
sys.exit(not ok)
PYEOF
}
TRAIN=examples/train_loop.py
SOCK="--socket $T/s.sock"

# (a) loader-limited: one worker decoding 640-800 px JPEGs for 224 crops, a model that is
# little more than a float conversion
diag loader "$PY" $TRAIN $SOCK --dpk "$T/big.dpk" --classes 4 --model tiny --crop 224 \
	--batch 16 --steps 30
check "loader: verdict loader-limited on the last line" last_line loader loader-limited
check "loader: report.json: data wait, loaderd's 1 worker, its fill time; timeline.svg" \
	json loader 'r["verdict"] == "loader-limited" and r["causes"]["loader"] >= 0.1 and
r["loaderd"]["workers"] == 1 and r["loaderd"]["fill_ms_per_sample"] > 0 and
r["steps_compared"] >= 20 and rows == ["0"] and
any("loaderd --workers" in a for a in r["advice"])'

# (b) compute-limited: small crops of small images (cheap to decode), three convolutions at full
# resolution: over 10 ms of compute per sample against well under 1 ms of fill, a margin that a
# loaded host (the fill time swells when the worker gets no core) does not eat
diag compute "$PY" $TRAIN $SOCK --dpk "$T/small.dpk" --classes 4 --model conv --crop 48 \
	--batch 16 --steps 24
check "compute: verdict compute-limited on the last line" last_line compute compute-limited
check "compute: report.json: data wait under 10%, AU over 0.8" \
	json compute 'r["verdict"] == "compute-limited" and r["shares"]["data"] < 0.1 and
r["au"] > 0.8'

# (c) DDP: two processes under torchrun (Debian's: --redirects 1 --tee 1), gloo
diag ddp "$PY" -m torch.distributed.run --standalone --nproc_per_node 2 --redirects 1 --tee 1 \
	--log_dir "$T/logs" $TRAIN $SOCK --dpk "$T/small.dpk" --classes 4 --model conv \
	--crop 32 --batch 16 --steps 24 --profile-report
check "ddp: the report names rank 0 and rank 1" \
	sh -c "grep -q '^  rank 0: ' '$T/ddp.out' && grep -q '^  rank 1: ' '$T/ddp.out'"
check "ddp: report.json: 2 ranks, gloo, allreduce buckets timed, a row per rank" \
	json ddp 'r["ranks"] == 2 and r["rank_ids"] == [0, 1] and r["backend"] == "gloo" and
[x["rank"] for x in r["per_rank"]] == [0, 1] and (r["buckets"] or 0) >= 1 and
r["params"] > 0 and rows == ["0", "1"]'
check "ddp: Loader.profile_report() gathered 2 ranks through torch.distributed" \
	grep -q 'profile_report ranks=2 verdict=' "$T/ddp.out"
check "ddp: a verdict on the last line" last_line ddp \
	'(loader|compute|communication|straggler)-limited'

# no Loader in the command: no record, said so, exit status 1
LOADERD_LIB=$(cd "$BUILD/lib" && pwd)/libldc.so PYTHONPATH=$(pwd)/python \
	"$PY" -m loaderd.diagnose --out "$T/none" -- "$PY" -c 'pass' >"$T/none.out" 2>&1
rc=$?
check "a command without a Loader: exit 1, 'left no record'" \
	sh -c "[ $rc -eq 1 ] && grep -q 'left no record' '$T/none.out'"
echo "$((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
