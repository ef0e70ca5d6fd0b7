#!/bin/sh
# coverage.sh - run by `make coverage` (scripts/module.mk) in a build made with --coverage:
# zero the gcov counters under $BUILD, run the given tests through tests/run.sh, capture with
# lcov (every compiled file counts, the ones never run at 0%), write the HTML report to
# $BUILD/html and the line and branch coverage per folder to $BUILD/coverage.md, and print it.
# The folders are the top-level ones that hold C sources (tests/ left out), found afresh each
# run, so a new folder gets its row; loader/srv_*.c, the server core, also gets a row of its own.
# Usage: BUILD=build/cov sh scripts/coverage.sh TEST... ; exit status: that of tests/run.sh.
# Without TEST: no counter zeroed, nothing run: the report of the counters as they are (e.g. after
# running one more suite of the --coverage build by hand).
set -u
BUILD=${BUILD:?BUILD names the --coverage build}
export BUILD
for t in lcov genhtml gcov; do
	command -v $t >/dev/null 2>&1 || { echo "coverage: $t not found (Debian: lcov, gcc)" >&2; exit 1; }
done
ls "$BUILD"/obj/*/*.gcno >/dev/null 2>&1 ||
	{ echo "coverage: no .gcno under $BUILD/obj: not a --coverage build" >&2; exit 1; }

ROOT=$(pwd)
# build/bin/ldprobe finds python/loaderd/timeline.py two folders up; from $BUILD/bin (three deep)
# it takes the package from the path instead.
PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH
RC="--rc lcov_branch_coverage=1"
status=0
if [ $# -gt 0 ]; then
	# shellcheck disable=SC2086
	lcov -q $RC --zerocounters -d "$BUILD"
	# shellcheck disable=SC2086
	lcov -q $RC --capture --initial -d "$BUILD" -b "$ROOT" -o "$BUILD/base.info" 2>"$BUILD/lcov.log"
	# Every counter file made beforehand, empty and writable by all: a program the tests run as
	# another user (it_share.sh's setpriv) writes its counters too, instead of a complaint on
	# stderr that the test would read. libgcov takes an empty file as a new one; lcov does not,
	# so those still empty after the run go.
	find "$BUILD" -name '*.gcno' | while read -r g; do
		: >"${g%.gcno}.gcda" && chmod 666 "${g%.gcno}.gcda"
	done
	sh tests/run.sh "$@"
	status=$?
	find "$BUILD" -name '*.gcda' -empty -delete
fi
[ -f "$BUILD/base.info" ] || { echo "coverage: $BUILD/base.info: run with tests first" >&2; exit 1; }

# shellcheck disable=SC2086
lcov -q $RC --capture -d "$BUILD" -b "$ROOT" -o "$BUILD/run.info" 2>>"$BUILD/lcov.log" &&
	lcov -q $RC -a "$BUILD/base.info" -a "$BUILD/run.info" -o "$BUILD/all.info" 2>>"$BUILD/lcov.log" &&
	lcov -q $RC --extract "$BUILD/all.info" "$ROOT/*" -o "$BUILD/tree.info" 2>>"$BUILD/lcov.log" &&
	lcov -q $RC --remove "$BUILD/tree.info" "$ROOT/tests/*" -o "$BUILD/coverage.info" 2>>"$BUILD/lcov.log" ||
	{ echo "coverage: lcov failed:" >&2; tail -n 20 "$BUILD/lcov.log" >&2; exit 1; }
# shellcheck disable=SC2086
genhtml -q $RC --prefix "$ROOT" -o "$BUILD/html" "$BUILD/coverage.info" >>"$BUILD/lcov.log" 2>&1 ||
	echo "coverage: genhtml failed (see $BUILD/lcov.log); the table below is still right" >&2

# The folders: top-level directories with C sources, tests/ and the build left out.
folders=$(find . -mindepth 2 -name '*.c' -not -path './build*' -not -path './tests/*' \
	-not -path './.git/*' | cut -d/ -f2 | sort -u)

# One row per folder (and one for loader/srv_*.c) from the .info records: LF/LH lines found and
# hit, BRF/BRH branches found and hit, per source file (SF, an absolute path).
awk -v root="$ROOT/" -v folders="$folders" '
function pct(h, f) { return f ? sprintf("%.1f%%", 100 * h / f) : "-" }
function row(name, k) {
	printf "| %-30s | %5d | %6d / %-6d %7s | %6d / %-6d %7s |\n", name, files[k], lh[k], lf[k],
		pct(lh[k], lf[k]), bh[k], bf[k], pct(bh[k], bf[k])
}
function add(k) { files[k]++; lf[k] += LF; lh[k] += LH; bf[k] += BRF; bh[k] += BRH }
/^SF:/ { sf = substr($0, 4); sub("^" root, "", sf); LF = LH = BRF = BRH = 0; next }
/^LF:/ { LF = substr($0, 4) + 0; next }
/^LH:/ { LH = substr($0, 4) + 0; next }
/^BRF:/ { BRF = substr($0, 5) + 0; next }
/^BRH:/ { BRH = substr($0, 5) + 0; next }
/^end_of_record/ {
	split(sf, p, "/")
	add(p[1] "/")
	if (sf ~ /^loader\/srv_[^\/]*\.c$/) add("loader/srv_*.c")
	add("total")
}
END {
	print "| folder                         | files |      lines hit / found    |   branches hit / found    |"
	print "|--------------------------------|------:|--------------------------:|--------------------------:|"
	n = split(folders, fl, "\n")
	for (i = 1; i <= n; i++) {
		k = fl[i] "/"
		if (!(k in files)) { printf "| %-30s | not built with --coverage |\n", k; continue }
		row(k, k)
		if (k == "loader/" && ("loader/srv_*.c" in files)) row("  loader/srv_*.c (server core)", "loader/srv_*.c")
	}
	row("total", "total")
}' "$BUILD/coverage.info" >"$BUILD/coverage.md"

echo "coverage per folder (HTML: $BUILD/html/index.html; this table: $BUILD/coverage.md):"
cat "$BUILD/coverage.md"
exit $status
