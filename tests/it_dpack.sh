#!/bin/sh
# it_dpack.sh - dpack end to end: ImageFolder, WebDataset tar and npy sources; bad inputs skipped
# and listed or (--strict) fatal; JPEGs indexed (jpeg+idx) unless --keep-jpeg, or rewritten with
# restart markers (jpeg+rst) with --restart-width;
# determinism across --jobs; verify finds a flipped byte;
# interrupted, full-disk and unreadable-directory runs leave no output file.
set -u
BIN=${BUILD:-build}/bin
T=$(mktemp -d /tmp/it_dpack.XXXXXX)
trap 'umount "$T/full" 2>/dev/null; rm -rf "$T"' EXIT
. "$(dirname "$0")/lib.sh"
json() { python3 -c "import json,sys; d=json.load(open('$1')); print($2)"; }

# ---- ImageFolder, with bad files mixed in ----
"$BIN/dsgen" imagefolder "$T/tree" --classes 3 --per-class 8 --min-side 64 --max-side 200 >/dev/null
good=24
head -c 2000 "$T/tree/n00000001/n00000001_3.JPEG" >"$T/tree/n00000001/trunc.jpg"
echo "not an image" >"$T/tree/n00000002/text.jpg"
printf '\211PNG\r\n\032\n0000' >"$T/tree/n00000000/img.png"
echo "notes" >"$T/tree/n00000000/README.txt"   # not an image extension: ignored, as torchvision
mkdir -p "$T/tree/n00000002/sub"                # nested folders belong to their class
cp "$T/tree/n00000000/n00000000_0.JPEG" "$T/tree/n00000002/sub/x.jpeg"
good=$((good + 1))

"$BIN/dpack" pack "$T/tree" "$T/a.dpk" >"$T/out" 2>"$T/err"
check "pack ImageFolder exits 0" [ $? -eq 0 ]
check "summary counts $good samples and 3 skipped" grep -q ": $good samples, 3 classes, 3 skipped" "$T/out"
check "truncated JPEG listed by path" grep -q "n00000001/trunc.jpg: truncated" "$T/err"
check "non-JPEG .jpg listed by path" grep -q "n00000002/text.jpg: not a JPEG" "$T/err"
check "PNG listed by path" grep -q "n00000000/img.png: PNG without an IHDR chunk" "$T/err"
check "verify clean" sh -c "'$BIN/dpack' verify '$T/a.dpk' >/dev/null"
"$BIN/dpack" inspect --json "$T/a.dpk" >"$T/a.json"
check "inspect --json parses, $good samples" [ "$(json "$T/a.json" "d['samples']")" = "$good" ]
check "class names sorted" [ "$(json "$T/a.json" "','.join(c['name'] for c in d['classes'])")" = "n00000000,n00000001,n00000002" ]
check "per-class counts (nested file counted in its class)" \
	[ "$(json "$T/a.json" "','.join(str(c['samples']) for c in d['classes'])")" = "8,8,9" ]
check "image sizes within the generated range" \
	[ "$(json "$T/a.json" "d['images']['width']['min'] >= 64 and d['images']['width']['max'] <= 200")" = True ]
check "inspect text mentions subsampling" sh -c "'$BIN/dpack' inspect '$T/a.dpk' | grep -q '4:2:0'"
check "JPEGs indexed (jpeg+idx) by default" \
	[ "$(json "$T/a.json" "d['kinds']")" = "{'jpeg+idx': $good}" ]
"$BIN/dpack" pack --keep-jpeg "$T/tree" "$T/k.dpk" >/dev/null 2>&1
"$BIN/dpack" inspect --json "$T/k.dpk" >"$T/k.json"
check "--keep-jpeg stores them as JPEG records" [ "$(json "$T/k.json" "d['kinds']")" = "{'jpeg': $good}" ]
check "--restart-width 0 packs" sh -c "'$BIN/dpack' pack --restart-width 0 '$T/tree' '$T/r0.dpk' >/dev/null 2>&1"
"$BIN/dpack" pack --restart-width 64 "$T/tree" "$T/r64.dpk" >/dev/null 2>&1
"$BIN/dpack" inspect --json "$T/r64.dpk" >"$T/r64.json"
check "--restart-width makes jpeg+rst records" [ "$(json "$T/r64.json" "d['kinds']")" = "{'jpeg+rst': $good}" ]
check "--index-width 0 packs jpeg+idx" sh -c "'$BIN/dpack' pack --index-width 0 '$T/tree' '$T/i0.dpk' >/dev/null 2>&1 && '$BIN/dpack' verify '$T/i0.dpk' >/dev/null"
check "--index-width refuses a non-number" sh -c "! '$BIN/dpack' pack --index-width x '$T/tree' '$T/ix.dpk' 2>/dev/null"
check "--restart-width refuses a non-number" sh -c "! '$BIN/dpack' pack --restart-width x '$T/tree' '$T/rx.dpk' 2>/dev/null"

