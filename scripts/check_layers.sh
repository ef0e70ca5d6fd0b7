#!/bin/sh
# check_layers.sh [ROOT] - fail when a source file includes a folder it may not. The rules are the
# table between "<!-- layers:begin -->" and "<!-- layers:end -->" in ROOT/docs/ARCHITECTURE.md
# (the one place they are written): each row names a source (a folder, or a file or subfolder,
# the longest match wins) and the folders it may include ("*": any). A file may always include
# its own top folder. Checks every #include "X/..." of every .c, .h and .cu under ROOT (default:
# the repository root) outside build/. Prints one line per refused include, "file: includes
# folder/ (allowed: ...)", and ends on "layers: N files, N refused"; exit 1 when any was refused.
set -u
ROOT=${1:-.}
DOC="$ROOT/docs/ARCHITECTURE.md"
[ -f "$DOC" ] || { echo "check_layers: no $DOC" >&2; exit 2; }
rules=$(awk '/<!-- layers:begin -->/ { on = 1; next } /<!-- layers:end -->/ { on = 0 }
	on && /^\| `/ {
		n = split($0, c, "|")
		src = c[2]; gsub(/[` ]/, "", src); sub(/\/$/, "", src)
		dst = c[3]; gsub(/[`\/]/, "", dst); gsub(/,/, " ", dst); gsub(/  +/, " ", dst)
		sub(/^ /, "", dst); sub(/ $/, "", dst)
		if (src != "" && src != "source") print src "|" dst
	}' "$DOC")
[ -n "$rules" ] || { echo "check_layers: no layer table in $DOC" >&2; exit 2; }

cd "$ROOT" || exit 2
files=$(find . -path ./build -prune -o -path ./.git -prune -o \
	\( -name '*.c' -o -name '*.h' -o -name '*.cu' \) -type f -print | sed 's|^\./||' | sort)
# shellcheck disable=SC2086 # paths in this tree have no spaces
awk -v rules="$rules" '
BEGIN {
	n = split(rules, r, "\n")
	for (i = 1; i <= n; i++) { split(r[i], kv, "|"); allow[kv[1]] = kv[2] }
}
# the row for @f: the longest source that is f itself or a folder above it
function row(f,   p, best) {
	best = ""
	for (p in allow)
		if ((f == p || index(f, p "/") == 1) && length(p) > length(best))
			best = p
	return best
}
FNR == 1 { files++; self = FILENAME; sub(/\/.*/, "", self); src = row(FILENAME) }
/^[ \t]*#[ \t]*include[ \t]*"[a-z0-9_]+\// {
	d = $0; sub(/^[^"]*"/, "", d); sub(/\/.*/, "", d)
	if (d == self) next
	if (src == "") { print FILENAME ": includes " d "/ (no row in the layer table)"; bad++; next }
	if (allow[src] == "*") next
	if (index(" " allow[src] " ", " " d " ")) next
	print FILENAME ": includes " d "/ (allowed for " src ": " (allow[src] == "" ? "nothing" : allow[src]) ")"
	bad++
}
END {
	printf "layers: %d files, %d refused\n", files, bad
	exit bad > 0
}' $files
