#!/bin/sh
# it_shards.sh - dpack pack from many WebDataset shards: several .tar operands, a directory of
# shards, a .txt list and WebDataset's quoted {000..002} give the same file (same samples in the
# same order: shards as given, members in archive order); .jpg/.png/.webp members; .cls integer
# labels, .txt class names (indexed by --classes FILE, or by their sorted distinct values) and
# .json's "label" (shard 0 .cls, shard 1 .json integers, shard 2 .txt and a .json string); a key
# in two shards is reported and its second sample dropped (--strict: refused, no output); a list
# or a range naming a missing shard is refused naming it.
set -u
BIN=${BUILD:-build}/bin
PY=/usr/bin/python3
T=$(mktemp -d /tmp/it_shards.XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib.sh"

if ! $PY -c "import PIL" 2>/dev/null; then
	echo "# skip: needs python3-pil (scripts/deps.sh)"
	exit 77
fi
mkdir "$T/d"
$PY - "$T/d" <<'PYEOF'
import io, sys, tarfile
from PIL import Image
d = sys.argv[1]
names = ["zebra", "ant", "moose"]
def add(tf, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    tf.addfile(ti, io.BytesIO(data))
for s in range(3):
    with tarfile.open(f"{d}/data-{s:03d}.tar", "w") as tf:
        for i in range(4):
            key = f"s{s}/k{i:02d}"
            im = Image.new("RGB", (20 + i, 10 + s), (s * 50, i * 40, 7))
            fmt, ext = [("JPEG", "jpg"), ("PNG", "png"), ("WEBP", "webp")][(s + i) % 3]
            b = io.BytesIO(); im.save(b, fmt); add(tf, f"{key}.{ext}", b.getvalue())
            if s == 2 and i == 3:   # a .json's string label
                add(tf, f"{key}.json", ('{"id": 7, "label": "%s"}' % names[i % 3]).encode())
            elif s == 2:
                add(tf, f"{key}.txt", (names[i % 3] + "\n").encode())
            elif s == 1:            # a .json's integer label
                add(tf, f"{key}.json", b'{"label": %d, "x": [1]}' % (i % 3))
            else:                   # .cls, with a .json that has no label
                add(tf, f"{key}.cls", str(i % 3).encode())
                add(tf, f"{key}.json", b'{"x": 1}')
PYEOF
printf 'data-000.tar\n# a comment\n\ndata-001.tar\n%s/d/data-002.tar\n' "$T" >"$T/d/list.txt"
mkdir "$T/dir" && cp "$T"/d/data-*.tar "$T/dir/"

"$BIN/dpack" pack "$T/d/data-000.tar" "$T/d/data-001.tar" "$T/d/data-002.tar" "$T/ops.dpk" >"$T/out" 2>"$T/err"
check "three shards as operands: 12 samples" grep -q ": 12 samples, 3 classes, 0 skipped" "$T/out"
"$BIN/dpack" pack "$T/dir" "$T/dir.dpk" >"$T/out" 2>&1
check "a directory of shards: 12 samples" grep -q ": 12 samples" "$T/out"
"$BIN/dpack" pack "$T/d/list.txt" "$T/list.dpk" >"$T/out" 2>&1
check "a list of shards: 12 samples" grep -q ": 12 samples" "$T/out"
"$BIN/dpack" inspect "$T/ops.dpk" --json >"$T/a.json"
"$BIN/dpack" inspect "$T/dir.dpk" --json >"$T/b.json"
"$BIN/dpack" inspect "$T/list.dpk" --json >"$T/c.json"
labels() { i=0; while [ $i -lt 12 ]; do "$BIN/dpack" decode "$1" $i 2>&1 >/dev/null | cut -d' ' -f1,3,5; i=$((i + 1)); done; }
labels "$T/ops.dpk" >"$T/la"
labels "$T/dir.dpk" >"$T/lb"
labels "$T/list.dpk" >"$T/lc"
check "operands, directory and list: the same samples in the same order" cmp -s "$T/la" "$T/lb"
check "and the list too" cmp -s "$T/la" "$T/lc"
"$BIN/dpack" pack "$T/d/data-{000..002}.tar" "$T/brace.dpk" >"$T/out" 2>&1
labels "$T/brace.dpk" >"$T/le"
check "WebDataset's quoted {000..002}: the same samples" cmp -s "$T/la" "$T/le"
"$BIN/dpack" pack "$T/d/data-{000..003}.tar" "$T/brace3.dpk" >"$T/out" 2>"$T/err"
check "{000..003} with no shard 003: refused, naming it" grep -q "cannot open shard $T/d/data-003.tar" "$T/err"
# shard 0 then 1 then 2, members in order: sizes (20+i) x (10+s), kinds jpg/png/webp in turn
expect="jpeg+idx 0 10x20x3
png 1 10x21x3
webp 2 10x22x3
jpeg+idx 0 10x23x3
png 0 11x20x3
webp 1 11x21x3
jpeg+idx 2 11x22x3
png 0 11x23x3"
check "sample order: shard by shard, members in archive order" [ "$(head -8 "$T/la")" = "$expect" ]
# shard 2's .txt labels without --classes: sorted names ant=0, moose=1, zebra=2
check ".txt labels: indices of the sorted names" [ "$(tail -4 "$T/la" | cut -d' ' -f2 | tr '\n' ' ')" = "2 0 1 2 " ]
check "class names from the .txt labels" grep -q '"name": "moose"' "$T/a.json"
printf 'moose\nzebra\nant\n' >"$T/classes"
"$BIN/dpack" pack --classes "$T/classes" "$T/dir" "$T/cl.dpk" >"$T/out" 2>&1
labels "$T/cl.dpk" >"$T/ld"
check "--classes FILE: a .txt label is its line" [ "$(tail -4 "$T/ld" | cut -d' ' -f2 | tr '\n' ' ')" = "1 2 0 1 " ]
printf 'moose\nzebra\n' >"$T/classes2"
"$BIN/dpack" pack --classes "$T/classes2" "$T/dir" "$T/cl2.dpk" >"$T/out" 2>"$T/err"
check "--classes FILE without a label's name: refused, naming it" grep -q "s2/k01: label 'ant' is not in --classes" "$T/err"
check "and no output" [ ! -e "$T/cl2.dpk" ]

# a key in two shards
cp "$T/d/data-000.tar" "$T/dir/data-003.tar"
"$BIN/dpack" pack "$T/dir" "$T/dup.dpk" >"$T/out" 2>"$T/err"
check "a key in two shards: the first kept" grep -q ": 12 samples, 3 classes, 4 skipped" "$T/out"
check "a key in two shards: both shards named" grep -q "key s0/k00 in $T/dir/data-000.tar and again in $T/dir/data-003.tar" "$T/err"
"$BIN/dpack" pack --strict "$T/dir" "$T/dups.dpk" >"$T/out" 2>"$T/err"
check "a key in two shards with --strict: refused" [ $? -ne 0 ] && check "and no output" [ ! -e "$T/dups.dpk" ]
# a list naming a missing shard
printf 'data-000.tar\ndata-404.tar\n' >"$T/d/bad.txt"
"$BIN/dpack" pack "$T/d/bad.txt" "$T/miss.dpk" >"$T/out" 2>"$T/err"
check "a list naming a missing shard: refused" [ $? -ne 0 ]
check "naming the shard" grep -q "cannot open shard $T/d/data-404.tar: No such file" "$T/err"
check "and no output" [ ! -e "$T/miss.dpk" ]

echo "1..$n"
[ "$fails" -eq 0 ]
