#!/bin/sh
# fuzz.sh NAME - run libFuzzer target build/fuzz/NAME for FUZZ_SECONDS on tests/corpus/NAME
# (the committed seeds, copied so that the run's finds do not dirty the tree).
set -eu
name=$1
bin=build/fuzz/$name
[ -x "$bin" ] || { echo "fuzz: $bin not built (make fuzz)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/art"
[ -d "tests/corpus/$name" ] && cp "tests/corpus/$name"/* "$work/corpus/" 2>/dev/null || true
TMPDIR=$work "$bin" -max_total_time="${FUZZ_SECONDS:-15}" -rss_limit_mb=2048 -timeout=10 \
	-artifact_prefix="$work/art/" -print_final_stats=0 "$work/corpus" >"$work/log" 2>&1 || {
	tail -40 "$work/log" >&2
	ls "$work/art" >&2
	exit 1
}
grep -E '^Done [0-9]+ runs' "$work/log" || tail -2 "$work/log"
