#!/bin/sh
# it_compare_rows.sh - every row of tools/bench/compare.sh gives a number: compare.py runs each
# loader once on a small tree (400 JPEGs, 48-96 px, two batches; one round, ldbench for 1 s) and each row of
# its JSON must hold samples/s > 0 and CPU-s per 1000 > 0, or the row fails with compare.py's
# reason. A row whose package this python does not have is not run, and is said so with the
# reason (TAP "# SKIP"), never counted as passed:
#   - DALI (nvidia-dali-cuda130) and FFCV are on PyPI only; compare.sh installs them into its venv.
#   - FFCV compiles its pipeline with numba at every start (about 100 s here), so it runs only
#     when COMPARE_ROWS_FFCV=1 (compare.sh --check sets it).
# The python: $COMPARE_PY (compare.sh --check passes its venv's), else Debian's /usr/bin/python3
# (python3-torch, python3-torchvision: scripts/deps.sh), so that `make test` does not depend on
# what a benchmark left in /tmp.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/bin
T=$(mktemp -d /tmp/it_compare_rows.XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib.sh"

PY=${COMPARE_PY:-/usr/bin/python3}
if ! "$PY" -c "import torch, torchvision, numpy" 2>"$T/imp.err"; then
	echo "# skip: $PY cannot import torch, torchvision and numpy: $(tail -1 "$T/imp.err")"
	exit 77
fi
echo "# python: $PY ($("$PY" -c 'import numpy, torch, torchvision; print("numpy", numpy.__version__, "torch", torch.__version__, "torchvision", torchvision.__version__)'))"

"$BIN/dsgen" imagefolder "$T/tree" --classes 2 --per-class 200 --min-side 48 --max-side 96 \
	>"$T/dsgen.log" 2>&1 || { show "$T/dsgen.log"; exit 1; }
"$BIN/dpack" pack "$T/tree" "$T/t.dpk" >"$T/dpack.log" 2>&1 || { show "$T/dpack.log"; exit 1; }

set --
if ! "$PY" -c "import nvidia.dali" 2>/dev/null; then
	set -- "$@" --skip "dali_cpu=nvidia.dali is not importable by $PY (PyPI's nvidia-dali-cuda130; compare.sh installs it into its venv)"
fi
if ! "$PY" -c "import ffcv" 2>/dev/null; then
	set -- "$@" --skip "ffcv=ffcv is not importable by $PY (PyPI's ffcv, built against libopencv-dev; compare.sh installs it into its venv)"
elif [ "${COMPARE_ROWS_FFCV:-0}" != 1 ]; then
	set -- "$@" --skip "ffcv=its numba compile takes about 100 s a start (COMPARE_ROWS_FFCV=1, or compare.sh --check, runs it)"
else
	if "$PY" tools/bench/run_loader.py ffcv_write --tree "$T/tree" --beton "$T/t.beton" \
		--workers 2 >"$T/beton.log" 2>&1; then
		set -- "$@" --beton "$T/t.beton"
	fi  # else compare.py's ffcv row fails: "no .beton", with the log below
fi
"$PY" tools/bench/compare.py --tree "$T/tree" --dpk "$T/t.dpk" --workers 2 --repeat 1 \
	--ldbench-seconds 1 --ldbench-warmup 0.5 --ceiling-seconds 0.5 --timeout 300 \
	--md "$T/b.md" --svg "$T/b.svg" --json "$T/r.json" "$@" >"$T/compare.log" 2>&1
check "compare.py ran every row and wrote its table" [ -s "$T/r.json" ] || { show "$T/compare.log" 30; exit 1; }
[ -f "$T/beton.log" ] && [ ! -f "$T/t.beton" ] && { echo "# writing the .beton failed:"; show "$T/beton.log"; }

# One line per row: ROW ok PER_S CPU, ROW skip REASON, or ROW fail REASON.
"$PY" - "$T/r.json" "$@" >"$T/rows" <<'PYEOF'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
skips = {}
args = sys.argv[2:]
for i, a in enumerate(args):
    if a == "--skip":
        k, v = args[i + 1].split("=", 1)
        skips[k] = v
sys.path.insert(0, "tools/bench")
from compare import ORDER
for k in ORDER:
    r = rows.get(k)
    if r is None:
        print(k, "fail", "no row in compare.py's results")
    elif k in skips:
        print(k, "skip", skips[k])
    elif "error" in r:
        print(k, "fail", r["error"])
    elif r.get("per_s", 0) > 0 and r.get("cpu_per_1000", 0) > 0:
        print(k, "ok", "%.0f samples/s, %.2f CPU-s/1000" % (r["per_s"], r["cpu_per_1000"]))
    else:
        print(k, "fail", "no number: %r" % r)
PYEOF
notrun=""
while read -r row what rest; do
	case $what in
	ok) ok "$row: $rest" ;;
	skip) n=$((n + 1)); echo "ok $n - $row # SKIP not run: $rest"; notrun="$notrun $row" ;;
	*) no "$row: $rest" ;;
	esac
done <"$T/rows"
check "every row of compare.py is reported" [ "$(wc -l <"$T/rows")" -ge 7 ]
[ -n "$notrun" ] && echo "# rows not run here:$notrun (see the SKIP lines for why)"
echo "1..$n"
[ "$fails" -eq 0 ]