"$BIN/dpack" pack --jobs 1 "$T/tree" "$T/j1.dpk" >/dev/null 2>&1
"$BIN/dpack" pack --jobs 7 "$T/tree" "$T/j7.dpk" >/dev/null 2>&1
check "output identical for --jobs 1 and 7" cmp -s "$T/j1.dpk" "$T/j7.dpk"
check "output identical to the first run" cmp -s "$T/a.dpk" "$T/j1.dpk"

# the reorder window is 256 items a worker: with --jobs 1, 256 items fill it exactly and 257 wrap
# it (the writer frees slot 0 for item 256); both must be what --jobs 4 (1024 slots) writes
for items in 256 257; do
	"$BIN/dsgen" imagefolder "$T/w$items" --classes 1 --per-class $items --min-side 16 --max-side 24 >/dev/null
	"$BIN/dpack" pack --no-fsync --jobs 1 "$T/w$items" "$T/w$items-1.dpk" >"$T/out" 2>&1
	check "$items tiny images, --jobs 1: all packed" grep -q ": $items samples, 1 classes, 0 skipped" "$T/out"
	"$BIN/dpack" pack --no-fsync --jobs 4 "$T/w$items" "$T/w$items-4.dpk" >/dev/null 2>&1
	check "$items tiny images: --jobs 1 (window of 256) and 4 write the same" cmp -s "$T/w$items-1.dpk" "$T/w$items-4.dpk"
done

"$BIN/dpack" pack --strict "$T/tree" "$T/strict.dpk" >/dev/null 2>"$T/err"
check "--strict fails on a bad image" [ $? -ne 0 ]
check "--strict leaves no output" [ ! -e "$T/strict.dpk" ]
check "--strict leaves no temporary file" sh -c "! ls '$T'/strict.dpk.tmp.* 2>/dev/null"

