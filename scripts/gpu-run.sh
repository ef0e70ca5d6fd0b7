#!/bin/sh
# gpu-run.sh - on the GPU machine of issue 7: run `make test-gpu`'s programs and measure the
# figures of docs/PERFORMANCE.md, writing everything to $OUT. Runs from the bundle that
# scripts/gpu-bundle.sh makes (as gpu-bundle/gpu-run.sh, sourcing env.sh beside it), or from a
# checkout after `make` (as scripts/gpu-run.sh).
#
#   gpu-run.sh [--self-check] [STAGE ...]        (no STAGE: all of them, in this order)
#
#   machine  the machine: GPU, driver, CPU, memory, kernel, and where each CUDA library resolves
#                                                                              -> machine.txt
#   tests    build/tests/gpu_* and tests/gpu_*.sh through tests/run.sh          -> tests.log
#   h2d      gpu_ring --bench: H2D from a registered ring slot vs a cudaMallocHost buffer, batch
#            256 x 224x224x3 (38.5 MB), ring with huge pages when free and with 4 KiB pages
#                                                                              -> h2d.txt
#   loader   ldbench --workers 8 and 16 (RandomResizedCrop 224, batch 256) on an ImageNet-like
#            JPEG dataset: samples/s and the ratio to the full-decode ceiling   -> loader.txt
#   overlap  the trainer on the GPU: compute ceilings (--synthetic) of synthetic:resnet50 and the
#            mlp; synthetic:resnet50 from loaderd (compute should dominate: exposed data wait +
#            exposed copy <= 5% of the step); the mlp from loaderd (too small to hide the
#            loader: the verdict should be loader-limited, at the loader-only rate within 10%)
#                                                                              -> overlap.txt
#   need     what a real ResNet-50 consumes on this GPU: torchvision's resnet50, bf16 autocast,
#            channels-last, SGD, synthetic data on the GPU (PyTorch is on that machine)
#                                                                              -> need.txt
# Each stage also appends its machine-readable lines to summary.txt: 7 files in $OUT at most, as
# the device tool returns 8. The dataset is made once into $DATA_DIR and reused.
#
# --self-check: the host device stands in for CUDA everywhere (tests --self-check, --device host
# --backend mpi, small sizes), to check this script's plumbing on a machine without a GPU. Its
# figures mean nothing.
#
# Knobs (environment): OUT (./gpu-out), DATA_DIR (/tmp/gpu-data), DS_CLASSES (100),
# DS_PER_CLASS (50), DS_MIN_SIDE (300), DS_MAX_SIDE (600): the dataset; LDB_SECONDS (20);
# BATCH (256), CROP (224), R50_STEPS (60), MLP_STEPS (200), WORKERS (all cores): the runs.
# Each command runs under a timeout; a failing stage is reported and the next one runs; the exit
# status is 1 if any stage failed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
if [ -f "$here/env.sh" ]; then
	ROOT=$here
	# shellcheck disable=SC1091
	GPU_BUNDLE=$ROOT . "$ROOT/env.sh" || exit 1
else
	ROOT=$(cd "$here/.." && pwd)
fi
cd "$ROOT" || exit 1
# start_loaderd, stop_loaderd and friends (the bundle carries tests/lib.sh too)
. "$ROOT/tests/lib.sh"
BUILD=build
BIN=$BUILD/bin
export BUILD

SELF=0
if [ "${1:-}" = --self-check ]; then
	SELF=1
	shift
fi
STAGES=${*:-machine tests h2d loader overlap need}
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
DATA_DIR=${DATA_DIR:-/tmp/gpu-data}
NPROC=$(nproc)
WORKERS=${WORKERS:-$NPROC}
if [ $SELF -eq 1 ]; then
	DEV="--device host --backend mpi" TSELF=--self-check
	: "${DS_CLASSES:=4}" "${DS_PER_CLASS:=10}" "${DS_MIN_SIDE:=64}" "${DS_MAX_SIDE:=128}"
	: "${LDB_SECONDS:=2}" "${BATCH:=8}" "${CROP:=64}" "${R50_STEPS:=4}" "${MLP_STEPS:=20}"
	R50=${R50:-synthetic:flops=20M,params=1M}
else
	DEV="--device cuda" TSELF=
	: "${DS_CLASSES:=100}" "${DS_PER_CLASS:=50}" "${DS_MIN_SIDE:=300}" "${DS_MAX_SIDE:=600}"
	: "${LDB_SECONDS:=20}" "${BATCH:=256}" "${CROP:=224}" "${R50_STEPS:=60}" "${MLP_STEPS:=200}"
	R50=${R50:-synthetic:resnet50}
