#!/bin/sh
# it_layers.sh - the include rules of docs/ARCHITECTURE.md's layer table hold for the tree
# (scripts/check_layers.sh), and the check refuses each kind of edge the table forbids, planted in
# a copy of the sources: codec/ -> loader/ (the daemon's internals), tools/dpack/ -> loader/,
# shm/ -> common/ (libldc.so is libc-only), shm/ -> s3/ from another file than ldc.c, s3/s3cfg.c
# (built into libldc.so) -> common/, formats/ -> codec/; and a file of a folder the table
# has no row for.
set -u
T=$(mktemp -d /tmp/it_layers.XXXXXX)
trap 'rm -rf "$T"' EXIT INT TERM
fail=0

out=$(sh scripts/check_layers.sh) || { echo "FAIL: the tree breaks the layer table:"; echo "$out"; exit 1; }
echo "ok: $out"

# A copy of what the check reads: the sources and the table.
for d in common formats shm codec s3 loader trainer tools tests python docs; do
	[ -d "$d" ] && mkdir -p "$T/src/$d"
done
find common formats shm codec s3 loader trainer tools tests python \
	\( -name '*.c' -o -name '*.h' -o -name '*.cu' \) -type f 2>/dev/null |
	while read -r f; do mkdir -p "$T/src/$(dirname "$f")" && cp "$f" "$T/src/$f"; done
cp docs/ARCHITECTURE.md "$T/src/docs/"
out=$(sh scripts/check_layers.sh "$T/src") || { echo "FAIL: the copy is refused: $out"; exit 1; }

# plant FILE INCLUDE: the check must fail and name FILE and the folder; then undo it.
plant() {
	cp "$T/src/$1" "$T/keep"
	printf '#include "%s"\n' "$2" >> "$T/src/$1"
	out=$(sh scripts/check_layers.sh "$T/src")
	rc=$?
	want="$1: includes ${2%%/*}/"
	if [ $rc -ne 1 ] || ! printf '%s\n' "$out" | grep -qF "$want"; then
		echo "FAIL: $1 including $2: exit $rc, want 1 and \"$want\""; echo "$out"; fail=1
	else
		echo "ok: refused $1 -> $2 ($(printf '%s\n' "$out" | tail -1))"
	fi
	cp "$T/keep" "$T/src/$1"
}
plant codec/kind.c loader/job.h
plant tools/dpack/pack.c loader/job.h
plant shm/ldc.c common/log.h
plant shm/ring.c s3/s3cfg.h
plant s3/s3cfg.c common/err.h
plant formats/dpk_open.c codec/kind.h
plant common/log.c formats/dpk.h
plant loader/job.c trainer/opts.h

# a file no row covers is refused too
mkdir -p "$T/src/newdir" && printf '#include "common/log.h"\n' > "$T/src/newdir/x.c"
out=$(sh scripts/check_layers.sh "$T/src")
if [ $? -eq 1 ] && printf '%s\n' "$out" | grep -qF "newdir/x.c: includes common/ (no row"; then
	echo "ok: refused a file with no row"
else
	echo "FAIL: a file with no row was not refused"; echo "$out"; fail=1
fi
rm -rf "$T/src/newdir"

# the check still passes once every plant is gone: nothing above was left behind
sh scripts/check_layers.sh "$T/src" >/dev/null || { echo "FAIL: the copy is refused after the plants"; fail=1; }
exit $fail
