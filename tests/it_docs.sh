#!/bin/sh
# it_docs.sh - keeps the docs true. First, every relative link of README.md, docs/*.md and
# python/README.md must resolve (tests/doclinks.py: the file, and a #heading in it). Then it runs
# every ```sh block of README.md and then of docs/*.md (in name order), as one script (with
# /tmp/tour replaced by a temporary folder), so that the commands the docs show keep working. Each
# block is a check: it passes when the shell ran it with exit status 0.
# The blocks need mpirun (without it only the links are checked, and a pass is a skip, exit 77).
set -u
BUILD=${BUILD:-build}
command -v python3 >/dev/null 2>&1 || { echo "# skip: no python3"; exit 77; }
PAGES="README.md $(ls docs/*.md)"
links_ok=1
# shellcheck disable=SC2086 # PAGES is a list of paths without spaces
python3 tests/doclinks.py $PAGES python/README.md || links_ok=0
if ! command -v mpirun >/dev/null 2>&1; then
	[ $links_ok -eq 1 ] || { echo "not ok: broken links"; exit 1; }
	echo "# skip: no mpirun (links checked)"
	exit 77
fi
T=$(mktemp -d /tmp/it_docs.XXXXXX)
export OMPI_MCA_orte_tmpdir_base="$T"  # its session folders go with $T
cleanup() {
	# a failed block may leave loaderd running: stop what this test started
	pkill -TERM -f "loaderd --socket $T/" 2>/dev/null || true
	rm -rf "$T"
}
trap cleanup EXIT INT TERM
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Split the pages' sh blocks into $T/block.N (and the page each came from into $T/page.N), with
# the paths rewritten.
# shellcheck disable=SC2086
python3 - "$T" "$BUILD" $PAGES <<'EOF'
import re, sys
t, build, pages = sys.argv[1], sys.argv[2], sys.argv[3:]
i = 0
for page in pages:
    text = open(page).read()
    for b in re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M):
        b = b.replace("/tmp/tour", t + "/tour").replace("build/bin/", build + "/bin/")
        open("%s/block.%d" % (t, i), "w").write(b)
        open("%s/page.%d" % (t, i), "w").write(page)
        i += 1
print(i)
EOF
mkdir -p "$T/tour"
n=$(ls "$T"/block.* 2>/dev/null | wc -l)
pass=0 fail=0 i=0
# One shell for all blocks, stopping at the first failure: later blocks use variables
# ($LOADERD) that earlier ones set.
script="$T/all.sh"
: >"$script"
i=0
while [ $i -lt "$n" ]; do
	{
		echo "echo '# block $i'"
		echo "set -e"
		cat "$T/block.$i"
		echo "set +e"
		echo "echo 'ok $i'"
	} >>"$script"
	i=$((i + 1))
done
# Into a file, not through $(...): a loaderd a block started in the background keeps the output
# open, and a command substitution would wait for it forever once a block failed.
timeout 300 sh "$script" >"$T/out" 2>&1
status=$?
out=$(cat "$T/out")
echo "$out" | grep -E '^(# block|ok |trainer: samples_per_s|ldprobe:)' || true
i=0
while [ $i -lt "$n" ]; do
	if echo "$out" | grep -qx "ok $i"; then
		pass=$((pass + 1))
	else
		fail=$((fail + 1))
		echo "not ok: $(cat "$T/page.$i") sh block $i"
	fi
	i=$((i + 1))
done
if [ $status -ne 0 ]; then
	echo "# the tour stopped with status $status; its output:"
	echo "$out" | tail -30
fi
if [ $links_ok -eq 1 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "not ok: broken links"; fi
[ "$n" -ge 4 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "not ok: README.md has $n sh blocks, expected the tour's 4"; }
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
