#!/bin/sh
# it_torchrun.sh - examples/ddp_torchrun.py under `torchrun --nproc_per_node 2`: two ranks, gloo
# on the CPU, DDP of a small convolutional network, fed by a real loaderd from a dataset made with
# dsgen and packed with dpack. It must learn: the last epoch's loss well below the first's, its
# accuracy well above chance. Debian's interpreter and torchrun (LOADERD_PYTHON overrides);
# skipped (exit 77) when that interpreter lacks torch, numpy or torch.distributed with gloo.
. "$(dirname "$0")/lib.sh"
BUILD=${BUILD:-build}
BIN=$BUILD/bin
need_torch_gloo
need_bins loaderd dsgen dpack
T=$(mktemp -d /tmp/it_torchrun.XXXXXX)
trap 'stop_loaderd; rm -rf "$T"' EXIT
CLASSES=4 EPOCHS=6

"$BIN/dsgen" imagefolder "$T/tree" --classes $CLASSES --per-class 48 --min-side 48 \
	--max-side 96 >/dev/null && "$BIN/dpack" pack "$T/tree" "$T/train.dpk" >/dev/null ||
	{ echo "not ok - dataset"; exit 1; }
serve_loaderd "$T/s.sock" "$T/loaderd.log"

# `python3 -m torch.distributed.run` is torchrun; the module form runs under $PY for sure.
# --standalone: a local rendezvous on a free port. OMP: one thread per rank on a small machine.
# --redirects 1 --tee 1: torch 1.13 under Python 3.11 (Debian 12) cannot parse the default "0".
start=$(date +%s)
LOADERD_LIB=$(cd "$BUILD/lib" && pwd)/libldc.so OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1 \
	"$PY" -m torch.distributed.run --standalone --nproc_per_node 2 --redirects 1 --tee 1 \
	--log_dir "$T/logs" examples/ddp_torchrun.py --socket "$T/s.sock" --dpk "$T/train.dpk" \
	--classes $CLASSES --epochs $EPOCHS --json "$T/result.json" \
	>"$T/run.out" 2>"$T/run.err"
rc=$?
check "torchrun --nproc_per_node 2 exits 0 (in $(($(date +%s) - start)) s)" [ $rc -eq 0 ]
[ $rc -eq 0 ] || { show "$T/run.err" 30; show "$T/loaderd.log"; }
grep 'epoch [0-9]*:' "$T/run.out" | sed 's/^/# /'
res=$(cat "$T/result.json" 2>/dev/null)
# learned JSON: loss falls to under half of the first epoch's, accuracy ends >= 0.8 (chance: 0.25)
learned() {
	printf '%s\n' "$res" | "$PY" -c '
import json, sys
r = json.load(sys.stdin)
ok = r["world"] == 2 and len(r["loss"]) == '"$EPOCHS"' and r["loss"][-1] < 0.5 * r["loss"][0] \
    and r["acc"][-1] >= 0.8 and r["acc"][-1] > r["acc"][0]
sys.exit(not ok)'
}
check "2 ranks learned: loss falls by half, accuracy rises to >= 0.8" learned
echo "$((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
