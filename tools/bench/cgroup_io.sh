#!/bin/sh
# cgroup_io.sh - issue 31's fourth read case: a dataset larger than the memory loaderd may use.
# loaderd runs in a memory cgroup (v2 memory.max, or v1 memory.limit_in_bytes) whose limit is
# below the dataset's size; the page cache it fills is charged there. Each --io mode reads the
# same epochs through ldcat (outside the cgroup), modes alternating, the file evicted before each
# run: samples/s, CPU-s per million samples (loaderd + ldcat), and the cgroup's peak memory.
# Needs root (it makes the cgroup). Not in make test: it writes a dataset of --mib MiB.
#
# usage: tools/bench/cgroup_io.sh [--mib 600] [--limit-mib 256] [--rounds 2] [--epochs 2]
set -eu
mib=600 limit=256 rounds=2 epochs=2
while [ $# -gt 0 ]; do
	case $1 in
	--mib) mib=$2; shift 2 ;;
	--limit-mib) limit=$2; shift 2 ;;
	--rounds) rounds=$2; shift 2 ;;
	--epochs) epochs=$2; shift 2 ;;
	-h|--help) sed -n 2,9p "$0"; exit 0 ;;
	*) echo "cgroup_io.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
B=${BUILD:-build}/bin
W=$(mktemp -d /var/tmp/cgroup_io.XXXXXX)
if [ -d /sys/fs/cgroup/memory ] && [ ! -e /sys/fs/cgroup/cgroup.controllers ]; then
	CG=/sys/fs/cgroup/memory/loaderd_bench.$$
	mkdir "$CG"
	echo $((limit << 20)) >"$CG/memory.limit_in_bytes"
	peak() { echo $(($(cat "$CG/memory.max_usage_in_bytes") >> 20)); }
	reset_peak() { echo 0 >"$CG/memory.max_usage_in_bytes"; }
else
	CG=/sys/fs/cgroup/loaderd_bench.$$
	mkdir "$CG"
	echo $((limit << 20)) >"$CG/memory.max"
	peak() { [ -e "$CG/memory.peak" ] && echo $(($(cat "$CG/memory.peak") >> 20)) || echo -; }
	reset_peak() { :; }
fi
LDPID=
cleanup() {
	[ -n "$LDPID" ] && kill "$LDPID" 2>/dev/null && wait "$LDPID" 2>/dev/null || true
	rmdir "$CG" 2>/dev/null || true
	[ -n "${KEEP:-}" ] || rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

count=$((mib * 1048576 / 3072))
"$B/dsgen" npy "$W/x.npy" "$W/y.npy" --count "$count" --height 32 --width 32 --channels 3 \
	--classes 1000 >/dev/null
"$B/dpack" pack "$W/x.npy" "$W/y.npy" "$W/d.dpk" >/dev/null
rm -f "$W/x.npy" "$W/y.npy"
d=$W/d.dpk
. "$(dirname "$0")/lib.sh"

echo "dataset: $count records of 32x32x3, $(($(stat -c %s "$d") >> 20)) MiB; loaderd's cgroup" \
	"limit: $limit MiB ($CG); load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| round | --io | samples/s | CPU-s per M samples | cgroup peak MiB | loaderd's choice |"
echo "|---|---|---|---|---|---|"
RUN=0
for r in $(seq "$rounds"); do
	for io in auto direct buffered; do
		evict "$d"
		reset_peak
		SOCK=$W/s.sock
		sh -c "echo \$\$ >'$CG/cgroup.procs' && exec '$B/loaderd' --socket '$SOCK' --io $io \
			--log-level info" 2>"$W/l.log" &
		LDPID=$!
		i=0
		while [ ! -S "$SOCK" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
		RUN=$((RUN + 1))
		rate=$(ldcat_rate "$B/ldcat" "$SOCK" "$LDPID" "$d" "r$RUN" "$epochs" "$W" --crop 0)
		choice=$(grep -o "$(basename "$d"): .*" "$W/l.log" | head -1 | sed 's/^[^:]*: //')
		echo "| $r | $io | ${rate% *} | ${rate#* } | $(peak) | $choice |"
		kill "$LDPID"; wait "$LDPID" 2>/dev/null || true; LDPID=
		rm -f "$SOCK"
	done
done