fi
SUMMARY=$OUT/summary.txt
failed=""
LPID=""

say() { echo "== $*"; }
# sum LINE...: append to summary.txt (and show)
sum() { printf '%s\n' "$*" | tee -a "$SUMMARY"; }
fail() { echo "gpu-run: $*" >&2; failed="$failed $stage"; }
trap 'stop_loaderd' EXIT
trap 'exit 130' INT TERM HUP

# serve LOG: loaderd (tests/lib.sh's start_loaderd) with $WORKERS decode threads on $DATA_DIR/s.sock
serve() {
	start_loaderd "$1" --socket "$DATA_DIR/s.sock" --workers "$WORKERS" --linger 5
}

# An ImageNet-like JPEG dataset, made once: $DS_CLASSES x $DS_PER_CLASS images, sides
# $DS_MIN_SIDE..$DS_MAX_SIDE (ImageNet's average is about 400 x 350).
dataset() {
	D=$DATA_DIR/in-$DS_CLASSES-$DS_PER_CLASS-$DS_MIN_SIDE-$DS_MAX_SIDE.dpk
	[ -s "$D" ] && return 0
	mkdir -p "$DATA_DIR"
	say "dataset: dsgen imagefolder, $DS_CLASSES classes x $DS_PER_CLASS, sides $DS_MIN_SIDE..$DS_MAX_SIDE"
	rm -rf "$DATA_DIR/tree"
	timeout 600 "$BIN/dsgen" imagefolder "$DATA_DIR/tree" --classes "$DS_CLASSES" \
		--per-class "$DS_PER_CLASS" --min-side "$DS_MIN_SIDE" --max-side "$DS_MAX_SIDE" \
		--jobs "$NPROC" >/dev/null &&
		timeout 600 "$BIN/dpack" pack --no-fsync "$DATA_DIR/tree" "$D.tmp" >/dev/null &&
		mv "$D.tmp" "$D" || { fail "making the dataset failed"; return 1; }
	rm -rf "$DATA_DIR/tree"
	"$BIN/dpack" inspect "$D" 2>/dev/null | head -n 12
}

# last_line FILE: the file's last line starting with "$2" (the machine-readable one)
last_line() { grep "^$2" "$1" | tail -n 1; }

st_machine() {
	{
		echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
		echo "kernel: $(uname -srm)"
		[ -f /etc/os-release ] && (. /etc/os-release && echo "os: $PRETTY_NAME")
		echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $NPROC cores online"
		echo "memory: $(free -g 2>/dev/null | awk '/^Mem:/ { print $2 " GiB" }')"
		echo "huge pages: $(grep -E 'HugePages_(Total|Free)|Hugepagesize' /proc/meminfo | tr -s ' ' | tr '\n' ' ')"
		if command -v nvidia-smi >/dev/null 2>&1; then
			nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,clocks.max.sm --format=csv 2>&1
			nvidia-smi topo -m 2>/dev/null | head -n 5
		else
			echo "nvidia-smi: not on PATH"
		fi
		echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
		echo "where each CUDA library resolves (first match on LD_LIBRARY_PATH, else ldconfig):"
		for l in libcuda.so.1 libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
			w=""
			for d in $(printf '%s' "${LD_LIBRARY_PATH:-}" | tr ':' ' '); do
				[ -e "$d/$l" ] && { w=$d/$l; break; }
			done
			[ -n "$w" ] || w=$(ldconfig -p 2>/dev/null | awk -v l="$l" '$1 == l { print $NF; exit }')
			echo "  $l -> ${w:-NOT FOUND}"
		done
		echo "ldd build/bin/trainer:"
		ldd "$BIN/trainer" | sed 's/^/  /'
		[ -f MANIFEST ] && sed -n '1,5p' MANIFEST
	} >"$OUT/machine.txt" 2>&1
	cat "$OUT/machine.txt"
	sum "machine: $(grep -m1 '^date' "$OUT/machine.txt"); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1); $NPROC cores"
}