# ---- verify finds a corrupt record ----
cp "$T/a.dpk" "$T/bad.dpk"
off=$(python3 -c "
import struct
f = open('$T/bad.dpk', 'rb'); h = f.read(152)
idx = struct.unpack_from('<Q', h, 56)[0]
f.seek(idx + 5 * 64); e = f.read(64)
off, ln = struct.unpack_from('<QQ', e, 0); print(off + ln // 2)")
printf 'X' | dd of="$T/bad.dpk" bs=1 seek="$off" conv=notrunc 2>/dev/null
"$BIN/dpack" verify "$T/bad.dpk" >"$T/out" 2>&1
check "verify exits 1 on a flipped record byte" [ $? -eq 1 ]
check "verify names sample 5" grep -q "bad sample 5:" "$T/out"
head -c 100000 "$T/a.dpk" >"$T/short.dpk"
"$BIN/dpack" verify "$T/short.dpk" >"$T/out" 2>&1
check "verify exits 1 on a truncated file" [ $? -eq 1 ]
check "verify says truncated" grep -q "truncated" "$T/out"

# ---- WebDataset tar ----
"$BIN/dsgen" wds "$T/shard.tar" --classes 4 --per-class 5 --min-side 40 --max-side 90 >/dev/null
"$BIN/dpack" pack "$T/shard.tar" "$T/w.dpk" >"$T/out" 2>"$T/err"
check "pack WebDataset tar" grep -q ": 20 samples, 0 classes, 0 skipped" "$T/out"
"$BIN/dpack" inspect --json "$T/w.dpk" >"$T/w.json"
check "tar labels 0..3" [ "$(json "$T/w.json" "(d['labels']['min'], d['labels']['max'])")" = "(0, 3)" ]
# A shard made by GNU tar, with a sample that has no label and one with a bad label.
mkdir -p "$T/st/part"
tar xf "$T/shard.tar" -C "$T/st/part"
( cd "$T/st/part" && rm sample_000003.cls && echo "x" >sample_000004.cls &&
  tar --format=gnu -cf "$T/gnu.tar" $(ls | sort) )
"$BIN/dpack" pack "$T/gnu.tar" "$T/g.dpk" >"$T/out" 2>"$T/err"
check "GNU tar shard packs the 18 good samples" grep -q ": 18 samples, 0 classes, 2 skipped" "$T/out"
check "missing .cls listed by key" grep -q "sample_000003: no .cls or .txt label member" "$T/err"
check "bad .cls listed by key" grep -q "sample_000004: .cls is not an integer label" "$T/err"
head -c 30000 "$T/shard.tar" >"$T/cut.tar"
"$BIN/dpack" pack "$T/cut.tar" "$T/cut.dpk" >/dev/null 2>"$T/err"
check "truncated tar: the samples before the cut are packed" [ $? -eq 0 ]
check "truncated tar: the shard and the damage named" grep -q "shard $T/cut.tar: .*samples before it kept" "$T/err"
"$BIN/dpack" pack --strict "$T/cut.tar" "$T/cuts.dpk" >/dev/null 2>"$T/err"
check "truncated tar with --strict is an error" [ $? -ne 0 ] && check "truncated tar with --strict: no output" [ ! -e "$T/cuts.dpk" ]

# ---- npy ----
"$BIN/dsgen" npy "$T/x.npy" "$T/y.npy" --count 50 --height 8 --width 8 --channels 3 >/dev/null
"$BIN/dpack" pack "$T/x.npy" "$T/y.npy" "$T/n.dpk" >"$T/out" 2>&1
check "pack npy raw" grep -q ": 50 samples" "$T/out"
"$BIN/dpack" pack --compress zstd:5 "$T/x.npy" "$T/y.npy" "$T/nz.dpk" >/dev/null 2>&1
check "pack npy zstd verifies" sh -c "'$BIN/dpack' verify '$T/nz.dpk' >/dev/null"
"$BIN/dpack" inspect --json "$T/nz.dpk" >"$T/nz.json"
check "zstd kind recorded" [ "$(json "$T/nz.json" "d['kinds']")" = "{'raw+zstd': 50}" ]
# Uncompressed npy goes in 8 MiB blocks (pack.c BLOCK_BYTES): 2730 records of 32x32x3 fill one
# block exactly, 2731 are one past it. Every record and label is the arrays' own.
for cnt in 2730 2731; do
	"$BIN/dsgen" npy "$T/b.npy" "$T/bl.npy" --count $cnt >/dev/null
	"$BIN/dpack" pack --no-fsync "$T/b.npy" "$T/bl.npy" "$T/b.dpk" >/dev/null 2>&1
	check "npy in blocks, $cnt records: the arrays' bytes and labels" \
		python3 tests/npy_vs_dpk.py "$T/b.npy" "$T/bl.npy" "$T/b.dpk"
done
# and at most 262,144 records a block (BLOCK_RECORDS: labels are read a block at a time, not
# held for the whole array): 1-byte records at exactly that count and one past it.
for cnt in 262144 262145; do
	"$BIN/dsgen" npy "$T/b.npy" "$T/bl.npy" --count $cnt --height 1 --width 1 --channels 1 >/dev/null
	"$BIN/dpack" pack --no-fsync "$T/b.npy" "$T/bl.npy" "$T/b.dpk" >/dev/null 2>&1
	check "npy, $cnt 1-byte records: the arrays' bytes and labels" \
		python3 tests/npy_vs_dpk.py "$T/b.npy" "$T/bl.npy" "$T/b.dpk"
done
# Through the workers (zstd), labels come from a window of 8,192 (input_npy.c LABEL_WINDOW):
# exactly one window, and one past it, with two workers.
for cnt in 8192 8193; do
	"$BIN/dsgen" npy "$T/b.npy" "$T/bl.npy" --count $cnt --height 1 --width 1 --channels 1 >/dev/null
	"$BIN/dpack" pack --no-fsync --jobs 2 --compress zstd "$T/b.npy" "$T/bl.npy" "$T/b.dpk" \
		>/dev/null 2>&1
	check "npy zstd, $cnt records: every label the array's" \
		python3 tests/npy_vs_dpk.py "$T/b.npy" "$T/bl.npy" "$T/b.dpk" labels
done
rm -f "$T/b.npy" "$T/bl.npy" "$T/b.dpk"
# dsgen npy makes up to 2^31 records (the 128M-sample benchmark needs more than its image modes'
# 100M); one past is refused naming the option (the limit itself would write 2 GB)
"$BIN/dsgen" npy "$T/b.npy" "$T/bl.npy" --count 2147483649 >/dev/null 2>"$T/err"
check "dsgen npy --count 2^31 + 1: usage error naming the bound" \
	sh -c "[ $? -eq 2 ] && grep -q -- '--count: .* 1..2147483648' '$T/err'"
# A label that is no int64 (uint64 2^63) fails at listing, naming it, though labels are not kept.
python3 -c "
import struct, sys
h = \"{'descr': '<u8', 'fortran_order': False, 'shape': (50,), }\"
h += ' ' * (118 - len(h)) + '\\n'
v = [i % 10 for i in range(50)]; v[37] = 1 << 63
open(sys.argv[1], 'wb').write(b'\\x93NUMPY\\x01\\x00' + struct.pack('<H', len(h)) + h.encode() + struct.pack('<50Q', *v))
" "$T/big_lab.npy"
"$BIN/dpack" pack "$T/x.npy" "$T/big_lab.npy" "$T/big_lab.dpk" >/dev/null 2>"$T/err"
check "a label past int64 fails" [ $? -ne 0 ]
check "  naming it" grep -q "big_lab.npy: label 37" "$T/err"
check "  and leaves no output" [ ! -e "$T/big_lab.dpk" ]
"$BIN/dsgen" npy "$T/x2.npy" "$T/y2.npy" --count 49 --height 8 --width 8 --channels 3 >/dev/null
"$BIN/dpack" pack "$T/x.npy" "$T/y2.npy" "$T/bad_lab.dpk" >/dev/null 2>"$T/err"
check "labels of the wrong length fail" [ $? -ne 0 ]
check "  and say both counts" grep -q "has 49 labels but .* has 50 images" "$T/err"
check "  and leave no output" [ ! -e "$T/bad_lab.dpk" ]

# ---- usage ----
"$BIN/dpack" >/dev/null 2>&1; check "no arguments: exit 2" [ $? -eq 2 ]
"$BIN/dpack" pack --bogus a b >/dev/null 2>&1; check "unknown option: exit 2" [ $? -eq 2 ]
check "--help exits 0" sh -c "'$BIN/dpack' pack --help >/dev/null"
"$BIN/dpack" pack "$T/nope" "$T/o.dpk" >/dev/null 2>"$T/err"
check "missing SRC named in the error" grep -q "$T/nope" "$T/err"
mkdir -p "$T/empty"
"$BIN/dpack" pack "$T/empty" "$T/o.dpk" >/dev/null 2>"$T/err"
check "empty tree: clear error" grep -q "no class sub-folders" "$T/err"

# ---- interrupted run: SIGINT removes the temporary file, and OUT never appears ----
"$BIN/dsgen" npy "$T/big.npy" "$T/bigl.npy" --count 3000 --height 64 --width 64 --channels 3 >/dev/null
"$BIN/dpack" pack --jobs 1 --compress zstd:19 "$T/big.npy" "$T/bigl.npy" "$T/int.dpk" >/dev/null 2>&1 &
pid=$!
sleep 1
kill -INT $pid
wait $pid
rc=$?
check "SIGINT: killed by the signal (exit $rc)" [ $rc -eq 130 ]
check "SIGINT: no output" [ ! -e "$T/int.dpk" ]
check "SIGINT: no temporary file" sh -c "! ls '$T'/int.dpk.tmp.* 2>/dev/null"
"$BIN/dpack" pack --jobs 1 --compress zstd:19 "$T/big.npy" "$T/bigl.npy" "$T/kill.dpk" >/dev/null 2>&1 &
pid=$!
sleep 1
kill -KILL $pid
wait $pid 2>/dev/null
check "SIGKILL: no output" [ ! -e "$T/kill.dpk" ]

# ---- full disk (needs a tmpfs mount; skipped where mounting is not allowed) ----
mkdir -p "$T/full"
if mount -t tmpfs -o size=1m tmpfs "$T/full" 2>/dev/null; then
	"$BIN/dpack" pack "$T/big.npy" "$T/bigl.npy" "$T/full/f.dpk" >/dev/null 2>"$T/err"
	check "full disk fails" [ $? -ne 0 ]
	check "full disk says so" grep -q "No space left on device" "$T/err"
	check "full disk leaves nothing" [ -z "$(ls -A "$T/full")" ]
	umount "$T/full"
else
	echo "# skip full-disk case: cannot mount a tmpfs here"
fi

# ---- unreadable directory (as an unprivileged user; root reads everything) ----
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
	AS="setpriv --reuid=65534 --regid=65534 --clear-groups"
else
	AS=""
fi
if [ "$(id -u)" -ne 0 ] || [ -n "$AS" ]; then
	mkdir -p "$T/u/tree" "$T/u/out"
	cp -r "$T/tree/n00000000" "$T/tree/n00000001" "$T/u/tree/"
	chmod -R a+rX "$T/u" && chmod 1777 "$T/u/out" && chmod a+x "$T"
	chmod 000 "$T/u/tree/n00000001"
	$AS "$BIN/dpack" pack "$T/u/tree" "$T/u/out/u.dpk" >/dev/null 2>"$T/err"
	check "unreadable directory fails" [ $? -ne 0 ]
	check "unreadable directory named" grep -q "n00000001: Permission denied" "$T/err"
	check "unreadable directory: no output" [ -z "$(ls -A "$T/u/out")" ]
	chmod 755 "$T/u/tree/n00000001"
fi

echo "$((n - fails)) passed, $fails failed"
[ $fails -eq 0 ]
