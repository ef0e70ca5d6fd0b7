#!/bin/sh
# it_imagefolder.sh - dpack pack against torchvision's own ImageFolder (Debian's
# python3-torchvision, python3-pil): on a tree with every quirk (tests/imagefolder_parity.py)
# sample i is ImageFolder's sample i, with its class names and label, and its pixels are PIL's
# convert("RGB"); dpack inspect counts each kind; an empty class keeps find_classes' indices.
# Bad input in the new kinds: a truncated PNG, a WebP that lies about its size, PNG and WebP
# decompression bombs (refused on the header's word, at --max-pixels and one past it), a
# CMYK JPEG cut short: skipped with the file and the reason, or with --strict refused with no
# output file left.
set -u
BIN=${BUILD:-build}/bin
PY=/usr/bin/python3   # Debian's, with python3-torchvision and python3-pil
T=$(mktemp -d /tmp/it_imagefolder.XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib.sh"
PHOTO=/usr/share/backgrounds/mate/nature/LadyBird.jpg   # mate-backgrounds (scripts/deps.sh)

if ! $PY -c "import torchvision, PIL" 2>/dev/null || [ ! -f "$PHOTO" ]; then
	echo "# skip: needs python3-torchvision, python3-pil and mate-backgrounds (scripts/deps.sh)"
	exit 77
fi

# ---- parity on a tree with every quirk ----
$PY tests/imagefolder_parity.py make-tree "$T/tree" "$PHOTO"
"$BIN/dpack" pack "$T/tree" "$T/a.dpk" >"$T/out" 2>"$T/err"
check "pack the quirky tree exits 0" [ $? -eq 0 ]
check "every file ImageFolder loads is packed (29, none skipped)" grep -q ": 29 samples, 4 classes, 0 skipped" "$T/out"
check "the hidden class folder is named in a warning" grep -q "ipynb_checkpoints: a hidden folder" "$T/err"
"$BIN/dpack" inspect "$T/a.dpk" >"$T/insp"
check "inspect counts each kind (CMYK indexed)" grep -q "kinds        jpeg+idx 4 png 10 webp 3 pnm 3 bmp 2 tiff 4 jpeg+idx+cmyk 3" "$T/insp"
$PY tests/imagefolder_parity.py compare "$T/tree" "$T/a.dpk" "$BIN/dpack" >"$T/cmp" 2>&1
check "sample i is ImageFolder's sample i: classes, labels, PIL's pixels" [ $? -eq 0 ]
sed 's/^/# /' "$T/cmp"

# The comparison can fail: a label moved by one class is found.
cp -r "$T/tree" "$T/tree2" && mkdir "$T/tree2/b0" && cp "$T/tree/a/plain.jpg" "$T/tree2/b0/"
"$BIN/dpack" pack "$T/tree2" "$T/b.dpk" >/dev/null 2>&1
$PY tests/imagefolder_parity.py compare "$T/tree" "$T/b.dpk" "$BIN/dpack" >/dev/null 2>&1
check "the comparison fails on another tree" [ $? -eq 1 ]

# ---- an empty class: ImageFolder refuses the tree; dpack keeps find_classes' indices ----
mkdir "$T/tree/b_empty" "$T/tree/b_empty/sub"
echo "x" >"$T/tree/b_empty/notes.txt"
"$BIN/dpack" pack "$T/tree" "$T/e.dpk" >"$T/out" 2>"$T/err"
check "pack with an empty class exits 0" [ $? -eq 0 ]
check "the empty class is named" grep -q "class 'b_empty' has no image files" "$T/err"
"$BIN/dpack" inspect "$T/e.dpk" --json >"$T/ej"
$PY - "$T/tree" "$T/ej" <<'PYEOF'
import json, sys
from torchvision.datasets.folder import find_classes
classes, _ = find_classes(sys.argv[1])
names = [c["name"] for c in json.load(open(sys.argv[2]))["classes"]]
sys.exit(0 if names == classes else 1)
PYEOF
check "class indices are find_classes' with the empty class" [ $? -eq 0 ]
rm -r "$T/tree/b_empty"

# ---- bad input ----
mkdir -p "$T/bad/k"
$PY - "$T/bad/k" "$T/tree" <<'PYEOF'
import io, struct, sys, zlib
d, tree = sys.argv[1], sys.argv[2]
def chunk(t, b):
    return struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b))