st_tests() {
	# shellcheck disable=SC2046  # our file names have no spaces
	set -- $(ls "$BUILD"/tests/gpu_* 2>/dev/null) $(ls tests/gpu_*.sh 2>/dev/null)
	[ $# -gt 0 ] || { fail "no GPU tests in $BUILD/tests"; return; }
	if [ $SELF -eq 1 ]; then
		# run.sh passes no arguments: wrap each in --self-check
		for t in "$@"; do
			echo "== $t --self-check"
			case $t in
			*.sh) timeout 900 sh "$t" --self-check ;;
			*) timeout 900 "$t" --self-check ;;
			esac
			echo "exit $?"
		done >"$OUT/tests.log" 2>&1
		cat "$OUT/tests.log"
		sum "tests (--self-check): $(grep -c '^exit 0' "$OUT/tests.log") of $# exited 0"
		grep -q '^exit [^0]' "$OUT/tests.log" && fail "a test failed"
		return
	fi
	timeout 900 sh tests/run.sh "$@" >"$OUT/tests.log" 2>&1
	rc=$?
	cat "$OUT/tests.log"
	sum "tests: $(tail -n 1 "$OUT/tests.log")"
	[ $rc -eq 0 ] || fail "tests failed (exit $rc)"
}

st_h2d() {
	: >"$OUT/h2d.txt"
	for huge in "" --no-huge; do
		say "gpu_ring --bench $huge" | tee -a "$OUT/h2d.txt"
		# shellcheck disable=SC2086
		timeout 300 "$BUILD/tests/gpu_ring" $TSELF --bench --batch "$BATCH" --crop "$CROP" $huge \
			>>"$OUT/h2d.txt" 2>&1 || fail "gpu_ring --bench $huge failed"
	done
	cat "$OUT/h2d.txt"
	grep "^h2d:" "$OUT/h2d.txt" | sed -n '1s/^/h2d (huge pages allowed): /p; 2s/^/h2d (4 KiB pages): /p' |
		while read -r l; do sum "$l"; done
}

st_loader() {
	dataset || return
	: >"$OUT/loader.txt"
	for w in 8 16; do
		[ $SELF -eq 1 ] && w=$((w / 8))
		say "ldbench --workers $w --batch $BATCH --crop $CROP --seconds $LDB_SECONDS" | tee -a "$OUT/loader.txt"
		timeout 300 "$BIN/ldbench" --dataset "$D" --workers "$w" --batch "$BATCH" --crop "$CROP" \
			--seconds "$LDB_SECONDS" >>"$OUT/loader.txt" 2>&1 || fail "ldbench --workers $w failed"
		l=$(last_line "$OUT/loader.txt" "ldbench:")
		sum "loader workers=$w: $l"
	done
	cat "$OUT/loader.txt"
}

# trainer NAME [options]: one rank (no mpirun), output appended to overlap.txt
trainer() {
	name=$1
	shift
	say "trainer ($name): $*" | tee -a "$OUT/overlap.txt"
	# shellcheck disable=SC2086
	timeout 600 "$BIN/trainer" $DEV --batch "$BATCH" --crop "$CROP" --log-every 0 "$@" \
		>"$DATA_DIR/$name.out" 2>&1
	rc=$?
	cat "$DATA_DIR/$name.out" >>"$OUT/overlap.txt"
	[ $rc -eq 0 ] || { fail "trainer ($name) exited $rc"; return 1; }
	sum "$name: $(grep 'time per step' "$DATA_DIR/$name.out" | sed 's/^ *//')"
	sum "$name: $(last_line "$DATA_DIR/$name.out" "trainer: samples_per_s")"
}

