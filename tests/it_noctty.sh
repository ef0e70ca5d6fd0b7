#!/bin/sh
# it_noctty.sh - every open in the daemon's folders carries O_NOCTTY (scripts/check_noctty.py),
# and the check refuses each kind of call that lacks it, planted in a copy of the sources: open
# and openat without the flag, fopen (stdio cannot ask for it); it accepts a call whose O_NOCTTY
# is on its second line, and "open(" in a comment or a string. Issue 36: a terminal opened
# without O_NOCTTY becomes a session leader's controlling terminal.
set -u
. "$(dirname "$0")/lib.sh"
T=$(mktemp -d /tmp/it_noctty.XXXXXX)
trap 'rm -rf "$T"' EXIT
trap 'exit 130' INT TERM HUP
CHK="python3 scripts/check_noctty.py"

out=$($CHK)
rc=$?
check "the tree: $(printf '%s\n' "$out" | tail -1)" [ $rc -eq 0 ]
[ $rc -eq 0 ] || printf '%s\n' "$out" | sed 's/^/#   /'

mkdir -p "$T/src"
cp -r loader formats codec common shm "$T/src/"
out=$($CHK "$T/src")
check "the copy passes" [ $? -eq 0 ]
# plant FILE LINE WANT: append LINE (C) to FILE in the copy; the check must exit 1 naming FILE's
# new line and WANT; then undo it.
plant() {
	cp "$T/src/$1" "$T/keep"
	printf '%s\n' "$2" >>"$T/src/$1"
	ln=$(wc -l <"$T/src/$1")
	out=$($CHK "$T/src")
	rc=$?
	check "refused in $1: $2" sh -c "[ $rc -eq 1 ] && printf '%s\n' \"\$1\" | grep -qF '$1:$ln: $3'" _ "$out"
	cp "$T/keep" "$T/src/$1"
}
plant loader/main.c 'static int f(const char *p) { return open(p, O_RDONLY | O_CLOEXEC); }' \
	"open without O_NOCTTY"
plant common/afile.c 'static int g(int d, const char *p) { return openat(d, p, O_RDONLY); }' \
	"openat without O_NOCTTY"
plant codec/kind.c 'static void *h(const char *p) { return fopen(p, "re"); }' "fopen cannot ask"
plant shm/ring.c 'static int k(const char *p) { return open64(p, O_RDWR); }' \
	"open64 without O_NOCTTY"

# accepted: the flag on the call's second line; "open(" in a comment and in a string
cp "$T/src/loader/main.c" "$T/keep"
cat >>"$T/src/loader/main.c" <<'CEOF'
static int f2(const char *p) { return open(p,
	O_RDONLY | O_NOCTTY); }
/* open(p, O_RDONLY) in a comment */
static const char *s2 = "cannot open(%s)";
CEOF
out=$($CHK "$T/src")
check "accepted: O_NOCTTY on the next line, open( in a comment and a string" [ $? -eq 0 ]
cp "$T/keep" "$T/src/loader/main.c"
echo "$((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