def png(w, h, idat=b""):
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", idat) + chunk(b"IEND", b""))
good = open(f"{tree}/b/rgb16.png", "rb").read()
open(f"{d}/trunc.png", "wb").write(good[:len(good) // 2])
open(f"{d}/bomb.png", "wb").write(png(100000, 100000, zlib.compress(b"\0" * 1000)))
open(f"{d}/big.png", "wb").write(png(20000, 20000, zlib.compress(b"\0" * 1000)))
# 10 x 10 exactly, for --max-pixels 100 (packs) and 99 (skipped)
open(f"{d}/ten.png", "wb").write(png(10, 10, zlib.compress((b"\0" + b"\x80" * 30) * 10)))
# A lossless WebP whose VP8L header claims 5000 x 5000 pixels: the data is a 37 x 25 image's.
w = open(f"{tree}/c/lossless.WebP", "rb").read()
i = w.find(b"VP8L") + 8 + 1
bits = int.from_bytes(w[i:i + 4], "little")
bits = (bits & ~0xFFFFFFF) | (4999) | (4999 << 14)
open(f"{d}/liar.webp", "wb").write(w[:i] + bits.to_bytes(4, "little") + w[i + 4:])
c = open(f"{tree}/a/cmyk.JPEG", "rb").read()
open(f"{d}/cmyk_cut.jpg", "wb").write(c[:len(c) * 2 // 3])
PYEOF
"$BIN/dpack" pack "$T/bad" "$T/bad.dpk" >"$T/out" 2>"$T/err"
check "a tree of bad files packs the one good file" grep -q ": 1 samples, 1 classes, 5 skipped" "$T/out"
check "truncated PNG: file and reason" grep -q "k/trunc.png: PNG: .*" "$T/err"
check "100k x 100k PNG: refused on its header" grep -q "k/bomb.png: 100000 x 100000 pixels: an image record's sides are 1..65535" "$T/err"
check "20k x 20k PNG: past the default bound" grep -q "k/big.png: 20000 x 20000 pixels is more than --max-pixels 67108864" "$T/err"
check "a WebP lying about its size: file and reason" grep -q "k/liar.webp: WebP" "$T/err"
check "a CMYK JPEG cut short: file and reason" grep -q "k/cmyk_cut.jpg: JPEG: " "$T/err"
sed 's/^/# /' "$T/err"
# The default bound is loaderd's (codec/kind.h): 8192 x 8192 passes it (and is then skipped for its
# data, one row's worth), 8192 x 8193 is refused on its header.
mkdir -p "$T/edge/k"
$PY - "$T/edge/k" <<'PYEOF'
import struct, sys, zlib
def chunk(t, b):
    return struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b))
def png(w, h):
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(b"\0" * (1 + 3 * w))) + chunk(b"IEND", b""))
open(f"{sys.argv[1]}/at.png", "wb").write(png(8192, 8192))
open(f"{sys.argv[1]}/past.png", "wb").write(png(8192, 8193))
PYEOF
"$BIN/dpack" pack "$T/edge" "$T/edge.dpk" >"$T/out" 2>"$T/err"
check "8192 x 8192 passes the default bound (skipped for its data)" grep -q "k/at.png: PNG: " "$T/err"
check "8192 x 8193 is past the default bound" grep -q "k/past.png: 8192 x 8193 pixels is more than --max-pixels 67108864" "$T/err"
"$BIN/dpack" pack --max-pixels 100 "$T/bad" "$T/m100.dpk" >"$T/out" 2>"$T/err"
check "--max-pixels 100 packs a 10 x 10 image" grep -q ": 1 samples, 1 classes, 5 skipped" "$T/out"
"$BIN/dpack" pack --max-pixels 99 "$T/bad" "$T/m99.dpk" >"$T/out" 2>"$T/err"
check "--max-pixels 99 skips it" grep -q "k/ten.png: 10 x 10 pixels is more than --max-pixels 99" "$T/err"
"$BIN/dpack" pack --max-pixels 0 "$T/bad" "$T/m0.dpk" >/dev/null 2>"$T/err"
check "--max-pixels 0 is a usage error" [ $? -eq 2 ]
"$BIN/dpack" pack --strict "$T/bad" "$T/strict.dpk" >"$T/out" 2>"$T/err"
check "--strict: a bad image fails the pack" [ $? -eq 1 ]
check "--strict: no output file, no temporary left" [ -z "$(ls "$T" | grep strict)" ]

echo "1..$n"
[ "$fails" -eq 0 ]
