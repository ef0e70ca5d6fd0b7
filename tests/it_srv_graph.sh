#!/bin/sh
# it_srv_graph.sh - the server core stays a star (loader/srv_impl.h): scripts/srv_graph.sh over
# the built loader/srv_*.o finds no cycle between the srv files and no call out of srv_core. The
# checker is first shown to catch both on two small objects made here (a cycle, and a srv_core
# that calls out), so that a pass means something.
# Needs the objects of `make all`, nm, tsort and cc (exit 77 without).
set -u
BUILD=${BUILD:-build}
for t in nm tsort cc; do
	command -v $t >/dev/null 2>&1 || { echo "# skip: no $t"; exit 77; }
done
ls "$BUILD"/obj/loader/srv_*.o >/dev/null 2>&1 || { echo "# skip: no $BUILD/obj/loader/srv_*.o"; exit 77; }
T=$(mktemp -d /tmp/it_srv_graph.XXXXXX)
trap 'rm -rf "$T"' EXIT INT TERM
fail=0

# srv_a <-> srv_b: a cycle; srv_core -> srv_a: the centre calling out.
mkdir "$T/cyc" "$T/core"
printf 'int srv_b(void);\nint srv_a(void) { return srv_b(); }\n' > "$T/a.c"
printf 'int srv_a(void);\nint srv_b(void) { return srv_a() + 1; }\n' > "$T/b.c"
printf 'int srv_a(void);\nint srv_c(void) { return srv_a(); }\n' > "$T/c.c"
printf 'int srv_a(void) { return 1; }\n' > "$T/a1.c"
cc -c "$T/a.c" -o "$T/cyc/srv_a.o" && cc -c "$T/b.c" -o "$T/cyc/srv_b.o" &&
	cc -c "$T/c.c" -o "$T/core/srv_core.o" && cc -c "$T/a1.c" -o "$T/core/srv_a.o" || exit 1
out=$(sh scripts/srv_graph.sh "$T/cyc"); rc=$?
if [ $rc -ne 1 ] || ! echo "$out" | grep -q '^cycles: files on one: srv_a srv_b$'; then
	echo "FAIL: a cycle of srv_a and srv_b was not reported (exit $rc): $out"; fail=1
fi
out=$(sh scripts/srv_graph.sh "$T/core"); rc=$?
if [ $rc -ne 1 ] || ! echo "$out" | grep -q '^srv_core calls another srv file: srv_a$'; then
	echo "FAIL: srv_core calling srv_a was not reported (exit $rc): $out"; fail=1
fi

# The real server core.
out=$(sh scripts/srv_graph.sh "$BUILD/obj/loader"); rc=$?
echo "$out"
if [ $rc -ne 0 ]; then
	echo "FAIL: loader/srv_*.c are not a star around srv_core.c (exit $rc; the map: loader/srv_impl.h)"
	fail=1
fi
for f in srv_att srv_conn srv_jobs srv_workers srv_snap srv_admin srv_loop; do
	echo "$out" | grep -q "^$f -> srv_core " || { echo "FAIL: $f does not use srv_core"; fail=1; }
done
[ $fail -eq 0 ] && echo "ok: the srv files form a star around srv_core, no cycle"
exit $fail
