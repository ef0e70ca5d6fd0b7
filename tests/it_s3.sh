#!/bin/sh
# it_s3.sh - datasets in an S3-compatible store (docs/S3.md), against a real S3 API server: moto's,
# signatures checked (tests/s3_lib.sh; skipped only when PyPI cannot be reached to install it),
# started once for the whole script, and a misbehaving one (tests/s3_fault.py: 503/429, responses
# cut short, resets):
#   the S3 client's cases (tests/test_s3.c with LOADERD_S3_TEST=1): put, head, get, ranges in
#   flight, multipart, list, the store's errors named, a store that is down, retries;
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/bin
T=$(mktemp -d /tmp/it_s3.XXXXXX)
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3_lib.sh"
FPID=""
trap 'stop_loaderd; stop_pid "$FPID"; s3_stop; [ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
trap 'exit 130' INT TERM HUP
[ -x "$BUILD/tests/test_s3" ] || { echo "not built: $BUILD/tests/test_s3 (run make)"; exit 1; }

s3_start "$T"
python3 "$(dirname "$0")/s3_fault.py" "$T/fault.port" 2>"$T/fault.log" &
FPID=$!
i=0
while [ ! -s "$T/fault.port" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done

# 1. the client's own cases
if LOADERD_S3_TEST=1 LOADERD_S3_FAULT="http://127.0.0.1:$(cat "$T/fault.port")" \
	"$BUILD/tests/test_s3" >"$T/unit.log" 2>&1 && ! grep -q SKIPPED "$T/unit.log"; then
	ok "test_s3 against moto and the fault server: every case ran and passed"
else
	no "test_s3 against moto and the fault server"
	SHOW_LINES=40 show "$T/unit.log"
fi

echo "1..$n"
[ "$fails" -eq 0 ]
