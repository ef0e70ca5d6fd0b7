#!/bin/sh
# pack_photos.sh - issue 24's pack cost: `dpack pack` against `tar cf` on real photographs
# (tools/bench/photo_tree.py: Debian's mate-backgrounds at full size plus ImageNet-sized copies
# made by PIL) and on the same files as a multi-shard WebDataset set, page cache warm, all cores.
# Each round runs tar and dpack (and BASE_BIN's dpack when given) back to back on each set, so
# that other load on the machine hits them alike; prints the medians of wall and CPU seconds
# (user + sys), the ratios to `tar cf` in the same run, the 1-minute load average at each round,
# and checks that BASE_BIN's dpack writes the same bytes. Not part of `make test`.
#
# usage: tools/bench/pack_photos.sh [ROUNDS]   (default 5)
#   BENCH_DIR  where the photographs and outputs go (default build/bench-photos; kept between
#              runs: the tree is made once)
#   BASE_BIN   a folder holding another build's dpack to time beside this one (e.g. the commit
#              before a change); its output must be byte-identical
#   OUT_DIR    where the outputs go (default BENCH_DIR; a tmpfs such as /dev/shm keeps other
#              writers' dirty pages on a shared disk out of the wall times, for tar and dpack alike)
#   DPACK_ARGS extra arguments for both dpacks (default --no-fsync: tar does not fsync either)
set -eu
BIN=${BUILD:-build}/bin
rounds=${1:-5}
W=${BENCH_DIR:-build/bench-photos}
args=${DPACK_ARGS---no-fsync}
here=$(dirname "$0")
O=${OUT_DIR:-$W}
[ -d "$W/tree" ] || "$here/photo_tree.py" "$W" >/dev/null
# the sets: everything, the full-size photographs alone, the ImageNet-sized alone, the shards
mkdir -p "$W/sets/full" "$W/sets/inet"
[ -e "$W/sets/full/full" ] || ln -s ../../tree/full "$W/sets/full/full"
for d in "$W"/tree/inet_*; do
	[ -e "$W/sets/inet/${d##*/}" ] || ln -s "../../tree/${d##*/}" "$W/sets/inet/${d##*/}"
done
cat "$W"/tree/*/* "$W"/shards/* >/dev/null   # warm the page cache

rows="tar new"
[ -n "${BASE_BIN:-}" ] && rows="tar base new"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# one timed run: $1 row, $2 set, then the command; appends "wall cpu" to $T/row.set
run() {
	r=$1 s=$2
	shift 2
	/usr/bin/python3 -c '
import resource, subprocess, sys, time
a = resource.getrusage(resource.RUSAGE_CHILDREN)
t = time.perf_counter()
rc = subprocess.call(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=open(sys.argv[1], "w"))
t = time.perf_counter() - t
b = resource.getrusage(resource.RUSAGE_CHILDREN)
print("%.4f %.4f" % (t, b.ru_utime + b.ru_stime - a.ru_utime - a.ru_stime))
sys.exit(rc)' "$T/err" "$@" >>"$T/$r.$s" || { cat "$T/err"; exit 1; }
}
src() {
	case $1 in
	tree) echo "$W/tree" ;;
	full) echo "$W/sets/full" ;;
	inet) echo "$W/sets/inet" ;;
	shards) echo "$W/shards" ;;
	esac
}
for i in $(seq "$rounds"); do
	printf 'round %d: load %s\n' "$i" "$(cut -d' ' -f1 /proc/loadavg)"
	for s in tree full inet shards; do
		for r in $rows; do
			rm -f "$O/out.tar" "$O/out.$r.dpk"
			case $r in
			tar) run tar "$s" tar chf "$O/out.tar" -C "$(src "$s")" . ;;
			base) run base "$s" "$BASE_BIN/dpack" pack $args "$(src "$s")" "$O/out.base.dpk" ;;
			new) run new "$s" "$BIN/dpack" pack $args "$(src "$s")" "$O/out.new.dpk" ;;
			esac
		done
		if [ -n "${BASE_BIN:-}" ] && ! cmp -s "$O/out.base.dpk" "$O/out.new.dpk"; then
			echo "pack_photos.sh: $s: base and new dpack wrote different files" >&2
			exit 1
		fi
	done
done
printf 'round end: load %s\n' "$(cut -d' ' -f1 /proc/loadavg)"
rm -f "$O/out.tar" "$O"/out.*.dpk

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "$(nproc) cores, $rounds rounds, medians; dpack $args; set sizes:"
for s in tree full inet shards; do
	printf '  %-6s %s files, %s bytes\n' "$s" "$(find -L "$(src "$s")" -type f | wc -l)" \
		"$(du -sbL "$(src "$s")" | cut -f1)"
done
printf '%-7s %-5s %8s %8s %10s %10s\n' set row wall_s cpu_s wall/tar cpu/tar
for s in tree full inet shards; do
	tw=$(cut -d' ' -f1 "$T/tar.$s" | median) tc=$(cut -d' ' -f2 "$T/tar.$s" | median)
	for r in $rows; do
		w=$(cut -d' ' -f1 "$T/$r.$s" | median) c=$(cut -d' ' -f2 "$T/$r.$s" | median)
		printf '%-7s %-5s %8.4f %8.4f %10.1f %10.1f\n' "$s" "$r" "$w" "$c" \
			"$(echo "$w / $tw" | bc -l)" "$(echo "$c / $tc" | bc -l)"
	done
done
if [ -n "${BASE_BIN:-}" ]; then
	echo "base and new outputs: byte-identical on every set"
fi
