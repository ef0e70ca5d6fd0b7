#!/bin/sh
# it_options.sh - loaderd's option table (loader/main.c, opt_rows), its --help and docs/TUNING.md
# agree: `loaderd --help` shows every row of the table, each with its default, and no option the
# table lacks; every row that takes a value refuses an empty one with exit 2, naming the option;
# every option docs/TUNING.md names is in `loaderd --help`, or is one of the few other tools'
# options the page speaks of (OTHER below), and then in that tool's --help. A second.
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
BUILD=${BUILD:-build}
BIN=$BUILD/bin
need_bins loaderd trainer ldprobe
T=$(mktemp -d /tmp/it_options.XXXXXX)
trap 'rm -rf "$T"' EXIT
trap 'exit 130' INT TERM HUP

# Options of other programs that docs/TUNING.md mentions: NAME:PROGRAM.
OTHER="prefetch:trainer crop:trainer hostfile:ldprobe weight:ldcat"

"$BIN/loaderd" --help >"$T/help" 2>"$T/help.e"
check "loaderd --help exits 0, on stdout only" sh -c "[ $? -eq 0 ] && [ -s '$T/help' ] && [ ! -s '$T/help.e' ]"

# The table's rows: lines `{ "NAME", ...` between `opt_rows[] = {` and `};`.
sed -n '/^static const struct arg_opt opt_rows\[\] = {/,/^};/p' loader/main.c |
	sed -n 's/^[[:space:]]*{ "\([a-z][a-z0-9-]*\)",.*/\1/p' >"$T/rows"
check "the table has rows (at least 20)" [ "$(wc -l <"$T/rows")" -ge 20 ]

# --help's options, one each: "  --NAME" or "  -X, --NAME" at the start of a line.
sed -n 's/^  \(-[a-zA-Z], \)\{0,1\}--\([a-z][a-z0-9-]*\).*/\2/p' "$T/help" >"$T/shown"
sort "$T/shown" >"$T/shown.s"
missing=$(sort "$T/rows" | comm -23 - "$T/shown.s")
check "--help shows every row of the table${missing:+ (missing: $missing)}" [ -z "$missing" ]
extra=$(sort "$T/rows" | comm -13 - "$T/shown.s")
check "--help shows no option the table lacks${extra:+ (extra: $extra)}" [ -z "$extra" ]

# Each option's entry (its line and the wrapped lines under it) states a default, but --help.
nodef=$(awk '/^  -/ { if (name != "" && !def) print name; name = $0; sub(/^  (-[a-zA-Z], )?--/, "", name);
		sub(/[ =].*/, "", name); def = 0 }
	/^  / && /default/ { def = 1 }
	/^[^ ]/ || /^$/ { if (name != "" && !def) print name; name = "" }
	END { if (name != "" && !def) print name }' "$T/help" | grep -vx help)
check "every option's --help entry states its default${nodef:+ (none: $nodef)}" [ -z "$nodef" ]

# Every row that takes a value refuses an empty one: exit 2, the option named, nothing served.
bad=""
flags=$(sed -n 's/^[[:space:]]*{ "\([a-z][a-z0-9-]*\)",.*ARG_FLAG.*/\1/p' loader/main.c)
for name in $(cat "$T/rows"); do
	[ "$name" = help ] && continue
	if echo "$flags" | grep -qx -- "$name"; then  # a flag: a value is refused as such
		timeout 5 "$BIN/loaderd" --socket "$T/never.sock" "--$name=" >/dev/null 2>"$T/e"
		rc=$?
		{ [ $rc -eq 2 ] && grep -q -- "--$name=: takes no value" "$T/e"; } || bad="$bad $name($rc)"
		continue
	fi
	timeout 5 "$BIN/loaderd" --socket "$T/never.sock" "--$name=" >/dev/null 2>"$T/e"
	rc=$?
	{ [ $rc -eq 2 ] && grep -q -- "--$name: bad value ''" "$T/e"; } || bad="$bad $name($rc)"
done
check "every option refuses an empty value, exit 2, naming it${bad:+ (not:$bad)}" [ -z "$bad" ]
check "no socket made by a refused loaderd" [ ! -e "$T/never.sock" ]

# The options docs/TUNING.md names: in loaderd --help, or another tool's (OTHER), in its --help.
grep -o -- '--[a-z][a-z0-9-]*' docs/TUNING.md | sort -u | sed 's/^--//' >"$T/doc"
check "docs/TUNING.md names options (at least 15)" [ "$(wc -l <"$T/doc")" -ge 15 ]
undoc=""
for name in $(cat "$T/doc"); do
	grep -qx -- "$name" "$T/shown" && continue
	prog=""
	for o in $OTHER; do [ "${o%%:*}" = "$name" ] && prog=${o#*:}; done
	if [ -z "$prog" ]; then
		undoc="$undoc --$name"
	elif ! "$BIN/$prog" --help 2>&1 | grep -q -- "--$name\b"; then
		undoc="$undoc --$name($prog)"
	fi
done
check "every option docs/TUNING.md names exists${undoc:+ (not in loaderd --help:$undoc)}" [ -z "$undoc" ]

echo "$((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
