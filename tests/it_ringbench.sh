#!/bin/sh
# it_ringbench.sh - ringbench runs end to end and says what it measured: the memcpy yardstick, the
# cross-core hand-off without the ring (the ceiling that docs/RING.md's Throughput section compares
# the ring with), the ring itself with --check (every byte of every step verified by the consumer),
# with 4 slots and with 1, and its last line in the documented form. Figures are not judged here
# (timed checks do not belong in `make test`); ringbench itself warns on an idle machine when the
# ring falls below RING_VS_XFER_MIN of the bare hand-off.
set -u
. "$(dirname "$0")/lib.sh"
BUILD=${BUILD:-build}
BIN=$BUILD/bin
need_bins ringbench
T=$(mktemp -d /tmp/it_ringbench.XXXXXX)
trap 'rm -rf "$T"' EXIT
trap 'exit 130' INT TERM HUP

LAST='^ringbench: gbps=[0-9.]+ memcpy_gbps=[0-9.]+ ratio=[0-9.]+ p99_us=[0-9.]+ '
LAST="${LAST}xfer_gbps=[0-9.]+ ring_vs_xfer=[0-9.]+ c2c_ns=[0-9]+\$"
NCPU=$(nproc 2>/dev/null || echo 1)

# bench NAME ARGS...: ringbench ARGS (short: 64 KiB slots, a few steps), stdout in $T/NAME.out.
bench() {
	_b=$1
	shift
	timeout 60 "$BIN/ringbench" --slot-bytes 64K --lat-steps 10 "$@" >"$T/$_b.out" 2>"$T/$_b.err"
}

for slots in 4 1; do
	if bench s$slots --check --steps 200 --slots $slots; then
		ok "--check --slots $slots: exit 0"
	else
		no "--check --slots $slots: exit 0"
		show "$T/s$slots.err"
	fi
	last=$(tail -n 1 "$T/s$slots.out")
	check "--slots $slots: last line in the documented form" matches "$last" "$LAST"
	if [ "$NCPU" -ge 2 ]; then
		xl=$(grep 'cross-core hand-off without the ring' "$T/s$slots.out")
		check "--slots $slots: the cross-core yardstick ran" \
			matches "$xl" "no ring\), 1\.0 s: [0-9.]+ GB/s = [0-9.]+ x memcpy"
		x=$(printf '%s\n' "$last" | sed -n 's/.* xfer_gbps=\([0-9.]*\) .*/\1/p')
		check "--slots $slots: xfer_gbps > 0 ($x)" lt 0 "${x:-0}"
	fi
done

# One CPU: nothing to pin the two sides to, so no yardstick, said so, and 0 in the last line.
if command -v taskset >/dev/null 2>&1; then
	cpu=$(taskset -pc $$ | sed 's/.*: *//; s/[-,].*//')
	if taskset -c "$cpu" "$BIN/ringbench" --slot-bytes 64K --lat-steps 10 --steps 50 \
		>"$T/one.out" 2>"$T/one.err"; then
		ok "one CPU: exit 0"
	else
		no "one CPU: exit 0"
		show "$T/one.err"
	fi
	check "one CPU: the yardstick says it was not measured" \
		grep -q 'cross-core hand-off without the ring: not measured' "$T/one.out"
	check "one CPU: xfer_gbps=0.00 ring_vs_xfer=0.00 c2c_ns=0" \
		grep -Eq 'xfer_gbps=0\.00 ring_vs_xfer=0\.00 c2c_ns=0$' "$T/one.out"
fi

"$BIN/ringbench" --slots 0 >"$T/bad.out" 2>"$T/bad.err"
rc=$?
check "--slots 0: exit 2 (usage), got $rc" [ "$rc" -eq 2 ]
check "--slots 0: the message names the option" grep -q -- '--slots' "$T/bad.err"

echo "$((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