st_overlap() {
	dataset || return
	: >"$OUT/overlap.txt"
	trainer r50-ceiling --synthetic --model "$R50" --steps "$R50_STEPS"
	trainer mlp-ceiling --synthetic --model mlp --steps "$MLP_STEPS"
	# the loader-only rate with the same workers, batch and crop, before loaderd starts (no
	# competition for the cores)
	say "ldbench --workers $WORKERS (the loader-only rate)" | tee -a "$OUT/overlap.txt"
	timeout 300 "$BIN/ldbench" --dataset "$D" --workers "$WORKERS" --batch "$BATCH" \
		--crop "$CROP" --seconds "$LDB_SECONDS" >"$DATA_DIR/ldb.out" 2>&1 ||
		fail "ldbench --workers $WORKERS failed"
	cat "$DATA_DIR/ldb.out" >>"$OUT/overlap.txt"
	loader_rate=$(last_line "$DATA_DIR/ldb.out" "ldbench:" | sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p')
	sum "loader-only workers=$WORKERS: $(last_line "$DATA_DIR/ldb.out" "ldbench:")"
	serve "$DATA_DIR/loaderd.log" || { fail "loaderd did not start"; return; }
	trainer r50-loaderd --socket "$DATA_DIR/s.sock" --dataset "$D" --model "$R50" \
		--steps "$R50_STEPS" --job "r50-$$"
	trainer mlp-loaderd --socket "$DATA_DIR/s.sock" --dataset "$D" --model mlp \
		--steps "$MLP_STEPS" --job "mlp-$$"
	stop_loaderd
	cat "$OUT/overlap.txt"
	# the two ratios of issue 7
	python3 - "$DATA_DIR/r50-loaderd.out" "$DATA_DIR/mlp-loaderd.out" "${loader_rate:-0}" <<'PY' |
import re, sys
def read(p):
    try:
        t = open(p).read()
    except OSError:
        return None, None, None
    m = re.search(r'data wait ([0-9.]+)%, exposed copy ([0-9.]+)%', t)
    r = re.search(r'trainer: samples_per_s=([0-9.]+) au=([0-9.]+) verdict=(\S+)', t)
    return (float(m.group(1)) + float(m.group(2))) if m else None, \
        (float(r.group(1)) if r else None), (r.group(3) if r else None)
exp, rate, verdict = read(sys.argv[1])
if exp is not None:
    print('overlap r50: exposed data wait + copy = %.1f%% of step time (issue 7: <= 5%%: %s); '
          'verdict %s' % (exp, 'met' if exp <= 5 else 'NOT met', verdict))
exp, rate, verdict = read(sys.argv[2])
loader = float(sys.argv[3])
if rate is not None:
    ratio = rate / loader if loader > 0 else float('nan')
    print('overlap mlp: verdict %s (issue 7: loader-limited: %s); %.1f samples/s = %.3f x the '
          'loader-only %.1f (issue 7: within 10%%: %s)' % (verdict, 'met' if verdict ==
          'loader-limited' else 'NOT met', rate, ratio, loader,
          'met' if abs(ratio - 1) <= 0.10 else 'NOT met'))
PY
	while read -r l; do sum "$l"; done
}

st_need() {
	if [ $SELF -eq 1 ]; then
		sum "need: skipped (--self-check)"
		return
	fi
	timeout 600 python3 - "$BATCH" >"$OUT/need.txt" 2>&1 <<'PY'
# What a real ResNet-50 consumes on this GPU: torchvision resnet50, bf16 autocast, channels-last,
# SGD with momentum, synthetic data already on the GPU (no loader), 10 warm-up steps, 30 timed.
import sys, time
import torch, torchvision
batch = int(sys.argv[1])
dev = torch.device('cuda')
torch.backends.cudnn.benchmark = True
m = torchvision.models.resnet50().to(dev, memory_format=torch.channels_last)
opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
x = torch.randn(batch, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (batch,), device=dev)
lossf = torch.nn.CrossEntropyLoss()
def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast('cuda', dtype=torch.bfloat16):
        loss = lossf(m(x), y)
    loss.backward()
    opt.step()
for _ in range(10):
    step()
torch.cuda.synchronize()
t = time.perf_counter()
n = 30
for _ in range(n):
    step()
torch.cuda.synchronize()
dt = time.perf_counter() - t
print('torch %s, torchvision %s, %s' % (torch.__version__, torchvision.__version__,
                                        torch.cuda.get_device_name(0)))
print('need: resnet50 bf16 channels-last batch %d: images_per_s=%.1f (%d steps, %.3f s)'
      % (batch, batch * n / dt, n, dt))
PY
	rc=$?
	cat "$OUT/need.txt"
	[ $rc -eq 0 ] || { fail "the PyTorch ResNet-50 run failed (exit $rc)"; return; }
	sum "$(last_line "$OUT/need.txt" "need:")"
}

for stage in $STAGES; do
	case $stage in
	machine|tests|h2d|loader|overlap|need) ;;
	*) echo "gpu-run: unknown stage '$stage' (machine tests h2d loader overlap need)" >&2; exit 2 ;;
	esac
done
sum "---- gpu-run $(date -u '+%Y-%m-%d %H:%M UTC')$( [ $SELF -eq 1 ] && echo ' --self-check (host device: not GPU figures)'): $STAGES"
for stage in $STAGES; do
	say "stage $stage"
	"st_$stage"
done
if [ -n "$failed" ]; then
	sum "gpu-run: FAILED:$failed"
	exit 1
fi
sum "gpu-run: ok"
