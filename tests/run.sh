#!/bin/sh
# run.sh - run test binaries, integration scripts (tests/it_*.sh) and fuzz targets (fuzz:NAME);
# exit 0 pass, 77 skip, anything else fail. Ends on the line "N passed, N failed, N skipped".
BUILD=${BUILD:-build}
export BUILD
pass=0 fail=0 skip=0 failed=""
for t in "$@"; do
	t0=$(date +%s)
	case "$t" in
	fuzz:*)
		name=${t#fuzz:}
		label="$name (libFuzzer, ${FUZZ_SECONDS:-15}s)"
		sh tests/fuzz.sh "$name" ;;
	*.sh)
		label=$t
		sh "$t" ;;
	*)
		label=$t
		"$t" ;;
	esac
	rc=$?
	secs=$(($(date +%s) - t0))
	case $rc in
	0) pass=$((pass + 1)); echo "PASS: $label (${secs}s)" ;;
	77) skip=$((skip + 1)); echo "SKIP: $label (${secs}s)" ;;
	*) fail=$((fail + 1)); failed="$failed $label"; echo "FAIL: $label (exit $rc, ${secs}s)" ;;
	esac
done
[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
