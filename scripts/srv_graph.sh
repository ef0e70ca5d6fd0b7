#!/bin/sh
# srv_graph.sh - the server core's file-to-file call graph, from the objects: each
# $BUILD/obj/loader/srv_*.o's undefined symbols resolved to the srv_*.o that defines them. Prints
# one line per edge, "srv_a -> srv_b  (symbols)", then "N edges" and "cycles: none" or the files on
# a cycle. Exits 1 when the graph has a cycle or srv_core calls another srv file (the map in
# loader/srv_impl.h: the files form a star around srv_core.c, with no circle), 2 without objects.
BUILD=${BUILD:-build}
dir=${1:-$BUILD/obj/loader}
set -- "$dir"/srv_*.o
[ -e "$1" ] || { echo "srv_graph: no $dir/srv_*.o (make all first)" >&2; exit 2; }
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
for o in "$@"; do
	nm -g --defined-only "$o" | awk -v f="$(basename "$o" .o)" 'NF == 3 {print $3, f}'
done | sort > "$tmp/defs"
for o in "$@"; do
	f=$(basename "$o" .o)
	nm -u "$o" | awk '{print $NF}' | sort | join - "$tmp/defs" | awk -v f="$f" '$2 != f {print f, $2, $1}'
done > "$tmp/calls"
awk '{k = $1 " -> " $2; e[k] = e[k] (e[k] ? ", " : "") $3}
     END {for (k in e) print k "  (" e[k] ")"}' "$tmp/calls" | sort
awk '{print $1, $2}' "$tmp/calls" | sort -u > "$tmp/edges"
echo "$(wc -l < "$tmp/edges") edges"
rc=0
if tsort "$tmp/edges" > /dev/null 2> "$tmp/loop"; then
	echo "cycles: none"
else
	echo "cycles: files on one:" $(sed -n 's/^tsort: //p' "$tmp/loop" | grep -v 'input contains a loop' | sort -u)
	rc=1
fi
if grep -q '^srv_core ' "$tmp/edges"; then
	echo "srv_core calls another srv file:" $(awk '$1 == "srv_core" {print $2}' "$tmp/edges")
	rc=1
fi
exit $rc
