#!/bin/sh
# demo.sh - `make demo`: generate a small ImageNet-like dataset, pack it, verify and inspect it.
# The loader and trainer stages join here once loaderd and trainer exist.
set -eu
BIN=${BUILD:-build}/bin
D=${DEMO_DIR:-build/demo}
rm -rf "$D"
mkdir -p "$D"
echo "== dsgen: an ImageNet-like JPEG tree (10 classes x 40 images)"
"$BIN/dsgen" imagefolder "$D/tree" --classes 10 --per-class 40
echo "== dpack pack"
"$BIN/dpack" pack "$D/tree" "$D/demo.dpk"
echo "== dpack verify"
"$BIN/dpack" verify "$D/demo.dpk"
echo "== dpack inspect"
"$BIN/dpack" inspect "$D/demo.dpk"
echo
echo "demo: not yet: loaderd and the trainer are not built yet, so the demo stops after packing."
