#!/bin/sh
# it_cmyk_idx.sh - CMYK JPEGs indexed (jpeg+idx+cmyk) on real photographs: mate-backgrounds
# photographs converted to CMYK by PIL (4:4:4 as PIL writes by default, 4:2:0 and 4:2:2 as PIL
# writes them -- C subsampled, M, Y, K whole -- and progressive); every window of their indexed
# records equals the whole-decode path's byte for byte (tests/test_jpeg_cmyk_idx.c with
# TEST_CMYK_PHOTOS); dpack pack of a tree of them makes jpeg+idx+cmyk records, which dpack inspect
# counts, and each one's RGB ("as stored") is PIL's convert("RGB") exactly.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/bin
PY=/usr/bin/python3   # Debian's, with python3-pil
T=$(mktemp -d /tmp/it_cmyk_idx.XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib.sh"
DIR=/usr/share/backgrounds/mate/nature   # mate-backgrounds (scripts/deps.sh)

if ! $PY -c "import PIL" 2>/dev/null || [ ! -f "$DIR/LadyBird.jpg" ]; then
	echo "# skip: needs python3-pil and mate-backgrounds (scripts/deps.sh)"
	exit 77
fi

# Photographs at about 800 px (a few seconds of test), each written four ways.
$PY - "$DIR" "$T" <<'PYEOF'
import os, sys
from PIL import Image
src, out = sys.argv[1], sys.argv[2]
os.makedirs(f"{out}/photos"); os.makedirs(f"{out}/tree/c")
for name in ["LadyBird.jpg", "Aqua.jpg", "Dune.jpg", "FreshFlower.jpg"]:
    im = Image.open(f"{src}/{name}").convert("RGB")
    im = im.resize((801, round(801 * im.height / im.width)))  # off the MCU grid
    cmyk = im.convert("CMYK")
    stem = name[:-4]
    for tag, kw in [("444", {}), ("420", {"subsampling": 2}), ("422", {"subsampling": 1}),
                    ("prog", {"progressive": True})]:
        for d in ("photos", "tree/c"):
            cmyk.save(f"{out}/{d}/{stem}_{tag}.jpg", "JPEG", quality=90, **kw)
PYEOF
check "PIL made 16 CMYK photographs" [ "$(ls "$T/photos" | wc -l)" -eq 16 ]

TEST_CMYK_PHOTOS="$T/photos" "$BUILD/tests/test_jpeg_cmyk_idx" >"$T/unit" 2>&1
check "every window of the indexed photographs equals the whole decode" [ $? -eq 0 ]
check "all 16 photographs compared" grep -q "^16 photographs: every window equal" "$T/unit"
grep -q "SKIPPED" "$T/unit" && no "the photograph case ran (not skipped)"
show "$T/unit" 5

"$BIN/dpack" pack "$T/tree" "$T/a.dpk" >"$T/out" 2>"$T/err"
check "pack the CMYK tree exits 0" [ $? -eq 0 ]
check "16 samples, none skipped" grep -q ": 16 samples, 1 classes, 0 skipped" "$T/out"
"$BIN/dpack" inspect "$T/a.dpk" >"$T/insp"
check "inspect shows them indexed (jpeg+idx+cmyk 16)" grep -q "kinds        jpeg+idx+cmyk 16\$" "$T/insp"
show "$T/insp" 20 | grep kinds

# Each sample as stored is PIL's convert("RGB") of its file (samples in sorted file order).
i=0
for f in $(ls "$T/tree/c" | sort); do
	"$BIN/dpack" decode "$T/a.dpk" $i >"$T/px" 2>/dev/null
	$PY -c "
import sys
from PIL import Image
im = Image.open(sys.argv[1]).convert('RGB')
sys.exit(0 if open(sys.argv[2], 'rb').read() == im.tobytes() else 1)" "$T/tree/c/$f" "$T/px" ||
		{ no "sample $i ($f) is PIL's convert(\"RGB\")"; i=-1; break; }
	i=$((i + 1))
done
[ $i -eq 16 ] && ok "all 16 samples are PIL's convert(\"RGB\") exactly"

echo "1..$n"
[ $fails -eq 0 ]
