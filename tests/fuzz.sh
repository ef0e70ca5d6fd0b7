#!/bin/sh
# fuzz.sh NAME - run libFuzzer target build/fuzz/NAME for FUZZ_SECONDS on tests/corpus/NAME
# (the committed seeds, copied so that the run's finds do not dirty the tree). A crashing input
# is kept in build/fuzz-crashes/NAME/ (FUZZ_CRASH_DIR) and its path printed, with the command
# that replays it: the run's own folder is removed, the crash is not.
set -eu
name=$1
bin=build/fuzz/$name
[ -x "$bin" ] || { echo "fuzz: $bin not built (make fuzz)" >&2; exit 1; }
crashes=${FUZZ_CRASH_DIR:-build/fuzz-crashes}/$name
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/art"
[ -d "tests/corpus/$name" ] && cp "tests/corpus/$name"/* "$work/corpus/" 2>/dev/null || true
TMPDIR=$work "$bin" -max_total_time="${FUZZ_SECONDS:-10}" -rss_limit_mb=2048 -timeout=10 \
	-artifact_prefix="$work/art/" -print_final_stats=0 "$work/corpus" >"$work/log" 2>&1 || {
	tail -40 "$work/log" >&2
	mkdir -p "$crashes"
	cp "$work/log" "$crashes/last.log"
	kept=0
	for f in "$work/art"/*; do
		[ -f "$f" ] || continue
		cp "$f" "$crashes/"
		echo "fuzz: $name: kept $crashes/${f##*/} (replay: $bin $crashes/${f##*/})" >&2
		kept=$((kept + 1))
	done
	[ "$kept" -gt 0 ] || echo "fuzz: $name failed without a crashing input; log in $crashes/last.log" >&2
	exit 1
}
grep -E '^Done [0-9]+ runs' "$work/log" || tail -2 "$work/log"
