#!/bin/sh
# pack_vs_tar.sh - dpack pack against `tar cf` on the same page-cached ImageFolder tree, in one run,
# alternating them; prints the median of each and the ratios. dpack indexes every JPEG by default
# (jpeg+idx, the figure issue 15 asks about); --restart-width 64 makes the older jpeg+rst rewrite;
# --keep-jpeg stores them as they are. Not part of `make test`.
# usage: tools/bench/pack_vs_tar.sh [CLASSES] [PER_CLASS] [ROUNDS]   (default 20 100 5)
set -eu
BIN=${BUILD:-build}/bin
classes=${1:-20} per=${2:-100} rounds=${3:-5}
W=${BENCH_DIR:-build/bench-pack}
rm -rf "$W"
mkdir -p "$W"
"$BIN/dsgen" imagefolder "$W/tree" --classes "$classes" --per-class "$per" >/dev/null
bytes=$(du -sb "$W/tree" | cut -f1)
cat "$W"/tree/*/* >/dev/null   # warm the page cache

. "$(dirname "$0")/lib.sh"
t_tar="" t_tarsync="" t_dpk="" t_dpkns="" t_keep="" t_rst=""
for r in $(seq "$rounds"); do
	rm -f "$W/t.tar" "$W/t.dpk"
	a=$(now); tar cf "$W/t.tar" -C "$W" tree; b=$(now)
	t_tar="$t_tar $(echo "$b - $a" | bc)"
	rm -f "$W/t.tar"
	a=$(now); tar cf "$W/t.tar" -C "$W" tree && sync "$W/t.tar"; b=$(now)
	t_tarsync="$t_tarsync $(echo "$b - $a" | bc)"
	a=$(now); "$BIN/dpack" pack "$W/tree" "$W/t.dpk" >/dev/null; b=$(now)
	t_dpk="$t_dpk $(echo "$b - $a" | bc)"
	rm -f "$W/t.dpk"
	a=$(now); "$BIN/dpack" pack --no-fsync "$W/tree" "$W/t.dpk" >/dev/null; b=$(now)
	t_dpkns="$t_dpkns $(echo "$b - $a" | bc)"
	rm -f "$W/t.dpk"
	a=$(now); "$BIN/dpack" pack --keep-jpeg --no-fsync "$W/tree" "$W/t.dpk" >/dev/null; b=$(now)
	t_keep="$t_keep $(echo "$b - $a" | bc)"
	rm -f "$W/t.dpk"
	a=$(now); "$BIN/dpack" pack --restart-width 64 --no-fsync "$W/tree" "$W/t.dpk" >/dev/null; b=$(now)
	t_rst="$t_rst $(echo "$b - $a" | bc)"
done
median() { echo "$@" | tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
mt=$(median $t_tar) ms=$(median $t_tarsync) md=$(median $t_dpk) mn=$(median $t_dpkns)
mk=$(median $t_keep) mr=$(median $t_rst)
echo "tree: $((classes * per)) JPEGs, $bytes bytes, page cache warm, $rounds rounds, $(nproc) cores"
printf 'tar cf              %.3f s\n' "$mt"
printf 'tar cf + fsync      %.3f s\n' "$ms"
printf 'dpack pack (fsync)  %.3f s  (%.0f MB/s)\n' "$md" "$(echo "$bytes / $md / 1000000" | bc -l)"
printf 'dpack pack --no-fsync %.3f s\n' "$mn"
printf 'dpack pack --keep-jpeg --no-fsync %.3f s\n' "$mk"
printf 'dpack pack --restart-width 64 --no-fsync %.3f s\n' "$mr"
printf 'ratio dpack --no-fsync / tar cf  %.2f\n' "$(echo "$mn / $mt" | bc -l)"
printf 'ratio dpack / tar cf          %.2f\n' "$(echo "$md / $mt" | bc -l)"
printf 'ratio dpack --keep-jpeg --no-fsync / tar cf  %.2f\n' "$(echo "$mk / $mt" | bc -l)"
printf 'ratio dpack / tar cf + fsync  %.2f\n' "$(echo "$md / $ms" | bc -l)"
printf 'ratio dpack --restart-width 64 --no-fsync / tar cf  %.2f\n' "$(echo "$mr / $mt" | bc -l)"
