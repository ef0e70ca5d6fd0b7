#!/bin/sh
# run.sh - run test binaries, integration scripts (tests/it_*.sh) and fuzz targets (fuzz:NAME);
# exit 0 pass, 77 skip, anything else fail. Ends on the line "N passed, N failed, N skipped".
# Fuzz targets run FUZZ_JOBS at a time (default: the number of CPUs), after everything else: each
# is one process on one core for FUZZ_SECONDS, so running them side by side loses no fuzzing.
BUILD=${BUILD:-build}
export BUILD
pass=0 fail=0 skip=0 failed=""
count() { # count LABEL RC SECS
	case $2 in
	0) pass=$((pass + 1)); echo "PASS: $1 ($3s)" ;;
	77) skip=$((skip + 1)); echo "SKIP: $1 ($3s)" ;;
	*) fail=$((fail + 1)); failed="$failed $1"; echo "FAIL: $1 (exit $2, $3s)" ;;
	esac
}
fuzz=""
for t in "$@"; do
	t0=$(date +%s)
	case "$t" in
	fuzz:*) fuzz="$fuzz ${t#fuzz:}"; continue ;;
	*.sh) sh "$t" ;;
	*) "$t" ;;
	esac
	count "$t" $? $(($(date +%s) - t0))
done
if [ -n "$fuzz" ]; then
	jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
	[ "$jobs" -ge 1 ] 2>/dev/null || jobs=1
	out=$(mktemp -d)
	set -- $fuzz
	while [ $# -gt 0 ]; do
		batch=""
		i=0
		while [ $# -gt 0 ] && [ $i -lt "$jobs" ]; do
			(t0=$(date +%s); sh tests/fuzz.sh "$1" >"$out/$1.log" 2>&1
			 echo "$? $(($(date +%s) - t0))" >"$out/$1.rc") &
			batch="$batch $1"
			i=$((i + 1))
			shift
		done
		wait
		for name in $batch; do
			cat "$out/$name.log"
			read -r rc secs <"$out/$name.rc" || { rc=1; secs=0; }
			count "$name (libFuzzer, ${FUZZ_SECONDS:-10}s)" "$rc" "$secs"
		done
	done
	rm -rf "$out"
fi
[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
